//! The CPU kernel of matmul with a resident right-hand side ([`crate::ops::matmul`]
//! chooses the compute type and converts W once): each tile's rows are split across the
//! rayon pool and multiplied by `matrixmultiply`'s blocked, packed sgemm/dgemm kernels.

use rayon::prelude::*;

use crate::dtype::{DType, Element, store_f64};
use crate::ops::matmul::{Resident, widen};

/// The compute types and their `matrixmultiply` kernels.
pub trait Gemm: Element {
    /// Row-major `C (m×n) = A (m×k) · B (k×n)`.
    fn gemm(m: usize, k: usize, n: usize, a: &[Self], b: &[Self], c: &mut [Self]);
}

impl Gemm for f32 {
    fn gemm(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
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
}

impl Gemm for f64 {
    fn gemm(m: usize, k: usize, n: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
        assert!(
            a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
            "gemm operand sizes"
        );
        // SAFETY: as for f32.
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
}

/// One tile in compute type `C`: rows split across the pool, cast to `od` at the end.
#[allow(clippy::too_many_arguments)]
fn tile_in<C: Gemm>(
    x: &[u8],
    xd: DType,
    w: &[C],
    k: usize,
    n: usize,
    out: &mut [u8],
    od: DType,
    threads: usize,
) {
    let xs: std::borrow::Cow<'_, [C]> = if xd == C::DTYPE {
        crate::dtype::typed::<C>(x)
    } else {
        std::borrow::Cow::Owned(
            crate::dispatch_dtype!(xd, T => widen::<T, C>(x), complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)")),
        )
    };
    let rows = out.len() / od.size() / n;
    let cr = rows.div_ceil(threads * 4).max(16);
    let run = |y: &mut [C]| {
        y.par_chunks_mut(cr * n)
            .zip(xs.par_chunks(cr * k))
            .for_each(|(yc, xc)| C::gemm(yc.len() / n, k, n, xc, w, yc));
    };
    if od == C::DTYPE {
        run(bytemuck::cast_slice_mut(out));
    } else {
        let mut y = vec![C::from_f64(0.0); rows * n];
        run(&mut y);
        let y64: Vec<f64> = y.iter().map(|&v| v.to_f64()).collect();
        store_f64(&y64, out, od);
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
        Resident::F32(wv) => tile_in::<f32>(x, xd, wv, k, n, out, od, threads),
        Resident::F64(wv) => tile_in::<f64>(x, xd, wv, k, n, out, od, threads),
    }
}
