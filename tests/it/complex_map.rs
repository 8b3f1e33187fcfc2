//! `map` over complex values against an oracle written here, element by element: each
//! complex operation as numpy's C loops compute it on complex128 (`loops.c.src` for the
//! division and the comparisons, the SIMD loops for the product and the absolute value),
//! over inputs that hold zeros of both signs, infinities, NaNs and parts many orders of
//! magnitude apart, at budgets that force many tiles; and what complex values do not
//! take, refused in one line with nothing left behind.
//!
//! `python/tests/test_complex.py` checks the same expressions against numpy itself.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::float_cmp,
    clippy::type_complexity
)]

use crate::common::{Lcg, engine_on, on_every_backend, read_npy_data, write_npy};
use tilestream::{DType, Engine, MemoryBudget, TensorFile};

const N: usize = 12_007;

/// A complex number as numpy computes with it.
#[derive(Clone, Copy, Debug)]
struct C(f64, f64);

impl C {
    fn of(x: f64) -> C {
        C(x, 0.0)
    }
    fn add(self, o: C) -> C {
        C(self.0 + o.0, self.1 + o.1)
    }
    fn sub(self, o: C) -> C {
        C(self.0 - o.0, self.1 - o.1)
    }
    /// numpy's SIMD product: each part one fused multiply-add.
    fn mul(self, o: C) -> C {
        C(
            self.0.mul_add(o.0, -(self.1 * o.1)),
            self.0.mul_add(o.1, self.1 * o.0),
        )
    }
    /// numpy's division (Smith's algorithm, `loops.c.src`).
    fn div(self, o: C) -> C {
        let (ar, ai, br, bi) = (self.0, self.1, o.0, o.1);
        if br.abs() >= bi.abs() {
            if br.abs() == 0.0 && bi.abs() == 0.0 {
                C(ar / br.abs(), ai / br.abs())
            } else {
                let rat = bi / br;
                let scl = 1.0 / (br + bi * rat);
                C((ar + ai * rat) * scl, (ai - ar * rat) * scl)
            }
        } else {
            let rat = br / bi;
            let scl = 1.0 / (bi + br * rat);
            C((ar * rat + ai) * scl, (ai * rat - ar) * scl)
        }
    }
    /// numpy's SIMD absolute value.
    fn abs(self) -> f64 {
        let (mut re, mut im) = (self.0.abs(), self.1.abs());
        if re == f64::INFINITY || im == f64::INFINITY {
            return f64::INFINITY;
        }
        if re.is_nan() || im.is_nan() {
            (re, im) = (f64::NAN, f64::NAN);
        }
        let (larger, smaller) = if re >= im { (re, im) } else { (im, re) };
        if larger.is_nan() {
            return f64::NAN;
        }
        let ratio = if larger == 0.0 { 0.0 } else { smaller / larger };
        ratio.mul_add(ratio, 1.0).sqrt() * larger
    }
    fn nan(self) -> bool {
        self.0.is_nan() || self.1.is_nan()
    }
    /// numpy's `CLT`, `CLE`, `CGT`, `CGE`.
    fn lt(self, o: C) -> bool {
        (self.0 < o.0 && !self.1.is_nan() && !o.1.is_nan()) || (self.0 == o.0 && self.1 < o.1)
    }
    fn le(self, o: C) -> bool {
        (self.0 < o.0 && !self.1.is_nan() && !o.1.is_nan()) || (self.0 == o.0 && self.1 <= o.1)
    }
    fn ge(self, o: C) -> bool {
        (self.0 > o.0 && !self.1.is_nan() && !o.1.is_nan()) || (self.0 == o.0 && self.1 >= o.1)
    }
    /// numpy's `maximum`: the first unless it is no NaN and smaller.
    fn max(self, o: C) -> C {
        if self.nan() || self.ge(o) { self } else { o }
    }
    fn min(self, o: C) -> C {
        if self.nan() || self.le(o) { self } else { o }
    }
    /// numpy's `clip` (`clip.cpp`): its own order, with no NaN rule but the first
    /// operand's.
    fn clip(self, lo: C, hi: C) -> C {
        let beyond = |a: C, b: C, gt: bool| {
            let (x, y) = if a.0 == b.0 { (a.1, b.1) } else { (a.0, b.0) };
            if gt { x > y } else { x < y }
        };
        let m = if self.nan() || beyond(self, lo, true) {
            self
        } else {
            lo
        };
        if m.nan() || beyond(m, hi, false) {
            m
        } else {
            hi
        }
    }
    fn truthy(self) -> bool {
        self.0 != 0.0 || self.1 != 0.0
    }
}

fn t(c: bool) -> f64 {
    f64::from(u8::from(c))
}

