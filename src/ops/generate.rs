//! Synthetic data for tests, demos and benchmarks ([`Dist`]): by default standard-normal
//! values plus a per-column offset `col / 100` (col = index along the last axis, 0 for
//! rank 1), so each column's mean says which column it is; or N(mean, std²), or uniform
//! on `[low, high)`.
//!
//! Values depend only on the seed and the element's flat index, never on the tiling or
//! the thread count: the flat index space is cut into fixed chunks of [`CHUNK`] elements,
//! each drawn from its own xoshiro256++ stream seeded from `(seed, chunk)`.

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// Elements per independent random stream.
pub const CHUNK: u64 = 8192;

fn splitmix(mut z: u64) -> u64 {
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
    fn draw(&self, rng: &mut Xoshiro256PlusPlus, idx: u64, last_dim: u64) -> f64 {
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

fn fill_typed<T: Element>(out: &mut [T], start: u64, last_dim: u64, seed: u64, dist: Dist) {
    let end = start + out.len() as u64;
    let first_chunk = start / CHUNK;
    let chunks = end.div_ceil(CHUNK) - first_chunk;
    // Split `out` at chunk boundaries so each piece is filled from its own stream.
    let mut pieces: Vec<(u64, &mut [T])> = Vec::with_capacity(chunks as usize);
    let mut rest = out;
    let mut pos = start;
    while !rest.is_empty() {
        let next = ((pos / CHUNK + 1) * CHUNK).min(end);
        let (a, b) = rest.split_at_mut((next - pos) as usize);
        pieces.push((pos, a));
        rest = b;
        pos = next;
    }
    let seed_mix = splitmix(seed);
    pieces.into_par_iter().for_each(|(pos, piece)| {
        let chunk = pos / CHUNK;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(splitmix(seed_mix ^ chunk));
        // skip to `pos` inside the chunk (only at a tile edge that cuts a chunk)
        for idx in chunk * CHUNK..pos {
            dist.draw(&mut rng, idx, last_dim);
        }
        for (k, o) in piece.iter_mut().enumerate() {
            *o = T::from_f64(dist.draw(&mut rng, pos + k as u64, last_dim));
        }
    });
}

/// Fills the bytes of elements `[start, start + n)` of a tensor whose last axis has
/// `last_dim` elements (0 for rank 1: no column offset) with draws of `dist`.
pub(crate) fn fill_bytes(
    out: &mut [u8],
    dtype: DType,
    start: u64,
    last_dim: u64,
    seed: u64,
    dist: Dist,
) {
    crate::dispatch_dtype!(dtype, T => {
        fill_typed::<T>(bytemuck::cast_slice_mut(out), start, last_dim, seed, dist);
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    fn draw(dist: Dist, n: usize, split: usize) -> Vec<f64> {
        let mut v = vec![0.0f64; n];
        let (a, b) = v.split_at_mut(split);
        fill_typed(a, 0, 7, 11, dist);
        fill_typed(b, split as u64, 7, 11, dist);
        v
    }

    #[test]
    fn each_distribution_is_the_same_however_the_range_is_cut() {
        for dist in [
            Dist::Demo,
            Dist::Normal {
                mean: 5.0,
                std: 2.0,
            },
            Dist::Uniform {
                low: -3.0,
                high: 4.0,
            },
        ] {
            let whole = draw(dist, 40_000, 40_000);
            for split in [1, 8191, 8192, 12_345] {
                assert_eq!(draw(dist, 40_000, split), whole, "{dist:?} cut at {split}");
            }
        }
    }

    #[test]
    fn normal_and_uniform_have_the_asked_moments_and_range() {
        let n = 200_000.0;
        let v = draw(
            Dist::Normal {
                mean: 5.0,
                std: 2.0,
            },
            200_000,
            100_000,
        );
        let mean = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(
            (mean - 5.0).abs() < 0.02 && (sd - 2.0).abs() < 0.02,
            "{mean} {sd}"
        );
        let u = draw(
            Dist::Uniform {
                low: -3.0,
                high: 4.0,
            },
            200_000,
            3,
        );
        assert!(u.iter().all(|&x| (-3.0..4.0).contains(&x)));
        let mean = u.iter().sum::<f64>() / n;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        // every tenth of the range gets its share
        let mut bins = [0usize; 10];
        for x in &u {
            bins[((x + 3.0) / 0.7) as usize] += 1;
        }
        assert!(
            bins.iter().all(|&b| (19_000..21_000).contains(&b)),
            "{bins:?}"
        );
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
            ("cauchy", None, None, None, None, "unknown distribution"),
        ] {
            let e = Dist::parse(name, m, s, l, h).unwrap_err().to_string();
            assert!(e.contains(word), "{name}: {e}");
        }
    }
}
