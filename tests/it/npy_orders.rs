//! `.npy` files in Fortran order and with big-endian elements, as numpy writes them
//! (`np.save(path, a.T)`, `a.astype('>f4')`): every window, every reduction and every
//! output equal to those of the same values saved C order, little-endian, at budgets that
//! make hundreds of chunks and tiles; a Dask-style share of rows; refusals in one line.
//!
//! The files are laid out here by the definition of the orders (a nested loop over the
//! coordinates), not by the code under test; `python/tests/test_npy_orders.py` checks the
//! same against files numpy itself writes.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::Path;

use crate::common::{Lcg, engine_on, ok, read_npy_data, run, write_npy};
use tilestream::device::DeviceRequest;
use tilestream::format::Touch;
use tilestream::{DType, Reduce, ReduceOver, TensorFile};

/// Writes `c_bytes` (C order, little-endian, of `shape`) as a `.npy` stored in Fortran
/// order and/or big-endian.
pub(crate) fn write_stored(
    path: &Path,
    dtype: DType,
    shape: &[usize],
    c_bytes: &[u8],
    fortran: bool,
    big: bool,
) {
    let es = dtype.size();
    let n: usize = shape.iter().product();
    let mut data = vec![0u8; n * es];
    let mut coord = vec![0usize; shape.len()];
    for k in 0..n {
        // k is the C-order index of `coord`; its place in the file:
        let mut at = 0;
        if fortran {
            for a in (0..shape.len()).rev() {
                at = at * shape[a] + coord[a];
            }
        } else {
            at = k;
        }
        let mut v = c_bytes[k * es..(k + 1) * es].to_vec();
        if big {
            // each part of a complex element on its own
            v.chunks_exact_mut(dtype.swap_unit())
                .for_each(<[u8]>::reverse);
        }
        data[at * es..(at + 1) * es].copy_from_slice(&v);
        for a in (0..shape.len()).rev() {
            coord[a] += 1;
            if coord[a] < shape[a] {
                break;
            }
            coord[a] = 0;
        }
    }
    let shape_txt = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let descr = dtype.npy_descr();
    let descr = if big && es > 1 {
        descr.replacen('<', ">", 1)
    } else {
        descr.to_string()
    };
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape_txt}, }}",
        if fortran { "True" } else { "False" }
    );
    let mut head = dict.into_bytes();
    while (10 + head.len() + 1) % 64 != 0 {
        head.push(b' ');
    }
    head.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(head.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).unwrap();
}

