//! GeoTIFF in and out, checked against GDAL: fixtures are made by `gdal_translate` from
//! raw data this test writes, tilestream's readings are compared with GDAL's own
//! (`gdal_translate -of ENVI`), and tilestream's outputs are read back by GDAL, values
//! and georeferencing (`gdalinfo -json`).
//!
//! Needs GDAL's command-line tools (Debian's gdal-bin, installed by `scripts/test`); without
//! them the tests fail and say so.

#![allow(clippy::float_cmp)] // NDVI is compared exactly (NaN with NaN)

use std::process::Command;

use crate::common::gdal::{
    BIN, TYPES, envi, gdal_read, gdal_tif, gdalinfo, georef_of, npy_data, pattern, ts,
};

#[test]
fn reads_gdal_layouts_compressions_and_dtypes_as_gdal_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (150, 203);
    // (creation options, dtypes, bands): tiled and striped, every compression, both
    // interleaves, BigTIFF, predictors
    let cases: [(&[&str], &[&str], usize); 8] = [
        (
            &[
                "TILED=YES",
                "BLOCKXSIZE=64",
                "BLOCKYSIZE=32",
                "COMPRESS=DEFLATE",
                "INTERLEAVE=PIXEL",
            ],
            &["u8", "u16", "i16", "u32", "i32", "f32", "f64"],
            3,
        ),
        (
            &[
                "TILED=YES",
                "BLOCKXSIZE=32",
                "BLOCKYSIZE=48",
                "COMPRESS=LZW",
                "INTERLEAVE=BAND",
                "PREDICTOR=2",
            ],
            &["u16", "i32"],
            4,
        ),
        (
            &[
                "TILED=YES",
                "BLOCKXSIZE=64",
                "BLOCKYSIZE=64",
                "COMPRESS=ZSTD",
                "INTERLEAVE=BAND",
            ],
            &["u16", "f32"],
            2,
        ),
        (
            &["COMPRESS=ZSTD", "PREDICTOR=3", "BLOCKYSIZE=7"],
            &["f32", "f64"],
            2,
        ),
        (&["COMPRESS=PACKBITS", "BLOCKYSIZE=5"], &["u8", "i16"], 1),
        (&["COMPRESS=DEFLATE", "INTERLEAVE=PIXEL"], &["u16"], 4),
        // uncompressed: band-sequential is mapped, pixel-interleaved decoded
        (&["INTERLEAVE=BAND"], &["u16", "f64"], 3),
        (
            &[
                "TILED=YES",
                "COMPRESS=DEFLATE",
                "BIGTIFF=YES",
                "INTERLEAVE=PIXEL",
            ],
            &["i16"],
            2,
        ),
    ];
    let mut n = 0;
    for (co, dtypes, bands) in cases {
        for &dt in dtypes {
            let &(_, code, _) = TYPES.iter().find(|t| t.0 == dt).expect("type");
            let name = format!("c{n}_{dt}");
            n += 1;
            let data = pattern(dt, bands, h, w);
            let raw = envi(dir.path(), &name, code, bands, h, w, &data);
            let tif = dir.path().join(format!("{name}.tif"));
            gdal_tif(&raw, &tif, co);
            let gdal = gdal_read(&tif, dir.path());
            assert_eq!(gdal, data, "GDAL's own reading of {co:?} {dt}");
            let npy = dir.path().join(format!("{name}.npy"));
            // a small budget: many tiles, chunks shared between tiles
            ts(&[
                "convert",
                tif.to_str().expect("utf8"),
                npy.to_str().expect("utf8"),
                "-m",
                "2MiB",
            ]);
            assert!(
                npy_data(&npy) == gdal,
                "tilestream and GDAL read {co:?} {dt} differently"
            );
            let info = ts(&["info", tif.to_str().expect("utf8"), "--json"]);
            let j: serde_json::Value = serde_json::from_str(info.trim()).expect("info json");
            let want_shape: Vec<usize> = if bands == 1 {
                vec![h, w]
            } else {
                vec![bands, h, w]
            };
            assert_eq!(j["shape"], serde_json::json!(want_shape));
            assert_eq!(j["dtype"], dt);
            assert_eq!(j["bands"], bands);
            assert_eq!(j["georef"]["epsg"], 32633);
            assert_eq!(
                j["georef"]["geotransform"],
                serde_json::json!([
                    500_000.0,
                    6000.0 / w as f64,
                    0.0,
                    4_000_000.0,
                    0.0,
                    -5000.0 / h as f64
                ])
            );
        }
    }
}

#[test]
fn writes_tiffs_gdal_reads_back_with_the_same_values_and_georeferencing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (3, 130, 170);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "src", 12, bands, h, w, &data);
    let src = dir.path().join("src.tif");
    gdal_tif(
        &raw,
        &src,
        &["TILED=YES", "COMPRESS=DEFLATE", "INTERLEAVE=PIXEL"],
    );
    let want = georef_of(&src);
    let s = src.to_str().expect("utf8");
    for (i, extra) in [
        vec![],
        vec![
            "--tiff-compress",
            "zstd:3",
            "--tiff-interleave",
            "pixel",
            "--tiff-tile",
            "64",
        ],
        vec![
            "--tiff-compress",
            "none",
            "--tiff-tile",
            "32",
            "--tiff-bigtiff",
            "yes",
        ],
        vec![
            "--tiff-compress",
            "deflate:1",
            "--tiff-interleave",
            "pixel",
            "--tiff-bigtiff",
            "yes",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let out = dir.path().join(format!("out{i}.tif"));
        // (6 MiB: a 512x512 tile of every band being filled, 1.5 MiB, and one in flight)
        let mut args = vec!["convert", s, out.to_str().expect("utf8"), "-m", "6MiB"];
        args.extend(&extra);
        ts(&args);
        assert_eq!(gdal_read(&out, dir.path()), data, "values of {extra:?}");
        assert_eq!(georef_of(&out), want, "georeferencing of {extra:?}");
        let j = gdalinfo(&out);
        let md = &j["metadata"]["IMAGE_STRUCTURE"];
        if extra.contains(&"pixel") {
            assert_eq!(md["INTERLEAVE"], "PIXEL");
        } else {
            assert_eq!(md["INTERLEAVE"], "BAND");
        }
        // and tilestream reads its own output back
        let back = dir.path().join(format!("back{i}.npy"));
        ts(&[
            "convert",
            out.to_str().expect("utf8"),
            back.to_str().expect("utf8"),
        ]);
        assert!(npy_data(&back) == data);
    }
    // a .npy (no georeferencing) becomes a plain TIFF GDAL reads
    let npy = dir.path().join("plain.npy");
    ts(&["convert", s, npy.to_str().expect("utf8")]);
    let plain = dir.path().join("plain.tif");
    ts(&[
        "convert",
        npy.to_str().expect("utf8"),
        plain.to_str().expect("utf8"),
    ]);
    assert_eq!(gdal_read(&plain, dir.path()), data);
    assert!(gdalinfo(&plain)["geoTransform"].is_null());
}

