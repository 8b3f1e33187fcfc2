//! The engine: budget + backend + planner + pipeline, and the library's entry points.
//!
//! ```no_run
//! use tilestream::{Axis, Engine, MemoryBudget, Reduce, TensorFile};
//! # fn main() -> tilestream::Result<()> {
//! let engine = Engine::new(MemoryBudget::parse("512MiB")?)?.with_threads(4)?;
//! let x = TensorFile::open("x.npy")?;
//! let (means, report) = engine.reduce(&x, Reduce::Mean, Axis(0))?;
//! println!("{} column means in {:.2} s", means.len(), report.wall_s);
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::backend::Kernels;
use crate::backend::cuda::CudaDevice;
use crate::backend::{Backend, CpuBackend, Family, OnBackend};
use crate::budget::MemoryBudget;
use crate::device::DeviceRequest;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::encoding::Room;
use crate::format::tiff::{GeoRef, TiffWriteOptions};
use crate::format::zarr::ZarrWriteOptions;
use crate::format::{OutFormat, OutRegion, OutputFile, TensorFile, same_file, window_slack};
use crate::journal::{JobKey, Journal};
use crate::plan::{DEFAULT_DEPTH, DEFAULT_MAX_TILE_BYTES, Plan, PlanRequest};
use crate::scheduler::TileKernel;
use crate::scheduler::{self, InputStream, Progress, StageTimes, Stream};

mod array;
mod batches;
mod blocks;
mod box_op;
mod boxed;
mod elementwise;
mod histogram;
mod host;
mod imagery;
mod nodata;
mod outputs;
mod patches;
mod quantile;
mod reduce;
mod report;
mod standardize;

pub use array::{Array, write_npz};
pub use batches::{
    Batch, BatchPart, BatchPlan, BatchRequest, BatchStream, Next, Shuffle, ShuffleWindow,
};
pub use blocks::{
    Block, BlockFn, BlockInput, BlockOut, BlockShape, Blocks, BlocksOut, BlocksPlan,
    FunctionRunner, Working,
};
pub(crate) use box_op::ImageNeeds;
pub(crate) use imagery::transposed_shape;
pub use nodata::MapNodata;
pub use patches::{Edge, PatchFormat, PatchSpec};
pub use reduce::merge_partials;
pub(crate) use report::Ran;
pub use report::{RunReport, peak_rss};

/// A progress callback shared with the pipeline threads.
pub type ProgressCallback = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Runs operations on on-disk tensors under one memory budget.
#[derive(Clone)]
pub struct Engine {
    budget: MemoryBudget,
    backend: Arc<dyn Backend>,
    depth: usize,
    max_tile_bytes: u64,
    /// The CUDA driver's host memory, taken out of the caller's budget (0 on the CPU).
    driver_bytes: u64,
    progress: Option<ProgressCallback>,
    durable: bool,
    cancel: Arc<AtomicBool>,
    job: Option<(JobKey, bool)>,
    tiff_out: TiffWriteOptions,
    zarr_out: ZarrWriteOptions,
    georef: Option<(GeoRef, (usize, usize))>,
    out_format: Option<OutFormat>,
    device: DeviceRequest,
    gpu_memory: Option<u64>,
    /// A device's memory budget to plan for without one (tests of the device planning
    /// paths on machines with no GPU): see [`Engine::with_simulated_device`].
    simulated_device: Option<u64>,
    cuda: Option<Arc<CudaDevice>>,
    out_region: Option<OutRegion>,
    /// What plans made with this engine set aside for encoding their output (only on
    /// the engine [`Engine::plan_writing`] hands its planner).
    out_reserve: Option<OutReserve>,
    /// What runs the functions pipeline steps name (set by the Python package).
    functions: Option<Arc<dyn FunctionRunner>>,
}

