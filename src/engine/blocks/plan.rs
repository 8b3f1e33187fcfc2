//! How a function over blocks is planned: the inputs' shared rows and columns, the output
//! they make, and the box plan that fits the padded blocks and the function's working
//! memory in the budget.

use std::fmt;

use super::super::Engine;
use super::{BlockShape, Blocks, BlocksOut, Working};
use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape, page_size};
use crate::layout::{Layout, Read, Write};
use crate::tiling::{
    BoxPlan, BoxRequest, BoxTile, Cuts, Edges, Halo, OutChunks, OutMap, Scratch, fixed_cuts,
};

/// One input as the plan reads it: its bands, element type and rank.
#[derive(Clone, Copy, Debug)]
pub(super) struct InputOf {
    pub(super) bands: usize,
    pub(super) dtype: DType,
    pub(super) rank: usize,
}

/// The plan of a function over blocks: a box plan over the inputs' rows and columns
/// (every band of every input in each box), and what the function is given and returns.
#[derive(Clone, Debug)]
pub struct BlocksPlan {
    /// The boxes (its `dims` are `[1, rows, cols]`; its element bytes those of every
    /// band of every input together).
    pub boxes: BoxPlan,
    pub(super) inputs: Vec<InputOf>,
    /// Bands of the output (1 without a leading axis), 0 without an output.
    pub(super) out_bands: usize,
    pub(super) out_dtype: Option<DType>,
    pub(super) out_rank: usize,
    pub(super) edges: Edges,
    pub(super) working: Working,
    /// Calls of the function at once.
    pub(super) calls: usize,
    /// Blocks gathered into page-locked memory of this CUDA device's driver.
    pub(super) pinned: Option<usize>,
}

impl BlocksPlan {
    /// Number of blocks.
    #[must_use]
    pub fn num_blocks(&self) -> usize {
        self.boxes.num_tiles
    }

    /// The largest block, `rows × cols` (halo excluded).
    #[must_use]
    pub fn block(&self) -> (usize, usize) {
        self.boxes.tile
    }

    /// Bytes the run reserves at most.
    #[must_use]
    pub fn reserved_bytes(&self) -> u64 {
        self.boxes.reserved_bytes
    }

    /// The budget.
    #[must_use]
    pub fn budget(&self) -> u64 {
        self.boxes.budget
    }

    /// Bytes of the largest padded block, all inputs together (what the function's
    /// working memory is a multiple of).
    #[must_use]
    pub fn block_bytes(&self) -> u64 {
        let (th, tw) = self.boxes.tile;
        let (hr, hc) = (self.boxes.halo_rows.total(), self.boxes.halo_cols.total());
        ((th + hr) * (tw + hc)) as u64 * self.boxes.in_bytes
    }

    /// Calls of the function the plan runs at once.
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// The function's working memory the plan holds for the largest block (for one
    /// call).
    #[must_use]
    pub fn working_bytes(&self) -> u64 {
        let (th, tw) = self.boxes.tile;
        (self.working.per_block * self.block_bytes() as f64).ceil() as u64
            + (self.working.per_out * (th * tw) as f64 * self.boxes.out_bytes as f64).ceil() as u64
            + self.working.bytes
    }

    /// The plan as JSON (what the Python package shows).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "op": "blocks",
            "tiles": self.num_blocks(),
            "tile_shape": [self.boxes.tile.0, self.boxes.tile.1],
            "halo": [self.boxes.halo_rows.before, self.boxes.halo_cols.before],
            "depth": self.boxes.depth,
            "block_bytes": self.block_bytes(),
            "working_bytes": self.working_bytes(),
            "calls": self.calls,
            "pinned": self.pinned.map(|n| format!("cuda:{n}")),
            "reserved_bytes": self.reserved_bytes(),
            "budget_bytes": self.budget(),
        })
    }
}

