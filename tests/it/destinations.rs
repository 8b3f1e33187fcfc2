//! Never touch what is not yours: the destination policy (every path a run writes is
//! checked before anything is written: never a device, FIFO, any file the run reads, or
//! two writes to one path), ownership before deletion (`tiles` removes only the patches
//! its own index lists, `clean` only what is provably tilestream's), and the atomic
//! replacement of a Zarr store (a kill at any instant leaves the old store or the new
//! one, whole). Each case is made from a reproduction that lost a user's data.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::common::{bin, bounded, ok};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Every entry under `dir` (recursively, links not followed) with what it holds: a
/// file's bytes, a link's target, or the kind of a special file.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(rel, b"dir".to_vec());
                walk(root, &path, out);
            } else if t.is_file() {
                out.insert(rel, std::fs::read(&path).unwrap());
            } else if t.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, target.to_string_lossy().as_bytes().to_vec());
            } else {
                out.insert(rel, format!("{t:?}").into_bytes());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Runs `args` in `dir`, killed after 20 s (a FIFO that blocked would hang the test).
fn run_in(dir: &Path, args: &[String]) -> Output {
    let mut c = bin();
    c.args(args).current_dir(dir);
    bounded(c)
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(p(path)).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A character device (the null device's numbers) when run as root; false otherwise.
fn mknod_null(path: &Path) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    let c = std::ffi::CString::new(p(path)).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) };
    assert_eq!(made, 0, "root could not make a device node");
    true
}

/// The files every command below reads, in `dir`.
fn inputs(dir: &Path) {
    let t = |args: &[&str]| {
        let o = bin().current_dir(dir).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    t(&["gen", "x.npy", "--shape", "40x6", "--seed", "1"]);
    t(&["gen", "w.npy", "--shape", "6x3", "--seed", "2"]);
    t(&["gen", "img.npy", "--shape", "30x20", "--seed", "3"]);
    t(&["gen", "k.npy", "--shape", "3x3", "--seed", "4"]);
    std::fs::write(
        dir.join("pipe.toml"),
        "[inputs]\nx = \"x.npy\"\nunused = \"w.npy\"\n\n[[step]]\nop = \"map\"\nexpr = \"x * 2\"\nout = \"y\"\n\n[outputs]\ny = \"OUT\"\n",
    )
    .unwrap();
}

/// Each command with `OUT` where its output goes and the files it reads; the second
/// list names the inputs other than the main operand.
fn commands() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    vec![
        (
            vec!["reduce", "x.npy", "OUT", "--op", "sum", "--axis", "0"],
            vec!["x.npy"],
        ),
        (
            vec!["map", "a + b", "OUT", "--in", "a=x.npy", "--in", "b=x.npy"],
            vec!["x.npy"],
        ),
        (
            vec!["cast", "x.npy", "OUT", "--dtype", "f16"],
            vec!["x.npy"],
        ),
        (vec!["convert", "x.npy", "OUT"], vec!["x.npy"]),
        (
            vec!["affine", "x.npy", "OUT", "--scale", "2"],
            vec!["x.npy"],
        ),
        (
            vec!["matmul", "x.npy", "w.npy", "OUT"],
            vec!["x.npy", "w.npy"],
        ),
        (vec!["transpose", "x.npy", "OUT"], vec!["x.npy"]),
        (vec!["standardize", "x.npy", "OUT"], vec!["x.npy"]),
        (
            vec!["standardize", "x.npy", "z.npy", "--stats", "OUT"],
            vec!["x.npy"],
        ),
        (
            vec!["stencil", "img.npy", "OUT", "--filter", "convolve:k.npy"],
            vec!["img.npy", "k.npy"],
        ),
        (
            vec!["run", "pipe.toml"],
            vec!["x.npy", "w.npy", "pipe.toml"],
        ),
    ]
}

