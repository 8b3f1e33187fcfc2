//! The stage scheduler on its own, with a layout of the test's making over a real input
//! file: tile order, the bound on tiles in flight, the first error stopping every stage,
//! cancellation after the tile in flight, and a panicking kernel turned into an error.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::AtomicUsize;

use super::*;
use crate::DType;
use crate::scheduler::stage::{InPlace, stage_reads};
use std::time::Duration;

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
        self.len * 4 + 2 * crate::format::page_size()
    }
    fn out_slot_elems(&self) -> u64 {
        self.len
    }
}

/// An input `.npy` of u32 0..n, and a fake layout over it.
fn setup(dir: &std::path::Path, tiles: usize, len: u64, depth: usize) -> (TensorFile, Fake) {
    let n = tiles as u64 * len;
    let path = dir.join("in.npy");
    let mut bytes = crate::format::npy::build_header(DType::U32, &[n as usize]);
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
        let out = OutputFile::create(dir.path().join("out.npy"), &[40_000], DType::U32).unwrap();
        let budget = MemoryBudget::new(64 << 20);
        let mut order = Vec::new();
        let mut most_in_flight = 0;
        run_layout(
            &fake,
            &[&input],
            &budget,
            Some(&out),
            Hooks::default(),
            InPlace(|t: usize, ins: &[&[u8]], o: &mut [u8]| {
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
            }),
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
        InPlace(|t: usize, _: &[&[u8]], _: &mut [u8]| {
            last = t;
            if t == 7 {
                return Err(Error::invalid("tile 7 failed"));
            }
            Ok(())
        }),
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
    let e = run_layout(
        &fake,
        &[&input],
        &budget,
        None,
        hooks,
        InPlace(|t: usize, _: &[&[u8]], _: &mut [u8]| {
            last = t;
            if t == 4 {
                stop.store(true, Ordering::Relaxed);
            }
            Ok(())
        }),
    )
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
        InPlace(|t: usize, _: &[&[u8]], _: &mut [u8]| {
            assert!(t != 3, "kernel bug at tile 3");
            Ok(())
        }),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Internal(m) if m.contains("compute stage panicked")),
        "{e:?}"
    );
}

/// Staging memory that counts the slots alive.
struct Counted {
    inner: HostMemory,
    live: std::sync::Arc<AtomicUsize>,
}

