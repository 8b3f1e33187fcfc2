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
//!
//! **Complex operands** run on the same real kernels ([`MatmulForm`]): a complex X of
//! R x K is, byte for byte, the real R x 2K array of its parts, and a complex result of
//! R x N the real R x 2N one; W is embedded once into the real matrix that maps the one
//! to the other (each complex `w` as the 2 x 2 block `[[re, im], [-im, re]]`, or the
//! row `[re, im]` for a real X), so that `re(y) = Σ re(x)re(w) - im(x)im(w)` and
//! `im(y) = Σ re(x)im(w) + im(x)re(w)`, numpy's complex product, each accumulated along
//! K as the real kernels accumulate. The parts are computed in f32 when every part is
//! exact in f32 (complex64, and the real dtypes above), else in f64.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

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

/// How `x @ w` runs on the real kernels: the compute type, the output dtype, and whether
/// X and the result are complex (each complex element two real columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulForm {
    /// The real type the kernels compute in (f32 or f64).
    pub compute: DType,
    /// The output's dtype.
    pub out: DType,
    /// X is complex: its rows are read as twice as many real parts.
    pub x_complex: bool,
    /// W is complex.
    pub w_complex: bool,
    /// The output is complex: its rows are written as twice as many real parts.
    pub out_complex: bool,
}

impl MatmulForm {
    /// The form of `x @ w` (dtypes `x` and `w`) written as `out` (default: the compute
    /// type, or the complex dtype of its parts when an operand is complex, as numpy's).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a real output of a complex product (it would drop the
    /// imaginary parts).
    pub fn new(x: DType, w: DType, out: Option<DType>) -> Result<Self> {
        let compute = compute_dtype(x.part(), w.part());
        let complex = x.is_complex() || w.is_complex();
        let default = if complex {
            compute.complex_of().unwrap_or(DType::C128)
        } else {
            compute
        };
        let out = out.unwrap_or(default);
        if complex && !out.is_complex() {
            return Err(Error::invalid(format!(
                "matmul of {} @ {} into {} would drop the imaginary parts: give a complex \
                 --dtype (complex64 or complex128), or leave it out for {}",
                x.numpy_name(),
                w.numpy_name(),
                out.numpy_name(),
                default.numpy_name()
            )));
        }
        Ok(MatmulForm {
            compute,
            out,
            x_complex: x.is_complex(),
            w_complex: w.is_complex(),
            out_complex: out.is_complex(),
        })
    }

    /// Real columns of X the kernels read for `k` columns of X.
    #[must_use]
    pub fn k_real(self, k: usize) -> usize {
        if self.x_complex { 2 * k } else { k }
    }

    /// Real columns of the result the kernels write for `n` columns of it.
    #[must_use]
    pub fn n_real(self, n: usize) -> usize {
        if self.out_complex { 2 * n } else { n }
    }

    /// Bytes of W once in the compute type, for W of `k x n`: embedded, and while it is
    /// embedded also its values (each complex one two parts), held beside it.
    #[must_use]
    pub fn resident_bytes(self, k: usize, n: usize) -> u64 {
        let embedded = self.k_real(k) * self.n_real(n);
        let values = if self.x_complex || self.out_complex {
            k * n * if self.w_complex { 2 } else { 1 }
        } else {
            0
        };
        ((embedded + values) * self.compute.size()) as u64
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
        if c == DType::F32 {
            Resident::F32(parts::<f32>(bytes, d))
        } else {
            Resident::F64(parts::<f64>(bytes, d))
        }
    }

    /// W (`k x n` elements of dtype `d`, `bytes`) in the real form `f` runs it in: as
    /// [`Resident::new`] when nothing is complex, else embedded (see the module's docs).
    #[must_use]
    pub fn of_form(bytes: &[u8], d: DType, f: MatmulForm, k: usize, n: usize) -> Self {
        if !f.x_complex && !f.out_complex {
            return Self::new(bytes, d, f.compute);
        }
        if f.compute == DType::F32 {
            Resident::F32(embed(&parts::<f32>(bytes, d), f, k, n))
        } else {
            Resident::F64(embed(&parts::<f64>(bytes, d), f, k, n))
        }
    }
}

/// The values of `bytes` of dtype `d` in `C`: each element, or each part of a complex one.
fn parts<C: Element>(bytes: &[u8], d: DType) -> Vec<C> {
    crate::dispatch_dtype!(d.part(), T => widen::<T, C>(bytes), complex => unreachable!("a part dtype is real"))
}

/// W's values `v` (`k x n`, each complex element two parts when `f.w_complex`) embedded
/// in the real `k_real x n_real` matrix of `f`.
fn embed<C: Element + std::ops::Neg<Output = C>>(
    v: &[C],
    f: MatmulForm,
    k: usize,
    n: usize,
) -> Vec<C> {
    let (kr, nr) = (f.k_real(k), f.n_real(n));
    let zero = C::from_f64(0.0);
    let mut out = vec![zero; kr * nr];
    let (xs, os) = (usize::from(f.x_complex) + 1, usize::from(f.out_complex) + 1);
    for i in 0..k {
        for j in 0..n {
            let (re, im) = if f.w_complex {
                (v[2 * (i * n + j)], v[2 * (i * n + j) + 1])
            } else {
                (v[i * n + j], zero)
            };
            let (r0, c0) = (i * xs, j * os);
            out[r0 * nr + c0] = re;
            if f.out_complex {
                out[r0 * nr + c0 + 1] = im;
            }
            if f.x_complex {
                out[(r0 + 1) * nr + c0] = -im;
                out[(r0 + 1) * nr + c0 + 1] = re;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_products_take_numpys_dtype() {
        use DType::{Bool, C64, C128, F16, F32, F64, I16, I32, I64, U8};
        // (x, w, numpy's dtype of x @ w)
        for (x, w, want) in [
            (C64, C64, C64),
            (C64, F64, C128),
            (C64, U8, C64),
            (C64, I16, C64),
            (C64, F16, C64),
            (C64, Bool, C64),
            (C64, I32, C128),
            (C64, I64, C128),
            (F32, C64, C64),
            (F64, C64, C128),
            (C128, F32, C128),
            (C128, C64, C128),
        ] {
            let f = MatmulForm::new(x, w, None).expect("a complex product");
            assert_eq!(f.out, want, "{x} @ {w}");
            assert!(f.out_complex);
        }
        let f = MatmulForm::new(F32, F32, None).expect("real");
        assert_eq!((f.out, f.out_complex), (F32, false));
        assert!(MatmulForm::new(C64, F32, Some(F64)).is_err());
    }

    #[test]
    fn the_embedding_holds_each_complex_product() {
        // x = [1+2i, 3-1i] (one row), w = [[2+1i], [-1+4i]]: x @ w = (1+2i)(2+1i) +
        // (3-1i)(-1+4i) = (0+5i) + (1+13i) = 1+18i
        let f = MatmulForm::new(DType::C64, DType::C64, None).expect("complex");
        let w: Vec<u8> = [2.0f32, 1.0, -1.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let Resident::F32(e) = Resident::of_form(&w, DType::C64, f, 2, 1) else {
            panic!("f32 compute")
        };
        let x = [1.0f32, 2.0, 3.0, -1.0];
        let y: Vec<f32> = (0..2)
            .map(|j| (0..4).map(|i| x[i] * e[i * 2 + j]).sum())
            .collect();
        assert_eq!(y, [1.0, 18.0]);
    }
}