#[test]
fn no_path_a_run_writes_is_a_device_a_fifo_an_input_or_another_output() {
    let mut cases = 0;
    for (args, reads) in commands() {
        // the bad places an output can be: an input (by its name, a hard link to it, a
        // symbolic link to it, named as each output kind), a FIFO (named as a file and as a
        // Zarr store), a device, and the run's other output
        let mut bad: Vec<&str> = reads.clone();
        bad.extend([
            "hard.npy",
            "link.npy",
            "link.tif",
            "link.zarr",
            "fifo",
            "fifo.zarr",
            "dev",
        ]);
        if args.contains(&"--stats") {
            bad.push("z.npy");
        }
        for target in bad {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            inputs(d);
            std::fs::hard_link(d.join(reads[0]), d.join("hard.npy")).unwrap();
            for link in ["link.npy", "link.tif", "link.zarr"] {
                std::os::unix::fs::symlink(d.join(reads[0]), d.join(link)).unwrap();
            }
            mkfifo(&d.join("fifo"));
            mkfifo(&d.join("fifo.zarr"));
            if target == "dev" && !mknod_null(&d.join("dev")) {
                // not root: a device cannot be made here; the FIFO stands for it
                continue;
            }
            let mut argv: Vec<String> = args
                .iter()
                .map(|a| {
                    if *a == "OUT" {
                        target.to_string()
                    } else {
                        (*a).to_string()
                    }
                })
                .collect();
            if args[0] == "run" {
                let toml = std::fs::read_to_string(d.join("pipe.toml")).unwrap();
                std::fs::write(d.join("pipe.toml"), toml.replace("OUT", target)).unwrap();
                argv = vec!["run".into(), "pipe.toml".into()];
            }
            argv.extend(["--progress".into(), "never".into()]);
            let before = snapshot(d);
            let out = run_in(d, &argv);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(1 | 2)),
                "{argv:?} into {target}: not refused ({:?}): {err}",
                out.status
            );
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "{argv:?}: not one line: {err}"
            );
            assert_eq!(
                snapshot(d),
                before,
                "{argv:?} into {target}: the directory changed"
            );
            cases += 1;
        }
    }
    // 93 places in all; the 11 device nodes only where they can be made (as root)
    // SAFETY: geteuid has no preconditions.
    let want = if unsafe { libc::geteuid() } == 0 {
        93
    } else {
        82
    };
    assert_eq!(cases, want, "cases run");
}

#[test]
fn standardize_stats_are_written_only_with_the_output() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "4000x64",
        "--seed",
        "1",
    ]);
    // the output fails part-way (files past 64 KiB are refused, as `ulimit -f 128` does;
    // the statistics take 2 KiB): no statistics are left behind
    let mut c = bin();
    c.current_dir(d).args([
        "standardize",
        "x.npy",
        "z.npy",
        "--stats",
        "st.npz",
        "--progress",
        "never",
    ]);
    // SAFETY: the closure only calls async-signal-safe functions (signal, setrlimit).
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64 << 10,
                rlim_max: 64 << 10,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output().unwrap();
    assert!(!out.status.success(), "the run did not fail");
    assert!(!d.join("z.npy").exists());
    assert!(
        !d.join("st.npz").exists(),
        "the statistics outlived a failed run"
    );
    // a run that succeeds writes both
    let out = run_in(
        d,
        &["standardize", "x.npy", "z.npy", "--stats", "st.npz"].map(String::from),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.join("st.npz").is_file() && d.join("z.npy").is_file());
}