impl SlotMemory for Counted {
    fn as_bytes(&self) -> &[u8] {
        self.inner.as_bytes()
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.inner.as_bytes_mut()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A tile for the fake backend's worker, and where to send it back.
type Work = (
    Morsel<usize>,
    crossbeam_channel::Sender<Result<Morsel<usize>>>,
);

/// What the asynchronous fake backend saw.
#[derive(Default)]
struct Seen {
    /// Tiles a worker completed only because it gave up waiting for the next ones.
    gave_up: usize,
    /// The most tiles at once that were read and not yet completed, and submitted and
    /// not yet completed.
    most: (usize, usize),
}

/// A backend whose tiles complete later, on a worker thread (as a device's stream
/// would): it asks for staged inputs, allocates its own slots, and completes tile `i`
/// only once tile `i + 1` has been submitted and tile `i + 2` read, so a scheduler that
/// did not overlap the stages would make it give up waiting.
struct Async {
    live: std::sync::Arc<AtomicUsize>,
    submitted: std::sync::Arc<AtomicUsize>,
    work: crossbeam_channel::Sender<Work>,
    fail_at: Option<usize>,
}

impl TileKernel<usize> for Async {
    fn staged_inputs(&self) -> bool {
        true
    }
    fn alloc_slot(&self, len: usize, reservation: crate::budget::Reservation) -> Result<Slot> {
        self.live.fetch_add(1, Ordering::SeqCst);
        let mem = Counted {
            inner: HostMemory::new(len),
            live: std::sync::Arc::clone(&self.live),
        };
        Ok(Slot::new(Box::new(mem), reservation))
    }
    fn submit(&mut self, m: Morsel<usize>) -> Result<Pending<usize>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.submitted.fetch_add(1, Ordering::SeqCst);
        self.work
            .send((m, tx))
            .map_err(|_| Error::Internal("worker gone".into()))?;
        let fail = self.fail_at;
        Ok(Pending::Later(Box::new(move || {
            let m = rx
                .recv()
                .map_err(|_| Error::Internal("worker dropped a tile".into()))??;
            if fail == Some(m.seq()) {
                return Err(Error::invalid(format!("device fault at tile {}", m.seq())));
            }
            Ok(m)
        })))
    }
}

/// Runs the asynchronous fake over `tiles` tiles of 1000 u32 at `depth` (its worker
/// waiting up to `patience` per tile for the next ones); returns what it saw, the run's
/// result and the backend's slots still alive afterwards.
fn run_async(
    dir: &std::path::Path,
    tiles: usize,
    depth: usize,
    fail_at: Option<usize>,
    patience: Duration,
) -> (Seen, Result<StageTimes>, usize) {
    let (input, fake) = setup(dir, tiles, 1000, depth);
    let out = OutputFile::create(dir.join("out.npy"), &[tiles * 1000], DType::U32).unwrap();
    let budget = MemoryBudget::new(64 << 20);
    let live = std::sync::Arc::new(AtomicUsize::new(0));
    let submitted = std::sync::Arc::new(AtomicUsize::new(0));
    let completed = std::sync::Arc::new(AtomicUsize::new(0));
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<Work>();
    let mut seen = Seen::default();
    let result = std::thread::scope(|scope| {
        let worker = {
            let (submitted, completed) = (&submitted, &completed);
            let fake = &fake;
            let seen = &mut seen;
            scope.spawn(move || {
                for (mut m, done) in &work_rx {
                    let i = m.seq();
                    // hold tile i until tile i+1 is submitted and tile i+2 read
                    let waited = std::time::Instant::now();
                    loop {
                        let sub = submitted.load(Ordering::SeqCst);
                        let read = fake.reads_started.load(Ordering::SeqCst);
                        let need_sub = (i + 2).min(tiles);
                        let need_read = (i + 3).min(tiles);
                        if sub >= need_sub && read >= need_read {
                            let comp = completed.load(Ordering::SeqCst);
                            // read, not completed | submitted, not completed
                            seen.most.0 = seen.most.0.max(read - comp);
                            seen.most.1 = seen.most.1.max(sub - comp);
                            break;
                        }
                        if waited.elapsed() > patience {
                            seen.gave_up += 1;
                            break;
                        }
                        std::thread::yield_now();
                    }
                    let (ins, out) = m.io();
                    let src: &[u32] = bytemuck::cast_slice(ins[0]);
                    let dst: &mut [u32] = bytemuck::cast_slice_mut(out);
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d = s * 3;
                    }
                    completed.fetch_add(1, Ordering::SeqCst);
                    let _ = done.send(Ok(m));
                }
            })
        };
        let kernel = Async {
            live: std::sync::Arc::clone(&live),
            submitted: std::sync::Arc::clone(&submitted),
            work: work_tx,
            fail_at,
        };
        let r = run_layout(
            &fake,
            &[&input],
            &budget,
            Some(&out),
            Hooks::default(),
            kernel,
        );
        worker.join().unwrap();
        r
    });
    if result.is_ok() {
        let mut back = vec![0u8; tiles * 1000 * 4];
        out.read_at(0, &mut back).unwrap();
        let back: &[u32] = bytemuck::cast_slice(&back);
        assert!(back.iter().enumerate().all(|(i, &v)| v == 3 * i as u32));
    }
    let still_live = live.load(Ordering::SeqCst);
    (seen, result, still_live)
}

#[test]
fn an_asynchronous_backend_overlaps_read_compute_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let (seen, result, live) = run_async(dir.path(), 40, 3, None, Duration::from_secs(10));
    result.unwrap();
    assert_eq!(seen.gave_up, 0, "the stages did not overlap");
    // while tile i waited to complete, tile i+1 was submitted and tile i+2 read: three
    // tiles read and two submitted ahead of the device. (Counting tiles read but not yet
    // submitted instead was a race: the compute stage submits a read tile microseconds
    // later, so that count was 0 in about half the runs on this machine.)
    assert!(seen.most.0 >= 3 && seen.most.1 >= 2, "{:?}", seen.most);
    // 3 input and 3 output slots, the backend's own, all freed at the end
    assert_eq!(live, 0);
}

#[test]
fn an_asynchronous_backend_never_holds_more_than_depth_tiles() {
    let dir = tempfile::tempdir().unwrap();
    // depth 2: tile i+2 cannot be read while tiles i and i+1 hold both slots, so the
    // worker has to give up waiting for it on every tile but the last two
    let (seen, result, live) = run_async(dir.path(), 6, 2, None, Duration::from_millis(100));
    result.unwrap();
    assert_eq!(seen.gave_up, 4);
    assert_eq!(live, 0);
}

