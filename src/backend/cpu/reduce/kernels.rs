//! The arithmetic of each reduction on the CPU: its accumulator, how elements enter it,
//! how partials merge and how the result is finished ([`Kernel`]), and which elements
//! the `nan` forms and `count` take ([`Valid`]). The driver that feeds them blocks of
//! rows in a fixed order is `super`'s [`Reducer`](super::Reducer).

use super::Item;
use crate::dtype::Element;

/// A reduction's arithmetic: accumulator, how elements enter it, how partials merge and
/// how the result is finished.
pub(crate) trait Kernel<T: Item>: Sync {
    type A: bytemuck::Pod + Send + Sync;
    type O: bytemuck::Pod + Send + Sync;
    const NEEDS_SHIFT: bool;
    fn zero(&self) -> Self::A;
    fn push(&self, a: &mut Self::A, x: T, shift: f64);
    /// Merges `b`, the partial of the elements that follow `a`'s in index order.
    fn merge(a: &mut Self::A, b: &Self::A);
    /// Merges the total of a later column `b` of the same output into `a` (several axes
    /// reduced: the columns of one output, in column order, each column's elements the
    /// rows): by default as [`merge`](Self::merge).
    fn fold(a: &mut Self::A, b: &Self::A) {
        Self::merge(a, b);
    }
    fn finish(&self, a: &Self::A, n: u64) -> Self::O;
    /// The variance shift element `x` (a slice's first) gives, for the kernels that
    /// need one ([`NEEDS_SHIFT`](Self::NEEDS_SHIFT), which override this): its value, or
    /// 0 where the kernel leaves the element out (NaN, nodata), so that the shift is a
    /// value of the data (`Engine::reduce_partials` takes shares' shifts by the same
    /// rule). The others are never asked.
    fn shift(&self, _x: T) -> f64 {
        0.0
    }
    /// Finishes the one output of a run reduced in 8 interleaved lanes (the reduced run
    /// is innermost: lane `l` holds elements `l, l + 8, ...`) from the lanes' totals: by
    /// default merged in a fixed tree.
    fn finish_lanes(&self, t: &[Self::A], n: u64) -> Self::O {
        let mut a = [t[0], t[2], t[4], t[6]];
        for (x, y) in a.iter_mut().zip([t[1], t[3], t[5], t[7]]) {
            Self::merge(x, &y);
        }
        let [mut a01, a23, mut a45, a67] = a;
        Self::merge(&mut a01, &a23);
        Self::merge(&mut a45, &a67);
        Self::merge(&mut a01, &a45);
        self.finish(&a01, n)
    }
}

pub(super) struct FloatSum {
    pub(super) mean: bool,
}
impl<T: Element> Kernel<T> for FloatSum {
    type A = f64;
    type O = f64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> f64 {
        0.0
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut f64, x: T, _: f64) {
        *a += x.to_f64();
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut f64, b: &f64) {
        *a += *b;
    }
    fn finish(&self, a: &f64, n: u64) -> f64 {
        if self.mean { *a / n as f64 } else { *a }
    }
}

/// Integer sum; `O` is i64 (signed, bool), u64 (unsigned) or f64 (mean).
pub(super) struct IntSum<O> {
    pub(super) mean: bool,
    pub(super) unsigned: bool,
    pub(super) _o: std::marker::PhantomData<O>,
}
impl<T: Element, O: Element> Kernel<T> for IntSum<O> {
    type A = i64;
    type O = O;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> i64 {
        0
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut i64, x: T, _: f64) {
        *a = a.wrapping_add(x.to_i64());
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut i64, b: &i64) {
        *a = a.wrapping_add(*b);
    }
    fn finish(&self, a: &i64, n: u64) -> O {
        let v = if self.unsigned {
            *a as u64 as f64
        } else {
            *a as f64
        };
        if self.mean {
            O::from_f64(v / n as f64)
        } else if self.unsigned {
            // reinterpret the wrapping sum's bits as u64 (O is u64 here)
            bytemuck::cast::<u64, O>(*a as u64)
        } else {
            bytemuck::cast::<i64, O>(*a)
        }
    }
}

pub(super) struct Moments {
    pub(super) ddof: u32,
    pub(super) sqrt: bool,
}
impl<T: Element> Kernel<T> for Moments {
    type A = [f64; 2];
    type O = f64;
    const NEEDS_SHIFT: bool = true;
    fn zero(&self) -> [f64; 2] {
        [0.0; 2]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [f64; 2], x: T, shift: f64) {
        let d = x.to_f64() - shift;
        a[0] += d;
        a[1] += d * d;
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [f64; 2], b: &[f64; 2]) {
        a[0] += b[0];
        a[1] += b[1];
    }
    fn finish(&self, a: &[f64; 2], n: u64) -> f64 {
        if n <= u64::from(self.ddof) {
            return f64::NAN;
        }
        let nf = n as f64;
        let raw = (a[1] - a[0] * (a[0] / nf)) / (nf - f64::from(self.ddof));
        // NaN inputs, and infinities (inf - inf), must give NaN, which max(0.0) would hide
        let var = if raw.is_nan() || a[1].is_nan() {
            f64::NAN
        } else {
            raw.max(0.0)
        };
        if self.sqrt { var.sqrt() } else { var }
    }
    fn shift(&self, x: T) -> f64 {
        x.to_f64()
    }
}

