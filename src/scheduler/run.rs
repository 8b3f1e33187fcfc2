//! One run of the pipeline ([`run_layout`]): the staging slots reserved up front, then
//! the read, compute and write stages, each a method of [`Run`] on a thread of its own,
//! joined by bounded channels that carry tiles one way and slots back.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use super::stage::{InputToken, Inputs, stage_reads, stage_windows};
use super::{Hooks, Morsel, Pending, Progress, Shared, Slot, StageTimes, TileKernel};
use crate::budget::{MemoryBudget, Reservation};
use crate::error::{Error, Result};
use crate::format::{OutputFile, TensorFile, Touch, Window};
use crate::layout::{Layout, Read, Write};

/// Busy time, tiles and bytes of one stage.
type StageResult = (Duration, usize, u64);

/// What the three stages of one run share.
struct Run<'a, L: Layout> {
    layout: &'a L,
    files: &'a [&'a TensorFile],
    budget: &'a MemoryBudget,
    output: Option<&'a OutputFile>,
    hooks: Hooks<'a>,
    shared: Shared,
    num_tiles: usize,
    /// The pass of the journal this run records (0 without one).
    pass: usize,
    /// The first tile to run: after the tiles a resumed pass found done.
    start: usize,
    /// Bytes of one output element (0 without an output).
    out_elem: u64,
    started: Instant,
}

/// The channels that carry slots: a tile's input token (a reservation for mapped
/// windows, or a staging slot) and an output buffer, each `depth` of them.
struct Slots {
    tok_tx: Sender<InputToken>,
    tok_rx: Receiver<InputToken>,
    free_tx: Sender<Slot>,
    free_rx: Receiver<Slot>,
}

/// Runs `kernel` over every tile of `layout`, with reading, computing and writing
/// overlapped: the general form of [`run`](super::run()). A tile's inputs are the bytes of each
/// [`Read`] of the tile, in the order [`Layout::reads`] gave them; its output slot is
/// written out as [`Layout::writes`] says, once the kernel's [`Pending`] handle for it
/// completes.
///
/// # Errors
/// As for [`run`](super::run()).
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
    // a resumed pass starts after the tiles found done (before any slot is reserved:
    // checking them reads them back through a buffer of its own)
    let (pass, start) = match hooks.journal {
        Some(j) => {
            let p = j.begin_pass(layout, output, budget)?;
            (p.pass, p.start)
        }
        None => (0, 0),
    };
    let run = Run {
        layout,
        files,
        budget,
        output,
        hooks,
        shared: Shared::default(),
        num_tiles: layout.num_tiles(),
        pass,
        start,
        out_elem: output.map_or(0, |o| o.dtype().size() as u64),
        started: Instant::now(),
    };
    let staged = !files.is_empty() && kernel.staged_inputs();
    let depth = layout.depth().max(1).min(run.num_tiles.max(1));
    tracing::info!(
        tiles = run.num_tiles,
        start,
        slots = depth,
        window_bytes = layout.window_bytes(),
        out_slot_bytes = layout.out_slot_elems() * run.out_elem,
        reserved_before = budget.reserved(),
        "pipeline start"
    );
    let held = run.reserve_held(staged)?;
    let slots = run.reserve_slots(&kernel, depth, staged)?;
    let stages = run.stages(kernel, slots, depth);
    drop(held);
    run.finish(stages)
}

