//! Packed samples (GDAL's `NBITS`): unsigned integers of 1 to 31 bits read exactly as
//! GDAL reads them, widened to u8, u16 or u32, across bands, interleave, tiles and
//! strips that do not divide the image, every lossless codec, both byte orders and
//! `MinIsWhite`; fixtures made by `gdal_translate`, GDAL's reading the oracle. What GDAL
//! does not write (signed packed samples) is refused in one line.

use std::path::Path;

use crate::common::gdal::{convert_at, envi, gdal_read, gdal_tif, npy_data};

/// `bands x h x w` values below `2^bits` (the largest among them), as little-endian
/// elements of `es` bytes.
fn packed_pattern(bits: u32, es: usize, bands: usize, h: usize, w: usize) -> Vec<u8> {
    let top = (1u64 << bits) - 1;
    let mut out = Vec::with_capacity(bands * h * w * es);
    for b in 0..bands {
        for y in 0..h {
            for x in 0..w {
                let i = ((b * h + y) * w + x) as u64;
                // every value from 0 to the top appears for small widths; large widths
                // get spread values, the top itself every 11th sample
                let v = if i.is_multiple_of(11) {
                    top
                } else {
                    (i.wrapping_mul(2_654_435_761) ^ (x as u64 * 977)) & top
                };
                out.extend_from_slice(&v.to_le_bytes()[..es]);
            }
        }
    }
    out
}

#[test]
fn packed_samples_read_exactly_as_gdal_reads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (37, 53);
    let widths: [u32; 15] = [1, 2, 3, 4, 5, 7, 9, 10, 12, 14, 15, 17, 20, 24, 31];
    let codecs = ["NONE", "DEFLATE", "LZW", "ZSTD", "PACKBITS"];
    let mut met = Vec::new();
    let mut n = 0usize;
    for bits in widths {
        let (es, code) = match bits {
            1..=8 => (1, 1),
            9..=16 => (2, 12),
            _ => (4, 13),
        };
        // two fixtures per width; the other dimensions rotate with co-prime periods
        for _ in 0..2 {
            n += 1;
            let bands = [1, 3, 2, 1][n % 4];
            let pixel = !n.is_multiple_of(3);
            let codec = codecs[n % 5];
            let tiled = n.is_multiple_of(2);
            let big_endian = (n / 2) % 3 == 1;
            let white = bands == 1 && (n / 4) % 2 == 1;
            let mut co = vec![format!("NBITS={bits}"), format!("COMPRESS={codec}")];
            if bands > 1 {
                co.push(format!(
                    "INTERLEAVE={}",
                    if pixel { "PIXEL" } else { "BAND" }
                ));
            }
            if tiled {
                co.extend(["TILED=YES", "BLOCKXSIZE=32", "BLOCKYSIZE=16"].map(String::from));
            } else {
                co.push("BLOCKYSIZE=5".into());
            }
            if big_endian {
                co.push("ENDIANNESS=BIG".into());
            }
            if white {
                co.push("PHOTOMETRIC=MINISWHITE".into());
            }
            let name = format!("p{n}_{bits}bit");
            let data = packed_pattern(bits, es, bands, h, w);
            let raw = envi(dir.path(), &name, code, bands, h, w, &data);
            let tif = dir.path().join(format!("{name}.tif"));
            let co_refs: Vec<&str> = co.iter().map(String::as_str).collect();
            gdal_tif(&raw, &tif, &co_refs);
            let gdal = gdal_read(&tif, dir.path());
            assert!(gdal == data, "GDAL's own reading of {co:?}");
            for budget in ["1MiB", "64MiB"] {
                let npy = dir.path().join(format!("{name}_{budget}.npy"));
                let out = convert_at(&tif, &npy, budget);
                assert!(
                    out.status.success(),
                    "tilestream refused {co:?} ({bands} bands): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    npy_data(&npy) == gdal,
                    "tilestream and GDAL read {co:?} ({bands} bands) differently at --memory \
                     {budget}"
                );
                std::fs::remove_file(&npy).expect("rm npy");
            }
            met.push((codec, tiled, big_endian, white, bands > 1 && pixel));
        }
    }
    // the matrix met every codec, tiles and strips, both byte orders, MinIsWhite and
    // pixel-interleaved bands
    for word in codecs {
        assert!(met.iter().any(|m| m.0 == word), "never met {word}");
    }
    assert!(
        met.iter().any(|m| m.1) && met.iter().any(|m| !m.1),
        "tiles and strips"
    );
    assert!(
        met.iter().any(|m| m.2) && met.iter().any(|m| !m.2),
        "both byte orders"
    );
    assert!(met.iter().any(|m| m.3), "MinIsWhite");
    assert!(met.iter().any(|m| m.4), "pixel interleave");
}

