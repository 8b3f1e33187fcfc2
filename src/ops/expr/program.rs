//! Compiling a parsed expression into a register program ([`Program`]): constant
//! subexpressions folded, each input reference a stream, registers numbered in order of
//! first write. The scalar semantics of every operator ([`un`], [`bin`]) live here too,
//! shared by constant folding and the CPU kernel (`src/backend/cpu/expr.rs`).
//!
//! Complex values never reach a backend as such: the compiler lowers each complex
//! operation to real instructions on the two parts ([`Instr::LoadPart`] loads them),
//! following the arithmetic numpy's complex128 loops perform, operation by operation
//! (`complex.rs`). A backend runs the same real instructions either way.

use super::{BinOp, Expr, UnOp, cmath};

/// An input reference in a compiled program: a name and an optional leading-axis index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InputRef {
    /// The input's name.
    pub name: String,
    /// Leading-axis index.
    pub index: Option<usize>,
    /// Column of its first use (for errors).
    pub column: usize,
}

/// An operand of a compiled program: a register or a constant (constants are folded,
/// so an instruction never has only constants).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// Register `n`.
    Reg(usize),
    /// A constant.
    Const(f64),
}

/// One instruction of a compiled program; each writes the register it names last.
/// Registers are numbered in order of first write, so an operand always names a
/// register written earlier. Every value is an f64.
#[derive(Clone, Copy, Debug)]
pub enum Instr {
    /// `dst = stream[i]` as f64.
    Load {
        /// The input stream.
        stream: usize,
        /// The register written.
        dst: usize,
    },
    /// `dst = stream[i].re` (or `.im`) as f64, from a complex64 or complex128 stream.
    LoadPart {
        /// The input stream (complex).
        stream: usize,
        /// The imaginary part if true, else the real part.
        imag: bool,
        /// The register written.
        dst: usize,
    },
    /// `dst = op(a)`.
    Un(UnOp, Operand, usize),
    /// `dst = op(a, b)`.
    Bin(BinOp, Operand, Operand, usize),
    /// `dst = if c != 0 { a } else { b }`.
    Where(Operand, Operand, Operand, usize),
    /// `dst = a * b + c`, rounded once.
    Fma(Operand, Operand, Operand, usize),
    /// `(dst_re, dst_im) = op(re + i im)` for `op` one of `sqrt exp log log1p sin cos
    /// tanh`: a complex function as numpy computes it through the C library
    /// (`cmath.rs`), both parts written by one call.
    ComplexUn {
        /// The function.
        op: UnOp,
        /// The argument's real part.
        re: Operand,
        /// The argument's imaginary part.
        im: Operand,
        /// The register of the result's real part.
        dst_re: usize,
        /// The register of the result's imaginary part (`dst_re + 1`).
        dst_im: usize,
    },
    /// `(dst_re, dst_im) = a ** b` of complex values, as numpy's `np.power` computes it.
    ComplexPow {
        /// `a`'s parts.
        a: (Operand, Operand),
        /// `b`'s parts.
        b: (Operand, Operand),
        /// The register of the result's real part.
        dst_re: usize,
        /// The register of the result's imaginary part (`dst_re + 1`).
        dst_im: usize,
    },
}

impl Instr {
    /// The last register the instruction writes.
    #[must_use]
    pub fn last_dst(&self) -> usize {
        match *self {
            Instr::Load { dst, .. }
            | Instr::LoadPart { dst, .. }
            | Instr::Un(_, _, dst)
            | Instr::Bin(_, _, _, dst)
            | Instr::Where(_, _, _, dst)
            | Instr::Fma(_, _, _, dst) => dst,
            Instr::ComplexUn { dst_im, .. } | Instr::ComplexPow { dst_im, .. } => dst_im,
        }
    }
}

/// A compiled expression: its distinct input references (streams) and a register program.
#[derive(Clone, Debug)]
pub struct Program {
    /// The streams, in order of first use.
    pub streams: Vec<InputRef>,
    code: Vec<Instr>,
    result: Operand,
    result_imag: Option<Operand>,
    regs: usize,
    complex_streams: Vec<bool>,
}

/// Why an expression cannot be compiled: an operation numpy defines on complex values
/// that tilestream does not compute (its message says which and what does work).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    /// What is wrong, in one line.
    pub message: String,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A value while compiling: a real operand, or the real and imaginary operands of a
/// complex one.
#[derive(Clone, Copy, Debug)]
pub(super) enum Val {
    Real(Operand),
    Complex(Operand, Operand),
}

