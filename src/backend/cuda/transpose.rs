//! The CUDA transpose: the box tiles of the out-of-core transpose (`src/tiling.rs`)
//! staged through page-locked slots, each block transposed on the device by
//! `kernels/transpose.cu`, on a ring of streams as the elementwise kernels are (the copy
//! in of one tile, the kernel of another and the copy back of a third overlap). The
//! kernel moves bits, so the output is the CPU's byte for byte.

use std::sync::Arc;

use cudarc::driver::CudaFunction;

use super::BlockAt;
use super::queue::{ArgValue, Lane, Launch, drain};
use super::runtime::{CudaDevice, queue_tile};
use super::source::{transpose_kernel_name, transpose_source};
use crate::budget::Reservation;
use crate::error::{Error, Result};
use crate::scheduler::{Morsel, Pending, Slot, TileKernel};
use crate::tiling::BoxTile;

/// The transpose prepared on a device: box tiles in, transposed blocks out.
pub struct CudaTranspose<'a> {
    dev: Arc<CudaDevice>,
    func: CudaFunction,
    es: usize,
    lanes: Vec<Lane>,
    at: BlockAt<'a>,
}

impl CudaDevice {
    /// Prepares the transpose of elements of `es` bytes for box tiles whose staged
    /// windows hold at most `window_bytes` and whose blocks at most `out_bytes`, on
    /// `lanes` streams; `at` says where each tile's block lies in its window. Every
    /// device buffer is allocated here, from the device budget.
    ///
    /// # Errors
    /// [`Error::Budget`] when the lanes' buffers do not fit the device budget,
    /// [`Error::Device`] when compiling or a driver call fails, [`Error::Internal`] for
    /// an element size no dtype has.
    pub fn transpose<'a>(
        self: &Arc<Self>,
        es: usize,
        window_bytes: u64,
        out_bytes: u64,
        lanes: usize,
        at: BlockAt<'a>,
    ) -> Result<CudaTranspose<'a>> {
        if !matches!(es, 1 | 2 | 4 | 8) {
            return Err(Error::Internal(format!(
                "transpose: no kernel for {es}-byte elements"
            )));
        }
        let name = transpose_kernel_name(es);
        let func = self
            .functions("transpose", &transpose_source(), &[&name])?
            .remove(0);
        let lanes = self.lanes(&[window_bytes as usize], out_bytes as usize, lanes)?;
        Ok(CudaTranspose {
            dev: Arc::clone(self),
            func,
            es,
            lanes,
            at,
        })
    }
}

impl Drop for CudaTranspose<'_> {
    fn drop(&mut self) {
        drain(self.lanes.iter().map(|l| Arc::clone(&l.stream)));
    }
}

impl TileKernel<BoxTile> for CudaTranspose<'_> {
    fn staged_inputs(&self) -> bool {
        true
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.dev.alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        let t = m.tile();
        let (rows, cols) = (t.rows(), t.cols());
        let (row_len, c0) = (self.at)(&t);
        if c0 + cols > row_len {
            return Err(Error::Internal(format!(
                "transpose block {rows}x{cols} at column {c0} of a {row_len}-element row"
            )));
        }
        let es = self.es;
        let lane = &self.lanes[m.seq() % self.lanes.len()];
        let args = vec![
            ArgValue::U64(row_len as u64),
            ArgValue::U64(c0 as u64),
            ArgValue::U64(rows as u64),
            ArgValue::U64(cols as u64),
        ];
        queue_tile(
            &self.dev,
            &self.func,
            lane,
            m,
            &[rows * row_len * es],
            rows * cols * es,
            |_| Launch {
                threads: (rows * cols) as u64,
                args,
            },
        )
    }
}
