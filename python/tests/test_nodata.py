"""Nodata in the reductions: the nan forms, count and the nan quantiles of a nodata
GeoTIFF (written by GDAL, through rasterio) against GDAL's own statistics (``gdalinfo
-stats``: minimum, maximum, mean, standard deviation per band) and against numpy on the
valid pixels; ``nodata=`` for inputs whose file cannot say it; the same bytes at any
budget and split over Dask workers."""

import json
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import tilestream as ts

if os.environ.get("CI") or os.environ.get("TILESTREAM_TEST_ALL"):
    import rasterio  # scripts/test installs it (rio-cogeo): a missing package must fail
    import distributed
else:
    rasterio = pytest.importorskip("rasterio", reason="fixtures are written by GDAL through rasterio")
    distributed = pytest.importorskip("distributed")
import tilestream.dask as tsd  # noqa: E402

# (dtype, nodata): the values such scenes use
CASES = [("uint8", 0), ("uint16", 0), ("int16", -9999), ("uint32", 4294967295),
         ("int32", -2147483648), ("float32", -9999.0), ("float64", -3.4028234663852886e38)]


def scene(dtype, nodata, shape=(3, 70, 90), seed=0):
    """Bands of varied values with nodata on tile edges (rows and columns 31, 32, 63, 64),
    scattered, and a 40-column stripe of band 1."""
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    if d.kind == "f":
        a = (rng.normal(size=shape) * 50 + 300).astype(d)
    else:
        a = rng.integers(1, 250, size=shape).astype(d)
    a[:, [0, 31, 32, 63, 64], :] = nodata
    a[:, :, [31, 32, 63, 64]] = nodata
    a[rng.random(shape) < 0.05] = nodata
    a[1, :, :40] = nodata
    return a


def write_tif(path, a, nodata):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not georeferenced: no matter here
        with rasterio.open(path, "w", driver="GTiff", width=a.shape[2], height=a.shape[1],
                           count=a.shape[0], dtype=a.dtype.name, nodata=nodata, tiled=True,
                           blockxsize=32, blockysize=32, compress="deflate") as ds:
            ds.write(a)


def gdal_stats(path):
    """GDAL's exact statistics of each band (nodata left out), from gdalinfo."""
    exe = shutil.which("gdalinfo")
    assert exe, "gdalinfo not found: these tests compare with GDAL; install gdal-bin (bash scripts/test does)"
    env = dict(os.environ, GDAL_PAM_ENABLED="NO")  # no .aux.xml beside the fixture
    out = subprocess.run([exe, "-json", "-stats", str(path)], check=True, capture_output=True,
                         env=env, text=True).stdout
    # the band metadata's STATISTICS_* hold 14 significant digits (the JSON fields 3 decimals)
    keys = ["STATISTICS_MINIMUM", "STATISTICS_MAXIMUM", "STATISTICS_MEAN", "STATISTICS_STDDEV"]
    return [tuple(float(b["metadata"][""][k]) for k in keys) for b in json.loads(out)["bands"]]


def masked(a, nodata):
    """The values as f64 with nodata as NaN: numpy's nan functions then see what the
    reductions should."""
    m = a.astype(np.float64)
    m[a == nodata] = np.nan
    return m


@pytest.mark.parametrize("dtype,nodata", CASES)
def test_band_statistics_equal_gdals(tmp_path, dtype, nodata):
    a = scene(dtype, nodata)
    tif = tmp_path / "s.tif"
    write_tif(tif, a, nodata)
    stats = gdal_stats(tif)
    got = {op: ts.reduce(tif, op, axis=(1, 2), memory="2MiB")
           for op in ["nanmin", "nanmax", "nanmean", "nanstd", "count", "nansum"]}
    assert got["nanmin"].dtype == a.dtype and got["nanmax"].dtype == a.dtype
    m = masked(a, nodata)
    for b, (mn, mx, mean, std) in enumerate(stats):
        # GDAL's figures are printed to 14 significant digits
        np.testing.assert_allclose([got["nanmin"][b], got["nanmax"][b]], [mn, mx], rtol=1e-13)
        np.testing.assert_allclose(got["nanmean"][b], mean, rtol=1e-12)
        np.testing.assert_allclose(got["nanstd"][b], std, rtol=1e-9)
    # the extremes exactly: numpy's over the valid pixels, in the input's dtype
    np.testing.assert_array_equal(got["nanmin"], np.nanmin(m, axis=(1, 2)).astype(a.dtype))
    np.testing.assert_array_equal(got["nanmax"], np.nanmax(m, axis=(1, 2)).astype(a.dtype))
    np.testing.assert_array_equal(got["count"], np.sum(~np.isnan(m), axis=(1, 2)))
    if a.dtype.kind in "iu":
        # an integer sum is exact: numpy's over the valid pixels
        want = np.array([a[b][a[b] != nodata].astype(np.int64).sum() for b in range(3)])
        np.testing.assert_array_equal(got["nansum"].astype(np.int64), want)
    # the same bytes at a budget of a few tiles and of the whole
    for op, v in got.items():
        assert ts.reduce(tif, op, axis=(1, 2), memory="64MiB").tobytes() == v.tobytes(), op


@pytest.mark.parametrize("dtype,nodata", CASES)
def test_percentiles_per_band_equal_numpys_on_the_valid_pixels(tmp_path, dtype, nodata):
    a = scene(dtype, nodata, seed=1)
    tif = tmp_path / "s.tif"
    write_tif(tif, a, nodata)
    for method in ["linear", "lower", "higher", "nearest"]:
        got = ts.reduce(tif, "nanpercentile", axis=(1, 2), q=[2, 50, 98], method=method,
                        memory="1MiB")
        want = np.stack([np.percentile(a[b][a[b] != nodata], [2, 50, 98], method=method)
                         for b in range(3)], axis=1)
        assert got.dtype == want.dtype, (method, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=method)
    # the plain percentile takes nodata as a value, as numpy does
    plain = ts.reduce(tif, "percentile", axis=(1, 2), q=2, method="lower")
    np.testing.assert_array_equal(plain, np.percentile(a, 2, axis=(1, 2), method="lower"))


