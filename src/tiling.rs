//! Box tiles with halos, for operations that need a neighbourhood (filters) or a 2-D
//! block (transpose, patches) rather than a contiguous run of elements.
//!
//! The tiled space is `bands × height × width` (the last two axes of a rank-2 or rank-3
//! array). A tile is a box `rows × cols` of one band; reading it takes the box grown by a
//! halo on each side. Halo positions outside the image are resolved by a [`Boundary`]
//! mode exactly as `scipy.ndimage` does, so a filtered tile equals the same region of
//! the image filtered whole: no seams.
//!
//! What a tile maps is the set of *source rows* its padded box needs, coalesced into at
//! most three contiguous row ranges (three for `wrap` and `reflect` at the image edges,
//! where halo rows come from the far side or are mirrored), each one window. When the box
//! is narrower than the image, only the needed column runs of each row are prefaulted
//! ([`Touch::Rows`]), so a 1000-column tile of a 100000-column image costs a thousand
//! columns of memory, not a hundred thousand.
//!
//! Budget arithmetic for a tile of `th × tw` with halos `hr` (rows) and `hc` (columns):
//!
//! ```text
//! window  = min(H, th + hr) × (tw + hc) × in_bytes  (+ page slack per window or run)
//! reserved = resident + scratch(th, tw) + depth × (window + th × tw × out_bytes)
//! ```
//!
//! Full-width row blocks are preferred (each window is one contiguous range and each
//! output block one write) when a block of at least a few rows fits; otherwise the
//! planner takes square-ish tiles, splitting both axes with halos on both.

use std::fmt;
use std::str::FromStr;

use crate::budget::{BudgetError, fmt_bytes};
use crate::error::{Error, Result};
use crate::format::Touch;
use crate::format::{fmt_shape, page_size};
use crate::layout::{Layout, Read, Write};

/// How a filter sees positions outside the image (`scipy.ndimage` modes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Boundary {
    /// `d c b a | a b c d | d c b a`: mirrored about the edge, the edge value repeated.
    Reflect,
    /// `a a a a | a b c d | d d d d`: the edge value repeated.
    Nearest,
    /// `a b c d | a b c d | a b c d`: periodic.
    Wrap,
    /// `v v v v | a b c d | v v v v`: a constant.
    Constant(f64),
}

impl Boundary {
    /// The source index of position `i` along an axis of `n` elements, or `None` for a
    /// position that takes the constant.
    #[must_use]
    pub fn source(self, i: i64, n: usize) -> Option<usize> {
        let n = n as i64;
        if (0..n).contains(&i) {
            return Some(i as usize);
        }
        match self {
            Boundary::Constant(_) => None,
            Boundary::Nearest => Some(i.clamp(0, n - 1) as usize),
            Boundary::Wrap => Some(i.rem_euclid(n) as usize),
            Boundary::Reflect => {
                let p = i.rem_euclid(2 * n);
                Some(if p < n { p } else { 2 * n - 1 - p } as usize)
            }
        }
    }
}

impl FromStr for Boundary {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let mode = match (name, arg) {
            ("reflect", None) => Boundary::Reflect,
            ("nearest", None) => Boundary::Nearest,
            ("wrap", None) => Boundary::Wrap,
            ("constant", None) => Boundary::Constant(0.0),
            ("constant", Some(v)) => Boundary::Constant(v.trim().parse().map_err(|_| {
                Error::Invalid(format!(
                    "boundary `{s}`: `{v}` is not a number (write e.g. constant:0 or constant:nan)"
                ))
            })?),
            _ => {
                return Err(Error::Invalid(format!(
                    "unknown boundary `{s}`: use reflect, nearest, wrap or constant:VALUE"
                )));
            }
        };
        Ok(mode)
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Boundary::Reflect => write!(f, "reflect"),
            Boundary::Nearest => write!(f, "nearest"),
            Boundary::Wrap => write!(f, "wrap"),
            Boundary::Constant(v) => write!(f, "constant:{v}"),
        }
    }
}

