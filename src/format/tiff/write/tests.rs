//! Tests of `src/format/tiff/write.rs`.
use super::*;
use crate::format::zarr::ZarrCompression;

#[test]
fn predictors_parse_and_follow_the_dtype_and_compression() {
    let p = |s: &str| s.parse::<TiffPredictor>().ok();
    assert_eq!(p("auto"), Some(TiffPredictor::Auto));
    assert_eq!(p("NONE"), Some(TiffPredictor::None));
    assert_eq!(p("2"), Some(TiffPredictor::Horizontal));
    assert_eq!(p("floating-point"), Some(TiffPredictor::Float));
    assert_eq!(p("lzw"), None);
    let d6 = TiffCompression::Deflate(6);
    let z = TiffCompression::Zstd(3);
    let none = TiffCompression::None;
    let tag = |p: TiffPredictor, d: DType, c: TiffCompression| p.tag(d, c).ok();
    for (pred, dtype, comp, want) in [
        (TiffPredictor::Auto, DType::F32, d6, Some(3)),
        (TiffPredictor::Auto, DType::F64, z, Some(3)),
        (TiffPredictor::Auto, DType::F16, d6, Some(3)),
        (TiffPredictor::Auto, DType::U16, d6, Some(1)),
        (TiffPredictor::Auto, DType::F32, none, Some(1)),
        (TiffPredictor::None, DType::F32, d6, Some(1)),
        (TiffPredictor::None, DType::F32, none, Some(1)),
        (TiffPredictor::Horizontal, DType::I16, d6, Some(2)),
        (TiffPredictor::Horizontal, DType::F32, z, Some(2)),
        (TiffPredictor::Float, DType::F64, d6, Some(3)),
        (TiffPredictor::Float, DType::U8, d6, None),
        (TiffPredictor::Horizontal, DType::U8, none, None),
    ] {
        assert_eq!(tag(pred, dtype, comp), want, "{pred:?} {dtype} {comp:?}");
    }
}

/// What `predict` writes, the decoder's `unpredict` (written from libtiff's reading
/// side, and checked against GDAL-made files in `tests/it/tiff_matrix.rs`) undoes
/// exactly, for every sample size, one and several samples a pixel, several rows.
#[test]
fn predicted_rows_are_undone_by_the_decoder() {
    use crate::format::tiff::decode::{ChunkRows, unpredict};
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for (predictor, sizes) in [(2u16, &[1usize, 2, 4, 8][..]), (3, &[2, 4, 8])] {
        for &es in sizes {
            for spp in [1usize, 3] {
                let (rows, width) = (3, 17);
                let row_bytes = width * spp * es;
                let orig: Vec<u8> = (0..rows * row_bytes)
                    .map(|_| {
                        seed = seed
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        (seed >> 56) as u8
                    })
                    .collect();
                let mut data = orig.clone();
                predict(&mut data, row_bytes, spp, es, predictor);
                assert_ne!(data, orig, "predictor {predictor} es {es} spp {spp}");
                let geometry = ChunkRows {
                    rows,
                    row_bytes,
                    spp,
                    es,
                    unit: es,
                };
                unpredict(&geometry, true, predictor, &mut data);
                assert_eq!(data, orig, "predictor {predictor} es {es} spp {spp}");
            }
        }
    }
}

#[test]
fn compression_specs_parse_with_levels_in_range() {
    let t = |s: &str| s.parse::<TiffCompression>();
    assert_eq!(t("deflate").ok(), Some(TiffCompression::Deflate(6)));
    assert_eq!(t("DEFLATE:3").ok(), Some(TiffCompression::Deflate(3)));
    assert_eq!(t("zstd").ok(), Some(TiffCompression::Zstd(9)));
    assert_eq!(t("none").ok(), Some(TiffCompression::None));
    for bad in ["deflate:10", "deflate:0", "zstd:x", "none:1", "lzw", ""] {
        assert!(t(bad).is_err(), "{bad}");
    }
    let z = |s: &str| s.parse::<ZarrCompression>();
    assert_eq!(z("blosc:9").ok(), Some(ZarrCompression::Blosc(9)));
    assert_eq!(z("gzip").ok(), Some(ZarrCompression::Gzip(5)));
    assert_eq!(z("zstd:-3").ok(), Some(ZarrCompression::Zstd(-3)));
    for bad in ["gzip:10", "blosc:-1", "lz4", "none:0"] {
        assert!(z(bad).is_err(), "{bad}");
    }
}
