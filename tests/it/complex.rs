//! complex64 and complex128 arrays: read in both byte orders and both memory orders, and
//! what tilestream runs on them (reductions: sums of the parts, and the extremes, their
//! positions and `nan` forms, checked element for element against numpy's loops; casts
//! between complex dtypes and from real ones, affines, transposes, matmul, conversions to
//! `.npy` and Zarr), checked against oracles computed here from the parts; GDAL's complex
//! GeoTIFFs against GDAL; every other operation refused in one line, leaving nothing
//! behind.
//!
//! `python/tests/test_complex.py` checks the same against numpy itself.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)]

use std::path::Path;

use crate::common::{Lcg, engine_on, ok, read_npy_data, run, write_npy};
use crate::npy_orders::write_stored;
use tilestream::device::DeviceRequest;
use tilestream::{DType, Reduce, ReduceOver, TensorFile};

/// Integer-valued parts in [-500, 500): every sum of them is exact in f64, so the sums
/// can be compared bit for bit whatever the order of summation.
fn parts(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Lcg(seed);
    (0..2 * n)
        .map(|_| (rng.next_u64() % 1000) as f64 - 500.0)
        .collect()
}

/// The parts as the bytes of a complex `dtype` array (C order, little-endian).
fn bytes_of(dtype: DType, parts: &[f64]) -> Vec<u8> {
    match dtype {
        DType::C64 => parts
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect(),
        _ => parts.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    }
}

/// The oracle: for each output of a reduction of a complex array of `shape` over the axes
/// `axes`, the list of the flat indices of its elements.
fn groups(shape: &[usize], axes: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
    let outputs: usize = kept.iter().map(|&a| shape[a]).product();
    let mut out = vec![Vec::new(); outputs];
    for k in 0..n {
        // the coordinates of k, then the C-order index of its kept ones
        let mut rem = k;
        let mut coord = vec![0; shape.len()];
        for a in (0..shape.len()).rev() {
            coord[a] = rem % shape[a];
            rem /= shape[a];
        }
        let o = kept.iter().fold(0, |o, &a| o * shape[a] + coord[a]);
        out[o].push(k);
    }
    out
}

/// What numpy gives for `op` of the elements `idx` of the complex array of `parts`: the
/// complex sum or mean as (re, im), or the variance or standard deviation (the mean of
/// `|x - mean|^2`, over `n - ddof`) as (value, 0).
fn oracle(op: Reduce, parts: &[f64], idx: &[usize]) -> (f64, f64) {
    let n = idx.len() as f64;
    let re: f64 = idx.iter().map(|&k| parts[2 * k]).sum();
    let im: f64 = idx.iter().map(|&k| parts[2 * k + 1]).sum();
    match op {
        Reduce::Sum => (re, im),
        Reduce::Mean => (re / n, im / n),
        Reduce::Var { ddof }
        | Reduce::Std { ddof }
        | Reduce::NanVar { ddof }
        | Reduce::NanStd { ddof } => {
            let (mr, mi) = (re / n, im / n);
            let ss: f64 = idx
                .iter()
                .map(|&k| (parts[2 * k] - mr).powi(2) + (parts[2 * k + 1] - mi).powi(2))
                .sum();
            let var = ss / (n - f64::from(ddof));
            (
                if matches!(op, Reduce::Std { .. } | Reduce::NanStd { .. }) {
                    var.sqrt()
                } else {
                    var
                },
                0.0,
            )
        }
        _ => unreachable!("not a reduction complex arrays take"),
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn complex_reductions_equal_numpys_in_every_order_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&[usize], ReduceOver, &[usize])] = &[
        (&[2003, 37], ReduceOver::Axis(0), &[0]),
        (&[2003, 37], ReduceOver::Axis(1), &[1]),
        (&[2003, 37], ReduceOver::All, &[0, 1]),
        (&[13, 17, 19], ReduceOver::Axes(0b101), &[0, 2]),
        (&[5001], ReduceOver::All, &[0]),
    ];
    let ops = [
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Var { ddof: 0 },
        Reduce::Std { ddof: 1 },
        // without NaN, nanvar is var (its own kernel, not the parts')
        Reduce::NanVar { ddof: 1 },
        Reduce::NanStd { ddof: 0 },
    ];
    for dtype in DType::COMPLEX {
        for (i, &(shape, over, axes)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let p = parts(n, i as u64 + 1);
            let c_bytes = bytes_of(dtype, &p);
            let files: Vec<TensorFile> =
                [(false, false), (true, false), (false, true), (true, true)]
                    .into_iter()
                    .map(|(fortran, big)| {
                        let f = d.join(format!("{dtype}_{i}_{fortran}_{big}.npy"));
                        write_stored(&f, dtype, shape, &c_bytes, fortran, big);
                        TensorFile::open(&f).unwrap()
                    })
                    .collect();
            let groups = groups(shape, axes);
            for op in ops {
                let what = format!("{dtype} {shape:?} {over:?} {op:?}");
                let (first, _) = engine_on(DeviceRequest::Cpu, 64 << 20)
                    .reduce(&files[0], op, over)
                    .unwrap();
                let want_dtype = if matches!(op, Reduce::Sum | Reduce::Mean) {
                    DType::C128
                } else {
                    DType::F64
                };
                assert_eq!(first.dtype(), want_dtype, "{what}");
                let got = first.to_f64();
                for (o, idx) in groups.iter().enumerate() {
                    let (re, im) = oracle(op, &p, idx);
                    if want_dtype == DType::C128 {
                        let exact = op == Reduce::Sum;
                        let (a, b) = (got[2 * o], got[2 * o + 1]);
                        assert!(
                            if exact {
                                a == re && b == im
                            } else {
                                close(a, re) && close(b, im)
                            },
                            "{what}: output {o} is {a}+{b}j, numpy's {re}+{im}j"
                        );
                    } else {
                        assert!(
                            close(got[o], re),
                            "{what}: output {o} is {}, numpy's {re}",
                            got[o]
                        );
                    }
                }
                // the same bytes from every order and at budgets of many tiles
                for (k, x) in files.iter().enumerate() {
                    for budget in [3 << 20, 64 << 20] {
                        let (a, report) = engine_on(DeviceRequest::Cpu, budget)
                            .reduce(x, op, over)
                            .unwrap();
                        assert!(a.bytes() == first.bytes(), "{what}: file {k} at {budget}");
                        assert!(report.peak_reserved_bytes <= budget, "{what}: {budget}");
                    }
                }
            }
        }
    }
}

