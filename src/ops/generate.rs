//! Synthetic data for tests, demos and benchmarks ([`Dist`]): by default standard-normal
//! values plus a per-column offset `col / 100` (col = index along the last axis, 0 for
//! rank 1), so each column's mean says which column it is; or N(mean, std²), or uniform
//! on `[low, high)`.
//!
//! Every value depends only on the seed and the element's flat index, never on the
//! tiling, the thread count or the device: element `i` is computed from the 64 random
//! bits that Philox4x32-10 (Salmon et al., SC'11: the counter-based generator of
//! Random123, cuRAND and JAX), keyed by the seed, gives for counter `i / 2` (words 0-1
//! for even `i`, 2-3 for odd). A normal draw is the inverse normal CDF of those bits
//! (Wichura's AS 241, relative error about 1e-16) with a logarithm written here from
//! plain IEEE operations ([`ln`], fdlibm's), so the CUDA kernel (`kernels/generate.cu`),
//! which repeats these steps operation for operation, writes the same bytes as the CPU.

// `inline(always)` on the pieces the CPU kernel vectorizes: they must be inlined into its
// AVX2-compiled entry point (src/backend/cpu/generate.rs). Coefficients are written
// digit for digit as published (fdlibm, AS 241), so they can be checked against the
// sources.
#![allow(
    clippy::inline_always,
    clippy::excessive_precision,
    clippy::unreadable_literal
)]

use crate::error::{Error, Result};

/// Philox4x32's multipliers and Weyl key increments.
pub(crate) const PHILOX_M0: u32 = 0xD251_1F53;
pub(crate) const PHILOX_M1: u32 = 0xCD9E_8D57;
pub(crate) const PHILOX_W0: u32 = 0x9E37_79B9;
pub(crate) const PHILOX_W1: u32 = 0xBB67_AE85;

/// Philox4x32-10: the four 32-bit words of block `ctr` under `key` (Random123's
/// `philox4x32_R(10, ctr, key)`).
#[must_use]
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(PHILOX_W0), k[1].wrapping_add(PHILOX_W1)];
        }
        let p0 = u64::from(PHILOX_M0) * u64::from(c[0]);
        let p1 = u64::from(PHILOX_M1) * u64::from(c[2]);
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// The random bits of elements `2 * pair` and `2 * pair + 1` under `seed`.
#[inline]
#[must_use]
pub fn pair_bits(seed: u64, pair: u64) -> [u64; 2] {
    let w = philox4x32_10(
        [pair as u32, (pair >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    );
    [
        u64::from(w[1]) << 32 | u64::from(w[0]),
        u64::from(w[3]) << 32 | u64::from(w[2]),
    ]
}

const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01; // 3fe62e42 fee00000
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10; // 3dea39ef 35793c76
const LG1: f64 = 6.666_666_666_666_735_130e-01; // 3FE55555 55555593
const LG2: f64 = 3.999_999_999_940_941_908e-01; // 3FD99999 9997FA04
const LG3: f64 = 2.857_142_874_366_239_149e-01; // 3FD24924 94229359
const LG4: f64 = 2.222_219_843_214_978_396e-01; // 3FCC71C5 1D8E78AF
const LG5: f64 = 1.818_357_216_161_805_012e-01; // 3FC74664 96CB03DE
const LG6: f64 = 1.531_383_769_920_937_332e-01; // 3FC39A09 D078C69F
const LG7: f64 = 1.479_819_860_511_658_591e-01; // 3FC2F112 DF3E5244

/// The natural logarithm of a positive, finite, normal `x`, from IEEE additions,
/// multiplications and divisions only (fdlibm's `__ieee754_log`: error below 1 ulp), so
/// that any device that rounds those correctly and does not contract them gives these
/// bits. Subnormals, zero, negatives, infinities and NaN are outside its domain (the
/// generator never asks for them).
#[must_use]
pub fn ln(x: f64) -> f64 {
    let (k, hx, f) = ln_reduce(x);
    if ln_near_power_of_two(hx) {
        // |f| < 2^-20
        let dk = f64::from(k);
        if f == 0.0 {
            return if k == 0 {
                0.0
            } else {
                dk * LN2_HI + dk * LN2_LO
            };
        }
        let r = f * f * (0.5 - 0.333_333_333_333_333_33 * f);
        return if k == 0 {
            f - r
        } else {
            dk * LN2_HI - ((r - dk * LN2_LO) - f)
        };
    }
    ln_main(k, hx, f)
}

/// `x = 2^k (1 + f)` with `1 + f` in [sqrt(2)/2, sqrt(2)), and `hx`, the top 20 bits of
/// the mantissa, which select [`ln`]'s path.
#[inline(always)]
#[must_use]
pub fn ln_reduce(x: f64) -> (i32, i32, f64) {
    let bits = x.to_bits();
    let hx = (bits >> 32) as i32;
    let k = (hx >> 20) - 1023;
    let hx = hx & 0x000f_ffff;
    let i = (hx + 0x95f64) & 0x10_0000;
    let m = f64::from_bits(((hx | (i ^ 0x3ff0_0000)) as u64) << 32 | (bits & 0xffff_ffff));
    (k + (i >> 20), hx, m - 1.0)
}

/// Whether [`ln`] takes its short path for `|f| < 2^-20` (rare: `x` within about 2^-20 of
/// a power of two).
#[inline(always)]
#[must_use]
pub fn ln_near_power_of_two(hx: i32) -> bool {
    (0x000f_ffff & (2 + hx)) < 3
}

/// [`ln`] for `|f| >= 2^-20`, branch-free (both of fdlibm's forms computed, one kept),
/// so that it vectorizes.
#[inline(always)]
#[must_use]
pub fn ln_main(k: i32, hx: i32, f: f64) -> f64 {
    let dk = f64::from(k);
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    let (a, b) = if k == 0 {
        (f - (hfsq - s * (hfsq + r)), f - s * (f - r))
    } else {
        (
            dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f),
            dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f),
        )
    };
    if ((hx - 0x6147a) | (0x6b851 - hx)) > 0 {
        a
    } else {
        b
    }
}