pub(crate) fn un(op: UnOp, x: f64) -> f64 {
    match op {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Log1p => x.ln_1p(),
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Tanh => x.tanh(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        UnOp::Round => x.round_ties_even(),
        UnOp::IsNan => f64::from(u8::from(x.is_nan())),
    }
}

/// `y.atan2(x)`: the C library's `atan2`, kept out of line (the block loops call it
/// per element).
#[inline(never)]
fn atan2(y: f64, x: f64) -> f64 {
    y.atan2(x)
}

#[inline(always)]
#[allow(clippy::inline_always, clippy::float_cmp)] // inlined into each block loop; `==` is the language's
pub(crate) fn bin(op: BinOp, a: f64, b: f64) -> f64 {
    let t = |c: bool| f64::from(u8::from(c));
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Pow => a.powf(b),
        BinOp::Lt => t(a < b),
        BinOp::Le => t(a <= b),
        BinOp::Gt => t(a > b),
        BinOp::Ge => t(a >= b),
        BinOp::Eq => t(a == b),
        BinOp::Ne => t(a != b),
        // as numpy's minimum and maximum: NaN if either is, else the first argument on
        // a tie (so min(0, -0) is 0 and min(-0, 0) is -0 on every CPU and device;
        // f64::min leaves the sign of a zero result unspecified)
        BinOp::Min => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a <= b {
                a
            } else {
                b
            }
        }
        BinOp::Max => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else if a >= b {
                a
            } else {
                b
            }
        }
        BinOp::Atan2 => atan2(a, b),
    }
}

impl Program {
    /// Compiles a parsed expression whose inputs are all real (folding constant
    /// subexpressions).
    ///
    /// # Errors
    /// As [`Program::compile_typed`], for complex literals and `complex()`.
    pub fn compile(e: &Expr) -> Result<Program, CompileError> {
        Self::compile_typed(e, |_| false)
    }

    /// Compiles a parsed expression; `is_complex` says which inputs (a name and an
    /// optional leading-axis index) are complex.
    ///
    /// # Errors
    /// [`CompileError`] for an operation on a complex value that is not computed
    /// (`sqrt`, `exp`, `**`, ...).
    pub fn compile_typed(
        e: &Expr,
        is_complex: impl Fn(&InputRef) -> bool,
    ) -> Result<Program, CompileError> {
        let mut p = Program {
            streams: Vec::new(),
            code: Vec::new(),
            result: Operand::Const(0.0),
            result_imag: None,
            regs: 0,
            complex_streams: Vec::new(),
        };
        match p.emit(e, &is_complex)? {
            Val::Real(r) => p.result = r,
            Val::Complex(re, im) => {
                p.result = re;
                p.result_imag = Some(im);
            }
        }
        Ok(p)
    }

    /// The instructions, in order: what a backend translates (the CUDA backend into one
    /// fused kernel, `src/backend/cuda/source/map.rs`).
    #[must_use]
    pub fn code(&self) -> &[Instr] {
        &self.code
    }

    /// Registers the program writes (each one block of f64 when evaluated).
    #[must_use]
    pub fn regs(&self) -> usize {
        self.regs
    }

    /// The operand holding the result (its real part when [`Program::result_imag`] is
    /// `Some`).
    #[must_use]
    pub fn result(&self) -> Operand {
        self.result
    }

    /// The operand holding the result's imaginary part: `None` when the result is real.
    #[must_use]
    pub fn result_imag(&self) -> Option<Operand> {
        self.result_imag
    }

    /// Whether the result is complex.
    #[must_use]
    pub fn is_complex(&self) -> bool {
        self.result_imag.is_some()
    }

    /// Whether stream `k` was compiled as complex (read with [`Instr::LoadPart`]).
    #[must_use]
    pub fn stream_is_complex(&self, k: usize) -> bool {
        self.complex_streams.get(k).copied().unwrap_or(false)
    }

    fn reg(&mut self) -> usize {
        self.regs += 1;
        self.regs - 1
    }

    /// `op(a)`, folded when `a` is a constant.
    pub(super) fn un(&mut self, op: UnOp, a: Operand) -> Operand {
        match a {
            Operand::Const(v) => Operand::Const(un(op, v)),
            x @ Operand::Reg(_) => {
                let dst = self.reg();
                self.code.push(Instr::Un(op, x, dst));
                Operand::Reg(dst)
            }
        }
    }

    /// `op(a, b)`, folded when both are constants.
    pub(super) fn bin(&mut self, op: BinOp, a: Operand, b: Operand) -> Operand {
        match (a, b) {
            (Operand::Const(x), Operand::Const(y)) => Operand::Const(bin(op, x, y)),
            (x, y) => {
                let dst = self.reg();
                self.code.push(Instr::Bin(op, x, y, dst));
                Operand::Reg(dst)
            }
        }
    }

