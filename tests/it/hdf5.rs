//! HDF5 and NetCDF-4 inputs, checked against h5py and netCDF4-python: `tests/hdf5_check.py`
//! writes files as those libraries write them (every integer and float dtype in both byte
//! orders, contiguous, compact and chunked with no filter, deflate+shuffle+fletcher32,
//! LZF, Zstandard, Blosc, LZ4, bitshuffle (alone, with LZ4, with Zstandard; several
//! blocks, elements past the last multiple of 8), szip and bzip2; complex numbers; booleans, rank 0 to 3, empty, fill values of unwritten
//! chunks and datasets, chunks stored unfiltered by their mask, a user block, NetCDF-4
//! variables with `_FillValue` and packing) and saves each dataset as h5py/netCDF4 read
//! it; tilestream must read every one exactly so at two budgets. Damaged and unsupported
//! files end in one line with no output (a damaged chunk of a filter without a checksum
//! is read as h5py reads it, or refused where h5py refuses it); an output over its input
//! file is refused.
//!
//! Needs a Python with h5py, hdf5plugin and netCDF4 (`TILESTREAM_PYTHON`; `scripts/test`
//! installs them) and the HDF5 library (libhdf5, which GDAL's packages bring).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::common::{bin, run};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hdf5_check.py");

fn python() -> Option<OsString> {
    crate::common::python("numpy, h5py, hdf5plugin and netCDF4")
}

