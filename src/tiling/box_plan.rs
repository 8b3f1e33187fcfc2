//! The box plan: the tiles a [`BoxRequest`] is cut into, each with the source rows and
//! column runs its padded box reads, and the planner that sizes them to the budget.

use super::{
    Boundary, BoxRequest, Cuts, Halo, OutChunks, OutMap, aligned_cuts, even_cuts, held_chunks,
    within_chunks,
};
use crate::budget::{BudgetError, fmt_bytes};
use crate::format::page_size;

/// One box tile: rows `[r0, r1)` and columns `[c0, c1)` of band `band`. With given cuts
/// and a constant boundary the box may extend past the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoxTile {
    /// Position in plan order.
    pub index: usize,
    /// Band (0 for a rank-2 image).
    pub band: usize,
    /// First row.
    pub r0: i64,
    /// One past the last row.
    pub r1: i64,
    /// First column.
    pub c0: i64,
    /// One past the last column.
    pub c1: i64,
}

impl BoxTile {
    /// Rows of the tile.
    #[must_use]
    pub fn rows(&self) -> usize {
        (self.r1 - self.r0) as usize
    }
    /// Columns of the tile.
    #[must_use]
    pub fn cols(&self) -> usize {
        (self.c1 - self.c0) as usize
    }
}

/// Where the padded box of a tile comes from: its source row ranges (one window each, in
/// order) and the column runs read from every row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    /// Source row ranges `[start, end)`, ascending, one mapped window each.
    pub rows: Vec<(usize, usize)>,
    /// Column runs `[start, end)`, ascending.
    pub cols: Vec<(usize, usize)>,
}

impl Sources {
    /// Elements per row of the tile's windows: the column runs, one after another (the
    /// whole row when the runs cover it).
    #[must_use]
    pub fn row_len(&self) -> usize {
        self.cols.iter().map(|r| r.1 - r.0).sum()
    }

    /// Position of source column `c` within a window row, if it is read.
    #[must_use]
    pub fn col_pos(&self, c: usize) -> Option<usize> {
        let mut at = 0;
        for &(a, b) in &self.cols {
            if (a..b).contains(&c) {
                return Some(at + c - a);
            }
            at += b - a;
        }
        None
    }

    /// The window index and row within it of source row `r`.
    #[must_use]
    pub fn locate(&self, r: usize) -> Option<(usize, usize)> {
        self.rows
            .iter()
            .position(|&(a, b)| (a..b).contains(&r))
            .map(|k| (k, r - self.rows[k].0))
    }
}

