//! Quantiles, percentiles and medians against a sorted oracle: every dtype, one axis,
//! several and all elements of a prime 4-D shape, NaN at block and tile boundaries and
//! slices of NaN alone, the same bytes at budgets from a few hundred KiB to 64 MiB and
//! 1-3 threads. The selected elements (`lower`, `higher`, `nearest`) must equal the
//! oracle's exactly; numpy's arithmetic between them is checked against numpy itself by
//! `python/tests/test_quantile.py`.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use crate::common::{Lcg, engine_on, write_npy};
use tilestream::device::DeviceRequest;
use tilestream::ops::quantile::Quantiles;
use tilestream::{DType, Element, ReduceOver, TensorFile};

/// Each output's values (gathered by the kept axes' coordinates), sorted, NaN left out;
/// and whether it held NaN.
fn groups(x: &[f64], shape: &[usize], over: ReduceOver) -> Vec<(Vec<f64>, bool)> {
    let reduced = over.axis_list(shape.len());
    let outputs: usize = (0..shape.len())
        .filter(|a| !reduced.contains(a))
        .map(|a| shape[a])
        .product();
    let mut g: Vec<(Vec<f64>, bool)> = vec![(Vec::new(), false); outputs];
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
        if v.is_nan() {
            g[out].1 = true;
        } else {
            g[out].0.push(v);
        }
    }
    for (v, _) in &mut g {
        v.sort_by(f64::total_cmp);
    }
    g
}