    /// `c != 0 ? a : b`, folded when `c` is a constant.
    pub(super) fn select(&mut self, c: Operand, a: Operand, b: Operand) -> Operand {
        match c {
            Operand::Const(c) => {
                if c == 0.0 {
                    b
                } else {
                    a
                }
            }
            c @ Operand::Reg(_) => {
                let dst = self.reg();
                self.code.push(Instr::Where(c, a, b, dst));
                Operand::Reg(dst)
            }
        }
    }

    /// `a * b + c` rounded once, folded when all three are constants.
    pub(super) fn fma(&mut self, a: Operand, b: Operand, c: Operand) -> Operand {
        match (a, b, c) {
            (Operand::Const(a), Operand::Const(b), Operand::Const(c)) => {
                Operand::Const(a.mul_add(b, c))
            }
            (a, b, c) => {
                let dst = self.reg();
                self.code.push(Instr::Fma(a, b, c, dst));
                Operand::Reg(dst)
            }
        }
    }

    /// `op(re + i im)` for one of `sqrt exp log log1p sin cos tanh`, folded when both
    /// parts are constants.
    pub(super) fn complex_un(&mut self, op: UnOp, re: Operand, im: Operand) -> Val {
        if let (Operand::Const(r), Operand::Const(i)) = (re, im) {
            let (r, i) = cmath::complex_un(op, r, i);
            return Val::Complex(Operand::Const(r), Operand::Const(i));
        }
        self.two_results(|dst_re, dst_im| Instr::ComplexUn {
            op,
            re,
            im,
            dst_re,
            dst_im,
        })
    }

    /// `a ** b` of complex values as numpy's `np.power`, folded when all four parts are
    /// constants.
    pub(super) fn complex_pow(&mut self, a: (Operand, Operand), b: (Operand, Operand)) -> Val {
        if let (
            (Operand::Const(ar), Operand::Const(ai)),
            (Operand::Const(br), Operand::Const(bi)),
        ) = (a, b)
        {
            let (r, i) = cmath::complex_pow((ar, ai), (br, bi));
            return Val::Complex(Operand::Const(r), Operand::Const(i));
        }
        self.two_results(|dst_re, dst_im| Instr::ComplexPow {
            a,
            b,
            dst_re,
            dst_im,
        })
    }

    /// Pushes the instruction `make(dst_re, dst_im)` writing two new registers: a complex
    /// value's parts.
    fn two_results(&mut self, make: impl FnOnce(usize, usize) -> Instr) -> Val {
        let (dst_re, dst_im) = (self.reg(), self.reg());
        self.code.push(make(dst_re, dst_im));
        Val::Complex(Operand::Reg(dst_re), Operand::Reg(dst_im))
    }

    /// `op(x, y)` as the expression language defines it: `x ** 2`, `x ** 0.5` and
    /// `x ** -1` are `x * x`, `sqrt(x)` and `1 / x`, as numpy's power computes them
    /// (the C library's `pow` differs from `x * x` in the last place now and then).
    fn real_binary(&mut self, op: BinOp, x: Operand, y: Operand) -> Operand {
        match (op, x, y) {
            (BinOp::Pow, Operand::Reg(_), Operand::Const(2.0)) => self.bin(BinOp::Mul, x, x),
            (BinOp::Pow, Operand::Reg(_), Operand::Const(0.5)) => self.un(UnOp::Sqrt, x),
            (BinOp::Pow, Operand::Reg(_), Operand::Const(-1.0)) => {
                self.bin(BinOp::Div, Operand::Const(1.0), x)
            }
            _ => self.bin(op, x, y),
        }
    }

    /// The stream of input `r` (added on first use) and whether it is complex.
    fn stream(&mut self, r: InputRef, is_complex: &impl Fn(&InputRef) -> bool) -> usize {
        if let Some(i) = self
            .streams
            .iter()
            .position(|s| s.name == r.name && s.index == r.index)
        {
            return i;
        }
        self.complex_streams.push(is_complex(&r));
        self.streams.push(r);
        self.streams.len() - 1
    }

    /// One load per stream (and part) per block: the register of an earlier load, or a
    /// new one.
    fn load(&mut self, stream: usize, part: Option<bool>) -> Operand {
        for ins in &self.code {
            let hit = match (*ins, part) {
                (Instr::Load { stream: s, dst }, None) if s == stream => Some(dst),
                (
                    Instr::LoadPart {
                        stream: s,
                        imag,
                        dst,
                    },
                    Some(p),
                ) if s == stream && imag == p => Some(dst),
                _ => None,
            };
            if let Some(dst) = hit {
                return Operand::Reg(dst);
            }
        }
        let dst = self.reg();
        self.code.push(match part {
            None => Instr::Load { stream, dst },
            Some(imag) => Instr::LoadPart { stream, imag, dst },
        });
        Operand::Reg(dst)
    }

