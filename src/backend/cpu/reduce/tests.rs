//! Unit tests of the CPU reduction kernel against a plain f64 oracle.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::dtype::DType;
use crate::ops::reduce::{Reduce, ReduceOver};

/// Plain f64 oracle over (outer, len, inner).
fn oracle(x: &[f64], g: &Geometry, op: Reduce) -> Vec<f64> {
    let mut out = Vec::new();
    for o in 0..g.outer {
        for i in 0..g.inner {
            let v: Vec<f64> = (0..g.len)
                .map(|r| x[(o * g.len * g.inner + r * g.inner + i) as usize])
                .collect();
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var = |d: u32| {
                v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / (n - f64::from(d))
            };
            // the data holds no NaN: the nan forms are the plain ones
            out.push(match op {
                Reduce::Sum | Reduce::NanSum => v.iter().sum(),
                Reduce::Mean | Reduce::NanMean => mean,
                Reduce::Min | Reduce::NanMin => v.iter().copied().fold(f64::INFINITY, f64::min),
                Reduce::Max | Reduce::NanMax => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Reduce::Var { ddof } | Reduce::NanVar { ddof } => var(ddof),
                Reduce::Std { ddof } | Reduce::NanStd { ddof } => var(ddof).sqrt(),
                Reduce::Count => n,
                Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax => {
                    let max = matches!(op, Reduce::ArgMax | Reduce::NanArgMax);
                    first_extreme(&v, max) as f64
                }
            });
        }
    }
    out
}

/// numpy's `argmin`/`argmax` of `v`: the first NaN if any, else the first extreme.
fn first_extreme(v: &[f64], max: bool) -> usize {
    if let Some(i) = v.iter().position(|x| x.is_nan()) {
        return i;
    }
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if (max && x > v[best]) || (!max && x < v[best]) {
            best = i;
        }
    }
    best
}

fn run(shape: &[usize], over: ReduceOver, op: Reduce, x: &[f32], tile: usize) -> Vec<u8> {
    let g = Geometry::new(shape, over).unwrap();
    let mut r = reducer(op, DType::F32, g, 2);
    for (i, chunk) in x.chunks(tile).enumerate() {
        r.feed_bytes((i * tile) as u64, bytemuck::cast_slice(chunk));
    }
    r.into_bytes()
}

#[test]
fn matches_oracle_and_is_tiling_invariant() {
    let shapes: &[(&[usize], ReduceOver)] = &[
        (&[1000, 37], ReduceOver::Axis(0)),
        (&[1000, 37], ReduceOver::Axis(1)),
        (&[1000, 37], ReduceOver::All),
        (&[13, 17, 19], ReduceOver::Axis(1)),
        (&[13, 17, 19], ReduceOver::Axis(2)),
        (&[3, 2000, 1500], ReduceOver::Axis(1)),
        (&[1, 1], ReduceOver::Axis(0)),
        (&[300_001], ReduceOver::All),
    ];
    for &(shape, over) in shapes {
        let n: usize = shape.iter().product();
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 1013) as f32) * 0.37 - 100.0)
            .collect();
        let xf: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        let g = Geometry::new(shape, over).unwrap();
        for op in [
            Reduce::Sum,
            Reduce::Mean,
            Reduce::Min,
            Reduce::Max,
            Reduce::Var { ddof: 1 },
            Reduce::Std { ddof: 0 },
        ] {
            let want = oracle(&xf, &g, op);
            let base = run(shape, over, op, &x, n);
            for tile in [1, 7, 1024, 4099, n / 3 + 1] {
                // element by element over 9 M elements takes seconds per op; tiles of 7
                // already start at every offset of a row
                if tile == 1 && n > 1_000_000 {
                    continue;
                }
                let got = run(shape, over, op, &x, tile.max(1));
                assert_eq!(
                    got, base,
                    "{shape:?} {over:?} {op:?} tile {tile}: bytes differ"
                );
            }
            let got: Vec<f64> = if op.output_dtype(DType::F32) == DType::F32 {
                bytemuck::cast_slice::<u8, f32>(&base)
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect()
            } else {
                bytemuck::cast_slice::<u8, f64>(&base).to_vec()
            };
            assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                let same = (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * b.abs().max(1.0);
                assert!(same, "{shape:?} {over:?} {op:?}: {a} vs {b}");
            }
        }
    }
}

