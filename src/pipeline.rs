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
use crate::journal::Journal;
pub use crate::layout::{Layout, Read, Write};
use crate::plan::{Plan, Tile};
pub use crate::tensor::Touch;
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

struct ReadTile<T> {
    tile: T,
    windows: Vec<Window>,
    /// Bytes the tile's windows hold for it (touched elements).
    in_bytes: u64,
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
    run_layout(&layout, &files, s.budget, s.output, hooks, compute)
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

/// Runs `compute(tile, windows, output_bytes)` over every tile of `layout`, with reading,
/// computing and writing overlapped: the general form of [`run`]. `windows` holds the
/// bytes of each [`Read`] of the tile, in the order [`Layout::reads`] gave them;
/// `output_bytes` is the tile's staging buffer, written out as [`Layout::writes`] says.
///
/// # Errors
/// As for [`run`].
#[allow(clippy::too_many_arguments)]
pub fn run_layout<L, F>(
    layout: &L,
    files: &[&TensorFile],
    budget: &MemoryBudget,
    output: Option<&OutputFile>,
    hooks: Hooks<'_>,
    compute: F,
) -> Result<StageTimes>
where
    L: Layout,
    F: FnMut(L::Tile, &[&[u8]], &mut [u8]) -> Result<()> + Send,
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

