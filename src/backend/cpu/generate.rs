//! The CPU kernel of `gen` ([`crate::ops::generate`] defines the distributions and the
//! streams): the flat index range of a tile is cut at [`CHUNK`] boundaries and each
//! piece is drawn from its own xoshiro256++ stream on the rayon pool.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::ops::generate::{CHUNK, Dist, splitmix};

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
}
