//! Unit tests of element types and casts.
#![allow(clippy::unwrap_used, clippy::float_cmp)]
use super::*;
use half::{bf16, f16};

#[test]
fn descr_roundtrip_for_every_dtype() {
    for d in DType::ALL.into_iter().chain(DType::COMPLEX) {
        assert_eq!(DType::from_npy_descr(d.npy_descr()), Ok(d));
        assert_eq!(d.name().parse::<DType>().ok(), Some(d));
    }
}

#[test]
fn refuses_big_endian_and_object() {
    assert!(
        DType::from_npy_descr(">f4")
            .unwrap_err()
            .contains("big-endian")
    );
    assert!(DType::from_npy_descr("|O").unwrap_err().contains("object"));
    assert!(DType::from_npy_descr("<M8").unwrap_err().contains("'<M8'"));
    // complex: each part is swapped on its own
    assert_eq!(
        DType::from_npy_descr_any_order(">c16"),
        Ok((DType::C128, true))
    );
    assert_eq!((DType::C64.size(), DType::C64.swap_unit()), (8, 4));
    assert_eq!((DType::C128.size(), DType::C128.swap_unit()), (16, 8));
    // single-byte types have no byte order
    assert_eq!(DType::from_npy_descr(">u1"), Ok(DType::U8));
}

/// Exact oracle: the two bf16 neighbours of `v` and their midpoint are exact in f64.
fn bf16_rne_oracle(v: f64) -> bf16 {
    let t = bf16::from_bits(((v as f32).to_bits() >> 16) as u16); // truncated toward zero
    let lo = if f64::from(t.to_f32()).abs() <= v.abs() {
        t
    } else {
        bf16::from_bits(t.to_bits() - 1)
    };
    let hi = bf16::from_bits(lo.to_bits() + 1);
    let (a, b) = (f64::from(lo.to_f32()), f64::from(hi.to_f32()));
    let mid = f64::midpoint(a, b);
    match v.abs().partial_cmp(&mid.abs()) {
        Some(std::cmp::Ordering::Less) => lo,
        Some(std::cmp::Ordering::Greater) => hi,
        _ => {
            if lo.to_bits() & 1 == 0 {
                lo
            } else {
                hi
            }
        }
    }
}

