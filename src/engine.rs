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

use serde::Serialize;

use crate::backend::cuda::source::Elementwise;
use crate::backend::cuda::{CudaDevice, CudaElementwise, ElementwiseParams};
use crate::backend::{Backend, CpuBackend, OnBackend};
use crate::budget::{MemoryBudget, fmt_bytes};
use crate::device::DeviceRequest;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::journal::{JobKey, Journal};
use crate::ops::expr::{self, Program};
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, TileReducer};
use crate::plan::{DEFAULT_DEPTH, DEFAULT_MAX_TILE_BYTES, Plan, PlanRequest};
use crate::scheduler::TileKernel;
use crate::scheduler::{self, InputStream, Progress, StageTimes, Stream};
use crate::tensor::geotiff::{GeoRef, TiffWriteOptions};
use crate::tensor::zarr::ZarrWriteOptions;
use crate::tensor::{OutFormat, OutputFile, TensorFile, fmt_shape, same_file, window_slack};

mod imagery;

pub use imagery::{Edge, PatchFormat, PatchSpec};

/// Operations with a CUDA kernel (the first word of their run report's `op`).
const CUDA_OPS: [&str; 4] = ["affine", "cast", "map", "standardize"];

/// A progress callback shared with the pipeline threads.
pub type ProgressCallback = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Runs operations on on-disk tensors under one memory budget.
#[derive(Clone)]
pub struct Engine {
    budget: MemoryBudget,
    backend: Arc<dyn Backend>,
    depth: usize,
    max_tile_bytes: u64,
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
    cuda: Option<Arc<CudaDevice>>,
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

/// What a run did: tiles, bytes, time per stage, memory.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The operation, in words.
    pub op: String,
    /// Backend that computed it.
    pub backend: String,
    /// Shape of the streamed tensor.
    pub input_shape: Vec<usize>,
    /// Shape of the result.
    pub output_shape: Vec<usize>,
    /// Dtype of the result.
    pub output_dtype: String,
    /// Number of tiles.
    pub tiles: usize,
    /// Shape of a full tile.
    pub tile_shape: Vec<usize>,
    /// Staging slots.
    pub depth: usize,
    /// Worker threads.
    pub threads: usize,
    /// Bytes read from inputs.
    pub bytes_read: u64,
    /// Bytes written to the output.
    pub bytes_written: u64,
    /// Wall time in seconds.
    pub wall_s: f64,
    /// (bytes read + bytes written) / wall time, in GB/s (10^9).
    pub gb_per_s: f64,
    /// Seconds the read stage was busy (mapping and faulting in windows).
    pub read_busy_s: f64,
    /// Seconds the compute stage was busy.
    pub compute_busy_s: f64,
    /// Seconds the write stage was busy.
    pub write_busy_s: f64,
    /// The budget, in bytes.
    pub budget_bytes: u64,
    /// Most bytes reserved at once.
    pub peak_reserved_bytes: u64,
    /// Peak resident set of the whole process so far, in bytes (getrusage).
    pub peak_rss_bytes: u64,
    /// Tiles found done by an interrupted run and skipped (`--resume`).
    pub resumed_tiles: usize,
    /// The device asked for: `auto`, `cpu`, `cuda` or `cuda:N`.
    pub device_requested: String,
    /// The device that computed: `cpu` or `cuda:N`.
    pub device: String,
    /// Why the run is on that device when another was asked for or could have been
    /// (`--device auto` or `cuda`): "no CUDA kernel for reduce yet".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_note: Option<String>,
    /// Seconds spent finishing the output after the last tile (encoding a GeoTIFF or
    /// Zarr output, flushing, renaming), included in `wall_s`.
    pub finish_s: f64,
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} -> {} {}",
            self.op,
            fmt_shape(&self.output_shape),
            self.output_dtype
        )?;
        writeln!(
            f,
            "  {} tiles of {} on {}, depth {}",
            self.tiles,
            fmt_shape(&self.tile_shape),
            self.backend,
            self.depth
        )?;
        writeln!(
            f,
            "  read {} written {} in {:.3} s = {:.2} GB/s",
            fmt_bytes(self.bytes_read),
            fmt_bytes(self.bytes_written),
            self.wall_s,
            self.gb_per_s
        )?;
        writeln!(
            f,
            "  busy: read {:.3} s, compute {:.3} s, write {:.3} s, finish (encode, flush) {:.3} s",
            self.read_busy_s, self.compute_busy_s, self.write_busy_s, self.finish_s
        )?;
        write!(
            f,
            "  memory: peak reserved {} of {} budget; peak RSS {}",
            fmt_bytes(self.peak_reserved_bytes),
            fmt_bytes(self.budget_bytes),
            fmt_bytes(self.peak_rss_bytes)
        )?;
        if let (Some(note), false) = (&self.device_note, self.device_requested == "auto") {
            write!(f, "\n  device: {} ({note})", self.device)?;
        }
        if self.resumed_tiles > 0 {
            write!(
                f,
                "\n  resumed: {} tiles were done by the interrupted run",
                self.resumed_tiles
            )?;
        }
        Ok(())
    }
}

/// Peak resident set size of this process in bytes.
#[must_use]
pub fn peak_rss() -> u64 {
    // SAFETY: getrusage writes into the struct we pass; zeroed is a valid initial value.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) == 0 {
            ru.ru_maxrss as u64 * 1024
        } else {
            0
        }
    }
}

