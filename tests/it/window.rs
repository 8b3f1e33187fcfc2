//! Windows of inputs (`--window`): a box of a GeoTIFF read as GDAL reads it
//! (`gdal_translate -srcwin`), values and georeferencing; a box of a `.npy` and of a
//! Zarr store equal to the slice of the data the test wrote; operations over a box are
//! the same operations over a file holding just the box.

use std::path::Path;

use crate::common::gdal::{envi, gdal_read, gdal_tif, georef_of, npy_data, pattern, tool, ts};
use crate::common::write_npy;
use tilestream::DType;

/// The box `rows` x `cols` of every band of `(bands, h, w)` data of `es`-byte elements.
fn slice(
    data: &[u8],
    es: usize,
    [bands, h, w]: [usize; 3],
    rows: (usize, usize),
    cols: (usize, usize),
) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..bands {
        for y in rows.0..rows.1 {
            let at = ((b * h + y) * w + cols.0) * es;
            out.extend_from_slice(&data[at..at + (cols.1 - cols.0) * es]);
        }
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// Boxes of tiled (both interleaves) and striped GeoTIFFs, converted to `.npy` at two
/// budgets and to a GeoTIFF, read as GDAL reads `-srcwin` of them: the same values,
/// and the output's geotransform is GDAL's for the box.
#[test]
fn geotiff_windows_read_as_gdal_srcwin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (3, 150, 203);
    let data = pattern("u16", bands, h, w);
    let raw = envi(dir.path(), "x", 12, bands, h, w, &data);
    let layouts: [&[&str]; 3] = [
        &[
            "TILED=YES",
            "BLOCKXSIZE=32",
            "BLOCKYSIZE=32",
            "COMPRESS=DEFLATE",
            "INTERLEAVE=PIXEL",
        ],
        &[
            "TILED=YES",
            "BLOCKXSIZE=48",
            "BLOCKYSIZE=16",
            "COMPRESS=LZW",
            "INTERLEAVE=BAND",
        ],
        &["COMPRESS=ZSTD", "BLOCKYSIZE=7", "INTERLEAVE=BAND"],
    ];
    // (first row, rows, first column, columns): inside tiles, on tile edges, to the
    // image's far corner
    let boxes = [
        (37, 74, 45, 145),
        (32, 64, 0, 96),
        (149, 1, 202, 1),
        (0, 150, 1, 202),
    ];
    for (k, co) in layouts.iter().enumerate() {
        let tif = dir.path().join(format!("x{k}.tif"));
        gdal_tif(&raw, &tif, co);
        for &(r0, nr, c0, nc) in &boxes {
            let window = format!("{r0}:{},{c0}:{}", r0 + nr, c0 + nc);
            let g = dir.path().join(format!("g{k}_{r0}_{c0}.tif"));
            crate::common::gdal::ok(
                tool("gdal_translate")
                    .args(["-q", "-srcwin"])
                    .args([c0, r0, nc, nr].map(|v| v.to_string()))
                    .arg(&tif)
                    .arg(&g),
            );
            let want = gdal_read(&g, dir.path());
            assert_eq!(
                want,
                slice(&data, 2, [bands, h, w], (r0, r0 + nr), (c0, c0 + nc)),
                "GDAL's own -srcwin"
            );
            for budget in ["1MiB", "64MiB"] {
                let npy = dir.path().join("w.npy");
                ts(&[
                    "convert",
                    s(&tif),
                    s(&npy),
                    "--window",
                    &window,
                    "-m",
                    budget,
                ]);
                assert!(npy_data(&npy) == want, "{co:?} window {window} at {budget}");
            }
            let out = dir.path().join(format!("t{k}_{r0}_{c0}.tif"));
            ts(&[
                "convert",
                s(&tif),
                s(&out),
                "--window",
                &window,
                "-m",
                "1MiB",
            ]);
            assert!(
                gdal_read(&out, dir.path()) == want,
                "{co:?} {window} as a GeoTIFF"
            );
            let (gt_ts, wkt_ts, _) = georef_of(&out);
            let (gt_gdal, wkt_gdal, _) = georef_of(&g);
            assert_eq!(gt_ts, gt_gdal, "{co:?} {window}: the box's geotransform");
            assert_eq!(wkt_ts, wkt_gdal);
        }
    }
}

