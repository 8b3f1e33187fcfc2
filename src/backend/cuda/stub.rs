//! The CUDA backend's types in a build without the `cuda` feature: uninhabited, so no
//! value exists and every method body is an empty match.

use std::sync::Arc;

use super::{BlockAt, ElementwiseParams};
use crate::budget::{MemoryBudget, Reservation};
use crate::device::{DeviceError, GpuInfo};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::expr::Program;
use crate::ops::matmul::Resident;
use crate::ops::reduce::{Geometry, Reduce, TileReducer};
use crate::plan::{Plan, Tile};
use crate::scheduler::{Morsel, Pending, Slot, TileKernel};
use crate::tiling::BoxTile;

/// Page-locked host memory: never, in a build without CUDA support.
///
/// # Errors
/// [`DeviceError::NotBuilt`].
pub fn page_locked(_ordinal: usize, _len: usize) -> Result<Box<dyn crate::scheduler::SlotMemory>> {
    Err(DeviceError::NotBuilt.into())
}

/// A CUDA device; none can be opened in a build without CUDA support.
#[derive(Debug)]
pub enum CudaDevice {}

impl CudaDevice {
    /// Always refused: this build has no CUDA support.
    ///
    /// # Errors
    /// [`DeviceError::NotBuilt`].
    pub fn open(_ordinal: usize, _memory: Option<u64>) -> Result<Self> {
        Err(DeviceError::NotBuilt.into())
    }

    /// What the device is.
    #[must_use]
    pub fn info(&self) -> &GpuInfo {
        match *self {}
    }

    /// The device memory budget.
    #[must_use]
    pub fn budget(&self) -> &MemoryBudget {
        match *self {}
    }

    /// Prepares an elementwise kernel.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    pub fn elementwise(
        self: &Arc<Self>,
        _input: DType,
        _output: DType,
        _params: &ElementwiseParams,
        _tile_elems: u64,
        _lanes: usize,
    ) -> Result<CudaElementwise> {
        match **self {}
    }

    /// Prepares `gen`'s kernel.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    pub fn generate(
        self: &Arc<Self>,
        _dist: &crate::ops::generate::Dist,
        _output: DType,
        _seed: u64,
        _last_dim: u64,
        _tile_elems: u64,
        _lanes: usize,
    ) -> Result<CudaElementwise> {
        match **self {}
    }

    /// Prepares a fused `map` kernel.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    pub fn map(
        self: &Arc<Self>,
        _program: &Program,
        _inputs: &[DType],
        _output: DType,
        _tile_elems: u64,
        _lanes: usize,
    ) -> Result<CudaElementwise> {
        match **self {}
    }
}

impl CudaDevice {
    /// Prepares matmul with a resident W.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        self: &Arc<Self>,
        _w: &Resident,
        _x: DType,
        _output: DType,
        _k: usize,
        _n: usize,
        _tile_rows: u64,
        _lanes: usize,
    ) -> Result<CudaElementwise> {
        match **self {}
    }

    /// Prepares a reduction.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    pub fn reduce(
        self: &Arc<Self>,
        _op: Reduce,
        _dtype: DType,
        _g: Geometry,
        _nodata: Option<f64>,
        _plan: &Plan,
        _host: Box<dyn TileReducer>,
    ) -> Result<CudaReduce> {
        match **self {}
    }
}

/// A reduction on a device; none exists without CUDA support.
pub enum CudaReduce {}

impl CudaReduce {
    /// Waits for every tile and copies the state back.
    ///
    /// # Errors
    /// None: no value exists.
    pub fn sync(&mut self) -> Result<()> {
        match *self {}
    }

    /// Uploads the host reducer's state.
    ///
    /// # Errors
    /// None: no value exists.
    pub fn upload_state(&mut self) -> Result<()> {
        match *self {}
    }

    /// A page-locked staging slot.
    ///
    /// # Errors
    /// None: no value exists.
    pub fn alloc_slot(&self, _len: usize, _reservation: Reservation) -> Result<Slot> {
        match *self {}
    }

    /// The host reducer.
    pub fn host_mut(&mut self) -> &mut Box<dyn TileReducer> {
        match *self {}
    }

    /// The host reducer holding the result.
    ///
    /// # Errors
    /// None: no value exists.
    pub fn finish(self) -> Result<Box<dyn TileReducer>> {
        match self {}
    }
}

impl TileKernel<Tile> for &mut CudaReduce {
    fn submit(&mut self, _m: Morsel<Tile>) -> Result<Pending<Tile>> {
        match **self {}
    }
}

/// An elementwise kernel on a device; none exists without CUDA support.
pub enum CudaElementwise {}

impl TileKernel<Tile> for CudaElementwise {
    fn submit(&mut self, _m: Morsel<Tile>) -> Result<Pending<Tile>> {
        match *self {}
    }
}

/// A transpose on a device; none exists without CUDA support.
pub struct CudaTranspose<'a> {
    never: std::convert::Infallible,
    _at: std::marker::PhantomData<&'a ()>,
}

impl CudaDevice {
    /// Prepares the transpose.
    ///
    /// # Errors
    /// None: no device exists to call this on.
    pub fn transpose<'a>(
        self: &Arc<Self>,
        _es: usize,
        _window_bytes: u64,
        _out_bytes: u64,
        _lanes: usize,
        _at: BlockAt<'a>,
    ) -> Result<CudaTranspose<'a>> {
        match **self {}
    }
}

impl TileKernel<BoxTile> for CudaTranspose<'_> {
    fn submit(&mut self, _m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        match self.never {}
    }
}
