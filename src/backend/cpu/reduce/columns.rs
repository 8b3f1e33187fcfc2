//! The column-major path of the CPU reductions: runs of a Fortran-order matrix's
//! columns fed with the operations a C-order read applies to each column (see
//! [`TileReducer::feed_columns`](crate::ops::reduce::TileReducer::feed_columns)), so the
//! result is the same bytes.

use std::ops::Range;

use rayon::prelude::*;

use super::{COLUMN_GROUP, Item, Kernel, Reducer, State, TASK_ELEMS};
use crate::ops::reduce::COLUMN_PARTIALS;

/// Rows `rows` of each column of `group` (runs of a column-major matrix, at most
/// [`COLUMN_GROUP`] of them) pushed onto `acc`, row after row: for each column the
/// operations [`accumulate`] applies to it when the rows come in C order, the columns
/// interleaved so that their chains of dependent operations overlap.
fn push_columns<T: Item, K: Kernel<T>>(
    k: &K,
    group: &[&[T]],
    rows: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { push_columns_avx2::<T, K>(k, group, rows, acc, shift) };
        return;
    }
    push_columns_any::<T, K, false>(k, group, rows, acc, shift);
}

/// [`push_columns_any`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn push_columns_avx2<T: Item, K: Kernel<T>>(
    k: &K,
    group: &[&[T]],
    rows: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    push_columns_any::<T, K, true>(k, group, rows, acc, shift);
}

/// [`push_columns`] for a CPU with AVX (`AVX`: the caller checked) or any.
#[inline(always)]
#[allow(clippy::inline_always)]
fn push_columns_any<T: Item, K: Kernel<T>, const AVX: bool>(
    k: &K,
    group: &[&[T]],
    rows: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) {
    // columns taken 8, then 4 at a time (each group's pointers and accumulators held in
    // registers, no bounds checks in the loop), the last one to three one by one
    let (mut acc, mut group, mut shift) = (acc, group, shift);
    while !group.is_empty() {
        let w = match group.len() {
            8.. => push_fixed::<T, K, 8, AVX>(k, group, rows.clone(), acc, shift),
            4.. => push_fixed::<T, K, 4, AVX>(k, group, rows.clone(), acc, shift),
            _ => push_fixed::<T, K, 1, AVX>(k, group, rows.clone(), acc, shift),
        };
        acc = &mut acc[w..];
        group = &group[w..];
        shift = &shift[w..];
    }
}

/// [`push_columns_any`] for the first `W` columns of `group`; returns `W`.
#[inline(always)]
#[allow(clippy::inline_always)]
fn push_fixed<T: Item, K: Kernel<T>, const W: usize, const AVX: bool>(
    k: &K,
    group: &[&[T]],
    rows: Range<usize>,
    acc: &mut [K::A],
    shift: &[f64],
) -> usize {
    let n = rows.len();
    let cols: [&[T]; W] = std::array::from_fn(|c| &group[c][rows.clone()]);
    let s: [f64; W] = std::array::from_fn(|c| shift[c]);
    let mut a: [K::A; W] = std::array::from_fn(|c| acc[c]);
    // rows 8 at a time: each column's 8 read with one load, then row `i` of every column
    // in turn (the compiler transposes them in registers)
    let whole = n / 8 * 8;
    let mut i = 0;
    // eight columns of 4-byte elements with AVX: each column's 8 rows loaded and the 8x8
    // block transposed with shuffles (the compiler's own transposition inserts element
    // by element: 1.4x slower, a bench of the kernel alone)
    #[cfg(target_arch = "x86_64")]
    if AVX && W == 8 && size_of::<T>() == 4 {
        let eight: [&[T]; 8] = std::array::from_fn(|c| cols[c]);
        while i < whole {
            // SAFETY: AVX is set only by `push_columns_avx2`, which runs where the CPU
            // has AVX2; the elements are 4 bytes (checked just above); every column has
            // `n >= i + 8` rows.
            let t = unsafe { rows_of_8x8_words(&eight, i) };
            for row in &t {
                for c in 0..W {
                    k.push(&mut a[c], row[c], s[c]);
                }
            }
            i += 8;
        }
    }
    while i < whole {
        let chunk: [[T; 8]; W] = std::array::from_fn(|c| {
            let mut v = [cols[c][i]; 8];
            v.copy_from_slice(&cols[c][i..i + 8]);
            v
        });
        // an index, not an iterator: row `r` of every column's chunk in turn
        #[allow(clippy::needless_range_loop)]
        for r in 0..8 {
            for c in 0..W {
                k.push(&mut a[c], chunk[c][r], s[c]);
            }
        }
        i += 8;
    }
    // the last rows: an index, not an iterator over one column
    #[allow(clippy::needless_range_loop)]
    for i in whole..n {
        for c in 0..W {
            k.push(&mut a[c], cols[c][i], s[c]);
        }
    }
    acc[..W].copy_from_slice(&a);
    W
}