/// Bytes a plan sets aside for encoding a GeoTIFF or Zarr output as the run writes it,
/// what they are, and the tile height its chunks want the bands visited inner for
/// ([`crate::plan::PlanRequest::bands_inner`]: a pixel-interleaved GeoTIFF). Set on the
/// engine [`Engine::plan_writing`] hands its planner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutReserve {
    bytes: u64,
    what: &'static str,
    bands_inner: Option<usize>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("budget", &self.budget)
            .field("backend", &self.backend.describe())
            .field("depth", &self.depth)
            .field("max_tile_bytes", &self.max_tile_bytes)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine with the CPU backend on all cores, pipeline depth 3, 16 MiB tiles at most.
    ///
    /// # Errors
    /// If the worker threads cannot start.
    pub fn new(budget: MemoryBudget) -> Result<Self> {
        Ok(Engine {
            budget,
            backend: Arc::new(CpuBackend::new(None)?),
            depth: DEFAULT_DEPTH,
            max_tile_bytes: DEFAULT_MAX_TILE_BYTES,
            driver_bytes: 0,
            progress: None,
            durable: true,
            cancel: Arc::new(AtomicBool::new(false)),
            job: None,
            tiff_out: TiffWriteOptions::default(),
            zarr_out: ZarrWriteOptions::default(),
            georef: None,
            out_format: None,
            device: DeviceRequest::Auto,
            gpu_memory: None,
            simulated_device: None,
            cuda: None,
            out_region: None,
            out_reserve: None,
            functions: None,
        })
    }

    /// Where runs compute: `auto` (the default), `cpu`, or `cuda`/`cuda:N`. Asking for
    /// a CUDA device opens it at once (so a missing GPU is refused before any work),
    /// with the device budget of [`Engine::with_gpu_memory`] (set that first).
    ///
    /// With `cuda`, affine, cast, standardize, map, matmul, reduce, transpose and the
    /// filters (medians up to 7x7) run their CUDA kernels (tiles staged through page-locked slots, a ring of streams); every other
    /// operation runs on the CPU and the run report says so. `auto` stays on the CPU: the CUDA
    /// kernels passed the GPU suite on an H200 but ran slower there than its 16 cores
    /// (docs/gpu.md), and the run report says so too.
    ///
    /// The CUDA driver's own host memory ([`crate::device::driver_host_bytes`]) is the
    /// process's too: a CUDA engine takes it out of its budget and plans with the rest.
    ///
    /// # Errors
    /// [`Error::Device`] for `cuda` when the binary has no CUDA support, the driver
    /// cannot be loaded or the device does not exist; [`Error::Invalid`] when the budget
    /// does not exceed the driver's own host memory.
    pub fn with_device(mut self, device: DeviceRequest) -> Result<Self> {
        // the budget the caller gave, before any driver's share was taken from it
        let given = self.budget.limit() + self.driver_bytes;
        let mut driver = 0;
        if let DeviceRequest::Cuda(n) = device {
            let n = n.unwrap_or(0);
            self.cuda = Some(Arc::new(CudaDevice::open(n, self.gpu_memory)?));
            // the driver's own host memory is the process's too: it comes out of the
            // budget, so that peak RSS stays within it (device::driver_host_bytes)
            // (a budget just above it is the planner's to judge, with its arithmetic)
            driver = crate::device::driver_host_bytes();
            if given <= driver {
                let least = driver + (16 << 20);
                return Err(Error::invalid(format!(
                    "`memory={}` is too small for a run on cuda:{n}: the CUDA driver holds {} \
                     of host memory of its own in this process, counted in the budget; give \
                     `memory={}` or more (the driver's share and some tiles), or `device=cpu`",
                    crate::budget::fmt_bytes(given),
                    crate::budget::fmt_bytes(driver),
                    crate::budget::fmt_bytes(least.next_multiple_of(1 << 20))
                )));
            }
        } else {
            // a CPU engine again: nothing of the device's is used, nor counted
            self.cuda = None;
        }
        if driver != self.driver_bytes {
            self.budget = MemoryBudget::new(given - driver);
            self.driver_bytes = driver;
        }
        self.device = device;
        Ok(self)
    }

    /// A budget error as the caller's `memory` sees it: on a GPU engine the planner was
    /// given the budget less the CUDA driver's share, so the share is added back to the
    /// figures the message gives ([`crate::budget::BudgetError::plus_outside`]).
    pub(crate) fn as_given(&self, e: Error) -> Error {
        match e {
            Error::Budget(b) if self.driver_bytes > 0 => Error::Budget(
                b.plus_outside(self.driver_bytes, "the CUDA driver's own host memory"),
            ),
            other => other,
        }
    }

    /// Host memory the CUDA driver holds, taken from the budget for a GPU run (0 on the
    /// CPU): [`crate::device::driver_host_bytes`] when the device was opened.
    #[must_use]
    pub fn driver_bytes(&self) -> u64 {
        self.driver_bytes
    }

    #[doc(hidden)]
    /// Plans every operation as it would on a GPU with a device budget of `memory` bytes,
    /// without a GPU: the tiles are sized for both budgets and the host's share of a
    /// device run (page-locked totals, a decoded window beside the slots) is counted, as
    /// with `--device cuda`. Compute still runs on the CPU (with those smaller tiles), so
    /// a simulated engine is for testing the device planning paths on machines with no
    /// GPU, where nothing else can reach them.
    #[must_use]
    pub fn with_simulated_device(mut self, memory: u64) -> Self {
        self.simulated_device = Some(memory);
        self
    }

    /// The device budget plans are sized for: the GPU's when one computes, else a
    /// simulated one's.
    pub(crate) fn planning_device(&self) -> Option<u64> {
        self.cuda
            .as_ref()
            .map(|d| d.budget().limit())
            .or(self.simulated_device)
    }

    /// The device memory budget for `--device cuda` (default: 90% of what the device
    /// has free when it is opened). Call before [`Engine::with_device`].
    #[must_use]
    pub fn with_gpu_memory(mut self, bytes: Option<u64>) -> Self {
        self.gpu_memory = bytes;
        self
    }

    /// The device an operation of `family` runs on, chosen once per operation: the
    /// engine's GPU when it computes on one (`--device cuda`) and has a kernel for the
    /// family, else the host backend. The engine asks it for the run's kernel
    /// ([`Kernels`]) and never names the device's types.
    fn kernels_for(&self, family: Family) -> &dyn Kernels {
        match &self.cuda {
            Some(dev) if dev.has_kernel(family) => dev,
            _ => &*self.backend,
        }
    }

    /// Uses `n` CPU worker threads.
    ///
    /// # Errors
    /// [`Error::Invalid`] for 0 threads.
    pub fn with_threads(mut self, n: usize) -> Result<Self> {
        self.backend = Arc::new(CpuBackend::new(Some(n))?);
        Ok(self)
    }

    #[doc(hidden)]
    /// Uses another backend.
    #[must_use]
    pub fn with_backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    /// Whether outputs are flushed to disk before they are renamed into place (default
    /// true; writeback of each tile starts as soon as it is written). Off, an output is
    /// still complete and atomically renamed when the call returns, but sits in the page
    /// cache: a power failure soon after may lose it, as with `cp` or `np.save`.
    #[must_use]
    pub fn with_durable(mut self, yes: bool) -> Self {
        self.durable = yes;
        self
    }

    #[doc(hidden)]
    /// Makes the runs of this engine write their output into rows of an existing `.npy`
    /// at the output path (made whole beforehand, by
    /// [`create_npy_for_rows`](crate::format::create_npy_for_rows)) instead of creating
    /// it, as `region` says: how the tasks of a job split over a cluster each write their
    /// rows of one output. Such runs are not resumable (a retried task rewrites its rows).
    #[must_use]
    pub fn with_output_region(mut self, region: Option<OutRegion>) -> Self {
        self.out_region = region;
        self
    }

    /// Makes the runs of this engine resumable: each keeps a journal beside its output
    /// (see [`JobKey`](crate::JobKey)) that records the tiles done; with `resume`, a run takes
    /// up what an interrupted run of the same `key` left and continues after its last
    /// completed tile. An interrupted run (Ctrl-C, [`Engine::cancel_token`]) then keeps
    /// its temporary output and journal instead of removing them. `key` must describe
    /// the whole operation and its inputs: a journal written under another key is
    /// refused.
    #[must_use]
    pub fn with_journal(mut self, key: JobKey, resume: bool) -> Self {
        self.job = Some((key, resume));
        self
    }

    /// Sets the pipeline depth (staging slots, at least 1; 2-3 is enough to overlap stages).
    #[must_use]
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    /// Caps one tile's staging bytes (default 16 MiB on either device: on the CPU a
    /// tile's windows stay in the caches; on a GPU smaller tiles keep reading, copying
    /// and the kernels overlapped, and a tile's launches cost far less than its copy).
    #[must_use]
    pub fn with_max_tile_bytes(mut self, bytes: u64) -> Self {
        self.max_tile_bytes = bytes.max(1);
        self
    }

    /// Calls `f` after every tile with the run's progress.
    #[must_use]
    pub fn with_progress(mut self, f: ProgressCallback) -> Self {
        self.progress = Some(f);
        self
    }

    /// The budget.
    #[must_use]
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// A plan request over `shape` reading `inputs`: the budget it plans with is the
    /// engine's less what decoding compressed inputs holds (see
    /// [`TensorFile::read_scratch_bytes`]).
    fn request(&self, what: String, shape: &[usize], inputs: &[&TensorFile]) -> PlanRequest {
        let (mut resident_bytes, mut resident_what) = decode_scratch(self.budget.limit(), inputs);
        let bands_inner = self.out_reserve.and_then(|r| r.bands_inner);
        if let Some(r) = self.out_reserve.filter(|r| r.bytes > 0) {
            hold(
                &mut resident_bytes,
                &mut resident_what,
                r.bytes,
                r.what.to_string(),
            );
        }
        PlanRequest {
            what,
            shape: shape.to_vec(),
            in_bytes_per_elem: 0,
            inputs: 0,
            out_bytes_per_elem: 0,
            resident_bytes,
            resident_what,
            scratch_per_elem: 0,
            depth: self.depth,
            budget: self.budget.limit(),
            max_tile_bytes: self.max_tile_bytes,
            window_slack: window_slack(),
            min_tile: crate::plan::MIN_TILE_ELEMS,
            device: None,
            chunked_inputs: inputs.iter().any(|f| f.chunked().is_some()),
            bands_inner,
            chunk_rows: chunk_rows(shape, inputs),
        }
    }

    /// Sizes `req`'s tiles for the device's memory too when this engine computes on a
    /// GPU: each stream holds a tile's inputs and output (`req`'s staging bytes per
    /// element) plus `extra_per_elem` per element and `per_stream` bytes, and `resident`
    /// bytes stay on the device for the run. Call after setting the staging bytes.
    fn on_device(
        &self,
        req: &mut PlanRequest,
        extra_per_elem: u64,
        per_stream: u64,
        resident: u64,
    ) {
        if let Some(limit) = self.planning_device() {
            if req.chunked_inputs && req.inputs > 0 {
                // the read stage's decoded window, copied into a page-locked slot: one
                // tile's inputs, held once (see scheduler::run_layout)
                req.scratch_per_elem += req.in_bytes_per_elem;
                req.resident_bytes += req.inputs as u64 * req.window_slack;
                req.resident_what.push_str(if req.resident_what.is_empty() {
                    "page slack of the decoded window"
                } else {
                    ", page slack of the decoded window"
                });
            }
            req.device = Some(crate::plan::DeviceFit {
                budget: limit,
                resident_bytes: resident,
                bytes_per_elem: req.in_bytes_per_elem + req.out_bytes_per_elem + extra_per_elem,
                per_stream,
            });
        }
    }

    fn stream<'a>(
        &'a self,
        plan: &'a Plan,
        inputs: &'a [InputStream<'a>],
        output: Option<&'a OutputFile>,
    ) -> Stream<'a> {
        Stream {
            plan,
            budget: &self.budget,
            inputs,
            output,
            out_per_item: 1,
            progress: self
                .progress
                .as_deref()
                .map(|p| p as &(dyn Fn(&Progress) + Sync)),
            cancel: Some(&self.cancel),
            journal: None,
        }
    }

    /// A per-tile closure as a kernel on this engine's backend (which allocates its
    /// staging slots).
    pub(crate) fn kernel<T, F>(&self, compute: F) -> OnBackend<'_, F>
    where
        F: FnMut(T, &[&[u8]], &mut [u8]) -> Result<()> + Send,
    {
        OnBackend::new(&*self.backend, compute)
    }

    /// The stop flag of this engine's runs: set it (from a signal handler, another
    /// thread...) and the run in progress stops after its tile in flight with
    /// [`Error::Interrupted`], leaving nothing at the output path. Runs started while it
    /// is set stop at once.
    #[must_use]
    pub fn cancel_token(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// The life of a written output: created as a temporary file beside `out` (within
    /// `journal`, if the run is resumable), filled by `fill`, then flushed and renamed
    /// into place. On error the temporary file is removed and nothing appears at `out`.
    /// `stream_room`: what the plan set aside for encoding a GeoTIFF or Zarr output as
    /// the run writes it (a flat plan's, [`Engine::plan_writing`]; a box plan's cut along
    /// the output's chunks, [`outputs::room_of_box`]); the output is then encoded
    /// as written when that room holds the encoder ([`OutputFile::with_tiff_stream`],
    /// [`OutputFile::with_zarr_stream`]), else refused before anything is written.
    fn to_file_with(
        &self,
        journal: Option<Journal>,
        out: &Path,
        shape: &[usize],
        dtype: DType,
        stream_room: Option<Room>,
        fill: impl FnOnce(&OutputFile, Option<&Journal>) -> Result<StageTimes>,
    ) -> Result<StageTimes> {
        let format = self.format_of(out);
        let output = match (&journal, self.out_region) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "a run writing into rows of an existing file cannot be resumable",
                ));
            }
            // the file (a temporary name) is checked to be a `.npy` by its content
            (None, Some(region)) if out.join("zarr.json").is_file() => {
                let budget = self.budget.limit();
                let rows =
                    OutputFile::zarr_region(out, region, shape, dtype, &self.zarr_out, budget)?;
                // encoded as the run writes it when its plan set room aside for that (a
                // box plan's chunks are the store's: sized on its shape)
                let store = TensorFile::open_zarr(out)?;
                let open = stream_room.and_then(|r| r.open);
                let sized = if open.is_some() { store.shape() } else { shape };
                let fit = match (stream_room, self.planning_encoding_as(OutFormat::of(out))) {
                    (Some(r), Some(encoding)) => encoding.fit(sized, dtype, r)?,
                    _ => None,
                };
                self.streamed(rows, fit, || self.cannot_stream(out, sized, dtype, open))?
            }
            (None, Some(region)) => {
                OutputFile::region(out, region, shape, dtype)?.durable(self.durable)
            }
            (Some(j), None) => j.output(shape, dtype, self.durable, format)?,
            (None, None) => OutputFile::create_as(out, shape, dtype, format)?.durable(self.durable),
        };
        let output = if self.out_region.is_some() {
            output
        } else {
            self.encoded_as(output, out, format, stream_room)?
        };
        match fill(&output, journal.as_ref()) {
            Ok(mut times) => {
                let t0 = std::time::Instant::now();
                self.finish_output(output)?;
                // the run is not over until its output is: encoding counts in its time
                times.finish = t0.elapsed();
                times.wall += times.finish;
                if let Some(j) = journal {
                    j.finish();
                }
                Ok(times)
            }
            Err(e) => {
                let e = kept_if_interrupted(journal.as_ref(), e);
                if journal.as_ref().is_some_and(Journal::kept) {
                    output.keep();
                }
                Err(e)
            }
        }
    }

    /// The journal of a run writing `out`, if this engine's runs are resumable.
    fn open_journal(&self, out: &Path) -> Result<Option<Journal>> {
        self.job
            .as_ref()
            .map(|(key, resume)| {
                // what reading an interrupted run's journal may take: half the budget,
                // at least 4 MiB (a journal takes about 30 bytes a tile; the budget is
                // not in use yet)
                let max = (self.budget.limit() / 2).max(4 << 20);
                Journal::open(out, key, *resume, max)
            })
            .transpose()
    }

    /// [`Engine::to_file_with`] filled by the pipeline over a flat plan (`kernel` per tile:
    /// [`Engine::kernel`] of a closure on the CPU, or a device's kernel).
    #[allow(clippy::too_many_arguments)]
    fn run_to_file<K>(
        &self,
        plan: &Plan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
        out_per_item: u64,
        kernel: K,
    ) -> Result<StageTimes>
    where
        K: TileKernel<crate::plan::Tile>,
    {
        let journal = self.open_journal(out)?;
        self.run_to_file_with(
            journal,
            plan,
            inputs,
            out,
            shape,
            dtype,
            out_per_item,
            kernel,
        )
    }

    /// [`Engine::run_to_file`] within a journal already open.
    #[allow(clippy::too_many_arguments)]
    fn run_to_file_with<K>(
        &self,
        journal: Option<Journal>,
        plan: &Plan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
        out_per_item: u64,
        kernel: K,
    ) -> Result<StageTimes>
    where
        K: TileKernel<crate::plan::Tile>,
    {
        // only what the plan set aside: the rest of the budget is the pipeline's slack
        let room = Some(plan.output_bytes)
            .filter(|&b| b > 0)
            .map(|bytes| Room {
                bytes,
                open: None,
                bands_inner: plan.bands_inner,
            });
        self.to_file_with(journal, out, shape, dtype, room, |output, journal| {
            let mut stream = self.stream(plan, inputs, Some(output));
            stream.out_per_item = out_per_item;
            stream.journal = journal;
            scheduler::run(&stream, kernel)
        })
    }
}

