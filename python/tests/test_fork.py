"""tilestream in a process forked after its parent used it: a ``DataLoader`` worker,
``multiprocessing`` with the ``fork`` start method. The child inherits the parent's
memory but none of its threads, so a pool of threads the parent had started must not be
waited on there (rayon's global pool was, and the child's first compressed read or
encode waited forever)."""

import multiprocessing as mp
import os

import numpy as np
import pytest

import tilestream as ts


def _work(d, tag):
    """Parallel encodes (Zarr, GeoTIFF), parallel decodes (a reduction over each) and a
    batch stream: what ran on a pool of threads."""
    ts.convert(f"{d}/x.npy", f"{d}/x{tag}.zarr", zarr_chunks="64x300")
    ts.convert(f"{d}/x.npy", f"{d}/x{tag}.tif", tiff_compress="deflate")
    sums = [np.asarray(ts.reduce(f"{d}/x{tag}.{ext}", "sum", axis=0)) for ext in ("zarr", "tif")]
    rows = sum(len(b) for b in ts.batches(f"{d}/x{tag}.zarr", 100, shuffle=True, block=50,
                                          window=4))
    return sums, rows


def _child(d, q):
    try:
        sums, rows = _work(d, "child")
        q.put(("ok", [s.tolist() for s in sums], rows))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put(("error", repr(e), 0))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_runs_what_its_parent_ran(tmp_path):
    x = np.random.default_rng(0).normal(size=(1500, 300)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    sums, rows = _work(tmp_path, "parent")  # the parent's threads started
    assert rows == 1500
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(str(tmp_path), q))
    p.start()
    p.join(120)
    alive = p.is_alive()
    if alive:
        p.kill()
        p.join()
    assert not alive, "the forked child did not finish within 120 s"
    status, child_sums, child_rows = q.get(timeout=10)
    assert status == "ok", child_sums
    assert child_rows == 1500
    for a, b in zip(sums, child_sums):
        assert np.array_equal(a, np.asarray(b, dtype=a.dtype))
