//! The `tilestream` binary driven as a user would: outputs checked against independent
//! computations, memory measured on the child process, errors checked for message and
//! exit code (and for never being a panic).

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::float_cmp,
    clippy::zombie_processes,
    clippy::items_after_statements
)]

#[path = "it/common/mod.rs"]
mod common;
#[path = "it/common/peak.rs"]
mod peak;

use std::path::Path;

use common::{bin, ok, read_npy_data, run, write_npy};
use tilestream::DType;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs the binary and returns (exit code, stderr, peak RSS in bytes of that child alone).
fn run_measured(args: &[&str]) -> (i32, String, u64) {
    let m = peak::measure(args, std::time::Duration::from_secs(300));
    (m.code.unwrap_or(-1), m.stderr, m.rss)
}

/// Asserts a failed run: exit code, a message fragment, one line, no panic.
fn fails(args: &[&str], code: i32, fragment: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: stderr {err}");
    assert!(
        err.contains(fragment),
        "{args:?}: expected '{fragment}' in: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(
        err.starts_with("tilestream: error:") || code == 2,
        "{args:?}: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: error is not one line: {err}"
    );
}

#[test]
fn peak_memory_of_200mb_runs_stays_within_budget() {
    const BUDGET: u64 = 16 << 20;
    const OVERHEAD: u64 = 48 << 20;
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    // 100000 x 500 f32 = 200 MB
    let (code, err, gen_rss) =
        run_measured(&["gen", p(&x), "--shape", "100000x500", "--memory", "16MiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::metadata(&x).unwrap().len() > 200_000_000);
    let m = dir.path().join("m.npy");
    let (code, err, red_rss) = run_measured(&[
        "reduce",
        p(&x),
        p(&m),
        "--op",
        "std",
        "--axis",
        "0",
        "--memory",
        "16MiB",
    ]);
    assert_eq!(code, 0, "{err}");
    let y = dir.path().join("y.npy");
    let (code, err, aff_rss) = run_measured(&[
        "affine",
        p(&x),
        p(&y),
        "--scale",
        "2",
        "--offset",
        "1",
        "--dtype",
        "f16",
        "--memory",
        "16MiB",
    ]);
    assert_eq!(code, 0, "{err}");
    let z = dir.path().join("z.npy");
    let (code, err, map_rss) = run_measured(&[
        "map",
        "where(x > 0, sqrt(x), x * x) + x / 3",
        p(&z),
        "--in",
        &format!("x={}", p(&x)),
        "--in",
        &format!("u={}", p(&y)),
        "--dtype",
        "bf16",
        "--memory",
        "16MiB",
    ]);
    assert_eq!(code, 0, "{err}");
    let c = dir.path().join("c.npy");
    let (code, err, cast_rss) =
        run_measured(&["cast", p(&x), p(&c), "--dtype", "i16", "--memory", "16MiB"]);
    assert_eq!(code, 0, "{err}");
    let w = dir.path().join("w.npy");
    write_npy(
        &w,
        DType::F32,
        &[500, 16],
        bytemuck::cast_slice(&vec![0.5f32; 8000]),
    );
    let mm = dir.path().join("mm.npy");
    let (code, err, mm_rss) = run_measured(&["matmul", p(&x), p(&w), p(&mm), "--memory", "16MiB"]);
    assert_eq!(code, 0, "{err}");
    let st = dir.path().join("st.npy");
    let (code, err, st_rss) = run_measured(&[
        "standardize",
        p(&x),
        p(&st),
        "--dtype",
        "f16",
        "--stats",
        p(&dir.path().join("st.npz")),
        "--memory",
        "16MiB",
    ]);
    assert_eq!(code, 0, "{err}");
    for (what, rss) in [
        ("gen", gen_rss),
        ("reduce", red_rss),
        ("affine", aff_rss),
        ("map", map_rss),
        ("cast", cast_rss),
        ("matmul", mm_rss),
        ("standardize", st_rss),
    ] {
        eprintln!(
            "{what}: peak RSS {} MiB (budget 16 MiB + 48 MiB overhead allowed)",
            rss >> 20
        );
        assert!(
            rss <= BUDGET + OVERHEAD,
            "{what}: peak RSS {rss} exceeds 16 MiB + 48 MiB"
        );
    }
    // the std of column j of gen's N(j/100, 1) data is about 1
    let s: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&m));
    assert_eq!(s.len(), 500);
    assert!(s.iter().all(|v| (v - 1.0).abs() < 0.02), "{:?}", &s[..5]);
}

