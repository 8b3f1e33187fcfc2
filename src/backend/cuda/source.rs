//! The CUDA C source of tilestream's kernels, assembled for NVRTC: the common header
//! (`kernels/common.cuh`: element types and casts), the operation's templates
//! (`kernels/*.cu`) and one `extern "C"` wrapper per instantiation, named
//! `<op>_<in>_<out>` (`affine_f32_f16`). Pure text, so it is tested without a GPU; the
//! compilation test (`tests/it/cuda_kernels.rs`) hands it to NVRTC.

use std::fmt::Write as _;

use crate::dtype::{DType, Element};
use crate::ops::expr::{BinOp, Instr, Operand, Program, UnOp};
use crate::ops::generate::Dist;
use crate::ops::reduce::{Geometry, Reduce};

/// Element types and casts shared by every kernel.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");
/// Templates of the elementwise kernels.
pub const ELEMENTWISE: &str = include_str!("../../../kernels/elementwise.cu");
/// Templates of the reduction kernels.
pub const REDUCE: &str = include_str!("../../../kernels/reduce.cu");
/// The matmul kernel's template.
pub const MATMUL: &str = include_str!("../../../kernels/matmul.cu");
/// The transpose kernel's template.
pub const TRANSPOSE: &str = include_str!("../../../kernels/transpose.cu");
/// `gen`'s generator and its kernel template.
pub const GENERATE: &str = include_str!("../../../kernels/generate.cu");

/// The CUDA type of `d` in the kernels (`ts_f32`).
#[must_use]
pub fn cuda_type(d: DType) -> String {
    format!("ts_{}", d.name())
}

/// An elementwise kernel family: one kernel per (input, output) dtype pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// `y = cast(fma(x, scale, offset))`: `(x, y, n, scale, offset)`.
    Affine,
    /// `y = cast(x)`: `(x, y, n)`.
    Cast,
    /// `y = cast((x - mean[c]) / sd[c])`, `c = (start + i) % cols`:
    /// `(x, y, n, start, mean, sd, cols)`.
    Standardize,
}

impl Elementwise {
    /// Every family.
    pub const ALL: [Elementwise; 3] = [
        Elementwise::Affine,
        Elementwise::Cast,
        Elementwise::Standardize,
    ];

    /// The operation's part of kernel names.
    #[must_use]
    pub fn op_name(self) -> &'static str {
        match self {
            Elementwise::Affine => "affine",
            Elementwise::Cast => "cast",
            Elementwise::Standardize => "standardize",
        }
    }

    /// The kernel's name for one dtype pair (`affine_f32_f16`).
    #[must_use]
    pub fn kernel_name(self, input: DType, output: DType) -> String {
        format!("{}_{}_{}", self.op_name(), input.name(), output.name())
    }

    fn wrapper(self, input: DType, output: DType) -> String {
        let (i, o) = (cuda_type(input), cuda_type(output));
        let name = self.kernel_name(input, output);
        let (params, call) = match self {
            Elementwise::Affine => (
                "unsigned long long n, double scale, double offset",
                "ts_affine(x, y, n, scale, offset)",
            ),
            Elementwise::Cast => ("unsigned long long n", "ts_cast(x, y, n)"),
            Elementwise::Standardize => (
                "unsigned long long n, unsigned long long start, const double* mean, \
                 const double* sd, unsigned long long cols, unsigned long long inner",
                "ts_standardize(x, y, n, start, mean, sd, cols, inner)",
            ),
        };
        format!(
            "extern \"C\" __global__ void {name}(const {i}* x, {o}* y, {params}) {{ {call}; }}\n"
        )
    }
}

