//! WebP-, LERC- and LZMA-compressed TIFFs read exactly as GDAL reads them, GDAL's
//! reading the oracle: WebP lossy and lossless, RGB and RGBA, tiles and strips that do
//! not divide the image; LERC of every sample type it stores, lossless and within an
//! error bound, with Deflate or Zstandard on top, both interleaves, both byte orders,
//! invalid pixels (NaN floats, an 8-bit alpha stored as the mask); LZMA of every sample
//! type, with the predictors, at every preset's dictionary within the budget. What GDAL reads differently by
//! version or wrongly (interleaved floats with invalid pixels, a big-endian file's
//! NaN), damaged chunks and a missing library are refused in one line, no output left.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::gdal::{
    TYPES, convert_at, envi, gdal_read, gdal_tif, noisy_image, npy_data, ok, pattern,
    reads_as_gdal, reads_as_gdal_at, refused, tool,
};

/// The byte offset and count of the first chunk of a little-endian classic TIFF.
fn first_chunk(tif: &Path) -> (u64, u64) {
    let b = std::fs::read(tif).expect("read");
    assert_eq!(&b[..4], b"II*\0", "a little-endian classic TIFF");
    let u16_at = |i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let u32_at = |i: usize| u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
    let ifd = u32_at(4) as usize;
    let (mut offset, mut count) = (None, None);
    for e in 0..u16_at(ifd) as usize {
        let at = ifd + 2 + 12 * e;
        let (tag, n) = (u16_at(at), u32_at(at + 4));
        // the first value: inline when there is one, else at the offset given
        let first = |size: usize| {
            let p = if n == 1 {
                at + 8
            } else {
                u32_at(at + 8) as usize
            };
            if size == 2 { u16_at(p) } else { u32_at(p) }
        };
        let size = if u16_at(at + 2) == 3 { 2 } else { 4 };
        match tag {
            273 | 324 => offset = Some(first(size)),
            279 | 325 => count = Some(first(size)),
            _ => {}
        }
    }
    (offset.expect("offsets"), count.expect("counts"))
}

#[test]
fn webp_tiffs_read_exactly_as_gdal_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (203, 299);
    let mut n = 0;
    for bands in [3, 4] {
        let raw = envi(
            dir.path(),
            &format!("src{bands}"),
            1,
            bands,
            h,
            w,
            &noisy_image(bands, h, w),
        );
        let layouts: [&[&str]; 4] = [
            &[],
            &["WEBP_LOSSLESS=TRUE"],
            &[
                "WEBP_LEVEL=40",
                "TILED=YES",
                "BLOCKXSIZE=64",
                "BLOCKYSIZE=48",
            ],
            &["BLOCKYSIZE=50", "WEBP_LOSSLESS=TRUE"],
        ];
        for extra in layouts {
            n += 1;
            let mut co = vec!["COMPRESS=WEBP", "PHOTOMETRIC=RGB"];
            if bands == 4 {
                co.push("ALPHA=YES");
            }
            co.extend_from_slice(extra);
            let tif = dir.path().join(format!("w{n}.tif"));
            gdal_tif(&raw, &tif, &co);
            reads_as_gdal(&tif, dir.path(), &format!("{co:?}"));
        }
    }
    // a WebP COG: its full-resolution image
    let cog = dir.path().join("cog.tif");
    ok(tool("gdal_translate")
        .args([
            "-q",
            "-of",
            "COG",
            "-co",
            "COMPRESS=WEBP",
            "-co",
            "BLOCKSIZE=128",
        ])
        .arg(dir.path().join("src3.raw"))
        .arg(&cog));
    reads_as_gdal(&cog, dir.path(), "WebP COG");
}