/// Parts spread over magnitudes from 1e-6 to 1e6, with the special values placed so
/// that every pair of them meets.
fn parts(rng: &mut Lcg, n: usize) -> Vec<f64> {
    let special = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0,
        -1.0,
        1e300,
    ];
    (0..n)
        .map(|i| {
            if i < 2 * special.len() * special.len() {
                let k = i / 2;
                if i % 2 == 0 {
                    special[k / special.len()]
                } else {
                    special[k % special.len()]
                }
            } else {
                (rng.f64() - 0.5) * 10f64.powf(rng.f64() * 12.0 - 6.0)
            }
        })
        .collect()
}

/// Inputs: `a` complex128, `b` complex64 (its parts as read, in f64), `x` f32; some of
/// `b`'s elements equal to `a`'s real parts, so that ties meet the comparisons.
fn inputs(dir: &std::path::Path) -> (Vec<C>, Vec<C>, Vec<f64>) {
    let mut rng = Lcg(7);
    let a = parts(&mut rng, 2 * N);
    let mut b: Vec<f32> = parts(&mut rng, 2 * N)
        .iter()
        .rev()
        .map(|&v| v as f32)
        .collect();
    for i in 200..400 {
        b[2 * i] = a[2 * i] as f32;
    }
    let x: Vec<f32> = (0..N)
        .map(|i| match i % 97 {
            0 => f32::NAN,
            1 => -0.0,
            2 => f32::INFINITY,
            _ => ((rng.f64() - 0.5) * 50.0) as f32,
        })
        .collect();
    write_npy(
        &dir.join("a.npy"),
        DType::C128,
        &[N],
        bytemuck::cast_slice(&a),
    );
    write_npy(
        &dir.join("b.npy"),
        DType::C64,
        &[N],
        bytemuck::cast_slice(&b),
    );
    write_npy(
        &dir.join("x.npy"),
        DType::F32,
        &[N],
        bytemuck::cast_slice(&x),
    );
    (
        a.chunks(2).map(|p| C(p[0], p[1])).collect(),
        b.chunks(2)
            .map(|p| C(f64::from(p[0]), f64::from(p[1])))
            .collect(),
        x.iter().map(|&v| f64::from(v)).collect(),
    )
}

/// Equal bits, or both NaN.
fn same(g: f64, w: f64) -> bool {
    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
}

