//! Tiled reductions against an untiled in-memory oracle, over random shapes (1 row, 1
//! column, primes, rank 1 to 4), dtypes, axes and budgets that force hundreds of tiles;
//! and bit-identity of the result across budgets and thread counts.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use crate::common::{Lcg, backends, engine_on, on_every_backend, write_npy};
use proptest::prelude::*;
use tilestream::device::DeviceRequest;
use tilestream::{BudgetError, DType, Element, Error, Reduce, ReduceOver, TensorFile};

/// Plain f64 oracle: reduces `x` (row-major `shape`) over `over`: each output's values
/// gathered in file order by the kept axes' coordinates, then reduced.
fn oracle(x: &[f64], shape: &[usize], over: ReduceOver, op: Reduce) -> Vec<f64> {
    let reduced = over.axis_list(shape.len());
    let outputs: usize = (0..shape.len())
        .filter(|a| !reduced.contains(a))
        .map(|a| shape[a])
        .product();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); outputs];
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
        groups[out].push(v);
    }
    groups
        .iter()
        .map(|all| {
            // the nan forms and count see the values that are not NaN
            let v: Vec<f64> = all
                .iter()
                .copied()
                .filter(|x| !op.skips_nan() || !x.is_nan())
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
            let extreme = |max: bool| {
                if v.is_empty() {
                    f64::NAN
                } else if max {
                    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                } else {
                    v.iter().copied().fold(f64::INFINITY, f64::min)
                }
            };
            match op {
                Reduce::Sum | Reduce::NanSum => v.iter().sum(),
                Reduce::Mean | Reduce::NanMean => mean,
                Reduce::Min | Reduce::NanMin => extreme(false),
                Reduce::Max | Reduce::NanMax => extreme(true),
                Reduce::Var { ddof } | Reduce::NanVar { ddof } => var(ddof),
                Reduce::Std { ddof } | Reduce::NanStd { ddof } => var(ddof).sqrt(),
                Reduce::Count => n,
                Reduce::ArgMin | Reduce::ArgMax => first_extreme(all, op == Reduce::ArgMax),
                Reduce::NanArgMin | Reduce::NanArgMax => {
                    // the first occurrence of the extreme of the values that are not NaN
                    let max = op == Reduce::NanArgMax;
                    let mut best: Option<usize> = None;
                    for (i, &x) in all.iter().enumerate() {
                        if !x.is_nan()
                            && best.is_none_or(|b| if max { x > all[b] } else { x < all[b] })
                        {
                            best = Some(i);
                        }
                    }
                    best.map_or(-1.0, |b| b as f64)
                }
            }
        })
        .collect()
}

/// numpy's `argmin`/`argmax` of `v` (as f64): the first NaN if any, else the first
/// occurrence of the extreme.
fn first_extreme(v: &[f64], max: bool) -> f64 {
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if (max && x > v[best]) || (!max && x < v[best]) {
            best = i;
        }
    }
    best as f64
}

