//! The neighbourhood filters on a GPU at run time. Each tile's padded box is gathered on
//! the host by the CPU's own code (boundary modes, dtype conversion) into one page-locked
//! buffer, copied to its lane's device buffer, and the launches of its
//! [`StencilProgram`] run there; the result comes back into the tile's page-locked
//! output slot. The host buffer is reused as soon as the previous tile's copy has left
//! it, so gathering tile i+1 overlaps the kernels of tile i; lanes (streams with their
//! own device buffers, allocated once from the device budget) let the copy back of one
//! tile overlap the next.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice, PushKernelArg,
    result,
};

use super::cpu::gather;
use super::cuda::{Buf, StencilProgram, Val};
use super::filter::{Stencil, TileJob};
use crate::backend::cuda::CudaDevice;
use crate::backend::cuda::queue::{InFlight, drain, driver, record_now};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::scheduler::{Morsel, Pending, Slot, TileKernel};
use crate::tiling::{BoxPlan, BoxTile};

struct Lane {
    stream: Arc<CudaStream>,
    padded: CudaSlice<u8>,
    pass: CudaSlice<u8>,
    tile_a: CudaSlice<u8>,
    tile_b: CudaSlice<u8>,
    out: CudaSlice<u8>,
    _reservation: Reservation,
}

/// A filter prepared on a device for one plan's box tiles.
pub(super) struct CudaStencil<'a> {
    dev: Arc<CudaDevice>,
    program: StencilProgram,
    funcs: HashMap<String, CudaFunction>,
    weights: Vec<CudaSlice<u8>>,
    lanes: Vec<Lane>,
    /// The page-locked buffer the host gathers each padded box into.
    host: PinnedHostSlice<u8>,
    /// When the last tile's copy out of `host` is done.
    uploaded: Option<CudaEvent>,
    stencil: &'a Stencil,
    plan: &'a BoxPlan,
    input: DType,
    _resident: Reservation,
    _host: Reservation,
}

/// Prepares `program` (the filter `stencil` over `plan`'s tiles, from `input` dtype)
/// on `lanes` streams: compiles its kernels, uploads its weights and allocates every
/// device buffer the run needs from the device budget, and the page-locked buffer
/// the host gathers padded boxes into (`host`, which pays for it from the host
/// budget: the plan's filter scratch, which the CPU's kernel would have used).
///
/// # Errors
/// [`Error::Budget`] when the buffers do not fit the device budget, [`Error::Device`]
/// when compiling or a driver call fails.
pub(super) fn prepare<'a>(
    dev: &Arc<CudaDevice>,
    program: StencilProgram,
    stencil: &'a Stencil,
    plan: &'a BoxPlan,
    input: DType,
    host: Reservation,
) -> Result<CudaStencil<'a>> {
    let names = program.kernels();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let funcs: HashMap<String, CudaFunction> = names
        .iter()
        .cloned()
        .zip(dev.functions("stencil", &program.source(), &refs)?)
        .collect();
    let f = program.float.size();
    let (padded, pass, tile) = program.buffer_elems(plan.tile);
    let (per_lane, wbytes) = program.device_bytes(plan.tile);
    let resident = dev
        .budget()
        .reserve("filter weights on the device", wbytes)?;
    let mut weights = Vec::with_capacity(program.weights.len());
    for w in &program.weights {
        let bytes: Vec<u8> = if program.float == DType::F64 {
            bytemuck::cast_slice(w).to_vec()
        } else {
            let v: Vec<f32> = w.iter().map(|&x| x as f32).collect();
            bytemuck::cast_slice(&v).to_vec()
        };
        weights.push(dev.upload("upload the filter weights", &bytes)?);
    }
    let mut ring = Vec::with_capacity(plan.depth.max(1));
    for _ in 0..plan.depth.max(1) {
        let r = dev.budget().reserve(
            "one stream's padded box, intermediate and tile buffers on the device",
            per_lane,
        )?;
        let stream = dev.ctx.new_stream().map_err(driver("create a stream"))?;
        let alloc = |n: usize| {
            stream
                .alloc_zeros::<u8>(n.max(1))
                .map_err(driver("allocate device memory"))
        };
        let (p, q, a, b, o) = (
            alloc(padded * f)?,
            alloc(pass * f)?,
            alloc(tile * f)?,
            alloc(tile * f)?,
            alloc(tile * program.out.size())?,
        );
        ring.push(Lane {
            stream,
            padded: p,
            pass: q,
            tile_a: a,
            tile_b: b,
            out: o,
            _reservation: r,
        });
    }
    // Page-locked and write-combined (cudarc's `alloc_pinned`): the host only writes
    // it (the gather writes each element once, row by row, never reading it back) and
    // the device only reads it, the case write-combining is for.
    // SAFETY: u8 is valid for any bits; the host writes each box before it is copied.
    let host_buf = unsafe { dev.ctx.alloc_pinned::<u8>((padded * f).max(1)) }
        .map_err(driver("allocate page-locked memory"))?;
    Ok(CudaStencil {
        dev: Arc::clone(dev),
        program,
        funcs,
        weights,
        lanes: ring,
        host: host_buf,
        uploaded: None,
        stencil,
        plan,
        input,
        _resident: resident,
        _host: host,
    })
}