impl Layout for BlocksPlan {
    type Tile = BoxTile;
    fn num_tiles(&self) -> usize {
        self.boxes.num_tiles
    }
    fn tile(&self, i: usize) -> BoxTile {
        self.boxes.box_tile(i)
    }
    fn reads(&self, t: &BoxTile, out: &mut Vec<Read>) {
        let [_, h, w] = self.boxes.dims;
        let mut one = Vec::new();
        self.boxes.reads(t, &mut one);
        for (k, input) in self.inputs.iter().enumerate() {
            for b in 0..input.bands {
                out.extend(one.iter().map(|r| Read {
                    input: k,
                    start: r.start + (b * h * w) as u64,
                    ..*r
                }));
            }
        }
    }
    fn out_elems(&self, t: &BoxTile) -> u64 {
        (self.out_bands * t.rows() * t.cols()) as u64
    }
    fn writes(&self, t: &BoxTile, out: &mut Vec<Write>) {
        let [_, h, w] = self.boxes.dims;
        let mut one = Vec::new();
        self.boxes.writes(t, &mut one);
        let plane = (t.rows() * t.cols()) as u64;
        for b in 0..self.out_bands as u64 {
            out.extend(one.iter().map(|x| Write {
                file_elem: x.file_elem + b * (h * w) as u64,
                buf_elem: x.buf_elem + b * plane,
                len: x.len,
            }));
        }
    }
    fn depth(&self) -> usize {
        self.boxes.depth
    }
    fn window_bytes(&self) -> u64 {
        // the page slack of the other windows is held with the scratch (the plan's
        // resident bytes)
        self.boxes.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        self.out_bands as u64 * self.boxes.out_slot_elems
    }
}

impl fmt::Display for BlocksPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // the box plan's lines, the last one ended here; its element is every band of
        // every input at a position, which it counts as one band
        let bands: usize = self.inputs.iter().map(|i| i.bands).sum();
        let text = self.boxes.to_string().replacen(
            "; 1 band of ",
            &format!("; {bands} band{} of ", if bands == 1 { "" } else { "s" }),
            1,
        );
        writeln!(f, "{}", text.trim_end())?;
        writeln!(
            f,
            "function:       {} of working memory for a block of {} ({:.2}x its padded blocks{})",
            fmt_bytes(self.working_bytes()),
            fmt_bytes(self.block_bytes()),
            self.working.per_block,
            if self.working.bytes > 0 {
                format!(" + {}", fmt_bytes(self.working.bytes))
            } else {
                String::new()
            }
        )?;
        if self.calls > 1 {
            writeln!(
                f,
                "calls:          {} at once, each with its padded blocks and working memory",
                self.calls
            )?;
        }
        if let Some(n) = self.pinned {
            writeln!(
                f,
                "page-locked:    the padded blocks, by cuda:{n}'s driver (no device memory)"
            )?;
        }
        Ok(())
    }
}

/// The rows and columns of an input, and its bands: `(N,)` is `N` rows of one column.
fn grid_of(f: &TensorFile) -> Result<(usize, usize, usize)> {
    match *f.shape() {
        [n] => Ok((1, n, 1)),
        [h, w] => Ok((1, h, w)),
        [b, h, w] => Ok((b, h, w)),
        _ => Err(Error::invalid(format!(
            "a function over blocks takes arrays of rank 1 to 3 (rows, (rows, columns) or \
             (bands, rows, columns)); {} has shape {}",
            f.path().display(),
            fmt_shape(f.shape())
        ))),
    }
}

/// The rows and columns every input shares, whether they are one-dimensional, and each
/// input's bands, element type and rank.
///
/// # Errors
/// [`Error::Invalid`] for inputs of rank over 3 or whose rows and columns differ.
fn shared_grid(inputs: &[&TensorFile]) -> Result<((usize, usize), bool, Vec<InputOf>)> {
    let Some(first) = inputs.first() else {
        return Err(Error::invalid(
            "a function over blocks needs at least one input",
        ));
    };
    let (_, h, w) = grid_of(first)?;
    let rank1 = first.shape().len() == 1;
    let mut ins = Vec::with_capacity(inputs.len());
    for f in inputs {
        let (bands, fh, fw) = grid_of(f)?;
        if (fh, fw) != (h, w) || (f.shape().len() == 1) != rank1 {
            return Err(Error::invalid(format!(
                "the inputs of a function over blocks share their rows and columns: {} \
                 has shape {}, {} has {}",
                first.path().display(),
                fmt_shape(first.shape()),
                f.path().display(),
                fmt_shape(f.shape())
            )));
        }
        ins.push(InputOf {
            bands,
            dtype: f.dtype(),
            rank: f.shape().len(),
        });
    }
    Ok(((h, w), rank1, ins))
}

