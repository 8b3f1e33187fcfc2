//! A reduction on a CUDA device: tiles staged through page-locked slots, two kernels per
//! tile (`kernels/reduce.cu`) with the CPU's order of operations, the carried state
//! double-buffered on the device, and the outer indices each tile finishes completed on
//! the host by the CPU reducer's own finishing code (so the result has the CPU's bits).
//!
//! Tile `i` runs on lane `i % lanes` (a stream with its own input, cell and totals
//! buffers, allocated once). Its kernels wait for the previous tile's merge (an event),
//! since each tile continues the state the previous one left; the copy of the next
//! tile's input to the device overlaps them. The finished totals come back into the
//! lane's page-locked buffer and are read on the compute thread before the lane is used
//! again, and all of them by [`CudaReduce::finish`].

use std::collections::VecDeque;
use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, PinnedHostSlice,
    PushKernelArg, result,
};

use super::queue::{Drain, InFlight, driver, record_now};
use super::runtime::CudaDevice;
use super::source::{ReduceTile, Reduction, reduce_source};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::reduce::{Geometry, Reduce, TileReducer};
use crate::plan::{Plan, Tile};
use crate::scheduler::{Morsel, Pending, Slot, TileKernel};

// SAFETY: ReduceTile is #[repr(C)], twelve u64 with no padding, the layout of
// TsReduceTile in kernels/reduce.cu.
unsafe impl DeviceRepr for ReduceTile {}

struct Lane {
    stream: Arc<CudaStream>,
    input: CudaSlice<u8>,
    part: CudaSlice<u8>,
    done: CudaSlice<u8>,
    /// Owns the page-locked buffer `host_ptr` points into.
    _host_done: PinnedHostSlice<u8>,
    host_ptr: *const u8,
}

/// A tile whose finished totals have not been read yet.
struct Outstanding {
    lane: usize,
    event: Arc<CudaEvent>,
    first: u64,
    bytes: usize,
}

/// A reduction prepared on a device for one run (see the module docs).
pub struct CudaReduce {
    /// First, so dropped first: a run that stopped on an error may leave tiles queued,
    /// and they are waited for before the state, lane buffers and module are freed.
    _drain: Drain,
    dev: Arc<CudaDevice>,
    blocks: CudaFunction,
    merge: CudaFunction,
    g: Geometry,
    dtype: DType,
    /// The input's nodata value, for the families that leave it out.
    nodata: Option<f64>,
    es: usize,
    acc: usize,
    lanes: Vec<Lane>,
    /// Two copies of the carried state (totals, open partials, shifts): each tile reads
    /// one and writes the other.
    state: [CudaSlice<u8>; 2],
    flip: usize,
    /// Recorded after the previous tile's merge.
    prev: Option<CudaEvent>,
    outstanding: VecDeque<Outstanding>,
    host: Box<dyn TileReducer>,
    _reservations: Vec<Reservation>,
}

// SAFETY: the raw pointers are into page-locked buffers owned by the lanes (which are
// Send); they are only read on the thread that owns the CudaReduce.
unsafe impl Send for CudaReduce {}