/// Outputs written with each predictor, in every dtype GDAL and tilestream share, planar
/// and pixel-interleaved, with tiles that overhang the image: GDAL reads the values
/// exactly and reports the predictor the file says; `auto` picks the floating-point one
/// for floats and none for integers.
#[test]
fn predicted_outputs_read_back_exactly_in_gdal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (3, 70, 90);
    for (dtype, code, _) in TYPES {
        let data = pattern(dtype, bands, h, w);
        let raw = envi(dir.path(), dtype, code, bands, h, w, &data);
        let src = dir.path().join(format!("{dtype}.tif"));
        gdal_tif(&raw, &src, &["TILED=YES"]);
        let float = dtype.starts_with('f');
        let mut cases = vec![("auto", if float { "3" } else { "" }), ("horizontal", "2")];
        if float {
            cases.push(("float", "3"));
        }
        for (predictor, tag) in cases {
            for interleave in ["band", "pixel"] {
                let out = dir
                    .path()
                    .join(format!("{dtype}-{predictor}-{interleave}.tif"));
                let what = format!("{dtype} {predictor} {interleave}");
                ts(&[
                    "convert",
                    src.to_str().expect("utf8"),
                    out.to_str().expect("utf8"),
                    "--tiff-predictor",
                    predictor,
                    "--tiff-interleave",
                    interleave,
                    "--tiff-tile",
                    "32",
                ]);
                assert!(gdal_read(&out, dir.path()) == data, "values of {what}");
                let md = &gdalinfo(&out)["metadata"]["IMAGE_STRUCTURE"];
                if tag.is_empty() {
                    assert!(md["PREDICTOR"].is_null(), "no predictor in {what}: {md}");
                } else {
                    assert_eq!(md["PREDICTOR"], tag, "{what}");
                }
            }
        }
    }
    // f16 outputs get the floating-point predictor too; GDAL reads them as Float32
    let f32src = dir.path().join("f32.tif");
    let (h_tif, h_npy) = (dir.path().join("h.tif"), dir.path().join("h.npy"));
    for out in [&h_tif, &h_npy] {
        ts(&[
            "cast",
            f32src.to_str().expect("utf8"),
            out.to_str().expect("utf8"),
            "--dtype",
            "f16",
        ]);
    }
    assert_eq!(
        gdalinfo(&h_tif)["metadata"]["IMAGE_STRUCTURE"]["PREDICTOR"],
        "3"
    );
    let want: Vec<f32> = npy_data(&h_npy)
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert!(f32s(&gdal_read(&h_tif, dir.path())) == want, "f16 values");
    // the floating-point predictor on integers, or any predictor on uncompressed tiles,
    // is refused in one line
    let src = dir.path().join("u16.tif");
    for (extra, says) in [
        (
            vec!["--tiff-predictor", "float"],
            "is for f16, f32 and f64 outputs",
        ),
        (
            vec!["--tiff-predictor", "horizontal", "--tiff-compress", "none"],
            "only helps compressed tiles",
        ),
    ] {
        let out = dir.path().join("refused.tif");
        let (s, o) = (src.to_str().expect("utf8"), out.to_str().expect("utf8"));
        let patches = dir.path().join("patches");
        let p = patches.to_str().expect("utf8");
        // refused before anything runs: by the plan too, and before `tiles` makes its
        // directory
        for cmd in [
            vec!["convert", s, o],
            vec!["plan", "convert", s, o],
            vec!["stencil", s, o, "--filter", "gaussian:sigma=1"],
            vec!["plan", "stencil", s, o, "--filter", "gaussian:sigma=1"],
            vec!["tiles", s, p, "--size", "32", "--patch-format", "tif"],
        ] {
            let o = Command::new(BIN)
                .args(&cmd)
                .args(&extra)
                .output()
                .expect("run tilestream");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd:?} {extra:?}: {err}");
            assert!(
                err.contains(says) && err.trim().lines().count() == 1,
                "{cmd:?}: {err}"
            );
            assert!(!out.exists() && !patches.exists(), "{cmd:?}");
        }
    }
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[test]
fn map_gives_the_output_nodata_value_where_an_input_is_nodata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (4, 70, 90);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "scene", 12, bands, h, w, &data);
    let scene = dir.path().join("scene.tif");
    gdal_tif(
        &raw,
        &scene,
        &["TILED=YES", "BLOCKXSIZE=32", "BLOCKYSIZE=32"],
    );
    let s = format!("s={}", scene.to_str().expect("utf8"));
    let band = |b: usize| u16s(&data[b * h * w * 2..(b + 1) * h * w * 2]);
    let (b2, b3) = (band(2), band(3));
    // the scene's nodata value is 0 (gdal_tif): some pixels of band 3 are 0
    let zeros = b3.iter().filter(|&&v| v == 0).count();
    assert!(zeros > 0 && zeros < h * w, "{zeros} nodata pixels");
    let path = |name: &str| dir.path().join(name);
    let map = |out: &str, expr: &str, extra: &[&str]| {
        let o = path(out);
        let mut args = vec![
            "map",
            expr,
            o.to_str().expect("utf8"),
            "--in",
            &s,
            "-m",
            "8MiB",
        ];
        args.extend(extra);
        ts(&args);
        (u16s(&gdal_read(&o, dir.path())), georef_of(&o).2)
    };
    let nd = |v: serde_json::Value| vec![v];

    // an integer output takes the input's nodata value (0) there, and carries it
    let (got, tag) = map("inherit.tif", "s[3] + 1", &["--dtype", "u16"]);
    let want: Vec<u16> = b3.iter().map(|&v| if v == 0 { 0 } else { v + 1 }).collect();
    assert!(got == want, "inherited nodata");
    assert_eq!(tag, nd(serde_json::json!(0.0)));

    // --nodata gives another value, over either band being nodata
    let (got, tag) = map(
        "given.tif",
        "(s[3] + s[2]) / 2",
        &["--dtype", "u16", "--nodata", "65535"],
    );
    let want: Vec<u16> = b3
        .iter()
        .zip(&b2)
        .map(|(&a, &b)| {
            if a == 0 || b == 0 {
                65535
            } else {
                // the f64 mean of two integers cast toward zero: their integer mean, rounded down
                a.midpoint(b)
            }
        })
        .collect();
    assert!(got == want, "--nodata 65535");
    assert_eq!(tag, nd(serde_json::json!(65535.0)));

    // --ignore-nodata computes them like any other, and the output has no nodata
    let (got, tag) = map(
        "ignored.tif",
        "s[3] + 1",
        &["--dtype", "u16", "--ignore-nodata"],
    );
    let want: Vec<u16> = b3.iter().map(|&v| v + 1).collect();
    assert!(got == want, "--ignore-nodata");
    assert_eq!(tag, nd(serde_json::Value::Null));

    // a .npy output of a float type: NaN there
    let npy = path("masked.npy");
    ts(&[
        "map",
        "s[3] * 0.5",
        npy.to_str().expect("utf8"),
        "--in",
        &s,
        "--dtype",
        "f32",
    ]);
    let got = f32s(&npy_data(&npy));
    for (i, (&g, &v)) in got.iter().zip(&b3).enumerate() {
        assert!(
            if v == 0 {
                g.is_nan()
            } else {
                g == f32::from(v) * 0.5
            },
            "pixel {i}: {g} from {v}"
        );
    }

    // refused in one line, nothing written: a value the output type does not hold, and
    // inputs whose nodata values differ with an integer output and no --nodata
    let other = path("other.tif");
    let o = other.to_str().expect("utf8");
    // band 2 with its nodata pixels set to 7 and tagged 7 (no band value is 7)
    ts(&[
        "map", "s[2]", o, "--in", &s, "--dtype", "u16", "--nodata", "7",
    ]);
    assert_eq!(georef_of(&other).2, nd(serde_json::json!(7.0)));
    let out = path("refused.tif");
    let ot = out.to_str().expect("utf8");
    let t = format!("t={o}");
    for (args, says) in [
        (
            vec![
                "map", "s[3]", ot, "--in", &s, "--dtype", "u8", "--nodata", "300",
            ],
            "nodata 300 does not fit the u8 output: give an integer from 0 to 255",
        ),
        (
            vec![
                "map", "s[3]", ot, "--in", &s, "--dtype", "f16", "--nodata", "-9999",
            ],
            "nodata -9999 is not exactly representable in f16 (it would be -10000)",
        ),
        (
            vec![
                "map", "s[3] + t", ot, "--in", &s, "--in", &t, "--dtype", "u16",
            ],
            "(s[3] 0, t 7) take the output's nodata value, and a u16 output holds no such",
        ),
        (
            // refused by the plan as by the run
            vec![
                "plan", "map", "s[3] + t", ot, "--in", &s, "--in", &t, "--dtype", "u16",
            ],
            "give one with --nodata VALUE",
        ),
    ] {
        let o = Command::new(BIN)
            .args(&args)
            .output()
            .expect("run tilestream");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "{args:?}");
    }
    // with --nodata both are masked
    ts(&[
        "map", "s[3] + t", ot, "--in", &s, "--in", &t, "--dtype", "u16", "--nodata", "1",
    ]);
    let got = u16s(&gdal_read(&out, dir.path()));
    let want: Vec<u16> = b3
        .iter()
        .zip(&b2)
        .map(|(&a, &b)| {
            if a == 0 || b == 0 {
                1
            } else {
                a.saturating_add(b)
            }
        })
        .collect();
    assert!(got == want, "two masked inputs");

    // affine masks as map does: an integer output takes the input's nodata value (0)
    let refl = path("refl.tif");
    let r = refl.to_str().expect("utf8");
    let scene_path = scene.to_str().expect("utf8");
    ts(&[
        "affine", scene_path, r, "--scale", "0.003", "--offset", "1", "--dtype", "u8",
    ]);
    let want: Vec<u8> = u16s(&data)
        .iter()
        .map(|&v| {
            if v == 0 {
                0
            } else {
                f64::from(v).mul_add(0.003, 1.0) as u8
            }
        })
        .collect();
    assert!(gdal_read(&refl, dir.path()) == want, "masked affine");
    assert_eq!(georef_of(&refl).2, vec![serde_json::json!(0.0); bands]);
    // and the plan refuses what the run refuses
    for cmd in [&["affine"][..], &["plan", "affine"][..]] {
        let o = Command::new(BIN)
            .args(cmd)
            .args([scene_path, ot, "--dtype", "u8", "--nodata", "300"])
            .output()
            .expect("run tilestream");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("nodata 300 does not fit the u8 output"),
            "{cmd:?}: {err}"
        );
    }

    // a library caller that hands the engine the scene's georeferencing, nodata included:
    // an unmasked map's output carries no nodata (0 would be read as missing)
    let scene_file = tilestream::TensorFile::open(&scene).expect("open scene");
    let e = tilestream::Engine::new(tilestream::MemoryBudget::new(64 << 20))
        .expect("engine")
        .with_georef(tilestream::Engine::georef_of(&scene_file));
    let plain = path("plain.tif");
    let rule = tilestream::MapNodata {
        ignore_inputs: true,
        ..Default::default()
    };
    e.map_with(
        "s[3] - 250",
        &[("s", &scene_file)],
        &plain,
        Some(tilestream::DType::F32),
        &rule,
    )
    .expect("map");
    assert_eq!(georef_of(&plain).2, nd(serde_json::Value::Null));
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn ndvi_and_gaussian_of_a_geotiff_keep_its_georeferencing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (4, 160, 190);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "scene", 12, bands, h, w, &data);
    let scene = dir.path().join("scene.tif");
    gdal_tif(
        &raw,
        &scene,
        &[
            "TILED=YES",
            "BLOCKXSIZE=64",
            "BLOCKYSIZE=64",
            "COMPRESS=DEFLATE",
            "INTERLEAVE=PIXEL",
        ],
    );
    let want = georef_of(&scene);
    let s = scene.to_str().expect("utf8");
    // NDVI = (nir - red) / (nir + red), bands 4 and 3, against an f64 oracle here
    let ndvi = dir.path().join("ndvi.tif");
    ts(&[
        "map",
        "(s[3] - s[2]) / (s[3] + s[2])",
        ndvi.to_str().expect("utf8"),
        "--in",
        &format!("s={s}"),
        "--dtype",
        "f32",
        "-m",
        // a 512x512 f32 tile being filled (1 MiB) and one in flight (2 MiB)
        "4MiB",
    ]);
    let px = |b: usize, i: usize| {
        f64::from(u16::from_le_bytes([
            data[(b * h * w + i) * 2],
            data[(b * h * w + i) * 2 + 1],
        ]))
    };
    // pixels where either band is the scene's nodata value (0) are masked: NaN
    let oracle: Vec<f32> = (0..h * w)
        .map(|i| match (px(3, i), px(2, i)) {
            (nir, red) if nir == 0.0 || red == 0.0 => f32::NAN,
            (nir, red) => ((nir - red) / (nir + red)) as f32,
        })
        .collect();
    // the mask changes results: a pixel with one band 0 has a finite NDVI (1 or -1)
    assert!((0..h * w).any(|i| (px(3, i) == 0.0) != (px(2, i) == 0.0)));
    let got = f32s(&gdal_read(&ndvi, dir.path()));
    assert_eq!(got.len(), oracle.len());
    for (i, (a, b)) in got.iter().zip(&oracle).enumerate() {
        assert!(
            a == b || (a.is_nan() && b.is_nan()),
            "ndvi pixel {i}: {a} vs {b}"
        );
    }
    // placed where the scene is; the scene's nodata value (0) is not the NDVI's, where 0
    // is a valid result: the NDVI's is NaN, the value of its masked pixels
    let (gt, wkt, nodata) = georef_of(&ndvi);
    assert_eq!((gt, wkt), (want.0.clone(), want.1.clone()));
    assert!(
        want.2.iter().all(|v| v.as_f64() == Some(0.0)),
        "the scene has nodata 0: {:?}",
        want.2
    );
    assert_eq!(nodata, vec![serde_json::json!("NaN")], "NDVI nodata");

    // a gaussian of the decoded GeoTIFF equals the same gaussian of the data as .npy
    let npy = dir.path().join("scene.npy");
    ts(&["convert", s, npy.to_str().expect("utf8")]);
    let g_tif = dir.path().join("g.tif");
    let g_npy = dir.path().join("g.npy");
    ts(&[
        "stencil",
        s,
        g_tif.to_str().expect("utf8"),
        "--filter",
        "gaussian:sigma=2",
        "--dtype",
        "f32",
        "-m",
        "4MiB",
    ]);
    ts(&[
        "stencil",
        npy.to_str().expect("utf8"),
        g_npy.to_str().expect("utf8"),
        "--filter",
        "gaussian:sigma=2",
        "--dtype",
        "f32",
        "-m",
        "64MiB",
    ]);
    assert!(gdal_read(&g_tif, dir.path()) == npy_data(&g_npy));
    // a filter computes new values: georeferenced as the scene, without its nodata
    let (gt, wkt, nodata) = georef_of(&g_tif);
    assert_eq!((&gt, &wkt), (&want.0, &want.1));
    assert!(
        nodata.iter().all(serde_json::Value::is_null),
        "gaussian nodata {nodata:?}"
    );
}

