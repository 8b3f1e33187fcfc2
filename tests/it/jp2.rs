//! JPEG 2000 inputs read exactly as GDAL reads them, GDAL's reading the oracle: every
//! sample type GDAL writes, lossy and lossless, one to four components (RGB with and
//! without the colour transform, an alpha channel definition, a palette read as its
//! indices), low bit depths, codestream tiles that do not divide the image, one tile
//! larger than 1024 pixels and tiny tiles (both decoded by area), progression orders,
//! quality layers, tile-parts, markers, raw codestreams, georeferencing boxes before and
//! after the codestream. Sub-sampled components, a 1-bit alpha, an off-grid tile grid,
//! a truncated file and a missing library are refused in one line, no output left.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::gdal::{
    BIN, TYPES, envi, georef_of, noisy_image, ok, pattern, reads_as_gdal_at, refused, tool,
};

/// A JPEG 2000 file made by GDAL's JP2OpenJPEG driver from `raw`, georeferenced, with
/// creation options `co`.
fn gdal_jp2(raw: &Path, out: &Path, co: &[&str]) {
    let mut c = tool("gdal_translate");
    c.args(["-q", "-of", "JP2OpenJPEG", "-a_srs", "EPSG:32633"])
        .args(["-a_ullr", "500000", "4000000", "506000", "3995000"]);
    for o in co {
        c.arg("-co").arg(o);
    }
    ok(c.arg(raw).arg(out));
}

/// The raw (ENVI) input of `bands x h x w` samples of `dtype`.
fn source(dir: &Path, dtype: &str, bands: usize, h: usize, w: usize) -> PathBuf {
    let (_, code, _) = TYPES
        .iter()
        .copied()
        .find(|t| t.0 == dtype)
        .expect("a type");
    let data = if dtype == "u8" {
        noisy_image(bands, h, w)
    } else {
        pattern(dtype, bands, h, w)
    };
    envi(
        dir,
        &format!("{dtype}_{bands}_{h}_{w}"),
        code,
        bands,
        h,
        w,
        &data,
    )
}

/// (name, dtype, bands, height, width, creation options, budgets)
type Case<'a> = (
    &'a str,
    &'a str,
    usize,
    usize,
    usize,
    Vec<&'a str>,
    &'a [&'a str],
);

