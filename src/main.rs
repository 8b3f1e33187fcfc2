//! The `tilestream` command: streams operations over on-disk arrays under a memory budget.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tilestream::budget::fmt_bytes;
use tilestream::device::DeviceRequest;
use tilestream::tensor::geotiff::TiffWriteOptions;
use tilestream::tensor::zarr::ZarrWriteOptions;
use tilestream::tensor::{Format, fmt_shape, parse_shape};
use tilestream::workflow::Workflow;
use tilestream::{
    DType, Engine, Error, MemoryBudget, OpSpec, Progress, RawLayout, Result, Source, TensorFile,
};

const DEFAULT_MEMORY: &str = "1GiB";

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
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone, Debug)]
struct Common {
    /// Memory budget for everything the engine holds: staging windows and buffers,
    /// accumulators, results (e.g. 512MiB, 2GB, 1.5GiB, or bytes).
    /// [default: 1GiB, or a pipeline file's `memory`]
    #[arg(long, short = 'm', global = true)]
    memory: Option<String>,
    /// Worker threads for compute (default: all cores).
    #[arg(long, short = 'j', global = true)]
    threads: Option<usize>,
    /// Where to compute: auto (a GPU when present and the operation has a CUDA kernel,
    /// else the CPU), cpu, cuda or cuda:N (refused when that GPU cannot be used).
    /// [default: auto, or a pipeline file's `device`]
    #[arg(long, global = true, value_parser = parse_device)]
    device: Option<DeviceRequest>,
    /// Device memory budget with --device cuda: tile buffers, resident operands
    /// (e.g. 8GiB) [default: 90% of what the GPU has free]
    #[arg(long, global = true)]
    gpu_memory: Option<String>,
    /// Pipeline depth: staging slots in flight.
    #[arg(long, default_value_t = 3, global = true)]
    depth: usize,
    /// Print the run report as one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// Progress bar on stderr: auto (only when stderr is a terminal), never, always.
    #[arg(long, default_value = "auto", value_parser = ["auto", "never", "always"], global = true)]
    progress: String,
    /// Do not flush outputs to disk before renaming them into place: faster when the
    /// output is larger than the disk writes in the run's time, but a power failure soon
    /// after may lose it (as with cp or np.save). Outputs are still atomic.
    #[arg(long, global = true)]
    no_sync: bool,
    /// Continue an interrupted run (killed, crashed, or stopped with Ctrl-C) of the same
    /// command from its last completed tile, with the journal it left beside the output.
    /// With nothing to resume, runs from the start.
    #[arg(long, global = true)]
    resume: bool,
    /// GeoTIFF outputs (.tif/.tiff): tile side in pixels (a multiple of 16).
    #[arg(long, default_value_t = 512, global = true)]
    tiff_tile: usize,
    /// GeoTIFF outputs: tile compression, deflate[:1-9], zstd[:1-22] or none.
    #[arg(long, default_value = "deflate", global = true)]
    tiff_compress: String,
    /// GeoTIFF outputs: band (one plane per band) or pixel (bands of a pixel together).
    #[arg(long, default_value = "band", value_parser = ["band", "pixel"], global = true)]
    tiff_interleave: String,
    /// GeoTIFF outputs: BigTIFF (64-bit offsets): auto (when the data passes 4 GB), yes, no.
    #[arg(long, default_value = "auto", value_parser = ["auto", "yes", "no"], global = true)]
    tiff_bigtiff: String,
    /// Output format: npy, raw, tif or zarr (default: from the output's extension: .npy,
    /// .tif/.tiff, .zarr, anything else raw). Inputs are recognised by extension or content.
    #[arg(long, global = true)]
    format: Option<String>,
    /// Zarr outputs (.zarr): chunk shape, e.g. 1x512x512 (default: 512 along the last two
    /// axes, 1 before them). With --zarr-shard, the inner chunk shape.
    #[arg(long, global = true)]
    zarr_chunks: Option<String>,
    /// Zarr outputs: shard shape (a multiple of the chunk shape) for the sharding codec.
    #[arg(long, global = true)]
    zarr_shard: Option<String>,
    /// Zarr outputs: chunk compression, zstd[:level], gzip[:0-9], blosc[:0-9] or none.
    #[arg(long, default_value = "zstd", global = true)]
    zarr_compress: String,
}