/// Parts for the orderings: small integers, NaN in either part or both (each NaN
/// element told apart by its other part), infinities of both signs, `+0` beside `-0`.
fn awkward_parts(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Lcg(seed);
    (0..2 * n)
        .map(|_| match rng.next_u64() % 40 {
            0..=2 => f64::NAN,
            3 => f64::INFINITY,
            4 => f64::NEG_INFINITY,
            5..=7 => -0.0,
            8..=10 => 0.0,
            r => (r % 7) as f64 - 3.0,
        })
        .collect()
}

fn cx(p: &[f64], k: usize) -> (f64, f64) {
    (p[2 * k], p[2 * k + 1])
}

fn cx_nan(v: (f64, f64)) -> bool {
    v.0.is_nan() || v.1.is_nan()
}

/// numpy's order of complex numbers without NaN: `a` before `b`, by real part, then
/// imaginary part (`-0` and `0` equal).
fn before(a: (f64, f64), b: (f64, f64), max: bool) -> bool {
    let (a, b) = if max { (b, a) } else { (a, b) };
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// The position in `idx` of the element numpy picks, written from numpy's loops
/// (`umath/loops.c.src`, `arraytypes.c.src`, `lib/nanfunctions.py`): `None` where numpy
/// raises (nanargmin of a slice of NaN alone).
fn numpy_pick(op: Reduce, p: &[f64], idx: &[usize]) -> Option<usize> {
    let v = |i: usize| cx(p, idx[i]);
    let max = matches!(
        op,
        Reduce::Max | Reduce::ArgMax | Reduce::NanMax | Reduce::NanArgMax
    );
    match op {
        // maximum.reduce and argmax: the first NaN, else the first strict extreme
        Reduce::Min | Reduce::Max | Reduce::ArgMin | Reduce::ArgMax => {
            let mut best = 0;
            for i in 0..idx.len() {
                if cx_nan(v(i)) {
                    return Some(i);
                }
                if before(v(i), v(best), max) {
                    best = i;
                }
            }
            Some(best)
        }
        // fmax.reduce: NaN skipped; a slice of NaN alone keeps its first element
        Reduce::NanMin | Reduce::NanMax => {
            let mut best = 0;
            for i in 1..idx.len() {
                if !cx_nan(v(i)) && (cx_nan(v(best)) || before(v(i), v(best), max)) {
                    best = i;
                }
            }
            Some(best)
        }
        // _replace_nan(a, +-inf) then argmin/argmax; raises on a slice of NaN alone
        Reduce::NanArgMin | Reduce::NanArgMax => {
            if idx.iter().all(|&k| cx_nan(cx(p, k))) {
                return None;
            }
            let fill = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            let w = |i: usize| if cx_nan(v(i)) { (fill, 0.0) } else { v(i) };
            Some((1..idx.len()).fold(0, |b, i| if before(w(i), w(b), max) { i } else { b }))
        }
        _ => unreachable!("{op:?}"),
    }
}

#[test]
fn complex_extremes_counts_and_nan_sums_pick_numpys_elements_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&[usize], ReduceOver, &[usize])] = &[
        (&[20011, 13], ReduceOver::Axis(0), &[0]),
        (&[20011, 13], ReduceOver::Axis(1), &[1]),
        (&[20011, 13], ReduceOver::All, &[0, 1]),
        (&[7, 11, 13], ReduceOver::Axes(0b101), &[0, 2]),
        (&[4, 3], ReduceOver::Axis(1), &[1]),
    ];
    let picks = [
        Reduce::Min,
        Reduce::Max,
        Reduce::NanMin,
        Reduce::NanMax,
        Reduce::ArgMin,
        Reduce::ArgMax,
        Reduce::NanArgMin,
        Reduce::NanArgMax,
    ];
    let sums = [
        Reduce::Count,
        Reduce::NanSum,
        Reduce::NanMean,
        Reduce::Sum,
        Reduce::NanVar { ddof: 0 },
        Reduce::NanStd { ddof: 1 },
    ];
    for dtype in DType::COMPLEX {
        let size = dtype.size() / 2;
        for (i, &(shape, over, axes)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let mut p = awkward_parts(n, 40 + i as u64);
            if shape.len() == 2 && shape[1] > 5 {
                // a column of NaN alone, its elements told apart; one with NaN real parts
                for r in 0..shape[0] {
                    p[2 * (r * shape[1] + 3)] = f64::NAN;
                    p[2 * (r * shape[1] + 3) + 1] = (r % 5) as f64;
                    p[2 * (r * shape[1] + 5)] = f64::NAN;
                }
            }
            if shape == [4, 3] {
                // the ties numpy's replacement of NaN decides, and `-0` beside `0`
                let (nan, inf) = (f64::NAN, f64::INFINITY);
                p = vec![
                    nan, 0.0, inf, 1.0, inf, 0.0, // nanargmin: 0
                    nan, 5.0, -inf, -1.0, -inf, 0.0, // nanargmax: 0
                    1.0, nan, 1.0, 0.0, 1.0, -0.0, // nanmin, nanmax: 1 + 0j
                    -0.0, 0.0, 0.0, -0.0, nan, nan, // nanmin, nanmax: -0 + 0j
                ];
            }
            let c_bytes = bytes_of(dtype, &p);
            let files: Vec<TensorFile> =
                [(false, false), (true, false), (false, true), (true, true)]
                    .into_iter()
                    .map(|(fortran, big)| {
                        let f = d.join(format!("aw_{dtype}_{i}_{fortran}_{big}.npy"));
                        write_stored(&f, dtype, shape, &c_bytes, fortran, big);
                        TensorFile::open(&f).unwrap()
                    })
                    .collect();
            let groups = groups(shape, axes);
            let args_over = !matches!(over, ReduceOver::Axes(_));
            for op in picks.into_iter().chain(sums) {
                let is_arg = matches!(
                    op,
                    Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax
                );
                if is_arg && !args_over {
                    continue;
                }
                let what = format!("{dtype} {shape:?} {over:?} {op:?}");
                let mut want: Vec<u8> = Vec::new();
                let mut refused = false;
                for idx in &groups {
                    if sums.contains(&op) {
                        let kept: Vec<usize> = if op == Reduce::Sum {
                            idx.clone()
                        } else {
                            idx.iter()
                                .copied()
                                .filter(|&k| !cx_nan(cx(&p, k)))
                                .collect()
                        };
                        let re: f64 = kept.iter().map(|&k| p[2 * k]).sum();
                        let im: f64 = kept.iter().map(|&k| p[2 * k + 1]).sum();
                        let c = kept.len() as f64;
                        let (re, im) = match op {
                            Reduce::Count => {
                                want.extend((kept.len() as i64).to_le_bytes());
                                continue;
                            }
                            // numpy's true_divide by c + 0j (Smith's algorithm)
                            Reduce::NanMean if c > 0.0 => {
                                ((re + im * 0.0) * (1.0 / c), (im - re * 0.0) * (1.0 / c))
                            }
                            Reduce::NanMean => (re / c, im / c),
                            // numpy's nanvar: the mean of |x - mean|^2 over c - ddof, NaN
                            // where that is not positive
                            Reduce::NanVar { ddof } | Reduce::NanStd { ddof } => {
                                let (mr, mi) = (re / c, im / c);
                                let ss: f64 = kept
                                    .iter()
                                    .map(|&k| (p[2 * k] - mr).powi(2) + (p[2 * k + 1] - mi).powi(2))
                                    .sum();
                                let dof = c - f64::from(ddof);
                                let var = if dof > 0.0 { ss / dof } else { f64::NAN };
                                let v = if matches!(op, Reduce::NanStd { .. }) {
                                    var.sqrt()
                                } else {
                                    var
                                };
                                want.extend(v.to_le_bytes());
                                continue;
                            }
                            _ => (re, im),
                        };
                        want.extend(re.to_le_bytes());
                        want.extend(im.to_le_bytes());
                        continue;
                    }
                    match numpy_pick(op, &p, idx) {
                        None => refused = true,
                        Some(at) if is_arg => {
                            // along one axis, the index along it; else the flat index
                            let along = match over {
                                ReduceOver::Axis(a) => {
                                    let stride: usize = shape[a + 1..].iter().product();
                                    idx[at] / stride % shape[a]
                                }
                                _ => idx[at],
                            };
                            want.extend((along as i64).to_le_bytes());
                        }
                        Some(at) => {
                            let k = idx[at];
                            want.extend(&c_bytes[2 * size * k..2 * size * (k + 1)]);
                        }
                    }
                }
                for (k, x) in files.iter().enumerate() {
                    // a Fortran-order file is decoded whole (k odd): 12 MiB holds it
                    let small = if k % 2 == 1 { 12 << 20 } else { 1 << 20 };
                    for budget in [small, 64 << 20] {
                        let got = engine_on(DeviceRequest::Cpu, budget).reduce(x, op, over);
                        if refused {
                            let e = got
                                .err()
                                .unwrap_or_else(|| panic!("{what} ran"))
                                .to_string();
                            assert!(e.contains("NaN") && !e.contains('\n'), "{what}: {e}");
                            continue;
                        }
                        let (a, report) = got.unwrap();
                        assert!(report.peak_reserved_bytes <= budget, "{what}: {budget}");
                        if budget == 1 << 20 && n > 100_000 {
                            assert!(report.tiles > 1, "{what}: {} tiles", report.tiles);
                        }
                        if matches!(
                            op,
                            Reduce::Sum
                                | Reduce::NanSum
                                | Reduce::NanMean
                                | Reduce::NanVar { .. }
                                | Reduce::NanStd { .. }
                        ) {
                            // the sums of small integers are exact in any order, but not
                            // which NaN a sum of infinities ends on, and a variance is
                            // not numpy's two passes: compared as values
                            let (g, w) = (a.to_f64(), f64s(&want));
                            assert!(
                                g.iter()
                                    .zip(&w)
                                    .all(|(&g, &w)| close(g, w) || (g.is_nan() && w.is_nan())),
                                "{what}: file {k} at {budget}"
                            );
                            continue;
                        }
                        assert!(a.bytes() == want, "{what}: file {k} at {budget}");
                    }
                }
            }
        }
    }
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn complex_casts_transposes_and_conversions_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shape = [301usize, 77];
    let n = shape[0] * shape[1];
    // parts that are not integers: c128 to c64 rounds each part as f64 to f32 does
    let mut rng = Lcg(7);
    let p: Vec<f64> = (0..2 * n).map(|_| (rng.f64() - 0.4) * 1e5).collect();
    let c128 = d.join("c128.npy");
    write_stored(
        &c128,
        DType::C128,
        &shape,
        &bytes_of(DType::C128, &p),
        true,
        true,
    );
    for budget in ["3MiB", "64MiB"] {
        // complex128 to complex64: each part rounded to nearest
        let c64 = d.join(format!("c64_{budget}.npy"));
        ok(&[
            "--memory",
            budget,
            "cast",
            path(&c128),
            path(&c64),
            "--dtype",
            "c64",
        ]);
        let want: Vec<u8> = p.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
        assert!(read_npy_data(&c64) == want, "c128 -> c64 at {budget}");
        assert!(
            std::fs::read(&c64).unwrap()[..64]
                .windows(5)
                .any(|w| w == b"'<c8'")
        );
        // and back: exact
        let back = d.join(format!("back_{budget}.npy"));
        ok(&[
            "--memory",
            budget,
            "convert",
            path(&c64),
            path(&back),
            "--dtype",
            "c128",
        ]);
        let want: Vec<u8> = p
            .iter()
            .flat_map(|&v| f64::from(v as f32).to_le_bytes())
            .collect();
        assert!(read_npy_data(&back) == want, "c64 -> c128 at {budget}");
        // a Fortran-order, big-endian file converted: C order, little-endian, the same values
        let conv = d.join(format!("conv_{budget}.npy"));
        ok(&["--memory", budget, "convert", path(&c128), path(&conv)]);
        assert!(
            read_npy_data(&conv) == bytes_of(DType::C128, &p),
            "convert at {budget}"
        );
        // transposed: element (j, i) is (i, j)
        let t = d.join(format!("t_{budget}.npy"));
        ok(&["--memory", budget, "transpose", path(&c128), path(&t)]);
        let got = read_npy_data(&t);
        for i in 0..shape[0] {
            for j in 0..shape[1] {
                let (s, o) = (i * shape[1] + j, j * shape[0] + i);
                assert!(
                    got[o * 16..o * 16 + 16] == bytes_of(DType::C128, &p[2 * s..2 * s + 2])[..],
                    "transpose at {budget}: ({i}, {j})"
                );
            }
        }
        let t64 = d.join(format!("t64_{budget}.npy"));
        ok(&["--memory", budget, "transpose", path(&c64), path(&t64)]);
        let (src, got) = (read_npy_data(&c64), read_npy_data(&t64));
        for i in 0..shape[0] {
            for j in 0..shape[1] {
                let (s, o) = (i * shape[1] + j, j * shape[0] + i);
                assert!(
                    got[o * 8..o * 8 + 8] == src[s * 8..s * 8 + 8],
                    "transpose c64"
                );
            }
        }
    }
    // scaled and offset as numpy does for a real scale and offset: the real part
    // `scale * re + offset` (rounded once), the imaginary part `scale * im`
    for (dtype, name) in [(DType::C128, "c128"), (DType::C64, "c64")] {
        let a = d.join(format!("affine_{name}.npy"));
        ok(&[
            "--memory",
            "3MiB",
            "affine",
            path(&c128),
            path(&a),
            "--scale",
            "2.5",
            "--offset",
            "-1",
            "--dtype",
            name,
        ]);
        let parts: Vec<f64> = p
            .chunks_exact(2)
            .flat_map(|c| [c[0].mul_add(2.5, -1.0), c[1] * 2.5])
            .collect();
        assert!(
            read_npy_data(&a) == bytes_of(dtype, &parts),
            "affine into {name}"
        );
    }
    // a complex result cast to complex64 on its way out
    let s = d.join("sum_c64.npy");
    ok(&[
        "--memory",
        "3MiB",
        "reduce",
        path(&c128),
        path(&s),
        "--op",
        "sum",
        "--axis",
        "0",
        "--dtype",
        "c64",
    ]);
    let sums: Vec<f64> = (0..shape[1])
        .flat_map(|j| {
            let col = (0..shape[0]).map(|i| i * shape[1] + j);
            let re: f64 = col.clone().map(|k| p[2 * k]).sum();
            let im: f64 = col.map(|k| p[2 * k + 1]).sum();
            [re, im]
        })
        .collect();
    assert!(
        std::fs::read(&s).unwrap()[..64]
            .windows(5)
            .any(|w| w == b"'<c8'")
    );
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&s));
    for (k, (&g, &want)) in got.iter().zip(&sums).enumerate() {
        // the f64 sum rounded to f32: within an f32 rounding of this order's sum
        assert!(
            (f64::from(g) - want).abs() <= 1e-6 * want.abs().max(1.0),
            "sum as c64: part {k}: {g} against {want}"
        );
    }
    // real to complex: the real part cast, the imaginary part zero
    let ints: Vec<i32> = (0..n as i32)
        .map(|v| (v * 7919) % 200_001 - 100_000)
        .collect();
    let xi = d.join("ints.npy");
    write_npy(&xi, DType::I32, &shape, bytemuck::cast_slice(&ints));
    let ci = d.join("ints_c64.npy");
    ok(&[
        "--memory",
        "256KiB",
        "cast",
        path(&xi),
        path(&ci),
        "--dtype",
        "complex64",
    ]);
    let want: Vec<u8> = ints
        .iter()
        .flat_map(|&v| [(v as f32).to_le_bytes(), 0f32.to_le_bytes()])
        .flatten()
        .collect();
    assert!(read_npy_data(&ci) == want, "i32 -> c64");
    // a Zarr store of complex128 and back
    let z = d.join("c.zarr");
    ok(&["--memory", "4MiB", "convert", path(&c128), path(&z)]);
    let meta: String = std::fs::read_to_string(z.join("zarr.json"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(
        meta.contains("\"complex128\"") && meta.contains("\"fill_value\":[0.0,0.0]"),
        "{meta}"
    );
    let from_z = d.join("from_zarr.npy");
    ok(&["--memory", "1MiB", "convert", path(&z), path(&from_z)]);
    assert!(
        read_npy_data(&from_z) == bytes_of(DType::C128, &p),
        "zarr round trip"
    );
    let info = ok(&["info", path(&c128)]);
    assert!(
        info.contains("c128") && info.contains("Fortran order, big-endian"),
        "{info}"
    );
}

/// The bytes of `v` (each complex value two parts) as `dtype`.
fn values_as(dtype: DType, v: &[f64]) -> Vec<u8> {
    match dtype {
        DType::C64 | DType::F32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
    }
}

/// `x @ w` with complex operands (and a real one beside a complex one) equals the complex
/// product computed here, bit for bit (small integer parts: every sum is exact in f32),
/// in numpy's dtype (or the one asked for), whatever the budget cuts it into.
#[test]
fn complex_matmul_equals_the_complex_product_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (r, k, n) = (700usize, 13usize, 6usize);
    let small = |len: usize, seed: u64| -> Vec<f64> {
        let mut rng = Lcg(seed);
        (0..len)
            .map(|_| (rng.next_u64() % 17) as f64 - 8.0)
            .collect()
    };
    // (x dtype, w dtype, --dtype, the product's dtype)
    let cases = [
        (DType::C64, DType::C64, None, DType::C64),
        (DType::C128, DType::F64, None, DType::C128),
        (DType::F32, DType::C64, None, DType::C64),
        (DType::C64, DType::F32, None, DType::C64),
        (DType::C64, DType::C64, Some("complex128"), DType::C128),
        (DType::F32, DType::F32, Some("complex64"), DType::C64),
    ];
    for (case, &(xd, wd, asked, want_dtype)) in cases.iter().enumerate() {
        let parts_of = |dt: DType| if dt.is_complex() { 2 } else { 1 };
        let xv = small(r * k * parts_of(xd), 10 + case as u64);
        let wv = small(k * n * parts_of(wd), 20 + case as u64);
        let at = |v: &[f64], dt: DType, i: usize| -> (f64, f64) {
            if dt.is_complex() {
                (v[2 * i], v[2 * i + 1])
            } else {
                (v[i], 0.0)
            }
        };
        let mut want = Vec::with_capacity(2 * r * n);
        for i in 0..r {
            for j in 0..n {
                let (mut re, mut im) = (0.0, 0.0);
                for l in 0..k {
                    let (a, b) = at(&xv, xd, i * k + l);
                    let (c, e) = at(&wv, wd, l * n + j);
                    re += a * c - b * e;
                    im += a * e + b * c;
                }
                want.extend([re, im]);
            }
        }
        let want = values_as(want_dtype, &want);
        let (x, w) = (d.join("x.npy"), d.join("w.npy"));
        write_npy(&x, xd, &[r, k], &values_as(xd, &xv));
        write_npy(&w, wd, &[k, n], &values_as(wd, &wv));
        for budget in ["64KiB", "16MiB"] {
            let out = d.join(format!("y{case}_{budget}.npy"));
            let mut args = vec!["matmul", path(&x), path(&w), path(&out)];
            args.extend(["--memory", budget, "--progress", "never"]);
            if let Some(a) = asked {
                args.extend(["--dtype", a]);
            }
            ok(&args);
            let info = TensorFile::open(&out).unwrap();
            assert_eq!(info.dtype(), want_dtype, "case {case}");
            assert_eq!(info.shape(), &[r, n], "case {case}");
            assert!(read_npy_data(&out) == want, "case {case} at {budget}");
        }
    }
}

