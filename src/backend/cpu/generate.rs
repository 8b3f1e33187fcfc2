//! The CPU kernel of `gen` ([`crate::ops::generate`] defines the values): the tile is
//! cut into pieces on the rayon pool, and each piece is computed in blocks of
//! `BLOCK` elements laid out so that the compiler vectorizes them (the Philox rounds of
//! eight counters side by side, the central branch of the normal quantile for every
//! element, the tails, about 15% of draws, one by one), compiled for AVX2 when the CPU
//! has it. Each element goes through the same IEEE operations as
//! [`Dist::value`], so the bits are those of the scalar definition (tested).

// `inline(always)`: the helpers must be inlined into `fill_piece_avx2` for its
// `target_feature` to reach them; the index loops over fixed-size lane arrays are what
// the compiler vectorizes.
#![allow(clippy::inline_always, clippy::needless_range_loop)]

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::ops::generate::{
    Dist, PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, ln_main, ln_near_power_of_two, ln_reduce,
    open_unit, pair_bits, quantile_central, quantile_tail, quantile_tail_near,
};

/// Elements per rayon task.
const PIECE: usize = 1 << 14;
/// Elements per block: the Philox blocks of `BLOCK / 2` counters.
const BLOCK: usize = 16;
const PAIRS: usize = BLOCK / 2;

fn fill_typed<T: Element>(out: &mut [T], start: u64, last_dim: u64, seed: u64, dist: Dist) {
    out.par_chunks_mut(PIECE)
        .enumerate()
        .for_each(|(c, piece)| {
            let first = start + (c * PIECE) as u64;
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                unsafe { fill_piece_avx2(piece, first, last_dim, seed, dist) };
                return;
            }
            fill_piece::<T, false>(piece, first, last_dim, seed, dist);
        });
}

/// Elements `[first, first + piece.len())`: the values of the aligned blocks of
/// [`BLOCK`] that cover them, then each transformed and cast.
///
/// `AVX2` is `true` only when called from [`fill_piece_avx2`] (which runs only where the
/// CPU has AVX2): [`block_bits`] relies on it.
#[inline(always)]
fn fill_piece<T: Element, const AVX2: bool>(
    piece: &mut [T],
    first: u64,
    last_dim: u64,
    seed: u64,
    dist: Dist,
) {
    if piece.is_empty() {
        return;
    }
    let end = first + piece.len() as u64;
    let base = first - first % BLOCK as u64;
    let blocks = (end - base).div_ceil(BLOCK as u64) as usize;
    let mut vals = vec![0f64; blocks * BLOCK];
    match dist {
        Dist::Uniform { .. } => {
            for (b, v) in vals.chunks_exact_mut(BLOCK).enumerate() {
                let at = base + (b * BLOCK) as u64;
                let bits = block_bits::<AVX2>(seed, at / 2);
                for (i, v) in v.iter_mut().enumerate() {
                    *v = dist.value(bits[i], at + i as u64, last_dim);
                }
            }
        }
        Dist::Demo | Dist::Normal { .. } => standard_normals::<AVX2>(&mut vals, base, seed),
    }
    let vals = &vals[(first - base) as usize..][..piece.len()];
    match dist {
        Dist::Uniform { .. } => {
            for (o, &v) in piece.iter_mut().zip(vals) {
                *o = T::from_f64(v);
            }
        }
        Dist::Normal { mean, std } => {
            for (o, &v) in piece.iter_mut().zip(vals) {
                *o = T::from_f64(mean + std * v);
            }
        }
        Dist::Demo if last_dim == 0 => {
            for (o, &v) in piece.iter_mut().zip(vals) {
                // column 0: the scalar definition adds 0 / 100 (so -0 becomes +0)
                *o = T::from_f64(v + 0.0);
            }
        }
        Dist::Demo => {
            let mut col = first % last_dim;
            for (o, &v) in piece.iter_mut().zip(vals) {
                *o = T::from_f64(v + col as f64 / 100.0);
                col += 1;
                if col == last_dim {
                    col = 0;
                }
            }
        }
    }
}

/// The standard normal draws of elements `[base, base + vals.len())` (`base` and the
/// length multiples of [`BLOCK`]): the central branch of the quantile on every lane of
/// every block (vectorized); the tails (`|q| > 0.425`, about 15% of draws) gathered and
/// computed [`BLOCK`] at a time by [`tail_lanes`], so their logarithms and square roots
/// are vectorized too instead of costing a whole block each.
#[inline(always)]
fn standard_normals<const AVX2: bool>(vals: &mut [f64], base: u64, seed: u64) {
    let mut tails: Vec<(usize, u64)> = Vec::with_capacity(vals.len() / 4);
    for (b, v) in vals.chunks_exact_mut(BLOCK).enumerate() {
        let bits = block_bits::<AVX2>(seed, base / 2 + (b * PAIRS) as u64);
        let mut tail = [false; BLOCK];
        for i in 0..BLOCK {
            let q = open_unit(bits[i]) - 0.5;
            v[i] = quantile_central(q);
            tail[i] = q.abs() > 0.425;
        }
        for i in 0..BLOCK {
            if tail[i] {
                tails.push((b * BLOCK + i, bits[i]));
            }
        }
    }
    for group in tails.chunks(BLOCK) {
        // padding lanes: a tail draw (u about 0.05) that stays on the vectorized path
        let mut bits = [0x0CCC_CCCC_CCCC_CCCC_u64; BLOCK];
        for (b, &(_, x)) in bits.iter_mut().zip(group) {
            *b = x;
        }
        let t = tail_lanes(&bits);
        for (&(at, _), &x) in group.iter().zip(&t) {
            vals[at] = x;
        }
    }
}