/// How to read an input that is not `.npy`.
#[derive(Args, Clone, Debug)]
struct RawSpec {
    /// Shape of a raw (headerless) input, e.g. 3075200x512.
    #[arg(long)]
    shape: Option<String>,
    /// Dtype of a raw input (bool, u8..u64, i8..i64, f16, bf16, f32, f64).
    #[arg(long = "in-dtype")]
    in_dtype: Option<String>,
}

#[derive(Args, Clone, Debug)]
struct ReduceArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    input: PathBuf,
    /// Output file for the result (.npy, or raw for any other extension).
    output: PathBuf,
    /// Reduction: sum, mean, min, max, var, std.
    #[arg(long, default_value = "sum")]
    op: String,
    /// Axis to reduce; omit to reduce over all elements.
    #[arg(long)]
    axis: Option<usize>,
    /// Delta degrees of freedom for var and std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    ddof: u32,
    /// Cast the result to this dtype.
    #[arg(long)]
    dtype: Option<String>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct AffineArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    /// Multiplier a in y = a*x + b.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    scale: f64,
    /// Offset b in y = a*x + b.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    offset: f64,
    /// Output dtype (default: the input's). Floats round to nearest even; integers
    /// round toward zero, saturate, and take NaN to 0.
    #[arg(long)]
    dtype: Option<String>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct MapArgs {
    /// The expression, e.g. '(x*2+1)' or '(s[7] - s[3]) / (s[7] + s[3])'.
    #[arg(allow_hyphen_values = true)]
    expr: String,
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    /// A named input, NAME=FILE (repeatable).
    #[arg(long = "in", value_name = "NAME=FILE", required = true)]
    inputs: Vec<String>,
    /// Output dtype (default: the widest float input, f64 if there is none).
    #[arg(long)]
    dtype: Option<String>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct MatmulArgs {
    /// Left operand X (R x K), streamed by row tiles.
    x: PathBuf,
    /// Right operand W (K x N), held in memory (counts in --memory).
    w: PathBuf,
    /// Output file (R x N; .npy, or raw for any other extension).
    output: PathBuf,
    /// Output dtype (default: f32 when both operands are exact in f32, f64 otherwise).
    #[arg(long)]
    dtype: Option<String>,
}

#[derive(Args, Clone, Debug)]
struct StandardizeArgs {
    /// Input tensor (rows x columns...; .npy, or raw with --shape and --in-dtype).
    input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    /// Output dtype (default f32; f64 for f64 input).
    #[arg(long)]
    dtype: Option<String>,
    /// Delta degrees of freedom of the std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    ddof: u32,
    /// Also write the mean and std used to this .npz (`np.load(path)["mean"]`, `["std"]`).
    #[arg(long)]
    stats: Option<PathBuf>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct CastArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    /// Target dtype.
    #[arg(long)]
    dtype: String,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct ConvertArgs {
    /// Input tensor (.npy, .tif/.tiff, .zarr, or raw with --shape and --in-dtype).
    input: PathBuf,
    /// Output file (.npy, .tif/.tiff, .zarr, or raw for any other extension).
    output: PathBuf,
    /// Cast to this dtype on the way (default: keep the input's).
    #[arg(long)]
    dtype: Option<String>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct GenArgs {
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    /// Shape, e.g. 3075200x512.
    #[arg(long)]
    shape: String,
    /// Element type.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Random seed (the values depend only on it, never on budget or threads).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Args, Clone, Debug)]
struct StencilArgs {
    /// Input image: (height, width) or (bands, height, width); .npy, or raw with --shape
    /// and --in-dtype.
    input: PathBuf,
    /// Output file (same shape; .npy, or raw for any other extension).
    output: PathBuf,
    /// The filter: gaussian:sigma=S[,truncate=T] | box:size=N | sobel[:axis=0|1] |
    /// median:size=N | convolve:KERNEL.npy
    #[arg(long)]
    filter: String,
    /// Values outside the image: reflect | nearest | wrap | constant:V.
    #[arg(long, default_value = "reflect")]
    boundary: String,
    /// Output dtype (default: the input's; integers round toward zero and saturate).
    #[arg(long)]
    dtype: Option<String>,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct TransposeArgs {
    /// Input array (rank 2, or rank 3 to transpose the last two axes of each band).
    input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    output: PathBuf,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
struct TilesArgs {
    /// Input image: (height, width) or (bands, height, width).
    input: PathBuf,
    /// Directory for the patches and index.csv (created if missing).
    outdir: PathBuf,
    /// Patch side in pixels.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// Pixels shared by neighbouring patches (stride = size - overlap).
    #[arg(long, default_value_t = 0)]
    overlap: usize,
    /// At the right and bottom edges: shift (move the last patch back to end at the edge)
    /// or pad (keep the stride, pad with zeros).
    #[arg(long, default_value = "shift")]
    edge: String,
    /// Patch files: npy, or tif (tiled GeoTIFFs, each with the input's georeferencing
    /// moved to its own origin; see the --tiff-* options).
    #[arg(long, default_value = "npy")]
    patch_format: String,
    #[command(flatten)]
    raw: RawSpec,
}

#[derive(Subcommand, Clone, Debug)]
enum Op {
    /// Reduce along an axis or over everything: sum, mean, min, max, var, std.
    #[command(after_help = "Examples:
  tilestream reduce x.npy colmean.npy --op mean --axis 0 --memory 256MiB
  tilestream reduce x.npy total.npy --op sum
  tilestream reduce x.raw rowstd.npy --op std --axis 1 --ddof 1 --shape 1000x512 --in-dtype f32

Results: sum is f64 for floats, i64 for signed ints and bool, u64 for unsigned; mean, var
and std are f64; min and max keep the input dtype. Bit-identical whatever --memory and
--threads.")]
    Reduce(ReduceArgs),
    /// Elementwise y = scale * x + offset, cast to --dtype.
    #[command(after_help = "Example:
  tilestream affine x.npy y.npy --scale 2 --offset 1 --dtype f16 --memory 512MiB")]
    Affine(AffineArgs),
    /// Evaluate an elementwise expression over named inputs in one pass.
    #[command(after_help = "Examples:
  tilestream map '(x*2+1)' y.npy --in x=x.npy --dtype f16
  tilestream map 'where(a > b, a - b, 0)' d.npy --in a=a.npy --in b=b.npy
  tilestream map '(s[7] - s[3]) / (s[7] + s[3])' ndvi.npy --in s=scene.npy   # bands of one file

Operators: + - * / ** (right-assoc), unary -, < <= > >= == != (give 1 or 0).
Functions: abs sqrt exp log log1p sin cos tanh floor ceil round isnan min max clip(x,lo,hi)
where(cond,a,b). Literals: 1, 2.5, 1e-3, nan, inf. Evaluated in f64, cast once at the end.")]
    Map(MapArgs),
    /// Matrix product X @ W with X streamed and W resident.
    #[command(after_help = "Example:
  tilestream matmul x.npy w.npy proj.npy --memory 512MiB    # 3075200x512 @ 512x64

Kernel: matrixmultiply's blocked sgemm/dgemm, rows split across --threads. Computed in f32
when both operands are exact in f32 (f16, bf16, f32, small integers), else in f64.")]
    Matmul(MatmulArgs),
    /// Per-column (x - mean) / std in two passes: statistics, then apply.
    #[command(after_help = "Examples:
  tilestream standardize x.npy z.npy --memory 512MiB
  tilestream standardize x.npy z16.npy --dtype f16 --stats stats.npz

Pass 1 computes each column's mean and std in one read (the same arithmetic as reduce
--op mean / --op std); pass 2 writes (x - mean) / std. A constant column gives inf or NaN,
as in numpy.")]
    Standardize(StandardizeArgs),
    /// Convert between formats (.npy, raw, GeoTIFF, Zarr v3), optionally casting.
    #[command(after_help = "Examples:
  tilestream convert scene.tif scene.npy --memory 256MiB      # bands x rows x cols
  tilestream convert scene.npy scene.tif --tiff-compress zstd  # georeferencing: see below
  tilestream convert x.raw x.npy --shape 1000x512 --in-dtype f32
  tilestream convert x.npy x.zarr --zarr-chunks 4096x512 --zarr-compress blosc

The format follows the extension: .npy, .tif/.tiff (tiled GeoTIFF, 512x512 Deflate tiles
by default, BigTIFF above 4 GB), .zarr (Zarr v3 store, zstd chunks), anything else raw. A GeoTIFF input's georeferencing
(geotransform, CRS, nodata) is copied to a GeoTIFF output.")]
    Convert(ConvertArgs),
    /// Cast to another dtype.
    #[command(after_help = "Examples:
  tilestream cast x.npy x16.npy --dtype f16
  tilestream cast counts.npy c8.npy --dtype u8      # saturates at 0 and 255

Floats to f16/bf16 round to nearest even; floats to integers round toward zero, saturate,
and take NaN to 0; integers to integers are exact and saturate.")]
    Cast(CastArgs),
    /// Neighbourhood filter over each band of an image, tiled with halos (no seams).
    #[command(after_help = "Examples:
  tilestream stencil scene.npy blur.npy --filter gaussian:sigma=2 --memory 128MiB
  tilestream stencil dem.npy edges.npy --filter sobel --boundary nearest --dtype f32
  tilestream stencil img.npy med.npy --filter median:size=3
  tilestream stencil img.npy out.npy --filter convolve:kernel.npy --boundary constant:0

Semantics follow scipy.ndimage (gaussian_filter, uniform_filter, sobel, median_filter,
convolve) applied to each (height, width) plane; `sobel` without an axis is the gradient
magnitude hypot(sobel axis 0, sobel axis 1). Computed in f32 for inputs of up to 16 bits
and f32, in f64 otherwise. Tiles are full-width row blocks when a few rows fit the budget,
else 2-D blocks with halos on both axes.")]
    Stencil(StencilArgs),
    /// Out-of-core transpose of a rank-2 array (or of the last two axes of rank 3).
    #[command(after_help = "Example:
  tilestream transpose x.npy xt.npy --memory 256MiB

Works in square-ish blocks: each block reads runs of its width from the source rows and
writes runs of its height into the destination rows.")]
    Transpose(TransposeArgs),
    /// Cut an image into patch files with overlap, plus an index.csv.
    #[command(after_help = "Example:
  tilestream tiles scene.npy patches/ --size 512 --overlap 32

Each patch is written as <stem>_r<row>_c<col>.npy (row, col: its offset in the image; all
bands of a rank-3 image in one file), or .tif with --patch-format tif: a GeoTIFF georeferenced at
its own origin, so that GIS tools put each patch where it lies in the scene. index.csv (file,row,col,height,width) is written
last, after every patch is flushed: a directory with an index.csv is complete.")]
    Tiles(TilesArgs),
    /// Write a tensor of N(col/100, 1) values, streamed (any size).
    #[command(after_help = "Example:
  tilestream gen x.npy --shape 3075200x512 --dtype f32 --seed 1   # 6.3 GB")]
    Gen(GenArgs),
}

#[derive(Subcommand)]
enum Cmd {
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
    /// Run a pipeline file: named inputs, steps, outputs, one memory budget.
    #[command(after_help = "Examples:
  tilestream run examples/pipeline.toml
  tilestream run pipeline.toml --dry-run          # check everything, print every step's plan

Steps: map, affine, cast, reduce, stencil, transpose, matmul, standardize, with the keys of
the matching subcommand (expr, input, dtype, scale, offset, reduce, axis, ddof, filter,
boundary, x, w). Consecutive elementwise steps fuse into one pass; other intermediates go
to a temporary directory removed at the end. See examples/pipeline.toml.")]
    Run {
        /// The pipeline file (.toml).
        file: PathBuf,
        /// Check the file and print the plan of every step; run nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove what killed runs left in a directory: temporary outputs and pipeline
    /// intermediates that no running tilestream holds.
    #[command(after_help = "Example:\n  tilestream clean out/")]
    Clean {
        /// The directory (default: the current one).
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

fn engine(c: &Common) -> Result<Engine> {
    let budget = MemoryBudget::parse(c.memory.as_deref().unwrap_or(DEFAULT_MEMORY))?;
    if c.tiff_tile < 16 || c.tiff_tile % 16 != 0 || c.tiff_tile > 65536 {
        return Err(Error::invalid(format!(
            "--tiff-tile {} is not a multiple of 16 between 16 and 65536 (TIFF tiles are)",
            c.tiff_tile
        )));
    }
    let tiff = TiffWriteOptions {
        tile: c.tiff_tile,
        compression: c.tiff_compress.parse()?,
        pixel_interleave: c.tiff_interleave == "pixel",
        bigtiff: match c.tiff_bigtiff.as_str() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        },
        ..TiffWriteOptions::default()
    };
    let zarr = ZarrWriteOptions {
        chunks: c.zarr_chunks.as_deref().map(parse_shape).transpose()?,
        shard: c.zarr_shard.as_deref().map(parse_shape).transpose()?,
        compression: c.zarr_compress.parse()?,
        ..ZarrWriteOptions::default()
    };
    let e = Engine::new(budget)?
        .with_depth(c.depth)
        .with_durable(!c.no_sync)
        .with_tiff_output(tiff)
        .with_zarr_output(zarr)
        .with_out_format(c.format.as_deref().map(str::parse).transpose()?)
        .with_gpu_memory(
            c.gpu_memory
                .as_deref()
                .map(tilestream::parse_size)
                .transpose()?,
        )
        .with_device(c.device.unwrap_or_default())?;
    match c.threads {
        Some(n) => {
            let max = tilestream::backend::max_threads();
            if n > max {
                eprintln!("note: --threads {n} lowered to {max} (four per core)");
            }
            e.with_threads(n)
        }
        None => Ok(e),
    }
}

/// Ctrl-C (or SIGTERM): the first stops the run after the tile in flight (the engine's
/// cancel token), which removes the unfinished output; a second exits at once.
fn stop_on_ctrl_c(e: &Engine) {
    let token = e.cancel_token();
    let _ = ctrlc::set_handler(move || {
        if token.swap(true, Ordering::SeqCst) {
            let _ = writeln!(
                std::io::stderr(),
                "tilestream: interrupted again: exiting now"
            );
            std::process::exit(130);
        }
        let _ = writeln!(
            std::io::stderr(),
            "tilestream: stopping after the tile in flight (Ctrl-C again to quit at once)"
        );
    });
}

/// One progress line: tiles, throughput, memory, ETA.
fn progress_line(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64().max(1e-9);
    let eta = if p.tiles_done > 0 && p.tiles_total >= p.tiles_done {
        secs / p.tiles_done as f64 * (p.tiles_total - p.tiles_done) as f64
    } else {
        0.0
    };
    format!(
        "{:.2} GB/s, memory {} of {}, ETA {eta:.0} s",
        p.bytes_done as f64 / secs / 1e9,
        fmt_bytes(p.reserved),
        fmt_bytes(p.budget)
    )
}

/// Progress for `--progress`: an indicatif bar when stderr is a terminal; with `always`
/// and no terminal, a plain line at most once a second (and at the last tile), for logs.
fn with_progress_bar(e: Engine, mode: &str) -> (Engine, Option<ProgressBar>) {
    let tty = std::io::stderr().is_terminal();
    if mode == "never" || (mode == "auto" && !tty) {
        return (e, None);
    }
    if !tty {
        let last = Mutex::new(None::<Instant>);
        let e = e.with_progress(Arc::new(move |p: &Progress| {
            let Ok(mut last) = last.lock() else { return };
            let due = last.is_none_or(|t| t.elapsed().as_secs_f64() >= 1.0);
            if due || p.tiles_done == p.tiles_total {
                *last = Some(Instant::now());
                let _ = writeln!(
                    std::io::stderr(),
                    "tilestream: {}/{} tiles, {}",
                    p.tiles_done,
                    p.tiles_total,
                    progress_line(p)
                );
            }
        }));
        return (e, None);
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} tiles, {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let b = bar.clone();
    let e = e.with_progress(Arc::new(move |p: &Progress| {
        b.set_length(p.tiles_total as u64);
        b.set_position(p.tiles_done as u64);
        b.set_message(progress_line(p));
    }));
    (e, Some(bar))
}

/// An input given on the command line: a file, raw when `--shape` and `--in-dtype` say so.
fn source(path: &Path, raw: &RawSpec) -> Result<Source> {
    Ok(Source {
        path: path.to_path_buf(),
        raw: match (&raw.shape, &raw.in_dtype) {
            (Some(s), Some(d)) => Some(RawLayout {
                shape: parse_shape(s)?,
                dtype: d.parse()?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "a raw input needs both --shape and --in-dtype",
                ));
            }
        },
    })
}

fn open(path: &Path, raw: &RawSpec) -> Result<TensorFile> {
    source(path, raw)?.open()
}

fn dtype_opt(d: Option<&String>) -> Result<Option<DType>> {
    d.map(|s| s.parse()).transpose()
}

/// The `--in NAME=FILE` inputs.
fn named_sources(specs: &[String], raw: &RawSpec) -> Result<Vec<(String, Source)>> {
    specs
        .iter()
        .map(|s| {
            let (name, path) = s
                .split_once('=')
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| {
                    Error::invalid(format!("--in '{s}': expected NAME=FILE, e.g. --in x=x.npy"))
                })?;
            Ok((name.trim().to_string(), source(Path::new(path), raw)?))
        })
        .collect()
}

/// A flat or a box plan, for `tilestream plan`.
/// A note when an output's extension names no format tilestream writes (`o.jpg`): the
/// data is written raw, which the name would not suggest.
fn warn_unknown_extension(out: &Path) {
    let Some(ext) = out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
    else {
        return;
    };
    if !matches!(
        ext.as_str(),
        "npy" | "tif" | "tiff" | "zarr" | "raw" | "bin" | "dat" | "f32" | "f64"
    ) {
        eprintln!(
            "note: {}: .{ext} is not a format tilestream writes, so the data is written raw \
             (headerless); choose one with --format npy|raw|tif|zarr",
            out.display()
        );
    }
}

/// The operation's spec: what the library plans and runs, and what identifies a run for
/// `--resume`.
fn spec_of(op: &Op) -> Result<OpSpec> {
    let dtype = |d: Option<&String>| dtype_opt(d);
    Ok(match op {
        Op::Reduce(a) => OpSpec::Reduce {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            reduce: a.op.clone(),
            ddof: a.ddof,
            axis: a.axis,
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Affine(a) => OpSpec::Affine {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            scale: a.scale,
            offset: a.offset,
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Map(a) => OpSpec::Map {
            expr: a.expr.clone(),
            inputs: named_sources(&a.inputs, &a.raw)?,
            output: a.output.clone(),
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Matmul(a) => OpSpec::Matmul {
            x: Source::file(&a.x),
            w: Source::file(&a.w),
            output: a.output.clone(),
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Standardize(a) => OpSpec::Standardize {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            ddof: a.ddof,
            dtype: dtype(a.dtype.as_ref())?,
            stats: a.stats.clone(),
        },
        Op::Cast(a) => OpSpec::Cast {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            dtype: a.dtype.parse()?,
        },
        Op::Convert(a) => OpSpec::Convert {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Stencil(a) => OpSpec::Stencil {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
            filter: a.filter.clone(),
            boundary: a.boundary.clone(),
            dtype: dtype(a.dtype.as_ref())?,
        },
        Op::Transpose(a) => OpSpec::Transpose {
            input: source(&a.input, &a.raw)?,
            output: a.output.clone(),
        },
        Op::Tiles(a) => OpSpec::Tiles {
            input: source(&a.input, &a.raw)?,
            outdir: a.outdir.clone(),
            size: a.size,
            overlap: a.overlap,
            edge: a.edge.clone(),
            patch_format: a.patch_format.clone(),
        },
        Op::Gen(a) => OpSpec::Generate {
            output: a.output.clone(),
            shape: parse_shape(&a.shape)?,
            dtype: a.dtype.parse()?,
            seed: a.seed,
        },
    })
}

fn info(path: &PathBuf, raw: &RawSpec, json: bool) -> Result<()> {
    let t = open(path, raw)?;
    let i = t.info();
    let format = match i.format {
        Format::Npy { version: (a, b) } => format!("npy {a}.{b}"),
        Format::Raw => "raw".into(),
        Format::GeoTiff => match t.tiff() {
            Some((l, _)) if l.bigtiff => "geotiff (BigTIFF)".into(),
            _ => "geotiff".into(),
        },
        Format::Zarr => "zarr v3".into(),
    };
    // layout of a chunked format: chunks, compression, bands, georeferencing
    let mut layout = serde_json::Map::new();
    if let Some((l, g)) = t.tiff() {
        layout.insert(
            "chunks".into(),
            serde_json::json!({
                "kind": if l.tiled { "tiles" } else { "strips" },
                "width": l.chunk.0, "height": l.chunk.1,
                "count": l.offsets.len(),
            }),
        );
        layout.insert("compression".into(), l.compression.clone().into());
        layout.insert("predictor".into(), l.predictor.into());
        layout.insert("bands".into(), l.bands.into());
        layout.insert(
            "interleave".into(),
            if l.planar || l.bands == 1 {
                "band"
            } else {
                "pixel"
            }
            .into(),
        );
        layout.insert(
            "access".into(),
            if t.chunked().is_some() {
                "decoded chunks"
            } else {
                "memory-mapped"
            }
            .into(),
        );
        if !g.is_empty() {
            layout.insert(
                "georef".into(),
                serde_json::json!({
                    "geotransform": g.geotransform(), "epsg": g.epsg(),
                    "nodata": g.nodata, "citation": g.geo_ascii,
                }),
            );
        }
    }
    if let Some(z) = t.zarr() {
        layout.insert(
            "chunks".into(),
            serde_json::json!({
                "kind": if z.inner_chunks.is_some() { "shards" } else { "chunks" },
                "shape": z.chunk_shape, "inner": z.inner_chunks,
            }),
        );
        layout.insert("codecs".into(), serde_json::json!(z.codecs));
        layout.insert("fill_value".into(), z.fill_value.clone().into());
    }
    if json {
        let mut v = serde_json::json!({
            "path": path, "format": format, "shape": i.shape, "dtype": i.dtype.name(),
            "elements": i.len(), "bytes": i.nbytes(), "data_offset": i.data_offset,
        });
        if let Some(o) = v.as_object_mut() {
            o.extend(layout);
        }
        println!("{v}");
    } else {
        println!("{}", path.display());
        println!("  format:      {format}");
        println!(
            "  shape:       {} (rank {})",
            fmt_shape(&i.shape),
            i.shape.len()
        );
        println!("  dtype:       {}", i.dtype);
        println!("  elements:    {}", i.len());
        if t.chunked().is_some() {
            println!(
                "  data:        {} bytes ({}) decoded",
                i.nbytes(),
                tilestream::budget::fmt_bytes(i.nbytes())
            );
        } else {
            println!(
                "  data:        {} bytes ({}) at offset {}",
                i.nbytes(),
                tilestream::budget::fmt_bytes(i.nbytes()),
                i.data_offset
            );
        }
        if let Some(z) = t.zarr() {
            match &z.inner_chunks {
                Some(inner) => println!(
                    "  layout:      shards {} of chunks {}, decoded shard by shard",
                    fmt_shape(&z.chunk_shape),
                    fmt_shape(inner)
                ),
                None => println!(
                    "  layout:      chunks {}, decoded chunk by chunk",
                    fmt_shape(&z.chunk_shape)
                ),
            }
            println!("  codecs:      {}", z.codecs.join(", "));
            println!("  fill value:  {}", z.fill_value);
        }
        if let Some((l, g)) = t.tiff() {
            println!(
                "  layout:      {} {}x{} ({} of them), {} interleave, {}",
                if l.tiled { "tiles" } else { "strips" },
                l.chunk.0,
                l.chunk.1,
                l.offsets.len(),
                if l.planar || l.bands == 1 {
                    "band"
                } else {
                    "pixel"
                },
                if t.chunked().is_some() {
                    "decoded chunk by chunk"
                } else {
                    "memory-mapped"
                }
            );
            let pred = match l.predictor {
                2 => ", horizontal predictor",
                3 => ", floating-point predictor",
                _ => "",
            };
            println!("  compression: {}{pred}", l.compression);
            println!("  bands:       {}", l.bands);
            match g.geotransform() {
                Some(gt) => println!(
                    "  georef:      origin ({}, {}), pixel {} x {}{}",
                    gt[0],
                    gt[3],
                    gt[1],
                    gt[5],
                    g.epsg().map_or(String::new(), |c| format!(", EPSG:{c}"))
                ),
                None => println!("  georef:      none"),
            }
            if let Some(n) = &g.nodata {
                println!("  nodata:      {n}");
            }
        }
    }
    Ok(())
}

fn main_inner(cli: Cli) -> Result<()> {
    let common = &cli.common;
    match cli.cmd {
        Cmd::Info { input, raw, json } => info(&input, &raw, json),
        Cmd::Clean { dir } => {
            let removed = tilestream::tensor::clean_stale(&dir, None)?;
            for p in &removed {
                println!("removed {}", p.display());
            }
            println!(
                "{} left-over file(s) removed from {}",
                removed.len(),
                dir.display()
            );
            Ok(())
        }
        Cmd::Run { .. } if common.resume => Err(Error::invalid(
            "--resume is not available for pipeline files yet: run the steps as subcommands to resume them one by one",
        )),
        Cmd::Run { file, dry_run } => {
            let wf = Workflow::load(&file)?;
            let mut c = common.clone();
            if c.device.is_none() {
                c.device = wf.device();
            }
            if c.memory.is_none() {
                c.memory = wf.memory().map(str::to_string);
            }
            if dry_run {
                println!("{}", wf.plan(&engine(&c)?)?.trim_end());
                return Ok(());
            }
            let (e, bar) = with_progress_bar(engine(&c)?, &c.progress);
            stop_on_ctrl_c(&e);
            let r = wf.run(&e);
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let reports = r?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string(&reports).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else {
                for r in reports {
                    println!("{r}");
                }
            }
            Ok(())
        }
        Cmd::Plan { op } => {
            let e = engine(common)?;
            let p = e.plan_spec(&spec_of(&op)?)?;
            if common.json {
                println!("{}", p.json());
            } else {
                println!("{p}");
            }
            Ok(())
        }
        Cmd::Op(op) => {
            let mut e = engine(common)?;
            let spec = spec_of(&op)?;
            if common.format.is_none() && !matches!(op, Op::Tiles(_)) {
                warn_unknown_extension(spec.output());
            }
            match spec.job_key()? {
                Some(key) => e = e.with_journal(key, common.resume),
                None if common.resume => {
                    return Err(Error::invalid(
                        "--resume is not available for tiles: each patch file is written whole; run it again without --resume",
                    ));
                }
                None => {}
            }
            let (e, bar) = with_progress_bar(e, &common.progress);
            stop_on_ctrl_c(&e);
            let r = e.run_spec(&spec);
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let r = r?;
            if common.json {
                println!(
                    "{}",
                    serde_json::to_string(&r).map_err(|e| Error::Internal(e.to_string()))?
                );
            } else {
                println!("{r}");
            }
            Ok(())
        }
    }
}

/// An input truncated by another program while one of its windows is mapped makes the
/// next access to the lost pages raise SIGBUS. Windows are mapped only after the file's
/// size is checked again, so this needs the file to shrink during the few milliseconds a
/// tile is in flight; should it happen, the run ends with a one-line error and exit
/// code 1, like any other I/O failure, instead of a crash. The temporary output and the
/// journal stay for `--resume` or `tilestream clean`.
fn on_sigbus_exit_cleanly() {
    extern "C" fn handler(_: libc::c_int) {
        const MSG: &[u8] = b"tilestream: error: an input file changed size while in use (another program truncated it while it was mapped): the output was not written\n";
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(1);
        }
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&raw mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &raw const sa, std::ptr::null_mut());
    }
}

/// Prints a command-line parsing error as one line (help and version as they are) and
/// returns its exit code: 2 for usage errors, like every other one-line error.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut first = lines
        .next()
        .unwrap_or("bad arguments")
        .trim_start_matches("error: ")
        .to_string();
    let rest: Vec<&str> = lines.collect();
    if first.ends_with(':') {
        // the list that follows (missing arguments): onto the same line
        let items: Vec<&str> = rest
            .iter()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"))
            .copied()
            .collect();
        first = format!("{} {}", first, items.join(", "));
    }
    let tip = rest
        .iter()
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!(" ({t})"))
        .unwrap_or_default();
    eprintln!("tilestream: error: {first}{tip}; see tilestream --help");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    // A file-size limit (ulimit -f) must fail the write with EFBIG, not kill the process
    // before it can remove its temporary output.
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    on_sigbus_exit_cleanly();
    // RUST_LOG=info (or debug: every tile) turns on logging to stderr.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(&e),
    };
    match main_inner(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tilestream: error: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