/// argmin and argmax: many ties (the first occurrence must win), NaN at block, lane and
/// tile boundaries (the first NaN wins), every tiling giving the same bytes.
#[test]
fn positions_are_the_first_occurrence_at_any_tiling() {
    let shapes: &[(&[usize], ReduceOver)] = &[
        (&[1000, 37], ReduceOver::Axis(0)),
        (&[1000, 37], ReduceOver::Axis(1)),
        (&[37, 1000], ReduceOver::Axis(1)),
        (&[1000, 37], ReduceOver::All),
        (&[13, 17, 19], ReduceOver::Axis(1)),
        (&[13, 17, 19], ReduceOver::Axis(2)),
        (&[7, 40_000, 3], ReduceOver::Axis(1)),
        (&[300_001], ReduceOver::All),
        (&[5], ReduceOver::All),
    ];
    for &(shape, over) in shapes {
        let n: usize = shape.iter().product();
        for nan_at in [
            None,
            Some(vec![0usize]),
            Some(vec![n / 2, 131_072, n - 1, 8, 9]),
        ] {
            // values in a small range: every extreme occurs many times
            let mut x: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1013) % 11) as f32).collect();
            for &i in nan_at.iter().flatten() {
                if i < n {
                    x[i] = f32::NAN;
                }
            }
            let xf: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let g = Geometry::new(shape, over).unwrap();
            for op in [Reduce::ArgMin, Reduce::ArgMax] {
                let want: Vec<i64> = oracle(&xf, &g, op).iter().map(|&v| v as i64).collect();
                let base = run(shape, over, op, &x, n);
                assert_eq!(
                    bytemuck::cast_slice::<u8, i64>(&base),
                    want.as_slice(),
                    "{shape:?} {over:?} {op:?} NaN at {nan_at:?}"
                );
                for tile in [1, 7, 1024, 4099, n / 3 + 1] {
                    if tile == 1 && n > 100_000 {
                        continue;
                    }
                    let got = run(shape, over, op, &x, tile.max(1));
                    assert_eq!(
                        got, base,
                        "{shape:?} {over:?} {op:?} tile {tile}: bytes differ"
                    );
                }
            }
        }
    }
}

/// Positions of integers beyond 2^53, where f64 would see ties that are not.
#[test]
fn positions_of_wide_integers_are_exact() {
    let big = (1i64 << 60) + 1;
    let x: Vec<i64> = vec![1 << 60, big, big - 1, big, 1 << 60];
    let g = Geometry::new(&[5], ReduceOver::All).unwrap();
    for (op, want) in [(Reduce::ArgMax, 1i64), (Reduce::ArgMin, 0)] {
        let mut r = reducer(op, DType::I64, g, 1);
        r.feed_bytes(0, bytemuck::cast_slice(&x));
        assert_eq!(
            bytemuck::cast_slice::<u8, i64>(&r.into_bytes()),
            &[want],
            "{op:?}"
        );
    }
}

/// A matrix fed column by column (panels of columns, runs of rows that start anywhere,
/// cut inside blocks or across many of them, more block partials than one window holds)
/// gives the bytes of the same matrix fed in C order, for every kind of reduction.
#[test]
fn columns_fed_in_runs_give_the_c_order_bytes() {
    for (rows, cols, dtype) in [
        (2_003usize, 600usize, DType::F64),
        (9_001, 37, DType::F64),
        (5, 3, DType::F64),
        (3_001, 45, DType::F32),
        (700, 19, DType::I32),
    ] {
        let n = rows * cols;
        // f64 values whose sums round, with ties for the positions
        let v: Vec<f64> = (0..n)
            .map(|i| ((i * 7919 % 1013) as f64) * 0.1 + 1.0 / ((i % 29) as f64 + 3.0))
            .collect();
        // the elements as `dtype` (f32 sums round in f64 only over many rows)
        let es = dtype.size();
        let x: Vec<u8> = v
            .iter()
            .flat_map(|&e| match dtype {
                DType::F32 => (e as f32 * 1e6).to_le_bytes().to_vec(),
                DType::I32 => ((e * 1e6) as i32).to_le_bytes().to_vec(),
                _ => e.to_le_bytes().to_vec(),
            })
            .collect();
        let g = Geometry::new(&[rows, cols], ReduceOver::Axis(0)).unwrap();
        let by_cols: Vec<Vec<u8>> = (0..cols)
            .map(|c| {
                (0..rows)
                    .flat_map(|r| x[(r * cols + c) * es..(r * cols + c + 1) * es].to_vec())
                    .collect()
            })
            .collect();
        for op in [
            Reduce::Sum,
            Reduce::Mean,
            Reduce::Max,
            Reduce::Var { ddof: 1 },
            Reduce::NanStd { ddof: 0 },
            Reduce::ArgMin,
            Reduce::Count,
        ] {
            let mut r = reducer(op, dtype, g, 2);
            r.feed_bytes(0, &x);
            let want = r.into_bytes();
            for (panel, run) in [(cols, rows), (7, 1_000), (1, 333), (16, 1)] {
                let mut r = reducer(op, dtype, g, 2);
                assert!(r.takes_columns());
                for c0 in (0..cols).step_by(panel) {
                    let c1 = (c0 + panel).min(cols);
                    for row in (0..rows).step_by(run) {
                        let end = (row + run).min(rows);
                        let runs: Vec<&[u8]> = by_cols[c0..c1]
                            .iter()
                            .map(|col| &col[row * es..end * es])
                            .collect();
                        r.feed_columns(c0, row as u64, &runs);
                    }
                }
                r.finish_columns();
                assert!(
                    r.into_bytes() == want,
                    "{rows}x{cols} {dtype} {op:?}: panels of {panel}, runs of {run} rows"
                );
            }
        }
    }
}
