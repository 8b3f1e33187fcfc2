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

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Engine;
use super::host::HostBuf;
use super::imagery::image_dims;
use super::patches::{PatchSpec, patch_starts};
use crate::budget::{Reservation, fmt_bytes};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, Touch, fmt_shape};
use crate::ops::generate::philox4x32_10;

/// How a stream of batches shuffles its rows (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shuffle {
    /// The seed: the order is a function of it, the epoch and the two sizes below.
    pub seed: u64,
    /// Rows of a block (the unit of reading: consecutive rows).
    pub block_rows: u64,
    /// Blocks of a window (the rows shuffled together).
    pub window_blocks: u64,
}

impl Shuffle {
    /// Blocks of about 1 MiB of rows of `row_bytes` (all inputs together), 64 to a
    /// window: a window of about 64 MiB, each batch drawn from 64 places of the array.
    /// Depends on the rows' size alone, never on a budget.
    #[must_use]
    pub fn for_rows(seed: u64, row_bytes: u64) -> Self {
        Shuffle {
            seed,
            block_rows: ((1u64 << 20) / row_bytes.max(1)).max(1),
            window_blocks: 64,
        }
    }

    /// [`Shuffle::for_rows`] for the rows of `inputs` together.
    #[must_use]
    pub fn for_inputs(seed: u64, inputs: &[&TensorFile]) -> Self {
        let row_bytes = inputs
            .iter()
            .map(|t| {
                let elems: usize = t.shape().get(1..).unwrap_or(&[]).iter().product();
                (elems * t.dtype().size()) as u64
            })
            .sum();
        Shuffle::for_rows(seed, row_bytes)
    }

    /// With patches of `size` ([`BatchRequest::patches`]): blocks of one row of the
    /// patch grid (a strip `size` rows high), as many to a window as make about 64 MiB
    /// of strips of `inputs` together (1 to 64). Depends on the shapes alone.
    #[must_use]
    pub fn for_patches(seed: u64, inputs: &[&TensorFile], size: usize) -> Self {
        let strip: u64 = inputs
            .iter()
            .map(|t| {
                let s = t.shape();
                let cols = s.last().copied().unwrap_or(1);
                let bands = if s.len() == 3 { s[0] } else { 1 };
                (size * cols * bands * t.dtype().size()) as u64
            })
            .sum();
        Shuffle {
            seed,
            block_rows: 1,
            window_blocks: ((64u64 << 20) / strip.max(1)).clamp(1, 64),
        }
    }

    /// The windows of epoch `epoch` over `n` rows, each the row ranges of its blocks in
    /// the order their rows are concatenated ([`ShuffleWindow::order`] gives the order the
    /// rows are delivered in).
    #[must_use]
    pub fn epoch(&self, n: u64, epoch: u64) -> Vec<ShuffleWindow> {
        let block = self.block_rows.max(1);
        let blocks = n.div_ceil(block);
        let order = permutation(blocks, [self.seed, epoch, u64::MAX]);
        order
            .chunks(self.window_blocks.max(1) as usize)
            .enumerate()
            .map(|(w, ids)| ShuffleWindow {
                index: w as u64,
                epoch,
                seed: self.seed,
                shuffled: true,
                ranges: ids
                    .iter()
                    .map(|&b| (b * block, block.min(n - b * block)))
                    .collect(),
            })
            .collect()
    }
}

/// One window of an epoch ([`Shuffle::epoch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShuffleWindow {
    /// Its number in the epoch.
    pub index: u64,
    /// The epoch.
    pub epoch: u64,
    seed: u64,
    /// Whether its rows are shuffled (a patch stream in file order has windows too).
    shuffled: bool,
    /// The row ranges `(start, rows)` it reads, in order.
    pub ranges: Vec<(u64, u64)>,
}

impl ShuffleWindow {
    /// Rows it holds.
    #[must_use]
    pub fn rows(&self) -> u64 {
        self.ranges.iter().map(|r| r.1).sum()
    }

    /// Its rows in the order they are delivered: indices into its ranges' rows.
    #[must_use]
    pub fn order(&self) -> Vec<u64> {
        if self.shuffled {
            permutation(self.rows(), [self.seed, self.epoch, self.index])
        } else {
            (0..self.rows()).collect()
        }
    }
}

