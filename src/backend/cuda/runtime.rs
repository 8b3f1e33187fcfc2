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
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PinnedHostSlice, PushKernelArg, result, sys,
};

use super::ElementwiseParams;
use super::source::{Elementwise, elementwise_source, map_kernel_name, map_source};
use crate::budget::{MemoryBudget, Reservation};
use crate::device::{self, DeviceError, GpuInfo};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::expr::Program;
use crate::plan::Tile;
use crate::scheduler::{Morsel, Pending, Slot, SlotMemory, TileKernel};

/// Threads per block of the elementwise kernels.
pub(super) const BLOCK: u32 = 256;

pub(super) fn driver(action: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| {
        Error::Device(DeviceError::Driver {
            action,
            msg: e.to_string(),
        })
    }
}

/// A CUDA device opened for an engine's runs, with its memory budget.
pub struct CudaDevice {
    pub(super) ctx: Arc<CudaContext>,
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
        let ctx = CudaContext::new(ordinal).map_err(driver("open the device"))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("count the multiprocessors"))?;
        let limit = match memory {
            Some(m) if m > info.free_bytes => {
                return Err(Error::invalid(format!(
                    "--gpu-memory {} is more than cuda:{ordinal} has free ({})",
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

    /// Page-locked host memory for a staging slot, not write-combined (the host reads
    /// what the device writes back), paid for by `reservation` from the host budget.
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

    /// Prepares an elementwise kernel (`kind` from `input` to `output` dtype) for tiles
    /// of at most `tile_elems` elements on `lanes` streams: compiles it for this device,
    /// uploads its resident operands (`mean` and `sd` for standardize) and allocates
    /// every device buffer the run needs, from the device budget.
    ///
    /// # Errors
    /// [`Error::Budget`] when the lanes' buffers do not fit the device budget (with the
    /// arithmetic), [`Error::Device`] when compiling or a driver call fails.
    pub fn elementwise(
        self: &Arc<Self>,
        kind: Elementwise,
        input: DType,
        output: DType,
        params: &ElementwiseParams,
        tile_elems: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let name = kind.kernel_name(input, output);
        let src = elementwise_source(&[(kind, input, output)]);
        let mut resident = Vec::new();
        let args = match (kind, params) {
            (Elementwise::Affine, ElementwiseParams::Affine { scale, offset }) => {
                vec![Arg::F64(*scale), Arg::F64(*offset)]
            }
            (Elementwise::Cast, ElementwiseParams::Cast) => Vec::new(),
            (Elementwise::Standardize, ElementwiseParams::Standardize { mean, sd }) => {
                let bytes = (mean.len() + sd.len()) as u64 * 8;
                resident.push(
                    self.budget
                        .reserve("standardize statistics on the device", bytes)?,
                );
                let stream = self.ctx.default_stream();
                let m = stream
                    .clone_htod(mean.as_slice())
                    .map_err(driver("upload the statistics"))?;
                let s = stream
                    .clone_htod(sd.as_slice())
                    .map_err(driver("upload the statistics"))?;
                stream
                    .synchronize()
                    .map_err(driver("upload the statistics"))?;
                vec![
                    Arg::TileStart,
                    Arg::Buffer(m),
                    Arg::Buffer(s),
                    Arg::U64(mean.len() as u64),
                ]
            }
            _ => {
                return Err(Error::Internal(
                    "elementwise kernel asked for with parameters of another kind".into(),
                ));
            }
        };
        self.prepare(
            &name,
            &src,
            &[input],
            output,
            args,
            resident,
            tile_elems,
            lanes,
        )
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
            inputs,
            output,
            Vec::new(),
            Vec::new(),
            tile_elems,
            lanes,
        )
    }

    /// Compiles `src` for this device and loads the kernels `names` from it.
    pub(super) fn functions(
        &self,
        what: &str,
        src: &str,
        names: &[&str],
    ) -> Result<Vec<CudaFunction>> {
        let compiled = device::compile(what, src, &self.info.arch(), false)?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(compiled.cubin))
            .map_err(driver("load the kernels"))?;
        names
            .iter()
            .map(|n| module.load_function(n).map_err(driver("find the kernel")))
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        self: &Arc<Self>,
        name: &str,
        src: &str,
        inputs: &[DType],
        output: DType,
        args: Vec<Arg>,
        resident: Vec<Reservation>,
        tile_elems: u64,
        lanes: usize,
    ) -> Result<CudaElementwise> {
        let func = self.functions(name, src, &[name])?.remove(0);
        let in_bytes: Vec<usize> = inputs
            .iter()
            .map(|d| tile_elems as usize * d.size())
            .collect();
        let out_bytes = tile_elems as usize * output.size();
        let mut ring = Vec::with_capacity(lanes.max(1));
        for _ in 0..lanes.max(1) {
            let r = self.budget.reserve(
                "one stream's input and output tile buffers on the device",
                (in_bytes.iter().sum::<usize>() + out_bytes) as u64,
            )?;
            let stream = self.ctx.new_stream().map_err(driver("create a stream"))?;
            let mut ins = Vec::with_capacity(in_bytes.len());
            for &b in &in_bytes {
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
        Ok(CudaElementwise {
            dev: Arc::clone(self),
            func,
            in_es: inputs.iter().map(|d| d.size()).collect(),
            out_es: output.size(),
            args,
            lanes: ring,
            _resident: resident,
        })
    }
}

/// A kernel argument after `(inputs.., output, n)`.
enum Arg {
    F64(f64),
    U64(u64),
    /// The tile's first flat element.
    TileStart,
    /// A resident operand on the device.
    Buffer(CudaSlice<f64>),
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

struct Lane {
    stream: Arc<CudaStream>,
    inputs: Vec<CudaSlice<u8>>,
    output: CudaSlice<u8>,
    _reservation: Reservation,
}

/// An elementwise operation (affine, cast, standardize, a fused `map`) prepared on a
/// device: tiles in, tiles out, on a ring of streams.
pub struct CudaElementwise {
    dev: Arc<CudaDevice>,
    func: CudaFunction,
    in_es: Vec<usize>,
    out_es: usize,
    args: Vec<Arg>,
    lanes: Vec<Lane>,
    _resident: Vec<Reservation>,
}

/// An argument's value for one launch.
enum ArgValue {
    F64(f64),
    U64(u64),
}

/// An event recorded on `stream` now (the work queued so far). On failure the stream is
/// waited for first, so nothing queued still reads memory the caller frees on error.
///
/// # Errors
/// [`Error::Device`] if the event cannot be created or recorded.
pub(super) fn record_now(ctx: &Arc<CudaContext>, stream: &CudaStream) -> Result<CudaEvent> {
    ctx.new_event(None)
        .and_then(|e| e.record(stream).map(|()| e))
        .map_err(|e| {
            let _ = stream.synchronize();
            driver("record an event")(e)
        })
}

/// A tile in flight: waiting synchronizes its event; dropped unwaited (a panic), it
/// still waits before its slots are freed, so no copy lands in freed memory.
pub(super) struct InFlight {
    event: Arc<CudaEvent>,
    morsel: Option<Morsel<Tile>>,
}

impl InFlight {
    /// The pending handle of tile `morsel`, done when `event` is.
    pub(super) fn pending(event: Arc<CudaEvent>, morsel: Morsel<Tile>) -> Pending<Tile> {
        let flight = InFlight {
            event,
            morsel: Some(morsel),
        };
        Pending::Later(Box::new(move || flight.finish()))
    }

    fn finish(mut self) -> Result<Morsel<Tile>> {
        self.event
            .synchronize()
            .map_err(driver("run a tile on the device"))?;
        self.morsel
            .take()
            .ok_or_else(|| Error::Internal("a device tile was finished twice".into()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.morsel.is_some() {
            let _ = self.event.synchronize();
        }
    }
}

impl TileKernel<Tile> for CudaElementwise {
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
        let tile = m.tile();
        let n = tile.len as usize;
        let lane = &self.lanes[m.seq() % self.lanes.len()];
        // Everything queued on the lane's stream; if a later step fails, wait for what
        // was queued before the tile's slots can be freed (a copy may be reading them).
        let queued = (|| -> Result<()> {
            let cu = lane.stream.cu_stream();
            let (ins, out) = m.io();
            if ins.len() != self.in_es.len() {
                return Err(Error::Internal(format!(
                    "a tile brought {} inputs to a kernel prepared for {}",
                    ins.len(),
                    self.in_es.len()
                )));
            }
            let dst = &mut out[..n * self.out_es];
            // device pointers: inputs, then the output, then the family's arguments
            let mut ptrs: Vec<u64> = Vec::with_capacity(ins.len() + 1);
            for ((src, &es), buf) in ins.iter().zip(&self.in_es).zip(&lane.inputs) {
                let src = &src[..n * es];
                if src.len() > buf.len() {
                    return Err(Error::Internal(format!(
                        "a tile of {n} elements is larger than the device buffers it was prepared for"
                    )));
                }
                let (d_in, _) = buf.device_ptr(&lane.stream);
                // SAFETY: `src` is page-locked memory of the tile's input slot and `d_in` a
                // device buffer at least as long; the slot stays alive and unwritten until
                // the event recorded below completes (the morsel that owns it is kept in
                // flight).
                unsafe { result::memcpy_htod_async(d_in, src, cu) }
                    .map_err(driver("copy a tile to the device"))?;
                ptrs.push(d_in);
            }
            if dst.len() > lane.output.len() {
                return Err(Error::Internal(format!(
                    "a tile of {n} elements is larger than the device buffers it was prepared for"
                )));
            }
            let (d_out, _) = lane.output.device_ptr(&lane.stream);
            ptrs.push(d_out);
            let blocks = (n as u64)
                .div_ceil(u64::from(BLOCK))
                .clamp(1, u64::from(self.dev.sms) * 32);
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let n64 = n as u64;
            // values the launch builder borrows: they must outlive it
            let extra: Vec<ArgValue> = self
                .args
                .iter()
                .map(|a| match a {
                    Arg::F64(v) => ArgValue::F64(*v),
                    Arg::U64(v) => ArgValue::U64(*v),
                    Arg::TileStart => ArgValue::U64(tile.start),
                    Arg::Buffer(b) => ArgValue::U64(b.device_ptr(&lane.stream).0),
                })
                .collect();
            let mut launch = lane.stream.launch_builder(&self.func);
            for p in &ptrs {
                launch.arg(p);
            }
            launch.arg(&n64);
            for v in &extra {
                match v {
                    ArgValue::F64(x) => launch.arg(x),
                    ArgValue::U64(x) => launch.arg(x),
                };
            }
            // SAFETY: the arguments match the kernel's signature in
            // src/backend/cuda/source.rs (inputs, output, n, then the family's parameters);
            // each device buffer holds at least `n` elements of its dtype.
            unsafe { launch.launch(cfg) }.map_err(driver("launch a kernel"))?;
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
        let event = record_now(&self.dev.ctx, &lane.stream)?;
        Ok(InFlight::pending(Arc::new(event), m))
    }
}
