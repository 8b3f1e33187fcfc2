//! Matmul with a resident right-hand side: `Y = X @ W` for X (R × K) streamed by row
//! tiles and W (K × N) held in memory (its bytes are reserved from the budget).
//!
//! Each tile's rows are split across the rayon pool and multiplied by `matrixmultiply`'s
//! blocked, packed sgemm/dgemm kernels. The arithmetic of a row depends only on that row
//! and W (the kernels accumulate along K in the same order whatever the number of rows in
//! a call), so results do not depend on the tiling.
//!
//! Compute type: f32 when both operands are f16, bf16, f32, bool or integers of up to 16
//! bits (all exact in f32), f64 otherwise. Inputs are converted to it per tile; the result
//! is cast to the output dtype once.

use crate::dtype::{DType, Element};

/// W converted to the compute type.
#[derive(Debug)]
pub enum Resident {
    /// f32 compute.
    F32(Vec<f32>),
    /// f64 compute.
    F64(Vec<f64>),
}

/// The compute dtype for operands of these dtypes.
#[must_use]
pub fn compute_dtype(x: DType, w: DType) -> DType {
    let exact_in_f32 = |d: DType| {
        matches!(
            d,
            DType::F16
                | DType::BF16
                | DType::F32
                | DType::Bool
                | DType::U8
                | DType::I8
                | DType::U16
                | DType::I16
        )
    };
    if exact_in_f32(x) && exact_in_f32(w) {
        DType::F32
    } else {
        DType::F64
    }
}

/// Converts `bytes` of `T` to `C` (through f64, exact for the compute types chosen).
pub(crate) fn widen<T: Element, C: Element>(bytes: &[u8]) -> Vec<C> {
    bytemuck::pod_collect_to_vec::<u8, T>(bytes)
        .into_iter()
        .map(|v| C::from_f64(v.to_f64()))
        .collect()
}

impl Resident {
    /// Converts W's bytes (dtype `d`) to the compute type `c`.
    #[must_use]
    pub fn new(bytes: &[u8], d: DType, c: DType) -> Self {
        crate::dispatch_dtype!(d, T => {
            if c == DType::F32 { Resident::F32(widen::<T, f32>(bytes)) } else { Resident::F64(widen::<T, f64>(bytes)) }
        }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"))
    }
}