/// [`quantile_tail`] of the draws of `bits`, every lane computed branch-free so that it
/// vectorizes ([`ln_main`], the near tail); the rare lanes that take another path (the
/// far tail, below about 1.4e-11; `ln`'s short path) again one by one. A lane that is
/// not a tail gives a value of no use, never a fault.
#[inline(always)]
fn tail_lanes(bits: &[u64; BLOCK]) -> [f64; BLOCK] {
    let mut t = [0f64; BLOCK];
    let mut q = [0f64; BLOCK];
    let mut hx = [0i32; BLOCK];
    for i in 0..BLOCK {
        let u = open_unit(bits[i]);
        q[i] = u - 0.5;
        let (k, h, f) = ln_reduce(if q[i] <= 0.0 { u } else { 1.0 - u });
        hx[i] = h;
        let r = (-ln_main(k, h, f)).sqrt();
        let x = quantile_tail_near(r);
        t[i] = if r <= 5.0 {
            if q[i] < 0.0 { -x } else { x }
        } else {
            f64::NAN
        };
    }
    for i in 0..BLOCK {
        if t[i].is_nan() || ln_near_power_of_two(hx[i]) {
            t[i] = quantile_tail(open_unit(bits[i]), q[i]);
        }
    }
    t
}

/// [`pair_bits`] of pairs `[pair, pair + PAIRS)`, in element order: with AVX2, the
/// Philox rounds of the eight counters run side by side in vectors.
#[inline(always)]
fn block_bits<const AVX2: bool>(seed: u64, pair: u64) -> [u64; BLOCK] {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: AVX2 is true only inside `fill_piece_avx2`, which runs only where the
        // CPU supports AVX2.
        return unsafe { block_bits_avx2(seed, pair) };
    }
    let mut bits = [0u64; BLOCK];
    for j in 0..PAIRS {
        [bits[2 * j], bits[2 * j + 1]] = pair_bits(seed, pair + j as u64);
    }
    bits
}

/// [`block_bits`] with AVX2 integer vectors: word `w` of the eight counters is one
/// vector, and each 32x32-bit product is `_mm256_mul_epu32` on the even and the odd
/// lanes. The same operations on the same integers, so the same bits.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::cast_ptr_alignment)] // unaligned loads and stores
unsafe fn block_bits_avx2(seed: u64, pair: u64) -> [u64; BLOCK] {
    use std::arch::x86_64::{
        __m256i, _mm256_blend_epi32, _mm256_loadu_si256, _mm256_mul_epu32, _mm256_set1_epi32,
        _mm256_setzero_si256, _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256,
        _mm256_xor_si256,
    };
    let mut lo = [0u32; PAIRS];
    let mut hi = [0u32; PAIRS];
    for j in 0..PAIRS {
        let p = pair + j as u64;
        lo[j] = p as u32;
        hi[j] = (p >> 32) as u32;
    }
    // SAFETY: loads and stores of PAIRS u32s (32 bytes) through unaligned vector
    // operations on arrays of exactly that size.
    unsafe {
        let mut c0 = _mm256_loadu_si256(lo.as_ptr().cast::<__m256i>());
        let mut c1 = _mm256_loadu_si256(hi.as_ptr().cast::<__m256i>());
        let mut c2 = _mm256_setzero_si256();
        let mut c3 = _mm256_setzero_si256();
        let m0 = _mm256_set1_epi32(PHILOX_M0 as i32);
        let m1 = _mm256_set1_epi32(PHILOX_M1 as i32);
        let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
        // (hi, lo) of the eight 32x32-bit products of `a` and `m`
        let mulhilo = |a: __m256i, m: __m256i| {
            let even = _mm256_mul_epu32(a, m);
            let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m);
            (
                _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd),
                _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64::<32>(odd)),
            )
        };
        for round in 0..10 {
            if round > 0 {
                k0 = k0.wrapping_add(PHILOX_W0);
                k1 = k1.wrapping_add(PHILOX_W1);
            }
            let (h0, l0) = mulhilo(c0, m0);
            let (h1, l1) = mulhilo(c2, m1);
            let n0 = _mm256_xor_si256(_mm256_xor_si256(h1, c1), _mm256_set1_epi32(k0 as i32));
            let n2 = _mm256_xor_si256(_mm256_xor_si256(h0, c3), _mm256_set1_epi32(k1 as i32));
            (c0, c1, c2, c3) = (n0, l1, n2, l0);
        }
        let mut w = [[0u32; PAIRS]; 4];
        for (v, out) in [c0, c1, c2, c3].into_iter().zip(w.iter_mut()) {
            _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), v);
        }
        let mut bits = [0u64; BLOCK];
        for j in 0..PAIRS {
            bits[2 * j] = u64::from(w[1][j]) << 32 | u64::from(w[0][j]);
            bits[2 * j + 1] = u64::from(w[3][j]) << 32 | u64::from(w[2][j]);
        }
        bits
    }
}

