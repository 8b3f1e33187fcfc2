//! The command line's arguments (clap): the options every command shares and the
//! commands that are not operations. Each operation's subcommand is its module's
//! arguments struct in `src/spec/ops/`, listed as `Op`. What they mean for a run is in
//! `main.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tilestream::device::DeviceRequest;
use tilestream::spec::Op;
use tilestream::spec::cli::RawSpec;

pub(crate) const DEFAULT_MEMORY: &str = "1GiB";

#[derive(Parser)]
#[command(
    name = "tilestream",
    version,
    about = "Process arrays larger than memory, from disk, under a memory budget.",
    after_help = "Examples:
  tilestream gen x.npy --shape 3075200x512 --dtype f32 --seed 1
  tilestream info x.npy
  tilestream reduce x.npy mean.npy --op mean --axis 0 --memory 256MiB
  tilestream affine x.npy y.npy --scale 2 --offset 1 --dtype f16
  tilestream map '(x*2+1)' y.npy --in x=x.npy --dtype f16
  tilestream cast x.npy x16.npy --dtype bf16
  tilestream stencil scene.npy blur.npy --filter gaussian:sigma=2 --memory 128MiB
  tilestream transpose x.npy xt.npy
  tilestream tiles scene.npy patches/ --size 512 --overlap 32
  tilestream plan reduce x.npy m.npy --op std --axis 0 --memory 64MiB

Logging: RUST_LOG=info (pipeline start and end, steps), RUST_LOG=tilestream=debug (every tile).

Exit codes: 0 success, 1 runtime failure (I/O, corrupt file), 2 usage error (bad arguments, budget too small)."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// The `--help` heading of the output-format options every command shares.
const OUTPUT_FORMATS: &str = "Output formats (GeoTIFF, Zarr)";