/// An in-memory result (small: reductions produce these).
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Array {
    /// Wraps little-endian C-order bytes.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the byte count does not match shape and dtype.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n * dtype.size() != data.len() {
            return Err(Error::invalid(format!(
                "{} bytes do not make a {} {dtype} array",
                data.len(),
                fmt_shape(&shape)
            )));
        }
        Ok(Array { dtype, shape, data })
    }

    /// Element type.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape (empty for a scalar).
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// True if there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The raw bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The elements as `T`, or `None` if `T` is not this array's dtype.
    #[must_use]
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.dtype).then(|| bytemuck::pod_collect_to_vec(&self.data))
    }

    /// The elements widened to f64.
    #[must_use]
    pub fn to_f64(&self) -> Vec<f64> {
        crate::dispatch_dtype!(self.dtype, T => {
            bytemuck::pod_collect_to_vec::<u8, T>(&self.data).into_iter().map(Element::to_f64).collect()
        })
    }

    /// Casts to another dtype (through f64, with tilestream's cast rules).
    #[must_use]
    pub fn cast(&self, to: DType) -> Array {
        if to == self.dtype {
            return self.clone();
        }
        let mut out = vec![0u8; self.len() * to.size()];
        // one call on the whole (small) array; alignment handled by the kernel
        let mut words = vec![0u64; out.len().div_ceil(8)];
        let dst = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..out.len()];
        crate::ops::elementwise::affine_bytes(&self.data, self.dtype, dst, to, 1.0, 0.0);
        out.copy_from_slice(dst);
        Array {
            dtype: to,
            shape: self.shape.clone(),
            data: out,
        }
    }

    /// Writes the array to `path` (`.npy` by extension, raw otherwise), atomically.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let out = OutputFile::create(path, &self.shape, self.dtype)?;
        out.write_at(0, &self.data)?;
        out.finish()
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
            cuda: None,
        })
    }

    /// Where runs compute: `auto` (the default), `cpu`, or `cuda`/`cuda:N`. Asking for
    /// a CUDA device opens it at once (so a missing GPU is refused before any work),
    /// with the device budget of [`Engine::with_gpu_memory`] (set that first).
    ///
    /// With `cuda`, affine, cast and standardize run their CUDA kernels (tiles staged
    /// through page-locked slots, a ring of streams); every other operation runs on
    /// the CPU and the run report says so. `auto` stays on the CPU until the CUDA
    /// kernels have passed the GPU suite on real hardware, and says so too.
    ///
    /// # Errors
    /// [`Error::Device`] for `cuda` when the binary has no CUDA support, the driver
    /// cannot be loaded or the device does not exist.
    pub fn with_device(mut self, device: DeviceRequest) -> Result<Self> {
        if let DeviceRequest::Cuda(n) = device {
            self.cuda = Some(Arc::new(CudaDevice::open(n.unwrap_or(0), self.gpu_memory)?));
        }
        self.device = device;
        Ok(self)
    }

    /// The device memory budget for `--device cuda` (default: 90% of what the device
    /// has free when it is opened). Call before [`Engine::with_device`].
    #[must_use]
    pub fn with_gpu_memory(mut self, bytes: Option<u64>) -> Self {
        self.gpu_memory = bytes;
        self
    }

    /// The device runs compute on, and why, for an operation named `op`.
    fn placement(&self, op: &str) -> (String, Option<String>) {
        let kind = op.split_whitespace().next().unwrap_or(op);
        let has_kernel = CUDA_OPS.contains(&kind);
        match (self.device, &self.cuda) {
            (DeviceRequest::Cpu, _) => ("cpu".into(), None),
            (DeviceRequest::Cuda(_), Some(dev)) if has_kernel => {
                (format!("cuda:{}", dev.info().ordinal), None)
            }
            (DeviceRequest::Cuda(_), Some(dev)) => (
                "cpu".into(),
                Some(format!(
                    "no CUDA kernel for {kind} yet: ran on the CPU, not on cuda:{} ({})",
                    dev.info().ordinal,
                    dev.info().name
                )),
            ),
            _ if has_kernel => (
                "cpu".into(),
                Some(format!(
                    "auto: the CUDA kernel for {kind} has not passed the GPU suite on a GPU yet; --device cuda runs it"
                )),
            ),
            _ => (
                "cpu".into(),
                Some(format!("auto: no CUDA kernel for {kind} yet")),
            ),
        }
    }

    /// How GeoTIFF outputs (`.tif`/`.tiff` destinations) are written: tile size,
    /// compression, interleave (default 512x512 Deflate tiles, band-sequential). Its
    /// `georef` and `memory` are ignored: see [`Engine::with_georef`]; the encoder works
    /// within this engine's budget.
    #[must_use]
    pub fn with_tiff_output(mut self, opts: TiffWriteOptions) -> Self {
        self.tiff_out = opts;
        self
    }

    /// Writes outputs in `format` whatever their names say (`None`: by extension, the
    /// default).
    #[must_use]
    pub fn with_out_format(mut self, format: Option<OutFormat>) -> Self {
        self.out_format = format;
        self
    }

    /// The format `out` is written in.
    fn format_of(&self, out: &Path) -> OutFormat {
        self.out_format.unwrap_or_else(|| OutFormat::of(out))
    }

    /// How Zarr v3 outputs (`.zarr` destinations) are written: chunk and shard shapes,
    /// compression (default 512x512 chunks over the last two axes, zstd level 3). Its
    /// `memory` is ignored: the encoder works within this engine's budget.
    #[must_use]
    pub fn with_zarr_output(mut self, opts: ZarrWriteOptions) -> Self {
        self.zarr_out = opts;
        self
    }

    /// Georeferencing written to GeoTIFF outputs whose grid is `rows x cols` (the
    /// input's). Outputs of another grid (a reduction, a transpose of a non-square
    /// image) are written without it, with a note on stderr.
    #[must_use]
    pub fn with_georef(mut self, georef: Option<(GeoRef, (usize, usize))>) -> Self {
        self.georef = georef;
        self
    }

    /// The georeferencing of `input` (with its grid), for [`Engine::with_georef`].
    #[must_use]
    pub fn georef_of(input: &TensorFile) -> Option<(GeoRef, (usize, usize))> {
        let g = input.georef()?.clone();
        let (_, h, w) = crate::tensor::geotiff::image_dims(input.shape()).ok()?;
        Some((g, (h, w)))
    }

    /// `output` set to be encoded as `format` says, with this engine's GeoTIFF or Zarr
    /// options (nothing to do for `.npy` and raw).
    fn encoded_as(&self, output: OutputFile, out: &Path, format: OutFormat) -> Result<OutputFile> {
        match format {
            OutFormat::GeoTiff => {
                let opts = self.tiff_options(out, output.shape());
                output.with_tiff(opts)
            }
            OutFormat::Zarr => {
                // refused before the run, not after it: chunks the budget cannot encode
                crate::tensor::zarr::chunk_shapes(
                    &self.zarr_out,
                    output.shape(),
                    output.dtype(),
                    self.budget.limit(),
                )?;
                Ok(output.with_zarr(self.zarr_out.clone()))
            }
            OutFormat::Npy | OutFormat::Raw => Ok(output),
        }
    }

    /// Finishes `output`; a staged one is encoded with what the budget has left, reserved
    /// for the time (tiles or chunks in flight).
    fn finish_output(&self, mut output: OutputFile) -> Result<()> {
        let _encoding = if output.is_staged() {
            let free = self.budget.limit().saturating_sub(self.budget.reserved());
            output.set_encode_memory(free);
            Some(self.budget.reserve("GeoTIFF/Zarr encoding", free)?)
        } else {
            None
        };
        output.finish()
    }

    /// The GeoTIFF options for an output of `shape` at `out`.
    fn tiff_options(&self, out: &Path, shape: &[usize]) -> TiffWriteOptions {
        let mut o = self.tiff_out.clone();
        o.memory = self.budget.limit();
        o.georef = match (&self.georef, crate::tensor::geotiff::image_dims(shape)) {
            (Some((g, grid)), Ok((_, h, w))) if *grid == (h, w) => Some(g.clone()),
            (Some((_, grid)), _) => {
                eprintln!(
                    "note: {} is written without georeferencing: its grid {} is not the \
                     input's {}x{}",
                    out.display(),
                    fmt_shape(shape),
                    grid.0,
                    grid.1
                );
                None
            }
            (None, _) => None,
        };
        o
    }

    /// Uses `n` CPU worker threads.
    ///
    /// # Errors
    /// [`Error::Invalid`] for 0 threads.
    pub fn with_threads(mut self, n: usize) -> Result<Self> {
        self.backend = Arc::new(CpuBackend::new(Some(n))?);
        Ok(self)
    }

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

    /// Makes the runs of this engine resumable: each keeps a journal beside its output
    /// (see [`crate::journal`]) that records the tiles done; with `resume`, a run takes
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

    /// Caps one tile's staging bytes (default 16 MiB).
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
        let (resident_bytes, resident_what) = decode_scratch(inputs);
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
        }
    }

    fn report(
        &self,
        plan: &Plan,
        op: String,
        input_shape: &[usize],
        out_shape: &[usize],
        out_dtype: DType,
        t: StageTimes,
    ) -> RunReport {
        let tiles = (plan.num_tiles, plan.tile_shape.clone(), plan.depth);
        self.report_tiles(tiles, op, input_shape, out_shape, out_dtype, t)
    }

    /// A run's report from its tile count, tile shape and depth.
    fn report_tiles(
        &self,
        (tiles, tile_shape, depth): (usize, Vec<usize>, usize),
        op: String,
        input_shape: &[usize],
        out_shape: &[usize],
        out_dtype: DType,
        t: StageTimes,
    ) -> RunReport {
        let secs = t.wall.as_secs_f64();
        let (device, device_note) = self.placement(&op);
        RunReport {
            op,
            backend: self.backend.describe(),
            input_shape: input_shape.to_vec(),
            output_shape: out_shape.to_vec(),
            output_dtype: out_dtype.name().into(),
            tiles,
            tile_shape,
            depth,
            threads: self.backend.threads(),
            bytes_read: t.bytes_read,
            bytes_written: t.bytes_written,
            wall_s: secs,
            gb_per_s: if secs > 0.0 {
                (t.bytes_read + t.bytes_written) as f64 / secs / 1e9
            } else {
                0.0
            },
            read_busy_s: t.read.as_secs_f64(),
            compute_busy_s: t.compute.as_secs_f64(),
            write_busy_s: t.write.as_secs_f64(),
            budget_bytes: self.budget.limit(),
            peak_reserved_bytes: self.budget.peak(),
            peak_rss_bytes: peak_rss(),
            resumed_tiles: t.resumed_tiles,
            finish_s: t.finish.as_secs_f64(),
            device_requested: self.device.to_string(),
            device,
            device_note,
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

    /// The life of a written output: created as a temporary file beside `out`, filled by
    /// `fill`, then flushed and renamed into place. On error the temporary file is
    /// removed and nothing appears at `out`.
    fn to_file(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: DType,
        fill: impl FnOnce(&OutputFile, Option<&Journal>) -> Result<StageTimes>,
    ) -> Result<StageTimes> {
        let journal = self.open_journal(out)?;
        self.to_file_with(journal, out, shape, dtype, fill)
    }

    /// [`Engine::to_file`] within a journal already open (for operations whose earlier
    /// passes have no output).
    fn to_file_with(
        &self,
        journal: Option<Journal>,
        out: &Path,
        shape: &[usize],
        dtype: DType,
        fill: impl FnOnce(&OutputFile, Option<&Journal>) -> Result<StageTimes>,
    ) -> Result<StageTimes> {
        let format = self.format_of(out);
        let output = match &journal {
            Some(j) => j.output(shape, dtype, self.durable, format)?,
            None => OutputFile::create_as(out, shape, dtype, format)?.durable(self.durable),
        };
        let output = self.encoded_as(output, out, format)?;
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
            .map(|(key, resume)| Journal::open(out, key, *resume))
            .transpose()
    }

    /// [`Engine::to_file`] filled by the pipeline over a flat plan (`kernel` per tile:
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
        self.to_file_with(journal, out, shape, dtype, |output, journal| {
            let mut stream = self.stream(plan, inputs, Some(output));
            stream.out_per_item = out_per_item;
            stream.journal = journal;
            scheduler::run(&stream, kernel)
        })
    }

    /// The CUDA kernel of an elementwise operation, prepared for `plan`, when this
    /// engine computes on a GPU (`--device cuda`); `None` on the CPU.
    fn cuda_elementwise(
        &self,
        kind: Elementwise,
        input: DType,
        output: DType,
        params: &ElementwiseParams,
        plan: &Plan,
    ) -> Result<Option<CudaElementwise>> {
        match &self.cuda {
            Some(dev) => dev
                .elementwise(kind, input, output, params, plan.tile_elems, plan.depth)
                .map(Some),
            None => Ok(None),
        }
    }

    /// Plans a reduction without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad axis or an empty tensor; [`Error::Budget`] if the
    /// budget is too small.
    pub fn plan_reduce(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
    ) -> Result<Plan> {
        let over = over.into();
        let shape = input.shape();
        let dtype = input.dtype();
        let g = Geometry::new(shape, over)?;
        if input.info().is_empty() {
            return Err(Error::invalid(format!(
                "{}: cannot reduce an empty tensor (shape {})",
                input.path().display(),
                fmt_shape(shape)
            )));
        }
        let acc = op.acc_bytes(dtype);
        let result = g.outer * g.out_per_outer() * op.output_dtype(dtype).size() as u64;
        let states = (self.backend.threads() as u64 + 1) * g.state_bytes(acc);
        let over_txt = match over {
            ReduceOver::All => "all elements".to_string(),
            ReduceOver::Axis(a) => format!("axis {a}"),
        };
        let mut req = self.request(
            format!(
                "reduce {} over {over_txt} of {} {dtype}",
                op.name(),
                fmt_shape(shape)
            ),
            shape,
            &[input],
        );
        req.in_bytes_per_elem = dtype.size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            result + states,
            format!("result ({}) and accumulators", fmt_bytes(result)),
        );
        req.scratch_per_elem = g.scratch_per_elem(acc);
        Ok(Plan::new(&req)?)
    }

    /// Reduces `input` and returns the result in memory (its bytes count in the budget).
    ///
    /// # Errors
    /// As [`plan_reduce`](Self::plan_reduce), plus I/O errors while streaming.
    pub fn reduce(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
    ) -> Result<(Array, RunReport)> {
        self.reduce_with(input, op, over.into(), None)
    }

    /// [`Engine::reduce`], resumable through `journal`.
    fn reduce_with(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: ReduceOver,
        journal: Option<&Journal>,
    ) -> Result<(Array, RunReport)> {
        let plan = self.plan_reduce(input, op, over)?;
        self.budget.reset_peak();
        let g = Geometry::new(input.shape(), over)?;
        let _resident = self.budget.reserve(
            "reduction result and accumulators",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let mut reducer = self.backend.reducer(op, input.dtype(), g)?;
        let inputs = [InputStream::whole(input)];
        let mut stream = self.stream(&plan, &inputs, None);
        stream.journal = journal;
        let times = scheduler::run(
            &stream,
            self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], _: &mut [u8]| {
                restore_reducers(journal, &mut [&mut reducer])?;
                reducer.feed_bytes(tile.start, ins[0]);
                checkpoint_reducers(journal, tile.index, &[reducer.as_ref()])
            }),
        )?;
        // a pass resumed with every tile done never called the closure
        restore_reducers(journal, &mut [&mut reducer])?;
        let out_dtype = op.output_dtype(input.dtype());
        let out_shape: Vec<usize> = match over {
            ReduceOver::All => vec![],
            ReduceOver::Axis(a) => input
                .shape()
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != a)
                .map(|(_, &d)| d)
                .collect(),
        };
        let array = Array::from_bytes(out_dtype, out_shape.clone(), reducer.into_bytes())?;
        let report = self.report(
            &plan,
            plan.what.clone(),
            input.shape(),
            &out_shape,
            out_dtype,
            times,
        );
        Ok((array, report))
    }

    /// Reduces `input` and writes the result to `out` (`.npy` or raw), cast to `dtype` if given.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce), plus [`Error::Invalid`] if `out` is the input, and I/O
    /// errors writing `out`.
    pub fn reduce_to_file(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        let journal = self.open_journal(out.as_ref())?;
        let (array, mut report) = self
            .reduce_with(input, op, over.into(), journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        let array = dtype.map_or(array.clone(), |d| array.cast(d));
        let out = out.as_ref();
        let format = self.format_of(out);
        let file =
            OutputFile::create_as(out, &array.shape, array.dtype, format)?.durable(self.durable);
        let file = self.encoded_as(file, out, format)?;
        let t0 = std::time::Instant::now();
        file.write_at(0, &array.data)?;
        self.finish_output(file)?;
        report.finish_s = t0.elapsed().as_secs_f64();
        report.wall_s += report.finish_s;
        if let Some(j) = journal {
            j.finish();
        }
        report.output_dtype = array.dtype().name().into();
        Ok(report)
    }

    /// Plans `affine` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_affine(&self, input: &TensorFile, out_dtype: Option<DType>) -> Result<Plan> {
        let od = out_dtype.unwrap_or(input.dtype());
        let mut req = self.request(
            format!(
                "affine of {} {} -> {od}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = od.size() as u64;
        Ok(Plan::new(&req)?)
    }

    /// Writes `cast(scale * input + offset)` to `out` (`.npy` or raw), streaming.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `out` is the input; [`Error::Budget`]; I/O errors. On error
    /// nothing is left at `out`.
    pub fn affine(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        let od = dtype.unwrap_or(input.dtype());
        let plan = self.plan_affine(input, dtype)?;
        self.budget.reset_peak();
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let (out, shape) = (out.as_ref(), input.shape());
        let params = ElementwiseParams::Affine { scale, offset };
        let times =
            match self.cuda_elementwise(Elementwise::Affine, input.dtype(), od, &params, &plan)? {
                Some(k) => self.run_to_file(&plan, &inputs, out, shape, od, 1, k),
                None => self.run_to_file(
                    &plan,
                    &inputs,
                    out,
                    shape,
                    od,
                    1,
                    self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                        backend.affine(ins[0], input.dtype(), o, od, scale, offset)
                    }),
                ),
            }?;
        let op = format!(
            "affine {scale} * x + {offset} of {}",
            input.path().display()
        );
        Ok(self.report(&plan, op, input.shape(), input.shape(), od, times))
    }

    /// Plans `cast` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_cast(&self, input: &TensorFile, dtype: DType) -> Result<Plan> {
        self.plan_affine(input, Some(dtype)).map(|mut p| {
            p.what = format!(
                "cast {} {} -> {dtype}",
                fmt_shape(input.shape()),
                input.dtype()
            );
            p
        })
    }

    /// Writes `input` cast to `dtype` to `out`, streaming. Integer to integer casts are
    /// exact and saturate; float to f16/bf16 rounds to nearest even; float to integer
    /// rounds toward zero, saturates and maps NaN to 0.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `out` is the input; [`Error::Budget`]; I/O errors. On error
    /// nothing is left at `out`.
    pub fn cast(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: DType,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        let plan = self.plan_cast(input, dtype)?;
        self.budget.reset_peak();
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let (out, shape) = (out.as_ref(), input.shape());
        let cuda = self.cuda_elementwise(
            Elementwise::Cast,
            input.dtype(),
            dtype,
            &ElementwiseParams::Cast,
            &plan,
        )?;
        let times = match cuda {
            Some(k) => self.run_to_file(&plan, &inputs, out, shape, dtype, 1, k),
            None => self.run_to_file(
                &plan,
                &inputs,
                out,
                shape,
                dtype,
                1,
                self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                    backend.cast(ins[0], input.dtype(), o, dtype)
                }),
            ),
        }?;
        let op = format!("cast {} to {dtype}", input.path().display());
        Ok(self.report(&plan, op, input.shape(), input.shape(), dtype, times))
    }

    /// Resolves an expression's inputs: the compiled program, its streams (file and base
    /// offset for each), the shape it iterates over and the default output dtype.
    pub(crate) fn bind<'a>(
        src: &str,
        inputs: &[(&str, &'a TensorFile)],
    ) -> Result<(Program, Vec<InputStream<'a>>, Vec<usize>, DType)> {
        let e = expr::parse(src).map_err(|e| {
            Error::invalid(format!(
                "cannot parse expression '{}' at {e}",
                crate::tensor::npy::shown(src)
            ))
        })?;
        let program = Program::compile(&e);
        if program.streams.is_empty() {
            return Err(Error::invalid(format!(
                "expression '{src}' uses no input: name one given with --in NAME=FILE"
            )));
        }
        let mut streams = Vec::new();
        let mut shape: Option<(Vec<usize>, String)> = None;
        for r in &program.streams {
            let Some(&(_, file)) = inputs.iter().find(|(n, _)| *n == r.name) else {
                let known: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
                return Err(Error::invalid(format!(
                    "expression '{src}' at column {}: unknown input '{}' (inputs given: {}); add --in {}=FILE",
                    r.column,
                    r.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    },
                    r.name
                )));
            };
            let (s, base, label) = match r.index {
                None => (file.shape().to_vec(), 0u64, r.name.clone()),
                Some(i) => {
                    let fs = file.shape();
                    if fs.len() < 2 || i >= fs[0] {
                        return Err(Error::invalid(format!(
                            "expression '{src}' at column {}: {}[{i}] is out of range: {} has shape {} (index the leading axis, 0 to {})",
                            r.column,
                            r.name,
                            r.name,
                            fmt_shape(fs),
                            fs.first().copied().unwrap_or(1).saturating_sub(1)
                        )));
                    }
                    let plane: u64 = fs[1..].iter().map(|&d| d as u64).product();
                    (
                        fs[1..].to_vec(),
                        i as u64 * plane,
                        format!("{}[{i}]", r.name),
                    )
                }
            };
            match &shape {
                None => shape = Some((s, label)),
                Some((s0, l0)) if *s0 != s => {
                    return Err(Error::invalid(format!(
                        "expression '{src}': {l0} has shape {} but {label} has shape {}; inputs must have the same shape",
                        fmt_shape(s0),
                        fmt_shape(&s)
                    )));
                }
                Some(_) => {}
            }
            streams.push(InputStream {
                file,
                base,
                per_item: 1,
            });
        }
        let shape = shape.map(|(s, _)| s).unwrap_or_default();
        let dtypes: Vec<DType> = streams.iter().map(|s| s.file.dtype()).collect();
        Ok((program, streams, shape, Self::map_default_dtype(&dtypes)))
    }

    /// The dtype `map` writes by default over inputs of `dtypes`: the widest float input;
    /// f32 for f16 with bf16; f64 if no input is a float.
    #[must_use]
    pub fn map_default_dtype(dtypes: &[DType]) -> DType {
        let floats: Vec<DType> = dtypes.iter().copied().filter(|d| d.is_float()).collect();
        if floats.is_empty() || floats.contains(&DType::F64) {
            DType::F64
        } else if floats.contains(&DType::F32)
            || (floats.contains(&DType::F16) && floats.contains(&DType::BF16))
        {
            DType::F32
        } else {
            floats[0]
        }
    }

    /// Plans `map` without running it.
    ///
    /// # Errors
    /// As [`map`](Self::map), without I/O.
    pub fn plan_map(
        &self,
        src: &str,
        inputs: &[(&str, &TensorFile)],
        dtype: Option<DType>,
    ) -> Result<Plan> {
        let (_, streams, shape, default) = Self::bind(src, inputs)?;
        let od = dtype.unwrap_or(default);
        let mut streams_files: Vec<&TensorFile> = Vec::new();
        for s in &streams {
            if !streams_files.iter().any(|f| std::ptr::eq(*f, s.file)) {
                streams_files.push(s.file);
            }
        }
        let mut req = self.request(
            format!("map '{src}' over {} -> {od}", fmt_shape(&shape)),
            &shape,
            &streams_files,
        );
        req.in_bytes_per_elem = streams.iter().map(|s| s.file.dtype().size() as u64).sum();
        req.inputs = streams.len();
        req.out_bytes_per_elem = od.size() as u64;
        Ok(Plan::new(&req)?)
    }

    /// Evaluates the elementwise expression `src` over named inputs of one shape (or
    /// planes `s[k]` of a band-sequential input) in one pass, writing the result cast to
    /// `dtype` (default: the widest float input, f64 if none) to `out`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a parse error (with its column), an unknown input, an index
    /// out of range, mismatched shapes, or `out` being an input; [`Error::Budget`]; I/O
    /// errors. On error nothing is left at `out`.
    pub fn map(
        &self,
        src: &str,
        inputs: &[(&str, &TensorFile)],
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        let files: Vec<&TensorFile> = inputs.iter().map(|(_, f)| *f).collect();
        check_not_input(out.as_ref(), &files)?;
        let (program, streams, shape, default) = Self::bind(src, inputs)?;
        let od = dtype.unwrap_or(default);
        let plan = self.plan_map(src, inputs, dtype)?;
        self.budget.reset_peak();
        let dtypes: Vec<DType> = streams.iter().map(|s| s.file.dtype()).collect();
        let backend = &self.backend;
        let cuda = match &self.cuda {
            Some(dev) => Some(dev.map(&program, &dtypes, od, plan.tile_elems, plan.depth)?),
            None => None,
        };
        let times = match cuda {
            Some(k) => self.run_to_file(&plan, &streams, out.as_ref(), &shape, od, 1, k),
            None => self.run_to_file(
                &plan,
                &streams,
                out.as_ref(),
                &shape,
                od,
                1,
                self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                    backend.map(&program, ins, &dtypes, o, od)
                }),
            ),
        }?;
        Ok(self.report(&plan, format!("map '{src}'"), &shape, &shape, od, times))
    }

    fn matmul_shapes(x: &TensorFile, w: &TensorFile) -> Result<(usize, usize, usize)> {
        let (xs, ws) = (x.shape(), w.shape());
        if xs.len() != 2 || ws.len() != 2 {
            return Err(Error::invalid(format!(
                "matmul needs X of rank 2 (R x K) and W of rank 2 (K x N), got X {} and W {}",
                fmt_shape(xs),
                fmt_shape(ws)
            )));
        }
        if xs[1] != ws[0] {
            return Err(Error::invalid(format!(
                "matmul shapes do not match: X is {} and W is {}; X's columns ({}) must equal W's rows ({})",
                fmt_shape(xs),
                fmt_shape(ws),
                xs[1],
                ws[0]
            )));
        }
        Ok((xs[0], xs[1], ws[1]))
    }

    /// Plans `matmul` without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for mismatched shapes; [`Error::Budget`] if W, or W plus one row
    /// tile, does not fit.
    pub fn plan_matmul(
        &self,
        x: &TensorFile,
        w: &TensorFile,
        dtype: Option<DType>,
    ) -> Result<Plan> {
        let (r, k, n) = Self::matmul_shapes(x, w)?;
        let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
        let od = dtype.unwrap_or(c);
        let w_bytes = (k * n * c.size()) as u64;
        if w_bytes > self.budget.limit() {
            return Err(Error::Budget(crate::budget::BudgetError::TooSmall {
                what: format!(
                    "matmul with W {} {} held in memory",
                    fmt_shape(w.shape()),
                    w.dtype()
                ),
                arithmetic: format!("W alone needs {k} x {n} x {} B", c.size()),
                needed: w_bytes
                    + (k * x.dtype().size() + n * od.size()) as u64 * 3
                    + 3 * window_slack(),
                limit: self.budget.limit(),
            }));
        }
        let mut req = self.request(
            format!(
                "matmul {} {} @ {} {} -> {} {od}",
                fmt_shape(x.shape()),
                x.dtype(),
                fmt_shape(w.shape()),
                w.dtype(),
                fmt_shape(&[r, n])
            ),
            &[r],
            &[x, w],
        );
        req.in_bytes_per_elem = (k * x.dtype().size()) as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = (n * od.size()) as u64;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            w_bytes,
            format!("W as {c}"),
        );
        req.scratch_per_elem = (if x.dtype() == c { 0 } else { k * c.size() }
            + if od == c { 0 } else { n * (c.size() + 8) }) as u64;
        req.min_tile = 1;
        let mut plan = Plan::new(&req)?;
        plan.tile_shape = vec![plan.extent, k];
        Ok(plan)
    }

    /// Writes `X @ W` to `out`: X (R x K) streamed by row tiles, W (K x N) held in memory
    /// (its bytes count in the budget), cast to `dtype` (default: f32 when both operands
    /// are exact in f32, f64 otherwise).
    ///
    /// # Errors
    /// [`Error::Invalid`] for mismatched shapes or `out` being an input; [`Error::Budget`]
    /// if W does not fit; I/O errors. On error nothing is left at `out`.
    pub fn matmul(
        &self,
        x: &TensorFile,
        w: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[x, w])?;
        let (r, k, n) = Self::matmul_shapes(x, w)?;
        let plan = self.plan_matmul(x, w, dtype)?;
        let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
        let od = dtype.unwrap_or(c);
        self.budget.reset_peak();
        let _w_reservation = self.budget.reserve(
            "resident W",
            plan.resident_bytes - decode_scratch(&[x, w]).0,
        )?;
        let resident = {
            let win = w.map_window(0, (k * n) as u64)?;
            crate::ops::matmul::Resident::new(win.bytes(), w.dtype(), c)
        };
        let inputs = [InputStream {
            file: x,
            base: 0,
            per_item: k as u64,
        }];
        let backend = &self.backend;
        let xd = x.dtype();
        let times = self.run_to_file(
            &plan,
            &inputs,
            out.as_ref(),
            &[r, n],
            od,
            n as u64,
            self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                backend.matmul(ins[0], xd, &resident, k, n, o, od)
            }),
        )?;
        let op = format!("matmul {} @ {}", x.path().display(), w.path().display());
        Ok(self.report(&plan, op, x.shape(), &[r, n], od, times))
    }

    /// Column means and standard deviations (over axis 0) in **one** pass over the data:
    /// every tile is fed to a mean reducer and a std reducer, so the statistics are exactly
    /// those of `reduce --op mean` and `reduce --op std` (bit for bit) for one read.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce).
    pub fn column_stats(&self, input: &TensorFile, ddof: u32) -> Result<(Array, Array, RunReport)> {
        self.column_stats_with(input, ddof, None)
    }

    /// [`Engine::column_stats`], resumable through `journal`.
    fn column_stats_with(
        &self,
        input: &TensorFile,
        ddof: u32,
        journal: Option<&Journal>,
    ) -> Result<(Array, Array, RunReport)> {
        let over = ReduceOver::Axis(0);
        let std_op = Reduce::Std { ddof };
        // both reducers' results and accumulators are resident for the whole pass
        let resident = self.plan_reduce(input, std_op, over)?.resident_bytes
            + self.plan_reduce(input, Reduce::Mean, over)?.resident_bytes
            - 2 * input.read_scratch_bytes();
        let g = Geometry::new(input.shape(), over)?;
        let mut req = self.request(
            format!(
                "column mean and std of {} {}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            resident,
            "mean and std results and accumulators".to_string(),
        );
        req.scratch_per_elem = g.scratch_per_elem(16) + g.scratch_per_elem(8);
        let plan = Plan::new(&req)?;
        self.budget.reset_peak();
        let _resident = self
            .budget
            .reserve("mean and std results and accumulators", resident)?;
        let mut mean_r = self.backend.reducer(Reduce::Mean, input.dtype(), g)?;
        let mut std_r = self.backend.reducer(std_op, input.dtype(), g)?;
        let inputs = [InputStream::whole(input)];
        let mut stream = self.stream(&plan, &inputs, None);
        stream.journal = journal;
        let times = scheduler::run(
            &stream,
            self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], _: &mut [u8]| {
                restore_reducers(journal, &mut [&mut mean_r, &mut std_r])?;
                mean_r.feed_bytes(tile.start, ins[0]);
                std_r.feed_bytes(tile.start, ins[0]);
                checkpoint_reducers(journal, tile.index, &[mean_r.as_ref(), std_r.as_ref()])
            }),
        )?;
        restore_reducers(journal, &mut [&mut mean_r, &mut std_r])?;
        let shape = input.shape()[1..].to_vec();
        let mean = Array::from_bytes(DType::F64, shape.clone(), mean_r.into_bytes())?;
        let std = Array::from_bytes(DType::F64, shape.clone(), std_r.into_bytes())?;
        let what = format!("column mean and std of {}", input.path().display());
        let report = self.report(&plan, what, input.shape(), &shape, DType::F64, times);
        Ok((mean, std, report))
    }

    /// Standardizes per column (statistics over axis 0, one value per element of the
    /// trailing axes): pass 1 computes mean and std ([`column_stats`](Self::column_stats)),
    /// pass 2 writes `(x - mean) / std` cast to `dtype` (default f32, or f64 for f64 input).
    /// A column with std 0 gives inf or NaN, as numpy's `(x - m) / s` does. If `stats` is
    /// given, the mean and std used are written there as an `.npz` (`mean`, `std`).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a rank-0 input or `out` being the input; [`Error::Budget`];
    /// I/O errors. On error nothing is left at `out`.
    pub fn standardize(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        ddof: u32,
        stats: Option<&Path>,
    ) -> Result<(RunReport, RunReport)> {
        check_not_input(out.as_ref(), &[input])?;
        if input.shape().len() < 2 {
            return Err(Error::invalid(format!(
                "standardize needs rank 2 or more (rows x columns), {} has shape {}",
                input.path().display(),
                fmt_shape(input.shape())
            )));
        }
        let od = dtype.unwrap_or(if input.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        });
        let journal = self.open_journal(out.as_ref())?;
        let (mean, std, stats_report) = self
            .column_stats_with(input, ddof, journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        if let Some(p) = stats {
            write_npz(p, &[("mean", &mean), ("std", &std)])?;
        }
        let m = mean.to_f64();
        let sd = std.to_f64();
        let mut req = self.request(
            format!(
                "standardize {} {} -> {od}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = od.size() as u64;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            (m.len() * 16) as u64,
            "mean and std".to_string(),
        );
        req.scratch_per_elem = 8;
        let plan = Plan::new(&req)?;
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "mean and std",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let xd = input.dtype();
        let (out, shape) = (out.as_ref(), input.shape());
        let params = ElementwiseParams::Standardize {
            mean: m.clone(),
            sd: sd.clone(),
        };
        let cuda = self.cuda_elementwise(Elementwise::Standardize, xd, od, &params, &plan)?;
        let times = match cuda {
            Some(k) => self.run_to_file_with(journal, &plan, &inputs, out, shape, od, 1, k),
            None => self.run_to_file_with(
                journal,
                &plan,
                &inputs,
                out,
                shape,
                od,
                1,
                self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], o: &mut [u8]| {
                    backend.standardize(ins[0], xd, tile.start, &m, &sd, o, od)
                }),
            ),
        }?;
        let op = format!("standardize {}", input.path().display());
        Ok((
            stats_report,
            self.report(&plan, op, input.shape(), input.shape(), od, times),
        ))
    }

    /// Plans `generate` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_generate(&self, shape: &[usize], dtype: DType) -> Result<Plan> {
        let mut req = self.request(format!("generate {} {dtype}", fmt_shape(shape)), shape, &[]);
        req.out_bytes_per_elem = dtype.size() as u64;
        Ok(Plan::new(&req)?)
    }

    /// Writes a tensor of standard-normal values plus a per-column offset `col / 100` to
    /// `out`, streamed (any size); the values depend only on `seed`.
    ///
    /// # Errors
    /// [`Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn generate(
        &self,
        out: impl AsRef<Path>,
        shape: &[usize],
        dtype: DType,
        seed: u64,
    ) -> Result<RunReport> {
        if shape.is_empty() {
            return Err(Error::invalid("generate needs a shape of rank 1 or more"));
        }
        let plan = self.plan_generate(shape, dtype)?;
        self.budget.reset_peak();
        let last = if shape.len() >= 2 {
            shape[shape.len() - 1] as u64
        } else {
            0
        };
        let backend = &self.backend;
        let times = self.run_to_file(
            &plan,
            &[],
            out.as_ref(),
            shape,
            dtype,
            1,
            self.kernel(|tile: crate::plan::Tile, _: &[&[u8]], o: &mut [u8]| {
                backend.generate(o, dtype, tile.start, last, seed)
            }),
        )?;
        let op = format!("generate {} {dtype} (seed {seed})", fmt_shape(shape));
        Ok(self.report(&plan, op, shape, shape, dtype, times))
    }
}

