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

use crate::budget::{MemoryBudget, Reservation};
use crate::error::{Error, Result};
use crate::plan::{Plan, Tile};
use crate::tensor::{OutputFile, TensorFile, Window};

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

struct ReadTile {
    tile: Tile,
    windows: Vec<Window>,
    token: Option<Reservation>,
}

/// A staging buffer aligned for any element type (backed by `u64`s).
struct Buffer {
    words: Vec<u64>,
    _reservation: Reservation,
}

impl Buffer {
    fn bytes_mut(&mut self, n: usize) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..n]
    }
    fn bytes(&self, n: usize) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..n]
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
}

/// Runs `compute(tile, input_bytes, output_bytes)` over every tile of `s.plan`, with
/// reading, computing and writing overlapped. `input_bytes` holds one slice per input
/// (the tile's elements); `output_bytes` is the tile's part of the output (empty when
/// there is no output). Tiles reach `compute` in plan order.
///
/// # Errors
/// The first error of any stage: a failed map or write, a budget reservation that does
/// not fit, or an error returned by `compute`.
pub fn run<F>(s: &Stream<'_>, compute: F) -> Result<StageTimes>
where
    F: FnMut(Tile, &[&[u8]], &mut [u8]) -> Result<()> + Send,
{
    let plan = s.plan;
    let slots = plan.depth.min(plan.num_tiles.max(1));
    let out_elem = s.output.map_or(0, |o| o.dtype().size() as u64) * s.out_per_item;
    let in_elem: u64 = s
        .inputs
        .iter()
        .map(|t| t.file.dtype().size() as u64 * t.per_item)
        .sum();
    let started = Instant::now();
    let shared = Shared {
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
    };

    // Staging slots, reserved up front: if they do not fit, nothing starts.
    let (tok_tx, tok_rx) = bounded::<Reservation>(slots);
    let (free_tx, free_rx) = bounded::<Buffer>(slots);
    for _ in 0..slots {
        if !s.inputs.is_empty() {
            let r = s
                .budget
                .reserve("input windows of one staging slot", plan.window_bytes)?;
            tok_tx
                .send(r)
                .map_err(|_| Error::Internal("token channel closed".into()))?;
        }
        if s.output.is_some() {
            let bytes = plan.tile_elems * out_elem;
            let r = s
                .budget
                .reserve("output buffer of one staging slot", bytes)?;
            let words = vec![0u64; bytes.div_ceil(8) as usize];
            free_tx
                .send(Buffer {
                    words,
                    _reservation: r,
                })
                .map_err(|_| Error::Internal("buffer channel closed".into()))?;
        }
    }
    let (read_tx, read_rx) = bounded::<ReadTile>(slots);
    let (write_tx, write_rx) = bounded::<(Tile, Buffer)>(slots);

    let report = |done: usize, bytes: u64| {
        if let Some(p) = s.progress {
            p(&Progress {
                tiles_done: done,
                tiles_total: plan.num_tiles,
                bytes_done: bytes,
                reserved: s.budget.reserved(),
                budget: s.budget.limit(),
                elapsed: started.elapsed(),
            });
        }
    };

    let mut times = StageTimes::default();
    let (mut computed, mut written) = (0usize, 0usize);
    std::thread::scope(|scope| {
        let shared = &shared;
        let report = &report;

        // ---- read stage
        let reader = if s.inputs.is_empty() {
            drop(tok_rx);
            drop(read_tx);
            None
        } else {
            let tok_rx = tok_rx;
            let read_tx = read_tx;
            Some(scope.spawn(move || {
                let mut busy = Duration::ZERO;
                for tile in plan.tiles() {
                    let Ok(token) = tok_rx.recv() else { break };
                    if shared.stopped() {
                        break;
                    }
                    let t0 = Instant::now();
                    let mut windows = Vec::with_capacity(s.inputs.len());
                    for input in s.inputs {
                        match input.file.map_window(
                            input.base + tile.start * input.per_item,
                            tile.len * input.per_item,
                        ) {
                            Ok(w) => windows.push(w),
                            Err(e) => {
                                shared.fail(e);
                                return (busy, 0);
                            }
                        }
                    }
                    busy += t0.elapsed();
                    let item = ReadTile {
                        tile,
                        windows,
                        token: Some(token),
                    };
                    if read_tx.send(item).is_err() {
                        break;
                    }
                }
                (busy, 0)
            }))
        };

        // ---- compute stage
        let has_output = s.output.is_some();
        let computer = {
            let tok_tx = tok_tx;
            let free_rx = free_rx;
            let write_tx = write_tx;
            let mut compute = compute;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut done = 0usize;
                let mut computed = 0usize;
                let mut bytes = 0u64;
                for tile in plan.tiles() {
                    if shared.stopped() {
                        break;
                    }
                    let mut read = if s.inputs.is_empty() {
                        ReadTile {
                            tile,
                            windows: Vec::new(),
                            token: None,
                        }
                    } else {
                        match read_rx.recv() {
                            Ok(r) => r,
                            Err(_) => break,
                        }
                    };
                    debug_assert_eq!(read.tile, tile);
                    let mut buffer = if has_output {
                        match free_rx.recv() {
                            Ok(b) => Some(b),
                            Err(_) => break,
                        }
                    } else {
                        None
                    };
                    let out_len = (tile.len * out_elem) as usize;
                    let t0 = Instant::now();
                    let result = {
                        let ins: Vec<&[u8]> = read.windows.iter().map(Window::bytes).collect();
                        let out = match buffer.as_mut() {
                            Some(b) => b.bytes_mut(out_len),
                            None => &mut [],
                        };
                        compute(tile, &ins, out)
                    };
                    // Unmap now: this is what keeps resident memory flat.
                    read.windows.clear();
                    busy += t0.elapsed();
                    if let Some(tok) = read.token.take() {
                        let _ = tok_tx.send(tok);
                    }
                    if let Err(e) = result {
                        shared.fail(e);
                        break;
                    }
                    computed += 1;
                    match buffer {
                        Some(b) => {
                            if write_tx.send((tile, b)).is_err() {
                                break;
                            }
                        }
                        None => {
                            done += 1;
                            bytes += tile.len * in_elem;
                            report(done, bytes);
                        }
                    }
                }
                (busy, computed)
            })
        };

        // ---- write stage
        let writer = s.output.map(|out| {
            let free_tx = free_tx;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut done = 0usize;
                let mut bytes = 0u64;
                for (tile, buf) in &write_rx {
                    let t0 = Instant::now();
                    let n = (tile.len * out_elem) as usize;
                    if let Err(e) = out.write_at(tile.start * s.out_per_item, buf.bytes(n)) {
                        shared.fail(e);
                        break;
                    }
                    busy += t0.elapsed();
                    done += 1;
                    bytes += tile.len * (in_elem + out_elem);
                    report(done, bytes);
                    // The compute stage may have finished already: keep draining.
                    let _ = free_tx.send(buf);
                }
                (busy, done)
            })
        });

        let join =
            |h: std::thread::ScopedJoinHandle<'_, (Duration, usize)>, name: &str| match h.join() {
                Ok(d) => d,
                Err(_) => {
                    shared.fail(Error::Internal(format!("the {name} stage panicked")));
                    (Duration::ZERO, 0)
                }
            };
        if let Some(h) = reader {
            times.read = join(h, "read").0;
        }
        (times.compute, computed) = join(computer, "compute");
        if let Some(h) = writer {
            (times.write, written) = join(h, "write");
        }
    });

    if let Some(e) = shared.error.into_inner().ok().flatten() {
        return Err(e);
    }
    // Never report success for a run that lost a tile.
    if computed != plan.num_tiles || (s.output.is_some() && written != plan.num_tiles) {
        return Err(Error::Internal(format!(
            "pipeline ended early: {computed} of {} tiles computed, {written} written",
            plan.num_tiles
        )));
    }
    let elems: u64 = plan.tiles().map(|t| t.len).sum();
    times.bytes_read = elems * in_elem;
    times.bytes_written = elems * out_elem;
    times.wall = started.elapsed();
    Ok(times)
}
