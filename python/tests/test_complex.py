"""complex64 and complex128 arrays as numpy writes them (C and Fortran order, little- and
big-endian): read exactly as ``np.load`` reads them; reduced, cast, scaled, converted
transposed and multiplied (matmul) as numpy does; complex expressions (``map``) computed
bit for bit as numpy computes them on complex128; every other operation refused with a
ValueError naming the dtype."""

import math

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
                         ("var", wide.var(axis=axis)), ("std", wide.std(axis=axis, ddof=1)),
                         ("nanvar", wide.var(axis=axis, ddof=1)),
                         ("nanstd", wide.std(axis=axis))):
            ddof = 1 if op in ("std", "nanvar") else 0
            got = ts.reduce(p, op, axis=axis, ddof=ddof, memory="4MiB")
            assert got.dtype == np.asarray(want).dtype, (op, axis)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
            # whatever the budget, the same bytes
            again = ts.reduce(p, op, axis=axis, ddof=ddof, memory="64MiB")
            assert got.tobytes() == again.tobytes()
    b = values((6, 7, 8), dtype, 6)
    q = tmp_path / "b.npy"
    save(q, b, order, byteorder)
    np.testing.assert_allclose(ts.reduce(q, "mean", axis=(0, 2)),
                               b.astype(np.complex128).mean(axis=(0, 2)), rtol=1e-12)


def awkward(shape, dtype, seed):
    """Complex values with what the orderings trip on: NaN in either part or both, ties
    (equal values, +0j beside -0j), infinities, and slices of NaN alone along axis 0."""
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    re = rng.integers(-3, 4, n).astype(np.float64)
    im = rng.integers(-2, 3, n).astype(np.float64)
    re[rng.random(n) < 0.05] = np.nan
    im[rng.random(n) < 0.05] = np.nan
    re[rng.random(n) < 0.03] = np.inf
    im[rng.random(n) < 0.03] = -np.inf
    zero = rng.random(n) < 0.1
    re[zero] = 0.0
    im[zero] = np.where(rng.random(zero.sum()) < 0.5, -0.0, 0.0)
    a = np.empty(n, np.complex128)
    a.real, a.imag = re, im  # (re + 1j * im would make inf * 1j a NaN)
    a = a.astype(dtype).reshape(shape)
    if len(shape) == 2:
        a[:, 3] = np.nan  # a column of NaN alone
        a[:, 5] = complex(np.nan, 1.0)
    return a


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("order,byteorder", ORDERS)
def test_extremes_and_nan_forms_pick_what_numpy_picks(tmp_path, dtype, order, byteorder):
    import warnings
    a = awkward((2999, 13), dtype, 7)
    p = tmp_path / "a.npy"
    save(p, a, order, byteorder)
    wide = a.astype(np.complex128)
    # many tiles; a Fortran-order file is decoded whole, which 1 MiB cannot hold
    small = "4MiB" if order == "F" else "1MiB"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for axis in (0, 1, None):
            picks = {"min": np.min(a, axis=axis), "max": np.max(a, axis=axis),
                     "nanmin": np.nanmin(a, axis=axis), "nanmax": np.nanmax(a, axis=axis),
                     "argmin": np.argmin(a, axis=axis), "argmax": np.argmax(a, axis=axis),
                     "count": np.sum(~np.isnan(a), axis=axis)}
            for op, want in picks.items():
                for memory in (small, "64MiB"):
                    got = ts.reduce(p, op, axis=axis, memory=memory)
                    want = np.asarray(want)
                    assert got.dtype == (a.dtype if op in ("min", "max", "nanmin", "nanmax")
                                         else np.int64), (op, axis)
                    # bit for bit: which NaN, which zero
                    assert got.tobytes() == want.astype(got.dtype).tobytes(), (op, axis, memory)
            # sums of small integers and one-signed infinities: exact in any order, so
            # the same bits as numpy's but for which NaN a part ends on
            for op, fn in (("nansum", np.nansum), ("nanmean", np.nanmean)):
                got = ts.reduce(p, op, axis=axis, memory=small)
                assert got.dtype == np.complex128
                want = np.asarray(fn(wide, axis=axis))
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
                for part in ("real", "imag"):
                    g, w = getattr(got, part), getattr(want, part)
                    same = (g.view(np.uint64) == w.view(np.uint64)) | (np.isnan(g) & np.isnan(w))
                    assert same.all(), (op, axis, part)
                assert got.tobytes() == ts.reduce(p, op, axis=axis, memory="64MiB").tobytes()
            # variances of the elements that are not NaN (NaN where any is infinite)
            for op, ddof in (("nanvar", 0), ("nanstd", 1)):
                got = ts.reduce(p, op, axis=axis, ddof=ddof, memory=small)
                want = getattr(np, op)(wide, axis=axis, ddof=ddof)
                assert got.dtype == np.float64
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
                assert got.tobytes() == ts.reduce(p, op, axis=axis, ddof=ddof,
                                                  memory="64MiB").tobytes()
        # nanargmin and nanargmax: numpy raises on a slice of NaN alone, and so does tilestream
        for op, fn in (("nanargmin", np.nanargmin), ("nanargmax", np.nanargmax)):
            got = ts.reduce(p, op, axis=1, memory=small)
            np.testing.assert_array_equal(got, fn(a, axis=1))
            with pytest.raises(ValueError):
                fn(a, axis=0)
            with pytest.raises(ValueError, match="NaN"):
                ts.reduce(p, op, axis=0, memory=small)
            keep = np.delete(a, [3, 5], axis=1)
            q = tmp_path / "keep.npy"
            save(q, keep, order, byteorder)
            np.testing.assert_array_equal(ts.reduce(q, op, axis=0, memory=small),
                                          fn(keep, axis=0))
            assert ts.reduce(q, op, memory=small) == fn(keep)


