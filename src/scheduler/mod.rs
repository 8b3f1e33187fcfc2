//! The pipelined scheduler: read, compute and write stages on their own threads, joined by
//! bounded channels, recycling a fixed pool of staging slots.
//!
//! ```text
//!            window tokens (depth, each a Reservation)            free output buffers (depth)
//!        ┌──────────────────────────────────────────┐        ┌──────────────────────────────┐
//!        ▼                                          │        ▼                              │
//!   [read]  map + prefault the tile's windows ──▶ [compute]  kernel over the windows ──▶ [write]
//!           (one per input)          bounded(depth)   into an output buffer  bounded(depth)  pwrite
//! ```
//!
//! A stage that has no slot to fill waits, so reading runs at most `depth` tiles ahead and
//! resident memory stays flat. Tiles travel in order through single-threaded stages, so
//! the compute stage sees them in plan order: that is what lets reductions carry state
//! from one tile to the next and stay bit-identical whatever the tile size. Parallelism is
//! inside the compute stage (the backend splits each tile across cores).
//!
//! The first error in any stage stops all of them: a stage that fails records its error
//! and drops its channel ends, which unblocks and ends its neighbours.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;

use crate::budget::MemoryBudget;
use crate::error::{Error, Result};
pub use crate::format::Touch;
use crate::format::{OutputFile, TensorFile, Window};
use crate::journal::Journal;
pub use crate::layout::{Layout, Read, Write};
use crate::plan::{Plan, Tile};

mod stage;

pub use stage::{HostMemory, InPlace, Morsel, Pending, Slot, SlotMemory, TileKernel};
use stage::{InputToken, Inputs, stage_reads, stage_windows};

/// Progress after each completed tile, for progress bars and logs.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Tiles completed.
    pub tiles_done: usize,
    /// Tiles in the plan.
    pub tiles_total: usize,
    /// Bytes read and written so far.
    pub bytes_done: u64,
    /// Bytes reserved from the budget now.
    pub reserved: u64,
    /// The budget.
    pub budget: u64,
    /// Time since the run started.
    pub elapsed: Duration,
}

/// A progress callback: called from a pipeline thread after each tile.
pub type ProgressFn<'a> = &'a (dyn Fn(&Progress) + Sync);

/// Busy time of each stage (time spent working, not waiting on a neighbour).
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    /// Mapping and prefaulting input windows.
    pub read: Duration,
    /// Running kernels.
    pub compute: Duration,
    /// Writing output buffers.
    pub write: Duration,
    /// Wall time of the whole pipeline.
    pub wall: Duration,
    /// Bytes read from inputs.
    pub bytes_read: u64,
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Tiles a resumed run found done and skipped.
    pub resumed_tiles: usize,
    /// Finishing the output after the last tile: encoding a GeoTIFF or Zarr output,
    /// flushing and renaming (included in `wall`).
    pub finish: Duration,
}

/// What a pipeline run streams.
pub struct Stream<'a> {
    /// The tiles.
    pub plan: &'a Plan,
    /// Budget the staging slots are reserved from.
    pub budget: &'a MemoryBudget,
    /// Inputs read tile by tile: tile `[start, start + len)` reads elements
    /// `[base + start, base + start + len)` of each stream's file.
    pub inputs: &'a [InputStream<'a>],
    /// Output written tile by tile, if any.
    pub output: Option<&'a OutputFile>,
    /// Output elements per element of the tiled space (1, or N for a matmul row).
    pub out_per_item: u64,
    /// Optional progress callback.
    pub progress: Option<ProgressFn<'a>>,
    /// Stop request: checked before each tile; when set, the run ends with
    /// [`Error::Interrupted`] after the tile in flight.
    pub cancel: Option<&'a AtomicBool>,
    /// Journal of a resumable run: done tiles are skipped, written ones recorded.
    pub journal: Option<&'a Journal>,
}

