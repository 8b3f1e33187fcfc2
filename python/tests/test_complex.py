"""complex64 and complex128 arrays as numpy writes them (C and Fortran order, little- and
big-endian): read exactly as ``np.load`` reads them; reduced, cast, scaled, converted
transposed and multiplied (matmul) as numpy does; every other operation refused with a ValueError naming the
dtype."""

import numpy as np
import pytest

import tilestream as ts

ORDERS = [("C", "<"), ("F", "<"), ("C", ">"), ("F", ">")]


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 50 + 1j * rng.normal(size=shape) * 20).astype(dtype)


def save(path, a, order, byteorder):
    b = np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)
    np.save(path, b.astype(b.dtype.newbyteorder(byteorder)))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("order,byteorder", ORDERS)
def test_reads_exactly_as_np_load(tmp_path, dtype, order, byteorder):
    for k, shape in enumerate([(37, 53), (3, 5, 7, 11), (4099, 3), (), (0, 4)]):
        a = values(shape, dtype, k)
        p = tmp_path / f"a{k}.npy"
        save(p, a, order, byteorder)
        want = np.load(p)
        t = ts.open(p)
        assert t.shape == want.shape and t.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(ts.read(t), want)
        # written back: C order, little-endian, the same values
        if a.size:
            out = tmp_path / f"out{k}.npy"
            ts.convert(p, out, memory="4MiB")
            back = np.load(out)
            assert back.dtype == np.dtype(dtype) and not np.isfortran(back)
            np.testing.assert_array_equal(back, want)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("order,byteorder", ORDERS)
def test_reduces_as_numpy(tmp_path, dtype, order, byteorder):
    a = values((3001, 41), dtype, 5)
    p = tmp_path / "a.npy"
    save(p, a, order, byteorder)
    wide = a.astype(np.complex128)
    for axis in (0, 1, None):
        for op, want in (("sum", wide.sum(axis=axis)), ("mean", wide.mean(axis=axis)),
                         ("var", wide.var(axis=axis)), ("std", wide.std(axis=axis, ddof=1))):
            got = ts.reduce(p, op, axis=axis, ddof=1 if op == "std" else 0, memory="4MiB")
            assert got.dtype == np.asarray(want).dtype, (op, axis)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
            # whatever the budget, the same bytes
            again = ts.reduce(p, op, axis=axis, ddof=1 if op == "std" else 0, memory="64MiB")
            assert got.tobytes() == again.tobytes()
    b = values((6, 7, 8), dtype, 6)
    q = tmp_path / "b.npy"
    save(q, b, order, byteorder)
    np.testing.assert_allclose(ts.reduce(q, "mean", axis=(0, 2)),
                               b.astype(np.complex128).mean(axis=(0, 2)), rtol=1e-12)


def test_casts_and_transposes_as_numpy(tmp_path):
    a = values((301, 77), "complex128", 1)
    p = tmp_path / "a.npy"
    save(p, a, "F", ">")
    ts.cast(p, tmp_path / "c64.npy", "c64", memory="4MiB")
    np.testing.assert_array_equal(np.load(tmp_path / "c64.npy"), a.astype(np.complex64))
    ts.cast(tmp_path / "c64.npy", tmp_path / "c128.npy", np.complex128, memory="4MiB")
    np.testing.assert_array_equal(np.load(tmp_path / "c128.npy"),
                                  a.astype(np.complex64).astype(np.complex128))
    ts.affine(p, tmp_path / "y.npy", 2.5, -1.0, memory="4MiB")
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.complex128
    np.testing.assert_allclose(y, a * 2.5 - 1.0, rtol=1e-15)
    ts.affine(p, tmp_path / "y64.npy", 2.0, dtype="c64", memory="4MiB")
    np.testing.assert_array_equal(np.load(tmp_path / "y64.npy"), (a * 2.0).astype(np.complex64))
    ts.transpose(p, tmp_path / "t.npy", memory="4MiB")
    np.testing.assert_array_equal(np.load(tmp_path / "t.npy"), a.T)
    r = (np.arange(301 * 77, dtype=np.int64).reshape(301, 77) * 7919 - 10**6)
    np.save(tmp_path / "r.npy", r)
    ts.cast(tmp_path / "r.npy", tmp_path / "rc.npy", "complex64", memory="4MiB")
    np.testing.assert_array_equal(np.load(tmp_path / "rc.npy"), r.astype(np.complex64))


@pytest.mark.parametrize("order,byteorder", ORDERS)
def test_matmul_as_numpy(tmp_path, order, byteorder):
    x = values((517, 33), "complex64", 3)
    p = tmp_path / "x.npy"
    save(p, x, order, byteorder)
    for w in (values((33, 7), "complex64", 4), values((33, 7), "complex128", 5),
              np.random.default_rng(6).normal(size=(33, 7)).astype("float32")):
        np.save(tmp_path / "w.npy", w)
        ts.matmul(p, tmp_path / "w.npy", tmp_path / "y.npy", memory="4MiB")
        want = x @ w
        assert np.load(tmp_path / "y.npy").dtype == want.dtype
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want,
                                   rtol=1e-5 if want.dtype == np.complex64 else 1e-12,
                                   atol=1e-3 if want.dtype == np.complex64 else 1e-9)
    with pytest.raises(ValueError, match="imaginary"):
        ts.matmul(p, tmp_path / "w.npy", tmp_path / "r.npy", dtype="float32")
    assert not (tmp_path / "r.npy").exists()


def test_what_complex_arrays_do_not_take_is_refused(tmp_path):
    p = tmp_path / "a.npy"
    np.save(p, values((40, 30), "complex64"))
    out = tmp_path / "out.npy"
    for call in (lambda: ts.reduce(p, "max"),
                 lambda: ts.reduce(p, "nanmean"),
                 lambda: ts.reduce(p, "median"),
                 lambda: ts.cast(p, out, "f32"),
                 lambda: ts.affine(p, out, 2.0, dtype="f32"),
                 lambda: ts.map("x * 2", out, {"x": p}),
                 lambda: ts.convert(p, tmp_path / "out.tif")):
        with pytest.raises(ValueError, match="complex"):
            call()
        assert not out.exists() and not (tmp_path / "out.tif").exists()


def test_zarr_stores_both_ways(tmp_path):
    import zarr
    a = values((20, 30), "complex64", 2)
    np.save(tmp_path / "a.npy", np.asfortranarray(a).astype(">c8"))
    ts.convert(tmp_path / "a.npy", tmp_path / "a.zarr", memory="4MiB")
    z = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert z.dtype == np.complex64
    np.testing.assert_array_equal(z[:], a)
    # written by zarr-python, chunks left unwritten holding the fill value 1+2j
    w = zarr.create_array(tmp_path / "w.zarr", shape=(20, 30), chunks=(7, 11),
                          dtype="complex128", fill_value=1 + 2j)
    w[:10] = a[:10]
    np.testing.assert_array_equal(ts.read(ts.open(tmp_path / "w.zarr")), w[:])
    assert w[15, 0] == 1 + 2j
