//! What a device prepares for one run: a kernel per family of operations, through the
//! one [`Kernels`] trait that the host backend ([`super::CpuBackend`], in
//! `cpu/kernels.rs`) and the CUDA device (`cuda/kernels.rs`) both implement — the
//! device is chosen once per operation ([`Kernels::has_kernel`]) and every family is a
//! method on it, as candle's `BackendDevice`/`BackendStorage` and burn's op families do.
//! The engine plans a run, asks the chosen device for the kernel and streams the tiles
//! through it; it never names the device's types.
//!
//! An operation with kernels of its own (a neighbourhood filter) is a [`BoxOp`]: the
//! device calls back into it for its kernel, as candle's `CustomOp` has a `cpu_fwd` and a
//! `cuda_fwd`, so such an operation lives in one folder with its kernels and adding one
//! touches no file here.

use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::expr::Program;
use crate::ops::generate::Dist;
use crate::ops::matmul::Resident;
use crate::ops::reduce::{Geometry, Reduce, TileReducer};
use crate::plan::{Plan, Tile};
use crate::scheduler::{Morsel, Pending, Slot, TileKernel};
use crate::tiling::{BoxPlan, BoxTile};

use super::{BoxOp, Device, Family};

/// A kernel a device prepared for one run, over tiles of type `T`.
pub type BoxKernel<'a, T> = Box<dyn TileKernel<T> + 'a>;

/// Where a transpose tile's block lies in its window: the window's row length and the
/// block's first column within a row.
pub type BlockAt<'a> = Box<dyn Fn(&BoxTile) -> (usize, usize) + Send + 'a>;

/// The parameters of an elementwise kernel.
#[derive(Clone, Debug)]
pub enum ElementwiseParams {
    /// `y = cast(fma(x, scale, offset))`.
    Affine {
        /// Multiplier.
        scale: f64,
        /// Added after multiplying.
        offset: f64,
    },
    /// `y = cast(x)`.
    Cast,
    /// `y = cast((x - mean[c]) / sd[c])`, `c = (flat index / inner) % mean.len()`.
    Standardize {
        /// Per-column (or per-channel) means.
        mean: Vec<f64>,
        /// Per-column (or per-channel) standard deviations.
        sd: Vec<f64>,
        /// Consecutive elements that share one statistic: 1 per column, the elements of
        /// one channel per channel.
        inner: u64,
    },
}

/// A streaming reduction a device prepared: fed tile after tile in plan order, its
/// state checkpointed between tiles and restored on resume (the engine's journal does
/// both through the host reducer), the host reducer holding the result once every tile
/// ran.
pub trait ReduceKernel: TileKernel<Tile> {
    /// The reducer on the host: its state is what a checkpoint saves and what a resumed
    /// run restores.
    fn host_mut(&mut self) -> &mut Box<dyn TileReducer>;

    /// Makes the kernel's state the host reducer's (after a resume restored it).
    ///
    /// # Errors
    /// If the state cannot be copied to the device.
    fn upload_state(&mut self) -> Result<()>;

    /// Waits for the tiles in flight and brings the kernel's state into the host
    /// reducer (before a checkpoint saves it).
    ///
    /// # Errors
    /// If a tile failed or the state cannot be copied back.
    fn sync(&mut self) -> Result<()>;

    /// The least seconds between two checkpoints: 0 for a state at hand on the host
    /// (the journal's own rule), more for a device's, which must stop its pipeline to
    /// bring its state back.
    fn checkpoint_secs(&self) -> f64;

    /// The host reducer holding the result, once every tile ran.
    ///
    /// # Errors
    /// If a tile failed.
    fn finish(self: Box<Self>) -> Result<Box<dyn TileReducer>>;
}

/// The kernels of each family a device prepares for a run. Every method gives a kernel
/// the scheduler streams the run's tiles through; each is called only for a family the
/// device [has a kernel for](Kernels::has_kernel) (the host has them all).
pub trait Kernels: Send + Sync {
    /// The device the kernels run on.
    fn device(&self) -> Device;

    /// Whether this device has a kernel for `family`: the engine runs the operation
    /// on the host otherwise.
    fn has_kernel(&self, family: Family) -> bool;

    /// An elementwise kernel (affine, cast, standardize) from `input` to `output`
    /// elements, for the tiles of `plan`.
    ///
    /// # Errors
    /// If the kernel cannot be prepared (compiled, its memory allocated).
    fn elementwise_kernel<'a>(
        &'a self,
        params: &'a ElementwiseParams,
        input: DType,
        output: DType,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>>;

    /// A compiled expression over inputs of `inputs` dtypes (one stream each).
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    fn map_kernel<'a>(
        &'a self,
        program: &'a Program,
        inputs: &'a [DType],
        output: DType,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>>;

    /// Tiles of rows of X (`k` columns of `x`) times the resident `w` (`k × n`).
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    #[allow(clippy::too_many_arguments)]
    fn matmul_kernel<'a>(
        &'a self,
        w: &'a Resident,
        x: DType,
        output: DType,
        k: usize,
        n: usize,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>>;

    /// `tilestream gen` data drawn from `dist` (the values depend only on `seed` and an
    /// element's position; `last_dim` is the length of the last axis, 0 for rank 1).
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    fn generate_kernel<'a>(
        &'a self,
        dist: Dist,
        output: DType,
        seed: u64,
        last_dim: u64,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>>;

    /// A reduction `op` over `geometry` of `dtype` elements whose elements equal to
    /// `nodata` are missing, for the tiles of `plan`, accumulating into `reducer` (made
    /// by the host backend with the same `nodata`, [`super::Backend::reducer`]).
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    fn reduce_kernel<'a>(
        &'a self,
        op: Reduce,
        dtype: DType,
        geometry: Geometry,
        nodata: Option<f64>,
        plan: &Plan,
        reducer: Box<dyn TileReducer>,
    ) -> Result<Box<dyn ReduceKernel + 'a>>;

    /// The kernel of an operation of its own over the boxes of `plan` ([`BoxOp`]),
    /// asked of `op` for this device; `scratch` pays for its working memory (the host's
    /// arena, or the page-locked buffer a device gathers boxes into) for as long as the
    /// kernel lives.
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    fn box_op_kernel<'a>(
        &'a self,
        op: &'a dyn BoxOp,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>>;

    /// A transpose of blocks of `es`-byte elements, each found in its window by `at`;
    /// windows of up to `window_bytes` and outputs of up to `out_bytes` bytes, `lanes`
    /// tiles in flight.
    ///
    /// # Errors
    /// As [`Kernels::elementwise_kernel`].
    fn transpose_kernel<'a>(
        &'a self,
        es: usize,
        window_bytes: u64,
        out_bytes: u64,
        lanes: usize,
        at: BlockAt<'a>,
    ) -> Result<BoxKernel<'a, BoxTile>>;
}

impl<T, K: TileKernel<T> + ?Sized> TileKernel<T> for Box<K> {
    fn staged_inputs(&self) -> bool {
        (**self).staged_inputs()
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        (**self).alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<T>) -> Result<Pending<T>> {
        (**self).submit(m)
    }
}
