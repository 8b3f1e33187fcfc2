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
    let p = Program::compile(&parse("(s[7] - s[3]) / (s[7] + s[3]) + 2 * 3").unwrap());
    assert_eq!(p.streams.len(), 2);
    assert_eq!(
        p.code()
            .iter()
            .filter(|i| matches!(i, Instr::Load { .. }))
            .count(),
        2
    );
}