impl<L: Layout> Run<'_, L> {
    fn cancelled(&self) -> bool {
        self.hooks
            .cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn report(&self, done: usize, bytes: u64) {
        if let Some(p) = self.hooks.progress {
            p(&Progress {
                tiles_done: done,
                tiles_total: self.num_tiles,
                bytes_done: bytes,
                reserved: self.budget.reserved(),
                budget: self.budget.limit(),
                elapsed: self.started.elapsed(),
            });
        }
    }

    /// What the run holds beside its slots: the decode scratch of each compressed input
    /// (set aside by the planner) and, for a kernel with staged inputs, the window a
    /// compressed input's chunks are decoded into before they are copied into a slot
    /// (the read stage holds one at a time).
    fn reserve_held(&self, staged: bool) -> Result<Vec<Reservation>> {
        let mut held = Vec::new();
        for (k, f) in self.files.iter().enumerate() {
            let bytes = f.read_scratch_bytes();
            if bytes > 0 && !self.files[..k].iter().any(|g| std::ptr::eq(*g, *f)) {
                held.push(
                    self.budget
                        .reserve("decode scratch of a compressed input", bytes)?,
                );
            }
        }
        if staged && self.files.iter().any(|f| f.chunked().is_some()) {
            held.push(self.budget.reserve(
                "the read stage's mapped window while it is copied into a staging slot",
                self.layout.window_bytes(),
            )?);
        }
        Ok(held)
    }

    /// The staging slots, reserved and allocated up front: if they do not fit, nothing
    /// starts.
    fn reserve_slots<K: TileKernel<L::Tile>>(
        &self,
        kernel: &K,
        depth: usize,
        staged: bool,
    ) -> Result<Slots> {
        let (tok_tx, tok_rx) = bounded::<InputToken>(depth);
        let (free_tx, free_rx) = bounded::<Slot>(depth);
        let closed = || Error::Internal("a staging channel closed during setup".into());
        let window = self.layout.window_bytes();
        for _ in 0..depth {
            if !self.files.is_empty() {
                let token = if staged {
                    // the window's bytes as planned: their slack (two pages per input for
                    // a mapped window's alignment) holds the 64-byte alignment of each
                    // input in the slot, so the slot costs what the planner counted
                    let r = self.budget.reserve("input staging slot", window)?;
                    InputToken::Staged(kernel.alloc_slot(window as usize, r)?)
                } else {
                    let r = self
                        .budget
                        .reserve("input windows of one staging slot", window)?;
                    InputToken::Mapped(r)
                };
                tok_tx.send(token).map_err(|_| closed())?;
            }
            if self.output.is_some() {
                let bytes = self.layout.out_slot_elems() * self.out_elem;
                let r = self
                    .budget
                    .reserve("output buffer of one staging slot", bytes)?;
                free_tx
                    .send(kernel.alloc_slot(bytes as usize, r)?)
                    .map_err(|_| closed())?;
            }
        }
        Ok(Slots {
            tok_tx,
            tok_rx,
            free_tx,
            free_rx,
        })
    }

    /// Runs the three stages on threads of their own until every tile is written or one
    /// fails: their busy times, and the tiles and bytes computed and written.
    fn stages<K: TileKernel<L::Tile>>(
        &self,
        kernel: K,
        slots: Slots,
        depth: usize,
    ) -> (StageTimes, usize, usize) {
        let Slots {
            tok_tx,
            tok_rx,
            free_tx,
            free_rx,
        } = slots;
        let (read_tx, read_rx) = bounded::<Morsel<L::Tile>>(depth);
        let (done_tx, done_rx) = bounded::<Pending<L::Tile>>(depth);
        let mut times = StageTimes::default();
        let (mut computed, mut completed) = (0, 0);
        std::thread::scope(|scope| {
            let reader = if self.files.is_empty() {
                drop((tok_rx, read_tx));
                None
            } else {
                Some(scope.spawn(move || self.read_stage(&tok_rx, &read_tx)))
            };
            let tok_back = tok_tx.clone();
            let computer = scope
                .spawn(move || self.compute_stage(kernel, &read_rx, &free_rx, &tok_tx, &done_tx));
            let writer = scope.spawn(move || self.write_stage(&done_rx, &free_tx, &tok_back));
            let join = |h: std::thread::ScopedJoinHandle<'_, StageResult>, name: &str| {
                h.join().unwrap_or_else(|_| {
                    self.shared
                        .fail(Error::Internal(format!("the {name} stage panicked")));
                    (Duration::ZERO, 0, 0)
                })
            };
            if let Some(h) = reader {
                times.read = join(h, "read").0;
            }
            (times.compute, computed, times.bytes_read) = join(computer, "compute");
            (times.write, completed, times.bytes_written) = join(writer, "write");
        });
        (times, computed, completed)
    }

    /// The read stage: maps (or decodes) each tile's windows, and copies them into a
    /// staging slot when the kernel asks for staged inputs.
    fn read_stage(
        &self,
        tok_rx: &Receiver<InputToken>,
        read_tx: &Sender<Morsel<L::Tile>>,
    ) -> StageResult {
        let mut busy = Duration::ZERO;
        let mut reads = Vec::new();
        for i in self.start..self.num_tiles {
            let Some(token) = self.shared.recv(tok_rx) else {
                break;
            };
            if self.shared.stopped() {
                break;
            }
            let t0 = Instant::now();
            let m = match self.read_tile(i, token, &mut reads) {
                Ok(m) => m,
                Err(e) => {
                    self.shared.fail(e);
                    break;
                }
            };
            busy += t0.elapsed();
            tracing::debug!(tile = i, reads = reads.len(), "read");
            if read_tx.send(m).is_err() {
                break;
            }
        }
        (busy, 0, 0)
    }

    /// Tile `i` read with `token`: mapped windows, or its bytes in a staging slot.
    fn read_tile(
        &self,
        i: usize,
        token: InputToken,
        reads: &mut Vec<Read>,
    ) -> Result<Morsel<L::Tile>> {
        let tile = self.layout.tile(i);
        reads.clear();
        self.layout.reads(&tile, reads);
        let inputs = match token {
            InputToken::Mapped(r) => Inputs::Mapped(read_windows(self.files, reads)?, r),
            // plain inputs are read straight into the slot; compressed ones are decoded
            // into windows first
            InputToken::Staged(mut slot) => {
                let ranges = match stage_reads(self.files, reads, &mut slot)? {
                    Some(ranges) => ranges,
                    None => stage_windows(&read_windows(self.files, reads)?, &mut slot)?,
                };
                Inputs::Staged(slot, ranges)
            }
        };
        let in_bytes = reads
            .iter()
            .map(|r| r.touch.touched(r.len) * self.files[r.input].dtype().size() as u64)
            .sum();
        Ok(Morsel {
            seq: i,
            tile,
            inputs,
            out: None,
            out_len: 0,
            in_bytes,
        })
    }

    /// The compute stage: gives each tile and an output slot to the kernel, in plan
    /// order; a tile done at once gives its inputs back at once (unmapping its windows,
    /// which is what keeps resident memory flat).
    fn compute_stage<K: TileKernel<L::Tile>>(
        &self,
        mut kernel: K,
        read_rx: &Receiver<Morsel<L::Tile>>,
        free_rx: &Receiver<Slot>,
        tok_tx: &Sender<InputToken>,
        done_tx: &Sender<Pending<L::Tile>>,
    ) -> StageResult {
        let mut busy = Duration::ZERO;
        let mut computed = 0usize;
        let mut bytes = 0u64;
        for i in self.start..self.num_tiles {
            if self.shared.stopped() {
                break;
            }
            if self.cancelled() {
                self.shared.fail(Error::Interrupted {
                    done: self.start + computed,
                    total: self.num_tiles,
                    resumable: self.hooks.journal.is_some(),
                });
                break;
            }
            let mut m = if self.files.is_empty() {
                Morsel {
                    seq: i,
                    tile: self.layout.tile(i),
                    inputs: Inputs::None,
                    out: None,
                    out_len: 0,
                    in_bytes: 0,
                }
            } else {
                match self.shared.recv(read_rx) {
                    Some(m) => m,
                    None => break,
                }
            };
            if self.output.is_some() {
                match self.shared.recv(free_rx) {
                    Some(slot) => m.out = Some(slot),
                    None => break,
                }
            }
            m.out_len = (self.layout.out_elems(&m.tile) * self.out_elem) as usize;
            let in_bytes = m.in_bytes;
            let t0 = Instant::now();
            let pending = match kernel.submit(m) {
                Ok(Pending::Ready(mut m)) => {
                    tracing::debug!(tile = i, "computed");
                    if let Some(t) = std::mem::replace(&mut m.inputs, Inputs::None).release() {
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
                    self.shared.fail(e);
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
    }

    /// The write stage: waits for each tile, gives its inputs back, writes its output
    /// and records it in the journal; after a failure, waits for every tile still in
    /// flight (a device may still be copying into their slots), then for the chunks of a
    /// streamed output still compressing.
    fn write_stage(
        &self,
        done_rx: &Receiver<Pending<L::Tile>>,
        free_tx: &Sender<Slot>,
        tok_tx: &Sender<InputToken>,
    ) -> StageResult {
        let mut busy = Duration::ZERO;
        let mut done = self.start;
        let (mut bytes, mut written) = (0u64, 0u64);
        let mut writes = Vec::new();
        for pending in done_rx {
            let m = match pending.wait() {
                Ok(m) => m,
                Err(e) => {
                    self.shared.fail(e);
                    break;
                }
            };
            debug_assert_eq!(m.seq, done, "tiles reach the writer in plan order");
            let Morsel {
                seq,
                tile,
                inputs,
                out: slot,
                out_len,
                in_bytes,
            } = m;
            if let Some(t) = inputs.release() {
                let _ = tok_tx.send(t);
            }
            let t0 = Instant::now();
            if let (Some(out), Some(slot)) = (self.output, slot.as_ref()) {
                match self.write_tile(out, seq, &tile, &slot.bytes()[..out_len], &mut writes) {
                    Ok(n) => written += n,
                    Err(e) => {
                        self.shared.fail(e);
                        break;
                    }
                }
            }
            busy += t0.elapsed();
            done += 1;
            bytes += in_bytes + out_len as u64;
            self.report(done, bytes);
            if let Some(slot) = slot {
                // The compute stage may have finished already: keep draining.
                let _ = free_tx.send(slot);
            }
        }
        for pending in done_rx {
            let _ = pending.wait();
        }
        // the chunks still compressing, journaled once written (a stopped run keeps them
        // for --resume)
        if let Some(out) = self.output
            && let Err(e) = out.settle().and_then(|()| self.journal_chunks(out))
        {
            self.shared.fail(e);
        }
        (busy, done - self.start, written)
    }

    /// Writes tile `seq`'s output `data` where the layout says, then journals the chunks
    /// a streamed output has written since the last tile and the tile with its checksum:
    /// the bytes written.
    fn write_tile(
        &self,
        out: &OutputFile,
        seq: usize,
        tile: &L::Tile,
        data: &[u8],
        writes: &mut Vec<Write>,
    ) -> Result<u64> {
        writes.clear();
        self.layout.writes(tile, writes);
        let mut crc = self.hooks.journal.map(|_| crc32fast::Hasher::new());
        let mut written = 0;
        for w in writes.iter() {
            let from = (w.buf_elem * self.out_elem) as usize;
            let n = (w.len * self.out_elem) as usize;
            out.write_at(w.file_elem, &data[from..from + n])?;
            if let Some(h) = crc.as_mut() {
                h.update(&data[from..from + n]);
            }
            written += n as u64;
        }
        // a streamed output's chunks written since the last tile (those this one
        // completed may still be compressing), before the tile; all of them when the run
        // is to be killed here (crash tests)
        let settle = self.hooks.journal.is_some()
            && crate::fault::armed(|| format!("written:{}:{seq}", self.pass));
        if settle {
            out.settle()?;
        }
        self.journal_chunks(out)?;
        if let (Some(j), Some(h)) = (self.hooks.journal, crc) {
            j.tile_written(self.pass, seq, h.finalize())?;
        }
        tracing::debug!(?tile, writes = writes.len(), "written");
        Ok(written)
    }

    /// Journals the runs of chunks a streamed output has written since the last call.
    fn journal_chunks(&self, out: &OutputFile) -> Result<()> {
        for d in out.take_appended() {
            if let Some(j) = self.hooks.journal {
                j.chunks_written(self.pass, &d)?;
            }
        }
        Ok(())
    }

    /// The run's times once its stages are joined, or its first error; never success
    /// for a run that lost a tile or was cancelled with its last one.
    fn finish(
        self,
        (mut times, computed, completed): (StageTimes, usize, usize),
    ) -> Result<StageTimes> {
        if let Some(e) = self.shared.error.into_inner().ok().flatten() {
            return Err(e);
        }
        let todo = self.num_tiles - self.start;
        if computed != todo || completed != todo {
            return Err(Error::Internal(format!(
                "pipeline ended early: {computed} of {todo} tiles computed, {completed} completed"
            )));
        }
        // a cancel that came with the last tile (Ctrl-C, or a progress callback that
        // failed on the last progress) stops the run before its output is put in place
        if self
            .hooks
            .cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            return Err(Error::Interrupted {
                done: self.num_tiles,
                total: self.num_tiles,
                resumable: self.hooks.journal.is_some(),
            });
        }
        times.resumed_tiles = self.start;
        times.wall = self.started.elapsed();
        tracing::info!(
            wall_s = times.wall.as_secs_f64(),
            read_busy_s = times.read.as_secs_f64(),
            compute_busy_s = times.compute.as_secs_f64(),
            write_busy_s = times.write.as_secs_f64(),
            peak_reserved = self.budget.peak(),
            "pipeline done"
        );
        Ok(times)
    }
}

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
