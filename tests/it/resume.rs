//! Resumable runs, driven through the binary: runs are killed (SIGKILL) at exact points
//! (fault injection: after a given tile is journaled, after the flush, after the rename,
//! after the directory sync) and at random times, then continued with `--resume`; the
//! output must be byte-identical to an uninterrupted run, with nothing left beside it.
//! Also: Ctrl-C keeps a resumable run, and a changed input, another operation or another
//! plan is refused.

#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    clippy::zombie_processes
)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{Lcg, bin, ok, read_npy_data};
use crate::npy_orders::write_stored;
use tilestream::DType;

const FAULT: &str = "TILESTREAM_FAULT_KILL_AT";

fn p(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

/// Files in `dir` other than `keep`.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    v.sort();
    v
}

fn run_env(args: &[String], fault: Option<&str>) -> Output {
    let mut c = bin();
    c.args(args);
    if let Some(f) = fault {
        c.env(FAULT, f);
    }
    c.output().unwrap()
}

/// A job of the test: its arguments with `OUT` standing for the output path, and the
/// inputs to keep when listing leftovers.
struct Job {
    name: &'static str,
    args: Vec<String>,
    /// Kill points of the passes that write (or checkpoint) tiles.
    points: Vec<String>,
}

impl Job {
    fn args(&self, out: &Path, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = self
            .args
            .iter()
            .map(|s| if s == "OUT" { p(out) } else { s.clone() })
            .collect();
        a.extend(extra.iter().map(|s| (*s).to_string()));
        a
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_string()).collect()
}

/// Inputs shared by the jobs: a 3000x64 f32 matrix, a 64x8 matrix and a 300x200 image.
fn inputs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let x = dir.join("x.npy");
    let w = dir.join("w.npy");
    let img = dir.join("img.npy");
    ok(&["gen", &p(&x), "--shape", "3000x64", "--seed", "1"]);
    ok(&["gen", &p(&w), "--shape", "64x8", "--seed", "2"]);
    ok(&["gen", &p(&img), "--shape", "300x200", "--seed", "3"]);
    // x's values in Fortran order (as `np.save(path, a.T)` writes them)
    let xf = dir.join("xf.npy");
    write_stored(
        &xf,
        DType::F32,
        &[3000, 64],
        &read_npy_data(&x),
        true,
        false,
    );
    (x, w, img)
}

fn points(passes: &[(usize, &[usize])]) -> Vec<String> {
    let mut v = Vec::new();
    for (pass, tiles) in passes {
        for t in *tiles {
            v.push(format!("written:{pass}:{t}"));
        }
    }
    v.extend(s(&["synced", "renamed", "dir-synced"]));
    v
}

fn jobs(x: &Path, w: &Path, img: &Path) -> Vec<Job> {
    let xf = p(&x.with_file_name("xf.npy"));
    let (x, w, img) = (p(x), p(w), p(img));
    vec![
        Job {
            name: "map",
            args: s(&[
                "map",
                "x*2+1",
                "OUT",
                "--in",
                &format!("x={x}"),
                "--dtype",
                "f16",
                "-m",
                "128KiB",
            ]),
            points: points(&[(0, &[0, 1, 4, 11, 32])]),
        },
        Job {
            name: "reduce std axis 0",
            args: s(&[
                "reduce", &x, "OUT", "--op", "std", "--axis", "0", "-m", "128KiB",
            ]),
            points: points(&[(0, &[0, 2, 7, 12])]),
        },
        Job {
            // eight tiles: whole columns, 8 at a time (each tile one window of the file)
            name: "reduce var axis 0 of a Fortran-order matrix (column by column)",
            args: s(&[
                "reduce", &xf, "OUT", "--op", "var", "--axis", "0", "-m", "384KiB",
            ]),
            points: points(&[(0, &[0, 2, 4])]),
        },
        Job {
            name: "reduce mean axis 1",
            args: s(&[
                "reduce", &x, "OUT", "--op", "mean", "--axis", "1", "-m", "160KiB",
            ]),
            points: points(&[(0, &[0, 3, 9])]),
        },
        Job {
            name: "standardize",
            args: s(&["standardize", &x, "OUT", "--dtype", "f16", "-m", "128KiB"]),
            points: points(&[(0, &[0, 5]), (1, &[0, 3, 8])]),
        },
        Job {
            name: "stencil (2-D tiles with halos)",
            args: s(&[
                "stencil",
                &img,
                "OUT",
                "--filter",
                "gaussian:sigma=2",
                "-m",
                "96KiB",
            ]),
            points: points(&[(0, &[0, 1, 17, 34])]),
        },
        Job {
            name: "transpose",
            args: s(&["transpose", &x, "OUT", "-m", "64KiB"]),
            points: points(&[(0, &[0, 2, 6, 115])]),
        },
        Job {
            name: "matmul",
            args: s(&["matmul", &x, &w, "OUT", "-m", "128KiB"]),
            points: points(&[(0, &[0, 3])]),
        },
        Job {
            name: "gen",
            args: s(&[
                "gen", "OUT", "--shape", "1000x50", "--seed", "9", "-m", "64KiB",
            ]),
            points: points(&[(0, &[0, 1, 5, 9])]),
        },
    ]
}

