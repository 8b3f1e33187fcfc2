//! What calls the function on each block: the gathering of its padded inputs, and the
//! kernels the scheduler streams blocks through (one call at a time, or several at once).

use super::super::host::HostBuf;
use super::{Block, BlockFn, BlockInput, BlockOut, BlocksPlan};
use crate::dtype::store_f64;
use crate::error::{Error, Result};
use crate::scheduler::{Morsel, Pending, TileKernel};
use crate::tiling::{BoxTile, Edges, PaddedBox, gather_box};

/// What gathers each input's padded block of a tile and calls the function on it: one
/// per call running at once, each with its own buffers.
pub(super) struct Gather {
    edges: Edges,
    /// Each input's padded block.
    bufs: Vec<HostBuf>,
    /// Each input's constant for positions past the edges, in its type.
    cvals: Vec<Vec<u8>>,
}

impl Gather {
    /// Buffers for `plan`'s blocks: on the heap, or page-locked by its device's driver at
    /// the size of the largest padded block.
    pub(super) fn new(plan: &BlocksPlan) -> Result<Self> {
        let cval = match plan.boxes.boundary {
            crate::tiling::Boundary::Constant(v) => v,
            _ => 0.0,
        };
        let cvals = plan
            .inputs
            .iter()
            .map(|i| {
                let mut b = vec![0u8; i.dtype.size()];
                store_f64(&[cval], &mut b, i.dtype);
                b
            })
            .collect();
        let (th, tw) = plan.boxes.tile;
        let padded = (th + plan.boxes.halo_rows.total()) * (tw + plan.boxes.halo_cols.total());
        let bufs = plan
            .inputs
            .iter()
            .map(|i| match plan.pinned {
                None => Ok(HostBuf::Heap(Vec::new())),
                Some(n) => HostBuf::locked(n, padded * i.bands * i.dtype.size(), "the blocks"),
            })
            .collect::<Result<_>>()?;
        Ok(Gather {
            edges: plan.edges,
            bufs,
            cvals,
        })
    }

    /// Gathers the padded blocks of tile `m` and calls `f` on them, its result going to
    /// `m`'s output slot.
    pub(super) fn call<F: BlockFn>(
        &mut self,
        plan: &BlocksPlan,
        f: &F,
        m: &mut Morsel<BoxTile>,
    ) -> Result<()> {
        let t = m.tile();
        let bx = PaddedBox::of(&plan.boxes, &t, self.edges);
        let per_band = plan.boxes.sources(&t).rows.len();
        let (ins, out) = m.io();
        let mut at = 0;
        for (k, input) in plan.inputs.iter().enumerate() {
            let es = input.dtype.size();
            let plane = bx.len() * es;
            let bytes = self.bufs[k].bytes_mut(input.bands * plane)?;
            for (b, dst) in bytes
                .chunks_exact_mut(plane.max(1))
                .enumerate()
                .take(input.bands)
            {
                let windows = ins
                    .get(at + b * per_band..at + (b + 1) * per_band)
                    .ok_or_else(|| {
                        Error::Internal(format!("block {}: fewer windows than its reads", t.index))
                    })?;
                gather_box(&plan.boxes, &t, bx, windows, (es, &self.cvals[k]), dst)?;
            }
            at += input.bands * per_band;
        }
        let spatial = |rows: usize, cols: usize, bands: usize, rank: usize| match rank {
            1 => vec![rows],
            2 => vec![rows, cols],
            _ => vec![bands, rows, cols],
        };
        let inputs = plan
            .inputs
            .iter()
            .zip(&self.bufs)
            .map(|(i, buf)| BlockInput {
                data: buf.bytes(i.bands * bx.len() * i.dtype.size()),
                dtype: i.dtype,
                shape: spatial(bx.rows, bx.cols, i.bands, i.rank),
            })
            .collect();
        let block = Block {
            index: t.index,
            count: plan.boxes.num_tiles,
            tile: (
                (t.r0 as usize, t.r1 as usize),
                (t.c0 as usize, t.c1 as usize),
            ),
            inner: ((t.r0 - bx.row) as usize, (t.c0 - bx.col) as usize),
            inputs,
            kept: std::cell::Cell::new(false),
        };
        let out = plan.out_dtype.map(|dtype| BlockOut {
            bytes: out,
            dtype,
            shape: spatial(t.rows(), t.cols(), plan.out_bands, plan.out_rank),
        });
        let r = f.call(&block, out);
        if block.kept.get() {
            drop(block);
            for buf in &mut self.bufs {
                // something outside still points here: the buffer is never freed
                buf.leak();
            }
        }
        r
    }
}

/// The compute stage calling the function on each block in turn, on its own thread.
pub(super) struct Serial<'p, F> {
    pub(super) gather: Gather,
    pub(super) plan: &'p BlocksPlan,
    pub(super) f: &'p F,
}

impl<F: BlockFn> TileKernel<BoxTile> for Serial<'_, F> {
    fn submit(&mut self, mut m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        self.gather.call(self.plan, self.f, &mut m)?;
        Ok(Pending::Ready(m))
    }
}

/// A block handed to a thread calling the function, and where its result goes.
pub(super) type Job = (
    Morsel<BoxTile>,
    std::sync::mpsc::SyncSender<Result<Morsel<BoxTile>>>,
);

/// The compute stage handing each block to the threads calling the function; the write
/// stage waits for the blocks in plan order.
pub(super) struct Calls {
    pub(super) jobs: crossbeam_channel::Sender<Job>,
}

impl TileKernel<BoxTile> for Calls {
    fn submit(&mut self, m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        let (done, result) = std::sync::mpsc::sync_channel(1);
        self.jobs
            .send((m, done))
            .map_err(|_| Error::Internal("the threads calling the function stopped".into()))?;
        Ok(Pending::Later(Box::new(move || {
            result
                .recv()
                .map_err(|_| Error::Internal("a block's call ended without a result".into()))?
        })))
    }
}
