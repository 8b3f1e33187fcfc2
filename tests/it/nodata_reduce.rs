//! Nodata in the reductions: the `nan` forms, `count` and the `nan` quantiles leave an
//! input's nodata pixels out as they leave NaN out, against an oracle that filters the
//! values itself; every dtype, every axis set of a prime 4-D shape, slices of nodata
//! alone, nodata on the first row (the variance's shift) and at summation-block and tile
//! boundaries, the same bytes at any budget, thread count and split into shares. GDAL's
//! own statistics of nodata GeoTIFFs are the oracle of `python/tests/test_nodata.py`.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)] // exact values compared on purpose

use crate::common::{Lcg, engine_on, write_npy};
use tilestream::device::DeviceRequest;
use tilestream::ops::quantile::Quantiles;
use tilestream::{
    BudgetError, DType, Element, Error, Reduce, ReduceOver, TensorFile, merge_partials,
};

const NAN_OPS: [Reduce; 7] = [
    Reduce::NanSum,
    Reduce::NanMean,
    Reduce::NanMin,
    Reduce::NanMax,
    Reduce::NanVar { ddof: 1 },
    Reduce::NanStd { ddof: 0 },
    Reduce::Count,
];

/// Each output's values in file order (gathered by the kept axes' coordinates).
fn groups(x: &[f64], shape: &[usize], over: ReduceOver) -> Vec<Vec<f64>> {
    let reduced = over.axis_list(shape.len());
    let outputs: usize = (0..shape.len())
        .filter(|a| !reduced.contains(a))
        .map(|a| shape[a])
        .product();
    let mut g: Vec<Vec<f64>> = vec![Vec::new(); outputs];
    for (flat, &v) in x.iter().enumerate() {
        let (mut rem, mut out, mut scale) = (flat, 0, 1);
        for a in (0..shape.len()).rev() {
            let c = rem % shape[a];
            rem /= shape[a];
            if !reduced.contains(&a) {
                out += c * scale;
                scale *= shape[a];
            }
        }
        g[out].push(v);
    }
    g
}

/// The oracle: each output of `op` over the values that are neither NaN nor `nodata`,
/// in plain f64 arithmetic; an integer input's extremes of nodata alone are `nodata`.
fn oracle(
    x: &[f64],
    shape: &[usize],
    over: ReduceOver,
    op: Reduce,
    nodata: f64,
    int: bool,
) -> Vec<f64> {
    groups(x, shape, over)
        .iter()
        .map(|all| {
            let v: Vec<f64> = all
                .iter()
                .copied()
                .filter(|&a| !a.is_nan() && a != nodata)
                .collect();
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var = |d: u32| {
                if n <= f64::from(d) {
                    f64::NAN
                } else {
                    v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - f64::from(d))
                }
            };
            let extreme = |max: bool| match (v.is_empty(), int) {
                (true, true) => nodata,
                (true, false) => f64::NAN,
                _ if max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                _ => v.iter().copied().fold(f64::INFINITY, f64::min),
            };
            match op {
                Reduce::NanSum => v.iter().sum(),
                Reduce::NanMean => mean,
                Reduce::NanMin => extreme(false),
                Reduce::NanMax => extreme(true),
                Reduce::NanVar { ddof } => var(ddof),
                Reduce::NanStd { ddof } => var(ddof).sqrt(),
                Reduce::Count => n,
                other => unreachable!("{other:?} is not a nan form"),
            }
        })
        .collect()
}