/// numpy's sort order of complex numbers (`npysort`'s `less` of `cfloat_tag`): by real
/// part, then imaginary part, NaN last in each (`R+Rj < R+nanj < nan+Rj < nan+nanj`).
fn numpy_sort_lt(a: (f64, f64), b: (f64, f64)) -> bool {
    let (ar, ai, br, bi) = (a.0, a.1, b.0, b.1);
    // npysort writes `x == x` for "x is not NaN"
    if ar < br {
        !ai.is_nan() || bi.is_nan()
    } else if ar > br {
        bi.is_nan() && !ai.is_nan()
    } else if ar == br || (ar.is_nan() && br.is_nan()) {
        ai < bi || (bi.is_nan() && !ai.is_nan())
    } else {
        br.is_nan()
    }
}

/// `x` rounded to the parts' precision of `dtype`.
fn rd(dtype: DType, x: f64) -> f64 {
    if dtype == DType::C64 {
        f64::from(x as f32)
    } else {
        x
    }
}

/// numpy's `median` (`nanmedian` when `skip_nan`) of the elements `idx`, from
/// `lib/_function_base_impl.py`'s `_median`: the slice sorted in numpy's order; the last
/// element if it is NaN (the greatest bits among the elements tied with it, where numpy
/// leaves the choice to its partition); else `np.mean` of the middle one or two: their
/// sum from `+0` in the parts' precision, then `true_divide` by `n + 0j` (Smith's
/// division, in f64). `nanmedian` sorts the elements that are not NaN; `nan+0j` for none.
fn numpy_median(dtype: DType, p: &[f64], idx: &[usize], skip_nan: bool) -> (f64, f64) {
    let mut v: Vec<(f64, f64)> = idx.iter().map(|&k| cx(p, k)).collect();
    if skip_nan {
        v.retain(|&x| !cx_nan(x));
        if v.is_empty() {
            return (f64::NAN, 0.0);
        }
    }
    v.sort_by(|&a, &b| {
        if numpy_sort_lt(a, b) {
            std::cmp::Ordering::Less
        } else if numpy_sort_lt(b, a) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    let last = v[v.len() - 1];
    if cx_nan(last) {
        let bits = |x: (f64, f64)| (x.0.to_bits(), x.1.to_bits());
        return v
            .iter()
            .copied()
            .filter(|&x| !numpy_sort_lt(x, last))
            .max_by_key(|&x| bits(x))
            .unwrap();
    }
    let m = v.len() / 2;
    let middle = if v.len() % 2 == 1 {
        vec![v[m]]
    } else {
        vec![v[m - 1], v[m]]
    };
    let (mut re, mut im) = (0.0, 0.0);
    for x in &middle {
        re = rd(dtype, re + x.0);
        im = rd(dtype, im + x.1);
    }
    let n = middle.len() as f64;
    let rat = 0.0 / n;
    let scl = 1.0 / (n + 0.0 * rat);
    (
        rd(dtype, (re + im * rat) * scl),
        rd(dtype, (im - re * rat) * scl),
    )
}

#[test]
fn complex_medians_are_numpys_in_every_order_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&[usize], ReduceOver, &[usize])] = &[
        (&[4001, 13], ReduceOver::Axis(0), &[0]),
        (&[4000, 13], ReduceOver::Axis(0), &[0]),
        (&[4000, 13], ReduceOver::Axis(1), &[1]),
        (&[4001, 13], ReduceOver::All, &[0, 1]),
        (&[7, 11, 13], ReduceOver::Axes(0b101), &[0, 2]),
    ];
    for dtype in DType::COMPLEX {
        let size = dtype.size();
        for (i, &(shape, over, axes)) in cases.iter().enumerate() {
            let n: usize = shape.iter().product();
            let mut p = awkward_parts(n, 70 + i as u64);
            if shape.len() == 2 {
                let big = if dtype == DType::C64 {
                    f64::from(f32::MAX)
                } else {
                    f64::MAX
                };
                for r in 0..shape[0] {
                    let at = |c: usize| 2 * (r * shape[1] + c);
                    // real parts of both zero signs, sorted by their imaginary parts
                    p[at(0)] = if r % 3 == 0 { -0.0 } else { 0.0 };
                    p[at(0) + 1] = (r % 7) as f64 - 3.0;
                    // no NaN: a sum of the two middles that overflows
                    p[at(1)] = if r < shape[0] / 2 { big } else { -big / 2.0 };
                    p[at(1) + 1] = big;
                    // an infinite imaginary part: numpy's division makes the real NaN
                    p[at(2)] = 1.0;
                    p[at(2) + 1] = f64::INFINITY;
                    // a column of NaN alone, of every class
                    p[at(3)] = if r % 2 == 0 { f64::NAN } else { r as f64 };
                    p[at(3) + 1] = if r % 3 == 0 { (r % 5) as f64 } else { f64::NAN };
                    // the NaN classes: x+nanj and nan+yj only
                    p[at(4)] = if r % 2 == 0 {
                        f64::NAN
                    } else {
                        (r % 11) as f64
                    };
                    p[at(4) + 1] = if r % 2 == 0 {
                        (r % 13) as f64
                    } else {
                        f64::NAN
                    };
                }
            }
            let c_bytes = bytes_of(dtype, &p);
            // the values as stored (complex64 parts rounded)
            let p: Vec<f64> = p.iter().map(|&x| rd(dtype, x)).collect();
            let groups = groups(shape, axes);
            for skip_nan in [false, true] {
                let name = if skip_nan { "nanmedian" } else { "median" };
                let q = tilestream::Quantiles::parse(name, None, false, None)
                    .unwrap()
                    .unwrap();
                let want: Vec<u8> = groups
                    .iter()
                    .flat_map(|g| {
                        let (re, im) = numpy_median(dtype, &p, g, skip_nan);
                        bytes_of(dtype, &[re, im])
                    })
                    .collect();
                for (fortran, big) in [(false, false), (true, false), (false, true), (true, true)] {
                    let f = d.join(format!("md_{dtype}_{i}_{fortran}_{big}.npy"));
                    write_stored(&f, dtype, shape, &c_bytes, fortran, big);
                    let x = TensorFile::open(&f).unwrap();
                    // many tiles (a Fortran-order file is read through a chunk of
                    // whole columns; over axis 1, each of the 4000 outputs counts its
                    // own digits, which 4 MiB holds once but not once per thread: the
                    // two threads count into one copy)
                    let small = match (over, fortran) {
                        (ReduceOver::Axis(1), false) => 4u64 << 20,
                        (ReduceOver::Axis(1), true) => 8 << 20,
                        (_, true) => 2 << 20,
                        _ => 256 << 10,
                    };
                    for (budget, threads) in [(small, 2), (64 << 20, 1)] {
                        {
                            let e = engine_on(DeviceRequest::Cpu, budget)
                                .with_threads(threads)
                                .unwrap();
                            let (got, report) = e.quantile(&x, over, &q).unwrap();
                            assert_eq!(got.dtype(), dtype);
                            assert!(report.peak_reserved_bytes <= budget);
                            let got = got.bytes();
                            for (o, g) in groups.iter().enumerate() {
                                let (a, b) = (o * size, (o + 1) * size);
                                assert_eq!(
                                    got[a..b],
                                    want[a..b],
                                    "{name} {dtype} {shape:?} {over:?} output {o} \
                                     fortran {fortran} big {big} budget {budget}: {:?}",
                                    numpy_median(dtype, &p, g, skip_nan)
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn what_complex_arrays_do_not_take_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let shape = [64usize, 48];
    let c = d.join("c.npy");
    write_npy(
        &c,
        DType::C64,
        &shape,
        &bytes_of(DType::C64, &parts(64 * 48, 3)),
    );
    let w = d.join("w.npy");
    write_npy(&w, DType::F32, &[48, 4], &[0; 48 * 4 * 4]);
    let x = path(&c);
    let out = d.join("out.npy");
    let o = path(&out);
    let tif = d.join("out.tif");
    let tiles = d.join("tiles");
    let hist = d.join("h.npz");
    let named = format!("x={x}");
    // a complex convolve kernel over a real image
    let k = d.join("k.npy");
    write_npy(&k, DType::C64, &[3, 3], &bytes_of(DType::C64, &parts(9, 4)));
    let convolve = format!("convolve:{}", path(&k));
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "reduce", x, o, "--op", "quantile", "--q", "0.5", "--axis", "0",
        ],
        vec!["reduce", x, o, "--op", "nanpercentile", "--q", "5,95"],
        vec!["reduce", x, o, "--op", "nanmedian", "--in-nodata", "-9999"],
        vec!["reduce", x, o, "--op", "sum", "--dtype", "f32"],
        vec!["stencil", path(&w), o, "--filter", &convolve],
        vec!["map", "floor(x)", o, "--in", &named],
        vec!["map", "x * 2", o, "--in", &named, "--dtype", "f32"],
        vec!["affine", x, o, "--scale", "2", "--dtype", "f32"],
        vec!["cast", x, o, "--dtype", "f32"],
        vec!["convert", x, path(&tif)],
        vec!["stencil", x, o, "--filter", "gaussian:sigma=1"],
        vec!["matmul", x, path(&w), o, "--dtype", "f32"],
        vec!["histogram", x, path(&hist), "--bins", "4"],
        vec!["standardize", x, o],
        vec!["tiles", x, path(&tiles), "--size", "16"],
        vec!["gen", "--shape", "4x4", o, "--dtype", "c64"],
    ];
    for args in cases {
        for plan in [false, true] {
            let mut a = vec!["--memory", "1MiB"];
            if plan {
                a.push("plan");
            }
            a.extend(&args);
            let r = run(&a);
            let err = String::from_utf8_lossy(&r.stderr);
            assert!(!r.status.success(), "{a:?} ran");
            assert_eq!(err.trim_end().lines().count(), 1, "{a:?}: {err}");
            assert!(
                err.contains("complex64") || err.contains("c64") || err.contains("complex"),
                "{a:?}: {err}"
            );
            assert!(
                !out.exists() && !tif.exists() && !tiles.exists() && !hist.exists(),
                "{a:?} left an output"
            );
        }
    }
}

/// GDAL's `CFloat32` and `CFloat64` GeoTIFFs (made by `gdal_translate` from ENVI complex
/// rasters) read as GDAL reads them: plain, tiled and compressed, big-endian, pixel- and
/// band-interleaved; a predictor on complex samples and GDAL's complex integers refused.
#[test]
fn complex_geotiffs_read_exactly_as_gdal_reads_them() {
    use crate::common::gdal::{envi, gdal_tif, reads_as_gdal, refused};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bands, h, w) = (2, 45, 70);
    for (dtype, code) in [(DType::C64, 6u8), (DType::C128, 9)] {
        let p: Vec<f64> = parts(bands * h * w, u64::from(code))
            .iter()
            .map(|v| v * 0.37)
            .collect();
        let raw = envi(
            d,
            &format!("{dtype}"),
            code,
            bands,
            h,
            w,
            &bytes_of(dtype, &p),
        );
        let layouts: &[&[&str]] = &[
            &[],
            &[
                "TILED=YES",
                "BLOCKXSIZE=16",
                "BLOCKYSIZE=32",
                "COMPRESS=DEFLATE",
            ],
            &["ENDIANNESS=BIG", "INTERLEAVE=PIXEL"],
            &[
                "ENDIANNESS=BIG",
                "TILED=YES",
                "BLOCKXSIZE=32",
                "BLOCKYSIZE=16",
                "INTERLEAVE=BAND",
            ],
            &["COMPRESS=ZSTD", "BLOCKYSIZE=7", "INTERLEAVE=PIXEL"],
        ];
        for (k, co) in layouts.iter().enumerate() {
            let tif = d.join(format!("{dtype}_{k}.tif"));
            gdal_tif(&raw, &tif, co);
            reads_as_gdal(&tif, d, &format!("{dtype} {co:?}"));
        }
        // GDAL writes the horizontal predictor on 64-bit samples only
        if dtype == DType::C64 {
            let tif = d.join(format!("{dtype}_p2.tif"));
            gdal_tif(&raw, &tif, &["COMPRESS=DEFLATE", "PREDICTOR=2"]);
            refused(&tif, d, "Predictor", &[]);
        }
    }
    // GDAL's CInt16, made from a complex64 raster by gdal_translate -ot CInt16
    let raw = envi(d, "ci", 6, 1, 8, 8, &bytes_of(DType::C64, &parts(64, 1)));
    let tif = d.join("cint16.tif");
    crate::common::gdal::ok(
        crate::common::gdal::tool("gdal_translate")
            .args(["-q", "-ot", "CInt16"])
            .arg(&raw)
            .arg(&tif),
    );
    refused(&tif, d, "CInt16", &[]);
}
