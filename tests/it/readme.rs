//! Every command of the README and of the pages of `docs/` runs, as written, on small
//! inputs: the `tilestream` lines of each `sh` block (sizes scaled down), the example
//! programs they name, and the pipeline files of their `toml` blocks, in order, each page
//! in a directory of its own holding the files the commands name. A line that stops
//! working fails this test; a new kind of line must be taught to it (or listed among the
//! few deliberately not run). The pages cannot rot otherwise either: no `@PLACEHOLDER@`,
//! every path they name exists in the tree, every link leads to a file, and every page of
//! `docs/` is reachable from the README.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::ok;

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then every `docs/*.md` in name order.
fn pages() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut out = vec![root().join("README.md")];
    out.extend(docs);
    out
}

/// The page's name relative to the root, for messages.
fn name(page: &Path) -> String {
    page.strip_prefix(root()).unwrap().display().to_string()
}

/// Lines of `text`'s fenced blocks of `lang`, one list per block.
fn blocks(text: &str, lang: &str) -> Vec<Vec<String>> {
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

/// The files the pages' commands name, small.
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
    t(&["gen", "batch.npy", "--shape", "16x3x32x32", "--seed", "7"]);
    t(&["gen", "iq.npy", "--shape", "2x6x200x300", "--seed", "8"]);
    t(&["convert", "scene4.npy", "scene.tif", "--dtype", "u16"]);
    t(&["convert", "x.npy", "data.zarr"]);
    std::fs::write(dir.join("data.raw"), vec![7u8; 1000 * 512 * 2]).unwrap();
    // HDF5 and NetCDF-4 files as h5py and netCDF4-python write them (committed: tilestream
    // writes neither format; `python tests/hdf5_check.py docs tests/data` remakes them),
    // and a small JPEG 2000 band as GDAL writes Sentinel-2's (366 x 366 u16 in tiles of
    // 128, QUALITY=10, GeoJP2 in UTM 33N)
    for f in ["features.h5", "era5.nc", "T33UUP_B04.jp2"] {
        std::fs::copy(root().join("tests/data").join(f), dir.join(f)).unwrap();
    }
    std::fs::create_dir_all(dir.join("out")).unwrap();
    // `tilestream run pipeline.toml`: the commented example with data beside it
    std::fs::create_dir_all(dir.join("data")).unwrap();
    t(&["gen", "data/x.npy", "--shape", "2000x512", "--seed", "1"]);
    t(&["gen", "data/w.npy", "--shape", "512x16", "--seed", "2"]);
    std::fs::copy(
        root().join("examples/pipeline.toml"),
        dir.join("pipeline.toml"),
    )
    .unwrap();
}

/// Runs one line of `page` in `dir`; returns false for a line deliberately not run.
fn run_line(page: &str, line: &str, dir: &Path) -> bool {
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
        other => panic!("{page} runs `{other}`, which this test does not know: {line}"),
    };
    let o = c.current_dir(dir).output().unwrap();
    assert!(
        o.status.success(),
        "{page}: line failed: {line}\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    true
}

#[test]
fn every_command_of_the_readme_and_the_docs_runs() {
    let (mut ran, mut skipped, mut pipelines) = (0, Vec::new(), 0);
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let page = name(&page);
        let (sh, tomls) = (blocks(&text, "sh"), blocks(&text, "toml"));
        if sh.is_empty() && tomls.is_empty() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        fixtures(dir.path());
        for line in sh.iter().flatten() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if run_line(&page, line, dir.path()) {
                ran += 1;
            } else {
                skipped.push(format!("{page}: {line}"));
            }
        }
        // each pipeline file shown: a dry run, then a run, as written
        for (i, t) in tomls.iter().enumerate() {
            let file = dir.path().join(format!("page{i}.toml"));
            std::fs::write(&file, t.join("\n")).unwrap();
            let f = file.to_str().unwrap();
            ok(&["run", f, "--dry-run"]);
            ok(&["run", f]);
            pipelines += 1;
        }
    }
    eprintln!(
        "README and docs: {ran} commands and {pipelines} pipeline files ran; not run: {skipped:?}"
    );
    assert!(
        ran >= 30,
        "only {ran} commands found in the README and docs"
    );
    assert!(
        pipelines >= 1,
        "no pipeline file found in the README and docs"
    );
    assert!(skipped.len() <= 4, "{skipped:?}");
}

