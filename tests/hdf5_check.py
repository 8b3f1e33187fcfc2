"""Fixtures and oracle for tests/it/hdf5.rs: HDF5 files written by h5py (with hdf5plugin's
filters) and NetCDF-4 files written by netCDF4-python, and each dataset as h5py / netCDF4
read it, saved as little-endian C-order .npy (the oracle tilestream's reading must equal).

    python tests/hdf5_check.py write DIR     # prints one line per case: FILE:/dataset ORACLE
    python tests/hdf5_check.py hostile DIR   # damaged files, one per line: FILE:/dataset WHAT
    python tests/hdf5_check.py seeds DIR     # the seeds of the fuzz target hdf5_chunk
    python tests/hdf5_check.py docs tests/data  # the files the docs' commands name
"""

import bz2
import os
import sys
import zlib

import h5py
import hdf5plugin
import netCDF4
import numpy as np

DTYPES = ["u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4", "f8"]

# name -> keyword arguments of create_dataset for a chunked layout
FILTERS = {
    "plain": {},
    "gzip_shuffle_fletcher": dict(compression="gzip", compression_opts=6, shuffle=True, fletcher32=True),
    "lzf": dict(compression="lzf"),
    "zstd": dict(hdf5plugin.Zstd(clevel=3)),
    "blosc": dict(hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)),
    "lz4": dict(hdf5plugin.LZ4()),
    "bitshuffle_lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
    "szip_nn": dict(compression="szip", compression_opts=("nn", 8)),
    "szip_ec": dict(compression="szip", compression_opts=("ec", 32)),
    "bzip2": dict(hdf5plugin.BZip2()),
}


