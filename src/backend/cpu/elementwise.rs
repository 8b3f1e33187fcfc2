//! Elementwise kernels: `y = scale * x + offset` with a cast of the result, and casts.
//!
//! Casts follow tilestream's rules (see [`crate::dtype`]): between integer types exactly
//! (through i128, saturating); from integers to floats correctly rounded; between floats
//! through f64, which is exact for widening and rounds once to nearest even when
//! narrowing. f32 ↔ f16/bf16 use `half`'s slice conversions, which take the hardware
//! path (F16C) where the CPU has one; they round to nearest even like the scalar path.
//!
//! Each tile is processed in blocks of [`BLOCK`] elements spread over the rayon pool; the
//! arithmetic is done in f64 and cast with tilestream's cast rules (see [`crate::dtype`]).

use rayon::prelude::*;

use crate::dtype::{Complex, DType, Element};

/// Elements per parallel work unit.
pub const BLOCK: usize = 16 * 1024;

fn affine_typed<I: Element, O: Element>(x: &[I], y: &mut [O], scale: f64, offset: f64) {
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, &i) in yo.iter_mut().zip(xi) {
                *o = O::from_f64(i.to_f64().mul_add(scale, offset));
            }
        });
}

/// `scale * x + offset` of complex elements of parts `P` into complex elements of parts
/// `Q`, numpy's for a real scale and offset: the real part `scale * re + offset` (rounded
/// once, as the real affine), the imaginary part `scale * im`.
fn affine_complex<P: Element, Q: Element>(
    x: &[Complex<P>],
    y: &mut [Complex<Q>],
    scale: f64,
    offset: f64,
) where
    Complex<P>: bytemuck::Pod,
    Complex<Q>: bytemuck::Pod,
{
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, i) in yo.iter_mut().zip(xi) {
                *o = Complex {
                    re: Q::from_f64(i.re.to_f64().mul_add(scale, offset)),
                    im: Q::from_f64(i.im.to_f64() * scale),
                };
            }
        });
}

/// `scale * x + offset` of real elements into complex elements of parts `Q` (the
/// imaginary parts zero).
fn affine_to_complex<I: Element, Q: Element>(x: &[I], y: &mut [Complex<Q>], scale: f64, offset: f64)
where
    Complex<Q>: bytemuck::Pod,
{
    let zero = Q::from_f64(0.0);
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, &i) in yo.iter_mut().zip(xi) {
                *o = Complex {
                    re: Q::from_f64(i.to_f64().mul_add(scale, offset)),
                    im: zero,
                };
            }
        });
}

/// Computes `out = cast(scale * inp + offset)` for one tile of bytes; of a complex input,
/// into a complex output only (the engine refuses a real one).
pub(crate) fn affine_bytes(
    inp: &[u8],
    in_dtype: DType,
    out: &mut [u8],
    out_dtype: DType,
    scale: f64,
    offset: f64,
) {
    let y = &mut *out;
    match (in_dtype, out_dtype) {
        (DType::C64, DType::C64) => affine_complex::<f32, f32>(
            &crate::dtype::typed(inp),
            bytemuck::cast_slice_mut(y),
            scale,
            offset,
        ),
        (DType::C64, DType::C128) => affine_complex::<f32, f64>(
            &crate::dtype::typed(inp),
            bytemuck::cast_slice_mut(y),
            scale,
            offset,
        ),
        (DType::C128, DType::C64) => affine_complex::<f64, f32>(
            &crate::dtype::typed(inp),
            bytemuck::cast_slice_mut(y),
            scale,
            offset,
        ),
        (DType::C128, DType::C128) => affine_complex::<f64, f64>(
            &crate::dtype::typed(inp),
            bytemuck::cast_slice_mut(y),
            scale,
            offset,
        ),
        _ => crate::dispatch_dtype!(in_dtype, I => {
            let x = crate::dtype::typed::<I>(inp);
            let x: &[I] = &x;
            match out_dtype {
                DType::C64 => affine_to_complex::<I, f32>(x, bytemuck::cast_slice_mut(y), scale, offset),
                DType::C128 => affine_to_complex::<I, f64>(x, bytemuck::cast_slice_mut(y), scale, offset),
                _ => crate::dispatch_dtype!(out_dtype, O => {
                    let y: &mut [O] = bytemuck::cast_slice_mut(y);
                    affine_typed::<I, O>(x, y, scale, offset);
                }, complex => {}),
            }
        }, complex => unreachable!("a complex input's affine writes a complex output (Engine::plan_affine)")),
    }
}

fn cast_typed<I: Element, O: Element>(x: &[I], y: &mut [O]) {
    let ints = !I::DTYPE.is_float();
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            if ints {
                yo.iter_mut()
                    .zip(xi)
                    .for_each(|(o, &i)| *o = O::from_i128(i.to_i128()));
            } else {
                yo.iter_mut()
                    .zip(xi)
                    .for_each(|(o, &i)| *o = O::from_f64(i.to_f64()));
            }
        });
}

/// A real element cast to a complex one of parts `P`: the real part by the cast rules,
/// the imaginary part zero (numpy's `astype` to a complex dtype).
fn real_to_complex<I: Element, P: Element>(x: &[I], y: &mut [Complex<P>])
where
    Complex<P>: bytemuck::Pod,
{
    let ints = !I::DTYPE.is_float();
    let zero = P::from_f64(0.0);
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, &i) in yo.iter_mut().zip(xi) {
                let re = if ints {
                    P::from_i128(i.to_i128())
                } else {
                    P::from_f64(i.to_f64())
                };
                *o = Complex { re, im: zero };
            }
        });
}