/// The bands of the output `o` of a function over blocks of `first` (1 without a leading
/// axis).
///
/// # Errors
/// [`Error::Invalid`] when `o`'s shape does not end with the inputs' rows and columns.
fn out_bands_of(
    first: &TensorFile,
    o: &BlocksOut<'_>,
    (h, w): (usize, usize),
    rank1: bool,
) -> Result<usize> {
    match (rank1, o.shape.as_slice()) {
        (true, &[n]) if n == h => Ok(1),
        (false, &[oh, ow]) if (oh, ow) == (h, w) => Ok(1),
        (false, &[b, oh, ow]) if (oh, ow) == (h, w) => Ok(b),
        _ => Err(Error::invalid(format!(
            "the output of a function over blocks of {} ends with their {}: {} was asked for",
            fmt_shape(first.shape()),
            if rank1 {
                format!("length ({h},)")
            } else {
                format!("rows and columns ({h}, {w})")
            },
            fmt_shape(&o.shape)
        ))),
    }
}

/// The output chunk grids fixed blocks can be cut along (blocks that are multiples of
/// the chunks, or whole along an axis): all of them for blocks the planner chooses.
///
/// # Errors
/// [`Error::Invalid`] when fixed blocks fit none of them.
fn aligned_chunks(
    chunks: Vec<OutChunks>,
    shape: BlockShape,
    (h, w): (usize, usize),
) -> Result<Vec<OutChunks>> {
    let BlockShape::Fixed(r, c) = shape else {
        return Ok(chunks);
    };
    let fits = |n: usize, k: usize, of: usize| n >= of || n.is_multiple_of(k.max(1));
    let Some(first) = chunks.first() else {
        return Ok(chunks);
    };
    let (what, rows, cols) = (first.what.clone(), first.rows, first.cols);
    let kept: Vec<OutChunks> = chunks
        .into_iter()
        .filter(|k| fits(r, k.rows, h) && fits(c, k.cols, w))
        .collect();
    if kept.is_empty() {
        return Err(Error::invalid(format!(
            "blocks of {r}x{c} do not fit the chunks of the {what} ({rows}x{cols}): give              `block` a multiple of them, or write a .npy or raw output"
        )));
    }
    Ok(kept)
}

