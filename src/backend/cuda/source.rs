//! The CUDA C source of tilestream's kernels, assembled for NVRTC: the common header
//! (`kernels/common.cuh`: element types and casts), the operation's templates
//! (`kernels/*.cu`) and one `extern "C"` wrapper per instantiation, named
//! `<op>_<in>_<out>` (`affine_f32_f16`). Pure text, so it is tested without a GPU; the
//! compilation test (`tests/it/cuda_kernels.rs`) hands it to NVRTC.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::ops::expr::{BinOp, Instr, Operand, Program, UnOp};

/// Element types and casts shared by every kernel.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");
/// Templates of the elementwise kernels.
pub const ELEMENTWISE: &str = include_str!("../../../kernels/elementwise.cu");

/// The CUDA type of `d` in the kernels (`ts_f32`).
#[must_use]
pub fn cuda_type(d: DType) -> String {
    format!("ts_{}", d.name())
}

/// An elementwise kernel family: one kernel per (input, output) dtype pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elementwise {
    /// `y = cast(fma(x, scale, offset))`: `(x, y, n, scale, offset)`.
    Affine,
    /// `y = cast(x)`: `(x, y, n)`.
    Cast,
    /// `y = cast((x - mean[c]) / sd[c])`, `c = (start + i) % cols`:
    /// `(x, y, n, start, mean, sd, cols)`.
    Standardize,
}

impl Elementwise {
    /// Every family.
    pub const ALL: [Elementwise; 3] = [
        Elementwise::Affine,
        Elementwise::Cast,
        Elementwise::Standardize,
    ];

    /// The operation's part of kernel names.
    #[must_use]
    pub fn op_name(self) -> &'static str {
        match self {
            Elementwise::Affine => "affine",
            Elementwise::Cast => "cast",
            Elementwise::Standardize => "standardize",
        }
    }

    /// The kernel's name for one dtype pair (`affine_f32_f16`).
    #[must_use]
    pub fn kernel_name(self, input: DType, output: DType) -> String {
        format!("{}_{}_{}", self.op_name(), input.name(), output.name())
    }

    fn wrapper(self, input: DType, output: DType) -> String {
        let (i, o) = (cuda_type(input), cuda_type(output));
        let name = self.kernel_name(input, output);
        let (params, call) = match self {
            Elementwise::Affine => (
                "unsigned long long n, double scale, double offset",
                "ts_affine(x, y, n, scale, offset)",
            ),
            Elementwise::Cast => ("unsigned long long n", "ts_cast(x, y, n)"),
            Elementwise::Standardize => (
                "unsigned long long n, unsigned long long start, const double* mean, \
                 const double* sd, unsigned long long cols",
                "ts_standardize(x, y, n, start, mean, sd, cols)",
            ),
        };
        format!(
            "extern \"C\" __global__ void {name}(const {i}* x, {o}* y, {params}) {{ {call}; }}\n"
        )
    }
}

/// The NVRTC source of the elementwise kernels `kernels` (family, input, output).
#[must_use]
pub fn elementwise_source(kernels: &[(Elementwise, DType, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + ELEMENTWISE.len() + 200 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(ELEMENTWISE);
    s.push('\n');
    for &(k, i, o) in kernels {
        let _ = write!(s, "{}", k.wrapper(i, o));
    }
    s
}

/// Every elementwise kernel: each family for every pair of dtypes.
#[must_use]
pub fn all_elementwise() -> Vec<(Elementwise, DType, DType)> {
    let mut v = Vec::new();
    for k in Elementwise::ALL {
        for i in DType::ALL {
            for o in DType::ALL {
                v.push((k, i, o));
            }
        }
    }
    v
}

/// The name of the fused kernel of a `map` program: `map_` and a hash of the program
/// and its dtypes, so one run's kernel is compiled once.
#[must_use]
pub fn map_kernel_name(program: &Program, inputs: &[DType], output: DType) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?}", program.code()).hash(&mut h);
    format!("{:?}", program.result()).hash(&mut h);
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
    }
}

/// The NVRTC source of `program` as one fused kernel `name(in0, .., inK, y, n)`: each
/// thread loads its element of every input as f64, runs the program's instructions in
/// registers (the same f64 operations as the CPU's evaluator, with no contraction) and
/// stores the result with the output's cast.
#[must_use]
pub fn map_source(name: &str, program: &Program, inputs: &[DType], output: DType) -> String {
    let mut s = String::with_capacity(COMMON.len() + 1024);
    s.push_str(COMMON);
    let _ = write!(s, "\nextern \"C\" __global__ void {name}(");
    for (k, d) in inputs.iter().enumerate() {
        let _ = write!(s, "const {}* __restrict__ in{k}, ", cuda_type(*d));
    }
    let _ = writeln!(
        s,
        "{}* __restrict__ y, unsigned long long n) {{",
        cuda_type(output)
    );
    let regs = program
        .code()
        .iter()
        .map(|i| match *i {
            Instr::Load { dst, .. }
            | Instr::Un(_, _, dst)
            | Instr::Bin(_, _, _, dst)
            | Instr::Where(_, _, _, dst) => dst + 1,
        })
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
        };
        let _ = writeln!(s, "        {line}");
    }
    let _ = writeln!(
        s,
        "        y[i] = Elem<{}>::from_f64({});\n    }}\n}}",
        cuda_type(output),
        operand(program.result())
    );
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_map_program_becomes_one_fused_kernel() {
        let p = Program::compile(&crate::ops::expr::parse("(a - b) / (a + b) * 2").unwrap());
        let name = map_kernel_name(&p, &[DType::U16, DType::U16], DType::F32);
        let src = map_source(&name, &p, &[DType::U16, DType::U16], DType::F32);
        assert!(src.contains(&format!("void {name}(const ts_u16* __restrict__ in0, const ts_u16* __restrict__ in1, ts_f32* __restrict__ y")), "{src}");
        assert!(src.contains("r0 = Elem<ts_u16>::to_f64(in0[i]);"), "{src}");
        // the constant 2 exactly, by its bits
        assert!(src.contains("0x4000000000000000"), "{src}");
        assert!(src.contains("y[i] = Elem<ts_f32>::from_f64(r"), "{src}");
        // another dtype, another kernel
        assert_ne!(
            name,
            map_kernel_name(&p, &[DType::U16, DType::U16], DType::F64)
        );
    }

    #[test]
    fn kernel_names_follow_op_in_out() {
        assert_eq!(
            Elementwise::Affine.kernel_name(DType::F32, DType::F16),
            "affine_f32_f16"
        );
        assert_eq!(
            Elementwise::Standardize.kernel_name(DType::U8, DType::BF16),
            "standardize_u8_bf16"
        );
    }

    #[test]
    fn the_source_holds_one_wrapper_per_kernel_and_each_type_is_declared() {
        let all = all_elementwise();
        assert_eq!(all.len(), 3 * 13 * 13);
        let src = elementwise_source(&all);
        for &(k, i, o) in &all {
            let name = format!(" {}(", k.kernel_name(i, o));
            assert_eq!(src.matches(&name).count(), 1, "{name}");
        }
        for d in DType::ALL {
            let ty = cuda_type(d);
            let traits = COMMON.contains(&format!("Elem<{ty}>"))
                || COMMON.contains(&format!("TS_INT_ELEM({ty},"));
            assert!(traits, "kernels/common.cuh has no Elem<{ty}>");
        }
    }
}
