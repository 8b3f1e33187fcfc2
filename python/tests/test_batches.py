"""``tilestream.batches`` against numpy: every row once an epoch (shuffled or not, split
between workers, ``drop_last`` both ways), features and labels aligned, the same batches
for a seed at any budget, batches kept by the loop never overwritten, budgets too small
refused with the arithmetic; and ``tilestream.torch`` where PyTorch is importable."""

import os

import numpy as np
import pytest

import tilestream as ts


def arrays(tmp_path, rows=1000, cols=6):
    x = np.repeat(np.arange(rows, dtype=np.float32)[:, None], cols, axis=1)
    x += np.arange(cols, dtype=np.float32) / 10
    y = np.arange(rows, dtype=np.int64) * 3
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    return x, y


def rows_of(xb, yb):
    ids = xb[:, 0].astype(np.int64)
    assert np.array_equal(yb, ids * 3), "labels out of line with features"
    return ids


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_row_once_an_epoch_and_aligned(tmp_path, shuffle, drop_last):
    x, _ = arrays(tmp_path)
    inputs = [tmp_path / "x.npy", tmp_path / "y.npy"]
    kw = dict(shuffle=True, block=10, window=4) if shuffle else {}
    for parts in (1, 3):
        orders = []
        for epoch in (0, 1):
            got = []
            for k in range(parts):
                it = ts.batches(inputs, 64, drop_last=drop_last, first_epoch=epoch,
                                part=(k, parts), memory="4MiB", **kw)
                n = 0
                for xb, yb in it:
                    assert xb.dtype == np.float32 and xb.shape[1:] == (6,)
                    assert yb.dtype == np.int64 and len(xb) <= 64
                    assert not drop_last or len(xb) == 64
                    assert np.array_equal(xb, x[rows_of(xb, yb)])
                    got.extend(rows_of(xb, yb))
                    n += 1
                assert n == len(it)
            assert len(set(got)) == len(got), "a row twice in an epoch"
            if drop_last:
                assert 1000 - len(got) < 64 * parts  # each part's short batch, at most
            else:
                assert sorted(got) == list(range(1000))
            if parts == 1:  # workers' batches interleave; one alone is in file order
                assert (got != sorted(got)) == shuffle
            orders.append(got)
        assert (orders[0] != orders[1]) == shuffle  # each epoch its own order


def test_a_seed_gives_the_same_batches_at_any_budget_ring_and_threads(tmp_path):
    arrays(tmp_path, rows=3000, cols=4)

    def run(**kw):
        return [xb.copy() for xb in ts.batches(tmp_path / "x.npy", 100, shuffle=True, seed=7,
                                               block=16, window=8, epochs=2, **kw)]

    first = run(memory="64MiB")
    for kw in (dict(memory="256KiB", ring=2), dict(memory="1MiB", threads=1),
               dict(memory="8MiB", ring=6, threads=2)):
        again = run(**kw)
        assert len(again) == len(first) and all(np.array_equal(a, b) for a, b in zip(first, again)), kw
    other = [xb.copy() for xb in ts.batches(tmp_path / "x.npy", 100, shuffle=True, seed=8,
                                            block=16, window=8)]
    assert not np.array_equal(other[0], first[0])


def test_batches_kept_are_never_overwritten_and_holding_the_ring_is_refused(tmp_path):
    x, _ = arrays(tmp_path, rows=200)
    it = ts.batches(tmp_path / "x.npy", 10, ring=3, memory="1MiB")
    kept = [next(it), next(it)]
    view = next(it)[2:5]  # a view keeps its batch's buffer out of the ring too
    with pytest.raises(ValueError, match="holds all 3 batches of the ring"):
        next(it)
    assert it.held == 3
    del kept[0]
    b = next(it)
    assert np.array_equal(b, x[30:40])
    assert np.array_equal(kept[0], x[10:20]) and np.array_equal(view, x[22:25])
    kept[0][:] = -1  # a batch is the loop's to write
    assert it.held == 3
    # DLPack: numpy (and any framework) takes a batch as it is, without a copy
    d = np.from_dlpack(b)
    assert np.shares_memory(d, b) and np.array_equal(d, x[30:40])
    del b, view, d
    assert it.held == 1
    it.close()
    assert np.all(kept[0] == -1)
    # a list of every batch needs copies
    with pytest.raises(ValueError, match=r"b\.copy\(\)"):
        list(ts.batches(tmp_path / "x.npy", 10, ring=4, memory="1MiB"))
    assert len([b.copy() for b in ts.batches(tmp_path / "x.npy", 10, ring=2, memory="1MiB")]) == 20


