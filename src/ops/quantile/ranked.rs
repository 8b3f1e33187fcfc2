//! The element types a selection ranks and their keys: a real [`Element`] keyed by
//! [`key`], or a complex number keyed in numpy's sort order.
//!
//! # Complex keys
//! numpy sorts complex numbers by real part, then imaginary part (`npysort`'s `CFLOAT_LT`:
//! `-0` and `+0` are equal parts), with the elements holding NaN after all others. A
//! selection leaves NaN out of its counts, so a key only has to order the other elements:
//! `idx(re) * N + idx(im)`, where `idx` is a part's position among the `N` values of its
//! float type that are not NaN (its [`key`] less the NaN keys below it). The two real
//! zeros cannot take two positions there (`(-0, 5)` and `(+0, 1)` would sort by the sign
//! of zero, not by the imaginary part), nor one (the sign of a median's zero real part
//! would be lost): they share the span of both, `(idx(-0) * N) + 2 * idx(im) + [re is
//! +0]`, so that elements with a zero real part sort by their imaginary part and a tie
//! puts `-0` first, as real keys do. Every key is below `N^2`, which fits 64 bits for
//! complex64 and 128 bits for complex128: four and eight passes of 16-bit digits.
//!
//! # NaN elements
//! numpy's `median` of a slice holding NaN is its last element once partitioned: the
//! greatest in numpy's order of the NaN elements (`x+nanj`, then `nan+yj`, then
//! `nan+nanj`, each class by its other part). The first pass keeps, per output, that
//! element's bits ([`nan_rank`] orders them; among elements tied in numpy's order, which
//! numpy leaves to its partition, the greatest bits, so any tiling picks the same one).

use super::{from_key, key};
use crate::dtype::{Complex, DType, Element};

/// An element type a selection ranks (see the module's notes).
pub trait Ranked: bytemuck::Pod + Send + Sync + 'static {
    /// Its dtype.
    const RANKED: DType;
    /// Whether NaN elements keep their bits for the result ([`nan_rank`]): complex ones.
    const PICKS: bool;
    /// Its keys: `u64`, or `u128` for complex128.
    type Key: KeyWord;
    /// numpy's `isnan` (either part, for a complex number).
    fn nan(self) -> bool;
    /// Whether it is the nodata value `m` (a complex input has none: refused before).
    fn is(self, m: Self) -> bool;
    /// The nodata value `v` as this type.
    fn of_f64(v: f64) -> Self;
    /// The order-preserving key of an element that is not NaN.
    fn key_of(self) -> Self::Key;
    /// The element whose key is `k`.
    fn of_key(k: u128) -> Self;
    /// The bits of the parts, widened to 64 (real elements: unused, zero).
    fn bits(self) -> [u64; 2];
}

/// A key: `u64` or `u128`.
pub trait KeyWord: Copy + Send + Sync {
    /// The digit `(key >> shift) & mask` and the bits above `high` (zero past the width).
    fn split(self, shift: u32, mask: u64, high: u32) -> (usize, u128);
}

impl KeyWord for u64 {
    #[inline]
    fn split(self, shift: u32, mask: u64, high: u32) -> (usize, u128) {
        (
            ((self >> shift) & mask) as usize,
            u128::from(self.checked_shr(high).unwrap_or(0)),
        )
    }
}

impl KeyWord for u128 {
    #[inline]
    fn split(self, shift: u32, mask: u64, high: u32) -> (usize, u128) {
        (
            ((self >> shift) as u64 & mask) as usize,
            self.checked_shr(high).unwrap_or(0),
        )
    }
}

impl<T: Element> Ranked for T {
    const RANKED: DType = T::DTYPE;
    const PICKS: bool = false;
    type Key = u64;
    #[inline]
    fn nan(self) -> bool {
        self.is_nan()
    }
    #[inline]
    fn is(self, m: Self) -> bool {
        self == m
    }
    fn of_f64(v: f64) -> Self {
        T::from_f64(v)
    }
    #[inline]
    fn key_of(self) -> u64 {
        key(self)
    }
    fn of_key(k: u128) -> Self {
        from_key::<T>(k as u64)
    }
    fn bits(self) -> [u64; 2] {
        [0; 2]
    }
}

/// A part of a complex number: f32 or f64.
pub(crate) trait Part: Element {
    /// The bits, widened to 64.
    fn to_bits64(self) -> u64;
    /// The part whose bits [`Part::to_bits64`] gave.
    fn from_bits64(b: u64) -> Self;
}

