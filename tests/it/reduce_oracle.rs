//! Tiled reductions against an untiled in-memory oracle, over random shapes (1 row, 1
//! column, primes, rank 1 to 4), dtypes, axes and budgets that force hundreds of tiles;
//! and bit-identity of the result across budgets and thread counts.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use crate::common::{Lcg, backends, engine_on, on_every_backend, write_npy};
use proptest::prelude::*;
use tilestream::device::DeviceRequest;
use tilestream::{BudgetError, DType, Element, Error, Reduce, ReduceOver, TensorFile};

/// Plain f64 oracle: reduces `x` (row-major `shape`) over `over`.
fn oracle(x: &[f64], shape: &[usize], over: ReduceOver, op: Reduce) -> Vec<f64> {
    let (outer, len, inner) = match over {
        ReduceOver::All => (1, x.len(), 1),
        ReduceOver::Axis(a) => (
            shape[..a].iter().product(),
            shape[a],
            shape[a + 1..].iter().product::<usize>(),
        ),
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let v: Vec<f64> = (0..len)
                .map(|r| x[o * len * inner + r * inner + i])
                .collect();
            let n = len as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var =
                |d: u32| v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - f64::from(d));
            out.push(match op {
                Reduce::Sum => v.iter().sum(),
                Reduce::Mean => mean,
                Reduce::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
                Reduce::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Reduce::Var { ddof } => var(ddof),
                Reduce::Std { ddof } => var(ddof).sqrt(),
            });
        }
    }
    out
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
        });
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    let n: usize = shape.iter().product();
    let (bytes, vals) = random_data(dtype, n, seed);
    write_npy(&path, dtype, shape, &bytes);
    let x = TensorFile::open(&path).unwrap();

    let want = oracle(&vals, shape, over, op);
    let (base, _) = reduce_at(device, &x, op, over, 1 << 30, 2);
    let got: Vec<f64> = tilestream::dispatch_dtype!(op.output_dtype(dtype), T => {
        bytemuck::pod_collect_to_vec::<u8, T>(&base).into_iter().map(Element::to_f64).collect()
    });
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let tol = if matches!(op, Reduce::Min | Reduce::Max)
            || !dtype.is_float() && matches!(op, Reduce::Sum)
        {
            0.0
        } else {
            1e-9 * w.abs().max(1.0)
        };
        assert!(
            (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol,
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
