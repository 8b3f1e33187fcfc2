//! The reductions of complex inputs that are not their parts' (sums, extremes, positions,
//! counts, the `nan` forms' variances), as numpy 2.x computes them.
//!
//! An element is missing, for the `nan` forms and `count`, when either part is NaN
//! (numpy's `isnan` of a complex number). Sums and means add the parts in f64, in the
//! fixed order of the real sums; the `nan` forms add 0 for a missing element, as numpy's
//! `nansum` replaces it by 0.
//!
//! Extremes order complex numbers lexicographically, by real part then imaginary part,
//! as numpy does. Which element each reduction picks (its value's bits, or its position):
//! - `min`, `max`, `argmin`, `argmax`: the first NaN if there is one (numpy's
//!   `minimum.reduce` and `argmin` propagate it), else the first extreme;
//! - `nanmin`, `nanmax`: the first extreme of the elements kept, or, where none is kept,
//!   the slice's first element (numpy's `fmin.reduce`, which keeps its first operand);
//! - `nanargmin`, `nanargmax`: the first extreme once each missing element is replaced by
//!   `inf+0j` (`-inf+0j` for the maximum), as numpy's `nanargmin` replaces it; `-1` for
//!   a slice with none kept, which the engine refuses (numpy raises).
//!
//! Ties keep the earlier element: a value and its bits come from the first element equal
//! to the extreme (`0j` and `-0j` are equal), so the result does not depend on the tiling.
//! Each accumulator carries the position of its pick and the elements it saw, and
//! partials merge in index order, like the real positions' ([`super::kernels`]).

use super::Item;
use super::kernels::Kernel;
use crate::dtype::Complex;

/// A complex element type: complex64 or complex128.
pub(super) trait Cx: Item + Copy {
    /// The parts, widened to f64 (exactly).
    fn parts(self) -> (f64, f64);
    /// The element of the given parts (`inf+0j`, `-inf+0j`: representable in both).
    fn of(re: f64, im: f64) -> Self;
    /// numpy's `isnan`: either part is NaN.
    #[inline]
    fn is_nan(self) -> bool {
        let (r, i) = self.parts();
        r.is_nan() || i.is_nan()
    }
}

impl Cx for Complex<f32> {
    #[inline]
    fn parts(self) -> (f64, f64) {
        (f64::from(self.re), f64::from(self.im))
    }
    #[inline]
    #[allow(clippy::cast_possible_truncation)]
    fn of(re: f64, im: f64) -> Self {
        Complex {
            re: re as f32,
            im: im as f32,
        }
    }
}

impl Cx for Complex<f64> {
    #[inline]
    fn parts(self) -> (f64, f64) {
        (self.re, self.im)
    }
    #[inline]
    fn of(re: f64, im: f64) -> Self {
        Complex { re, im }
    }
}

/// Whether `x < y` (`x > y` with `MAX`) in numpy's lexicographic order, for elements
/// that are not NaN.
#[inline]
#[allow(clippy::float_cmp)] // numpy's order compares exactly
fn before<T: Cx, const MAX: bool>(x: T, y: T) -> bool {
    let ((xr, xi), (yr, yi)) = (x.parts(), y.parts());
    if MAX {
        xr > yr || (xr == yr && xi > yi)
    } else {
        xr < yr || (xr == yr && xi < yi)
    }
}

/// Which elements a pick takes (see the module docs): numpy's `minimum.reduce` and
/// `argmin` (NaN is the extreme).
pub(super) const PLAIN: u8 = 0;
/// `nanmin`, `nanmax`: an element kept beats a missing one.
pub(super) const FMIN: u8 = 1;
/// `nanargmin`, `nanargmax`: a missing element stands as `±inf+0j`.
pub(super) const REPLACE: u8 = 2;

/// The accumulator of a pick: `[element's bytes (two words), position of the pick,
/// elements seen, elements kept]`; nothing seen is the empty partial (all zeros).
type Pick = [u64; 5];

/// The arithmetic of a pick in mode `MODE` ([`PLAIN`], [`FMIN`], [`REPLACE`]), of the
/// maximum with `MAX`.
struct Picks<const MAX: bool, const MODE: u8>;

