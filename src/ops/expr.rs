//! Fused elementwise expressions: `(s[7] - s[3]) / (s[7] + s[3])`, `where(x > 0, sqrt(x), 0)`.
//!
//! An expression is parsed once (a small Pratt parser: the grammar has leading-axis
//! indexing and errors must point at a column, which the scalar-evaluator crates do not
//! offer), compiled into a register program, and evaluated over each tile in blocks of
//! [`BLOCK`] elements: every instruction is one tight loop over a block of f64, which the
//! compiler vectorizes, and the whole expression is one pass over the tile with no
//! intermediate files. Literals stay scalars (no block is filled with a constant).
//!
//! Grammar, loosest binding first (Python's precedence):
//! ```text
//! expr   := cmp
//! cmp    := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
//! sum    := prod (('+' | '-') prod)*
//! prod   := unary (('*' | '/') unary)*
//! unary  := '-' unary | power
//! power  := atom ('**' unary)?                    right-associative: 2**-1, -x**2 = -(x**2)
//! atom   := number | name | name '[' int ']' | name '(' args ')' | '(' expr ')'
//! ```
//! Functions: `abs sqrt exp log log1p sin cos tanh floor ceil round isnan` (one argument),
//! `min max` (two), `clip(x, lo, hi)` and `where(cond, a, b)` (three). Comparisons and
//! `isnan` give 1.0 or 0.0; `where` takes its condition as true when non-zero. `round`
//! rounds half to even, as numpy does. Arithmetic follows IEEE: `x / 0` is ±inf, `log(-1)`
//! is NaN; NaN compares false (`!=` true).

use std::fmt;

use rayon::prelude::*;

use crate::dtype::{DType, Element};

/// Elements per evaluation block.
pub const BLOCK: usize = 4096;

/// A parse error with the 1-based column it points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based column in the expression text.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `**`
    Pow,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `min(a, b)` (NaN if either is NaN, as numpy's `minimum`)
    Min,
    /// `max(a, b)` (NaN if either is NaN, as numpy's `maximum`)
    Max,
}

/// One-argument functions (and unary minus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// unary `-`
    Neg,
    /// `abs`
    Abs,
    /// `sqrt`
    Sqrt,
    /// `exp`
    Exp,
    /// `log` (natural)
    Log,
    /// `log1p`
    Log1p,
    /// `sin`
    Sin,
    /// `cos`
    Cos,
    /// `tanh`
    Tanh,
    /// `floor`
    Floor,
    /// `ceil`
    Ceil,
    /// `round` (half to even)
    Round,
    /// `isnan` (1.0 or 0.0)
    IsNan,
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A numeric literal.
    Num(f64),
    /// An input, optionally indexed along its leading axis (`s[7]`).
    Var {
        /// The input's name.
        name: String,
        /// Leading-axis index, if any.
        index: Option<usize>,
        /// 1-based column of the name (for errors about it).
        column: usize,
    },
    /// A one-argument operation.
    Unary(UnOp, Box<Expr>),
    /// A two-argument operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `where(cond, a, b)`
    Where(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Op(&'static str),
    End,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let col = i + 1;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text = &src[start..i];
            let v: f64 = text.parse().map_err(|_| ParseError {
                column: col,
                message: format!("'{text}' is not a number"),
            })?;
            out.push((Tok::Num(v), col));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Name(src[start..i].to_string()), col));
        } else {
            let two = src.get(i..i + 2).unwrap_or("");
            let op: &'static str = match two {
                "**" => "**",
                "<=" => "<=",
                ">=" => ">=",
                "==" => "==",
                "!=" => "!=",
                _ => match c {
                    b'+' => "+",
                    b'-' => "-",
                    b'*' => "*",
                    b'/' => "/",
                    b'<' => "<",
                    b'>' => ">",
                    b'(' => "(",
                    b')' => ")",
                    b'[' => "[",
                    b']' => "]",
                    b',' => ",",
                    _ => {
                        let ch = src[i..].chars().next().unwrap_or('?');
                        return Err(ParseError {
                            column: col,
                            message: format!("unexpected character '{ch}'"),
                        });
                    }
                },
            };
            i += op.len();
            out.push((Tok::Op(op), col));
        }
    }
    out.push((Tok::End, src.len() + 1));
    Ok(out)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

const MAX_DEPTH: usize = 200;