/// 64 random bits, a function of `key` and `i` alone (Philox-4x32-10, the generator of
/// `gen`): counter `(i, key[1], key[2])`, key `key[0]`.
fn random(key: [u64; 3], i: u64) -> u64 {
    let [a, b, _, _] = philox4x32_10(
        [
            i as u32,
            (i >> 32) as u32,
            key[1] as u32 ^ (key[2] as u32).rotate_left(16),
            (key[1] >> 32) as u32 ^ (key[2] >> 32) as u32 ^ (key[2] as u32),
        ],
        [key[0] as u32, (key[0] >> 32) as u32],
    );
    (u64::from(a) << 32) | u64::from(b)
}

/// A permutation of `0..n` drawn from `key` (Fisher-Yates; its draws a `SplitMix64`
/// stream seeded by Philox from `key`, each mapped onto `0..=i` by Lemire's
/// multiply-shift of 64 bits: a bias under `n / 2^64`).
fn permutation(n: u64, key: [u64; 3]) -> Vec<u64> {
    let mut state = random(key, 0);
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut p: Vec<u64> = (0..n).collect();
    for i in (1..n).rev() {
        let j = ((u128::from(next()) * u128::from(i + 1)) >> 64) as u64;
        p.swap(i as usize, j as usize);
    }
    p
}

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

/// The buffers of one batch, one per input.
struct SlotBufs(Vec<HostBuf>);

/// The ring's free buffers, and how the producer waits for one.
struct Ring {
    free: Mutex<Vec<SlotBufs>>,
    returned: Condvar,
    stop: AtomicBool,
    /// Batches the caller holds (handed out and not dropped yet).
    lent: AtomicUsize,
}

impl Ring {
    /// A free buffer, waiting for the caller to drop a batch; `None` once stopped.
    fn take(&self) -> Option<SlotBufs> {
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if let Some(b) = free.pop() {
                return Some(b);
            }
            free = self
                .returned
                .wait_timeout(free, Duration::from_millis(200))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    fn give_back(&self, b: SlotBufs) {
        self.free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(b);
        self.returned.notify_all();
    }
}

/// A batch: its rows of each input, in a buffer of the ring that goes back to it when
/// the batch is dropped.
pub struct Batch {
    /// Its number in the stream (from 0, across epochs).
    pub index: u64,
    /// Its epoch.
    pub epoch: u64,
    /// Rows it holds (the batch size, or fewer for an epoch's last).
    pub rows: usize,
    parts: Vec<BatchPart>,
    bufs: Option<SlotBufs>,
    ring: Arc<Ring>,
    /// Handed to the caller (counted in [`Ring::lent`]), not only read ahead.
    delivered: bool,
}

/// One input's rows in a [`Batch`].
#[derive(Clone, Debug)]
pub struct BatchPart {
    /// Their type.
    pub dtype: DType,
    /// Their shape: `(rows, ...the input's row shape)`.
    pub shape: Vec<usize>,
    addr: usize,
    len: usize,
}

impl BatchPart {
    /// Where the rows are (C order) and their length in bytes: valid, and written by
    /// nothing but the holder of the batch, for as long as the [`Batch`] lives.
    #[must_use]
    pub fn memory(&self) -> (usize, usize) {
        (self.addr, self.len)
    }
}

impl Batch {
    /// Each input's rows.
    #[must_use]
    pub fn parts(&self) -> &[BatchPart] {
        &self.parts
    }

    /// Input `k`'s rows as bytes.
    #[must_use]
    pub fn bytes(&self, k: usize) -> &[u8] {
        match (&self.bufs, self.parts.get(k)) {
            (Some(b), Some(p)) => b.0[k].bytes(p.len),
            _ => &[],
        }
    }
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("epoch", &self.epoch)
            .field("rows", &self.rows)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(b) = self.bufs.take() {
            if self.delivered {
                self.ring.lent.fetch_sub(1, Ordering::AcqRel);
            }
            self.ring.give_back(b);
        }
    }
}

/// A running stream of batches ([`Engine::batches`]): the reader stops when it is
/// dropped.
pub struct BatchStream {
    ready: crossbeam_channel::Receiver<Result<Batch>>,
    ring: Arc<Ring>,
    producer: Option<std::thread::JoinHandle<()>>,
    plan: BatchPlan,
    _reservation: Reservation,
}

/// What waiting for a batch gave.
#[derive(Debug)]
pub enum Next {
    /// The next batch.
    Batch(Batch),
    /// The stream is over.
    End,
    /// None yet: the wait timed out (so a caller can check for signals and wait again).
    NotYet,
}

impl BatchStream {
    /// The plan it runs.
    #[must_use]
    pub fn plan(&self) -> &BatchPlan {
        &self.plan
    }

