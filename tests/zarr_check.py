"""zarr-python's side of tests/it/zarr.rs.

    python zarr_check.py write DIR        zarr-python writes Zarr v3 stores (several codecs,
                                          sharding, dtypes) and numpy writes the same data
                                          as .npy beside each: NAME.zarr + NAME.npy
    python zarr_check.py check STORE NPY  zarr-python reads STORE (written by tilestream)
                                          and compares it with NPY exactly; prints the
                                          chunk shape and codecs it found
"""
import json
import sys

import numpy as np
import zarr
from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,
                         TransposeCodec, ZstdCodec)


def data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind == "f":
        return (rng.normal(size=shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -30000), min(info.max, 30000)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)


CASES = [
    # name, shape, dtype, chunks, shards, compressors
    ("zstd_f32", (70, 90), "float32", (16, 32), None, [ZstdCodec(level=3)]),
    ("gzip_i16", (3, 41, 37), "int16", (1, 16, 16), None, [GzipCodec(level=5)]),
    ("blosc_u16", (5, 60, 50), "uint16", (2, 32, 32), None,
     [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]),
    ("sharded_f64", (64, 80), "float64", (8, 16), (32, 32), [ZstdCodec(level=1)]),
    ("raw_u8", (33, 17), "uint8", (10, 10), None, None),
    ("zstd_i64", (1000,), "int64", (128,), None, [ZstdCodec(level=3)]),
    ("gzip_bool", (20, 30), "bool", (7, 9), None, [GzipCodec(level=1)]),
    ("zstd_f16", (2, 20, 30), "float16", (1, 8, 8), None, [ZstdCodec(level=3)]),
    ("zstd_u32_3d", (6, 10, 12), "uint32", (4, 4, 5), None, [ZstdCodec(level=3)]),
    ("blosc_bitshuffle_f32", (40, 50), "float32", (16, 16), None,
     [BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")]),
    ("gzip_crc32c_i32", (17, 19), "int32", (5, 6), None, [GzipCodec(level=1), Crc32cCodec()]),
]

# name, shape, dtype, create_array keywords, regions written (None: all), fill value
EXTRA = [
    ("transpose_big_u16", (20, 30), "uint16",
     dict(chunks=(8, 8), filters=[TransposeCodec(order=(1, 0))],
          serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=1)]), None, 0),
    ("transpose_3d_i8", (5, 6, 7), "int8",
     dict(chunks=(2, 3, 4), filters=[TransposeCodec(order=(2, 0, 1))], compressors=None),
     None, 0),
    ("shard_index_start_u8", (50, 60), "uint8",
     dict(chunks=(25, 30), serializer=ShardingCodec(
         chunk_shape=(5, 6), codecs=[BytesCodec(), ZstdCodec(level=1)],
         index_location="start"), compressors=None), None, 0),
    ("sparse_nan_f64", (40, 40), "float64",
     dict(chunks=(7, 7), compressors=[ZstdCodec(level=1)]),
     [(slice(3, 10), slice(20, 33))], float("nan")),
    ("sparse_shards_i16", (64, 64), "int16",
     dict(chunks=(8, 8), shards=(32, 32), compressors=[ZstdCodec(level=1)]),
     [(slice(0, 5), slice(0, 5)), (slice(40, 48), slice(50, 64))], 7),
    ("v2_keys_u32", (30, 20), "uint32",
     dict(chunks=(8, 8), compressors=[GzipCodec(level=1)],
          chunk_key_encoding={"name": "v2", "separator": "."}), None, 0),
]


def write(d):
    for i, (name, shape, dtype, chunks, shards, comp) in enumerate(CASES):
        a = data(shape, dtype, i)
        kw = dict(store=f"{d}/{name}.zarr", shape=shape, dtype=dtype, chunks=chunks,
                  zarr_format=3, fill_value=0)
        if shards is not None:
            kw["shards"] = shards
        kw["compressors"] = comp if comp is not None else None
        z = zarr.create_array(**kw)
        z[...] = a
        np.save(f"{d}/{name}.npy", a)
    for i, (name, shape, dtype, kw, regions, fill) in enumerate(EXTRA):
        a = data(shape, dtype, 100 + i)
        z = zarr.create_array(store=f"{d}/{name}.zarr", shape=shape, dtype=dtype,
                              zarr_format=3, fill_value=fill, **kw)
        if regions is None:
            z[...] = a
        else:
            for r in regions:
                z[r] = a[r]
        # what zarr-python reads back (fill value where nothing was written)
        np.save(f"{d}/{name}.npy", zarr.open_array(f"{d}/{name}.zarr", mode="r")[...])
    print(" ".join([c[0] for c in CASES] + [e[0] for e in EXTRA]))


def check(store, npy):
    want = np.load(npy)
    z = zarr.open_array(store, mode="r")
    got = z[...]
    assert got.dtype == want.dtype, (store, got.dtype, want.dtype)
    assert got.shape == want.shape, (store, got.shape, want.shape)
    assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), (store, "values differ")
    meta = json.load(open(f"{store}/zarr.json"))
    print(json.dumps({"chunks": list(z.chunks), "shards": list(z.shards) if z.shards else None,
                      "codecs": [c["name"] for c in meta["codecs"]]}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2])
    elif cmd == "check":
        # pairs of (store, npy): one report line each, in order (one interpreter start
        # for all of them)
        args = sys.argv[2:]
        assert len(args) % 2 == 0, "check takes pairs of store and npy"
        for store, npy in zip(args[::2], args[1::2]):
            check(store, npy)
    else:
        sys.exit(__doc__)