def test_nanargmin_takes_nan_as_numpy_replaces_it(tmp_path):
    # numpy's nanargmin stands NaN as +inf: [nan, inf] gives 0, not 1
    for values_, op in (([np.nan, np.inf], "nanargmin"), ([np.nan, -np.inf], "nanargmax")):
        for dtype in ("float32", "float64", "complex64", "complex128"):
            p = tmp_path / f"{op}{dtype}.npy"
            a = np.array(values_, dtype)
            np.save(p, a)
            fn = getattr(np, op)
            assert ts.reduce(p, op) == fn(a), (op, dtype)
    p = tmp_path / "c.npy"
    a = np.array([complex(np.nan, 0), complex(np.inf, 1), complex(np.inf, 0)], "complex64")
    np.save(p, a)
    assert ts.reduce(p, "nanargmin") == np.nanargmin(a)


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
    for call in (lambda: ts.reduce(p, "quantile", q=0.5),
                 lambda: ts.reduce(p, "nanpercentile", q=[5, 95], axis=0),
                 lambda: ts.cast(p, out, "f32"),
                 lambda: ts.affine(p, out, 2.0, dtype="f32"),
                 lambda: ts.map("floor(x)", out, {"x": p}),
                 lambda: ts.map("x * 2", out, {"x": p}, dtype="f32"),
                 lambda: ts.convert(p, tmp_path / "out.tif")):
        with pytest.raises(ValueError, match="complex"):
            call()
        assert not out.exists() and not (tmp_path / "out.tif").exists()