/// The paths a page names: words that start with one of the tree's top-level folders
/// (`src/engine.rs`, `docs/gpu.md`, `tests/it/`), with trailing punctuation and a
/// `:line` suffix cut off. Globs and templates (`*`, `<`, `{`) are not paths.
fn named_paths(text: &str) -> Vec<String> {
    const TOPS: [&str; 10] = [
        "src/",
        "tests/",
        "docs/",
        "benches/",
        "examples/",
        "python/",
        "kernels/",
        "fuzz/",
        "scripts/",
        ".ci/",
    ];
    let mut out = Vec::new();
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !(is_path_char(bytes[i - 1]) || bytes[i - 1] == ':');
        if at_word_start {
            let rest: String = bytes[i..bytes.len().min(i + 12)].iter().collect();
            if TOPS.iter().any(|t| rest.starts_with(t)) {
                let mut j = i;
                while j < bytes.len() && is_path_char(bytes[j]) {
                    j += 1;
                }
                let next = bytes.get(j).copied().unwrap_or(' ');
                let word: String = bytes[i..j].iter().collect();
                let word = word.trim_end_matches(['.', '-']).to_string();
                if !matches!(next, '*' | '<' | '{') {
                    out.push(word);
                }
                i = j;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// The targets of a page's Markdown links that are not URLs or anchors, `#anchor` cut off.
fn link_targets(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap().trim().to_string())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

#[test]
fn the_pages_name_only_what_exists_and_hold_no_placeholder() {
    let mut wrong = Vec::new();
    let mut pages_and_lib = pages();
    pages_and_lib.push(root().join("src/lib.rs"));
    pages_and_lib.push(root().join("python/README.md"));
    for page in &pages_and_lib {
        let text = std::fs::read_to_string(page).unwrap();
        let n = name(page);
        // placeholders: @WORD@ left by a template
        let parts: Vec<&str> = text.split('@').collect();
        for w in parts.iter().skip(1).take(parts.len().saturating_sub(2)) {
            if !w.is_empty()
                && w.len() <= 40
                && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            {
                wrong.push(format!("{n}: placeholder @{w}@"));
            }
        }
        for p in named_paths(&text) {
            if !root().join(&p).exists() {
                wrong.push(format!("{n}: names {p}, which is not in the tree"));
            }
        }
        if page.extension().is_some_and(|e| e == "md") {
            for t in link_targets(&text) {
                if !page.parent().unwrap().join(&t).exists() {
                    wrong.push(format!("{n}: links to {t}, which is not there"));
                }
            }
        }
    }
    // every page of docs/ is reachable from the README
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let linked: Vec<String> = link_targets(&readme);
    for page in pages().iter().skip(1) {
        let n = name(page);
        if !linked.iter().any(|t| Path::new(t) == Path::new(&n)) {
            wrong.push(format!("README.md does not link to {n}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_checks_of_the_pages_find_what_they_look_for() {
    assert_eq!(
        named_paths(
            "see `src/engine.rs`, src/plan.rs: and tests/it/ and `benches/*.py`, docs/x.md."
        ),
        ["src/engine.rs", "src/plan.rs", "tests/it/", "docs/x.md"]
    );
    assert_eq!(
        named_paths("a url https://x.org/src/a.rs and ../src/b.rs and isrc/c.rs"),
        Vec::<String>::new()
    );
    assert_eq!(
        link_targets("[a](docs/a.md#top) [b](https://x.org) [c](#here) [d](bench/s.png)"),
        ["docs/a.md", "bench/s.png"]
    );
}

#[test]
fn words_split_like_a_shell() {
    assert_eq!(
        words("tilestream map '(x*2+1)' y.npy --in x=x.npy   # a comment"),
        ["tilestream", "map", "(x*2+1)", "y.npy", "--in", "x=x.npy"]
    );
    assert_eq!(words(r#"a "b c" '' d#e"#), ["a", "b c", "", "d#e"]);
}
