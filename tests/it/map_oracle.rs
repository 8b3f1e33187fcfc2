//! `map` and `cast` against independent oracles: every expression case pairs the text with
//! a hand-written Rust closure, evaluated element by element, at budgets that force many
//! tiles; inputs hold NaN, ±inf, zeros and negatives, and come in mixed dtypes.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::float_cmp,
    clippy::type_complexity
)]

use crate::common::{Lcg, engine_on, on_every_backend, read_npy_data, write_npy};
use half::{bf16, f16};
use tilestream::{DType, Element, Engine, MemoryBudget, TensorFile};

const N: usize = 20_011;

fn inputs(dir: &std::path::Path) -> (TensorFile, TensorFile, Vec<f64>, Vec<f64>) {
    let mut rng = Lcg(42);
    let mut x: Vec<f32> = (0..N).map(|_| ((rng.f64() - 0.5) * 20.0) as f32).collect();
    for (i, v) in [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        3.5,
    ]
    .into_iter()
    .enumerate()
    {
        x[i * 997] = v;
    }
    let y: Vec<i16> = (0..N)
        .map(|_| (rng.f64() * 2000.0 - 1000.0) as i16)
        .collect();
    write_npy(
        &dir.join("x.npy"),
        DType::F32,
        &[N],
        bytemuck::cast_slice(&x),
    );
    write_npy(
        &dir.join("y.npy"),
        DType::I16,
        &[N],
        bytemuck::cast_slice(&y),
    );
    (
        TensorFile::open(dir.join("x.npy")).unwrap(),
        TensorFile::open(dir.join("y.npy")).unwrap(),
        x.iter().map(|&v| f64::from(v)).collect(),
        y.iter().map(|&v| f64::from(v)).collect(),
    )
}

fn t(c: bool) -> f64 {
    if c { 1.0 } else { 0.0 }
}
/// numpy's minimum: NaN if either is, else the first argument on a tie.
fn nanmin(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a <= b {
        a
    } else {
        b
    }
}
/// numpy's maximum: NaN if either is, else the first argument on a tie.
fn nanmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a >= b {
        a
    } else {
        b
    }
}

on_every_backend! {
fn every_operator_and_function_matches_the_oracle(device) {
    let cases: &[(&str, fn(f64, f64) -> f64)] = &[
        ("x * 2 + 1", |x, _| x * 2.0 + 1.0),
        ("-x - y / 3", |x, y| -x - y / 3.0),
        ("x ** 2 - y ** 0.5", |x, y| x * x - y.sqrt()),
        ("x / y", |x, y| x / y),
        (
            "(x < y) + (x <= 1) * 2 + (x > 0) * 4 + (x >= y) * 8 + (x == 1) * 16 + (x != -1) * 32",
            |x, y| {
                t(x < y)
                    + t(x <= 1.0) * 2.0
                    + t(x > 0.0) * 4.0
                    + t(x >= y) * 8.0
                    + t(x == 1.0) * 16.0
                    + t(x != -1.0) * 32.0
            },
        ),
        ("where(x > 0, x, y)", |x, y| if x > 0.0 { x } else { y }),
        ("abs(x) + sqrt(abs(y))", |x, y| x.abs() + y.abs().sqrt()),
        ("exp(x / 4) - log(abs(y) + 1) + log1p(abs(x))", |x, y| {
            (x / 4.0).exp() - (y.abs() + 1.0).ln() + x.abs().ln_1p()
        }),
        ("log(x)", |x, _| x.ln()),
        ("sqrt(x)", |x, _| x.sqrt()),
        ("sin(x) * cos(y) + tanh(x)", |x, y| {
            x.sin() * y.cos() + x.tanh()
        }),
        ("floor(x) + ceil(x) * 10 + round(x) * 100", |x, _| {
            x.floor() + x.ceil() * 10.0 + x.round_ties_even() * 100.0
        }),
        ("isnan(x) + isnan(x / 0)", |x, _| {
            t(x.is_nan()) + t((x / 0.0).is_nan())
        }),
        ("min(x, y) + max(x, 0)", |x, y| {
            nanmin(x, y) + nanmax(x, 0.0)
        }),
        ("clip(x, -2, 2.5)", |x, _| nanmin(nanmax(x, -2.0), 2.5)),
        ("fma(x, y, 1 / 3) + fma(2, 3, 1)", |x, y| {
            x.mul_add(y, 1.0 / 3.0) + 7.0
        }),
        ("2 * 3 + x * 0 + inf", |x, _| 6.0 + x * 0.0 + f64::INFINITY),
        (
            "where(isnan(x), -1, x) + nan * 0",
            |x, _| if x.is_nan() { -1.0 } else { x } + f64::NAN * 0.0,
        ),
    ];
    let libm = ["exp(", "log(", "log1p(", "sin(", "cos(", "tanh(", "**"];
    let dir = tempfile::tempdir().unwrap();
    let (xf, yf, x, y) = inputs(dir.path());
    let named = [("x", &xf), ("y", &yf)];
    for (k, (src, f)) in cases.iter().enumerate() {
        // 96 KiB forces about 12-18 tiles of this 20011-element input; 1 GiB makes one
        for budget in [96u64 << 10, 1 << 30] {
            let e = engine_on(device, budget);
            let out = dir.path().join(format!("o{k}_{budget}.npy"));
            let r = e.map(src, &named, &out, Some(DType::F64)).unwrap();
            if budget < 1 << 20 {
                assert!(r.tiles >= 10, "{src}: only {} tiles", r.tiles);
            }
            let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
            for i in 0..N {
                let want = f(x[i], y[i]);
                // the math library's functions may differ in the last bit between the
                // CPU's libm and CUDA's (docs/gpu.md): a sum of such terms that nearly
                // cancel differs by more than its own magnitude allows, so its error is
                // measured against its operands' magnitude there
                let scale = if libm.iter().any(|f| src.contains(f)) {
                    want.abs().max(x[i].abs()).max(y[i].abs())
                } else {
                    want.abs()
                };
                let ok = (got[i].is_nan() && want.is_nan())
                    || got[i] == want
                    || (got[i] - want).abs() <= 1e-12 * scale;
                assert!(
                    ok,
                    "{src} at {i} (x={}, y={}): got {}, want {want}",
                    x[i], y[i], got[i]
                );
            }
        }
    }
}
}

