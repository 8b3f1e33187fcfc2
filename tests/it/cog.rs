//! Cloud-Optimized GeoTIFF outputs (`--cog`), checked against GDAL: `gdalinfo` must
//! report `LAYOUT=COG` and the overview levels, GDAL must read the full-resolution image
//! exactly as the input, and each overview must equal what `gdaladdo` computes on the
//! same image (average: within 1 for integers; nearest: the pixel GDAL 3.6's rule
//! picks, computed here). `rio cogeo validate` (rio-cogeo, installed by `scripts/test` in the
//! Python of `TILESTREAM_PYTHON`) must accept the COGs and reject a plain GeoTIFF.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]
#![allow(clippy::float_cmp)] // values are compared exactly where they must be equal

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::gdal::{envi, gdal_read, gdal_tif, gdalinfo, georef_of, ok, tool, ts};
use crate::common::write_npy;
use tilestream::DType;

/// Varied values (a smooth ramp plus noise) of `dtype` as little-endian bytes.
fn image(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n * dtype.size());
    for i in 0..n {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let noise = (s >> 33) % 2000;
        let v = (i % 977) as u64 * 40 + noise;
        match dtype {
            DType::U8 => out.push((v % 251) as u8),
            DType::U16 => out.extend((v as u16).to_le_bytes()),
            DType::I16 => out.extend(((v as i32 - 20000) as i16).to_le_bytes()),
            DType::F32 => out.extend((v as f32 * 0.1).to_le_bytes()),
            _ => unreachable!(),
        }
    }
    out
}

/// GDAL's reading of overview level `k` (0 the largest) of `tif`, band-sequential.
fn overview(tif: &Path, k: usize, dir: &Path) -> Vec<u8> {
    let out = dir.join(format!(
        "{}.ov{k}.raw",
        tif.file_stem().unwrap().to_string_lossy()
    ));
    ok(tool("gdal_translate")
        .args(["-q", "-of", "ENVI", "-co", "INTERLEAVE=BSQ", "-oo"])
        .arg(format!("OVERVIEW_LEVEL={k}"))
        .arg(tif)
        .arg(&out));
    std::fs::read(&out).unwrap()
}

fn values(bytes: &[u8], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::U8 => bytes.iter().map(|&v| f64::from(v)).collect(),
        DType::U16 => bytes
            .chunks_exact(2)
            .map(|c| f64::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DType::I16 => bytes
            .chunks_exact(2)
            .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => unreachable!(),
    }
}

/// Level `k` (1-based) of a `w` x `h` image: `ceil(w / 2^k)` x `ceil(h / 2^k)`.
fn level_size(w: usize, h: usize, k: usize) -> (usize, usize) {
    (w.div_ceil(1 << k), h.div_ceil(1 << k))
}

struct Case {
    name: &'static str,
    dtype: DType,
    bands: usize,
    interleave: &'static str,
    resampling: &'static str,
    /// Made by `gdal_translate` (georeferenced, nodata -32768 in blocks and scattered
    /// pixels) instead of a `.npy`.
    from_gdal: bool,
}

