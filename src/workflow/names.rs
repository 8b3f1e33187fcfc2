//! The names in a pipeline step's expression: found, substituted (how steps fuse) and
//! traced through values written in f64 because fusing them grew too long.

use std::collections::BTreeMap;

/// The deepest nesting of parentheses in `expr`.
pub(super) fn paren_depth(expr: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in expr.chars() {
        match c {
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// Identifier tokens of `expr`: `(start, end, next non-space char)` in char indices.
fn idents(chars: &[char]) -> Vec<(usize, usize, Option<char>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        // an identifier starts with a letter or `_` not glued to a number (1e-3, 2j, and
        // after a trailing point: 2.e3, 2.j)
        let glued = i > 0
            && (chars[i - 1].is_ascii_alphanumeric()
                || (chars[i - 1] == '.' && i > 1 && chars[i - 2].is_ascii_digit()));
        if is_ident_start(chars[i]) && !glued {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let next = chars[i..].iter().copied().find(|c| !c.is_whitespace());
            out.push((start, i, next));
        } else {
            i += 1;
        }
    }
    out
}

/// The identifiers of `expr` that are names (not functions: not followed by `(`; not
/// `nan` or `inf`), with whether each is indexed (`s[3]`).
pub(crate) fn expr_names(expr: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = expr.chars().collect();
    idents(&chars)
        .into_iter()
        .filter_map(|(a, b, next)| {
            let name: String = chars[a..b].iter().collect();
            let keep = next != Some('(') && !matches!(name.as_str(), "nan" | "inf");
            keep.then_some((name, next == Some('[')))
        })
        .collect()
}

/// `expr` with every name `from` (not a function call) replaced by `to`.
pub(super) fn substitute(expr: &str, from: &str, to: &str) -> String {
    substitute_all(expr, |name| (name == from).then(|| to.to_string()))
}

/// `expr` with every name (not a function) that `to` maps replaced, in one pass: a
/// replacement is not itself replaced (`{a = "b", b = "a"}` swaps them).
pub(super) fn substitute_all(expr: &str, to: impl Fn(&str) -> Option<String>) -> String {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let mut at = 0;
    for (a, b, next) in idents(&chars) {
        out.extend(&chars[at..a]);
        let name: String = chars[a..b].iter().collect();
        match to(&name) {
            Some(t) if next != Some('(') => out.push_str(&t),
            _ => out.push_str(&name),
        }
        at = b;
    }
    out.extend(&chars[at..]);
    out
}

/// stands for.
pub(super) fn expand_names(expr: &str, proxy: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (n, _) in expr_names(expr) {
        for m in proxy.get(&n).cloned().unwrap_or_else(|| vec![n]) {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// The `like` of a map job over `expr`: empty unless it reads a value written in f64
/// for length.
pub(super) fn like_of(expr: &str, proxy: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    if expr_names(expr).iter().any(|(n, _)| proxy.contains_key(n)) {
        expand_names(expr, proxy)
    } else {
        Vec::new()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_and_substitution() {
        let n = expr_names("where(x > 0, sqrt(x), s[3]) + nan * y1e");
        let names: Vec<&str> = n.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["x", "x", "s", "y1e"]);
        assert!(n[2].1);
        // imaginary literals and exponents after a trailing point are no names
        let n = expr_names("z * 2j + 2.j - 2.e3 + .5J + j");
        let names: Vec<&str> = n.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["z", "j"]);
        assert_eq!(
            substitute("x + exp(x) * xx", "x", "(a*2)"),
            "(a*2) + exp((a*2)) * xx"
        );
        assert_eq!(substitute("max(x, 1)", "max", "y"), "max(x, 1)");
        // `names` maps in one pass: a swap and a chain are not applied twice
        let names: BTreeMap<&str, &str> = [("a", "b"), ("b", "a"), ("x", "y"), ("y", "z")].into();
        let to = |n: &str| names.get(n).map(|t| (*t).to_string());
        assert_eq!(substitute_all("a - b + x * y", to), "b - a + y * z");
    }
}
