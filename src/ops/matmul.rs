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

use rayon::prelude::*;

use crate::dtype::{DType, Element, store_f64};

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

fn widen<T: Element, C: Element>(bytes: &[u8]) -> Vec<C> {
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
        })
    }
}

/// A row-major gemm kernel: (m, k, n, A, B, C).
type Gemm<C> = fn(usize, usize, usize, &[C], &[C], &mut [C]);

/// Rows per parallel gemm call.
fn chunk_rows(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads * 4).max(16)
}

fn gemm_rows<C: Element>(
    x: &[C],
    w: &[C],
    y: &mut [C],
    k: usize,
    n: usize,
    threads: usize,
    f: Gemm<C>,
) {
    let rows = y.len() / n;
    let cr = chunk_rows(rows, threads);
    y.par_chunks_mut(cr * n)
        .zip(x.par_chunks(cr * k))
        .for_each(|(yc, xc)| f(yc.len() / n, k, n, xc, w, yc));
}

fn sgemm(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(
        a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
        "gemm operand sizes"
    );
    // SAFETY: row-major A (m×k), B (k×n), C (m×n) with the strides given, inside the
    // slices (checked just above); C does not alias A or B (distinct borrows).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

fn dgemm(m: usize, k: usize, n: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
    assert!(
        a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
        "gemm operand sizes"
    );
    // SAFETY: as in `sgemm`.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Computes one tile: `x` holds `rows × k` elements of dtype `xd`; `out` receives
/// `rows × n` elements of dtype `od`. Public so benchmarks can time the same kernel on
/// in-memory data.
///
/// # Panics
/// If the byte lengths do not match `rows × k` and `rows × n`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_tile(
    x: &[u8],
    xd: DType,
    w: &Resident,
    k: usize,
    n: usize,
    out: &mut [u8],
    od: DType,
    threads: usize,
) {
    match w {
        Resident::F32(wv) => {
            let owned;
            let xs: &[f32] = match (xd, bytemuck::try_cast_slice::<u8, f32>(x)) {
                (DType::F32, Ok(s)) => s,
                _ => {
                    owned = crate::dispatch_dtype!(xd, T => widen::<T, f32>(x));
                    &owned
                }
            };
            if od == DType::F32 {
                gemm_rows(xs, wv, bytemuck::cast_slice_mut(out), k, n, threads, sgemm);
            } else {
                let mut y = vec![0f32; out.len() / od.size()];
                gemm_rows(xs, wv, &mut y, k, n, threads, sgemm);
                let y64: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
                store_f64(&y64, out, od);
            }
        }
        Resident::F64(wv) => {
            let owned;
            let xs: &[f64] = match (xd, bytemuck::try_cast_slice::<u8, f64>(x)) {
                (DType::F64, Ok(s)) => s,
                _ => {
                    owned = crate::dispatch_dtype!(xd, T => widen::<T, f64>(x));
                    &owned
                }
            };
            if od == DType::F64 {
                gemm_rows(xs, wv, bytemuck::cast_slice_mut(out), k, n, threads, dgemm);
            } else {
                let mut y = vec![0f64; out.len() / od.size()];
                gemm_rows(xs, wv, &mut y, k, n, threads, dgemm);
                store_f64(&y, out, od);
            }
        }
    }
}
