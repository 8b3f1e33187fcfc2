//! The CUDA C source of a `map` program: its instructions written out as one fused
//! kernel over its input streams, named by a hash of the program and its dtypes.

use std::fmt::Write as _;

use super::{CMATH, COMMON, cuda_type};
use crate::dtype::DType;
use crate::ops::expr::{BinOp, Instr, Operand, Program, UnOp};

/// The name of the fused kernel of a `map` program: `map_` and a hash of the program
/// and its dtypes, so one run's kernel is compiled once.
#[must_use]
pub fn map_kernel_name(program: &Program, inputs: &[DType], output: DType) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", program.code()).hash(&mut h);
    format!("{:?}", program.result()).hash(&mut h);
    format!("{:?}", program.result_imag()).hash(&mut h);
    for d in inputs {
        d.name().hash(&mut h);
    }
    output.name().hash(&mut h);
    format!("map_{:016x}", h.finish())
}

/// A double constant, exactly (its bits).
fn constant(v: f64) -> String {
    format!("__longlong_as_double((long long){:#x}ull)", v.to_bits())
}

fn operand(o: Operand) -> String {
    match o {
        Operand::Reg(r) => format!("r{r}"),
        Operand::Const(v) => constant(v),
    }
}

fn unary(op: UnOp, a: &str) -> String {
    match op {
        UnOp::Neg => format!("-{a}"),
        UnOp::Abs => format!("fabs({a})"),
        UnOp::Sqrt => format!("sqrt({a})"),
        UnOp::Exp => format!("exp({a})"),
        UnOp::Log => format!("log({a})"),
        UnOp::Log1p => format!("log1p({a})"),
        UnOp::Sin => format!("sin({a})"),
        UnOp::Cos => format!("cos({a})"),
        UnOp::Tanh => format!("tanh({a})"),
        UnOp::Floor => format!("floor({a})"),
        UnOp::Ceil => format!("ceil({a})"),
        // the default rounding mode: to nearest, ties to even
        UnOp::Round => format!("rint({a})"),
        UnOp::IsNan => format!("({a} != {a} ? 1.0 : 0.0)"),
    }
}

/// The name of the device function of a complex `op` in `kernels/cmath.cuh`, after
/// `ts_c`.
fn complex_function(op: UnOp) -> &'static str {
    match op {
        UnOp::Sqrt => "sqrt",
        UnOp::Exp => "exp",
        UnOp::Log => "log",
        UnOp::Log1p => "log1p",
        UnOp::Sin => "sin",
        UnOp::Cos => "cos",
        UnOp::Tanh => "tanh",
        _ => unreachable!("{op:?} of a complex value is refused when compiling"),
    }
}

fn binary(op: BinOp, a: &str, b: &str) -> String {
    let nan = constant(f64::NAN);
    match op {
        BinOp::Add => format!("{a} + {b}"),
        BinOp::Sub => format!("{a} - {b}"),
        BinOp::Mul => format!("{a} * {b}"),
        BinOp::Div => format!("{a} / {b}"),
        BinOp::Pow => format!("pow({a}, {b})"),
        BinOp::Lt => format!("({a} < {b} ? 1.0 : 0.0)"),
        BinOp::Le => format!("({a} <= {b} ? 1.0 : 0.0)"),
        BinOp::Gt => format!("({a} > {b} ? 1.0 : 0.0)"),
        BinOp::Ge => format!("({a} >= {b} ? 1.0 : 0.0)"),
        BinOp::Eq => format!("({a} == {b} ? 1.0 : 0.0)"),
        BinOp::Ne => format!("({a} != {b} ? 1.0 : 0.0)"),
        BinOp::Min => format!("({a} != {a} || {b} != {b} ? {nan} : ({a} <= {b} ? {a} : {b}))"),
        BinOp::Max => format!("({a} != {a} || {b} != {b} ? {nan} : ({a} >= {b} ? {a} : {b}))"),
        BinOp::Atan2 => format!("atan2({a}, {b})"),
    }
}