/// Boxes of a `.npy` (mapped) and of a Zarr store (chunks of 16 x 16 x 1 across
/// bands) equal the slice of the data; a box of the leading axis too (`--window` of
/// every axis); the reduction over a box equals the box's sum.
#[test]
fn npy_and_zarr_windows_are_the_slice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bands, h, w) = (3, 61, 77);
    let data: Vec<u8> = (0..bands * h * w)
        .flat_map(|i| (((i * 2_654_435_761usize) >> 7) as u32).to_le_bytes())
        .collect();
    let npy = dir.path().join("x.npy");
    write_npy(&npy, DType::U32, &[bands, h, w], &data);
    let zarr = dir.path().join("x.zarr");
    ts(&[
        "convert",
        s(&npy),
        s(&zarr),
        "--zarr-chunks",
        "1x16x16",
        "-m",
        "4MiB",
    ]);
    for input in [&npy, &zarr] {
        for (rows, cols) in [
            ((5, 50), (17, 60)),
            ((0, 61), (76, 77)),
            ((16, 32), (0, 77)),
        ] {
            let window = format!("{}:{},{}:{}", rows.0, rows.1, cols.0, cols.1);
            let want = slice(&data, 4, [bands, h, w], rows, cols);
            for budget in ["256KiB", "16MiB"] {
                let out = dir.path().join("w.npy");
                ts(&[
                    "convert",
                    s(input),
                    s(&out),
                    "--window",
                    &window,
                    "-m",
                    budget,
                ]);
                assert!(
                    npy_data(&out) == want,
                    "{} {window} at {budget}",
                    input.display()
                );
            }
            // the sum of each band of the box, against the box's values
            let out = dir.path().join("sum.npy");
            ts(&[
                "reduce",
                s(input),
                s(&out),
                "--op",
                "sum",
                "--axis",
                "1,2",
                "--window",
                &window,
                "-m",
                "256KiB",
            ]);
            let sums: Vec<u64> = want
                .chunks_exact(4 * (rows.1 - rows.0) * (cols.1 - cols.0))
                .map(|b| {
                    b.chunks_exact(4)
                        .map(|v| u64::from(u32::from_le_bytes(v.try_into().expect("4"))))
                        .sum()
                })
                .collect();
            let got: Vec<u64> = npy_data(&out)
                .chunks_exact(8)
                .map(|v| u64::from_le_bytes(v.try_into().expect("8")))
                .collect();
            assert_eq!(got, sums, "{} {window}", input.display());
        }
        // every axis: bands 1..3 only
        let out = dir.path().join("b.npy");
        ts(&[
            "convert",
            s(input),
            s(&out),
            "--window",
            "1:3,2:9,3:4",
            "-m",
            "256KiB",
        ]);
        let mut want = Vec::new();
        for b in 1..3 {
            want.extend(slice(&data[b * h * w * 4..], 4, [1, h, w], (2, 9), (3, 4)));
        }
        assert!(npy_data(&out) == want, "{} bands 1..3", input.display());
    }
}

