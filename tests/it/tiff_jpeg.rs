//! JPEG-compressed TIFFs read exactly as GDAL reads them: one band, RGB, YCbCr (converted
//! to RGB, GDAL's default), RGB with an extra sample, CMYK (converted to RGBA), pixel and
//! band interleave, tiles and strips that do not divide the image, several qualities,
//! files written by GDAL and by libtiff's tiffcp (tables in the `JPEGTables` tag or in
//! each chunk); GDAL's reading is the oracle. Damaged chunks, streams of the wrong size or
//! sampling, and a missing libjpeg-turbo are refused in one line, no output left.

use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::gdal::{
    envi, gdal_read, gdal_tif, noisy_image, ok, reads_as_gdal, refused, tool,
};

#[test]
fn jpeg_tiffs_read_exactly_as_gdal_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (203, 299);
    let mut n = 0;
    // (bands, photometric, interleave)
    let kinds: [(usize, &str, &str); 7] = [
        (1, "MINISBLACK", "PIXEL"),
        (1, "MINISWHITE", "PIXEL"),
        (3, "RGB", "PIXEL"),
        (3, "YCBCR", "PIXEL"),
        (3, "RGB", "BAND"),
        (4, "RGB", "PIXEL"),
        (4, "CMYK", "PIXEL"),
    ];
    for (bands, photometric, interleave) in kinds {
        let data = noisy_image(bands, h, w);
        let raw = envi(dir.path(), &format!("src{n}"), 1, bands, h, w, &data);
        // tiles, and strips (YCbCr's must be a multiple of 16 rows: 48)
        for (layout, quality) in [("tiles", "75"), ("strips", "95")] {
            n += 1;
            let mut co = vec![
                "COMPRESS=JPEG".to_string(),
                format!("JPEG_QUALITY={quality}"),
                format!("PHOTOMETRIC={photometric}"),
            ];
            if bands > 1 {
                co.push(format!("INTERLEAVE={interleave}"));
            }
            if bands == 4 && photometric == "RGB" {
                co.push("ALPHA=YES".into());
            }
            if layout == "tiles" {
                co.extend(["TILED=YES", "BLOCKXSIZE=64", "BLOCKYSIZE=48"].map(String::from));
            } else {
                co.push("BLOCKYSIZE=48".into());
            }
            let tif = dir.path().join(format!("j{n}.tif"));
            let co: Vec<&str> = co.iter().map(String::as_str).collect();
            gdal_tif(&raw, &tif, &co);
            reads_as_gdal(&tif, dir.path(), &format!("{co:?}"));
        }
    }
    // eight-bit CMYK is GDAL's RGBA, not the inks; YCbCr is RGB, not the luma
    let cmyk = gdal_read(&dir.path().join("j14.tif"), dir.path());
    assert!(cmyk[3 * h * w..].iter().all(|&a| a == 255), "CMYK's alpha");
    // a JPEG COG: its full-resolution image
    let src = envi(dir.path(), "cog_src", 1, 3, h, w, &noisy_image(3, h, w));
    let cog = dir.path().join("cog.tif");
    ok(tool("gdal_translate")
        .args([
            "-q",
            "-of",
            "COG",
            "-co",
            "COMPRESS=JPEG",
            "-co",
            "BLOCKSIZE=128",
        ])
        .arg(&src)
        .arg(&cog));
    reads_as_gdal(&cog, dir.path(), "JPEG COG");
}

#[test]
fn jpeg_tiffs_written_by_libtiff_read_exactly_as_gdal_reads_them() {
    // tiffcp: its own table mode (Huffman tables in JPEGTables too), YCbCr by default
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (150, 221);
    let src3 = dir.path().join("src3.tif");
    let src1 = dir.path().join("src1.tif");
    gdal_tif(
        &envi(dir.path(), "s3", 1, 3, h, w, &noisy_image(3, h, w)),
        &src3,
        &["INTERLEAVE=PIXEL"],
    );
    gdal_tif(
        &envi(dir.path(), "s1", 1, 1, h, w, &noisy_image(1, h, w)),
        &src1,
        &[],
    );
    let cases: [(&str, &[&str], &Path); 4] = [
        ("ycbcr strips", &["-c", "jpeg:60", "-r", "32"], &src3),
        (
            "rgb tiles",
            &["-c", "jpeg:r", "-t", "-w", "64", "-l", "32"],
            &src3,
        ),
        (
            "ycbcr tiles",
            &["-c", "jpeg", "-t", "-w", "96", "-l", "64"],
            &src3,
        ),
        ("grey strips", &["-c", "jpeg:90", "-r", "8"], &src1),
    ];
    for (i, (what, args, src)) in cases.into_iter().enumerate() {
        let tif = dir.path().join(format!("t{i}.tif"));
        ok(tool("tiffcp").args(args).arg(src).arg(&tif));
        reads_as_gdal(&tif, dir.path(), what);
    }
}