/// Whether `dev` computes on a GPU (what a run report says of an operation's placement).
pub(crate) fn on_gpu(dev: &dyn Kernels) -> bool {
    dev.device() != crate::backend::Device::Cpu
}

/// Marks the journal kept when `e` is an interruption (the run can be resumed).
fn kept_if_interrupted(journal: Option<&Journal>, e: Error) -> Error {
    if let (Some(j), Error::Interrupted { .. }) = (journal, &e) {
        j.keep();
    }
    e
}

/// The decode scratch of compressed `inputs` (held for a whole run, reserved by the
/// pipeline; planners count it among the resident bytes so that tiles leave room for it)
/// and its description, the starting point of a plan's resident bytes. The scratch is
/// sized here from the budget `limit`: up to half of it shared among the compressed
/// inputs (a chunk cache that holds the chunk rows consecutive tiles share saves more
/// than larger tiles would), never less than one chunk decoded at a time (see
/// [`crate::format::chunked::Chunked::fit_scratch`]), so that a compressed input runs
/// at any budget that holds one decoded chunk and the smallest tile. Calling it again
/// with the same arguments gives the same figures.
fn decode_scratch(limit: u64, inputs: &[&TensorFile]) -> (u64, String) {
    let mut distinct: Vec<&TensorFile> = Vec::new();
    for f in inputs {
        if f.chunked().is_some() && !distinct.iter().any(|g| std::ptr::eq(*g, *f)) {
            distinct.push(f);
        }
    }
    let share = limit / 2 / (distinct.len().max(1) as u64);
    let mut bytes = 0;
    let mut what = Vec::new();
    for f in &distinct {
        f.fit_read_scratch(share);
        bytes += f.read_scratch_bytes();
        if let Some(c) = f.chunked() {
            what.push(c.describe_scratch());
        }
    }
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("decode scratch of compressed input ({})", what.join("; "))
    };
    (bytes, what)
}