    /// Waits up to `timeout` for the next batch.
    ///
    /// # Errors
    /// A read that failed; [`Error::Invalid`] when the caller holds every buffer of the
    /// ring (none can be filled until it drops a batch).
    pub fn next(&self, timeout: Duration) -> Result<Next> {
        let deliver = |b: Result<Batch>| {
            b.map(|mut b| {
                b.delivered = true;
                self.ring.lent.fetch_add(1, Ordering::AcqRel);
                Next::Batch(b)
            })
        };
        match self.ready.try_recv() {
            Ok(b) => return deliver(b),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return Ok(Next::End),
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
        let held = self.ring.lent.load(Ordering::Acquire);
        if held >= self.plan.ring {
            return Err(Error::invalid(format!(
                "the loop holds all {held} batches of the ring, so no buffer is free for the \
                 next one: keep copies of batches you keep (`b.copy()`, `t.clone()`), or give \
                 a larger ring"
            )));
        }
        match self.ready.recv_timeout(timeout) {
            Ok(b) => deliver(b),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Ok(Next::NotYet),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Ok(Next::End),
        }
    }

    /// Batches the caller holds now.
    #[must_use]
    pub fn held(&self) -> usize {
        self.ring.lent.load(Ordering::Acquire)
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.ring.stop.store(true, Ordering::Release);
        self.ring.returned.notify_all();
        // batches read ahead are dropped (their buffers go back to the ring), so the
        // reader is not left waiting to hand one over
        while self.ready.try_recv().is_ok() {}
        if let Some(p) = self.producer.take() {
            // it sees `stop` within one read or one wait
            let _ = p.join();
        }
    }
}

/// The reader: fills the ring's buffers batch by batch, in order, until the epochs are
/// done or the stream is dropped.
fn produce(
    inputs: &[TensorFile],
    plan: &BatchPlan,
    req: &BatchRequest,
    ring: &Arc<Ring>,
    tx: &crossbeam_channel::Sender<Result<Batch>>,
    pool: &rayon::ThreadPool,
) -> Result<()> {
    let mut index = 0u64;
    let k = req.part.0 as u64;
    let parts = req.part.1 as u64;
    let send = |b: Batch| tx.send(Ok(b)).is_ok();
    let ctx = Reader {
        inputs,
        plan,
        req,
        ring,
        pool,
    };
    for epoch in req.first_epoch..req.first_epoch + req.epochs {
        let more = if windowed(plan) {
            let windows: Vec<ShuffleWindow> = epoch_windows(plan, epoch)
                .into_iter()
                .filter(|w| w.index % parts == k)
                .collect();
            windowed_epoch(&ctx, &windows, &mut index, &send)?
        } else {
            rows_epoch(&ctx, epoch, &mut index, &send)?
        };
        if !more {
            break;
        }
    }
    Ok(())
}

/// One epoch of rows in file order: each batch's rows read straight into its buffer
/// (reads in the pool). Returns false when the stream was dropped.
fn rows_epoch(
    ctx: &Reader<'_>,
    epoch: u64,
    index: &mut u64,
    send: &dyn Fn(Batch) -> bool,
) -> Result<bool> {
    let Reader {
        inputs,
        plan,
        req,
        ring,
        pool,
    } = *ctx;
    let total = req.batches_in(plan.rows);
    for b in (req.part.0 as u64..total).step_by(req.part.1) {
        let start = b * req.batch;
        let rows = req.batch.min(plan.rows - start);
        let Some(mut bufs) = ring.take() else {
            return Ok(false);
        };
        let parts = fill(&mut bufs, plan, |i, dst| {
            pool.install(|| read_rows(&inputs[i], &plan.inputs[i], start, rows, dst))
        })?;
        if !send(lend(ring, bufs, parts, *index, epoch, rows)) {
            return Ok(false);
        }
        *index += 1;
    }
    Ok(true)
}

/// Hands a filled buffer to the caller as a batch.
fn lend(
    ring: &Arc<Ring>,
    bufs: SlotBufs,
    parts: Vec<BatchPart>,
    index: u64,
    epoch: u64,
    rows: u64,
) -> Batch {
    Batch {
        delivered: false,
        index,
        epoch,
        rows: rows as usize,
        parts,
        bufs: Some(bufs),
        ring: Arc::clone(ring),
    }
}

/// Fills each input's buffer of `bufs` with `f(input, bytes)` (which returns the rows it
/// wrote), and describes them.
fn fill(
    bufs: &mut SlotBufs,
    plan: &BatchPlan,
    mut f: impl FnMut(usize, &mut [u8]) -> Result<u64>,
) -> Result<Vec<BatchPart>> {
    let mut parts = Vec::new();
    for (k, (buf, input)) in bufs.0.iter_mut().zip(&plan.inputs).enumerate() {
        let full = (plan.batch * input.row_bytes()) as usize;
        let dst = buf.bytes_mut(full)?;
        let rows = f(k, dst)?;
        let len = (rows * input.row_bytes()) as usize;
        let mut shape = vec![rows as usize];
        shape.extend(&input.row_shape);
        parts.push(BatchPart {
            dtype: input.dtype,
            shape,
            // the address of memory this thread may write, handed to the batch's holder,
            // who alone may write it while the batch lives
            addr: dst.as_mut_ptr() as usize,
            len,
        });
    }
    Ok(parts)
}

/// Reads rows `[start, start + rows)` of `t` into the front of `dst`; returns `rows`.
fn read_rows(t: &TensorFile, input: &Input, start: u64, rows: u64, dst: &mut [u8]) -> Result<u64> {
    let (first, count) = (start * input.row_elems, rows * input.row_elems);
    let len = (count * input.dtype.size() as u64) as usize;
    let dst = dst
        .get_mut(..len)
        .ok_or_else(|| Error::Internal("a batch's rows past its buffer".into()))?;
    if t.read_into(first, count, Touch::All, dst)?.is_none() {
        // a compressed input: its chunks decoded
        let w = t.map_window(first, count)?;
        dst.copy_from_slice(w.bytes());
    }
    Ok(rows)
}

/// What the reader reads with.
#[derive(Clone, Copy)]
struct Reader<'a> {
    inputs: &'a [TensorFile],
    plan: &'a BatchPlan,
    req: &'a BatchRequest,
    ring: &'a Arc<Ring>,
    pool: &'a rayon::ThreadPool,
}

