//! The CUDA C source of tilestream's kernels, assembled for NVRTC: the common header
//! (`kernels/common.cuh`: element types and casts), the operation's templates
//! (`kernels/*.cu`) and one `extern "C"` wrapper per instantiation, named
//! `<op>_<in>_<out>` (`affine_f32_f16`). Pure text, so it is tested without a GPU; the
//! compilation test (`tests/it/cuda_kernels.rs`) hands it to NVRTC.

use std::fmt::Write as _;

use crate::dtype::DType;

/// Element types and casts shared by every kernel.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");
/// Templates of the elementwise kernels.
pub const ELEMENTWISE: &str = include_str!("../../../kernels/elementwise.cu");

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
                 const double* sd, unsigned long long cols",
                "ts_standardize(x, y, n, start, mean, sd, cols)",
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

#[cfg(test)]
mod tests {
    use super::*;

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