/// Halo widths along one axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Halo {
    /// Positions needed before the tile.
    pub before: usize,
    /// Positions needed after the tile.
    pub after: usize,
}

impl Halo {
    /// The same width on both sides.
    #[must_use]
    pub fn symmetric(r: usize) -> Self {
        Halo {
            before: r,
            after: r,
        }
    }
    /// Both sides together.
    #[must_use]
    pub fn total(self) -> usize {
        self.before + self.after
    }
}

/// Where a box tile's output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutMap {
    /// Same position in an output of the input's shape (filters).
    Same,
    /// Transposed position in an output of shape `bands × width × height`; the staging
    /// buffer holds the tile transposed (`cols × rows`).
    Transposed,
    /// No streamed output (the compute step writes files of its own).
    None,
}

/// Scratch the compute step holds for one tile, in bytes per element of each stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scratch {
    /// Per element of the padded box `(th + hr) × (tw + hc)`.
    pub padded: u64,
    /// Per element of a row pass `th × (tw + hc)`.
    pub row_pass: u64,
    /// Per element of the tile `th × tw`.
    pub tile: u64,
}

impl Scratch {
    fn bytes(self, th: u64, tw: u64, hr: u64, hc: u64) -> u64 {
        self.padded * (th + hr) * (tw + hc) + self.row_pass * th * (tw + hc) + self.tile * th * tw
    }
}

/// How the planner may cut the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cuts {
    /// Choose tiles from the budget; `prefer_rows` takes full-width row blocks when a
    /// block of a few rows fits (filters), otherwise square-ish blocks (transpose).
    Auto {
        /// Prefer full-width row blocks.
        prefer_rows: bool,
    },
    /// Given tile positions: `(first, extent)` along rows and along columns (patches). A
    /// position may extend past the image with a constant boundary.
    Given {
        /// Row positions `(first row, rows)`.
        rows: Vec<(i64, usize)>,
        /// Column positions `(first column, columns)`.
        cols: Vec<(i64, usize)>,
    },
}

/// The chunks of an output encoded as the run writes it (GeoTIFF tiles, Zarr chunks),
/// in the input box's coordinates: a box plan then cuts its boxes along their grid, so
/// that each box completes the chunks it covers and the encoder holds only the chunks of
/// one row of chunks of one box (`format::chunk_assembly`). Chunks holding
/// several bands (`planes` > 1: a pixel-interleaved GeoTIFF's tiles, Zarr chunks deeper
/// than one band) complete only once their last band is written: the run then visits
/// the bands of each box one after another ([`BoxPlan::bands_together`]) and the encoder
/// holds every chunk of one box, `planes` deep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutChunks {
    /// Box rows are cut at multiples of this (an output chunk's height; its width for a
    /// transposed output).
    pub rows: usize,
    /// Box columns are cut at multiples of this.
    pub cols: usize,
    /// Box rows are cut at this plus multiples of `rows`, the rows before it a shorter
    /// row of chunks of their own: 0 but for the rows of a shared store written by a run
    /// whose first rows are not written ([`crate::format::OutRegion::skip_rows`]), whose
    /// chunks start past them. Less than `rows`.
    pub row_offset: usize,
    /// Bytes per output element.
    pub elem_bytes: u64,
    /// Bands a chunk holds (1: one band each).
    pub planes: usize,
    /// Bytes the encoder holds besides the chunks being filled (chunks in flight).
    pub fixed: u64,
    /// What the output is, for the plan printout.
    pub what: String,
}

impl OutChunks {
    /// Chunks being filled across one box of `th x tw` input elements: one output row of
    /// chunks of the box, or all of its chunks when they hold several bands.
    #[must_use]
    pub fn open(&self, out: OutMap, th: u64, tw: u64) -> u64 {
        let (r, c) = (self.rows.max(1) as u64, self.cols.max(1) as u64);
        // rows of chunks a box of `th` rows spans: cut along them, one starting at row 0
        // spans the shorter first run too when the grid is offset
        let o = self.row_offset as u64;
        let spanned = if o == 0 {
            th.div_ceil(r)
        } else {
            1 + th.saturating_sub(o).div_ceil(r)
        };
        match out {
            _ if self.planes > 1 => spanned * tw.div_ceil(c),
            OutMap::Transposed => spanned,
            _ => tw.div_ceil(c),
        }
    }