def median_slices(a, axis, skip_nan):
    """numpy's median of each slice along `axis` (None: all), one slice at a time:
    ``np.median`` of the slice (of its elements that are not NaN for ``nanmedian``, as
    numpy's ``_nanmedian1d``; ``nan+0j`` for a slice of NaN alone, as its small-axis
    form fills)."""
    def one(s):
        if skip_nan:
            s = s[~np.isnan(s)]
            if s.size == 0:
                return np.array(complex(np.nan, 0.0), a.dtype)
        return np.asarray(np.median(s)).astype(a.dtype)
    if axis is None:
        return one(a.ravel())
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape[:-1], a.dtype)
    for idx in np.ndindex(out.shape):
        out[idx] = one(moved[idx])
    return out


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("order,byteorder", ORDERS)
def test_medians_are_numpys(tmp_path, dtype, order, byteorder):
    import warnings
    a = awkward((2001, 13), dtype, 11)
    # what the order trips on: real parts equal but for the sign of zero, sorted by
    # their imaginary parts; a sum of two middles that overflows; an infinite
    # imaginary part (numpy's division makes the real part NaN)
    a[:, 0] = np.where(np.arange(2001) % 3 == 0, -0.0, 0.0)
    a.imag[:, 0] = np.arange(2001) % 7 - 3.0
    a[:, 1] = complex(-0.0, -1.0)
    big = np.finfo(a.real.dtype).max
    a.real[:1000, 2], a.real[1000:, 2] = big, -big / 2
    a.imag[:, 2] = big
    a[1000, 2] = complex(big / 2, 1.0)
    a.real[:, 4], a.imag[:, 4] = 1.0, np.inf
    # an even count over axis 0, NaN classes to pick from over axis 1
    b = np.concatenate([a, a[:1]], axis=0)
    b[0, 6:] = [complex(2, np.nan), complex(np.nan, 1), complex(1, np.nan),
                complex(np.nan, -7), complex(np.nan, 1), complex(-3, np.nan), 0j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for x in (a, b):
            p = tmp_path / "x.npy"
            save(p, x, order, byteorder)
            for axis in (0, 1, None):
                # many tiles; over axis 1 each of the 2001 outputs counts its own digits
                small = "8MiB" if axis == 1 else "4MiB" if order == "F" else "1MiB"
                # numpy's own median over the axis, bit for bit
                want = np.asarray(np.median(x, axis=axis))
                for memory in (small, "64MiB"):
                    got = ts.reduce(p, "median", axis=axis, memory=memory)
                    assert got.dtype == x.dtype and got.shape == want.shape
                    assert got.tobytes() == want.tobytes(), (axis, memory, got, want)
                got = ts.reduce(p, "nanmedian", axis=axis, memory=small)
                want = median_slices(x, axis, True)
                assert got.dtype == x.dtype
                assert got.tobytes() == want.tobytes(), (axis, got, want)
                assert got.tobytes() == ts.reduce(p, "nanmedian", axis=axis,
                                                  memory="64MiB").tobytes()
    # the medians of every slice, sorted, with ties of zeros of both signs
    assert ts.reduce(p, "median", axis=0, keepdims=True).shape == (1, 13)


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


def special_complex(n, seed):
    """complex128 values whose parts span 1e-6 to 1e6, with every pair of zeros of both
    signs, infinities, NaN, 1, -1 and 1e300 among the first."""
    rng = np.random.default_rng(seed)
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e300])
    re = rng.standard_normal(n) * np.exp(rng.uniform(-14, 14, n))
    im = rng.standard_normal(n) * np.exp(rng.uniform(-14, 14, n))
    re[:64], im[:64] = np.repeat(sp, 8), np.tile(sp, 8)
    z = np.empty(n, np.complex128)
    z.real, z.imag = re, im
    return z


def same_bits(got, want):
    """Equal bits part by part, or NaN where numpy has NaN."""
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    if np.iscomplexobj(w):
        return same_bits(g.real.copy(), w.real.copy()) & same_bits(g.imag.copy(), w.imag.copy())
    return (g.view(np.uint8).reshape(len(g), -1) == w.view(np.uint8).reshape(len(w), -1)).all(1) | (
        np.isnan(g) & np.isnan(w))


