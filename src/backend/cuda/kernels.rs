//! The CUDA device's [`Kernels`]: each family's kernel prepared on the device (compiled
//! with NVRTC, resident operands uploaded, page-locked slots and streams set up) by the
//! `CudaDevice` methods of `runtime.rs`, `reduce.rs` and `transpose.rs`; an operation
//! with kernels of its own prepares its kernel itself ([`BoxOp`]). In a build without the `cuda` feature `CudaDevice` is uninhabited, so
//! this impl exists there too and no method of it can be reached.

use std::sync::Arc;

use super::{BlockAt, CudaDevice, CudaReduce, ElementwiseParams};
use crate::backend::{BoxKernel, BoxOp, Device, Family, Kernels, ReduceKernel};
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

impl Kernels for Arc<CudaDevice> {
    fn device(&self) -> Device {
        Device::Cuda(self.info().ordinal)
    }

    fn has_kernel(&self, family: Family) -> bool {
        super::has_kernel(family)
    }

    fn elementwise_kernel<'a>(
        &'a self,
        params: &'a ElementwiseParams,
        input: DType,
        output: DType,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        let k = CudaDevice::elementwise(self, input, output, params, plan.tile_elems, plan.depth)?;
        Ok(Box::new(k))
    }

    fn map_kernel<'a>(
        &'a self,
        program: &'a Program,
        inputs: &'a [DType],
        output: DType,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        let k = CudaDevice::map(self, program, inputs, output, plan.tile_elems, plan.depth)?;
        Ok(Box::new(k))
    }

    fn matmul_kernel<'a>(
        &'a self,
        w: &'a Resident,
        x: DType,
        output: DType,
        k: usize,
        n: usize,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        let kernel = CudaDevice::matmul(self, w, x, output, k, n, plan.tile_elems, plan.depth)?;
        Ok(Box::new(kernel))
    }

    fn generate_kernel<'a>(
        &'a self,
        dist: Dist,
        output: DType,
        seed: u64,
        last_dim: u64,
        plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        let k = CudaDevice::generate(
            self,
            &dist,
            output,
            seed,
            last_dim,
            plan.tile_elems,
            plan.depth,
        )?;
        Ok(Box::new(k))
    }

    fn reduce_kernel<'a>(
        &'a self,
        op: Reduce,
        dtype: DType,
        geometry: Geometry,
        nodata: Option<f64>,
        plan: &Plan,
        reducer: Box<dyn TileReducer>,
    ) -> Result<Box<dyn ReduceKernel + 'a>> {
        let k = CudaDevice::reduce(self, op, dtype, geometry, nodata, plan, reducer)?;
        Ok(Box::new(DeviceReduce(k)))
    }

    fn box_op_kernel<'a>(
        &'a self,
        op: &'a dyn BoxOp,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        op.cuda_kernel(self, plan, input, output, scratch)
    }

    fn transpose_kernel<'a>(
        &'a self,
        es: usize,
        window_bytes: u64,
        out_bytes: u64,
        lanes: usize,
        at: BlockAt<'a>,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        let k = CudaDevice::transpose(self, es, window_bytes, out_bytes, lanes, at)?;
        Ok(Box::new(k))
    }
}

/// How often a reduction on the device checkpoints at most: bringing its state back
/// stops the device's pipeline, so once a second costs little, every tile most of the
/// overlap.
const DEVICE_CHECKPOINT_SECS: f64 = 1.0;

/// A reduction on the device, as a [`ReduceKernel`].
struct DeviceReduce(CudaReduce);

impl TileKernel<Tile> for DeviceReduce {
    fn staged_inputs(&self) -> bool {
        true
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.0.alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<Tile>) -> Result<Pending<Tile>> {
        (&mut self.0).submit(m)
    }
}

impl ReduceKernel for DeviceReduce {
    fn host_mut(&mut self) -> &mut Box<dyn TileReducer> {
        self.0.host_mut()
    }

    fn upload_state(&mut self) -> Result<()> {
        self.0.upload_state()
    }

    fn sync(&mut self) -> Result<()> {
        self.0.sync()
    }

    fn checkpoint_secs(&self) -> f64 {
        DEVICE_CHECKPOINT_SECS
    }

    fn finish(self: Box<Self>) -> Result<Box<dyn TileReducer>> {
        self.0.finish()
    }
}