#[test]
fn tiles_removes_only_the_patches_its_own_index_lists() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    inputs(d);
    // a dataset folder with the user's own index.csv: nothing in it is removed
    let ds = d.join("ds");
    std::fs::create_dir(&ds).unwrap();
    std::fs::write(ds.join("sample1.npy"), b"one").unwrap();
    std::fs::write(ds.join("sample2.npy"), b"two").unwrap();
    std::fs::write(
        ds.join("index.csv"),
        "name,label\nsample1.npy,0\nsample2.npy,1\n",
    )
    .unwrap();
    let before = snapshot(d);
    let out = run_in(
        d,
        &["tiles", "img.npy", "ds", "--size", "8"].map(String::from),
    );
    assert!(matches!(out.status.code(), Some(1 | 2)), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
    assert_eq!(snapshot(d), before, "a user's files were touched");
    // an index in tilestream's form that lists the run's own input
    let ds2 = d.join("ds2");
    std::fs::create_dir(&ds2).unwrap();
    std::fs::copy(d.join("img.npy"), ds2.join("scene.npy")).unwrap();
    std::fs::write(
        ds2.join("index.csv"),
        "file,row,col,height,width\nscene.npy,0,0,8,8\n",
    )
    .unwrap();
    let before = snapshot(d);
    let out = run_in(
        d,
        &["tiles", "ds2/scene.npy", "ds2", "--size", "8"].map(String::from),
    );
    assert!(matches!(out.status.code(), Some(1 | 2)), "{out:?}");
    assert_eq!(snapshot(d), before, "the input was touched");
    // tilestream's own earlier patches are replaced
    ok(&[
        "tiles",
        p(&d.join("img.npy")),
        p(&d.join("ds3")),
        "--size",
        "8",
    ]);
    ok(&[
        "tiles",
        p(&d.join("img.npy")),
        p(&d.join("ds3")),
        "--size",
        "10",
    ]);
    let index = std::fs::read_to_string(d.join("ds3/index.csv")).unwrap();
    let listed = index.lines().count() - 1;
    assert_eq!(
        std::fs::read_dir(d.join("ds3")).unwrap().count(),
        listed + 1
    );
    // an earlier index larger than a quarter of --memory is refused before it is read
    // (it and the names it lists are held before the run reserves anything)
    let ds4 = d.join("ds4");
    std::fs::create_dir(&ds4).unwrap();
    let mut big = String::from("file,row,col,height,width\n");
    for k in 0..30_000 {
        big.push_str(&format!("img_r{k}_c0.npy,{k},0,8,8\n"));
    }
    std::fs::write(ds4.join("index.csv"), &big).unwrap();
    let before = snapshot(d);
    let out = run_in(
        d,
        &["tiles", "img.npy", "ds4", "--size", "8", "--memory", "2MiB"].map(String::from),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(1 | 2)), "{out:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("quarter of --memory"), "{err}");
    assert_eq!(snapshot(d), before, "files were touched");
}

#[test]
fn clean_and_runs_remove_only_what_is_provably_tilestreams() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    inputs(d);
    // a user's directory and files that merely end in .tilestream-tmp
    std::fs::create_dir_all(d.join("backup.tilestream-tmp/sub")).unwrap();
    std::fs::write(d.join("backup.tilestream-tmp/sub/thesis.docx"), b"years").unwrap();
    std::fs::write(d.join("notes.tilestream-tmp"), b"mine").unwrap();
    // tilestream's names with content that is not tilestream's
    std::fs::write(d.join(".data.journal.tilestream-tmp"), b"not a journal").unwrap();
    std::fs::create_dir_all(d.join(".data.Ab12Cd.tilestream-tmp/photos")).unwrap();
    std::fs::write(d.join(".data.Ab12Cd.tilestream-tmp/photos/a.jpg"), b"jpg").unwrap();
    std::fs::create_dir(d.join(".tilestream-pipeline-Xy12Zq")).unwrap();
    std::fs::write(d.join(".tilestream-pipeline-Xy12Zq/report.pdf"), b"pdf").unwrap();
    // an interrupted run's journal and temporary file of a.npy: a plain run of output
    // `a` (a prefix of its name) must leave them for a.npy's --resume
    std::fs::write(
        d.join(".a.npy.journal.tilestream-tmp"),
        b"tilestream-journal 2\n",
    )
    .unwrap();
    std::fs::write(d.join(".a.npy.Qw12Er.tilestream-tmp"), b"tiles").unwrap();
    let before = snapshot(d);
    ok(&[
        "convert",
        p(&d.join("x.npy")),
        p(&d.join("a")),
        "--format",
        "raw",
    ]);
    let mut after = snapshot(d);
    assert!(after.remove(Path::new("a")).is_some());
    assert_eq!(after, before, "a run of `a` removed what was not its own");
    // clean removes the stale journal and temporary file, and nothing of the user's
    ok(&["clean", p(d)]);
    let mut want = before.clone();
    want.remove(Path::new(".a.npy.journal.tilestream-tmp"));
    want.remove(Path::new(".a.npy.Qw12Er.tilestream-tmp"));
    let mut after = snapshot(d);
    after.remove(Path::new("a"));
    assert_eq!(
        after, want,
        "clean removed a user's file or left tilestream's"
    );
}