/// Which elements the `nan` forms and `count` take: those that are not NaN ([`NotNan`]),
/// and, for an input with a nodata value, not that value either ([`NotNodata`]).
pub(crate) trait Valid<T>: Copy + Sync {
    /// Whether `x` is taken.
    fn ok(&self, x: T) -> bool;
}

/// Every element (the plain `argmin`, `argmax`: NaN is the extreme there).
#[derive(Clone, Copy)]
pub(super) struct Every;
impl<T: Element> Valid<T> for Every {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn ok(&self, _: T) -> bool {
        true
    }
}

/// Elements that are not NaN (every element of an integer type).
#[derive(Clone, Copy)]
pub(super) struct NotNan;
impl<T: Element> Valid<T> for NotNan {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn ok(&self, x: T) -> bool {
        !x.is_nan()
    }
}

/// Elements that are neither NaN nor equal to the input's nodata value (compared as
/// values of the input's type, as GDAL compares them: `-0.0` is `0.0`'s nodata too).
#[derive(Clone, Copy)]
pub(super) struct NotNodata<T>(pub(super) T);
impl<T: Element> Valid<T> for NotNodata<T> {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn ok(&self, x: T) -> bool {
        !x.is_nan() && x != self.0
    }
}

/// Sum (or mean) of the valid elements: `(sum, count)`, the others adding 0 (numpy's
/// `nansum` replaces NaN by 0).
pub(super) struct NanFloatSum<M> {
    pub(super) mean: bool,
    pub(super) valid: M,
}
impl<T: Element, M: Valid<T>> Kernel<T> for NanFloatSum<M> {
    type A = [f64; 2];
    type O = f64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [f64; 2] {
        [0.0; 2]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [f64; 2], x: T, _: f64) {
        let ok = self.valid.ok(x);
        a[0] += if ok { x.to_f64() } else { 0.0 };
        a[1] += f64::from(u8::from(ok));
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [f64; 2], b: &[f64; 2]) {
        a[0] += b[0];
        a[1] += b[1];
    }
    fn finish(&self, a: &[f64; 2], _: u64) -> f64 {
        // a slice of NaN alone: its mean is 0 / 0, NaN
        if self.mean { a[0] / a[1] } else { a[0] }
    }
}

/// Variance (or deviation) of the valid elements: sums of `x - s`, `(x - s)²` and the
/// count.
pub(super) struct NanMoments<M> {
    pub(super) ddof: u32,
    pub(super) sqrt: bool,
    pub(super) valid: M,
}
impl<T: Element, M: Valid<T>> Kernel<T> for NanMoments<M> {
    type A = [f64; 3];
    type O = f64;
    const NEEDS_SHIFT: bool = true;
    fn zero(&self) -> [f64; 3] {
        [0.0; 3]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [f64; 3], x: T, shift: f64) {
        // NaN in the data is left out; inf minus an inf shift is not (NaN, as numpy)
        let ok = self.valid.ok(x);
        let d = x.to_f64() - shift;
        a[0] += if ok { d } else { 0.0 };
        a[1] += if ok { d * d } else { 0.0 };
        a[2] += f64::from(u8::from(ok));
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [f64; 3], b: &[f64; 3]) {
        a[0] += b[0];
        a[1] += b[1];
        a[2] += b[2];
    }
    fn finish(&self, a: &[f64; 3], _: u64) -> f64 {
        let n = a[2];
        if n <= f64::from(self.ddof) {
            return f64::NAN;
        }
        let raw = (a[1] - a[0] * (a[0] / n)) / (n - f64::from(self.ddof));
        let var = if raw.is_nan() || a[1].is_nan() {
            f64::NAN
        } else {
            raw.max(0.0)
        };
        if self.sqrt { var.sqrt() } else { var }
    }
    fn shift(&self, x: T) -> f64 {
        if self.valid.ok(x) { x.to_f64() } else { 0.0 }
    }
}

