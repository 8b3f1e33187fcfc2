"""Quantiles, percentiles and medians against numpy: np.quantile, np.percentile,
np.median and their nan forms, value for value and dtype for dtype, for every method,
one q as a number or a list, every dtype, one axis, several and all elements, NaN and
slices of NaN alone; the same bytes at any budget."""

import warnings

import numpy as np
import pytest

import tilestream as ts

METHODS = ["linear", "lower", "higher", "nearest", "midpoint"]


def same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def numpy_of(fn, a, q, axis, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy on all-NaN slices
        if q is None:
            return fn(a, axis=axis)
        return fn(a, q, axis=axis, method=method)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int16", "uint16",
                                   "int64", "uint8"])
def test_equal_numpy_for_every_method_dtype_and_axis(tmp_path, dtype):
    rng = np.random.default_rng(3)
    a = (rng.normal(size=(6, 5, 7, 11)) * 40).round(1).astype(dtype)
    np.save(tmp_path / "a.npy", a)
    for axis in [None, 0, 3, (1, 2), (0, 2, 3)]:
        for q in [0.3, [0.0, 0.02, 0.5, 0.98, 1.0]]:
            for method in METHODS:
                got = ts.reduce(tmp_path / "a.npy", "quantile", axis=axis, q=q, method=method)
                same(got, numpy_of(np.quantile, a, q, axis, method))
        same(ts.reduce(tmp_path / "a.npy", "median", axis=axis),
             numpy_of(np.median, a, None, axis, None))
        same(ts.reduce(tmp_path / "a.npy", "percentile", axis=axis, q=[2, 98]),
             numpy_of(np.percentile, a, [2, 98], axis, "linear"))
        same(ts.reduce(tmp_path / "a.npy", "percentile", axis=axis, q=50),
             numpy_of(np.percentile, a, 50, axis, "linear"))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_nan_and_the_nan_forms_equal_numpy(tmp_path, dtype):
    rng = np.random.default_rng(4)
    a = (rng.normal(size=(4001, 5)) * 3 + 100).astype(dtype)
    a[::7, 0] = np.nan
    a[:, 2] = np.nan          # a slice of NaN alone
    a[[0, 2047, 2048], 4] = np.nan
    a[10, 3] = np.inf
    a[11, 3] = -np.inf
    np.save(tmp_path / "a.npy", a)
    for axis in [0, None]:
        for q in [0.25, [0.02, 0.5, 0.98]]:
            for method in ["linear", "nearest"]:
                same(ts.reduce(tmp_path / "a.npy", "quantile", axis=axis, q=q, method=method),
                     numpy_of(np.quantile, a, q, axis, method))
                same(ts.reduce(tmp_path / "a.npy", "nanquantile", axis=axis, q=q,
                               method=method),
                     numpy_of(np.nanquantile, a, q, axis, method))
        same(ts.reduce(tmp_path / "a.npy", "nanpercentile", axis=axis, q=[5, 95]),
             numpy_of(np.nanpercentile, a, [5, 95], axis, "linear"))
        same(ts.reduce(tmp_path / "a.npy", "median", axis=axis),
             numpy_of(np.median, a, None, axis, None))
        if dtype != "float16":  # numpy's nanmedian of small f16 slices sums in f16
            same(ts.reduce(tmp_path / "a.npy", "nanmedian", axis=axis),
                 numpy_of(np.nanmedian, a, None, axis, None))
    # no warning on a slice of NaN alone, where numpy warns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = ts.reduce(tmp_path / "a.npy", "nanmedian", axis=0)
    assert np.isnan(m[2])


def test_the_same_bytes_at_any_budget_and_keepdims(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(300_007, 3)).astype("float32")
    np.save(tmp_path / "a.npy", a)
    got = [ts.reduce(tmp_path / "a.npy", "quantile", axis=0, q=[0.1, 0.9], memory=m,
                     threads=t) for m, t in (("512KiB", 1), ("4MiB", 2), ("64MiB", 2))]
    assert got[0].tobytes() == got[1].tobytes() == got[2].tobytes()
    same(got[0], np.quantile(a, [0.1, 0.9], axis=0))
    kept = ts.reduce(tmp_path / "a.npy", "quantile", axis=0, q=[0.1, 0.9], keepdims=True)
    same(kept, np.quantile(a, [0.1, 0.9], axis=0, keepdims=True))
    same(ts.reduce(tmp_path / "a.npy", "median", axis=1, keepdims=True),
         np.median(a, axis=1, keepdims=True))


def test_percentiles_per_band_of_a_scene_in_a_pipeline(tmp_path):
    rng = np.random.default_rng(6)
    scene = rng.integers(0, 4096, size=(4, 301, 207)).astype("uint16")
    np.save(tmp_path / "s.npy", scene)
    same(ts.reduce(tmp_path / "s.npy", "percentile", axis=(1, 2), q=[2, 98], memory="8MiB"),
         np.percentile(scene, [2, 98], axis=(1, 2)))
    (tmp_path / "p.toml").write_text(
        '[inputs]\nx = "s.npy"\n\n[[steps]]\nop = "reduce"\ninput = "x"\n'
        'reduce = "percentile"\nq = [2, 98]\nmethod = "nearest"\naxis = [1, 2]\nout = "p"\n\n'
        '[outputs]\np = "p.npy"\n')
    ts.run(tmp_path / "p.toml", memory="8MiB")
    same(np.load(tmp_path / "p.npy"), np.percentile(scene, [2, 98], axis=(1, 2),
                                                    method="nearest"))


def test_bad_requests_are_refused_in_one_line(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10.0))
    for kw, match in [(dict(op="quantile", q=1.5), "outside"),
                      (dict(op="quantile"), "needs q"),
                      (dict(op="median", q=0.5), "takes no q"),
                      (dict(op="quantile", q=0.5, method="cubic"), "unknown quantile method"),
                      (dict(op="sum", q=0.5), "q and method are for")]:
        with pytest.raises(ValueError, match=match) as e:
            ts.reduce(tmp_path / "a.npy", **kw)
        assert "\n" not in str(e.value)
    (tmp_path / "p.toml").write_text(
        '[inputs]\nx = "a.npy"\n\n[[steps]]\nop = "reduce"\ninput = "x"\n'
        'reduce = "sum"\nq = 0.5\nout = "s"\n\n[outputs]\ns = "s.npy"\n')
    with pytest.raises(Exception, match="q and method are for"):
        ts.run(tmp_path / "p.toml")