def values(rng, dt, shape):
    dt = np.dtype(dt)
    if dt.kind in "ui":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, size=shape, dtype=dt.newbyteorder("="), endpoint=True)
        # runs of equal values, so that the compressors have something to do
        flat = a.reshape(-1)
        flat[: flat.size // 3] = flat[0] if flat.size else 0
        return a.astype(dt)
    a = (rng.standard_normal(shape) * 1000).astype(dt)
    flat = a.reshape(-1)
    if flat.size > 8:
        flat[1], flat[3], flat[5] = np.nan, np.inf, -np.inf
        flat[7] = -0.0
    return a


def quietly(read):
    """read(), with what C filters print to stdout (the LZ4 filter prints its errors)
    sent to /dev/null instead of into the case lines."""
    import ctypes
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        return read()
    finally:
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(null)
        os.close(saved)


def save_oracle(d, name, a):
    path = os.path.join(d, name + ".npy")
    a = np.asarray(a)
    if a.dtype.kind != "b":
        a = a.astype(a.dtype.newbyteorder("<"))
    np.save(path, a.copy(order="C"))
    return path


def compact(f, name, a):
    """A compact dataset (h5py's high level has no keyword for the layout)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(a.shape) if a.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    tid = h5py.h5t.py_create(a.dtype)
    ds = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(a))


def write(d):
    rng = np.random.default_rng(51)
    cases = []
    path = os.path.join(d, "matrix.h5")
    with h5py.File(path, "w") as f:
        for order in "<>":
            for t in DTYPES:
                dt = np.dtype(order + t)
                if dt.itemsize == 1 and order == ">":
                    continue
                tag = ("le" if order == "<" else "be") + "_" + t
                a = values(rng, dt, (37, 29))
                f.create_dataset(f"contiguous/{tag}", data=a)
                for fname, kw in FILTERS.items():
                    f.create_dataset(f"{fname}/{tag}", data=a, chunks=(8, 6), **kw)
                compact(f, f"compact_{tag}", a[:5, :7].copy())
        # complex numbers as h5py writes them: a compound of the real and imaginary
        # parts {r, i}, in both byte orders, each part swapped on its own
        for order in "<>":
            for t in ["c8", "c16"]:
                dt = np.dtype(order + t)
                tag = ("le" if order == "<" else "be") + "_" + t
                parts = values(rng, {"c8": "f4", "c16": "f8"}[t], (2, 23, 11))
                a = (parts[0] + 1j * parts[1][::-1]).astype(dt)
                f.create_dataset(f"complex/contiguous_{tag}", data=a)
                f.create_dataset(f"complex/gzip_shuffle_{tag}", data=a, chunks=(8, 4), compression="gzip",
                                 shuffle=True)
                compact(f, f"complex/compact_{tag}", a[:3, :4].copy())
        s = f.create_dataset("complex/fill", shape=(20, 9), dtype=">c16", chunks=(8, 8), fillvalue=1.5 - 2j)
        s[8:16, :] = 3 + 4j
        # complex attributes (as NetCDF-style packing and fill): not numbers tilestream
        # uses, never read into an 8-byte buffer
        s.attrs["scale_factor"] = np.complex128(1 + 2j)
        s.attrs["_FillValue"] = np.complex128(1.5 - 2j)
        s.attrs["add_offset"] = np.complex64(3j)
        a = rng.standard_normal((5, 17, 13)).astype("f4")
        f.create_dataset("rank3/gzip", data=a, chunks=(2, 5, 4), compression="gzip")
        f.create_dataset("rank1/lzf", data=np.arange(1000, dtype="i4"), chunks=(64,), compression="lzf")
        f.create_dataset("rank0/scalar", data=np.float64(2.75))
        f.create_dataset("empty/chunked", shape=(0, 5), dtype="f4", chunks=(4, 5), maxshape=(None, 5))
        f.create_dataset("bool/chunked", data=rng.random((30, 20)) > 0.5, chunks=(7, 7), compression="gzip")
        f.create_dataset("bool/contiguous", data=rng.random((30, 20)) > 0.5)
        # chunks never written hold the fill value, as do datasets never written
        s = f.create_dataset("fill/partial", shape=(40, 30), dtype="i2", chunks=(8, 8), fillvalue=-7)
        s[8:20, 3:11] = 5
        f.create_dataset("fill/unwritten", shape=(3000, 7), dtype="f8", fillvalue=1.5)
        f.create_dataset("fill/unwritten_chunked", shape=(50,), dtype="u2", chunks=(8,), fillvalue=9)
        # a chunk that did not compress is stored as it is, its filter's mask bit set
        noise = rng.integers(0, 255, size=(64, 64), dtype="u1")
        f.create_dataset("mask/lzf_incompressible", data=noise, chunks=(64, 64), compression="lzf")
        # LZ4 and bitshuffle (hdf5plugin): several blocks, blocks stored as they are,
        # elements past the last multiple of 8, each compressor, filters around them
        bs = hdf5plugin.Bitshuffle
        f.create_dataset("lz4x/small_blocks", data=values(rng, "i4", (200, 50)), chunks=(100, 50),
                         **hdf5plugin.LZ4(nbytes=1000))
        f.create_dataset("lz4x/noise_blocks", data=noise, chunks=(64, 64), **hdf5plugin.LZ4(nbytes=512))
        f.create_dataset("lz4x/shuffle_fletcher", data=values(rng, ">f8", (40, 30)), chunks=(16, 16),
                         shuffle=True, fletcher32=True, **hdf5plugin.LZ4())
        f.create_dataset("bshuf/plain_odd", data=values(rng, "f4", (1000,)), chunks=(61,),
                         **bs(cname="none"))
        # szip: scanlines that are not whole blocks (libsz pads them), several scanlines,
        # and after shuffle
        f.create_dataset("szipx/padded_scanlines", data=values(rng, "u2", (40, 50)), chunks=(40, 50),
                         compression="szip", compression_opts=("nn", 32))
        smooth = np.arange(3600).reshape(6, 20, 30) / 4.0
        f.create_dataset("szipx/rank3_f8", data=smooth, chunks=(3, 10, 30),
                         compression="szip", compression_opts=("ec", 16))
        f.create_dataset("szipx/shuffle_i4", data=values(rng, "i4", (64, 64)), chunks=(32, 64),
                         shuffle=True, compression="szip", compression_opts=("nn", 16))
        f.create_dataset("bshuf/plain_default_blocks", data=values(rng, "f4", (5003,)), chunks=(5003,),
                         **bs(cname="none"))
        f.create_dataset("bshuf/plain_blocks", data=values(rng, "f8", (50, 7)), chunks=(50, 7),
                         **bs(nelems=64, cname="none"))
        f.create_dataset("bshuf/zstd_blocks", data=values(rng, "i2", (64, 64)), chunks=(64, 64),
                         **bs(nelems=256, cname="zstd"))
        f.create_dataset("bshuf/zstd_odd", data=values(rng, ">u4", (3, 333)), chunks=(3, 111),
                         **bs(cname="zstd"))
        f.create_dataset("bshuf/lz4_big", data=values(rng, "u1", (300, 100)), chunks=(150, 100),
                         **bs(cname="lz4"))
        f.create_dataset("bshuf/lz4_odd_blocks", data=values(rng, "u2", (1001,)), chunks=(1001,),
                         **bs(nelems=40, cname="lz4"))
        f.create_dataset("bshuf/lz4_fletcher", data=values(rng, "i8", (33, 9)), chunks=(33, 9),
                         fletcher32=True, **bs(cname="lz4"))
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            oracle = save_oracle(d, "oracle_" + n.replace("/", "_"), f[n][()])
            cases.append((f"{path}:/{n}", oracle))
    # a user block before the superblock: chunk addresses are relative to it
    ub = os.path.join(d, "userblock.h5")
    with h5py.File(ub, "w", userblock_size=1024) as f:
        a = rng.standard_normal((33, 10)).astype("f4")
        f["contiguous"] = a
        f.create_dataset("chunked", data=a, chunks=(8, 8), compression="gzip")
    with h5py.File(ub, "r") as f:
        for n in ["contiguous", "chunked"]:
            cases.append((f"{ub}:/{n}", save_oracle(d, "oracle_ub_" + n, f[n][()])))
    # NetCDF-4 as netCDF4-python writes it: compressed, with a _FillValue and packing
    nc = os.path.join(d, "climate.nc")
    with netCDF4.Dataset(nc, "w") as ds:
        ds.createDimension("time", 6)
        ds.createDimension("lat", 19)
        ds.createDimension("lon", 23)
        v = ds.createVariable("t2m", "i2", ("time", "lat", "lon"), zlib=True, complevel=4,
                              shuffle=True, chunksizes=(2, 10, 10), fill_value=-32767)
        v.scale_factor = 0.01
        v.add_offset = 273.15
        v.set_auto_maskandscale(False)
        raw = rng.integers(-3000, 3000, size=(6, 19, 23), dtype="i2")
        raw[0, :4, :5] = -32767
        v[:] = raw
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat[:] = np.linspace(-90, 90, 19)
        p = ds.createVariable("precip", "f4", ("time", "lat", "lon"), fill_value=np.float32(-9999.0))
        p.set_auto_maskandscale(False)
        pr = rng.random((6, 19, 23)).astype("f4")
        pr[2, 5:9, 3:6] = -9999.0
        p[:] = pr
    with netCDF4.Dataset(nc) as ds:
        ds.set_auto_maskandscale(False)
        for n in ["t2m", "lat", "precip"]:
            cases.append((f"{nc}:{n}", save_oracle(d, "oracle_nc_" + n, ds[n][:])))
    # NetCDF-3: classic, 64-bit offsets and 64-bit data; fixed-size and record
    # variables, record slabs padded to 4 bytes, and a file whose one record variable is not
    for fmt, tag in [("NETCDF3_CLASSIC", "cdf1"), ("NETCDF3_64BIT_OFFSET", "cdf2"),
                     ("NETCDF3_64BIT_DATA", "cdf5")]:
        p = os.path.join(d, f"classic_{tag}.nc")
        types = ["i1", "i2", "i4", "f4", "f8"] + (["u1", "u2", "u4", "i8", "u8"] if tag == "cdf5" else [])
        with netCDF4.Dataset(p, "w", format=fmt) as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", 7)
            ds.createDimension("lon", 5)
            names = []
            for t in types:
                fixed = ds.createVariable(f"fixed_{t}", t, ("lat", "lon"), fill_value=False)
                fixed[:] = values(rng, t, (7, 5))
                rec = ds.createVariable(f"rec_{t}", t, ("time", "lat"))
                rec[0:11] = values(rng, t, (11, 7))
                names += [f"fixed_{t}", f"rec_{t}"]
            tv = ds.createVariable("time", "f8", ("time",))
            tv[:] = np.arange(11) * 3600.0
            sst = ds.createVariable("sst", "f4", ("time", "lat", "lon"), fill_value=np.float32(-999))
            sst.set_auto_maskandscale(False)
            sst[:] = values(rng, "f4", (11, 7, 5))
            names += ["time", "sst"]
        with netCDF4.Dataset(p) as ds:
            ds.set_auto_maskandscale(False)
            for n in names:
                cases.append((f"{p}:{n}", save_oracle(d, f"oracle_{tag}_{n}", ds[n][:])))
    one = os.path.join(d, "one_record_var.nc")
    with netCDF4.Dataset(one, "w", format="NETCDF3_CLASSIC") as ds:
        ds.createDimension("t", None)
        ds.createDimension("x", 3)
        v = ds.createVariable("v", "i2", ("t", "x"))
        v[0:9] = rng.integers(-100, 100, size=(9, 3))
    with netCDF4.Dataset(one) as ds:
        ds.set_auto_maskandscale(False)
        cases.append((one, save_oracle(d, "oracle_one_record_var", ds["v"][:])))
    for c in cases:
        print(*c)


def hostile(d):
    """Damaged and unreadable files: FILE:/dataset and what is wrong (or h5py=ORACLE for
    one h5py reads), one per line."""
    rng = np.random.default_rng(7)
    out = []
    a = rng.standard_normal((64, 64)).astype("f4")
    # a deflate bomb: a chunk of 16 KiB whose stored stream inflates to 16 MiB
    bomb = os.path.join(d, "bomb.h5")
    with h5py.File(bomb, "w") as f:
        ds = f.create_dataset("x", shape=(64, 64), dtype="f4", chunks=(64, 64), compression="gzip")
        ds.id.write_direct_chunk((0, 0), zlib.compress(bytes(16 << 20), 9))
    out.append((bomb + ":/x", "bomb"))
    # a chunk whose bytes were damaged after its checksum was written
    for name, kw in [("gzip", dict(compression="gzip")),
                     ("fletcher", dict(fletcher32=True)),
                     ("lzf", dict(compression="lzf"))]:
        p = os.path.join(d, f"damaged_{name}.h5")
        with h5py.File(p, "w") as f:
            f.create_dataset("x", data=a, chunks=(64, 64), **kw)
        with h5py.File(p, "r") as f:
            off = f["x"].id.get_chunk_info(0).byte_offset
        with open(p, "r+b") as fh:
            fh.seek(off + 40)
            b = fh.read(64)
            fh.seek(off + 40)
            fh.write(bytes(x ^ 0x5A for x in b))
        if name == "lzf":
            # LZF has no checksum: a damaged stream that still decodes to the chunk's size
            # is read by h5py without a word, and must be read the same
            out.append((p + ":/x", "h5py=" + save_oracle(d, "oracle_damaged_lzf", h5py.File(p)["x"][()])))
        else:
            out.append((p + ":/x", "damaged_" + name))
    # LZ4, bitshuffle+LZ4 and szip have no checksum either: where h5py reads a damaged chunk,
    # tilestream reads the same; where h5py refuses it, tilestream refuses it
    szip = dict(compression="szip", compression_opts=("nn", 16))
    for name, kw in [("lz4", hdf5plugin.LZ4()), ("bitshuffle_lz4", hdf5plugin.Bitshuffle(cname="lz4")),
                     ("szip", szip), ("bzip2", hdf5plugin.BZip2())]:
        for at in [14, 40, 300]:
            p = os.path.join(d, f"damaged_{name}_{at}.h5")
            with h5py.File(p, "w") as f:
                # szip stores noise as it is (its mask bit set): give it what compresses
                data = np.arange(64 * 64, dtype="f4").reshape(64, 64) if name == "szip" else a
                f.create_dataset("x", data=data, chunks=(64, 64), **kw)
            with h5py.File(p, "r") as f:
                off = f["x"].id.get_chunk_info(0).byte_offset
            with open(p, "r+b") as fh:
                fh.seek(off + at)
                b = fh.read(16)
                fh.seek(off + at)
                fh.write(bytes(x ^ 0x5A for x in b))
            try:
                with h5py.File(p, "r") as f:
                    read = quietly(lambda: f["x"][()])
                out.append((p + ":/x", "h5py=" + save_oracle(d, f"oracle_damaged_{name}_{at}", read)))
            except OSError:
                out.append((p + ":/x", "damaged_plugin"))
    # LZ4, bitshuffle and szip chunks whose headers claim 16 MiB for a chunk of 16 KiB, and
    # a bzip2 stream of 16 MiB
    big = (16 << 20).to_bytes(8, "big") + (8192).to_bytes(4, "big")
    for name, kw, head in [("lz4", hdf5plugin.LZ4(), big),
                           ("bitshuffle_lz4", hdf5plugin.Bitshuffle(cname="lz4"), big),
                           ("szip", szip, (16 << 20).to_bytes(4, "little")),
                           ("bzip2", hdf5plugin.BZip2(), None)]:
        p = os.path.join(d, f"bomb_{name}.h5")
        with h5py.File(p, "w") as f:
            ds = f.create_dataset("x", shape=(64, 64), dtype="f4", chunks=(64, 64), **kw)
            stored = head + bytes(64) if head else bz2.compress(bytes(16 << 20), 9)
            ds.id.write_direct_chunk((0, 0), stored)
        out.append((p + ":/x", "bomb_plugin"))
    # an szip chunk cut short whose scanlines are padded to whole blocks: libsz would
    # hand back its own uninitialised buffer as the missing pixels; refused
    cut_szip = os.path.join(d, "truncated_szip.h5")
    with h5py.File(cut_szip, "w") as f:
        ramp = np.arange(64 * 40, dtype="u2").reshape(64, 40)
        ds = f.create_dataset("x", data=ramp, chunks=(64, 40), compression="szip", compression_opts=("nn", 32))
        mask, _ = ds.id.read_direct_chunk((0, 0))
        assert mask == 0, "the szip chunk was stored as it is"
        _, chunk = ds.id.read_direct_chunk((0, 0))
        ds.id.write_direct_chunk((0, 0), chunk[: len(chunk) // 2])
    out.append((cut_szip + ":/x", "truncated_szip"))
    # a file cut short: its chunks run past its end
    cut = os.path.join(d, "truncated.h5")
    with h5py.File(cut, "w") as f:
        f.create_dataset("x", data=a, chunks=(16, 16), compression="gzip")
        f["y"] = a
    size = os.path.getsize(cut)
    with open(cut, "r+b") as fh:
        fh.truncate(size - 2000)
    out.append((cut + ":/x", "truncated_chunked"))
    # filters and types tilestream does not decode
    other = os.path.join(d, "unsupported.h5")
    with h5py.File(other, "w") as f:
        f.create_dataset("zfp", data=a, chunks=(16, 16), **hdf5plugin.Zfp(rate=8.0))
        f.create_dataset("scaleoffset", data=a, chunks=(16, 16), scaleoffset=2)
        f.create_dataset("record", data=np.zeros(5, dtype=[("x", "f4"), ("y", "i2")]))
        # two f4 members named as complex parts, but the imaginary one first
        f.create_dataset("swapped_parts", data=np.zeros(5, dtype=[("i", "f4"), ("r", "f4")]))
        # a record whose members only begin like a complex number's parts
        f.create_dataset("rate_intensity", data=np.zeros(5, dtype=[("rate", "f4"), ("intensity", "f4")]))
        f.create_dataset("strings", data=np.array([b"a", b"bc"]))
        f.create_group("group")
        # a cycle of hard links: listing must end
        f["group/loop"] = f["group"]
        f["group/inner"] = a
    for n in ["zfp", "scaleoffset", "record", "swapped_parts", "rate_intensity", "strings", "group",
              "missing"]:
        out.append((f"{other}:/{n}", "unsupported_" + n))
    # NetCDF-3: a file cut short, a text variable
    nc3 = os.path.join(d, "classic.nc")
    with netCDF4.Dataset(nc3, "w", format="NETCDF3_CLASSIC") as ds:
        ds.createDimension("x", 100)
        ds.createDimension("n", 4)
        ds.createVariable("v", "f8", ("x",))[:] = np.arange(100.0)
        ds.createVariable("name", "S1", ("n",))[:] = np.array(list(b"abcd"), dtype="S1")
    with open(nc3, "r+b") as fh:
        fh.truncate(os.path.getsize(nc3) - 300)
    out.append((nc3 + ":v", "nc3_truncated"))
    ok3 = os.path.join(d, "text.nc")
    with netCDF4.Dataset(ok3, "w", format="NETCDF3_CLASSIC") as ds:
        ds.createDimension("n", 4)
        ds.createVariable("name", "S1", ("n",))[:] = np.array(list(b"abcd"), dtype="S1")
    out.append((ok3 + ":name", "nc3_char"))
    noth5 = os.path.join(d, "not.h5")
    with open(noth5, "wb") as fh:
        fh.write(b"\x89HDF\r\n\x1a\n" + bytes(200))
    out.append((noth5 + ":/x", "not_hdf5"))
    for c in out:
        print(*c)


def seeds(d):
    """The fuzz target hdf5_chunk's seeds (fuzz/corpus/hdf5_chunk): real chunks of each
    filter pipeline h5py and hdf5plugin write, behind the target's header (filters,
    element size, mask, chunk size)."""
    # src/fuzz_checks.rs HDF5_FILTERS: (id, bitshuffle's compressor) -> filter byte
    ids = {(1, None): 0, (2, None): 1, (3, None): 2, (32000, None): 3, (32001, None): 4,
           (32015, None): 5, (32004, None): 6, (32008, 0): 7, (32008, 2): 9, (32008, 3): 10,
           (4, (169, 16, 8, 40)): 11, (4, (169, 16, 32, 40)): 12, (307, None): 13}
    rng = np.random.default_rng(9)
    pipelines = {
        "none": {},
        "gzip": dict(compression="gzip"),
        "shuffle_gzip": dict(compression="gzip", shuffle=True),
        "shuffle_gzip_fletcher": dict(compression="gzip", shuffle=True, fletcher32=True),
        "fletcher": dict(fletcher32=True),
        "lzf": dict(compression="lzf"),
        "shuffle_lzf": dict(compression="lzf", shuffle=True),
        "zstd": dict(hdf5plugin.Zstd()),
        "blosc": dict(hdf5plugin.Blosc()),
        "lz4": dict(hdf5plugin.LZ4(nbytes=1000)),
        "shuffle_lz4": dict(hdf5plugin.LZ4(), shuffle=True),
        "bitshuffle": dict(hdf5plugin.Bitshuffle(cname="none")),
        "bitshuffle_lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
        "bitshuffle_zstd": dict(hdf5plugin.Bitshuffle(cname="zstd")),
        "szip": dict(compression="szip", compression_opts=("nn", 16)),
        "bzip2": dict(hdf5plugin.BZip2()),
    }
    path = os.path.join(d, "seeds.h5")
    for dt in ["u1", "i2", "f4", "f8"]:
        a = (rng.standard_normal((48, 40)) * 100).astype(dt)
        with h5py.File(path, "w") as f:
            for name, kw in pipelines.items():
                # szip stores noise as it is: give it a ramp, which it compresses
                data = np.arange(48 * 40).reshape(48, 40).astype(dt) if name == "szip" else a
                f.create_dataset(name, data=data, chunks=(16, 40), **kw)
        with h5py.File(path, "r") as f:
            for name in pipelines:
                ds = f[name]
                dcpl = ds.id.get_create_plist()
                used = []
                for i in range(dcpl.get_nfilters()):
                    fid, _, params, _ = dcpl.get_filter(i)
                    used.append((fid, params[4] if fid == 32008 else tuple(params) if fid == 4 else None))
                if any(u not in ids for u in used):
                    continue  # szip of a pixel size the target does not choose
                mask, chunk = ds.id.read_direct_chunk((16, 0))
                size = 16 * 40 * a.dtype.itemsize
                head = bytes([len(used)] + [ids[u] for u in used] + [0] * (4 - len(used))
                             + [a.dtype.itemsize - 1, mask]) + size.to_bytes(2, "little")
                with open(os.path.join(d, f"seed_{name}_{dt}"), "wb") as fh:
                    fh.write(head + chunk)
    os.unlink(path)


def docs(d):
    """The small files the docs' HDF5 and NetCDF commands name (tests/data/features.h5,
    tests/data/era5.nc), which tests/it/readme.rs copies beside them."""
    rng = np.random.default_rng(11)
    with h5py.File(os.path.join(d, "features.h5"), "w", track_order=False) as f:
        x = (rng.standard_normal((400, 16)) * 10).round().astype("f4")
        f.create_dataset("train/x", data=x, chunks=(100, 16), compression="gzip", shuffle=True)
        f.create_dataset("train/y", data=np.arange(400, dtype="i8") % 10)
    with netCDF4.Dataset(os.path.join(d, "era5.nc"), "w") as ds:
        for n, k in (("time", 4), ("lat", 9), ("lon", 12)):
            ds.createDimension(n, k)
        v = ds.createVariable("t2m", "i2", ("time", "lat", "lon"), zlib=True, fill_value=-32767)
        v.scale_factor, v.add_offset = 0.01, 273.15
        v.set_auto_maskandscale(False)
        raw = rng.integers(-3000, 3000, size=(4, 9, 12), dtype="i2")
        raw[:, 0, :3] = -32767
        v[:] = raw


if __name__ == "__main__":
    {"write": write, "hostile": hostile, "seeds": seeds, "docs": docs}[sys.argv[1]](sys.argv[2])