/// A stencil over a box is the stencil over a file holding just the box (the box's
/// edges are the image's edges: nothing outside it is read), and `map` over a box of
/// two inputs is the map over their boxes.
#[test]
fn operations_over_a_window_are_operations_over_the_box() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, w) = (90, 130);
    let data: Vec<u8> = (0..h * w)
        .flat_map(|i| (((i * 37) % 1001) as f32).to_le_bytes())
        .collect();
    let x = dir.path().join("x.npy");
    write_npy(&x, DType::F32, &[h, w], &data);
    let tif = dir.path().join("x.tif");
    ts(&["convert", s(&x), s(&tif), "--tiff-tile", "16", "-m", "4MiB"]);
    let (rows, cols) = ((11, 70), (23, 101));
    let boxed = dir.path().join("box.npy");
    write_npy(
        &boxed,
        DType::F32,
        &[rows.1 - rows.0, cols.1 - cols.0],
        &slice(&data, 4, [1, h, w], rows, cols),
    );
    let window = format!("{}:{},{}:{}", rows.0, rows.1, cols.0, cols.1);
    for input in [&x, &tif] {
        let a = dir.path().join("a.npy");
        let b = dir.path().join("b.npy");
        ts(&[
            "stencil",
            "--filter",
            "gaussian:sigma=2",
            s(input),
            s(&a),
            "--window",
            &window,
            "-m",
            "256KiB",
        ]);
        ts(&[
            "stencil",
            "--filter",
            "gaussian:sigma=2",
            s(&boxed),
            s(&b),
            "-m",
            "256KiB",
        ]);
        assert!(
            npy_data(&a) == npy_data(&b),
            "stencil over {}",
            input.display()
        );
        ts(&[
            "map",
            "p * 2 + q",
            s(&a),
            "--in",
            &format!("p={}", s(input)),
            "--in",
            &format!("q={}", s(&x)),
            "--window",
            &window,
            "-m",
            "512KiB",
        ]);
        ts(&[
            "map",
            "p * 2 + q",
            s(&b),
            "--in",
            &format!("p={}", s(&boxed)),
            "--in",
            &format!("q={}", s(&boxed)),
            "-m",
            "512KiB",
        ]);
        assert!(npy_data(&a) == npy_data(&b), "map over {}", input.display());
    }
}

/// Rows of a GeoTIFF (a cluster task's share), mapped or decoded, keep its nodata value
/// and move its georeferencing to their first row, as GDAL's `-srcwin` of them does.
#[test]
fn rows_of_a_geotiff_keep_its_nodata_and_georeferencing() {
    let dir = tempfile::tempdir().expect("tempdir");
    // one band: the leading axis, which a task's share cuts, is the image's rows
    let (h, w) = (60, 40);
    let raw = envi(dir.path(), "x", 12, 1, h, w, &pattern("u16", 1, h, w));
    // uncompressed band-sequential strips are mapped; tiles are decoded
    for (k, co) in [
        &["INTERLEAVE=BAND"][..],
        &["TILED=YES", "COMPRESS=DEFLATE"][..],
    ]
    .iter()
    .enumerate()
    {
        let tif = dir.path().join(format!("r{k}.tif"));
        gdal_tif(&raw, &tif, co);
        let whole = tilestream::TensorFile::open(&tif).expect("open");
        assert_eq!(whole.chunked().is_none(), k == 0, "{co:?}");
        let rows = whole.rows(10..50).expect("rows");
        assert_eq!(rows.shape(), &[40, w]);
        assert_eq!(rows.missing(), Some(0.0), "{co:?}: the nodata value");
        let g = dir.path().join(format!("g{k}.tif"));
        crate::common::gdal::ok(
            tool("gdal_translate")
                .args(["-q", "-srcwin", "0", "10", &w.to_string(), "40"])
                .arg(&tif)
                .arg(&g),
        );
        let gt: Vec<f64> = georef_of(&g)
            .0
            .as_array()
            .expect("geotransform")
            .iter()
            .map(|v| v.as_f64().expect("number"))
            .collect();
        let ours = rows
            .georef()
            .and_then(tilestream::GeoRef::geotransform)
            .expect("georef");
        assert_eq!(ours.to_vec(), gt, "{co:?}: the rows' geotransform");
    }
}

/// A window out of range, or one that does not parse, is one line, exit 2, and
/// nothing is written.
#[test]
fn bad_windows_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = dir.path().join("x.npy");
    write_npy(&x, DType::U8, &[4, 5], &[0; 20]);
    let out = dir.path().join("o.npy");
    for (window, says) in [
        ("0:4,2:6", "window 2..6 of axis 1 is out of range"),
        ("0:1,0:1,0:1", "3 ranges for a tensor of 2 axes"),
        ("3:1", "START <= END"),
        ("a:b", "not a range"),
    ] {
        let o = crate::common::bin()
            .args(["convert", s(&x), s(&out), "--window", window])
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{window}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!o.status.success());
        assert!(!out.exists());
    }
}
