//! standardize against a plain f64 oracle at budgets forcing many tiles; its statistics
//! equal `reduce --op mean` and `--op std` bit for bit; the .npz of statistics is a valid
//! zip of .npy entries.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::float_cmp,
    clippy::cast_precision_loss
)]

use crate::common::{Lcg, engine_on, on_every_backend, read_npy_data, write_npy};
use tilestream::{Axis, DType, Engine, MemoryBudget, Reduce, TensorFile};

on_every_backend! {
fn matches_the_oracle_and_the_reductions(device) {
    let dir = tempfile::tempdir().unwrap();
    let (r, c) = (20_011usize, 7usize);
    let mut rng = Lcg(5);
    let x: Vec<f32> = (0..r * c)
        .map(|i| (rng.f64() * 10.0 + (i % c) as f64 * 100.0) as f32)
        .collect();
    let xp = dir.path().join("x.npy");
    write_npy(&xp, DType::F32, &[r, c], bytemuck::cast_slice(&x));
    let xf = TensorFile::open(&xp).unwrap();
    let e = engine_on(device, 96 << 10);
    let out = dir.path().join("z.npy");
    let stats = dir.path().join("stats.npz");
    let (sr, ar) = e
        .standardize(&xf, &out, Some(DType::F64), 1, Some(&stats))
        .unwrap();
    assert!(
        sr.tiles >= 10 && ar.tiles >= 10,
        "{} and {} tiles",
        sr.tiles,
        ar.tiles
    );
    // statistics are exactly those of the reductions
    let (m, _) = e.reduce(&xf, Reduce::Mean, Axis(0)).unwrap();
    let (s, _) = e.reduce(&xf, Reduce::Std { ddof: 1 }, Axis(0)).unwrap();
    let (mean, std) = (m.to_f64(), s.to_f64());
    // oracle
    let z: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
    for col in 0..c {
        let v: Vec<f64> = (0..r).map(|i| f64::from(x[i * c + col])).collect();
        let mu = v.iter().sum::<f64>() / r as f64;
        let sd = (v.iter().map(|a| (a - mu).powi(2)).sum::<f64>() / (r - 1) as f64).sqrt();
        assert!(
            (mean[col] - mu).abs() <= 1e-12 * mu.abs().max(1.0),
            "mean {col}"
        );
        assert!((std[col] - sd).abs() <= 1e-9 * sd, "std {col}");
        for i in 0..r {
            assert_eq!(
                z[i * c + col],
                (f64::from(x[i * c + col]) - mean[col]) / std[col],
                "[{i},{col}]"
            );
        }
    }
    // the .npz: a zip whose entries are .npy files holding those statistics
    let npz = std::fs::read(&stats).unwrap();
    assert_eq!(&npz[..4], b"PK\x03\x04");
    for (name, want) in [("mean.npy", &mean), ("std.npy", &std)] {
        let at = npz
            .windows(name.len())
            .position(|w| w == name.as_bytes())
            .unwrap()
            + name.len();
        let npy = &npz[at..];
        assert_eq!(&npy[..6], b"\x93NUMPY");
        let hl = 10 + u16::from_le_bytes([npy[8], npy[9]]) as usize;
        let got: Vec<f64> = bytemuck::pod_collect_to_vec(&npy[hl..hl + 8 * c]);
        assert_eq!(&got, want, "{name}");
    }
}
}

#[test]
fn refuses_rank_one() {
    let dir = tempfile::tempdir().unwrap();
    let xp = dir.path().join("x.npy");
    write_npy(&xp, DType::F32, &[10], &[0u8; 40]);
    let e = Engine::new(MemoryBudget::new(1 << 20)).unwrap();
    let msg = e
        .standardize(
            &TensorFile::open(&xp).unwrap(),
            dir.path().join("z.npy"),
            None,
            0,
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(msg.contains("needs rank 2 or more"), "{msg}");
}
