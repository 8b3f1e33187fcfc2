//! Compiling a parsed expression into a register program ([`Program`]): constant
//! subexpressions folded, each input reference a stream, registers numbered in order of
//! first write. The scalar semantics of every operator ([`un`], [`bin`]) live here too,
//! shared by constant folding and the CPU kernel (`src/backend/cpu/expr.rs`).

use super::{BinOp, Expr, UnOp};

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
    /// `dst = op(a)`.
    Un(UnOp, Operand, usize),
    /// `dst = op(a, b)`.
    Bin(BinOp, Operand, Operand, usize),
    /// `dst = if c != 0 { a } else { b }`.
    Where(Operand, Operand, Operand, usize),
    /// `dst = a * b + c`, rounded once.
    Fma(Operand, Operand, Operand, usize),
}

/// A compiled expression: its distinct input references (streams) and a register program.
#[derive(Clone, Debug)]
pub struct Program {
    /// The streams, in order of first use.
    pub streams: Vec<InputRef>,
    code: Vec<Instr>,
    result: Operand,
    regs: usize,
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
    }
}

impl Program {
    /// Compiles a parsed expression (folding constant subexpressions).
    #[must_use]
    pub fn compile(e: &Expr) -> Program {
        let mut p = Program {
            streams: Vec::new(),
            code: Vec::new(),
            result: Operand::Const(0.0),
            regs: 0,
        };
        p.result = p.emit(e);
        p
    }

    /// The instructions, in order: what a backend translates (the CUDA backend into one
    /// fused kernel, `src/backend/cuda/source.rs`).
    #[must_use]
    pub fn code(&self) -> &[Instr] {
        &self.code
    }

    /// Registers the program writes (each one block of f64 when evaluated).
    #[must_use]
    pub fn regs(&self) -> usize {
        self.regs
    }

    /// The operand holding the result.
    #[must_use]
    pub fn result(&self) -> Operand {
        self.result
    }

    fn reg(&mut self) -> usize {
        self.regs += 1;
        self.regs - 1
    }

    fn emit(&mut self, e: &Expr) -> Operand {
        match e {
            Expr::Num(v) => Operand::Const(*v),
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
                let stream = match self
                    .streams
                    .iter()
                    .position(|s| s.name == r.name && s.index == r.index)
                {
                    Some(i) => i,
                    None => {
                        self.streams.push(r);
                        self.streams.len() - 1
                    }
                };
                // one load per stream per block: reuse the register of an earlier load
                for ins in &self.code {
                    if let Instr::Load { stream: s, dst } = *ins
                        && s == stream
                    {
                        return Operand::Reg(dst);
                    }
                }
                let dst = self.reg();
                self.code.push(Instr::Load { stream, dst });
                Operand::Reg(dst)
            }
            Expr::Unary(op, a) => match self.emit(a) {
                Operand::Const(v) => Operand::Const(un(*op, v)),
                x @ Operand::Reg(_) => {
                    let dst = self.reg();
                    self.code.push(Instr::Un(*op, x, dst));
                    Operand::Reg(dst)
                }
            },
            Expr::Binary(op, a, b) => match (self.emit(a), self.emit(b)) {
                (Operand::Const(x), Operand::Const(y)) => Operand::Const(bin(*op, x, y)),
                (x, y) => {
                    let dst = self.reg();
                    self.code.push(Instr::Bin(*op, x, y, dst));
                    Operand::Reg(dst)
                }
            },
            Expr::Where(c, a, b) => match (self.emit(c), self.emit(a), self.emit(b)) {
                (Operand::Const(c), a, b) => {
                    if c == 0.0 {
                        b
                    } else {
                        a
                    }
                }
                (c, a, b) => {
                    let dst = self.reg();
                    self.code.push(Instr::Where(c, a, b, dst));
                    Operand::Reg(dst)
                }
            },
            Expr::Fma(a, b, c) => match (self.emit(a), self.emit(b), self.emit(c)) {
                (Operand::Const(a), Operand::Const(b), Operand::Const(c)) => {
                    Operand::Const(a.mul_add(b, c))
                }
                (a, b, c) => {
                    let dst = self.reg();
                    self.code.push(Instr::Fma(a, b, c, dst));
                    Operand::Reg(dst)
                }
            },
        }
    }
}