#[test]
fn gen_is_identical_whatever_the_budget_and_threads() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.npy");
    let b = dir.path().join("b.raw");
    ok(&[
        "gen",
        p(&a),
        "--shape",
        "3001x37",
        "--dtype",
        "f64",
        "--seed",
        "9",
        "--memory",
        "1GiB",
    ]);
    // a tiny budget: hundreds of tiles cutting the random streams' chunks anywhere
    ok(&[
        "gen",
        p(&b),
        "--shape",
        "3001x37",
        "--dtype",
        "f64",
        "--seed",
        "9",
        "--memory",
        "40KiB",
        "--threads",
        "1",
    ]);
    let da = read_npy_data(&a);
    assert_eq!(da, std::fs::read(&b).unwrap());
    let v: Vec<f64> = bytemuck::pod_collect_to_vec(&da);
    // every row written: no run of zeros anywhere, and N(col/100, 1) statistics
    assert!(v.chunks(37).all(|row| row.iter().any(|&x| x != 0.0)));
    let mean36 = v.iter().skip(36).step_by(37).sum::<f64>() / 3001.0;
    assert!((mean36 - 0.36).abs() < 0.1, "{mean36}");
    // another seed differs
    let c = dir.path().join("c.npy");
    ok(&[
        "gen",
        p(&c),
        "--shape",
        "3001x37",
        "--dtype",
        "f64",
        "--seed",
        "10",
    ]);
    assert_ne!(read_npy_data(&c), da);
}

#[test]
fn gen_draws_normal_and_uniform_matrices_the_same_at_any_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
    let args = |out: &Path, budget: &'static str| {
        vec![
            "gen".to_string(),
            p(out).to_string(),
            "--shape".into(),
            "3001x37".into(),
            "--dtype".into(),
            "f64".into(),
            "--dist".into(),
            "uniform".into(),
            "--low".into(),
            "-2".into(),
            "--high".into(),
            "3".into(),
            "--memory".into(),
            budget.into(),
        ]
    };
    let run_with = |v: Vec<String>| ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let report = run_with(args(&a, "1GiB"));
    assert!(report.contains("uniform [-2, 3)"), "{report}");
    run_with(args(&b, "40KiB"));
    let (da, db) = (read_npy_data(&a), read_npy_data(&b));
    assert_eq!(da, db);
    let u: Vec<f64> = bytemuck::pod_collect_to_vec(&da);
    assert!(u.iter().all(|x| (-2.0..3.0).contains(x)));
    let mean = u.iter().sum::<f64>() / u.len() as f64;
    assert!((mean - 0.5).abs() < 0.03, "{mean}");
    let n = dir.path().join("n.npy");
    ok(&[
        "gen",
        p(&n),
        "--shape",
        "100000",
        "--dtype",
        "f64",
        "--dist",
        "normal",
        "--mean",
        "-5",
        "--std",
        "0.5",
        "--seed",
        "4",
    ]);
    let v: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&n));
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    assert!(
        (mean + 5.0).abs() < 0.01 && (sd - 0.5).abs() < 0.01,
        "{mean} {sd}"
    );
    fails(
        &[
            "gen",
            p(&n),
            "--shape",
            "10",
            "--dist",
            "uniform",
            "--std",
            "2",
        ],
        2,
        "another distribution",
    );
}

