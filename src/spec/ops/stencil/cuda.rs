//! The neighbourhood filters on a GPU, as data: [`StencilProgram`] turns a compiled
//! filter ([`Stencil`](super::Stencil)) into the CUDA kernels it needs (`kernels/stencil.cu`)
//! and, for each tile, the launches that run its passes over the tile's padded box,
//! with the same geometry as the CPU's kernel (`cpu.rs` beside it). Pure, so the launch
//! sequence is checked without a GPU: `tests/it/cuda_stencil_emulation.rs` runs it on
//! the host against the CPU backend; the CUDA runtime (`run`, below) only executes it.

use std::fmt::Write as _;

use super::{Kernel1, Pass, Stencil};
use crate::backend::cuda::source::{COMMON, cuda_type};
use crate::dtype::DType;
use crate::tiling::{Boundary, BoxPlan, BoxTile, Halo};

/// The stencil kernels' templates.
pub const STENCIL: &str = include_str!("../../../../kernels/stencil.cu");

/// Largest median window a GPU computes (its values are sorted in registers); larger
/// ones run on the CPU.
pub const MAX_GPU_MEDIAN: usize = 7;

/// A buffer a launch reads or writes: the tile's padded box, the intermediate of a
/// separable pass, two tile-sized results (Sobel's magnitude needs both), the output in
/// the output dtype, and the `k`-th weight vector (uploaded once per run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// The padded box, `(th + halo) × (tw + halo)` in the float type.
    Padded,
    /// A separable filter's intermediate.
    Pass,
    /// A tile-sized result in the float type.
    TileA,
    /// A second tile-sized result in the float type.
    TileB,
    /// The tile's output in the output dtype.
    Out,
    /// Weight vector `k` of [`StencilProgram::weights`], in the float type.
    Weights(usize),
}

/// A scalar argument of a launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    /// `unsigned long long`.
    U64(u64),
    /// `long long`.
    I64(i64),
    /// `double`.
    F64(f64),
}

/// One kernel launch: the kernel, its buffer arguments, then its scalar arguments, and
/// the threads it needs (one per output element).
#[derive(Clone, Debug, PartialEq)]
pub struct StencilLaunch {
    /// Kernel name.
    pub kernel: String,
    /// Buffer arguments, first.
    pub bufs: Vec<Buf>,
    /// Scalar arguments, after the buffers.
    pub args: Vec<Val>,
    /// Threads (output elements).
    pub threads: u64,
}

/// A separable pass with its weight vectors' indices.
#[derive(Clone, Copy, Debug)]
struct Sep {
    rows: usize,
    cols: usize,
    r_before: usize,
    c_before: usize,
    r_taps: usize,
    c_taps: usize,
    cols_first: bool,
}

#[derive(Clone, Debug)]
enum Kind {
    Separable(Sep),
    Magnitude([Sep; 2]),
    Dense {
        w: usize,
        rows: usize,
        cols: usize,
        before_r: usize,
        before_c: usize,
    },
    Median(usize),
}

/// A filter compiled for the GPU, for one plan.
#[derive(Clone, Debug)]
pub struct StencilProgram {
    /// The float type the filter computes in (f32, or f64 for wide inputs).
    pub float: DType,
    /// The output dtype.
    pub out: DType,
    /// The weight vectors, uploaded once per run.
    pub weights: Vec<Vec<f64>>,
    kind: Kind,
    halo_rows: Halo,
    halo_cols: Halo,
    cval: Option<f64>,
    h: i64,
    w: i64,
}