impl Engine {
    /// Plans a function over the blocks of `inputs` (see [`Engine::run_blocks`]) without
    /// running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for inputs whose rows and columns differ, of rank over 3, or an
    /// output whose shape does not end with them; [`Error::Budget`] when not even the
    /// smallest block (or the given one) fits with the function's working memory.
    pub fn plan_blocks(
        &self,
        inputs: &[&TensorFile],
        req: &Blocks,
        out: Option<&BlocksOut<'_>>,
    ) -> Result<BlocksPlan> {
        let Some(first) = inputs.first() else {
            return Err(Error::invalid(
                "a function over blocks needs at least one input",
            ));
        };
        for f in inputs {
            f.dtype().real_only("a function over blocks")?;
        }
        let ((h, w), rank1, ins) = shared_grid(inputs)?;
        let (out_bands, out_dtype, out_rank) = match out {
            None => (0, None, 0),
            Some(o) => (
                out_bands_of(first, o, (h, w), rank1)?,
                Some(o.dtype),
                o.shape.len(),
            ),
        };
        let (hr, hc) = req.halo;
        let hc = if rank1 { 0 } else { hc };
        let in_bytes: u64 = ins.iter().map(|i| (i.bands * i.dtype.size()) as u64).sum();
        let out_bytes = out.map_or(0, |o| (out_bands * o.dtype.size()) as u64);
        let calls = req.calls.max(1);
        // the gathered blocks, the function's working memory on them, and its copy of
        // the result, for each call running at once
        let scratch = Scratch {
            padded: calls as u64
                * (in_bytes + (req.working.per_block * in_bytes as f64).ceil() as u64),
            row_pass: 0,
            tile: calls as u64 * (req.working.per_out * out_bytes as f64).ceil() as u64,
        };
        // a block in the function for each call, one being read and one being written
        let depth = self.depth.max(calls + 1);
        // each band of each input is read as up to three windows of its own: the box
        // planner counts the page slack of three in all
        let windows = ins.iter().map(|i| i.bands).sum::<usize>() as u64;
        let extra_window = windows.saturating_sub(1) * 3 * 2 * page_size();
        let cuts = match req.shape {
            BlockShape::Auto => Cuts::Auto { prefer_rows: true },
            BlockShape::Fixed(r, c) => Cuts::Given {
                rows: fixed_cuts(h, r),
                cols: fixed_cuts(w, if rank1 { 1 } else { c }),
            },
            BlockShape::First(r, c) => Cuts::Given {
                rows: vec![(0, r.clamp(1, h.max(1)).min(h))],
                cols: vec![(0, c.clamp(1, w.max(1)).min(w))],
            },
        };
        let files: Vec<&TensorFile> = inputs.to_vec();
        let out_chunks = match out {
            Some(o) => self
                .box_out_chunks(o.path, &o.shape, o.dtype, false)
                .into_iter()
                .map(|mut c| {
                    // every band of a box is written in one tile: its chunks stay open
                    // across the box, all their stacks of bands
                    let stacks = out_bands.div_ceil(c.planes.max(1));
                    c.planes = c.planes.max(1) * stacks;
                    c
                })
                .collect(),
            None => Vec::new(),
        };
        let out_chunks = aligned_chunks(out_chunks, req.shape, (h, w))?;
        let attempt = |scratch_limit: u64, cuts: &Cuts| {
            let (decode, decode_what) = super::super::decode_scratch(scratch_limit, &files);
            let (mut resident, mut resident_what) = (decode, decode_what);
            if extra_window > 0 {
                super::super::hold(
                    &mut resident,
                    &mut resident_what,
                    depth as u64 * extra_window,
                    "page slack of each band's windows".to_string(),
                );
            }
            if req.working.bytes > 0 {
                super::super::hold(
                    &mut resident,
                    &mut resident_what,
                    calls as u64 * req.working.bytes,
                    "the function's fixed working memory".to_string(),
                );
            }
            let base = BoxRequest {
                what: format!(
                    "{} over blocks of {} {}{}",
                    req.what,
                    fmt_shape(first.shape()),
                    first.dtype(),
                    match inputs.len() {
                        1 => String::new(),
                        n => format!(" and {} more input{}", n - 1, if n == 2 { "" } else { "s" }),
                    }
                ),
                dims: [1, h, if rank1 { 1 } else { w }],
                in_bytes,
                out_bytes,
                halo_rows: Halo::symmetric(hr),
                halo_cols: Halo::symmetric(hc),
                boundary: req.edges.reading(),
                scratch,
                resident_bytes: resident,
                resident_what,
                depth,
                budget: self.budget.limit(),
                max_tile_bytes: self.max_tile_bytes,
                cuts: cuts.clone(),
                out: if out.is_some() {
                    OutMap::Same
                } else {
                    OutMap::None
                },
                out_chunks: None,
            };
            super::super::imagery::along_out_chunks(base, out_chunks.clone(), |r| BoxPlan::new(&r))
        };
        let mut boxes =
            self.scratch_giving_way(&files, !out_chunks.is_empty(), |s| attempt(s, &cuts))?;
        if let Some((a, b)) = req.rows {
            if a >= b || b > h {
                return Err(Error::invalid(format!(
                    "rows {a}..{b} of an image of {h} rows hold no block"
                )));
            }
            // the whole image's blocks, those of the share only, cut evenly by its rows
            let th = boxes.tile.0.max(1);
            let pieces = (b - a).div_ceil(th);
            let step = (b - a).div_ceil(pieces);
            let share = Cuts::Given {
                rows: fixed_cuts(b - a, step)
                    .into_iter()
                    .map(|(r, n)| (r + a as i64, n))
                    .collect(),
                cols: boxes.col_cuts.clone(),
            };
            boxes =
                self.scratch_giving_way(&files, !out_chunks.is_empty(), |s| attempt(s, &share))?;
        }
        Ok(BlocksPlan {
            boxes,
            inputs: ins,
            out_bands,
            out_dtype,
            out_rank,
            edges: req.edges,
            working: req.working,
            calls,
            pinned: req.pinned,
        })
    }
}