impl Part for f32 {
    fn to_bits64(self) -> u64 {
        u64::from(self.to_bits())
    }
    #[allow(clippy::cast_possible_truncation)]
    fn from_bits64(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}

impl Part for f64 {
    fn to_bits64(self) -> u64 {
        self.to_bits()
    }
    fn from_bits64(b: u64) -> Self {
        f64::from_bits(b)
    }
}

/// The keys below `-inf` (NaN with the sign bit set) and the count `N` of the values
/// that are not NaN, of the part type `F`.
#[inline]
fn radix<F: Part>() -> (u128, u128) {
    let below = u128::from(key(F::LOWEST));
    (below, u128::from(key(F::HIGHEST)) + 1 - below)
}

/// The position of `+0` among the values of `F` that are not NaN.
#[inline]
fn zero<F: Part>(below: u128) -> u128 {
    u128::from(key(F::from_f64(0.0))) - below
}

/// The key of a complex number that is not NaN (see the module's notes).
#[inline]
pub(crate) fn complex_key<F: Part>(re: F, im: F) -> u128 {
    let (below, n) = radix::<F>();
    let i = u128::from(key(im)) - below;
    let r = u128::from(key(re)) - below;
    let z = zero::<F>(below);
    if r == z {
        (z - 1) * n + 2 * i + 1
    } else if r + 1 == z {
        (z - 1) * n + 2 * i
    } else {
        r * n + i
    }
}

/// The complex number whose [`complex_key`] is `k`, as its parts.
pub(crate) fn complex_of_key<F: Part>(k: u128) -> (F, F) {
    let (below, n) = radix::<F>();
    let z = zero::<F>(below);
    let part = |i: u128| from_key::<F>((i + below) as u64);
    let q = k / n;
    if q + 1 == z || q == z {
        let off = k - (z - 1) * n;
        let re = F::from_f64(if off % 2 == 1 { 0.0 } else { -0.0 });
        (re, part(off / 2))
    } else {
        (part(q), part(k % n))
    }
}

macro_rules! ranked_complex {
    ($f:ty, $key:ty, $d:expr) => {
        impl Ranked for Complex<$f> {
            const RANKED: DType = $d;
            const PICKS: bool = true;
            type Key = $key;
            #[inline]
            fn nan(self) -> bool {
                self.re.is_nan() || self.im.is_nan()
            }
            #[inline]
            #[allow(clippy::float_cmp)] // numpy's `==` of complex numbers
            fn is(self, m: Self) -> bool {
                self.re == m.re && self.im == m.im
            }
            fn of_f64(v: f64) -> Self {
                Complex {
                    re: <$f>::from_f64(v),
                    im: 0.0,
                }
            }
            #[inline]
            #[allow(clippy::cast_possible_truncation)] // below N^2, which fits the key
            fn key_of(self) -> $key {
                complex_key(self.re, self.im) as $key
            }
            fn of_key(k: u128) -> Self {
                let (re, im) = complex_of_key::<$f>(k);
                Complex { re, im }
            }
            fn bits(self) -> [u64; 2] {
                [self.re.to_bits64(), self.im.to_bits64()]
            }
        }
    };
}

ranked_complex!(f32, u64, DType::C64);
ranked_complex!(f64, u128, DType::C128);

/// Where the NaN element of bits `b` stands in numpy's order of NaN elements of
/// `dtype`, as a tuple that compares in that order (class, the other part's key, then
/// the bits for ties); real dtypes keep no bits (all equal).
#[must_use]
pub(crate) fn nan_rank(dtype: DType, b: [u64; 2]) -> (u8, u64, [u64; 2]) {
    #[allow(clippy::float_cmp)]
    fn of<F: Part>(b: [u64; 2]) -> (u8, u64, [u64; 2]) {
        let (re, im) = (F::from_bits64(b[0]), F::from_bits64(b[1]));
        // numpy compares parts with `<`: zeros of both signs are equal
        let zero = F::from_f64(0.0);
        let k = |x: F| key(if x == zero { zero } else { x });
        match (re.is_nan(), im.is_nan()) {
            (false, _) => (1, k(re), b),
            (true, false) => (2, k(im), b),
            (true, true) => (3, 0, b),
        }
    }
    match dtype {
        DType::C64 => of::<f32>(b),
        DType::C128 => of::<f64>(b),
        _ => (0, 0, [0; 2]),
    }
}

/// Words per output of a first pass's NaN counts: the count, then the bits of the
/// greatest NaN element ([`nan_rank`]).
pub(crate) const NAN_WORDS: usize = 3;

/// Adds the NaN words `from` (of [`NAN_WORDS`] per output) into `into`, keeping the
/// greater NaN element of each output.
pub(crate) fn fold_nan(dtype: DType, into: &mut [u64], from: &[u64]) {
    for (a, b) in into
        .chunks_exact_mut(NAN_WORDS)
        .zip(from.chunks_exact(NAN_WORDS))
    {
        if b[0] == 0 {
            continue;
        }
        let (ab, bb) = ([a[1], a[2]], [b[1], b[2]]);
        if a[0] == 0 || nan_rank(dtype, bb) > nan_rank(dtype, ab) {
            a[1] = bb[0];
            a[2] = bb[1];
        }
        a[0] += b[0];
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    /// numpy's `CFLOAT_LT` for elements that are not NaN.
    fn numpy_lt(a: (f64, f64), b: (f64, f64)) -> bool {
        a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
    }

    fn parts64() -> Vec<f64> {
        vec![
            f64::NEG_INFINITY,
            -1e308,
            -2.5,
            -1.0,
            -5e-324,
            -0.0,
            0.0,
            5e-324,
            1e-300,
            1.0,
            3.0,
            1e308,
            f64::INFINITY,
        ]
    }

    #[test]
    fn complex_keys_sort_as_numpy_and_come_back_bit_for_bit() {
        let ps = parts64();
        let mut all = Vec::new();
        for &r in &ps {
            for &i in &ps {
                all.push((r, i));
            }
        }
        for &a in &all {
            let ka = complex_key(a.0, a.1);
            let (r, i) = complex_of_key::<f64>(ka);
            assert_eq!((r.to_bits(), i.to_bits()), (a.0.to_bits(), a.1.to_bits()));
            for &b in &all {
                let kb = complex_key(b.0, b.1);
                if numpy_lt(a, b) {
                    assert!(ka < kb, "{a:?} {b:?}");
                }
                if ka < kb {
                    // a tie only by the sign of a zero part
                    assert!(!numpy_lt(b, a), "{a:?} {b:?}");
                }
            }
        }
        let (below, n) = radix::<f64>();
        assert_eq!(below, (1 << 52) - 1);
        assert!(complex_key(f64::INFINITY, f64::INFINITY) == n * n - 1);
        // complex64: below 2^64
        let (_, n32) = radix::<f32>();
        assert!(n32 * n32 <= 1 << 64);
        for &(r, i) in &[(-0.0f32, 7.0f32), (0.0, -0.0), (f32::MAX, f32::INFINITY)] {
            let (a, b) = complex_of_key::<f32>(complex_key(r, i));
            assert_eq!((a.to_bits(), b.to_bits()), (r.to_bits(), i.to_bits()));
        }
        // a zero real part sorts by the imaginary part, -0 first on a tie
        assert!(complex_key(0.0, 1.0) < complex_key(-0.0, 2.0));
        assert!(complex_key(-0.0, 1.0) < complex_key(0.0, 1.0));
        assert!(complex_key(-5e-324, 9.0) < complex_key(-0.0, -9.0));
        assert!(complex_key(0.0, 9.0) < complex_key(5e-324, -9.0));
    }

    #[test]
    fn the_greatest_nan_element_is_numpys_last() {
        let b = |r: f64, i: f64| [r.to_bits(), i.to_bits()];
        let order = [
            b(-1.0, f64::NAN),
            b(2.0, f64::NAN),
            b(f64::NAN, f64::NEG_INFINITY),
            b(f64::NAN, 3.0),
            b(f64::NAN, f64::NAN),
        ];
        for w in order.windows(2) {
            assert!(nan_rank(DType::C128, w[0]) < nan_rank(DType::C128, w[1]));
        }
        let mut into = vec![0, 0, 0, 1, order[3][0], order[3][1]];
        let from = vec![2, order[1][0], order[1][1], 1, order[4][0], order[4][1]];
        fold_nan(DType::C128, &mut into, &from);
        assert_eq!(
            into,
            vec![2, order[1][0], order[1][1], 2, order[4][0], order[4][1]]
        );
    }
}