#[test]
fn grid_changes_and_impossible_outputs_are_explicit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 70);
    let data = pattern("u8", 1, h, w);
    let raw = envi(dir.path(), "img", 1, 1, h, w, &data);
    let img = dir.path().join("img.tif");
    gdal_tif(&raw, &img, &["TILED=YES", "COMPRESS=LZW"]);
    let s = img.to_str().expect("utf8");
    // transpose: no georeferencing, and a note saying so
    let t = dir.path().join("t.tif");
    let msg = ts(&["transpose", s, t.to_str().expect("utf8")]);
    assert!(msg.contains("without the input's georeferencing"), "{msg}");
    assert!(gdalinfo(&t)["geoTransform"].is_null());
    let tr = gdal_read(&t, dir.path());
    for y in 0..h {
        for x in 0..w {
            assert_eq!(tr[x * h + y], data[y * w + x]);
        }
    }
    // a reduction is not on the image's grid: written without georeferencing, said so
    let r = dir.path().join("colmean.tif");
    let out = Command::new(BIN)
        .args([
            "reduce",
            s,
            r.to_str().expect("utf8"),
            "--op",
            "mean",
            "--axis",
            "0",
        ])
        .output()
        .expect("spawn");
    // a 1-D result is no image: a clear error, nothing written
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("GeoTIFF holds a (rows, cols)"));
    assert!(!r.exists());
    // bool has no TIFF sample type
    let b = dir.path().join("b.tif");
    let out = Command::new(BIN)
        .args([
            "map",
            "x > 3",
            b.to_str().expect("utf8"),
            "--in",
            &format!("x={s}"),
            "--dtype",
            "bool",
        ])
        .output()
        .expect("spawn");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot hold bool"));
    assert!(!b.exists());
    // a codec tilestream does not decode (JPEG-XL, which this GDAL does not write: its
    // Compression tag set by hand) is refused with a way out
    let jxl = dir.path().join("jxl.tif");
    gdal_tif(&raw, &jxl, &["COMPRESS=DEFLATE"]);
    set_compression(&jxl, 50002);
    let out = Command::new(BIN)
        .args(["info", jxl.to_str().expect("utf8")])
        .output()
        .expect("spawn");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("jpeg-xl") && err.contains("gdal_translate"),
        "{err}"
    );
}

