//! Histograms: explicit edges against counts taken by plain comparisons in the test,
//! equal bins' counts adding up to the elements in range, per position of kept axes
//! (folded several axes too), the same counts at any budget and thread count, nodata
//! left out. numpy's own `np.histogram` is the oracle of `python/tests/test_histogram.py`
//! (equal bins' edge arithmetic, every dtype).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)] // exact values compared on purpose

use crate::common::{Lcg, engine_on, write_npy};
use tilestream::device::DeviceRequest;
use tilestream::ops::histogram::Bins;
use tilestream::{DType, ReduceOver, TensorFile};

fn counts(
    x: &TensorFile,
    over: ReduceOver,
    bins: &Bins,
    budget: u64,
    threads: usize,
) -> (Vec<i64>, Vec<usize>) {
    let e = engine_on(DeviceRequest::Cpu, budget)
        .with_threads(threads)
        .unwrap();
    let (c, _, _) = e.histogram(x, over, bins).unwrap();
    (bytemuck::pod_collect_to_vec(c.bytes()), c.shape().to_vec())
}

#[test]
fn explicit_edges_count_as_plain_comparisons_do_per_channel() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [5usize, 3, 61, 47];
    let n: usize = shape.iter().product();
    let mut rng = Lcg(11);
    let x: Vec<f32> = (0..n)
        .map(|i| {
            if i % 101 == 0 {
                f32::NAN
            } else {
                ((rng.f64() - 0.5) * 40.0).round() as f32 / 4.0
            }
        })
        .collect();
    let p = dir.path().join("x.npy");
    write_npy(&p, DType::F32, &shape, bytemuck::cast_slice(&x));
    let f = TensorFile::open(&p).unwrap();
    let edges = vec![-4.0, -1.0, -1.0, 0.0, 0.25, 2.0, 4.5];
    let over = ReduceOver::axes(&[0, 2, 3]).unwrap();
    let (base, cshape) = counts(&f, over, &Bins::Edges(edges.clone()), 1 << 30, 2);
    assert_eq!(cshape, [3, 6]);
    // the oracle: each channel's elements compared with the edges one by one
    let mut want = vec![0i64; 18];
    for (i, &v) in x.iter().enumerate() {
        let c = (i / (61 * 47)) % 3;
        let v = f64::from(v);
        if v.is_nan() || v < edges[0] || v > edges[6] {
            continue;
        }
        let b = if v == edges[6] {
            5
        } else {
            (0..6).rev().find(|&b| edges[b] <= v).unwrap()
        };
        want[c * 6 + b] += 1;
    }
    assert_eq!(base, want);
    for (budget, threads) in [(96 << 10, 1), (256 << 10, 3), (4 << 20, 2)] {
        assert_eq!(
            counts(&f, over, &Bins::Edges(edges.clone()), budget, threads).0,
            base,
            "{budget}"
        );
    }
}

#[test]
fn equal_bins_count_every_element_in_range_once_at_any_budget() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [70_001usize, 3];
    let mut rng = Lcg(5);
    let x: Vec<u16> = (0..shape[0] * 3)
        .map(|_| (rng.f64() * 5000.0) as u16)
        .collect();
    let p = dir.path().join("u.npy");
    write_npy(&p, DType::U16, &shape, bytemuck::cast_slice(&x));
    for (over, outs) in [(ReduceOver::All, 1usize), (ReduceOver::Axis(0), 3)] {
        for bins in [
            Bins::Count { n: 17, range: None },
            Bins::Count {
                n: 256,
                range: Some((100.0, 4000.0)),
            },
        ] {
            let f = TensorFile::open(&p).unwrap();
            let (base, _) = counts(&f, over, &bins, 1 << 30, 2);
            let n = bins.len();
            for o in 0..outs {
                let mine = |i: usize| outs == 1 || i % 3 == o;
                let in_range = x
                    .iter()
                    .enumerate()
                    .filter(|&(i, v)| {
                        mine(i)
                            && match &bins {
                                Bins::Count {
                                    range: Some((a, b)),
                                    ..
                                } => f64::from(*v) >= *a && f64::from(*v) <= *b,
                                _ => true,
                            }
                    })
                    .count() as i64;
                assert_eq!(
                    base[o * n..(o + 1) * n].iter().sum::<i64>(),
                    in_range,
                    "{over:?} {bins:?} {o}"
                );
            }
            for (budget, threads) in [(64 << 10, 1), (300 << 10, 3)] {
                assert_eq!(
                    counts(&f, over, &bins, budget, threads).0,
                    base,
                    "{over:?} {bins:?} {budget}"
                );
            }
            // nodata: its pixels are not counted
            let masked = TensorFile::open(&p)
                .unwrap()
                .with_nodata(Some("0"))
                .unwrap();
            let zeros = x.iter().filter(|&&v| v == 0).count() as i64;
            if outs == 1 && matches!(bins, Bins::Count { range: None, .. }) {
                let (m, _) = counts(&masked, over, &bins, 1 << 30, 2);
                assert_eq!(m.iter().sum::<i64>(), base.iter().sum::<i64>() - zeros);
            }
        }
    }
}