/// Minimum or maximum of the valid elements of a float type: `(value, count)`, NaN for
/// a slice with none. `MAX` picks the extreme.
pub(super) struct NanExtreme<M, const MAX: bool> {
    pub(super) valid: M,
}
impl<M, const MAX: bool> NanExtreme<M, MAX> {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn better(v: f64, than: f64) -> bool {
        if MAX { v > than } else { v < than }
    }
}
impl<T: Element, M: Valid<T>, const MAX: bool> Kernel<T> for NanExtreme<M, MAX> {
    type A = [f64; 2];
    type O = T;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [f64; 2] {
        [
            if MAX {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            },
            0.0,
        ]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [f64; 2], x: T, _: f64) {
        let v = x.to_f64();
        let ok = self.valid.ok(x);
        a[0] = if ok && Self::better(v, a[0]) { v } else { a[0] };
        a[1] += f64::from(u8::from(ok));
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [f64; 2], b: &[f64; 2]) {
        // an empty partial holds the zero (±inf), which is never better
        if Self::better(b[0], a[0]) {
            a[0] = b[0];
        }
        a[1] += b[1];
    }
    fn finish(&self, a: &[f64; 2], _: u64) -> T {
        T::from_f64(if a[1] == 0.0 { f64::NAN } else { a[0] })
    }
}

/// Minimum or maximum of an integer input's elements that are not its nodata value,
/// compared in the input's own type (64-bit values beyond 2^53 stay exact):
/// `[value's bits, count]`; a slice of nodata alone gives the nodata value.
pub(super) struct NodataExtreme<T, const MAX: bool> {
    pub(super) nodata: T,
}
impl<T: Element, const MAX: bool> Kernel<T> for NodataExtreme<T, MAX> {
    type A = [u64; 2];
    type O = T;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [u64; 2] {
        [
            ArgK::<NotNan, MAX>::bits(if MAX { T::LOWEST } else { T::HIGHEST }),
            0,
        ]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [u64; 2], x: T, _: f64) {
        let ok = x != self.nodata;
        let cur = ArgK::<NotNan, MAX>::value::<T>(a[0]);
        if ok && (if MAX { x > cur } else { x < cur }) {
            a[0] = ArgK::<NotNan, MAX>::bits(x);
        }
        a[1] += u64::from(ok);
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [u64; 2], b: &[u64; 2]) {
        // an empty partial holds the zero (the type's extreme), which is never better
        let (x, cur) = (
            ArgK::<NotNan, MAX>::value::<T>(b[0]),
            ArgK::<NotNan, MAX>::value::<T>(a[0]),
        );
        if if MAX { x > cur } else { x < cur } {
            a[0] = b[0];
        }
        a[1] += b[1];
    }
    fn finish(&self, a: &[u64; 2], _: u64) -> T {
        if a[1] == 0 {
            self.nodata
        } else {
            ArgK::<NotNan, MAX>::value::<T>(a[0])
        }
    }
}

/// Integer sum of the elements that are not the input's nodata value (`nansum` of an
/// integer input with one), in wrapping 64-bit arithmetic as [`IntSum`].
pub(super) struct NodataIntSum<T, O> {
    pub(super) nodata: T,
    pub(super) unsigned: bool,
    pub(super) _o: std::marker::PhantomData<O>,
}
impl<T: Element, O: Element> Kernel<T> for NodataIntSum<T, O> {
    type A = i64;
    type O = O;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> i64 {
        0
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut i64, x: T, _: f64) {
        let v = if x == self.nodata { 0 } else { x.to_i64() };
        *a = a.wrapping_add(v);
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut i64, b: &i64) {
        *a = a.wrapping_add(*b);
    }
    fn finish(&self, a: &i64, _: u64) -> O {
        if self.unsigned {
            bytemuck::cast::<u64, O>(*a as u64)
        } else {
            bytemuck::cast::<i64, O>(*a)
        }
    }
}

/// How many elements are valid.
pub(super) struct CountK<M> {
    pub(super) valid: M,
}
impl<T: Element, M: Valid<T>> Kernel<T> for CountK<M> {
    type A = i64;
    type O = i64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> i64 {
        0
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut i64, x: T, _: f64) {
        *a += i64::from(self.valid.ok(x));
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut i64, b: &i64) {
        *a += *b;
    }
    fn finish(&self, a: &i64, _: u64) -> i64 {
        *a
    }
}

pub(super) struct MinK;
impl<T: Element> Kernel<T> for MinK {
    type A = T;
    type O = T;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> T {
        T::HIGHEST
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut T, x: T, _: f64) {
        if x < *a || x.is_nan() {
            *a = x;
        }
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut T, b: &T) {
        Self.push(a, *b, 0.0);
    }
    fn finish(&self, a: &T, _: u64) -> T {
        *a
    }
}

pub(super) struct MaxK;
impl<T: Element> Kernel<T> for MaxK {
    type A = T;
    type O = T;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> T {
        T::LOWEST
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut T, x: T, _: f64) {
        if x > *a || x.is_nan() {
            *a = x;
        }
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut T, b: &T) {
        Self.push(a, *b, 0.0);
    }
    fn finish(&self, a: &T, _: u64) -> T {
        *a
    }
}

