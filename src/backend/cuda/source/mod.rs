//! The CUDA C source of tilestream's kernels, assembled for NVRTC: the common header
//! (`kernels/common.cuh`: element types and casts), the operation's templates
//! (`kernels/*.cu`) and one `extern "C"` wrapper per instantiation, named
//! `<op>_<in>_<out>` (`affine_f32_f16`). Pure text, so it is tested without a GPU; the
//! compilation test (`tests/it/cuda_kernels.rs`) hands it to NVRTC.

mod map;
mod reduce;

pub use map::{map_kernel_name, map_source};
pub use reduce::{ReduceTile, Reduction, all_reductions, reduce_source};

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::ops::generate::Dist;

/// Element types and casts shared by every kernel.
pub const COMMON: &str = include_str!("../../../../kernels/common.cuh");
/// The complex functions of fused `map` kernels (`kernels/cmath.cuh`), after [`COMMON`]
/// in a kernel whose program uses one.
pub const CMATH: &str = include_str!("../../../../kernels/cmath.cuh");
/// Templates of the elementwise kernels.
pub const ELEMENTWISE: &str = include_str!("../../../../kernels/elementwise.cu");
/// Templates of the reduction kernels.
pub const REDUCE: &str = include_str!("../../../../kernels/reduce.cu");
/// The matmul kernel's template.
pub const MATMUL: &str = include_str!("../../../../kernels/matmul.cu");
/// The transpose kernel's template.
pub const TRANSPOSE: &str = include_str!("../../../../kernels/transpose.cu");
/// `gen`'s generator and its kernel template.
pub const GENERATE: &str = include_str!("../../../../kernels/generate.cu");

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ops::expr::Program;

    #[test]
    fn a_map_program_becomes_one_fused_kernel() {
        let p =
            Program::compile(&crate::ops::expr::parse("(a - b) / (a + b) * 2").unwrap()).unwrap();
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