#[test]
fn affine_matches_elementwise_oracle_and_casts() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let vals: Vec<f32> = (0..50_000)
        .map(|i| (i as f32 - 25_000.0) * 0.013)
        .chain([f32::NAN, f32::INFINITY])
        .collect();
    write_npy(&x, DType::F32, &[50_002], bytemuck::cast_slice(&vals));
    for (dtype, budget) in [
        ("f16", "48KiB"),
        ("i16", "1MiB"),
        ("u8", "64KiB"),
        ("f64", "1GiB"),
    ] {
        let y = dir.path().join(format!("y_{dtype}.npy"));
        ok(&[
            "affine",
            p(&x),
            p(&y),
            "--scale",
            "-2",
            "--offset",
            "1.5",
            "--dtype",
            dtype,
            "--memory",
            budget,
        ]);
        let data = read_npy_data(&y);
        for (i, &v) in vals.iter().enumerate() {
            let want = -2.0 * f64::from(v) + 1.5;
            let got = tilestream::dispatch_dtype!(dtype.parse::<DType>().unwrap(), T => {
                let t: T = bytemuck::pod_read_unaligned(&data[i * std::mem::size_of::<T>()..(i + 1) * std::mem::size_of::<T>()]);
                tilestream::Element::to_f64(t)
            }, complex => unreachable!("the tests give real dtypes here"));
            let expect = match dtype {
                "f16" => f64::from(half::f16::from_f64(want)),
                // integers: toward zero, saturating, NaN -> 0
                "i16" => {
                    if want.is_nan() {
                        0.0
                    } else {
                        want.trunc().clamp(-32768.0, 32767.0)
                    }
                }
                "u8" => {
                    if want.is_nan() {
                        0.0
                    } else {
                        want.trunc().clamp(0.0, 255.0)
                    }
                }
                _ => want,
            };
            assert!(
                got == expect || got.is_nan() && expect.is_nan(),
                "{dtype} element {i}: {got} vs {expect}"
            );
        }
    }
}

#[test]
fn reduce_cli_writes_npy_and_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let vals: Vec<i32> = (0..1200).collect();
    write_npy(&x, DType::I32, &[40, 30], bytemuck::cast_slice(&vals));
    let s = dir.path().join("s.npy");
    let out = ok(&[
        "reduce",
        p(&x),
        p(&s),
        "--op",
        "sum",
        "--axis",
        "1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["tiles"], 1);
    assert_eq!(v["output_shape"], serde_json::json!([40]));
    for k in [
        "bytes_read",
        "wall_s",
        "gb_per_s",
        "read_busy_s",
        "compute_busy_s",
        "write_busy_s",
        "peak_reserved_bytes",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let sums: Vec<i64> = bytemuck::pod_collect_to_vec(&read_npy_data(&s));
    let want: Vec<i64> = (0..40)
        .map(|r| (0..30).map(|c| i64::from(r * 30 + c)).sum())
        .collect();
    assert_eq!(sums, want);
    // over all elements -> a 0-d array
    let t = dir.path().join("t.npy");
    ok(&["reduce", p(&x), p(&t), "--op", "max"]);
    let head = std::fs::read(&t).unwrap();
    assert!(String::from_utf8_lossy(&head[..128]).contains("'shape': ()"));
    assert_eq!(
        bytemuck::pod_read_unaligned::<i32>(&read_npy_data(&t)),
        1199
    );
    // raw input and a cast result
    let raw = dir.path().join("x.bin");
    std::fs::write(&raw, bytemuck::cast_slice(&vals)).unwrap();
    let m = dir.path().join("m.npy");
    ok(&[
        "reduce",
        p(&raw),
        p(&m),
        "--op",
        "mean",
        "--axis",
        "0",
        "--shape",
        "40x30",
        "--in-dtype",
        "i32",
        "--dtype",
        "f32",
    ]);
    let means: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&m));
    assert_eq!(means[0], 585.0);
}