#[test]
fn geotiff_patches_are_each_georeferenced_at_their_own_origin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (2, 150, 190);
    let data = pattern("i16", bands, h, w);
    let raw = envi(dir.path(), "scene", 2, bands, h, w, &data);
    let scene = dir.path().join("scene.tif");
    gdal_tif(&raw, &scene, &["TILED=YES", "COMPRESS=ZSTD"]);
    let gt = georef_of(&scene);
    let g: Vec<f64> =
        gt.0.as_array()
            .expect("gt")
            .iter()
            .map(|v| v.as_f64().expect("f64"))
            .collect();
    let out = dir.path().join("patches");
    ts(&[
        "tiles",
        scene.to_str().expect("utf8"),
        out.to_str().expect("utf8"),
        "--size",
        "64",
        "--overlap",
        "8",
        "--patch-format",
        "tif",
        "-m",
        "8MiB",
    ]);
    // the plan holds each patch's encoder (tiles raw and compressed), only for GeoTIFF
    let plan = |format: &str| {
        ts(&[
            "plan",
            "tiles",
            scene.to_str().expect("utf8"),
            out.to_str().expect("utf8"),
            "--size",
            "64",
            "--overlap",
            "8",
            "--patch-format",
            format,
            "-m",
            "8MiB",
        ])
    };
    assert!(
        plan("tif").contains("GeoTIFF encoding of a patch"),
        "{}",
        plan("tif")
    );
    assert!(!plan("npy").contains("GeoTIFF encoding"), "{}", plan("npy"));
    let index = std::fs::read_to_string(out.join("index.csv")).expect("index");
    let mut n = 0;
    for line in index.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (r0, c0): (usize, usize) = (f[1].parse().expect("row"), f[2].parse().expect("col"));
        let p = out.join(f[0]);
        let (pgt, wkt, nodata) = georef_of(&p);
        assert_eq!(wkt, gt.1, "{line}");
        assert_eq!(nodata, gt.2, "{line}");
        let want = serde_json::json!([
            g[0] + c0 as f64 * g[1],
            g[1],
            0.0,
            g[3] + r0 as f64 * g[5],
            0.0,
            g[5]
        ]);
        assert_eq!(pgt, want, "{line}");
        let got = gdal_read(&p, dir.path());
        let mut expect = Vec::new();
        for b in 0..bands {
            for y in r0..r0 + 64 {
                let at = ((b * h + y) * w + c0) * 2;
                expect.extend_from_slice(&data[at..at + 64 * 2]);
            }
        }
        assert!(got == expect, "pixels of {line}");
        n += 1;
    }
    // stride 56: 3 patch rows (0, 56, 86 shifted to the edge) x 4 columns (0, 56, 112, 126)
    assert_eq!(n, 12);
}

