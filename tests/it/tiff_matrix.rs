//! Decode exactly or refuse: a matrix of TIFFs made by `gdal_translate` (photometric
//! interpretations, extra samples, bands, sample types, interleave, tiles and strips
//! that do not divide the image, every codec with and without predictors, both byte
//! orders, internal overviews, nodata) read value for value as GDAL reads them; and the
//! files tilestream cannot read exactly (Lab, JPEG of two bands, CMYK of five inks)
//! refused with one line and a nonzero exit, leaving no output. Packed bit depths and
//! CCITT fax are `tiff_packed.rs`, JPEG `tiff_jpeg.rs`, WebP, LERC and LZMA
//! `tiff_codecs.rs`.

use std::fmt::Write as _;
use std::path::Path;

use crate::common::gdal::{BIN, TYPES, envi, gdal_read, gdal_tif, npy_data, ok, pattern, tool};

/// How a fixture's photometric tags are set.
#[derive(Clone, Copy, Debug)]
enum Photo {
    MinIsBlack(usize),
    MinIsWhite,
    Rgb,
    RgbAlpha,
    /// RGB and this many unspecified extra samples (RGB + near-infrared and the like).
    RgbExtra(usize),
    Palette,
    /// CMYK (`Separated`): four bands of ink, read raw.
    Cmyk,
}

impl Photo {
    fn bands(self) -> usize {
        match self {
            Photo::MinIsBlack(b) => b,
            Photo::MinIsWhite | Photo::Palette => 1,
            Photo::Rgb => 3,
            Photo::RgbAlpha | Photo::Cmyk => 4,
            Photo::RgbExtra(n) => 3 + n,
        }
    }
    fn options(self) -> Vec<String> {
        match self {
            Photo::MinIsBlack(_) | Photo::Palette => vec![],
            Photo::MinIsWhite => vec!["PHOTOMETRIC=MINISWHITE".into()],
            Photo::Rgb | Photo::RgbExtra(_) => vec!["PHOTOMETRIC=RGB".into()],
            Photo::RgbAlpha => vec!["PHOTOMETRIC=RGB".into(), "ALPHA=YES".into()],
            Photo::Cmyk => vec!["PHOTOMETRIC=CMYK".into()],
        }
    }
}

/// A VRT over `raw` (one band of an ENVI file) with a grey-ramp colour table, so that
/// `gdal_translate` writes a Palette TIFF.
pub(crate) fn palette_vrt(
    dir: &Path,
    raw: &Path,
    dt: &str,
    h: usize,
    w: usize,
) -> std::path::PathBuf {
    let gdal_type = if dt == "u8" { "Byte" } else { "UInt16" };
    let mut entries = String::new();
    for i in 0..256 {
        let _ = write!(
            entries,
            "<Entry c1=\"{i}\" c2=\"{}\" c3=\"{}\" c4=\"255\"/>",
            255 - i,
            i / 2
        );
    }
    let vrt = dir.join(format!(
        "{}.vrt",
        raw.file_stem().expect("stem").to_string_lossy()
    ));
    std::fs::write(
        &vrt,
        format!(
            "<VRTDataset rasterXSize=\"{w}\" rasterYSize=\"{h}\">\
             <VRTRasterBand dataType=\"{gdal_type}\" band=\"1\">\
             <ColorInterp>Palette</ColorInterp><ColorTable>{entries}</ColorTable>\
             <SimpleSource><SourceFilename relativeToVRT=\"0\">{}</SourceFilename>\
             <SourceBand>1</SourceBand></SimpleSource></VRTRasterBand></VRTDataset>",
            raw.display()
        ),
    )
    .expect("write vrt");
    vrt
}

