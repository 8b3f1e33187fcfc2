//! Unit tests of the parent module.

use super::*;

#[test]
fn packbits_decodes_the_tiff_spec_example() {
    // TIFF 6.0, section 9
    let src = [
        0xFE, 0xAA, 0x02, 0x80, 0x00, 0x2A, 0xFD, 0xAA, 0x03, 0x80, 0x00, 0x2A, 0x22, 0xF7, 0xAA,
    ];
    let want = [
        0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0xAA, 0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0x22, 0xAA,
        0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA,
    ];
    let mut out = [0u8; 24];
    assert_eq!(unpack_bits(&src, &mut out), 24);
    assert_eq!(out, want);
    // stops at the output's end, and reports a short stream
    let mut small = [0u8; 5];
    assert_eq!(unpack_bits(&src, &mut small), 5);
    let mut big = [0u8; 30];
    assert_eq!(unpack_bits(&src, &mut big), 24);
}

#[test]
fn horizontal_predictor_undoes_differences_per_sample() {
    // two samples per pixel, u16 little-endian: (1, 100), (+2, +5), (+3, -1)
    let vals: [u16; 6] = [1, 100, 2, 5, 3, u16::MAX];
    let mut row: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let rows = ChunkRows {
        rows: 1,
        row_bytes: 12,
        spp: 2,
        es: 2,
        unit: 2,
    };
    unpredict(&rows, true, 2, &mut row);
    let got: Vec<u16> = row
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(got, [1, 100, 3, 105, 6, 104]);
}

#[test]
fn packed_samples_unpack_most_significant_bit_first() {
    // 12 bits: 0xABC 0x123 0xFFF is the bit string ABC123FFF, padded to a byte
    let src = [0xAB, 0xC1, 0x23, 0xFF, 0xF0, 0x80, 0x01, 0x00, 0x00, 0x00];
    let mut dst = [0u8; 12];
    unpack_samples(&src, 5, 3, 12, true, 2, &mut dst);
    let got: Vec<u16> = dst
        .chunks_exact(2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .collect();
    // the second row starts on its own byte: 0x800, 0x100, 0x000
    assert_eq!(got, [0xABC, 0x123, 0xFFF, 0x800, 0x100, 0x000]);
    // 1 bit, 5 a row, then 3 bits, 3 a row: the byte order does not matter
    let mut bits = [0u8; 5];
    unpack_samples(&[0b1011_0000], 1, 5, 1, false, 1, &mut bits);
    assert_eq!(bits, [1, 0, 1, 1, 0]);
    let mut three = [0u8; 3];
    unpack_samples(&[0b1110_1001, 0b1000_0000], 2, 3, 3, true, 1, &mut three);
    assert_eq!(three, [7, 2, 3]);
    // 17 bits (u32 elements): 0x1FFFF then 0x00001
    let mut wide = [0u8; 8];
    unpack_samples(
        &[0xFF, 0xFF, 0x80, 0x00, 0x40],
        5,
        2,
        17,
        true,
        4,
        &mut wide,
    );
    assert_eq!(
        [
            u32::from_ne_bytes(wide[..4].try_into().expect("4")),
            u32::from_ne_bytes(wide[4..].try_into().expect("4"))
        ],
        [0x1FFFF, 0x1]
    );
    // 24 bits as GDAL reads them: big-endian triples in a little-endian file, and
    // the reverse
    let mut w24 = [0u8; 4];
    unpack_samples(&[0x01, 0x02, 0x03], 3, 1, 24, true, 4, &mut w24);
    assert_eq!(u32::from_ne_bytes(w24), 0x0001_0203);
    unpack_samples(&[0x01, 0x02, 0x03], 3, 1, 24, false, 4, &mut w24);
    assert_eq!(u32::from_ne_bytes(w24), 0x0003_0201);
}

#[test]
fn fp24_widens_to_the_same_value() {
    // 1.0: exponent 63, mantissa 0; -2.5: sign, exponent 64, mantissa 0x4000
    let f = |t: u32| f32::from_bits(fp24_to_f32(t));
    assert_eq!(f(0x3F_0000).to_bits(), 1.0f32.to_bits());
    assert_eq!(f(0xC0_4000).to_bits(), (-2.5f32).to_bits());
    // the smallest denormal: 2^-62 * 2^-16
    assert_eq!(f(0x00_0001).to_bits(), 2f32.powi(-78).to_bits());
    // zero keeps its sign; infinity and NaN stay
    assert_eq!(f(0x80_0000).to_bits(), (-0.0f32).to_bits());
    assert_eq!(f(0x7F_0000).to_bits(), f32::INFINITY.to_bits());
    assert!(f(0x7F_0001).is_nan());
    let mut out = [0u8; 8];
    unpack_fp24(&[0x00, 0x00, 0x3F, 0x00, 0x00, 0x00], 6, 2, true, &mut out);
    assert_eq!(out[..4], 1.0f32.to_ne_bytes());
    assert_eq!(out[4..], 0.0f32.to_ne_bytes()[..]);
}

#[test]
fn big_endian_samples_are_swapped() {
    let mut row = vec![0x01, 0x02, 0x03, 0x04];
    let rows = ChunkRows {
        rows: 1,
        row_bytes: 4,
        spp: 1,
        es: 4,
        unit: 4,
    };
    unpredict(&rows, false, 1, &mut row);
    assert_eq!(u32::from_ne_bytes(row.try_into().expect("4")), 0x0102_0304);
}

#[test]
fn floating_point_predictor_reassembles_byte_planes() {
    // encode two f32 per row the way libtiff's fpDiff does, then decode
    let vals = [1.5f32, -2.25, 3.0e-3, 7.0];
    let n = vals.len();
    let mut planes = vec![0u8; n * 4];
    for (k, v) in vals.iter().enumerate() {
        let be = v.to_be_bytes();
        for b in 0..4 {
            planes[b * n + k] = be[b];
        }
    }
    for i in (1..planes.len()).rev() {
        planes[i] = planes[i].wrapping_sub(planes[i - 1]);
    }
    let rows = ChunkRows {
        rows: 1,
        row_bytes: n * 4,
        spp: 1,
        es: 4,
        unit: 4,
    };
    unpredict(&rows, false, 3, &mut planes);
    let got: Vec<f32> = planes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().expect("4")))
        .collect();
    assert_eq!(got, vals);
}