/// A window read: for each input, each of its ranges (mapped in place for `.npy` and raw
/// files, decoded for compressed ones; with patches, each band of the strips a range
/// covers), where each range starts in the window's items, and the order the items are
/// delivered in.
struct ReadWindow {
    ranges: Vec<Vec<crate::format::Window>>,
    starts: Vec<u64>,
    /// With patches: each range's first grid row and first image row.
    strips: Vec<(usize, usize)>,
    order: Vec<u64>,
}

impl ReadWindow {
    /// Copies item `c` of the window (in its ranges' order) of input `k` into `out`.
    fn copy_item(&self, plan: &BatchPlan, k: usize, c: u64, out: &mut [u8]) {
        let r = self.starts.partition_point(|&s| s <= c) - 1;
        let local = (c - self.starts[r]) as usize;
        let input = &plan.inputs[k];
        let Some(g) = &plan.grid else {
            let rb = out.len();
            out.copy_from_slice(&self.ranges[k][r].bytes()[local * rb..(local + 1) * rb]);
            return;
        };
        let (s0, r0) = self.strips[r];
        let per_row = g.col_starts.len();
        let (pr, pc) = (
            g.row_starts[s0 + local / per_row],
            g.col_starts[local % per_row],
        );
        let (size, es) = (g.spec.size, input.dtype.size());
        // columns inside the image (past its right edge, a padded patch's zeros)
        let inside = size.min(g.cols - pc) * es;
        for (b, plane) in out.chunks_exact_mut(size * size * es).enumerate() {
            let src = self.ranges[k][r * input.bands + b].bytes();
            for (y, line) in plane.chunks_exact_mut(size * es).enumerate() {
                let iy = pr + y;
                if iy >= g.rows {
                    line.fill(0);
                    continue;
                }
                let at = ((iy - r0) * g.cols + pc) * es;
                line[..inside].copy_from_slice(&src[at..at + inside]);
                line[inside..].fill(0);
            }
        }
    }
}

