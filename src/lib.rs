//! # tilestream
//!
//! Process arrays larger than memory, from disk, under a memory budget you choose.
//!
//! A 3075200 × 512 float32 array is 6.3 GB: `np.load` on a laptop fails with "out of
//! memory allocating tensor". tilestream reaches the file through memory-mapped windows,
//! plans tiles that fit the budget, and streams them through a read → compute → write
//! pipeline with a fixed pool of staging slots, so peak memory stays flat while reading,
//! computing and writing overlap.
//!
//! ```
//! # fn main() -> tilestream::Result<()> {
//! use tilestream::{Axis, DType, Engine, MemoryBudget, Reduce, TensorFile};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("x.npy");
//!
//! // a 10000 × 64 f32 array of N(col/100, 1) values, written tile by tile
//! let engine = Engine::new(MemoryBudget::parse("1MiB")?)?;
//! engine.generate(&path, &[10_000, 64], DType::F32, 42)?;
//!
//! // column means under a 1 MiB budget: the everyday one-line call
//! let means = tilestream::reduce(&path, Reduce::Mean, Axis(0), MemoryBudget::parse("1MiB")?)?;
//! let m = means.to_f64();
//! assert_eq!(m.len(), 64);
//! assert!((m[50] - 0.5).abs() < 0.05);
//!
//! // or with the engine, for repeated calls and a run report
//! let (std, report) = engine.reduce(&TensorFile::open(&path)?, Reduce::Std { ddof: 0 }, Axis(0))?;
//! assert!(report.peak_reserved_bytes <= 1 << 20);
//! assert!((std.to_f64()[0] - 1.0).abs() < 0.05);
//! # Ok(()) }
//! ```
//!
//! ## Pieces
//! - [`Engine`]: runs every operation under one [`MemoryBudget`]; [`RunReport`] says
//!   what a run did, [`Plan`] and [`BoxPlan`] what it will do.
//! - [`OpSpec`] ([`spec`]): one serialisable description of every operation, run by
//!   [`Engine::run_spec`] (the path of the command line and the Python package);
//!   [`Workflow`] ([`workflow`]): pipeline files.
//! - [`format`](mod@format): `.npy` (1.0/2.0/3.0), raw, GeoTIFF/COG, Zarr v3, HDF5,
//!   NetCDF and JPEG 2000 files ([`TensorFile::open`]), mapped or decoded windows, atomic
//!   outputs. Any operation takes such an input and writes a GeoTIFF or Zarr output when
//!   the output path says so (or [`Engine::with_out_format`]); [`Engine::with_georef`]
//!   carries a scene's georeferencing to its outputs.
//! - [`device`]: GPUs: probing them, the CUDA driver and NVRTC ([`DeviceRequest`]).
//! - Filters ([`Filter`], [`Stencil`], [`Boundary`]), reductions ([`Reduce`],
//!   [`ReduceOver`], [`Partial`] for a cluster job), the write options of GeoTIFF
//!   ([`TiffWriteOptions`], [`CogOptions`]) and Zarr ([`ZarrWriteOptions`]) outputs, and
//!   the errors ([`Error`], its budget, `.npy`, TIFF and Zarr kinds) are re-exported here.
//!
//! The layers inside (budget, planners, scheduler, backends, formats' decoders) are
//! described in `docs/architecture.md`. Some of their modules are public for the command
//! line, the Python package, the integration tests, the benchmarks and the fuzz targets,
//! but hidden here: they are not part of the API and change without notice.
//!
//! ## Features
//! - `cuda` (default): the CUDA backend ([`device`], [`Engine::with_device`]). The
//!   driver and NVRTC are loaded at run time, so a build with it links only libc and
//!   runs on machines without CUDA; nothing CUDA is needed to build it. Without the
//!   feature the CUDA types are uninhabited stubs and asking for a CUDA device answers
//!   that this build has no CUDA support.
//! - `cli` (default): the `tilestream` command line's own dependencies (argument parsing,
//!   progress bars, log output, Ctrl-C handling). The library and the Python extension
//!   build without it; the binary and the integration tests need it.
//!
//! `--no-default-features` builds the CPU-only library;
//! `--no-default-features --features cli` a CPU-only command line.

