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
use std::time::Duration;

use crate::budget::MemoryBudget;
use crate::error::{Error, Result};
pub use crate::format::Touch;
use crate::format::{OutputFile, TensorFile};
use crate::journal::Journal;
pub use crate::layout::{Layout, Read, Write};
use crate::plan::{Plan, Tile};

mod run;
mod stage;

pub use run::run_layout;

pub use stage::{HostMemory, InPlace, Morsel, Pending, Slot, SlotMemory, TileKernel};

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

impl StageTimes {
    /// Adds the times and bytes of another run (passes of one job over its input).
    pub fn add(&mut self, o: &StageTimes) {
        self.read += o.read;
        self.compute += o.compute;
        self.write += o.write;
        self.wall += o.wall;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.resumed_tiles += o.resumed_tiles;
        self.finish += o.finish;
    }
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

#[derive(Default)]
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

#[cfg(test)]
mod tests;
