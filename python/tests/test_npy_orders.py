"""``.npy`` files as numpy writes them in Fortran order and with big-endian elements
(``np.save(path, a.T)``, ``a.astype(">f4")``), header versions 1.0, 2.0 and 3.0, 0-d and
empty: read exactly as ``np.load`` reads them, reduced as numpy reduces them, written back
as C order, little-endian, and split across Dask workers like any ``.npy``."""

import numpy as np
import pytest

import tilestream as ts

DTYPES = ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
          "float16", "float32", "float64", "complex64", "complex128"]


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape) * 50
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.normal(size=shape) * 20
    return a.astype(dtype)


def stored(a, order, byteorder):
    """``a`` as a file would hold it: Fortran order ("F") and/or big-endian (">")."""
    b = np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)
    return b.astype(b.dtype.newbyteorder(byteorder)) if b.dtype.itemsize > 1 else b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order,byteorder", [("F", "<"), ("C", ">"), ("F", ">")])
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_reads_exactly_as_np_load(tmp_path, dtype, order, byteorder, version):
    for k, shape in enumerate([(37, 53), (3, 5, 7, 11), (4099, 3), (), (0, 4), (5, 0)]):
        a = values(shape, dtype, k)
        p = tmp_path / f"a{k}.npy"
        with open(p, "wb") as f:
            np.lib.format.write_array(f, stored(a, order, byteorder), version=version)
        want = np.load(p)
        t = ts.open(p)
        assert t.shape == want.shape and t.dtype == want.dtype.newbyteorder("=")
        got = ts.read(t)
        assert got.dtype.isnative
        np.testing.assert_array_equal(got, want)
        if len(shape) >= 2 and shape[0] > 3:
            np.testing.assert_array_equal(ts.read(t, rows=slice(1, shape[0] - 2)),
                                          want[1:shape[0] - 2])


@pytest.mark.parametrize("order,byteorder", [("F", "<"), ("C", ">"), ("F", ">")])
def test_reduces_and_writes_as_numpy(tmp_path, order, byteorder):
    a = values((20011, 129), "float32", 3)
    p = tmp_path / "a.npy"
    np.save(p, stored(a, order, byteorder))
    c = tmp_path / "c.npy"
    np.save(c, a)
    for axis in (0, 1, None):
        for op in ("sum", "std", "argmax", "nanmin"):
            got = ts.reduce(p, op, axis=axis, memory="16MiB")
            assert got.tobytes() == ts.reduce(c, op, axis=axis, memory="16MiB").tobytes()
    np.testing.assert_allclose(ts.reduce(p, "mean", axis=0), a.astype(np.float64).mean(axis=0),
                               rtol=1e-12)
    out = ts.cast(p, tmp_path / "out.npy", "f64", memory="16MiB")
    back = np.load(tmp_path / "out.npy")
    assert back.flags["C_CONTIGUOUS"] and back.dtype == np.dtype("<f8")
    np.testing.assert_array_equal(back, a.astype(np.float64))
    assert out.shape == a.shape


def test_a_fortran_order_file_with_huge_rows_is_refused_in_one_line(tmp_path):
    p = tmp_path / "wide.npy"
    a = np.lib.format.open_memmap(p, mode="w+", dtype="float32", shape=(2, 5_000_000),
                                  fortran_order=True)
    del a
    with pytest.raises(Exception, match="Fortran-order .npy whose rows") as e:
        ts.open(p)
    assert "\n" not in str(e.value)
