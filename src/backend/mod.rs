//! Backends: *how* an operation runs on a tile. The engine plans and streams tiles; a
//! backend turns each tile's bytes into results. [`CpuBackend`] runs everywhere (rayon,
//! work split inside each tile); a CUDA backend slots in behind the same trait.

mod cpu;

pub use cpu::{CpuBackend, max_threads};

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::expr::Program;
use crate::ops::matmul::Resident;
use crate::ops::reduce::{Geometry, Reduce, TileReducer};
use crate::ops::stencil::TileJob;

/// The compute side of the pipeline. Methods are called from the pipeline's compute
/// thread, one tile at a time, in plan order.
pub trait Backend: Send + Sync {
    /// One line saying what this backend is (`cpu (rayon, 8 threads)`).
    fn describe(&self) -> String;

    /// Worker threads used inside a tile.
    fn threads(&self) -> usize;

    /// A streaming reducer for `op` over `geometry` of `dtype` elements.
    ///
    /// # Errors
    /// If the backend cannot run this reduction.
    fn reducer(&self, op: Reduce, dtype: DType, geometry: Geometry)
    -> Result<Box<dyn TileReducer>>;

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
    /// with `c` the index modulo `mean.len()`.
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    #[allow(clippy::too_many_arguments)]
    fn standardize(
        &self,
        inp: &[u8],
        in_dtype: DType,
        start: u64,
        mean: &[f64],
        std: &[f64],
        out: &mut [u8],
        out_dtype: DType,
    ) -> Result<()>;

    /// Fills one tile (flat elements from `start`) with `tilestream gen` data.
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
    ) -> Result<()>;

    /// Runs one tile of a neighbourhood filter into `out`, with `arena` as reusable
    /// scratch (see [`crate::ops::stencil`]).
    ///
    /// # Errors
    /// If the backend fails to run the kernel.
    fn stencil(&self, job: &TileJob<'_>, arena: &mut Vec<f64>, out: &mut [u8]) -> Result<()>;

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