/// Reads a u16 or u32 of a TIFF in its byte order (`II` or `MM`).
fn tiff_u(b: &[u8], at: usize, len: usize) -> usize {
    let bytes = &b[at..at + len];
    let mut v = 0usize;
    for i in 0..len {
        let k = if &b[..2] == b"II" { len - 1 - i } else { i };
        v = (v << 8) | usize::from(bytes[k]);
    }
    v
}

/// Where the entry of `tag` starts in the first directory of the classic TIFF `b` (its
/// value, when it fits, at 8 bytes in).
fn ifd_entry(b: &[u8], tag: u16) -> usize {
    assert!(&b[..4] == b"II*\0" || &b[..4] == b"MM\0*", "a classic TIFF");
    let ifd = tiff_u(b, 4, 4);
    let n = tiff_u(b, ifd, 2);
    (0..n)
        .map(|i| ifd + 2 + 12 * i)
        .find(|&e| tiff_u(b, e, 2) == usize::from(tag))
        .expect("the tag is present")
}

/// The one LONG value held in the entry at `at`.
fn entry_long(b: &[u8], at: usize) -> usize {
    tiff_u(b, at + 8, 4)
}

/// Sets the value of the (one short) tag `tag` in the first directory of the classic
/// TIFF at `tif`.
fn patch_short_tag(tif: &Path, tag: u16, value: u16) {
    let mut b = std::fs::read(tif).expect("read tif");
    let at = ifd_entry(&b, tag);
    let bytes = if &b[..2] == b"II" {
        value.to_le_bytes()
    } else {
        value.to_be_bytes()
    };
    b[at + 8..at + 10].copy_from_slice(&bytes);
    std::fs::write(tif, b).expect("write tif");
}

#[test]
fn floats_of_24_bits_read_as_gdal_reads_them() {
    // GDAL writes no 24-bit floats: a 24-bit integer file of chosen bit patterns, its
    // SampleFormat set to float, read by GDAL (CPLTripleToFloat, into Float32) is the
    // oracle. The patterns: every exponent with spread mantissas and both signs, zeros,
    // denormals, infinities and NaNs
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (16, 64);
    let mut data = Vec::with_capacity(h * w * 4);
    for i in 0..h * w {
        let exponent = (i % 128) as u32;
        let mantissa = ((i as u32).wrapping_mul(40_503) >> 3) & 0xffff;
        let sign = u32::from(i % 3 == 0) << 23;
        let v = match i % 97 {
            0 => 0,
            1 => sign | 1,
            2 => sign | 0x7f_0000,
            _ => sign | (exponent << 16) | mantissa,
        };
        data.extend_from_slice(&v.to_le_bytes());
    }
    let raw = envi(dir.path(), "fp24", 13, 1, h, w, &data);
    for (i, co) in [
        &["NBITS=24"][..],
        &["NBITS=24", "ENDIANNESS=BIG", "BLOCKYSIZE=5"],
        &[
            "NBITS=24",
            "COMPRESS=DEFLATE",
            "TILED=YES",
            "BLOCKXSIZE=32",
            "BLOCKYSIZE=16",
        ],
    ]
    .into_iter()
    .enumerate()
    {
        let tif = dir.path().join(format!("fp24_{i}.tif"));
        gdal_tif(&raw, &tif, co);
        patch_short_tag(&tif, 339, 3);
        let gdal = gdal_read(&tif, dir.path());
        assert_eq!(gdal.len(), h * w * 4, "GDAL reads Float32");
        for budget in ["1MiB", "64MiB"] {
            let npy = dir.path().join("fp24.npy");
            let out = convert_at(&tif, &npy, budget);
            assert!(
                out.status.success(),
                "{co:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let b = std::fs::read(&npy).expect("npy");
            assert!(
                String::from_utf8_lossy(&b[..64]).contains("'<f4'"),
                "read as f32"
            );
            // NaN payloads included: the bits are compared
            assert!(npy_data(&npy) == gdal, "{co:?} at --memory {budget}");
        }
    }
}

#[test]
fn signed_packed_samples_are_refused_in_one_line() {
    // GDAL reads signed packed samples as unsigned (no sign extension), which would be
    // wrong values without a word: tilestream refuses them
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (9, 13);
    let data = packed_pattern(12, 2, 1, h, w);
    let raw = envi(dir.path(), "s12", 12, 1, h, w, &data);
    let tif = dir.path().join("s12.tif");
    gdal_tif(&raw, &tif, &["NBITS=12"]);
    patch_short_tag(&tif, 339, 2); // SampleFormat: signed integer
    let npy = dir.path().join("s12.npy");
    let out = convert_at(&tif, &npy, "64MiB");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(1 | 2)), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("BitsPerSample 12 with SampleFormat 2"),
        "{err}"
    );
    assert!(!npy.exists(), "an output was left");
}

