"""Windows of tensors from Python: ``t[a:b, c:d]`` is a box of ``t`` that operations read
as a tensor of its own, equal to numpy's slice of the data, for each kind of input."""

import numpy as np
import pytest

import tilestream as ts


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("window")
    a = np.random.default_rng(5).integers(0, 1000, size=(3, 97, 131)).astype("<u2")
    np.save(root / "a.npy", a)
    np.save(root / "f.npy", np.asfortranarray(a[1].astype(">f4")))  # Fortran, big-endian
    import zarr
    z = zarr.create_array(root / "a.zarr", shape=a.shape, chunks=(1, 32, 16), dtype="<u2")
    z[...] = a
    ts.convert(root / "a.npy", root / "a.tif", memory="4MiB")
    return root, a


@pytest.mark.parametrize("name", ["a.npy", "a.zarr", "a.tif", "f.npy"])
def test_a_window_reads_as_numpys_slice(inputs, name):
    root, a = inputs
    full = a if name != "f.npy" else a[1].astype(np.float32)
    t = ts.open(root / name)
    for key in [np.s_[..., 10:60, 7:120], np.s_[:, 96:97, 0:131], np.s_[1:3],
                np.s_[..., 5:9], np.s_[..., 3:3, :]]:
        if full.ndim == 2 and key == np.s_[:, 96:97, 0:131]:
            continue
        w = t[key]
        want = full[key]
        assert w.shape == want.shape
        assert np.array_equal(np.asarray(w), want), (name, key)
        assert np.array_equal(ts.read(w), want)
        if want.size:
            axes = tuple(range(want.ndim))
            assert ts.reduce(w, "sum", axis=axes) == want.astype(np.float64).sum()
    # a window of a window is the window of the file
    ww = t[..., 10:60, 7:120][..., 5:20, 30:31]
    assert np.array_equal(np.asarray(ww), full[..., 15:30, 37:38])
    assert ww.window[-2:] == ((15, 30), (37, 38))


def test_operations_take_a_window_as_their_input(inputs, tmp_path):
    root, a = inputs
    t = ts.open(root / "a.tif")[..., 20:80, 30:100]
    box = a[:, 20:80, 30:100]
    # the box's edges are the filter's edges: the same as the filter over a saved box
    np.save(tmp_path / "box.npy", box)
    ts.stencil(t, tmp_path / "g.npy", "gaussian:sigma=1.5", memory="1MiB")
    ts.stencil(tmp_path / "box.npy", tmp_path / "h.npy", "gaussian:sigma=1.5", memory="1MiB")
    assert np.array_equal(np.load(tmp_path / "g.npy"), np.load(tmp_path / "h.npy"))
    y = ts.map("(s[2] - s[1]) * 2", tmp_path / "y.npy", {"s": t}, dtype="float32",
               memory="256KiB")
    assert np.array_equal(np.asarray(y), ((box[2].astype(np.float32) - box[1]) * 2))
    tiles = [blk.copy() for _, _, blk in ts.iter_tiles(ts.open(root / "a.npy")[..., 1:2],
                                                        memory="64KiB")]
    assert np.array_equal(np.concatenate(tiles), a[..., 1:2])
    got = ts.map_blocks(lambda b: b * 2, t, out=tmp_path / "m.npy", memory="4MiB")
    assert np.array_equal(np.asarray(got), box * 2)


def test_bad_slices_are_refused(inputs):
    root, _ = inputs
    t = ts.open(root / "a.npy")
    with pytest.raises(TypeError, match="i:i\\+1"):
        t[1]
    with pytest.raises(ValueError, match="step 1"):
        t[:, ::2]
    with pytest.raises(IndexError, match="too many indices"):
        t[:, :, :, :]
    assert "window=" in repr(t[..., 1:5])
    assert t[:].window is None and t[:].shape == t.shape


def test_iter_tiles_of_every_npy_order_reads_the_array(tmp_path):
    """Blocks of a big-endian or Fortran-order .npy are its values (they were the file's
    bytes mapped as native C order: wrong values), as are those of a C-order one."""
    a = np.arange(600 * 7, dtype="<f4").reshape(600, 7) * 1.5
    cases = {"c.npy": a, "be.npy": a.astype(">f4"), "f.npy": np.asfortranarray(a),
             "fbe.npy": np.asfortranarray(a.astype(">f8"))}
    for name, arr in cases.items():
        np.save(tmp_path / name, arr)
        blocks = [b.copy() for _, _, b in ts.iter_tiles(tmp_path / name, memory="16KiB")]
        assert len(blocks) > 1
        assert np.array_equal(np.concatenate(blocks), arr.astype(arr.dtype.newbyteorder("="))), name
