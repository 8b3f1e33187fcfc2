//! Synthetic data for tests, demos and benchmarks ([`Dist`]): by default standard-normal
//! values plus a per-column offset `col / 100` (col = index along the last axis, 0 for
//! rank 1), so each column's mean says which column it is; or N(mean, std²), or uniform
//! on `[low, high)`.
//!
//! Values depend only on the seed and the element's flat index, never on the tiling or
//! the thread count: the flat index space is cut into fixed chunks of [`CHUNK`] elements,
//! each drawn from its own xoshiro256++ stream seeded from `(seed, chunk)`.

use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::{Error, Result};

/// Elements per independent random stream.
pub const CHUNK: u64 = 8192;

/// The splitmix64 finaliser: seeds each chunk's stream from `(seed, chunk)`.
pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
                "{what} is a parameter of another distribution, not of {dist}: use --dist normal for mean and std, --dist uniform for low and high"
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

    /// One value for flat index `idx` from the stream `rng`.
    #[inline]
    pub(crate) fn draw(&self, rng: &mut Xoshiro256PlusPlus, idx: u64, last_dim: u64) -> f64 {
        match *self {
            Dist::Demo => {
                let col = if last_dim > 0 { idx % last_dim } else { 0 };
                let z: f64 = StandardNormal.sample(rng);
                z + col as f64 / 100.0
            }
            Dist::Normal { mean, std } => {
                let z: f64 = StandardNormal.sample(rng);
                mean + std * z
            }
            Dist::Uniform { low, high } => {
                let u: f64 = rng.random();
                // below `high` even where (high - low) * u rounds up to it
                (low + (high - low) * u).min(below(high))
            }
        }
    }
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
            ("cauchy", None, None, None, None, "unknown distribution"),
        ] {
            let e = Dist::parse(name, m, s, l, h).unwrap_err().to_string();
            assert!(e.contains(word), "{name}: {e}");
        }
    }
}