/// [`fill_piece`] compiled for AVX2: the same IEEE operations (no FMA), so the same bits.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fill_piece_avx2<T: Element>(
    piece: &mut [T],
    first: u64,
    last_dim: u64,
    seed: u64,
    dist: Dist,
) {
    fill_piece::<T, true>(piece, first, last_dim, seed, dist);
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
    }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    use crate::ops::generate::pair_bits;

    /// The scalar definition, element by element.
    fn scalar(dist: Dist, first: u64, n: usize, last_dim: u64, seed: u64) -> Vec<f64> {
        (first..first + n as u64)
            .map(|i| dist.value(pair_bits(seed, i / 2)[(i % 2) as usize], i, last_dim))
            .collect()
    }

    /// The blocked, vectorized kernel (AVX2 where the CPU has it) gives the scalar
    /// definition's bits, from any start and for any length.
    #[test]
    fn the_vectorized_kernel_gives_the_scalar_definitions_bits() {
        for dist in [
            Dist::Demo,
            Dist::Normal {
                mean: -3.0,
                std: 0.5,
            },
            Dist::Uniform {
                low: 1.0,
                high: 1.5,
            },
        ] {
            for (first, n) in [
                (0u64, 100_000usize),
                (3, 17),
                (15, 2),
                (1 << 40, 40_001),
                (77, 1),
            ] {
                let mut got = vec![0f64; n];
                fill_typed(&mut got, first, 7, 42, dist);
                let want = scalar(dist, first, n, 7, 42);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dist:?} from {first}, {n} elements");
            }
        }
        // the build without AVX2 (its Philox rounds in plain integers)
        let mut got = vec![0f64; 5000];
        fill_piece::<f64, false>(&mut got, 31, 9, 5, Dist::Demo);
        let want = scalar(Dist::Demo, 31, 5000, 9, 5);
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // f16 output: the same cast as the scalar value's
        let mut h = vec![half::f16::ZERO; 1000];
        fill_typed(&mut h, 5, 0, 9, Dist::Demo);
        for (i, v) in h.iter().enumerate() {
            assert_eq!(
                *v,
                half::f16::from_f64(scalar(Dist::Demo, 5 + i as u64, 1, 0, 9)[0])
            );
        }
    }

    /// The tails' rare paths: the far tail (`p` below 1.4e-11) and draws next to a power of
    /// two (`ln`'s short path), mixed with ordinary tails and central draws in one group.
    #[test]
    fn every_tail_path_of_the_lanes_matches_the_scalar_quantile() {
        use crate::ops::generate::{normal_quantile, open_unit};
        let mut cases: Vec<u64> = vec![
            0,                                      // u = 2^-53: the far tail
            (1u64 << 20) << 12,                     // u about 2^-32
            (1u64 << 42) << 12,                     // u = 2^-10 + 2^-53: ln near a power of two
            ((1u64 << 42) + 1) << 12,               // just above it
            (((1u64 << 52) - (1 << 42)) - 1) << 12, // 1 - u near 2^-10
            u64::MAX,                               // the far upper tail
            1 << 63,                                // u = 1/2: central, in a tail lane
        ];
        let mut x = 99u64;
        while cases.len() < 16 * 40 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            cases.push(x);
        }
        for group in cases.chunks(BLOCK) {
            let bits: [u64; BLOCK] = group.try_into().unwrap();
            let t = tail_lanes(&bits);
            for (b, v) in bits.iter().zip(t) {
                let u = open_unit(*b);
                if (u - 0.5).abs() > 0.425 {
                    assert_eq!(v.to_bits(), normal_quantile(u).to_bits(), "bits {b:x}");
                }
            }
        }
    }

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
            for split in [1, 2, 8191, 8192, 16_385, 16_384, 12_345] {
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
        // the tails' share, against the normal CDF
        let below = |z: f64| v.iter().filter(|&&x| (x - 5.0) / 2.0 < z).count() as f64 / n;
        for (z, p) in [
            (-1.959_964, 0.025),
            (0.0, 0.5),
            (1.0, 0.841_345),
            (2.575_829, 0.995),
        ] {
            assert!(
                (below(z) - p).abs() < 0.003,
                "P(Z < {z}) = {} not {p}",
                below(z)
            );
        }
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
