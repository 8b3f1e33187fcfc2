//! Backends: *how* an operation runs on a tile. The engine plans and streams tiles; a
//! backend turns each tile's bytes into results. [`CpuBackend`] runs everywhere (rayon,
//! work split inside each tile); a CUDA backend slots in behind the same trait.
//!
//! A backend owns the memory tiles are staged in ([`Backend::alloc_slot`]: aligned host
//! memory on the CPU, page-locked memory for a device's copies) and, when it has memory
//! of its own, a second budget for it ([`Backend::device_budget`]). The scheduler reaches
//! it through a [`TileKernel`]: [`OnBackend`] turns a synchronous per-tile closure into
//! one whose slots the backend allocates; an asynchronous backend implements
//! [`TileKernel`] itself, returning a [`crate::scheduler::Pending`] handle per tile.

pub mod cpu;
pub mod cuda;
mod kernels;

pub use cpu::{CpuBackend, max_threads};
pub use kernels::{BlockAt, BoxKernel, ElementwiseParams, Kernels, ReduceKernel};

use std::fmt;

use crate::budget::{MemoryBudget, Reservation};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::expr::Program;
use crate::ops::generate::Dist;
use crate::ops::matmul::Resident;
use crate::ops::reduce::{Geometry, Reduce, TileReducer};
use crate::scheduler::{InPlace, Morsel, Pending, Slot, TileKernel};
use crate::tiling::{BoxPlan, BoxTile};

/// Where a backend computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "index")]
pub enum Device {
    /// The host's cores.
    Cpu,
    /// CUDA device number `n`.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The families of operations, as backends group their kernels: what the engine asks a
/// backend about before placing an operation on it ([`cuda::has_kernel`]), and what a run
/// report names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `scale * x + offset`, cast.
    Affine,
    /// Element type conversion.
    Cast,
    /// Random data (`gen`).
    Generate,
    /// Compiled expressions over one or more inputs.
    Map,
    /// A tile of rows times a resident matrix.
    Matmul,
    /// The per-column means and standard deviations `standardize` fits (two reductions
    /// in one pass).
    ColumnStats,
    /// Patches cut from an image (`tiles`).
    Patches,
    /// Reductions along an axis or over all elements.
    Reduce,
    /// `(x - mean) / std` per column.
    Standardize,
    /// An operation with kernels of its own ([`BoxOp`]): a neighbourhood filter.
    Op {
        /// Its name in run reports and notes.
        name: &'static str,
        /// Whether the CUDA backend has a kernel for it, with these parameters.
        cuda: bool,
    },
    /// Transposes of matrices and band stacks.
    Transpose,
    /// A user's own function over blocks (`map_blocks`, `map_overlap`, `reduce_blocks`).
    Blocks,
}

impl Family {
    /// The operation's name in run reports and notes.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Family::Affine => "affine",
            Family::Cast => "cast",
            Family::Generate => "generate",
            Family::Map => "map",
            Family::Matmul => "matmul",
            Family::ColumnStats => "column mean and std",
            Family::Patches => "tiles",
            Family::Reduce => "reduce",
            Family::Standardize => "standardize",
            Family::Op { name, .. } => name,
            Family::Transpose => "transpose",
            Family::Blocks => "a function over blocks",
        }
    }
}

/// The compute side of the pipeline on the host. Methods are called from the pipeline's
/// compute thread, one tile at a time, in plan order; the [`Kernels`] a host backend
/// prepares for a run call them.
pub trait Backend: Kernels + Send + Sync {
    /// One line saying what this backend is (`cpu (rayon, 8 threads)`).
    fn describe(&self) -> String;

    /// Worker threads used inside a tile.
    fn threads(&self) -> usize;

    /// The device this backend computes on.
    fn device(&self) -> Device {
        Device::Cpu
    }