/// Most tokens in one expression: a bound on the tree (and on the recursion that
/// compiles and frees it, which a chain `x+x+...` as long as the input would exhaust).
const MAX_TOKENS: usize = 4096;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }
    fn col(&self) -> usize {
        self.toks[self.pos].1
    }
    fn bump(&mut self) -> (Tok, usize) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }
    fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            column: self.col(),
            message: message.into(),
        })
    }
    fn eat(&mut self, op: &str) -> bool {
        if *self.peek()
            == Tok::Op(match op {
                "(" => "(",
                ")" => ")",
                "]" => "]",
                "[" => "[",
                "," => ",",
                _ => return false,
            })
        {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, op: &str) -> Result<(), ParseError> {
        if self.eat(op) {
            Ok(())
        } else {
            let found = describe(self.peek());
            self.err(format!("expected '{op}', found {found}"))
        }
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("expression nested too deeply");
        }
        let lhs = self.sum()?;
        let op = match self.peek() {
            Tok::Op("<") => BinOp::Lt,
            Tok::Op("<=") => BinOp::Le,
            Tok::Op(">") => BinOp::Gt,
            Tok::Op(">=") => BinOp::Ge,
            Tok::Op("==") => BinOp::Eq,
            Tok::Op("!=") => BinOp::Ne,
            _ => {
                self.depth -= 1;
                return Ok(lhs);
            }
        };
        self.bump();
        let rhs = self.sum()?;
        if matches!(self.peek(), Tok::Op("<" | "<=" | ">" | ">=" | "==" | "!=")) {
            return self.err("comparisons cannot be chained: use where() or parentheses");
        }
        self.depth -= 1;
        Ok(Expr::Binary(op, Box::new(lhs), Box::new(rhs)))
    }

    fn sum(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.prod()?;
        loop {
            let op = match self.peek() {
                Tok::Op("+") => BinOp::Add,
                Tok::Op("-") => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.prod()?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn prod(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.peek() {
                Tok::Op("*") => BinOp::Mul,
                Tok::Op("/") => BinOp::Div,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.unary()?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if *self.peek() == Tok::Op("-") {
            self.bump();
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return self.err("expression nested too deeply");
            }
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Unary(UnOp::Neg, Box::new(e)));
        }
        if *self.peek() == Tok::Op("+") {
            self.bump();
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, ParseError> {
        let base = self.atom()?;
        if *self.peek() == Tok::Op("**") {
            self.bump();
            // `x**x**x...` nests to the right: count it like parentheses
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return self.err("expression nested too deeply");
            }
            let exp = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Binary(BinOp::Pow, Box::new(base), Box::new(exp)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        let (tok, col) = self.bump();
        match tok {
            Tok::Num(v) => Ok(Expr::Num(v)),
            Tok::Op("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Name(name) => {
                if self.eat("(") {
                    return self.call(&name, col);
                }
                if matches!(name.as_str(), "nan" | "inf") {
                    return Ok(Expr::Num(if name == "nan" {
                        f64::NAN
                    } else {
                        f64::INFINITY
                    }));
                }
                let index = if self.eat("[") {
                    let c = self.col();
                    let i = match self.bump().0 {
                        Tok::Num(v) if v >= 0.0 && v.fract() == 0.0 && v < 1e15 => v as usize,
                        other => {
                            return Err(ParseError {
                                column: c,
                                message: format!(
                                    "an index must be a non-negative integer, found {}",
                                    describe(&other)
                                ),
                            });
                        }
                    };
                    self.expect("]")?;
                    Some(i)
                } else {
                    None
                };
                Ok(Expr::Var {
                    name,
                    index,
                    column: col,
                })
            }
            other => Err(ParseError {
                column: col,
                message: format!(
                    "expected a number, a name or '(', found {}",
                    describe(&other)
                ),
            }),
        }
    }

    fn call(&mut self, name: &str, col: usize) -> Result<Expr, ParseError> {
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                args.push(self.expr()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let arity = |n: usize| -> Result<(), ParseError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(ParseError {
                    column: col,
                    message: format!(
                        "{name}() takes {n} argument{}, got {}",
                        if n == 1 { "" } else { "s" },
                        args.len()
                    ),
                })
            }
        };
        let un = match name {
            "abs" => Some(UnOp::Abs),
            "sqrt" => Some(UnOp::Sqrt),
            "exp" => Some(UnOp::Exp),
            "log" => Some(UnOp::Log),
            "log1p" => Some(UnOp::Log1p),
            "sin" => Some(UnOp::Sin),
            "cos" => Some(UnOp::Cos),
            "tanh" => Some(UnOp::Tanh),
            "floor" => Some(UnOp::Floor),
            "ceil" => Some(UnOp::Ceil),
            "round" => Some(UnOp::Round),
            "isnan" => Some(UnOp::IsNan),
            _ => None,
        };
        if let Some(op) = un {
            arity(1)?;
            return Ok(Expr::Unary(op, Box::new(args.remove(0))));
        }
        let mut it = args.clone().into_iter().map(Box::new);
        match name {
            "min" | "max" => {
                arity(2)?;
                let (a, b) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                Ok(Expr::Binary(
                    if name == "min" {
                        BinOp::Min
                    } else {
                        BinOp::Max
                    },
                    a,
                    b,
                ))
            }
            "clip" => {
                arity(3)?;
                let (x, lo, hi) = (
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                );
                Ok(Expr::Binary(
                    BinOp::Min,
                    Box::new(Expr::Binary(BinOp::Max, x, lo)),
                    hi,
                ))
            }
            "where" => {
                arity(3)?;
                let (c, a, b) = (
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                );
                Ok(Expr::Where(c, a, b))
            }
            _ => Err(ParseError {
                column: col,
                message: format!(
                    "unknown function '{name}' (known: abs sqrt exp log log1p sin cos tanh floor ceil round isnan min max clip where)"
                ),
            }),
        }
    }
}

impl Default for Expr {
    fn default() -> Self {
        Expr::Num(0.0)
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(v) => format!("number {v}"),
        Tok::Name(n) => format!("'{n}'"),
        Tok::Op(o) => format!("'{o}'"),
        Tok::End => "the end of the expression".into(),
    }
}

/// Parses an expression.
///
/// # Errors
/// [`ParseError`] with the column of the first problem.
pub fn parse(src: &str) -> Result<Expr, ParseError> {
    let toks = lex(src)?;
    if toks.len() > MAX_TOKENS {
        return Err(ParseError {
            message: format!(
                "the expression has {} tokens; tilestream compiles at most {MAX_TOKENS} (split \
                 it into pipeline steps)",
                toks.len() - 1
            ),
            column: toks[MAX_TOKENS].1,
        });
    }
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    if *p.peek() == Tok::End {
        return p.err("the expression is empty");
    }
    let e = p.expr()?;
    if *p.peek() != Tok::End {
        let found = describe(p.peek());
        return p.err(format!("unexpected {found} after a complete expression"));
    }
    Ok(e)
}

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

fn un(op: UnOp, x: f64) -> f64 {
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
fn bin(op: BinOp, a: f64, b: f64) -> f64 {
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
        }
    }

    /// Evaluates over one tile: `inputs[k]` holds the tile's elements of stream `k` (of
    /// dtype `in_dtypes[k]`), `out` receives the result cast to `out_dtype`.
    pub fn eval_tile(
        &self,
        inputs: &[&[u8]],
        in_dtypes: &[DType],
        out: &mut [u8],
        out_dtype: DType,
    ) {
        // Each parallel job takes JOB_BLOCKS blocks and one scratch allocation for all of
        // them (a per-block allocation would cost more than the arithmetic).
        const JOB_BLOCKS: usize = 32;
        let n = out.len() / out_dtype.size();
        let es = out_dtype.size();
        out.par_chunks_mut(BLOCK * JOB_BLOCKS * es)
            .enumerate()
            .for_each(|(j, o)| {
                let mut scratch = vec![0.0f64; self.regs.max(1) * BLOCK + BLOCK];
                let job = |scratch: &mut [f64], o: &mut [u8]| {
                    for (b, ob) in o.chunks_mut(BLOCK * es).enumerate() {
                        let start = (j * JOB_BLOCKS + b) * BLOCK;
                        let len = (n - start).min(BLOCK);
                        self.eval_block(inputs, in_dtypes, start, len, scratch, ob, out_dtype);
                    }
                };
                with_avx2(|| job(&mut scratch, o));
            });
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_block(
        &self,
        inputs: &[&[u8]],
        in_dtypes: &[DType],
        start: usize,
        len: usize,
        scratch: &mut [f64],
        out: &mut [u8],
        out_dtype: DType,
    ) {
        let (regs, tail) = scratch.split_at_mut(self.regs * BLOCK);
        for ins in &self.code {
            match *ins {
                Instr::Load { stream, dst } => {
                    let d = in_dtypes[stream];
                    let bytes = &inputs[stream][start * d.size()..(start + len) * d.size()];
                    load(bytes, d, &mut regs[dst * BLOCK..dst * BLOCK + len]);
                }
                Instr::Un(op, a, dst) => {
                    let (a, d) = operand_and_dst(regs, a, dst, len);
                    match a {
                        Src::Reg(a) => d.iter_mut().zip(a).for_each(|(d, &x)| *d = un(op, x)),
                        Src::Same => d.iter_mut().for_each(|d| *d = un(op, *d)),
                        Src::Const(_) => unreachable!("constants are folded"),
                    }
                }
                Instr::Bin(op, a, b, dst) => binary(regs, op, a, b, dst, len),
                Instr::Where(c, a, b, dst) => {
                    let val = |o: Operand, i: usize, regs: &[f64]| match o {
                        Operand::Const(v) => v,
                        Operand::Reg(r) => regs[r * BLOCK + i],
                    };
                    for (i, t) in tail[..len].iter_mut().enumerate() {
                        *t = if val(c, i, regs) == 0.0 {
                            val(b, i, regs)
                        } else {
                            val(a, i, regs)
                        };
                    }
                    regs[dst * BLOCK..dst * BLOCK + len].copy_from_slice(&tail[..len]);
                }
            }
        }
        let res: &[f64] = match self.result {
            Operand::Reg(r) => &regs[r * BLOCK..r * BLOCK + len],
            Operand::Const(v) => {
                tail[..len].fill(v);
                &tail[..len]
            }
        };
        store(res, out, out_dtype);
    }
}

enum Src<'a> {
    Reg(&'a [f64]),
    Same,
    Const(f64),
}

/// Splits the registers into the source operand and the destination block.
fn operand_and_dst(regs: &mut [f64], a: Operand, dst: usize, len: usize) -> (Src<'_>, &mut [f64]) {
    match a {
        Operand::Const(v) => (Src::Const(v), &mut regs[dst * BLOCK..dst * BLOCK + len]),
        Operand::Reg(r) if r == dst => (Src::Same, &mut regs[dst * BLOCK..dst * BLOCK + len]),
        Operand::Reg(r) => {
            // registers are allocated in order, so a source is always below its destination
            let (lo, hi) = regs.split_at_mut(dst * BLOCK);
            (Src::Reg(&lo[r * BLOCK..r * BLOCK + len]), &mut hi[..len])
        }
    }
}

fn binary(regs: &mut [f64], op: BinOp, a: Operand, b: Operand, dst: usize, len: usize) {
    let (lo, hi) = regs.split_at_mut(dst * BLOCK);
    let d = &mut hi[..len];
    let get = |o: Operand| match o {
        Operand::Reg(r) => Src::Reg(&lo[r * BLOCK..r * BLOCK + len]),
        Operand::Const(v) => Src::Const(v),
    };
    // one monomorphic loop per operator and operand kind, so each vectorizes
    macro_rules! each_op {
        ($f:ident) => {
            match op {
                BinOp::Add => $f!(|x, y| x + y),
                BinOp::Sub => $f!(|x, y| x - y),
                BinOp::Mul => $f!(|x, y| x * y),
                BinOp::Div => $f!(|x, y| x / y),
                other => $f!(|x, y| bin(other, x, y)),
            }
        };
    }
    match (get(a), get(b)) {
        (Src::Reg(x), Src::Reg(y)) => {
            macro_rules! rr {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut()
                        .zip(x.iter().zip(y))
                        .for_each(|(d, (&x, &y))| *d = g(x, y));
                }};
            }
            each_op!(rr);
        }
        (Src::Reg(x), Src::Const(c)) => {
            macro_rules! rc {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut().zip(x).for_each(|(d, &x)| *d = g(x, c));
                }};
            }
            each_op!(rc);
        }
        (Src::Const(c), Src::Reg(y)) => {
            macro_rules! cr {
                ($g:expr) => {{
                    let g = $g;
                    d.iter_mut().zip(y).for_each(|(d, &y)| *d = g(c, y));
                }};
            }
            each_op!(cr);
        }
        _ => unreachable!("constant pairs are folded"),
    }
}