/// The standard normal quantile of `p` in (0, 1): Wichura's AS 241 (PPND16, Applied
/// Statistics 37(3), 1988), relative error about 1e-16, with the coefficients as
/// published (Python's `statistics.NormalDist.inv_cdf` uses the same) and [`ln`].
#[must_use]
pub fn normal_quantile(p: f64) -> f64 {
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        quantile_central(q)
    } else {
        quantile_tail(p, q)
    }
}

/// [`normal_quantile`] of `1/2 + q` for `|q| <= 0.425`.
#[inline]
#[must_use]
pub fn quantile_central(q: f64) -> f64 {
    {
        let r = 0.180625 - q * q;
        let num = (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r
            + 6.7265770927008700853e+4)
            * r
            + 4.5921953931549871457e+4)
            * r
            + 1.3731693765509461125e+4)
            * r
            + 1.9715909503065514427e+3)
            * r
            + 1.3314166789178437745e+2)
            * r
            + 3.3871328727963666080e+0)
            * q;
        let den = ((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r
            + 3.9307895800092710610e+4)
            * r
            + 2.1213794301586595867e+4)
            * r
            + 5.3941960214247511077e+3)
            * r
            + 6.8718700749205790830e+2)
            * r
            + 4.2313330701600911252e+1)
            * r
            + 1.0;
        num / den
    }
}

/// [`normal_quantile`] of `p = 1/2 + q` for `|q| > 0.425`.
#[inline]
#[must_use]
pub fn quantile_tail(p: f64, q: f64) -> f64 {
    let r = (-ln(if q <= 0.0 { p } else { 1.0 - p })).sqrt();
    let x = if r <= 5.0 {
        quantile_tail_near(r)
    } else {
        quantile_tail_far(r)
    };
    if q < 0.0 { -x } else { x }
}

/// The magnitude of [`quantile_tail`] from `r = sqrt(-ln(min(p, 1 - p)))` when
/// `r <= 5` (`p` above about 1.4e-11).
#[inline(always)]
#[must_use]
pub fn quantile_tail_near(r: f64) -> f64 {
    let r = r - 1.6;
    let num = ((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r
        + 2.41780725177450611770e-1)
        * r
        + 1.27045825245236838258e+0)
        * r
        + 3.64784832476320460504e+0)
        * r
        + 5.76949722146069140550e+0)
        * r
        + 4.63033784615654529590e+0)
        * r
        + 1.42343711074968357734e+0;
    let den = ((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r
        + 1.51986665636164571966e-2)
        * r
        + 1.48103976427480074590e-1)
        * r
        + 6.89767334985100004550e-1)
        * r
        + 1.67638483018380384940e+0)
        * r
        + 2.05319162663775882187e+0)
        * r
        + 1.0;
    num / den
}

/// The magnitude of [`quantile_tail`] when `r > 5`.
#[inline(always)]
#[must_use]
pub fn quantile_tail_far(r: f64) -> f64 {
    let r = r - 5.0;
    let num = ((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r
        + 1.24266094738807843860e-3)
        * r
        + 2.65321895265761230930e-2)
        * r
        + 2.96560571828504891230e-1)
        * r
        + 1.78482653991729133580e+0)
        * r
        + 5.46378491116411436990e+0)
        * r
        + 6.65790464350110377720e+0;
    let den = ((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r
        + 1.84631831751005468180e-5)
        * r
        + 7.86869131145613259100e-4)
        * r
        + 1.48753612908506148525e-2)
        * r
        + 1.36929880922735805310e-1)
        * r
        + 5.99832206555887937690e-1)
        * r
        + 1.0;
    num / den
}