/// A histogram split by rows, each share counting with the whole input's extremes
/// (`Bins::Extremes`, what a Dask task counts with), adds up to the whole input's
/// automatic-range histogram, edges included; the extremes of 64-bit integers beyond
/// 2^53 are taken exactly. The wrong number of extremes is refused in one line.
#[test]
fn shares_counted_over_the_whole_inputs_extremes_add_up_to_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_on(DeviceRequest::Cpu, 1 << 30);
    let shape = [301usize, 4, 7];
    let n: usize = shape.iter().product();
    let mut rng = Lcg(5);
    let f32s: Vec<f32> = (0..n).map(|_| (rng.f64() * 50.0 - 20.0) as f32).collect();
    // u64 values beyond 2^63, whose extremes only an exact integer subtracts exactly
    let u64s: Vec<u64> = (0..n)
        .map(|_| (1 << 63) + 7 + (rng.f64() * 1e15) as u64)
        .collect();
    for (name, dtype, bytes) in [
        ("f", DType::F32, bytemuck::cast_slice::<f32, u8>(&f32s)),
        ("u", DType::U64, bytemuck::cast_slice::<u64, u8>(&u64s)),
    ] {
        let p = dir.path().join(format!("{name}.npy"));
        write_npy(&p, dtype, &shape, bytes);
        let x = TensorFile::open(&p).unwrap();
        for over in [ReduceOver::All, ReduceOver::axes(&[0, 2]).unwrap()] {
            let auto = Bins::Count { n: 13, range: None };
            let (want_c, want_e, _) = e.histogram(&x, over, &auto).unwrap();
            // the whole input's extremes, as a client takes them with split reductions
            let lo = e.reduce(&x, tilestream::Reduce::Min, over).unwrap().0;
            let hi = e.reduce(&x, tilestream::Reduce::Max, over).unwrap().0;
            let pairs = |a: &tilestream::Array| -> Vec<(f64, i128)> {
                if dtype == DType::U64 {
                    bytemuck::pod_collect_to_vec::<u8, u64>(a.bytes())
                        .into_iter()
                        .map(|v| (v as f64, i128::from(v)))
                        .collect()
                } else {
                    a.to_f64().into_iter().map(|v| (v, 0)).collect()
                }
            };
            let per: Vec<_> = pairs(&lo).into_iter().zip(pairs(&hi)).map(Some).collect();
            let bins = Bins::Extremes { n: 13, per };
            let mut sum = vec![0i64; want_c.bytes().len() / 8];
            for rows in [0..100, 100..101, 101..301] {
                let (c, edges, _) = e.histogram(&x.rows(rows).unwrap(), over, &bins).unwrap();
                assert_eq!(edges.bytes(), want_e.bytes(), "{name} {over:?}: edges");
                for (s, v) in sum
                    .iter_mut()
                    .zip(bytemuck::pod_collect_to_vec::<u8, i64>(c.bytes()))
                {
                    *s += v;
                }
            }
            assert_eq!(
                sum,
                bytemuck::pod_collect_to_vec::<u8, i64>(want_c.bytes()),
                "{name} {over:?}: counts"
            );
            assert!(sum.iter().all(|&c| c >= 0) && sum.iter().sum::<i64>() == n as i64);
        }
        let err = e
            .histogram(
                &x,
                ReduceOver::All,
                &Bins::Extremes {
                    n: 3,
                    per: vec![None, None],
                },
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 pairs of extremes for 1 outputs"), "{err}");
    }
}

/// `Engine::reduce_several` (an automatic range's extremes in one pass) gives each
/// reduction's own bytes, in one pass or, where the budget or the axes do not allow it,
/// one pass each.
#[test]
fn several_reductions_in_one_pass_are_each_ones_bytes() {
    use tilestream::Reduce;
    let dir = tempfile::tempdir().unwrap();
    let shape = [2003usize, 37];
    let n: usize = shape.iter().product();
    let mut rng = Lcg(9);
    let x: Vec<f32> = (0..n)
        .map(|i| {
            if i % 97 == 3 {
                f32::NAN
            } else {
                (rng.f64() * 1e4 - 3e3) as f32
            }
        })
        .collect();
    let p = dir.path().join("x.npy");
    write_npy(&p, DType::F32, &shape, bytemuck::cast_slice(&x));
    let f = TensorFile::open(&p).unwrap();
    let ops = [
        Reduce::NanMin,
        Reduce::NanMax,
        Reduce::Count,
        Reduce::Sum,
        Reduce::Std { ddof: 1 },
    ];
    for over in [ReduceOver::All, ReduceOver::Axis(0), ReduceOver::Axis(1)] {
        for budget in [64 << 20, 96 << 10] {
            let e = engine_on(DeviceRequest::Cpu, budget);
            let got = e.reduce_several(&f, &ops, over).unwrap();
            for (a, &op) in got.iter().zip(&ops) {
                let (want, _) = e.reduce(&f, op, over).unwrap();
                assert_eq!(a.shape(), want.shape(), "{} {over:?}", op.name());
                assert_eq!(
                    a.bytes(),
                    want.bytes(),
                    "{} {over:?} at {budget}",
                    op.name()
                );
            }
        }
    }
}
