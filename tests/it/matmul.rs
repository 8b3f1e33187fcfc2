//! matmul against numpy goldens (`tests/golden`, made by `tests/golden/make_golden.py`) and a
//! naive f64 triple-loop oracle over mixed dtypes, at budgets forcing many tiles; results
//! bit-identical across budgets and thread counts.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::cast_precision_loss
)]

use std::path::Path;

use crate::common::{Lcg, engine_on, on_every_backend, read_npy_data, write_npy};
use tilestream::{DType, Element, Engine, MemoryBudget, TensorFile};

fn golden(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

#[test]
fn matches_numpy_goldens() {
    let dir = tempfile::tempdir().unwrap();
    for (x, y) in [
        ("matmul_x.npy", "matmul_y.npy"),
        ("matmul_x32.npy", "matmul_y32.npy"),
    ] {
        let xf = TensorFile::open(golden(x)).unwrap();
        let wf = TensorFile::open(golden("matmul_w.npy")).unwrap();
        let out = dir.path().join("y.npy");
        // 36 KiB: tiles of about 16 rows
        let r = Engine::new(MemoryBudget::new(36 << 10))
            .unwrap()
            .matmul(&xf, &wf, &out, None)
            .unwrap();
        assert!(r.tiles > 3, "{} tiles", r.tiles);
        assert_eq!(r.output_dtype, "f64");
        let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
        let want: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&golden(y)));
        assert_eq!(got.len(), 97 * 5);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{x} element {i}: {g} vs numpy {w}"
            );
        }
    }
}

fn random(dtype: DType, n: usize, seed: u64) -> (Vec<u8>, Vec<f64>) {
    let mut rng = Lcg(seed);
    let mut bytes = Vec::new();
    let mut vals = Vec::new();
    for _ in 0..n {
        let raw = if dtype.is_float() {
            rng.f64() * 4.0 - 2.0
        } else {
            (rng.f64() * 20.0).floor() - if dtype.is_unsigned() { 0.0 } else { 10.0 }
        };
        tilestream::dispatch_dtype!(dtype, T => {
            let v = T::from_f64(raw);
            vals.push(v.to_f64());
            bytes.extend_from_slice(bytemuck::bytes_of(&v));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    (bytes, vals)
}

on_every_backend! {
fn matches_the_oracle_and_is_tiling_invariant(device) {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (1001, 37, 7, DType::F32, DType::F32),
        (513, 64, 16, DType::F16, DType::F32),
        (300, 11, 3, DType::I16, DType::F32),
        (257, 19, 5, DType::F64, DType::F32),
        (99, 8, 1, DType::U8, DType::I32),
        (1, 5, 4, DType::BF16, DType::F64),
    ];
    for (case, &(r, k, n, xd, wd)) in cases.iter().enumerate() {
        let (xb, x) = random(xd, r * k, 10 + case as u64);
        let (wb, w) = random(wd, k * n, 20 + case as u64);
        let xp = dir.path().join(format!("x{case}.npy"));
        let wp = dir.path().join(format!("w{case}.npy"));
        write_npy(&xp, xd, &[r, k], &xb);
        write_npy(&wp, wd, &[k, n], &wb);
        let (xf, wf) = (
            TensorFile::open(&xp).unwrap(),
            TensorFile::open(&wp).unwrap(),
        );
        let f32_compute =
            !matches!(xd, DType::F64 | DType::I32) && !matches!(wd, DType::F64 | DType::I32);
        let mut first: Option<Vec<u8>> = None;
        for (budget, threads) in [(1u64 << 30, 2), (64 << 10, 1), (100 << 10, 3)] {
            let out = dir.path().join(format!("y{case}_{budget}.npy"));
            let e = engine_on(device, budget).with_threads(threads).unwrap();
            let rep = e.matmul(&xf, &wf, &out, Some(DType::F64)).unwrap();
            if budget == 64 << 10 && r > 500 {
                assert!(rep.tiles >= 4, "case {case}: {} tiles", rep.tiles);
            }
            let bytes = read_npy_data(&out);
            match &first {
                None => first = Some(bytes.clone()),
                Some(f) => assert!(
                    *f == bytes,
                    "case {case}: result differs at budget {budget}, {threads} threads"
                ),
            }
            let got: Vec<f64> = bytemuck::pod_collect_to_vec(&bytes);
            for i in 0..r {
                for j in 0..n {
                    let want: f64 = (0..k).map(|t| x[i * k + t] * w[t * n + j]).sum();
                    let scale: f64 = (0..k)
                        .map(|t| (x[i * k + t] * w[t * n + j]).abs())
                        .sum::<f64>()
                        .max(1.0);
                    let tol = if f32_compute {
                        1e-6 * scale
                    } else {
                        1e-12 * scale
                    };
                    let g = got[i * n + j];
                    assert!(
                        (g - want).abs() <= tol,
                        "case {case} ({xd} @ {wd}) [{i},{j}]: {g} vs {want}"
                    );
                }
            }
        }
    }
}
}

#[test]
fn errors() {
    let dir = tempfile::tempdir().unwrap();
    let xp = dir.path().join("x.npy");
    let wp = dir.path().join("w.npy");
    write_npy(&xp, DType::F32, &[10, 4], &[0u8; 160]);
    write_npy(&wp, DType::F32, &[5, 3], &[0u8; 60]);
    let (xf, wf) = (
        TensorFile::open(&xp).unwrap(),
        TensorFile::open(&wp).unwrap(),
    );
    let e = Engine::new(MemoryBudget::new(1 << 20)).unwrap();
    let msg = e
        .matmul(&xf, &wf, dir.path().join("y.npy"), None)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("X's columns (4) must equal W's rows (5)"),
        "{msg}"
    );
    // W larger than the whole budget
    let big = dir.path().join("big.npy");
    write_npy(&big, DType::F32, &[4, 100_000], &vec![0u8; 1_600_000]);
    let bf = TensorFile::open(&big).unwrap();
    let msg = Engine::new(MemoryBudget::new(1 << 20))
        .unwrap()
        .matmul(&xf, &bf, dir.path().join("y.npy"), None)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("W alone needs 4 x 100000 x 4 B"), "{msg}");
    assert!(msg.contains("the smallest budget that works is"), "{msg}");
    assert!(!dir.path().join("y.npy").exists());
}
