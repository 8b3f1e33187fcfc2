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
//! - [`format`](mod@format): `.npy` (1.0/2.0/3.0), raw, GeoTIFF ([`format::tiff`]) and Zarr v3
//!   ([`format::zarr`]) files, mapped or decoded windows, atomic outputs. Any operation
//!   takes a GeoTIFF or Zarr input and writes one when the output path says so (or
//!   [`Engine::with_out_format`]); [`Engine::with_georef`] carries a scene's
//!   georeferencing to its outputs.
//! - [`budget`]: [`MemoryBudget`] and RAII reservations.
//! - [`plan`] and [`tiling`]: the pure tile planners (flat tiles; boxes with halos).
//! - [`scheduler`]: the read/compute/write stages and what flows between them.
//! - [`backend`]: the compute seam; [`CpuBackend`] on rayon, and the CUDA backend.
//! - [`ops`]: what each operation is: reductions, expressions, matmul, generation,
//!   filters.
//! - [`engine`]: [`Engine`], the library entry points.
//! - [`spec`]: [`OpSpec`], one serialisable description of every operation, run by
//!   [`Engine::run_spec`] (the path of the command line and the Python package).
//! - [`workflow`]: pipeline files ([`workflow::Workflow`]).
//! - [`journal`]: resumable runs.
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

pub mod backend;
pub mod budget;
pub mod device;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod fault;
pub mod format;
#[doc(hidden)]
pub mod fuzz_checks;
pub(crate) mod io;
pub mod journal;
pub mod layout;
pub mod ops;
pub mod plan;
pub mod scheduler;
pub mod shape;
pub mod spec;
pub mod tiling;
pub mod workflow;

use std::path::Path;

pub use backend::{Backend, CpuBackend};
pub use budget::{BudgetError, MemoryBudget, Reservation, parse_size};
pub use dtype::{DType, Element};
pub use engine::{Array, Engine, MapNodata, RunReport, merge_partials};
pub use error::{Error, Result};
pub use format::{TensorFile, TensorInfo};
pub use journal::JobKey;
pub use ops::{Axis, Partial, Reduce, ReduceOver, row_step};
pub use plan::Plan;
pub use scheduler::Progress;
pub use spec::{OpSpec, RawLayout, Source, SpecPlan};

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