#[derive(Args, Clone, Debug)]
#[allow(clippy::struct_excessive_bools)] // command-line switches
pub(crate) struct Common {
    /// Memory budget for everything the engine holds: staging windows and buffers,
    /// accumulators, results (e.g. 512MiB, 2GB, 1.5GiB, or bytes).
    /// [default: 1GiB, or a pipeline file's `memory`]
    #[arg(long, short = 'm', global = true)]
    pub(crate) memory: Option<String>,
    /// Worker threads for compute (default: all cores).
    #[arg(long, short = 'j', global = true)]
    pub(crate) threads: Option<usize>,
    /// Where to compute: auto (a GPU when present and the operation has a CUDA kernel,
    /// else the CPU), cpu, cuda or cuda:N (refused when that GPU cannot be used).
    /// [default: auto, or a pipeline file's `device`]
    #[arg(long, global = true, value_parser = parse_device)]
    pub(crate) device: Option<DeviceRequest>,
    /// Device memory budget with --device cuda: tile buffers, resident operands
    /// (e.g. 8GiB) [default: 90% of what the GPU has free]
    #[arg(long, global = true)]
    pub(crate) gpu_memory: Option<String>,
    /// Pipeline depth: staging slots in flight.
    #[arg(long, default_value_t = 3, global = true)]
    pub(crate) depth: usize,
    /// Cap on one tile's staging bytes (e.g. 64MiB) [default: 16MiB]
    #[arg(long, global = true)]
    pub(crate) max_tile: Option<String>,
    /// Print the run report as one JSON object on stdout.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Progress bar on stderr: auto (only when stderr is a terminal), never, always.
    #[arg(long, default_value = "auto", value_parser = ["auto", "never", "always"], global = true)]
    pub(crate) progress: String,
    /// Do not flush outputs to disk before renaming them into place: faster when the
    /// output is larger than the disk writes in the run's time, but a power failure soon
    /// after may lose it (as with cp or np.save). Outputs are still atomic.
    #[arg(long, global = true)]
    pub(crate) no_sync: bool,
    /// Continue an interrupted run (killed, crashed, or stopped with Ctrl-C) of the same
    /// command from its last completed tile, with the journal it left beside the output.
    /// With nothing to resume, runs from the start.
    #[arg(long, global = true)]
    pub(crate) resume: bool,
    /// GeoTIFF outputs (.tif/.tiff): tile side in pixels (a multiple of 16).
    #[arg(long, default_value_t = 512, global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) tiff_tile: usize,
    /// GeoTIFF outputs: tile compression, deflate[:1-9], zstd[:1-22] or none.
    #[arg(long, default_value = "deflate", global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) tiff_compress: String,
    /// GeoTIFF outputs: predictor applied before compression, auto (float for f16/f32/f64
    /// outputs, none for integers), none, horizontal or float.
    #[arg(long, default_value = "auto", global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) tiff_predictor: String,
    /// GeoTIFF outputs: band (one plane per band) or pixel (bands of a pixel together).
    #[arg(long, default_value = "band", value_parser = ["band", "pixel"], global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) tiff_interleave: String,
    /// GeoTIFF outputs: BigTIFF (64-bit offsets): auto (when the data passes 4 GB), yes, no.
    #[arg(long, default_value = "auto", value_parser = ["auto", "yes", "no"], global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) tiff_bigtiff: String,
    /// GeoTIFF outputs: write a Cloud-Optimized GeoTIFF (overviews, directories first,
    /// tiles of the smallest overview first), as `--format cog` does.
    #[arg(long, global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) cog: bool,
    /// COG outputs: overview levels, auto (halve until one tile holds the smallest) or a
    /// count (factors 2, 4, ... 2^N; 0 for none).
    #[arg(long, default_value = "auto", global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) overviews: String,
    /// COG outputs: how overviews are computed, average (gdaladdo -r average) or nearest.
    #[arg(long, default_value = "average", value_parser = ["average", "nearest"], global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) overview_resampling: String,
    /// Output format: npy, raw, tif, cog or zarr (default: from the output's extension:
    /// .npy, .tif/.tiff, .zarr, anything else raw). Inputs are recognised by extension or
    /// content.
    #[arg(long, global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) format: Option<String>,
    /// Zarr outputs (.zarr): chunk shape, e.g. 1x512x512 (default: 512 along the last two
    /// axes, 1 before them). With --zarr-shard, the inner chunk shape.
    #[arg(long, global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) zarr_chunks: Option<String>,
    /// Zarr outputs: shard shape (a multiple of the chunk shape) for the sharding codec.
    #[arg(long, global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) zarr_shard: Option<String>,
    /// Zarr outputs: chunk compression, zstd[:level], gzip[:0-9], blosc[:0-9] or none.
    #[arg(long, default_value = "zstd", global = true, help_heading = OUTPUT_FORMATS)]
    pub(crate) zarr_compress: String,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    #[command(flatten)]
    Op(Op),
    /// Show a tensor file's format, shape, dtype and size.
    #[command(after_help = "Example:\n  tilestream info x.npy")]
    Info {
        /// Tensor file.
        input: PathBuf,
        #[command(flatten)]
        raw: RawSpec,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the CUDA driver, NVRTC and GPUs this machine has (what --device can use).
    #[command(after_help = "Example:\n  tilestream devices --json")]
    Devices {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a pipeline file: named inputs, steps, outputs, one memory budget.
    #[command(after_help = "Examples:
  tilestream run examples/pipeline.toml
  tilestream run pipeline.toml --dry-run          # check everything, print every step's plan

Steps: op = a subcommand (but convert, gen and tiles), with the keys of its options
(input = an earlier value's name, filter, dtype, ...). Consecutive elementwise steps fuse
into one pass; other intermediates go to a temporary directory removed at the end. See
docs/pipelines.md and examples/pipeline.toml.")]
    Run {
        /// The pipeline file (.toml).
        file: PathBuf,
        /// Check the file and print the plan of every step; run nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove what killed runs left in a directory: temporary outputs and pipeline
    /// intermediates that no running tilestream holds. Given an object output's URL:
    /// abort its killed run's multipart upload, delete the chunks of its unfinished Zarr
    /// store, and remove its local spool files.
    #[command(
        after_help = "Examples:\n  tilestream clean out/\n  tilestream clean s3://bucket/out.zarr"
    )]
    Clean {
        /// The directory (default: the current one), or an object output's URL.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Print the plan of an operation (tiles, bytes per stage, budget) without running it.
    #[command(
        after_help = "Example:\n  tilestream plan reduce x.npy m.npy --op mean --axis 0 --memory 256MiB"
    )]
    Plan {
        #[command(subcommand)]
        op: Op,
    },
}

fn parse_device(s: &str) -> std::result::Result<DeviceRequest, String> {
    s.parse()
        .map_err(|e: tilestream::device::DeviceError| e.to_string())
}