#[test]
fn output_dtypes_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let (xf, yf, x, y) = inputs(dir.path());
    let e = Engine::new(MemoryBudget::new(128 << 10)).unwrap();
    // default dtype: the widest float input (f32 here)
    let o = dir.path().join("d.npy");
    let r = e.map("x + y", &[("x", &xf), ("y", &yf)], &o, None).unwrap();
    assert_eq!(r.output_dtype, "f32");
    // integers only: f64
    let r = e.map("y * 2", &[("y", &yf)], &o, None).unwrap();
    assert_eq!(r.output_dtype, "f64");
    // f16 and u8 results: one cast of the f64 value, round to nearest even / saturate
    e.map("x * 2 + 1", &[("x", &xf)], &o, Some(DType::F16))
        .unwrap();
    let got: Vec<f16> = bytemuck::pod_collect_to_vec(&read_npy_data(&o));
    for i in 0..N {
        let want = f16::from_f64(x[i] * 2.0 + 1.0);
        assert!(
            got[i] == want || got[i].is_nan() && want.is_nan(),
            "{i}: {} vs {want}",
            got[i]
        );
    }
    e.map("y / 4", &[("y", &yf)], &o, Some(DType::U8)).unwrap();
    let got: Vec<u8> = read_npy_data(&o);
    for i in 0..N {
        assert_eq!(
            f64::from(got[i]),
            (y[i] / 4.0).trunc().clamp(0.0, 255.0),
            "{i}"
        );
    }
}

#[test]
fn band_indexing_ndvi() {
    let dir = tempfile::tempdir().unwrap();
    let (bands, h, w) = (8usize, 37usize, 53usize);
    let mut rng = Lcg(3);
    let s: Vec<u16> = (0..bands * h * w)
        .map(|_| (rng.f64() * 4000.0) as u16)
        .collect();
    write_npy(
        &dir.path().join("s.npy"),
        DType::U16,
        &[bands, h, w],
        bytemuck::cast_slice(&s),
    );
    let sf = TensorFile::open(dir.path().join("s.npy")).unwrap();
    let o = dir.path().join("ndvi.npy");
    let e = Engine::new(MemoryBudget::new(80 << 10)).unwrap();
    let r = e
        .map(
            "(s[7] - s[3]) / (s[7] + s[3])",
            &[("s", &sf)],
            &o,
            Some(DType::F32),
        )
        .unwrap();
    assert_eq!(r.output_shape, vec![h, w]);
    assert!(r.tiles > 1);
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&o));
    let plane = h * w;
    for i in 0..plane {
        let (nir, red) = (f64::from(s[7 * plane + i]), f64::from(s[3 * plane + i]));
        let want = ((nir - red) / (nir + red)) as f32;
        assert!(got[i] == want || got[i].is_nan() && want.is_nan(), "{i}");
    }
}

