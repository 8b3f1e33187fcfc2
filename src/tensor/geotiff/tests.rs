//! Unit tests of GeoTIFF reading and its helpers.
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