fn random_data(dtype: DType, n: usize, seed: u64) -> (Vec<u8>, Vec<f64>) {
    let mut rng = Lcg(seed);
    let mut bytes = Vec::with_capacity(n * dtype.size());
    let mut vals = Vec::with_capacity(n);
    for _ in 0..n {
        let u = rng.f64();
        tilestream::dispatch_dtype!(dtype, T => {
            // floats: spread around 3.0 with a large offset to test cancellation in var;
            // integers: spread over a small range so sums stay exact
            let raw = if dtype.is_float() { 1000.0 + (u - 0.5) * 8.0 } else { (u * 200.0).floor() - if dtype.is_unsigned() { 0.0 } else { 100.0 } };
            let v = T::from_f64(raw);
            vals.push(v.to_f64());
            bytes.extend_from_slice(bytemuck::bytes_of(&v));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    (bytes, vals)
}

/// Runs a reduction, raising the budget to the planner's stated minimum if it is too small.
fn reduce_at(
    device: DeviceRequest,
    x: &TensorFile,
    op: Reduce,
    over: ReduceOver,
    budget: u64,
    threads: usize,
) -> (Vec<u8>, usize) {
    let engine = |b: u64| engine_on(device, b).with_threads(threads).unwrap();
    let (a, r) = match engine(budget).reduce(x, op, over) {
        Err(Error::Budget(BudgetError::TooSmall { needed, .. })) => {
            engine(needed).reduce(x, op, over).unwrap()
        }
        other => other.unwrap(),
    };
    (a.bytes().to_vec(), r.tiles)
}

fn check(
    device: DeviceRequest,
    shape: &[usize],
    dtype: DType,
    over: ReduceOver,
    op: Reduce,
    seed: u64,
) {
    let n: usize = shape.iter().product();
    let (bytes, vals) = random_data(dtype, n, seed);
    check_data(device, shape, dtype, &bytes, &vals, over, op);
}

/// [`check`] of the given data: `bytes` of `dtype`, `vals` their values.
fn check_data(
    device: DeviceRequest,
    shape: &[usize],
    dtype: DType,
    bytes: &[u8],
    vals: &[f64],
    over: ReduceOver,
    op: Reduce,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let n: usize = shape.iter().product();
    write_npy(&path, dtype, shape, bytes);
    let x = TensorFile::open(&path).unwrap();

    let want = oracle(vals, shape, over, op);
    let (base, _) = reduce_at(device, &x, op, over, 1 << 30, 2);
    let got: Vec<f64> = tilestream::dispatch_dtype!(op.output_dtype(dtype), T => {
        bytemuck::pod_collect_to_vec::<u8, T>(&base).into_iter().map(Element::to_f64).collect()
    }, complex => unreachable!("the tests give real dtypes here"));
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let tol = if matches!(
            op,
            Reduce::Min | Reduce::Max | Reduce::NanMin | Reduce::NanMax
        ) || op.is_arg()
            || !dtype.is_float() && matches!(op, Reduce::Sum | Reduce::NanSum | Reduce::Count)
        {
            0.0
        } else if op.skips_nan() && op.is_moments() {
            // a slice whose first element is NaN is summed about 0, not about its first
            // element: the test data's mean is 400 times its spread (docs/cli.md)
            1e-7 * w.abs().max(1.0)
        } else {
            1e-9 * w.abs().max(1.0)
        };
        assert!(
            (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits() || (g - w).abs() <= tol,
            "{shape:?} {dtype} {over:?} {op:?} output {k}: got {g}, oracle {w}"
        );
    }
    // bit-identical across budgets (down to hundreds of tiles) and thread counts
    let mut most_tiles = 0;
    for (budget, threads) in [(40 << 10, 1), (64 << 10, 3), (200 << 10, 2), (3 << 20, 1)] {
        let (b, tiles) = reduce_at(device, &x, op, over, budget, threads);
        most_tiles = most_tiles.max(tiles);
        assert!(
            b == base,
            "{shape:?} {dtype} {over:?} {op:?}: result bytes differ at budget {budget}, {threads} threads"
        );
    }
    if n >= 300_000 && over == ReduceOver::Axis(0) && shape.len() == 2 && shape[1] < 64 {
        assert!(
            most_tiles >= 100,
            "expected a budget forcing hundreds of tiles, got {most_tiles}"
        );
    }
}

const OPS: [Reduce; 6] = [
    Reduce::Sum,
    Reduce::Mean,
    Reduce::Min,
    Reduce::Max,
    Reduce::Var { ddof: 1 },
    Reduce::Std { ddof: 0 },
];

on_every_backend! {
fn edge_shapes_every_op(device) {
    let cases: &[(&[usize], ReduceOver)] = &[
        (&[1, 1], ReduceOver::Axis(0)),
        (&[1, 1], ReduceOver::Axis(1)),
        (&[1, 977], ReduceOver::Axis(0)),
        (&[977, 1], ReduceOver::Axis(0)),
        (&[977, 1], ReduceOver::Axis(1)),
        (&[65_537], ReduceOver::All),
        (&[65_537], ReduceOver::Axis(0)),
        (&[7, 11, 13], ReduceOver::Axis(0)),
        (&[7, 11, 13], ReduceOver::Axis(1)),
        (&[7, 11, 13], ReduceOver::Axis(2)),
        (&[3, 5, 7, 11], ReduceOver::Axis(2)),
        (&[3, 5, 7, 11], ReduceOver::All),
        (&[30_011, 13], ReduceOver::Axis(0)),
        (&[13, 30_011], ReduceOver::Axis(1)),
        (&[2, 131_101], ReduceOver::Axis(1)),
    ];
    for (i, &(shape, over)) in cases.iter().enumerate() {
        for op in OPS {
            check(device, shape, DType::F32, over, op, i as u64);
        }
    }
}
}

on_every_backend! {
fn every_dtype(device) {
    for (i, d) in DType::ALL.into_iter().enumerate() {
        for op in OPS {
            check(device, &[1031, 7], d, ReduceOver::Axis(0), op, 100 + i as u64);
            check(device, &[1031, 7], d, ReduceOver::Axis(1), op, 200 + i as u64);
        }
    }
}
}

on_every_backend! {
fn hundreds_of_tiles(device) {
    check(
        device,
        &[300_007, 3],
        DType::F32,
        ReduceOver::Axis(0),
        Reduce::Mean,
        7,
    );
    check(
        device,
        &[300_007, 3],
        DType::F64,
        ReduceOver::Axis(0),
        Reduce::Var { ddof: 0 },
        8,
    );
}
}

on_every_backend! {
fn nan_propagates_like_numpy(device) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let data: Vec<f32> = vec![1.0, 2.0, f32::NAN, 4.0, 5.0, 6.0];
    write_npy(&path, DType::F32, &[3, 2], bytemuck::cast_slice(&data));
    let x = TensorFile::open(&path).unwrap();
    let e = engine_on(device, 1 << 20);
    for op in OPS {
        let (a, _) = e.reduce(&x, op, ReduceOver::Axis(0)).unwrap();
        let v = a.to_f64();
        assert!(
            v[0].is_nan(),
            "{op:?}: NaN in column 0 must propagate, got {v:?}"
        );
        assert!(!v[1].is_nan(), "{op:?}: column 1 has no NaN, got {v:?}");
    }
}
}

/// Every non-empty set of axes of `rank` axes, as a reduction runs over it.
fn axis_sets(rank: usize) -> Vec<ReduceOver> {
    (1u32..1 << rank)
        .map(|m| {
            let axes: Vec<usize> = (0..rank).filter(|a| m & (1 << a) != 0).collect();
            ReduceOver::axes(&axes).unwrap()
        })
        .collect()
}

on_every_backend! {
fn several_axes_at_once_every_combination_of_a_4d_array(device) {
    // prime sizes: no axis divides another, nor the summation blocks
    for (i, over) in axis_sets(4).into_iter().enumerate() {
        for op in OPS {
            check(device, &[3, 5, 7, 11], DType::F32, over, op, 300 + i as u64);
        }
    }
    // axes of length 1 among the reduced and the kept ones, a leading one among them
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 5, 1, 7], &[0, 2]),
        (&[1, 5, 1, 7], &[0, 3]),
        (&[4, 1, 6, 1], &[1, 3]),
        (&[4, 1, 6, 1], &[0, 2]),
        (&[5, 1, 1, 9], &[0, 3]),
    ];
    for (i, &(shape, axes)) in cases.iter().enumerate() {
        for op in OPS {
            check(device, shape, DType::F64, ReduceOver::axes(axes).unwrap(), op, 400 + i as u64);
        }
    }
}
}

