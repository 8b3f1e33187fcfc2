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
//! ([`Touch::Rows`](crate::format::Touch::Rows)), so a 1000-column tile of a 100000-column image costs a thousand
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

use crate::error::{Error, Result};
#[cfg(test)]
use crate::layout::Layout;

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

mod box_plan;
mod cuts;
mod gather;
mod layout;

pub use box_plan::{BoxPlan, BoxTile, Sources};
pub use cuts::fixed_cuts;
use cuts::{aligned_cuts, even_cuts, held_chunks, within_chunks};
pub use gather::{Edges, PaddedBox, gather_box};
#[cfg(test)]
use {crate::budget::BudgetError, box_plan::runs, cuts::chunk_runs};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