/// Where the first chunk's JPEG stream starts, and its stored size.
fn first_chunk(tif: &Path) -> (u64, u64) {
    let dump = ok(tool("tiffdump").arg(tif));
    let value = |tag: &str| -> u64 {
        let line = dump
            .lines()
            .find(|l| l.starts_with(tag))
            .unwrap_or_else(|| panic!("{tag} in {dump}"));
        let inner = &line[line.find('<').expect("<") + 1..];
        inner
            .split(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())
            .expect("a number")
            .parse()
            .expect("number")
    };
    (value("StripOffsets"), value("StripByteCounts"))
}

#[test]
fn damaged_or_mismatched_jpeg_chunks_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (64, 80);
    let raw = envi(dir.path(), "src", 1, 3, h, w, &noisy_image(3, h, w));
    let make = |name: &str| {
        let tif = dir.path().join(name);
        gdal_tif(
            &raw,
            &tif,
            &["COMPRESS=JPEG", "PHOTOMETRIC=YCBCR", "BLOCKYSIZE=64"],
        );
        tif
    };
    let (offset, count) = first_chunk(&make("probe.tif"));
    let stream = |tif: &Path| {
        let mut b = vec![0u8; count as usize];
        std::fs::File::open(tif)
            .expect("open")
            .read_exact_at(&mut b, offset)
            .expect("read");
        b
    };
    let patch = |tif: &Path, at: usize, bytes: &[u8]| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(tif)
            .expect("open")
            .write_all_at(bytes, offset + at as u64)
            .expect("patch");
    };

    // the entropy-coded data cut short: libjpeg warns (GDAL returns the strip with grey
    // blocks); tilestream refuses
    let cut = make("cut.tif");
    let s = stream(&cut);
    let sos = s.windows(2).position(|m| m == [0xFF, 0xDA]).expect("SOS");
    let mut end = s.clone();
    let keep = sos + (s.len() - sos) / 3;
    end.truncate(keep);
    end.extend_from_slice(&[0xFF, 0xD9]);
    end.resize(s.len(), 0);
    patch(&cut, 0, &end);
    refused(&cut, dir.path(), "cannot be decoded", &[]);

    // a frame header that says another height than the strip's
    let tall = make("tall.tif");
    let s = stream(&tall);
    let sof = s.windows(2).position(|m| m == [0xFF, 0xC0]).expect("SOF0");
    // SOF0: marker, length (2), precision (1), height (2), width (2)
    patch(&tall, sof + 5, &[0, 40]);
    refused(&tall, dir.path(), "where the chunk is", &[]);

    // a YCbCrSubsampling tag that is not the stream's sampling (libtiff refuses it too)
    let sub = make("sub.tif");
    ok(tool("tiffset").args(["-s", "530", "2", "1", "1"]).arg(&sub));
    refused(&sub, dir.path(), "YCbCrSubsampling", &[]);

    // no libjpeg-turbo: a line saying what to install
    refused(
        &make("nolib.tif"),
        dir.path(),
        "libturbojpeg0",
        &[("TILESTREAM_TURBOJPEG", "/nonexistent/libturbojpeg.so")],
    );
}

#[test]
fn a_pixel_interleaved_input_is_read_with_the_bands_of_each_position_together() {
    // every band of a position comes from the same chunks: visiting them one after
    // another lets the chunk cache serve the second and third band (each chunk decoded
    // once, not once a band); a band-interleaved file keeps the plain order
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (300, 260);
    let raw = envi(dir.path(), "src", 1, 3, h, w, &noisy_image(3, h, w));
    for (interleave, together) in [("PIXEL", true), ("BAND", false)] {
        let tif = dir.path().join(format!("{interleave}.tif"));
        gdal_tif(
            &raw,
            &tif,
            &[
                "COMPRESS=JPEG",
                "TILED=YES",
                "BLOCKXSIZE=64",
                "BLOCKYSIZE=64",
                &format!("INTERLEAVE={interleave}"),
            ],
        );
        let input = tilestream::TensorFile::open(&tif).expect("open");
        let engine =
            tilestream::Engine::new(tilestream::MemoryBudget::new(1 << 20)).expect("engine");
        let plan = engine.plan_affine(&input, None).expect("plan");
        assert_eq!(plan.bands_inner, together, "{interleave}: {plan}");
        assert_eq!(
            plan.to_string()
                .contains("the bands of each position one after another"),
            together,
            "{plan}"
        );
        if together {
            // tiles never straddle two rows of chunks
            assert_eq!(64 % plan.tile_shape[1], 0, "{plan}");
        }
        reads_as_gdal(&tif, dir.path(), interleave);
    }
}