    /// Bytes of one chunk.
    #[must_use]
    pub fn chunk_bytes(&self) -> u64 {
        self.rows as u64 * self.cols as u64 * self.planes.max(1) as u64 * self.elem_bytes
    }

    /// Bytes the encoder holds for a box of `th x tw`: the chunks being filled and those
    /// in flight.
    #[must_use]
    pub fn bytes(&self, out: OutMap, th: u64, tw: u64) -> u64 {
        self.open(out, th, tw) * self.chunk_bytes() + self.fixed
    }
}

/// What a box plan is asked to plan.
#[derive(Clone, Debug)]
pub struct BoxRequest {
    /// Human description, for the plan printout and errors.
    pub what: String,
    /// `bands × height × width` (bands is 1 for a rank-2 image).
    pub dims: [usize; 3],
    /// Bytes per input element.
    pub in_bytes: u64,
    /// Bytes per output staging element (0 without streamed output).
    pub out_bytes: u64,
    /// Halo along rows.
    pub halo_rows: Halo,
    /// Halo along columns.
    pub halo_cols: Halo,
    /// Boundary mode for halo positions outside the image.
    pub boundary: Boundary,
    /// Compute scratch.
    pub scratch: Scratch,
    /// Bytes held for the whole run.
    pub resident_bytes: u64,
    /// What they are.
    pub resident_what: String,
    /// Staging slots.
    pub depth: usize,
    /// The budget.
    pub budget: u64,
    /// Cap on one tile's staging bytes (input box + output).
    pub max_tile_bytes: u64,
    /// How to cut.
    pub cuts: Cuts,
    /// Where the output goes.
    pub out: OutMap,
    /// The chunks of an output encoded as it is written, if it is: boxes are cut along
    /// their grid and the encoder's bytes count in the plan.
    pub out_chunks: Option<OutChunks>,
}

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
fn runs(from: i64, to: i64, n: usize, mode: Boundary) -> Vec<(usize, usize)> {
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
    /// Halo along rows.
    pub halo_rows: Halo,
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
    /// Where the output goes.
    pub out: OutMap,
    /// The chunks of an output encoded as it is written (see [`BoxRequest`]).
    pub out_chunks: Option<OutChunks>,
    /// What its encoder holds (included in `reserved_bytes`).
    pub out_chunk_bytes: u64,
}