    /// Allocates a staging slot of `len` bytes of this backend's memory, paid for by
    /// `reservation` (from the host budget: staging slots are host memory).
    ///
    /// # Errors
    /// If the memory cannot be allocated (page-locked memory is a scarcer resource).
    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        Ok(Slot::host(len, reservation))
    }

    /// The budget of the device's own memory, for a backend that has some: the planner
    /// sizes tiles to fit both it and the host budget. `None` for the CPU, whose memory
    /// is the host's.
    fn device_budget(&self) -> Option<&MemoryBudget> {
        None
    }

    /// A streaming reducer for `op` over `geometry` of `dtype` elements, whose elements
    /// equal to `nodata` are missing (left out by the `nan` forms and `count`).
    ///
    /// # Errors
    /// If the backend cannot run this reduction.
    fn reducer(
        &self,
        op: Reduce,
        dtype: DType,
        geometry: Geometry,
        nodata: Option<f64>,
    ) -> Result<Box<dyn TileReducer>>;

    /// `out = cast(scale * inp + offset)` for one tile.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    fn affine(
        &self,
        inp: &[u8],
        in_dtype: DType,
        out: &mut [u8],
        out_dtype: DType,
        scale: f64,
        offset: f64,
    ) -> Result<()>;

    /// Casts one tile from `in_dtype` to `out_dtype`.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    fn cast(&self, inp: &[u8], in_dtype: DType, out: &mut [u8], out_dtype: DType) -> Result<()>;

    /// Evaluates a compiled expression over one tile: `inputs[k]` holds stream `k`.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    fn map(
        &self,
        program: &Program,
        inputs: &[&[u8]],
        in_dtypes: &[DType],
        out: &mut [u8],
        out_dtype: DType,
    ) -> Result<()>;

    /// Multiplies one tile of X rows (`rows × k`, dtype `xd`) by the resident W (`k × n`),
    /// writing `rows × n` elements of dtype `od`.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        x: &[u8],
        xd: DType,
        w: &Resident,
        k: usize,
        n: usize,
        out: &mut [u8],
        od: DType,
    ) -> Result<()>;

    /// Standardizes one tile starting at flat element `start`: `(x - mean[c]) / std[c]`
    /// with `c = (index / inner) % mean.len()` (`inner` 1: per column of the trailing
    /// axes; the elements of one channel: per channel).
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    #[allow(clippy::too_many_arguments)]
    fn standardize(
        &self,
        inp: &[u8],
        in_dtype: DType,
        start: u64,
        inner: u64,
        mean: &[f64],
        std: &[f64],
        out: &mut [u8],
        out_dtype: DType,
    ) -> Result<()>;

    /// Fills one tile (flat elements from `start`) with `tilestream gen` data drawn
    /// from `dist`.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    fn generate(
        &self,
        out: &mut [u8],
        dtype: DType,
        start: u64,
        last_dim: u64,
        seed: u64,
        dist: Dist,
    ) -> Result<()>;

    /// Runs `f` on this backend's worker threads: a kernel of an operation's own
    /// ([`BoxOp`]) splits its tile with rayon inside the pool `--threads` sized.
    ///
    /// # Errors
    /// Whatever `f` returns.
    fn install(&self, f: &mut (dyn FnMut() -> Result<()> + Send)) -> Result<()>;

    /// Transposes the `rows × cols` block at column `c0` of a window of full rows of
    /// `row_len` elements of `es` bytes into `out` (`cols × rows`).
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    #[allow(clippy::too_many_arguments)]
    fn transpose(
        &self,
        window: &[u8],
        row_len: usize,
        c0: usize,
        rows: usize,
        cols: usize,
        es: usize,
        out: &mut [u8],
    ) -> Result<()>;
}

/// An operation over box tiles that brings its own kernels, one per device: the device
/// the engine chose asks it for the kernel of a run ([`Kernels::box_op_kernel`]). A
/// neighbourhood filter is one (`spec/ops/stencil/`).
pub trait BoxOp: Sync {
    /// What it is to reports and to placement: its name, and whether it has a CUDA
    /// kernel for these parameters.
    fn family(&self) -> Family;

    /// Its kernel on the host backend `host` (which runs the work of a tile on its own
    /// threads, [`Backend::install`]), over the boxes of `plan`, from `input` to `output`
    /// elements; `scratch` pays for its working memory.
    ///
    /// # Errors
    /// If the kernel cannot be prepared.
    fn host_kernel<'a>(
        &'a self,
        host: &'a dyn Backend,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>>;

    /// Its kernel on the CUDA device `dev` (asked only when [`BoxOp::family`] says it has
    /// one); `scratch` pays for the page-locked buffer the host gathers boxes into. In a
    /// build without the `cuda` feature no device exists to call this with.
    ///
    /// # Errors
    /// If the kernel cannot be compiled or its memory allocated.
    fn cuda_kernel<'a>(
        &'a self,
        dev: &'a std::sync::Arc<cuda::CudaDevice>,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>>;
}

/// A synchronous kernel on a backend: `compute(tile, inputs, output)` runs each tile where
/// it lies (inputs read in place), in output slots the backend allocates.
pub struct OnBackend<'a, F> {
    backend: &'a dyn Backend,
    compute: InPlace<F>,
}

impl<'a, F> OnBackend<'a, F> {
    /// `compute` on `backend`.
    pub fn new(backend: &'a dyn Backend, compute: F) -> Self {
        OnBackend {
            backend,
            compute: InPlace(compute),
        }
    }
}

impl<T, F> TileKernel<T> for OnBackend<'_, F>
where
    T: Copy,
    F: FnMut(T, &[&[u8]], &mut [u8]) -> Result<()> + Send,
{
    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.backend.alloc_slot(len, reservation)
    }
    fn submit(&mut self, m: Morsel<T>) -> Result<Pending<T>> {
        self.compute.submit(m)
    }
}
