//! Nothing outside a run's own output is ever written because a file on disk said so:
//! planted or edited journals, links under tilestream's temporary names, pipeline step
//! names that are paths, special files and foreign directories as destinations, FIFOs
//! where inputs are expected. Each case ends with one line and exit 1 or 2, in bounded
//! time, with the file it aimed at untouched.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{bin, bounded, ok};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Asserts a refusal: exit 1 or 2, one line on stderr containing `word`.
fn refused(out: &Output, word: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "expected a refusal, got {:?}: {err}",
        out.status
    );
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(
        err.contains(word),
        "the message does not say `{word}`: {err}"
    );
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(p(path)).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn seal(text: &str) -> String {
    format!("{text} *{:08x}\n", crc32fast::hash(text.as_bytes()))
}

/// A killed `map` run leaves its journal and temporary output beside `out`; returns the
/// journal's path.
fn interrupted_run(dir: &Path, out: &Path) -> PathBuf {
    let x = dir.join("x.npy");
    ok(&["gen", p(&x), "--shape", "2000x64", "--seed", "1"]);
    let r = bin()
        .args(["map", "x*2", p(out), "--in"])
        .arg(format!("x={}", p(&x)))
        .args(["-m", "128KiB", "--progress", "never"])
        .env("TILESTREAM_FAULT_KILL_AT", "written:0:3")
        .output()
        .unwrap();
    assert!(!r.status.success(), "the run was to be killed");
    let name = out.file_name().unwrap().to_string_lossy();
    let journal = dir.join(format!(".{name}.journal.tilestream-tmp"));
    assert!(journal.exists(), "no journal left");
    journal
}

fn resume(dir: &Path, out: &Path) -> Output {
    let x = dir.join("x.npy");
    let mut c = bin();
    c.args(["map", "x*2", p(out), "--in"])
        .arg(format!("x={}", p(&x)))
        .args(["-m", "128KiB", "--progress", "never", "--resume"]);
    bounded(c)
}

/// The journal's text with its `out` record replaced by `out NAME` (sealed with a valid
/// checksum, as an attacker would).
fn plant_out(journal: &Path, name: &str) {
    let text = std::fs::read_to_string(journal).unwrap();
    let planted: String = text
        .lines()
        .map(|l| {
            if l.starts_with("out ") {
                seal(&format!("out {name}"))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(planted.contains(&format!("out {name}")));
    std::fs::write(journal, planted).unwrap();
}

#[test]
fn an_edited_journal_cannot_point_a_resumed_run_at_another_file() {
    for target in ["../victim.npy", "/tmp/../VICTIM", "victim.npy"] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join("y.npy");
        let journal = interrupted_run(&dir, &out);
        let victim = if target.starts_with('/') {
            root.path().join("VICTIM")
        } else if target.starts_with("..") {
            root.path().join("victim.npy")
        } else {
            dir.join("victim.npy")
        };
        // a file of exactly the size and header the run's temporary output has, so that
        // nothing but the name check stands between it and the resumed run
        let x = dir.join("x.npy");
        ok(&["map", "x*3", p(&victim), "--in", &format!("x={}", p(&x))]);
        let precious = std::fs::read(&victim).unwrap();
        let name = if target.starts_with('/') {
            p(&victim).to_string()
        } else {
            target.to_string()
        };
        plant_out(&journal, &name);
        refused(&resume(&dir, &out), "journal");
        assert!(std::fs::read(&victim).unwrap() == precious, "{target}");
        assert!(!out.exists());
    }
}

#[test]
fn links_under_tilestreams_own_names_are_never_written_through() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let victim = root.path().join("victim.npy");
    let mut precious = Vec::new();
    // a well-formed temporary name that is a symbolic link, then a hard link, to the
    // victim: the resumed run must not write into it
    for (i, hard) in [false, true].into_iter().enumerate() {
        let out = dir.join(format!("y{i}.npy"));
        let journal = interrupted_run(&dir, &out);
        if precious.is_empty() {
            let x = dir.join("x.npy");
            ok(&["map", "x*3", p(&victim), "--in", &format!("x={}", p(&x))]);
            precious = std::fs::read(&victim).unwrap();
        }
        let planted = format!(".y{i}.npy.AbC123.tilestream-tmp");
        if hard {
            std::fs::hard_link(&victim, dir.join(&planted)).unwrap();
        } else {
            std::os::unix::fs::symlink(&victim, dir.join(&planted)).unwrap();
        }
        plant_out(&journal, &planted);
        // the link is not taken up: the run starts its output afresh (or refuses)
        let r = resume(&dir, &out);
        assert!(std::fs::read(&victim).unwrap() == precious, "hard: {hard}");
        if r.status.success() {
            assert!(out.is_file());
        }
        let _ = std::fs::remove_file(dir.join(&planted));
    }
    // the journal path itself as a link to the victim: a new run does not truncate it
    let out = dir.join("z.npy");
    std::os::unix::fs::symlink(&victim, dir.join(".z.npy.journal.tilestream-tmp")).unwrap();
    let x = dir.join("x.npy");
    let mut c = bin();
    c.args(["map", "x+1", p(&out), "--in"])
        .arg(format!("x={}", p(&x)))
        .args(["--resume", "--progress", "never"]);
    let r = bounded(c);
    assert!(!r.status.success());
    assert!(std::fs::read(&victim).unwrap() == precious);
}

#[test]
fn special_files_and_foreign_directories_are_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x8", "--seed", "1"]);
    // a device node (as root this used to become a regular file)
    let mut c = bin();
    c.args(["convert", p(&x), "/dev/null"]);
    refused(&bounded(c), "character device");
    let m = std::fs::symlink_metadata("/dev/null").unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &m.file_type()
    ));
    // a FIFO as destination
    let fifo = dir.path().join("out.npy");
    mkfifo(&fifo);
    let mut c = bin();
    c.args(["convert", p(&x), p(&fifo)]);
    refused(&bounded(c), "FIFO");
    // a directory whose zarr.json is `{}`, and a real store holding other files
    for (i, meta, extra) in [
        (0, "{}", None),
        (
            1,
            r#"{"zarr_format":3,"node_type":"array","shape":[1]}"#,
            Some("notes.txt"),
        ),
    ] {
        let z = dir.path().join(format!("s{i}.zarr"));
        std::fs::create_dir(&z).unwrap();
        std::fs::write(z.join("zarr.json"), meta).unwrap();
        std::fs::write(z.join("mine.txt"), b"keep").unwrap();
        if let Some(e) = extra {
            std::fs::write(z.join(e), b"keep").unwrap();
        }
        let mut c = bin();
        c.args(["convert", p(&x), p(&z)]);
        refused(&bounded(c), "not replacing it");
        assert_eq!(std::fs::read(z.join("mine.txt")).unwrap(), b"keep");
    }
    // a Zarr array tilestream wrote is replaced
    let z = dir.path().join("ok.zarr");
    ok(&["convert", p(&x), p(&z)]);
    ok(&["convert", p(&x), p(&z)]);
}