/// The values of a `.npy` or Zarr store as tilestream reads them, through a `.npy` copy.
fn values(d: &Path, src: &Path) -> Option<Vec<u8>> {
    let out = d.join("check.npy");
    let _ = std::fs::remove_file(&out);
    let o = Command::new(env!("CARGO_BIN_EXE_tilestream"))
        .args(["convert", p(src), p(&out), "--progress", "never"])
        .output()
        .unwrap();
    o.status.success().then(|| std::fs::read(&out).unwrap())
}

#[test]
fn a_zarr_store_replaced_and_killed_at_any_instant_is_the_old_or_the_new_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t = |args: &[&str]| {
        let o = bin().current_dir(d).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    t(&["gen", "old.npy", "--shape", "480x400", "--seed", "1"]);
    t(&["gen", "new.npy", "--shape", "480x400", "--seed", "2"]);
    let store = d.join("s.zarr");
    // small chunks: 750 files, so removing a store takes a while
    let convert = |from: &str| {
        let mut c = bin();
        c.current_dir(d).args([
            "convert",
            from,
            "s.zarr",
            "--zarr-chunks",
            "16x16",
            "--zarr-compress",
            "none",
            "--progress",
            "never",
        ]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    assert!(convert("old.npy").status().unwrap().success());
    let (old, new) = (
        values(d, &d.join("old.npy")).unwrap(),
        values(d, &d.join("new.npy")).unwrap(),
    );
    // how long a replacement takes, uninterrupted
    let start = Instant::now();
    assert!(convert("new.npy").status().unwrap().success());
    let whole = start.elapsed();
    assert_eq!(values(d, &store).unwrap(), new);
    let mut seen = (0, 0);
    for k in 0..12u32 {
        // back to the old store, then a replacement killed: the first six once the new
        // store being written beside the old one holds 100, 200, .. 600 of its 750 chunks
        // (before the exchange, whatever the machine's load), the others from half-way
        // through to a little past the run's uninterrupted time, around the exchange
        assert!(
            convert("old.npy").status().unwrap().success(),
            "kill {k}: restoring"
        );
        let mut child = convert("new.npy").spawn().unwrap();
        if k < 6 {
            let goal = 100 * (k as usize + 1);
            while staged_chunks(d) < goal && child.try_wait().unwrap().is_none() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        } else {
            std::thread::sleep(whole * (k + 2) / 16);
        }
        let _ = child.kill();
        let _ = child.wait();
        let got = values(d, &store).unwrap_or_else(|| {
            panic!(
                "kill {k}: the store cannot be read; beside it: {:?}",
                std::fs::read_dir(d)
                    .map(|r| r.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            )
        });
        if got == old {
            seen.0 += 1;
        } else if got == new {
            seen.1 += 1;
        } else {
            panic!("kill {k}: the store is neither the old nor the new one");
        }
        // what the killed run left is removed by clean, and the store stays whole
        ok(&["clean", p(d)]);
        assert!(values(d, &store).is_some_and(|v| v == old || v == new));
    }
    // killed at the exact points of the replacement: the new store is in place, whole,
    // and is replaced again
    for point in ["replace-exchanged", "replace-unlocked"] {
        assert!(convert("old.npy").status().unwrap().success());
        let killed = convert("new.npy")
            .env("TILESTREAM_FAULT_KILL_AT", point)
            .status()
            .unwrap();
        assert!(!killed.success(), "{point}: not killed");
        assert_eq!(values(d, &store).unwrap(), new, "{point}");
        assert!(convert("old.npy").status().unwrap().success(), "{point}");
        assert_eq!(values(d, &store).unwrap(), old, "{point}");
    }
    eprintln!(
        "killed replacements: {} left the old store, {} the new",
        seen.0, seen.1
    );
    assert!(seen.0 > 0, "no kill landed before the replacement");
}

/// How many files the Zarr stores being written in `d` (tilestream's temporary
/// directories) hold so far.
fn staged_chunks(d: &Path) -> usize {
    fn files(dir: &Path) -> usize {
        std::fs::read_dir(dir).map_or(0, |r| {
            r.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => files(&e.path()),
                    Ok(_) => 1,
                    Err(_) => 0,
                })
                .sum()
        })
    }
    std::fs::read_dir(d).map_or(0, |r| {
        r.flatten()
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(".s.zarr.")
                    && name.ends_with(".tilestream-tmp")
                    && !name.contains("journal")
            })
            .map(|e| files(&e.path()))
            .sum()
    })
}