#[test]
fn plan_prints_tiles_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    write_npy(&x, DType::F32, &[100_000, 10], &vec![0u8; 4_000_000]);
    let out = ok(&[
        "plan",
        "reduce",
        p(&x),
        "m.npy",
        "--op",
        "mean",
        "--axis",
        "0",
        "--memory",
        "1MiB",
    ]);
    for k in [
        "tiles:",
        "halo:",
        "per stage:",
        "reserved:",
        "of 1.0 MiB budget",
    ] {
        assert!(out.contains(k), "missing {k} in {out}");
    }
    let out = ok(&[
        "plan",
        "affine",
        p(&x),
        "y.npy",
        "--dtype",
        "f16",
        "--memory",
        "1MiB",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["tiles"].as_u64().unwrap() > 10);
    assert!(v["reserved_bytes"].as_u64().unwrap() <= 1 << 20);
    assert!(!Path::new("y.npy").exists(), "plan must not write anything");
}

#[test]
fn errors_are_one_line_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    let good = d("good.npy");
    write_npy(&good, DType::F32, &[1000, 100], &vec![0u8; 400_000]);
    let out = d("out.npy");

    // budget too small: usage error with the arithmetic and the smallest budget
    fails(
        &[
            "reduce",
            p(&good),
            p(&out),
            "--op",
            "mean",
            "--axis",
            "0",
            "--memory",
            "10KiB",
        ],
        2,
        "the smallest budget that works is",
    );
    fails(
        &["reduce", p(&good), p(&out), "--memory", "lots"],
        2,
        "cannot parse memory size 'lots'",
    );
    fails(
        &["reduce", p(&good), p(&out), "--axis", "2"],
        2,
        "axis 2 is out of range for a tensor of rank 2",
    );
    fails(
        &["reduce", p(&good), p(&out), "--op", "mode"],
        2,
        "unknown reduction 'mode'",
    );
    fails(
        &["reduce", p(&good), p(&out), "--op", "quantile"],
        2,
        "quantile needs q",
    );
    fails(
        &["reduce", p(&good), p(&out), "--op", "sum", "--q", "0.5"],
        2,
        "q and method are for quantile",
    );
    fails(
        &["affine", p(&good), p(&out), "--dtype", "f8"],
        2,
        "unknown dtype 'f8'",
    );
    fails(&["affine", p(&good), p(&good)], 2, "is also an input");
    fails(
        &["reduce", p(&good), p(&out), "--threads", "0"],
        2,
        "--threads must be at least 1",
    );

    // truncated data
    let t = d("trunc.npy");
    let mut b = std::fs::read(&good).unwrap();
    b.truncate(b.len() - 3);
    std::fs::write(&t, &b).unwrap();
    fails(
        &["reduce", p(&t), p(&out)],
        1,
        "file is truncated: header says 1000x100 f32 = 400000 bytes of data, file holds 399997",
    );
    // header that lies about the shape (claims more data than there is)
    let l = d("lies.npy");
    let mut b = tilestream::format::npy::build_header(DType::F64, &[1000, 100]);
    b.extend_from_slice(&vec![0u8; 400_000]);
    std::fs::write(&l, &b).unwrap();
    fails(&["reduce", p(&l), p(&out)], 1, "file is truncated");
    // not a npy file, a garbled header, unsupported layouts
    let g = d("garbage.npy");
    std::fs::write(&g, b"hello world, not numpy at all").unwrap();
    fails(&["info", p(&g)], 1, "missing the \\x93NUMPY magic");
    let mk = |name: &str, dict: &str| {
        let path = d(name);
        let mut h = b"\x93NUMPY\x01\x00".to_vec();
        h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        h.extend_from_slice(dict.as_bytes());
        h.extend_from_slice(&[0u8; 48]);
        std::fs::write(&path, h).unwrap();
        path
    };
    // Fortran order and big-endian elements are read (tests/it/npy_orders.rs checks the
    // values); datetimes are refused, naming the dtype
    for (name, dict, order) in [
        (
            "f.npy",
            "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
            "Fortran order",
        ),
        (
            "be.npy",
            "{'descr': '>f4', 'fortran_order': False, 'shape': (12,), }",
            "big-endian",
        ),
    ] {
        let o = bin().args(["info", p(&mk(name, dict))]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && text.contains(order), "{name}: {text}");
    }
    fails(
        &[
            "info",
            p(&mk(
                "m.npy",
                "{'descr': '<M8', 'fortran_order': False, 'shape': (6,), }",
            )),
        ],
        1,
        "dtype '<M8' is not supported",
    );
    fails(
        &[
            "info",
            p(&mk(
                "o.npy",
                "{'descr': '|O', 'fortran_order': False, 'shape': (6,), }",
            )),
        ],
        1,
        "object dtype",
    );
    fails(
        &[
            "info",
            p(&mk(
                "bad.npy",
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }",
            )),
        ],
        1,
        "malformed .npy header",
    );
    fails(
        &[
            "info",
            p(&mk(
                "huge.npy",
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
            )),
        ],
        1,
        "overflows",
    );
    // raw size mismatch, missing file, missing output directory, a directory as input
    let raw = d("x.raw");
    std::fs::write(&raw, vec![0u8; 1000]).unwrap();
    fails(
        &[
            "reduce",
            p(&raw),
            p(&out),
            "--shape",
            "10x10",
            "--in-dtype",
            "f32",
        ],
        1,
        "size mismatch: --shape 10x10 --in-dtype f32 needs 400 bytes, file holds 1000",
    );
    fails(
        &["reduce", p(&raw), p(&out), "--shape", "10x25"],
        2,
        "needs both --shape and --in-dtype",
    );
    fails(
        &["reduce", p(&raw), p(&out)],
        2,
        "not a .npy, TIFF, JPEG 2000, HDF5, NetCDF or Zarr v3 file",
    );
    fails(&["reduce", p(&d("missing.npy")), p(&out)], 1, "cannot open");
    fails(
        &["affine", p(&good), p(&d("no/such/dir/y.npy"))],
        1,
        "cannot create a temporary output file in",
    );
    // zero-sized dimension
    let z = d("z.npy");
    write_npy(&z, DType::F32, &[0, 5], &[]);
    fails(
        &["reduce", p(&z), p(&out), "--op", "mean"],
        2,
        "cannot reduce an empty tensor",
    );
    // a bad command line is clap's usage error, exit 2
    assert_eq!(run(&["reduce"]).status.code(), Some(2));
    // nothing was left behind at the output path, and no temporary files
    assert!(!out.exists());
    let stray: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tilestream-tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn help_carries_examples() {
    let out = ok(&["--help"]);
    assert!(out.contains("Examples:") && out.contains("--memory"));
    for sub in ["reduce", "affine", "gen", "info", "plan"] {
        let h = ok(&[sub, "--help"]);
        assert!(h.contains("Example"), "{sub} --help has no example");
        // the shared GeoTIFF/Zarr output options under a heading of their own, after
        // the command's own options
        let heading = h.find("Output formats (GeoTIFF, Zarr):");
        let (own, tiff) = (h.find("--memory"), h.find("--tiff-compress"));
        assert!(
            heading.is_some() && own < heading && heading < tiff,
            "{sub}: {h}"
        );
    }
}