def test_nodata_argument_for_npy_and_every_axis(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.integers(0, 40, size=(4, 5, 6, 7)).astype(np.int16)
    a[:, 2] = 7  # one channel nodata alone
    np.save(tmp_path / "a.npy", a)
    m = masked(a, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy on all-NaN slices
        for axis in [None, 0, 1, (0, 2, 3), (1, 3), (0, 1, 2, 3)]:
            for op, fn in [("nanmean", np.nanmean), ("nanvar", np.nanvar), ("count", None),
                           ("nanmax", np.nanmax)]:
                got = ts.reduce(tmp_path / "a.npy", op, axis=axis, nodata=7, memory="1MiB")
                if op == "count":
                    want = np.sum(~np.isnan(m), axis=axis)
                elif op == "nanmax":
                    # an integer input's extreme of nodata alone is the nodata value
                    want = np.where(np.isnan(fn(m, axis=axis)), 7, fn(m, axis=axis)).astype(np.int16)
                else:
                    want = fn(m, axis=axis)
                np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"{op} {axis}")
                assert got.dtype == (np.int16 if op == "nanmax" else
                                     np.int64 if op == "count" else np.float64)
    # without nodata= a .npy has none: the nan forms of an integer input are the plain ones
    np.testing.assert_array_equal(ts.reduce(tmp_path / "a.npy", "count", axis=0),
                                  np.full((5, 6, 7), 4))
    # "none" drops a GeoTIFF's own; a value the dtype does not hold is refused in one line
    with pytest.raises(ValueError, match="is not a i16 value"):
        ts.reduce(tmp_path / "a.npy", "nanmean", nodata=70000)
    with pytest.raises(ValueError, match="is not a i16 value"):
        ts.reduce(tmp_path / "a.npy", "nanmean", nodata="nan")


def test_none_drops_a_geotiffs_nodata(tmp_path):
    a = scene("uint16", 0)
    write_tif(tmp_path / "s.tif", a, 0)
    got = ts.reduce(tmp_path / "s.tif", "nanmin", axis=(1, 2), nodata="none")
    np.testing.assert_array_equal(got, np.zeros(3, np.uint16))
    # another value in place of the tag's
    got = ts.reduce(tmp_path / "s.tif", "count", nodata=0)
    assert got == np.count_nonzero(a)


def test_dask_shares_equal_one_process(tmp_path):
    rng = np.random.default_rng(4)
    a = (rng.normal(size=(3000, 6, 8)) * 5 + 1000).astype(np.float32)
    a[rng.random(a.shape) < 0.1] = -9999
    a[:, 2, 3] = -9999  # a column of nodata alone
    a[0] = -9999  # the first row: every shift
    np.save(tmp_path / "a.npy", a)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  memory_limit="512MiB", host="127.0.0.1",
                                  dashboard_address=":0", silence_logs=40) as c, \
            distributed.Client(c) as cl:
        for op, axis in [("nanmean", 0), ("nanstd", None), ("count", (0, 2)), ("nanmin", 0)]:
            one = ts.reduce(tmp_path / "a.npy", op, axis=axis, nodata=-9999)
            split = tsd.reduce(tmp_path / "a.npy", op, axis=axis, nodata=-9999, client=cl,
                               block_rows=700)
            assert split.tobytes() == one.tobytes(), (op, axis)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int16"])
def test_nanargmin_nanargmax_equal_numpys(tmp_path, dtype):
    rng = np.random.default_rng(8)
    a = (rng.normal(size=(5, 6, 7)) * 10).round().astype(dtype)
    if a.dtype.kind == "f":
        a[rng.random(a.shape) < 0.2] = np.nan
        a[0, 0, :] = np.nan
        a[0, 0, 3] = 2.0  # one valid element in a slice
    np.save(tmp_path / "a.npy", a)
    for axis in [None, 0, 1, 2]:
        for op, fn in [("nanargmin", np.nanargmin), ("nanargmax", np.nanargmax)]:
            got = ts.reduce(tmp_path / "a.npy", op, axis=axis, memory="1MiB")
            want = fn(a, axis=axis)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {axis}")
            if axis is not None:
                kept = ts.reduce(tmp_path / "a.npy", op, axis=axis, keepdims=True)
                np.testing.assert_array_equal(kept, fn(a, axis=axis, keepdims=True))


def test_nanargmax_of_a_slice_with_nothing_valid_is_refused_as_numpy_raises(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a[:, 1] = np.nan
    a[2, [0, 2, 3]] = 8
    np.save(tmp_path / "a.npy", a)
    with pytest.raises(ValueError, match="All-NaN slice encountered"):
        np.nanargmax(a, axis=0)
    with pytest.raises(ValueError, match="nanargmax: result 1 .*All-NaN"):
        ts.reduce(tmp_path / "a.npy", "nanargmax", axis=0)
    # nodata counts as NaN: row 2 holds 8 and NaN alone
    np.testing.assert_array_equal(ts.reduce(tmp_path / "a.npy", "nanargmin", axis=1), [0, 0, 0])
    with pytest.raises(ValueError, match="nanargmin: result 2"):
        ts.reduce(tmp_path / "a.npy", "nanargmin", axis=1, nodata=8)
