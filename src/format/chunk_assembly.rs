//! Output chunks assembled from the pieces a run writes, for outputs encoded as the run
//! writes them (GeoTIFF tiles, Zarr chunks): no raw staging file.
//!
//! A run writes its output as runs of flat C-order elements (a flat tile's range, or
//! a box tile's rows). The output is cut into *chunks* (a TIFF tile of one band, a Zarr
//! outer chunk): hyper-rectangles of a regular grid. Each piece written is copied into
//! the buffers of the chunks it crosses; a chunk is handed on (to be compressed and
//! written) as soon as its last element arrives, and its buffer goes with it. Only the
//! chunks partly written are held: a flat plan holds at most the row of chunks it is
//! crossing; a box plan whose boxes are cut along the chunk grid holds the chunks of
//! one row of chunks of one box.
//!
//! Chunks complete in the order the run's pieces complete them; whoever writes them
//! records where each went (a TIFF's offsets table is written last). A resumed run
//! marks the chunks an interrupted one wrote as done ([`ChunkAssembly::mark_done`]);
//! bytes for them are dropped, and [`ChunkAssembly::covers`] tells which of the run's
//! pieces are still needed.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// A run of consecutive output chunks (GeoTIFF tiles, Zarr chunks) written together:
/// what the journal records so that a resumed run can check it and keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRun {
    /// Index of its first chunk (a TIFF's tile order: band, then row, then column).
    pub first: usize,
    /// File offset of its first tile (0 for Zarr chunks, which are files of their own).
    pub offset: u64,
    /// Length of each of its chunks, in order (compressed TIFF tiles; Zarr chunk files).
    pub counts: Vec<u64>,
    /// CRC-32 of its bytes.
    pub crc: u32,
}

/// A regular chunk grid over a C-order array.
#[derive(Clone, Debug)]
pub(crate) struct ChunkGrid {
    shape: Vec<usize>,
    chunk: Vec<usize>,
    grid: Vec<usize>,
}

