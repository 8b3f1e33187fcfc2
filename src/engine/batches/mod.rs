//! Batches of rows for a training loop: the rows of one or more arrays that share their
//! leading axis (features and labels), handed out batch by batch from a fixed ring of
//! buffers drawn from the budget, read ahead on the engine's threads while the loop
//! trains on the batches before.
//!
//! **The ring.** A batch lives in one of `ring` buffers (page-locked when asked, for a
//! loop that copies it to a GPU). The caller holds a [`Batch`]; the buffer goes back to
//! the ring only when the batch (and everything made over its memory) is dropped, so a
//! buffer is never refilled while something still points into it. A caller holding
//! every buffer at once is told so by [`BatchStream::next`] instead of waiting forever.
//!
//! **Shuffling without reading at random.** With [`Shuffle`] the rows are cut into
//! blocks of `block_rows` consecutive rows; each epoch takes the blocks in a random
//! order, groups them `window_blocks` at a time into windows, and shuffles the rows
//! within each window. Every read is a whole block, contiguous on disk; each batch draws
//! its rows from `window_blocks` blocks spread over the whole array. The order is a
//! function of `(seed, epoch)` and the two sizes alone ([`Shuffle::epoch`]): never of
//! the budget, the threads or the time reads take.
//!
//! **Patches.** With [`BatchRequest::patches`] the items are `size × size` patches of
//! the inputs' images (their last two axes, every band of a patch together), cut as
//! `tilestream tiles` cuts them and listed row by row over the patch grid; aligned inputs
//! (an image and its label mask) give the patch at the same place. A patch stream reads
//! strips of the image (a row of the patch grid, `size` rows high) and cuts the patches
//! out of them; shuffled, a block is a number of such strips.
//!
//! **Workers.** `part = (k, n)` gives worker `k` of `n` (a `PyTorch` `DataLoader`'s) the
//! windows `k, k + n, ...` of each epoch (batches `k, k + n, ...` without shuffling):
//! the workers together deliver every row once per epoch, each reading only its share.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex};

use super::Engine;
use super::host::HostBuf;
use super::imagery::image_dims;
use super::patches::{PatchSpec, patch_starts};
use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};

mod shuffle;
mod stream;

pub use shuffle::{Shuffle, ShuffleWindow};
pub use stream::{Batch, BatchPart, BatchStream, Next};
use stream::{Ring, SlotBufs, produce};

/// What a stream of batches is asked for.
#[derive(Clone, Debug)]
pub struct BatchRequest {
    /// Rows of a batch.
    pub batch: u64,
    /// How rows are shuffled; `None` for their order in the file.
    pub shuffle: Option<Shuffle>,
    /// Whether an epoch's last batch is left out when it is short.
    pub drop_last: bool,
    /// Passes over the rows.
    pub epochs: u64,
    /// The first epoch's number (the shuffle of epoch `e` is the same in any run).
    pub first_epoch: u64,
    /// Buffers in the ring (at least 2: one held by the loop, one being filled).
    pub ring: usize,
    /// Page-locked buffers, by CUDA device `n`'s driver.
    pub pinned: Option<usize>,
    /// This worker's share: worker `k` of `n` (see the module's notes).
    pub part: (usize, usize),
    /// Patches of the inputs' images instead of rows (see the module's notes): a batch
    /// holds `batch` patches, and a shuffle's `block_rows` counts rows of the patch grid.
    pub patches: Option<PatchSpec>,
}

impl BatchRequest {
    /// Batches `rows` rows make: the short last one left out with `drop_last`.
    fn batches_in(&self, rows: u64) -> u64 {
        if self.drop_last {
            rows / self.batch
        } else {
            rows.div_ceil(self.batch)
        }
    }
}

impl Default for BatchRequest {
    fn default() -> Self {
        BatchRequest {
            batch: 1,
            shuffle: None,
            drop_last: false,
            epochs: 1,
            first_epoch: 0,
            ring: 4,
            pinned: None,
            part: (0, 1),
            patches: None,
        }
    }
}

/// One input as the stream reads it.
#[derive(Clone, Debug)]
struct Input {
    dtype: DType,
    /// Elements of an item (a row, or a patch of every band).
    row_elems: u64,
    /// An item's shape (the array's shape after its leading axis, or a patch's).
    row_shape: Vec<usize>,
    /// Bands of its image (patches only; 1 for a rank-2 image).
    bands: usize,
}