/// Bytes of the input windows of a `th × tw` tile.
fn window_bytes(req: &BoxRequest, th: u64, tw: u64) -> u64 {
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
    /// Plans `req`.
    ///
    /// # Errors
    /// [`BudgetError::TooSmall`] when not even a one-pixel tile (or a given patch) fits,
    /// or, with output chunks to cut along, a box one row tall and one chunk wide, with
    /// the arithmetic spelled out.
    pub fn new(req: &BoxRequest) -> std::result::Result<BoxPlan, BudgetError> {
        let [bands, h, w] = req.dims;
        let depth = req.depth.max(1) as u64;
        let (hr, hc) = (req.halo_rows.total() as u64, req.halo_cols.total() as u64);
        let encoder = |th: u64, tw: u64| {
            req.out_chunks.as_ref().map_or(0, |c| {
                held_chunks(c, req.out, th, tw, h, bands) * c.chunk_bytes() + c.fixed
            })
        };
        let cost = |th: u64, tw: u64| {
            req.resident_bytes
                + req.scratch.bytes(th, tw, hr, hc)
                + depth * (window_bytes(req, th, tw) + th * tw * req.out_bytes)
                + encoder(th, tw)
        };
        // the cap is on the tile's own data (halo and page slack excluded)
        let staging = |th: u64, tw: u64| th * tw * (req.in_bytes + req.out_bytes);
        let too_small = |th: u64, tw: u64| {
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
                arithmetic.push_str(&format!(" + {} of {}", fmt_bytes(encoder(th, tw)), c.what));
            }
            BudgetError::TooSmall {
                what: req.what.clone(),
                arithmetic,
                needed: cost(th, tw),
                limit: req.budget,
            }
        };
        let empty = bands == 0 || h == 0 || w == 0;
        let mut row_groups = Vec::new();
        let (row_cuts, col_cuts) = match &req.cuts {
            Cuts::Given { rows, cols } => {
                let th = rows.iter().map(|r| r.1).max().unwrap_or(0) as u64;
                let tw = cols.iter().map(|c| c.1).max().unwrap_or(0) as u64;
                if !empty && cost(th, tw) > req.budget {
                    return Err(too_small(th, tw));
                }
                (rows.clone(), cols.clone())
            }
            Cuts::Auto { .. } if empty => (Vec::new(), Vec::new()),
            Cuts::Auto { prefer_rows } => {
                let (hh, ww) = (h as u64, w as u64);
                // the smallest box: one element, or one row a chunk wide when the boxes
                // must complete the output's chunks
                let least_w = req
                    .out_chunks
                    .as_ref()
                    .map_or(1, |c| (c.cols as u64).min(ww));
                if cost(1, least_w) > req.budget {
                    return Err(too_small(1, least_w));
                }
                let ok = |th: u64, tw: u64| {
                    cost(th, tw) <= req.budget
                        && (staging(th, tw) <= req.max_tile_bytes || th * tw == 1)
                };
                // largest x in [1, hi] with pred(x), pred monotone decreasing
                let largest = |hi: u64, pred: &dyn Fn(u64) -> bool| {
                    let (mut lo, mut hi) = (1u64, hi);
                    while lo < hi {
                        let mid = lo + (hi - lo).div_ceil(2);
                        if pred(mid) { lo = mid } else { hi = mid - 1 }
                    }
                    lo
                };
                let full_rows = largest(hh, &|th| ok(th, ww));
                // with an output's chunks to cut along, at least a row of them
                let chunk_rows = req.out_chunks.as_ref().map_or(1, |c| c.rows as u64);
                let want_rows = hh.min((2 * hr).max(8).max(chunk_rows));
                let (th, tw) = if *prefer_rows && ok(full_rows, ww) && full_rows >= want_rows {
                    (full_rows, ww)
                } else {
                    let s = largest(hh.max(ww), &|s| ok(s.min(hh), s.min(ww)));
                    (s.min(hh), s.min(ww))
                };
                match &req.out_chunks {
                    // boxes along the output's chunk grid (when at least a chunk fits)
                    Some(c) if th >= (c.rows as u64).min(hh) && tw >= (c.cols as u64).min(ww) => (
                        aligned_cuts(hh, th, c.rows as u64, c.row_offset as u64),
                        aligned_cuts(ww, tw, c.cols as u64, 0),
                    ),
                    // else boxes one chunk wide cut within each row of chunks, the pieces
                    // of a chunk visited one after another (when a piece fits)
                    Some(c) => {
                        let (r, cw) = ((c.rows as u64).min(hh), (c.cols as u64).min(ww));
                        if ok(1, cw) {
                            let piece = largest(r, &|t| ok(t, cw));
                            let (rows, groups) =
                                within_chunks(hh, c.rows as u64, c.row_offset as u64, piece);
                            row_groups = groups;
                            (rows, aligned_cuts(ww, cw, c.cols as u64, 0))
                        } else if cost(1, cw) > req.budget {
                            // the smallest box that completes chunks: one row, a chunk wide
                            return Err(too_small(1, cw));
                        } else {
                            // (a tile cap below a chunk's width: not cut along them)
                            (even_cuts(hh, th), even_cuts(ww, tw))
                        }
                    }
                    None => (even_cuts(hh, th), even_cuts(ww, tw)),
                }
            }
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
            encoder(t64h, t64w)
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

/// The runs of `n` rows between chunk boundaries at `o` plus multiples of `a` (the first
/// `o` rows a shorter run of their own), `(first, len)` each.
fn chunk_runs(n: u64, a: u64, o: u64) -> Vec<(u64, u64)> {
    let a = a.max(1);
    let mut runs = Vec::new();
    let mut at = 0;
    while at < n {
        let end = if at < o { o.min(n) } else { (at + a).min(n) };
        runs.push((at, end - at));
        at = end;
    }
    runs
}

/// Cuts `n` into pieces of at most `k` along a grid of `a` offset by `o`
/// ([`chunk_runs`]): as many whole runs of the grid as `k` holds in each piece (one
/// piece when `k` covers `n`); evened pieces ([`even_cuts`]) when `k` is below `a`.
fn aligned_cuts(n: u64, k: u64, a: u64, o: u64) -> Vec<(i64, usize)> {
    if k >= n {
        return even_cuts(n, n);
    }
    if a == 0 || k < a {
        return even_cuts(n, k);
    }
    let mut cuts: Vec<(i64, usize)> = Vec::new();
    for (first, len) in chunk_runs(n, a, o) {
        match cuts.last_mut() {
            Some(last) if last.1 as u64 + len <= k => last.1 += len as usize,
            _ => cuts.push((first as i64, len as usize)),
        }
    }
    cuts
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

/// Chunks `c` the encoder holds for boxes of `th x tw` over an image of `h` rows and
/// `bands` bands: [`OutChunks::open`]; when the boxes are pieces of chunks several bands
/// deep, as many times that as the bands take chunks (the bands of each piece are visited
/// together, so every chunk of the piece's position stays open until its last piece).
fn held_chunks(c: &OutChunks, out: OutMap, th: u64, tw: u64, h: usize, bands: usize) -> u64 {
    let open = c.open(out, th, tw);
    if c.planes > 1 && th < (c.rows as u64).min(h as u64) {
        open * bands.div_ceil(c.planes) as u64
    } else {
        open
    }
}

/// Cuts `n` rows into pieces of at most `k` within each run of the grid of `a` offset
/// by `o` ([`chunk_runs`]; each run's pieces evened out), and the index of each run's
/// first piece (then the number of pieces): [`BoxPlan::row_groups`].
fn within_chunks(n: u64, a: u64, o: u64, k: u64) -> (Vec<(i64, usize)>, Vec<usize>) {
    let mut cuts = Vec::new();
    let mut groups = Vec::new();
    for (start, len) in chunk_runs(n, a, o) {
        groups.push(cuts.len());
        cuts.extend(
            even_cuts(len, k)
                .into_iter()
                .map(|(r, m)| (r + start as i64, m)),
        );
    }
    groups.push(cuts.len());
    (cuts, groups)
}

/// Cuts `n` into pieces of at most `k`, evened out so they differ by at most one.
fn even_cuts(n: u64, k: u64) -> Vec<(i64, usize)> {
    let pieces = n.div_ceil(k.max(1));
    let k = n.div_ceil(pieces.max(1));
    (0..pieces)
        .map(|p| {
            let a = p * k;
            (a as i64, (k.min(n - a)) as usize)
        })
        .collect()
}

impl Layout for BoxPlan {
    type Tile = BoxTile;
    fn num_tiles(&self) -> usize {
        self.num_tiles
    }
    fn tile(&self, i: usize) -> BoxTile {
        self.box_tile(i)
    }
    fn reads(&self, t: &BoxTile, out: &mut Vec<Read>) {
        let [_, h, w] = self.dims;
        let src = self.sources(t);
        let full = src.cols.len() == 1 && src.cols[0] == (0, w);
        let mut touch = Touch::Rows {
            row: w as u64,
            runs: [(0, 0); 3],
            nruns: 0,
        };
        if let Touch::Rows { runs, nruns, .. } = &mut touch {
            for (k, &(a, b)) in src.cols.iter().take(3).enumerate() {
                runs[k] = (a as u64, (b - a) as u64);
                *nruns = k + 1;
            }
        }
        if full {
            touch = Touch::All;
        }
        for &(a, b) in &src.rows {
            out.push(Read {
                input: 0,
                start: ((t.band * h + a) * w) as u64,
                len: ((b - a) * w) as u64,
                touch,
            });
        }
    }
    fn out_elems(&self, t: &BoxTile) -> u64 {
        if self.out == OutMap::None {
            0
        } else {
            (t.rows() * t.cols()) as u64
        }
    }
    fn writes(&self, t: &BoxTile, out: &mut Vec<Write>) {
        let [_, h, w] = self.dims;
        let (th, tw) = (t.rows() as u64, t.cols() as u64);
        let (r0, c0) = (t.r0 as u64, t.c0 as u64);
        let band = t.band as u64;
        let (h, w) = (h as u64, w as u64);
        match self.out {
            OutMap::None => {}
            OutMap::Same if tw == w => out.push(Write {
                file_elem: (band * h + r0) * w,
                buf_elem: 0,
                len: th * w,
            }),
            OutMap::Same => out.extend((0..th).map(|i| Write {
                file_elem: (band * h + r0 + i) * w + c0,
                buf_elem: i * tw,
                len: tw,
            })),
            OutMap::Transposed if th == h => out.push(Write {
                file_elem: (band * w + c0) * h,
                buf_elem: 0,
                len: tw * h,
            }),
            OutMap::Transposed => out.extend((0..tw).map(|j| Write {
                file_elem: (band * w + c0 + j) * h + r0,
                buf_elem: j * th,
                len: th,
            })),
        }
    }
    fn depth(&self) -> usize {
        self.depth
    }
    fn window_bytes(&self) -> u64 {
        self.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        self.out_slot_elems
    }
}

impl fmt::Display for BoxPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "plan:           {}", self.what)?;
        if self.num_tiles == 0 {
            return writeln!(f, "tiles:          none (the image is empty)");
        }
        let [bands, h, w] = self.dims;
        let how = if self.tile.1 == w {
            "full-width row blocks"
        } else {
            "2-D blocks"
        };
        writeln!(
            f,
            "tiles:          {} of at most {}x{} ({how}; {} band{} of {})",
            self.num_tiles,
            self.tile.0,
            self.tile.1,
            bands,
            if bands == 1 { "" } else { "s" },
            fmt_shape(&[h, w])
        )?;
        writeln!(
            f,
            "halo:           {} rows, {} columns ({} boundary)",
            self.halo_rows.total(),
            self.halo_cols.total(),
            self.boundary
        )?;
        writeln!(
            f,
            "per stage:      read windows {} | compute scratch {} | write buffer {}",
            fmt_bytes(self.window_bytes),
            fmt_bytes(self.scratch_bytes),
            fmt_bytes(self.out_slot_elems * self.out_bytes)
        )?;
        if let Some(c) = &self.out_chunks {
            writeln!(
                f,
                "output:         {}: {} ({} chunk{} of {}x{} being filled across a box{})",
                c.what,
                fmt_bytes(self.out_chunk_bytes),
                self.open_out_chunks(),
                if self.open_out_chunks() == 1 { "" } else { "s" },
                c.rows,
                c.cols,
                match (self.cut_along_out_chunks(), self.boxes_within_chunks()) {
                    (true, true) => ", boxes cut within them, a chunk's boxes one after another",
                    (true, false) => ", boxes cut along them",
                    _ => "",
                }
            )?;
        }
        crate::plan::write_budget_lines(
            f,
            self.depth,
            (self.resident_bytes, &self.resident_what),
            self.reserved_bytes,
            self.budget,
        )?;
        crate::plan::write_after(f, self.after.as_deref())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