on_every_backend! {
fn several_axes_every_dtype_and_many_tiles(device) {
    let nchw = ReduceOver::axes(&[0, 2, 3]).unwrap();
    for (i, d) in DType::ALL.into_iter().enumerate() {
        for op in OPS {
            check(device, &[6, 3, 17, 19], d, nchw, op, 500 + i as u64);
        }
    }
    // the per-channel statistics of an NCHW batch in hundreds of tiles, and (1, 3) of a
    // 4-d array whose columns fold across the summation blocks
    for op in [Reduce::Mean, Reduce::Std { ddof: 0 }] {
        check(device, &[37, 3, 41, 43], DType::F32, nchw, op, 600);
        check(device, &[37, 13, 41, 5], DType::F32, ReduceOver::axes(&[1, 3]).unwrap(), op, 601);
    }
    // rows wider than a summation block (blocks of one row, pushed and merged in one
    // pass), with and without folding
    for op in OPS {
        check(device, &[5, 2, 300, 239], DType::F32, ReduceOver::axes(&[0, 2]).unwrap(), op, 602);
        check(device, &[4, 140_001], DType::F64, ReduceOver::Axis(0), op, 603);
    }
}
}

#[test]
fn every_axis_at_once_is_a_reduction_over_all_elements_and_bad_axes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let (bytes, _) = random_data(DType::F32, 3 * 5 * 7, 9);
    write_npy(&path, DType::F32, &[3, 5, 7], &bytes);
    let x = TensorFile::open(&path).unwrap();
    let e = tilestream::Engine::new(tilestream::MemoryBudget::new(1 << 20)).unwrap();
    for op in OPS {
        let all = e.reduce(&x, op, ReduceOver::All).unwrap().0;
        let every = e
            .reduce(&x, op, ReduceOver::axes(&[2, 0, 1]).unwrap())
            .unwrap()
            .0;
        assert_eq!(all.bytes(), every.bytes(), "{op:?}");
        assert!(every.shape().is_empty());
    }
    assert_eq!(ReduceOver::axes(&[2]).unwrap(), ReduceOver::Axis(2));
    let bad = |axes: &[usize]| ReduceOver::axes(axes).unwrap_err().to_string();
    assert!(bad(&[]).contains("no axis to reduce"));
    assert!(bad(&[1, 2, 1]).contains("axis 1 is given twice"));
    let e3 = e
        .reduce(&x, Reduce::Sum, ReduceOver::axes(&[0, 3]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e3.contains("axis 3 is out of range for a tensor of rank 3"),
        "{e3}"
    );
    let kept = ReduceOver::axes(&[0, 2]).unwrap();
    assert_eq!(kept.out_shape(&[3, 5, 7]), vec![5]);
    assert_eq!(kept.out_shape_keeping(&[3, 5, 7], true), vec![1, 5, 1]);
}