/// The NVRTC source of the elementwise kernels `kernels` (family, input, output).
#[must_use]
pub fn elementwise_source(kernels: &[(Elementwise, DType, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + ELEMENTWISE.len() + 200 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(ELEMENTWISE);
    s.push('\n');
    for &(k, i, o) in kernels {
        let _ = write!(s, "{}", k.wrapper(i, o));
    }
    s
}

/// Every elementwise kernel: each family for every pair of dtypes.
#[must_use]
pub fn all_elementwise() -> Vec<(Elementwise, DType, DType)> {
    let mut v = Vec::new();
    for k in Elementwise::ALL {
        for i in DType::ALL {
            for o in DType::ALL {
                v.push((k, i, o));
            }
        }
    }
    v
}

/// The name of `dist` in `gen`'s kernel names (`demo`, `normal`, `uniform`).
#[must_use]
pub fn gen_dist_name(dist: &Dist) -> &'static str {
    match dist {
        Dist::Demo => "demo",
        Dist::Normal { .. } => "normal",
        Dist::Uniform { .. } => "uniform",
    }
}

/// The two parameters `gen`'s kernel takes after `last_dim`: `(mean, std)`, `(low,
/// high)`, or zeros for `demo`.
#[must_use]
pub fn gen_params(dist: &Dist) -> (f64, f64) {
    match *dist {
        Dist::Demo => (0.0, 0.0),
        Dist::Normal { mean, std } => (mean, std),
        Dist::Uniform { low, high } => (low, high),
    }
}

/// `gen`'s kernel name for a distribution (by [`gen_dist_name`]) and output dtype
/// (`gen_normal_f32`). Its arguments are `(y, n, start, seed, last_dim, a, b)`.
#[must_use]
pub fn gen_kernel_name(dist: &str, out: DType) -> String {
    format!("gen_{dist}_{}", out.name())
}

/// The NVRTC source of `gen`'s kernels `kernels` (distribution name, output dtype).
#[must_use]
pub fn gen_source(kernels: &[(&str, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + GENERATE.len() + 200 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(GENERATE);
    s.push('\n');
    for &(dist, o) in kernels {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void {name}({ot}* y, unsigned long long n, \
             unsigned long long start, unsigned long long seed, unsigned long long last_dim, \
             double a, double b) {{ ts_gen<{ot}, TS_GEN_{upper}>(y, n, start, seed, last_dim, a, b); }}",
            name = gen_kernel_name(dist, o),
            ot = cuda_type(o),
            upper = dist.to_ascii_uppercase(),
        );
    }
    s
}

/// Every `gen` kernel: each distribution for every output dtype.
#[must_use]
pub fn all_gen() -> Vec<(&'static str, DType)> {
    let mut v = Vec::new();
    for dist in ["demo", "normal", "uniform"] {
        for o in DType::ALL {
            v.push((dist, o));
        }
    }
    v
}

/// The matmul kernel's name for X of dtype `x`, compute type `c` (f32 or f64) and
/// output `y` (`matmul_u16_f32_f16`). Its arguments are `(x, y, rows, w, k, n)`.
#[must_use]
pub fn matmul_kernel_name(x: DType, c: DType, y: DType) -> String {
    format!("matmul_{}_{}_{}", x.name(), c.name(), y.name())
}

/// The NVRTC source of the matmul kernels `kernels` (X, compute, output dtypes).
#[must_use]
pub fn matmul_source(kernels: &[(DType, DType, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + MATMUL.len() + 200 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(MATMUL);
    s.push('\n');
    for &(x, c, y) in kernels {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void {name}(const {xt}* x, {yt}* y, unsigned long long rows, \
             const {ct}* w, unsigned long long k, unsigned long long n) \
             {{ ts_matmul<{xt}, {ct}, {yt}>(x, y, rows, w, k, n); }}",
            name = matmul_kernel_name(x, c, y),
            xt = cuda_type(x),
            ct = cuda_type(c),
            yt = cuda_type(y),
        );
    }
    s
}

/// Every matmul kernel the engine can ask for: X of any dtype with each compute type
/// [`crate::ops::matmul::compute_dtype`] can choose for it (f32 only where X is exact in
/// f32), to every output dtype.
#[must_use]
pub fn all_matmul() -> Vec<(DType, DType, DType)> {
    let mut v = Vec::new();
    for x in DType::ALL {
        for c in [DType::F32, DType::F64] {
            if crate::ops::matmul::compute_dtype(x, c) != c {
                continue;
            }
            for y in DType::ALL {
                v.push((x, c, y));
            }
        }
    }
    v
}

/// The transpose kernel's name for elements of `es` bytes (`transpose_u32`): elements
/// move as unsigned integers of their size. Its arguments are
/// `(src, dst, row_len, c0, rows, cols)`.
///
/// # Panics
/// If `es` is not 1, 2, 4 or 8 (no dtype has another size).
#[must_use]
pub fn transpose_kernel_name(es: usize) -> String {
    assert!(matches!(es, 1 | 2 | 4 | 8), "no element has {es} bytes");
    format!("transpose_u{}", es * 8)
}

/// The NVRTC source of the transpose kernels for elements of 1, 2, 4 and 8 bytes.
#[must_use]
pub fn transpose_source() -> String {
    let mut s = String::with_capacity(COMMON.len() + TRANSPOSE.len() + 800);
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(TRANSPOSE);
    s.push('\n');
    for es in [1usize, 2, 4, 8] {
        let _ = writeln!(
            s,
            "extern \"C\" __global__ void {name}(const ts_u{bits}* src, ts_u{bits}* dst, \
             unsigned long long row_len, unsigned long long c0, unsigned long long rows, \
             unsigned long long cols) {{ ts_transpose(src, dst, row_len, c0, rows, cols); }}",
            name = transpose_kernel_name(es),
            bits = es * 8,
        );
    }
    s
}

/// A reduction's accumulator family, as in `kernels/reduce.cu` (and the CPU's kernels in
/// `src/backend/cpu/reduce.rs`): each has a blocks kernel and a merge kernel per input
/// dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Sum and mean of floats, in f64.
    FloatSum,
    /// Sum and mean of integers and bools, wrapping 64-bit.
    IntSum,
    /// Variance and standard deviation: shifted sums of `d` and `d * d`.
    Moments,
    /// Minimum in the input's dtype (NaN wins).
    Min,
    /// Maximum in the input's dtype (NaN wins).
    Max,
    /// `nansum` and `nanmean`: the sum and count of the valid elements, in f64 (also
    /// `nanmean` of an integer input with a nodata value).
    NanFloatSum,
    /// `nanvar` and `nanstd`: shifted sums of the valid elements and their count.
    NanMoments,
    /// `nanmin` of a float input: the least valid value and the count.
    NanMin,
    /// `nanmax` of a float input.
    NanMax,
    /// `count`: the valid elements.
    Count,
    /// `nansum` of an integer input with a nodata value: wrapping 64-bit.
    NodataIntSum,
    /// `nanmin` of an integer input with a nodata value, compared in its type.
    NodataMin,
    /// `nanmax` of an integer input with a nodata value.
    NodataMax,
}

impl Reduction {
    /// Every family.
    pub const ALL: [Reduction; 13] = [
        Reduction::FloatSum,
        Reduction::IntSum,
        Reduction::Moments,
        Reduction::Min,
        Reduction::Max,
        Reduction::NanFloatSum,
        Reduction::NanMoments,
        Reduction::NanMin,
        Reduction::NanMax,
        Reduction::Count,
        Reduction::NodataIntSum,
        Reduction::NodataMin,
        Reduction::NodataMax,
    ];

    /// The family that computes `op` over elements of `dtype` whose elements equal to
    /// `nodata` are missing (as `src/backend/cpu/reduce.rs`'s `masked_reducer` picks its
    /// kernels); `None` for the reductions with no CUDA kernel ([`Reduce::on_device`]).
    #[must_use]
    pub fn of(op: Reduce, dtype: DType, nodata: Option<f64>) -> Option<Self> {
        if !op.on_device() {
            return None;
        }
        let nodata = op.nodata_left_out(nodata).is_some();
        let float = dtype.is_float();
        // integers have no NaN: without a nodata value the `nan` forms are the plain ones
        let op = if float || nodata {
            op
        } else {
            op.without_nan()
        };
        Some(match op {
            Reduce::Sum | Reduce::Mean if float => Reduction::FloatSum,
            Reduce::Sum | Reduce::Mean => Reduction::IntSum,
            Reduce::Var { .. } | Reduce::Std { .. } => Reduction::Moments,
            Reduce::Min => Reduction::Min,
            Reduce::Max => Reduction::Max,
            Reduce::Count => Reduction::Count,
            // an integer input with a nodata value: sums and extremes in its own type
            Reduce::NanSum if !float => Reduction::NodataIntSum,
            Reduce::NanMin if !float => Reduction::NodataMin,
            Reduce::NanMax if !float => Reduction::NodataMax,
            Reduce::NanSum | Reduce::NanMean => Reduction::NanFloatSum,
            Reduce::NanVar { .. } | Reduce::NanStd { .. } => Reduction::NanMoments,
            Reduce::NanMin => Reduction::NanMin,
            Reduce::NanMax => Reduction::NanMax,
            Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax => {
                return None;
            }
        })
    }

    /// Whether the family runs over elements of `dtype`.
    #[must_use]
    pub fn takes(self, dtype: DType) -> bool {
        match self {
            Reduction::FloatSum | Reduction::NanMin | Reduction::NanMax => dtype.is_float(),
            Reduction::IntSum
            | Reduction::NodataIntSum
            | Reduction::NodataMin
            | Reduction::NodataMax => !dtype.is_float(),
            _ => true,
        }
    }

    /// Whether its kernels read the launch's nodata value ([`ReduceTile::nodata`]).
    #[must_use]
    pub fn masked(self) -> bool {
        matches!(
            self,
            Reduction::NanFloatSum
                | Reduction::NanMoments
                | Reduction::NanMin
                | Reduction::NanMax
                | Reduction::Count
                | Reduction::NodataIntSum
                | Reduction::NodataMin
                | Reduction::NodataMax
        )
    }

    /// The family's part of kernel names.
    #[must_use]
    pub fn op_name(self) -> &'static str {
        match self {
            Reduction::FloatSum => "fsum",
            Reduction::IntSum => "isum",
            Reduction::Moments => "moments",
            Reduction::Min => "min",
            Reduction::Max => "max",
            Reduction::NanFloatSum => "nanfsum",
            Reduction::NanMoments => "nanmoments",
            Reduction::NanMin => "nanmin",
            Reduction::NanMax => "nanmax",
            Reduction::Count => "count",
            Reduction::NodataIntSum => "ndisum",
            Reduction::NodataMin => "ndmin",
            Reduction::NodataMax => "ndmax",
        }
    }

    /// The blocks kernel's name for `dtype` (`reduce_blocks_fsum_f32`).
    #[must_use]
    pub fn blocks_name(self, dtype: DType) -> String {
        format!("reduce_blocks_{}_{}", self.op_name(), dtype.name())
    }

    /// The merge kernel's name for `dtype` (`reduce_merge_fsum_f32`).
    #[must_use]
    pub fn merge_name(self, dtype: DType) -> String {
        format!("reduce_merge_{}_{}", self.op_name(), dtype.name())
    }

    /// The accumulator template of `kernels/reduce.cu` (`TsFSum`).
    #[must_use]
    pub fn template(self) -> &'static str {
        match self {
            Reduction::FloatSum => "TsFSum",
            Reduction::IntSum => "TsISum",
            Reduction::Moments => "TsMoments",
            Reduction::Min => "TsMin",
            Reduction::Max => "TsMax",
            Reduction::NanFloatSum => "TsNanFSum",
            Reduction::NanMoments => "TsNanMoments",
            Reduction::NanMin => "TsNanMin",
            Reduction::NanMax => "TsNanMax",
            Reduction::Count => "TsCount",
            Reduction::NodataIntSum => "TsNodataISum",
            Reduction::NodataMin => "TsNodataMin",
            Reduction::NodataMax => "TsNodataMax",
        }
    }

    fn wrappers(self, dtype: DType) -> String {
        let t = cuda_type(dtype);
        let k = format!("{}<{t}>", self.template());
        let a = format!("{k}::A");
        format!(
            "extern \"C\" __global__ void {blocks}(const {t}* x, TsReduceTile t, const {a}* open, \
             const double* shift, {a}* part, unsigned long long cells) \
             {{ ts_reduce_blocks<{t}, {k} >(x, t, open, shift, part, cells); }}\n\
             extern \"C\" __global__ void {merge}(const {t}* x, TsReduceTile t, \
             const {a}* total, const {a}* open, const double* shift, const {a}* part, \
             {a}* done, {a}* total_out, {a}* open_out, double* shift_out) \
             {{ ts_reduce_merge<{t}, {k} >(x, t, total, open, shift, part, done, total_out, \
             open_out, shift_out); }}\n",
            blocks = self.blocks_name(dtype),
            merge = self.merge_name(dtype),
        )
    }
}