#[test]
fn cog_outputs_are_cogs_whose_overviews_match_gdaladdo() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (h, w, levels) = (1000usize, 700usize, 5usize);
    let cases = [
        Case {
            name: "u16_band",
            dtype: DType::U16,
            bands: 3,
            interleave: "band",
            resampling: "average",
            from_gdal: false,
        },
        Case {
            name: "u16_pixel",
            dtype: DType::U16,
            bands: 3,
            interleave: "pixel",
            resampling: "average",
            from_gdal: false,
        },
        Case {
            name: "i16_nodata",
            dtype: DType::I16,
            bands: 2,
            interleave: "band",
            resampling: "average",
            from_gdal: true,
        },
        Case {
            name: "f32",
            dtype: DType::F32,
            bands: 1,
            interleave: "band",
            resampling: "average",
            from_gdal: false,
        },
        Case {
            name: "u8_nearest",
            dtype: DType::U8,
            bands: 2,
            interleave: "pixel",
            resampling: "nearest",
            from_gdal: false,
        },
    ];
    for (ci, c) in cases.iter().enumerate() {
        let mut data = image(c.dtype, c.bands * h * w, ci as u64 + 1);
        if c.from_gdal {
            // nodata (-32768, which no mean of the other values can equal): a block, and
            // one pixel in 37
            for (i, v) in data.chunks_exact_mut(2).enumerate() {
                let (y, x) = ((i / w) % h, i % w);
                if ((100..180).contains(&y) && (50..130).contains(&x)) || i % 37 == 0 {
                    v.copy_from_slice(&i16::MIN.to_le_bytes());
                }
            }
        }
        let shape = if c.bands == 1 {
            vec![h, w]
        } else {
            vec![c.bands, h, w]
        };
        let input: PathBuf = if c.from_gdal {
            let code = match c.dtype {
                DType::I16 => 2,
                _ => unreachable!(),
            };
            let raw = envi(d, c.name, code, c.bands, h, w, &data);
            let tif = d.join(format!("{}.in.tif", c.name));
            ok(tool("gdal_translate")
                .args(["-q", "-of", "GTiff", "-a_srs", "EPSG:32633", "-a_ullr"])
                .args([
                    "500000",
                    "4000000",
                    "507000",
                    "3990000",
                    "-a_nodata",
                    "-32768",
                ])
                .args(["-co", "TILED=YES", "-co", "COMPRESS=DEFLATE"])
                .arg(&raw)
                .arg(&tif));
            tif
        } else {
            let p = d.join(format!("{}.npy", c.name));
            write_npy(&p, c.dtype, &shape, &data);
            p
        };
        let cog = d.join(format!("{}.cog.tif", c.name));
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let cog_args = |out: &Path, memory: &str| {
            vec![
                "convert".to_owned(),
                s(&input),
                s(out),
                "--cog".into(),
                "--overviews".into(),
                levels.to_string(),
                "--overview-resampling".into(),
                c.resampling.into(),
                "--tiff-tile".into(),
                "128".into(),
                "--tiff-interleave".into(),
                c.interleave.into(),
                "--memory".into(),
                memory.into(),
            ]
        };
        let args = cog_args(&cog, "6MiB");
        ts(&args.iter().map(String::as_str).collect::<Vec<_>>());
        // the same file whatever the budget (small or large batches)
        let cog2 = d.join(format!("{}.cog2.tif", c.name));
        let args = cog_args(&cog2, "1GiB");
        ts(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            std::fs::read(&cog).unwrap(),
            std::fs::read(&cog2).unwrap(),
            "{}: the COG depends on the budget",
            c.name
        );

        let info = gdalinfo(&cog);
        assert_eq!(
            info["metadata"]["IMAGE_STRUCTURE"]["LAYOUT"], "COG",
            "{}: {info}",
            c.name
        );
        let ovs = info["bands"][0]["overviews"].as_array().unwrap();
        assert_eq!(ovs.len(), levels, "{}", c.name);
        for (k, o) in ovs.iter().enumerate() {
            let (lw, lh) = level_size(w, h, k + 1);
            assert_eq!(
                o["size"],
                serde_json::json!([lw, lh]),
                "{} level {k}",
                c.name
            );
        }
        // the full image, exactly
        let full = if c.from_gdal {
            gdal_read(&input, d)
        } else {
            data.clone()
        };
        assert_eq!(gdal_read(&cog, d), full, "{}: full resolution", c.name);
        if c.from_gdal {
            assert_eq!(
                georef_of(&cog),
                georef_of(&input),
                "{}: georeferencing",
                c.name
            );
        }

        // the reference: the same image as a plain GeoTIFF, overviews by gdaladdo
        let reference = d.join(format!("{}.ref.tif", c.name));
        ts(&[
            "convert",
            &s(&input),
            &s(&reference),
            "--tiff-tile",
            "128",
            "--tiff-interleave",
            c.interleave,
        ]);
        if c.resampling == "average" {
            ok(tool("gdaladdo")
                .args(["-q", "-r", "average"])
                .arg(&reference)
                .args(["2", "4", "8", "16", "32"]));
        }
        let full_vals = values(&full, c.dtype);
        for k in 0..levels {
            let ours = values(&overview(&cog, k, d), c.dtype);
            let (lw, lh) = level_size(w, h, k + 1);
            assert_eq!(ours.len(), c.bands * lw * lh, "{} level {k}", c.name);
            if c.resampling == "nearest" {
                // GDAL 3.6: pixel floor(0.5 + i * src / dst) of the full image
                let pick = |i: usize, n: usize, m: usize| {
                    ((0.5 + i as f64 * n as f64 / m as f64) as usize).min(n - 1)
                };
                for b in 0..c.bands {
                    for y in 0..lh {
                        for x in 0..lw {
                            let want = full_vals[(b * h + pick(y, h, lh)) * w + pick(x, w, lw)];
                            assert_eq!(
                                ours[(b * lh + y) * lw + x],
                                want,
                                "{} level {k} band {b} ({y}, {x})",
                                c.name
                            );
                        }
                    }
                }
                continue;
            }
            let theirs = values(&overview(&reference, k, d), c.dtype);
            let mut differ = 0;
            for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                let tol = if c.dtype == DType::F32 {
                    1e-5 * b.abs().max(1.0)
                } else {
                    1.0
                };
                assert!(
                    (a - b).abs() <= tol,
                    "{} level {k} element {i}: {a} where gdaladdo has {b}",
                    c.name
                );
                differ += usize::from(a != b);
            }
            // rounding alone: u16 (GDAL's integer path) is exact, i16 (its float path)
            // differs by 1 on a few pixels at most; f32 means differ in the last bits
            // (GDAL sums in f32, tilestream in f64)
            if c.dtype == DType::U16 {
                assert_eq!(differ, 0, "{} level {k}", c.name);
            }
            assert!(
                c.dtype == DType::F32 || differ * 100 <= ours.len(),
                "{} level {k}: {differ} of {} values differ",
                c.name,
                ours.len()
            );
        }
    }
}

