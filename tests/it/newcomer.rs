//! Rough edges a newcomer hit: patches of an earlier run left beside new ones, a patch
//! run reporting "written 0 B", an output name whose extension tilestream does not write.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use crate::common::{bin, ok};

#[test]
fn tiles_replace_an_earlier_runs_patches_and_refuse_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img.npy");
    let p = |x: &std::path::Path| x.to_str().unwrap().to_string();
    ok(&["gen", &p(&img), "--shape", "64x64", "--seed", "1"]);
    let out = dir.path().join("patches");
    ok(&["tiles", &p(&img), &p(&out), "--size", "16"]);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 16 + 1);
    // a second run with larger patches: the earlier 16 are removed, saying so
    let o = bin()
        .args(["tiles", &p(&img), &p(&out), "--size", "32", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("removed the 16 patches"));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 4 + 1);
    // and it reports what it wrote (four .npy patches of 32x32 f32 and the index)
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["bytes_written"].as_u64().unwrap() >= 4 * 32 * 32 * 4,
        "{r}"
    );
    // a file no tiles run wrote: refused, kept
    std::fs::write(out.join("notes.txt"), b"mine").unwrap();
    let o = bin()
        .args(["tiles", &p(&img), &p(&out), "--size", "16"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("notes.txt"));
    assert!(out.join("notes.txt").exists());
}

#[test]
fn an_unknown_output_extension_is_written_raw_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let jpg = dir.path().join("o.jpg");
    ok(&["gen", x.to_str().unwrap(), "--shape", "8x8"]);
    let o = bin()
        .args(["convert", x.to_str().unwrap(), jpg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(".jpg is not a format"));
    assert_eq!(std::fs::metadata(&jpg).unwrap().len(), 8 * 8 * 4);
}

#[test]
fn the_report_counts_the_time_spent_encoding_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let tif = dir.path().join("x.tif");
    ok(&["gen", x.to_str().unwrap(), "--shape", "3x300x400"]);
    let o = bin()
        .args([
            "convert",
            x.to_str().unwrap(),
            tif.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (wall, finish) = (
        r["wall_s"].as_f64().unwrap(),
        r["finish_s"].as_f64().unwrap(),
    );
    assert!(finish > 0.0 && wall >= finish, "{r}");
}
