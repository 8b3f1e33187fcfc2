//! Runs each example at a small size, as a user would, and checks what it produced.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::read_npy_data;
use tilestream::{Axis, Engine, MemoryBudget, Reduce, TensorFile};

/// `target/<profile>/examples/<name>`: `cargo test` builds the examples beside the tests.
fn example(name: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built (run through cargo test)",
        path.display()
    );
    Command::new(path)
}

fn run_ok(mut c: Command, dir: &Path) -> String {
    let o = c.env("TILESTREAM_DIR", dir).output().unwrap();
    assert!(
        o.status.success(),
        "example failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn f32s(path: &Path) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&read_npy_data(path))
}

#[test]
fn oversized_array_small() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = example("oversized_array");
    c.args(["--rows", "20000"]);
    let out = run_ok(c, dir.path());
    assert!(out.contains("peak resident memory"), "{out}");
    let engine = Engine::new(MemoryBudget::parse("64MiB").unwrap()).unwrap();
    // standardized f16 output: every column has mean ~0 and std ~1
    let z = TensorFile::open(dir.path().join("z_f16.npy")).unwrap();
    assert_eq!(z.shape(), &[20000, 512]);
    let (m, _) = engine.reduce(&z, Reduce::Mean, Axis(0)).unwrap();
    let (s, _) = engine.reduce(&z, Reduce::Std { ddof: 0 }, Axis(0)).unwrap();
    assert!(m.to_f64().iter().all(|v| v.abs() < 2e-3), "means");
    assert!(s.to_f64().iter().all(|v| (v - 1.0).abs() < 2e-3), "stds");
    // projection: rows checked against a plain f64 dot product of X and W
    let x = f32s(&dir.path().join("x.npy"));
    let w = f32s(&dir.path().join("directions.npy"));
    let p = f32s(&dir.path().join("projection.npy"));
    assert_eq!(p.len(), 20000 * 64);
    for row in [0usize, 7, 19999] {
        for col in [0usize, 63] {
            let want: f64 = (0..512)
                .map(|k| f64::from(x[row * 512 + k]) * f64::from(w[k * 64 + col]))
                .sum();
            let got = f64::from(p[row * 64 + col]);
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{row},{col}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn satellite_tiles_small() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = example("satellite_tiles");
    c.args(["--size", "1100"]);
    let out = run_ok(c, dir.path());
    assert!(out.contains("identical bytes"), "{out}");
    // NDVI = (s[3] - s[2]) / (s[3] + s[2]) of the u16 scene, pixel by pixel
    let scene: Vec<u16> =
        bytemuck::pod_collect_to_vec(&read_npy_data(&dir.path().join("scene.npy")));
    let ndvi = f32s(&dir.path().join("ndvi.npy"));
    let plane = 1100 * 1100;
    assert_eq!(ndvi.len(), plane);
    for i in (0..plane).step_by(9973) {
        let (b3, b2) = (
            f64::from(scene[3 * plane + i]),
            f64::from(scene[2 * plane + i]),
        );
        let want = ((b3 - b2) / (b3 + b2)) as f32;
        assert_eq!(ndvi[i].to_bits(), want.to_bits(), "pixel {i}");
    }
    // every patch listed in the index exists, with all four bands
    let index = std::fs::read_to_string(dir.path().join("patches/index.csv")).unwrap();
    let rows: Vec<&str> = index.lines().skip(1).collect();
    assert_eq!(rows.len(), 9, "{index}"); // 1100 px at stride 480: 3 x 3 patches
    for r in rows {
        let f = TensorFile::open(
            dir.path()
                .join("patches")
                .join(r.split(',').next().unwrap()),
        )
        .unwrap();
        assert_eq!(f.shape(), &[4, 512, 512]);
    }
}

#[test]
fn memory_budget_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(example("memory_budget"), dir.path());
    assert!(
        out.contains("column means") && out.contains("tiles"),
        "{out}"
    );
}

#[test]
fn pipeline_small() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = example("pipeline");
    c.args(["--rows", "3000"]);
    let out = run_ok(c, dir.path());
    assert!(out.contains("tilestream run"), "{out}");
    let d = dir.path().join("data");
    // root16 = f16(where((x-1)/2 > 0, sqrt((x-1)/2), 0)), element by element
    let x = f32s(&d.join("x.npy"));
    let r: Vec<half::f16> = bytemuck::pod_collect_to_vec(&read_npy_data(&d.join("root16.npy")));
    for i in (0..x.len()).step_by(997) {
        let y = (f64::from(x[i]) - 1.0) * 0.5;
        let want = half::f16::from_f64(if y > 0.0 { y.sqrt() } else { 0.0 });
        assert_eq!(r[i].to_bits(), want.to_bits(), "element {i}");
    }
    // the std of each standardized projection column, and no intermediate left over
    let s: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&d.join("proj_std.npy")));
    assert_eq!(s.len(), 16);
    assert!(s.iter().all(|v| v.is_finite() && *v > 0.0));
    let stray = std::fs::read_dir(&d)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".tilestream")
        })
        .count();
    assert_eq!(stray, 0);
}