#[test]
fn an_error_a_pending_tile_reports_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_, result, live) = run_async(dir.path(), 30, 3, Some(5), Duration::from_millis(100));
    let e = result.unwrap_err();
    assert!(e.to_string().contains("device fault at tile 5"), "{e}");
    assert_eq!(live, 0);
}

#[test]
fn reads_staged_straight_into_a_slot_equal_the_mapped_windows() {
    use crate::format::Touch;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.npy");
    let mut bytes = crate::format::npy::build_header(DType::U16, &[30, 10]);
    bytes.extend((0..300u16).flat_map(u16::to_le_bytes));
    std::fs::write(&path, bytes).unwrap();
    let f = TensorFile::open(&path).unwrap();
    let rows = Touch::Rows {
        row: 10,
        runs: [(2, 3), (7, 2), (0, 0)],
        nruns: 2,
    };
    // a whole range, then rows with two column runs, then an empty read
    let reads = [
        Read {
            input: 0,
            start: 13,
            len: 41,
            touch: Touch::All,
        },
        Read {
            input: 0,
            start: 50,
            len: 70,
            touch: rows,
        },
        Read {
            input: 0,
            start: 0,
            len: 0,
            touch: Touch::All,
        },
    ];
    let budget = MemoryBudget::new(1 << 20);
    let mut slot = Slot::host(4096, budget.reserve("slot", 4096).unwrap());
    let ranges = stage_reads(&[&f], &reads, &mut slot).unwrap().unwrap();
    assert_eq!(ranges.len(), 3);
    for (r, &(a, b)) in reads.iter().zip(&ranges) {
        let w = f.map_window_touch(r.start, r.len, r.touch).unwrap();
        assert_eq!(&slot.bytes()[a..b], w.bytes(), "read at {}", r.start);
        assert_eq!(a % 64, 0, "each read starts aligned");
    }
    // 7 rows x (3 + 2) elements of 2 bytes
    assert_eq!(ranges[1].1 - ranges[1].0, 70);
    // a slot too small is an error, not a short read
    let mut small = Slot::host(16, budget.reserve("slot", 16).unwrap());
    assert!(stage_reads(&[&f], &reads, &mut small).is_err());
}

/// A kernel with staged inputs that triples each u32 at once.
struct StagedTriple;

impl TileKernel<usize> for StagedTriple {
    fn staged_inputs(&self) -> bool {
        true
    }
    fn submit(&mut self, mut m: Morsel<usize>) -> Result<Pending<usize>> {
        let (ins, out) = m.io();
        let src: &[u32] = bytemuck::cast_slice(ins[0]);
        let dst: &mut [u32] = bytemuck::cast_slice_mut(out);
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s * 3;
        }
        Ok(Pending::Ready(m))
    }
}

/// A staged slot costs the window's planned bytes and no more: a kernel with staged
/// inputs (a GPU's) runs at exactly the budget its layout's slots add up to, and one
/// byte less is refused before any tile. (Each slot once cost 4 KiB more than planned,
/// which refused every GPU run planned at its smallest budget, on the H200.)
#[test]
fn staged_slots_cost_what_the_layout_planned() {
    let dir = tempfile::tempdir().unwrap();
    let (tiles, depth) = (9, 3);
    let (input, fake) = setup(dir.path(), tiles, 1000, depth);
    let need = depth as u64 * (fake.window_bytes() + fake.out_slot_elems() * 4);
    for (budget, ok) in [(need, true), (need - 1, false)] {
        let path = dir.path().join(format!("out-{budget}.npy"));
        let out = OutputFile::create(&path, &[tiles * 1000], DType::U32).unwrap();
        let r = run_layout(
            &fake,
            &[&input],
            &MemoryBudget::new(budget),
            Some(&out),
            Hooks::default(),
            StagedTriple,
        );
        assert_eq!(r.is_ok(), ok, "budget {budget}: {r:?}");
        if ok {
            let mut back = vec![0u8; tiles * 1000 * 4];
            out.read_at(0, &mut back).unwrap();
            let back: &[u32] = bytemuck::cast_slice(&back);
            assert!(back.iter().enumerate().all(|(i, &v)| v == 3 * i as u32));
        }
    }
}