#[test]
fn lerc_tiffs_read_exactly_as_gdal_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (67, 101);
    let mut n = 0;
    for &(dt, code, _) in &TYPES {
        let bands = 3;
        let raw = envi(dir.path(), dt, code, bands, h, w, &pattern(dt, bands, h, w));
        let layouts: [&[&str]; 5] = [
            &["COMPRESS=LERC"],
            &["COMPRESS=LERC_DEFLATE", "MAX_Z_ERROR=2"],
            &[
                "COMPRESS=LERC_ZSTD",
                "TILED=YES",
                "BLOCKXSIZE=32",
                "BLOCKYSIZE=16",
            ],
            &["COMPRESS=LERC", "INTERLEAVE=BAND", "BLOCKYSIZE=20"],
            &["COMPRESS=LERC_DEFLATE", "ENDIANNESS=BIG", "BLOCKYSIZE=30"],
        ];
        for co in layouts {
            n += 1;
            let tif = dir.path().join(format!("l{n}.tif"));
            gdal_tif(&raw, &tif, co);
            reads_as_gdal(&tif, dir.path(), &format!("{dt} {co:?}"));
        }
    }
    // invalid pixels: NaN floats of one band (LERC's mask, read back as libtiff's NaN),
    // f32 and f64, band-planar too; an 8-bit RGBA whose alpha is stored as the mask
    for (dt, code, es) in [("f32", 4u8, 4usize), ("f64", 5, 8)] {
        for bands in [1, 2] {
            let mut data = pattern(dt, bands, h, w);
            for y in 10..20 {
                for x in 30..50 {
                    let at = (y * w + x) * es;
                    let nan: &[u8] = if es == 4 {
                        &f32::NAN.to_le_bytes()
                    } else {
                        &f64::NAN.to_le_bytes()
                    };
                    data[at..at + es].copy_from_slice(nan);
                }
            }
            let raw = envi(
                dir.path(),
                &format!("nan{dt}{bands}"),
                code,
                bands,
                h,
                w,
                &data,
            );
            for co in [
                &["COMPRESS=LERC", "INTERLEAVE=BAND"][..],
                &[
                    "COMPRESS=LERC_ZSTD",
                    "TILED=YES",
                    "BLOCKXSIZE=32",
                    "BLOCKYSIZE=32",
                    "INTERLEAVE=BAND",
                ],
            ] {
                n += 1;
                let tif = dir.path().join(format!("l{n}.tif"));
                ok(tool("gdal_translate")
                    .args(["-q"])
                    .args(co.iter().flat_map(|c| ["-co", c]))
                    .arg(&raw)
                    .arg(&tif));
                reads_as_gdal(&tif, dir.path(), &format!("NaN {dt} x{bands} {co:?}"));
                let got = npy_data(&{
                    let npy = dir.path().join("nan.npy");
                    assert!(convert_at(&tif, &npy, "1MiB").status.success());
                    npy
                });
                let nans = got
                    .chunks_exact(es)
                    .filter(|v| {
                        if es == 4 {
                            f32::from_le_bytes(v[..4].try_into().expect("4")).is_nan()
                        } else {
                            f64::from_le_bytes(v[..8].try_into().expect("8")).is_nan()
                        }
                    })
                    .count();
                assert_eq!(
                    nans, 200,
                    "NaN {dt} x{bands}: the masked pixels read as NaN"
                );
            }
        }
    }
    let mut rgba = noisy_image(4, h, w);
    // a transparent corner and a half-transparent band: the mask keeps 0 and 255 only
    for y in 0..h {
        for x in 0..w {
            rgba[(3 * h + y) * w + x] = if x < 20 && y < 15 { 0 } else { 255 };
        }
    }
    let raw = envi(dir.path(), "rgba", 1, 4, h, w, &rgba);
    for co in [
        &["COMPRESS=LERC", "PHOTOMETRIC=RGB", "ALPHA=YES"][..],
        &[
            "COMPRESS=LERC_DEFLATE",
            "PHOTOMETRIC=RGB",
            "ALPHA=YES",
            "TILED=YES",
            "BLOCKXSIZE=48",
            "BLOCKYSIZE=32",
        ],
    ] {
        n += 1;
        let tif = dir.path().join(format!("l{n}.tif"));
        gdal_tif(&raw, &tif, co);
        reads_as_gdal(&tif, dir.path(), &format!("RGBA {co:?}"));
    }
}

#[test]
fn what_gdal_reads_differently_or_not_at_all_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 50);
    // a block of pixels whose two bands are both NaN: libtiff's writer marks them
    // invalid in the blob's mask
    let mut data = pattern("f32", 2, h, w);
    let block = |data: &mut Vec<u8>, band: usize, bits: u32| {
        for y in 10..20 {
            for x in 20..40 {
                let at = 4 * ((band * h + y) * w + x);
                data[at..at + 4].copy_from_slice(&bits.to_le_bytes());
            }
        }
    };
    block(&mut data, 0, f32::NAN.to_bits());
    block(&mut data, 1, f32::NAN.to_bits());
    let raw = envi(dir.path(), "nan", 4, 2, h, w, &data);
    // interleaved floats with invalid pixels: 0 in libtiff 4.5, NaN in 4.7
    let inter = dir.path().join("inter.tif");
    ok(tool("gdal_translate")
        .args(["-q", "-co", "COMPRESS=LERC"])
        .arg(&raw)
        .arg(&inter));
    refused(&inter, dir.path(), "interleaved floats", &[]);
    // a big-endian file's invalid pixels: libtiff 4.5 writes NaN and then swaps its
    // bytes, so GDAL reads 0x0000c07f. The writer swaps before coding, so a value whose
    // swapped bytes are a NaN is what it marks invalid
    let mut data = pattern("f32", 1, h, w);
    block(&mut data, 0, 0x7fc0_0001_u32.swap_bytes());
    let raw = envi(dir.path(), "swapped", 4, 1, h, w, &data);
    let big = dir.path().join("big.tif");
    ok(tool("gdal_translate")
        .args(["-q", "-co", "COMPRESS=LERC", "-co", "ENDIANNESS=BIG"])
        .arg(&raw)
        .arg(&big));
    assert_ne!(
        &gdal_read(&big, dir.path())[4 * (10 * w + 20)..][..4],
        &data[4 * (10 * w + 20)..][..4],
        "GDAL reads the value written"
    );
    refused(&big, dir.path(), "big-endian", &[]);

    // a damaged chunk: not WebP, not LERC
    for (name, co, word) in [
        (
            "webp",
            &["COMPRESS=WEBP", "PHOTOMETRIC=RGB"][..],
            "not a WebP image",
        ),
        ("lerc", &["COMPRESS=LERC"], "not a LERC blob"),
    ] {
        let bands = if name == "webp" { 3 } else { 1 };
        let raw = envi(
            dir.path(),
            &format!("d{name}"),
            1,
            bands,
            h,
            w,
            &noisy_image(bands, h, w),
        );
        let tif = dir.path().join(format!("{name}.tif"));
        gdal_tif(&raw, &tif, co);
        let (offset, count) = first_chunk(&tif);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&tif)
            .expect("open");
        f.write_all_at(&vec![0x5A; count.min(16) as usize], offset)
            .expect("damage");
        refused(&tif, dir.path(), word, &[]);
        // the library missing: one line saying what to install
        let var = if name == "webp" {
            "TILESTREAM_WEBP"
        } else {
            "TILESTREAM_LERC"
        };
        let good = dir.path().join(format!("{name}_good.tif"));
        gdal_tif(&raw, &good, co);
        refused(
            &good,
            dir.path(),
            var,
            &[(var, "/nonexistent/libnothing.so")],
        );
    }
}

