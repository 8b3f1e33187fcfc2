//! The complex functions numpy computes through the C library: `sqrt exp log sin cos
//! tanh` of a complex128 value are the C library's `csqrt cexp clog csin ccos ctanh`
//! (numpy's `nc_sqrt` and the others call them where the platform has them: every
//! glibc, macOS and MSVC), `log1p` is numpy's own formula on the C library's `hypot`,
//! `atan2` and `log`, and `**` is numpy's `npy_cpow`: integer exponents below 100 by
//! repeated products, the C library's `cpow` otherwise. Calling the same library numpy
//! calls gives numpy's bits on the machine that runs both.
//!
//! These functions run per element (a complex result has two parts, which the register
//! program's instructions write together: [`super::Instr::ComplexUn`],
//! [`super::Instr::ComplexPow`]); constant folding uses them too.

use super::UnOp;

/// A C `double _Complex`: two doubles, laid out and passed as the C ABI passes them
/// (a structure of two doubles is classified as `_Complex double` is, on x86-64 System V,
/// `AArch64` and Windows x64 alike).
#[repr(C)]
#[derive(Clone, Copy)]
struct CDouble {
    re: f64,
    im: f64,
}

// SAFETY (for the calls below): these are pure functions of their value arguments from
// the C math library that the standard library already links (`libm` on Linux, the
// system library elsewhere); they take and return values, touch no memory of ours and
// are thread-safe (they may set the floating-point status flags, which nothing here
// reads).
unsafe extern "C" {
    fn csqrt(z: CDouble) -> CDouble;
    fn cexp(z: CDouble) -> CDouble;
    fn clog(z: CDouble) -> CDouble;
    fn csin(z: CDouble) -> CDouble;
    fn ccos(z: CDouble) -> CDouble;
    fn ctanh(z: CDouble) -> CDouble;
    fn cpow(x: CDouble, y: CDouble) -> CDouble;
}

/// `op(re + i im)` as numpy computes it on complex128: `(re, im)` of the result.
///
/// # Panics
/// For another `op` than `sqrt exp log log1p sin cos tanh` (the compiler emits no such
/// instruction).
#[inline(never)]
#[must_use]
pub(crate) fn complex_un(op: UnOp, re: f64, im: f64) -> (f64, f64) {
    let z = CDouble { re, im };
    // SAFETY: see the block of declarations above.
    let r = unsafe {
        match op {
            UnOp::Sqrt => csqrt(z),
            UnOp::Exp => cexp(z),
            UnOp::Log => clog(z),
            UnOp::Sin => csin(z),
            UnOp::Cos => ccos(z),
            UnOp::Tanh => ctanh(z),
            // numpy's nc_log1p: log(hypot(re + 1, im)) + i atan2(im, re + 1)
            UnOp::Log1p => {
                let r = re + 1.0;
                return (r.hypot(im).ln(), im.atan2(r));
            }
            _ => unreachable!("{op:?} of a complex value is refused when compiling"),
        }
    };
    (r.re, r.im)
}

/// numpy's `cmul` of `npy_cpow`: the schoolbook product, each part rounded after each
/// operation (no fused multiply-add: numpy's generic code is compiled without one).
fn cmul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let (re1, im1) = (a.0 * b.0, a.1 * b.1);
    let (re2, im2) = (a.0 * b.1, a.1 * b.0);
    (re1 - im1, re2 + im2)
}

/// numpy's `cdiv` of `npy_cpow` (Smith's algorithm).
fn cdiv(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let ((ar, ai), (br, bi)) = (a, b);
    let (abs_br, abs_bi) = (br.abs(), bi.abs());
    if abs_br >= abs_bi {
        if abs_br == 0.0 && abs_bi == 0.0 {
            (ar / abs_br, ai / abs_bi)
        } else {
            let rat = bi / br;
            let scl = 1.0 / (br + bi * rat);
            ((ar + ai * rat) * scl, (ai - ar * rat) * scl)
        }
    } else {
        let rat = br / bi;
        let scl = 1.0 / (bi + br * rat);
        ((ar * rat + ai) * scl, (ai * rat - ar) * scl)
    }
}

/// `a ** b` as numpy's `np.power` computes it on complex128 (`npy_cpow`): `(re, im)`.
#[inline(never)]
#[must_use]
#[allow(clippy::float_cmp, clippy::cast_possible_truncation)] // numpy's own tests
pub(crate) fn complex_pow(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let ((ar, ai), (br, bi)) = (a, b);
    if br == 0.0 && bi == 0.0 {
        return (1.0, 0.0);
    }
    if ar == 0.0 && ai == 0.0 {
        return if br > 0.0 {
            (0.0, 0.0)
        } else {
            (f64::NAN, f64::NAN)
        };
    }
    // an integer exponent below 100 in magnitude: repeated products (`br as i64` is
    // C's truncation here, the range checked first)
    if bi == 0.0 && br > -100.0 && br < 100.0 && (br as i64) as f64 == br {
        let n = br as i64;
        match n {
            1 => return a,
            2 => return cmul(a, a),
            3 => return cmul(a, cmul(a, a)),
            _ => {
                let n = n.abs();
                let (mut acc, mut p) = ((1.0, 0.0), a);
                let mut mask = 1;
                loop {
                    if n & mask != 0 {
                        acc = cmul(acc, p);
                    }
                    mask <<= 1;
                    if n < mask {
                        break;
                    }
                    p = cmul(p, p);
                }
                return if br < 0.0 { cdiv((1.0, 0.0), acc) } else { acc };
            }
        }
    }
    // SAFETY: see the block of declarations above.
    let r = unsafe { cpow(CDouble { re: ar, im: ai }, CDouble { re: br, im: bi }) };
    (r.re, r.im)
}
