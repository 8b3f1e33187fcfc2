//! What a run reports: tiles, bytes, time per stage, memory, device.

use std::fmt;

use serde::Serialize;

use crate::budget::fmt_bytes;
use crate::format::fmt_shape;

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