#[test]
fn lzma_tiffs_read_exactly_as_gdal_reads_them() {
    // every sample type, strips and tiles that do not divide the image, both interleaves
    // and byte orders, the predictors, and the presets from the smallest dictionary
    // (256 KiB) to the largest (64 MiB), each read at a budget that holds its decoder
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (67, 101);
    let mut n = 0;
    for &(dt, code, _) in &TYPES {
        let bands = 2;
        let raw = envi(dir.path(), dt, code, bands, h, w, &pattern(dt, bands, h, w));
        let predictor = if dt.starts_with('f') {
            "PREDICTOR=3"
        } else {
            "PREDICTOR=2"
        };
        let layouts: [(&[&str], &[&str]); 4] = [
            (&["COMPRESS=LZMA"], &["24MiB", "256MiB"]),
            (
                &[
                    "COMPRESS=LZMA",
                    "LZMA_PRESET=0",
                    predictor,
                    "TILED=YES",
                    "BLOCKXSIZE=32",
                    "BLOCKYSIZE=16",
                ],
                &["2MiB", "64MiB"],
            ),
            (
                &[
                    "COMPRESS=LZMA",
                    "LZMA_PRESET=1",
                    "INTERLEAVE=BAND",
                    "BLOCKYSIZE=20",
                ],
                &["4MiB"],
            ),
            (
                &[
                    "COMPRESS=LZMA",
                    "LZMA_PRESET=9",
                    predictor,
                    "ENDIANNESS=BIG",
                    "BLOCKYSIZE=30",
                ],
                &["160MiB"],
            ),
        ];
        for (co, budgets) in layouts {
            n += 1;
            let tif = dir.path().join(format!("z{n}.tif"));
            gdal_tif(&raw, &tif, co);
            reads_as_gdal_at(&tif, dir.path(), &format!("{dt} {co:?}"), budgets);
        }
    }
}

#[test]
fn lzma_tiffs_are_refused_in_one_line_where_they_cannot_be_read_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 50);
    let raw = envi(dir.path(), "src", 2, 1, h, w, &pattern("i16", 1, h, w));
    // a budget that cannot hold liblzma's dictionary (8 MiB at GDAL's default preset):
    // refused before the run, saying so
    let tif = dir.path().join("z.tif");
    gdal_tif(&raw, &tif, &["COMPRESS=LZMA"]);
    let npy = dir.path().join("small.npy");
    let out = convert_at(&tif, &npy, "1MiB");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("budget") || err.contains("memory"), "{err}");
    assert!(!npy.exists());
    // a damaged stream: its check fails
    let bad = dir.path().join("bad.tif");
    std::fs::copy(&tif, &bad).expect("copy");
    let (offset, count) = first_chunk(&bad);
    assert!(count > 64, "a chunk of {count} bytes");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&bad)
        .expect("open");
    f.write_all_at(&[0x5A; 8], offset + count / 2)
        .expect("damage");
    refused(&bad, dir.path(), "damaged", &[]);
    // a chunk that is not an .xz stream at all: refused when the file is opened
    f.write_all_at(&[0x5A; 8], offset).expect("damage");
    refused(&bad, dir.path(), ".xz", &[]);
    // the library missing: one line saying what to install
    refused(
        &tif,
        dir.path(),
        "TILESTREAM_LZMA",
        &[("TILESTREAM_LZMA", "/nonexistent/libnothing.so")],
    );
}
