//! The CUDA backend at run time: a device opened once per engine, page-locked staging
//! slots, and one [`TileKernel`] per operation whose tiles run on a ring of streams.
//!
//! Tile `i` runs on lane `i % lanes`, each lane a stream with its own device buffers,
//! allocated once when the kernel is prepared (never per tile, so fragmentation cannot
//! fail a run halfway) and paid for from the device budget. On its lane a tile is: the
//! copy of its page-locked input slot to the device, the kernel, the copy back into its
//! page-locked output slot, and an event the write stage waits on. Lanes are independent
//! streams, so the copy in of tile i+1, the kernel of tile i and the copy out of tile i-1
//! overlap on the copy engines and the SMs.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PinnedHostSlice, PushKernelArg,
    result, sys,
};

use super::ElementwiseParams;
use super::queue::{ArgValue, InFlight, Lane, Launch, drain, driver, record_now};
use super::source::{
    Elementwise, elementwise_source, gen_dist_name, gen_kernel_name, gen_params, gen_source,
    map_kernel_name, map_source, matmul_kernel_name, matmul_source,
};
use crate::budget::{MemoryBudget, Reservation};
use crate::device::{self, GpuInfo};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::expr::Program;
use crate::ops::generate::Dist;
use crate::ops::matmul::Resident;
use crate::plan::Tile;
use crate::scheduler::{Morsel, Pending, Slot, SlotMemory, TileKernel};

/// Threads per block of the elementwise kernels.
const BLOCK: u32 = 256;

/// A CUDA device opened for an engine's runs, with its memory budget.
pub struct CudaDevice {
    pub(crate) ctx: Arc<CudaContext>,
    info: GpuInfo,
    pub(super) budget: MemoryBudget,
    pub(super) sms: u32,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("info", &self.info)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl CudaDevice {
    /// Opens device `ordinal`; its budget is `memory` bytes, or 90% of what is free.
    ///
    /// # Errors
    /// As [`device::probe`]; [`Error::Budget`] when `memory` is more than the device has
    /// free.
    pub fn open(ordinal: usize, memory: Option<u64>) -> Result<Self> {
        let info = device::probe(ordinal)?;
        let ctx = device::context(ordinal)?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("count the multiprocessors"))?;
        let limit = match memory {
            Some(m) if m > info.free_bytes => {
                return Err(Error::invalid(format!(
                    "`gpu_memory={}` is more than cuda:{ordinal} has free ({})",
                    crate::budget::fmt_bytes(m),
                    crate::budget::fmt_bytes(info.free_bytes)
                )));
            }
            Some(m) => m,
            None => info.free_bytes / 10 * 9,
        };
        Ok(CudaDevice {
            ctx,
            info,
            budget: MemoryBudget::new(limit),
            sms: sms.max(1) as u32,
        })
    }

