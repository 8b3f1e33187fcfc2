//! Unit tests of the expression parser and compiler.
#![allow(clippy::unwrap_used, clippy::float_cmp)]
use super::*;

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
    let p = Program::compile(&parse("(s[7] - s[3]) / (s[7] + s[3]) + 2 * 3").unwrap()).unwrap();
    assert_eq!(p.streams.len(), 2);
    assert_eq!(
        p.code()
            .iter()
            .filter(|i| matches!(i, Instr::Load { .. }))
            .count(),
        2
    );
}

#[test]
fn imaginary_literals_and_complex_functions_parse() {
    assert_eq!(parse("2j").unwrap(), Expr::Imag(2.0));
    assert_eq!(parse("1.5e-3J").unwrap(), Expr::Imag(1.5e-3));
    // `2jx` is no literal: a number, then a name
    assert!(
        parse("2jx")
            .unwrap_err()
            .message
            .contains("unexpected 'jx'")
    );
    assert!(matches!(
        parse("conj(z)").unwrap(),
        Expr::Complex(ComplexFn::Conj, _)
    ));
    assert!(matches!(
        parse("complex(a, b)").unwrap(),
        Expr::MakeComplex(..)
    ));
    assert!(matches!(
        parse("atan2(a, b)").unwrap(),
        Expr::Binary(BinOp::Atan2, ..)
    ));
    assert!(
        parse("real(a, b)")
            .unwrap_err()
            .message
            .contains("real() takes 1 argument, got 2")
    );
}

#[test]
fn complex_streams_load_each_part_once_and_results_have_two_parts() {
    let e = parse("z * z + abs(z) + real(w)").unwrap();
    let p = Program::compile_typed(&e, |r| r.name == "z").unwrap();
    let parts = p
        .code()
        .iter()
        .filter(|i| matches!(i, Instr::LoadPart { stream: 0, .. }))
        .count();
    assert_eq!(parts, 2);
    assert!(p.stream_is_complex(0) && !p.stream_is_complex(1));
    assert!(p.is_complex());
    // a real value of complex inputs
    let p = Program::compile_typed(&parse("abs(z)").unwrap(), |_| true).unwrap();
    assert!(!p.is_complex() && p.result_imag().is_none());
    // constants fold through the lowering: (1 + 2j) * 3j is -6 + 3j, and x's imaginary
    // part (+0) plus 3 is 3
    let p = Program::compile(&parse("x + (1 + 2j) * 3j").unwrap()).unwrap();
    assert_eq!(p.code().len(), 2, "{:?}", p.code());
    assert!(matches!(
        p.code()[1],
        Instr::Bin(BinOp::Add, Operand::Reg(0), Operand::Const(c), _) if c == -6.0
    ));
    assert_eq!(p.result_imag(), Some(Operand::Const(3.0)));
}

#[test]
fn what_numpy_does_not_define_on_complex_values_is_refused() {
    for (src, what) in [
        ("floor(z)", "floor()"),
        ("ceil(z)", "ceil()"),
        ("fma(z, 1, 2)", "fma()"),
        ("atan2(z, 1)", "atan2()"),
    ] {
        let err = Program::compile_typed(&parse(src).unwrap(), |_| true).unwrap_err();
        assert!(
            err.message
                .starts_with(&format!("{what} of a complex value is not defined")),
            "{src}: {err}"
        );
    }
    let err = Program::compile(&parse("complex(1j, x)").unwrap()).unwrap_err();
    assert!(err.message.contains("two real values"), "{err}");
}

#[test]
fn numpy_power_shortcuts() {
    // x ** 2, x ** 0.5 and x ** -1 are what numpy computes for them
    let ops = |src: &str| {
        let p = Program::compile(&parse(src).unwrap()).unwrap();
        p.code()
            .iter()
            .filter_map(|i| match i {
                Instr::Bin(op, ..) => Some(format!("{op:?}")),
                Instr::Un(op, ..) => Some(format!("{op:?}")),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ops("x ** 2"), ["Mul"]);
    assert_eq!(ops("x ** 0.5"), ["Sqrt"]);
    assert_eq!(ops("x ** -1"), ["Div"]);
    assert_eq!(ops("x ** 3"), ["Pow"]);
}

#[test]
fn complex_functions_are_one_instruction_with_two_results_and_fold() {
    let p = Program::compile_typed(&parse("exp(z) + 1").unwrap(), |_| true).unwrap();
    let calls: Vec<_> = p
        .code()
        .iter()
        .filter_map(|i| match *i {
            Instr::ComplexUn {
                op, dst_re, dst_im, ..
            } => Some((op, dst_re, dst_im)),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    let (op, re, im) = calls[0];
    assert_eq!(op, UnOp::Exp);
    assert_eq!(im, re + 1);
    assert_eq!(
        p.regs(),
        p.code().iter().map(|i| i.last_dst() + 1).max().unwrap()
    );
    // constants fold through the same functions: exp(i pi) = -1 + 1.2246e-16 i
    let p = Program::compile(&parse("exp(1j * 3.141592653589793)").unwrap()).unwrap();
    assert!(p.code().is_empty());
    assert_eq!(p.result(), Operand::Const(-1.0));
    assert!(matches!(p.result_imag(), Some(Operand::Const(v)) if v > 1.2e-16 && v < 1.3e-16));
    // numpy's shortcuts for a real constant exponent; np.power for any other
    let ops = |src: &str| {
        let p = Program::compile_typed(&parse(src).unwrap(), |_| true).unwrap();
        (
            p.code()
                .iter()
                .filter(|i| matches!(i, Instr::ComplexPow { .. }))
                .count(),
            p.code()
                .iter()
                .filter(|i| matches!(i, Instr::ComplexUn { op: UnOp::Sqrt, .. }))
                .count(),
        )
    };
    assert_eq!(ops("z ** 2"), (0, 0));
    assert_eq!(ops("z ** -1"), (0, 0));
    assert_eq!(ops("z ** 0.5"), (0, 1));
    assert_eq!(ops("z ** 3"), (1, 0));
    assert_eq!(ops("2 ** z"), (1, 0));
    assert_eq!(ops("z ** w"), (1, 0));
}