#[test]
fn pipeline_step_names_are_identifiers_and_outputs_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x8", "--seed", "1"]);
    for bad in ["../../escaped", "/tmp/escaped", "a/b", "1x", ""] {
        let toml = dir.path().join("p.toml");
        std::fs::write(
            &toml,
            format!(
                "[inputs]\nx = \"x.npy\"\n\n[[steps]]\nop = \"affine\"\ninput = \"x\"\n\
                 scale = 2.0\nout = \"{bad}\"\n\n[[steps]]\nop = \"cast\"\ninput = \"{bad}\"\n\
                 dtype = \"f32\"\nout = \"y\"\n\n[outputs]\ny = \"y.npy\"\n"
            ),
        )
        .unwrap();
        let mut c = bin();
        c.args(["run", p(&toml)]);
        refused(&bounded(c), "is not a name");
        assert!(!dir.path().join("y.npy").exists());
    }
    assert!(!Path::new("/tmp/escaped.npy").exists());
    let toml = dir.path().join("two.toml");
    std::fs::write(
        &toml,
        "[inputs]\nx = \"x.npy\"\n\n[[steps]]\nop = \"affine\"\ninput = \"x\"\nscale = 2.0\n\
         out = \"a\"\n\n[[steps]]\nop = \"cast\"\ninput = \"a\"\ndtype = \"f32\"\nout = \"b\"\n\n\
         [outputs]\na = \"same.npy\"\nb = \"same.npy\"\n",
    )
    .unwrap();
    let mut c = bin();
    c.args(["run", p(&toml)]);
    refused(&bounded(c), "both written to");
}

#[test]
fn fifos_where_inputs_are_expected_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    ok(&["gen", p(&x), "--shape", "64x8", "--seed", "1"]);
    for name in ["in.npy", "in.tif", "in.bin", "pipe.toml", "k.npy"] {
        let f = dir.path().join(name);
        mkfifo(&f);
        let out = dir.path().join("o.npy");
        let mut c = bin();
        match name {
            "pipe.toml" => {
                c.args(["run", p(&f)]);
            }
            "k.npy" => {
                c.args(["stencil", p(&x), p(&out), "--filter"])
                    .arg(format!("convolve:{}", p(&f)));
            }
            _ => {
                c.args(["convert", p(&f), p(&out)]);
            }
        }
        refused(&bounded(c), "FIFO");
    }
}

#[test]
fn clean_removes_what_killed_zarr_runs_leave() {
    let dir = tempfile::tempdir().unwrap();
    // what a Zarr output killed while encoding leaves: its temporary directory
    let stale = dir.path().join(".out.zarr.Xy12Zq.tilestream-tmp");
    std::fs::create_dir_all(stale.join("c/0")).unwrap();
    std::fs::write(stale.join("c/0/0"), b"chunk").unwrap();
    std::fs::write(stale.join(".lock"), b"").unwrap();
    let kept = dir.path().join("mine.txt");
    std::fs::write(&kept, b"keep").unwrap();
    ok(&["clean", p(dir.path())]);
    assert!(!stale.exists(), "the stale Zarr directory is still there");
    assert!(kept.exists());
}