/// Adds `bytes` of `what` to a plan's resident bytes and their description.
fn hold(bytes: &mut u64, desc: &mut String, add: u64, what: String) {
    *bytes += add;
    if desc.is_empty() {
        *desc = what;
    } else {
        *desc = format!("{what} + {desc}");
    }
}

pub(crate) fn check_not_input(out: &Path, inputs: &[&TensorFile]) -> Result<()> {
    for i in inputs {
        if same_file(out, i.path()) {
            return Err(Error::invalid(format!(
                "output {} is also an input: write to another file",
                out.display()
            )));
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut tmp = crate::format::temp_beside(path)?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::io("write", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename the finished output to", path, e.error))?;
    Ok(())
}

/// The height of the chunks of the first input of `shape` decoded in chunks, for the
/// planner to align tile rows to ([`PlanRequest::chunk_rows`]): `None` below rank 2 or
/// when every such input is mapped.
fn chunk_rows(shape: &[usize], inputs: &[&TensorFile]) -> Option<usize> {
    let rank = shape.len();
    if rank < 2 {
        return None;
    }
    inputs.iter().find_map(|f| {
        let c = f.aligned_chunk_shape()?;
        (f.shape() == shape && c.len() == rank && c[rank - 2] > 1).then(|| c[rank - 2])
    })
}