def test_budgets_too_small_and_bad_arguments_are_refused_in_one_line(tmp_path):
    arrays(tmp_path, rows=1000, cols=256)
    with pytest.raises(ValueError, match=r"4 buffers × 500\.0 KiB for a batch of 500 rows") as e:
        ts.batches(tmp_path / "x.npy", 500, memory="1MiB")
    assert "\n" not in str(e.value) and "memory=" in str(e.value)
    plan = ts.plan(ts.batches, tmp_path / "x.npy", 500, memory="1MiB")
    assert not plan.fits and "too small" in str(plan)
    plan = ts.plan(ts.batches, tmp_path / "x.npy", 100, memory="8MiB", shuffle=True)
    assert plan.fits and "windows of 64 blocks of 1024 rows" in str(plan), str(plan)
    for bad in (dict(batch=0), dict(batch=2.5), dict(batch=10, epochs=-1),
                dict(batch=10, window=4), dict(batch=10, framework="jax")):
        with pytest.raises(ValueError):
            ts.batches(tmp_path / "x.npy", **bad)
    np.save(tmp_path / "short.npy", np.zeros(10))
    with pytest.raises(ValueError, match="as many rows each"):
        ts.batches([tmp_path / "x.npy", tmp_path / "short.npy"], 10)
    with pytest.raises(ValueError, match="pinned=cuda:0"):
        try:
            ts.batches(tmp_path / "x.npy", 10, pinned=True, memory="64MiB")
        except ValueError:
            raise
        else:  # a GPU here: page-locked, as asked
            raise ValueError("pinned=cuda:0 worked")
    assert sorted(os.listdir(tmp_path)) == ["short.npy", "x.npy", "y.npy"]


def test_a_compressed_input_gives_the_batches_of_its_npy(tmp_path):
    x, _ = arrays(tmp_path, rows=500, cols=8)
    ts.convert(tmp_path / "x.npy", tmp_path / "x.zarr", zarr_chunks="64x8")
    a = [b.copy() for b in ts.batches(tmp_path / "x.npy", 48, shuffle=True, block=20, window=3)]
    b = [b.copy() for b in ts.batches(tmp_path / "x.zarr", 48, shuffle=True, block=20, window=3)]
    assert len(a) == len(b) == 11 and all(np.array_equal(p, q) for p, q in zip(a, b))


