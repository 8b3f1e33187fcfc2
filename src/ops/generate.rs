//! Synthetic data for tests, demos and benchmarks: standard-normal values plus a
//! per-column offset `col / 100` (col = index along the last axis, 0 for rank 1).
//!
//! Values depend only on the seed and the element's flat index, never on the tiling or
//! the thread count: the flat index space is cut into fixed chunks of [`CHUNK`] elements,
//! each drawn from its own xoshiro256++ stream seeded from `(seed, chunk)`.

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;

use crate::dtype::{DType, Element};

/// Elements per independent random stream.
pub const CHUNK: u64 = 8192;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fill_typed<T: Element>(out: &mut [T], start: u64, last_dim: u64, seed: u64) {
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
        for _ in chunk * CHUNK..pos {
            let _: f64 = StandardNormal.sample(&mut rng);
        }
        for (k, o) in piece.iter_mut().enumerate() {
            let idx = pos + k as u64;
            let col = if last_dim > 0 { idx % last_dim } else { 0 };
            let z: f64 = StandardNormal.sample(&mut rng);
            *o = T::from_f64(z + col as f64 / 100.0);
        }
    });
}

/// Fills the bytes of elements `[start, start + n)` of a tensor whose last axis has
/// `last_dim` elements (0 for rank 1: no column offset).
pub(crate) fn fill_bytes(out: &mut [u8], dtype: DType, start: u64, last_dim: u64, seed: u64) {
    crate::dispatch_dtype!(dtype, T => {
        fill_typed::<T>(bytemuck::cast_slice_mut(out), start, last_dim, seed);
    });
}