#[test]
fn gdal_written_jpeg2000_reads_as_gdal_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (h, w) = (203, 300);
    let tiles = ["BLOCKXSIZE=128", "BLOCKYSIZE=96"];
    let small = ["1MiB", "64MiB"];
    let cases: Vec<Case<'_>> = vec![
        ("grey lossy", "u8", 1, h, w, tiles.to_vec(), &small),
        ("rgb lossy (ICT)", "u8", 3, h, w, tiles.to_vec(), &small),
        (
            "rgb lossless without colour transform",
            "u8",
            3,
            h,
            w,
            [&tiles[..], &["REVERSIBLE=YES", "QUALITY=100", "YCC=NO"]].concat(),
            &small,
        ),
        (
            "rgba with an alpha channel definition",
            "u8",
            4,
            h,
            w,
            [&tiles[..], &["ALPHA=YES", "QUALITY=40"]].concat(),
            &small,
        ),
        (
            "4-bit grey",
            "u8",
            1,
            h,
            w,
            [&tiles[..], &["NBITS=4", "REVERSIBLE=YES"]].concat(),
            &small,
        ),
        (
            "12-bit u16 lossless",
            "u16",
            1,
            h,
            w,
            [&tiles[..], &["NBITS=12", "REVERSIBLE=YES", "QUALITY=100"]].concat(),
            &small,
        ),
        (
            "u16 two bands lossy",
            "u16",
            2,
            h,
            w,
            [&tiles[..], &["QUALITY=50"]].concat(),
            &small,
        ),
        ("i16 lossy", "i16", 1, h, w, tiles.to_vec(), &small),
        (
            "i16 lossless",
            "i16",
            1,
            h,
            w,
            [&tiles[..], &["REVERSIBLE=YES", "QUALITY=100"]].concat(),
            &small,
        ),
        (
            "28-bit u32 lossless",
            "u32",
            1,
            h,
            w,
            [&tiles[..], &["NBITS=28", "REVERSIBLE=YES", "QUALITY=100"]].concat(),
            &small,
        ),
        (
            "28-bit i32 lossy",
            "i32",
            1,
            h,
            w,
            [&tiles[..], &["NBITS=28"]].concat(),
            &small,
        ),
        (
            "one tile wider than 1024 (decoded by area)",
            "u8",
            3,
            150,
            1100,
            vec!["BLOCKXSIZE=1100", "BLOCKYSIZE=150", "QUALITY=30"],
            &["8MiB", "64MiB"],
        ),
        (
            "tiny tiles (decoded by area)",
            "u16",
            1,
            90,
            100,
            vec!["BLOCKXSIZE=16", "BLOCKYSIZE=16", "BLOCKSIZE_STRICT=YES"],
            &small,
        ),
        (
            "one tile larger than the image (decoded by area)",
            "u8",
            2,
            h,
            w,
            vec!["BLOCKXSIZE=512", "BLOCKYSIZE=512", "BLOCKSIZE_STRICT=YES"],
            &["2MiB", "64MiB"],
        ),
        (
            "RPCL, 3 resolutions, tile-parts by resolution, SOP, EPH, PLT, TLM",
            "u8",
            3,
            h,
            w,
            [
                &tiles[..],
                &[
                    "PROGRESSION=RPCL",
                    "RESOLUTIONS=3",
                    "TILEPARTS=RESOLUTIONS",
                    "SOP=YES",
                    "EPH=YES",
                    "PLT=YES",
                    "TLM=YES",
                    "CODEBLOCK_WIDTH=32",
                    "CODEBLOCK_HEIGHT=16",
                ],
            ]
            .concat(),
            &small,
        ),
        (
            "three quality layers",
            "u16",
            1,
            h,
            w,
            [&tiles[..], &["QUALITY=10,50,90"]].concat(),
            &small,
        ),
        (
            "georeferencing after the codestream",
            "u8",
            1,
            h,
            w,
            [&tiles[..], &["GEOBOXES_AFTER_JP2C=YES"]].concat(),
            &small,
        ),
    ];
    for (name, dtype, bands, h, w, co, budgets) in &cases {
        let raw = source(d, dtype, *bands, *h, *w);
        let jp2 = d.join("case.jp2");
        gdal_jp2(&raw, &jp2, co);
        reads_as_gdal_at(&jp2, d, name, budgets);
    }
    // a raw codestream, and the georeferencing of a GeoJP2 box carried to a GeoTIFF
    let raw = source(d, "u8", 3, h, w);
    let j2k = d.join("case.j2k");
    gdal_jp2(&raw, &j2k, &[&tiles[..], &["CODEC=J2K"]].concat());
    reads_as_gdal_at(&j2k, d, "raw codestream", &small);
    let jp2 = d.join("geo.jp2");
    gdal_jp2(&raw, &jp2, &["GMLJP2=NO"]);
    let tif = d.join("geo.tif");
    ok(Command::new(BIN)
        .arg("convert")
        .arg(&jp2)
        .arg(&tif)
        .args(["--progress", "never"]));
    let (gt, wkt, _) = georef_of(&tif);
    let (want_gt, want_wkt, _) = georef_of(&jp2);
    assert_eq!(gt, want_gt, "geotransform");
    assert!(!gt.is_null());
    assert_eq!(wkt, want_wkt, "coordinate system");
}