def test_torch_batches_and_the_dataloader_or_a_one_line_refusal_without_torch(tmp_path):
    x, y = arrays(tmp_path, rows=700)
    inputs = [tmp_path / "x.npy", tmp_path / "y.npy"]
    try:
        import torch
    except ImportError:  # CI installs no PyTorch (4 GB of CUDA wheels): the refusal
        with pytest.raises(ImportError, match=r"need PyTorch \(pip install torch\)"):
            ts.batches(inputs, 50, framework="torch")
        with pytest.raises(ImportError, match="torch"):
            import tilestream.torch  # noqa: F401
        return
    import tilestream.torch as tst

    for xb, yb in ts.batches(inputs, 50, framework="torch"):
        assert isinstance(xb, torch.Tensor) and torch.equal(yb, xb[:, 0].long() * 3)
    for workers in (0, 2):
        dl = tst.loader(inputs, batch_size=64, shuffle=True, num_workers=workers,
                        memory="8MiB", seed=1, block=10, window=4)
        orders = []
        for epoch in range(2):
            dl.dataset.set_epoch(epoch)
            got = []
            for xb, yb in dl:
                assert torch.equal(yb, xb[:, 0].long() * 3)
                got.extend((yb // 3).tolist())
            assert sorted(got) == list(range(700)), (workers, epoch)
            orders.append(got)
        assert orders[0] != orders[1]
    # the GPU kit's batches measurement, on the CPU here (on a GPU machine the kit runs it
    # with --device cuda over the 6.3 GB matrix)
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "benches", "gpu", "batches.py"),
                        "20000", "--device", "cpu", "--work", str(tmp_path / "kit")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("batches.py: ok"), r.stdout + r.stderr
    assert r.stdout.count("are the host's, byte for byte") == 2
    # patches of an image through the DataLoader's workers: every patch once
    img = np.arange(2 * 50 * 40, dtype=np.float32).reshape(2, 50, 40)
    np.save(tmp_path / "img.npy", img)
    want = sorted(p.tobytes() for p in numpy_patches(img, 10, 2, "shift"))
    for workers in (0, 2):
        dl = tst.loader(tmp_path / "img.npy", batch_size=8, shuffle=True, num_workers=workers,
                        memory="8MiB", patches=(10, 2))
        got = [p.numpy().tobytes() for xb in dl for p in xb]
        assert all(isinstance(xb, torch.Tensor) for xb in dl)
        assert sorted(got) == want, workers


def test_the_training_example_runs_and_learns_the_weights():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", "train_batches.py"),
                        "60000"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "tilestream.batches: one epoch in" in r.stdout and "largest weight error" in r.stdout
    assert r.stdout.rstrip().endswith("train_batches.py: done")


def numpy_patches(img, size, overlap, edge):
    """The patches of a (bands, rows, cols) image as numpy slicing cuts them, row by row
    over the grid: starts every ``size - overlap``; with ``shift`` the last moved back to
    end at the edge, with ``pad`` zeros past it."""
    stride = size - overlap
    _, rows, cols = img.shape

    def starts(n):
        count = max(max(n - overlap, 0), 1)
        count = -(-count // stride)
        s = [i * stride for i in range(count)]
        if edge == "shift":
            s = sorted(set(min(v, n - size) for v in s))
        return s

    padded = np.zeros((img.shape[0], rows + size, cols + size), img.dtype)
    padded[:, :rows, :cols] = img
    return [padded[:, r:r + size, c:c + size] for r in starts(rows) for c in starts(cols)]


@pytest.mark.parametrize("edge", ["shift", "pad"])
def test_patches_of_an_image_and_its_mask_equal_numpy_slicing_and_tiles(tmp_path, edge):
    rng = np.random.default_rng(5)
    img = rng.integers(0, 60000, (4, 61, 47), dtype=np.uint16)
    mask = rng.integers(0, 5, (61, 47), dtype=np.uint8)
    np.save(tmp_path / "img.npy", img)
    np.save(tmp_path / "mask.npy", mask)
    want = numpy_patches(img, 16, 5, edge)
    want_mask = [p[0] for p in numpy_patches(mask[None], 16, 5, edge)]
    for memory in ("512KiB", "16MiB"):
        got, got_mask = [], []
        it = ts.batches([tmp_path / "img.npy", tmp_path / "mask.npy"], 7,
                        patches=(16, 5, edge), memory=memory)
        for xb, mb in it:
            assert xb.shape[1:] == (4, 16, 16) and mb.shape[1:] == (16, 16)
            got.extend(xb.copy())
            got_mask.extend(mb.copy())
        assert len(got) == len(want) == len(it) * 7 - (-len(want) % 7)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        assert all(np.array_equal(a, b) for a, b in zip(got_mask, want_mask))
    # the patches `tiles` writes, the same bytes
    ts.tiles(tmp_path / "img.npy", tmp_path / "t", 16, overlap=5, edge=edge)
    index = [line.split(",") for line in (tmp_path / "t" / "index.csv").read_text().split()[1:]]
    by_place = {(int(r), int(c)): np.load(tmp_path / "t" / f) for f, r, c, _, _ in index}
    assert all(np.array_equal(by_place[k], p) for k, p in zip(sorted(by_place), want))


def test_shuffled_patches_of_a_geotiff_are_those_of_its_npy_every_patch_once(tmp_path):
    rng = np.random.default_rng(6)
    img = rng.normal(size=(3, 70, 90)).astype(np.float32)
    np.save(tmp_path / "img.npy", img)
    ts.convert(tmp_path / "img.npy", tmp_path / "img.tif")
    want = numpy_patches(img, 12, 4, "shift")
    kw = dict(patches=(12, 4), shuffle=True, seed=3, block=2, window=2, epochs=2)
    a = [b.copy() for b in ts.batches(tmp_path / "img.npy", 9, memory="1MiB", **kw)]
    b = [b.copy() for b in ts.batches(tmp_path / "img.tif", 9, memory="8MiB", **kw)]
    assert len(a) == len(b) and all(np.array_equal(p, q) for p, q in zip(a, b))
    key = lambda p: p.tobytes()  # noqa: E731
    epoch = len(a) // 2
    for part in (a[:epoch], a[epoch:]):
        got = [p for batch in part for p in batch]
        assert sorted(map(key, got)) == sorted(map(key, want))
    assert not np.array_equal(a[0], b[epoch])
    plan = ts.plan(ts.batches, tmp_path / "img.npy", 9, memory="1MiB", **kw)
    assert plan.fits and "batches of 9 patches" in plan.text, plan.text
    assert "(12x12, overlap 4: a grid of 9 x 11" in plan.text and "rows of patches" in plan.text
    with pytest.raises(ValueError, match=r"patch edge 'wrap' is not"):
        ts.batches(tmp_path / "img.npy", 9, patches=(12, 4, "wrap"))
    with pytest.raises(ValueError, match="overlap must be smaller than the size"):
        ts.batches(tmp_path / "img.npy", 9, patches=(12, 12))
