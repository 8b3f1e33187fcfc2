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

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Engine, Ran, RunReport};
use crate::backend::Family;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::format::TensorFile;
use crate::io::own_files::{Written, check_run_paths};
use crate::scheduler::{self, Hooks, StageTimes, TileKernel};
use crate::tiling::{BoxTile, Edges};

mod call;
mod plan;

use call::{Calls, Gather, Job, Serial};
pub use plan::BlocksPlan;

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
    /// (the Python package's `tilestream.dask`). `None` for all of them.
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

impl Engine {
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