    // What decoding compressed inputs holds (set aside by the planner), held for the run.
    let mut decode_scratch = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let bytes = f.read_scratch_bytes();
        if bytes > 0 && !files[..k].iter().any(|g| std::ptr::eq(*g, *f)) {
            decode_scratch.push(budget.reserve("decode scratch of a compressed input", bytes)?);
        }
    }
    // Staging slots, reserved up front: if they do not fit, nothing starts.
    let (tok_tx, tok_rx) = bounded::<Reservation>(slots);
    let (free_tx, free_rx) = bounded::<Buffer>(slots);
    for _ in 0..slots {
        if has_inputs {
            let r = budget.reserve("input windows of one staging slot", layout.window_bytes())?;
            tok_tx
                .send(r)
                .map_err(|_| Error::Internal("token channel closed".into()))?;
        }
        if output.is_some() {
            let bytes = layout.out_slot_elems() * out_elem;
            let r = budget.reserve("output buffer of one staging slot", bytes)?;
            let words = vec![0u64; bytes.div_ceil(8) as usize];
            free_tx
                .send(Buffer {
                    words,
                    _reservation: r,
                })
                .map_err(|_| Error::Internal("buffer channel closed".into()))?;
        }
    }
    let (read_tx, read_rx) = bounded::<ReadTile<L::Tile>>(slots);
    let (write_tx, write_rx) = bounded::<(L::Tile, u64, Buffer)>(slots);

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
    let (mut computed, mut written) = (0usize, 0usize);
    let (mut total_read, mut total_written) = (0u64, 0u64);
    std::thread::scope(|scope| {
        let shared = &shared;
        let report = &report;
        let cancelled = &cancelled;

        // ---- read stage
        let reader = if has_inputs {
            let tok_rx = tok_rx;
            let read_tx = read_tx;
            Some(scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut reads = Vec::new();
                for i in start..num_tiles {
                    let tile = layout.tile(i);
                    let Ok(token) = tok_rx.recv() else { break };
                    if shared.stopped() {
                        break;
                    }
                    let t0 = Instant::now();
                    reads.clear();
                    layout.reads(&tile, &mut reads);
                    let windows = match read_windows(files, &reads) {
                        Ok(w) => w,
                        Err(e) => {
                            shared.fail(e);
                            return (busy, 0, 0);
                        }
                    };
                    busy += t0.elapsed();
                    tracing::debug!(tile = i, windows = windows.len(), "read");
                    let in_bytes = reads
                        .iter()
                        .map(|r| r.touch.touched(r.len) * files[r.input].dtype().size() as u64)
                        .sum();
                    let item = ReadTile {
                        tile,
                        windows,
                        in_bytes,
                        token: Some(token),
                    };
                    if read_tx.send(item).is_err() {
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

        // ---- compute stage
        let has_output = output.is_some();
        let computer = {
            let tok_tx = tok_tx;
            let free_rx = free_rx;
            let write_tx = write_tx;
            let mut compute = compute;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut done = start;
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
                    let mut read = if has_inputs {
                        match read_rx.recv() {
                            Ok(r) => r,
                            Err(_) => break,
                        }
                    } else {
                        ReadTile {
                            tile: layout.tile(i),
                            windows: Vec::new(),
                            in_bytes: 0,
                            token: None,
                        }
                    };
                    let (tile, in_bytes) = (read.tile, read.in_bytes);
                    let mut buffer = if has_output {
                        match free_rx.recv() {
                            Ok(b) => Some(b),
                            Err(_) => break,
                        }
                    } else {
                        None
                    };
                    let out_len = (layout.out_elems(&tile) * out_elem) as usize;
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
                    bytes += in_bytes;
                    tracing::debug!(tile = i, ?tile, "computed");
                    match buffer {
                        Some(b) => {
                            if write_tx.send((tile, in_bytes, b)).is_err() {
                                break;
                            }
                        }
                        None => {
                            done += 1;
                            report(done, bytes);
                        }
                    }
                }
                (busy, computed, bytes)
            })
        };

        // ---- write stage
        let writer = output.map(|out| {
            let free_tx = free_tx;
            scope.spawn(move || {
                let mut busy = Duration::ZERO;
                let mut done = start;
                let mut bytes = 0u64;
                let mut written = 0u64;
                let mut writes = Vec::new();
                'tiles: for (tile, in_bytes, buf) in &write_rx {
                    let t0 = Instant::now();
                    writes.clear();
                    layout.writes(&tile, &mut writes);
                    let used = (layout.out_elems(&tile) * out_elem) as usize;
                    let data = buf.bytes(used);
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
                    if let (Some(j), Some(h)) = (hooks.journal, crc)
                        && let Err(e) = j.tile_written(pass, done, h.finalize())
                    {
                        shared.fail(e);
                        break 'tiles;
                    }
                    busy += t0.elapsed();
                    tracing::debug!(?tile, writes = writes.len(), "written");
                    done += 1;
                    bytes += in_bytes + used as u64;
                    report(done, bytes);
                    // The compute stage may have finished already: keep draining.
                    let _ = free_tx.send(buf);
                }
                (busy, done - start, written)
            })
        });

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
        if let Some(h) = writer {
            (times.write, written, total_written) = join(h, "write");
        }
    });

    if let Some(e) = shared.error.into_inner().ok().flatten() {
        return Err(e);
    }
    // Never report success for a run that lost a tile.
    let todo = num_tiles - start;
    if computed != todo || (output.is_some() && written != todo) {
        return Err(Error::Internal(format!(
            "pipeline ended early: {computed} of {todo} tiles computed, {written} written"
        )));
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

/// The stage scheduler on its own, with a layout of the test's making over a real input
/// file: tile order, the bound on tiles in flight, the first error stopping every stage,
/// cancellation after the tile in flight, and a panicking kernel turned into an error.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod scheduler_tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::DType;

    /// `tiles` tiles of `len` u32 elements, each reading its own range and writing it
    /// back at the same place; counts the tiles the read stage has started.
    struct Fake {
        tiles: usize,
        len: u64,
        depth: usize,
        reads_started: AtomicUsize,
    }

    impl Layout for Fake {
        type Tile = usize;
        fn num_tiles(&self) -> usize {
            self.tiles
        }
        fn tile(&self, i: usize) -> usize {
            i
        }
        fn reads(&self, t: &usize, out: &mut Vec<Read>) {
            self.reads_started.fetch_add(1, Ordering::SeqCst);
            out.push(Read {
                input: 0,
                start: *t as u64 * self.len,
                len: self.len,
                touch: Touch::All,
            });
        }
        fn out_elems(&self, _: &usize) -> u64 {
            self.len
        }
        fn writes(&self, t: &usize, out: &mut Vec<Write>) {
            out.push(Write {
                file_elem: *t as u64 * self.len,
                buf_elem: 0,
                len: self.len,
            });
        }
        fn depth(&self) -> usize {
            self.depth
        }
        fn window_bytes(&self) -> u64 {
            self.len * 4 + 2 * crate::tensor::page_size()
        }
        fn out_slot_elems(&self) -> u64 {
            self.len
        }
    }

    /// An input `.npy` of u32 0..n, and a fake layout over it.
    fn setup(dir: &std::path::Path, tiles: usize, len: u64, depth: usize) -> (TensorFile, Fake) {
        let n = tiles as u64 * len;
        let path = dir.join("in.npy");
        let mut bytes = crate::tensor::npy::build_header(DType::U32, &[n as usize]);
        bytes.extend((0..n as u32).flat_map(u32::to_le_bytes));
        std::fs::write(&path, bytes).unwrap();
        let fake = Fake {
            tiles,
            len,
            depth,
            reads_started: AtomicUsize::new(0),
        };
        (TensorFile::open(&path).unwrap(), fake)
    }

    #[test]
    fn tiles_reach_compute_and_the_writer_in_order_with_at_most_depth_in_flight() {
        for depth in [1, 2, 3, 5] {
            let dir = tempfile::tempdir().unwrap();
            let (input, fake) = setup(dir.path(), 40, 1000, depth);
            let out =
                OutputFile::create(dir.path().join("out.npy"), &[40_000], DType::U32).unwrap();
            let budget = MemoryBudget::new(64 << 20);
            let mut order = Vec::new();
            let mut most_in_flight = 0;
            run_layout(
                &fake,
                &[&input],
                &budget,
                Some(&out),
                Hooks::default(),
                |t, ins, o| {
                    order.push(t);
                    // tiles the reader started and compute has not finished, this one included
                    let in_flight = fake.reads_started.load(Ordering::SeqCst) - t;
                    most_in_flight = most_in_flight.max(in_flight);
                    let src: &[u32] = bytemuck::cast_slice(ins[0]);
                    let dst: &mut [u32] = bytemuck::cast_slice_mut(o);
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d = s + 1;
                    }
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(order, (0..40).collect::<Vec<_>>());
            assert!(
                most_in_flight <= depth,
                "{most_in_flight} tiles in flight, depth {depth}"
            );
            // the writer put every tile where it belongs
            let mut back = vec![0u8; 40_000 * 4];
            out.read_at(0, &mut back).unwrap();
            let back: &[u32] = bytemuck::cast_slice(&back);
            assert!(back.iter().enumerate().all(|(i, &v)| v == i as u32 + 1));
        }
    }

    #[test]
    fn the_first_error_stops_every_stage() {
        let dir = tempfile::tempdir().unwrap();
        let (input, fake) = setup(dir.path(), 50, 100, 3);
        let out = OutputFile::create(dir.path().join("out.npy"), &[5000], DType::U32).unwrap();
        let budget = MemoryBudget::new(64 << 20);
        let mut last = 0;
        let e = run_layout(
            &fake,
            &[&input],
            &budget,
            Some(&out),
            Hooks::default(),
            |t, _, _| {
                last = t;
                if t == 7 {
                    return Err(Error::invalid("tile 7 failed"));
                }
                Ok(())
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("tile 7 failed"), "{e}");
        assert_eq!(last, 7, "compute went on after the error");
        // the reader stopped too: at most a pipeline's depth past the failed tile
        assert!(fake.reads_started.load(Ordering::SeqCst) <= 7 + 1 + 3);
    }

    #[test]
    fn a_cancel_stops_after_the_tile_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let (input, fake) = setup(dir.path(), 30, 100, 3);
        let budget = MemoryBudget::new(64 << 20);
        let stop = AtomicBool::new(false);
        let hooks = Hooks {
            cancel: Some(&stop),
            ..Hooks::default()
        };
        let mut last = 0;
        let e = run_layout(&fake, &[&input], &budget, None, hooks, |t, _, _| {
            last = t;
            if t == 4 {
                stop.store(true, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Interrupted {
                    done: 5,
                    total: 30,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(last, 4);
    }

    #[test]
    fn a_panicking_kernel_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let (input, fake) = setup(dir.path(), 20, 100, 2);
        let out = OutputFile::create(dir.path().join("out.npy"), &[2000], DType::U32).unwrap();
        let budget = MemoryBudget::new(64 << 20);
        // (the panic's report is printed by the compute thread; the run returns an error)
        let e = run_layout(
            &fake,
            &[&input],
            &budget,
            Some(&out),
            Hooks::default(),
            |t, _, _| {
                assert!(t != 3, "kernel bug at tile 3");
                Ok(())
            },
        )
        .unwrap_err();
        assert!(
            matches!(&e, Error::Internal(m) if m.contains("compute stage panicked")),
            "{e:?}"
        );
    }
}