pub(crate) fn random_bytes(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    if dtype.is_complex() {
        // the parts: an array of floats twice as long
        return random_bytes(dtype.part(), 2 * n, seed);
    }
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        let u = rng.f64();
        tilestream::dispatch_dtype!(dtype, T => {
            let v = <T as tilestream::Element>::from_f64((u - 0.3) * 250.0);
            out.extend_from_slice(bytemuck::bytes_of(&v));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    out
}

const ORDERS: [(bool, bool); 3] = [(true, false), (false, true), (true, true)];

#[test]
fn windows_equal_the_c_order_little_endian_bytes() {
    let shapes: &[&[usize]] = &[&[37, 53], &[3, 5, 7, 11], &[4099, 3], &[2, 1, 9], &[5], &[]];
    for (i, d) in DType::ALL.into_iter().chain(DType::COMPLEX).enumerate() {
        for (j, &shape) in shapes.iter().enumerate() {
            let n: usize = shape.iter().product();
            let want = random_bytes(d, n, (i * 10 + j) as u64);
            for (fortran, big) in ORDERS {
                // bfloat16 is saved as a void of 2 bytes ('<V2'), which has no byte order
                if big && d == DType::BF16 {
                    continue;
                }
                let dir = tempfile::tempdir().unwrap();
                let p = dir.path().join("x.npy");
                write_stored(&p, d, shape, &want, fortran, big);
                let x = TensorFile::open(&p).unwrap();
                assert_eq!((x.shape(), x.dtype()), (shape, d));
                let what = format!("{d} {shape:?} fortran {fortran} big-endian {big}");
                let es = d.size();
                let whole = x.map_windows(&[(0, n as u64, Touch::All)]).unwrap();
                assert!(whole[0].bytes() == want.as_slice(), "{what}: whole");
                // straight into a buffer, as a device's staging slot is filled (a
                // Fortran-order file's chunks must be decoded: None)
                let mut dst = vec![0u8; n * es];
                match x.read_into(0, n as u64, Touch::All, &mut dst).unwrap() {
                    Some(k) => assert!(k == n * es && dst == want, "{what}: read_into"),
                    None => assert!(fortran, "{what}: read_into refused"),
                }
                // windows starting and ending anywhere, several at once
                let mut rng = Lcg(j as u64 + 99);
                for _ in 0..20 {
                    let a = (rng.next_u64() % n as u64) as usize;
                    let b = a + (rng.next_u64() % (n - a) as u64) as usize + 1;
                    let c = (rng.next_u64() % n as u64) as usize;
                    let w = x
                        .map_windows(&[
                            (a as u64, (b - a) as u64, Touch::All),
                            (c as u64, 1, Touch::All),
                        ])
                        .unwrap();
                    assert!(
                        w[0].bytes() == &want[a * es..b * es],
                        "{what}: window {a}..{b}"
                    );
                    assert!(
                        w[1].bytes() == &want[c * es..(c + 1) * es],
                        "{what}: element {c}"
                    );
                }
                // a share of rows (how a Dask task reads its part)
                if shape.len() >= 2 && shape[0] > 2 {
                    let rows = x.rows(1..shape[0] as u64 - 1).unwrap();
                    let per: usize = shape[1..].iter().product();
                    let m = (shape[0] - 2) * per;
                    let w = rows.map_windows(&[(0, m as u64, Touch::All)]).unwrap();
                    assert!(
                        w[0].bytes() == &want[per * es..(per + m) * es],
                        "{what}: rows"
                    );
                }
            }
        }
    }
}

#[test]
fn reductions_and_outputs_equal_the_c_order_files_at_any_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Fortran order: 2 chunks of 8128 rows and a part; big-endian: 9 chunks of 2032 rows
    // and a part; budgets of a few chunks
    let shape = [20_011usize, 129];
    let want = random_bytes(DType::F32, 20_011 * 129, 5);
    let c = d.join("c.npy");
    write_npy(&c, DType::F32, &shape, &want);
    let base = TensorFile::open(&c).unwrap();
    for (k, (fortran, big)) in ORDERS.into_iter().enumerate() {
        let p = d.join(format!("o{k}.npy"));
        write_stored(&p, DType::F32, &shape, &want, fortran, big);
        let x = TensorFile::open(&p).unwrap();
        for over in [ReduceOver::Axis(0), ReduceOver::Axis(1), ReduceOver::All] {
            for op in [Reduce::Sum, Reduce::Std { ddof: 1 }, Reduce::ArgMax] {
                let (b, _) = engine_on(DeviceRequest::Cpu, 64 << 20)
                    .reduce(&base, op, over)
                    .unwrap();
                for budget in [12 << 20, 64 << 20] {
                    let (a, _) = engine_on(DeviceRequest::Cpu, budget)
                        .reduce(&x, op, over)
                        .unwrap();
                    assert!(
                        a.bytes() == b.bytes(),
                        "{fortran} {big} {over:?} {op:?} at {budget}"
                    );
                }
            }
        }
        // an output written from it is C order, little-endian, the same bytes
        let out = d.join(format!("out{k}.npy"));
        ok(&[
            "--memory",
            "12MiB",
            "cast",
            p.to_str().unwrap(),
            out.to_str().unwrap(),
            "--dtype",
            "f32",
        ]);
        assert!(read_npy_data(&out) == want, "{fortran} {big}: cast");
        let info = ok(&["info", p.to_str().unwrap()]);
        let order = match (fortran, big) {
            (true, true) => "Fortran order, big-endian",
            (true, false) => "Fortran order",
            _ => "big-endian",
        };
        assert!(info.contains(order), "{info}");
    }
}

/// A Fortran-order matrix reduced over its leading axis is read column by column (each
/// column is one run of the file) and gives the C-order file's bytes: every kind of
/// reduction, NaN and nodata, at budgets that hold all columns of many blocks, of one
/// block only, or a few columns of one block at a time, and a share of its rows.
#[test]
fn a_fortran_order_matrix_reduced_over_its_rows_column_by_column_gives_the_c_order_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 3542 rows to a summation block of 37 columns: blocks end inside tiles, the last
    // one is partial; budgets of a tile of one block of one column, of every row of 8
    // columns, of every column
    let shape = [9_001usize, 37];
    let n = shape[0] * shape[1];
    // f64 values, whose sums round (f32 ones sum exactly in f64), NaN in two columns
    let mut want = random_bytes(DType::F64, n, 11);
    for r in (0..shape[0]).step_by(50) {
        for c in [5, 17] {
            let i = r * shape[1] + c;
            want[i * 8..i * 8 + 8].copy_from_slice(&f64::NAN.to_le_bytes());
        }
    }
    let (c, f) = (d.join("c.npy"), d.join("f.npy"));
    write_npy(&c, DType::F64, &shape, &want);
    write_stored(&f, DType::F64, &shape, &want, true, false);
    let (base, x) = (TensorFile::open(&c).unwrap(), TensorFile::open(&f).unwrap());
    let ops = [
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Min,
        Reduce::Max,
        Reduce::Var { ddof: 0 },
        Reduce::Std { ddof: 1 },
        Reduce::ArgMin,
        Reduce::NanSum,
        Reduce::NanMean,
        Reduce::NanMax,
        Reduce::NanStd { ddof: 1 },
        Reduce::NanArgMax,
        Reduce::Count,
    ];
    let by_columns = |report: &tilestream::RunReport| report.op.contains("column by column");
    for op in ops {
        let (b, _) = engine_on(DeviceRequest::Cpu, 64 << 20)
            .reduce(&base, op, ReduceOver::Axis(0))
            .unwrap();
        for budget in [1 << 20, 3 << 20, 64 << 20] {
            let (a, report) = engine_on(DeviceRequest::Cpu, budget)
                .reduce(&x, op, ReduceOver::Axis(0))
                .unwrap();
            assert!(by_columns(&report), "{op:?} at {budget}: {}", report.op);
            assert!(a.bytes() == b.bytes(), "{op:?} at {budget}");
            assert!(report.peak_reserved_bytes <= budget, "{op:?} at {budget}");
        }
    }
    // a share of the rows (as a cluster's task opens it)
    for op in [Reduce::Sum, Reduce::ArgMax, Reduce::NanVar { ddof: 0 }] {
        let (b, _) = engine_on(DeviceRequest::Cpu, 64 << 20)
            .reduce(&base.rows(1_234..8_000).unwrap(), op, ReduceOver::Axis(0))
            .unwrap();
        let (a, report) = engine_on(DeviceRequest::Cpu, 1 << 20)
            .reduce(&x.rows(1_234..8_000).unwrap(), op, ReduceOver::Axis(0))
            .unwrap();
        assert!(
            by_columns(&report) && a.bytes() == b.bytes(),
            "rows: {op:?}"
        );
    }
    // a nodata value of an integer matrix
    let shape = [6_007usize, 20];
    let mut ints = random_bytes(DType::I16, shape[0] * shape[1], 3);
    for i in (0..shape[0] * shape[1]).step_by(13) {
        ints[i * 2..i * 2 + 2].copy_from_slice(&7i16.to_le_bytes());
    }
    let (c, f) = (d.join("ci.npy"), d.join("fi.npy"));
    write_npy(&c, DType::I16, &shape, &ints);
    write_stored(&f, DType::I16, &shape, &ints, true, false);
    let base = TensorFile::open(&c)
        .unwrap()
        .with_nodata(Some("7"))
        .unwrap();
    let x = TensorFile::open(&f)
        .unwrap()
        .with_nodata(Some("7"))
        .unwrap();
    for op in [
        Reduce::NanSum,
        Reduce::NanMean,
        Reduce::NanArgMin,
        Reduce::Count,
    ] {
        let (b, _) = engine_on(DeviceRequest::Cpu, 64 << 20)
            .reduce(&base, op, ReduceOver::Axis(0))
            .unwrap();
        let (a, report) = engine_on(DeviceRequest::Cpu, 1 << 20)
            .reduce(&x, op, ReduceOver::Axis(0))
            .unwrap();
        assert!(
            by_columns(&report) && a.bytes() == b.bytes(),
            "nodata: {op:?}"
        );
    }
}