#[test]
fn format_by_option_or_by_content_whatever_the_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (50, 60);
    let data = pattern("f32", 1, h, w);
    let raw = envi(dir.path(), "img", 4, 1, h, w, &data);
    let tif = dir.path().join("img.tif");
    gdal_tif(&raw, &tif, &["TILED=YES", "COMPRESS=DEFLATE"]);
    // a TIFF under another name is recognised by its first bytes
    let odd = dir.path().join("img.dat");
    std::fs::copy(&tif, &odd).expect("copy");
    let info = ts(&["info", odd.to_str().expect("utf8"), "--json"]);
    let j: serde_json::Value = serde_json::from_str(info.trim()).expect("json");
    assert_eq!(j["format"], "geotiff");
    // --format tif writes a GeoTIFF whatever the output is called
    let out = dir.path().join("copy.img");
    ts(&[
        "convert",
        odd.to_str().expect("utf8"),
        out.to_str().expect("utf8"),
        "--format",
        "tif",
    ]);
    assert_eq!(gdalinfo(&out)["driverShortName"], "GTiff");
    assert_eq!(gdal_read(&out, dir.path()), data);
    assert_eq!(georef_of(&out), georef_of(&tif));
    // --format npy writes a .npy header under any name
    let npy = dir.path().join("copy.bin");
    ts(&[
        "convert",
        tif.to_str().expect("utf8"),
        npy.to_str().expect("utf8"),
        "--format",
        "npy",
    ]);
    assert!(npy_data(&npy) == data);
    let info = ts(&["info", npy.to_str().expect("utf8"), "--json"]);
    assert!(info.contains("\"npy 1.0\""), "{info}");
    // an unknown format is refused before anything is written
    let bad = dir.path().join("x.out");
    let r = Command::new(BIN)
        .args([
            "convert",
            tif.to_str().expect("utf8"),
            bad.to_str().expect("utf8"),
            "--format",
            "hdf5",
        ])
        .output()
        .expect("spawn");
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown output format"));
    assert!(!bad.exists());
}

#[test]
fn each_compressed_chunk_is_decoded_once_per_pass() {
    use tilestream::spec::stencil::{Filter, Stencil};
    use tilestream::{DType, Engine, MemoryBudget, TensorFile};
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (4, 300, 700);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "scene", 12, bands, h, w, &data);
    let scene = dir.path().join("scene.tif");
    // 5 chunk rows of 11 pixel-interleaved 64x64 tiles
    gdal_tif(
        &raw,
        &scene,
        &[
            "TILED=YES",
            "BLOCKXSIZE=64",
            "BLOCKYSIZE=64",
            "COMPRESS=DEFLATE",
            "INTERLEAVE=PIXEL",
        ],
    );
    let engine = Engine::new(MemoryBudget::parse("3MiB").expect("budget"))
        .expect("engine")
        .with_durable(false)
        .with_max_tile_bytes(96 << 10);
    // NDVI: tiles of rows that do not fall on chunk rows, two bands of every chunk
    let x = TensorFile::open(&scene).expect("open");
    let c = x.chunked().expect("decoded, not mapped");
    assert_eq!(c.num_chunks(), 55);
    let report = engine
        .map(
            "(s[3] - s[2]) / (s[3] + s[2])",
            &[("s", &x)],
            dir.path().join("ndvi.npy"),
            Some(DType::F32),
        )
        .expect("ndvi");
    assert!(report.tiles > 5, "tiles: {}", report.tiles);
    assert_eq!(c.decoded_chunks(), 55, "{} tiles", report.tiles);
    // a gaussian over halo'd tiles: each chunk decoded once as well
    let y = TensorFile::open(&scene).expect("open");
    let stencil = Stencil::new(
        Filter::parse("gaussian:sigma=2", |_| unreachable!()).expect("filter"),
        "reflect".parse().expect("boundary"),
    )
    .expect("stencil");
    let report = engine
        .stencil(&y, dir.path().join("g.npy"), &stencil, Some(DType::F32))
        .expect("gaussian");
    assert!(report.tiles > 5, "tiles: {}", report.tiles);
    let d = y.chunked().expect("decoded").decoded_chunks();
    assert_eq!(d, 55, "{} tiles", report.tiles);
}

/// The temporary files of a run in `dir`, with their first bytes and lengths.
fn temp_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>, u64)> {
    let mut v: Vec<(String, Vec<u8>, u64)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry"))
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".tilestream-tmp") && !n.contains(".journal")
        })
        .map(|e| {
            let bytes = std::fs::read(e.path()).expect("read");
            let head = bytes[..bytes.len().min(4)].to_vec();
            (
                e.file_name().to_string_lossy().into_owned(),
                head,
                bytes.len() as u64,
            )
        })
        .collect();
    v.sort();
    v
}

