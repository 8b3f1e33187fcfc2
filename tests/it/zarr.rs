//! Zarr v3 in and out, checked against zarr-python: zarr-python writes stores (zstd, gzip,
//! blosc, sharding, no compression; bool, integers, floats) and numpy the same data as
//! `.npy`; tilestream must read each store exactly as numpy has it, and zarr-python must
//! read the stores tilestream writes exactly as the `.npy` they came from.
//!
//! Needs a Python with zarr (v3) and numpy: `TILESTREAM_PYTHON` (`.ci/run` installs zarr
//! in its virtual environment). Without it the test reports itself skipped on stderr;
//! under CI (`CI` set) that is a failure.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::ffi::OsString;
use std::process::Command;

use crate::common::{read_npy_data, run};

fn python() -> Option<OsString> {
    let p = std::env::var_os("TILESTREAM_PYTHON");
    if p.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set TILESTREAM_PYTHON to a Python with numpy and zarr"
        );
        eprintln!("SKIPPED: TILESTREAM_PYTHON is not set (a Python with numpy and zarr)");
    }
    p
}

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zarr_check.py");

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "tilestream {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn py(python: &OsString, args: &[&str]) -> String {
    let out = Command::new(python)
        .arg(SCRIPT)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zarr_check.py {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with numpy and zarr (.ci/run does) to run this cross-check"
)]
fn reads_zarr_python_stores_and_writes_stores_zarr_python_reads() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let names = py(&python, &["write", d]);
    let names: Vec<&str> = names.split_whitespace().collect();
    assert!(names.len() >= 17, "cases: {names:?}");
    for name in &names {
        let store = format!("{d}/{name}.zarr");
        let oracle = format!("{d}/{name}.npy");
        // read: zarr -> npy under a small budget (many tiles, chunks shared between tiles)
        let got = format!("{d}/{name}.got.npy");
        ok(&["convert", &store, &got, "-m", "1MiB", "--progress", "never"]);
        assert!(
            read_npy_data(got.as_ref()) == read_npy_data(oracle.as_ref()),
            "tilestream read {name} differently from zarr-python"
        );
        let info = ok(&["info", &store, "--json"]);
        let j: serde_json::Value = serde_json::from_str(info.trim()).unwrap();
        assert_eq!(j["format"], "zarr v3");
        // write: npy -> zarr, with several chunkings and codecs, read back by zarr-python
        let rank = j["shape"].as_array().unwrap().len();
        let shapes = |e: usize| vec![e.to_string(); rank].join("x");
        let (c, s) = (shapes(8), shapes(16));
        let variants: Vec<Vec<&str>> = vec![
            vec![],
            vec!["--zarr-compress", "gzip:3", "--zarr-chunks", &c],
            vec!["--zarr-compress", "blosc", "--zarr-chunks", &c],
            vec![
                "--zarr-compress",
                "none",
                "--zarr-chunks",
                &c,
                "--zarr-shard",
                &s,
            ],
        ];
        for (i, extra) in variants.iter().enumerate() {
            let out = format!("{d}/{name}.out{i}.zarr");
            let mut args = vec![
                "convert",
                &oracle,
                &out,
                "-m",
                "1MiB",
                "--progress",
                "never",
            ];
            args.extend(extra);
            ok(&args);
            let report = py(&python, &["check", &out, &oracle]);
            let r: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
            if extra.contains(&"--zarr-shard") {
                assert_eq!(
                    r["shards"],
                    serde_json::json!(vec![16; rank]),
                    "{name} {extra:?}"
                );
                assert_eq!(
                    r["chunks"],
                    serde_json::json!(vec![8; rank]),
                    "{name} {extra:?}"
                );
            } else if !extra.is_empty() {
                assert_eq!(
                    r["chunks"],
                    serde_json::json!(vec![8; rank]),
                    "{name} {extra:?}"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with numpy and zarr (.ci/run does) to run this cross-check"
)]
fn zarr_stores_feed_any_command_and_replace_only_zarr_stores() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    py(&python, &["write", d]);
    // a reduction straight from a sharded store equals the one from its .npy
    let a = format!("{d}/a.npy");
    let b = format!("{d}/b.npy");
    ok(&[
        "reduce",
        &format!("{d}/sharded_f64.zarr"),
        &a,
        "--op",
        "sum",
        "--axis",
        "0",
        "-m",
        "1MiB",
    ]);
    ok(&[
        "reduce",
        &format!("{d}/sharded_f64.npy"),
        &b,
        "--op",
        "sum",
        "--axis",
        "0",
    ]);
    assert!(read_npy_data(a.as_ref()) == read_npy_data(b.as_ref()));
    // a gaussian of a blosc store equals the one of its .npy
    let g1 = format!("{d}/g1.npy");
    let g2 = format!("{d}/g2.npy");
    ok(&[
        "stencil",
        &format!("{d}/blosc_u16.zarr"),
        &g1,
        "--filter",
        "gaussian:sigma=1.5",
        "-m",
        "2MiB",
    ]);
    ok(&[
        "stencil",
        &format!("{d}/blosc_u16.npy"),
        &g2,
        "--filter",
        "gaussian:sigma=1.5",
    ]);
    assert!(read_npy_data(g1.as_ref()) == read_npy_data(g2.as_ref()));
    // writing over an existing store replaces it; over a directory that is not one, refuses
    let out = format!("{d}/zstd_f32.zarr");
    ok(&[
        "affine",
        &format!("{d}/zstd_f32.npy"),
        &format!("{d}/x2.npy"),
        "--scale",
        "2",
    ]);
    ok(&["convert", &format!("{d}/x2.npy"), &out]);
    py(&python, &["check", &out, &format!("{d}/x2.npy")]);
    let plain = dir.path().join("plain.zarr");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("keep.txt"), b"mine").unwrap();
    let r = run(&["convert", &format!("{d}/x2.npy"), plain.to_str().unwrap()]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a Zarr store"));
    assert_eq!(std::fs::read(plain.join("keep.txt")).unwrap(), b"mine");
    // nothing left behind beside the outputs
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("tilestream-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