/// The NVRTC source of `program` as one fused kernel `name(in0, .., inK, y, n)`: each
/// thread loads its element of every input as f64, runs the program's instructions in
/// registers (the same f64 operations as the CPU's evaluator, with no contraction) and
/// stores the result with the output's cast. A complex input or output is passed as an
/// array of its parts (`ts_f32` for complex64), element `i`'s parts at `2i` and `2i + 1`.
#[must_use]
pub fn map_source(name: &str, program: &Program, inputs: &[DType], output: DType) -> String {
    let mut s = String::with_capacity(COMMON.len() + CMATH.len() + 1024);
    s.push_str(COMMON);
    if program
        .code()
        .iter()
        .any(|i| matches!(i, Instr::ComplexUn { .. } | Instr::ComplexPow { .. }))
    {
        s.push_str(CMATH);
    }
    let _ = write!(s, "\nextern \"C\" __global__ void {name}(");
    for (k, d) in inputs.iter().enumerate() {
        let _ = write!(s, "const {}* __restrict__ in{k}, ", cuda_type(d.part()));
    }
    let _ = writeln!(
        s,
        "{}* __restrict__ y, unsigned long long n) {{",
        cuda_type(output.part())
    );
    let regs = program
        .code()
        .iter()
        .map(|i| i.last_dst() + 1)
        .max()
        .unwrap_or(0);
    s.push_str("    TS_FOR_EACH(i, n) {\n");
    if regs > 0 {
        let names: Vec<String> = (0..regs).map(|r| format!("r{r}")).collect();
        let _ = writeln!(s, "        double {};", names.join(", "));
    }
    for ins in program.code() {
        let line = match *ins {
            Instr::Load { stream, dst } => format!(
                "r{dst} = Elem<{}>::to_f64(in{stream}[i]);",
                cuda_type(inputs[stream])
            ),
            Instr::LoadPart { stream, imag, dst } => format!(
                "r{dst} = Elem<{}>::to_f64(in{stream}[2 * i + {}]);",
                cuda_type(inputs[stream].part()),
                u8::from(imag)
            ),
            Instr::Un(op, a, dst) => format!("r{dst} = {};", unary(op, &operand(a))),
            Instr::Bin(op, a, b, dst) => {
                format!("r{dst} = {};", binary(op, &operand(a), &operand(b)))
            }
            Instr::Where(c, a, b, dst) => format!(
                "r{dst} = {} == 0.0 ? {} : {};",
                operand(c),
                operand(b),
                operand(a)
            ),
            Instr::Fma(a, b, c, dst) => format!(
                "r{dst} = fma({}, {}, {});",
                operand(a),
                operand(b),
                operand(c)
            ),
            Instr::ComplexUn {
                op,
                re,
                im,
                dst_re,
                dst_im,
            } => format!(
                "ts_c{}({}, {}, &r{dst_re}, &r{dst_im});",
                complex_function(op),
                operand(re),
                operand(im)
            ),
            Instr::ComplexPow {
                a,
                b,
                dst_re,
                dst_im,
            } => format!(
                "ts_cpow({}, {}, {}, {}, &r{dst_re}, &r{dst_im});",
                operand(a.0),
                operand(a.1),
                operand(b.0),
                operand(b.1)
            ),
        };
        let _ = writeln!(s, "        {line}");
    }
    if output.is_complex() {
        // a real result's imaginary part is +0, as numpy casts it
        let t = cuda_type(output.part());
        let im = program.result_imag().unwrap_or(Operand::Const(0.0));
        let _ = writeln!(
            s,
            "        y[2 * i] = Elem<{t}>::from_f64({});\n        y[2 * i + 1] = Elem<{t}>::from_f64({});\n    }}\n}}",
            operand(program.result()),
            operand(im)
        );
    } else {
        let _ = writeln!(
            s,
            "        y[i] = Elem<{}>::from_f64({});\n    }}\n}}",
            cuda_type(output),
            operand(program.result())
        );
    }
    s
}