/// What `tilestream gen` draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// N(col / 100, 1): each column's mean is its index along the last axis over 100.
    Demo,
    /// N(mean, std²).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation (0 or more).
        std: f64,
    },
    /// Uniform on `[low, high)`.
    Uniform {
        /// Smallest value.
        low: f64,
        /// Bound above (not reached, before the cast to the output dtype).
        high: f64,
    },
}

impl Dist {
    /// The distribution named `name` (`demo`, `normal`, `uniform`) with its parameters:
    /// `mean` and `std` for `normal` (defaults 0 and 1), `low` and `high` for `uniform`
    /// (defaults 0 and 1). A parameter of another distribution is refused.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown name, a parameter the distribution does not
    /// take, a negative or non-finite `std`, or `low >= high`.
    pub fn parse(
        name: &str,
        mean: Option<f64>,
        std: Option<f64>,
        low: Option<f64>,
        high: Option<f64>,
    ) -> Result<Self> {
        let refuse = |what: &str, dist: &str| {
            Err(Error::invalid(format!(
                "{what} is a parameter of another distribution, not of {dist}: use `dist=normal` for mean and std, `dist=uniform` for low and high"
            )))
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "demo" => match (mean, std, low, high) {
                (None, None, None, None) => Ok(Dist::Demo),
                (Some(_), ..) | (_, Some(_), ..) => refuse("mean/std", "demo"),
                _ => refuse("low/high", "demo"),
            },
            "normal" => {
                if low.is_some() || high.is_some() {
                    return refuse("low/high", "normal");
                }
                let (mean, std) = (mean.unwrap_or(0.0), std.unwrap_or(1.0));
                if !mean.is_finite() || !std.is_finite() || std < 0.0 {
                    return Err(Error::invalid(format!(
                        "normal needs a finite mean and a finite std of 0 or more, not mean {mean}, std {std}"
                    )));
                }
                Ok(Dist::Normal { mean, std })
            }
            "uniform" => {
                if mean.is_some() || std.is_some() {
                    return refuse("mean/std", "uniform");
                }
                let (low, high) = (low.unwrap_or(0.0), high.unwrap_or(1.0));
                if !low.is_finite() || !high.is_finite() || low >= high {
                    return Err(Error::invalid(format!(
                        "uniform needs finite low < high, not [{low}, {high})"
                    )));
                }
                if !(high - low).is_finite() {
                    return Err(Error::invalid(format!(
                        "uniform's range [{low}, {high}) is wider than the largest f64: narrow it"
                    )));
                }
                Ok(Dist::Uniform { low, high })
            }
            other => Err(Error::invalid(format!(
                "unknown distribution '{other}': expected demo, normal or uniform"
            ))),
        }
    }

    /// A short description (`normal(mean 5, std 2)`).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Dist::Demo => "N(col/100, 1)".into(),
            Dist::Normal { mean, std } => format!("normal(mean {mean}, std {std})"),
            Dist::Uniform { low, high } => format!("uniform [{low}, {high})"),
        }
    }

    /// The value of flat index `idx` (column `idx % last_dim`; `last_dim` 0 for rank 1)
    /// from its random `bits` ([`pair_bits`]).
    #[inline]
    #[must_use]
    pub fn value(&self, bits: u64, idx: u64, last_dim: u64) -> f64 {
        match *self {
            Dist::Demo => {
                let col = if last_dim > 0 { idx % last_dim } else { 0 };
                normal_quantile(open_unit(bits)) + col as f64 / 100.0
            }
            Dist::Normal { mean, std } => mean + std * normal_quantile(open_unit(bits)),
            Dist::Uniform { low, high } => {
                let u = (bits >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0);
                // below `high` even where (high - low) * u rounds up to it
                let v = low + (high - low) * u;
                let b = below(high);
                if v < b { v } else { b }
            }
        }
    }
}

/// The top 52 of `bits` as a number in (0, 1), symmetric about 1/2: `(k + 1/2) / 2^52`.
#[inline]
#[must_use]
pub fn open_unit(bits: u64) -> f64 {
    ((bits >> 12) as f64 + 0.5) * (1.0 / 4_503_599_627_370_496.0)
}