#[test]
fn every_accepted_tiff_reads_exactly_as_gdal_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (67, 101);
    let photos = [
        Photo::MinIsBlack(1),
        Photo::MinIsWhite,
        Photo::Rgb,
        Photo::RgbAlpha,
        Photo::RgbExtra(1),
        Photo::Palette,
        Photo::MinIsBlack(2),
        Photo::RgbExtra(5),
        Photo::MinIsBlack(8),
        Photo::Cmyk,
    ];
    let codecs = ["NONE", "DEFLATE", "LZW", "ZSTD", "PACKBITS"];
    let mut n = 0usize;
    let mut checked = Vec::new();
    for photo in photos {
        for &(dt, code, _) in &TYPES {
            if matches!(photo, Photo::Palette) && !matches!(dt, "u8" | "u16") {
                continue;
            }
            n += 1;
            // the other dimensions rotate with co-prime periods, so that every codec meets
            // every predictor, interleave, layout and byte order across the matrix
            let codec = codecs[n % 5];
            let float = matches!(dt, "f32" | "f64");
            let predictors: &[u8] = if float { &[1, 2, 3] } else { &[1, 2] };
            let predictor = predictors[(n / 5) % predictors.len()];
            let pixel = n.is_multiple_of(2);
            let tiled = (n / 2).is_multiple_of(2);
            let big_endian = (n / 3) % 2 == 1;
            let overviews = n % 4 == 1;
            let bands = photo.bands();
            let mut co: Vec<String> = photo.options();
            co.push(format!("COMPRESS={codec}"));
            if codec != "NONE" && codec != "PACKBITS" && predictor > 1 {
                co.push(format!("PREDICTOR={predictor}"));
            }
            if bands > 1 {
                co.push(format!(
                    "INTERLEAVE={}",
                    if pixel { "PIXEL" } else { "BAND" }
                ));
            }
            if tiled {
                // tiles that do not divide the 67x101 image
                co.extend([
                    "TILED=YES".into(),
                    "BLOCKXSIZE=48".into(),
                    "BLOCKYSIZE=32".into(),
                ]);
            } else {
                // strips of 7 rows: 67 is not a multiple
                co.push("BLOCKYSIZE=7".into());
            }
            if big_endian {
                co.push("ENDIANNESS=BIG".into());
            }
            let name = format!("m{n}_{dt}");
            let data = pattern(dt, bands, h, w);
            let raw = envi(dir.path(), &name, code, bands, h, w, &data);
            let src = if matches!(photo, Photo::Palette) {
                palette_vrt(dir.path(), &raw, dt, h, w)
            } else {
                raw
            };
            let tif = dir.path().join(format!("{name}.tif"));
            let co_refs: Vec<&str> = co.iter().map(String::as_str).collect();
            gdal_tif(&src, &tif, &co_refs);
            if overviews {
                ok(tool("gdaladdo")
                    .args(["-q", "-r", "average"])
                    .arg(&tif)
                    .args(["2", "4"]));
            }
            let gdal = gdal_read(&tif, dir.path());
            // libtiff 4.5.0 (GDAL 3.6) writes big-endian files with the floating-point
            // predictor with every sample byte-swapped (its reader, and tilestream's, follow
            // the specification): for those the oracle is GDAL's reading alone
            // and 8-bit CMYK reads converted to RGBA
            let cmyk_rgba = matches!(photo, Photo::Cmyk) && dt == "u8";
            if !(cmyk_rgba || big_endian && predictor == 3) {
                assert!(gdal == data, "GDAL's own reading of {co:?} {dt}");
            }
            for budget in ["1MiB", "64MiB"] {
                let npy = dir.path().join(format!("{name}_{budget}.npy"));
                let out = std::process::Command::new(BIN)
                    .arg("convert")
                    .arg(&tif)
                    .arg(&npy)
                    .args(["-m", budget, "--progress", "never"])
                    .output()
                    .expect("spawn");
                assert!(
                    out.status.success(),
                    "tilestream refused {photo:?} {co:?} {dt}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    npy_data(&npy) == gdal,
                    "tilestream and GDAL read {photo:?} {co:?} {dt} (overviews: {overviews}) \
                     differently at --memory {budget}"
                );
                std::fs::remove_file(&npy).expect("rm npy");
            }
            checked.push(format!("{photo:?} {dt} {codec}"));
        }
    }
    // every photometric kind, codec and dtype was met
    for word in [
        "MinIsWhite",
        "Rgb ",
        "RgbAlpha",
        "RgbExtra(1)",
        "RgbExtra(5)",
        "Palette",
        "Cmyk",
        "NONE",
        "DEFLATE",
        "LZW",
        "ZSTD",
        "PACKBITS",
        "u8",
        "i16",
        "u32",
        "i32",
        "f32",
        "f64",
    ] {
        assert!(
            checked.iter().any(|c| c.contains(word)),
            "the matrix never met {word}"
        );
    }
    assert!(checked.len() >= 50, "{} fixtures", checked.len());
}