/// Where the minimum (`MAX` false) or maximum of a slice first occurs (numpy's `argmin`,
/// `argmax`: the first occurrence of the extreme; the first NaN if there is one).
///
/// The `nan` forms of a float input take numpy's `nanargmin` literally: an element left
/// out (NaN, nodata) stands as `+inf` (`-inf` for the maximum), so `[nan, inf]` gives 0,
/// as numpy gives; a slice with none kept gives -1, which the engine refuses. Those of an
/// integer input (whose only missing value is its nodata value) skip it.
///
/// The accumulator is `[value's bits, position, elements seen, elements kept]`, the
/// position counted from the partial's own first element (`NONE` while it has none).
/// Partials merge in index order, the later one's position moved by the earlier one's
/// count, so blocks, tiles and Dask shares give the position of one pass; a column's
/// elements are its rows (the index along the reduced axis), a lane's are every 8th
/// element ([`Kernel::finish_lanes`] turns them back into indices).
pub(super) struct ArgK<M, const MAX: bool> {
    /// Which elements are kept ([`Every`] for `argmin`, [`NotNan`] or [`NotNodata`] for
    /// the `nan` forms); the others stand as the infinity that never wins, or are skipped.
    pub(super) valid: M,
}
impl<M, const MAX: bool> ArgK<M, MAX> {
    const NONE: u64 = u64::MAX;
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn bits<T: Element>(x: T) -> u64 {
        let mut b = [0u8; 8];
        let v = bytemuck::bytes_of(&x);
        b[..v.len()].copy_from_slice(v);
        u64::from_le_bytes(b)
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn value<T: Element>(bits: u64) -> T {
        let b = bits.to_le_bytes();
        bytemuck::pod_read_unaligned(&b[..std::mem::size_of::<T>()])
    }
    /// Whether `x` replaces `cur` as the extreme: NaN beats any number, nothing beats NaN,
    /// and a tie keeps the earlier.
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn better<T: Element>(x: T, cur: T) -> bool {
        if cur.is_nan() {
            false
        } else if x.is_nan() {
            true
        } else if MAX {
            x > cur
        } else {
            x < cur
        }
    }
}
impl<T: Element, M: Valid<T>, const MAX: bool> Kernel<T> for ArgK<M, MAX> {
    type A = [u64; 4];
    type O = i64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [u64; 4] {
        [0, Self::NONE, 0, 0]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [u64; 4], x: T, _: f64) {
        let ok = self.valid.ok(x);
        // a float element left out stands as the infinity that never wins (numpy's
        // nanargmin); an integer's is skipped
        let stand = if MAX { T::LOWEST } else { T::HIGHEST };
        let (candidate, v) = match (ok, T::DTYPE.is_float()) {
            (true, _) => (true, x),
            (false, true) => (true, stand),
            (false, false) => (false, x),
        };
        if candidate && (a[1] == Self::NONE || Self::better(v, Self::value::<T>(a[0]))) {
            a[0] = Self::bits(v);
            a[1] = a[2];
        }
        a[2] += 1;
        a[3] += u64::from(ok);
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [u64; 4], b: &[u64; 4]) {
        // `b` follows `a` in index order
        if b[1] != Self::NONE
            && (a[1] == Self::NONE || Self::better(Self::value::<T>(b[0]), Self::value::<T>(a[0])))
        {
            a[0] = b[0];
            a[1] = a[2] + b[1];
        }
        a[2] += b[2];
        a[3] += b[3];
    }
    fn finish(&self, a: &[u64; 4], _: u64) -> i64 {
        // an empty slice is refused before any run (numpy raises too); a slice with no
        // element kept (nan forms) gives -1, which the engine refuses
        if a[1] == Self::NONE || a[3] == 0 {
            -1
        } else {
            a[1] as i64
        }
    }
    fn finish_lanes(&self, t: &[[u64; 4]], _: u64) -> i64 {
        if t.iter().all(|a| a[3] == 0) {
            return -1;
        }
        // lane `l`'s position `p` is element `8 p + l`: the earliest of equal extremes wins
        let mut best: Option<(T, u64)> = None;
        for (l, a) in t.iter().enumerate() {
            if a[1] == Self::NONE {
                continue;
            }
            let (v, i) = (Self::value::<T>(a[0]), a[1] * t.len() as u64 + l as u64);
            best = match best {
                Some((bv, bi)) if !Self::better(v, bv) && (Self::better(bv, v) || bi < i) => {
                    Some((bv, bi))
                }
                _ => Some((v, i)),
            };
        }
        best.map_or(-1, |(_, i)| i as i64)
    }
}