/// A GeoTIFF output of a flat run (map, cast, convert...) is encoded as the run writes
/// it when the budget holds a strip of output tiles: killed halfway, the only temporary
/// output beside it is the TIFF being built (no raw staging file); resumed, it is byte
/// for byte the file of an uninterrupted run, and GDAL reads the values the .npy output
/// has. Below the budget its encoder needs, the run is refused (by `tilestream plan`
/// too), never staged raw.
/// The same for a pixel-interleaved output, whose tiles hold every band: the plan visits
/// the bands of each row of tiles one after another, in tiles of rows dividing the TIFF's
/// tile height.
#[test]
fn geotiff_outputs_stream_without_staging_and_resume_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_str().expect("utf8").to_string();
    let (bands, h, w) = (3, 300, 1100);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "src", 12, bands, h, w, &data);
    gdal_tif(
        &raw,
        &dir.path().join("src.tif"),
        &["TILED=YES", "COMPRESS=LZW"],
    );
    let job = |out: &str, mem: &str, interleave: &str| -> Vec<String> {
        [
            "map",
            "x*2+1",
            out,
            "--in",
            &format!("x={}", p("src.tif")),
            "--dtype",
            "f32",
            "-m",
            mem,
            "--tiff-tile",
            "64",
            "--tiff-interleave",
            interleave,
            "--progress",
            "never",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect()
    };
    // the values, as a .npy
    crate::common::ok(
        &job(&p("want.npy"), "64MiB", "band")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let want = npy_data(&dir.path().join("want.npy"));
    let raw_bytes = (bands * h * w * 4) as u64;
    // streamed at 2 MiB (a strip is 64x1100 f32, 275 KiB: within a quarter of the
    // budget; 825 KiB with every band, within a quarter of 4 MiB), killed after tiles 0,
    // 3 and 7 (band: tiles of rows 25 high) or 0, 5 and 11 (pixel: tiles of 32 rows, the
    // bands of a row of tiles complete it after 6), then resumed; refused at 830 KiB (the
    // decode scratch of the input's 3x256x256 chunks takes 792 KiB of it, leaving no
    // room for a tile being filled and one in flight; it was staged raw before)
    for (interleave, streamed_at, kills) in
        [("band", "2MiB", [0, 3, 7]), ("pixel", "4MiB", [0, 5, 11])]
    {
        let job = |out: &str, mem: &str| job(out, mem, interleave);
        {
            let mem = streamed_at;
            let out = p(&format!("o{mem}.tif"));
            crate::common::ok(
                &job(&out, mem)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            let whole = std::fs::read(&out).expect("read");
            std::fs::remove_file(&out).expect("rm");
            for kill in kills.map(|k| format!("written:0:{k}")) {
                let kill = kill.as_str();
                crate::common::kill_then_resume(&job(&out, mem), kill, || {
                    let temps = temp_files(dir.path());
                    assert_eq!(temps.len(), 1, "{interleave} {mem} {kill}: {temps:?}");
                    let (_, head, len) = &temps[0];
                    assert_eq!(
                        head.as_slice(),
                        b"II*\0",
                        "{interleave} {mem} {kill}: not a TIFF being built"
                    );
                    assert!(
                        *len < raw_bytes,
                        "{interleave} {mem} {kill}: {len} bytes, raw is {raw_bytes}"
                    );
                });
                assert!(
                    std::fs::read(&out).expect("read") == whole,
                    "{interleave} {mem} resumed after {kill}: differs from an uninterrupted run"
                );
                assert!(temp_files(dir.path()).is_empty());
                std::fs::remove_file(&out).expect("rm");
            }
            let out = dir.path().join("check.tif");
            std::fs::write(&out, &whole).expect("write");
            assert!(
                gdal_read(&out, dir.path()) == want,
                "{interleave}: GDAL reads other values"
            );
            std::fs::remove_file(&out).expect("rm");
        }
        // refused, not staged: by the run, and by `tilestream plan` before it
        let small = job(&p("o830KiB.tif"), "830KiB");
        let small: Vec<&str> = small.iter().map(String::as_str).collect();
        crate::common::refused_to_stream(&small, dir.path());
        let mut plan = vec!["plan"];
        plan.extend(
            small
                .iter()
                .filter(|a| **a != "--progress" && **a != "never"),
        );
        crate::common::refused_to_stream(&plan, dir.path());
    }
}

/// The number of tiles `tilestream plan` shows for `job` (a command and its arguments),
/// and whether it encodes the output as it writes it along boxes cut to its chunks.
pub(crate) fn box_plan_of(job: &[String]) -> (usize, bool) {
    let mut args = vec!["plan".to_string()];
    args.extend(
        job.iter()
            .filter(|a| *a != "--progress" && *a != "never")
            .cloned(),
    );
    let text = crate::common::ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let tiles = text
        .lines()
        .find_map(|l| l.strip_prefix("tiles:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tiles in the plan: {text}"));
    let along = text.contains("boxes cut along them") || text.contains("boxes cut within them");
    (tiles, along)
}

/// Filters and transposes (box plans) encode a GeoTIFF output as they write it too: at
/// budgets that give 2-D blocks or full-width rows, over a pixel-interleaved LZW input
/// (its bands visited together), into band-sequential and pixel-interleaved outputs
/// (whose tiles hold every band: the bands of each box are visited together), killed
/// early, midway and late the only temporary output beside the destination is the TIFF
/// being built (no raw staging file); resumed, it is byte for byte the file of an
/// uninterrupted run, and GDAL reads the values of the same job written as .npy.
#[test]
fn box_plan_geotiff_outputs_stream_without_staging_and_resume_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_str().expect("utf8").to_string();
    let (bands, h, w) = (3, 300, 1100);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "src", 12, bands, h, w, &data);
    let src = p("src.tif");
    gdal_tif(
        &raw,
        std::path::Path::new(&src),
        &["TILED=YES", "COMPRESS=LZW", "INTERLEAVE=PIXEL"],
    );
    let gauss = ["--filter", "gaussian:sigma=1.5", "--dtype", "f32"];
    for (op, extra, out_bytes) in [
        ("stencil", &gauss[..], bands * h * w * 4),
        ("transpose", &[][..], bands * h * w * 2),
    ] {
        for (interleave, mem) in [("band", "3MiB"), ("band", "6MiB"), ("pixel", "6MiB")] {
            let job = |out: &str| -> Vec<String> {
                let mut v = vec![op.to_string(), src.clone(), out.to_string()];
                v.extend(extra.iter().map(|s| (*s).to_string()));
                v.extend(
                    [
                        "-m",
                        mem,
                        "--tiff-tile",
                        "64",
                        "--tiff-interleave",
                        interleave,
                        "--progress",
                        "never",
                    ]
                    .iter()
                    .map(|s| (*s).to_string()),
                );
                v
            };
            let mem = format!("{interleave} {mem}");
            let out = p("o.tif");
            let (tiles, along) = box_plan_of(&job(&out));
            assert!(
                along && tiles >= 6,
                "{op} {mem}: {tiles} tiles, along {along}"
            );
            let want_path = p("want.npy");
            crate::common::ok(
                &job(&want_path)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            let want = npy_data(std::path::Path::new(&want_path));
            crate::common::ok(&job(&out).iter().map(String::as_str).collect::<Vec<_>>());
            let whole = std::fs::read(&out).expect("read");
            let check = dir.path().join("check.tif");
            std::fs::rename(&out, &check).expect("mv");
            assert!(
                gdal_read(&check, dir.path()) == want,
                "{op} {mem}: GDAL reads other values"
            );
            for k in [0, 2, tiles / 2, tiles - 2] {
                let kill = format!("written:0:{k}");
                crate::common::kill_then_resume(&job(&out), &kill, || {
                    let temps = temp_files(dir.path());
                    assert_eq!(temps.len(), 1, "{op} {mem} {kill}: {temps:?}");
                    let (_, head, len) = &temps[0];
                    assert_eq!(head.as_slice(), b"II*\0", "{op} {mem} {kill}: not a TIFF");
                    assert!(
                        *len < out_bytes as u64,
                        "{op} {mem} {kill}: {len} bytes, raw is {out_bytes}"
                    );
                });
                assert!(
                    std::fs::read(&out).expect("read") == whole,
                    "{op} {mem} resumed after {kill}: differs from an uninterrupted run"
                );
                assert!(temp_files(dir.path()).is_empty());
                std::fs::remove_file(&out).expect("rm");
            }
        }
    }
}

/// A reduction's GeoTIFF output is encoded from the result in memory as it is written
/// (a pixel-interleaved one written row by row, the bands of each row together): killed
/// just before the rename, the only temporary output beside the destination is the TIFF
/// (no raw staging file beside it), and GDAL reads the values of the same reduction
/// written as .npy.
#[test]
fn reduction_geotiff_outputs_are_encoded_without_staging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_str().expect("utf8").to_string();
    for (shape, axis, interleave, mem) in [
        ("3x300x1100", "0", "band", "64MiB"),
        ("3x300x1100x2", "3", "pixel", "64MiB"),
        // the result (7.6 MiB accumulated, 3.8 MiB as f32) and a row of its tiles (3 x
        // 64 x 1100 f32, 825 KiB)
        ("3x300x1100x2", "3", "pixel", "8MiB"),
    ] {
        crate::common::ok(&[
            "gen",
            &p("x.npy"),
            "--shape",
            shape,
            "--dtype",
            "f32",
            "--seed",
            "3",
        ]);
        let job = |out: &str| -> Vec<String> {
            [
                "reduce",
                &p("x.npy"),
                out,
                "--op",
                "mean",
                "--axis",
                axis,
                "--dtype",
                "f32",
                "-m",
                mem,
                "--tiff-tile",
                "64",
                "--tiff-interleave",
                interleave,
                "--progress",
                "never",
            ]
            .iter()
            .map(|s| (*s).to_string())
            .collect()
        };
        crate::common::ok(
            &job(&p("want.npy"))
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let want = npy_data(&dir.path().join("want.npy"));
        let out = p("m.tif");
        let o = crate::common::bin()
            .args(job(&out))
            .env("TILESTREAM_FAULT_KILL_AT", "synced")
            .output()
            .expect("run");
        assert!(
            !o.status.success(),
            "{shape} {interleave} {mem}: not killed"
        );
        let temps = temp_files(dir.path());
        assert_eq!(temps.len(), 1, "{shape} {interleave} {mem}: {temps:?}");
        assert_eq!(
            temps[0].1.as_slice(),
            b"II*\0",
            "{shape} {interleave} {mem}: not a TIFF: {temps:?}"
        );
        crate::common::ok(&job(&out).iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            gdal_read(std::path::Path::new(&out), dir.path()) == want,
            "{shape} {interleave} {mem}: GDAL reads other values"
        );
        std::fs::remove_file(&out).expect("rm");
    }
}

/// An element-wise run whose budget cannot hold a row of its output's tiles (what its
/// flat plan needs to encode them as it writes them) runs in boxes cut along the tiles
/// instead (`tilestream plan` says so): one input, two planes of one input, a
/// pixel-interleaved output whose tiles hold every band, `gen` (values drawn for each
/// position of a box's rows), `standardize`'s second pass (columns of the box's rows),
/// and a budget below a box of one whole tile (boxes that are pieces of a tile, one
/// tile's after another). Killed early and midway, the only
/// temporary output is the TIFF being built; resumed, it is byte for byte the file of an
/// uninterrupted run; GDAL reads the values of the same job written as .npy at a large
/// budget.
#[test]
fn element_wise_runs_below_a_row_of_tiles_stream_in_boxes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_str().expect("utf8").to_string();
    crate::common::ok(&[
        "gen",
        &p("x.npy"),
        "--shape",
        "3x300x1100",
        "--dtype",
        "f32",
        "--seed",
        "6",
    ]);
    crate::common::ok(&[
        "gen",
        &p("y.npy"),
        "--shape",
        "300x1100",
        "--dtype",
        "f32",
        "--seed",
        "7",
    ]);
    // a compressed input: its decode scratch (one 3x256x256 f32 chunk) takes 1.5 MiB
    crate::common::ok(&[
        "convert",
        &p("x.npy"),
        &p("xin.tif"),
        "--tiff-tile",
        "256",
        "--tiff-interleave",
        "pixel",
    ]);
    let x = format!("x={}", p("x.npy"));
    let xin = format!("x={}", p("xin.tif"));
    let gen_args = ["gen", "OUT", "--shape", "3x300x1100", "--seed", "9"];
    // a row of 64-high f32 tiles is 275 KiB a band (825 KiB pixel-interleaved): more
    // than three quarters of these budgets, while boxes of 64x64 tiles fit (at 128 KiB
    // only pieces of one: 32x64; from the compressed input at 2 MiB, with one tile in
    // flight: a quarter of the budget's worth would not fit); standardize writes in its
    // second pass (pass 1)
    let cases: [(&[&str], &str, &str, usize, usize); 8] = [
        (&["map", "x*2+1", "OUT", "--in", &xin], "band", "2MiB", 3, 0),
        (&["map", "x*2+1", "OUT", "--in", &x], "band", "384KiB", 3, 0),
        (
            &["map", "x[0]-x[1]*0.5", "OUT", "--in", &x],
            "band",
            "384KiB",
            1,
            0,
        ),
        (&["convert", &p("x.npy"), "OUT"], "pixel", "1MiB", 3, 0),
        (&["map", "x*2+1", "OUT", "--in", &x], "band", "128KiB", 3, 0),
        (&gen_args, "band", "384KiB", 3, 0),
        (&gen_args, "pixel", "160KiB", 3, 0),
        (&["standardize", &p("y.npy"), "OUT"], "band", "384KiB", 1, 1),
    ];
    for (op, interleave, mem, bands, pass) in cases {
        let job = |out: &str, mem: &str| -> Vec<String> {
            let mut v: Vec<String> = op
                .iter()
                .map(|s| if *s == "OUT" { out } else { s }.to_string())
                .collect();
            v.extend(
                [
                    "--dtype",
                    "f32",
                    "-m",
                    mem,
                    "--tiff-tile",
                    "64",
                    "--tiff-interleave",
                    interleave,
                    "--progress",
                    "never",
                ]
                .iter()
                .map(|s| (*s).to_string()),
            );
            v
        };
        let what = format!("{} {} {interleave} {mem}", op[0], op[1]);
        let out = p("o.tif");
        // (tilestream plan shows standardize's first pass)
        let tiles = if op[0] == "standardize" {
            6
        } else {
            let (tiles, along) = box_plan_of(&job(&out, mem));
            assert!(along && tiles >= 6, "{what}: {tiles} tiles, along {along}");
            tiles
        };
        let want_path = p("want.npy");
        crate::common::ok(
            &job(&want_path, "64MiB")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let want = npy_data(std::path::Path::new(&want_path));
        let o = crate::common::bin()
            .args(job(&out, mem))
            .output()
            .expect("run");
        assert!(
            o.status.success(),
            "{what}: failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let whole = std::fs::read(&out).expect("read");
        let check = dir.path().join("check.tif");
        std::fs::rename(&out, &check).expect("mv");
        assert!(
            gdal_read(&check, dir.path()) == want,
            "{what}: GDAL reads other values"
        );
        let raw_bytes = (bands * 300 * 1100 * 4) as u64;
        for k in [0, tiles / 2] {
            let kill = format!("written:{pass}:{k}");
            crate::common::kill_then_resume(&job(&out, mem), &kill, || {
                let temps = temp_files(dir.path());
                assert_eq!(temps.len(), 1, "{what} {kill}: {temps:?}");
                let (_, head, len) = &temps[0];
                assert_eq!(head.as_slice(), b"II*\0", "{what} {kill}: not a TIFF");
                assert!(*len < raw_bytes, "{what} {kill}: {len} bytes");
            });
            assert!(
                std::fs::read(&out).expect("read") == whole,
                "{what} resumed after {kill}: differs from an uninterrupted run"
            );
            assert!(temp_files(dir.path()).is_empty());
            std::fs::remove_file(&out).expect("rm");
        }
    }
}

/// Runs that cannot encode their GeoTIFF or Zarr output as they write it within the
/// budget are refused before they write anything (by `tilestream plan` too), never
/// staged raw to be encoded later: a matmul (a flat plan with no box fallback) below a
/// row of its output's tiles, a filter below a box one row tall and one tile wide.
#[test]
fn outputs_that_cannot_be_encoded_as_written_are_refused_not_staged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| dir.path().join(n).to_str().expect("utf8").to_string();
    for (name, shape) in [
        ("x.npy", "2000x64"),
        ("w.npy", "64x32"),
        ("img.npy", "300x700"),
    ] {
        crate::common::ok(&["gen", &p(name), "--shape", shape, "--progress", "never"]);
    }
    let jobs: Vec<Vec<String>> = vec![
        // a row of 512x512 f32 tiles (2000x32: 64 KiB) and one in flight (2 MiB)
        vec![
            "matmul",
            &p("x.npy"),
            &p("w.npy"),
            &p("p.tif"),
            "-m",
            "1MiB",
        ],
        vec![
            "matmul",
            &p("x.npy"),
            &p("w.npy"),
            &p("p.zarr"),
            "-m",
            "200KiB",
        ],
        // a box one row tall, 512 columns wide, with its halo rows, and a tile in flight
        vec![
            "stencil",
            &p("img.npy"),
            &p("g.tif"),
            "--filter",
            "gaussian:sigma=2",
            "-m",
            "2MiB",
        ],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(str::to_string).collect())
    .collect();
    for job in &jobs {
        let mut run: Vec<&str> = job.iter().map(String::as_str).collect();
        run.extend(["--progress", "never"]);
        crate::common::refused_to_stream(&run, dir.path());
        let mut plan = vec!["plan"];
        plan.extend(job.iter().map(String::as_str));
        crate::common::refused_to_stream(&plan, dir.path());
        // and with room for the encoder, the same job runs
        let mut big = run.clone();
        let m = big.iter().position(|a| *a == "-m").expect("-m") + 1;
        big[m] = "64MiB";
        crate::common::ok(&big);
    }
}

/// A compressed input's decode scratch gives way to the output's encoder: converting a
/// 3-band LZW GeoTIFF in 256x256 tiles (384 KiB decoded each) to a Zarr store of 512x512
/// chunks (one being filled and one in flight: 2 MiB) at 4 MiB, where a slab of chunks
/// does not fit and the decode scratch sized from the budget (2 MiB) leaves no room for
/// the encoder, runs in boxes along the chunks with one input tile decoded at a time and
/// no cache (`tilestream plan` says so), and the store holds the input's values; a
/// gaussian and a transpose of it into Zarr stores at 4 MiB too, with the values of the
/// same jobs over the .npy.
#[test]
fn a_compressed_input_decodes_one_chunk_at_a_time_to_leave_the_encoder_room() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (3, 1000, 1860);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "src", 12, bands, h, w, &data);
    let src = dir.path().join("src.tif");
    gdal_tif(&raw, &src, &["TILED=YES", "COMPRESS=LZW"]);
    let s = src.to_str().expect("utf8");
    let out = dir.path().join("o.zarr");
    let o = out.to_str().expect("utf8");
    let plan = ts(&["plan", "convert", s, o, "-m", "4MiB"]);
    assert!(
        plan.contains("in boxes along the output's chunks")
            && plan.contains("1 at a time")
            && plan.contains("no chunk cache"),
        "{plan}"
    );
    ts(&["convert", s, o, "-m", "4MiB"]);
    let back = dir.path().join("back.npy");
    ts(&["convert", o, back.to_str().expect("utf8")]);
    assert!(npy_data(&back) == data, "the store holds other values");
    // a filter and a transpose the same way (their boxes along the store's chunks), equal
    // to the same jobs from the .npy at 64 MiB
    let npy = dir.path().join("src.npy");
    ts(&["convert", s, npy.to_str().expect("utf8")]);
    let n = npy.to_str().expect("utf8");
    for (i, job) in [
        vec!["stencil", "IN", "OUT", "--filter", "gaussian:sigma=1"],
        vec!["transpose", "IN", "OUT"],
    ]
    .into_iter()
    .enumerate()
    {
        let args = |input: &str, out: &str, mem: &str| -> Vec<String> {
            let mut v: Vec<String> = job
                .iter()
                .map(|a| match *a {
                    "IN" => input.to_string(),
                    "OUT" => out.to_string(),
                    a => a.to_string(),
                })
                .collect();
            v.extend(["-m".to_string(), mem.to_string()]);
            v
        };
        let small = dir.path().join(format!("small{i}.zarr"));
        let want = dir.path().join(format!("want{i}.npy"));
        let got = dir.path().join(format!("got{i}.npy"));
        let small_args = args(s, small.to_str().expect("utf8"), "4MiB");
        let mut plan = vec!["plan"];
        plan.extend(small_args.iter().map(String::as_str));
        let text = ts(&plan);
        assert!(
            text.contains("1 at a time") && text.contains("no chunk cache"),
            "{text}"
        );
        ts(&small_args.iter().map(String::as_str).collect::<Vec<_>>());
        let want_args = args(n, want.to_str().expect("utf8"), "64MiB");
        ts(&want_args.iter().map(String::as_str).collect::<Vec<_>>());
        ts(&[
            "convert",
            small.to_str().expect("utf8"),
            got.to_str().expect("utf8"),
        ]);
        assert!(npy_data(&got) == npy_data(&want), "{job:?}: other values");
    }
}

/// Sets the `Compression` tag (259) of the little-endian classic TIFF `tif` to `code`.
fn set_compression(tif: &std::path::Path, code: u16) {
    let mut b = std::fs::read(tif).expect("read");
    assert_eq!(&b[..4], b"II*\0", "a little-endian classic TIFF");
    let u16_at = |b: &[u8], i: usize| usize::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let ifd = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let entry = (0..u16_at(&b, ifd))
        .map(|e| ifd + 2 + 12 * e)
        .find(|&at| u16_at(&b, at) == 259)
        .expect("a Compression tag");
    b[entry + 8..entry + 10].copy_from_slice(&code.to_le_bytes());
    std::fs::write(tif, b).expect("write");
}