/// The NVRTC source of the reduction kernels `kernels` (family, input dtype): both
/// kernels of each.
#[must_use]
pub fn reduce_source(kernels: &[(Reduction, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + REDUCE.len() + 600 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(REDUCE);
    s.push('\n');
    for &(k, d) in kernels {
        s.push_str(&k.wrappers(d));
    }
    s
}

/// Every reduction kernel pair: each family for every dtype it takes.
#[must_use]
pub fn all_reductions() -> Vec<(Reduction, DType)> {
    Reduction::ALL
        .iter()
        .flat_map(|&k| {
            DType::ALL
                .iter()
                .filter(move |&&d| k.takes(d))
                .map(move |&d| (k, d))
        })
        .collect()
}

/// The arguments of one tile's reduction launches, laid out as `TsReduceTile` in
/// `kernels/reduce.cu` (fourteen u64). Pure arithmetic on the geometry and the tile, so it
/// is checked without a GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ReduceTile {
    /// First flat element of the tile.
    pub start: u64,
    /// Elements in the tile.
    pub n: u64,
    /// Elements per outer index.
    pub per: u64,
    /// Columns of the virtual matrix.
    pub vcols: u64,
    /// Rows per summation block.
    pub block_rows: u64,
    /// 1 when the columns are the inner axes, 0 for lanes.
    pub wide: u64,
    /// The tile's first outer index.
    pub first: u64,
    /// Outer indices the tile touches.
    pub n_o: u64,
    /// First block touched in the first outer index.
    pub b0: u64,
    /// Last block touched in the last outer index.
    pub b1: u64,
    /// Blocks per outer index.
    pub nb: u64,
    /// Blocks touched in the first outer index.
    pub count_first: u64,
    /// 1 when elements equal to [`nodata`](Self::nodata) are missing, else 0.
    pub has_nodata: u64,
    /// The nodata value's bytes in the input's dtype, little-endian, zero-padded.
    pub nodata: u64,
}

impl ReduceTile {
    /// The launch arguments of the tile of `n > 0` elements from flat element `start`.
    #[must_use]
    pub fn new(g: &Geometry, start: u64, n: u64) -> Self {
        let per = g.per_outer_elems();
        let vc = g.vcols() as u64;
        let br = g.block_rows();
        let nb = per.div_ceil(vc).div_ceil(br);
        let end = start + n;
        let first = start / per;
        let last = (end - 1) / per;
        let n_o = last - first + 1;
        let b0 = (start - first * per) / vc / br;
        let b1 = (end - last * per - 1) / vc / br;
        let count_first = if n_o == 1 { b1 - b0 + 1 } else { nb - b0 };
        ReduceTile {
            start,
            n,
            per,
            vcols: vc,
            block_rows: br,
            wide: u64::from(g.inner > 1),
            first,
            n_o,
            b0,
            b1,
            nb,
            count_first,
            has_nodata: 0,
            nodata: 0,
        }
    }

    /// The same tile for an input of `dtype` whose elements equal to `nodata` are
    /// missing (the value converted to the dtype as the CPU's reducer converts it).
    #[must_use]
    pub fn with_nodata(mut self, dtype: DType, nodata: Option<f64>) -> Self {
        if let Some(v) = nodata {
            let mut b = [0u8; 8];
            crate::dispatch_dtype!(dtype, T => {
                let x = T::from_f64(v);
                let bytes = bytemuck::bytes_of(&x);
                b[..bytes.len()].copy_from_slice(bytes);
            });
            self.has_nodata = 1;
            self.nodata = u64::from_le_bytes(b);
        }
        self
    }

    /// Threads of the blocks kernel: one per (outer, block, column) cell.
    #[must_use]
    pub fn cells(&self) -> u64 {
        let pairs = if self.n_o == 1 {
            self.count_first
        } else {
            self.count_first + (self.n_o - 2) * self.nb + self.b1 + 1
        };
        pairs * self.vcols
    }

    /// The outer indices this tile finishes: `(first, count)`; their totals are the
    /// first `count * vcols` accumulators of the merge kernel's `done`.
    #[must_use]
    pub fn finished(&self) -> (u64, u64) {
        let complete_last = (self.start + self.n).is_multiple_of(self.per);
        (self.first, self.n_o - u64::from(!complete_last))
    }
}

/// The name of the fused kernel of a `map` program: `map_` and a hash of the program
/// and its dtypes, so one run's kernel is compiled once.
#[must_use]
pub fn map_kernel_name(program: &Program, inputs: &[DType], output: DType) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", program.code()).hash(&mut h);
    format!("{:?}", program.result()).hash(&mut h);
    for d in inputs {
        d.name().hash(&mut h);
    }
    output.name().hash(&mut h);
    format!("map_{:016x}", h.finish())
}