impl StencilProgram {
    /// The program of `stencil` over `plan`'s tiles, from `input` to `output` dtype;
    /// `None` when the GPU has no kernel for it (a median wider than
    /// [`MAX_GPU_MEDIAN`]).
    #[must_use]
    pub fn new(stencil: &Stencil, plan: &BoxPlan, input: DType, output: DType) -> Option<Self> {
        let mut weights = Vec::new();
        let mut sep = |r: &Kernel1, c: &Kernel1, cols_first: bool| {
            weights.push(r.w.clone());
            weights.push(c.w.clone());
            Sep {
                rows: weights.len() - 2,
                cols: weights.len() - 1,
                r_before: r.before,
                c_before: c.before,
                r_taps: r.w.len(),
                c_taps: c.w.len(),
                cols_first,
            }
        };
        let kind = match &stencil.pass {
            Pass::Separable(r, c, first) => Kind::Separable(sep(r, c, *first)),
            Pass::Magnitude([a, b]) => {
                Kind::Magnitude([sep(&a.0, &a.1, a.2), sep(&b.0, &b.1, b.2)])
            }
            Pass::Dense {
                w,
                rows,
                cols,
                before_r,
                before_c,
            } => {
                weights.push(w.clone());
                Kind::Dense {
                    w: weights.len() - 1,
                    rows: *rows,
                    cols: *cols,
                    before_r: *before_r,
                    before_c: *before_c,
                }
            }
            Pass::Median { size } if *size <= MAX_GPU_MEDIAN => Kind::Median(*size),
            Pass::Median { .. } => return None,
        };
        Some(StencilProgram {
            float: if Stencil::wide(input) {
                DType::F64
            } else {
                DType::F32
            },
            out: output,
            weights,
            kind,
            halo_rows: plan.halo_rows,
            halo_cols: plan.halo_cols,
            cval: match plan.boundary {
                Boundary::Constant(v) => Some(v),
                _ => None,
            },
            h: plan.dims[1] as i64,
            w: plan.dims[2] as i64,
        })
    }

    /// Elements of the padded box, the intermediate and a tile, for tiles of at most
    /// `rows × cols`: what each of [`Buf::Padded`], [`Buf::Pass`] and the tile buffers
    /// hold.
    #[must_use]
    pub fn buffer_elems(&self, (rows, cols): (usize, usize)) -> (usize, usize, usize) {
        let (ph, pw) = (rows + self.halo_rows.total(), cols + self.halo_cols.total());
        (ph * pw, (rows * pw).max(ph * cols), rows * cols)
    }

    /// Device bytes for tiles of at most `tile` (`rows × cols`): each lane's padded box,
    /// intermediate, two float tiles and the output tile, and the weights (once).
    #[must_use]
    pub fn device_bytes(&self, tile: (usize, usize)) -> (u64, u64) {
        let f = self.float.size() as u64;
        let (padded, pass, t) = self.buffer_elems(tile);
        let lane = (padded + pass + 2 * t) as u64 * f + t as u64 * self.out.size() as u64;
        let weights = self.weights.iter().map(|w| w.len() as u64 * f).sum();
        (lane, weights)
    }

    fn name(&self, kind: &str, o: DType) -> String {
        format!("stencil_{kind}_{}_{}", self.float.name(), o.name())
    }

    /// The kernels this program launches.
    #[must_use]
    pub fn kernels(&self) -> Vec<String> {
        let (f, o) = (self.float, self.out);
        let mut v = match &self.kind {
            Kind::Separable(_) => vec![self.name("taps", f), self.name("taps", o)],
            Kind::Magnitude(_) => vec![self.name("taps", f), self.name("hypot", o)],
            Kind::Dense { .. } => vec![self.name("dense", o)],
            Kind::Median(s) => vec![self.name(&format!("median{s}"), o)],
        };
        v.dedup();
        v
    }

    /// The NVRTC source of [`StencilProgram::kernels`].
    #[must_use]
    pub fn source(&self) -> String {
        stencil_source(&self.kernels())
    }

    /// The launches that filter `tile` (whose padded box the host gathered into
    /// [`Buf::Padded`]) into [`Buf::Out`], in order.
    #[must_use]
    pub fn launches(&self, tile: &BoxTile) -> Vec<StencilLaunch> {
        let (th, tw) = (tile.rows() as u64, tile.cols() as u64);
        let g = Geo {
            th,
            tw,
            ph: th + self.halo_rows.total() as u64,
            pw: tw + self.halo_cols.total() as u64,
            r_first: tile.r0 - self.halo_rows.before as i64,
            c_first: tile.c0 - self.halo_cols.before as i64,
        };
        match &self.kind {
            Kind::Separable(s) => self.separable(s, &g, Buf::Out, self.out),
            Kind::Magnitude([a, b]) => {
                let mut v = self.separable(a, &g, Buf::TileA, self.float);
                v.extend(self.separable(b, &g, Buf::TileB, self.float));
                v.push(StencilLaunch {
                    kernel: self.name("hypot", self.out),
                    bufs: vec![Buf::TileA, Buf::TileB, Buf::Out],
                    args: vec![Val::U64(th * tw)],
                    threads: th * tw,
                });
                v
            }
            Kind::Dense {
                w,
                rows,
                cols,
                before_r,
                before_c,
            } => vec![StencilLaunch {
                kernel: self.name("dense", self.out),
                bufs: vec![Buf::Padded, Buf::Out, Buf::Weights(*w)],
                args: [
                    *rows as u64,
                    *cols as u64,
                    th,
                    tw,
                    g.pw,
                    (self.halo_rows.before - before_r) as u64,
                    (self.halo_cols.before - before_c) as u64,
                ]
                .map(Val::U64)
                .to_vec(),
                threads: th * tw,
            }],
            Kind::Median(s) => vec![StencilLaunch {
                kernel: self.name(&format!("median{s}"), self.out),
                bufs: vec![Buf::Padded, Buf::Out],
                args: [th, tw, g.pw].map(Val::U64).to_vec(),
                threads: th * tw,
            }],
        }
    }

