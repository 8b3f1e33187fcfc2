//! The layering of `docs/architecture.md` holds: every module uses only modules listed
//! above it (read from `use crate::…` and `crate::…` paths outside comments); and inside
//! a module no two of its modules import each other.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::Path;

fn layers() -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let start = doc.find("<!-- layers:start -->").unwrap();
    let end = doc.find("<!-- layers:end -->").unwrap();
    doc[start..end]
        .lines()
        .filter_map(|l| l.split('`').nth(1))
        .map(str::to_string)
        .collect()
}

/// The modules a top-level module's source files name as `crate::X`.
fn uses(files: &[std::path::PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            let code = line.split("//").next().unwrap();
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + 7..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

fn rs_files(p: &Path, out: &mut Vec<std::path::PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            rs_files(&e.unwrap().path(), out);
        }
    } else if p.is_file() && p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

/// Names `src/lib.rs` re-exports at the crate root (`pub use budget::{MemoryBudget, ..}`),
/// with the module each comes from.
fn root_exports(src: &Path) -> Vec<(String, String)> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut out = Vec::new();
    for stmt in lib.split(';') {
        // the comments and attributes (`#[doc(hidden)]`) before a `pub use`
        let stmt: String = stmt
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.starts_with("#["))
            .collect::<Vec<_>>()
            .join(" ");
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let n = n.trim().rsplit("::").next().unwrap().trim();
            if !n.is_empty() {
                out.push((n.to_string(), module.trim().to_string()));
            }
        }
    }
    out
}

#[test]
fn modules_use_only_the_layers_above_them() {
    let layers = layers();
    assert!(layers.len() >= 10, "{layers:?}");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let exports = root_exports(&src);
    assert!(
        exports.iter().any(|(n, m)| n == "DType" && m == "dtype"),
        "{exports:?}"
    );
    let mut checked = 0;
    for (rank, module) in layers.iter().enumerate() {
        let mut files = Vec::new();
        rs_files(&src.join(format!("{module}.rs")), &mut files);
        rs_files(&src.join(module), &mut files);
        assert!(!files.is_empty(), "layer `{module}` has no source");
        for used in uses(&files) {
            // macros exported at the crate root belong to the module that defines them
            let used = match exports.iter().find(|(n, _)| *n == used) {
                Some((_, m)) => m.clone(),
                None if used == "dispatch_dtype" => "dtype".to_string(),
                None => used,
            };
            if used == *module {
                continue;
            }
            let at = layers.iter().position(|l| *l == used).unwrap_or_else(|| {
                panic!("`{module}` uses `{used}`, which docs/architecture.md does not list")
            });
            assert!(
                at < rank,
                "`{module}` (layer {}) uses `{used}` (layer {}): a cycle in the layering",
                rank + 1,
                at + 1
            );
        }
        checked += 1;
    }
    // every top-level module is in the list (front ends aside)
    for e in std::fs::read_dir(&src).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().replace(".rs", "");
        assert!(
            layers.contains(&name) || name == "lib" || name == "main",
            "src/{name} is in no layer of docs/architecture.md"
        );
    }
    assert_eq!(checked, layers.len());
}

