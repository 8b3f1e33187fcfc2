//! Unit tests of the CPU reduction kernel against a plain f64 oracle.
#![allow(clippy::unwrap_used)]
use super::*;
use crate::ops::reduce::ReduceOver;

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
            });
        }
    }
    out
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