/// `n` values of `dtype` with many ties (quarter steps of floats, small integers), the
/// value `nodata` among them often; `missing(flat, coords)` says where nodata is set.
fn data(
    dtype: DType,
    shape: &[usize],
    seed: u64,
    nodata: f64,
    missing: impl Fn(usize, &[usize]) -> bool,
) -> (Vec<u8>, Vec<f64>) {
    let n: usize = shape.iter().product();
    let mut rng = Lcg(seed);
    let mut bytes = Vec::with_capacity(n * dtype.size());
    let mut vals = Vec::with_capacity(n);
    let mut coords = vec![0; shape.len()];
    for k in 0..n {
        let mut rem = k;
        for a in (0..shape.len()).rev() {
            coords[a] = rem % shape[a];
            rem /= shape[a];
        }
        let u = rng.f64();
        let raw = if missing(k, &coords) {
            nodata
        } else if dtype.is_float() {
            1000.0 + ((u - 0.5) * 40.0).round() / 4.0
        } else {
            (u * 30.0).floor() + if dtype.is_unsigned() { 0.0 } else { -15.0 }
        };
        tilestream::dispatch_dtype!(dtype, T => {
            let v = T::from_f64(raw);
            vals.push(v.to_f64());
            bytes.extend_from_slice(bytemuck::bytes_of(&v));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    (bytes, vals)
}

fn reduce_at(x: &TensorFile, op: Reduce, over: ReduceOver, budget: u64, threads: usize) -> Vec<u8> {
    let engine = |b: u64| {
        engine_on(DeviceRequest::Cpu, b)
            .with_threads(threads)
            .unwrap()
    };
    let (a, _) = match engine(budget).reduce(x, op, over) {
        Err(Error::Budget(BudgetError::TooSmall { needed, .. })) => {
            engine(needed).reduce(x, op, over).unwrap()
        }
        other => other.unwrap(),
    };
    a.bytes().to_vec()
}

fn as_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    tilestream::dispatch_dtype!(dtype, T => {
        bytemuck::pod_collect_to_vec::<u8, T>(bytes).into_iter().map(Element::to_f64).collect()
    }, complex => unreachable!("the tests give real dtypes here"))
}

/// Checks every nan form of `x` (values `vals`, nodata `nodata`) over `over` against the
/// oracle, and the same bytes at each of `budgets` (with 1 to 3 threads).
fn check(x: &TensorFile, vals: &[f64], over: ReduceOver, nodata: f64, budgets: &[u64]) {
    let (shape, dtype) = (x.shape().to_vec(), x.dtype());
    // the nodata value as the input's type holds it (GDAL rounds it so too)
    let nodata = tilestream::dispatch_dtype!(dtype, T => T::from_f64(nodata).to_f64(), complex => unreachable!("the tests give real dtypes here"));
    for op in NAN_OPS {
        let want = oracle(vals, &shape, over, op, nodata, !dtype.is_float());
        let base = reduce_at(x, op, over, 1 << 30, 2);
        let got = as_f64(&base, op.output_dtype(dtype));
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let exact = matches!(op, Reduce::NanMin | Reduce::NanMax | Reduce::Count)
                || (op == Reduce::NanSum && !dtype.is_float());
            let tol = if exact { 0.0 } else { 1e-9 * w.abs().max(1.0) };
            assert!(
                (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol,
                "{shape:?} {dtype} {over:?} {op:?} nodata {nodata} output {k}: got {g}, oracle {w}"
            );
        }
        for (i, &b) in budgets.iter().enumerate() {
            let threads = 1 + i % 3;
            assert!(
                reduce_at(x, op, over, b, threads) == base,
                "{shape:?} {dtype} {over:?} {op:?}: bytes differ at budget {b}, {threads} threads"
            );
        }
    }
}

fn every_axis_set(rank: usize) -> Vec<ReduceOver> {
    let mut v = vec![ReduceOver::All];
    for mask in 1u32..(1 << rank) {
        let axes: Vec<usize> = (0..rank).filter(|a| mask & (1 << a) != 0).collect();
        v.push(ReduceOver::axes(&axes).unwrap());
    }
    v
}

fn open_with(
    dir: &std::path::Path,
    name: &str,
    dtype: DType,
    shape: &[usize],
    bytes: &[u8],
    nodata: &str,
) -> TensorFile {
    let p = dir.join(name);
    write_npy(&p, dtype, shape, bytes);
    TensorFile::open(&p)
        .unwrap()
        .with_nodata(Some(nodata))
        .unwrap()
}

#[test]
fn nan_forms_leave_nodata_out_every_dtype_every_axis_set() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [3, 5, 7, 11];
    let dtypes = [
        DType::U8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];
    for (i, dtype) in dtypes.into_iter().enumerate() {
        // a value of the data's own range (also set on purpose): channel 2 is nodata
        // alone, and the first element (a variance's shift) is nodata
        let nodata = if dtype.is_float() { 1000.25 } else { 7.0 };
        let (bytes, vals) = data(dtype, &shape, 40 + i as u64, nodata, |k, c| {
            k == 0 || c[1] == 2 || k % 13 == 5
        });
        let x = open_with(
            dir.path(),
            &format!("x{i}.npy"),
            dtype,
            &shape,
            &bytes,
            &format!("{nodata}"),
        );
        for over in every_axis_set(4) {
            check(&x, &vals, over, nodata, &[4 << 10]);
        }
    }
}

#[test]
fn nodata_at_block_and_tile_boundaries_gives_the_same_bytes_at_any_budget() {
    // 32768 rows of 4 columns make a summation block: nodata on the first row, on both
    // sides of block boundaries and at the last row; column 3 nodata alone; NaN too
    let rows = 70_001;
    let dir = tempfile::tempdir().unwrap();
    for (i, (dtype, nodata)) in [(DType::F32, -9999.0), (DType::U16, 0.0), (DType::I32, -1.0)]
        .into_iter()
        .enumerate()
    {
        let (bytes, vals) = data(dtype, &[rows, 4], 90 + i as u64, nodata, |k, c| {
            c[1] == 3
                || [0, 1, 32_767, 32_768, 65_535, 65_536, rows - 1].contains(&c[0])
                || k % 4099 == 7
        });
        let x = open_with(
            dir.path(),
            &format!("b{i}.npy"),
            dtype,
            &[rows, 4],
            &bytes,
            &format!("{nodata}"),
        );
        for over in [ReduceOver::Axis(0), ReduceOver::All, ReduceOver::Axis(1)] {
            check(
                &x,
                &vals,
                over,
                nodata,
                &[40 << 10, 64 << 10, 200 << 10, 3 << 20],
            );
        }
    }
}

#[test]
fn a_float_nodata_value_is_left_out_exactly_as_nan_is() {
    // the same data with its nodata pixels as NaN and no nodata value: every nan form
    // and nan quantile gives the same bytes (shifts included)
    let dir = tempfile::tempdir().unwrap();
    let shape = [4, 3, 37, 29];
    let miss = |k: usize, c: &[usize]| k == 0 || c[1] == 1 && c[0] == 2 || k % 11 == 4;
    let (bytes, _) = data(DType::F32, &shape, 5, -3.4e38, miss);
    let (nan_bytes, _) = data(DType::F32, &shape, 5, f64::NAN, miss);
    let masked = open_with(dir.path(), "m.npy", DType::F32, &shape, &bytes, "-3.4e38");
    let p = dir.path().join("n.npy");
    write_npy(&p, DType::F32, &shape, &nan_bytes);
    let nan = TensorFile::open(&p).unwrap();
    for over in [
        ReduceOver::All,
        ReduceOver::axes(&[0, 2, 3]).unwrap(),
        ReduceOver::Axis(2),
    ] {
        for op in NAN_OPS {
            assert!(
                reduce_at(&masked, op, over, 64 << 10, 2) == reduce_at(&nan, op, over, 1 << 20, 1),
                "{over:?} {op:?}: nodata and NaN differ"
            );
        }
        for method in ["linear", "lower", "nearest"] {
            let q = Quantiles::parse(
                "nanquantile",
                Some(&[0.0, 0.02, 0.5, 0.98, 1.0]),
                false,
                Some(method),
            )
            .unwrap()
            .unwrap();
            let e = engine_on(DeviceRequest::Cpu, 8 << 20);
            let a = e.quantile(&masked, over, &q).unwrap().0;
            let b = e.quantile(&nan, over, &q).unwrap().0;
            assert!(
                a.bytes() == b.bytes(),
                "{over:?} {method}: nodata and NaN quantiles differ"
            );
        }
    }
}

#[test]
fn integer_nan_quantiles_select_among_the_valid_values_and_give_nodata_for_none() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [3, 5, 7, 11];
    for (i, dtype) in [DType::U16, DType::I32, DType::U8].into_iter().enumerate() {
        let nodata = 7.0;
        let (bytes, vals) = data(dtype, &shape, 60 + i as u64, nodata, |k, c| {
            c[1] == 2 || k % 9 == 1
        });
        let x = open_with(dir.path(), &format!("q{i}.npy"), dtype, &shape, &bytes, "7");
        let qs = [0.0, 0.02, 0.5, 0.98, 1.0];
        for over in every_axis_set(4) {
            let g = groups(&vals, &shape, over);
            for (method, pick) in [
                ("lower", f64::floor as fn(f64) -> f64),
                ("higher", f64::ceil),
            ] {
                let q = Quantiles::parse("nanquantile", Some(&qs), false, Some(method))
                    .unwrap()
                    .unwrap();
                let e = engine_on(DeviceRequest::Cpu, 8 << 20);
                let got = e.quantile(&x, over, &q).unwrap().0;
                assert_eq!(got.dtype(), dtype);
                let got = as_f64(got.bytes(), dtype);
                for (k, &qk) in qs.iter().enumerate() {
                    for (o, all) in g.iter().enumerate() {
                        let mut v: Vec<f64> =
                            all.iter().copied().filter(|&a| a != nodata).collect();
                        v.sort_by(f64::total_cmp);
                        let want = if v.is_empty() {
                            nodata
                        } else {
                            v[pick(qk * (v.len() - 1) as f64) as usize]
                        };
                        assert_eq!(
                            got[k * g.len() + o],
                            want,
                            "{dtype} {over:?} {method} q {qk} output {o}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn shares_of_rows_merge_to_the_bytes_of_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 70_000;
    let shape = [rows, 6];
    for (i, (dtype, nodata)) in [(DType::F64, 1000.5), (DType::I16, -3.0)]
        .into_iter()
        .enumerate()
    {
        let (bytes, _) = data(dtype, &shape, 77 + i as u64, nodata, |k, c| {
            k == 0 || c[1] == 5 || k % 7 == 2
        });
        let x = open_with(
            dir.path(),
            &format!("s{i}.npy"),
            dtype,
            &shape,
            &bytes,
            &format!("{nodata}"),
        );
        let e = engine_on(DeviceRequest::Cpu, 1 << 20);
        for over in [ReduceOver::Axis(0), ReduceOver::All, ReduceOver::Axis(1)] {
            let step = tilestream::row_step(&shape, over).unwrap();
            let cut = (rows as u64 / 2 / step).max(1) * step;
            assert!(cut < rows as u64);
            for op in NAN_OPS {
                let whole = e.reduce(&x, op, over).unwrap().0;
                let parts: Vec<_> = [0..cut, cut..rows as u64]
                    .into_iter()
                    .map(|r| e.reduce_partial(&x, op, over, r).unwrap().0)
                    .collect();
                let merged = merge_partials(&parts).unwrap();
                assert!(
                    merged.bytes() == whole.bytes(),
                    "{dtype} {over:?} {op:?}: shares differ"
                );
            }
        }
    }
}

#[test]
fn the_plain_forms_take_nodata_as_a_value_and_bad_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [50, 4];
    let (bytes, _) = data(DType::U16, &shape, 3, 0.0, |k, _| k % 5 == 0);
    let p = dir.path().join("u.npy");
    write_npy(&p, DType::U16, &shape, &bytes);
    let plain = TensorFile::open(&p).unwrap();
    let masked = TensorFile::open(&p)
        .unwrap()
        .with_nodata(Some("0"))
        .unwrap();
    let e = engine_on(DeviceRequest::Cpu, 1 << 20);
    for op in [
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Min,
        Reduce::Std { ddof: 0 },
    ] {
        let a = e.reduce(&plain, op, ReduceOver::Axis(0)).unwrap().0;
        let b = e.reduce(&masked, op, ReduceOver::Axis(0)).unwrap().0;
        assert!(a.bytes() == b.bytes(), "{op:?} changed by a nodata value");
    }
    // the nan forms of an integer input without nodata are the plain ones; with: not
    let min = e
        .reduce(&masked, Reduce::NanMin, ReduceOver::Axis(0))
        .unwrap()
        .0;
    assert!(as_f64(min.bytes(), DType::U16).iter().all(|&v| v > 0.0));
    for bad in ["-9999", "nan", "0.5", "70000", "x"] {
        let err = TensorFile::open(&p)
            .unwrap()
            .with_nodata(Some(bad))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("is not a u16 value") && !err.contains('\n'),
            "{bad}: {err}"
        );
    }
    // a 64-bit value beyond 2^53 that no f64 names is refused, not rounded into another
    let q = dir.path().join("w.npy");
    write_npy(
        &q,
        DType::U64,
        &[2],
        bytemuck::cast_slice(&[1u64, u64::MAX]),
    );
    let err = TensorFile::open(&q)
        .unwrap()
        .with_nodata(Some("18446744073709551614"))
        .err();
    assert!(err.unwrap().to_string().contains("is not a u64 value"));
    assert!(
        TensorFile::open(&q)
            .unwrap()
            .with_nodata(Some("9007199254740992"))
            .is_ok()
    );
    // none: the file's own (a .npy has none) is dropped
    let none = TensorFile::open(&p).unwrap().with_nodata(None).unwrap();
    assert!(none.nodata().is_none());
}

/// numpy's `nanargmin`/`nanargmax` of `v`: the first occurrence of the extreme of the
/// valid values; `None` for none (numpy raises).
fn nan_first_extreme(v: &[f64], max: bool, nodata: f64) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &x) in v.iter().enumerate() {
        if x.is_nan() || x == nodata {
            continue;
        }
        if best.is_none_or(|b| (max && x > v[b]) || (!max && x < v[b])) {
            best = Some(i);
        }
    }
    best
}

#[test]
fn nan_positions_are_numpys_and_a_slice_with_none_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // NaN and nodata at block and lane boundaries (32768 rows of 4 columns, and a run
    // reduced in 8 lanes), ties everywhere (quarter steps)
    let rows = 70_001;
    let miss =
        |k: usize, c: &[usize]| [0, 1, 32_767, 32_768, 65_536].contains(&c[0]) || k % 4099 == 7;
    for (i, (dtype, nodata)) in [
        (DType::F32, -9999.0),
        (DType::F64, f64::NAN),
        (DType::U16, 0.0),
        (DType::F16, 1000.5),
    ]
    .into_iter()
    .enumerate()
    {
        let (mut bytes, mut vals) = data(dtype, &[rows, 4], 30 + i as u64, nodata, miss);
        if dtype.is_float() {
            // NaN too, when nodata is a number
            tilestream::dispatch_dtype!(dtype, T => {
                for k in (3..vals.len()).step_by(1013) {
                    vals[k] = f64::NAN;
                    bytes[k * dtype.size()..(k + 1) * dtype.size()]
                        .copy_from_slice(bytemuck::bytes_of(&T::from_f64(f64::NAN)));
                }
            }, complex => unreachable!("the tests give real dtypes here"));
        }
        let x = open_with(
            dir.path(),
            &format!("p{i}.npy"),
            dtype,
            &[rows, 4],
            &bytes,
            &format!("{nodata}"),
        );
        let nd = tilestream::dispatch_dtype!(dtype, T => T::from_f64(nodata).to_f64(), complex => unreachable!("the tests give real dtypes here"));
        for (op, max) in [(Reduce::NanArgMin, false), (Reduce::NanArgMax, true)] {
            for over in [ReduceOver::Axis(0), ReduceOver::Axis(1), ReduceOver::All] {
                let want: Option<Vec<f64>> = groups(&vals, &[rows, 4], over)
                    .iter()
                    .map(|g| nan_first_extreme(g, max, nd).map(|i| i as f64))
                    .collect();
                let Some(want) = want else {
                    // rows of nodata alone (along axis 1): refused as numpy raises
                    let e = engine_on(DeviceRequest::Cpu, 1 << 30);
                    let err = e.reduce(&x, op, over).err().unwrap().to_string();
                    assert!(err.contains("All-NaN"), "{dtype} {op:?} {over:?}: {err}");
                    continue;
                };
                let base = reduce_at(&x, op, over, 1 << 30, 2);
                assert_eq!(as_f64(&base, DType::I64), want, "{dtype} {op:?} {over:?}");
                for (b, th) in [(40 << 10, 1), (200 << 10, 3)] {
                    assert!(
                        reduce_at(&x, op, over, b, th) == base,
                        "{dtype} {op:?} {over:?} at {b}"
                    );
                }
            }
        }
    }
    // a column of nodata alone: refused in one line that names the way out
    let (bytes, _) = data(DType::F32, &[100, 3], 9, -1.0, |_, c| c[1] == 2);
    let x = open_with(dir.path(), "none.npy", DType::F32, &[100, 3], &bytes, "-1");
    let e = engine_on(DeviceRequest::Cpu, 1 << 20);
    let err = e
        .reduce(&x, Reduce::NanArgMax, ReduceOver::Axis(0))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("nanargmax: result 2") && err.contains("All-NaN") && !err.contains('\n'),
        "{err}"
    );
    assert!(e.reduce(&x, Reduce::NanArgMax, ReduceOver::All).is_ok());
}