/// One streamed input: a file and the element offset the tiled space starts at in it
/// (non-zero for a plane of a band-sequential image, `s[7]`).
#[derive(Clone, Copy, Debug)]
pub struct InputStream<'a> {
    /// The file.
    pub file: &'a TensorFile,
    /// Element offset of the tiled space's first element in the file.
    pub base: u64,
    /// File elements per element of the tiled space (1, or a row length when the plan
    /// counts rows, as for matmul).
    pub per_item: u64,
}

impl<'a> InputStream<'a> {
    /// The whole file, from its first element.
    #[must_use]
    pub fn whole(file: &'a TensorFile) -> Self {
        InputStream {
            file,
            base: 0,
            per_item: 1,
        }
    }
}

/// The layout of a flat [`Plan`]: each tile is one contiguous range of every input and of
/// the output.
struct FlatLayout<'a> {
    plan: &'a Plan,
    inputs: &'a [InputStream<'a>],
    out_per_item: u64,
}

impl Layout for FlatLayout<'_> {
    type Tile = Tile;
    fn num_tiles(&self) -> usize {
        self.plan.num_tiles
    }
    fn tile(&self, i: usize) -> Tile {
        self.plan.tile(i)
    }
    fn reads(&self, t: &Tile, out: &mut Vec<Read>) {
        for (k, input) in self.inputs.iter().enumerate() {
            out.push(Read {
                input: k,
                start: input.base + t.start * input.per_item,
                len: t.len * input.per_item,
                touch: Touch::All,
            });
        }
    }
    fn out_elems(&self, t: &Tile) -> u64 {
        t.len * self.out_per_item
    }
    fn writes(&self, t: &Tile, out: &mut Vec<Write>) {
        out.push(Write {
            file_elem: t.start * self.out_per_item,
            buf_elem: 0,
            len: t.len * self.out_per_item,
        });
    }
    fn depth(&self) -> usize {
        self.plan.depth
    }
    fn window_bytes(&self) -> u64 {
        self.plan.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        self.plan.tile_elems * self.out_per_item
    }
}

struct Shared {
    stop: AtomicBool,
    error: Mutex<Option<Error>>,
}

impl Shared {
    fn fail(&self, e: Error) {
        if let Ok(mut g) = self.error.lock()
            && g.is_none()
        {
            *g = Some(e);
        }
        self.stop.store(true, Ordering::Release);
    }
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Receives from `rx`, or `None` once the channel is closed or the run is stopping.
    /// A stage blocked on a neighbour must wake up when a third stage fails: the writer
    /// failing on tile i leaves the reader waiting for a slot that only the writer gave
    /// back, and the compute stage waiting for the reader.
    fn recv<T>(&self, rx: &crossbeam_channel::Receiver<T>) -> Option<T> {
        use crossbeam_channel::RecvTimeoutError;
        loop {
            match rx.recv_timeout(STOP_POLL) {
                Ok(v) => return Some(v),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {
                    if self.stopped() {
                        return None;
                    }
                }
            }
        }
    }
}

/// How often a stage blocked on a channel checks whether the run is stopping.
const STOP_POLL: Duration = Duration::from_millis(20);

/// The windows of one tile, in the order of `reads`. Mapped files map each window on
/// its own; a compressed file gets all its windows of the tile in one call, so each
/// chunk is decoded once for all of them.
fn read_windows(files: &[&TensorFile], reads: &[Read]) -> Result<Vec<Window>> {
    let mut out: Vec<Option<Window>> = (0..reads.len()).map(|_| None).collect();
    for (k, f) in files.iter().enumerate() {
        let mine: Vec<usize> = (0..reads.len()).filter(|&i| reads[i].input == k).collect();
        if mine.is_empty() {
            continue;
        }
        let reqs: Vec<(u64, u64, Touch)> = mine
            .iter()
            .map(|&i| (reads[i].start, reads[i].len, reads[i].touch))
            .collect();
        for (i, w) in mine.into_iter().zip(f.map_windows(&reqs)?) {
            out[i] = Some(w);
        }
    }
    out.into_iter()
        .map(|w| w.ok_or_else(|| Error::Internal("a read names no input file".into())))
        .collect()
}