/// Coalesces the sources of positions `[from, to)` along an axis of `n` into ascending
/// runs; the whole axis when the span covers it.
pub(super) fn runs(from: i64, to: i64, n: usize, mode: Boundary) -> Vec<(usize, usize)> {
    if n == 0 || to <= from {
        return Vec::new();
    }
    if (to - from) as usize >= n && !matches!(mode, Boundary::Constant(_)) {
        return vec![(0, n)];
    }
    let mut idx: Vec<usize> = (from..to).filter_map(|i| mode.source(i, n)).collect();
    idx.sort_unstable();
    idx.dedup();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for i in idx {
        match out.last_mut() {
            Some(last) if last.1 == i => last.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// A plan of box tiles.
#[derive(Clone, Debug, PartialEq)]
pub struct BoxPlan {
    /// Human description.
    pub what: String,
    /// `bands × height × width`.
    pub dims: [usize; 3],
    /// Row positions of the tiles `(first, rows)`.
    pub row_cuts: Vec<(i64, usize)>,
    /// The row cuts in groups visited together: group `g` is
    /// `row_cuts[row_groups[g]..row_groups[g + 1]]`, and the tiles of a group visit the
    /// pieces of each column block one after another. A group holds one cut, except
    /// when the budget holds no box of whole output chunks: the boxes are then pieces of
    /// one chunk each, the pieces of a chunk grouped, so that each chunk completes
    /// before the next begins ([`BoxPlan::box_tile`]).
    pub row_groups: Vec<usize>,
    /// Column positions of the tiles `(first, cols)`.
    pub col_cuts: Vec<(i64, usize)>,
    #[doc(hidden)]
    /// Halo along rows.
    pub halo_rows: Halo,
    #[doc(hidden)]
    /// Halo along columns.
    pub halo_cols: Halo,
    /// Boundary mode.
    pub boundary: Boundary,
    /// Largest tile `rows × cols`.
    pub tile: (usize, usize),
    /// Number of tiles.
    pub num_tiles: usize,
    /// Bytes of input windows per slot.
    pub window_bytes: u64,
    /// Output staging elements per slot.
    pub out_slot_elems: u64,
    /// Compute scratch for the largest tile.
    pub scratch_bytes: u64,
    /// Bytes held for the whole run.
    pub resident_bytes: u64,
    /// What they are.
    pub resident_what: String,
    /// Staging slots.
    pub depth: usize,
    /// Total bytes the run reserves at most.
    pub reserved_bytes: u64,
    /// The budget.
    pub budget: u64,
    /// What runs after the tiles, within the same budget once they are done (building a
    /// Cloud-Optimized GeoTIFF's overviews): shown last.
    pub after: Option<String>,
    /// Bytes per input element.
    pub in_bytes: u64,
    /// Bytes per output staging element.
    pub out_bytes: u64,
    #[doc(hidden)]
    /// Where the output goes.
    pub out: OutMap,
    #[doc(hidden)]
    /// The chunks of an output encoded as it is written (see [`BoxRequest`]).
    pub out_chunks: Option<OutChunks>,
    /// What its encoder holds (included in `reserved_bytes`).
    pub out_chunk_bytes: u64,
}

/// Bytes of the input windows of a `th × tw` tile.
pub(super) fn window_bytes(req: &BoxRequest, th: u64, tw: u64) -> u64 {
    let [_, h, w] = req.dims;
    let page = page_size();
    let rows = (th + req.halo_rows.total() as u64).min(h as u64);
    let span = tw + req.halo_cols.total() as u64;
    // Up to three windows of whole rows: their pages, alignment at both ends included.
    let whole = rows * w as u64 * req.in_bytes + 3 * 2 * page;
    if span >= w as u64 {
        whole
    } else {
        // Column runs of each row, read into a compact buffer: exactly their bytes.
        whole.min(rows * span * req.in_bytes)
    }
}

impl BoxPlan {
    #[doc(hidden)]
    /// Plans `req`.
    ///
    /// # Errors
    /// [`BudgetError::TooSmall`] when not even a one-pixel tile (or a given patch) fits,
    /// or, with output chunks to cut along, a box one row tall and one chunk wide, with
    /// the arithmetic spelled out.
    pub fn new(req: &BoxRequest) -> std::result::Result<BoxPlan, BudgetError> {
        let [bands, h, w] = req.dims;
        let sizer = Sizer::new(req);
        let (depth, hr, hc) = (sizer.depth, sizer.hr, sizer.hc);
        let empty = bands == 0 || h == 0 || w == 0;
        let (row_cuts, col_cuts, mut row_groups) = match &req.cuts {
            Cuts::Given { rows, cols } => {
                let th = rows.iter().map(|r| r.1).max().unwrap_or(0) as u64;
                let tw = cols.iter().map(|c| c.1).max().unwrap_or(0) as u64;
                if !empty && sizer.cost(th, tw) > req.budget {
                    return Err(sizer.too_small(th, tw));
                }
                (rows.clone(), cols.clone(), Vec::new())
            }
            Cuts::Auto { .. } if empty => (Vec::new(), Vec::new(), Vec::new()),
            Cuts::Auto { prefer_rows } => sizer.auto_cuts(*prefer_rows)?,
        };
        if row_groups.is_empty() {
            row_groups = (0..=row_cuts.len()).collect();
        }
        let th = row_cuts.iter().map(|r| r.1).max().unwrap_or(0);
        let tw = col_cuts.iter().map(|c| c.1).max().unwrap_or(0);
        let num_tiles = if empty {
            0
        } else {
            bands * row_cuts.len() * col_cuts.len()
        };
        let (t64h, t64w) = (th as u64, tw as u64);
        let window = if num_tiles == 0 {
            0
        } else {
            window_bytes(req, t64h, t64w)
        };
        let out_slot_elems = if req.out == OutMap::None {
            0
        } else {
            t64h * t64w
        };
        let scratch_bytes = if num_tiles == 0 {
            0
        } else {
            req.scratch.bytes(t64h, t64w, hr, hc)
        };
        let slots = depth.min(num_tiles.max(1) as u64);
        let out_chunk_bytes = if num_tiles == 0 {
            0
        } else {
            sizer.encoder(t64h, t64w)
        };
        Ok(BoxPlan {
            what: req.what.clone(),
            dims: req.dims,
            row_cuts,
            row_groups,
            col_cuts,
            halo_rows: req.halo_rows,
            halo_cols: req.halo_cols,
            boundary: req.boundary,
            tile: (th, tw),
            num_tiles,
            window_bytes: window,
            out_slot_elems,
            scratch_bytes,
            resident_bytes: req.resident_bytes,
            resident_what: req.resident_what.clone(),
            depth: depth as usize,
            reserved_bytes: req.resident_bytes
                + scratch_bytes
                + slots * (window + out_slot_elems * req.out_bytes)
                + out_chunk_bytes,
            budget: req.budget,
            after: None,
            in_bytes: req.in_bytes,
            out_bytes: req.out_bytes,
            out: req.out,
            out_chunks: req.out_chunks.clone(),
            out_chunk_bytes,
        })
    }

    #[doc(hidden)]
    /// The tile with index `i`: band-major, then groups of row blocks
    /// ([`BoxPlan::row_groups`]), then column blocks, then the row blocks of the group
    /// (row blocks, then column blocks, when each group is one row block).
    #[must_use]
    pub fn box_tile(&self, i: usize) -> BoxTile {
        let ncols = self.col_cuts.len();
        let per_band = self.row_cuts.len() * ncols;
        let band = i / per_band;
        let rem = i % per_band;
        let g = self.row_groups.partition_point(|&s| s * ncols <= rem) - 1;
        let (first, pieces) = (
            self.row_groups[g],
            self.row_groups[g + 1] - self.row_groups[g],
        );
        let local = rem - first * ncols;
        let (r0, nr) = self.row_cuts[first + local % pieces];
        let (c0, nc) = self.col_cuts[local / pieces];
        BoxTile {
            index: i,
            band,
            r0,
            r1: r0 + nr as i64,
            c0,
            c1: c0 + nc as i64,
        }
    }

    #[doc(hidden)]
    /// The `i`-th tile with the bands of each box position one after another (position,
    /// then band) instead of band-major: its `index` is `i`.
    #[must_use]
    pub fn box_tile_bands_together(&self, i: usize) -> BoxTile {
        let bands = self.dims[0].max(1);
        let per_band = self.num_tiles / bands;
        let mut t = self.box_tile((i % bands) * per_band + i / bands);
        t.index = i;
        t
    }

    #[doc(hidden)]
    /// The source rows and column runs of tile `t`'s padded box.
    #[must_use]
    pub fn sources(&self, t: &BoxTile) -> Sources {
        let [_, h, w] = self.dims;
        Sources {
            rows: runs(
                t.r0 - self.halo_rows.before as i64,
                t.r1 + self.halo_rows.after as i64,
                h,
                self.boundary,
            ),
            cols: runs(
                t.c0 - self.halo_cols.before as i64,
                t.c1 + self.halo_cols.after as i64,
                w,
                self.boundary,
            ),
        }
    }
}

impl BoxPlan {
    /// Whether the boxes are cut along the output chunk grid the plan was asked for (the
    /// budget held at least one chunk per box), so that each box completes its chunks.
    #[must_use]
    pub fn cut_along_out_chunks(&self) -> bool {
        self.out_chunks.as_ref().is_some_and(|c| {
            let (r, cw, o) = (
                c.rows.max(1) as i64,
                c.cols.max(1) as i64,
                c.row_offset as i64,
            );
            // the row of chunks row x is in (-1: the rows before the offset)
            let run = |x: i64| if x < o { -1 } else { (x - o) / r };
            let starts_run = |x: i64| x == 0 || (x >= o && (x - o) % r == 0);
            // each group starts a row of chunks; a group of several pieces stays in it
            let groups_aligned = self.row_groups.windows(2).all(|g| {
                let cuts = &self.row_cuts[g[0]..g[1]];
                cuts.first().is_none_or(|f| starts_run(f.0))
                    && (cuts.len() == 1
                        || cuts.iter().all(|p| run(p.0) == run(p.0 + p.1 as i64 - 1)))
            });
            groups_aligned && self.col_cuts.iter().all(|p| p.0 % cw == 0)
        })
    }

    /// Whether the boxes are pieces of output chunks ([`BoxPlan::row_groups`]): a chunk
    /// completes once the pieces of its group are all written.
    #[must_use]
    pub fn boxes_within_chunks(&self) -> bool {
        self.row_groups.windows(2).any(|g| g[1] - g[0] > 1)
    }

    /// Chunks being filled across one box (what the encoder is sized for).
    #[must_use]
    pub fn open_out_chunks(&self) -> usize {
        let [bands, h, _] = self.dims;
        self.out_chunks.as_ref().map_or(0, |c| {
            let (th, tw) = (self.tile.0 as u64, self.tile.1 as u64);
            held_chunks(c, self.out, th, tw, h, bands) as usize
        })
    }

    /// Whether the run must visit the bands of each box one after another: its boxes
    /// are cut along output chunks holding several bands, which complete only once
    /// their last band is written (see [`OutChunks`]).
    #[must_use]
    pub fn bands_together(&self) -> bool {
        self.dims[0] > 1
            && self.out_chunks.as_ref().is_some_and(|c| c.planes > 1)
            && self.cut_along_out_chunks()
    }
}

/// Cuts made automatically: rows, columns, and the groups of row blocks visited together.
type AutoCuts = (Vec<(i64, usize)>, Vec<(i64, usize)>, Vec<usize>);

/// What a box of `th x tw` costs under a request, and the planner's choice of boxes.
struct Sizer<'a> {
    req: &'a BoxRequest,
    depth: u64,
    /// Halo rows and columns.
    hr: u64,
    hc: u64,
}

impl<'a> Sizer<'a> {
    fn new(req: &'a BoxRequest) -> Self {
        Sizer {
            req,
            depth: req.depth.max(1) as u64,
            hr: req.halo_rows.total() as u64,
            hc: req.halo_cols.total() as u64,
        }
    }

    /// The bytes an encoder of the output holds beside boxes of `th x tw`.
    fn encoder(&self, th: u64, tw: u64) -> u64 {
        let [bands, h, _] = self.req.dims;
        self.req.out_chunks.as_ref().map_or(0, |c| {
            held_chunks(c, self.req.out, th, tw, h, bands) * c.chunk_bytes() + c.fixed
        })
    }

    /// Everything a run with boxes of `th x tw` reserves.
    fn cost(&self, th: u64, tw: u64) -> u64 {
        let req = self.req;
        req.resident_bytes
            + req.scratch.bytes(th, tw, self.hr, self.hc)
            + self.depth * (window_bytes(req, th, tw) + th * tw * req.out_bytes)
            + self.encoder(th, tw)
    }

    /// The tile's own data (halo and page slack excluded), which the tile cap bounds.
    fn staging(&self, th: u64, tw: u64) -> u64 {
        th * tw * (self.req.in_bytes + self.req.out_bytes)
    }

    /// Whether boxes of `th x tw` fit the budget and the tile cap.
    fn ok(&self, th: u64, tw: u64) -> bool {
        self.cost(th, tw) <= self.req.budget
            && (self.staging(th, tw) <= self.req.max_tile_bytes || th * tw == 1)
    }

    /// The refusal of a budget that cannot hold boxes of `th x tw`, with its arithmetic.
    fn too_small(&self, th: u64, tw: u64) -> BudgetError {
        let (req, depth, hr, hc) = (self.req, self.depth, self.hr, self.hc);
        let mut arithmetic = format!(
            "{depth} staging slots × ({} of input window{} + {} of output) for a {th}x{tw} tile",
            fmt_bytes(window_bytes(req, th, tw)),
            if hr + hc > 0 {
                format!(" with a halo of {hr} rows and {hc} columns")
            } else {
                String::new()
            },
            fmt_bytes(th * tw * req.out_bytes)
        );
        let sc = req.scratch.bytes(th, tw, hr, hc);
        if sc > 0 {
            arithmetic.push_str(&format!(" + {} of compute scratch", fmt_bytes(sc)));
        }
        if req.resident_bytes > 0 {
            arithmetic.push_str(&format!(
                " + {} of {}",
                fmt_bytes(req.resident_bytes),
                req.resident_what
            ));
        }
        if let Some(c) = &req.out_chunks {
            arithmetic.push_str(&format!(
                " + {} of {}",
                fmt_bytes(self.encoder(th, tw)),
                c.what
            ));
        }
        BudgetError::TooSmall {
            what: req.what.clone(),
            arithmetic,
            needed: self.cost(th, tw),
            limit: req.budget,
        }
    }

    /// The boxes the planner chooses: full-width row blocks when `prefer_rows` and a
    /// block of a few rows fits, else square-ish boxes; along the output's chunks when
    /// it is encoded as written.
    fn auto_cuts(&self, prefer_rows: bool) -> std::result::Result<AutoCuts, BudgetError> {
        let req = self.req;
        let [_, h, w] = req.dims;
        let (hh, ww) = (h as u64, w as u64);
        // the smallest box: one element, or one row a chunk wide when the boxes must
        // complete the output's chunks
        let least_w = req
            .out_chunks
            .as_ref()
            .map_or(1, |c| (c.cols as u64).min(ww));
        if self.cost(1, least_w) > req.budget {
            return Err(self.too_small(1, least_w));
        }
        let full_rows = largest(hh, &|th| self.ok(th, ww));
        // with an output's chunks to cut along, at least a row of them
        let chunk_rows = req.out_chunks.as_ref().map_or(1, |c| c.rows as u64);
        let want_rows = hh.min((2 * self.hr).max(8).max(chunk_rows));
        let (th, tw) = if prefer_rows && self.ok(full_rows, ww) && full_rows >= want_rows {
            (full_rows, ww)
        } else {
            let s = largest(hh.max(ww), &|s| self.ok(s.min(hh), s.min(ww)));
            (s.min(hh), s.min(ww))
        };
        Ok(match &req.out_chunks {
            // boxes along the output's chunk grid (when at least a chunk fits)
            Some(c) if th >= (c.rows as u64).min(hh) && tw >= (c.cols as u64).min(ww) => (
                aligned_cuts(hh, th, c.rows as u64, c.row_offset as u64),
                aligned_cuts(ww, tw, c.cols as u64, 0),
                Vec::new(),
            ),
            // else boxes one chunk wide cut within each row of chunks, the pieces of a
            // chunk visited one after another (when a piece fits)
            Some(c) => {
                let (r, cw) = ((c.rows as u64).min(hh), (c.cols as u64).min(ww));
                if self.ok(1, cw) {
                    let piece = largest(r, &|t| self.ok(t, cw));
                    let (rows, groups) =
                        within_chunks(hh, c.rows as u64, c.row_offset as u64, piece);
                    (rows, aligned_cuts(ww, cw, c.cols as u64, 0), groups)
                } else if self.cost(1, cw) > req.budget {
                    // the smallest box that completes chunks: one row, a chunk wide
                    return Err(self.too_small(1, cw));
                } else {
                    // (a tile cap below a chunk's width: not cut along them)
                    (even_cuts(hh, th), even_cuts(ww, tw), Vec::new())
                }
            }
            None => (even_cuts(hh, th), even_cuts(ww, tw), Vec::new()),
        })
    }
}

/// The largest `x` in `[1, hi]` with `pred(x)`, `pred` monotone decreasing (1 when none).
fn largest(hi: u64, pred: &dyn Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (1u64, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if pred(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}