impl CudaDevice {
    /// Prepares reduction `op` over `g` of `dtype` elements (those equal to `nodata`
    /// missing) for the tiles of `plan`
    /// (`plan.depth` lanes): compiles its two kernels, allocates every device buffer
    /// from the device budget, and uploads the starting state of `host`, the CPU reducer
    /// that finishes the outer indices (and holds the result). The page-locked buffers of
    /// finished totals are host memory the plan already counts (`Engine::plan_reduce`)
    /// and the engine reserves with the plan's resident bytes.
    ///
    /// # Errors
    /// [`Error::Budget`] when the buffers do not fit the device budget, [`Error::Device`]
    /// when compiling or a driver call fails.
    pub fn reduce(
        self: &Arc<Self>,
        op: Reduce,
        dtype: DType,
        g: Geometry,
        nodata: Option<f64>,
        plan: &Plan,
        host: Box<dyn TileReducer>,
    ) -> Result<CudaReduce> {
        let family = Reduction::of(op, dtype, nodata).ok_or_else(|| {
            Error::Internal(format!("no CUDA kernel for the reduction {}", op.name()))
        })?;
        // as the CPU's masked_reducer: only the forms that leave elements out see it
        let nodata = op.nodata_left_out(nodata).filter(|_| family.masked());
        let (bn, mn) = (family.blocks_name(dtype), family.merge_name(dtype));
        let src = reduce_source(&[(family, dtype)]);
        let mut f = self.functions(&bn, &src, &[&bn, &mn])?;
        let merge = f
            .pop()
            .ok_or_else(|| Error::Internal("no merge kernel".into()))?;
        let blocks = f
            .pop()
            .ok_or_else(|| Error::Internal("no blocks kernel".into()))?;
        let vc = g.vcols();
        let acc = host.state_parts()[0].len() / vc;
        // the largest tile's cells and outer indices, over the plan's tiles
        let (mut cells, mut outers) = (1u64, 1u64);
        for t in plan.tiles().filter(|t| t.len > 0) {
            let a = ReduceTile::new(&g, t.start, t.len);
            cells = cells.max(a.cells());
            outers = outers.max(a.n_o);
        }
        let in_bytes = plan.tile_elems as usize * dtype.size();
        let part_bytes = cells as usize * acc;
        let done_bytes = outers as usize * vc * acc;
        let state_bytes = vc * (2 * acc + 8);
        let mut reservations = vec![self.budget.reserve(
            "the reduction's carried state on the device (two copies)",
            2 * state_bytes as u64,
        )?];
        let stream = self.ctx.default_stream();
        let start = device_state(host.as_ref());
        let state = [
            stream
                .clone_htod(start.as_slice())
                .map_err(driver("upload the reduction state"))?,
            stream
                .clone_htod(start.as_slice())
                .map_err(driver("upload the reduction state"))?,
        ];
        stream
            .synchronize()
            .map_err(driver("upload the reduction state"))?;
        let mut lanes = Vec::with_capacity(plan.depth.max(1));
        for _ in 0..plan.depth.max(1) {
            reservations.push(self.budget.reserve(
                "one stream's tile, cell and totals buffers on the device",
                (in_bytes + part_bytes + done_bytes) as u64,
            )?);
            let stream = self.ctx.new_stream().map_err(driver("create a stream"))?;
            let alloc = |b: usize| {
                stream
                    .alloc_zeros::<u8>(b.max(1))
                    .map_err(driver("allocate device memory"))
            };
            let (input, part, done) = (alloc(in_bytes)?, alloc(part_bytes)?, alloc(done_bytes)?);
            // Page-locked, NOT write-combined: the device writes the finished totals and
            // the host reads them (`finish_outers`); the host's reads of write-combined
            // memory are uncached, a fraction of a GB/s.
            // SAFETY: u8 is valid for any bits; the device writes it before it is read.
            let mut host_done =
                unsafe { self.ctx.alloc_pinned_with_flags::<u8>(done_bytes.max(1), 0) }
                    .map_err(driver("allocate page-locked memory"))?;
            let host_ptr = host_done
                .as_mut_ptr()
                .map_err(driver("allocate page-locked memory"))?
                .cast_const();
            lanes.push(Lane {
                stream,
                input,
                part,
                done,
                _host_done: host_done,
                host_ptr,
            });
        }
        Ok(CudaReduce {
            _drain: Drain(lanes.iter().map(|l| Arc::clone(&l.stream)).collect()),
            dev: Arc::clone(self),
            blocks,
            merge,
            g,
            dtype,
            nodata,
            es: dtype.size(),
            acc,
            lanes,
            state,
            flip: 0,
            prev: None,
            outstanding: VecDeque::new(),
            host,
            _reservations: reservations,
        })
    }
}

impl CudaReduce {
    /// Reads the finished totals of the oldest tile in flight into the host reducer.
    fn drain_one(&mut self) -> Result<()> {
        let Some(o) = self.outstanding.pop_front() else {
            return Ok(());
        };
        o.event
            .synchronize()
            .map_err(driver("run a reduction tile on the device"))?;
        let lane = &self.lanes[o.lane];
        // SAFETY: `host_ptr` is the start of the lane's page-locked buffer of at least
        // `o.bytes` bytes, and the copy into it completed (the event above); the lane is
        // not used again before this read (submit drains first).
        let done = unsafe { std::slice::from_raw_parts(lane.host_ptr, o.bytes) };
        if o.bytes > 0 {
            self.host.finish_outers(o.first, done);
        }
        Ok(())
    }