/// `shape` of `dtype` whose values are random but for NaN and infinities set by
/// `special(flat index, coordinates)`; the bytes and their values.
fn with_specials(
    dtype: DType,
    shape: &[usize],
    seed: u64,
    special: impl Fn(usize, &[usize]) -> Option<f64>,
) -> (Vec<u8>, Vec<f64>) {
    let n: usize = shape.iter().product();
    let (_, mut vals) = random_data(dtype, n, seed);
    let mut coords = vec![0; shape.len()];
    for (k, v) in vals.iter_mut().enumerate() {
        let mut rem = k;
        for a in (0..shape.len()).rev() {
            coords[a] = rem % shape[a];
            rem /= shape[a];
        }
        if let Some(s) = special(k, &coords) {
            *v = s;
        }
    }
    let mut bytes = Vec::with_capacity(n * dtype.size());
    tilestream::dispatch_dtype!(dtype, T => {
        for v in &mut vals {
            let t = T::from_f64(*v);
            *v = t.to_f64();
            bytes.extend_from_slice(bytemuck::bytes_of(&t));
        }
    }, complex => unreachable!("the tests give real dtypes here"));
    (bytes, vals)
}

const NAN_OPS: [Reduce; 7] = [
    Reduce::NanSum,
    Reduce::NanMean,
    Reduce::NanMin,
    Reduce::NanMax,
    Reduce::NanVar { ddof: 1 },
    Reduce::NanStd { ddof: 0 },
    Reduce::Count,
];

on_every_backend! {
fn nan_reductions_leave_nan_out_at_block_and_tile_boundaries_and_all_nan_slices(device) {
    // 32768 rows of 4 columns make a summation block: NaN on the first row (the shift),
    // on both sides of block boundaries and of tiles; column 3 NaN alone; infinities in
    // column 2 (both signs: NaN sums) and column 1 (+inf alone)
    let rows = 70_001;
    let special = |k: usize, c: &[usize]| -> Option<f64> {
        let (r, col) = (c[0], c[1]);
        match col {
            3 => Some(f64::NAN),
            _ if [0, 1, 32_767, 32_768, 65_535, 65_536, rows - 1].contains(&r) => Some(f64::NAN),
            2 if r == 100 => Some(f64::INFINITY),
            2 if r == 40_000 => Some(f64::NEG_INFINITY),
            1 if r == 5 => Some(f64::INFINITY),
            _ if k % 4099 == 7 => Some(f64::NAN),
            _ => None,
        }
    };
    for (i, dtype) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
        let (bytes, vals) = with_specials(dtype, &[rows, 4], 700 + i as u64, special);
        for op in NAN_OPS {
            for over in [ReduceOver::Axis(0), ReduceOver::All, ReduceOver::Axis(1)] {
                check_data(device, &[rows, 4], dtype, &bytes, &vals, over, op);
            }
        }
    }
    // per channel of an NCHW batch: channel 1 NaN alone, channel 0 NaN first
    let nchw = [6, 3, 17, 19];
    let (bytes, vals) = with_specials(DType::F32, &nchw, 710, |k, c| match c[1] {
        1 => Some(f64::NAN),
        0 if k == 0 || k % 97 == 0 => Some(f64::NAN),
        _ => None,
    });
    for op in NAN_OPS {
        check_data(device, &nchw, DType::F32, &bytes, &vals, ReduceOver::axes(&[0, 2, 3]).unwrap(), op);
    }
    // integers have no NaN: the nan forms are the plain ones, count every element
    for (i, d) in [DType::I16, DType::U8, DType::I64, DType::Bool].into_iter().enumerate() {
        for op in NAN_OPS {
            check(device, &[1031, 7], d, ReduceOver::Axis(0), op, 720 + i as u64);
        }
    }
}
}

