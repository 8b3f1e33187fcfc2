//! Windows of an input ([`TensorFile::window`]): a box of a tensor (rows 1000..3000 and
//! columns 2000..4000 of every band of a scene) read as a tensor of its own, without
//! copying or decoding what lies outside it.
//!
//! A window keeps the whole file open and translates every read: a flat range of the
//! window's elements becomes the ranges of the file's elements that hold them
//! ([`View::pieces`]), read (mapped, by positioned reads of column runs, or decoded from
//! the chunks they touch) one after another into the window's layout. A compressed
//! input's chunks are decoded as for the whole file, and its cache is shared with it, so a
//! window of a COG fetches only the tiles it touches.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::format::tiff::GeoRef;
use crate::format::{TensorFile, Touch, fmt_shape};

/// Where a window lies in the tensor of its file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct View {
    /// Shape of the whole tensor in the file.
    parent: Vec<usize>,
    /// The window's first element on each axis.
    origin: Vec<u64>,
    /// The window's shape.
    shape: Vec<usize>,
    /// The file's georeferencing moved to the window's first pixel (`None` when the file
    /// has none).
    pub(crate) georef: Option<GeoRef>,
}

/// A read of the file's elements: `(start, count, touch)`, as
/// [`TensorFile::map_window_touch`] takes them.
pub(crate) type Req = (u64, u64, Touch);

impl View {
    /// The whole tensor of `shape` seen as a window of itself.
    fn whole(shape: &[usize]) -> View {
        View {
            parent: shape.to_vec(),
            origin: vec![0; shape.len()],
            shape: shape.to_vec(),
            georef: None,
        }
    }

    /// The window's first element on each axis of the file's tensor.
    pub(crate) fn origin(&self) -> &[u64] {
        &self.origin
    }

    /// The row of the file's tensor (flat index over every axis but the last) that holds
    /// row `i` of the window.
    fn parent_row(&self, mut i: u64) -> u64 {
        let n = self.shape.len();
        let mut row = 0u64;
        let mut scale = 1u64;
        for a in (0..n.saturating_sub(1)).rev() {
            let d = self.shape[a].max(1) as u64;
            row += (i % d + self.origin[a]) * scale;
            scale *= self.parent[a] as u64;
            i /= d;
        }
        row
    }

    /// Rows of the window that lie one after another in the file, in aligned blocks:
    /// the window's extent of the second-to-last axis, times those of the axes before it
    /// while the axes after them are whole.
    fn block_rows(&self) -> u64 {
        let n = self.shape.len();
        let mut block = 1u64;
        for a in (0..n.saturating_sub(1)).rev() {
            block *= self.shape[a] as u64;
            if self.shape[a] != self.parent[a] {
                break;
            }
        }
        block.max(1)
    }

    /// Pushes onto `out` the reads of the file whose windows, one after another, lay out
    /// the window's elements `[start, start + count)` as `touch` says (the layout
    /// [`TensorFile::map_window_touch`] gives).
    pub(crate) fn pieces(&self, start: u64, count: u64, touch: Touch, out: &mut Vec<Req>) {
        let n = self.shape.len();
        if count == 0 {
            return;
        }
        if n == 0 {
            out.push((start, count, touch));
            return;
        }
        let (w, wp, shift) = self.last_axis();
        match touch {
            Touch::Rows { row, runs, nruns }
                if row == w && start.is_multiple_of(w) && count.is_multiple_of(w) =>
            {
                // whole rows of the window, each its column runs: the same runs, moved
                // by the window's first column, of the file's rows
                let mut moved = runs;
                for r in &mut moved[..nruns] {
                    r.0 += shift;
                }
                let touch = Touch::Rows {
                    row: wp,
                    runs: moved,
                    nruns,
                };
                let block = self.block_rows();
                let mut i = start / w;
                let end = (start + count) / w;
                while i < end {
                    let rows = (end - i).min(block - i % block);
                    out.push((self.parent_row(i) * wp, rows * wp, touch));
                    i += rows;
                }
            }
            // the whole range, or rows that are not the window's: each run on its own
            _ => {
                for (s, len) in touch.runs(start, count) {
                    self.flat(s, len, out);
                }
            }
        }
    }

    /// The window's row length, the file's, and the window's first column.
    fn last_axis(&self) -> (u64, u64, u64) {
        let n = self.shape.len();
        (
            self.shape[n - 1] as u64,
            self.parent[n - 1] as u64,
            self.origin[n - 1],
        )
    }

    /// [`View::pieces`] of `[start, start + count)` read whole: partial rows as
    /// contiguous ranges, whole rows as column runs of the file's rows (one contiguous
    /// range when the window spans whole rows). Ranges that follow one another in the
    /// file are merged.
    fn flat(&self, start: u64, count: u64, out: &mut Vec<Req>) {
        let (w, wp, shift) = self.last_axis();
        let block = self.block_rows();
        let whole_rows = w == wp;
        let end = start + count;
        let mut e = start;
        while e < end {
            let (i, c) = (e / w, e % w);
            let piece = if c != 0 || end - e < w {
                let len = (w - c).min(end - e);
                e += len;
                (self.parent_row(i) * wp + shift + c, len, Touch::All)
            } else {
                let rows = ((end - e) / w).min(block - i % block);
                e += rows * w;
                let first = self.parent_row(i) * wp;
                if whole_rows {
                    (first, rows * w, Touch::All)
                } else {
                    let mut runs = [(0, 0); 3];
                    runs[0] = (shift, w);
                    (
                        first,
                        rows * wp,
                        Touch::Rows {
                            row: wp,
                            runs,
                            nruns: 1,
                        },
                    )
                }
            };
            match out.last_mut() {
                Some((s, n, Touch::All)) if piece.2 == Touch::All && *s + *n == piece.0 => {
                    *n += piece.1;
                }
                _ => out.push(piece),
            }
        }
    }
}