on_every_backend! {
fn complex_expressions_compute_what_numpy_computes(device) {
    let complex: &[(&str, fn(C, C, f64) -> C)] = &[
        ("a + b - x", |a, b, x| a.add(b).sub(C::of(x))),
        ("a * b", |a, b, _| a.mul(b)),
        ("a * x + 1", |a, _, x| a.mul(C::of(x)).add(C::of(1.0))),
        ("a / b", |a, b, _| a.div(b)),
        ("x / a - a / 3", |a, _, x| C::of(x).div(a).sub(a.div(C::of(3.0)))),
        ("-a * 2j", |a, _, _| C(-a.0, -a.1).mul(C(0.0, 2.0))),
        ("conj(a) * b", |a, b, _| C(a.0, -a.1).mul(b)),
        ("min(a, b) + max(b, a)", |a, b, _| a.min(b).add(b.max(a))),
        ("clip(a, b, 1 + 1j)", |a, b, _| a.clip(b, C(1.0, 1.0))),
        ("where(a, b, x)", |a, b, x| if a.truthy() { b } else { C::of(x) }),
        ("where(x > 0, a, x)", |a, _, x| if x > 0.0 { a } else { C::of(x) }),
        ("complex(x, real(a)) + imag(b)", |a, b, x| C(x, a.0).add(C::of(b.1))),
    ];
    let real: &[(&str, fn(C, C, f64) -> f64)] = &[
        ("abs(a) + abs(b) * 2", |a, b, _| a.abs() + b.abs() * 2.0),
        (
            "(a < b) + (a <= b) * 2 + (a > b) * 4 + (a >= b) * 8 + (a == b) * 16 + (a != b) * 32",
            |a, b, _| {
                t(a.lt(b))
                    + t(a.le(b)) * 2.0
                    + t(b.lt(a)) * 4.0
                    + t(a.ge(b)) * 8.0
                    + t(a.0 == b.0 && a.1 == b.1) * 16.0
                    + t(a.0 != b.0 || a.1 != b.1) * 32.0
            },
        ),
        ("isnan(a) + isnan(b) * 2", |a, b, _| t(a.nan()) + t(b.nan()) * 2.0),
        ("real(a) - imag(b) + imag(x)", |a, b, _| a.0 - b.1 + 0.0),
        ("angle(a) + angle(x)", |a, _, x| a.1.atan2(a.0) + 0f64.atan2(x)),
        ("abs(a * conj(b)) ** 2", |a, b, _| {
            let p = a.mul(C(b.0, -b.1)).abs();
            p * p
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (a, b, x) = inputs(dir.path());
    let files: Vec<TensorFile> = ["a", "b", "x"]
        .iter()
        .map(|n| TensorFile::open(dir.path().join(format!("{n}.npy"))).unwrap())
        .collect();
    let named = [("a", &files[0]), ("b", &files[1]), ("x", &files[2])];
    // 256 KiB forces about 8 tiles of these 12007 elements; 1 GiB makes one
    for budget in [256u64 << 10, 1 << 30] {
        let e = engine_on(device, budget);
        for (k, (src, f)) in complex.iter().enumerate() {
            let out = dir.path().join(format!("c{k}_{budget}.npy"));
            // the default dtype: complex128 (a is)
            let r = e.map(src, &named, &out, None).unwrap();
            if budget < 1 << 20 {
                assert!(r.tiles >= 5, "{src}: only {} tiles", r.tiles);
            }
            assert_eq!(TensorFile::open(&out).unwrap().dtype(), DType::C128, "{src}");
            let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
            for i in 0..N {
                let w = f(a[i], b[i], x[i]);
                assert!(
                    same(got[2 * i], w.0) && same(got[2 * i + 1], w.1),
                    "{src} at {i} (a={:?}, b={:?}, x={}): got ({}, {}), want {w:?}",
                    a[i], b[i], x[i], got[2 * i], got[2 * i + 1]
                );
            }
            // complex64 out: each part of the complex128 value rounded once
            let out = dir.path().join(format!("c{k}_{budget}_c64.npy"));
            e.map(src, &named, &out, Some(DType::C64)).unwrap();
            let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
            for i in 0..N {
                let w = f(a[i], b[i], x[i]);
                assert!(
                    same(f64::from(got[2 * i]), f64::from(w.0 as f32))
                        && same(f64::from(got[2 * i + 1]), f64::from(w.1 as f32)),
                    "{src} to complex64 at {i}"
                );
            }
        }
        for (k, (src, f)) in real.iter().enumerate() {
            let out = dir.path().join(format!("r{k}_{budget}.npy"));
            e.map(src, &named, &out, None).unwrap();
            // a real value over complex128 parts: f64
            assert_eq!(TensorFile::open(&out).unwrap().dtype(), DType::F64, "{src}");
            let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
            for i in 0..N {
                let w = f(a[i], b[i], x[i]);
                // atan2 is the math library's: CUDA's may differ in the last bit
                let close = src.contains("angle")
                    && device != tilestream::device::DeviceRequest::Cpu
                    && (got[i] - w).abs() <= 4.0 * f64::EPSILON * w.abs();
                assert!(
                    same(got[i], w) || close,
                    "{src} at {i} (a={:?}, b={:?}, x={}): got {}, want {w}",
                    a[i], b[i], x[i], got[i]
                );
            }
        }
    }
}
}

#[test]
fn complex_defaults_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    inputs(dir.path());
    let open = |n: &str| TensorFile::open(dir.path().join(format!("{n}.npy"))).unwrap();
    let (a, b, x) = (open("a"), open("b"), open("x"));
    let e = Engine::new(MemoryBudget::new(1 << 20)).unwrap();
    let out = dir.path().join("o.npy");
    // complex64 and f32 parts make complex64, and a real value of them f32
    for (src, want) in [
        ("b * x", DType::C64),
        ("abs(b)", DType::F32),
        ("complex(x, x)", DType::C64),
        ("x * 1j", DType::C64),
        ("b * a", DType::C128),
    ] {
        e.map(src, &[("a", &a), ("b", &b), ("x", &x)], &out, None)
            .unwrap();
        assert_eq!(TensorFile::open(&out).unwrap().dtype(), want, "{src}");
        std::fs::remove_file(&out).unwrap();
    }
    // a real value into a complex output: an imaginary part of +0
    e.map("x * 2", &[("x", &x)], &out, Some(DType::C64))
        .unwrap();
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
    assert!(got.chunks(2).all(|p| p[1].to_bits() == 0));
    std::fs::remove_file(&out).unwrap();
    for (src, dtype, what) in [
        (
            "floor(a)",
            None,
            "floor() of a complex value is not defined",
        ),
        ("ceil(b * 2)", None, "ceil() of a complex value"),
        ("fma(a, x, 1)", None, "fma() of a complex value"),
        ("atan2(a, x)", None, "atan2()"),
        (
            "complex(a, x)",
            None,
            "complex(re, im) takes two real values",
        ),
        (
            "a * x",
            Some(DType::F64),
            "has a complex value, which a f64 output would lose",
        ),
        ("x + 1j", Some(DType::I16), "has a complex value"),
    ] {
        let err = e
            .map(src, &[("a", &a), ("b", &b), ("x", &x)], &out, dtype)
            .expect_err(src)
            .to_string();
        assert!(err.contains(what), "{src}: {err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(!out.exists(), "{src} left its output");
    }
}