/// Restores `reducers` from the state a resumed pass found, once (the journal hands it
/// over only the first time), reading it straight into their buffers.
fn restore_reducers(
    journal: Option<&Journal>,
    reducers: &mut [&mut Box<dyn TileReducer>],
) -> Result<()> {
    let Some(j) = journal else { return Ok(()) };
    let mut parts: Vec<&mut [u8]> = reducers
        .iter_mut()
        .flat_map(|r| r.state_parts_mut())
        .collect();
    j.restore_state(&mut parts).map(|_| ())
}

/// Saves the state of `reducers` after tile `index` when the journal has a checkpoint due.
fn checkpoint_reducers(
    journal: Option<&Journal>,
    index: usize,
    reducers: &[&dyn TileReducer],
) -> Result<()> {
    let Some(j) = journal else { return Ok(()) };
    let size = reducers.iter().map(|r| r.state_len()).sum();
    j.checkpoint(j.pass(), index, size, || {
        reducers.iter().flat_map(|r| r.state_parts()).collect()
    })
}

/// Marks the journal kept when `e` is an interruption (the run can be resumed).
fn kept_if_interrupted(journal: Option<&Journal>, e: Error) -> Error {
    if let (Some(j), Error::Interrupted { .. }) = (journal, &e) {
        j.keep();
    }
    e
}