#[test]
fn map_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (xf, _, _, _) = inputs(dir.path());
    let e = Engine::new(MemoryBudget::new(1 << 20)).unwrap();
    let o = dir.path().join("o.npy");
    let err = |src: &str, named: &[(&str, &TensorFile)]| {
        e.map(src, named, &o, None).unwrap_err().to_string()
    };
    assert!(err("x +* 2", &[("x", &xf)]).contains("at column 4"));
    assert!(err("x + z", &[("x", &xf)]).contains("unknown input 'z'"));
    assert!(err("x[2]", &[("x", &xf)]).contains("out of range"));
    assert!(err("1 + 2", &[("x", &xf)]).contains("uses no input"));
    let short = dir.path().join("short.npy");
    write_npy(&short, DType::F32, &[7], &[0u8; 28]);
    let sf = TensorFile::open(&short).unwrap();
    assert!(err("x + s", &[("x", &xf), ("s", &sf)]).contains("must have the same shape"));
    assert!(
        e.map("x * 2", &[("x", &xf)], dir.path().join("x.npy"), None)
            .unwrap_err()
            .to_string()
            .contains("is also an input")
    );
    assert!(!o.exists());
}

on_every_backend! {
fn casts_round_saturate_and_are_exact_between_integers(device) {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_on(device, 128 << 10);
    let cast = |vals: &[u8], from: DType, shape: usize, to: DType| -> Vec<u8> {
        let i = dir.path().join(format!("in_{from}.npy"));
        let o = dir.path().join(format!("out_{from}_{to}.npy"));
        write_npy(&i, from, &[shape], vals);
        e.cast(&TensorFile::open(&i).unwrap(), &o, to).unwrap();
        read_npy_data(&o)
    };
    // float -> integer: toward zero, saturating, NaN -> 0 (hand-written expectations)
    let f: Vec<f64> = vec![
        -1e300,
        -129.7,
        -128.2,
        -1.5,
        -0.5,
        0.5,
        1.9,
        126.9,
        127.99,
        300.0,
        f64::NAN,
        f64::INFINITY,
    ];
    let got: Vec<i8> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&f),
        DType::F64,
        f.len(),
        DType::I8,
    ));
    assert_eq!(
        got,
        vec![-128, -128, -128, -1, 0, 0, 1, 126, 127, 127, 0, 127]
    );
    let got: Vec<u16> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&f),
        DType::F64,
        f.len(),
        DType::U16,
    ));
    assert_eq!(got, vec![0, 0, 0, 0, 0, 0, 1, 126, 127, 300, 0, 65535]);
    // integer -> integer: exact beyond 2^53, saturating
    let big: Vec<i64> = vec![i64::MAX, i64::MIN, (1 << 53) + 1, -1, 70_000];
    let got: Vec<u64> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&big),
        DType::I64,
        big.len(),
        DType::U64,
    ));
    assert_eq!(got, vec![i64::MAX as u64, 0, (1 << 53) + 1, 0, 70_000]);
    let got: Vec<i16> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&big),
        DType::I64,
        big.len(),
        DType::I16,
    ));
    assert_eq!(got, vec![i16::MAX, i16::MIN, i16::MAX, -1, i16::MAX]);
    // f32 -> f16 / bf16 (hardware slice path) equals the scalar round-to-nearest-even,
    // over every f32 with a 16-bit-aligned mantissa pattern and their halfway neighbours
    let mut rng = Lcg(11);
    let mut xs: Vec<f32> = (0..50_000)
        .map(|_| f32::from_bits(rng.next_u64() as u32))
        .collect();
    xs.extend([
        65504.0,
        65520.0,
        65519.99,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        5.96e-8,
        2.98e-8,
        -0.0,
    ]);
    let h: Vec<f16> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&xs),
        DType::F32,
        xs.len(),
        DType::F16,
    ));
    let b: Vec<bf16> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&xs),
        DType::F32,
        xs.len(),
        DType::BF16,
    ));
    for (i, &v) in xs.iter().enumerate() {
        // reference: half's scalar f32 conversions (one rounding, nearest even)
        let (wh, wb) = (f16::from_f32(v), bf16::from_f32(v));
        assert!(
            h[i].to_bits() == wh.to_bits() || h[i].is_nan() && wh.is_nan(),
            "f16 of {v:e}: {} vs {wh}",
            h[i]
        );
        assert!(
            b[i].to_bits() == wb.to_bits() || b[i].is_nan() && wb.is_nan(),
            "bf16 of {v:e}: {} vs {wb}",
            b[i]
        );
    }
    // and back to f32 exactly
    let back: Vec<f32> = bytemuck::pod_collect_to_vec(&cast(
        bytemuck::cast_slice(&h),
        DType::F16,
        h.len(),
        DType::F32,
    ));
    for (i, v) in h.iter().enumerate() {
        assert!(back[i] == v.to_f32() || back[i].is_nan(), "{i}");
    }
    // every dtype pair runs and round-trips small integers
    let small: Vec<u8> = (0..100).collect();
    for from in DType::ALL {
        let vals: Vec<u8> = tilestream::dispatch_dtype!(from, T => {
            small.iter().flat_map(|&v| bytemuck::bytes_of(&T::from_f64(f64::from(v) % if from == DType::Bool { 2.0 } else { 1000.0 })).to_vec()).collect()
        }, complex => unreachable!("the tests give real dtypes here"));
        for to in DType::ALL {
            let out = cast(&vals, from, small.len(), to);
            let got: Vec<f64> = tilestream::dispatch_dtype!(to, T => bytemuck::pod_collect_to_vec::<u8, T>(&out).into_iter().map(Element::to_f64).collect(), complex => unreachable!("the tests give real dtypes here"));
            let want: Vec<f64> = small
                .iter()
                .map(|&v| {
                    if from == DType::Bool || to == DType::Bool {
                        f64::from(v % 2 != 0 || (from != DType::Bool && v != 0))
                    } else {
                        f64::from(v)
                    }
                })
                .collect();
            let want: Vec<f64> = if from == DType::Bool {
                small.iter().map(|&v| f64::from(v % 2)).collect()
            } else {
                want
            };
            assert_eq!(got, want, "{from} -> {to}");
        }
    }
}
}