    /// Waits for every tile submitted, finishes their outer indices, and copies the
    /// carried state back into the host reducer (for a checkpoint).
    ///
    /// # Errors
    /// [`Error::Device`] if a tile failed on the device or the copy fails.
    pub fn sync(&mut self) -> Result<()> {
        while !self.outstanding.is_empty() {
            self.drain_one()?;
        }
        let stream = self.dev.ctx.default_stream();
        let mut state = vec![0u8; self.state[self.flip].len()];
        stream
            .memcpy_dtoh(&self.state[self.flip], state.as_mut_slice())
            .map_err(driver("copy the reduction state back"))?;
        stream
            .synchronize()
            .map_err(driver("copy the reduction state back"))?;
        let mut parts = self.host.state_parts_mut();
        let shift_len = parts[2].len();
        parts[2].copy_from_slice(&state[..shift_len]);
        let mut at = shift_len;
        for part in parts.iter_mut().take(2) {
            let n = part.len();
            part.copy_from_slice(&state[at..at + n]);
            at += n;
        }
        Ok(())
    }

    /// Uploads the host reducer's carried state (after it was restored from a journal).
    ///
    /// # Errors
    /// [`Error::Device`] if the copy fails.
    pub fn upload_state(&mut self) -> Result<()> {
        let start = device_state(self.host.as_ref());
        let stream = self.dev.ctx.default_stream();
        stream
            .memcpy_htod(start.as_slice(), &mut self.state[self.flip])
            .map_err(driver("upload the reduction state"))?;
        stream
            .synchronize()
            .map_err(driver("upload the reduction state"))
    }