const INPUTS: [&str; 4] = ["x.npy", "w.npy", "img.npy", "xf.npy"];

#[test]
fn killed_at_every_kind_of_point_then_resumed_gives_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (x, w, img) = inputs(dir.path());
    let reference = dir.path().join("ref.npy");
    let out = dir.path().join("out.npy");
    let mut killed = 0;
    for job in jobs(&x, &w, &img) {
        let o = run_env(&job.args(&reference, &[]), None);
        assert!(
            o.status.success(),
            "{}: {}",
            job.name,
            String::from_utf8_lossy(&o.stderr)
        );
        let want = std::fs::read(&reference).unwrap();
        std::fs::remove_file(&reference).unwrap();
        for point in &job.points {
            let o = run_env(&job.args(&out, &[]), Some(point));
            assert_eq!(
                o.status.signal(),
                Some(libc::SIGKILL),
                "{} at {point}: not killed ({:?}): {}",
                job.name,
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            killed += 1;
            let left = leftovers(dir.path(), &INPUTS);
            // killed before the rename: no output, only the run's temporary files
            if !point.contains("renamed") && !point.contains("dir-synced") {
                assert!(
                    !out.exists() && !left.is_empty(),
                    "{} at {point}: {left:?}",
                    job.name
                );
                assert!(
                    left.iter().all(|n| n.ends_with(".tilestream-tmp")),
                    "{left:?}"
                );
            }
            let o = run_env(&job.args(&out, &["--resume"]), None);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                o.status.success(),
                "{} resume after {point}: {err}",
                job.name
            );
            let stdout = String::from_utf8_lossy(&o.stdout);
            if point.starts_with("written:0:") && !point.ends_with(":0") {
                assert!(
                    stdout.contains("resumed:"),
                    "{} after {point}: {stdout}",
                    job.name
                );
            }
            assert!(
                std::fs::read(&out).unwrap() == want,
                "{} resumed after {point}: output differs from an uninterrupted run",
                job.name
            );
            assert_eq!(
                leftovers(dir.path(), &INPUTS),
                vec!["out.npy".to_string()],
                "{} after {point}",
                job.name
            );
            std::fs::remove_file(&out).unwrap();
        }
    }
    assert!(killed >= 40, "{killed}");
}

#[test]
fn killed_at_random_times_then_resumed_gives_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img.npy");
    ok(&["gen", &p(&img), "--shape", "1500x1200", "--seed", "4"]);
    let out = dir.path().join("out.npy");
    let job = |extra: &[&str]| -> Vec<String> {
        let mut a = s(&[
            "stencil",
            &p(&img),
            &p(&out),
            "--filter",
            "median:size=5",
            "-m",
            "256KiB",
        ]);
        a.extend(extra.iter().map(|x| (*x).to_string()));
        a
    };
    let t0 = Instant::now();
    ok(&job(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    let full = t0.elapsed();
    let want = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();

    let mut rng = Lcg(0x5eed);
    let mut interrupted = 0;
    for round in 0..12 {
        // one to three kills (of the first run and of resumed ones), then a resume to the end
        let kills = 1 + rng.next_u64() % 3;
        for k in 0..kills {
            let extra: &[&str] = if k == 0 { &[] } else { &["--resume"] };
            let mut child = bin()
                .args(job(extra))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let frac = (rng.next_u64() % 1000) as f64 / 1000.0;
            std::thread::sleep(Duration::from_secs_f64(full.as_secs_f64() * frac));
            child.kill().unwrap();
            let status = child.wait().unwrap();
            if status.signal() == Some(libc::SIGKILL) {
                interrupted += 1;
            }
        }
        let o = bin().args(job(&["--resume"])).output().unwrap();
        assert!(
            o.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            std::fs::read(&out).unwrap() == want,
            "round {round}: resumed output differs from an uninterrupted run"
        );
        assert_eq!(
            leftovers(dir.path(), &["img.npy"]),
            vec!["out.npy".to_string()]
        );
        std::fs::remove_file(&out).unwrap();
    }
    // most kills land mid-run (some may come after a fast run has ended)
    assert!(
        interrupted >= 10,
        "only {interrupted} kills interrupted a run"
    );
}

#[test]
fn ctrl_c_keeps_a_resumable_run_and_resume_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.npy");
    let args = s(&[
        "gen",
        &p(&out),
        "--shape",
        "20000x2000",
        "--seed",
        "5",
        "-m",
        "1MiB",
    ]);
    let child = bin()
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    // SAFETY: signalling our own child process.
    // SAFETY: kill takes plain integers; the pid is our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted after") && err.contains("--resume"),
        "{err}"
    );
    let left = leftovers(dir.path(), &[]);
    assert_eq!(left.len(), 2, "{left:?}"); // the temporary output and the journal
    assert!(
        left.iter().all(|n| n.ends_with(".tilestream-tmp")),
        "{left:?}"
    );

    let mut resumed = args.clone();
    resumed.push("--resume".into());
    let o = run_env(&resumed, None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("resumed:"));
    let got = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let o = run_env(&args, None);
    assert!(o.status.success());
    assert!(
        got == std::fs::read(&out).unwrap(),
        "resumed output differs"
    );
    assert_eq!(leftovers(dir.path(), &[]), vec!["big.npy".to_string()]);
}