def test_map_computes_what_numpy_computes(tmp_path):
    """Every operation complex values take, against numpy's complex128 arithmetic (the
    product and the absolute value as numpy computes them on a CPU with FMA); complex64
    inputs are widened to complex128 first and the result rounded once, at a budget
    that cuts the arrays into many tiles."""
    n = 20_000
    a = special_complex(n, 1)
    b = special_complex(n, 2)[::-1].copy()
    b.real[300:500] = a.real[300:500]
    x = np.random.default_rng(3).standard_normal(n) * 10
    x[:5] = [0.0, -0.0, np.inf, np.nan, 1.0]
    with np.errstate(over="ignore"):
        b64 = b.astype(np.complex64)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b64)
    np.save(tmp_path / "x.npy", x.astype(np.float32))
    bw, xw = b64.astype(np.complex128), x.astype(np.float32).astype(np.float64)
    inputs = {n: tmp_path / f"{n}.npy" for n in ("a", "b", "x")}
    # conjugates computed apart: numpy multiplies into a temporary it can reuse
    # (``a * np.conj(b)``) with its scalar loop, which rounds each product on its own
    ca, cb = np.conj(a), np.conj(bw)
    with np.errstate(all="ignore"):
        cases = {
            "a + b - x": a + bw - xw,
            "a * b": a * bw,
            "a * x + 1": a * xw + 1,
            "a / b": a / bw,
            "x / a - a / 3": xw / a - a / 3,
            "-a * 2j": -a * 2j,
            "conj(a) * b": ca * bw,
            "min(a, b) + max(b, a)": np.minimum(a, bw) + np.maximum(bw, a),
            "clip(a, b, 1 + 1j)": np.clip(a, bw, 1 + 1j),
            "where(a, b, x)": np.where(a, bw, xw),
            "abs(a) + abs(b) * 2": np.abs(a) + np.abs(bw) * 2,
            "(a < b) + (a <= b) * 2 + (a > b) * 4 + (a >= b) * 8 + (a == b) * 16 + (a != b) * 32":
                (a < bw) + (a <= bw) * 2.0 + (a > bw) * 4.0 + (a >= bw) * 8.0 + (a == bw) * 16.0
                + (a != bw) * 32.0,
            "isnan(a) + isnan(b) * 2": np.isnan(a) + np.isnan(bw) * 2.0,
            "real(a) - imag(b) + imag(x)": a.real - bw.imag + np.imag(xw),
            "abs(a * conj(b)) ** 2": np.abs(a * cb) ** 2,
            "x ** 2 + x ** 0.5 + x ** -1": xw ** 2 + xw ** 0.5 + xw ** -1,
        }
    bad = []
    for k, (expr, want) in enumerate(cases.items()):
        out = tmp_path / f"o{k}.npy"
        # x alone is float32: its value is computed in f64, asked for as such here
        ts.map(expr, out, inputs, memory="256KiB",
               dtype="float64" if expr.startswith("x **") else None)
        got = np.load(out)
        ok = same_bits(got, want)
        if not ok.all():
            i = int(np.argmin(ok))
            bad.append(f"{expr}: {np.mean(~ok):.4%} differ, first at {i}: a={a[i]} b={bw[i]} "
                       f"x={xw[i]}: got {got[i]}, numpy {want[i]}")
        # complex64 out: the complex128 value's parts rounded once
        if np.iscomplexobj(want):
            ts.map(expr, out, inputs, dtype="complex64", memory="256KiB")
            with np.errstate(over="ignore"):
                want64 = want.astype(np.complex64)
            assert same_bits(np.load(out), want64).all(), expr
    assert not bad, "\n".join(bad)