/// A 1-bit image with runs of many lengths: diagonal bands, a full black row, a full
/// white row, alternating pixels, black edges, and noise.
fn bilevel(h: usize, w: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(h * w);
    let mut state = 0x2545_f491_u32;
    for y in 0..h {
        for x in 0..w {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let band = (x / 7 + y / 5) % 3 == 0;
            let v = match y {
                10 => true,
                11 => false,
                12 => x.is_multiple_of(2),
                _ => x == 0 || x == w - 1 || (band ^ state.is_multiple_of(23)),
            };
            out.push(u8::from(v));
        }
    }
    out
}

#[test]
fn ccitt_fax_reads_exactly_as_gdal_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (67, 101);
    let data = bilevel(h, w);
    let raw = envi(dir.path(), "fax", 1, 1, h, w, &data);
    let mut files = Vec::new();
    // the codings GDAL writes, both photometric interpretations, one strip, strips of 7
    // rows and tiles that do not divide the image
    let mut n = 0;
    for codec in ["CCITTRLE", "CCITTFAX3", "CCITTFAX4"] {
        for photo in ["MINISWHITE", "MINISBLACK"] {
            for layout in [
                &[][..],
                &["BLOCKYSIZE=7"],
                &["TILED=YES", "BLOCKXSIZE=32", "BLOCKYSIZE=16"],
            ] {
                n += 1;
                let mut co = vec![
                    "NBITS=1".to_string(),
                    format!("COMPRESS={codec}"),
                    format!("PHOTOMETRIC={photo}"),
                ];
                co.extend(layout.iter().map(|s| (*s).to_string()));
                let tif = dir.path().join(format!("fax{n}.tif"));
                let co_refs: Vec<&str> = co.iter().map(String::as_str).collect();
                gdal_tif(&raw, &tif, &co_refs);
                files.push((format!("{co:?}"), tif));
            }
        }
    }
    // and those only libtiff's tiffcp writes: two-dimensional Group 3, with and without
    // fill bits before each end-of-line code, in strips of 7 rows
    let plain = dir.path().join("plain.tif");
    gdal_tif(&raw, &plain, &["NBITS=1", "BLOCKYSIZE=7"]);
    for coding in ["g3:2d", "g3:2d:fill", "g3:1d:fill"] {
        let tif = dir.path().join(format!("{}.tif", coding.replace(':', "_")));
        crate::common::gdal::ok(
            crate::common::gdal::tool("tiffcp")
                .args(["-c", coding])
                .arg(&plain)
                .arg(&tif),
        );
        files.push((format!("tiffcp -c {coding}"), tif));
    }
    let mut gdal_failed = Vec::new();
    for (what, tif) in &files {
        let back = dir.path().join("gdal.raw");
        let out = std::process::Command::new("gdal_translate")
            .args(["-q", "-of", "ENVI"])
            .arg(tif)
            .arg(&back)
            .output()
            .expect("spawn gdal_translate");
        let gdal = std::fs::read(&back).expect("GDAL's reading");
        // libtiff 4.5 (GDAL 3.6) fails on a row of alternating pixels in a tiled RLE or
        // Group 3 file ("Fax3DecodeRLE: Buffer overflow", a row buffer sized for fewer
        // runs) and goes on with the row damaged: there the oracle is the image written
        let errors = String::from_utf8_lossy(&out.stderr).contains("ERROR");
        if errors {
            gdal_failed.push(what.clone());
        } else {
            assert!(gdal == data, "GDAL's own reading of {what}");
        }
        let gdal = if errors { data.clone() } else { gdal };
        for budget in ["1MiB", "64MiB"] {
            let npy = dir.path().join("fax.npy");
            let out = convert_at(tif, &npy, budget);
            assert!(
                out.status.success(),
                "tilestream refused {what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(npy_data(&npy) == gdal, "{what} at --memory {budget}");
            std::fs::remove_file(&npy).expect("rm npy");
        }
    }
    assert_eq!(files.len(), 21);
    assert!(
        gdal_failed.len() <= 4
            && gdal_failed
                .iter()
                .all(|w| w.contains("TILED") && !w.contains("CCITTFAX4")),
        "GDAL failed on {gdal_failed:?}"
    );
}