/// Widens `bytes` of dtype `d` into `dst`.
fn load(bytes: &[u8], d: DType, dst: &mut [f64]) {
    crate::dispatch_dtype!(d, T => {
        match bytemuck::try_cast_slice::<u8, T>(bytes) {
            Ok(xs) => dst.iter_mut().zip(xs).for_each(|(o, &x)| *o = x.to_f64()),
            Err(_) => dst.iter_mut().zip(bytes.chunks_exact(std::mem::size_of::<T>())).for_each(|(o, c)| {
                *o = bytemuck::pod_read_unaligned::<T>(c).to_f64();
            }),
        }
    });
}

use crate::dtype::store_f64 as store;

/// Runs `f` compiled for AVX2 when the CPU has it (`eval_block` and the loops it calls are
/// inlined into it), else as is. Both give the same bits: no FMA, the same IEEE operations.
#[inline]
fn with_avx2(f: impl FnOnce()) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { call_avx2(f) };
        return;
    }
    f();
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn call_avx2(f: impl FnOnce()) {
    f();
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::float_cmp)]
mod tests {
    use super::*;

    fn eval(src: &str, vars: &[(&str, f64)]) -> f64 {
        let p = Program::compile(&parse(src).unwrap());
        let bufs: Vec<Vec<u8>> = p
            .streams
            .iter()
            .map(|s| {
                let v = vars.iter().find(|(n, _)| *n == s.name).unwrap().1;
                v.to_le_bytes().to_vec()
            })
            .collect();
        let ins: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let dts = vec![DType::F64; ins.len()];
        let mut out = [0u8; 8];
        p.eval_tile(&ins, &dts, &mut out, DType::F64);
        f64::from_le_bytes(out)
    }

