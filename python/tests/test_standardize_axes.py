"""standardize with its statistics over several axes (per channel of an NCHW batch, per
band of a scene) against numpy's ``(x - x.mean(axis, keepdims=True)) / x.std(axis,
keepdims=True)``; the statistics file in the kept axes' shape; a Dask job equal to one
process."""

import os

import numpy as np
import pytest

import tilestream as ts

if os.environ.get("CI") or os.environ.get("TILESTREAM_TEST_ALL"):
    import distributed  # scripts/test installs it: a missing package must fail, not skip
else:
    distributed = pytest.importorskip("distributed")
import tilestream.dask as tsd  # noqa: E402


@pytest.mark.parametrize("shape,axis", [((6, 3, 17, 19), (0, 2, 3)), ((3, 41, 37), (1, 2)),
                                        ((5, 4, 6, 2), (0, -1)), ((40, 7), 0),
                                        ((11, 13), (0, 1))])
def test_equal_numpy(tmp_path, shape, axis):
    rng = np.random.default_rng(2)
    x = (rng.normal(size=shape) * 7 + np.arange(shape[-1]) * 30).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ts.standardize(tmp_path / "x.npy", tmp_path / "z.npy", axis=axis, ddof=1, dtype="f64",
                   stats=tmp_path / "s.npz", memory="512KiB")
    x64 = x.astype(np.float64)
    m = x64.mean(axis=axis, keepdims=True)
    s = x64.std(axis=axis, ddof=1, keepdims=True)
    np.testing.assert_allclose(np.load(tmp_path / "z.npy"), (x64 - m) / s, rtol=1e-10, atol=1e-12)
    st = np.load(tmp_path / "s.npz")
    np.testing.assert_allclose(st["mean"], x64.mean(axis=axis), rtol=1e-12)
    np.testing.assert_allclose(st["std"], x64.std(axis=axis, ddof=1), rtol=1e-10)
    # the statistics are the reductions' over the same axes, byte for byte
    assert st["mean"].tobytes() == ts.reduce(tmp_path / "x.npy", "mean", axis=axis).tobytes()


def test_kept_axes_must_be_adjacent(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="not adjacent"):
        ts.standardize(tmp_path / "x.npy", tmp_path / "z.npy", axis=(1, 3))
    assert not os.path.exists(tmp_path / "z.npy")


def test_dask_refuses_statistics_per_row(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((4, 5, 6), np.float32))
    with pytest.raises(ValueError, match="must include 0"):
        tsd.standardize(tmp_path / "x.npy", tmp_path / "z.npy", axis=(1, 2))


def test_dask_per_channel_equals_one_process(tmp_path):
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(300, 3, 9, 11)) * 5 + 100).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    one = tmp_path / "one.npy"
    ts.standardize(tmp_path / "x.npy", one, axis=(0, 2, 3))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  memory_limit="512MiB", host="127.0.0.1",
                                  dashboard_address=":0", silence_logs=40) as c, \
            distributed.Client(c) as cl:
        split = tmp_path / "split.npy"
        tsd.standardize(tmp_path / "x.npy", split, axis=(0, 2, 3), client=cl, block_rows=70)
    assert open(split, "rb").read() == open(one, "rb").read()