/// The lines `hdf5_check.py what dir` prints, split in two.
fn cases(python: &OsString, what: &str, dir: &Path) -> Vec<(String, String)> {
    let out = Command::new(python)
        .arg(SCRIPT)
        .arg(what)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hdf5_check.py {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "tilestream {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with h5py, hdf5plugin and netCDF4 (bash scripts/test does)"
)]
fn reads_every_dataset_exactly_as_h5py_and_netcdf4_read_it() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let all = cases(&python, "write", dir.path());
    assert!(all.len() >= 150, "cases: {}", all.len());
    let out = dir.path().join("out.npy");
    let out_s = out.to_str().unwrap();
    for (src, oracle) in &all {
        let want = std::fs::read(oracle).unwrap();
        // the smallest budget these small files allow (libbz2's tables for blocks of
        // 900 000 bytes take 3.7 MB), and one that holds everything
        let small = if src.contains("/bzip2/") {
            "4MiB"
        } else {
            "512KiB"
        };
        for budget in [small, "1GiB"] {
            ok(&[
                "convert",
                src,
                out_s,
                "--memory",
                budget,
                "--progress",
                "never",
            ]);
            let got = std::fs::read(&out).unwrap();
            assert!(got == want, "{src} at {budget}: differs from {oracle}");
        }
    }
    // a reduction over a chunked, filtered, big-endian dataset equals the same
    // reduction of what h5py read
    let find = |tail: &str| {
        all.iter()
            .find(|(s, _)| s.ends_with(tail))
            .unwrap_or_else(|| panic!("no case {tail}"))
    };
    let (src, oracle) = find(":/gzip_shuffle_fletcher/be_f8");
    for (op, axis) in [("mean", "0"), ("std", "1"), ("nanmax", "0")] {
        let a = dir.path().join("a.npy");
        let b = dir.path().join("b.npy");
        for (input, dest) in [(src.as_str(), &a), (oracle.as_str(), &b)] {
            ok(&[
                "reduce",
                input,
                dest.to_str().unwrap(),
                "--op",
                op,
                "--axis",
                axis,
                "--memory",
                "512KiB",
                "--progress",
                "never",
            ]);
        }
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{op}"
        );
    }
    // NetCDF: _FillValue is the nodata value (left out by the nan reductions), packing
    // reported and not applied
    let (precip, precip_oracle) = find(".nc:precip");
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", precip, "--json"])).unwrap();
    assert_eq!(info["nodata"], "-9999", "{info}");
    // a complex dataset with complex attributes named as NetCDF's packing and fill: the
    // fill value shown, the attributes (not numbers tilestream uses) left out
    let (cfill, _) = find(":/complex/fill");
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", cfill, "--json"])).unwrap();
    assert_eq!(info["dtype"], "c128", "{info}");
    assert_eq!(info["fill_value"], "1.5-2j", "{info}");
    assert!(
        info["scale_factor"].is_null() && info["nodata"].is_null(),
        "{info}"
    );
    let (t2m, _) = find(".nc:t2m");
    let info: serde_json::Value = serde_json::from_str(&ok(&["info", t2m, "--json"])).unwrap();
    assert_eq!(info["nodata"], "-32767", "{info}");
    assert_eq!(info["scale_factor"], 0.01, "{info}");
    assert_eq!(info["add_offset"], 273.15, "{info}");
    assert_eq!(info["filters"][0], "shuffle", "{info}");
    let a = dir.path().join("a.npy");
    let b = dir.path().join("b.npy");
    ok(&[
        "reduce",
        precip,
        a.to_str().unwrap(),
        "--op",
        "nanmean",
        "--axis",
        "0",
        "--progress",
        "never",
    ]);
    ok(&[
        "reduce",
        precip_oracle,
        b.to_str().unwrap(),
        "--op",
        "nanmean",
        "--axis",
        "0",
        "--in-nodata",
        "-9999",
        "--progress",
        "never",
    ]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let c = dir.path().join("c.npy");
    ok(&[
        "reduce",
        precip_oracle,
        c.to_str().unwrap(),
        "--op",
        "nanmean",
        "--axis",
        "0",
        "--progress",
        "never",
    ]);
    assert_ne!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&c).unwrap(),
        "the fill value must be left out"
    );
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with h5py, hdf5plugin and netCDF4 (bash scripts/test does)"
)]
fn damaged_and_unsupported_files_end_in_one_line_with_no_output() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let all = cases(&python, "hostile", dir.path());
    let out = dir.path().join("out.npy");
    let expect = [
        ("bomb", "decodes past the chunk's 16384 bytes"),
        ("bomb_plugin", "past the chunk's 16384"),
        ("damaged_plugin", "cannot be decoded"),
        ("truncated_szip", "szip stream"),
        ("damaged_gzip", "cannot be decoded"),
        ("damaged_fletcher", "fletcher32 checksum does not match"),
        ("truncated_chunked", "truncated"),
        (
            "unsupported_zfp",
            "zfp filter is not one tilestream decodes",
        ),
        ("unsupported_scaleoffset", "scaleoffset filter"),
        ("unsupported_record", "a compound (a record"),
        ("unsupported_swapped_parts", "a compound (a record"),
        ("unsupported_rate_intensity", "a compound (a record"),
        ("unsupported_strings", "a string"),
        ("unsupported_group", "no dataset '/group'"),
        ("unsupported_missing", "no dataset '/missing'"),
        ("not_hdf5", "the HDF5 library does not open it"),
        ("nc3_truncated", "runs past the end of the file"),
        ("nc3_char", "text (char)"),
    ];
    for (src, what) in &all {
        if let Some(oracle) = what.strip_prefix("h5py=") {
            ok(&["convert", src, out.to_str().unwrap(), "--progress", "never"]);
            assert_eq!(
                std::fs::read(&out).unwrap(),
                std::fs::read(oracle).unwrap(),
                "{src}"
            );
            std::fs::remove_file(&out).unwrap();
            continue;
        }
        let (_, needle) = expect
            .iter()
            .find(|(w, _)| w == what)
            .unwrap_or_else(|| panic!("unexpected case {what}"));
        let o = run(&[
            "convert",
            src,
            out.to_str().unwrap(),
            "--memory",
            "64MiB",
            "--progress",
            "never",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
        assert!(!out.exists(), "{what}: an output was left");
    }
    // every kind of damage above was made (the plugin filters' damaged chunks are
    // refused or read as h5py reads them, whichever h5py does: both happen)
    for (what, _) in &expect {
        assert!(all.iter().any(|(_, w)| w == what), "no case {what}");
    }
    assert!(
        all.iter().any(|(_, w)| w.starts_with("h5py=")),
        "no damage h5py reads"
    );
    // the listing of a file with a cycle of hard links ends, each dataset once
    let unsupported = all
        .iter()
        .find(|(_, w)| w == "unsupported_group")
        .unwrap()
        .0
        .split_once(":/")
        .unwrap()
        .0;
    let listing = ok(&["info", unsupported]);
    assert_eq!(listing.matches("/group/inner").count(), 1, "{listing}");
    assert!(listing.contains("7 datasets"), "{listing}");
    assert!(listing.contains("/record  (not read: "), "{listing}");
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with h5py, hdf5plugin and netCDF4 (bash scripts/test does)"
)]
fn an_output_over_its_hdf5_input_is_refused_and_a_missing_library_said() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let all = cases(&python, "write", dir.path());
    let (src, _) = all
        .iter()
        .find(|(s, _)| s.ends_with("matrix.h5:/contiguous/le_f4"))
        .unwrap();
    let file = src.split_once(":/").unwrap().0;
    let before = std::fs::read(file).unwrap();
    for args in [
        vec!["convert", src, file, "--format", "npy"],
        vec!["affine", src, file, "--scale", "2"],
    ] {
        let o = run(&[&args[..], &["--progress", "never"]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} wrote over its input");
        assert!(err.contains("is also an input"), "{err}");
    }
    assert!(
        std::fs::read(file).unwrap() == before,
        "the input file changed"
    );
    // without the library: one line saying what to install
    let o = bin()
        .args(["info", src])
        .env("TILESTREAM_HDF5", dir.path().join("no-libhdf5.so"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("apt-get install libhdf5"), "{err}");
}