impl<const MAX: bool, const MODE: u8> Picks<MAX, MODE> {
    #[inline]
    fn store<T: Cx>(a: &mut Pick, x: T) {
        let mut b = [0u8; 16];
        b[..size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&x));
        let (lo, hi) = b.split_at(8);
        a[0] = u64::from_le_bytes(lo.try_into().unwrap_or_default());
        a[1] = u64::from_le_bytes(hi.try_into().unwrap_or_default());
    }
    #[inline]
    fn load<T: Cx>(a: &Pick) -> T {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&a[0].to_le_bytes());
        b[8..].copy_from_slice(&a[1].to_le_bytes());
        bytemuck::pod_read_unaligned(&b[..size_of::<T>()])
    }
    /// Whether `x` (from a later element) replaces the pick `cur` (the picks of
    /// [`REPLACE`] are never NaN).
    #[inline]
    fn better<T: Cx>(x: T, cur: T) -> bool {
        if MODE == PLAIN {
            !cur.is_nan() && (x.is_nan() || before::<T, MAX>(x, cur))
        } else {
            !x.is_nan() && (cur.is_nan() || before::<T, MAX>(x, cur))
        }
    }
    #[inline]
    fn push<T: Cx>(a: &mut Pick, x: T) {
        let kept = !x.is_nan();
        let x = if kept || MODE != REPLACE {
            x
        } else {
            T::of(
                if MAX {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                },
                0.0,
            )
        };
        if a[3] == 0 || Self::better(x, Self::load(a)) {
            Self::store(a, x);
            a[2] = a[3];
        }
        a[3] += 1;
        a[4] += u64::from(kept);
    }
    /// Merges `b`, which follows `a` in index order.
    #[inline]
    fn merge<T: Cx>(a: &mut Pick, b: &Pick) {
        if b[3] == 0 {
            return;
        }
        if a[3] == 0 || Self::better(Self::load::<T>(b), Self::load(a)) {
            (a[0], a[1], a[2]) = (b[0], b[1], a[3] + b[2]);
        }
        a[3] += b[3];
        a[4] += b[4];
    }
    /// Merges `b` into `a` where both positions count from the same origin (a later
    /// column's total, each position a row; a lane's, each position an index): of equal
    /// picks the smaller position comes first in numpy's order, and at equal positions
    /// `a` (the earlier column or lane).
    #[inline]
    fn merge_placed<T: Cx>(a: &mut Pick, b: &Pick) {
        if b[3] == 0 {
            return;
        }
        let (x, cur) = (Self::load::<T>(b), Self::load::<T>(a));
        let tie = !Self::better(cur, x) && b[2] < a[2];
        if a[3] == 0 || Self::better(x, cur) || tie {
            (a[0], a[1], a[2]) = (b[0], b[1], b[2]);
        }
        a[3] += b[3];
        a[4] += b[4];
    }
    /// The lane totals of a run reduced in `t.len()` interleaved lanes as one pick
    /// whose position is the element's index (lane `l`'s position `p` is `8 p + l`).
    fn lanes<T: Cx>(t: &[Pick]) -> Pick {
        let mut best = [0; 5];
        for (l, a) in t.iter().enumerate() {
            let mut c = *a;
            c[2] = a[2] * t.len() as u64 + l as u64;
            Self::merge_placed::<T>(&mut best, &c);
        }
        best
    }
    /// The position a pick answers: -1 where a `nan` form kept nothing.
    fn position(a: &Pick) -> i64 {
        if a[3] == 0 || (MODE != PLAIN && a[4] == 0) {
            -1
        } else {
            a[2] as i64
        }
    }
}

/// The extreme of a slice (`min`, `max`, `nanmin`, `nanmax`), in mode `MODE`.
pub(super) struct Extreme<const MAX: bool, const MODE: u8>;

impl<T: Cx, const MAX: bool, const MODE: u8> Kernel<T> for Extreme<MAX, MODE> {
    type A = Pick;
    type O = T;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> Pick {
        [0; 5]
    }
    #[inline]
    fn push(&self, a: &mut Pick, x: T, _: f64) {
        Picks::<MAX, MODE>::push(a, x);
    }
    #[inline]
    fn merge(a: &mut Pick, b: &Pick) {
        Picks::<MAX, MODE>::merge::<T>(a, b);
    }
    fn fold(a: &mut Pick, b: &Pick) {
        Picks::<MAX, MODE>::merge_placed::<T>(a, b);
    }
    fn finish(&self, a: &Pick, _: u64) -> T {
        Picks::<MAX, MODE>::load(a)
    }
    fn finish_lanes(&self, t: &[Pick], n: u64) -> T {
        self.finish(&Picks::<MAX, MODE>::lanes::<T>(t), n)
    }
}

/// Where the extreme of a slice first occurs (`argmin`, `argmax`, `nanargmin`,
/// `nanargmax`), in mode `MODE`: the index along the reduced axis, or the flat index.
pub(super) struct ArgExtreme<const MAX: bool, const MODE: u8>;

