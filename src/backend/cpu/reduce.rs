//! The CPU kernels of the reductions: the order of operations that
//! [`crate::ops::reduce`] fixes (blocks of rows summed sequentially, merged in index
//! order, blocks inside a tile in parallel on the rayon pool), in f64 or exact 64-bit
//! integer accumulators, with the widest vector instructions the CPU has.

use std::ops::Range;

use rayon::prelude::*;

use crate::ops::reduce::{BLOCK_ELEMS, Geometry, TileReducer, WIDE};

mod columns;
mod complex;
mod dispatch;
mod kernels;

pub use dispatch::{masked_reducer, reducer};
pub(crate) use kernels::Kernel;

/// What a reducer's elements may be: a real dtype's [`Element`](crate::dtype::Element)
/// or a complex number ([`crate::dtype::Complex`]), which its own kernels compare and sum
/// (`complex`).
pub(crate) trait Item: bytemuck::Pod + Send + Sync + 'static {}
impl<T: bytemuck::Pod + Send + Sync + 'static> Item for T {}

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

/// Columns of a matrix stored column by column accumulated together
/// ([`Reducer::columns`]): enough independent chains of operations to keep the CPU's
/// adders busy, few enough streams of reads for its prefetchers.
const COLUMN_GROUP: usize = 8;

/// Elements of a column-by-column tile one task accumulates (whole blocks, in groups of
/// [`COLUMN_GROUP`]): enough work to outweigh the task's scheduling, small enough that
/// the threads share many tasks.
const TASK_ELEMS: usize = 1 << 16;

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
fn accumulate<T: Item, K: Kernel<T>>(
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
unsafe fn accumulate_avx2<T: Item, K: Kernel<T>>(
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
fn accumulate_rows<T: Item, K: Kernel<T>>(
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
fn accumulate_closed<T: Item, K: Kernel<T>>(
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
unsafe fn accumulate_closed_avx2<T: Item, K: Kernel<T>>(
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
fn accumulate_closed_row<T: Item, K: Kernel<T>>(
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
pub(crate) struct Reducer<T: Item, K: Kernel<T>> {
    k: K,
    g: Geometry,
    live: State<K::A>,
    result: Vec<K::O>,
    threads: usize,
}

impl<T: Item, K: Kernel<T>> Reducer<T, K> {
    fn new(k: K, g: Geometry, threads: usize) -> Self {
        let zero = k.zero();
        let n_out = (g.outer * g.out_per_outer()) as usize;
        Reducer {
            live: State::new(zero, g.vcols()),
            result: vec![bytemuck::Zeroable::zeroed(); n_out],
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
                K::fold(&mut acc[self.g.column_output(c as u64).0 as usize], a);
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

impl<T: Item, K: Kernel<T> + Send> TileReducer for Reducer<T, K>
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
    fn takes_columns(&self) -> bool {
        let g = self.g;
        g.outer == 1 && g.inner > 1 && !g.folds() && self.live.blocks.is_none()
    }
    fn feed_columns(&mut self, c0: usize, row: u64, runs: &[&[u8]]) {
        let runs: Vec<_> = runs.iter().map(|r| crate::dtype::typed::<T>(r)).collect();
        let runs: Vec<&[T]> = runs.iter().map(|r| &**r).collect();
        self.columns(c0, row, &runs);
    }
    fn finish_columns(&mut self) {
        let opo = self.g.out_per_outer() as usize;
        let mut live = std::mem::replace(&mut self.live, State::new(self.k.zero(), 0));
        let mut result = std::mem::take(&mut self.result);
        self.finish(&mut live, &mut result[..opo]);
        self.result = result;
        self.live = live;
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

#[cfg(test)]
mod tests;