on_every_backend! {
    /// `clip` against numpy's rule written out here (`min(max(x, lo), hi)`, NaN stays
    /// NaN), in the input's dtype, at a budget that cuts many tiles; and the same bytes
    /// from the command line. A range that is not one is refused in one line.
    fn clip_limits_each_element_as_numpy_does(device) {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Lcg(11);
        let n = 50_000usize;
        let mut x: Vec<f32> = (0..n).map(|_| (rng.f64() * 20.0 - 10.0) as f32).collect();
        x[7] = f32::NAN;
        x[8] = f32::INFINITY;
        x[9] = f32::NEG_INFINITY;
        let src = dir.path().join("x.npy");
        write_npy(&src, DType::F32, &[500, 100], bytemuck::cast_slice(&x));
        let spec = |lo: f64, hi: f64, out: &std::path::Path| {
            tilestream::OpSpec::Clip(tilestream::spec::ClipSpec {
                input: tilestream::Source::file(&src),
                output: out.to_path_buf(),
                lo,
                hi,
                dtype: None,
            })
        };
        let out = dir.path().join("c.npy");
        let e = engine_on(device, 1 << 20).with_max_tile_bytes(16 << 10);
        e.run_spec(&spec(-2.5, 3.0, &out)).unwrap();
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
        assert_eq!(got.len(), n);
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let want = if v.is_nan() { v } else { v.clamp(-2.5, 3.0) };
            assert!(g == want || (g.is_nan() && want.is_nan()), "element {i}: {v} -> {g}, want {want}");
        }
        let cli = dir.path().join("cli.npy");
        let (s, c) = (src.to_str().unwrap(), cli.to_str().unwrap());
        crate::common::ok(&["clip", s, c, "--lo", "-2.5", "--hi", "3", "--memory", "1MiB"]);
        assert_eq!(read_npy_data(&cli), read_npy_data(&out));
        let e = e.run_spec(&spec(3.0, -2.5, &out)).unwrap_err().to_string();
        assert!(e.contains("clip: bounds [3, -2.5] are not a range"), "{e}");
    }
}
