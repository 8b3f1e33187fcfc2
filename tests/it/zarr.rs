//! Zarr v3 in and out, checked against zarr-python: zarr-python writes stores (zstd, gzip,
//! blosc, sharding, no compression; bool, integers, floats) and numpy the same data as
//! `.npy`; tilestream must read each store exactly as numpy has it, and zarr-python must
//! read the stores tilestream writes exactly as the `.npy` they came from.
//!
//! Needs a Python with zarr (v3) and numpy: `TILESTREAM_PYTHON` (`scripts/test` installs zarr
//! in its virtual environment). Without it the test reports itself skipped on stderr;
//! under CI (`CI` set) that is a failure.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::ffi::OsString;
use std::process::Command;

use crate::common::{read_npy_data, run};

fn python() -> Option<OsString> {
    crate::common::python("numpy and zarr")
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
    ignore = "set TILESTREAM_PYTHON to a Python with numpy and zarr (bash scripts/test does) to run this cross-check"
)]
fn reads_zarr_python_stores_and_writes_stores_zarr_python_reads() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let names = py(&python, &["write", d]);
    let names: Vec<&str> = names.split_whitespace().collect();
    assert!(names.len() >= 17, "cases: {names:?}");
    // stores written, checked by zarr-python all at once after the loop: (store, oracle,
    // rank, the options written with)
    let mut written: Vec<(String, String, usize, Vec<String>)> = Vec::new();
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
            let extra = extra.iter().map(ToString::to_string).collect();
            written.push((out, oracle.clone(), rank, extra));
        }
    }
    let mut args = vec!["check"];
    for (out, oracle, _, _) in &written {
        args.extend([out.as_str(), oracle.as_str()]);
    }
    let reports = py(&python, &args);
    let reports: Vec<&str> = reports.lines().collect();
    assert_eq!(reports.len(), written.len(), "{reports:?}");
    for ((out, _, rank, extra), report) in written.iter().zip(reports) {
        let r: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
        if extra.iter().any(|e| e == "--zarr-shard") {
            assert_eq!(r["shards"], serde_json::json!(vec![16; *rank]), "{out}");
            assert_eq!(r["chunks"], serde_json::json!(vec![8; *rank]), "{out}");
        } else if !extra.is_empty() {
            assert_eq!(r["chunks"], serde_json::json!(vec![8; *rank]), "{out}");
        }
    }
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with numpy and zarr (bash scripts/test does) to run this cross-check"
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

/// Every file under `dir` (relative path, bytes), the journal-free picture of a store.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(
        root: &std::path::Path,
        p: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for e in std::fs::read_dir(p).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// (name, is a directory, length) of the temporary outputs in `dir`, journals left out.