on_every_backend! {
fn positions_are_numpys_at_any_budget(device) {
    // every dtype, with ties (integers over 200 values, f16's coarse steps) along each
    // axis of 2-D, 4-D with prime sizes, and over every element
    let shapes: &[(&[usize], ReduceOver)] = &[
        (&[1031, 7], ReduceOver::Axis(0)),
        (&[1031, 7], ReduceOver::Axis(1)),
        (&[1031, 7], ReduceOver::All),
        (&[3, 5, 7, 11], ReduceOver::Axis(0)),
        (&[3, 5, 7, 11], ReduceOver::Axis(1)),
        (&[3, 5, 7, 11], ReduceOver::Axis(2)),
        (&[3, 5, 7, 11], ReduceOver::Axis(3)),
    ];
    for (i, d) in DType::ALL.into_iter().enumerate() {
        for (j, &(shape, over)) in shapes.iter().enumerate() {
            for op in [Reduce::ArgMin, Reduce::ArgMax] {
                check(device, shape, d, over, op, 900 + (i * 16 + j) as u64);
            }
        }
    }
    // NaN (the first one wins) and infinities at block and tile boundaries: 32768 rows
    // of 4 columns make a summation block; column 3 NaN alone
    let rows = 70_001;
    let special = |k: usize, c: &[usize]| -> Option<f64> {
        match (c[0], c[1]) {
            (_, 3) => Some(f64::NAN),
            (r, 0) if [32_768, 65_535].contains(&r) => Some(f64::NAN),
            (r, 1) if [5, 65_536].contains(&r) => Some(f64::INFINITY),
            (r, 1) if [6, 32_767].contains(&r) => Some(f64::NEG_INFINITY),
            (r, 2) if r == rows - 1 => Some(f64::NAN),
            _ if k % 40_009 == 7 => Some(f64::NAN),
            _ => None,
        }
    };
    for (i, dtype) in [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().enumerate() {
        let (bytes, vals) = with_specials(dtype, &[rows, 4], 960 + i as u64, special);
        for op in [Reduce::ArgMin, Reduce::ArgMax] {
            for over in [ReduceOver::Axis(0), ReduceOver::All, ReduceOver::Axis(1)] {
                check_data(device, &[rows, 4], dtype, &bytes, &vals, over, op);
            }
        }
    }
}
}

#[test]
fn positions_over_several_axes_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let (bytes, _) = random_data(DType::F32, 60, 1);
    write_npy(&path, DType::F32, &[3, 4, 5], &bytes);
    let x = TensorFile::open(&path).unwrap();
    let e = engine_on(DeviceRequest::Cpu, 1 << 20)
        .reduce(&x, Reduce::ArgMax, ReduceOver::axes(&[0, 2]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argmax takes one axis or none") && !e.contains('\n'),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn random_shapes(
        shape in prop::collection::vec(1usize..40, 1..=4),
        axis_pick in 0usize..5,
        op_pick in 0usize..6,
        dtype_pick in 0usize..13,
        seed in 0u64..1000,
    ) {
        let over = if axis_pick >= shape.len() { ReduceOver::All } else { ReduceOver::Axis(axis_pick) };
        for device in backends() {
            check(device, &shape, DType::ALL[dtype_pick], over, OPS[op_pick], seed);
        }
    }
}