    #[test]
    fn precedence_like_python() {
        assert_eq!(eval("-x**2", &[("x", 3.0)]), -9.0);
        assert_eq!(eval("2**-1", &[]), 0.5);
        assert_eq!(eval("2**3**2", &[]), 512.0);
        assert_eq!(eval("1 - 2 - 3", &[]), -4.0);
        assert_eq!(eval("8 / 4 / 2", &[]), 1.0);
        assert_eq!(eval("1 + 2 * 3 < 8", &[]), 1.0);
        assert_eq!(eval("(x*2+1)", &[("x", 1.5)]), 4.0);
        assert_eq!(eval("where(x > 0, sqrt(x), -1)", &[("x", 16.0)]), 4.0);
        assert_eq!(eval("clip(x, 0, 1)", &[("x", 7.0)]), 1.0);
        assert_eq!(eval("round(2.5) + round(3.5)", &[]), 6.0);
        assert_eq!(eval("isnan(x)", &[("x", f64::NAN)]), 1.0);
        assert!(eval("max(x, 1)", &[("x", f64::NAN)]).is_nan());
        assert_eq!(eval("1e3 + .5 + 2.5E-1", &[]), 1000.75);
    }

    #[test]
    fn errors_point_at_columns() {
        let e = |s: &str| parse(s).unwrap_err();
        assert_eq!(e("(x*2+").column, 6);
        assert!(
            e("(x*2+")
                .message
                .contains("found the end of the expression")
        );
        assert_eq!(e("x $ y").column, 3);
        assert_eq!(e("foo(x)").column, 1);
        assert!(e("foo(x)").message.contains("unknown function 'foo'"));
        assert!(
            e("min(x)")
                .message
                .contains("min() takes 2 arguments, got 1")
        );
        assert_eq!(e("s[-1]").column, 3);
        assert!(e("a < b < c").message.contains("chained"));
        assert!(e("x y").message.contains("unexpected 'y'"));
        assert!(e("").message.contains("empty"));
        assert!(e(&"(".repeat(1_000)).message.contains("nested too deeply"));
        assert!(
            e(&"x**".repeat(1_000))
                .message
                .contains("nested too deeply")
        );
        assert!(e(&"(".repeat(10_000)).message.contains("at most 4096"));
    }

    #[test]
    fn streams_are_shared_and_constants_folded() {
        let p = Program::compile(&parse("(s[7] - s[3]) / (s[7] + s[3]) + 2 * 3").unwrap());
        assert_eq!(p.streams.len(), 2);
        assert_eq!(
            p.code
                .iter()
                .filter(|i| matches!(i, Instr::Load { .. }))
                .count(),
            2
        );
    }
}