#[test]
fn runs_under_an_address_space_limit_smaller_than_the_file() {
    // A 1.5 GB (sparse) file under `ulimit -v 512MiB`: mapping it whole would fail.
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("big.npy");
    let shape = [375_000usize, 1024];
    let header = tilestream::format::npy::build_header(DType::F32, &shape);
    let f = std::fs::File::create(&x).unwrap();
    use std::io::Write;
    (&f).write_all(&header).unwrap();
    f.set_len(header.len() as u64 + 375_000 * 1024 * 4).unwrap();
    let m = dir.path().join("m.npy");
    // glibc reserves 64 MiB of address space for each thread's malloc arena (up to 8
    // per core), and how many threads get one depends on their timing: a CI run on a
    // loaded machine failed once with ENOMEM mapping a window (not reproduced alone, 12
    // runs at once all passed). Two arenas keep the test about tilestream's own
    // mappings.
    let script = format!(
        "ulimit -v 524288 && MALLOC_ARENA_MAX=2 exec '{}' reduce '{}' '{}' --op max --axis 0 --memory 64MiB",
        env!("CARGO_BIN_EXE_tilestream"),
        p(&x),
        p(&m)
    );
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&m));
    assert_eq!(v, vec![0.0; 1024]);
}

#[test]
fn peak_memory_of_imagery_runs_stays_within_budget() {
    const BUDGET: u64 = 16 << 20;
    const OVERHEAD: u64 = 48 << 20;
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("img.npy");
    // 1500 x 20000 f32 = 120 MB, 7.5x the budget; a full-width block of rows with the
    // gaussian's 16-row halo does not fit in 16 MiB, so the filters tile in 2-D.
    let (code, err, _) =
        run_measured(&["gen", p(&x), "--shape", "1500x20000", "--memory", "16MiB"]);
    assert_eq!(code, 0, "{err}");
    let mut runs = Vec::new();
    for (name, filter) in [
        ("gaussian", "gaussian:sigma=2"),
        ("median", "median:size=3"),
    ] {
        let y = dir.path().join(format!("{name}.npy"));
        let (code, err, rss) = run_measured(&[
            "stencil",
            p(&x),
            p(&y),
            "--filter",
            filter,
            "--memory",
            "16MiB",
        ]);
        assert_eq!(code, 0, "{err}");
        std::fs::remove_file(&y).unwrap();
        runs.push((name, rss));
    }
    let plan = ok(&[
        "plan",
        "stencil",
        p(&x),
        "y.npy",
        "--filter",
        "gaussian:sigma=2",
        "--memory",
        "16MiB",
        "--json",
    ]);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(plan["full_width"], false, "{plan}");
    let t = dir.path().join("t.npy");
    let (code, err, rss) = run_measured(&["transpose", p(&x), p(&t), "--memory", "16MiB"]);
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(&t).unwrap();
    runs.push(("transpose", rss));
    let patches = dir.path().join("patches");
    let (code, err, rss) = run_measured(&[
        "tiles",
        p(&x),
        p(&patches),
        "--size",
        "512",
        "--overlap",
        "32",
        "--memory",
        "16MiB",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(patches.join("index.csv").exists());
    runs.push(("tiles", rss));
    for (what, rss) in runs {
        eprintln!(
            "{what}: peak RSS {} MiB (budget 16 MiB + 48 MiB allowed)",
            rss >> 20
        );
        assert!(
            rss <= BUDGET + OVERHEAD,
            "{what}: peak RSS {rss} exceeds 16 MiB + 48 MiB"
        );
    }
}

#[test]
fn progress_is_off_when_piped_and_on_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "3000x500", "--memory", "4MiB"]);
    let y = dir.path().join("y.npy");
    // stderr is a pipe here: the default (auto) draws nothing
    let o = run(&["affine", p(&x), p(&y), "--scale", "2", "--memory", "4MiB"]);
    assert!(o.status.success());
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // always: plain progress lines, the last one at the last tile
    let o = run(&[
        "affine",
        p(&x),
        p(&y),
        "--memory",
        "4MiB",
        "--progress",
        "always",
    ]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("tilestream: "), "{err}");
    let (done, total) = last["tilestream: ".len()..]
        .split_once(" tiles")
        .and_then(|(t, _)| t.split_once('/'))
        .unwrap();
    assert_eq!(done, total, "{err}");
    assert!(total.parse::<usize>().unwrap() > 1, "{err}");
    assert!(
        last.contains("GB/s") && last.contains("of 4.0 MiB"),
        "{err}"
    );
    let o = run(&["affine", p(&x), p(&y), "--progress", "sometimes"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn rust_log_turns_on_logging() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "3000x50", "--memory", "1MiB"]);
    let o = common::bin()
        .args([
            "cast",
            p(&x),
            p(&dir.path().join("y.npy")),
            "--dtype",
            "f16",
            "--memory",
            "1MiB",
        ])
        .env("RUST_LOG", "tilestream=debug")
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("pipeline start") && err.contains("pipeline done"),
        "{err}"
    );
    assert!(err.contains("computed") && err.contains("written"), "{err}");
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err}");
}

