//! Complex operations lowered to real instructions on the parts, each following the
//! arithmetic numpy's complex128 loops perform (numpy 2.x on a CPU with FMA: every
//! x86-64 CPU since 2013 and every 64-bit ARM one), operation by operation, so that
//! a complex `map` gives numpy's bits:
//!
//! - `a * b`: `(fma(ar, br, -(ai * bi)), fma(ar, bi, ai * br))`, numpy's SIMD product;
//! - `a / b`: Smith's algorithm as numpy's division loop writes it (no FMA);
//! - `abs(z)`: numpy's SIMD absolute value, `larger * sqrt(fma(r, r, 1))` with `r` the
//!   smaller part over the larger, infinities and NaNs first;
//! - comparisons: numpy's lexicographic order (real parts, then imaginary parts) with
//!   its NaN rules; `min`/`max` its `minimum`/`maximum`; `clip` numpy's `clip`, whose
//!   order has other NaN rules;
//! - a real operand beside a complex one is promoted with an imaginary part of +0, as
//!   numpy promotes it (so `z + 1` turns an imaginary -0 into +0, as numpy does).
//!
//! Constant subexpressions fold with these same formulas, as numpy's arrays compute
//! them: `(1.1 + 2.2j) * 3.3j` may differ in the last place from what Python's own
//! complex arithmetic gives for those constants (no FMA, another division).

use super::program::{CompileError, Program, Val, parts, undefined};
use super::{BinOp, ComplexFn, Operand, UnOp};

const ZERO: Operand = Operand::Const(0.0);
const ONE: Operand = Operand::Const(1.0);
const MINUS_ONE: Operand = Operand::Const(-1.0);
const INF: Operand = Operand::Const(f64::INFINITY);
const NAN: Operand = Operand::Const(f64::NAN);

impl Program {
    /// `op(re + i im)`.
    pub(super) fn complex_unary(
        &mut self,
        op: UnOp,
        re: Operand,
        im: Operand,
    ) -> Result<Val, CompileError> {
        Ok(match op {
            UnOp::Neg => {
                let (r, i) = (self.un(UnOp::Neg, re), self.un(UnOp::Neg, im));
                Val::Complex(r, i)
            }
            UnOp::Abs => Val::Real(self.complex_abs(re, im)),
            UnOp::IsNan => {
                let (r, i) = (self.un(UnOp::IsNan, re), self.un(UnOp::IsNan, im));
                Val::Real(self.bin(BinOp::Max, r, i))
            }
            // the C library's, as numpy's (`cmath.rs`)
            UnOp::Sqrt
            | UnOp::Exp
            | UnOp::Log
            | UnOp::Log1p
            | UnOp::Sin
            | UnOp::Cos
            | UnOp::Tanh => self.complex_un(op, re, im),
            // numpy's rint of a complex value rounds each part
            UnOp::Round => {
                let (r, i) = (self.un(UnOp::Round, re), self.un(UnOp::Round, im));
                Val::Complex(r, i)
            }
            // numpy defines neither (its ufuncs have no complex loop)
            UnOp::Floor => return Err(undefined("floor()")),
            UnOp::Ceil => return Err(undefined("ceil()")),
        })
    }

