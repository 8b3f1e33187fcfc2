//! Unit tests of GeoTIFF reading and its helpers.
use super::nodata::nodata_sample;
use super::*;

#[test]
fn geotransform_from_tiepoint_or_matrix_and_shifted_to_a_window() {
    let g = GeoRef {
        pixel_scale: Some(vec![10.0, 10.0, 0.0]),
        tiepoint: Some(vec![0.0, 0.0, 0.0, 500_000.0, 4_000_000.0, 0.0]),
        ..GeoRef::default()
    };
    assert_eq!(
        g.geotransform(),
        Some([500_000.0, 10.0, 0.0, 4_000_000.0, 0.0, -10.0])
    );
    // the window at row 3, column 5 starts 5 pixels east and 3 south
    assert_eq!(
        g.shifted(3.0, 5.0).geotransform(),
        Some([500_050.0, 10.0, 0.0, 3_999_970.0, 0.0, -10.0])
    );
    // a rotated matrix: the origin moves along both axes of the matrix
    let m = GeoRef {
        transformation: Some(vec![
            2.0, 0.5, 0.0, 100.0, 0.25, -2.0, 0.0, 200.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
        ]),
        ..GeoRef::default()
    };
    assert_eq!(m.geotransform(), Some([100.0, 2.0, 0.5, 200.0, 0.25, -2.0]));
    assert_eq!(
        m.shifted(4.0, 1.0).geotransform(),
        Some([
            100.0 + 2.0 + 4.0 * 0.5,
            2.0,
            0.5,
            200.0 + 0.25 - 8.0,
            0.25,
            -2.0
        ])
    );
}

#[test]
fn nodata_samples_are_the_exact_value_or_none() {
    // the sample a sparse chunk of a file is filled with: integers from their digits
    let cases: [(DType, &str, Option<Vec<u8>>); 8] = [
        (
            DType::U64,
            "18446744073709551615",
            Some(u64::MAX.to_le_bytes().to_vec()),
        ),
        (DType::U64, "18446744073709551616", None),
        (
            DType::I64,
            "-9223372036854775808",
            Some(i64::MIN.to_le_bytes().to_vec()),
        ),
        (
            DType::I16,
            "-32768",
            Some((-32768i16).to_le_bytes().to_vec()),
        ),
        (DType::U16, "-1", None),
        (DType::U8, "2.0", Some(vec![2])),
        (DType::Bool, "2", None),
        (DType::F32, "-9999", Some((-9999f32).to_le_bytes().to_vec())),
    ];
    for (d, t, want) in cases {
        assert_eq!(nodata_sample(d, t), want, "{d} {t}");
    }
}

/// A chunk's errors carry its figures as fields (what a caller matches on), and the
/// message a person reads says the same.
#[test]
fn chunk_errors_carry_their_figures() {
    let mut out = vec![0u8; 16];
    let path = Path::new("x.tif");
    let e = decode::decompress(path, "tile 0", decode::Codec::None, &[1, 2, 3], &mut out)
        .expect_err("short");
    assert!(
        matches!(
            &e,
            Error::Tiff {
                source: TiffError::ChunkSize {
                    expected: 16,
                    found: 3,
                    ..
                },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("tile 0 decodes to 3 bytes, but the layout needs 16"),
        "{e}"
    );
    let Error::Tiff { source, .. } = &e else {
        unreachable!()
    };
    assert_eq!(source.kind(), crate::error::FormatErrorKind::Corrupt);
}
