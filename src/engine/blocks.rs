//! A user's own function over the blocks of arrays larger than memory: the engine plans
//! blocks that fit the budget with the function's working memory counted, reads each
//! block (with its halo, made up at the edges by the boundary mode) while the function
//! runs on the one before, and writes what the function returns, exactly as it does for
//! its built-in operations. `map_blocks`, `map_overlap` and `reduce_blocks` of the
//! Python package are this, with a Python callable as the function.
//!
//! Blocks are cut along the last two axes (rows and columns); a leading axis (the bands
//! of a `(bands, rows, columns)` image) is whole in every block, so a function sees all
//! the bands of a position, and may return another number of them (a model mapping 4
//! bands to 10 class scores). A one-dimensional array is cut along its one axis. Several
//! inputs share the rows and columns and are cut alike.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::host::HostBuf;
use super::{Engine, Ran, RunReport};
use crate::backend::Family;
use crate::budget::fmt_bytes;
use crate::dtype::{DType, Element, store_f64};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape, page_size};
use crate::io::own_files::{Written, check_run_paths};
use crate::layout::{Layout, Read, Write};
use crate::scheduler::{self, Hooks, Morsel, Pending, StageTimes, TileKernel};
use crate::tiling::{
    BoxPlan, BoxRequest, BoxTile, Cuts, Edges, Halo, OutChunks, OutMap, PaddedBox, Scratch,
    fixed_cuts, gather_box,
};

/// What a function over blocks needs besides its blocks, counted in the plan: a multiple
/// of the bytes of the blocks it is given (its temporaries and its result), and a fixed
/// number of bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Working {
    /// Bytes per byte of the padded input blocks (all inputs together).
    pub per_block: f64,
    /// Bytes per byte of the output tile (a copy the caller makes of the result).
    pub per_out: f64,
    /// Bytes whatever the block.
    pub bytes: u64,
}

impl Default for Working {
    /// As much again as the blocks: a function returning an array the size of its input.
    fn default() -> Self {
        Working {
            per_block: 1.0,
            per_out: 0.0,
            bytes: 0,
        }
    }
}

/// How the blocks are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockShape {
    /// As large as the budget allows (full rows when a few rows fit).
    Auto,
    /// `rows × columns` blocks (the last ones cut at the edges): a model's input size, or
    /// a grid fixed by the data's shape alone (a reduction's).
    Fixed(usize, usize),
    /// One block of `rows × columns` at the origin only (to measure a function).
    First(usize, usize),
}

/// A run of a function over blocks: the halo read around each block, what the halo
/// holds at the edges, how blocks are cut and what the function needs.
#[derive(Clone, Debug)]
pub struct Blocks {
    /// Halo rows and columns on each side of a block.
    pub halo: (usize, usize),
    /// What the halo holds past the image's edges.
    pub edges: Edges,
    /// How blocks are cut.
    pub shape: BlockShape,
    /// The function's working memory.
    pub working: Working,
    /// The function, in plans and reports (`scipy.ndimage.gaussian_filter`).
    pub what: String,
    /// Calls of the function run at once, each on its own block (at least 1): worth more
    /// than 1 for a function that spends its time outside a lock (a Python function
    /// that releases the GIL). The plan holds a padded block and the working memory for
    /// each, so blocks are smaller; results are written in plan order whatever order the
    /// calls end in.
    pub calls: usize,
    /// Only the blocks of these rows `[first, end)` of the image, their halo read from
    /// the rows around them (the boundary only at the image's edges): a share of a job
    /// split over a cluster, each writing its rows of one output made beforehand
    /// ([`Engine::with_output_region`]). `None` for all of them.
    pub rows: Option<(usize, usize)>,
    /// Gather the padded blocks into page-locked host memory of CUDA device `n`'s driver
    /// (`Some(n)`), for a function that copies its blocks to that GPU itself
    /// (`torch.from_numpy(b).to("cuda", non_blocking=True)` is then a real asynchronous
    /// copy). The memory is the padded blocks' the plan already holds, allocated once per
    /// call when the run starts; no device memory is allocated. Refused in one line where
    /// no CUDA driver or device can be used.
    pub pinned: Option<usize>,
}

/// Where a function's results go: a new file of `shape` and `dtype`. Its last axes are
/// the inputs' rows and columns (its only axis for one-dimensional inputs); a leading
/// axis, if any, is the number of bands the function returns.
#[derive(Clone, Debug)]
pub struct BlocksOut<'a> {
    /// The output file.
    pub path: &'a Path,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type.
    pub dtype: DType,
}