#[test]
fn cog_needs_its_memory_and_a_geotiff_and_levels_the_image_has() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("in.npy");
    write_npy(
        &input,
        DType::U16,
        &[3000, 3000],
        &image(DType::U16, 3000 * 3000, 7),
    );
    let i = input.to_str().unwrap();
    let out = d.join("out.tif");
    let o = out.to_str().unwrap();
    let fails = |args: &[&str], says: &str| {
        let r = Command::new(crate::common::gdal::BIN)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(
            matches!(r.status.code(), Some(1 | 2)),
            "{args:?}: {:?} {err}",
            r.status
        );
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    };
    // a row of 512-pixel tiles of 3000 columns and of each level: more than 2 MiB; the
    // plan refuses it as the run does, and at a budget that holds it says what it takes
    fails(&["convert", i, o, "--cog", "--memory", "2MiB"], "needs");
    for op in ["convert", "transpose"] {
        fails(&["plan", op, i, o, "--cog", "--memory", "2MiB"], "needs");
    }
    fails(
        &[
            "plan",
            "convert",
            i,
            &d.join("x.npy").to_string_lossy(),
            "--cog",
        ],
        "name it .tif",
    );
    assert!(!out.exists());
    let plan = Command::new(crate::common::gdal::BIN)
        .args(["plan", "convert", i, o, "--cog", "--overviews", "3"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&plan.stdout);
    let after = shown
        .lines()
        .find(|l| l.starts_with("after the run:  COG overviews: 3 levels (average)"))
        .unwrap_or_else(|| panic!("no COG line in the plan:\n{shown}"));
    let run = Command::new(crate::common::gdal::BIN)
        .args([
            "convert",
            i,
            o,
            "--cog",
            "--overviews",
            "3",
            "--memory",
            "2MiB",
        ])
        .output()
        .unwrap();
    let refused = String::from_utf8_lossy(&run.stderr);
    let need = refused
        .split("needs ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .unwrap_or_else(|| panic!("{refused}"));
    assert!(
        after.contains(&format!("within {need} (")),
        "{after} / {refused}"
    );
    assert!(!out.exists());
    fails(
        &["convert", i, &d.join("x.npy").to_string_lossy(), "--cog"],
        "name it .tif",
    );
    fails(
        &["convert", i, o, "--format", "cog", "--overviews", "13"],
        "12 overview levels at most",
    );
    fails(&["convert", i, o, "--cog", "--overviews", "two"], "auto");
    assert!(!out.exists());
    // --format cog writes a COG whatever the name
    let named = d.join("scene.data");
    ts(&["convert", i, named.to_str().unwrap(), "--format", "cog"]);
    assert_eq!(
        gdalinfo(&named)["metadata"]["IMAGE_STRUCTURE"]["LAYOUT"],
        "COG"
    );
}

#[test]
fn a_run_killed_while_building_its_cog_resumes_to_the_same_file_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("in.npy");
    let (h, w) = (900, 1000);
    write_npy(
        &input,
        DType::U16,
        &[2, h, w],
        &image(DType::U16, 2 * h * w, 9),
    );
    let x = format!("x={}", input.display());
    let args = |out: &str| -> Vec<String> {
        [
            "map",
            "--in",
            &x,
            "x*2+1",
            d.join(out).to_str().unwrap(),
            "--dtype",
            "u16",
            "--cog",
            "--tiff-tile",
            "128",
            "--memory",
            "4MiB",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let whole = args("whole.tif");
    ts(&whole.iter().map(String::as_str).collect::<Vec<_>>());
    crate::common::kill_then_resume(&args("resumed.tif"), "cog-overviews", || {
        // killed with the levels written: nothing at the path yet, its files beside it
        assert!(!d.join("resumed.tif").exists());
        let temps = std::fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                n.to_string_lossy().starts_with(".resumed.tif.")
            })
            .count();
        assert!(temps >= 4, "{temps} temporary files");
    });
    assert_eq!(
        std::fs::read(d.join("resumed.tif")).unwrap(),
        std::fs::read(d.join("whole.tif")).unwrap()
    );
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left beside the outputs: {left:?}");
}