    /// A separable pass into `dst` (of dtype `dt`): the rows pass then the columns
    /// pass, or the other way round, as the CPU's `separable`.
    fn separable(&self, s: &Sep, g: &Geo, dst: Buf, dt: DType) -> Vec<StencilLaunch> {
        let dr = (self.halo_rows.before - s.r_before) as u64;
        let dc = (self.halo_cols.before - s.c_before) as u64;
        let cval = self.cval.unwrap_or(0.0);
        let masked = self.cval.is_some();
        #[allow(clippy::too_many_arguments)]
        let taps = |kernel: String,
                    src: Buf,
                    out: Buf,
                    w: usize,
                    ntaps: usize,
                    (nrows, ncols): (u64, u64),
                    (stride, first, step): (u64, u64, u64),
                    (axis, mfirst, mlen): (u64, i64, i64)| StencilLaunch {
            kernel,
            bufs: vec![src, out, Buf::Weights(w)],
            args: vec![
                Val::U64(ntaps as u64),
                Val::U64(nrows),
                Val::U64(ncols),
                Val::U64(stride),
                Val::U64(first),
                Val::U64(step),
                Val::U64(if masked { axis } else { 0 }),
                Val::I64(mfirst),
                Val::I64(mlen),
                Val::F64(cval),
            ],
            threads: nrows * ncols,
        };
        let (pass_name, out_name) = (self.name("taps", self.float), self.name("taps", dt));
        if s.cols_first {
            vec![
                // columns pass over every padded row (ph × tw); rows outside the image
                // are the constant at a constant boundary
                taps(
                    pass_name,
                    Buf::Padded,
                    Buf::Pass,
                    s.cols,
                    s.c_taps,
                    (g.ph, g.tw),
                    (g.pw, dc, 1),
                    (2, g.r_first, self.h),
                ),
                taps(
                    out_name,
                    Buf::Pass,
                    dst,
                    s.rows,
                    s.r_taps,
                    (g.th, g.tw),
                    (g.tw, dr * g.tw, g.tw),
                    (0, 0, 0),
                ),
            ]
        } else {
            vec![
                // rows pass over every padded column (th × pw); columns outside the
                // image are the constant at a constant boundary
                taps(
                    pass_name,
                    Buf::Padded,
                    Buf::Pass,
                    s.rows,
                    s.r_taps,
                    (g.th, g.pw),
                    (g.pw, dr * g.pw, g.pw),
                    (1, g.c_first, self.w),
                ),
                taps(
                    out_name,
                    Buf::Pass,
                    dst,
                    s.cols,
                    s.c_taps,
                    (g.th, g.tw),
                    (g.pw, dc, 1),
                    (0, 0, 0),
                ),
            ]
        }
    }
}

/// A tile's geometry: its size, its padded box's, and the box's first image position.
struct Geo {
    th: u64,
    tw: u64,
    ph: u64,
    pw: u64,
    r_first: i64,
    c_first: i64,
}

/// The compare-exchanges `(x, y)`, `x < y` (the smaller value goes to `x`) that sort `n`
/// values: Batcher's odd-even merge sort for the next power of two, without the
/// comparators that reach past `n` (positions there would hold +infinity, which no
/// comparator moves). The medians' network on the device ([`stencil_source`]): 394
/// comparators for 49 values, where an odd-even transposition sort takes 1176.
#[must_use]
pub fn sorting_network(n: usize) -> Vec<(usize, usize)> {
    let pow = n.next_power_of_two();
    let mut net = Vec::new();
    let mut p = 1;
    while p < pow {
        let mut k = p;
        while k >= 1 {
            let mut q = k % p;
            while q + k < pow {
                for r in 0..k {
                    let (x, y) = (q + r, q + r + k);
                    if y < n && x / (2 * p) == y / (2 * p) {
                        net.push((x, y));
                    }
                }
                q += 2 * k;
            }
            k /= 2;
        }
        p *= 2;
    }
    net
}