/// A double constant, exactly (its bits).
fn constant(v: f64) -> String {
    format!("__longlong_as_double((long long){:#x}ull)", v.to_bits())
}

fn operand(o: Operand) -> String {
    match o {
        Operand::Reg(r) => format!("r{r}"),
        Operand::Const(v) => constant(v),
    }
}

fn unary(op: UnOp, a: &str) -> String {
    match op {
        UnOp::Neg => format!("-{a}"),
        UnOp::Abs => format!("fabs({a})"),
        UnOp::Sqrt => format!("sqrt({a})"),
        UnOp::Exp => format!("exp({a})"),
        UnOp::Log => format!("log({a})"),
        UnOp::Log1p => format!("log1p({a})"),
        UnOp::Sin => format!("sin({a})"),
        UnOp::Cos => format!("cos({a})"),
        UnOp::Tanh => format!("tanh({a})"),
        UnOp::Floor => format!("floor({a})"),
        UnOp::Ceil => format!("ceil({a})"),
        // the default rounding mode: to nearest, ties to even
        UnOp::Round => format!("rint({a})"),
        UnOp::IsNan => format!("({a} != {a} ? 1.0 : 0.0)"),
    }
}

fn binary(op: BinOp, a: &str, b: &str) -> String {
    let nan = constant(f64::NAN);
    match op {
        BinOp::Add => format!("{a} + {b}"),
        BinOp::Sub => format!("{a} - {b}"),
        BinOp::Mul => format!("{a} * {b}"),
        BinOp::Div => format!("{a} / {b}"),
        BinOp::Pow => format!("pow({a}, {b})"),
        BinOp::Lt => format!("({a} < {b} ? 1.0 : 0.0)"),
        BinOp::Le => format!("({a} <= {b} ? 1.0 : 0.0)"),
        BinOp::Gt => format!("({a} > {b} ? 1.0 : 0.0)"),
        BinOp::Ge => format!("({a} >= {b} ? 1.0 : 0.0)"),
        BinOp::Eq => format!("({a} == {b} ? 1.0 : 0.0)"),
        BinOp::Ne => format!("({a} != {b} ? 1.0 : 0.0)"),
        BinOp::Min => format!("({a} != {a} || {b} != {b} ? {nan} : ({a} <= {b} ? {a} : {b}))"),
        BinOp::Max => format!("({a} != {a} || {b} != {b} ? {nan} : ({a} >= {b} ? {a} : {b}))"),
    }
}