/// Rows `i..i + 8` of eight columns of 4-byte elements, as rows: `out[r][c]` is
/// `cols[c][i + r]` (the bits moved by shuffles, never converted).
///
/// # Safety
/// The CPU must support AVX, `T` must be 4 bytes, and every column must have at least
/// `i + 8` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn rows_of_8x8_words<T: Item>(cols: &[&[T]; 8], i: usize) -> [[T; 8]; 8] {
    use std::arch::x86_64::{
        __m256, _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    debug_assert!(size_of::<T>() == 4 && cols.iter().all(|c| c.len() >= i + 8));
    // SAFETY: each load reads 32 bytes, elements `i..i + 8` of a column of 4-byte
    // elements, in bounds (the caller's promise); unaligned loads and stores.
    let r: [__m256; 8] =
        std::array::from_fn(|c| unsafe { _mm256_loadu_ps(cols[c].as_ptr().add(i).cast()) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    let rows = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    let mut out = [[T::zeroed(); 8]; 8];
    for (o, v) in out.iter_mut().zip(rows) {
        // SAFETY: 32 bytes into a row of eight 4-byte elements.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr().cast(), v) };
    }
    out
}

impl<T: Item, K: Kernel<T>> Reducer<T, K> {
    /// Feeds rows `row..row + rows` of columns `c0..c0 + cols` given column by column
    /// (see [`TileReducer::feed_columns`]) with the operations [`Reducer::feed`] applies
    /// when the rows come in C order: pushed onto the column's open block, merged into its
    /// total where a block ends.
    ///
    /// A block starts from `zero` and its partial is merged into the total in block
    /// order, so the whole blocks of the tile are accumulated independently, in
    /// parallel (each from `zero`, [`COLUMN_GROUP`] blocks interleaved so that their chains
    /// of dependent operations overlap), then merged column by column in block order: the
    /// same operations in the same order, whatever the number of threads or columns. The
    /// rows before the first block boundary continue the open block; the rows after the
    /// last one open the next.
    pub(super) fn columns(&mut self, c0: usize, row: u64, runs: &[&[T]]) {
        let cols = runs.len();
        let rows = runs.first().map_or(0, |r| r.len());
        if rows == 0 {
            return;
        }
        let b = self.g.block_rows();
        let zero = self.k.zero();
        let k = &self.k;
        let st = &mut self.live;
        if K::NEEDS_SHIFT && !st.shift_given && row == 0 {
            // the shift of a column is its element of row 0, as when fed in C order
            for (s, run) in st.shift[c0..c0 + cols].iter_mut().zip(runs) {
                *s = k.shift(run[0]);
            }
        }
        let State {
            open, total, shift, ..
        } = st;
        let (open, total, shift) = (
            &mut open[c0..c0 + cols],
            &mut total[c0..c0 + cols],
            &shift[c0..c0 + cols],
        );
        // the rows that continue the open block, closing it where the block ends there
        let head = ((b - row % b) % b).min(rows as u64) as usize;
        if head > 0 {
            push_columns::<T, K>(k, runs, 0..head, open, shift);
            if (row + head as u64).is_multiple_of(b) {
                for (t, o) in total.iter_mut().zip(open.iter_mut()) {
                    K::merge(t, o);
                    *o = zero;
                }
            }
        }
        // whole blocks, a window of them at a time (each column's partials merged in
        // block order, window after window): block `j0 + j` of column `c` is unit
        // `c * win + j` of a window of `win` blocks
        let bu = b as usize;
        let blocks = (rows - head) / bu;
        let step = (COLUMN_PARTIALS / cols).clamp(1, blocks.max(1));
        let per_task = (TASK_ELEMS / bu).max(1).next_multiple_of(COLUMN_GROUP);
        let mut partial = Vec::new();
        for j0 in (0..blocks).step_by(step) {
            let win = step.min(blocks - j0);
            partial.clear();
            partial.resize(cols * win, zero);
            partial
                .par_chunks_mut(per_task)
                .enumerate()
                .for_each(|(ti, task)| {
                    // the task's units in `groups` groups, group `g` taking units
                    // `g, g + groups, g + 2 * groups, ...`: each of the group's streams
                    // then walks a long run of the file, group after group, which the
                    // hardware prefetcher follows (eight neighbouring blocks a group
                    // made eight streams of 1 KiB each: 1.75x slower, a bench of the
                    // kernel alone on a 1 GB matrix). Each unit is still its block's
                    // rows pushed in order from `zero`: the same bytes.
                    let first = ti * per_task;
                    let groups = task.len().div_ceil(COLUMN_GROUP);
                    for g in 0..groups {
                        let mut slices = [&runs[0][..0]; COLUMN_GROUP];
                        let mut shifts = [0.0; COLUMN_GROUP];
                        let mut acc = [zero; COLUMN_GROUP];
                        let mut n = 0;
                        for u in (g..task.len()).step_by(groups) {
                            let (c, j) = ((first + u) / win, (first + u) % win);
                            let at = head + (j0 + j) * bu;
                            slices[n] = &runs[c][at..at + bu];
                            shifts[n] = shift[c];
                            n += 1;
                        }
                        push_columns::<T, K>(k, &slices[..n], 0..bu, &mut acc[..n], &shifts[..n]);
                        for (u, a) in (g..task.len()).step_by(groups).zip(acc) {
                            task[u] = a;
                        }
                    }
                });
            total
                .par_iter_mut()
                .zip(partial.par_chunks(win))
                .for_each(|(t, parts)| {
                    for p in parts {
                        K::merge(t, p);
                    }
                });
        }
        // the rows that open the next block (the open block is `zero` here)
        let tail = head + blocks * bu;
        if tail < rows {
            push_columns::<T, K>(k, runs, tail..rows, open, shift);
        }
    }
}