#[test]
fn a_resumed_reduction_never_blocks_on_or_reads_without_end_a_planted_state_slot() {
    for plant in ["fifo", "zero"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        ok(&[
            "gen",
            p(&d.join("x.npy")),
            "--shape",
            "3000x64",
            "--seed",
            "1",
        ]);
        let args: Vec<String> = [
            "reduce",
            "x.npy",
            "s.npy",
            "--op",
            "std",
            "--axis",
            "0",
            "-m",
            "128KiB",
            "--progress",
            "never",
        ]
        .map(String::from)
        .to_vec();
        let killed = bin()
            .current_dir(d)
            .args(&args)
            .env("TILESTREAM_FAULT_KILL_AT", "written:0:3")
            .output()
            .unwrap();
        assert!(!killed.status.success(), "the run was to be killed");
        // both state slots replaced by a FIFO, or by links to an endless device
        for slot in ["a", "b"] {
            let path = d.join(format!(".s.npy.state-{slot}.tilestream-tmp"));
            let _ = std::fs::remove_file(&path);
            if plant == "fifo" {
                mkfifo(&path);
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            }
        }
        let mut resumed = args.clone();
        resumed.push("--resume".into());
        // bounded: run_in panics if it blocks. The planted slot is refused in one line
        // (it is tilestream's name, and not its file), or the pass starts over and gives
        // what an uninterrupted run gives
        let out = run_in(d, &resumed);
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            ok(&[
                "reduce",
                p(&d.join("x.npy")),
                p(&d.join("t.npy")),
                "--op",
                "std",
                "--axis",
                "0",
            ]);
            assert_eq!(
                std::fs::read(d.join("s.npy")).unwrap(),
                std::fs::read(d.join("t.npy")).unwrap(),
                "{plant}"
            );
        } else {
            assert!(matches!(out.status.code(), Some(1 | 2)), "{plant}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{plant}: {err}");
            assert!(err.contains("state-"), "{plant}: {err}");
        }
    }
}