/// One input's block as the function gets it: its bytes (C order, the input's element
/// type), and its shape in the input's rank: `(rows,)`, `(rows, cols)` or
/// `(bands, rows, cols)`.
#[derive(Debug)]
pub struct BlockInput<'a> {
    /// The elements.
    pub data: &'a [u8],
    /// Their type.
    pub dtype: DType,
    /// The block's shape.
    pub shape: Vec<usize>,
}

impl BlockInput<'_> {
    /// The elements as `T`.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the input's type is not `T`.
    pub fn as_slice<T: Element + bytemuck::Pod>(&self) -> Result<&[T]> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid(format!(
                "a block of {} read as {}",
                self.dtype,
                T::DTYPE
            )));
        }
        bytemuck::try_cast_slice(self.data)
            .map_err(|e| Error::Internal(format!("a block's bytes as {}: {e}", T::DTYPE)))
    }
}

/// A block handed to the function: where it is, and each input's padded block.
#[derive(Debug)]
pub struct Block<'a> {
    /// Index of the block in plan order (rows of blocks, then columns).
    pub index: usize,
    /// Number of blocks.
    pub count: usize,
    /// The rows and columns of the block the function's result is kept for, in the image:
    /// `[first row, end row)`, `[first column, end column)`.
    pub tile: ((usize, usize), (usize, usize)),
    /// Where that block lies in the padded blocks the function is given: rows and
    /// columns of halo before it (`map_overlap` trims a result of the padded block's
    /// size to the block).
    pub inner: (usize, usize),
    /// The padded blocks, one per input.
    pub inputs: Vec<BlockInput<'a>>,
    /// Set by [`Block::keep_inputs`].
    kept: std::cell::Cell<bool>,
}

impl Block<'_> {
    /// Tells the engine that something outside the function's call still points into the
    /// inputs' bytes (a view handed to another runtime that outlives the call, such as
    /// a numpy array a Python function kept): their buffers are then never freed nor
    /// reused, and the next block is gathered into new ones. What is kept is leaked, so
    /// a function calls this only when it cannot release what points there (and then
    /// usually stops the run).
    pub fn keep_inputs(&self) {
        self.kept.set(true);
    }
}

/// Where the function writes a block's result: the block's (not the padded block's)
/// elements in the output's type, C order, of `shape` (the output's rank).
#[derive(Debug)]
pub struct BlockOut<'a> {
    /// The bytes to fill.
    pub bytes: &'a mut [u8],
    /// Their type.
    pub dtype: DType,
    /// The block's shape in the output.
    pub shape: Vec<usize>,
}

/// A user's function over blocks: given a block, it writes the block's result into
/// `out` (when the run has an output). A closure
/// `Fn(&Block, Option<BlockOut>) -> Result<()> + Send + Sync` is one. It may be called on
/// several blocks at once ([`Blocks::calls`]), from the engine's threads, so what it
/// gathers across blocks sits behind a lock (or an atomic), keyed by [`Block::index`]
/// where the order matters.
pub trait BlockFn: Send + Sync {
    /// Computes one block.
    ///
    /// # Errors
    /// Whatever the function fails with: the run stops, nothing is left at the output.
    fn call(&self, block: &Block<'_>, out: Option<BlockOut<'_>>) -> Result<()>;
}

impl<F> BlockFn for F
where
    F: Fn(&Block<'_>, Option<BlockOut<'_>>) -> Result<()> + Send + Sync,
{
    fn call(&self, block: &Block<'_>, out: Option<BlockOut<'_>>) -> Result<()> {
        self(block, out)
    }
}

/// One input as the plan reads it: its bands, element type and rank.
#[derive(Clone, Copy, Debug)]
struct InputOf {
    bands: usize,
    dtype: DType,
    rank: usize,
}

/// What runs a function a pipeline step names by text (`module:function`, a
/// [`FunctionSpec`](crate::spec::FunctionSpec)): the Python package sets one on the
/// engines of its pipeline runs ([`Engine::with_functions`]), which resolves the name,
/// measures the function and calls it on each block; the command line has none, and
/// refuses such steps. The step is given as its spec's JSON, with its inputs bound to
/// files.
pub trait FunctionRunner: Send + Sync {
    /// The blocks request for the step `step` and its output's shape and dtype, the
    /// function measured on a first block unless the step declares its working memory;
    /// `e` is the engine it will run on (its budget sizes that block).
    ///
    /// # Errors
    /// A name that resolves to no function, bad parameters, or the function failing on
    /// its first block.
    fn prepare(&self, e: &Engine, step: &serde_json::Value) -> Result<(Blocks, Vec<usize>, DType)>;