    fn emit(
        &mut self,
        e: &Expr,
        is_complex: &impl Fn(&InputRef) -> bool,
    ) -> Result<Val, CompileError> {
        Ok(match e {
            Expr::Num(v) => Val::Real(Operand::Const(*v)),
            Expr::Imag(v) => Val::Complex(Operand::Const(0.0), Operand::Const(*v)),
            Expr::Var {
                name,
                index,
                column,
            } => {
                let r = InputRef {
                    name: name.clone(),
                    index: *index,
                    column: *column,
                };
                let stream = self.stream(r, is_complex);
                if self.complex_streams[stream] {
                    let re = self.load(stream, Some(false));
                    let im = self.load(stream, Some(true));
                    Val::Complex(re, im)
                } else {
                    Val::Real(self.load(stream, None))
                }
            }
            Expr::Unary(op, a) => match self.emit(a, is_complex)? {
                Val::Real(a) => Val::Real(self.un(*op, a)),
                Val::Complex(re, im) => self.complex_unary(*op, re, im)?,
            },
            Expr::Binary(op, a, b) => {
                match (self.emit(a, is_complex)?, self.emit(b, is_complex)?) {
                    (Val::Real(x), Val::Real(y)) => Val::Real(self.real_binary(*op, x, y)),
                    (x, y) => self.complex_binary(*op, x, y)?,
                }
            }
            Expr::Where(c, a, b) => {
                let c = match self.emit(c, is_complex)? {
                    Val::Real(c) => c,
                    // numpy's truth of a complex number: either part non-zero
                    Val::Complex(re, im) => {
                        let r = self.bin(BinOp::Ne, re, Operand::Const(0.0));
                        let i = self.bin(BinOp::Ne, im, Operand::Const(0.0));
                        self.bin(BinOp::Max, r, i)
                    }
                };
                match (self.emit(a, is_complex)?, self.emit(b, is_complex)?) {
                    (Val::Real(a), Val::Real(b)) => Val::Real(self.select(c, a, b)),
                    (a, b) => {
                        let ((ar, ai), (br, bi)) = (parts(a), parts(b));
                        let re = self.select(c, ar, br);
                        let im = self.select(c, ai, bi);
                        Val::Complex(re, im)
                    }
                }
            }
            Expr::Fma(a, b, c) => match (
                self.emit(a, is_complex)?,
                self.emit(b, is_complex)?,
                self.emit(c, is_complex)?,
            ) {
                (Val::Real(a), Val::Real(b), Val::Real(c)) => Val::Real(self.fma(a, b, c)),
                _ => return Err(undefined("fma()")),
            },
            Expr::Clip(x, lo, hi) => match (
                self.emit(x, is_complex)?,
                self.emit(lo, is_complex)?,
                self.emit(hi, is_complex)?,
            ) {
                (Val::Real(x), Val::Real(lo), Val::Real(hi)) => {
                    let m = self.bin(BinOp::Max, x, lo);
                    Val::Real(self.bin(BinOp::Min, m, hi))
                }
                (x, lo, hi) => {
                    let m = self.complex_clip_step(BinOp::Gt, x, lo);
                    self.complex_clip_step(BinOp::Lt, m, hi)
                }
            },
            Expr::Complex(f, a) => {
                let a = self.emit(a, is_complex)?;
                self.complex_fn(*f, a)
            }
            Expr::MakeComplex(a, b) => {
                match (self.emit(a, is_complex)?, self.emit(b, is_complex)?) {
                    (Val::Real(re), Val::Real(im)) => Val::Complex(re, im),
                    _ => {
                        return Err(CompileError {
                            message: "complex(re, im) takes two real values: give real(z) or \
                                      imag(z) of a complex one"
                                .into(),
                        });
                    }
                }
            }
        })
    }
}

/// The parts of a value: a real one is promoted as numpy promotes it, with an imaginary
/// part of +0.
pub(super) fn parts(v: Val) -> (Operand, Operand) {
    match v {
        Val::Real(x) => (x, Operand::Const(0.0)),
        Val::Complex(re, im) => (re, im),
    }
}

/// The refusal of `what` on a complex value: numpy defines no such operation (its ufunc
/// has no complex loop), so neither does tilestream.
pub(super) fn undefined(what: &str) -> CompileError {
    CompileError {
        message: format!(
            "{what} of a complex value is not defined (numpy has no complex form of it): \
             take abs(), real() or imag() first"
        ),
    }
}