impl<T: Cx, const MAX: bool, const MODE: u8> Kernel<T> for ArgExtreme<MAX, MODE> {
    type A = Pick;
    type O = i64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> Pick {
        [0; 5]
    }
    #[inline]
    fn push(&self, a: &mut Pick, x: T, _: f64) {
        Picks::<MAX, MODE>::push(a, x);
    }
    #[inline]
    fn merge(a: &mut Pick, b: &Pick) {
        Picks::<MAX, MODE>::merge::<T>(a, b);
    }
    fn finish(&self, a: &Pick, _: u64) -> i64 {
        Picks::<MAX, MODE>::position(a)
    }
    fn finish_lanes(&self, t: &[Pick], _: u64) -> i64 {
        Picks::<MAX, MODE>::position(&Picks::<MAX, MODE>::lanes::<T>(t))
    }
}

/// The sum or mean of a slice (`NAN`: of its elements kept, a missing one adding 0, as
/// numpy's `nansum` replaces it): `[real sum, imaginary sum, elements kept]` in f64; a
/// mean divides each part by the elements kept (by all, without `NAN`).
pub(super) struct Sum<const NAN: bool> {
    pub(super) mean: bool,
}

impl<T: Cx, const NAN: bool> Kernel<T> for Sum<NAN> {
    type A = [f64; 3];
    type O = Complex<f64>;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [f64; 3] {
        [0.0; 3]
    }
    #[inline]
    fn push(&self, a: &mut [f64; 3], x: T, _: f64) {
        let (r, i) = x.parts();
        let kept = !NAN || !(r.is_nan() || i.is_nan());
        a[0] += if kept { r } else { 0.0 };
        a[1] += if kept { i } else { 0.0 };
        a[2] += f64::from(u8::from(kept));
    }
    #[inline]
    fn merge(a: &mut [f64; 3], b: &[f64; 3]) {
        a[0] += b[0];
        a[1] += b[1];
        a[2] += b[2];
    }
    fn finish(&self, a: &[f64; 3], _: u64) -> Complex<f64> {
        if self.mean {
            crate::dtype::numpy_complex_mean(a[0], a[1], a[2])
        } else {
            Complex { re: a[0], im: a[1] }
        }
    }
}

/// The variance (`var`, or `nanvar` when `NAN`) or standard deviation (`std`,
/// `nanstd`) of the elements (those that are not NaN when `NAN`): numpy's mean of
/// `|x - mean|^2` over `n - ddof`, the sum of the parts' variances; NaN where
/// `n <= ddof` (as numpy's `nanvar`, and the real kernels' `var`), and where an element
/// is NaN or infinite for `var` (`x - mean` is NaN there, as in numpy).
///
/// The accumulator is `[n, real mean, real M2, imaginary mean, imaginary M2]`: each
/// part's running mean and sum of squared deviations, updated element by element
/// (Welford) and merged by Chan's formula, in index order, so every tiling gives the
/// same bits and no shift is needed (the real kernels' shift is one value; a complex
/// slice would need two).
pub(super) struct Moments<const NAN: bool> {
    pub(super) ddof: u32,
    pub(super) sqrt: bool,
}

/// Welford's update of a part's `[mean, M2]` by `x`, the `n`-th element.
#[inline]
fn welford(mean: &mut f64, m2: &mut f64, x: f64, n: f64) {
    let d = x - *mean;
    *mean += d / n;
    // the increment is d^2 (n - 1) / n >= 0 (its factors share a sign): its magnitude
    // keeps an overflow (1e308 then -1e308) at +inf, as numpy's variance, not -inf
    *m2 += (d * (x - *mean)).abs();
}

impl<T: Cx, const NAN: bool> Kernel<T> for Moments<NAN> {
    type A = [f64; 5];
    type O = f64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [f64; 5] {
        [0.0; 5]
    }
    #[inline]
    fn push(&self, a: &mut [f64; 5], x: T, _: f64) {
        if NAN && x.is_nan() {
            return;
        }
        let (r, i) = x.parts();
        a[0] += 1.0;
        let [n, mr, qr, mi, qi] = a;
        welford(mr, qr, r, *n);
        welford(mi, qi, i, *n);
    }
    fn merge(a: &mut [f64; 5], b: &[f64; 5]) {
        if b[0] == 0.0 {
            return;
        }
        if a[0] == 0.0 {
            *a = *b;
            return;
        }
        let n = a[0] + b[0];
        for (m, q) in [(1, 2), (3, 4)] {
            let d = b[m] - a[m];
            a[m] += d * (b[0] / n);
            a[q] += b[q] + d * d * (a[0] * b[0] / n);
        }
        a[0] = n;
    }
    fn finish(&self, a: &[f64; 5], _: u64) -> f64 {
        let dof = a[0] - f64::from(self.ddof);
        if dof <= 0.0 {
            return f64::NAN;
        }
        let var = (a[2] + a[4]) / dof;
        if self.sqrt { var.sqrt() } else { var }
    }
}