#[test]
fn tiffs_that_cannot_be_read_exactly_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 56);
    // (what, dtype, bands, creation options, word the message must contain)
    let cases: [(&str, &str, usize, &[&str], &str); 3] = [
        // GDAL fails on these too ("Sorry, can not handle image")
        (
            "CMYK of 5 samples",
            "u8",
            5,
            &["PHOTOMETRIC=CMYK"],
            "5 samples",
        ),
        // libjpeg-turbo's TurboJPEG interface takes no two-component stream
        (
            "JPEG of two bands",
            "u8",
            2,
            &["COMPRESS=JPEG"],
            "2 samples",
        ),
        ("CIELab", "u8", 3, &["PHOTOMETRIC=CIELAB"], "CIELab"),
    ];
    for (what, dt, bands, co, word) in cases {
        let &(_, code, _) = TYPES.iter().find(|t| t.0 == dt).expect("type");
        // values that fit the bit depth asked for (GDAL refuses to clip them)
        let data = pattern(dt, bands, h, w);
        let name = what.replace(' ', "_");
        let raw = envi(dir.path(), &name, code, bands, h, w, &data);
        let tif = dir.path().join(format!("{name}.tif"));
        gdal_tif(&raw, &tif, co);
        let npy = dir.path().join(format!("{name}.npy"));
        let out = std::process::Command::new(BIN)
            .arg("convert")
            .arg(&tif)
            .arg(&npy)
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{what}: exit {:?}, stderr {err}",
            out.status
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(
            err.to_lowercase().contains(&word.to_lowercase()),
            "{what}: the message does not name {word}: {err}"
        );
        assert!(!npy.exists(), "{what}: an output was left");
        // the library says what kind of refusal it is
        match tilestream::TensorFile::open(&tif).err() {
            Some(tilestream::Error::Tiff { source, .. })
                if source.kind() == tilestream::FormatErrorKind::Unsupported => {}
            other => panic!("{what}: opening gives {other:?}, not a TIFF refused as unsupported"),
        }
    }
}

#[test]
fn eight_bit_cmyk_reads_as_gdal_converts_it_to_rgba() {
    // GDAL reads 8-bit CMYK through libtiff's RGBA interface: both interleaves, tiles
    // and strips, compared with GDAL's reading (which is not the inks)
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (45, 70);
    let data = pattern("u8", 4, h, w);
    let raw = envi(dir.path(), "cmyk", 1, 4, h, w, &data);
    for (i, co) in [
        &["INTERLEAVE=PIXEL", "COMPRESS=DEFLATE"][..],
        &["INTERLEAVE=BAND", "COMPRESS=LZW"],
        &[
            "INTERLEAVE=PIXEL",
            "TILED=YES",
            "BLOCKXSIZE=32",
            "BLOCKYSIZE=16",
        ],
        &[
            "INTERLEAVE=BAND",
            "TILED=YES",
            "BLOCKXSIZE=48",
            "BLOCKYSIZE=32",
            "COMPRESS=ZSTD",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let mut options = vec!["PHOTOMETRIC=CMYK"];
        options.extend_from_slice(co);
        let tif = dir.path().join(format!("cmyk{i}.tif"));
        gdal_tif(&raw, &tif, &options);
        let gdal = gdal_read(&tif, dir.path());
        assert!(gdal != data, "GDAL converted {options:?}");
        // the alpha band is opaque
        assert!(gdal[3 * h * w..].iter().all(|&a| a == 255), "{options:?}");
        for budget in ["1MiB", "64MiB"] {
            let npy = dir.path().join(format!("cmyk{i}_{budget}.npy"));
            ok(std::process::Command::new(BIN)
                .arg("convert")
                .arg(&tif)
                .arg(&npy)
                .args(["-m", budget, "--progress", "never"]));
            assert!(npy_data(&npy) == gdal, "{options:?} at --memory {budget}");
        }
    }
}
