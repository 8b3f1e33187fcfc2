//! The host's [`Kernels`]: each family's kernel is a closure over the [`Backend`]'s
//! per-tile method, run where the tile lies (inputs read in place from their mapped
//! windows, output slots of host memory) through [`OnBackend`].

use super::CpuBackend;
use crate::backend::{
    Backend, BlockAt, BoxKernel, BoxOp, Device, ElementwiseParams, Family, Kernels, OnBackend,
    ReduceKernel,
};
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

impl Kernels for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn has_kernel(&self, _family: Family) -> bool {
        true
    }

    fn elementwise_kernel<'a>(
        &'a self,
        params: &'a ElementwiseParams,
        input: DType,
        output: DType,
        _plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        Ok(match params {
            &ElementwiseParams::Affine { scale, offset } => Box::new(OnBackend::new(
                self,
                move |_, ins: &[&[u8]], o: &mut [u8]| {
                    Backend::affine(self, ins[0], input, o, output, scale, offset)
                },
            )),
            ElementwiseParams::Cast => Box::new(OnBackend::new(
                self,
                move |_, ins: &[&[u8]], o: &mut [u8]| Backend::cast(self, ins[0], input, o, output),
            )),
            ElementwiseParams::Standardize { mean, sd, inner } => Box::new(OnBackend::new(
                self,
                move |tile: Tile, ins: &[&[u8]], o: &mut [u8]| {
                    Backend::standardize(
                        self, ins[0], input, tile.start, *inner, mean, sd, o, output,
                    )
                },
            )),
        })
    }

    fn map_kernel<'a>(
        &'a self,
        program: &'a Program,
        inputs: &'a [DType],
        output: DType,
        _plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        Ok(Box::new(OnBackend::new(
            self,
            move |_, ins: &[&[u8]], o: &mut [u8]| {
                Backend::map(self, program, ins, inputs, o, output)
            },
        )))
    }

    fn matmul_kernel<'a>(
        &'a self,
        w: &'a Resident,
        x: DType,
        output: DType,
        k: usize,
        n: usize,
        _plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        Ok(Box::new(OnBackend::new(
            self,
            move |_, ins: &[&[u8]], o: &mut [u8]| {
                Backend::matmul(self, ins[0], x, w, k, n, o, output)
            },
        )))
    }

    fn generate_kernel<'a>(
        &'a self,
        dist: Dist,
        output: DType,
        seed: u64,
        last_dim: u64,
        _plan: &Plan,
    ) -> Result<BoxKernel<'a, Tile>> {
        Ok(Box::new(OnBackend::new(
            self,
            move |tile: Tile, _: &[&[u8]], o: &mut [u8]| {
                Backend::generate(self, o, output, tile.start, last_dim, seed, dist)
            },
        )))
    }

    fn reduce_kernel<'a>(
        &'a self,
        _op: Reduce,
        _dtype: DType,
        _geometry: Geometry,
        _nodata: Option<f64>,
        _plan: &Plan,
        reducer: Box<dyn TileReducer>,
    ) -> Result<Box<dyn ReduceKernel + 'a>> {
        Ok(Box::new(HostReduce {
            backend: self,
            reducer,
        }))
    }

    fn box_op_kernel<'a>(
        &'a self,
        op: &'a dyn BoxOp,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        op.host_kernel(self, plan, input, output, scratch)
    }

    fn transpose_kernel<'a>(
        &'a self,
        es: usize,
        _window_bytes: u64,
        _out_bytes: u64,
        _lanes: usize,
        at: BlockAt<'a>,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        Ok(Box::new(OnBackend::new(
            self,
            move |tile: BoxTile, windows: &[&[u8]], o: &mut [u8]| {
                let (row_len, c0) = at(&tile);
                Backend::transpose(
                    self,
                    windows[0],
                    row_len,
                    c0,
                    tile.rows(),
                    tile.cols(),
                    es,
                    o,
                )
            },
        )))
    }
}

/// A reduction on the host: each tile fed to the reducer where it lies.
struct HostReduce<'a> {
    backend: &'a CpuBackend,
    reducer: Box<dyn TileReducer>,
}

impl TileKernel<Tile> for HostReduce<'_> {
    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.backend.alloc_slot(len, reservation)
    }

    fn submit(&mut self, mut m: Morsel<Tile>) -> Result<Pending<Tile>> {
        let tile = m.tile();
        let (ins, _) = m.io();
        self.reducer.feed_bytes(tile.start, ins[0]);
        Ok(Pending::Ready(m))
    }
}

impl ReduceKernel for HostReduce<'_> {
    fn host_mut(&mut self) -> &mut Box<dyn TileReducer> {
        &mut self.reducer
    }

    fn upload_state(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn checkpoint_secs(&self) -> f64 {
        0.0
    }

    fn finish(self: Box<Self>) -> Result<Box<dyn TileReducer>> {
        Ok(self.reducer)
    }
}