/// The decode scratch of compressed `inputs` (held for a whole run, reserved by the
/// pipeline; planners count it among the resident bytes so that tiles leave room for it) and its description,
/// the starting point of a plan's resident bytes.
fn decode_scratch(inputs: &[&TensorFile]) -> (u64, String) {
    let bytes: u64 = inputs.iter().map(|f| f.read_scratch_bytes()).sum();
    let what = if bytes > 0 {
        "decode scratch of compressed input".to_string()
    } else {
        String::new()
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

fn check_not_input(out: &Path, inputs: &[&TensorFile]) -> Result<()> {
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

/// Writes arrays to an `.npz` (a zip of `.npy` entries, stored uncompressed) that
/// `np.load(path)[name]` reads; atomically, like every output.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written.
pub fn write_npz(path: &Path, arrays: &[(&str, &Array)]) -> Result<()> {
    use std::io::Write;
    let tmp = crate::tensor::temp_beside(path)?;
    let io = |e: zip::result::ZipError| Error::io("write", path, std::io::Error::other(e));
    let mut z = zip::ZipWriter::new(tmp.as_file());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, a) in arrays {
        z.start_file(format!("{name}.npy"), opts).map_err(io)?;
        let mut bytes = crate::tensor::npy::build_header(a.dtype(), a.shape());
        bytes.extend_from_slice(a.bytes());
        z.write_all(&bytes)
            .map_err(|e| Error::io("write", path, e))?;
    }
    z.finish().map_err(io)?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("flush", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename the finished output to", path, e.error))?;
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed.
///
/// # Errors
/// [`Error::Io`] if the file cannot be written.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut tmp = crate::tensor::temp_beside(path)?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::io("write", path, e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename the finished output to", path, e.error))?;
    Ok(())
}