impl Input {
    fn row_bytes(&self) -> u64 {
        self.row_elems * self.dtype.size() as u64
    }
}

/// The patch grid of a patch stream: where patches start, as `tiles` cuts them.
#[derive(Clone, Debug)]
struct Grid {
    spec: PatchSpec,
    /// The images' rows and columns (every input's the same).
    rows: usize,
    cols: usize,
    /// Rows and columns where the patches of the grid start.
    row_starts: Vec<usize>,
    col_starts: Vec<usize>,
}

impl Grid {
    /// Patches in a row of the grid.
    fn per_row(&self) -> u64 {
        self.col_starts.len() as u64
    }

    /// The image rows `[r0, r1)` that grid rows `[s0, s1)` cover.
    fn span(&self, s0: usize, s1: usize) -> (usize, usize) {
        let r0 = self.row_starts[s0];
        (
            r0,
            (self.row_starts[s1 - 1] + self.spec.size).min(self.rows),
        )
    }

    /// At most the image rows `strips` consecutive grid rows cover (a start moved back to
    /// the edge is never further than the stride from the one before).
    fn max_span(&self, strips: u64) -> u64 {
        let stride = (self.spec.size - self.spec.overlap) as u64;
        (strips.saturating_sub(1) * stride + self.spec.size as u64).min(self.rows as u64)
    }
}

/// The plan of a stream of batches: what it holds and that it fits the budget.
#[derive(Clone, Debug)]
pub struct BatchPlan {
    /// Items of a pass: rows of the inputs, or patches.
    pub rows: u64,
    /// Items of a batch.
    pub batch: u64,
    /// Bytes of one batch, all inputs together.
    pub batch_bytes: u64,
    /// Buffers in the ring.
    pub ring: usize,
    /// Bytes of a window (0 without shuffling).
    pub window_bytes: u64,
    /// Windows held at once: one being read, and up to two a batch is drawn from.
    pub windows: u64,
    /// Decode scratch of compressed inputs.
    pub read_scratch: u64,
    /// Batches an epoch gives this worker.
    pub batches_per_epoch: u64,
    /// Bytes reserved from the budget.
    pub reserved_bytes: u64,
    /// The budget.
    pub budget: u64,
    shuffle: Option<Shuffle>,
    pinned: Option<usize>,
    inputs: Vec<Input>,
    grid: Option<Grid>,
}

impl BatchPlan {
    /// The plan as JSON (what the Python package shows).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "op": "batches",
            "rows": self.rows,
            "batch": self.batch,
            "batch_bytes": self.batch_bytes,
            "ring": self.ring,
            "window_bytes": self.window_bytes,
            "window_rows": self.shuffle.map(|s| s.block_rows * s.window_blocks),
            "block_rows": self.shuffle.map(|s| s.block_rows),
            "batches_per_epoch": self.batches_per_epoch,
            "pinned": self.pinned.map(|n| format!("cuda:{n}")),
            "patches": self.grid.as_ref().map(|g| serde_json::json!({
                "size": g.spec.size,
                "overlap": g.spec.overlap,
                "grid": [g.row_starts.len(), g.col_starts.len()],
            })),
            "reserved_bytes": self.reserved_bytes,
            "budget_bytes": self.budget,
        })
    }
}