/// Files in `dir` other than `keep`.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

/// Asserts that an interrupted run left its temporary output and its journal in `dir`,
/// and that `clean` removes both.
fn temp_and_journal_left_then_cleaned(dir: &Path) {
    let left = leftovers(dir, &[]);
    assert!(
        left.len() == 2 && left.iter().all(|n| n.ends_with(".tilestream-tmp")),
        "{left:?}"
    );
    let out = ok(&["clean", p(dir)]);
    assert!(out.contains("2 left-over"), "{out}");
    assert!(leftovers(dir, &[]).is_empty());
}

#[test]
fn ctrl_c_stops_cleanly_and_kill_leftovers_are_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.npy");
    let args = [
        "gen",
        p(&big),
        "--shape",
        "20000x20000",
        "--memory",
        "16MiB",
    ];
    // SIGINT: stops after the tile in flight, exit 130, the output not written; the
    // temporary output and the journal stay for --resume (tests/it/resume.rs), `clean`
    // removes them
    let child = common::bin()
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    // SAFETY: signalling our own child process.
    // SAFETY: kill takes plain integers; the pid is our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted after") && err.contains("not written"),
        "{err}"
    );
    assert!(!big.exists());
    temp_and_journal_left_then_cleaned(dir.path());

    // SIGKILL: the temporary file and the journal stay; `clean` removes them
    let mut child = common::bin().args(args).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    temp_and_journal_left_then_cleaned(dir.path());

    // ...and so does the next run of the same output
    let mut child = common::bin().args(args).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    ok(&["gen", p(&big), "--shape", "100x100"]);
    assert_eq!(leftovers(dir.path(), &["big.npy"]), Vec::<String>::new());
}