#[test]
fn a_cast_into_a_type_that_changes_the_nodata_value_follows_maps_rule() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "20x30",
        "--seed",
        "1",
    ]);
    let info = |f: &str| ok(&["info", p(&d.join(f))]);
    // what a plain cast makes of the values, read through a .npy
    let values = |f: &str| {
        ok(&["convert", p(&d.join(f)), p(&d.join("v.npy"))]);
        crate::common::read_npy_data(&d.join("v.npy"))
    };
    for (nodata, to, expect) in [
        ("-9999", "f16", "masked"), // -10000 in f16
        ("70000", "f16", "masked"), // inf
        ("1e-40", "f32", "masked"), // 0 in f32 (the source is f64)
        ("nan", "u8", "refused"),
        ("-9999", "u8", "refused"),
        ("-9999", "f32", "kept"),
        ("-9999", "i16", "kept"),
        ("nan", "f64", "kept"),
    ] {
        // a source whose pixels above 0.5 are nodata
        let src = d.join("src.tif");
        let _ = std::fs::remove_file(&src);
        ok(&[
            "map",
            &format!("where(x > 0.5, {nodata}, x)"),
            p(&src),
            "--in",
            &format!("x={}", p(&d.join("x.npy"))),
            "--dtype",
            "f64",
            "--nodata",
            nodata,
        ]);
        let plain = {
            ok(&["cast", p(&src), p(&d.join("plain.npy")), "--dtype", to]);
            crate::common::read_npy_data(&d.join("plain.npy"))
        };
        let src_values = values("src.tif");
        for cmd in ["cast", "convert"] {
            let _ = std::fs::remove_file(d.join("out.tif"));
            let o = run_in(
                d,
                &[
                    cmd,
                    "src.tif",
                    "out.tif",
                    "--dtype",
                    to,
                    "--progress",
                    "never",
                ]
                .map(String::from),
            );
            let err = String::from_utf8_lossy(&o.stderr);
            let what = format!("{cmd} nodata {nodata} -> {to}");
            match expect {
                "refused" => {
                    assert_eq!(o.status.code(), Some(2), "{what}: {err}");
                    assert!(err.contains("not exactly representable"), "{err}");
                    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
                    assert!(!d.join("out.tif").exists());
                }
                "kept" => {
                    assert!(o.status.success(), "{what}: {err}");
                    assert!(
                        info("out.tif").contains(&format!("nodata:      {nodata}")),
                        "{what}"
                    );
                    assert_eq!(values("out.tif"), plain, "{what}");
                }
                _ => {
                    // as map does: NaN where the source is nodata, tagged NaN; every
                    // other pixel the plain cast's
                    assert!(o.status.success(), "{what}: {err}");
                    assert!(info("out.tif").contains("nodata:      nan"), "{what}");
                    let got = values("out.tif");
                    let es = got.len() * 8 / src_values.len();
                    let mut masked = 0;
                    for (k, sv) in src_values.chunks_exact(8).enumerate() {
                        let v = f64::from_le_bytes(sv.try_into().unwrap());
                        let g = &got[k * es..(k + 1) * es];
                        let is_nan = match es {
                            2 => half::f16::from_le_bytes([g[0], g[1]]).is_nan(),
                            _ => f32::from_le_bytes(g.try_into().unwrap()).is_nan(),
                        };
                        #[allow(clippy::float_cmp)] // a nodata pixel holds the value exactly
                        if v == nodata.parse::<f64>().unwrap() {
                            assert!(is_nan, "{what}: pixel {k} is not NaN");
                            masked += 1;
                        } else {
                            assert_eq!(g, &plain[k * es..(k + 1) * es], "{what}: pixel {k}");
                        }
                    }
                    assert!(masked > 100, "{what}: only {masked} nodata pixels");
                }
            }
        }
        // a .npy carries no nodata value: the cast is what it says
        let o = run_in(
            d,
            &["cast", "src.tif", "out.npy", "--dtype", to].map(String::from),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn gen_writes_no_file_that_cannot_be_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let shape = vec!["1"; 65].join("x");
    let out = run_in(
        dir.path(),
        &["gen", "g.npy", "--shape", &shape].map(String::from),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 64"));
    assert!(!dir.path().join("g.npy").exists());
    let shape = vec!["1"; 64].join("x");
    ok(&["gen", p(&dir.path().join("g.npy")), "--shape", &shape]);
    ok(&["info", p(&dir.path().join("g.npy"))]);
}

#[test]
fn a_nodata_tag_gdal_reads_by_prefix_is_refused_not_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "20x30",
        "--seed",
        "1",
    ]);
    ok(&[
        "map",
        "x",
        p(&d.join("a.tif")),
        "--in",
        &format!("x={}", p(&d.join("x.npy"))),
        "--dtype",
        "f32",
        "--nodata",
        "4321",
    ]);
    let bytes = std::fs::read(d.join("a.tif")).unwrap();
    let at: Vec<usize> = bytes
        .windows(5)
        .enumerate()
        .filter(|(_, w)| w == b"4321\0")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the tag's text is not found once");
    // texts GDAL reads by prefix: 0x10 as 16, "5\n6" as 5, junk as 0
    for text in [b"0x10", b"5\n6 ", b"junk"] {
        let mut b = bytes.clone();
        b[at[0]..at[0] + 4].copy_from_slice(text);
        std::fs::write(d.join("b.tif"), &b).unwrap();
        let out = run_in(
            d,
            &["reduce", "b.tif", "s.npy", "--op", "sum"].map(String::from),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("GDAL_NODATA"), "{err}");
    }
    // a plain number with white space around it is read
    let mut b = bytes.clone();
    b[at[0]..at[0] + 4].copy_from_slice(b" 16 ");
    std::fs::write(d.join("c.tif"), &b).unwrap();
    ok(&[
        "reduce",
        p(&d.join("c.tif")),
        p(&d.join("s.npy")),
        "--op",
        "sum",
    ]);
}

