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
//! atom   := number | number 'j' | name | name '[' int ']' | name '(' args ')' | '(' expr ')'
//! ```
//! Functions: `abs sqrt exp log log1p sin cos tanh floor ceil round isnan` (one argument),
//! `min max atan2` (two), `clip(x, lo, hi)`, `where(cond, a, b)` and `fma(a, b, c)` (three:
//! `a * b + c` rounded once, as `affine` computes it). Comparisons and
//! `isnan` give 1.0 or 0.0; `where` takes its condition as true when non-zero. `round`
//! rounds half to even, as numpy does. Arithmetic follows IEEE: `x / 0` is ±inf, `log(-1)`
//! is NaN; NaN compares false (`!=` true).
//!
//! Complex values (complex inputs, imaginary literals `2j`, `complex(re, im)`) take
//! `+ - * / **`, unary minus, the comparisons, `abs isnan min max clip where round` and
//! `real imag conj angle`, lowered to real instructions on the parts (see [`Program`]),
//! and `sqrt exp log log1p sin cos tanh`, one instruction each with two results
//! (`cmath.rs`): each computed as numpy computes it on complex128. What numpy does not
//! define on complex values (`floor ceil atan2 fma`) is refused when the program is
//! compiled.

use std::fmt;

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
    /// `atan2(y, x)`: the angle of the point (x, y), as the C library computes it
    Atan2,
}

/// Functions of complex values: what a complex number is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComplexFn {
    /// `real(z)`: the real part (a real value: itself)
    Real,
    /// `imag(z)`: the imaginary part (a real value: 0)
    Imag,
    /// `conj(z)`: the complex conjugate (a real value: itself)
    Conj,
    /// `angle(z)`: `atan2(imag(z), real(z))`, numpy's `np.angle`
    Angle,
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
    /// An imaginary literal (`2j`: the complex number 0 + 2i).
    Imag(f64),
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
    /// `fma(a, b, c)`: `a * b + c` rounded once.
    Fma(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `clip(x, lo, hi)`: `min(max(x, lo), hi)` for real values; numpy's `clip` of
    /// complex ones (which orders them without `maximum`'s NaN rules).
    Clip(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `real`, `imag`, `conj` or `angle` of a value.
    Complex(ComplexFn, Box<Expr>),
    /// `complex(re, im)`: the complex number of two real values.
    MakeComplex(Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Imag(f64),
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
            // Python's imaginary literal: `2j`, `1.5e-3J`
            if i < b.len()
                && (b[i] == b'j' || b[i] == b'J')
                && !b
                    .get(i + 1)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
            {
                i += 1;
                out.push((Tok::Imag(v), col));
            } else {
                out.push((Tok::Num(v), col));
            }
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
            Tok::Imag(v) => Ok(Expr::Imag(v)),
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
        let part = match name {
            "real" => Some(ComplexFn::Real),
            "imag" => Some(ComplexFn::Imag),
            "conj" => Some(ComplexFn::Conj),
            "angle" => Some(ComplexFn::Angle),
            _ => None,
        };
        if let Some(f) = part {
            arity(1)?;
            return Ok(Expr::Complex(f, Box::new(args.remove(0))));
        }
        let mut it = args.clone().into_iter().map(Box::new);
        match name {
            "min" | "max" | "atan2" => {
                arity(2)?;
                let (a, b) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                Ok(Expr::Binary(
                    match name {
                        "min" => BinOp::Min,
                        "max" => BinOp::Max,
                        _ => BinOp::Atan2,
                    },
                    a,
                    b,
                ))
            }
            "complex" => {
                arity(2)?;
                let (a, b) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                Ok(Expr::MakeComplex(a, b))
            }
            "clip" => {
                arity(3)?;
                let (x, lo, hi) = (
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                );
                Ok(Expr::Clip(x, lo, hi))
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
            "fma" => {
                arity(3)?;
                let (a, b, c) = (
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                    it.next().unwrap_or_default(),
                );
                Ok(Expr::Fma(a, b, c))
            }
            _ => Err(ParseError {
                column: col,
                message: format!(
                    "unknown function '{name}' (known: abs sqrt exp log log1p sin cos tanh floor ceil round isnan min max atan2 clip where fma real imag conj angle complex)"
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
        Tok::Imag(v) => format!("number {v}j"),
        Tok::Name(n) => format!("'{n}'"),
        Tok::Op(o) => format!("'{o}'"),
        Tok::End => "the end of the expression".into(),
    }
}

/// `v` as an expression literal that reads back as exactly `v` (`0.5`, `1e-5`, `-3.0`,
/// `nan`, `-inf`), for expressions built from numbers.
#[must_use]
pub fn literal(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        // Debug is the shortest text that parses back to `v`, in exponent form when long
        format!("{v:?}")
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

mod cmath;
mod complex;
mod program;
pub(crate) use cmath::{complex_pow, complex_un};
pub use program::{CompileError, InputRef, Instr, Operand, Program};
pub(crate) use program::{bin, un};

#[cfg(test)]
mod tests;