#[test]
fn refuses_what_it_cannot_read_exactly() {
    let p = Path::new("x.tif");
    let ok = SampleTags {
        photometric: Some(2),
        compression: 5,
        predictor: 2,
        fill_order: 1,
        sample_format: 1,
        bits: 8,
        t4_options: 0,
    };
    assert_eq!(validate(p, &ok).expect("rgb lzw"), Codec::Lzw);
    for (bad, word) in [
        (
            SampleTags {
                photometric: Some(6),
                ..ok.clone()
            },
            "YCbCr",
        ),
        (
            SampleTags {
                photometric: Some(8),
                ..ok.clone()
            },
            "CIELab",
        ),
        (
            SampleTags {
                compression: 6,
                ..ok.clone()
            },
            "old-style JPEG",
        ),
        (
            SampleTags {
                compression: 7,
                bits: 16,
                ..ok.clone()
            },
            "16-bit samples",
        ),
        (
            SampleTags {
                compression: 50002,
                ..ok.clone()
            },
            "jpeg-xl",
        ),
        (
            SampleTags {
                fill_order: 3,
                ..ok.clone()
            },
            "FillOrder",
        ),
        (
            SampleTags {
                predictor: 3,
                ..ok.clone()
            },
            "Predictor 3",
        ),
        (
            SampleTags {
                bits: 12,
                ..ok.clone()
            },
            "12-bit",
        ),
    ] {
        let e = validate(p, &bad).expect_err("refused").to_string();
        assert!(e.contains(word) && !e.contains('\n'), "{e}");
    }
}
