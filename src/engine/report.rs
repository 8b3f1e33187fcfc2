//! What a run reports: tiles, bytes, time per stage, memory, device.

use std::fmt;

use serde::Serialize;

use super::Engine;
use crate::backend::Family;
use crate::budget::fmt_bytes;
use crate::device::DeviceRequest;
use crate::dtype::DType;
use crate::format::fmt_shape;
use crate::plan::Plan;
use crate::scheduler::StageTimes;

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
    /// On a GPU: what it is and the versions of the CUDA driver and NVRTC that ran
    /// (`NVIDIA H200 (sm_90), CUDA driver 13.0, NVRTC 13.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
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

/// An operation as its run report names it: its kernel family, what it did, and
/// whether a GPU kernel ran its tiles (the dispatch's own answer, not a guess from a name).
pub(crate) struct Ran {
    family: Family,
    what: String,
    gpu: bool,
}

impl Ran {
    /// `what`, of `family`, run on the host's cores.
    pub(crate) fn cpu(family: Family, what: String) -> Self {
        Ran {
            family,
            what,
            gpu: false,
        }
    }

    /// `what`, of `family`, run by a GPU kernel when `gpu`.
    pub(crate) fn on(family: Family, what: String, gpu: bool) -> Self {
        Ran { family, what, gpu }
    }
}

impl Engine {
    /// What the GPU that computed is and which CUDA driver and NVRTC ran, for the run
    /// report (`None` on the CPU).
    fn gpu_detail(&self, device: &str) -> Option<String> {
        let dev = self.cuda.as_ref().filter(|_| device.starts_with("cuda"))?;
        let v = crate::device::versions();
        let or = |o: Option<String>| o.unwrap_or_else(|| "?".into());
        Some(format!(
            "{} ({}), CUDA driver {}, NVRTC {}; the driver's own host memory, {}, counted \
             in the budget",
            dev.info().name,
            dev.info().arch(),
            or(v.driver),
            or(v.nvrtc),
            crate::budget::fmt_bytes(self.driver_bytes)
        ))
    }

    /// The device compute ran on, and why, for the run report of `op`.
    fn placement(&self, op: &Ran) -> (String, Option<String>) {
        let kind = op.family.name();
        let has_kernel = crate::backend::cuda::has_kernel(op.family);
        match (self.device, &self.cuda) {
            (_, Some(dev)) if op.gpu => (format!("cuda:{}", dev.info().ordinal), None),
            (DeviceRequest::Cpu, _) => ("cpu".into(), None),
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
                    "auto: the CUDA kernel for {kind} passed the GPU suite on an H200 but ran slower there than the CPU (docs/gpu.md); --device cuda runs it"
                )),
            ),
            _ => (
                "cpu".into(),
                Some(format!("auto: no CUDA kernel for {kind} yet")),
            ),
        }
    }

    /// A run's report from its flat plan.
    pub(super) fn report(
        &self,
        plan: &Plan,
        op: Ran,
        input_shape: &[usize],
        out_shape: &[usize],
        out_dtype: DType,
        t: StageTimes,
    ) -> RunReport {
        let tiles = (plan.num_tiles, plan.tile_shape.clone(), plan.depth);
        self.report_tiles(tiles, op, input_shape, out_shape, out_dtype, t)
    }

    /// A run's report from its tile count, tile shape and depth.
    pub(super) fn report_tiles(
        &self,
        (tiles, tile_shape, depth): (usize, Vec<usize>, usize),
        op: Ran,
        input_shape: &[usize],
        out_shape: &[usize],
        out_dtype: DType,
        t: StageTimes,
    ) -> RunReport {
        let secs = t.wall.as_secs_f64();
        let (device, device_note) = self.placement(&op);
        let gpu = self.gpu_detail(&device);
        RunReport {
            op: op.what,
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
            // the budget the caller gave (a GPU run planned with it less the driver's share)
            budget_bytes: self.budget.limit() + self.driver_bytes,
            peak_reserved_bytes: self.budget.peak(),
            peak_rss_bytes: peak_rss(),
            resumed_tiles: t.resumed_tiles,
            finish_s: t.finish.as_secs_f64(),
            device_requested: self.device.to_string(),
            device,
            device_note,
            gpu,
        }
    }
}