/// Calls `f(idx, at)` for each row (run along the last axis) of the box of `size` at
/// `origin` in a C-order array of `shape`, in C order: `idx` is the row's index in the
/// box over the leading axes, `at` the array element its first element is. Stops at the
/// first error `f` returns.
pub(crate) fn for_each_box_row<E>(
    shape: &[usize],
    origin: &[usize],
    size: &[usize],
    mut f: impl FnMut(&[usize], usize) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let rank = shape.len();
    let Some(lead) = rank.checked_sub(1) else {
        return Ok(());
    };
    let rows: usize = size[..lead].iter().product();
    let mut idx = vec![0usize; lead];
    for _ in 0..rows {
        let mut at = 0usize;
        for a in 0..lead {
            at = at * shape[a] + origin[a] + idx[a];
        }
        f(&idx, at * shape[lead] + origin[lead])?;
        for a in (0..lead).rev() {
            idx[a] += 1;
            if idx[a] < size[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(())
}

impl ChunkGrid {
    /// The grid of `chunk`-shaped chunks over `shape` (same rank, no zero extents).
    ///
    /// # Errors
    /// [`Error::Internal`] for ranks that differ or a zero chunk extent.
    pub(crate) fn new(shape: &[usize], chunk: &[usize]) -> Result<Self> {
        if shape.len() != chunk.len() || shape.is_empty() || chunk.contains(&0) {
            return Err(Error::Internal(format!(
                "chunk grid {chunk:?} over shape {shape:?}"
            )));
        }
        let grid = shape
            .iter()
            .zip(chunk)
            .map(|(&n, &c)| n.div_ceil(c))
            .collect();
        Ok(ChunkGrid {
            shape: shape.to_vec(),
            chunk: chunk.to_vec(),
            grid,
        })
    }

    /// Number of chunks.
    pub(crate) fn chunks(&self) -> usize {
        self.grid.iter().product()
    }

    /// Grid position of chunk `k` (C order).
    pub(crate) fn position(&self, k: usize) -> Vec<usize> {
        let mut pos = vec![0; self.grid.len()];
        let mut rem = k;
        for a in (0..self.grid.len()).rev() {
            pos[a] = rem % self.grid[a];
            rem /= self.grid[a];
        }
        pos
    }

    /// Extent of chunk `k` along each axis (clipped at the array's edge).
    pub(crate) fn extent(&self, k: usize) -> Vec<usize> {
        self.position(k)
            .iter()
            .enumerate()
            .map(|(a, &p)| self.chunk[a].min(self.shape[a] - p * self.chunk[a]))
            .collect()
    }

    /// Elements of chunk `k` (clipped).
    fn elems(&self, k: usize) -> usize {
        self.extent(k).iter().product()
    }

    /// Calls `f(chunk, element in its clipped C-order buffer)` for flat element `e`.
    pub(crate) fn locate(&self, e: u64, mut f: impl FnMut(usize, usize)) {
        self.pieces(e, 1, |k, at, _, _| f(k, at));
    }

    /// Calls `f(chunk, element in the chunk's clipped C-order buffer, element of the
    /// piece, count)` for each run of the flat range `[start, start + len)` that lies in
    /// one row of one chunk, in order.
    fn pieces(&self, start: u64, len: u64, mut f: impl FnMut(usize, usize, u64, usize)) {
        let rank = self.shape.len();
        let width = self.shape[rank - 1] as u64;
        let cw = self.chunk[rank - 1];
        let mut idx = vec![0usize; rank];
        let (mut e, end) = (start, start + len);
        while e < end {
            // multi-index of e
            let mut rem = e;
            for a in (0..rank).rev() {
                idx[a] = (rem % self.shape[a] as u64) as usize;
                rem /= self.shape[a] as u64;
            }
            let row_end = (e - idx[rank - 1] as u64 + width).min(end);
            // the chunk row this array row is in (all axes but the last)
            let mut k_row = 0usize;
            let mut at_row = 0usize;
            let axes = idx
                .iter()
                .zip(&self.chunk)
                .zip(self.grid.iter().zip(&self.shape));
            for ((&i, &c), (&g, &n)) in axes.take(rank - 1) {
                let p = i / c;
                k_row = k_row * g + p;
                let ext = c.min(n - p * c);
                at_row = at_row * ext + (i - p * c);
            }
            let mut col = idx[rank - 1];
            while e < row_end {
                let p = col / cw;
                let ext = cw.min(self.shape[rank - 1] - p * cw);
                let n = ((p * cw + ext - col) as u64).min(row_end - e) as usize;
                let k = k_row * self.grid[rank - 1] + p;
                f(k, at_row * ext + (col - p * cw), e - start, n);
                e += n as u64;
                col += n;
            }
        }
    }
}

/// A chunk being filled.
#[derive(Debug)]
struct Open {
    buf: Vec<u8>,
    /// Elements written so far.
    filled: usize,
}

/// Chunks assembled from the run's pieces; see the module documentation.
#[derive(Debug)]
pub(crate) struct ChunkAssembly {
    grid: ChunkGrid,
    /// Bytes per element.
    es: usize,
    open: HashMap<usize, Open>,
    /// Chunks complete (handed on, or kept from an interrupted run).
    done: Vec<bool>,
    ndone: usize,
}

impl ChunkAssembly {
    /// An assembly of the chunks of `grid`, elements of `es` bytes, none done.
    pub(crate) fn new(grid: ChunkGrid, es: usize) -> Self {
        let n = grid.chunks();
        ChunkAssembly {
            grid,
            es,
            open: HashMap::new(),
            done: vec![false; n],
            ndone: 0,
        }
    }

    /// The grid.
    pub(crate) fn grid(&self) -> &ChunkGrid {
        &self.grid
    }

    /// Takes `bytes` of the output from flat element `start` on. Each time an array row
    /// of the piece completes chunks, they are handed to `complete` (ascending, with
    /// their clipped C-order bytes) before the next row is taken, so that no more than
    /// the chunks of the rows being crossed are held. Bytes of chunks already done (a
    /// resumed run redoing a tile that began among kept chunks) are dropped.
    ///
    /// # Errors
    /// What `complete` returns; [`Error::Internal`] for a piece past the array's end, or
    /// more elements written into a chunk than it holds. (An element written twice before
    /// its chunk is full is not caught: each element must be written once, as the
    /// scheduler does.)
    pub(crate) fn feed(
        &mut self,
        start: u64,
        bytes: &[u8],
        mut complete: impl FnMut(Vec<(usize, Vec<u8>)>) -> Result<()>,
    ) -> Result<()> {
        let es = self.es;
        let len = (bytes.len() / es) as u64;
        let total: u64 = self.grid.shape.iter().map(|&d| d as u64).product();
        if start + len > total {
            return Err(Error::Internal(format!(
                "output elements {start}..{} written past the end ({total})",
                start + len
            )));
        }
        let width = self.grid.shape[self.grid.shape.len() - 1] as u64;
        let mut finished: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut overfilled = None;
        let mut e = start;
        while e < start + len {
            // one array row of the piece at a time
            let row_end = ((e / width + 1) * width).min(start + len);
            let (grid, open, done, ndone) =
                (&self.grid, &mut self.open, &mut self.done, &mut self.ndone);
            grid.pieces(e, row_end - e, |k, at, from, n| {
                if done[k] {
                    return;
                }
                let o = open.entry(k).or_insert_with(|| Open {
                    buf: vec![0u8; grid.elems(k) * es],
                    filled: 0,
                });
                let src = ((e - start + from) as usize) * es;
                o.buf[at * es..(at + n) * es].copy_from_slice(&bytes[src..src + n * es]);
                o.filled += n;
                if o.filled * es >= o.buf.len() {
                    if o.filled * es > o.buf.len() {
                        overfilled = Some(k);
                    }
                    if let Some(o) = open.remove(&k) {
                        done[k] = true;
                        *ndone += 1;
                        finished.push((k, o.buf));
                    }
                }
            });
            if let Some(k) = overfilled {
                return Err(Error::Internal(format!(
                    "output chunk {k} got more elements than it holds (written twice)"
                )));
            }
            if !finished.is_empty() {
                finished.sort_unstable_by_key(|c| c.0);
                complete(std::mem::take(&mut finished))?;
            }
            e = row_end;
        }
        Ok(())
    }

    /// Marks chunk `k` done (kept from an interrupted run): its bytes are dropped.
    pub(crate) fn mark_done(&mut self, k: usize) {
        self.open.remove(&k);
        if let Some(d) = self.done.get_mut(k)
            && !*d
        {
            *d = true;
            self.ndone += 1;
        }
    }

    /// Whether chunk `k` is done.
    pub(crate) fn is_done(&self, k: usize) -> bool {
        self.done.get(k).copied().unwrap_or(false)
    }

    /// Chunks done.
    pub(crate) fn done_count(&self) -> usize {
        self.ndone
    }

    /// Whether every element of the flat range `[start, start + len)` lies in a chunk
    /// already done (a resumed run need not write it again).
    pub(crate) fn covers(&self, start: u64, len: u64) -> bool {
        let mut all = true;
        self.grid
            .pieces(start, len, |k, _, _, _| all &= self.done[k]);
        all
    }
}

/// Splits ascending chunk indices into runs of consecutive ones.
pub(crate) fn consecutive_runs<T>(chunks: Vec<(usize, T)>) -> Vec<Vec<(usize, T)>> {
    let mut runs: Vec<Vec<(usize, T)>> = Vec::new();
    for c in chunks {
        match runs.last_mut() {
            Some(r) if r.last().is_some_and(|l| l.0 + 1 == c.0) => r.push(c),
            _ => runs.push(vec![c]),
        }
    }
    runs
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The chunks of `shape` cut by hand: for each chunk, its elements' flat indices.
    fn oracle(shape: &[usize], chunk: &[usize]) -> Vec<Vec<u64>> {
        let g = ChunkGrid::new(shape, chunk).unwrap();
        (0..g.chunks())
            .map(|k| {
                let pos = g.position(k);
                let ext = g.extent(k);
                let n: usize = ext.iter().product();
                (0..n)
                    .map(|i| {
                        // C-order index i within the chunk -> flat index in the array
                        let mut rem = i;
                        let mut local = vec![0; ext.len()];
                        for a in (0..ext.len()).rev() {
                            local[a] = rem % ext[a];
                            rem /= ext[a];
                        }
                        let mut flat = 0u64;
                        for a in 0..ext.len() {
                            flat = flat * shape[a] as u64 + (pos[a] * chunk[a] + local[a]) as u64;
                        }
                        flat
                    })
                    .collect()
            })
            .collect()
    }

    /// Pieces in any cut (flat ranges of several sizes, and box rows) give every chunk
    /// exactly its elements, each chunk once, and no chunk is held past its last piece.
    #[test]
    fn chunks_assemble_exactly_whatever_the_pieces() {
        for (shape, chunk) in [
            (vec![37, 50], vec![16, 16]),
            (vec![3, 40, 33], vec![1, 16, 16]),
            (vec![2, 9, 7, 5], vec![2, 4, 3, 5]),
            (vec![100], vec![7]),
            (vec![5, 5], vec![8, 8]),
        ] {
            let total: usize = shape.iter().product();
            let want = oracle(&shape, &chunk);
            // element i holds i (u32)
            let src: Vec<u8> = (0..total as u32).flat_map(u32::to_le_bytes).collect();
            for piece in [1usize, 3, 17, 50, 1000, total] {
                let mut asm = ChunkAssembly::new(ChunkGrid::new(&shape, &chunk).unwrap(), 4);
                let mut got: Vec<Option<Vec<u8>>> = vec![None; want.len()];
                let mut at = 0;
                while at < total {
                    let n = piece.min(total - at);
                    asm.feed(at as u64, &src[at * 4..(at + n) * 4], |done| {
                        for (k, b) in done {
                            assert!(got[k].is_none(), "chunk {k} twice");
                            got[k] = Some(b);
                        }
                        Ok(())
                    })
                    .unwrap();
                    at += n;
                }
                assert_eq!(asm.done_count(), want.len());
                assert!(asm.open.is_empty());
                for (k, w) in want.iter().enumerate() {
                    let b: Vec<u8> = w.iter().flat_map(|&i| (i as u32).to_le_bytes()).collect();
                    assert_eq!(got[k].as_ref(), Some(&b), "{shape:?} {chunk:?} chunk {k}");
                }
            }
        }
    }

    /// Box tiles cut along the chunk grid complete their chunks inside the box: after
    /// each box, nothing is held.
    #[test]
    fn aligned_boxes_leave_nothing_open() {
        let (h, w) = (40usize, 50usize);
        let mut asm = ChunkAssembly::new(ChunkGrid::new(&[h, w], &[8, 16]).unwrap(), 1);
        let mut seen = 0;
        for (r0, r1) in [(0usize, 16usize), (16, 32), (32, 40)] {
            for (c0, c1) in [(0usize, 32usize), (32, 50)] {
                for r in r0..r1 {
                    let row = vec![1u8; c1 - c0];
                    asm.feed((r * w + c0) as u64, &row, |d| {
                        seen += d.len();
                        Ok(())
                    })
                    .unwrap();
                }
                assert!(asm.open.is_empty(), "box {r0}..{r1} x {c0}..{c1}");
            }
        }
        assert_eq!(seen, 5 * 4);
    }

    /// Chunks marked done drop their bytes, and `covers` tells the pieces still needed.
    #[test]
    fn done_chunks_drop_their_bytes() {
        let mut asm = ChunkAssembly::new(ChunkGrid::new(&[4, 8], &[2, 4]).unwrap(), 1);
        asm.mark_done(0);
        asm.mark_done(1);
        assert!(asm.covers(0, 16));
        assert!(!asm.covers(0, 17));
        let mut got = Vec::new();
        asm.feed(0, &[7u8; 32], |d| {
            got.extend(d.into_iter().map(|c| c.0));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![2, 3]);
        assert_eq!(asm.done_count(), 4);
        assert!(asm.is_done(3));
    }

    #[test]
    fn a_chunk_written_twice_or_past_the_end_is_an_internal_error() {
        let mut asm = ChunkAssembly::new(ChunkGrid::new(&[4, 4], &[2, 2]).unwrap(), 1);
        // chunk 0 (elements 0, 1, 4, 5): 1, then 4 and 5, then 0 and 1 again
        asm.feed(1, &[0u8; 1], |_| Ok(())).unwrap();
        asm.feed(4, &[0u8; 2], |_| Ok(())).unwrap();
        let e = asm.feed(0, &[0u8; 2], |_| Ok(())).unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e:?}");
        let e = asm.feed(10, &[0u8; 7], |_| Ok(())).unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e:?}");
    }

    #[test]
    fn runs_split_where_indices_jump() {
        let r = consecutive_runs(vec![(1, ()), (2, ()), (4, ()), (5, ()), (9, ())]);
        let firsts: Vec<Vec<usize>> = r.iter().map(|v| v.iter().map(|c| c.0).collect()).collect();
        assert_eq!(firsts, vec![vec![1, 2], vec![4, 5], vec![9]]);
    }
}
