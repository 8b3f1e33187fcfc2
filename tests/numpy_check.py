"""Cross-check with numpy (driven by tests/it/numpy_interop.rs).

`write DIR`: numpy writes input files of several dtypes and header versions.
`check DIR`: numpy compares tilestream's outputs in DIR with its own results.
"""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

OPS = ["sum", "mean", "min", "max", "var", "std"]


def inputs():
    rng = np.random.default_rng(7)
    yield "f32_v1", rng.standard_normal((2003, 37)).astype(np.float32) + 100, (1, 0)
    yield "f64_v2", rng.standard_normal((501, 3, 11)), (2, 0)
    yield "f16_v3", (rng.standard_normal((777, 5)) * 10).astype(np.float16), (3, 0)
    yield "i16_v1", rng.integers(-3000, 3000, (999, 13), dtype=np.int16), (1, 0)
    yield "u8_v1", rng.integers(0, 255, (4096, 3), dtype=np.uint8), (1, 0)
    yield "bool_v1", rng.random((300, 7)) > 0.5, (1, 0)
    yield "bf16_v1", (rng.standard_normal((513, 9)) * 4).astype(ml_dtypes.bfloat16), (1, 0)
    yield "i64_v1", rng.integers(-10**12, 10**12, (1000, 4), dtype=np.int64), (1, 0)


def write(d):
    for name, a, version in inputs():
        with open(d / f"{name}.npy", "wb") as f:
            np.lib.format.write_array(f, a, version=version)


def expect(a, op, axis):
    if op == "sum":
        return a.sum(axis=axis, dtype=np.float64 if a.dtype.kind == "f" else None)
    if op == "mean":
        return a.mean(axis=axis, dtype=np.float64)
    if op in ("min", "max"):
        return getattr(a, op)(axis=axis)
    return getattr(a.astype(np.float64), op)(axis=axis, ddof=1 if op == "var" else 0)


def check(d):
    n = 0
    for name, a, _ in inputs():
        for op in OPS:
            for axis in [None] + list(range(a.ndim)):
                tag = "all" if axis is None else f"ax{axis}"
                got = np.load(d / f"{name}.{op}.{tag}.npy")
                if a.dtype == ml_dtypes.bfloat16 and op in ("min", "max"):
                    a_cmp = a.astype(np.float32)
                    want = expect(a_cmp, op, axis).astype(ml_dtypes.bfloat16)
                else:
                    want = expect(a.astype(np.float32) if a.dtype == ml_dtypes.bfloat16 else a, op, axis)
                if op == "sum" and a.dtype.kind in "biu":
                    want = want.astype(np.uint64 if a.dtype.kind == "u" else np.int64)
                assert got.shape == np.shape(want), (name, op, tag, got.shape, np.shape(want))
                if op in ("min", "max") or (op == "sum" and a.dtype.kind in "biu"):
                    assert got.dtype == np.asarray(want).dtype, (name, op, tag, got.dtype)
                    assert np.array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64)), (name, op, tag)
                else:
                    assert got.dtype == np.float64, (name, op, tag, got.dtype)
                    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=f"{name} {op} {tag}")
                n += 1
    y = np.load(d / "affine.npy")
    x = np.load(d / "f32_v1.npy")
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (x.astype(np.float64) * 2 + 1).astype(np.float16))
    z = np.load(d / "z.npy")
    st = np.load(d / "stats.npz")
    m, sd = x.astype(np.float64).mean(0), x.astype(np.float64).std(0)
    np.testing.assert_allclose(st["mean"], m, rtol=1e-12)
    np.testing.assert_allclose(st["std"], sd, rtol=1e-9)
    np.testing.assert_array_equal(z, ((x.astype(np.float64) - st["mean"]) / st["std"]).astype(np.float32))
    s3 = np.load(d / "f64_v2.npy")
    ndvi = np.load(d / "ndvi.npy")
    np.testing.assert_array_equal(ndvi, (s3[7] - s3[3]) / (s3[7] + s3[3]))
    print(f"numpy agrees on {n} reductions, the affine cast, standardize (+ .npz) and map")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](Path(sys.argv[2]))