/// The real parts of complex elements of parts `P`, cast to `O` (numpy's `astype` of a
/// complex array to a real dtype, which drops the imaginary parts: [`crate::Array::cast`]
/// only; the cast operation refuses it).
fn complex_to_real<P: Element, O: Element>(x: &[Complex<P>], y: &mut [O])
where
    Complex<P>: bytemuck::Pod,
{
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, c) in yo.iter_mut().zip(xi) {
                *o = O::from_f64(c.re.to_f64());
            }
        });
}

/// Casts one tile of bytes from `in_dtype` to `out_dtype`. Between complex dtypes each
/// part is cast as a float is; a real value becomes a complex one with a zero imaginary
/// part; a complex value becomes a real one by its real part (numpy's `astype`).
pub(crate) fn cast_bytes(inp: &[u8], in_dtype: DType, out: &mut [u8], out_dtype: DType) {
    use half::slice::HalfFloatSliceExt;
    use half::{bf16, f16};
    if in_dtype == out_dtype {
        out.copy_from_slice(inp);
        return;
    }
    match (in_dtype.is_complex(), out_dtype.is_complex()) {
        // the parts, side by side, are an array of floats twice as long
        (true, true) => return cast_bytes(inp, in_dtype.part(), out, out_dtype.part()),
        (false, true) => {
            crate::dispatch_dtype!(in_dtype, I => {
                let x = crate::dtype::typed::<I>(inp);
                if out_dtype == DType::C64 {
                    real_to_complex::<I, f32>(&x, bytemuck::cast_slice_mut(out));
                } else {
                    real_to_complex::<I, f64>(&x, bytemuck::cast_slice_mut(out));
                }
            }, complex => {});
            return;
        }
        (true, false) => {
            crate::dispatch_dtype!(out_dtype, O => {
                let y: &mut [O] = bytemuck::cast_slice_mut(out);
                if in_dtype == DType::C64 {
                    complex_to_real::<f32, O>(&crate::dtype::typed(inp), y);
                } else {
                    complex_to_real::<f64, O>(&crate::dtype::typed(inp), y);
                }
            }, complex => {});
            return;
        }
        (false, false) => {}
    }
    if let (DType::F32, Ok(x)) = (in_dtype, bytemuck::try_cast_slice::<u8, f32>(inp)) {
        match out_dtype {
            DType::F16 => {
                let y: &mut [f16] = bytemuck::cast_slice_mut(out);
                y.par_chunks_mut(BLOCK)
                    .zip(x.par_chunks(BLOCK))
                    .for_each(|(o, i)| o.convert_from_f32_slice(i));
                return;
            }
            DType::BF16 => {
                let y: &mut [bf16] = bytemuck::cast_slice_mut(out);
                y.par_chunks_mut(BLOCK)
                    .zip(x.par_chunks(BLOCK))
                    .for_each(|(o, i)| o.convert_from_f32_slice(i));
                return;
            }
            _ => {}
        }
    }
    if out_dtype == DType::F32 {
        let y: &mut [f32] = bytemuck::cast_slice_mut(out);
        match (
            in_dtype,
            bytemuck::try_cast_slice::<u8, f16>(inp),
            bytemuck::try_cast_slice::<u8, bf16>(inp),
        ) {
            (DType::F16, Ok(x), _) => {
                y.par_chunks_mut(BLOCK)
                    .zip(x.par_chunks(BLOCK))
                    .for_each(|(o, i)| i.convert_to_f32_slice(o));
                return;
            }
            (DType::BF16, _, Ok(x)) => {
                y.par_chunks_mut(BLOCK)
                    .zip(x.par_chunks(BLOCK))
                    .for_each(|(o, i)| i.convert_to_f32_slice(o));
                return;
            }
            _ => {}
        }
    }
    crate::dispatch_dtype!(in_dtype, I => {
        let x = crate::dtype::typed::<I>(inp);
        let x: &[I] = &x;
        crate::dispatch_dtype!(out_dtype, O => {
            cast_typed::<I, O>(x, bytemuck::cast_slice_mut(out));
        }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
    }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
}

/// `out = cast((x - mean[c]) / std[c])` for one tile starting at flat element `start`,
/// where `c = (index / inner) % mean.len()` (`inner` 1: per column of the trailing axes;
/// the elements of one channel: per channel).
#[allow(clippy::too_many_arguments)]
pub(crate) fn standardize_bytes(
    inp: &[u8],
    in_dtype: DType,
    start: u64,
    inner: u64,
    mean: &[f64],
    std: &[f64],
    out: &mut [u8],
    out_dtype: DType,
) {
    let cols = mean.len() as u64;
    let es = out_dtype.size();
    crate::dispatch_dtype!(in_dtype, I => {
        let x = crate::dtype::typed::<I>(inp);
        let x: &[I] = &x;
        out.par_chunks_mut(BLOCK * es).zip(x.par_chunks(BLOCK)).enumerate().for_each(|(b, (o, xi))| {
            // a fixed stack chunk: no allocation per block in this hot loop
            const CHUNK: usize = 1024;
            let mut tmp = [0f64; CHUNK];
            let at = start + (b * BLOCK) as u64;
            let mut c = ((at / inner) % cols) as usize;
            // the elements left of channel `c` (every element is its own for inner 1)
            let mut left = inner - at % inner;
            for (xs, os) in xi.chunks(CHUNK).zip(o.chunks_mut(CHUNK * es)) {
                for (t, &v) in tmp.iter_mut().zip(xs) {
                    *t = (v.to_f64() - mean[c]) / std[c];
                    left -= 1;
                    if left == 0 {
                        left = inner;
                        c += 1;
                        if c == mean.len() {
                            c = 0;
                        }
                    }
                }
                crate::dtype::store_f64(&tmp[..xs.len()], os, out_dtype);
            }
        });
    }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
}
