"""Your own functions over blocks (map_blocks, map_overlap, reduce_blocks) against numpy
and scipy on the whole array, at budgets from a few hundred KiB to 64 MiB, over every
input format; exceptions, Ctrl-C, resume and the measured working memory."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.ndimage as ndi

import tilestream as ts

BUDGETS = ["256KiB", "1MiB", "64MiB"]


def image(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 10).astype(dtype)


def formats(tmp_path, a):
    """The same array as .npy, raw, GeoTIFF (compressed, tiled) and Zarr (chunked)."""
    np.save(tmp_path / "a.npy", a)
    a.tofile(tmp_path / "a.raw")
    ts.convert(tmp_path / "a.npy", tmp_path / "a.tif", tiff_compress="deflate")
    ts.convert(tmp_path / "a.npy", tmp_path / "a.zarr", zarr_chunks="16x24")
    return [
        ts.open(tmp_path / "a.npy"),
        ts.open(tmp_path / "a.raw", shape=a.shape, dtype=a.dtype),
        ts.open(tmp_path / "a.tif"),
        ts.open(tmp_path / "a.zarr"),
    ]


@pytest.mark.parametrize("budget", BUDGETS)
def test_map_blocks_elementwise_equals_numpy_over_every_format(tmp_path, budget):
    a = image((120, 70))
    for i, t in enumerate(formats(tmp_path, a)):
        out = tmp_path / f"o{i}.npy"
        r = ts.map_blocks(lambda b: np.sqrt(np.abs(b)) * 2 - 1, t, out=out, memory=budget)
        assert np.array_equal(np.load(out), np.sqrt(np.abs(a)) * 2 - 1), t.format
        assert r.dtype == np.float32 and r.report.tiles >= 1


def test_map_blocks_changes_dtype_and_bands_and_writes_any_format(tmp_path):
    scene = image((4, 60, 50), "uint16", 1) % 1000
    np.save(tmp_path / "s.npy", scene.astype("uint16"))
    scene = scene.astype("uint16")
    w = np.arange(40, dtype=np.float32).reshape(10, 4) / 7

    def model(b):  # a (4, h, w) block to (10, h, w) scores
        return np.einsum("kb,bhw->khw", w, b.astype(np.float32))

    want = model(scene)
    for name in ["o.npy", "o.tif", "o.zarr"]:
        out = tmp_path / name
        r = ts.map_blocks(model, tmp_path / "s.npy", out=out, memory="2MiB")
        assert r.shape == (10, 60, 50) and r.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(r), want, err_msg=name)
    # a declared dtype casts what the function returns (same kind), a declared shape checks
    r = ts.map_blocks(model, tmp_path / "s.npy", out=tmp_path / "h.npy", dtype="float16",
                      shape=(10, 60, 50), memory="2MiB")
    assert np.array_equal(np.load(tmp_path / "h.npy"), want.astype(np.float16))
    with pytest.raises(ValueError, match=r"shape=\(3, 60, 50\)"):
        ts.map_blocks(model, tmp_path / "s.npy", out=tmp_path / "x.npy", shape=(3, 60, 50))
    with pytest.raises(TypeError, match="does not cast"):
        ts.map_blocks(model, tmp_path / "s.npy", out=tmp_path / "x.npy", dtype="int16")
    assert not (tmp_path / "x.npy").exists()


def test_map_blocks_several_inputs_and_a_fixed_block(tmp_path):
    a, b = image((90, 40), seed=2), image((90, 40), seed=3)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    shapes = []

    def f(x, y):
        shapes.append(x.shape)
        assert not x.flags["WRITEABLE"]  # the blocks are read-only
        return x * y + 1

    ts.map_blocks(f, tmp_path / "a.npy", tmp_path / "b.npy", out=tmp_path / "o.npy",
                  block=(32, 32), memory="1MiB")
    assert np.array_equal(np.load(tmp_path / "o.npy"), a * b + 1)
    assert (32, 32) in shapes and (26, 8) in shapes  # the blocks cut at the edges


SCIPY_FILTERS = [
    ("gaussian", lambda m, c: (lambda b: ndi.gaussian_filter(b, 2.0, mode=m, cval=c)), 8),
    ("median", lambda m, c: (lambda b: ndi.median_filter(b, size=5, mode=m, cval=c)), 2),
    ("uniform", lambda m, c: (lambda b: ndi.uniform_filter(b, size=7, mode=m, cval=c)), 3),
]
MODES = {"reflect": "reflect", "nearest": "nearest", "wrap": "grid-wrap", "constant": "constant"}


@pytest.mark.parametrize("name,make,halo", SCIPY_FILTERS, ids=[f[0] for f in SCIPY_FILTERS])
@pytest.mark.parametrize("boundary", list(MODES))
def test_map_overlap_of_scipy_filters_equals_scipy_on_the_whole_array(tmp_path, name, make,
                                                                      halo, boundary):
    a = image((150, 90), "float64", 4)
    np.save(tmp_path / "a.npy", a)
    cval = 1.5 if boundary == "constant" else 0.0
    # inside a block the filter's own padding is never used: the halo is what it sees
    fn = make("reflect", 0.0)
    want = make(MODES[boundary], cval)(a)
    outs = []
    for budget in BUDGETS:
        out = tmp_path / f"{budget}.npy"
        r = ts.map_overlap(fn, tmp_path / "a.npy", out=out, halo=halo, boundary=boundary,
                           cval=cval, memory=budget)
        outs.append(out.read_bytes())
        got = np.load(out)
        if name == "uniform":
            # scipy's uniform filter keeps a running sum along each line: its last bits
            # depend on where the line starts, in a block as in the whole array
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{budget} {r.report.tiles}")
    if name != "uniform":
        assert outs[0] == outs[-1]


def test_map_overlap_with_no_boundary_gives_smaller_edge_blocks(tmp_path):
    a = image((64, 48), seed=5)
    np.save(tmp_path / "a.npy", a)
    seen = []

    def f(b):
        seen.append(b.shape)
        return ndi.uniform_filter(b, 3, mode="constant")

    ts.map_overlap(f, tmp_path / "a.npy", out=tmp_path / "o.npy", halo=1, boundary="none",
                   block=(16, 16))
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"),
                               ndi.uniform_filter(a, 3, mode="constant"), rtol=1e-6)
    assert (17, 17) in seen and (18, 18) in seen  # a corner block, an inner one


def test_map_overlap_on_1d_and_3d_inputs(tmp_path):
    v = image((5000,), "float64", 6)
    np.save(tmp_path / "v.npy", v)
    ts.map_overlap(lambda b: ndi.gaussian_filter1d(b, 3.0), tmp_path / "v.npy",
                   out=tmp_path / "vo.npy", halo=12, memory="256KiB")
    np.testing.assert_array_equal(np.load(tmp_path / "vo.npy"), ndi.gaussian_filter1d(v, 3.0))
    s = image((3, 80, 60), "float32", 7)
    np.save(tmp_path / "s.npy", s)
    ts.map_overlap(lambda b: ndi.gaussian_filter(b, (0, 1.5, 1.5)), tmp_path / "s.npy",
                   out=tmp_path / "so.npy", halo=(0, 6, 6), memory="256KiB")
    np.testing.assert_array_equal(np.load(tmp_path / "so.npy"), ndi.gaussian_filter(s, (0, 1.5, 1.5)))
    with pytest.raises(ValueError, match="bands"):
        ts.map_overlap(lambda b: b, tmp_path / "s.npy", out=tmp_path / "x.npy", halo=(1, 1, 1))


@pytest.mark.parametrize("budget", ["4MiB", "16MiB", "64MiB"])
def test_reduce_blocks_histogram_and_sum_equal_numpy_and_are_identical_at_every_budget(
        tmp_path, budget):
    a = image((700, 400), "float32", 8)
    np.save(tmp_path / "a.npy", a)
    edges = np.linspace(-40, 40, 33)
    hist = ts.reduce_blocks(lambda b: np.histogram(b, edges)[0], lambda ps: np.sum(ps, axis=0),
                            tmp_path / "a.npy", memory=budget)
    assert np.array_equal(hist, np.histogram(a, edges)[0])
    total = ts.reduce_blocks(lambda b: b.astype(np.float64).sum(), sum, tmp_path / "a.npy",
                             memory=budget)
    assert total == pytest.approx(a.astype(np.float64).sum(), rel=1e-12)
    # column sums: blocks keep every column (axis=0 reduces the rows only)
    cols = ts.reduce_blocks(lambda b: b.sum(0, dtype=np.float64), lambda ps: np.sum(ps, 0),
                            tmp_path / "a.npy", axis=0, memory=budget)
    np.testing.assert_allclose(cols, a.sum(0, dtype=np.float64), rtol=1e-12)
    key = tmp_path.parent / f"sum-{a.dtype}.bin"
    got = np.float64(total).tobytes() + cols.tobytes()
    if key.exists():  # an earlier budget's result: the same bytes
        assert key.read_bytes() == got
    key.write_bytes(got)


def test_reduce_blocks_combines_in_an_order_fixed_by_the_shape(tmp_path):
    a = image((3000, 100), "float32", 9)
    np.save(tmp_path / "a.npy", a)
    orders = []
    for budget in BUDGETS:
        seen = []

        def chunk(b):
            return [float(b[0, 0])]

        def combine(parts):
            out = [x for p in parts for x in p]
            seen.append(len(parts))
            return out

        firsts = ts.reduce_blocks(chunk, combine, tmp_path / "a.npy", memory=budget,
                                  block=(50, 100))
        assert firsts == [float(a[r, 0]) for r in range(0, 3000, 50)]
        orders.append(seen)
    assert orders[0] == orders[1] == orders[2] == [16, 16, 16, 12, 4]


def test_an_exception_in_the_function_reaches_the_caller_and_nothing_is_written(tmp_path):
    np.save(tmp_path / "a.npy", image((200, 30)))

    class Boom(Exception):
        pass

    calls = []

    def f(b):
        calls.append(1)
        if len(calls) == 5:  # two calls measure; this is the run's third block
            raise Boom("bad block")
        return b

    with pytest.raises(Boom, match="bad block") as e:
        ts.map_blocks(f, tmp_path / "a.npy", out=tmp_path / "o.zarr", block=(20, 30),
                      zarr_chunks="20x30")
    if sys.version_info >= (3, 11):
        assert any("block 2" in n for n in e.value.__notes__)
    assert sorted(os.listdir(tmp_path)) == ["a.npy"]


def test_a_function_that_needs_8x_its_block_is_replanned_or_refused(tmp_path):
    a = image((400, 256), seed=10)
    np.save(tmp_path / "a.npy", a)

    def greedy(b):
        tmp = [np.ones_like(b) for _ in range(8)]  # 8x the block, allocated and touched
        return b * tmp[7]

    # measured on a first block: planned with it, so the blocks are smaller
    light = ts.plan(ts.map_blocks, lambda b: b + 1, tmp_path / "a.npy", out=tmp_path / "o.npy",
                    memory="1MiB")
    heavy = ts.plan(ts.map_blocks, greedy, tmp_path / "a.npy", out=tmp_path / "o.npy",
                    memory="1MiB")
    assert heavy.fits and heavy.working_bytes >= 8 * heavy.block_bytes
    assert heavy.tile_shape[0] * heavy.tile_shape[1] < light.tile_shape[0] * light.tile_shape[1]
    assert heavy.peak <= heavy.budget
    ts.map_blocks(greedy, tmp_path / "a.npy", out=tmp_path / "o.npy", memory="1MiB")
    assert np.array_equal(np.load(tmp_path / "o.npy"), a)
    # declared lighter than it is: refused before any block is written
    with pytest.raises(ts.BudgetError, match=r"working=") as e:
        ts.map_blocks(greedy, tmp_path / "a.npy", out=tmp_path / "p.npy", memory="1MiB",
                      working=1.0)
    assert "declare working=1" in str(e.value) and not (tmp_path / "p.npy").exists()


@pytest.mark.parametrize("k, stop", [(100, 2), (20, 3)])
def test_a_block_that_allocates_more_than_measured_stops_the_run(tmp_path, k, stop):
    # blocks of 50 x 64 f32 (12.8 KB): 100 of them go more than 1 MiB past the plan and
    # stop the run at once; 20 go less far, which other threads' allocations could
    # explain once, and stop it on the second block in a row
    np.save(tmp_path / "a.npy", image((400, 64), seed=11))
    calls = []

    def grows(b):
        calls.append(1)
        n = 1 if len(calls) < 5 else k  # light on the measured blocks, heavy later
        tmp = np.ones((n,) + b.shape, b.dtype)
        return b + tmp[-1] - 1

    with pytest.raises(ts.BudgetError, match=rf"block {stop},.*declare working=") as e:
        ts.map_blocks(grows, tmp_path / "a.npy", out=tmp_path / "o.npy", block=(50, 64),
                      memory="4MiB")
    assert "measured" in str(e.value)
    assert not (tmp_path / "o.npy").exists()


def test_ctrl_c_and_resume_give_the_same_bytes(tmp_path):
    a = image((4000, 200), seed=12)
    np.save(tmp_path / "a.npy", a)
    out = tmp_path / "o.npy"
    # the same function (by name) in both runs: a run of another one does not resume
    script = textwrap.dedent(f"""
        import signal, sys, time, numpy as np, tilestream as ts
        signal.signal(signal.SIGINT, signal.default_int_handler)
        slow_down = sys.argv[1] == "first"
        n = []
        def triple(b):
            n.append(1)
            if slow_down:
                if len(n) == 5:
                    print("running", flush=True)
                time.sleep(0.05)
            return b * 3
        try:
            t = ts.map_blocks(triple, {str(tmp_path / 'a.npy')!r}, out=sys.argv[2],
                              block=(40, 200), memory="1MiB", resume=sys.argv[1] == "resume")
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(7)
        print("finished", t.report.resumed_tiles, t.report.tiles, flush=True)
    """)
    run = [sys.executable, "-c", script]
    p = subprocess.Popen(run + ["first", str(out)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "running"
    p.send_signal(signal.SIGINT)
    rest = p.communicate(timeout=60)[0]
    assert p.returncode == 7 and "interrupted" in rest, (p.returncode, rest)
    assert not out.exists()
    r = subprocess.run(run + ["resume", str(out)], capture_output=True, text=True, timeout=60)
    said = r.stdout.split()
    assert said[0] == "finished" and 0 < int(said[1]) < int(said[2]), (r.stdout, r.stderr)
    w = subprocess.run(run + ["whole", str(tmp_path / "w.npy")], capture_output=True, text=True,
                       timeout=60)
    assert w.stdout.split()[:2] == ["finished", "0"], w.stderr
    assert out.read_bytes() == (tmp_path / "w.npy").read_bytes()
    assert np.array_equal(np.load(out), a * 3)
    # another function over the same output is not taken for the interrupted one
    with pytest.raises(ValueError, match="another operation"):
        p = subprocess.Popen(run + ["first", str(tmp_path / "v.npy")], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "running"
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        ts.map_blocks(lambda b: b * 3, tmp_path / "a.npy", out=tmp_path / "v.npy",
                      block=(40, 200), memory="1MiB", resume=True)


def test_several_calls_at_once_run_together_and_give_the_same_bytes(tmp_path):
    import threading

    a = image((600, 200), "float32", 12)
    np.save(tmp_path / "a.npy", a)
    want = ndi.gaussian_filter(a, 2, mode="nearest")
    # a first call of the run waits until another has started: only calls at once can
    started = []
    lock, other = threading.Lock(), threading.Event()

    def f(b):
        with lock:
            started.append(b.shape)
            n = len(started)
        if n == 3:  # two calls measured the function; this is the run's first
            assert other.wait(60), "no other call ran beside the first"
        elif n > 3:
            other.set()
        return ndi.gaussian_filter(b, 2, mode="nearest")

    one = ts.map_overlap(lambda b: ndi.gaussian_filter(b, 2, mode="nearest"),
                         tmp_path / "a.npy", out=tmp_path / "one.npy", halo=8,
                         boundary="nearest", memory="1MiB")
    three = ts.map_overlap(f, tmp_path / "a.npy", out=tmp_path / "three.npy", halo=8,
                           boundary="nearest", memory="1MiB", threads=3)
    assert other.is_set() and one.report.tiles > 3
    got = np.load(tmp_path / "three.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(got, np.load(tmp_path / "one.npy"))
    plan = ts.plan(ts.map_overlap, f, tmp_path / "a.npy", out=tmp_path / "p.npy", halo=8,
                   memory="1MiB", threads=3)
    assert plan.calls == 3 and "3 at once" in str(plan)
    # each call holds its own padded block and working memory: smaller blocks
    single = ts.plan(ts.map_overlap, f, tmp_path / "a.npy", out=tmp_path / "p.npy", halo=8,
                     memory="1MiB")
    assert plan.tile_shape[0] * plan.tile_shape[1] < single.tile_shape[0] * single.tile_shape[1]
    # a reduction's partials are combined in block order whatever order the calls end in
    sums = [ts.reduce_blocks(lambda b: b.astype(np.float64).sum(0), lambda ps: np.sum(ps, 0),
                             tmp_path / "a.npy", threads=t, memory="8MiB").tobytes()
            for t in (None, 2, 4)]
    assert sums[0] == sums[1] == sums[2]


def test_an_exception_among_calls_at_once_reaches_the_caller(tmp_path):
    a = image((400, 30))
    np.save(tmp_path / "a.npy", a)

    class Boom(Exception):
        pass

    def f(b):
        if b[0, 0] == a[100, 0]:  # the block of rows 100:120
            raise Boom("bad block")
        return b

    with pytest.raises(Boom, match="bad block"):
        ts.map_blocks(f, tmp_path / "a.npy", out=tmp_path / "o.npy", block=(20, 30),
                      threads=3, memory="1MiB")
    assert sorted(os.listdir(tmp_path)) == ["a.npy"]
    with pytest.raises(ValueError, match="threads=0"):
        ts.map_blocks(f, tmp_path / "a.npy", out=tmp_path / "o.npy", threads=0)


def test_blocks_are_views_of_the_engines_buffers_and_one_kept_past_its_call_stops_the_run(
        tmp_path):
    a = image((300, 40), seed=13)
    np.save(tmp_path / "a.npy", a)
    seen = []

    def look(b):
        seen.append((b.flags.writeable, b.flags.owndata))
        return b * 2

    ts.map_blocks(look, tmp_path / "a.npy", out=tmp_path / "o.npy", memory="1MiB")
    assert np.array_equal(np.load(tmp_path / "o.npy"), a * 2)
    assert set(seen) == {(False, False)}, "read-only views, no copy of their own"
    # the identity: the result is the block itself, copied into the output, never kept
    ts.map_blocks(lambda b: b, tmp_path / "a.npy", out=tmp_path / "i.npy", memory="1MiB")
    assert np.array_equal(np.load(tmp_path / "i.npy"), a)
    # a function keeping its block: refused after that block, the kept array still valid
    kept = []

    def keep(b):
        kept.append(b)
        return b

    with pytest.raises(RuntimeError, match=r"kept block \d+'s input arrays.*b\.copy\(\)"):
        ts.map_blocks(keep, tmp_path / "a.npy", out=tmp_path / "k.npy", block=(50, 40),
                      memory="1MiB")
    assert not (tmp_path / "k.npy").exists()
    last = kept[-1]
    assert np.array_equal(last, a[:last.shape[0]]) or any(
        np.array_equal(last, a[r:r + last.shape[0]]) for r in range(0, 300, 50))
    # a reduction whose partials are views of the blocks: the same
    with pytest.raises(RuntimeError, match="b.copy()"):
        ts.reduce_blocks(lambda b: b[0], lambda ps: ps[0], tmp_path / "a.npy")
    assert ts.reduce_blocks(lambda b: b[0].copy(), lambda ps: ps[0], tmp_path / "a.npy") \
        .tolist() == a[0].tolist()


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    np.save(tmp_path / "a.npy", image((20, 20)))
    np.save(tmp_path / "b.npy", image((20, 21)))
    with pytest.raises(ValueError, match="share their rows and columns"):
        ts.map_blocks(np.add, tmp_path / "a.npy", tmp_path / "b.npy", out=tmp_path / "o.npy")
    with pytest.raises(ValueError, match="boundary="):
        ts.map_overlap(lambda b: b, tmp_path / "a.npy", out=tmp_path / "o.npy", boundary="mirror")
    with pytest.raises(ValueError, match="keeps the blocks' rows and columns"):
        ts.map_blocks(lambda b: b[::2], tmp_path / "a.npy", out=tmp_path / "o.npy")
    with pytest.raises(ValueError, match="also an input"):
        ts.map_blocks(lambda b: b, tmp_path / "a.npy", out=tmp_path / "a.npy")
    with pytest.raises(TypeError, match="out="):
        ts.map_blocks(lambda b: b, tmp_path / "a.npy")
    assert sorted(os.listdir(tmp_path)) == ["a.npy", "b.npy"]


def test_the_blocks_example_runs_and_checks_itself():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "blocks.py"), "1024"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "every result equals the same code on the whole scene" in r.stdout
    assert "\nfunction:" in r.stdout  # the plan's own line


def test_pinned_blocks_equal_plain_ones_or_are_refused_in_one_line(tmp_path):
    a = image((96, 64))
    np.save(tmp_path / "a.npy", a)

    def smooth(b):
        return ndi.gaussian_filter(b, 1.5, mode="wrap")

    plain = ts.map_overlap(smooth, tmp_path / "a.npy", out=tmp_path / "plain.npy", halo=6,
                           boundary="wrap", memory="256KiB")
    plan = ts.plan(ts.map_overlap, smooth, tmp_path / "a.npy", out=tmp_path / "p.npy", halo=6,
                   boundary="wrap", memory="256KiB", pinned="cuda:0")
    assert "page-locked:    the padded blocks, by cuda:0's driver" in str(plan)
    assert plan.pinned == "cuda:0"
    for threads in (None, 2):
        try:
            locked = ts.map_overlap(smooth, tmp_path / "a.npy", out=tmp_path / "locked.npy",
                                    halo=6, boundary="wrap", memory="256KiB", pinned=True,
                                    threads=threads)
        except ValueError as e:  # no GPU here: refused before a block is read
            msg = str(e)
            assert msg.startswith("pinned=cuda:0 asks for the blocks in page-locked memory")
            assert msg.endswith("leave `pinned` out where no GPU is used") and "\n" not in msg
            assert not (tmp_path / "locked.npy").exists()
        else:
            assert np.array_equal(np.asarray(locked), np.asarray(plain))
            os.remove(tmp_path / "locked.npy")
    assert np.array_equal(np.asarray(plain), smooth(a))
    for bad in ("gpu0", -1, 1.5, "cuda:x"):
        with pytest.raises(ValueError, match="pinned="):
            ts.map_blocks(lambda b: b, tmp_path / "a.npy", out=tmp_path / "o.npy", pinned=bad)
    assert sorted(os.listdir(tmp_path)) == ["a.npy", "plain.npy"]


def test_the_gpu_model_example_runs_on_a_gpu_and_says_so_in_one_line_elsewhere():
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "gpu_model.py"), "2048"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    if gpu:
        assert "equal the model's on the whole scene" in r.stdout
    else:
        assert r.stdout == ("gpu_model.py: skipped: PyTorch with a CUDA GPU is needed "
                            "(none here)\n"), r.stdout