impl CudaStencil<'_> {
    /// Queues tile `m`'s upload, passes and copy back on its lane.
    fn queue(&mut self, m: &mut Morsel<BoxTile>, lane: usize) -> Result<()> {
        let t = m.tile();
        let f = self.program.float.size();
        let (ph, pw) = (
            t.rows() + self.plan.halo_rows.total(),
            t.cols() + self.plan.halo_cols.total(),
        );
        // the previous tile's box must have left the host buffer
        if let Some(e) = self.uploaded.take() {
            e.synchronize()
                .map_err(driver("copy a tile to the device"))?;
        }
        let (ins, out) = m.io();
        let job = TileJob {
            stencil: self.stencil,
            plan: self.plan,
            tile: &t,
            windows: &ins,
            in_dtype: self.input,
            out_dtype: self.program.out,
        };
        let host = self
            .host
            .as_mut_slice()
            .map_err(driver("use page-locked memory"))?;
        let host = host
            .get_mut(..ph * pw * f)
            .ok_or_else(|| Error::Internal("a stencil tile is larger than its plan".into()))?;
        if self.program.float == DType::F64 {
            gather::<f64>(&job, bytemuck::cast_slice_mut(host), pw)?;
        } else {
            gather::<f32>(&job, bytemuck::cast_slice_mut(host), pw)?;
        }
        let l = &self.lanes[lane];
        let cu = l.stream.cu_stream();
        if host.len() > l.padded.len() {
            return Err(Error::Internal(
                "a stencil tile is larger than the device buffers it was prepared for".into(),
            ));
        }
        let (d_padded, _) = l.padded.device_ptr(&l.stream);
        // SAFETY: `host` is page-locked and stays untouched and allocated until the event
        // recorded just below completes (the next tile, and dropping this kernel, wait
        // for it first); the device buffer holds at least its bytes (checked above).
        unsafe { result::memcpy_htod_async(d_padded, &*host, cu) }
            .map_err(driver("copy a tile to the device"))?;
        self.uploaded = Some(record_now(&self.dev.ctx, &l.stream)?);
        let ptr = |b: Buf| -> u64 {
            let s = match b {
                Buf::Padded => &l.padded,
                Buf::Pass => &l.pass,
                Buf::TileA => &l.tile_a,
                Buf::TileB => &l.tile_b,
                Buf::Out => &l.out,
                Buf::Weights(k) => &self.weights[k],
            };
            s.device_ptr(&l.stream).0
        };
        for launch in self.program.launches(&t) {
            let func = self.funcs.get(&launch.kernel).ok_or_else(|| {
                Error::Internal(format!("stencil kernel {} was not compiled", launch.kernel))
            })?;
            let ptrs: Vec<u64> = launch.bufs.iter().map(|&b| ptr(b)).collect();
            let cfg = self.dev.grid(launch.threads);
            let mut b = l.stream.launch_builder(func);
            for p in &ptrs {
                b.arg(p);
            }
            for v in &launch.args {
                match v {
                    Val::U64(x) => b.arg(x),
                    Val::I64(x) => b.arg(x),
                    Val::F64(x) => b.arg(x),
                };
            }
            // SAFETY: the arguments are the kernel's signature (kernels/stencil.cu via
            // stencil_source: buffers, then scalars) as StencilProgram::launches lays them
            // out; every buffer was sized for the plan's largest tile, and a launch touches
            // no more than its tile's box (tests/it/cuda_stencil_emulation.rs runs the same
            // launches on the host).
            unsafe { b.launch(cfg) }.map_err(driver("launch a kernel"))?;
        }
        let n = t.rows() * t.cols() * self.program.out.size();
        let dst = out
            .get_mut(..n)
            .ok_or_else(|| Error::Internal("a stencil tile's output slot is too small".into()))?;
        let (d_out, _) = l.out.device_ptr(&l.stream);
        // SAFETY: `dst` is page-locked memory of the tile's output slot, neither read nor
        // freed before the tile's event (recorded after this copy) completes.
        unsafe { result::memcpy_dtoh_async(dst, d_out, cu) }
            .map_err(driver("copy a tile back from the device"))?;
        Ok(())
    }
}

impl Drop for CudaStencil<'_> {
    fn drop(&mut self) {
        // the last upload may still read the page-locked buffer, and kernels still read
        // the weights and lane buffers freed after this
        if let Some(e) = self.uploaded.take() {
            let _ = e.synchronize();
        }
        drain(self.lanes.iter().map(|l| Arc::clone(&l.stream)));
    }
}

impl TileKernel<BoxTile> for CudaStencil<'_> {
    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.dev.alloc_slot(len, reservation)
    }

    fn submit(&mut self, mut m: Morsel<BoxTile>) -> Result<Pending<BoxTile>> {
        self.dev
            .ctx
            .bind_to_thread()
            .map_err(driver("use the device"))?;
        let lane = m.seq() % self.lanes.len();
        if let Err(e) = self.queue(&mut m, lane) {
            // what was queued may still read the tile's slots or the host buffer
            let _ = self.lanes[lane].stream.synchronize();
            return Err(e);
        }
        let event = record_now(&self.dev.ctx, &self.lanes[lane].stream)?;
        Ok(InFlight::pending(Arc::new(event), m))
    }
}
