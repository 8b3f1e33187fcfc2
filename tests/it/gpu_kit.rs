//! The GPU kit (`benches/gpu/kit.py`) run as CI runs it: its `smoke` and `bench` modes
//! with the CPU in the GPU's place and bench's inputs a hundredth of the size, so that
//! the scripts a short GPU session depends on cannot rot where no GPU is. Each mode must
//! pass, leave its tarball and its summary, and the summary must hold the lines a GPU
//! session reads: every operation compared, the limits, every bench task.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

const KIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/gpu/kit.py");

fn kit(mode: &str, out: &Path, work: &Path, extra: &[&str]) -> String {
    let Some(python) = crate::common::python("numpy") else {
        return String::new();
    };
    let o = Command::new(python)
        .arg(KIT)
        .arg(mode)
        .args([
            "--device",
            "cpu",
            "--small",
            "--bin",
            env!("CARGO_BIN_EXE_tilestream"),
        ])
        .arg("--out")
        .arg(out)
        .arg("--work")
        .arg(work)
        .args(extra)
        .env_remove("OUT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "kit {mode}: {stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.join(format!("{mode}.tar.gz")).is_file(), "no tarball");
    let summary = std::fs::read_to_string(out.join(format!("summary-{mode}.txt"))).unwrap();
    assert!(summary.contains(&format!("{mode}: PASS")), "{summary}");
    assert!(!work.exists(), "the kit left its scratch folder");
    summary
}

#[test]
fn smoke_and_bench_run_in_cpu_mode() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let summary = kit("smoke", &out, &dir.path().join("w1"), &[]);
    if summary.is_empty() {
        return;
    }
    assert!(summary.contains("cases: 56"), "{summary}");
    for case in [
        "matmul",
        "reduce-std-all",
        "reduce-nanvar-0",
        "reduce-count-nodata",
        "stencil-median-size7",
        "ndvi-masked",
    ] {
        let line = summary
            .lines()
            .find(|l| l.starts_with(case))
            .unwrap_or_else(|| panic!("{case} missing: {summary}"));
        assert!(line.ends_with("equal"), "{line}");
    }
    assert!(
        summary.contains("limit page-cache read, 1 thread:"),
        "{summary}"
    );
    let summary = kit(
        "bench",
        &out,
        &dir.path().join("w2"),
        &[
            "--budgets",
            "64MiB",
            "--tasks",
            "colmean,projection,gaussian",
        ],
    );
    for task in ["colmean", "projection", "gaussian"] {
        assert!(
            summary
                .lines()
                .any(|l| l.starts_with(task) && l.contains("64MiB") && l.ends_with("equal")),
            "{task} at 64MiB: {summary}"
        );
    }
    assert!(!summary.contains("affine16"), "--tasks ignored: {summary}");
    assert!(summary.contains("limit write of a new file"), "{summary}");
}