#[test]
#[cfg_attr(
    not(tilestream_python),
    ignore = "set TILESTREAM_PYTHON to a Python with rio-cogeo (bash scripts/test does) to run this check"
)]
fn rio_cogeo_validates_cogs_and_rejects_plain_geotiffs() {
    let Some(python) = std::env::var_os("TILESTREAM_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("TILESTREAM_TEST_ALL").is_none(),
            "CI and scripts/test must set TILESTREAM_PYTHON to a Python with rio-cogeo"
        );
        eprintln!("SKIPPED rio_cogeo_validates: TILESTREAM_PYTHON is not set");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("in.npy");
    let (h, w) = (1300, 1100);
    write_npy(
        &input,
        DType::U16,
        &[2, h, w],
        &image(DType::U16, 2 * h * w, 3),
    );
    let raw = envi(d, "geo", 12, 2, h, w, &image(DType::U16, 2 * h * w, 4));
    let geo = d.join("geo.tif");
    gdal_tif(&raw, &geo, &["TILED=YES"]);
    let rio = Path::new(&python).with_file_name("rio");
    assert!(
        rio.exists(),
        "{} is missing: pip install rio-cogeo (bash scripts/test does)",
        rio.display()
    );
    let validate = |p: &Path| {
        Command::new(&rio)
            .args(["cogeo", "validate", "--strict"])
            .arg(p)
            .output()
            .unwrap()
    };
    for (src, extra) in [
        (&input, &["--tiff-interleave", "pixel"][..]),
        (&input, &["--tiff-bigtiff", "yes"][..]),
        (&geo, &["--overview-resampling", "nearest"][..]),
    ] {
        let cog = d.join("cog.tif");
        let mut args = vec![
            "convert",
            src.to_str().unwrap(),
            cog.to_str().unwrap(),
            "--cog",
        ];
        args.extend(extra);
        ts(&args);
        let r = validate(&cog);
        let said =
            String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr);
        assert!(
            r.status.success() && said.contains("is a valid cloud optimized GeoTIFF"),
            "{extra:?}: {said}"
        );
    }
    let plain = d.join("plain.tif");
    ts(&["convert", input.to_str().unwrap(), plain.to_str().unwrap()]);
    let r = validate(&plain);
    let said =
        String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() || said.contains("is NOT a valid"),
        "a plain GeoTIFF passed: {said}"
    );
}