fn temp_outputs(dir: &std::path::Path) -> Vec<(String, bool, u64)> {
    let mut v: Vec<(String, bool, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".tilestream-tmp") && !n.contains(".journal")
        })
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.is_dir(),
                m.len(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A Zarr output of a flat run is encoded as the run writes it when a quarter of the
/// budget holds a slab of chunks: killed halfway, beside it are only the empty file that
/// names the run's output and the store being built (no raw staging file); resumed, the
/// store is file for file the one an uninterrupted run writes, the same at every budget
/// down to pieces of one chunk, with the values of the .npy; below, the run is refused.
/// Needs no Python: tilestream reads its stores back itself.
#[test]
fn zarr_outputs_stream_without_staging_and_resume_identical() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    ok(&[
        "gen",
        &p("x.npy"),
        "--shape",
        "3x300x1100",
        "--seed",
        "4",
        "--dtype",
        "f32",
    ]);
    let job = |out: &str, mem: &str| -> Vec<String> {
        [
            "map",
            "x*2+1",
            out,
            "--in",
            &format!("x={}", p("x.npy")),
            "-m",
            mem,
            "--zarr-chunks",
            "1x64x100",
            "--progress",
            "never",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect()
    };
    let run_ok = |v: &[String]| {
        ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    };
    let temps = || temp_outputs(dir.path());
    run_ok(&job(&p("want.npy"), "64MiB"));
    let want = read_npy_data(&dir.path().join("want.npy"));
    let mut stores = Vec::new();
    // streamed at 2 MiB (a slab is 64x1100 f32, 275 KiB, with chunks of 1x64x100 in
    // flight, 3 x 25 KiB: within a quarter of the budget) and at 1 MiB (within a half);
    // at 384 KiB (not even three quarters hold the 350 KiB) in boxes of whole chunks,
    // streamed too; at 256 KiB (no box of one chunk fits) in boxes that are pieces of
    // one chunk, streamed; refused at 96 KiB (the encoder alone needs 100 KiB; it was
    // staged raw before)
    for mem in ["2MiB", "1MiB", "384KiB", "256KiB"] {
        let out = dir.path().join(format!("o{mem}.zarr"));
        run_ok(&job(out.to_str().unwrap(), mem));
        let whole = tree(&out);
        assert!(whole.len() > 3 * 5 * 11, "{mem}: {} files", whole.len());
        std::fs::remove_dir_all(&out).unwrap();
        for kill in ["written:0:0", "written:0:4", "written:0:9"] {
            crate::common::kill_then_resume(&job(out.to_str().unwrap(), mem), kill, || {
                let t = temps();
                // the empty file naming the run's output, and the store being built
                assert_eq!(t.len(), 2, "{mem} {kill}: {t:?}");
                assert!(!t[0].1 && t[0].2 == 0, "{mem} {kill}: {t:?}");
                assert!(t[1].1, "{mem} {kill}: {t:?}");
            });
            assert!(
                tree(&out) == whole,
                "{mem} resumed after {kill}: the store differs"
            );
            assert!(temps().is_empty(), "{mem} {kill}: {:?}", temps());
            std::fs::remove_dir_all(&out).unwrap();
        }
        stores.push(whole);
    }
    assert!(
        stores.iter().all(|s| *s == stores[0]),
        "the stores of different budgets differ"
    );
    let small = job(&p("o96KiB.zarr"), "96KiB");
    crate::common::refused_to_stream(
        &small.iter().map(String::as_str).collect::<Vec<_>>(),
        dir.path(),
    );
    // a resume with other options stores every slab again: the store is the one an
    // uninterrupted run with those options writes (not zstd slabs under gzip metadata)
    let out = dir.path().join("opts.zarr");
    let mut gzip = job(out.to_str().unwrap(), "2MiB");
    gzip.extend(["--zarr-compress".to_string(), "gzip".to_string()]);
    run_ok(&gzip);
    let want_gzip = tree(&out);
    std::fs::remove_dir_all(&out).unwrap();
    let o = crate::common::bin()
        .args(job(out.to_str().unwrap(), "2MiB"))
        .env("TILESTREAM_FAULT_KILL_AT", "written:0:9")
        .output()
        .unwrap();
    assert!(!o.status.success());
    gzip.push("--resume".to_string());
    run_ok(&gzip);
    assert!(
        tree(&out) == want_gzip,
        "a resume with gzip kept zstd chunks"
    );
    // and the values are the map's
    let out = dir.path().join("check.zarr");
    run_ok(&job(out.to_str().unwrap(), "2MiB"));
    ok(&["convert", out.to_str().unwrap(), &p("back.npy")]);
    assert!(read_npy_data(&dir.path().join("back.npy")) == want);
}

/// Filters and transposes (box plans) encode a Zarr output as they write it too, in
/// chunks one band deep and two bands deep (of three: the bands of each box are visited
/// together): killed early, midway and late, beside the destination are only the empty
/// file naming the run's output and the store being built (no raw staging file);
/// resumed, the store is file for file the one an uninterrupted run writes, with the
/// values of the same job written as .npy.
#[test]
fn box_plan_zarr_outputs_stream_without_staging_and_resume_identical() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    ok(&[
        "gen",
        &p("x.npy"),
        "--shape",
        "3x300x1100",
        "--seed",
        "5",
        "--dtype",
        "f32",
    ]);
    let temps = || temp_outputs(dir.path());
    let x = p("x.npy");
    let median = ["--filter", "median:size=3"];
    let cases = [
        ("stencil", &median[..], "1x64x128"),
        ("transpose", &[][..], "1x64x128"),
        ("stencil", &median[..], "2x64x128"),
        ("transpose", &[][..], "2x64x128"),
    ];
    for (op, extra, chunks) in cases {
        let job = |out: &str| -> Vec<String> {
            let mut v = vec![op.to_string(), x.clone(), out.to_string()];
            v.extend(extra.iter().map(|s| (*s).to_string()));
            v.extend(
                ["-m", "4MiB", "--zarr-chunks", chunks, "--progress", "never"]
                    .iter()
                    .map(|s| (*s).to_string()),
            );
            v
        };
        let op = format!("{op} {chunks}");
        let run_ok = |v: &[String]| {
            ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
        };
        let out = dir.path().join("o.zarr");
        let (tiles, along) = crate::geotiff::box_plan_of(&job(out.to_str().unwrap()));
        assert!(along && tiles >= 6, "{op}: {tiles} tiles, along {along}");
        run_ok(&job(&p("want.npy")));
        let want = read_npy_data(&dir.path().join("want.npy"));
        run_ok(&job(out.to_str().unwrap()));
        let whole = tree(&out);
        ok(&["convert", out.to_str().unwrap(), &p("back.npy")]);
        assert!(
            read_npy_data(&dir.path().join("back.npy")) == want,
            "{op}: values"
        );
        std::fs::remove_dir_all(&out).unwrap();
        for k in [0, 2, tiles / 2, tiles - 2] {
            let kill = format!("written:0:{k}");
            crate::common::kill_then_resume(&job(out.to_str().unwrap()), &kill, || {
                let t = temps();
                assert_eq!(t.len(), 2, "{op} {kill}: {t:?}");
                assert!(!t[0].1 && t[0].2 == 0, "{op} {kill}: {t:?}");
                assert!(t[1].1, "{op} {kill}: {t:?}");
            });
            assert!(
                tree(&out) == whole,
                "{op} resumed after {kill}: the store differs"
            );
            assert!(temps().is_empty(), "{op} {kill}: {:?}", temps());
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}
