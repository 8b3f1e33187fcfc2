//! The layering of `docs/architecture.md` holds: every module uses only modules listed
//! above it (read from `use crate::…` and `crate::…` paths outside comments).

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
