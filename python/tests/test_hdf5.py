"""HDF5 and NetCDF-4 datasets from Python: ``ts.open("file.h5:/group/data")`` reads what h5py
reads, the reductions equal numpy's over h5py's reading at a small budget, and a NetCDF-4
variable's ``_FillValue`` is left out of the nan reductions. (The full fixture matrix,
every dtype, byte order, layout and filter, is ``tests/it/hdf5.rs``.)"""

import os

import numpy as np
import pytest

import tilestream as ts

if os.environ.get("CI") or os.environ.get("TILESTREAM_TEST_ALL"):
    import h5py  # scripts/test installs them: a missing package must fail
    import netCDF4
else:
    h5py = pytest.importorskip("h5py")
    netCDF4 = pytest.importorskip("netCDF4")


def test_a_chunked_dataset_reads_and_reduces_as_h5py_reads_it(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((700, 37)).astype(">f4")
    path = tmp_path / "features.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("train/x", data=a, chunks=(64, 16), compression="gzip", shuffle=True)
        f["train/y"] = np.arange(700, dtype="i8")
    x = ts.open(f"{path}:/train/x")
    assert x.shape == (700, 37)
    assert x.dtype == np.float32
    assert x.format == "hdf5"
    with h5py.File(path) as f:
        want = f["train/x"][()]
        np.testing.assert_array_equal(ts.read(x), want)
        np.testing.assert_array_equal(ts.read(f"{path}:train/y"), f["train/y"][()])
    got = ts.reduce(x, "sum", axis=0, memory="256KiB")
    np.testing.assert_array_equal(got, ts.reduce(ts.open(_npy(tmp_path, want)), "sum", axis=0))
    np.testing.assert_allclose(got, want.astype("f8").sum(axis=0), rtol=1e-5)
    with pytest.raises(ValueError, match="holds 2 datasets"):
        ts.open(path)
    with pytest.raises(ValueError, match="no dataset '/nope'"):
        ts.open(f"{path}:/nope")


def test_netcdf_fill_value_is_left_out_of_the_nan_reductions(tmp_path):
    path = tmp_path / "sst.nc"
    rng = np.random.default_rng(4)
    raw = rng.random((4, 30, 40)).astype("f4")
    raw[1, :10, :10] = -999.0
    with netCDF4.Dataset(path, "w") as ds:
        for n, k in zip(("time", "lat", "lon"), raw.shape):
            ds.createDimension(n, k)
        v = ds.createVariable("sst", "f4", ("time", "lat", "lon"), zlib=True, fill_value=np.float32(-999.0))
        v.set_auto_maskandscale(False)
        v[:] = raw
    got = ts.reduce(f"{path}:sst", "nanmean", axis=0, memory="1MiB")
    want = np.where(raw == -999.0, np.nan, raw).astype("f8")
    np.testing.assert_allclose(got, np.nanmean(want, axis=0), rtol=1e-6)


def _npy(d, a):
    p = d / "oracle.npy"
    np.save(p, a.astype(a.dtype.newbyteorder("<")))
    return p


def test_netcdf3_record_and_fixed_variables_read_as_netcdf4_reads_them(tmp_path):
    path = tmp_path / "old.nc"
    rng = np.random.default_rng(5)
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 13)
        ds.createVariable("h", "i2", ("x",))[:] = rng.integers(-500, 500, size=13)
        ds.createVariable("t", "f4", ("time", "x"))[0:40] = rng.standard_normal((40, 13))
        ds.createVariable("time", "f8", ("time",))[:] = np.arange(40.0)
    t = ts.open(f"{path}:t")
    assert t.shape == (40, 13) and t.format == "netcdf3"
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        np.testing.assert_array_equal(ts.read(t), ds["t"][:])
        np.testing.assert_array_equal(ts.read(f"{path}:h"), ds["h"][:])
        np.testing.assert_array_equal(ts.reduce(f"{path}:t", "max", axis=0, memory="1MiB"),
                                      ds["t"][:].max(axis=0))