    /// `op(a, b)` where at least one of `a`, `b` is complex.
    pub(super) fn complex_binary(
        &mut self,
        op: BinOp,
        a: Val,
        b: Val,
    ) -> Result<Val, CompileError> {
        let ((ar, ai), (br, bi)) = (parts(a), parts(b));
        Ok(match op {
            BinOp::Pow => self.complex_power(a, b)?,
            BinOp::Add | BinOp::Sub => {
                let (r, i) = (self.bin(op, ar, br), self.bin(op, ai, bi));
                Val::Complex(r, i)
            }
            BinOp::Mul => {
                let ii = self.bin(BinOp::Mul, ai, bi);
                let nii = self.un(UnOp::Neg, ii);
                let r = self.fma(ar, br, nii);
                let ir = self.bin(BinOp::Mul, ai, br);
                let i = self.fma(ar, bi, ir);
                Val::Complex(r, i)
            }
            BinOp::Div => self.complex_div(ar, ai, br, bi),
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                Val::Real(self.complex_order(op, ar, ai, br, bi))
            }
            BinOp::Eq => {
                let (r, i) = (self.bin(BinOp::Eq, ar, br), self.bin(BinOp::Eq, ai, bi));
                Val::Real(self.bin(BinOp::Mul, r, i))
            }
            BinOp::Ne => {
                let (r, i) = (self.bin(BinOp::Ne, ar, br), self.bin(BinOp::Ne, ai, bi));
                Val::Real(self.bin(BinOp::Max, r, i))
            }
            BinOp::Min | BinOp::Max => {
                // numpy's maximum: a if a has a NaN part or a >= b, else b (minimum: <=)
                let keep = self.complex_order(
                    if op == BinOp::Max {
                        BinOp::Ge
                    } else {
                        BinOp::Le
                    },
                    ar,
                    ai,
                    br,
                    bi,
                );
                let (nr, ni) = (self.un(UnOp::IsNan, ar), self.un(UnOp::IsNan, ai));
                let nan = self.bin(BinOp::Max, nr, ni);
                let keep = self.bin(BinOp::Max, nan, keep);
                let r = self.select(keep, ar, br);
                let i = self.select(keep, ai, bi);
                Val::Complex(r, i)
            }
            // numpy's arctan2 has no complex loop
            BinOp::Atan2 => return Err(undefined("atan2()")),
        })
    }

    /// `a ** b` with `a` or `b` complex, as numpy's `a ** b` computes it on arrays: a
    /// real constant exponent takes numpy's shortcuts for a Python scalar (`** 2` is
    /// `np.square`, numpy's product of `z * z`; `** -1` is `np.reciprocal`; `** 0.5` is
    /// `np.sqrt`), any other exponent is `np.power` (`npy_cpow`).
    fn complex_power(&mut self, a: Val, b: Val) -> Result<Val, CompileError> {
        match (a, b) {
            (Val::Complex(..), Val::Real(Operand::Const(2.0))) => {
                self.complex_binary(BinOp::Mul, a, a)
            }
            (Val::Complex(re, im), Val::Real(Operand::Const(0.5))) => {
                Ok(self.complex_un(UnOp::Sqrt, re, im))
            }
            (Val::Complex(re, im), Val::Real(Operand::Const(-1.0))) => {
                Ok(self.complex_reciprocal(re, im))
            }
            (a, b) => Ok(self.complex_pow(parts(a), parts(b))),
        }
    }

    /// numpy's `reciprocal` of a complex value (`loops.c.src`): Smith's division of 1
    /// written with the divisor's smaller part over its larger.
    fn complex_reciprocal(&mut self, re: Operand, im: Operand) -> Val {
        let (ar, ai) = (self.un(UnOp::Abs, re), self.un(UnOp::Abs, im));
        let first = self.bin(BinOp::Le, ai, ar);
        // |im| <= |re|: r = im / re, d = re + im * r, (1 / d, -r / d)
        let r = self.bin(BinOp::Div, im, re);
        let t = self.bin(BinOp::Mul, im, r);
        let d = self.bin(BinOp::Add, re, t);
        let r1 = self.bin(BinOp::Div, ONE, d);
        let nr = self.un(UnOp::Neg, r);
        let i1 = self.bin(BinOp::Div, nr, d);
        // else: r = re / im, d = re * r + im, (r / d, -1 / d)
        let r = self.bin(BinOp::Div, re, im);
        let t = self.bin(BinOp::Mul, re, r);
        let d = self.bin(BinOp::Add, t, im);
        let r2 = self.bin(BinOp::Div, r, d);
        let i2 = self.bin(BinOp::Div, MINUS_ONE, d);
        let r = self.select(first, r1, r2);
        let i = self.select(first, i1, i2);
        Val::Complex(r, i)
    }

    /// `f(a)`.
    pub(super) fn complex_fn(&mut self, f: ComplexFn, a: Val) -> Val {
        match (f, a) {
            (ComplexFn::Real | ComplexFn::Conj, Val::Real(x)) => Val::Real(x),
            (ComplexFn::Real, Val::Complex(re, _)) => Val::Real(re),
            (ComplexFn::Imag, Val::Real(_)) => Val::Real(ZERO),
            (ComplexFn::Imag, Val::Complex(_, im)) => Val::Real(im),
            (ComplexFn::Conj, Val::Complex(re, im)) => Val::Complex(re, self.un(UnOp::Neg, im)),
            // np.angle: arctan2(imag, real), an imaginary part of 0 for a real value
            (ComplexFn::Angle, v) => {
                let (re, im) = parts(v);
                Val::Real(self.bin(BinOp::Atan2, im, re))
            }
        }
    }

    /// One step of numpy's complex `clip` (`clip.cpp`): `a` if it has a NaN part or is
    /// greater than `b` (`op` `Gt`; less, `Lt`), else `b`; its order compares the
    /// imaginary parts when the real parts are equal, the real parts otherwise, with no
    /// NaN rule of its own.
    pub(super) fn complex_clip_step(&mut self, op: BinOp, a: Val, b: Val) -> Val {
        let ((ar, ai), (br, bi)) = (parts(a), parts(b));
        let same = self.bin(BinOp::Eq, ar, br);
        let by_imag = self.bin(op, ai, bi);
        let by_real = self.bin(op, ar, br);
        let beyond = self.select(same, by_imag, by_real);
        let (nr, ni) = (self.un(UnOp::IsNan, ar), self.un(UnOp::IsNan, ai));
        let nan = self.bin(BinOp::Max, nr, ni);
        let keep = self.bin(BinOp::Max, nan, beyond);
        let r = self.select(keep, ar, br);
        let i = self.select(keep, ai, bi);
        Val::Complex(r, i)
    }

    /// numpy's `CLT`/`CLE`/`CGT`/`CGE` (1.0 or 0.0): the real parts decide unless they
    /// are equal (and a NaN imaginary part makes the first clause false).
    fn complex_order(
        &mut self,
        op: BinOp,
        ar: Operand,
        ai: Operand,
        br: Operand,
        bi: Operand,
    ) -> Operand {
        let strict = match op {
            BinOp::Lt | BinOp::Le => BinOp::Lt,
            _ => BinOp::Gt,
        };
        let first = self.bin(strict, ar, br);
        // x == x: not NaN
        let (an, bn) = (self.bin(BinOp::Eq, ai, ai), self.bin(BinOp::Eq, bi, bi));
        let first = self.bin(BinOp::Mul, first, an);
        let first = self.bin(BinOp::Mul, first, bn);
        let same = self.bin(BinOp::Eq, ar, br);
        let second = self.bin(op, ai, bi);
        let second = self.bin(BinOp::Mul, same, second);
        self.bin(BinOp::Max, first, second)
    }

    /// numpy's complex division (Smith's algorithm, `loops.c.src`).
    fn complex_div(&mut self, ar: Operand, ai: Operand, br: Operand, bi: Operand) -> Val {
        let abr = self.un(UnOp::Abs, br);
        let abi = self.un(UnOp::Abs, bi);
        let first = self.bin(BinOp::Ge, abr, abi);
        let zr = self.bin(BinOp::Eq, abr, ZERO);
        let zi = self.bin(BinOp::Eq, abi, ZERO);
        let zero = self.bin(BinOp::Mul, zr, zi);
        // a zero divisor: a complex inf or NaN
        let r0 = self.bin(BinOp::Div, ar, abr);
        let i0 = self.bin(BinOp::Div, ai, abr);
        // |br| >= |bi|
        let rat = self.bin(BinOp::Div, bi, br);
        let t = self.bin(BinOp::Mul, bi, rat);
        let t = self.bin(BinOp::Add, br, t);
        let scl = self.bin(BinOp::Div, ONE, t);
        let t = self.bin(BinOp::Mul, ai, rat);
        let t = self.bin(BinOp::Add, ar, t);
        let r1 = self.bin(BinOp::Mul, t, scl);
        let t = self.bin(BinOp::Mul, ar, rat);
        let t = self.bin(BinOp::Sub, ai, t);
        let i1 = self.bin(BinOp::Mul, t, scl);
        // |br| < |bi| (or a NaN)
        let rat = self.bin(BinOp::Div, br, bi);
        let t = self.bin(BinOp::Mul, br, rat);
        let t = self.bin(BinOp::Add, bi, t);
        let scl = self.bin(BinOp::Div, ONE, t);
        let t = self.bin(BinOp::Mul, ar, rat);
        let t = self.bin(BinOp::Add, t, ai);
        let r2 = self.bin(BinOp::Mul, t, scl);
        let t = self.bin(BinOp::Mul, ai, rat);
        let t = self.bin(BinOp::Sub, t, ar);
        let i2 = self.bin(BinOp::Mul, t, scl);
        let r = self.select(zero, r0, r1);
        let r = self.select(first, r, r2);
        let i = self.select(zero, i0, i1);
        let i = self.select(first, i, i2);
        Val::Complex(r, i)
    }

    /// numpy's SIMD `absolute` of a complex number.
    fn complex_abs(&mut self, re: Operand, im: Operand) -> Operand {
        let re = self.un(UnOp::Abs, re);
        let im = self.un(UnOp::Abs, im);
        // an infinite part makes both infinite, then a NaN part makes both NaN
        let c = self.bin(BinOp::Eq, re, INF);
        let im = self.select(c, INF, im);
        let c = self.bin(BinOp::Eq, im, INF);
        let re = self.select(c, INF, re);
        let c = self.un(UnOp::IsNan, re);
        let im = self.select(c, NAN, im);
        let c = self.un(UnOp::IsNan, im);
        let re = self.select(c, NAN, re);
        let larger = self.bin(BinOp::Max, re, im);
        let smaller = self.bin(BinOp::Min, im, re);
        // no 0/0 and no inf/inf
        let z = self.bin(BinOp::Eq, larger, ZERO);
        let i = self.bin(BinOp::Eq, smaller, INF);
        let skip = self.bin(BinOp::Max, z, i);
        let q = self.bin(BinOp::Div, smaller, larger);
        let ratio = self.select(skip, ZERO, q);
        let h = self.fma(ratio, ratio, ONE);
        let h = self.un(UnOp::Sqrt, h);
        self.bin(BinOp::Mul, h, larger)
    }
}