    /// A page-locked staging slot (see [`CudaDevice::alloc_slot`]).
    ///
    /// # Errors
    /// If the driver cannot page-lock that much memory.
    pub fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.dev.alloc_slot(len, reservation)
    }

    /// The host reducer, which holds the result and the state checkpoints save.
    pub fn host_mut(&mut self) -> &mut Box<dyn TileReducer> {
        &mut self.host
    }

    /// Waits for every tile and returns the host reducer holding the result.
    ///
    /// # Errors
    /// [`Error::Device`] if a tile failed on the device.
    pub fn finish(mut self) -> Result<Box<dyn TileReducer>> {
        while !self.outstanding.is_empty() {
            self.drain_one()?;
        }
        Ok(self.host)
    }

    fn launch(&mut self, lane: usize, src: &[u8], tile: Tile) -> Result<Outstanding> {
        let t = ReduceTile::new(&self.g, tile.start, tile.len).with_nodata(self.dtype, self.nodata);
        let (first, count) = t.finished();
        let vc = self.g.vcols();
        let done_bytes = count as usize * vc * self.acc;
        let l = &self.lanes[lane];
        let cu = l.stream.cu_stream();
        if src.len() > l.input.len() || done_bytes > l.done.len() {
            return Err(Error::Internal(format!(
                "a tile of {} elements is larger than the device buffers it was prepared for",
                tile.len
            )));
        }
        let (d_in, _) = l.input.device_ptr(&l.stream);
        // SAFETY: `src` is page-locked memory of the tile's input slot and `d_in` a device
        // buffer at least as long; the slot stays alive and unwritten until the tile's
        // event completes (the morsel that owns it is held by the Pending handle).
        unsafe { result::memcpy_htod_async(d_in, src, cu) }
            .map_err(driver("copy a tile to the device"))?;
        if let Some(prev) = &self.prev {
            l.stream
                .wait(prev)
                .map_err(driver("order a reduction tile after the previous one"))?;
        }
        let (read, write) = (&self.state[self.flip], &self.state[1 - self.flip]);
        let ptr = |s: &CudaSlice<u8>| s.device_ptr(&l.stream).0;
        // the layout of `device_state`: shifts, totals, open partials
        let (shift_in, shift_out) = (ptr(read), ptr(write));
        let (total_in, total_out) = (shift_in + 8 * vc as u64, shift_out + 8 * vc as u64);
        let (open_in, open_out) = (
            total_in + (vc * self.acc) as u64,
            total_out + (vc * self.acc) as u64,
        );
        let (part, done) = (ptr(&l.part), ptr(&l.done));
        let grid = |threads: u64| self.dev.grid(threads);
        let cells = t.cells();
        let mut b = l.stream.launch_builder(&self.blocks);
        b.arg(&d_in)
            .arg(&t)
            .arg(&open_in)
            .arg(&shift_in)
            .arg(&part)
            .arg(&cells);
        // SAFETY: the arguments match reduce_blocks_* in src/backend/cuda/source.rs; the
        // cell buffer holds the plan's largest tile's cells, the state buffers `vcols`
        // accumulators and shifts each.
        unsafe { b.launch(grid(cells)) }.map_err(driver("launch a reduction kernel"))?;
        let mut m = l.stream.launch_builder(&self.merge);
        m.arg(&d_in)
            .arg(&t)
            .arg(&total_in)
            .arg(&open_in)
            .arg(&shift_in)
            .arg(&part)
            .arg(&done)
            .arg(&total_out)
            .arg(&open_out)
            .arg(&shift_out);
        // SAFETY: as above, for reduce_merge_*; `done` holds the plan's largest tile's
        // outer indices times `vcols` accumulators.
        unsafe { m.launch(grid(t.n_o * vc as u64)) }
            .map_err(driver("launch a reduction kernel"))?;
        let after_merge = record_now(&self.dev.ctx, &l.stream)?;
        if done_bytes > 0 {
            // SAFETY: the lane's page-locked buffer holds at least `done_bytes`; the host
            // reads it only after the event recorded below (drain_one).
            let dst = unsafe { std::slice::from_raw_parts_mut(l.host_ptr.cast_mut(), done_bytes) };
            // SAFETY: `done` is a device buffer of at least `done_bytes` on this stream,
            // written by the merge kernel queued before this copy.
            unsafe { result::memcpy_dtoh_async(dst, done, cu) }
                .map_err(driver("copy finished totals back from the device"))?;
        }
        let event = Arc::new(record_now(&self.dev.ctx, &l.stream)?);
        self.prev = Some(after_merge);
        self.flip = 1 - self.flip;
        Ok(Outstanding {
            lane,
            event,
            first,
            bytes: done_bytes,
        })
    }
}

/// The carried state as the device holds it: the shifts (f64), then the totals, then the
/// open partials, so that every part starts 8-byte aligned (accumulators are 1, 2, 4, 8
/// or 16 bytes, and 16-byte ones are two f64).
fn device_state(host: &dyn TileReducer) -> Vec<u8> {
    let parts = host.state_parts();
    [parts[2], parts[0], parts[1]].concat()
}

impl TileKernel<Tile> for &mut CudaReduce {
    fn staged_inputs(&self) -> bool {
        true
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.dev.alloc_slot(len, reservation)
    }

    fn submit(&mut self, mut m: Morsel<Tile>) -> Result<Pending<Tile>> {
        self.dev
            .ctx
            .bind_to_thread()
            .map_err(driver("use the device"))?;
        let lane = m.seq() % self.lanes.len();
        // the lane's buffers are reused: read what its last tile finished first
        while self.outstanding.len() >= self.lanes.len() {
            self.drain_one()?;
        }
        let tile = m.tile();
        let n = tile.len as usize * self.es;
        let launched = {
            let (ins, _) = m.io();
            match ins.first() {
                Some(src) if src.len() >= n => self.launch(lane, &src[..n], tile),
                _ => Err(Error::Internal(
                    "a reduction tile came without its input".into(),
                )),
            }
        };
        let o = match launched {
            Ok(o) => o,
            Err(e) => {
                let _ = self.lanes[lane].stream.synchronize();
                return Err(e);
            }
        };
        // the tile's input slot is held until the event after its totals copy
        let event = Arc::clone(&o.event);
        self.outstanding.push_back(o);
        Ok(InFlight::pending(event, m))
    }
}