    /// What the device is.
    #[must_use]
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The device memory budget.
    #[must_use]
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Page-locked host memory for a staging slot, not write-combined: an input slot is
    /// written by the read stage and read by the device, an output slot written by the
    /// device and read by the write stage: the host reads every output slot (and one
    /// allocator serves both). Paid for by `reservation` from the host budget.
    ///
    /// # Errors
    /// If the driver cannot page-lock that much memory.
    pub fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        // SAFETY: u8 is valid for any bits; the slot is filled before it is read.
        let mut mem = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len.max(1), 0) }
            .map_err(driver("allocate page-locked memory"))?;
        let ptr = mem
            .as_mut_ptr()
            .map_err(driver("allocate page-locked memory"))?;
        Ok(Slot::new(Box::new(Pinned { mem, ptr, len }), reservation))
    }

    /// Prepares the elementwise kernel `params` say (from `input` to `output` dtype) for tiles
    /// of at most `tile_elems` elements on `lanes` streams: compiles it for this device,
    /// uploads its resident operands (`mean` and `sd` for standardize) and allocates
    /// every device buffer the run needs, from the device budget.
    ///
    /// # Errors
    /// [`Error::Budget`] when the lanes' buffers do not fit the device budget (with the
    /// arithmetic), [`Error::Device`] when compiling or a driver call fails.
    pub fn elementwise(
        self: &Arc<Self>,
        input: DType,
        output: DType,
        params: &ElementwiseParams,
        tile_elems: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let mut resident = Vec::new();
        let (kind, args) = match params {
            ElementwiseParams::Affine { scale, offset } => (
                Elementwise::Affine,
                vec![Arg::F64(*scale), Arg::F64(*offset)],
            ),
            ElementwiseParams::Cast => (Elementwise::Cast, Vec::new()),
            ElementwiseParams::Standardize { mean, sd, inner } => {
                let bytes = (mean.len() + sd.len()) as u64 * 8;
                resident.push(
                    self.budget
                        .reserve("standardize statistics on the device", bytes)?,
                );
                let args = vec![
                    Arg::TileStart,
                    Arg::Buffer(self.upload("upload the statistics", bytemuck::cast_slice(mean))?),
                    Arg::Buffer(self.upload("upload the statistics", bytemuck::cast_slice(sd))?),
                    Arg::U64(mean.len() as u64),
                    Arg::U64(*inner),
                ];
                (Elementwise::Standardize, args)
            }
        };
        let name = kind.kernel_name(input, output);
        let src = elementwise_source(&[(kind, input, output)]);
        self.prepare(
            &name,
            &src,
            Items::elements(&[input], output),
            args,
            resident,
            tile_elems,
            lanes,
        )
    }

    /// Prepares matmul with the resident right-hand side `w` (K x N, already in the
    /// compute type) for tiles of at most `tile_rows` rows of X (dtype `x`) on `lanes`
    /// streams, writing `output`: uploads W once (paid for from the device budget),
    /// compiles the kernel and allocates every lane's buffers, as
    /// [`CudaDevice::elementwise`] does.
    ///
    /// # Errors
    /// As [`CudaDevice::elementwise`].
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        self: &Arc<Self>,
        w: &Resident,
        x: DType,
        output: DType,
        k: usize,
        n: usize,
        tile_rows: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let (c, bytes): (DType, &[u8]) = match w {
            Resident::F32(v) => (DType::F32, bytemuck::cast_slice(v)),
            Resident::F64(v) => (DType::F64, bytemuck::cast_slice(v)),
        };
        if bytes.len() != k * n * c.size() {
            return Err(Error::Internal(format!(
                "W of {} bytes handed to a {k} x {n} {c} matmul",
                bytes.len()
            )));
        }
        let name = matmul_kernel_name(x, c, output);
        let src = matmul_source(&[(x, c, output)]);
        let resident = vec![self.budget.reserve("W on the device", bytes.len() as u64)?];
        let args = vec![
            Arg::Buffer(self.upload("upload W", bytes)?),
            Arg::U64(k as u64),
            Arg::U64(n as u64),
        ];
        let items = Items {
            in_bytes: vec![k * x.size()],
            out_bytes: n * output.size(),
            threads: n as u64,
        };
        self.prepare(&name, &src, items, args, resident, tile_rows, lanes)
    }

    /// Copies `bytes` to a new device buffer, waiting until the copy is done.
    pub(crate) fn upload(&self, action: &'static str, bytes: &[u8]) -> Result<CudaSlice<u8>> {
        let stream = self.ctx.default_stream();
        let buf = stream
            .clone_htod(if bytes.is_empty() { &[0u8][..] } else { bytes })
            .map_err(driver(action))?;
        stream.synchronize().map_err(driver(action))?;
        Ok(buf)
    }

    /// Prepares the fused kernel of a `map` program over inputs of `inputs` dtypes (one
    /// per stream of the program), as [`CudaDevice::elementwise`] does.
    ///
    /// # Errors
    /// As [`CudaDevice::elementwise`].
    pub fn map(
        self: &Arc<Self>,
        program: &Program,
        inputs: &[DType],
        output: DType,
        tile_elems: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let name = map_kernel_name(program, inputs, output);
        let src = map_source(&name, program, inputs, output);
        self.prepare(
            &name,
            &src,
            Items::elements(inputs, output),
            Vec::new(),
            Vec::new(),
            tile_elems,
            lanes,
        )
    }

    /// Prepares `gen`'s kernel for `dist` writing `output`, as [`CudaDevice::elementwise`]
    /// does: no input, each element computed from `seed` and its flat index (the column
    /// is the index modulo `last_dim`, 0 for rank 1), the same bytes as the CPU.
    ///
    /// # Errors
    /// As [`CudaDevice::elementwise`].
    pub fn generate(
        self: &Arc<Self>,
        dist: &Dist,
        output: DType,
        seed: u64,
        last_dim: u64,
        tile_elems: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let d = gen_dist_name(dist);
        let name = gen_kernel_name(d, output);
        let src = gen_source(&[(d, output)]);
        let (a, b) = gen_params(dist);
        let args = vec![
            Arg::TileStart,
            Arg::U64(seed),
            Arg::U64(last_dim),
            Arg::F64(a),
            Arg::F64(b),
        ];
        self.prepare(
            &name,
            &src,
            Items::elements(&[], output),
            args,
            Vec::new(),
            tile_elems,
            lanes,
        )
    }

    /// Compiles `src` for this device and loads the kernels `names` from it.
    pub(crate) fn functions(
        &self,
        what: &str,
        src: &str,
        names: &[&str],
    ) -> Result<Vec<CudaFunction>> {
        let module = self.module(what, src)?;
        names
            .iter()
            .map(|n| module.load_function(n).map_err(driver("find the kernel")))
            .collect()
    }

    /// The module of `src` compiled for this device, compiled and loaded once per process
    /// (the context lives as long, so its modules stay valid).
    fn module(&self, what: &str, src: &str) -> Result<Arc<cudarc::driver::CudaModule>> {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};
        // (device, compiled set): a set lives in the compile cache for the process, so its
        // address names it
        type Key = (usize, usize);
        static MODULES: OnceLock<Mutex<HashMap<Key, Arc<cudarc::driver::CudaModule>>>> =
            OnceLock::new();
        // asked of the compile cache each time (a lookup; its count is what the tests
        // check), loaded into the context once
        let compiled = device::compile_cached(what, src, &self.info.arch(), false)?;
        let key = (self.info.ordinal, Arc::as_ptr(&compiled) as usize);
        let modules = MODULES.get_or_init(Mutex::default);
        if let Some(m) = modules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(m));
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin.clone()))
            .map_err(driver("load the kernels"))?;
        modules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, Arc::clone(&module));
        Ok(module)
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        self: &Arc<Self>,
        name: &str,
        src: &str,
        items: Items,
        args: Vec<Arg>,
        resident: Vec<Reservation>,
        tile_items: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let func = self.functions(name, src, &[name])?.remove(0);
        let in_bytes: Vec<usize> = items
            .in_bytes
            .iter()
            .map(|b| tile_items as usize * b)
            .collect();
        let out_bytes = tile_items as usize * items.out_bytes;
        let ring = self.lanes(&in_bytes, out_bytes, lanes)?;
        Ok(CudaElementwise {
            dev: Arc::clone(self),
            func,
            in_es: items.in_bytes,
            out_es: items.out_bytes,
            threads: items.threads.max(1),
            args,
            lanes: ring,
            _resident: resident,
        })
    }
}

