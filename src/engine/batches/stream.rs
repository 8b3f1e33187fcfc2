//! The stream a training loop pulls batches from: the ring of buffers, the batches lent
//! out of it, and the producer thread that reads rows (or windows of shuffled rows) ahead
//! into the free buffers.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::super::host::HostBuf;
use super::{BatchPlan, BatchRequest, Input, ShuffleWindow, epoch_windows, windowed};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, Touch};

/// The buffers of one batch, one per input.
pub(super) struct SlotBufs(pub(super) Vec<HostBuf>);

/// The ring's free buffers, and how the producer waits for one.
pub(super) struct Ring {
    pub(super) free: Mutex<Vec<SlotBufs>>,
    pub(super) returned: Condvar,
    pub(super) stop: AtomicBool,
    /// Batches the caller holds (handed out and not dropped yet).
    pub(super) lent: AtomicUsize,
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

/// A running stream of batches ([`Engine::batches`](crate::engine::Engine::batches)): the reader stops when it is
/// dropped.
pub struct BatchStream {
    pub(super) ready: crossbeam_channel::Receiver<Result<Batch>>,
    pub(super) ring: Arc<Ring>,
    pub(super) producer: Option<std::thread::JoinHandle<()>>,
    pub(super) plan: BatchPlan,
    pub(super) _reservation: Reservation,
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
pub(super) fn produce(
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