/// Asserts a refused resume: exit code 2, one line with `fragment`, nothing written.
fn refused(args: &[String], fragment: &str) {
    let o = run_env(args, None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(fragment), "expected '{fragment}' in: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn resume_refuses_a_changed_input_another_operation_or_another_plan() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", &p(&x), "--shape", "3000x64", "--seed", "1"]);
    let out = dir.path().join("y.npy");
    let args = |expr: &str, mem: &str| {
        s(&[
            "map",
            expr,
            &p(&out),
            "--in",
            &format!("x={}", p(&x)),
            "-m",
            mem,
            "--resume",
        ])
    };
    let o = run_env(&args("x*3", "128KiB")[..7], Some("written:0:2"));
    assert_eq!(o.status.signal(), Some(libc::SIGKILL));

    refused(
        &args("x*4", "128KiB"),
        "the interrupted run was another operation",
    );
    refused(&args("x*3", "192KiB"), "planned this pass as");
    // the journal survives refusals: the right command still resumes
    let before = std::fs::read(&x).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&x, &before).unwrap(); // same bytes, new modification time
    refused(&args("x*3", "128KiB"), "changed since the interrupted run");

    // without --resume, the run starts over and leaves nothing stale behind
    let o = run_env(&args("x*3", "128KiB")[..7], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(leftovers(dir.path(), &["x.npy"]), vec!["y.npy".to_string()]);

    // --resume with nothing to resume runs from the start
    std::fs::remove_file(&out).unwrap();
    let o = run_env(&args("x*3", "128KiB"), None);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stdout).contains("resumed:"));

    // operations that cannot resume say so
    let o = run_env(
        &s(&[
            "tiles",
            &p(&x),
            &p(&dir.path().join("t")),
            "--size",
            "8",
            "--resume",
        ]),
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not available"));
}

#[test]
fn clean_removes_what_a_killed_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", &p(&x), "--shape", "3000x64"]);
    let out = dir.path().join("s.npy");
    let args = s(&[
        "reduce",
        &p(&x),
        &p(&out),
        "--op",
        "std",
        "--axis",
        "0",
        "-m",
        "128KiB",
    ]);
    let o = run_env(&args, Some("written:0:3"));
    assert_eq!(o.status.signal(), Some(libc::SIGKILL));
    let left = leftovers(dir.path(), &["x.npy"]);
    // the journal and at least one state slot (a reduction has no temporary output yet)
    assert!(left.len() >= 2, "{left:?}");
    let o = ok(&["clean", &p(dir.path())]);
    assert!(o.contains(&format!("{} left-over", left.len())), "{o}");
    assert!(leftovers(dir.path(), &["x.npy"]).is_empty());
}

/// A `--resume` that finds the journal of another version of tilestream (version 1
/// recorded GeoTIFF strips by number) does not take its run up: it says so, starts over,
/// removes what that run left, and writes the output an uninterrupted run writes.
#[test]
fn resume_starts_over_from_another_versions_journal() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", &p(&x), "--shape", "300x1100", "--seed", "6"]);
    let out = dir.path().join("o.tif");
    let args = s(&[
        "map",
        "x*3",
        &p(&out),
        "--in",
        &format!("x={}", p(&x)),
        "-m",
        "2MiB",
        "--tiff-tile",
        "64",
        "--progress",
        "never",
    ]);
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let want = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let o = run_env(&args, Some("written:0:3"));
    assert_eq!(o.status.signal(), Some(libc::SIGKILL));
    let journal = dir.path().join(".o.tif.journal.tilestream-tmp");
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.starts_with("tilestream-journal 2"), "{text}");
    std::fs::write(&journal, text.replacen("journal 2", "journal 1", 1)).unwrap();
    let mut resumed = args.clone();
    resumed.push("--resume".into());
    let o = run_env(&resumed, None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("another version of tilestream"), "{err}");
    assert!(std::fs::read(&out).unwrap() == want);
    assert!(leftovers(dir.path(), &["x.npy", "o.tif"]).is_empty());
}