/// How many elements are not NaN (`count`).
pub(super) struct Count;

impl<T: Cx> Kernel<T> for Count {
    type A = i64;
    type O = i64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> i64 {
        0
    }
    #[inline]
    fn push(&self, a: &mut i64, x: T, _: f64) {
        *a += i64::from(!x.is_nan());
    }
    #[inline]
    fn merge(a: &mut i64, b: &i64) {
        *a += *b;
    }
    fn finish(&self, a: &i64, _: u64) -> i64 {
        *a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type C = Complex<f64>;

    fn c(re: f64, im: f64) -> C {
        Complex { re, im }
    }

    /// What `k` answers for `xs`: fed one by one, fed as two partials merged (at every
    /// cut), and fed as interleaved lanes (element `i` in lane `i % 8`).
    fn answers<K: Kernel<C, A = Pick>>(k: &K, xs: &[C]) -> Vec<K::O> {
        let feed = |xs: &[C]| {
            let mut a = k.zero();
            for &x in xs {
                k.push(&mut a, x, 0.0);
            }
            a
        };
        let mut out = vec![k.finish(&feed(xs), 0)];
        for cut in 0..=xs.len() {
            let mut a = feed(&xs[..cut]);
            K::merge(&mut a, &feed(&xs[cut..]));
            out.push(k.finish(&a, 0));
        }
        let mut lanes = [k.zero(); 8];
        for (i, &x) in xs.iter().enumerate() {
            k.push(&mut lanes[i % 8], x, 0.0);
        }
        out.push(k.finish_lanes(&lanes, 0));
        out
    }

    fn bits(x: C) -> (u64, u64) {
        (x.re.to_bits(), x.im.to_bits())
    }

    #[test]
    fn picks_follow_numpy() {
        // elements; then min, max, nanmin, nanmax and argmin, argmax, nanargmin,
        // nanargmax as numpy 2.4 gives them (-1: numpy raises "All-NaN slice")
        type Case = (Vec<C>, [C; 4], [i64; 4]);
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        let cases: Vec<Case> = vec![
            (
                vec![c(1.0, 2.0), c(1.0, 1.0), c(0.0, 5.0)],
                [c(0.0, 5.0), c(1.0, 2.0), c(0.0, 5.0), c(1.0, 2.0)],
                [2, 0, 2, 0],
            ),
            (
                vec![c(0.0, 0.0), c(-0.0, 0.0)],
                [c(0.0, 0.0); 4],
                [0, 0, 0, 0],
            ),
            (
                vec![c(-0.0, -0.0), c(0.0, 0.0)],
                [c(-0.0, -0.0); 4],
                [0, 0, 0, 0],
            ),
            (
                vec![c(2.0, 0.0), c(5.0, nan), c(nan, 1.0)],
                [c(5.0, nan), c(5.0, nan), c(2.0, 0.0), c(2.0, 0.0)],
                [1, 1, 0, 0],
            ),
            // numpy's nanargmin stands a NaN as inf+0j: [nan, inf+1j] gives 0
            (
                vec![c(nan, 0.0), c(inf, 1.0)],
                [c(nan, 0.0), c(nan, 0.0), c(inf, 1.0), c(inf, 1.0)],
                [0, 0, 0, 1],
            ),
            (
                vec![c(inf, 1.0), c(nan, 0.0)],
                [c(nan, 0.0), c(nan, 0.0), c(inf, 1.0), c(inf, 1.0)],
                [1, 1, 1, 0],
            ),
            (
                vec![c(nan, 0.0), c(-inf, -1.0)],
                [c(nan, 0.0), c(nan, 0.0), c(-inf, -1.0), c(-inf, -1.0)],
                [0, 0, 1, 0],
            ),
            // nothing kept: nanmin is the first element
            (
                vec![c(nan, 1.0), c(0.0, nan)],
                [c(nan, 1.0); 4],
                [0, 0, -1, -1],
            ),
            (
                vec![c(0.0, nan), c(3.0, 0.0), c(3.0, -0.0)],
                [c(0.0, nan), c(0.0, nan), c(3.0, 0.0), c(3.0, 0.0)],
                [0, 0, 1, 1],
            ),
            // more than 8 elements: lanes hold several, equal picks in different lanes
            (
                vec![
                    c(4.0, 0.0),
                    c(7.0, 1.0),
                    c(1.0, -0.0),
                    c(3.0, 3.0),
                    c(7.0, 1.0),
                    c(5.0, 0.0),
                    c(2.0, 2.0),
                    c(6.0, 6.0),
                    c(1.0, 0.0),
                    c(0.5, 9.0),
                    c(7.0, 1.0),
                ],
                [c(0.5, 9.0), c(7.0, 1.0), c(0.5, 9.0), c(7.0, 1.0)],
                [9, 1, 9, 1],
            ),
        ];
        for (xs, values, positions) in cases {
            let xs = &xs[..];
            let got_values = [
                answers(&Extreme::<false, PLAIN>, xs),
                answers(&Extreme::<true, PLAIN>, xs),
                answers(&Extreme::<false, FMIN>, xs),
                answers(&Extreme::<true, FMIN>, xs),
            ];
            for (k, (got, want)) in got_values.iter().zip(values).enumerate() {
                for g in got {
                    assert_eq!(bits(*g), bits(want), "{xs:?}: reduction {k}: {g:?}");
                }
            }
            let got_positions = [
                answers(&ArgExtreme::<false, PLAIN>, xs),
                answers(&ArgExtreme::<true, PLAIN>, xs),
                answers(&ArgExtreme::<false, REPLACE>, xs),
                answers(&ArgExtreme::<true, REPLACE>, xs),
            ];
            for (k, (got, want)) in got_positions.iter().zip(positions).enumerate() {
                assert!(
                    got.iter().all(|&g| g == want),
                    "{xs:?}: position {k}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn a_variance_that_overflows_is_inf_as_numpys() {
        // np.nanvar([1e308, -1e308]) is inf: pushed one after the other, or merged
        let k = Moments::<true> {
            ddof: 0,
            sqrt: false,
        };
        let (hi, lo) = (c(1e308, 0.0), c(-1e308, 0.0));
        let mut a = <Moments<true> as Kernel<C>>::zero(&k);
        k.push(&mut a, hi, 0.0);
        k.push(&mut a, lo, 0.0);
        let v = <Moments<true> as Kernel<C>>::finish(&k, &a, 2);
        assert!(v.is_infinite() && v > 0.0, "{v}");
        let (mut x, mut y) = ([0.0; 5], [0.0; 5]);
        k.push(&mut x, hi, 0.0);
        k.push(&mut y, lo, 0.0);
        <Moments<true> as Kernel<C>>::merge(&mut x, &y);
        let v = <Moments<true> as Kernel<C>>::finish(&k, &x, 2);
        assert!(v.is_infinite() && v > 0.0, "{v}");
    }

    #[test]
    fn columns_fold_in_numpys_order() {
        // two columns of one output, rows [r0, r1]: numpy visits (r0, c0), (r0, c1),
        // (r1, c0), (r1, c1); the first of equal minima is column 1's row 0
        type K = Extreme<false, PLAIN>;
        let nan = f64::NAN;
        let k = K {};
        let col = |xs: &[C]| {
            let mut a = <K as Kernel<C>>::zero(&k);
            for &x in xs {
                k.push(&mut a, x, 0.0);
            }
            a
        };
        let fold = |cols: &[&[C]]| {
            let mut a = <K as Kernel<C>>::zero(&k);
            for xs in cols {
                <K as Kernel<C>>::fold(&mut a, &col(xs));
            }
            k.finish(&a, 0)
        };
        let got = fold(&[&[c(1.0, 0.0), c(0.0, 0.0)], &[c(-0.0, 0.0), c(2.0, 0.0)]]);
        assert_eq!(bits(got), bits(c(-0.0, 0.0)));
        // the first NaN in numpy's order: row 0 of column 1, not row 1 of column 0
        let got = fold(&[&[c(1.0, 0.0), c(nan, 1.0)], &[c(nan, 2.0), c(2.0, 0.0)]]);
        assert_eq!(bits(got), bits(c(nan, 2.0)));
        // same row: the earlier column
        let got = fold(&[&[c(0.0, 0.0)], &[c(-0.0, -0.0)]]);
        assert_eq!(bits(got), bits(c(0.0, 0.0)));
    }
}