/// Exact oracle for f16: the two neighbours of `v` and their midpoint are exact in f64.
fn f16_rne_oracle(v: f64) -> f16 {
    // every finite f16 in order of magnitude: find the last one not above |v|
    let a = v.abs();
    let (mut lo, mut hi) = (0u16, 0x7C00u16); // [0, inf]
    while hi - lo > 1 {
        let mid = u16::midpoint(lo, hi);
        if f16::from_bits(mid).to_f64() <= a {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (x, y) = (f16::from_bits(lo).to_f64(), f16::from_bits(hi).to_f64());
    let pick = if hi == 0x7C00 {
        // above the largest finite f16: IEEE overflows at MAX + half an ulp
        if a >= 65520.0 { hi } else { lo }
    } else {
        match (a - x).partial_cmp(&(y - a)) {
            Some(std::cmp::Ordering::Less) => lo,
            Some(std::cmp::Ordering::Greater) => hi,
            _ => {
                if lo & 1 == 0 {
                    lo
                } else {
                    hi
                }
            }
        }
    };
    f16::from_bits(pick | if v < 0.0 { 0x8000 } else { 0 })
}

#[test]
fn f16_from_f64_rounds_to_nearest_even_on_every_cpu() {
    // above the halfway point only by a bit an f32 cannot hold
    let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(f16_from_f64(v).to_bits(), 0x3C01);
    assert_eq!(<f16 as Element>::from_f64(v).to_bits(), 0x3C01);
    let mut s: u64 = 11;
    for _ in 0..200_000 {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // f64 values across f16's subnormal, normal and overflow range
        let v = f64::from_bits((s >> 12) | (0x3E0u64 + (s >> 59) * 2) << 52)
            * if s & 1 == 0 { 1.0 } else { -1.0 };
        assert_eq!(
            f16_from_f64(v).to_bits(),
            f16_rne_oracle(v).to_bits(),
            "{v:e}"
        );
    }
    assert!(f16_from_f64(f64::NAN).is_nan());
    assert_eq!(f16_from_f64(-f64::INFINITY), f16::NEG_INFINITY);
    // the vectorized store agrees
    let vals = [v, -v, 65519.9, 65520.0, 1e-8, 3e-8];
    let mut out = vec![0u8; 2 * vals.len()];
    store_f64(&vals, &mut out, DType::F16);
    let got: &[f16] = bytemuck::cast_slice(&out);
    for (g, &v) in got.iter().zip(&vals) {
        assert_eq!(g.to_bits(), f16_rne_oracle(v).to_bits(), "{v:e}");
    }
}

#[test]
fn bf16_from_f64_rounds_to_nearest_even() {
    assert_eq!(
        bf16_from_f64(-50.625_015_258_789_06),
        bf16::from_f32(-50.75)
    );
    let mut s: u64 = 7;
    for _ in 0..1_000_000 {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // finite f64 values within bf16's normal range, with random low bits
        let v = f64::from_bits((s >> 12) | (0x3F0u64 + (s >> 60) * 8) << 52)
            * if s & 1 == 0 { 1.0 } else { -1.0 };
        assert_eq!(
            bf16_from_f64(v).to_bits(),
            bf16_rne_oracle(v).to_bits(),
            "{v:e}"
        );
    }
    // halfway cases go to even
    let one = 1.0f64;
    assert_eq!(bf16_from_f64(one + 2f64.powi(-8)), bf16::ONE);
    assert_eq!(
        bf16_from_f64(one + 3.0 * 2f64.powi(-8)).to_f32(),
        1.0 + 2f32.powi(-6)
    );
    assert!(bf16_from_f64(f64::NAN).is_nan());
    assert_eq!(bf16_from_f64(f64::INFINITY), bf16::INFINITY);
    assert_eq!(bf16_from_f64(1e300), bf16::INFINITY);
}

#[test]
fn vectorized_store_equals_scalar_casts() {
    let mut s: u64 = 99;
    let mut vals: Vec<f64> = (0..100_000)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            f64::from_bits((s >> 12) | (0x3E0u64 + (s >> 58) * 2) << 52)
                * if s & 1 == 0 { 1.0 } else { -1.0 }
        })
        .collect();
    vals.extend([
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        65504.0,
        65520.0,
        1e-8,
        6e-8,
        1e300,
    ]);
    for d in [DType::F16, DType::BF16] {
        let mut out = vec![0u8; vals.len() * 2];
        store_f64(&vals, &mut out, d);
        for (i, &v) in vals.iter().enumerate() {
            let got = u16::from_le_bytes([out[2 * i], out[2 * i + 1]]);
            let want = if d == DType::F16 {
                f16_from_f64(v).to_bits()
            } else {
                bf16_from_f64(v).to_bits()
            };
            let nan = if d == DType::F16 {
                f16::from_bits(got).is_nan() && f16::from_bits(want).is_nan()
            } else {
                bf16::from_bits(got).is_nan() && bf16::from_bits(want).is_nan()
            };
            assert!(got == want || nan, "{d} of {v:e}: {got:#x} vs {want:#x}");
        }
    }
}

#[test]
fn casts_saturate_and_map_nan_to_zero() {
    assert_eq!(u8::from_f64(300.0), 255);
    assert_eq!(u8::from_f64(-3.0), 0);
    assert_eq!(i16::from_f64(f64::NAN), 0);
    assert_eq!(i32::from_f64(-2.7), -2);
    assert_eq!(Bool::from_f64(0.5), Bool(1));
    assert_eq!(f16_from_f64(65520.0), f16::INFINITY);
    // round to nearest even: 1 + 2^-11 is halfway between 1 and the next f16
    assert_eq!(f16_from_f64(1.0 + 2f64.powi(-11)), f16::ONE);
}