/// The largest f64 below finite `x` (`f64::next_down`, which needs Rust 1.86).
fn below(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else if x == 0.0 {
        -f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() + 1)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    /// Random123's known answers (`tests/kat_vectors` of DEShawResearch/random123).
    #[test]
    fn philox_gives_random123s_known_answers() {
        for (ctr, key, want) in [
            (
                [0; 4],
                [0; 2],
                [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
            ),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ] {
            assert_eq!(philox4x32_10(ctr, key), want, "{ctr:x?} {key:x?}");
        }
    }

    /// Within one ulp of the platform's `ln` everywhere in the domain, exact where the
    /// answer is.
    #[test]
    fn ln_is_within_one_ulp() {
        let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
        assert_eq!(ln(1.0).to_bits(), 0.0f64.to_bits());
        let mut x = 0x1234_5678_9abc_def0_u64;
        let mut worst = 0;
        for i in 0..2_000_000u64 {
            // xorshift over the bits of positive normal doubles, and values near powers
            // of two (ln's short path) and near 1
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = match i % 4 {
                0 => f64::from_bits((x >> 2) % (0x7fe0_0000_0000_0000 - (1 << 52)) + (1 << 52)),
                1 => 2f64.powi((x % 2000) as i32 - 1000) * (1.0 + (x >> 40) as f64 * 1e-22),
                2 => 1.0 + ((x >> 11) as f64 / 9e15 - 0.5) * 1e-3,
                _ => (x >> 11) as f64 / 9_007_199_254_740_992.0 * 0.08 + 1e-300,
            };
            worst = worst.max(ulps(ln(v), v.ln()));
        }
        assert!(worst <= 1, "{worst} ulps");
        for k in -1022..1024 {
            let v = 2f64.powi(k);
            assert!(ulps(ln(v), v.ln()) <= 1, "2^{k}");
        }
    }

    /// Against Python's `statistics.NormalDist().inv_cdf` (the same algorithm with the C
    /// library's log): agreement to a few ulps, over the centre, both tails and the far
    /// tail.
    #[test]
    fn normal_quantile_agrees_with_an_independent_implementation() {
        for (p, want) in [
            (1e-300, -37.0470962993612),
            (1e-12, -7.034483825301132),
            (1e-05, -4.2648907939228256),
            (0.01, -2.3263478740408408),
            (0.07, -1.4757910281791702),
            (0.3, -0.5244005127080407),
            (0.5, 0.0),
            (0.9, 1.2815515655446008),
            (0.975, 1.9599639845400536),
            (0.999999999, 5.997807019601638),
        ] {
            let got = normal_quantile(p);
            assert!(
                (got - want).abs() <= 4.0 * f64::EPSILON * want.abs(),
                "p {p}: {got} against {want}"
            );
        }
    }

    #[test]
    fn the_unit_draw_is_open_and_symmetric() {
        assert!(open_unit(0) > 0.0 && open_unit(u64::MAX) < 1.0);
        for b in [0u64, 1 << 12, 12_345 << 12, u64::MAX] {
            let mirror = (!b >> 12) << 12;
            assert_eq!(open_unit(b) - 0.5, -(open_unit(mirror) - 0.5), "{b:x}");
        }
    }

    #[test]
    fn below_is_the_next_float_down() {
        for x in [3.0, 1e-300, 0.0, -0.0, -2.5, f64::MAX, -f64::MAX / 2.0] {
            let b = below(x);
            assert!(b < x, "{x}");
            // nothing between: the midpoint rounds to one of the two
            let mid = b / 2.0 + x / 2.0;
            assert!(mid == b || mid == x, "{x}");
        }
    }

    #[test]
    fn parameters_of_another_distribution_are_refused() {
        assert_eq!(
            Dist::parse("demo", None, None, None, None).unwrap(),
            Dist::Demo
        );
        assert_eq!(
            Dist::parse("normal", Some(1.0), None, None, None).unwrap(),
            Dist::Normal {
                mean: 1.0,
                std: 1.0
            }
        );
        assert_eq!(
            Dist::parse("Uniform", None, None, None, Some(9.0)).unwrap(),
            Dist::Uniform {
                low: 0.0,
                high: 9.0
            }
        );
        for (name, m, s, l, h, word) in [
            (
                "uniform",
                Some(1.0),
                None,
                None,
                None,
                "another distribution",
            ),
            (
                "normal",
                None,
                None,
                Some(0.0),
                None,
                "another distribution",
            ),
            ("demo", None, Some(2.0), None, None, "another distribution"),
            ("normal", None, Some(-1.0), None, None, "std of 0 or more"),
            ("uniform", None, None, Some(2.0), Some(2.0), "low < high"),
            (
                "uniform",
                None,
                None,
                Some(-1e308),
                Some(1e308),
                "wider than the largest",
            ),
            ("cauchy", None, None, None, None, "unknown distribution"),
        ] {
            let e = Dist::parse(name, m, s, l, h).unwrap_err().to_string();
            assert!(e.contains(word), "{name}: {e}");
        }
    }
}
