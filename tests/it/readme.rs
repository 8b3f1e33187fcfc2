//! Every command of the README runs, as written, on small inputs: the `tilestream` lines
//! of each `sh` block (sizes scaled down), the example programs it names, and the pipeline
//! file of its `toml` block, in order, in a directory holding the files the commands name.
//! A README line that stops working fails this test; a new kind of line must be taught to
//! it (or listed among the few deliberately not run).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::ok;

/// Lines of the README's fenced blocks of `lang`, one list per block.
fn blocks(lang: &str) -> Vec<Vec<String>> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<Vec<String>> = None;
    for line in text.lines() {
        if let Some(b) = cur.as_mut() {
            if line.starts_with("```") {
                out.push(cur.take().unwrap());
            } else {
                b.push(line.to_string());
            }
        } else if line == format!("```{lang}") {
            cur = Some(Vec::new());
        }
    }
    out
}

/// Splits a shell line into words: single and double quotes, and a trailing `# comment`.
#[allow(clippy::match_same_arms)] // quoted and plain characters are kept alike
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '#') if cur.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The README's sizes, scaled down for a test (the commands stay the same).
fn scaled(w: &str) -> String {
    match w {
        "3075200x512" => "3000x512".into(),
        _ => w.into(),
    }
}

/// `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

/// The files the README's commands name, small.
fn fixtures(dir: &Path) {
    let t = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tilestream"));
        c.current_dir(dir).args(args);
        let o = c.output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    t(&["gen", "x.npy", "--shape", "3000x512", "--seed", "1"]);
    t(&["gen", "w.npy", "--shape", "512x64", "--seed", "2"]);
    t(&["gen", "scene.npy", "--shape", "8x600x700", "--seed", "3"]);
    t(&["gen", "dem.npy", "--shape", "200x300", "--seed", "4"]);
    t(&["gen", "img.npy", "--shape", "200x300", "--seed", "5"]);
    t(&["gen", "scene4.npy", "--shape", "4x600x700", "--seed", "6"]);
    t(&["convert", "scene4.npy", "scene.tif", "--dtype", "u16"]);
    t(&["convert", "x.npy", "data.zarr"]);
    std::fs::write(dir.join("data.raw"), vec![7u8; 1000 * 512 * 2]).unwrap();
    std::fs::create_dir_all(dir.join("out")).unwrap();
    // `tilestream run pipeline.toml`: the commented example with data beside it
    std::fs::create_dir_all(dir.join("data")).unwrap();
    t(&["gen", "data/x.npy", "--shape", "2000x512", "--seed", "1"]);
    t(&["gen", "data/w.npy", "--shape", "512x16", "--seed", "2"]);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pipeline.toml"),
        dir.join("pipeline.toml"),
    )
    .unwrap();
}

/// Runs one README line in `dir`; returns false for a line deliberately not run.
fn run_line(line: &str, dir: &Path) -> bool {
    let w: Vec<String> = words(line).iter().map(|w| scaled(w)).collect();
    let Some(first) = w.first() else {
        return true;
    };
    let mut c = match first.as_str() {
        "tilestream" => {
            let mut c = Command::new(env!("CARGO_BIN_EXE_tilestream"));
            c.args(&w[1..]);
            c
        }
        "cargo" if w.get(1).map(String::as_str) == Some("run") => {
            // cargo run --release --example NAME [-- ARGS]: the example, built by cargo
            // test, at a small size, with its files in the test directory
            let name = &w[w.iter().position(|x| x == "--example").unwrap() + 1];
            let mut c = Command::new(example(name));
            match w.iter().position(|x| x == "--") {
                Some(i) => c.args(&w[i + 1..]),
                None => c.args(["--rows", "2000"]),
            };
            let home = if name == "pipeline" {
                dir.join("examples")
            } else {
                dir.to_path_buf()
            };
            std::fs::create_dir_all(&home).unwrap();
            c.env("TILESTREAM_DIR", home);
            c
        }
        // this test itself, an install of the whole crate, and the hour-long benchmark
        "cargo" if matches!(w.get(1).map(String::as_str), Some("test" | "install")) => {
            return false;
        }
        "python3" if line.contains("benches/compare/compare.py") => return false,
        other => panic!("the README runs `{other}`, which this test does not know: {line}"),
    };
    let o = c.current_dir(dir).output().unwrap();
    assert!(
        o.status.success(),
        "README line failed: {line}\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    true
}

#[test]
fn every_readme_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    fixtures(dir.path());
    let (mut ran, mut skipped) = (0, Vec::new());
    for block in blocks("sh") {
        for line in block {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if run_line(line, dir.path()) {
                ran += 1;
            } else {
                skipped.push(line.to_string());
            }
        }
    }
    eprintln!("README: {ran} commands ran; not run: {skipped:?}");
    assert!(ran >= 30, "only {ran} README commands found");
    assert!(skipped.len() <= 4, "{skipped:?}");
    // the pipeline file shown in the README: a dry run, then a run, as written
    let tomls = blocks("toml");
    assert!(!tomls.is_empty());
    for (i, t) in tomls.iter().enumerate() {
        let file = dir.path().join(format!("readme{i}.toml"));
        std::fs::write(&file, t.join("\n")).unwrap();
        let f = file.to_str().unwrap();
        ok(&["run", f, "--dry-run"]);
        ok(&["run", f]);
    }
    assert!(dir.path().join("out/proj.npy").exists());
}

#[test]
fn words_split_like_a_shell() {
    assert_eq!(
        words("tilestream map '(x*2+1)' y.npy --in x=x.npy   # a comment"),
        ["tilestream", "map", "(x*2+1)", "y.npy", "--in", "x=x.npy"]
    );
    assert_eq!(words(r#"a "b c" '' d#e"#), ["a", "b c", "", "d#e"]);
}