impl CudaDevice {
    /// The launch shape of a grid-stride kernel over `threads` elements: blocks of
    /// [`BLOCK`] threads, at most 32 blocks per multiprocessor.
    pub(crate) fn grid(&self, threads: u64) -> LaunchConfig {
        let blocks = threads
            .div_ceil(u64::from(BLOCK))
            .clamp(1, u64::from(self.sms) * 32);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// `lanes` streams (at least one), each with device buffers of `in_bytes` (one per
    /// input) and `out_bytes`, allocated now and paid for from the device budget.
    pub(super) fn lanes(
        &self,
        in_bytes: &[usize],
        out_bytes: usize,
        lanes: usize,
    ) -> Result<Vec<Lane>> {
        let mut ring = Vec::with_capacity(lanes.max(1));
        for _ in 0..lanes.max(1) {
            let r = self.budget.reserve(
                "one stream's input and output tile buffers on the device",
                (in_bytes.iter().sum::<usize>() + out_bytes) as u64,
            )?;
            let stream = self.ctx.new_stream().map_err(driver("create a stream"))?;
            let mut ins = Vec::with_capacity(in_bytes.len());
            for &b in in_bytes {
                ins.push(
                    stream
                        .alloc_zeros::<u8>(b.max(1))
                        .map_err(driver("allocate device memory"))?,
                );
            }
            let output = stream
                .alloc_zeros::<u8>(out_bytes.max(1))
                .map_err(driver("allocate device memory"))?;
            ring.push(Lane {
                stream,
                inputs: ins,
                output,
                _reservation: r,
            });
        }
        Ok(ring)
    }
}

/// What one item of a tile (an element; a row of X for matmul) is to a kernel.
struct Items {
    /// Bytes of each input per item.
    in_bytes: Vec<usize>,
    /// Bytes of output per item.
    out_bytes: usize,
    /// Threads the kernel runs per item (one per output element).
    threads: u64,
}

impl Items {
    /// One element in per input, one element out.
    fn elements(inputs: &[DType], output: DType) -> Self {
        Items {
            in_bytes: inputs.iter().map(|d| d.size()).collect(),
            out_bytes: output.size(),
            threads: 1,
        }
    }
}

/// `len` bytes of page-locked host memory from device `ordinal`'s driver, for a user's
/// function over blocks that copies its blocks to a GPU itself (a `PyTorch` or `CuPy`
/// function): `CU_MEMHOSTALLOC_PORTABLE`, so every context of the process (the
/// framework's) sees it as page-locked and copies from it asynchronously. It allocates
/// no device memory: the framework's allocator has the device to itself. The context is
/// the device's primary one, the one the CUDA runtime (and so `PyTorch` and `CuPy`) uses.
///
/// # Errors
/// As [`device::probe`] when no device can be used; [`Error::Device`] if the driver
/// cannot page-lock that much memory.
pub fn page_locked(ordinal: usize, len: usize) -> Result<Box<dyn SlotMemory>> {
    let ctx = device::context(ordinal)?;
    // SAFETY: u8 is valid for any bits; the caller fills the memory before reading it.
    let mut mem =
        unsafe { ctx.alloc_pinned_with_flags::<u8>(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(driver("allocate page-locked memory"))?;
    let ptr = mem
        .as_mut_ptr()
        .map_err(driver("allocate page-locked memory"))?;
    Ok(Box::new(Pinned { mem, ptr, len }))
}

/// A kernel argument after `(inputs.., output, n)`.
enum Arg {
    F64(f64),
    U64(u64),
    /// The tile's first flat element.
    TileStart,
    /// A resident operand on the device.
    Buffer(CudaSlice<u8>),
}

/// Page-locked host memory of one staging slot.
struct Pinned {
    mem: PinnedHostSlice<u8>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is owned by `mem` (which is Send) and only dereferenced through
// `&self`/`&mut self`, so moving the slot to another thread moves the only access to it.
unsafe impl Send for Pinned {}

impl SlotMemory for Pinned {
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of `mem`'s `len` (or more) bytes, alive as long as
        // `self`. The host reads a slot only when no copy into it is in flight: the
        // scheduler touches a tile's slots only after its Pending handle was waited on.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_bytes_mut(&mut self) -> &mut [u8] {
        let _ = &self.mem;
        // SAFETY: as for `as_bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// An operation whose tiles map item for item from input to output (affine, cast,
/// standardize, a fused `map`: elements; matmul: rows) prepared on a device: tiles in,
/// tiles out, on a ring of streams.
pub struct CudaElementwise {
    dev: Arc<CudaDevice>,
    func: CudaFunction,
    /// Bytes per item of each input and of the output.
    in_es: Vec<usize>,
    out_es: usize,
    /// Threads per item.
    threads: u64,
    args: Vec<Arg>,
    lanes: Vec<Lane>,
    _resident: Vec<Reservation>,
}

impl Drop for CudaElementwise {
    fn drop(&mut self) {
        drain(self.lanes.iter().map(|l| Arc::clone(&l.stream)));
    }
}

impl TileKernel<Tile> for CudaElementwise {
    fn staged_inputs(&self) -> bool {
        true
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.dev.alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<Tile>) -> Result<Pending<Tile>> {
        let tile = m.tile();
        let n = tile.len as usize;
        let lane = &self.lanes[m.seq() % self.lanes.len()];
        let in_lens: Vec<usize> = self.in_es.iter().map(|&es| n * es).collect();
        let launch_of = |lane: &Lane| {
            let mut args = vec![ArgValue::U64(n as u64)];
            args.extend(self.args.iter().map(|a| match a {
                Arg::F64(v) => ArgValue::F64(*v),
                Arg::U64(v) => ArgValue::U64(*v),
                Arg::TileStart => ArgValue::U64(tile.start),
                Arg::Buffer(b) => ArgValue::U64(b.device_ptr(&lane.stream).0),
            }));
            Launch {
                threads: n as u64 * self.threads,
                args,
            }
        };
        queue_tile(
            &self.dev,
            &self.func,
            lane,
            m,
            &in_lens,
            n * self.out_es,
            launch_of,
        )
    }
}

/// Queues tile `m` on `lane`: its staged inputs copied to the lane's input buffers, the
/// kernel `func` launched with `(inputs.., output, launch.args..)`, the first `out_len`
/// bytes of the result copied back into the tile's output slot; returns the pending
/// handle the write stage waits on. On failure the lane's stream is waited for first
/// (a copy may still be reading the tile's slots).
pub(super) fn queue_tile<T: Copy + Send + 'static>(
    dev: &CudaDevice,
    func: &CudaFunction,
    lane: &Lane,
    mut m: Morsel<T>,
    in_lens: &[usize],
    out_len: usize,
    launch_of: impl FnOnce(&Lane) -> Launch,
) -> Result<Pending<T>> {
    dev.ctx.bind_to_thread().map_err(driver("use the device"))?;
    let queued = (|| -> Result<()> {
        let cu = lane.stream.cu_stream();
        let (ins, out) = m.io();
        if ins.len() != in_lens.len() || ins.len() != lane.inputs.len() {
            return Err(Error::Internal(format!(
                "a tile brought {} inputs to a kernel prepared for {}",
                ins.len(),
                lane.inputs.len()
            )));
        }
        let too_large = || {
            Error::Internal("a tile is larger than the device buffers it was prepared for".into())
        };
        // device pointers: inputs, then the output, then the launch's arguments
        let mut ptrs: Vec<u64> = Vec::with_capacity(ins.len() + 1);
        for ((src, &len), buf) in ins.iter().zip(in_lens).zip(&lane.inputs) {
            let src = src.get(..len).ok_or_else(too_large)?;
            if src.len() > buf.len() {
                return Err(too_large());
            }
            let (d_in, _) = buf.device_ptr(&lane.stream);
            // SAFETY: `src` is page-locked memory of the tile's input slot and `d_in` a
            // device buffer at least as long; the slot stays alive and unwritten until
            // the event recorded after this completes (the morsel that owns it is kept
            // in flight).
            unsafe { result::memcpy_htod_async(d_in, src, cu) }
                .map_err(driver("copy a tile to the device"))?;
            ptrs.push(d_in);
        }
        let dst = out.get_mut(..out_len).ok_or_else(too_large)?;
        if dst.len() > lane.output.len() {
            return Err(too_large());
        }
        let (d_out, _) = lane.output.device_ptr(&lane.stream);
        ptrs.push(d_out);
        let launch = launch_of(lane);
        let cfg = dev.grid(launch.threads);
        let mut builder = lane.stream.launch_builder(func);
        for p in &ptrs {
            builder.arg(p);
        }
        for v in &launch.args {
            match v {
                ArgValue::F64(x) => builder.arg(x),
                ArgValue::U64(x) => builder.arg(x),
            };
        }
        // SAFETY: the arguments match the kernel's signature in
        // src/backend/cuda/source.rs (inputs, output, then the family's parameters, as
        // the kernel's preparation laid them out); each device buffer holds the tile's
        // bytes (checked above) and the kernel touches no more than the tile.
        unsafe { builder.launch(cfg) }.map_err(driver("launch a kernel"))?;
        // SAFETY: `dst` is page-locked memory of the tile's output slot, at least as
        // long as the copy; as for the input, it is neither read nor freed before the
        // event below completes.
        unsafe { result::memcpy_dtoh_async(dst, d_out, cu) }
            .map_err(driver("copy a tile back from the device"))?;
        Ok(())
    })();
    if let Err(e) = queued {
        let _ = lane.stream.synchronize();
        return Err(e);
    }
    let event = record_now(&dev.ctx, &lane.stream)?;
    Ok(InFlight::pending(Arc::new(event), m))
}