def test_complex_functions_are_numpys(tmp_path):
    """sqrt, exp, log, log1p, sin, cos, tanh, round and powers of complex values, bit for
    bit as numpy computes them on complex128 (numpy calls the C library's csqrt and the
    others, as tilestream does; powers as numpy's ``a ** b`` of arrays and of Python
    scalars), including zeros of both signs, infinities and NaN in either part, at a budget
    that cuts the arrays into many tiles; complex64 inputs widened first."""
    n = 20_000
    a = special_complex(n, 6)
    b = special_complex(n, 7)[::-1].copy()
    # integer exponents (numpy's repeated products), some negative
    b.real[100:300], b.imag[100:300] = np.arange(-100, 100), 0.0
    with np.errstate(over="ignore"):
        c64 = special_complex(n, 8).astype(np.complex64)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "c.npy", c64)
    cw = c64.astype(np.complex128)
    inputs = {k: tmp_path / f"{k}.npy" for k in ("a", "b", "c")}
    with np.errstate(all="ignore"):
        cases = {
            "sqrt(a)": np.sqrt(a),
            "exp(a)": np.exp(a),
            "log(a)": np.log(a),
            "log1p(a)": np.log1p(a),
            "sin(a)": np.sin(a),
            "cos(a)": np.cos(a),
            "tanh(a)": np.tanh(a),
            "round(a)": np.round(a),
            # complex64 in, complex64 out: computed on complex128, rounded once
            "sqrt(c) + exp(c / 1000)": (np.sqrt(cw) + np.exp(cw / 1000)).astype(np.complex64),
            "log(a * b) - 2j": np.log(a * b) - 2j,
            "a ** 2": a ** 2,
            "a ** -1": a ** -1,
            "a ** 0.5": a ** 0.5,
            "a ** 3": a ** 3,
            "a ** -7": a ** -7,
            "a ** 2.5": a ** 2.5,
            "a ** b": a ** b,
            "2 ** a": 2 ** a,
            "exp(1j * real(a))": np.exp(1j * a.real),
        }
    bad = []
    for k, (expr, want) in enumerate(cases.items()):
        out = tmp_path / f"o{k}.npy"
        ts.map(expr, out, inputs, memory="256KiB")
        got = np.load(out)
        ok = same_bits(got, want)
        if not ok.all():
            i = int(np.argmin(ok))
            bad.append(f"{expr}: {np.mean(~ok):.4%} differ, first at {i}: a={a[i]} b={b[i]}: "
                       f"got {got[i]}, numpy {want[i]}")
    assert not bad, "\n".join(bad)


def test_angle_is_the_c_librarys_atan2(tmp_path):
    """np.angle is arctan2(imag, real); tilestream's is the C library's atan2, which
    numpy's SIMD arctan2 (AVX-512) may differ from in the last place."""
    a = special_complex(5000, 4)
    np.save(tmp_path / "a.npy", a)
    ts.map("angle(a)", tmp_path / "o.npy", {"a": tmp_path / "a.npy"})
    want = np.array([math.atan2(z.imag, z.real) for z in a])
    assert same_bits(np.load(tmp_path / "o.npy"), want).all()
    assert np.allclose(np.load(tmp_path / "o.npy"), np.angle(a), rtol=4e-16, atol=0,
                       equal_nan=True)


def test_complex_map_defaults_and_refusals(tmp_path):
    with np.errstate(over="ignore"):
        a = special_complex(100, 5).astype(np.complex64)
    np.save(tmp_path / "a.npy", a)
    inputs = {"a": tmp_path / "a.npy"}
    out = tmp_path / "o.npy"
    # numpy's dtypes: complex64 in, complex64 out; its absolute value float32
    ts.map("a * 2", out, inputs)
    assert np.load(out).dtype == np.complex64
    ts.map("abs(a)", out, inputs)
    assert np.load(out).dtype == np.float32
    out.unlink()
    for expr, dtype, match in [("floor(a)", None, "floor\\(\\) of a complex value is not defined"),
                               ("a * 2", "float64", "imaginary part"),
                               ("atan2(a, 1)", None, "atan2\\(\\) of a complex value is not defined")]:
        with pytest.raises(ValueError, match=match):
            ts.map(expr, out, inputs, dtype=dtype)
        assert not out.exists()