impl fmt::Display for BatchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shapes: Vec<String> = self
            .inputs
            .iter()
            .map(|i| {
                let mut s = vec![self.batch as usize];
                s.extend(&i.row_shape);
                format!("{} {}", fmt_shape(&s), i.dtype)
            })
            .collect();
        match &self.grid {
            None => writeln!(
                f,
                "plan:           batches of {} rows of {} rows ({})",
                self.batch,
                self.rows,
                shapes.join(" + ")
            )?,
            Some(g) => writeln!(
                f,
                "plan:           batches of {} patches of {} ({}x{}, overlap {}: a grid of \
                 {} x {} over {} x {} pixels; {})",
                self.batch,
                self.rows,
                g.spec.size,
                g.spec.size,
                g.spec.overlap,
                g.row_starts.len(),
                g.col_starts.len(),
                g.rows,
                g.cols,
                shapes.join(" + ")
            )?,
        }
        writeln!(
            f,
            "batches:        {} an epoch, each {}",
            self.batches_per_epoch,
            fmt_bytes(self.batch_bytes)
        )?;
        writeln!(
            f,
            "ring:           {} buffers of a batch{}",
            self.ring,
            match self.pinned {
                Some(n) => format!(", page-locked by cuda:{n}'s driver"),
                None => String::new(),
            }
        )?;
        let blocks = if self.grid.is_some() {
            "rows of patches"
        } else {
            "rows"
        };
        match self.shuffle {
            Some(s) => writeln!(
                f,
                "shuffle:        windows of {} blocks of {} {blocks} ({} each, {} held at once), seed {}",
                s.window_blocks,
                s.block_rows,
                fmt_bytes(self.window_bytes),
                self.windows,
                s.seed
            )?,
            None if self.grid.is_some() => writeln!(
                f,
                "shuffle:        none (patches in grid order; strips of {} each, {} held at once)",
                fmt_bytes(self.window_bytes),
                self.windows
            )?,
            None => writeln!(f, "shuffle:        none (rows in file order)")?,
        }
        if self.read_scratch > 0 {
            writeln!(f, "decode:         {}", fmt_bytes(self.read_scratch))?;
        }
        writeln!(
            f,
            "reserved:       {} of {} budget ({:.1}%)",
            fmt_bytes(self.reserved_bytes),
            fmt_bytes(self.budget),
            self.reserved_bytes as f64 / self.budget.max(1) as f64 * 100.0
        )
    }
}

impl Engine {
    /// Plans a stream of batches of `req` over `inputs` (arrays sharing their leading
    /// axis): what it holds, refused with the arithmetic when that passes the budget.
    ///
    /// # Errors
    /// [`Error::Invalid`] for inputs of different lengths or a bad request;
    /// [`Error::Budget`] when the ring and the windows do not fit.
    pub fn plan_batches(&self, inputs: &[&TensorFile], req: &BatchRequest) -> Result<BatchPlan> {
        if inputs.is_empty() {
            return Err(Error::invalid("batches need at least one input"));
        }
        for f in inputs {
            f.dtype().real_only("batches")?;
        }
        let (rows, ins, grid) = match req.patches {
            None => {
                let (rows, ins) = row_inputs(inputs)?;
                (rows, ins, None)
            }
            Some(spec) => {
                let (ins, grid) = patch_inputs(inputs, spec)?;
                (
                    grid.per_row() * grid.row_starts.len() as u64,
                    ins,
                    Some(grid),
                )
            }
        };
        let unit = if grid.is_some() { "patches" } else { "rows" };
        if req.batch == 0 {
            return Err(Error::invalid(format!("a batch of 0 {unit} holds nothing")));
        }
        if req.ring < 2 {
            return Err(Error::invalid(
                "a ring of batches needs at least 2 buffers (one held, one being filled)",
            ));
        }
        let (k, parts) = req.part;
        if parts == 0 || k >= parts {
            return Err(Error::invalid(format!(
                "worker {k} of {parts} does not exist"
            )));
        }
        let row_bytes: u64 = ins.iter().map(Input::row_bytes).sum();
        let batch_bytes = req.batch * row_bytes;
        let (window_bytes, windows) = match (req.shuffle, &grid) {
            (Some(s), _) if s.block_rows == 0 || s.window_blocks == 0 => {
                return Err(Error::invalid("a shuffle window of 0 rows holds nothing"));
            }
            (Some(s), None) => ((s.block_rows * s.window_blocks).min(rows) * row_bytes, 3),
            (shuffle, Some(g)) => {
                // a window holds the strips of its blocks, every band of every input
                let strips = g.row_starts.len() as u64;
                let (block, per_window) =
                    shuffle.map_or((1, 1), |s| (s.block_rows.min(strips), s.window_blocks));
                let blocks = per_window.min(strips.div_ceil(block));
                let pixels_row: u64 = ins
                    .iter()
                    .map(|i| (i.bands * g.cols * i.dtype.size()) as u64)
                    .sum();
                (blocks * g.max_span(block) * pixels_row, 3)
            }
            (None, None) => (0, 0),
        };
        let read_scratch: u64 = inputs.iter().map(|t| t.read_scratch_bytes()).sum();
        let ring_bytes = req.ring as u64 * batch_bytes;
        let reserved = ring_bytes + windows * window_bytes + read_scratch;
        let budget = self.budget.limit();
        if reserved > budget {
            let mut parts_text = vec![format!(
                "{} buffers × {} for a batch of {} {unit}",
                req.ring,
                fmt_bytes(batch_bytes),
                req.batch
            )];
            if windows > 0 {
                parts_text.push(format!(
                    "{windows} {} × {}",
                    if req.shuffle.is_some() {
                        "shuffle windows"
                    } else {
                        "strips of patches"
                    },
                    fmt_bytes(window_bytes)
                ));
            }
            if read_scratch > 0 {
                parts_text.push(format!("{} of decode scratch", fmt_bytes(read_scratch)));
            }
            return Err(Error::invalid(format!(
                "memory budget {} is too small for batches of {} {unit}: {} = {}; give \
                 memory={} or more, or smaller batches{}",
                fmt_bytes(budget),
                req.batch,
                parts_text.join(" + "),
                fmt_bytes(reserved),
                if reserved >= 1 << 20 {
                    format!("{}MiB", reserved.div_ceil(1 << 20))
                } else {
                    format!("{}KiB", reserved.div_ceil(1 << 10))
                },
                match (windows > 0, req.shuffle.is_some()) {
                    (true, true) => " or a smaller shuffle window",
                    (true, false) => " or smaller patches",
                    _ => "",
                }
            )));
        }
        let mut plan = BatchPlan {
            rows,
            batch: req.batch,
            batch_bytes,
            ring: req.ring,
            window_bytes,
            windows,
            read_scratch,
            batches_per_epoch: 0,
            reserved_bytes: reserved,
            budget,
            shuffle: req.shuffle,
            pinned: req.pinned,
            inputs: ins,
            grid,
        };
        plan.batches_per_epoch = epoch_batches(&plan, req, req.first_epoch);
        Ok(plan)
    }