/// Runs `kernel` over every tile of `s.plan`, with reading, computing and writing
/// overlapped. Each tile's inputs are one slice per input (the tile's elements); its
/// output is the tile's part of the output (empty when there is no output). Tiles reach
/// the kernel in plan order. A closure `compute(tile, inputs, output)` becomes a kernel
/// through [`InPlace`].
///
/// # Errors
/// The first error of any stage: a failed map or write, a budget reservation that does
/// not fit, or an error returned by the kernel.
pub fn run<K>(s: &Stream<'_>, kernel: K) -> Result<StageTimes>
where
    K: TileKernel<Tile>,
{
    let layout = FlatLayout {
        plan: s.plan,
        inputs: s.inputs,
        out_per_item: s.out_per_item,
    };
    let files: Vec<&TensorFile> = s.inputs.iter().map(|i| i.file).collect();
    let hooks = Hooks {
        progress: s.progress,
        cancel: s.cancel,
        journal: s.journal,
    };
    run_layout(&layout, &files, s.budget, s.output, hooks, kernel)
}

/// What a run reports to, and listens to, besides its data.
#[derive(Clone, Copy, Default)]
pub struct Hooks<'a> {
    /// Called after each completed tile.
    pub progress: Option<ProgressFn<'a>>,
    /// Checked before each tile; when set, the run stops with [`Error::Interrupted`].
    pub cancel: Option<&'a AtomicBool>,
    /// Journal of a resumable run: the pass starts after the tiles it finds done, and
    /// each written tile is recorded with its checksum.
    pub journal: Option<&'a Journal>,
}