/// Reads window `w` of every input: each range mapped (decoded for compressed inputs),
/// the ranges in parallel; with patches, each band of the image rows its grid rows cover.
fn read_window(inputs: &[TensorFile], plan: &BatchPlan, w: &ShuffleWindow) -> Result<ReadWindow> {
    use rayon::prelude::*;
    // with patches, each range's grid rows and the image rows they cover
    let strips: Vec<(usize, usize, usize)> = match &plan.grid {
        None => Vec::new(),
        Some(g) => w
            .ranges
            .iter()
            .map(|&(start, n)| {
                let s0 = (start / g.per_row()) as usize;
                let (r0, r1) = g.span(s0, s0 + (n / g.per_row()) as usize);
                (s0, r0, r1)
            })
            .collect(),
    };
    let ranges = inputs
        .iter()
        .zip(&plan.inputs)
        .map(|(t, i)| match &plan.grid {
            None => w
                .ranges
                .par_iter()
                .map(|&(start, rows)| t.map_window(start * i.row_elems, rows * i.row_elems))
                .collect::<Result<Vec<_>>>(),
            Some(g) => {
                let plane = (g.rows * g.cols) as u64;
                let reads: Vec<(u64, u64)> = strips
                    .iter()
                    .flat_map(|&(_, r0, r1)| {
                        (0..i.bands as u64).map(move |b| {
                            (
                                b * plane + (r0 * g.cols) as u64,
                                ((r1 - r0) * g.cols) as u64,
                            )
                        })
                    })
                    .collect();
                reads
                    .par_iter()
                    .map(|&(first, count)| t.map_window(first, count))
                    .collect::<Result<Vec<_>>>()
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let mut starts = Vec::with_capacity(w.ranges.len());
    let mut at = 0;
    for &(_, rows) in &w.ranges {
        starts.push(at);
        at += rows;
    }
    Ok(ReadWindow {
        ranges,
        starts,
        strips: strips.iter().map(|&(s0, r0, _)| (s0, r0)).collect(),
        order: w.order(),
    })
}

/// One epoch's windows (shuffled, or a patch stream's strips): each read whole on a
/// thread of its own (the next one while the batches of this one are handed out), its
/// items delivered in its order,
/// batches running on from one window into the next (reads in `pool`). At most three
/// windows are held: two
/// a batch is drawn from, one being read. Returns false when the stream was dropped.
fn windowed_epoch(
    ctx: &Reader<'_>,
    windows: &[ShuffleWindow],
    index: &mut u64,
    send: &dyn Fn(Batch) -> bool,
) -> Result<bool> {
    let Reader {
        inputs,
        plan,
        req,
        ring,
        pool,
    } = *ctx;
    let (wtx, wrx) = crossbeam_channel::bounded::<Result<ReadWindow>>(0);
    let total: u64 = windows.iter().map(ShuffleWindow::rows).sum();
    let batches = req.batches_in(total);
    std::thread::scope(|s| -> Result<bool> {
        let reader = s.spawn(move || {
            for w in windows {
                if ring.stop.load(Ordering::Acquire) {
                    return;
                }
                let read = pool.install(|| read_window(inputs, plan, w));
                let failed = read.is_err();
                if wtx.send(read).is_err() || failed {
                    return;
                }
            }
        });
        let result = (|| -> Result<bool> {
            // the windows the next batch is drawn from, and the rows of the first one
            // already delivered
            let mut held: VecDeque<ReadWindow> = VecDeque::new();
            let mut pos = 0usize;
            let mut delivered = 0u64;
            for _ in 0..batches {
                let rows = req.batch.min(total - delivered) as usize;
                while held.iter().map(|h| h.order.len()).sum::<usize>() - pos < rows {
                    match wrx.recv() {
                        Ok(w) => held.push_back(w?),
                        Err(_) => return Ok(false),
                    }
                }
                let Some(mut bufs) = ring.take() else {
                    return Ok(false);
                };
                // where each row of the batch is: its window, and its row there
                let mut from = Vec::with_capacity(rows);
                let (mut wi, mut p) = (0usize, pos);
                for _ in 0..rows {
                    while p >= held[wi].order.len() {
                        p -= held[wi].order.len();
                        wi += 1;
                    }
                    from.push((wi, held[wi].order[p]));
                    p += 1;
                }
                let parts = fill(&mut bufs, plan, |k, dst| {
                    use rayon::prelude::*;
                    let rb = plan.inputs[k].row_bytes() as usize;
                    // rows copied in runs of at least 256 KiB a thread
                    let run = ((256usize << 10) / rb.max(1)).max(1);
                    pool.install(|| {
                        dst[..rows * rb]
                            .par_chunks_mut(run * rb)
                            .zip(from.par_chunks(run))
                            .for_each(|(out, src)| {
                                for (o, &(w, c)) in out.chunks_exact_mut(rb).zip(src) {
                                    held[w].copy_item(plan, k, c, o);
                                }
                            });
                    });
                    Ok(rows as u64)
                })?;
                pos += rows;
                delivered += rows as u64;
                while let Some(front) = held.front() {
                    if pos < front.order.len() {
                        break;
                    }
                    pos -= front.order.len();
                    held.pop_front();
                }
                if !send(lend(
                    ring,
                    bufs,
                    parts,
                    *index,
                    windows[0].epoch,
                    rows as u64,
                )) {
                    return Ok(false);
                }
                *index += 1;
            }
            Ok(true)
        })();
        drop(wrx);
        let _ = reader.join();
        result
    })
}