    /// Starts a stream of batches of `req` over `inputs` (see the module's notes): the
    /// ring is allocated (page-locked if asked) and the first batches are read at once,
    /// on threads of its own.
    ///
    /// # Errors
    /// As [`Engine::plan_batches`]; page-locked memory refused.
    pub fn batches(&self, inputs: Vec<TensorFile>, req: &BatchRequest) -> Result<BatchStream> {
        let refs: Vec<&TensorFile> = inputs.iter().collect();
        let plan = self.plan_batches(&refs, req)?;
        let reservation = self.budget.reserve("batches", plan.reserved_bytes)?;
        let mut free = Vec::new();
        for _ in 0..plan.ring {
            let bufs = plan
                .inputs
                .iter()
                .map(|i| {
                    let len = (plan.batch * i.row_bytes()) as usize;
                    match plan.pinned {
                        None => Ok(HostBuf::Heap(vec![0u64; len.div_ceil(8)])),
                        Some(n) => HostBuf::locked(n, len, "the ring of batches"),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            free.push(SlotBufs(bufs));
        }
        let ring = Arc::new(Ring {
            free: Mutex::new(free),
            returned: Condvar::new(),
            stop: AtomicBool::new(false),
            lent: AtomicUsize::new(0),
        });
        let (tx, rx) = crossbeam_channel::bounded::<Result<Batch>>(plan.ring);
        // a pool of the stream's own, made now and sized by `threads` (never rayon's
        // global pool: see `crate::io::pool`)
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.backend.threads().max(1))
            .thread_name(|k| format!("tilestream-batches-read-{k}"))
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the batch readers: {e}")))?;
        let producer = {
            let ring = Arc::clone(&ring);
            let plan = plan.clone();
            let req = req.clone();
            std::thread::Builder::new()
                .name("tilestream-batches".into())
                .spawn(move || {
                    if let Err(e) = produce(&inputs, &plan, &req, &ring, &tx, &pool) {
                        let _ = tx.send(Err(e));
                    }
                })
                .map_err(|e| Error::Internal(format!("cannot start the batch reader: {e}")))?
        };
        Ok(BatchStream {
            ready: rx,
            ring,
            producer: Some(producer),
            plan,
            _reservation: reservation,
        })
    }
}

/// The inputs of a stream of rows: their common number of rows, and each as read.
fn row_inputs(inputs: &[&TensorFile]) -> Result<(u64, Vec<Input>)> {
    let first = inputs[0];
    let rows = first.shape().first().copied().unwrap_or(1) as u64;
    let mut ins = Vec::new();
    for t in inputs {
        let n = t.shape().first().copied().unwrap_or(1) as u64;
        if n != rows {
            return Err(Error::invalid(format!(
                "batches take inputs of as many rows each: {} has {rows}, {} has {n}",
                first.path().display(),
                t.path().display()
            )));
        }
        let row_shape = t.shape().get(1..).unwrap_or(&[]).to_vec();
        ins.push(Input {
            dtype: t.dtype(),
            row_elems: row_shape.iter().map(|&d| d as u64).product(),
            row_shape,
            bands: 1,
        });
    }
    Ok((rows, ins))
}

/// The inputs of a stream of patches (images of the same rows and columns, any number
/// of bands each) and the patch grid `spec` cuts them into.
fn patch_inputs(inputs: &[&TensorFile], spec: PatchSpec) -> Result<(Vec<Input>, Grid)> {
    if spec.size == 0 || spec.overlap >= spec.size {
        return Err(Error::invalid(format!(
            "patch size {} with overlap {}: the overlap must be smaller than the size",
            spec.size, spec.overlap
        )));
    }
    let first = inputs[0];
    let [_, rows, cols] = image_dims(first, "batches of patches")?;
    let mut ins = Vec::new();
    for t in inputs {
        let [bands, h, w] = image_dims(t, "batches of patches")?;
        if (h, w) != (rows, cols) {
            return Err(Error::invalid(format!(
                "batches of patches take images of as many rows and columns each: {} is \
                 {rows} x {cols}, {} is {h} x {w}",
                first.path().display(),
                t.path().display()
            )));
        }
        let row_shape = if t.shape().len() == 2 {
            vec![spec.size, spec.size]
        } else {
            vec![bands, spec.size, spec.size]
        };
        ins.push(Input {
            dtype: t.dtype(),
            row_elems: (bands * spec.size * spec.size) as u64,
            row_shape,
            bands,
        });
    }
    if rows == 0 || cols == 0 {
        return Err(Error::invalid(format!(
            "{} has no pixels, so no patches to cut",
            first.path().display()
        )));
    }
    let starts = |n, axis| -> Result<Vec<usize>> {
        Ok(patch_starts(n, spec, axis)?
            .into_iter()
            .map(|(s, _)| s as usize)
            .collect())
    };
    let grid = Grid {
        spec,
        rows,
        cols,
        row_starts: starts(rows, "rows")?,
        col_starts: starts(cols, "columns")?,
    };
    Ok((ins, grid))
}

/// Whether a stream reads windows (shuffled, or patches): otherwise it reads each batch's
/// rows straight into its buffer.
fn windowed(plan: &BatchPlan) -> bool {
    plan.shuffle.is_some() || plan.grid.is_some()
}

/// The windows of epoch `epoch` of a windowed stream, every worker's. With patches, a
/// window's ranges are of patches and cover whole rows of the grid; in grid order (no
/// shuffle) each window is one row of the grid.
fn epoch_windows(plan: &BatchPlan, epoch: u64) -> Vec<ShuffleWindow> {
    match (&plan.grid, plan.shuffle) {
        (None, Some(s)) => s.epoch(plan.rows, epoch),
        (Some(g), Some(s)) => Shuffle {
            block_rows: s.block_rows * g.per_row(),
            ..s
        }
        .epoch(plan.rows, epoch),
        (Some(g), None) => (0..g.row_starts.len() as u64)
            .map(|strip| ShuffleWindow {
                index: strip,
                epoch,
                seed: 0,
                shuffled: false,
                ranges: vec![(strip * g.per_row(), g.per_row())],
            })
            .collect(),
        (None, None) => Vec::new(),
    }
}

/// Batches epoch `epoch` gives worker `req.part` (with several workers and windows, each
/// epoch's count may differ by one: the short block falls in another worker's window).
fn epoch_batches(plan: &BatchPlan, req: &BatchRequest, epoch: u64) -> u64 {
    let (k, parts) = (req.part.0 as u64, req.part.1 as u64);
    if windowed(plan) {
        req.batches_in(
            epoch_windows(plan, epoch)
                .iter()
                .filter(|w| w.index % parts == k)
                .map(ShuffleWindow::rows)
                .sum(),
        )
    } else {
        let all = req.batches_in(plan.rows);
        all / parts + u64::from(all % parts > k)
    }
}