/// The NVRTC source of the stencil kernels `names` (`stencil_<kind>_<float>_<out>`, as
/// [`StencilProgram::kernels`] and [`all_stencil_kernels`] name them).
///
/// # Panics
/// If a name is not of that form.
#[must_use]
pub fn stencil_source(names: &[String]) -> String {
    let mut s = String::with_capacity(COMMON.len() + STENCIL.len() + 400 * names.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(STENCIL);
    s.push('\n');
    for size in 1..=MAX_GPU_MEDIAN {
        s.push_str(&format!(
            "template <> struct TsMedianNet<{size}> {{\n    template <typename K> __device__ \
             static __forceinline__ void sort(K* v) {{\n"
        ));
        for (x, y) in sorting_network(size * size) {
            s.push_str(&format!("        TS_CX({x}, {y});\n"));
        }
        s.push_str("    }\n};\n");
    }
    for name in names {
        let parts: Vec<&str> = name.split('_').collect();
        let [_, kind, f, o] = parts[..] else {
            panic!("not a stencil kernel name: {name}");
        };
        let dt = |n: &str| {
            DType::ALL
                .into_iter()
                .find(|d| d.name() == n)
                .unwrap_or_else(|| panic!("no dtype {n} in {name}"))
        };
        let (ft, ot) = (cuda_type(dt(f)), cuda_type(dt(o)));
        let (params, call) = match kind {
            "taps" => (
                format!(
                    "const {ft}* src, {ot}* out, const {ft}* w, unsigned long long ntaps, \
                     unsigned long long nrows, unsigned long long ncols, unsigned long long stride, \
                     unsigned long long first, unsigned long long step, unsigned long long mask_axis, \
                     long long mask_first, long long mask_len, double cval"
                ),
                format!(
                    "ts_stencil_taps<{ft}, {ot}>(src, out, w, ntaps, nrows, ncols, stride, first, \
                     step, mask_axis, mask_first, mask_len, cval)"
                ),
            ),
            "dense" => (
                format!(
                    "const {ft}* padded, {ot}* out, const {ft}* w, unsigned long long krows, \
                     unsigned long long kcols, unsigned long long th, unsigned long long tw, \
                     unsigned long long pw, unsigned long long dr, unsigned long long dc"
                ),
                format!(
                    "ts_stencil_dense<{ft}, {ot}>(padded, out, w, krows, kcols, th, tw, pw, dr, dc)"
                ),
            ),
            "hypot" => (
                format!("const {ft}* a, const {ft}* b, {ot}* out, unsigned long long n"),
                format!("ts_stencil_hypot<{ft}, {ot}>(a, b, out, n)"),
            ),
            m if m.starts_with("median") => (
                format!(
                    "const {ft}* padded, {ot}* out, unsigned long long th, unsigned long long tw, \
                     unsigned long long pw"
                ),
                format!(
                    "ts_stencil_median<{ft}, {ot}, {}>(padded, out, th, tw, pw)",
                    &m["median".len()..]
                ),
            ),
            _ => panic!("not a stencil kernel name: {name}"),
        };
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void {name}({params}) {{ {call}; }}"
        );
    }
    s
}

/// Every stencil kernel a run can ask for: each kind, for both float types, to every
/// output dtype (the float types' own intermediates included).
#[must_use]
pub fn all_stencil_kernels() -> Vec<String> {
    let mut kinds = vec!["taps".to_string(), "dense".into(), "hypot".into()];
    kinds.extend((1..=MAX_GPU_MEDIAN).map(|s| format!("median{s}")));
    let mut v = Vec::new();
    for k in &kinds {
        for f in [DType::F32, DType::F64] {
            for o in DType::ALL {
                v.push(format!("stencil_{k}_{}_{}", f.name(), o.name()));
            }
        }
    }
    v
}

#[cfg(feature = "cuda")]
pub(super) mod run {
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

    use super::super::cpu::gather;
    use super::super::{Stencil, TileJob};
    use super::{Buf, StencilProgram, Val};
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
    pub(in crate::spec::ops::stencil) struct CudaStencil<'a> {
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
    pub(in crate::spec::ops::stencil) fn prepare<'a>(
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
            let dst = out.get_mut(..n).ok_or_else(|| {
                Error::Internal("a stencil tile's output slot is too small".into())
            })?;
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
}