// What a library user reaches: the items re-exported below, and the modules `format`
// (opening files, the write options of outputs), `device` (GPUs), `spec` (the operations)
// and `workflow` (pipeline files). The hidden public modules are for the command line,
// the Python binding, the integration tests, the benchmarks and the fuzz targets; the
// rest is private to the crate.
#[doc(hidden)]
pub mod backend;
pub(crate) mod budget;
pub mod device;
#[doc(hidden)]
pub mod dtype;
pub(crate) mod engine;
#[doc(hidden)]
pub mod error;
pub(crate) mod fault;
pub mod format;
#[doc(hidden)]
pub mod fuzz_checks;
pub(crate) mod io;
pub(crate) mod journal;
pub(crate) mod layout;
#[doc(hidden)]
pub mod ops;
pub(crate) mod plan;
#[doc(hidden)]
pub mod scheduler;
pub(crate) mod shape;
pub mod spec;
#[doc(hidden)]
pub mod tiling;
pub mod workflow;

use std::path::Path;

// What a library user needs, documented at the root.
pub use budget::{BudgetError, MemoryBudget, Reservation, fmt_bytes, parse_size};
pub use device::{DeviceError, DeviceRequest};
pub use dtype::{DType, Element};
pub use engine::{
    Array, Batch, BatchPart, BatchPlan, BatchRequest, BatchStream, Block, BlockFn, BlockInput,
    BlockOut, BlockShape, Blocks, BlocksOut, BlocksPlan, Edge, Engine, FunctionRunner, MapNodata,
    Next, PatchFormat, PatchSpec, ProgressCallback, RunReport, Shuffle, ShuffleWindow, Working,
    merge_partials, write_npz,
};
pub use error::{Error, FormatErrorKind, NpyError, Result, TiffError, ZarrError};
pub use format::{
    CogOptions, Format, GeoRef, OutFormat, Overviews, Resampling, TensorFile, TensorInfo,
    TiffCompression, TiffPredictor, TiffWriteOptions, ZarrCompression, ZarrWriteOptions,
};
pub use journal::JobKey;
pub use ops::generate::Dist;
pub use ops::histogram::Bins;
pub use ops::quantile::Quantiles;
pub use ops::{Axis, Partial, Reduce, ReduceOver, row_step};
pub use plan::Plan;
pub use scheduler::Progress;
pub use shape::{fmt_shape, parse_shape};
// the spec of each operation is in `spec` (`spec::ReduceSpec`...), beside the list of
// them: adding an operation does not touch this file
pub use spec::stencil::{Filter, Stencil};
pub use spec::{OpSpec, OutputLayout, RawLayout, Source, SpecPlan};
pub use tiling::{Boundary, BoxPlan, Edges};
pub use workflow::Workflow;

// The plumbing of the command line, the Python package and its cluster jobs (outputs
// created once and filled by region, the backend seam): public for them, not
// part of the documented API.
#[doc(hidden)]
pub use backend::{Backend, CpuBackend};
#[doc(hidden)]
pub use engine::peak_rss;
#[doc(hidden)]
pub use format::{OutRegion, commit_npy, commit_zarr, create_npy_for_rows, create_zarr_for_rows};

/// Reduces the `.npy` file at `path` under `budget`, with all cores: the everyday call.
///
/// `over` is an [`Axis`] or [`ReduceOver::All`]. The result is small and returned in
/// memory; see [`Engine::reduce`] for the run report and [`Engine::reduce_to_file`] to
/// write it.
///
/// # Errors
/// [`Error`] if the file cannot be read, the axis is out of range, or the budget is too
/// small (the message says what would fit).
pub fn reduce(
    path: impl AsRef<Path>,
    op: Reduce,
    over: impl Into<ReduceOver>,
    budget: MemoryBudget,
) -> Result<Array> {
    let input = TensorFile::open(path)?;
    Engine::new(budget)?
        .reduce(&input, op, over)
        .map(|(a, _)| a)
}