#[test]
fn names_with_line_breaks_give_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    inputs(d);
    std::fs::write(d.join("bad\nname.npy"), b"not a npy").unwrap();
    for args in [
        vec!["reduce", "no\nsuch.npy", "o.npy"],
        vec!["reduce", "bad\nname.npy", "o.npy"],
        vec!["reduce", "x.npy", "no\rdir/o.npy"],
        vec!["map", "a +\n)", "o.npy", "--in", "a=x.npy"],
        vec![
            "stencil",
            "img.npy",
            "o.npy",
            "--filter",
            "convolve:k\n.npy",
        ],
        vec!["tiles", "img.npy", "x.npy/p\nq", "--size", "8"],
    ] {
        let out = run_in(
            d,
            &args.iter().map(|a| (*a).to_string()).collect::<Vec<_>>(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn outputs_with_the_longest_names_a_file_system_takes_are_written_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "3000x64",
        "--seed",
        "1",
    ]);
    let x = p(&d.join("x.npy")).to_string();
    for ext in ["npy", "tif", "zarr"] {
        // 255 bytes, the most a name may have (with multi-byte characters near the cut)
        let stem = format!(
            "{}é{}",
            "a".repeat(178),
            "b".repeat(255 - 180 - ext.len() - 1)
        );
        let name = format!("{stem}.{ext}");
        assert_eq!(name.len(), 255);
        ok(&["convert", &x, p(&d.join(&name))]);
        ok(&["convert", &x, p(&d.join(&name))]); // replacing it
    }
    // a killed run of such a name resumes to the bytes of an uninterrupted one
    let name = format!("{}.npy", "r".repeat(251));
    let args = [
        "map",
        "x*2",
        &name,
        "--in",
        "x=x.npy",
        "-m",
        "128KiB",
        "--progress",
        "never",
    ];
    let killed = bin()
        .current_dir(d)
        .args(args)
        .env("TILESTREAM_FAULT_KILL_AT", "written:0:3")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "the run was to be killed");
    let mut resume = args.to_vec();
    resume.push("--resume");
    let out = bin().current_dir(d).args(&resume).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("resumed")
            || String::from_utf8_lossy(&out.stderr).contains("resum"),
        "nothing was resumed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    ok(&[
        "map",
        "x*2",
        p(&d.join("whole.npy")),
        "--in",
        &format!("x={x}"),
    ]);
    assert_eq!(
        std::fs::read(d.join(&name)).unwrap(),
        std::fs::read(d.join("whole.npy")).unwrap()
    );
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tilestream-tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn paths_that_are_not_utf8_are_read_written_and_resumed() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&[
        "gen",
        p(&d.join("x.npy")),
        "--shape",
        "20000x64",
        "--seed",
        "1",
    ]);
    let input = OsStr::from_bytes(b"in\xff.npy");
    let out = OsStr::from_bytes(b"out\xfe.npy");
    std::fs::copy(d.join("x.npy"), d.join(input)).unwrap();
    let run = |extra: &[&str], kill: bool| {
        let mut c = bin();
        c.current_dir(d)
            .arg("reduce")
            .arg(input)
            .arg(out)
            .args([
                "--op",
                "std",
                "--axis",
                "0",
                "-m",
                "256KiB",
                "--progress",
                "never",
            ])
            .args(extra);
        if kill {
            c.env("TILESTREAM_FAULT_KILL_AT", "written:0:3");
        }
        c.output().unwrap()
    };
    assert!(!run(&[], true).status.success(), "the run was to be killed");
    let o = run(&["--resume"], false);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(&[
        "reduce",
        p(&d.join("x.npy")),
        p(&d.join("t.npy")),
        "--op",
        "std",
        "--axis",
        "0",
    ]);
    assert_eq!(
        std::fs::read(d.join(out)).unwrap(),
        std::fs::read(d.join("t.npy")).unwrap()
    );
    // map's named inputs take such paths too: --in NAME=PATH with PATH any bytes
    let mut arg = std::ffi::OsString::from("a=");
    arg.push(input);
    let o = bin()
        .current_dir(d)
        .args(["map", "a * 2", "m.npy", "--progress", "never"])
        .arg("--in")
        .arg(&arg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(&[
        "map",
        "a * 2",
        p(&d.join("m2.npy")),
        "--in",
        &format!("a={}", p(&d.join("x.npy"))),
    ]);
    assert_eq!(
        std::fs::read(d.join("m.npy")).unwrap(),
        std::fs::read(d.join("m2.npy")).unwrap()
    );
    // a name that is not UTF-8, or no '=', is refused in one line
    for bad in [
        OsStr::from_bytes(b"\xff=x.npy"),
        OsStr::from_bytes(b"x.npy"),
    ] {
        let o = bin()
            .current_dir(d)
            .args(["map", "a * 2", "m3.npy", "--in"])
            .arg(bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("expected NAME=FILE"), "{err}");
    }
}

#[test]
fn a_geotiff_of_many_one_pixel_bands_is_tiled_to_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 60000 bands of 1x1: each band one 16x16 tile, not 512x512 of padding (60 GB of
    // zeros to compress: 70000 such bands took 220 s)
    ok(&[
        "gen",
        p(&d.join("g.tif")),
        "--shape",
        "60000x1x1",
        "--seed",
        "1",
    ]);
    let size = std::fs::metadata(d.join("g.tif")).unwrap().len();
    assert!(size < 64 << 20, "{size} bytes for 60000 pixels");
    ok(&["convert", p(&d.join("g.tif")), p(&d.join("g.npy"))]);
    ok(&[
        "gen",
        p(&d.join("w.npy")),
        "--shape",
        "60000x1x1",
        "--seed",
        "1",
    ]);
    assert_eq!(
        std::fs::read(d.join("g.npy")).unwrap(),
        std::fs::read(d.join("w.npy")).unwrap()
    );
    // more bands than a TIFF's 16-bit SamplesPerPixel holds: refused, nothing written
    let out = run_in(
        d,
        &["gen", "h.tif", "--shape", "70000x1x1"].map(String::from),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 65535 bands"));
    assert!(!d.join("h.tif").exists());
}