fn data(dtype: DType, n: usize, seed: u64, nan_every: usize) -> (Vec<u8>, Vec<f64>) {
    let mut rng = Lcg(seed);
    let mut bytes = Vec::with_capacity(n * dtype.size());
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        let u = rng.f64();
        tilestream::dispatch_dtype!(dtype, T => {
            // negative and positive values, many ties; NaN where asked (floats)
            let raw = if dtype.is_float() && nan_every > 0 && i % nan_every == 3 {
                f64::NAN
            } else if dtype.is_float() {
                ((u - 0.5) * 600.0).round() / 4.0
            } else {
                (u * 120.0).floor() - if dtype.is_unsigned() || dtype == DType::Bool { 0.0 } else { 60.0 }
            };
            let v = T::from_f64(raw);
            vals.push(v.to_f64());
            bytes.extend_from_slice(bytemuck::bytes_of(&v));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    (bytes, vals)
}

fn run(x: &TensorFile, over: ReduceOver, q: &Quantiles, budget: u64, threads: usize) -> Vec<u8> {
    let e = engine_on(DeviceRequest::Cpu, budget)
        .with_threads(threads)
        .unwrap();
    e.quantile(x, over, q).unwrap().0.bytes().to_vec()
}

fn check(shape: &[usize], dtype: DType, over: ReduceOver, seed: u64, nan_every: usize) {
    let n: usize = shape.iter().product();
    let (bytes, vals) = data(dtype, n, seed, nan_every);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    write_npy(&p, dtype, shape, &bytes);
    let x = TensorFile::open(&p).unwrap();
    let g = groups(&vals, shape, over);
    for method in ["lower", "higher", "nearest"] {
        for name in ["quantile", "nanquantile"] {
            let qs = [0.0, 0.02, 0.5, 0.98, 1.0];
            let q = Quantiles::parse(name, Some(&qs), false, Some(method))
                .unwrap()
                .unwrap();
            let got = run(&x, over, &q, 64 << 20, 2);
            let got: Vec<f64> = tilestream::dispatch_dtype!(dtype, T => {
                bytemuck::pod_collect_to_vec::<u8, T>(&got).into_iter().map(Element::to_f64).collect()
            }, complex => unreachable!("the tests give real dtypes here"));
            assert_eq!(got.len(), qs.len() * g.len());
            for (k, &qv) in qs.iter().enumerate() {
                for (o, (v, nan)) in g.iter().enumerate() {
                    let want = if v.is_empty() || (*nan && name == "quantile") {
                        f64::NAN
                    } else {
                        let h = (v.len() - 1) as f64 * qv;
                        let r = match method {
                            "lower" => h.floor(),
                            "higher" => h.ceil(),
                            _ => h.round_ties_even(),
                        };
                        v[r as usize]
                    };
                    let have = got[k * g.len() + o];
                    assert!(
                        have.to_bits() == want.to_bits() || (have.is_nan() && want.is_nan()),
                        "{shape:?} {dtype} {over:?} {name} {method} q {qv} output {o}: \
                         got {have}, sorted oracle {want}"
                    );
                }
            }
            // the same bytes at any budget and thread count
            let base = run(&x, over, &q, 64 << 20, 2);
            let mut ran = 0;
            for (budget, threads) in [(300 << 10, 1), (1 << 20, 3), (4 << 20, 1)] {
                let e = engine_on(DeviceRequest::Cpu, budget)
                    .with_threads(threads)
                    .unwrap();
                let b = match e.quantile(&x, over, &q) {
                    Ok((a, _)) => a.bytes().to_vec(),
                    // too many outputs for this budget's counts: refused, not wrong
                    Err(tilestream::Error::Budget(_)) => continue,
                    Err(e) => panic!("{e}"),
                };
                assert!(
                    b == base,
                    "{shape:?} {dtype} {over:?} {name} {method}: bytes differ at {budget}, {threads} threads"
                );
                ran += 1;
            }
            // narrower digits (more passes) at the small budgets, the same bytes
            assert!(
                ran >= 1,
                "{shape:?} {over:?}: none of the small budgets ran"
            );
        }
    }
}

#[test]
fn selection_equals_the_sorted_oracle_every_dtype() {
    for (i, d) in DType::ALL.into_iter().enumerate() {
        check(&[1031, 7], d, ReduceOver::Axis(0), 10 + i as u64, 0);
        check(&[1031, 7], d, ReduceOver::All, 30 + i as u64, 0);
    }
}

#[test]
fn every_axis_combination_of_a_4d_array_with_nan() {
    let shape = [3, 5, 7, 11];
    for d in [DType::F32, DType::F64, DType::F16, DType::I16] {
        for mask in 1u32..16 {
            let axes: Vec<usize> = (0..4).filter(|a| mask & (1 << a) != 0).collect();
            let over = ReduceOver::axes(&axes).unwrap();
            check(&shape, d, over, u64::from(mask), 13);
        }
    }
}

#[test]
fn many_tiles_and_nan_at_their_boundaries() {
    // 300 000 elements: hundreds of tiles at the small budgets; NaN every 4096 elements
    check(&[100_000, 3], DType::F32, ReduceOver::Axis(0), 7, 4096);
    check(&[300_000], DType::F64, ReduceOver::All, 8, 65_536);
}

#[test]
fn a_median_and_linear_quantiles_of_integers() {
    // numpy: the median of integers is the mean of the two middle ones, in f64; linear
    // interpolation a + (b - a) * t in f64
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    let v: Vec<i32> = vec![7, -3, 10, 1, 4, 4];
    write_npy(&p, DType::I32, &[6], bytemuck::cast_slice(&v));
    let x = TensorFile::open(&p).unwrap();
    let e = engine_on(DeviceRequest::Cpu, 1 << 20);
    let m = Quantiles::parse("median", None, false, None)
        .unwrap()
        .unwrap();
    let (a, _) = e.quantile(&x, ReduceOver::All, &m).unwrap();
    assert_eq!((a.dtype(), a.shape()), (DType::F64, &[][..]));
    assert_eq!(bytemuck::cast_slice::<u8, f64>(a.bytes()), &[4.0]);
    // sorted: -3 1 4 4 7 10; q 0.3: h = 1.5, 1 + (4 - 1) * 0.5 = 2.5 (t >= 0.5: 4 - 3 * 0.5)
    let q = Quantiles::parse("percentile", Some(&[30.0, 100.0]), false, None)
        .unwrap()
        .unwrap();
    let (a, _) = e.quantile(&x, ReduceOver::All, &q).unwrap();
    assert_eq!(a.shape(), &[2]);
    assert_eq!(bytemuck::cast_slice::<u8, f64>(a.bytes()), &[2.5, 10.0]);
}

#[test]
fn refusals_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.npy");
    let (bytes, _) = data(DType::F32, 4000, 1, 0);
    write_npy(&p, DType::F32, &[1000, 4], &bytes);
    let x = TensorFile::open(&p).unwrap();
    // a median along the last axis of 1000 rows: 1000 outputs' counts in a tiny budget
    let m = Quantiles::parse("median", None, false, None)
        .unwrap()
        .unwrap();
    let e = engine_on(DeviceRequest::Cpu, 64 << 10).quantile(&x, ReduceOver::Axis(1), &m);
    let e = e.unwrap_err().to_string();
    assert!(e.contains("digit counts") && !e.contains('\n'), "{e}");
}

/// The passes of a selection counted over shares of the rows, each share by an engine of
/// its own (another budget, other threads) and its counts carried as bytes, as a cluster
/// runs them: the bytes of one process's quantiles, whatever the shares.
#[test]
fn shares_of_the_rows_counted_apart_give_one_processs_bytes() {
    // shape, dtype, axes (None: all), NaN every so many elements, nodata
    type Case = (
        &'static [usize],
        DType,
        Option<&'static [usize]>,
        usize,
        Option<&'static str>,
    );
    let dir = tempfile::tempdir().unwrap();
    let cases: [Case; 6] = [
        (&[97, 13], DType::F32, Some(&[0]), 7, None),
        (&[97, 13], DType::F64, None, 11, None),
        (&[41, 5, 6], DType::I16, Some(&[0, 2]), 0, Some("-60")),
        (&[41, 5, 6], DType::F16, Some(&[0, 1]), 5, Some("-30.5")),
        (&[300], DType::U8, None, 0, Some("7")),
        (&[64, 3], DType::U64, Some(&[0]), 0, None),
    ];
    for (i, (shape, dtype, axes, nan_every, nodata)) in cases.into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let (bytes, _) = data(dtype, n, 90 + i as u64, nan_every);
        let p = dir.path().join(format!("x{i}.npy"));
        write_npy(&p, dtype, shape, &bytes);
        let x = TensorFile::open(&p).unwrap().with_nodata(nodata).unwrap();
        let over = axes.map_or(ReduceOver::All, |a| ReduceOver::axes(a).unwrap());
        for (name, qs, method) in [
            ("nanquantile", Some(&[0.0, 0.02, 0.5, 0.98, 1.0][..]), None),
            ("quantile", Some(&[0.3][..]), Some("midpoint")),
            ("nanmedian", None, None),
            ("percentile", Some(&[2.0, 98.0][..]), Some("nearest")),
        ] {
            let q = Quantiles::parse(name, qs, qs.is_some_and(|v| v.len() == 1), method)
                .unwrap()
                .unwrap();
            let whole = run(&x, over, &q, 64 << 20, 2);
            // a budget that takes narrow digits: more passes, each through bytes
            let client = engine_on(DeviceRequest::Cpu, 300 << 10);
            let mut sel = client.quantile_selection(&x, over, &q).unwrap();
            let rows = shape[0] as u64;
            let mut passes = 0;
            while !sel.is_done() {
                sel = tilestream::ops::quantile::Selection::from_bytes(&sel.to_bytes()).unwrap();
                let cuts = [0, rows / 3, rows / 3 + 1, rows];
                let counts: Vec<Vec<u8>> = cuts
                    .windows(2)
                    .enumerate()
                    .map(|(k, w)| {
                        let e = engine_on(DeviceRequest::Cpu, (1 + k as u64) << 20)
                            .with_threads(1 + k)
                            .unwrap();
                        e.quantile_counts(&x, &sel, w[0]..w[1]).unwrap().0
                    })
                    .collect();
                let parts: Vec<&[u8]> = counts.iter().map(Vec::as_slice).collect();
                sel.add(&parts).unwrap();
                passes += 1;
            }
            assert_eq!(sel.passes_left(), 0);
            assert!(passes >= 1);
            assert!(
                sel.finish_bytes().unwrap() == whole,
                "{shape:?} {dtype} {over:?} {name} nodata {nodata:?}: the shares' result \
                 differs from one process's"
            );
            assert_eq!(sel.out_shape(), q.out_shape(&over.out_shape(shape)));
        }
    }
    // a selection that keeps axis 0 is refused, as is another input
    let p = dir.path().join("x0.npy");
    let x = TensorFile::open(&p).unwrap();
    let q = Quantiles::parse("median", None, false, None)
        .unwrap()
        .unwrap();
    let e = engine_on(DeviceRequest::Cpu, 1 << 20);
    let sel = e.quantile_selection(&x, ReduceOver::Axis(1), &q).unwrap();
    let err = e.quantile_counts(&x, &sel, 0..10).unwrap_err().to_string();
    assert!(err.contains("keeps axis 0") && !err.contains('\n'), "{err}");
    let sel = e.quantile_selection(&x, ReduceOver::All, &q).unwrap();
    let other = TensorFile::open(dir.path().join("x1.npy")).unwrap();
    let err = e
        .quantile_counts(&other, &sel, 0..10)
        .unwrap_err()
        .to_string();
    assert!(err.contains("the selection is of"), "{err}");
}
