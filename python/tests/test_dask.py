"""tilestream.dask on LocalClusters of 2 and 3 worker processes on 127.0.0.1: every
operation's output is byte-identical to the single-process run, for several rows per
task; a worker killed in the middle of a job leads to a retried task and still an
identical output, with nothing at the output path before the end; a job raises a
worker's peak resident memory by at most its budget + 48 MiB."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tilestream as ts

if os.environ.get("CI") or os.environ.get("TILESTREAM_TEST_ALL"):
    import distributed  # CI and scripts/test install it: a missing package must fail, not skip
else:
    distributed = pytest.importorskip("distributed", reason="tilestream.dask needs distributed")
import tilestream.dask as tsd  # noqa: E402

MiB = 1 << 20


def cluster(n, memory_limit="512MiB"):
    return distributed.LocalCluster(
        n_workers=n, threads_per_worker=1, processes=True, memory_limit=memory_limit,
        host="127.0.0.1", dashboard_address=":0", silence_logs=40,
    )


@pytest.fixture(scope="module", params=[2, 3], ids=["2-workers", "3-workers"])
def client(request):
    with cluster(request.param) as c, distributed.Client(c) as cl:
        yield cl


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    d = np.dtype(dtype)
    if d.kind == "f":
        # a large offset and a spread: a sum in another order differs in the last bits
        return (1000 + rng.normal(size=shape) * 3.7).astype(d)
    return rng.integers(0, 200, size=shape).astype(d)


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


@pytest.mark.parametrize("rows", [None, 256, 700])
def test_reductions_equal_one_process(client, tmp_path, rows):
    cases = [((3000, 96), "float32", 0), ((2000, 77), "float64", None),
             ((1200, 5, 6), "int16", 2), ((300_000,), "float32", 0),
             # several axes: per channel of an NCHW batch, and a kept leading axis
             ((40, 3, 17, 19), "float32", (0, 2, 3)), ((30, 4, 9, 5), "int32", (1, 3))]
    for k, (shape, dtype, axis) in enumerate(cases):
        p = tmp_path / f"x{k}.npy"
        np.save(p, data(shape, dtype, k))
        for op in ["sum", "mean", "min", "max", "var", "std"]:
            one = ts.reduce(p, op, axis, ddof=1, memory="4MiB")
            got = tsd.reduce(p, op, axis, ddof=1, client=client, block_rows=rows,
                             memory="3MiB")
            assert got.dtype == one.dtype and got.shape == one.shape
            assert got.tobytes() == one.tobytes(), (shape, dtype, axis, op, rows)
    # the reductions that leave NaN out, over NaN (a first element among them)
    x = data((3000, 6), "float32", 9)
    x[::13, 1] = np.nan
    x[0, 2] = np.nan
    x[:, 4] = np.nan
    p = tmp_path / "nan.npy"
    np.save(p, x)
    for axis in (0, None):
        for op in ["nansum", "nanmean", "nanmax", "nanstd", "count", "argmin", "argmax"]:
            one = ts.reduce(p, op, axis, ddof=1, memory="4MiB")
            got = tsd.reduce(p, op, axis, ddof=1, client=client, block_rows=rows, memory="3MiB")
            assert got.tobytes() == one.tobytes(), (axis, op, rows)
    # a file in Fortran order with big-endian elements: each share decodes its rows
    f = tmp_path / "fortran_be.npy"
    np.save(f, np.asfortranarray(x).astype(">f4"))
    for axis in (0, 1, None):
        for op in ["sum", "std", "argmax"]:
            one = ts.reduce(p, op, axis, ddof=1, memory="16MiB")
            got = tsd.reduce(f, op, axis, ddof=1, client=client, block_rows=rows, memory="16MiB")
            assert got.tobytes() == one.tobytes(), ("fortran_be", axis, op, rows)
    # complex arrays, NaN in either part of some elements: every share's partials merge
    # into the one run's bytes, variances included (Welford's moments of each part,
    # merged in index order)
    rng = np.random.default_rng(12)
    z = (rng.normal(size=(2500, 5)) * 3 + 100) + 1j * rng.normal(size=(2500, 5))
    z[::17, 1] = complex(np.nan, 1.0)
    z[5::19, 1] = complex(2.0, np.nan)
    for dtype in ("complex128", "complex64"):
        p = tmp_path / f"z_{dtype}.npy"
        np.save(p, z.astype(dtype))
        for axis in (0, None):
            for op in ["var", "std", "nanvar", "nanstd", "nanmean", "sum", "min", "nanargmax"]:
                one = ts.reduce(p, op, axis, ddof=1, memory="4MiB")
                got = tsd.reduce(p, op, axis, ddof=1, client=client, block_rows=rows,
                                 memory="3MiB")
                assert got.tobytes() == one.tobytes(), (dtype, axis, op, rows)
                if op in ("var", "nanvar"):
                    want = getattr(np, op)(z.astype(dtype), axis=axis, ddof=1)
                    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "complex64"
                                               else 1e-12)


@pytest.mark.parametrize("rows", [None, 97, 1000])
def test_outputs_equal_one_process(client, tmp_path, rows):
    x = tmp_path / "x.npy"
    np.save(x, data((1500, 64), "float32", 1))
    u = tmp_path / "u.npy"
    np.save(u, data((1500, 64), "uint16", 2))
    w = tmp_path / "w.npy"
    np.save(w, data((64, 24), "float32", 3))
    img = tmp_path / "img.npy"
    np.save(img, data((600, 200), "uint16", 4))
    bands = tmp_path / "bands.npy"
    np.save(bands, data((3, 100, 80), "float32", 5))
    kw = dict(client=client, block_rows=rows, memory="2MiB")
    jobs = [
        ("affine", lambda o: ts.affine(x, o, 0.5, -3, memory="2MiB"),
         lambda o: tsd.affine(x, o, 0.5, -3, **kw)),
        ("cast", lambda o: ts.cast(x, o, "f16", memory="2MiB"),
         lambda o: tsd.cast(x, o, "f16", **kw)),
        ("map", lambda o: ts.map("(a - u) / (a + u)", o, {"a": x, "u": u}, dtype="f32",
                                 memory="2MiB"),
         lambda o: tsd.map("(a - u) / (a + u)", o, {"a": x, "u": u}, dtype="f32", **kw)),
        ("matmul", lambda o: ts.matmul(x, w, o, memory="2MiB"),
         lambda o: tsd.matmul(x, w, o, **kw)),
        ("standardize", lambda o: ts.standardize(x, o, ddof=1, memory="2MiB"),
         lambda o: tsd.standardize(x, o, ddof=1, **kw)),
        ("gaussian", lambda o: ts.stencil(img, o, "gaussian:sigma=2", dtype="f32",
                                          memory="2MiB"),
         lambda o: tsd.stencil(img, o, "gaussian:sigma=2", dtype="f32", **kw)),
        ("median", lambda o: ts.stencil(img, o, "median:size=5", memory="2MiB"),
         lambda o: tsd.stencil(img, o, "median:size=5", **kw)),
        ("bands", lambda o: ts.stencil(bands, o, "sobel", boundary="nearest", memory="2MiB"),
         lambda o: tsd.stencil(bands, o, "sobel", boundary="nearest", **kw)),
    ]
    for name, single, split in jobs:
        one, two = tmp_path / f"{name}-1.npy", tmp_path / f"{name}-n.npy"
        single(one)
        t = split(two)
        assert t.path == str(two)
        assert same_file(one, two), (name, rows)
    # nothing left beside the outputs but the inputs and outputs
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [], left


def _tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = fh.read()
    return out


@pytest.mark.parametrize("rows", [None, 300])
def test_zarr_outputs_written_by_chunk_rows_equal_one_process(client, tmp_path, rows):
    x = tmp_path / "x.npy"
    np.save(x, data((1000, 96), "float32", 11))
    img = tmp_path / "img.npy"
    np.save(img, data((700, 90), "uint16", 12))
    kw = dict(memory="2MiB")
    # one chunk shape: the stores are byte-identical
    ts.affine(x, tmp_path / "one.zarr", 3.0, -1.0, zarr_chunks="128x48", **kw)
    t = tsd.affine(x, tmp_path / "split.zarr", 3.0, -1.0, zarr_chunks="128x48", client=client,
                   block_rows=rows, **kw)
    assert t.format == "zarr" and t.shape == (1000, 96)
    assert _tree(tmp_path / "one.zarr") == _tree(tmp_path / "split.zarr")
    ts.stencil(img, tmp_path / "g1.zarr", "gaussian:sigma=2", dtype="f32", zarr_chunks="64x90",
               **kw)
    tsd.stencil(img, tmp_path / "gn.zarr", "gaussian:sigma=2", dtype="f32",
                zarr_chunks="64x90", client=client, block_rows=rows, **kw)
    assert _tree(tmp_path / "g1.zarr") == _tree(tmp_path / "gn.zarr")
    # shards too: their inner chunks are laid out in C order
    ts.affine(x, tmp_path / "s1.zarr", 3.0, -1.0, zarr_chunks="64x48", zarr_shard="256x96",
              **kw)
    tsd.affine(x, tmp_path / "sn.zarr", 3.0, -1.0, zarr_chunks="64x48", zarr_shard="256x96",
               client=client, block_rows=rows, **kw)
    assert _tree(tmp_path / "s1.zarr") == _tree(tmp_path / "sn.zarr")
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert left == [], left


def test_map_files_equals_one_process(client, tmp_path):
    scenes = []
    for k in range(6):
        p = tmp_path / f"scene{k}.npy"
        np.save(p, data((120, 90), "uint16", 10 + k))
        scenes.append(p)
    outs = tsd.map_files(ts.stencil, scenes, tmp_path / "out", client=client,
                         filter="box:size=3", dtype="f32", memory="1MiB")
    assert [os.path.basename(o) for o in outs] == [p.name for p in scenes]
    for p, o in zip(scenes, outs):
        ts.stencil(p, tmp_path / "one.npy", "box:size=3", dtype="f32", memory="1MiB")
        assert same_file(tmp_path / "one.npy", o)


def test_objects_and_windows_split_over_the_cluster_equal_one_process(client, tmp_path):
    """Inputs given as URLs (served over HTTP by the object tests' server) and windows
    of compressed inputs (a GeoTIFF's rows, split into windows of them by the tasks) are
    reduced and mapped as one process does; map_files takes URLs as they are."""
    a = data((3000, 96), "float32", 4)
    np.save(tmp_path / "x.npy", a)
    ts.convert(tmp_path / "x.npy", tmp_path / "x.tif", memory="4MiB")
    server = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "object_server.py")
    srv = subprocess.Popen([sys.executable, server, "--root", str(tmp_path)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{int(srv.stdout.readline())}/ok"
        sources = [f"{base}/x.npy", f"{base}/x.tif", ts.open(tmp_path / "x.tif"),
                   ts.open(tmp_path / "x.tif")[100:2900, 5:90],
                   ts.open(f"{base}/x.npy")[7:2999, 1:95]]
        for src in sources:
            one = ts.reduce(src, "mean", 0, memory="4MiB")
            for rows in (256, 700):
                got = tsd.reduce(src, "mean", 0, client=client, block_rows=rows,
                                 memory="4MiB")
                assert got.dtype == one.dtype and got.tobytes() == one.tobytes(), (src, rows)
        want = a[100:2900, 5:90].astype(np.float64).mean(0)
        np.testing.assert_allclose(ts.reduce(sources[3], "mean", 0), want, rtol=1e-12)
        os.link(tmp_path / "x.tif", tmp_path / "y.tif")
        outs = tsd.map_files(ts.convert, [f"{base}/x.npy", f"{base}/y.tif"], tmp_path / "out",
                             client=client, suffix=".npy", memory="4MiB")
        assert [os.path.basename(o) for o in outs] == ["x.npy", "y.npy"]
        for o in outs:
            assert np.array_equal(np.load(o), a)
    finally:
        srv.stdin.close()
        srv.wait(timeout=10)


def test_filters_of_one_row_shares_and_relative_paths(client, tmp_path, monkeypatch):
    # shares of 1 and 2 rows: the reflected rows near the image's edges lie in the
    # neighbours' shares (an asymmetric box of 4 reaches 2 rows up and 1 down)
    monkeypatch.chdir(tmp_path)
    np.save("img.npy", data((40, 30), "float32", 6))
    for filt, boundary in [("box:size=4", "reflect"), ("gaussian:sigma=1.5", "nearest"),
                           ("median:size=3", "reflect"), ("sobel", "constant:7")]:
        for rows in [1, 2]:
            ts.stencil("img.npy", "one.npy", filt, boundary=boundary, memory="1MiB")
            # relative names: the workers run in another directory
            t = tsd.stencil("img.npy", "split.npy", filt, boundary=boundary, client=client,
                            block_rows=rows, memory="1MiB")
            assert t.path == str(tmp_path / "split.npy")
            assert same_file("one.npy", "split.npy"), (filt, boundary, rows)
    with pytest.raises(ValueError, match="boundary wrap needs the whole image"):
        tsd.stencil("img.npy", "w.npy", "box:size=3", boundary="wrap", client=client)
    assert not os.path.exists("w.npy")


def test_map_files_runs_a_pipeline_per_file(client, tmp_path):
    scenes = []
    for k in range(4):
        p = tmp_path / f"s{k}.npy"
        np.save(p, data((80, 60), "uint16", 20 + k))
        scenes.append(p)
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        # the file's own input need not exist: every task replaces it
        'memory = "4MiB"\n[inputs]\nscene = "template.npy"\n'
        '[[steps]]\nop = "map"\nexpr = "(scene - 100) * 0.5"\ndtype = "f32"\nout = "shifted"\n'
        '[[steps]]\nop = "stencil"\ninput = "shifted"\nfilter = "box:size=3"\nout = "smooth"\n'
        '[outputs]\nsmooth = "smooth.npy"\n'
    )
    outs = tsd.map_files(pipe, scenes, tmp_path / "out", client=client, memory="2MiB")
    for p, o in zip(scenes, outs):
        ts.run(pipe, inputs={"scene": p}, outputs={"smooth": tmp_path / "one.npy"},
               memory="2MiB")
        assert same_file(tmp_path / "one.npy", o)
    with pytest.raises(ValueError, match="has no input `nope`"):
        ts.run(pipe, inputs={"nope": scenes[0]})


@pytest.mark.parametrize("rows", [None, 1, 7])
def test_your_own_function_by_shares_of_rows_equals_one_process(client, tmp_path, rows):
    import scipy.ndimage as ndi

    img = data((60, 45), "float32", 30)
    np.save(tmp_path / "img.npy", img)
    smooth = lambda b: ndi.gaussian_filter(b, 1.5, mode="wrap")  # noqa: E731
    ts.map_overlap(smooth, tmp_path / "img.npy", out=tmp_path / "one.npy", halo=6,
                   boundary="wrap", memory="1MiB")
    t = tsd.map_overlap(smooth, tmp_path / "img.npy", out=tmp_path / "split.npy", halo=6,
                        boundary="wrap", client=client, block_rows=rows, memory="1MiB")
    assert t.shape == img.shape
    assert same_file(tmp_path / "one.npy", tmp_path / "split.npy"), rows
    np.testing.assert_allclose(np.load(tmp_path / "split.npy"),
                               ndi.gaussian_filter(img, 1.5, mode="wrap"), rtol=1e-6)
    # bands whole in every block, another number of them out, two inputs aligned
    scene = data((4, 30, 20), "uint16", 31)
    mask = data((30, 20), "uint8", 32) > 100
    np.save(tmp_path / "scene.npy", scene)
    np.save(tmp_path / "mask.npy", mask)
    w = np.arange(8, dtype=np.float32).reshape(2, 4)

    def model(b, m):
        return np.einsum("kb,bhw->khw", w, b.astype(np.float32)) * m

    ts.map_blocks(model, tmp_path / "scene.npy", tmp_path / "mask.npy",
                  out=tmp_path / "one2.npy", memory="1MiB")
    tsd.map_blocks(model, tmp_path / "scene.npy", tmp_path / "mask.npy",
                   out=tmp_path / "split2.npy", client=client, block_rows=rows, memory="1MiB")
    assert same_file(tmp_path / "one2.npy", tmp_path / "split2.npy"), rows
    assert np.load(tmp_path / "split2.npy").shape == (2, 30, 20)


def test_your_own_function_failing_on_the_cluster_leaves_nothing(client, tmp_path):
    np.save(tmp_path / "x.npy", data((40, 8), "float32"))

    here = os.getpid()

    def bad(b):  # measured here, fails on the workers
        if os.getpid() != here:
            raise ZeroDivisionError("no luck")
        return b

    with pytest.raises(ZeroDivisionError, match="no luck"):
        tsd.map_blocks(bad, tmp_path / "x.npy", out=tmp_path / "o.npy", client=client,
                       memory="1MiB")
    with pytest.raises(ValueError, match="write a .npy output"):
        tsd.map_blocks(lambda b: b, tmp_path / "x.npy", out=tmp_path / "o.tif",
                       client=client)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["x.npy"]


@pytest.mark.parametrize("rows", [None, 97])
def test_histograms_equal_one_process_and_numpy(client, tmp_path, rows):
    def same(got, one):
        assert got[0].dtype == one[0].dtype and got[0].shape == one[0].shape
        assert got[0].tobytes() == one[0].tobytes()
        assert got[1].dtype == one[1].dtype and got[1].tobytes() == one[1].tobytes()

    kw = dict(client=client, block_rows=rows, memory="3MiB")
    x = data((1200, 5, 6), "float32", 3)
    p = tmp_path / "x.npy"
    np.save(p, x)
    # over everything, the range the whole input's (a split reduction's extremes)
    got = tsd.histogram(p, 17, **kw)
    same(got, ts.histogram(p, 17, memory="4MiB"))
    want = np.histogram(x, 17)
    assert (got[0] == want[0]).all() and got[1].tobytes() == want[1].tobytes()
    # a given range, explicit edges
    same(tsd.histogram(p, 9, (995, 1003), **kw), ts.histogram(p, 9, (995, 1003)))
    same(tsd.histogram(p, [990, 999, 1000, 1001.5, 1010], **kw),
         ts.histogram(p, [990, 999, 1000, 1001.5, 1010]))
    # per position of axis 1, counted over the rows: each its own range
    got = tsd.histogram(p, 11, axis=(0, 2), **kw)
    same(got, ts.histogram(p, 11, axis=(0, 2)))
    for j in range(5):
        want = np.histogram(x[:, j, :], 11)
        assert (got[0][j] == want[0]).all() and got[1][j].tobytes() == want[1].tobytes()
    # each row its own histograms: the shares' stacked
    same(tsd.histogram(p, 4, axis=(1, 2), **kw), ts.histogram(p, 4, axis=(1, 2)))
    same(tsd.histogram(p, 4, (999, 1001), axis=2, **kw), ts.histogram(p, 4, (999, 1001), axis=2))
    # 64-bit integers beyond 2^53: the extremes travel exactly
    u = (np.uint64(1 << 63) + data((900, 3), "int64", 4).astype(np.uint64) * np.uint64(10**12))
    q = tmp_path / "u.npy"
    np.save(q, u)
    got = tsd.histogram(q, 7, **kw)
    same(got, ts.histogram(q, 7))
    assert (got[0] == np.histogram(u, 7)[0]).all()
    # nodata left out, an output with nothing valid given numpy's [0, 1]
    z = data((800, 3), "int16", 5)
    z[::7] = -9999
    z[:, 2] = -9999
    r = tmp_path / "z.npy"
    np.save(r, z)
    got = tsd.histogram(r, 6, axis=0, nodata=-9999, **kw)
    same(got, ts.histogram(r, 6, axis=0, nodata=-9999))
    for j in range(3):
        want = np.histogram(z[:, j][z[:, j] != -9999], 6)
        assert (got[0][j] == want[0]).all() and got[1][j].tobytes() == want[1].tobytes()
    # an automatic range over NaN is refused, as numpy raises
    x[5, 1, 1] = np.nan
    np.save(p, x)
    with pytest.raises(ValueError, match="not finite"):
        tsd.histogram(p, 10, **kw)


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")
@pytest.mark.parametrize("rows", [None, 70, 500])
def test_quantiles_equal_one_process_and_numpy(client, tmp_path, rows):
    """Quantiles over the rows are selected in passes whose counts the tasks add up; over
    inner axes each task takes its rows' own: the bytes of one process either way, and
    numpy's values."""
    kw = dict(client=client, block_rows=rows, memory="3MiB")

    def same(got, one):
        assert got.dtype == one.dtype and got.shape == one.shape
        assert got.tobytes() == one.tobytes()

    x = data((1200, 5, 6), "float32", 5)
    x[7, 2, 3] = np.nan
    x[::13, 1, :] = np.nan
    p = tmp_path / "x.npy"
    np.save(p, x)
    for op, q, axis, method in [
        ("nanquantile", [0.02, 0.5, 0.98], None, None),
        ("nanpercentile", 50, 0, "nearest"),
        ("nanmedian", None, (0, 2), None),
        ("quantile", [0.25, 1.0], (0, 1), "lower"),
        ("nanquantile", 0.3, (1, 2), "midpoint"),
        ("nanpercentile", [2, 98], 2, None),
    ]:
        got = tsd.reduce(p, op, axis, q=q, method=method, **kw)
        same(got, ts.reduce(p, op, axis, q=q, method=method, memory="64MiB"))
        want = getattr(np, op)(x, axis=axis, **({} if q is None else {"q": q}),
                               **({} if method is None else {"method": method}))
        np.testing.assert_array_equal(got, want)
    # keepdims, and an integer input with a nodata value (8-bit: one pass)
    same(tsd.reduce(p, "nanmedian", (0, 2), keepdims=True, **kw),
         ts.reduce(p, "nanmedian", (0, 2), keepdims=True))
    same(tsd.reduce(p, "quantile", 0, q=[0.5], keepdims=True, **kw),
         ts.reduce(p, "quantile", 0, q=[0.5], keepdims=True))
    z = data((900, 4), "uint8", 6)
    z[::5, 1] = 7
    r = tmp_path / "z.npy"
    np.save(r, z)
    got = tsd.reduce(r, "nanpercentile", 0, q=[2, 98], method="higher", nodata=7, **kw)
    same(got, ts.reduce(r, "nanpercentile", 0, q=[2, 98], method="higher", nodata=7))
    for j in range(4):
        col = z[:, j][z[:, j] != 7]
        assert (got[:, j] == np.percentile(col, [2, 98], method="higher")).all()
    # 64-bit floats: four passes of counts (more with a task budget of narrow digits)
    f = tmp_path / "f.npy"
    np.save(f, data((700, 3), "float64", 7))
    same(tsd.reduce(f, "median", **kw), ts.reduce(f, "median"))
    # complex medians: 128-bit keys, and a column holding NaN whose greatest NaN element
    # (numpy's median there) may come from any share: the shares' picks are folded, not
    # added
    z = (data((700, 3), "float64", 8) + 1j * data((700, 3), "float64", 9)).astype("complex128")
    z[[3, 350, 690], 1] = [complex(np.nan, 5), complex(2, np.nan), complex(np.nan, -1)]
    z[::7, 2] = complex(np.nan, 0)
    zp = tmp_path / "z.npy"
    np.save(zp, z)
    for op in ("median", "nanmedian"):
        for axis in (0, None):
            got = tsd.reduce(zp, op, axis, **kw)
            same(got, ts.reduce(zp, op, axis))
            assert got.tobytes() == np.asarray(getattr(np, op)(z, axis=axis)).tobytes(), op


def test_bad_arguments_are_refused_in_one_line(client, tmp_path):
    p = tmp_path / "x.npy"
    np.save(p, data((100, 4), "float32"))
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        tsd.reduce(p, "sum", 5, client=client)
    with pytest.raises(ValueError, match="unknown reduction"):
        tsd.reduce(p, "mode", 0, client=client, memory="1MiB")
    with pytest.raises(ValueError, match="median takes no q"):
        tsd.reduce(p, "median", 0, q=0.5, client=client, memory="1MiB")
    with pytest.raises(ValueError, match="q and method are for quantile"):
        tsd.reduce(p, "mean", 0, q=0.5, client=client, memory="1MiB")
    # a failed job leaves nothing behind
    with pytest.raises(ValueError, match="unknown function|expression"):
        tsd.map("nosuch(a)", tmp_path / "o.npy", {"a": p}, client=client, memory="1MiB")
    assert sorted(q.name for q in tmp_path.iterdir()) == ["x.npy"]


def _slow():
    time.sleep(0.4)


def test_a_killed_worker_is_retried_and_the_output_is_identical(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, data((4000, 64), "float32", 7))
    one = tmp_path / "one.npy"
    ts.affine(x, one, 2.0, 1.0, memory="2MiB")
    dest = tmp_path / "split.npy"
    with cluster(2) as c, distributed.Client(c) as cl:
        pids = list(cl.run(os.getpid).values())
        seen = {}

        def kill_one():
            # once tasks are running: kill a worker process outright
            time.sleep(1.0)
            seen["before"] = dest.exists()
            os.kill(pids[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_one)
        killer.start()
        tsd.affine(x, dest, 2.0, 1.0, client=cl, block_rows=250, memory="2MiB", _hook=_slow)
        killer.join()
        now = list(cl.run(os.getpid).values())
    assert pids[0] not in now, "the worker was not killed"
    assert seen["before"] is False, "the output appeared before the job ended"
    assert same_file(one, dest)
    # the same for a reduction (1024 columns: 128 rows a summation block, 16 tasks)
    np.save(x, data((4096, 1024), "float32", 9))
    with cluster(2) as c, distributed.Client(c) as cl:
        pids = list(cl.run(os.getpid).values())
        killer = threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL))
        killer.start()
        got = tsd.reduce(x, "std", 0, client=cl, block_rows=256, memory="2MiB", _hook=_slow)
        killer.join()
        assert pids[1] not in list(cl.run(os.getpid).values())
    assert got.tobytes() == ts.reduce(x, "std", 0, memory="2MiB").tobytes()


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak():
    """Resets this process's peak resident memory (VmHWM) to its current resident memory
    and returns that: ru_maxrss cannot be used, a worker inherits its parent's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS:")


def _peak():
    return _status("VmHWM:")


def test_a_job_raises_worker_peak_memory_by_at_most_budget_plus_48_MiB(tmp_path):
    # 192 MiB of input, 96 MiB a task, 24 MiB of budget: a task that mapped or held its
    # share would grow its worker by twice what is allowed
    x = tmp_path / "x.npy"
    np.save(x, data((48 * 1024, 1024), "float32", 8))
    budget = 24 * MiB
    with cluster(2, memory_limit="1GiB") as c, distributed.Client(c) as cl:
        before = cl.run(_reset_peak)
        tsd.reduce(x, "mean", 0, client=cl, memory=budget, block_rows=24 * 1024)
        # quantiles: the passes' counts held and returned by each task
        tsd.reduce(x, "median", 0, client=cl, memory=budget, block_rows=24 * 1024)
        tsd.reduce(x, "percentile", q=[2, 98], client=cl, memory=budget, block_rows=24 * 1024)
        tsd.affine(x, tmp_path / "y.npy", 0.5, 1.0, client=cl, memory=budget,
                   block_rows=24 * 1024)
        after = cl.run(_peak)
    for w, peak in after.items():
        grew = peak - before[w]
        print(f"worker {w}: {before[w] / MiB:.0f} MiB before, peak {peak / MiB:.0f} MiB")
        assert grew <= budget + 48 * MiB, f"worker {w}: peak RSS grew by {grew / MiB:.1f} MiB"


_REPLACE = r"""
import sys
import distributed
import tilestream.dask as tsd

src, dest = sys.argv[1], sys.argv[2]
with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                              dashboard_address=":0", silence_logs=40) as c, \
        distributed.Client(c) as cl:
    print("ready", flush=True)
    tsd.affine(src, dest, 1.0, 0.0, zarr_chunks="16x16", zarr_compress="none", client=cl,
               memory="64MiB")
    print("done", flush=True)