    /// Runs the step over `inputs` with `e` ([`Engine::run_blocks`]), as `blocks` says,
    /// into `out`.
    ///
    /// # Errors
    /// As [`Engine::run_blocks`].
    fn run(
        &self,
        e: &Engine,
        step: &serde_json::Value,
        inputs: &[&TensorFile],
        blocks: &Blocks,
        out: &BlocksOut<'_>,
    ) -> Result<RunReport>;
}

impl Engine {
    /// Runs the functions pipeline steps name with `runner` (see [`FunctionRunner`]).
    #[must_use]
    pub fn with_functions(mut self, runner: std::sync::Arc<dyn FunctionRunner>) -> Self {
        self.functions = Some(runner);
        self
    }

    /// What runs the functions pipeline steps name, if this engine has one.
    #[must_use]
    pub fn functions(&self) -> Option<&std::sync::Arc<dyn FunctionRunner>> {
        self.functions.as_ref()
    }
}

/// The plan of a function over blocks: a box plan over the inputs' rows and columns
/// (every band of every input in each box), and what the function is given and returns.
#[derive(Clone, Debug)]
pub struct BlocksPlan {
    /// The boxes (its `dims` are `[1, rows, cols]`; its element bytes those of every
    /// band of every input together).
    pub boxes: BoxPlan,
    inputs: Vec<InputOf>,
    /// Bands of the output (1 without a leading axis), 0 without an output.
    out_bands: usize,
    out_dtype: Option<DType>,
    out_rank: usize,
    edges: Edges,
    working: Working,
    /// Calls of the function at once.
    calls: usize,
    /// Blocks gathered into page-locked memory of this CUDA device's driver.
    pinned: Option<usize>,
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
        let (out_bands, out_dtype, out_rank) = match out {
            None => (0, None, 0),
            Some(o) => {
                let bands = match (rank1, o.shape.as_slice()) {
                    (true, &[n]) if n == h => 1,
                    (false, &[oh, ow]) if (oh, ow) == (h, w) => 1,
                    (false, &[b, oh, ow]) if (oh, ow) == (h, w) => b,
                    _ => {
                        return Err(Error::invalid(format!(
                            "the output of a function over blocks of {} ends with their {}: \
                             {} was asked for",
                            fmt_shape(first.shape()),
                            if rank1 {
                                format!("length ({h},)")
                            } else {
                                format!("rows and columns ({h}, {w})")
                            },
                            fmt_shape(&o.shape)
                        )));
                    }
                };
                (bands, Some(o.dtype), o.shape.len())
            }
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
            let (decode, decode_what) = super::decode_scratch(scratch_limit, &files);
            let (mut resident, mut resident_what) = (decode, decode_what);
            if extra_window > 0 {
                super::hold(
                    &mut resident,
                    &mut resident_what,
                    depth as u64 * extra_window,
                    "page slack of each band's windows".to_string(),
                );
            }
            if req.working.bytes > 0 {
                super::hold(
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
            super::imagery::along_out_chunks(base, out_chunks.clone(), |r| BoxPlan::new(&r))
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

    /// Runs `f` over the blocks of `inputs` (arrays of rank 1 to 3 sharing their rows and
    /// columns), each block read with `req.halo` rows and columns around it, and writes
    /// what `f` puts in each block's [`BlockOut`] into `out` (none: `f` keeps what it
    /// computes, a reduction). Blocks arrive in plan order, one at a time, while the next
    /// ones are read; the budget holds the staging, the padded blocks and the working
    /// memory `req.working` declares. The result does not depend on the budget when `f`
    /// computes each block's positions from the padded block alone (its halo wide
    /// enough).
    ///
    /// # Errors
    /// As [`Engine::plan_blocks`]; what `f` returns (the run stops after that block and
    /// nothing is left at `out`); I/O errors.
    // the closure is taken by value, as rayon's `for_each` takes it: callers pass one
    // written in place
    #[allow(clippy::needless_pass_by_value)]
    pub fn run_blocks(
        &self,
        inputs: &[&TensorFile],
        req: &Blocks,
        out: Option<&BlocksOut<'_>>,
        f: impl BlockFn,
    ) -> Result<RunReport> {
        if let Some(o) = out {
            let reads: Vec<(&str, &Path)> = inputs.iter().map(|i| ("input", i.path())).collect();
            check_run_paths(
                &[Written {
                    role: "output",
                    path: o.path,
                    dir: false,
                }],
                &reads,
            )?;
        }
        let plan = self.plan_blocks(inputs, req, out)?;
        self.budget.reset_peak();
        let read_scratch: u64 = inputs.iter().map(|i| i.read_scratch_bytes()).sum();
        let _scratch = self.budget.reserve(
            "the padded blocks and the function's working memory",
            (plan.boxes.scratch_bytes + plan.boxes.resident_bytes).saturating_sub(read_scratch),
        )?;
        let times = if plan.calls == 1 {
            self.stream_blocks(
                &plan,
                inputs,
                out,
                Serial {
                    gather: Gather::new(&plan)?,
                    plan: &plan,
                    f: &f,
                },
            )?
        } else {
            let failed = AtomicBool::new(false);
            // every call's buffers first: a refusal (no page-locked memory) starts nothing
            let gathers = (0..plan.calls)
                .map(|_| Gather::new(&plan))
                .collect::<Result<Vec<_>>>()?;
            std::thread::scope(|s| {
                let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
                for (k, mut gather) in gathers.into_iter().enumerate() {
                    let (queue, plan, f, failed) = (queue.clone(), &plan, &f, &failed);
                    std::thread::Builder::new()
                        .name(format!("tilestream-call-{k}"))
                        .spawn_scoped(s, move || {
                            for (mut m, done) in queue {
                                // after a block failed, the ones behind it are not run
                                let r = if failed.load(Ordering::Acquire) {
                                    Err(Error::Internal(
                                        "a block after a failed one was not run".into(),
                                    ))
                                } else {
                                    gather.call(plan, f, &mut m)
                                };
                                if r.is_err() {
                                    failed.store(true, Ordering::Release);
                                }
                                let _ = done.send(r.map(|()| m));
                            }
                        })
                        .map_err(|e| {
                            Error::Internal(format!("cannot start a thread for the calls: {e}"))
                        })?;
                }
                drop(queue);
                self.stream_blocks(&plan, inputs, out, Calls { jobs })
            })?
        };
        let first = inputs[0];
        let (shape, dtype) =
            out.map_or((Vec::new(), first.dtype()), |o| (o.shape.clone(), o.dtype));
        Ok(self.report_tiles(
            (
                plan.num_blocks(),
                vec![plan.boxes.tile.0, plan.boxes.tile.1],
                plan.boxes.depth,
            ),
            Ran::cpu(
                Family::Blocks,
                format!("{} over blocks of {}", req.what, first.path().display()),
            ),
            first.shape(),
            &shape,
            dtype,
            times,
        ))
    }

    /// Streams the blocks of `plan` through `kernel` into `out` (or nowhere).
    fn stream_blocks<K: TileKernel<BoxTile>>(
        &self,
        plan: &BlocksPlan,
        inputs: &[&TensorFile],
        out: Option<&BlocksOut<'_>>,
        kernel: K,
    ) -> Result<StageTimes> {
        match out {
            Some(o) => {
                let journal = self.open_journal(o.path)?;
                let room = super::outputs::room_of_box(&plan.boxes).map(|mut r| {
                    // the stream counts chunks of its own bands: every stack of them is
                    // open across a box
                    let planes = plan.boxes.out_chunks.as_ref().map_or(1, |c| c.planes);
                    r.open = r
                        .open
                        .map(|n| n * plan.out_bands.div_ceil(planes.max(1)).max(1));
                    r.bands_inner = true;
                    r
                });
                self.to_file_with(
                    journal,
                    o.path,
                    &o.shape,
                    o.dtype,
                    room,
                    |output, journal| {
                        let hooks = Hooks {
                            journal,
                            ..self.hooks()
                        };
                        scheduler::run_layout(
                            plan,
                            inputs,
                            &self.budget,
                            Some(output),
                            hooks,
                            kernel,
                        )
                    },
                )
            }
            None => scheduler::run_layout(plan, inputs, &self.budget, None, self.hooks(), kernel),
        }
    }
}

/// What gathers each input's padded block of a tile and calls the function on it: one
/// per call running at once, each with its own buffers.
struct Gather {
    edges: Edges,
    /// Each input's padded block.
    bufs: Vec<HostBuf>,
    /// Each input's constant for positions past the edges, in its type.
    cvals: Vec<Vec<u8>>,
}

impl Gather {
    /// Buffers for `plan`'s blocks: on the heap, or page-locked by its device's driver at
    /// the size of the largest padded block.
    fn new(plan: &BlocksPlan) -> Result<Self> {
        let cval = match plan.boxes.boundary {
            crate::tiling::Boundary::Constant(v) => v,
            _ => 0.0,
        };
        let cvals = plan
            .inputs
            .iter()
            .map(|i| {
                let mut b = vec![0u8; i.dtype.size()];
                store_f64(&[cval], &mut b, i.dtype);
                b
            })
            .collect();
        let (th, tw) = plan.boxes.tile;
        let padded = (th + plan.boxes.halo_rows.total()) * (tw + plan.boxes.halo_cols.total());
        let bufs = plan
            .inputs
            .iter()
            .map(|i| match plan.pinned {
                None => Ok(HostBuf::Heap(Vec::new())),
                Some(n) => HostBuf::locked(n, padded * i.bands * i.dtype.size(), "the blocks"),
            })
            .collect::<Result<_>>()?;
        Ok(Gather {
            edges: plan.edges,
            bufs,
            cvals,
        })
    }

    /// Gathers the padded blocks of tile `m` and calls `f` on them, its result going to
    /// `m`'s output slot.
    fn call<F: BlockFn>(
        &mut self,
        plan: &BlocksPlan,
        f: &F,
        m: &mut Morsel<BoxTile>,
    ) -> Result<()> {
        let t = m.tile();
        let bx = PaddedBox::of(&plan.boxes, &t, self.edges);
        let per_band = plan.boxes.sources(&t).rows.len();
        let (ins, out) = m.io();
        let mut at = 0;
        for (k, input) in plan.inputs.iter().enumerate() {
            let es = input.dtype.size();
            let plane = bx.len() * es;
            let bytes = self.bufs[k].bytes_mut(input.bands * plane)?;
            for (b, dst) in bytes
                .chunks_exact_mut(plane.max(1))
                .enumerate()
                .take(input.bands)
            {
                let windows = ins
                    .get(at + b * per_band..at + (b + 1) * per_band)
                    .ok_or_else(|| {
                        Error::Internal(format!("block {}: fewer windows than its reads", t.index))
                    })?;
                gather_box(&plan.boxes, &t, bx, windows, (es, &self.cvals[k]), dst)?;
            }
            at += input.bands * per_band;
        }
        let spatial = |rows: usize, cols: usize, bands: usize, rank: usize| match rank {
            1 => vec![rows],
            2 => vec![rows, cols],
            _ => vec![bands, rows, cols],
        };
        let inputs = plan
            .inputs
            .iter()
            .zip(&self.bufs)
            .map(|(i, buf)| BlockInput {
                data: buf.bytes(i.bands * bx.len() * i.dtype.size()),
                dtype: i.dtype,
                shape: spatial(bx.rows, bx.cols, i.bands, i.rank),
            })
            .collect();
        let block = Block {
            index: t.index,
            count: plan.boxes.num_tiles,
            tile: (
                (t.r0 as usize, t.r1 as usize),
                (t.c0 as usize, t.c1 as usize),
            ),
            inner: ((t.r0 - bx.row) as usize, (t.c0 - bx.col) as usize),
            inputs,
            kept: std::cell::Cell::new(false),
        };
        let out = plan.out_dtype.map(|dtype| BlockOut {
            bytes: out,
            dtype,
            shape: spatial(t.rows(), t.cols(), plan.out_bands, plan.out_rank),
        });
        let r = f.call(&block, out);
        if block.kept.get() {
            drop(block);
            for buf in &mut self.bufs {
                // something outside still points here: the buffer is never freed
                buf.leak();
            }
        }
        r
    }
}

/// The compute stage calling the function on each block in turn, on its own thread.
struct Serial<'p, F> {
    gather: Gather,
    plan: &'p BlocksPlan,
    f: &'p F,
}

impl<F: BlockFn> TileKernel<BoxTile> for Serial<'_, F> {
    fn submit(&mut self, mut m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        self.gather.call(self.plan, self.f, &mut m)?;
        Ok(Pending::Ready(m))
    }
}

/// A block handed to a thread calling the function, and where its result goes.
type Job = (
    Morsel<BoxTile>,
    std::sync::mpsc::SyncSender<Result<Morsel<BoxTile>>>,
);

/// The compute stage handing each block to the threads calling the function; the write
/// stage waits for the blocks in plan order.
struct Calls {
    jobs: crossbeam_channel::Sender<Job>,
}

impl TileKernel<BoxTile> for Calls {
    fn submit(&mut self, m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        let (done, result) = std::sync::mpsc::sync_channel(1);
        self.jobs
            .send((m, done))
            .map_err(|_| Error::Internal("the threads calling the function stopped".into()))?;
        Ok(Pending::Later(Box::new(move || {
            result
                .recv()
                .map_err(|_| Error::Internal("a block's call ended without a result".into()))?
        })))
    }
}