#[test]
fn a_damaged_fax_strip_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 64);
    let raw = envi(dir.path(), "d", 1, 1, h, w, &bilevel(h, w));
    let tif = dir.path().join("d.tif");
    gdal_tif(&raw, &tif, &["NBITS=1", "COMPRESS=CCITTFAX4"]);
    // the one strip's offset (StripOffsets, one LONG, held in the entry), then zeros over
    // its middle: no Group 4 code is eight zero bits
    let mut b = std::fs::read(&tif).expect("read");
    let off = entry_long(&b, ifd_entry(&b, 273));
    let cnt = entry_long(&b, ifd_entry(&b, 279));
    b[off + cnt / 3..off + cnt / 3 + 8].fill(0);
    std::fs::write(&tif, b).expect("write");
    let npy = dir.path().join("d.npy");
    let out = convert_at(&tif, &npy, "64MiB");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(1 | 2)), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("TIFF chunk 0"), "{err}");
    assert!(!npy.exists(), "an output was left");
}

/// A fixture's source: name, ENVI type code, bands, data, creation options.
type Source<'a> = (&'a str, u8, usize, Vec<u8>, &'a [&'a str]);

#[test]
fn bit_reversed_fill_order_reads_as_gdal_reads_it() {
    // FillOrder 2 (tiffcp -f lsb2msb): libtiff reverses the bits of every stored byte
    // before any codec; files of whole and packed samples, every codec tiffcp writes
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (40, 30);
    let sources: [Source; 4] = [
        ("u8", 1, 1, pattern_u8(h, w), &["BLOCKYSIZE=9"]),
        (
            "u16x3",
            12,
            3,
            packed_pattern(16, 2, 3, h, w),
            &["INTERLEAVE=PIXEL", "BLOCKYSIZE=9"],
        ),
        ("u12", 12, 1, packed_pattern(12, 2, 1, h, w), &["NBITS=12"]),
        ("bilevel", 1, 1, bilevel(h, w), &["NBITS=1", "BLOCKYSIZE=9"]),
    ];
    let mut checked = 0;
    for (name, code, bands, data, co) in &sources {
        let raw = envi(dir.path(), name, *code, *bands, h, w, data);
        let plain = dir.path().join(format!("{name}.tif"));
        gdal_tif(&raw, &plain, co);
        let mut codings = vec!["none", "lzw", "zip", "packbits"];
        if *name == "bilevel" {
            codings.extend(["g3", "g3:2d", "g4"]);
        }
        for coding in codings {
            let tif = dir
                .path()
                .join(format!("{name}_{}.tif", coding.replace(':', "_")));
            crate::common::gdal::ok(
                crate::common::gdal::tool("tiffcp")
                    .args(["-f", "lsb2msb", "-c", coding])
                    .arg(&plain)
                    .arg(&tif),
            );
            let gdal = gdal_read(&tif, dir.path());
            assert!(gdal == *data, "GDAL's own reading of {name} {coding}");
            let npy = dir.path().join("r.npy");
            let out = convert_at(&tif, &npy, "1MiB");
            assert!(
                out.status.success(),
                "{name} {coding}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(npy_data(&npy) == gdal, "{name} {coding}");
            checked += 1;
        }
    }
    assert_eq!(checked, 19);
}

fn pattern_u8(h: usize, w: usize) -> Vec<u8> {
    (0..h * w).map(|i| (i * 37 % 251) as u8).collect()
}

#[test]
fn old_style_lzw_reads_as_gdal_reads_it() {
    // no tool writes pre-TIFF 6.0 LZW any more: a GDAL file's one strip is coded again
    // the old way (codes least significant bit first, GIF's code widths; weezl's
    // encoder) and the file patched to point at it; GDAL's reading (libtiff's
    // LZWDecodeCompat) is the oracle
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (37, 45);
    let sources: [Source; 2] = [
        ("u8", 1, 1, pattern_u8(h, w), &[]),
        (
            "u16x3",
            12,
            3,
            packed_pattern(16, 2, 3, h, w),
            &["INTERLEAVE=PIXEL"],
        ),
    ];
    for (name, code, bands, data, co) in &sources {
        let raw = envi(dir.path(), name, *code, *bands, h, w, data);
        let tif = dir.path().join(format!("{name}.tif"));
        let mut options = co.to_vec();
        options.push("BLOCKYSIZE=37");
        gdal_tif(&raw, &tif, &options);
        let mut b = std::fs::read(&tif).expect("read");
        let (comp, offs, counts) = (ifd_entry(&b, 259), ifd_entry(&b, 273), ifd_entry(&b, 279));
        let (off, cnt) = (entry_long(&b, offs), entry_long(&b, counts));
        let strip = b[off..off + cnt].to_vec();
        let coded = weezl::encode::Encoder::new(weezl::BitOrder::Lsb, 8)
            .encode(&strip)
            .expect("encode");
        assert!(coded[0] == 0 && coded[1] & 1 == 1, "an old-style stream");
        let at = u32::try_from(b.len()).expect("small");
        b.extend_from_slice(&coded);
        b[comp + 8..comp + 10].copy_from_slice(&5u16.to_le_bytes());
        b[offs + 8..offs + 12].copy_from_slice(&at.to_le_bytes());
        b[counts + 8..counts + 12]
            .copy_from_slice(&u32::try_from(coded.len()).expect("small").to_le_bytes());
        std::fs::write(&tif, &b).expect("write");
        let gdal = gdal_read(&tif, dir.path());
        assert!(gdal == *data, "GDAL's own reading of old-style LZW {name}");
        let npy = dir.path().join("o.npy");
        let out = convert_at(&tif, &npy, "1MiB");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(npy_data(&npy) == gdal, "old-style LZW {name}");
    }
}

#[test]
fn packed_palette_indices_read_as_gdal_reads_them() {
    // 1, 2 and 4-bit Palette images: GDAL gives the indices (the colour table aside)
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (21, 35);
    for bits in [1u32, 2, 4] {
        let data = packed_pattern(bits, 1, 1, h, w);
        let raw = envi(dir.path(), &format!("pal{bits}"), 1, 1, h, w, &data);
        let vrt = crate::tiff_matrix::palette_vrt(dir.path(), &raw, "u8", h, w);
        let tif = dir.path().join(format!("pal{bits}.tif"));
        gdal_tif(&vrt, &tif, &[&format!("NBITS={bits}"), "COMPRESS=LZW"]);
        let gdal = gdal_read(&tif, dir.path());
        assert!(gdal == data, "GDAL's own reading of {bits}-bit Palette");
        let npy = dir.path().join("pal.npy");
        let out = convert_at(&tif, &npy, "1MiB");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(npy_data(&npy) == gdal, "{bits}-bit Palette");
    }
}