/// A module's path from its file (`src/format/tiff/mod.rs` → `format::tiff`).
fn module_of(src: &Path, f: &Path) -> String {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// A file's code: comments and a trailing `#[cfg(test)] mod … { … }` dropped.
fn code_of(f: &Path) -> String {
    let text: String = std::fs::read_to_string(f)
        .unwrap()
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    // an inline test module (`#[cfg(test)]` then `mod tests {`) ends the file's code; a
    // test module in a file of its own (`mod tests;`) is not read anyway
    match text.find("#[cfg(test)]\nmod ") {
        Some(i) if text[i..].lines().nth(1).is_some_and(|l| l.ends_with('{')) => {
            text[..i].to_string()
        }
        _ => text,
    }
}

/// The paths a file names: `crate::a::b` as `a::b` (and each name of `crate::a::{x, y}`
/// as `a::x`), and `super::x` (or each name of `super::{x, y}`) as `parent::x`.
fn named_paths(code: &str, module: &str) -> Vec<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_string()
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + 7..];
        let path = ident(rest);
        // `crate::a::{x, y::z}` names `a::x` and `a::y::z`, not only `a`
        if let Some(list) = rest[path.len()..].strip_prefix("::{") {
            for n in list[..list.find('}').unwrap_or(0)].split(',') {
                let n = ident(n.trim().trim_start_matches('{'));
                if !n.is_empty() && n != "self" {
                    out.push(format!("{path}::{n}"));
                }
            }
        }
        out.push(path);
    }
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        rest = &rest[i + 7..];
        let names: Vec<String> = match rest.strip_prefix('{') {
            Some(list) => list[..list.find('}').unwrap_or(0)]
                .split(',')
                .map(|n| ident(n.trim()))
                .collect(),
            None => vec![ident(rest)],
        };
        for n in names.into_iter().filter(|n| !n.is_empty()) {
            out.push(if parent.is_empty() {
                n
            } else {
                format!("{parent}::{n}")
            });
        }
    }
    out
}

/// No two modules inside one (siblings, or their descendants, two or three levels deep)
/// import each other, through `crate::` or `super::` paths or a parent's re-exports
/// (`use child::{x}` in the parent, then `super::x` in a sibling). Comments and test
/// modules are not read; a module may use its parent and its children.
#[test]
fn no_import_cycles_between_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mods: Vec<(String, String)> = files
        .iter()
        .map(|f| (module_of(&src, f), code_of(f)))
        .filter(|(m, _)| m != "lib" && m != "main" && !m.starts_with("main::"))
        .collect();
    let known = |m: &str| mods.iter().any(|(n, _)| n == m);
    // names a module re-exports from its children: (module, name) -> child
    let mut reexports = std::collections::HashMap::new();
    for (m, code) in &mods {
        for stmt in code.split(';') {
            let s = stmt.trim();
            let s = s.strip_prefix("pub ").unwrap_or(s);
            let s = s.strip_prefix("pub(crate) ").unwrap_or(s);
            let Some(rest) = s.strip_prefix("use ") else {
                continue;
            };
            let Some((child, names)) = rest.split_once("::") else {
                continue;
            };
            let full = format!("{m}::{child}");
            if known(&full) {
                for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
                    let n = n.trim().rsplit("::").next().unwrap().trim().to_string();
                    reexports.insert((m.clone(), n), full.clone());
                }
            }
        }
    }
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        (1..=parts.len()).rev().find_map(|i| {
            let m = parts[..i].join("::");
            known(&m).then(|| match parts.get(i) {
                Some(next) => reexports
                    .get(&(m.clone(), (*next).to_string()))
                    .cloned()
                    .unwrap_or(m),
                None => m,
            })
        })
    };
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut checked = 0;
    for depth in [2, 3] {
        let key = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
        let mut edges =
            std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
        for (m, code) in &mods {
            for p in named_paths(code, m) {
                if let Some(t) = resolve(&p) {
                    let (a, b) = (key(m), key(&t));
                    if !related(m, &t) && !related(&a, &b) {
                        edges.entry(a).or_default().insert(b);
                        checked += 1;
                    }
                }
            }
        }
        // a cycle: some module reaches itself
        for start in edges.keys() {
            let mut seen = std::collections::BTreeSet::new();
            let mut todo: Vec<&String> = edges[start].iter().collect();
            while let Some(n) = todo.pop() {
                assert!(
                    n != start,
                    "an import cycle {depth} levels deep: {start} reaches itself (edges: {:?})",
                    edges.get(start)
                );
                if seen.insert(n.clone()) {
                    todo.extend(edges.get(n).into_iter().flatten());
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} imports read: is the parser reading the code?"
    );
}