#[test]
fn a_palette_image_reads_as_its_indices() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (h, w) = (203, 300);
    let idx: Vec<u8> = (0..h * w)
        .map(|i| ((i % w / 7 + i / w / 5) % 4) as u8)
        .collect();
    envi(d, "idx", 1, 1, h, w, &idx);
    std::fs::write(
        d.join("pal.vrt"),
        format!(
            r#"<VRTDataset rasterXSize="{w}" rasterYSize="{h}">
  <VRTRasterBand dataType="Byte" band="1">
    <ColorInterp>Palette</ColorInterp>
    <ColorTable>
      <Entry c1="0" c2="0" c3="0" c4="255"/><Entry c1="255" c2="0" c3="0" c4="255"/>
      <Entry c1="0" c2="255" c3="0" c4="255"/><Entry c1="0" c2="0" c3="255" c4="255"/>
    </ColorTable>
    <SimpleSource><SourceFilename relativeToVRT="1">idx.raw</SourceFilename>
      <SourceBand>1</SourceBand></SimpleSource>
  </VRTRasterBand>
</VRTDataset>"#
        ),
    )
    .expect("vrt");
    let jp2 = d.join("pal.jp2");
    ok(tool("gdal_translate")
        .args(["-q", "-of", "JP2OpenJPEG", "-co", "REVERSIBLE=YES"])
        .args(["-co", "QUALITY=100"])
        .arg(d.join("pal.vrt"))
        .arg(&jp2));
    assert!(
        std::fs::read(&jp2)
            .expect("read")
            .windows(4)
            .any(|b| b == b"pclr"),
        "GDAL wrote a palette box"
    );
    reads_as_gdal_at(&jp2, d, "palette", &["1MiB"]);
    let npy = d.join("pal.npy");
    ok(Command::new(BIN)
        .arg("convert")
        .arg(&jp2)
        .arg(&npy)
        .args(["--progress", "never"]));
    assert_eq!(crate::common::gdal::npy_data(&npy), idx, "the indices");
}

#[test]
fn unreadable_jpeg2000_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let raw = source(d, "u8", 3, 203, 300);
    let tiles = ["BLOCKXSIZE=128", "BLOCKYSIZE=96"];
    // 4:2:0 chroma (GDAL writes it for RGB of even sizes only)
    let even = source(d, "u8", 3, 202, 300);
    let sub = d.join("sub.jp2");
    ok(tool("gdal_translate")
        .args(["-q", "-of", "JP2OpenJPEG", "-colorinterp", "red,green,blue"])
        .args(["-co", "YCBCR420=YES"])
        .arg(&even)
        .arg(&sub));
    refused(&sub, d, "sub-sampling", &[]);
    // a 1-bit alpha, which GDAL promotes to 0/255
    let raw4 = source(d, "u8", 4, 203, 300);
    let alpha = d.join("alpha.jp2");
    gdal_jp2(&raw4, &alpha, &["ALPHA=YES", "1BIT_ALPHA=YES"]);
    refused(&alpha, d, "1-bit channel", &[]);
    // a codestream whose image starts 5 columns into its tile grid
    let j2k = d.join("good.j2k");
    gdal_jp2(&raw, &j2k, &[&tiles[..], &["CODEC=J2K"]].concat());
    let mut b = std::fs::read(&j2k).expect("read");
    assert_eq!(&b[..4], &[0xff, 0x4f, 0xff, 0x51]);
    b[16..20].copy_from_slice(&5u32.to_be_bytes()); // XOsiz
    let off = d.join("off.j2k");
    std::fs::write(&off, &b).expect("write");
    refused(&off, d, "tile grid", &[]);
    // truncated: the tile-parts run past the end
    let b = std::fs::read(&j2k).expect("read");
    let cut = d.join("cut.j2k");
    std::fs::write(&cut, &b[..b.len() * 2 / 3]).expect("write");
    refused(&cut, d, "past the codestream's end", &[]);
    // not JPEG 2000 at all, by extension
    let junk = d.join("junk.jp2");
    std::fs::write(&junk, b"this is no image").expect("write");
    refused(&junk, d, "not a JPEG 2000 file", &[]);
    // OpenJPEG missing
    refused(
        &j2k,
        d,
        "TILESTREAM_OPENJPEG",
        &[("TILESTREAM_OPENJPEG", "/nonexistent/libnothing.so")],
    );
}
