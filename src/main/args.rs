//! The command line's arguments (clap): the options every command shares, and one
//! struct of arguments per operation. What they mean for a run is in `main.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tilestream::device::DeviceRequest;

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
    /// Cap on one tile's staging bytes (e.g. 64MiB) [default: 16MiB on the CPU, 64MiB
    /// on a GPU]
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

/// How to read an input that is not `.npy`.
#[derive(Args, Clone, Debug)]
pub(crate) struct RawSpec {
    /// Shape of a raw (headerless) input, e.g. 3075200x512.
    #[arg(long)]
    pub(crate) shape: Option<String>,
    /// Dtype of a raw input (bool, u8..u64, i8..i64, f16, bf16, f32, f64).
    #[arg(long = "in-dtype")]
    pub(crate) in_dtype: Option<String>,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct ReduceArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file for the result (.npy, .tif GeoTIFF, .zarr store, or raw for any other
    /// extension).
    pub(crate) output: PathBuf,
    /// Reduction: sum, mean, min, max, var, std.
    #[arg(long, default_value = "sum")]
    pub(crate) op: String,
    /// Axis to reduce; omit to reduce over all elements.
    #[arg(long)]
    pub(crate) axis: Option<usize>,
    /// Delta degrees of freedom for var and std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    pub(crate) ddof: u32,
    /// Cast the result to this dtype.
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct AffineArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Multiplier a in y = a*x + b.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub(crate) scale: f64,
    /// Offset b in y = a*x + b.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub(crate) offset: f64,
    /// Output dtype (default: the input's). Floats round to nearest even; integers
    /// round toward zero, saturate, and take NaN to 0.
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    /// The output's nodata value (nan, -9999): given to the pixels where the input is
    /// nodata, and written to a GeoTIFF output (default: nan for a float output, the
    /// input's nodata value for an integer one).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    pub(crate) nodata: Option<String>,
    /// Compute the pixels where the input is nodata like any other (no masking).
    #[arg(long)]
    pub(crate) ignore_nodata: bool,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct MapArgs {
    /// The expression, e.g. '(x*2+1)' or '(s[7] - s[3]) / (s[7] + s[3])'.
    #[arg(allow_hyphen_values = true)]
    pub(crate) expr: String,
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// A named input, NAME=FILE (repeatable).
    #[arg(long = "in", value_name = "NAME=FILE", required = true, value_parser = clap::value_parser!(std::ffi::OsString))]
    pub(crate) inputs: Vec<std::ffi::OsString>,
    /// Output dtype (default: the widest float input, f64 if there is none).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    /// The output's nodata value (nan, -9999): given to the pixels where an input is
    /// nodata, and written to a GeoTIFF output (default: nan for a float output, the
    /// inputs' nodata value for an integer one).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    pub(crate) nodata: Option<String>,
    /// Compute the pixels where an input is nodata like any other (no masking).
    #[arg(long)]
    pub(crate) ignore_nodata: bool,
    /// The nodata value of input NAME, in place of what its file says (a .npy or raw
    /// file says none; VALUE none: no nodata). Repeatable.
    #[arg(long, value_name = "NAME=VALUE", allow_hyphen_values = true)]
    pub(crate) in_nodata: Vec<String>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct MatmulArgs {
    /// Left operand X (R x K), streamed by row tiles.
    pub(crate) x: PathBuf,
    /// Right operand W (K x N), held in memory (counts in --memory).
    pub(crate) w: PathBuf,
    /// Output file (R x N; .npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Output dtype (default: f32 when both operands are exact in f32, f64 otherwise).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct StandardizeArgs {
    /// Input tensor (rows x columns...; .npy, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Output dtype (default f32; f64 for f64 input).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    /// Delta degrees of freedom of the std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    pub(crate) ddof: u32,
    /// Also write the mean and std used to this .npz (`np.load(path)["mean"]`, `["std"]`).
    #[arg(long)]
    pub(crate) stats: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct CastArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Target dtype.
    #[arg(long)]
    pub(crate) dtype: String,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct ClipArgs {
    /// Input tensor (.npy, .tif/.tiff, .zarr, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file (.npy, .tif/.tiff, .zarr, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Lower bound.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) lo: f64,
    /// Upper bound (at least --lo).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) hi: f64,
    /// Output dtype (default: the input's).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct ConvertArgs {
    /// Input tensor (.npy, .tif/.tiff, .zarr, or raw with --shape and --in-dtype).
    pub(crate) input: PathBuf,
    /// Output file (.npy, .tif/.tiff, .zarr, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Cast to this dtype on the way (default: keep the input's).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct GenArgs {
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// Shape, e.g. 3075200x512.
    #[arg(long)]
    pub(crate) shape: String,
    /// Element type.
    #[arg(long, default_value = "f32")]
    pub(crate) dtype: String,
    /// Random seed (the values depend only on it, never on budget or threads).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Distribution: demo (N(col/100, 1): each column's mean is its index / 100),
    /// normal (--mean, --std) or uniform (--low, --high).
    #[arg(long, default_value = "demo")]
    pub(crate) dist: String,
    /// Mean of --dist normal [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) mean: Option<f64>,
    /// Standard deviation of --dist normal [default: 1].
    #[arg(long)]
    pub(crate) std: Option<f64>,
    /// Smallest value of --dist uniform [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) low: Option<f64>,
    /// Bound above of --dist uniform, not reached [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) high: Option<f64>,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct StencilArgs {
    /// Input image: (height, width) or (bands, height, width); .npy, or raw with --shape
    /// and --in-dtype.
    pub(crate) input: PathBuf,
    /// Output file (same shape; .npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    /// The filter: gaussian:sigma=S[,truncate=T] | box:size=N | sobel[:axis=0|1] |
    /// median:size=N | convolve:KERNEL.npy
    #[arg(long)]
    pub(crate) filter: String,
    /// Values outside the image: reflect | nearest | wrap | constant:V.
    #[arg(long, default_value = "reflect")]
    pub(crate) boundary: String,
    /// Output dtype (default: the input's; integers round toward zero and saturate).
    #[arg(long)]
    pub(crate) dtype: Option<String>,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct TransposeArgs {
    /// Input array (rank 2, or rank 3 to transpose the last two axes of each band).
    pub(crate) input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Args, Clone, Debug)]
pub(crate) struct TilesArgs {
    /// Input image: (height, width) or (bands, height, width).
    pub(crate) input: PathBuf,
    /// Directory for the patches and index.csv (created if missing).
    pub(crate) outdir: PathBuf,
    /// Patch side in pixels.
    #[arg(long, default_value_t = 512)]
    pub(crate) size: usize,
    /// Pixels shared by neighbouring patches (stride = size - overlap).
    #[arg(long, default_value_t = 0)]
    pub(crate) overlap: usize,
    /// At the right and bottom edges: shift (move the last patch back to end at the edge)
    /// or pad (keep the stride, pad with zeros).
    #[arg(long, default_value = "shift")]
    pub(crate) edge: String,
    /// Patch files: npy, or tif (tiled GeoTIFFs, each with the input's georeferencing
    /// moved to its own origin; see the --tiff-* options).
    #[arg(long, default_value = "npy")]
    pub(crate) patch_format: String,
    #[command(flatten)]
    pub(crate) raw: RawSpec,
}

#[derive(Subcommand, Clone, Debug)]
pub(crate) enum Op {
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
    #[command(after_help = "Examples:
  tilestream affine x.npy y.npy --scale 2 --offset 1 --dtype f16 --memory 512MiB
  tilestream affine scene.tif refl.tif --scale 0.0001 --dtype f32   # nodata pixels: nan

scale * x + offset is rounded once (a fused multiply-add), then cast. Pixels where the
input is nodata (a GeoTIFF's GDAL nodata value) become the output's nodata value, as in
map: --nodata, by default nan for a float output and the input's value for an integer
one; --ignore-nodata computes them like any other.")]
    Affine(AffineArgs),
    /// Evaluate an elementwise expression over named inputs in one pass.
    #[command(after_help = "Examples:
  tilestream map '(x*2+1)' y.npy --in x=x.npy --dtype f16
  tilestream map 'where(a > b, a - b, 0)' d.npy --in a=a.npy --in b=b.npy
  tilestream map '(s[7] - s[3]) / (s[7] + s[3])' ndvi.npy --in s=scene.npy   # bands of one file

Operators: + - * / ** (right-assoc), unary -, < <= > >= == != (give 1 or 0).
Functions: abs sqrt exp log log1p sin cos tanh floor ceil round isnan min max clip(x,lo,hi)
where(cond,a,b) fma(a,b,c) (a*b+c rounded once). Literals: 1, 2.5, 1e-3, nan, inf. Evaluated in f64, cast once at the end.

Nodata: where an input is nodata (a GeoTIFF pixel equal to its GDAL nodata value), the
output is the output's nodata value: --nodata, by default nan for a float output and the
inputs' shared nodata value for an integer one (refused when there is none to give).
A GeoTIFF output carries that value as its nodata. --in-nodata x=-9999 says an input's
nodata value where its file cannot (.npy, raw). --ignore-nodata computes those pixels like
any other: give it to fill them yourself (where(isnan(x), 0, x) is masked again without).")]
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
(geotransform, CRS, nodata) is copied to a GeoTIFF output (the nodata value where the
output type holds it).")]
    Convert(ConvertArgs),
    /// Cast to another dtype.
    #[command(after_help = "Examples:
  tilestream cast x.npy x16.npy --dtype f16
  tilestream cast counts.npy c8.npy --dtype u8      # saturates at 0 and 255

Floats to f16/bf16 round to nearest even; floats to integers round toward zero, saturate,
and take NaN to 0; integers to integers are exact and saturate.")]
    Cast(CastArgs),
    /// Limit each element to [lo, hi] (numpy's clip).
    #[command(after_help = "Examples:
  tilestream clip x.npy y.npy --lo 0 --hi 1
  tilestream clip scene.tif s.tif --lo 0 --hi 10000      # nodata pixels stay nodata

Runs as the map 'clip(x, lo, hi)': in f64, then cast to --dtype (default: the input's);
pixels where the input is nodata are masked as map masks them.")]
    Clip(ClipArgs),
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