#[test]
fn refusals_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    // a Fortran-order file whose rows hold 20 MB: refused, not gathered across the file
    let p = dir.path().join("wide.npy");
    write_stored(&p, DType::F32, &[2, 3], &[0; 24], true, false);
    let mut bytes = std::fs::read(&p).unwrap();
    let head_end = bytes.len() - 24;
    let dict = String::from_utf8(bytes[10..head_end].to_vec()).unwrap();
    let wide = dict.replace("(2, 3)", "(2, 5000000)");
    bytes.truncate(10);
    bytes[8..10].copy_from_slice(&(wide.len() as u16).to_le_bytes());
    bytes.extend_from_slice(wide.as_bytes());
    std::fs::write(&p, &bytes).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(bytes.len() as u64 + 2 * 5_000_000 * 4).unwrap();
    let e = TensorFile::open(&p).unwrap_err().to_string();
    assert!(
        e.contains("Fortran-order") && e.contains("at most") && !e.contains('\n'),
        "{e}"
    );
    // datetimes are refused, naming the dtype
    let c = dir.path().join("c.npy");
    write_stored(&c, DType::F64, &[2], &[0; 16], false, false);
    let mut b = std::fs::read(&c).unwrap();
    let at = b.windows(4).position(|w| w == b"'<f8").unwrap();
    b[at + 2] = b'M';
    std::fs::write(&c, &b).unwrap();
    let o = run(&["info", c.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("'<M8'"), "{err}");
}
