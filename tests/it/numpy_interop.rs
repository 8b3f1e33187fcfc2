//! numpy as the oracle: numpy writes `.npy` files (header versions 1.0, 2.0, 3.0; float,
//! integer and bool dtypes), the binary reduces them, numpy checks every result.
//!
//! Needs a Python with numpy and `ml_dtypes` (for bfloat16): set `TILESTREAM_PYTHON` to it (`scripts/test` creates a virtual
//! environment and does). Without it the test reports itself skipped on stderr; under CI
//! (`CI` set) a missing numpy is a failure, so it can never silently pass there.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::process::Command;

use crate::common::ok;

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with numpy and ml_dtypes (bash scripts/test does) to run this cross-check"
)]
fn numpy_reads_and_agrees() {
    let Some(python) = std::env::var_os("TILESTREAM_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("TILESTREAM_TEST_ALL").is_none(),
            "CI and scripts/test must set TILESTREAM_PYTHON to a Python with numpy"
        );
        eprintln!("SKIPPED numpy_reads_and_agrees: TILESTREAM_PYTHON is not set");
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/numpy_check.py");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let st = Command::new(&python)
        .args([script, "write", d])
        .status()
        .unwrap();
    assert!(st.success(), "numpy could not write the inputs");
    let names = [
        "f32_v1", "f64_v2", "f16_v3", "i16_v1", "u8_v1", "bool_v1", "bf16_v1", "i64_v1",
    ];
    for name in names {
        let input = format!("{d}/{name}.npy");
        let rank = if name == "f64_v2" { 3 } else { 2 };
        for op in ["sum", "mean", "min", "max", "var", "std"] {
            for axis in [None, Some(0), Some(1), Some(2)]
                .into_iter()
                .filter(|a| a.is_none_or(|a| a < rank))
            {
                let tag = axis.map_or("all".to_string(), |a| format!("ax{a}"));
                let out = format!("{d}/{name}.{op}.{tag}.npy");
                let mut args = vec!["reduce", &input, &out, "--op", op, "--memory", "256KiB"];
                let ax;
                if let Some(a) = axis {
                    ax = a.to_string();
                    args.extend(["--axis", &ax]);
                }
                if op == "var" {
                    args.extend(["--ddof", "1"]);
                }
                ok(&args);
            }
        }
    }
    ok(&[
        "affine",
        &format!("{d}/f32_v1.npy"),
        &format!("{d}/affine.npy"),
        "--scale",
        "2",
        "--offset",
        "1",
        "--dtype",
        "f16",
        "--memory",
        "256KiB",
    ]);
    let f32in = format!("{d}/f32_v1.npy");
    ok(&[
        "standardize",
        &f32in,
        &format!("{d}/z.npy"),
        "--stats",
        &format!("{d}/stats.npz"),
        "--memory",
        "256KiB",
    ]);
    let s3 = format!("s={d}/f64_v2.npy");
    ok(&[
        "map",
        "(s[7] - s[3]) / (s[7] + s[3])",
        &format!("{d}/ndvi.npy"),
        "--in",
        &s3,
        "--memory",
        "256KiB",
    ]);
    let o = Command::new(&python)
        .args([script, "check", d])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "numpy disagrees:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
}