/// Runs `kernel` over every tile of `layout`, with reading, computing and writing
/// overlapped: the general form of [`run`]. A tile's inputs are the bytes of each
/// [`Read`] of the tile, in the order [`Layout::reads`] gave them; its output slot is
/// written out as [`Layout::writes`] says, once the kernel's [`Pending`] handle for it
/// completes.
///
/// # Errors
/// As for [`run`].
pub fn run_layout<L, K>(
    layout: &L,
    files: &[&TensorFile],
    budget: &MemoryBudget,
    output: Option<&OutputFile>,
    hooks: Hooks<'_>,
    kernel: K,
) -> Result<StageTimes>
where
    L: Layout,
    K: TileKernel<L::Tile>,
{
    let num_tiles = layout.num_tiles();
    // a resumed pass starts after the tiles found done (before any slot is reserved:
    // checking them reads them back through a buffer of its own)
    let (pass, start) = match hooks.journal {
        Some(j) => {
            let p = j.begin_pass(layout, output, budget)?;
            (p.pass, p.start)
        }
        None => (0, 0),
    };
    let slots = layout.depth().max(1).min(num_tiles.max(1));
    let out_elem = output.map_or(0, |o| o.dtype().size() as u64);
    let started = Instant::now();
    tracing::info!(
        tiles = num_tiles,
        start,
        slots,
        window_bytes = layout.window_bytes(),
        out_slot_bytes = layout.out_slot_elems() * out_elem,
        reserved_before = budget.reserved(),
        "pipeline start"
    );
    let shared = Shared {
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
    };
    let has_inputs = !files.is_empty();
    let staged = has_inputs && kernel.staged_inputs();

    // What decoding compressed inputs holds (set aside by the planner), held for the run.
    let mut decode_scratch = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let bytes = f.read_scratch_bytes();
        if bytes > 0 && !files[..k].iter().any(|g| std::ptr::eq(*g, *f)) {
            decode_scratch.push(budget.reserve("decode scratch of a compressed input", bytes)?);
        }
    }
    // A kernel with staged inputs has plain inputs read straight into its slots; a
    // compressed input's chunks are decoded into a window first, then copied: the read
    // stage holds one such window at a time.
    let _transient = if staged && files.iter().any(|f| f.chunked().is_some()) {
        Some(budget.reserve(
            "the read stage's mapped window while it is copied into a staging slot",
            layout.window_bytes(),
        )?)
    } else {
        None
    };
    // Staging slots, reserved and allocated up front: if they do not fit, nothing starts.
    let (tok_tx, tok_rx) = bounded::<InputToken>(slots);
    let (free_tx, free_rx) = bounded::<Slot>(slots);
    let closed = |_| Error::Internal("a staging channel closed during setup".into());
    for _ in 0..slots {
        if has_inputs {
            let token = if staged {
                // the window's bytes as planned: their slack (two pages per input for a
                // mapped window's alignment) holds the 64-byte alignment of each input in
                // the slot, so the slot costs what the planner counted
                let len = layout.window_bytes();
                let r = budget.reserve("input staging slot", len)?;
                InputToken::Staged(kernel.alloc_slot(len as usize, r)?)
            } else {
                let r =
                    budget.reserve("input windows of one staging slot", layout.window_bytes())?;
                InputToken::Mapped(r)
            };
            tok_tx.send(token).map_err(closed)?;
        }
        if output.is_some() {
            let bytes = layout.out_slot_elems() * out_elem;
            let r = budget.reserve("output buffer of one staging slot", bytes)?;
            free_tx
                .send(kernel.alloc_slot(bytes as usize, r)?)
                .map_err(|_| Error::Internal("a staging channel closed during setup".into()))?;
        }
    }
    let (read_tx, read_rx) = bounded::<Morsel<L::Tile>>(slots);
    let (done_tx, done_rx) = bounded::<Pending<L::Tile>>(slots);

    let progress = hooks.progress;
    let cancelled = || hooks.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    let report = |done: usize, bytes: u64| {
        if let Some(p) = progress {
            p(&Progress {
                tiles_done: done,
                tiles_total: num_tiles,
                bytes_done: bytes,
                reserved: budget.reserved(),
                budget: budget.limit(),
                elapsed: started.elapsed(),
            });
        }
    };
    let mut times = StageTimes::default();
    let (mut computed, mut completed) = (0usize, 0usize);
    let (mut total_read, mut total_written) = (0u64, 0u64);
    std::thread::scope(|scope| {
        let shared = &shared;
        let report = &report;
        let cancelled = &cancelled;

        // ---- read stage: map (or decode) the tile's windows; copy them into a staging
        // slot when the kernel asks for staged inputs
        let reader = if has_inputs {
            let tok_rx = tok_rx;
            let read_tx = read_tx;
            Some(scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut reads = Vec::new();
                for i in start..num_tiles {
                    let tile = layout.tile(i);
                    let Some(token) = shared.recv(&tok_rx) else {
                        break;
                    };
                    if shared.stopped() {
                        break;
                    }
                    let t0 = Instant::now();
                    reads.clear();
                    layout.reads(&tile, &mut reads);
                    let staged = match token {
                        InputToken::Mapped(r) => {
                            read_windows(files, &reads).map(|w| Inputs::Mapped(w, r))
                        }
                        // plain inputs are read straight into the slot; compressed ones
                        // are decoded into windows first
                        InputToken::Staged(mut slot) => {
                            match stage_reads(files, &reads, &mut slot) {
                                Ok(Some(ranges)) => Ok(Inputs::Staged(slot, ranges)),
                                Ok(None) => read_windows(files, &reads)
                                    .and_then(|w| stage_windows(&w, &mut slot))
                                    .map(|ranges| Inputs::Staged(slot, ranges)),
                                Err(e) => Err(e),
                            }
                        }
                    };
                    let inputs = match staged {
                        Ok(inputs) => inputs,
                        Err(e) => {
                            shared.fail(e);
                            return (busy, 0, 0);
                        }
                    };
                    busy += t0.elapsed();
                    tracing::debug!(tile = i, reads = reads.len(), "read");
                    let in_bytes = reads
                        .iter()
                        .map(|r| r.touch.touched(r.len) * files[r.input].dtype().size() as u64)
                        .sum();
                    let m = Morsel {
                        seq: i,
                        tile,
                        inputs,
                        out: None,
                        out_len: 0,
                        in_bytes,
                    };
                    if read_tx.send(m).is_err() {
                        break;
                    }
                }
                (busy, 0, 0)
            }))
        } else {
            drop(tok_rx);
            drop(read_tx);
            None
        };

        // ---- compute stage: give each tile and an output slot to the kernel
        let has_output = output.is_some();
        let tok_back = tok_tx.clone();
        let computer = {
            let tok_tx = tok_tx;
            let free_rx = free_rx;
            let done_tx = done_tx;
            let mut kernel = kernel;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut computed = 0usize;
                let mut bytes = 0u64;
                for i in start..num_tiles {
                    if shared.stopped() {
                        break;
                    }
                    if cancelled() {
                        shared.fail(Error::Interrupted {
                            done: start + computed,
                            total: num_tiles,
                            resumable: hooks.journal.is_some(),
                        });
                        break;
                    }
                    let mut m = if has_inputs {
                        match shared.recv(&read_rx) {
                            Some(m) => m,
                            None => break,
                        }
                    } else {
                        Morsel {
                            seq: i,
                            tile: layout.tile(i),
                            inputs: Inputs::None,
                            out: None,
                            out_len: 0,
                            in_bytes: 0,
                        }
                    };
                    if has_output {
                        match shared.recv(&free_rx) {
                            Some(slot) => m.out = Some(slot),
                            None => break,
                        }
                    }
                    m.out_len = (layout.out_elems(&m.tile) * out_elem) as usize;
                    let in_bytes = m.in_bytes;
                    let t0 = Instant::now();
                    let pending = match kernel.submit(m) {
                        Ok(Pending::Ready(mut m)) => {
                            tracing::debug!(tile = i, "computed");
                            // Done at once: give the inputs back now (unmapping the
                            // windows), which is what keeps resident memory flat.
                            if let Some(t) =
                                std::mem::replace(&mut m.inputs, Inputs::None).release()
                            {
                                let _ = tok_tx.send(t);
                            }
                            Pending::Ready(m)
                        }
                        Ok(later) => {
                            tracing::debug!(tile = i, "submitted");
                            later
                        }
                        Err(e) => {
                            busy += t0.elapsed();
                            shared.fail(e);
                            break;
                        }
                    };
                    busy += t0.elapsed();
                    computed += 1;
                    bytes += in_bytes;
                    if done_tx.send(pending).is_err() {
                        break;
                    }
                }
                (busy, computed, bytes)
            })
        };

        // the runs of chunks a streamed output has written since the last call, journaled
        let journal_chunks = |out: &OutputFile, pass: usize| -> Result<()> {
            for d in out.take_appended() {
                if let Some(j) = hooks.journal {
                    j.chunks_written(pass, &d)?;
                }
            }
            Ok(())
        };

        // ---- write stage: wait for each tile, give its inputs back, write its output
        let writer = {
            let free_tx = free_tx;
            let tok_tx = tok_back;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut done = start;
                let mut bytes = 0u64;
                let mut written = 0u64;
                let mut writes = Vec::new();
                'tiles: for pending in &done_rx {
                    let m = match pending.wait() {
                        Ok(m) => m,
                        Err(e) => {
                            shared.fail(e);
                            break;
                        }
                    };
                    let Morsel {
                        seq,
                        tile,
                        inputs,
                        out: slot,
                        out_len,
                        in_bytes,
                    } = m;
                    debug_assert_eq!(seq, done, "tiles reach the writer in plan order");
                    if let Some(t) = inputs.release() {
                        let _ = tok_tx.send(t);
                    }
                    let t0 = Instant::now();
                    if let (Some(out), Some(slot)) = (output, slot.as_ref()) {
                        writes.clear();
                        layout.writes(&tile, &mut writes);
                        let data = &slot.bytes()[..out_len];
                        let mut crc = hooks.journal.map(|_| crc32fast::Hasher::new());
                        for w in &writes {
                            let from = (w.buf_elem * out_elem) as usize;
                            let n = (w.len * out_elem) as usize;
                            if let Err(e) = out.write_at(w.file_elem, &data[from..from + n]) {
                                shared.fail(e);
                                break 'tiles;
                            }
                            if let Some(h) = crc.as_mut() {
                                h.update(&data[from..from + n]);
                            }
                            written += n as u64;
                        }
                        // a streamed output's chunks written since the last tile (those
                        // this one completed may still be compressing), before the tile;
                        // all of them when the run is to be killed here (crash tests)
                        let settle = hooks.journal.is_some()
                            && crate::fault::armed(|| format!("written:{pass}:{seq}"));
                        if let Err(e) = if settle { out.settle() } else { Ok(()) }
                            .and_then(|()| journal_chunks(out, pass))
                        {
                            shared.fail(e);
                            break 'tiles;
                        }
                        if let (Some(j), Some(h)) = (hooks.journal, crc)
                            && let Err(e) = j.tile_written(pass, seq, h.finalize())
                        {
                            shared.fail(e);
                            break 'tiles;
                        }
                        tracing::debug!(?tile, writes = writes.len(), "written");
                    }
                    busy += t0.elapsed();
                    done += 1;
                    bytes += in_bytes + out_len as u64;
                    report(done, bytes);
                    if let Some(slot) = slot {
                        // The compute stage may have finished already: keep draining.
                        let _ = free_tx.send(slot);
                    }
                }
                // After a failure, wait for every tile still in flight before the slots
                // are freed: a device may still be copying into them.
                for pending in &done_rx {
                    let _ = pending.wait();
                }
                // the chunks still compressing, journaled once written (a stopped run
                // keeps them for --resume)
                if let Some(out) = output
                    && let Err(e) = out.settle().and_then(|()| journal_chunks(out, pass))
                {
                    shared.fail(e);
                }
                (busy, done - start, written)
            })
        };

        let join = |h: std::thread::ScopedJoinHandle<'_, (Duration, usize, u64)>, name: &str| {
            h.join().unwrap_or_else(|_| {
                shared.fail(Error::Internal(format!("the {name} stage panicked")));
                (Duration::ZERO, 0, 0)
            })
        };
        if let Some(h) = reader {
            times.read = join(h, "read").0;
        }
        (times.compute, computed, total_read) = join(computer, "compute");
        (times.write, completed, total_written) = join(writer, "write");
    });
    drop(decode_scratch);

    if let Some(e) = shared.error.into_inner().ok().flatten() {
        return Err(e);
    }
    // Never report success for a run that lost a tile.
    let todo = num_tiles - start;
    if computed != todo || completed != todo {
        return Err(Error::Internal(format!(
            "pipeline ended early: {computed} of {todo} tiles computed, {completed} completed"
        )));
    }
    // a cancel that came with the last tile (Ctrl-C, or a progress callback that failed
    // on the last progress) stops the run before its output is put in place
    if cancelled() {
        return Err(Error::Interrupted {
            done: num_tiles,
            total: num_tiles,
            resumable: hooks.journal.is_some(),
        });
    }
    times.bytes_read = total_read;
    times.bytes_written = total_written;
    times.resumed_tiles = start;
    times.wall = started.elapsed();
    tracing::info!(
        wall_s = times.wall.as_secs_f64(),
        read_busy_s = times.read.as_secs_f64(),
        compute_busy_s = times.compute.as_secs_f64(),
        write_busy_s = times.write.as_secs_f64(),
        peak_reserved = budget.peak(),
        "pipeline done"
    );
    Ok(times)
}

#[cfg(test)]
mod tests;
