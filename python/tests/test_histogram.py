"""ts.histogram against np.histogram: every dtype, counts of equal bins with values on
(and within an ulp of) the edges, given and automatic ranges, explicit edges, per band
(each over its own range) and over every element, the same counts at any budget; NaN and
nodata left out; numpy's refusals."""

import os
import warnings

import numpy as np
import pytest

import tilestream as ts

DTYPES = ["uint8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64"]


def data(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    if d.kind == "f":
        # quantized to tenths: many values exactly on (or an ulp from) decimal edges
        return (np.round(rng.normal(size=shape) * 30, 1) / 10).astype(d)
    return rng.integers(0, 100 if d.itemsize == 1 else 3000, size=shape).astype(d) - \
        (0 if d.kind == "u" else d.type(40))


def same(got, want):
    (gc, ge), (wc, we) = got, want
    assert gc.dtype == wc.dtype and gc.shape == wc.shape, (gc.dtype, gc.shape, wc.dtype, wc.shape)
    np.testing.assert_array_equal(gc, wc)
    assert ge.dtype == we.dtype and ge.shape == we.shape, (ge.dtype, ge.shape, we.dtype, we.shape)
    np.testing.assert_array_equal(ge, we)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_element_equals_numpy(tmp_path, dtype):
    a = data(dtype, (301, 67))
    np.save(tmp_path / "a.npy", a)
    lo, hi = float(a.min()), float(a.max())
    for bins, rng in [(10, None), (1, None), (7, None), (64, (lo, hi)), (33, (lo + 0.3, hi / 2)),
                      (10, (0.0, 1.0)), (5, (2.0, 2.0)), (1000, None)]:
        want = np.histogram(a, bins, rng)
        got = ts.histogram(tmp_path / "a.npy", bins, rng, memory="1MiB")
        same(got, want)
    edges = [lo - 1, 0.0, 0.5, 0.5, 1.0, 2.5, hi]
    same(ts.histogram(tmp_path / "a.npy", edges), np.histogram(a, edges))


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_band_each_over_its_own_range(tmp_path, dtype):
    a = data(dtype, (3, 41, 53), seed=1)
    a[1] = a[1] // 3 if a.dtype.kind in "iu" else a[1] / 3
    np.save(tmp_path / "a.npy", a)
    for bins in [8, 100]:
        got = ts.histogram(tmp_path / "a.npy", bins, axis=(1, 2), memory="512KiB")
        per = [np.histogram(a[b], bins) for b in range(3)]
        want = (np.stack([c for c, _ in per]), np.stack([e for _, e in per]))
        same(got, want)
        # a given range: one set of edges
        got = ts.histogram(tmp_path / "a.npy", bins, (0, 7), axis=(1, 2))
        per = [np.histogram(a[b], bins, (0, 7)) for b in range(3)]
        same(got, (np.stack([c for c, _ in per]), per[0][1]))


def test_the_same_counts_at_any_budget_and_over_several_axes(tmp_path):
    a = data("float32", (6, 5, 70, 90), seed=2)
    np.save(tmp_path / "a.npy", a)
    base = ts.histogram(tmp_path / "a.npy", 50, (-3, 3), axis=(0, 2, 3), memory="64MiB")
    for memory in ["256KiB", "1MiB"]:
        same(ts.histogram(tmp_path / "a.npy", 50, (-3, 3), axis=(0, 2, 3), memory=memory), base)
    per = [np.histogram(a[:, c], 50, (-3, 3)) for c in range(5)]
    same(base, (np.stack([c for c, _ in per]), per[0][1]))


def test_nan_and_nodata_are_left_out(tmp_path):
    a = data("float32", (200, 30), seed=3)
    a[::7, 3] = np.nan
    a[5, :] = -9999
    np.save(tmp_path / "a.npy", a)
    # NaN with a given range: not counted, as numpy
    same(ts.histogram(tmp_path / "a.npy", 20, (-5, 5)), np.histogram(a, 20, (-5, 5)))
    # NaN with no range: numpy raises, so does tilestream
    with pytest.raises(ValueError, match="autodetected range of \\[nan, nan\\] is not finite"):
        np.histogram(a, 20)
    with pytest.raises(ValueError, match="autodetected range .* is not finite"):
        ts.histogram(tmp_path / "a.npy", 20)
    # nodata: left out, and of the automatic range too (NaN with it)
    v = a[(a != -9999) & ~np.isnan(a)]
    same(ts.histogram(tmp_path / "a.npy", 20, nodata=-9999), np.histogram(v, 20))


def test_refusals_are_numpys(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10, dtype=np.float32))
    for bins, rng, match in [(0, None, "bins must be positive"),
                             (5, (3, 1), "max must be larger than min"),
                             (5, (0, np.inf), "not finite"),
                             ([0, 2, 1], None, "increase monotonically")]:
        with pytest.raises(ValueError, match=match):
            ts.histogram(tmp_path / "a.npy", bins, rng)
    with pytest.raises(ValueError, match="histogram range is for a count of bins"):
        ts.histogram(tmp_path / "a.npy", [0, 1, 2], (0, 1))