/// The NVRTC source of `program` as one fused kernel `name(in0, .., inK, y, n)`: each
/// thread loads its element of every input as f64, runs the program's instructions in
/// registers (the same f64 operations as the CPU's evaluator, with no contraction) and
/// stores the result with the output's cast.
#[must_use]
pub fn map_source(name: &str, program: &Program, inputs: &[DType], output: DType) -> String {
    let mut s = String::with_capacity(COMMON.len() + 1024);
    s.push_str(COMMON);
    let _ = write!(s, "\nextern \"C\" __global__ void {name}(");
    for (k, d) in inputs.iter().enumerate() {
        let _ = write!(s, "const {}* __restrict__ in{k}, ", cuda_type(*d));
    }
    let _ = writeln!(
        s,
        "{}* __restrict__ y, unsigned long long n) {{",
        cuda_type(output)
    );
    let regs = program
        .code()
        .iter()
        .map(|i| match *i {
            Instr::Load { dst, .. }
            | Instr::Un(_, _, dst)
            | Instr::Bin(_, _, _, dst)
            | Instr::Where(_, _, _, dst)
            | Instr::Fma(_, _, _, dst) => dst + 1,
        })
        .max()
        .unwrap_or(0);
    s.push_str("    TS_FOR_EACH(i, n) {\n");
    if regs > 0 {
        let names: Vec<String> = (0..regs).map(|r| format!("r{r}")).collect();
        let _ = writeln!(s, "        double {};", names.join(", "));
    }
    for ins in program.code() {
        let line = match *ins {
            Instr::Load { stream, dst } => format!(
                "r{dst} = Elem<{}>::to_f64(in{stream}[i]);",
                cuda_type(inputs[stream])
            ),
            Instr::Un(op, a, dst) => format!("r{dst} = {};", unary(op, &operand(a))),
            Instr::Bin(op, a, b, dst) => {
                format!("r{dst} = {};", binary(op, &operand(a), &operand(b)))
            }
            Instr::Where(c, a, b, dst) => format!(
                "r{dst} = {} == 0.0 ? {} : {};",
                operand(c),
                operand(b),
                operand(a)
            ),
            Instr::Fma(a, b, c, dst) => format!(
                "r{dst} = fma({}, {}, {});",
                operand(a),
                operand(b),
                operand(c)
            ),
        };
        let _ = writeln!(s, "        {line}");
    }
    let _ = writeln!(
        s,
        "        y[i] = Elem<{}>::from_f64({});\n    }}\n}}",
        cuda_type(output),
        operand(program.result())
    );
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_map_program_becomes_one_fused_kernel() {
        let p = Program::compile(&crate::ops::expr::parse("(a - b) / (a + b) * 2").unwrap());
        let name = map_kernel_name(&p, &[DType::U16, DType::U16], DType::F32);
        let src = map_source(&name, &p, &[DType::U16, DType::U16], DType::F32);
        assert!(src.contains(&format!("void {name}(const ts_u16* __restrict__ in0, const ts_u16* __restrict__ in1, ts_f32* __restrict__ y")), "{src}");
        assert!(src.contains("r0 = Elem<ts_u16>::to_f64(in0[i]);"), "{src}");
        // the constant 2 exactly, by its bits
        assert!(src.contains("0x4000000000000000"), "{src}");
        assert!(src.contains("y[i] = Elem<ts_f32>::from_f64(r"), "{src}");
        // another dtype, another kernel
        assert_ne!(
            name,
            map_kernel_name(&p, &[DType::U16, DType::U16], DType::F64)
        );
    }

    #[test]
    fn matmul_kernels_cover_every_compute_type_the_engine_chooses() {
        let all = all_matmul();
        // f64 for every X; f32 for the 8 dtypes exact in f32; to each of 13 outputs
        assert_eq!(all.len(), (13 + 8) * 13);
        assert!(all.contains(&(DType::U16, DType::F32, DType::F16)));
        assert!(!all.contains(&(DType::I32, DType::F32, DType::F32)));
        let src = matmul_source(&all);
        for &(x, c, y) in &all {
            let name = format!(" {}(", matmul_kernel_name(x, c, y));
            assert_eq!(src.matches(&name).count(), 1, "{name}");
        }
        assert_eq!(
            matmul_kernel_name(DType::U16, DType::F32, DType::F16),
            "matmul_u16_f32_f16"
        );
    }

    #[test]
    fn kernel_names_follow_op_in_out() {
        assert_eq!(
            Elementwise::Affine.kernel_name(DType::F32, DType::F16),
            "affine_f32_f16"
        );
        assert_eq!(
            Elementwise::Standardize.kernel_name(DType::U8, DType::BF16),
            "standardize_u8_bf16"
        );
    }

    #[test]
    fn the_source_holds_one_wrapper_per_kernel_and_each_type_is_declared() {
        let all = all_elementwise();
        assert_eq!(all.len(), 3 * 13 * 13);
        let src = elementwise_source(&all);
        for &(k, i, o) in &all {
            let name = format!(" {}(", k.kernel_name(i, o));
            assert_eq!(src.matches(&name).count(), 1, "{name}");
        }
        for d in DType::ALL {
            let ty = cuda_type(d);
            let traits = COMMON.contains(&format!("Elem<{ty}>"))
                || COMMON.contains(&format!("TS_INT_ELEM({ty},"));
            assert!(traits, "kernels/common.cuh has no Elem<{ty}>");
        }
    }
}