"""


def test_a_zarr_store_replaced_by_a_killed_cluster_job_is_the_old_or_the_new_whole(tmp_path):
    old = data((480, 400), "float32", 1)
    new = data((480, 400), "float32", 2)
    np.save(tmp_path / "old.npy", old)
    np.save(tmp_path / "new.npy", new)
    dest = tmp_path / "s.zarr"
    script = tmp_path / "replace.py"
    script.write_text(_REPLACE)

    def start(kill_at=None):
        env = dict(os.environ)
        if kill_at:
            env["TILESTREAM_FAULT_KILL_AT"] = kill_at
        p = subprocess.Popen([sys.executable, str(script), str(tmp_path / "new.npy"), str(dest)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             start_new_session=True, env=env)
        assert p.stdout.readline().strip() == "ready"
        return p

    def reset():
        ts.convert(tmp_path / "old.npy", dest, zarr_chunks="16x16", zarr_compress="none")

    # how long the job takes once its cluster is up, uninterrupted
    reset()
    p = start()
    t0 = time.monotonic()
    assert p.stdout.readline().strip() == "done"
    whole = time.monotonic() - t0
    p.wait(timeout=60)
    assert np.array_equal(np.asarray(ts.open(dest)), new)
    seen = {"old": 0, "new": 0}
    # killed ever later, from the job's start, each kill a quarter later than the last
    # (at least 15 ms), until a kill comes after the finished store took the old one's
    # place: the kills sweep through the replacement whatever the job takes this time
    # (jobs vary: one ran in half the time of the job timed above, another in twice)
    delay = 0.0
    for k in range(60):
        reset()
        p = start()
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=60)
        got = np.asarray(ts.open(dest))
        if np.array_equal(got, old):
            seen["old"] += 1
        else:
            assert np.array_equal(got, new), f"kill {k} after {delay:.3f} s: neither store whole"
            seen["new"] += 1
            break
        delay = delay * 1.25 + 0.015
    # killed at the exact points of the replacement: the new store is in place, whole
    for point in ["replace-exchanged", "replace-unlocked"]:
        reset()
        p = start(point)
        p.wait(timeout=60)
        assert p.returncode == -signal.SIGKILL, (point, p.returncode)
        assert np.array_equal(np.asarray(ts.open(dest)), new), point
        reset()  # and a store a killed run left its lock in is replaced again
        assert np.array_equal(np.asarray(ts.open(dest)), old), point
    print(f"killed cluster jobs: {seen}, the job took {whole:.3f} s")
    assert seen["old"] > 0 and seen["new"] == 1, seen