#[test]
fn file_size_limit_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npy");
    // ulimit -f counts 1024-byte blocks in bash/dash: 1 MiB, for an 8 MB output
    let script = format!(
        "ulimit -f 1024 && exec '{}' gen '{}' --shape 2000x1000 --memory 4MiB",
        env!("CARGO_BIN_EXE_tilestream"),
        p(&out)
    );
    let o = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("out.npy") && err.contains("File too large"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        leftovers(dir.path(), &[]).is_empty(),
        "{:?}",
        leftovers(dir.path(), &[])
    );
}

#[test]
fn a_100000_square_image_at_64mib_tiles_in_two_dimensions() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img.raw");
    // 40 GB, sparse: only planned here, never read
    std::fs::File::create(&img)
        .unwrap()
        .set_len(100_000 * 100_000 * 4)
        .unwrap();
    let plan = ok(&[
        "plan",
        "stencil",
        p(&img),
        "o.npy",
        "--filter",
        "gaussian:sigma=2",
        "--shape",
        "100000x100000",
        "--in-dtype",
        "f32",
        "--memory",
        "64MiB",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(v["full_width"], false, "{v}");
    assert_eq!(v["halo"], serde_json::json!([16, 16]), "{v}");
    let (th, tw) = (
        v["tile_shape"][0].as_u64().unwrap(),
        v["tile_shape"][1].as_u64().unwrap(),
    );
    assert!(th >= 256 && (256..100_000).contains(&tw), "{v}");
    assert!(v["reserved_bytes"].as_u64().unwrap() <= 64 << 20, "{v}");
}

#[test]
fn hostile_inputs_fail_cleanly_and_leave_outputs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    let good = d("good.npy");
    write_npy(&good, DType::F32, &[100, 10], &vec![0u8; 4000]);
    let out = d("out.npy");

    // absurd shapes: byte counts that overflow, in a header and on the command line
    let huge = d("huge.npy");
    let text = "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&u16::try_from(text.len() + 1).unwrap().to_le_bytes());
    b.extend_from_slice(text.as_bytes());
    b.push(b'\n');
    std::fs::write(&huge, &b).unwrap();
    fails(
        &["reduce", p(&huge), p(&out)],
        1,
        "shape 4294967296x4294967296 overflows a 64-bit element count",
    );
    let raw = d("x.raw");
    std::fs::write(&raw, [0u8; 16]).unwrap();
    fails(
        &[
            "reduce",
            p(&raw),
            p(&out),
            "--shape",
            "99999999999x99999999999",
            "--in-dtype",
            "f32",
        ],
        1,
        "overflows a 64-bit element count",
    );

    // zero-sized dimensions: elementwise and layout operations give empty outputs of
    // the right shape; reductions refuse
    let z = d("z.npy");
    write_npy(&z, DType::F32, &[0, 5], &[]);
    for (args, shape) in [
        (vec!["map", "x*2", p(&out), "--in"], "0x5"),
        (vec!["cast", p(&z), p(&out), "--dtype", "f16"], "0x5"),
        (vec!["transpose", p(&z), p(&out)], "5x0"),
        (
            vec!["stencil", p(&z), p(&out), "--filter", "median:size=3"],
            "0x5",
        ),
    ] {
        let zin = format!("x={}", p(&z));
        let mut a = args.clone();
        if a[0] == "map" {
            a.push(&zin);
        }
        ok(&a);
        let info = ok(&["info", p(&out), "--json"]);
        assert!(
            info.contains(&format!("\"shape\":[{}]", shape.replace('x', ","))),
            "{a:?}: {info}"
        );
        std::fs::remove_file(&out).unwrap();
    }
    fails(
        &["standardize", p(&z), p(&out)],
        2,
        "cannot reduce an empty tensor",
    );

    // unreadable input; output directory read-only (as root, permissions do not
    // apply: a path through a file and the read-only /sys stand in for them)
    // SAFETY: geteuid has no preconditions.
    // SAFETY: geteuid takes nothing and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        let through = format!("{}/x.npy", p(&good));
        fails(&["reduce", &through, p(&out)], 1, "Not a directory");
        if std::fs::write("/sys/tilestream-probe", b"x").is_err() {
            fails(
                &["affine", p(&good), "/sys/out.npy"],
                1,
                "cannot create a temporary output file in /sys",
            );
        }
    } else {
        use std::os::unix::fs::PermissionsExt;
        let locked = d("locked.npy");
        std::fs::copy(&good, &locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        fails(&["reduce", p(&locked), p(&out)], 1, "Permission denied");
        let ro = d("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        fails(
            &["affine", p(&good), p(&ro.join("y.npy"))],
            1,
            "Permission denied",
        );
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    // an existing output is replaced only on success, and never when it is an input
    std::fs::write(&out, b"keep me").unwrap();
    fails(
        &["affine", p(&good), p(&out), "--memory", "1KiB"],
        2,
        "the smallest budget that works is",
    );
    fails(&["affine", p(&good), p(&good)], 2, "is also an input");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    assert_eq!(read_npy_data(&good), vec![0u8; 4000]);
    ok(&["affine", p(&good), p(&out), "--offset", "1"]);
    assert_eq!(read_npy_data(&out).len(), 4000);
}

#[test]
fn an_input_truncated_mid_run_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img.npy");
    ok(&["gen", p(&img), "--shape", "2000x2000"]);
    let out = dir.path().join("out.npy");
    let journal = dir.path().join(".out.npy.journal.tilestream-tmp");
    let mut child = bin()
        .args([
            "stencil",
            p(&img),
            p(&out),
            "--filter",
            "median:size=7",
            "--memory",
            "1MiB",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // wait until the first tile is written, then cut the input short
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\ntile 0 0 ")) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended too soon"
        );
        assert!(t0.elapsed().as_secs() < 60);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(128 + 4000)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("changed size while in use"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

/// `tilestream devices` says why there is no GPU in the command line's words: flags
/// (`--device cpu`), never the library's argument names (`device=cpu`), with and
/// without the `cuda` feature.
#[test]
fn devices_name_the_command_lines_flags() {
    for args in [&["devices"][..], &["devices", "--json"][..]] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(!out.contains("device="), "{args:?}: {out}");
        // where there is no GPU (CI, or a build without CUDA), the advice is a flag
        if out.contains("no CUDA driver") || out.contains("without CUDA support") {
            assert!(out.contains("--device cpu"), "{args:?}: {out}");
        }
    }
}