impl TensorFile {
    /// The box `ranges` of this tensor as a tensor of its own, with no copy: the same
    /// file, read only where the box lies (for a compressed file, only the chunks it
    /// touches are decoded). `ranges` gives the last `ranges.len()` axes (the rows and
    /// columns of an image, every band kept); the axes before them are kept whole. A
    /// GeoTIFF's georeferencing moves to the box's first pixel.
    ///
    /// A window of a window is a window of the file.
    ///
    /// # Errors
    /// [`Error::Invalid`] for more ranges than axes, or a range that is reversed or
    /// runs past its axis.
    pub fn window(&self, ranges: &[Range<u64>]) -> Result<Self> {
        let shape = &self.info.shape;
        let n = shape.len();
        if ranges.len() > n {
            return Err(Error::invalid(format!(
                "{}: a window of {} ranges for a tensor of {} axes (shape {})",
                self.path.display(),
                ranges.len(),
                n,
                fmt_shape(shape)
            )));
        }
        let skip = n - ranges.len();
        for (k, (r, &d)) in ranges.iter().zip(&shape[skip..]).enumerate() {
            if r.start > r.end || r.end > d as u64 {
                return Err(Error::invalid(format!(
                    "{}: window {}..{} of axis {} is out of range for its {} elements \
                     (shape {})",
                    self.path.display(),
                    r.start,
                    r.end,
                    skip + k,
                    d,
                    fmt_shape(shape)
                )));
            }
        }
        let mut view = match &self.view {
            Some(v) => (**v).clone(),
            None => View::whole(shape),
        };
        for (k, r) in ranges.iter().enumerate() {
            let a = skip + k;
            view.origin[a] += r.start;
            view.shape[a] = (r.end - r.start) as usize;
        }
        // the georeferencing of the window's first pixel (a GeoTIFF's rows and columns
        // are its last two axes)
        view.georef = self.file_georef().map(|g| {
            let at = |back: usize| n.checked_sub(back).map_or(0.0, |a| view.origin[a] as f64);
            g.shifted(at(2), at(1))
        });
        let mut info = self.info.clone();
        info.shape.clone_from(&view.shape);
        Ok(TensorFile {
            path: self.path.clone(),
            file: self.file.try_clone(&self.path)?,
            info,
            chunked: self.chunked.clone(),
            tiff: self.tiff.clone(),
            zarr: self.zarr.clone(),
            hdf5: self.hdf5.clone(),
            jp2: self.jp2.clone(),
            // the same decoding of this tensor's rows (all of them: `shape` is this
            // tensor's, not the window's; reads go through the view)
            npy: match &self.npy {
                Some(n) => Some(Box::new(n.rows(0, shape.first().map_or(0, |&d| d as u64))?)),
                None => None,
            },
            swap: self.swap,
            given_nodata: self.given_nodata.clone(),
            view: (view.shape != view.parent).then(|| Box::new(view)),
        })
    }

    /// Where this tensor lies in its file's when it is a [`window`](Self::window) of it:
    /// its first element on each axis. `None` for a whole tensor.
    #[must_use]
    pub fn window_origin(&self) -> Option<&[u64]> {
        self.view.as_deref().map(View::origin)
    }

    /// The shape of the whole tensor in the file (this tensor's shape but for a
    /// [`window`](Self::window)).
    #[must_use]
    pub fn file_shape(&self) -> &[usize] {
        match &self.view {
            Some(v) => &v.parent,
            None => &self.info.shape,
        }
    }

    /// The chunk shape of an input decoded in chunks, for tiles to align to: `None` for
    /// a mapped input, or a window whose first element is not a chunk's first on every
    /// axis (tiles of the window's own grid would straddle the file's chunks).
    #[must_use]
    pub fn aligned_chunk_shape(&self) -> Option<&[usize]> {
        let c = self.chunked.as_deref()?.chunk_shape();
        let aligned = self.view.as_deref().is_none_or(|v| {
            v.origin
                .iter()
                .zip(c)
                .all(|(&o, &d)| o.is_multiple_of(d.max(1) as u64))
        });
        aligned.then_some(c)
    }

    /// How many chunks of the last axis a window's columns touch, for the chunk cache to
    /// hold rows of (`None` for a whole tensor or a mapped one).
    pub(crate) fn window_chunks_across(&self) -> Option<u64> {
        let v = self.view.as_deref()?;
        let cw = *self.chunked.as_deref()?.chunk_shape().last()? as u64;
        let (o, w) = (*v.origin.last()?, *v.shape.last()? as u64);
        Some(if w == 0 {
            1
        } else {
            (o + w - 1) / cw.max(1) - o / cw.max(1) + 1
        })
    }

    /// The reads of the file that lay out the window's `(start, count, touch)`, one
    /// list per request; `None` when this tensor is the whole of its file.
    pub(crate) fn view_pieces(&self, reqs: &[Req]) -> Option<Vec<Vec<Req>>> {
        let v = self.view.as_deref()?;
        Some(
            reqs.iter()
                .map(|&(s, n, t)| {
                    let mut out = Vec::new();
                    v.pieces(s, n, t, &mut out);
                    out
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests;
