//! The CPU kernels of the reductions: the order of operations that
//! [`crate::ops::reduce`] fixes (blocks of rows summed sequentially, merged in index
//! order, blocks inside a tile in parallel on the rayon pool), in f64 or exact 64-bit
//! integer accumulators, with the widest vector instructions the CPU has.

use std::ops::Range;

use rayon::prelude::*;

use crate::dtype::{DType, Element};
use crate::ops::reduce::{BLOCK_ELEMS, Geometry, Reduce, TileReducer, WIDE};

/// A reduction's arithmetic: accumulator, how elements enter it, how partials merge and
/// how the result is finished.
pub(crate) trait Kernel<T: Element>: Sync {
    type A: bytemuck::Pod + Send + Sync;
    type O: Element;
    const NEEDS_SHIFT: bool;
    fn zero(&self) -> Self::A;
    fn push(&self, a: &mut Self::A, x: T, shift: f64);
    fn merge(a: &mut Self::A, b: &Self::A);
    fn finish(&self, a: &Self::A, n: u64) -> Self::O;
    /// The variance shift element `x` (a slice's first) gives: its value, or 0 where the
    /// kernel leaves the element out (NaN, nodata), so that the shift is a value of the
    /// data (`Engine::reduce_partials` takes shares' shifts by the same rule).
    fn shift(&self, x: T) -> f64 {
        x.to_f64()
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

struct FloatSum {
    mean: bool,
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
struct IntSum<O> {
    mean: bool,
    unsigned: bool,
    _o: std::marker::PhantomData<O>,
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

struct Moments {
    ddof: u32,
    sqrt: bool,
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
}

/// Which elements the `nan` forms and `count` take: those that are not NaN ([`NotNan`]),
/// and, for an input with a nodata value, not that value either ([`NotNodata`]).
pub(crate) trait Valid<T>: Copy + Sync {
    /// Whether `x` is taken.
    fn ok(&self, x: T) -> bool;
}

/// Every element (the plain `argmin`, `argmax`: NaN is the extreme there).
#[derive(Clone, Copy)]
struct Every;
impl<T: Element> Valid<T> for Every {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn ok(&self, _: T) -> bool {
        true
    }
}

/// Elements that are not NaN (every element of an integer type).
#[derive(Clone, Copy)]
struct NotNan;
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
struct NotNodata<T>(T);
impl<T: Element> Valid<T> for NotNodata<T> {
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn ok(&self, x: T) -> bool {
        !x.is_nan() && x != self.0
    }
}

/// Sum (or mean) of the valid elements: `(sum, count)`, the others adding 0 (numpy's
/// `nansum` replaces NaN by 0).
struct NanFloatSum<M> {
    mean: bool,
    valid: M,
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
struct NanMoments<M> {
    ddof: u32,
    sqrt: bool,
    valid: M,
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
struct NanExtreme<M, const MAX: bool> {
    valid: M,
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
struct NodataExtreme<T, const MAX: bool> {
    nodata: T,
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
struct NodataIntSum<T, O> {
    nodata: T,
    unsigned: bool,
    _o: std::marker::PhantomData<O>,
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
struct CountK<M> {
    valid: M,
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

struct MinK;
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

struct MaxK;
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
/// The accumulator is `[value's bits, position, elements seen]`, the position counted
/// from the partial's own first element (`NONE` while it has none). Partials merge in
/// index order, the later one's position moved by the earlier one's count, so blocks,
/// tiles and Dask shares give the position of one pass; a column's elements are its rows
/// (the index along the reduced axis), a lane's are every 8th element
/// ([`Kernel::finish_lanes`] turns them back into indices).
struct ArgK<M, const MAX: bool> {
    /// Which elements are candidates ([`Every`] for `argmin`, [`NotNan`] or
    /// [`NotNodata`] for the `nan` forms); the others are counted, never chosen.
    valid: M,
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
    type A = [u64; 3];
    type O = i64;
    const NEEDS_SHIFT: bool = false;
    fn zero(&self) -> [u64; 3] {
        [0, Self::NONE, 0]
    }
    #[inline(always)] // the hot loop must inline into the AVX2 clone
    #[allow(clippy::inline_always)]
    fn push(&self, a: &mut [u64; 3], x: T, _: f64) {
        if self.valid.ok(x) && (a[1] == Self::NONE || Self::better(x, Self::value::<T>(a[0]))) {
            a[0] = Self::bits(x);
            a[1] = a[2];
        }
        a[2] += 1;
    }
    #[inline(always)]
    #[allow(clippy::inline_always)]
    fn merge(a: &mut [u64; 3], b: &[u64; 3]) {
        // `b` follows `a` in index order
        if b[1] != Self::NONE
            && (a[1] == Self::NONE || Self::better(Self::value::<T>(b[0]), Self::value::<T>(a[0])))
        {
            a[0] = b[0];
            a[1] = a[2] + b[1];
        }
        a[2] += b[2];
    }
    fn finish(&self, a: &[u64; 3], _: u64) -> i64 {
        // an empty slice is refused before any run (numpy raises too); a slice with no
        // valid element (nan forms) gives -1, which the engine refuses
        if a[1] == Self::NONE { -1 } else { a[1] as i64 }
    }
    fn finish_lanes(&self, t: &[[u64; 3]], _: u64) -> i64 {
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

/// One piece of a tile: rows `[ra, rb)` × columns `[ca, cb)` of the virtual matrix of one
/// outer index; `at` is the index in the tile's data of element `(ra, ca)`.
#[derive(Clone, Copy, Debug)]
struct Seg {
    ra: u64,
    rb: u64,
    ca: usize,
    cb: usize,
    at: usize,
}

/// Accumulation state of one outer index.
struct State<A> {
    total: Vec<A>,
    open: Vec<A>,
    shift: Vec<f64>,
    /// With [`TileReducer::collect_blocks`]: each block's partial (`vcols` accumulators
    /// per block, in block order) instead of their running total.
    blocks: Option<Vec<A>>,
    /// True when the shifts were given rather than taken from the data.
    shift_given: bool,
}

impl<A: Copy> State<A> {
    fn new(zero: A, vcols: usize) -> Self {
        State {
            total: vec![zero; vcols],
            open: vec![zero; vcols],
            shift: vec![0.0; vcols],
            blocks: None,
            shift_given: false,
        }
    }

    /// Closes column `c` of block `block` with its partial `a`: merged into the total,
    /// or kept in `blocks` when collecting (columns of a block not closed hold `zero`,
    /// whose merge changes nothing: they are closed with the open block at the end).
    #[inline]
    fn close<K: Fn(&mut A, &A)>(&mut self, block: u64, c: usize, a: &A, zero: A, merge: K) {
        match &mut self.blocks {
            Some(b) => {
                let vc = self.total.len();
                let at = block as usize * vc + c;
                if b.len() <= at {
                    b.resize((block as usize + 1) * vc, zero);
                }
                b[at] = *a;
            }
            None => merge(&mut self.total[c], a),
        }
    }
    fn reset(&mut self, zero: A) {
        self.total.fill(zero);
        self.open.fill(zero);
    }
}

/// Adds rows `seg` of `data` into `acc` (which holds columns `seg.ca..seg.cb`, or a
/// sub-range `cols` of them), with the widest vector instructions the CPU has.
///
/// Vectorization runs across columns, so every column sees the same sequence of IEEE
/// additions whichever path runs: results are bit-identical between them. FMA is not
/// enabled, since fusing would change rounding.
#[inline]
fn accumulate<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    vcols: usize,
    seg: Seg,
    cols: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { accumulate_avx2::<T, K>(k, data, vcols, seg, cols, acc, shift) };
        return;
    }
    accumulate_rows::<T, K>(k, data, vcols, seg, cols, acc, shift);
}

/// [`accumulate_rows`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_avx2<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    vcols: usize,
    seg: Seg,
    cols: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    accumulate_rows::<T, K>(k, data, vcols, seg, cols, acc, shift);
}

// inline(always) so the body is compiled with AVX2 inside `accumulate_avx2`
#[inline(always)]
#[allow(clippy::inline_always)]
fn accumulate_rows<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    vcols: usize,
    seg: Seg,
    cols: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    let w = cols.len();
    let shift = &shift[cols.start..cols.end];
    for r in 0..(seg.rb - seg.ra) as usize {
        let row = seg.at + r * vcols + (cols.start - seg.ca);
        let xs = &data[row..row + w];
        for ((a, &x), &s) in acc.iter_mut().zip(xs).zip(shift) {
            k.push(a, x, s);
        }
    }
}

/// A block of one row (`seg` one row that starts a block) pushed onto `zero` and merged
/// into `total` column by column: the operations of [`accumulate`] then a close, without
/// the open block's round trip through memory (wide rows, where `block_rows` is 1).
#[inline]
fn accumulate_closed<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    seg: Seg,
    cols: Range<usize>,
    total: &mut [K::A],
    shift: &[f64],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { accumulate_closed_avx2::<T, K>(k, data, seg, cols, total, shift) };
        return;
    }
    accumulate_closed_row::<T, K>(k, data, seg, cols, total, shift);
}

/// [`accumulate_closed_row`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_closed_avx2<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    seg: Seg,
    cols: Range<usize>,
    total: &mut [K::A],
    shift: &[f64],
) {
    accumulate_closed_row::<T, K>(k, data, seg, cols, total, shift);
}

#[inline(always)]
#[allow(clippy::inline_always)]
fn accumulate_closed_row<T: Element, K: Kernel<T>>(
    k: &K,
    data: &[T],
    seg: Seg,
    cols: Range<usize>,
    total: &mut [K::A],
    shift: &[f64],
) {
    let zero = k.zero();
    let at = seg.at + (cols.start - seg.ca);
    let xs = &data[at..at + cols.len()];
    let shift = &shift[cols.start..cols.end];
    for ((t, &x), &s) in total.iter_mut().zip(xs).zip(shift) {
        let mut a = zero;
        k.push(&mut a, x, s);
        K::merge(t, &a);
    }
}

/// Streaming reducer: feed it tiles in order, read the result at the end.
pub(crate) struct Reducer<T: Element, K: Kernel<T>> {
    k: K,
    g: Geometry,
    live: State<K::A>,
    result: Vec<K::O>,
    threads: usize,
}

impl<T: Element, K: Kernel<T>> Reducer<T, K> {
    fn new(k: K, g: Geometry, threads: usize) -> Self {
        let zero = k.zero();
        let n_out = (g.outer * g.out_per_outer()) as usize;
        Reducer {
            live: State::new(zero, g.vcols()),
            result: vec![K::O::from_f64(0.0); n_out],
            k,
            g,
            threads: threads.max(1),
        }
    }

    /// Splits positions `[p0, p1)` of one outer index into segments.
    fn segments(&self, p0: u64, p1: u64) -> Vec<Seg> {
        let vc = self.g.vcols() as u64;
        let b = self.g.block_rows();
        let mut out = Vec::new();
        let mut p = p0;
        while p < p1 {
            let row = p / vc;
            let col = p % vc;
            let at = (p - p0) as usize;
            if col != 0 || p1 - p < vc {
                let cb = vc.min(col + (p1 - p));
                out.push(Seg {
                    ra: row,
                    rb: row + 1,
                    ca: col as usize,
                    cb: cb as usize,
                    at,
                });
                p += cb - col;
            } else {
                let next_block = (row / b + 1) * b;
                let rows = ((p1 - p) / vc).min(next_block - row);
                out.push(Seg {
                    ra: row,
                    rb: row + rows,
                    ca: 0,
                    cb: vc as usize,
                    at,
                });
                p += rows * vc;
            }
        }
        out
    }

    /// Feeds positions `[p0, p1)` of one outer index (`data` holds exactly them) into `st`.
    fn feed(&self, st: &mut State<K::A>, data: &[T], p0: u64, p1: u64, parallel: bool) {
        let g = self.g;
        let vc = g.vcols();
        if K::NEEDS_SHIFT && !st.shift_given {
            if g.inner > 1 {
                // shift of column j is element (row 0, j), or, folding, that of its
                // output's first column (at or before j, so already seen)
                for j in p0..p1.min(vc as u64) {
                    let (_, from) = g.column_output(j);
                    st.shift[j as usize] = if from == j {
                        self.k.shift(data[(j - p0) as usize])
                    } else {
                        st.shift[from as usize]
                    };
                }
            } else if p0 == 0 {
                st.shift.fill(self.k.shift(data[0]));
            }
        }
        let zero = self.k.zero();
        let segs = self.segments(p0, p1);
        let wide = vc >= WIDE;
        let mut i = 0;
        while i < segs.len() {
            let s = segs[i];
            let independent = s.ra.is_multiple_of(g.block_rows());
            if parallel && !wide && independent {
                // a run of independent segments: compute in parallel, apply in order
                let mut j = i;
                while j < segs.len() && segs[j].ra.is_multiple_of(g.block_rows()) {
                    j += 1;
                }
                if j - i > 1 {
                    let shift = &st.shift;
                    let accs: Vec<Vec<K::A>> = segs[i..j]
                        .par_iter()
                        .map(|s| {
                            let mut acc = vec![zero; s.cb - s.ca];
                            accumulate::<T, K>(&self.k, data, vc, *s, s.ca..s.cb, &mut acc, shift);
                            acc
                        })
                        .collect();
                    for (s, acc) in segs[i..j].iter().zip(accs) {
                        self.apply(st, *s, &acc);
                    }
                    i = j;
                    continue;
                }
            }
            // in place on the open block (which is `zero` where a block starts); a block
            // that ends here is merged into the totals by the thread that summed its
            // columns (unless its partials are collected), in the same operations
            let closes = s.rb.is_multiple_of(g.block_rows());
            let merge_here = closes && st.blocks.is_none();
            // a whole block of one row: pushed and merged in one pass
            let one_row = merge_here && s.rb - s.ra == 1 && s.ra.is_multiple_of(g.block_rows());
            let State {
                open, total, shift, ..
            } = &mut *st;
            let (open, total) = (&mut open[s.ca..s.cb], &mut total[s.ca..s.cb]);
            let close = |acc: &mut [K::A], tot: &mut [K::A]| {
                for (t, o) in tot.iter_mut().zip(acc.iter_mut()) {
                    K::merge(t, o);
                    *o = zero;
                }
            };
            if parallel && wide {
                let chunk = (s.cb - s.ca).div_ceil(self.threads * 4).max(128);
                let shift = &*shift;
                open.par_chunks_mut(chunk)
                    .zip(total.par_chunks_mut(chunk))
                    .enumerate()
                    .for_each(|(c, (acc, tot))| {
                        let a = s.ca + c * chunk;
                        if one_row {
                            accumulate_closed::<T, K>(
                                &self.k,
                                data,
                                s,
                                a..a + acc.len(),
                                tot,
                                shift,
                            );
                            return;
                        }
                        accumulate::<T, K>(&self.k, data, vc, s, a..a + acc.len(), acc, shift);
                        if merge_here {
                            close(acc, tot);
                        }
                    });
            } else if one_row {
                accumulate_closed::<T, K>(&self.k, data, s, s.ca..s.cb, total, shift);
            } else {
                accumulate::<T, K>(&self.k, data, vc, s, s.ca..s.cb, open, shift);
                if merge_here {
                    close(open, total);
                }
            }
            if closes && !merge_here {
                let block = s.rb / g.block_rows() - 1;
                for c in s.ca..s.cb {
                    let o = std::mem::replace(&mut st.open[c], zero);
                    st.close(block, c, &o, zero, K::merge);
                }
            }
            i += 1;
        }
    }

    /// Applies a block-start segment computed out of place.
    fn apply(&self, st: &mut State<K::A>, s: Seg, acc: &[K::A]) {
        if s.rb.is_multiple_of(self.g.block_rows()) {
            let block = s.rb / self.g.block_rows() - 1;
            let zero = self.k.zero();
            for (c, a) in (s.ca..s.cb).zip(acc) {
                st.close(block, c, a, zero, K::merge);
            }
        } else {
            st.open[s.ca..s.cb].copy_from_slice(acc);
        }
    }

    /// Writes the outputs of a finished outer index into `out` and resets `st`.
    fn finish(&self, st: &mut State<K::A>, out: &mut [K::O]) {
        let zero = self.k.zero();
        if let Some(blocks) = &mut st.blocks {
            // the open block (or zeros) is the last partial; totals are made by the merge
            let vc = self.g.vcols();
            let rows = self.g.per_outer_elems().div_ceil(vc as u64);
            let at = (rows / self.g.block_rows()) as usize * vc;
            blocks.resize(at, zero);
            blocks.extend_from_slice(&st.open);
            st.open.fill(zero);
            return;
        }
        for c in 0..self.g.vcols() {
            let o = st.open[c];
            K::merge(&mut st.total[c], &o);
        }
        self.finish_totals(&st.total, out);
        st.reset(zero);
    }

    /// Writes the outputs of one outer index from its columns' final totals `t`.
    fn finish_totals(&self, t: &[K::A], out: &mut [K::O]) {
        if self.g.folds() {
            // each output's columns merged in column order (they share one shift)
            let zero = self.k.zero();
            let mut acc = vec![zero; out.len()];
            for (c, a) in t.iter().enumerate() {
                K::merge(&mut acc[self.g.column_output(c as u64).0 as usize], a);
            }
            let n = self.g.per_output();
            for (r, a) in out.iter_mut().zip(&acc) {
                *r = self.k.finish(a, n);
            }
        } else if self.g.inner > 1 {
            for (r, t) in out.iter_mut().zip(t) {
                *r = self.k.finish(t, self.g.len);
            }
        } else {
            out[0] = self.k.finish_lanes(t, self.g.len);
        }
    }

    /// Feeds one tile (flat elements `[start, start + data.len())`), in plan order.
    fn tile(&mut self, start: u64, data: &[T]) {
        if data.is_empty() {
            return;
        }
        let per = self.g.per_outer_elems();
        let opo = self.g.out_per_outer() as usize;
        let end = start + data.len() as u64;
        let first = start / per;
        let last = (end - 1) / per;
        let mut live = std::mem::replace(&mut self.live, State::new(self.k.zero(), 0));

        // first outer index: continues the carried state
        let p0 = start - first * per;
        let p1 = per.min(end - first * per);
        self.feed(&mut live, &data[..(p1 - p0) as usize], p0, p1, true);
        let mut consumed = (p1 - p0) as usize;
        let mut result = std::mem::take(&mut self.result);
        if p1 == per {
            let o = first as usize;
            self.finish(&mut live, &mut result[o * opo..(o + 1) * opo]);
        }
        if last > first {
            // outer indices wholly inside the tile: independent, in parallel
            let last_complete = end == (last + 1) * per;
            let full_end = if last_complete { last + 1 } else { last };
            let n_full = (full_end - first - 1) as usize;
            if n_full > 0 {
                let o0 = (first + 1) as usize;
                let zero = self.k.zero();
                let vc = self.g.vcols();
                let body = &data[consumed..consumed + n_full * per as usize];
                result[o0 * opo..(o0 + n_full) * opo]
                    .par_chunks_mut(opo)
                    .zip(body.par_chunks(per as usize))
                    .with_min_len((BLOCK_ELEMS / per).max(1) as usize)
                    .for_each_init(
                        || State::new(zero, vc),
                        |st, (out, d)| {
                            self.feed(st, d, 0, per, false);
                            self.finish(st, out);
                        },
                    );
                consumed += n_full * per as usize;
            }
            if !last_complete {
                live.reset(self.k.zero());
                let p1 = end - last * per;
                self.feed(&mut live, &data[consumed..], 0, p1, true);
            }
        }
        self.result = result;
        self.live = live;
    }
}

impl<T: Element, K: Kernel<T> + Send> TileReducer for Reducer<T, K>
where
    K::A: Send,
{
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]) {
        self.tile(start, &crate::dtype::typed::<T>(bytes));
    }
    fn into_bytes(self: Box<Self>) -> Vec<u8> {
        bytemuck::cast_slice(&self.result).to_vec()
    }
    fn state_len(&self) -> u64 {
        self.state_parts().iter().map(|p| p.len() as u64).sum()
    }
    fn state_parts(&self) -> Vec<&[u8]> {
        let l = &self.live;
        vec![
            bytemuck::cast_slice(&l.total),
            bytemuck::cast_slice(&l.open),
            bytemuck::cast_slice(&l.shift),
            bytemuck::cast_slice(&self.result),
        ]
    }
    fn finish_outers(&mut self, first: u64, totals: &[u8]) {
        let vc = self.g.vcols();
        let opo = self.g.out_per_outer() as usize;
        let totals: Vec<K::A> = bytemuck::pod_collect_to_vec(totals);
        assert_eq!(totals.len() % vc, 0, "totals of part of an outer index");
        let mut result = std::mem::take(&mut self.result);
        for (k, t) in totals.chunks(vc).enumerate() {
            let o = first as usize + k;
            self.finish_totals(t, &mut result[o * opo..(o + 1) * opo]);
        }
        self.result = result;
    }
    fn collect_blocks(&mut self, shift: Option<&[f64]>) {
        assert_eq!(
            self.g.outer, 1,
            "block partials of a reduction with several outer indices"
        );
        let vc = self.g.vcols();
        let rows = self.g.per_outer_elems().div_ceil(vc as u64);
        let blocks = (rows / self.g.block_rows()) as usize + 1;
        self.live.blocks = Some(Vec::with_capacity(blocks * vc));
        if let Some(sh) = shift {
            self.live.shift.copy_from_slice(sh);
            self.live.shift_given = true;
        }
    }
    fn take_blocks(&mut self) -> Vec<u8> {
        bytemuck::cast_slice(&self.live.blocks.take().unwrap_or_default()).to_vec()
    }
    fn fold_blocks(&mut self, blocks: &[u8]) {
        let blocks: Vec<K::A> = bytemuck::pod_collect_to_vec(blocks);
        for b in blocks.chunks(self.g.vcols()) {
            for (t, a) in self.live.total.iter_mut().zip(b) {
                K::merge(t, a);
            }
        }
    }
    fn finish_folded(&mut self) {
        let opo = self.g.out_per_outer() as usize;
        let mut result = std::mem::take(&mut self.result);
        self.finish_totals(&self.live.total, &mut result[..opo]);
        self.result = result;
    }
    fn state_parts_mut(&mut self) -> Vec<&mut [u8]> {
        let l = &mut self.live;
        vec![
            bytemuck::cast_slice_mut(&mut l.total),
            bytemuck::cast_slice_mut(&mut l.open),
            bytemuck::cast_slice_mut(&mut l.shift),
            bytemuck::cast_slice_mut(&mut self.result),
        ]
    }
}

/// Builds the CPU streaming reducer for `op` over `g` on elements of `dtype`, splitting
/// work across `threads` (which changes the work split, never the arithmetic).
#[must_use]
pub fn reducer(op: Reduce, dtype: DType, g: Geometry, threads: usize) -> Box<dyn TileReducer> {
    masked_reducer(op, dtype, g, threads, None)
}

/// [`reducer`] for an input whose elements equal to `nodata` (a value its type holds)
/// are missing: the `nan` forms and `count` leave them out as they leave NaN out (an
/// integer input's `nanmin`/`nanmax` of nodata alone is the nodata value); the other
/// reductions take every element, as numpy does.
#[must_use]
pub fn masked_reducer(
    op: Reduce,
    dtype: DType,
    g: Geometry,
    threads: usize,
    nodata: Option<f64>,
) -> Box<dyn TileReducer> {
    fn new<T: Element, K: Kernel<T> + Send + 'static>(
        k: K,
        g: Geometry,
        th: usize,
    ) -> Box<dyn TileReducer> {
        Box::new(Reducer::<T, K>::new(k, g, th))
    }
    /// The `nan` forms of an integer input with a nodata value.
    fn int_nodata<T: Element>(op: Reduce, g: Geometry, th: usize, nd: T) -> Box<dyn TileReducer> {
        let valid = NotNodata(nd);
        let unsigned = T::DTYPE.is_unsigned();
        match op {
            Reduce::NanSum if unsigned => new::<T, _>(
                NodataIntSum::<T, u64> {
                    nodata: nd,
                    unsigned,
                    _o: std::marker::PhantomData,
                },
                g,
                th,
            ),
            Reduce::NanSum => new::<T, _>(
                NodataIntSum::<T, i64> {
                    nodata: nd,
                    unsigned,
                    _o: std::marker::PhantomData,
                },
                g,
                th,
            ),
            Reduce::NanMean => new::<T, _>(NanFloatSum { mean: true, valid }, g, th),
            Reduce::NanMin => new::<T, _>(NodataExtreme::<T, false> { nodata: nd }, g, th),
            Reduce::NanMax => new::<T, _>(NodataExtreme::<T, true> { nodata: nd }, g, th),
            Reduce::NanVar { ddof } => new::<T, _>(
                NanMoments {
                    ddof,
                    sqrt: false,
                    valid,
                },
                g,
                th,
            ),
            Reduce::NanStd { ddof } => new::<T, _>(
                NanMoments {
                    ddof,
                    sqrt: true,
                    valid,
                },
                g,
                th,
            ),
            Reduce::Count => new::<T, _>(CountK { valid }, g, th),
            Reduce::NanArgMin => new::<T, _>(ArgK::<_, false> { valid }, g, th),
            Reduce::NanArgMax => new::<T, _>(ArgK::<_, true> { valid }, g, th),
            other => int::<T>(other, g, th),
        }
    }
    fn int<T: Element>(op: Reduce, g: Geometry, th: usize) -> Box<dyn TileReducer> {
        let unsigned = T::DTYPE.is_unsigned();
        // integers have no NaN: the `nan` forms are the plain ones
        let op = op.without_nan();
        match op {
            Reduce::Sum if unsigned => new::<T, _>(
                IntSum::<u64> {
                    mean: false,
                    unsigned,
                    _o: std::marker::PhantomData,
                },
                g,
                th,
            ),
            Reduce::Sum => new::<T, _>(
                IntSum::<i64> {
                    mean: false,
                    unsigned,
                    _o: std::marker::PhantomData,
                },
                g,
                th,
            ),
            Reduce::Mean => new::<T, _>(
                IntSum::<f64> {
                    mean: true,
                    unsigned,
                    _o: std::marker::PhantomData,
                },
                g,
                th,
            ),
            _ => common::<T, _>(op, g, th, NotNan),
        }
    }
    fn float<T: Element, M: Valid<T> + Send + 'static>(
        op: Reduce,
        g: Geometry,
        th: usize,
        valid: M,
    ) -> Box<dyn TileReducer> {
        match op {
            Reduce::Sum => new::<T, _>(FloatSum { mean: false }, g, th),
            Reduce::Mean => new::<T, _>(FloatSum { mean: true }, g, th),
            Reduce::NanSum => new::<T, _>(NanFloatSum { mean: false, valid }, g, th),
            Reduce::NanMean => new::<T, _>(NanFloatSum { mean: true, valid }, g, th),
            Reduce::NanMin => new::<T, _>(NanExtreme::<M, false> { valid }, g, th),
            Reduce::NanMax => new::<T, _>(NanExtreme::<M, true> { valid }, g, th),
            Reduce::NanVar { ddof } => new::<T, _>(
                NanMoments {
                    ddof,
                    sqrt: false,
                    valid,
                },
                g,
                th,
            ),
            Reduce::NanStd { ddof } => new::<T, _>(
                NanMoments {
                    ddof,
                    sqrt: true,
                    valid,
                },
                g,
                th,
            ),
            _ => common::<T, M>(op, g, th, valid),
        }
    }
    fn common<T: Element, M: Valid<T> + Send + 'static>(
        op: Reduce,
        g: Geometry,
        th: usize,
        valid: M,
    ) -> Box<dyn TileReducer> {
        match op {
            Reduce::Min => new::<T, _>(MinK, g, th),
            Reduce::Max => new::<T, _>(MaxK, g, th),
            Reduce::Var { ddof } => new::<T, _>(Moments { ddof, sqrt: false }, g, th),
            Reduce::Std { ddof } => new::<T, _>(Moments { ddof, sqrt: true }, g, th),
            Reduce::Count => new::<T, _>(CountK { valid }, g, th),
            Reduce::ArgMin => new::<T, _>(ArgK::<_, false> { valid: Every }, g, th),
            Reduce::ArgMax => new::<T, _>(ArgK::<_, true> { valid: Every }, g, th),
            Reduce::NanArgMin => new::<T, _>(ArgK::<M, false> { valid }, g, th),
            Reduce::NanArgMax => new::<T, _>(ArgK::<M, true> { valid }, g, th),
            Reduce::Sum
            | Reduce::Mean
            | Reduce::NanSum
            | Reduce::NanMean
            | Reduce::NanMin
            | Reduce::NanMax
            | Reduce::NanVar { .. }
            | Reduce::NanStd { .. } => {
                unreachable!("sums, means and the nan forms are dispatched by dtype class")
            }
        }
    }
    // a nodata value matters to the reductions that leave missing elements out; NaN as
    // nodata is NaN, which they leave out already
    let nodata = op.nodata_left_out(nodata);
    crate::dispatch_dtype!(dtype, T => {
        match nodata {
            Some(v) if T::DTYPE.is_float() => float::<T, _>(op, g, threads, NotNodata(T::from_f64(v))),
            Some(v) => int_nodata::<T>(op, g, threads, T::from_f64(v)),
            None if T::DTYPE.is_float() => float::<T, _>(op, g, threads, NotNan),
            None => int::<T>(op, g, threads),
        }
    })
}

#[cfg(test)]
mod tests;
