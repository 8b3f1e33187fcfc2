//! Nodata: which pixels of a map's (or an affine's) inputs are missing, and what the
//! output holds there. An input pixel is nodata when it equals its file's GDAL nodata
//! value as the file's sample type holds it (or the value given for the input by name);
//! the output there is the output's nodata value, which a GeoTIFF output carries as its
//! tag. The mask is part of the expression (`where(x == nodata, value, expr)`), so the
//! CPU and CUDA backends run it in the same one pass as the rest.

use super::Engine;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::TensorFile;
use crate::ops::expr::{self, BinOp, Expr, Program, UnOp};
use crate::scheduler::InputStream;

impl Engine {
    /// The expression an affine is run as when it masks nodata pixels or sets a nodata
    /// value (`rule`), as [`Engine::map_with`] runs it: `fma(x, scale, offset)`, the
    /// affine kernel's arithmetic, so its other pixels are the same bytes. `None` when
    /// the input has no nodata value to mask (or `rule` ignores it) and no value is set.
    ///
    /// # Errors
    /// What [`Engine::bind_map`] refuses of the map it runs as, checked here.
    pub(crate) fn affine_masked(
        input: &TensorFile,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<Option<String>> {
        let masks = !rule.ignore_inputs && input.nodata().is_some();
        if !masks && rule.value.is_none() {
            return Ok(None);
        }
        if input.dtype().is_complex() {
            return Err(Error::invalid(format!(
                "an affine of a {} input with a nodata value is not supported: give no \
                 nodata value (its pixels are all computed)",
                input.dtype()
            )));
        }
        let src = format!(
            "fma(x, {}, {})",
            expr::literal(scale),
            expr::literal(offset)
        );
        let od = dtype.unwrap_or(input.dtype());
        Self::bind_map(&src, &[("x", input)], Some(od), rule)?;
        Ok(Some(src))
    }

    /// Binds a map's expression with its nodata rule: pixels where an input (a GeoTIFF
    /// with a GDAL nodata value its type holds) is nodata become the output's nodata
    /// value, as [`MapNodata`] says; the output's nodata text comes back for a GeoTIFF
    /// output.
    ///
    /// # Errors
    /// As [`Engine::bind`]; [`Error::Invalid`] for a nodata value the output type does
    /// not hold, or masked inputs and an integer output with no nodata value to give them.
    pub(crate) fn bind_map<'a>(
        src: &str,
        inputs: &[(&str, &'a TensorFile)],
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<BoundMap<'a>> {
        use crate::format::tiff::nodata_text;
        let e = Self::parse_expr(src)?;
        let (program, streams, shape, default) = Self::bind_expr(src, &e, inputs)?;
        let od = dtype.unwrap_or(default);
        Self::check_map_output(src, &program, od)?;
        check_named(rule, inputs)?;
        let masks = if rule.ignore_inputs {
            Vec::new()
        } else {
            input_masks(&program.streams, &streams, rule)?
        };
        let value = output_value(rule, od, &masks)?;
        let mut bound = BoundMap {
            program,
            streams,
            shape,
            dtype: od,
            nodata: value.map(|v| match &rule.value {
                // an integer as given, digit for digit (u64::MAX is no f64)
                Some(t) if !od.is_float() => t
                    .trim()
                    .parse::<i128>()
                    .map_or_else(|_| format!("{}", v as i128), |n| n.to_string()),
                _ => nodata_text(v),
            }),
            masked: masks.iter().map(|(r, _)| label(r)).collect(),
        };
        if let (Some(v), false) = (value, masks.is_empty()) {
            let masked = masked_expr(&masks, v, e)?;
            let (program, streams, _, _) = Self::bind_expr(src, &masked, inputs)?;
            bound.program = program;
            bound.streams = streams;
        }
        Ok(bound)
    }
}

/// An input as a mask names it: `name`, or `name[i]` for a plane of it.
fn label(r: &expr::InputRef) -> String {
    match r.index {
        Some(i) => format!("{}[{i}]", r.name),
        None => r.name.clone(),
    }
}

/// Refuses nodata values given by name for an input there is not, or twice.
fn check_named(rule: &MapNodata, inputs: &[(&str, &TensorFile)]) -> Result<()> {
    let known: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
    for (k, (name, _)) in rule.inputs.iter().enumerate() {
        if !known.contains(&name.as_str()) {
            return Err(Error::invalid(format!(
                "nodata given for input '{}', which is not one (inputs: {})",
                crate::format::npy::shown(name),
                known.join(", ")
            )));
        }
        if rule.inputs[..k].iter().any(|(m, _)| m == name) {
            return Err(Error::invalid(format!(
                "nodata given twice for input '{}': give it once",
                crate::format::npy::shown(name)
            )));
        }
    }
    Ok(())
}

/// The streams that can be nodata, and the value their pixels have there: given by
/// `rule` (a value the input's type holds, or refused; `none` for none), else the file's.
fn input_masks(
    refs: &[expr::InputRef],
    streams: &[InputStream<'_>],
    rule: &MapNodata,
) -> Result<Vec<(expr::InputRef, f64)>> {
    use crate::format::tiff::{nodata_as, nodata_text};
    let mut masks = Vec::new();
    for (r, st) in refs.iter().zip(streams) {
        let given = rule
            .inputs
            .iter()
            .find(|(n, _)| *n == r.name)
            .map(|(_, t)| {
                t.as_deref()
                    .filter(|t| !t.trim().eq_ignore_ascii_case("none"))
            });
        let v = match given {
            Some(Some(t)) => match nodata_as(st.file.dtype(), t) {
                Some(v) => v,
                None => {
                    return Err(Error::invalid(format!(
                        "input {} is {}, which holds no nodata value '{}': give one of its \
                         values",
                        label(r),
                        st.file.dtype(),
                        crate::format::npy::shown(t.trim())
                    )));
                }
            },
            Some(None) => continue,
            None => match st.file.nodata() {
                Some((_, v)) => v,
                None => continue,
            },
        };
        // map computes in f64, where a 64-bit integer beyond 2^53 is not itself
        if v.abs() >= 2f64.powi(53) && matches!(st.file.dtype(), DType::I64 | DType::U64) {
            return Err(Error::invalid(format!(
                "input {} has nodata {}, 2^53 or more from 0, which f64 arithmetic cannot \
                 tell from its neighbours: compute those pixels like any other \
                 (`ignore_nodata`)",
                label(r),
                nodata_text(v)
            )));
        }
        masks.push((r.clone(), v));
    }
    Ok(masks)
}

/// The value the masked pixels of an `od` output take: `rule`'s, NaN for a float
/// output, or the inputs' shared nodata value an integer output holds; `None` when no
/// pixel is masked.
#[allow(clippy::float_cmp)] // nodata values are exact: equal, or not the same value
fn output_value(
    rule: &MapNodata,
    od: DType,
    masks: &[(expr::InputRef, f64)],
) -> Result<Option<f64>> {
    use crate::format::tiff::{nodata_as, nodata_text};
    let value = match &rule.value {
        // a complex output's masked pixels: the value as the real part, +0 imaginary
        Some(text) => Some(output_nodata(text, od.part())?),
        None if masks.is_empty() => None,
        None if od.is_float() || od.is_complex() => Some(f64::NAN),
        None => {
            // an integer output: the inputs' nodata value, when they share one it holds
            let v = masks[0].1;
            let shared = masks.iter().all(|m| m.1 == v);
            match nodata_as(od, &nodata_text(v)) {
                Some(held) if shared && held == v => Some(v),
                _ => {
                    let what: Vec<String> = masks
                        .iter()
                        .map(|(r, v)| format!("{} {}", label(r), nodata_text(*v)))
                        .collect();
                    return Err(Error::invalid(format!(
                        "the pixels where an input is nodata ({}) take the output's nodata \
                         value, and a {od} output holds no such shared value: give one with \
                         `nodata=VALUE`, a float `dtype` (NaN there), or `ignore_nodata` to \
                         compute those pixels like any other",
                        what.join(", ")
                    )));
                }
            }
        }
    };
    if let Some(v) = value
        && !masks.is_empty()
        && v.abs() >= 2f64.powi(53)
        && matches!(od, DType::I64 | DType::U64)
    {
        return Err(Error::invalid(format!(
            "nodata {} is 2^53 or more from 0, which f64 arithmetic cannot give the masked \
             pixels of a {od} output exactly: give a value nearer 0",
            nodata_text(v)
        )));
    }
    Ok(value)
}

/// `where(any input is nodata, v, e)`: the same streams, one pass.
fn masked_expr(masks: &[(expr::InputRef, f64)], v: f64, e: Expr) -> Result<Expr> {
    let cond = masks
        .iter()
        .map(|(r, nd)| {
            let var = Box::new(Expr::Var {
                name: r.name.clone(),
                index: r.index,
                column: r.column,
            });
            if nd.is_nan() {
                Expr::Unary(UnOp::IsNan, var)
            } else {
                Expr::Binary(BinOp::Eq, var, Box::new(Expr::Num(*nd)))
            }
        })
        .reduce(|a, b| Expr::Binary(BinOp::Add, Box::new(a), Box::new(b)))
        .ok_or_else(|| Error::Internal("no mask".into()))?;
    Ok(Expr::Where(
        Box::new(cond),
        Box::new(Expr::Num(v)),
        Box::new(e),
    ))
}

/// What [`Engine::map_with`] does with the pixels where an input is nodata: those of a
/// GeoTIFF input equal to its GDAL nodata value (as its sample type holds it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapNodata {
    /// The output's nodata value (`"nan"`, `"-9999"`), given to those pixels and written
    /// to a GeoTIFF output; it must be a value of the output type exactly. `None`: NaN
    /// for a float output; for an integer output, the inputs' nodata value when they
    /// share one it holds (else the map is refused).
    pub value: Option<String>,
    /// Compute those pixels like any other, as if no input had a nodata value (the
    /// output then carries `value`, if given, as a tag only).
    pub ignore_inputs: bool,
    /// The nodata value of named inputs in place of what their files say (`None`: the
    /// input has none), for files that cannot carry one: a `.npy` with a -9999 convention,
    /// a pipeline's intermediate values.
    pub inputs: Vec<(String, Option<String>)>,
}

/// A map's expression bound to its inputs, nodata masking included.
pub(crate) struct BoundMap<'a> {
    /// The compiled expression (inside `where(input is nodata, value, ...)` when masked).
    pub program: Program,
    /// Its streams.
    pub streams: Vec<InputStream<'a>>,
    /// The shape it iterates over.
    pub shape: Vec<usize>,
    /// The output dtype.
    pub dtype: DType,
    /// The output's nodata value, as GeoTIFF tag text.
    pub nodata: Option<String>,
    /// The masked inputs (`s[3]`), for the report.
    pub masked: Vec<String>,
}

/// A nodata value the user gave for an output of `dtype`: its value, if the type holds
/// it exactly.
#[allow(clippy::float_cmp)] // exactly the value, or refused
fn output_nodata(text: &str, dtype: DType) -> Result<f64> {
    let text = text.trim();
    let Ok(v) = text.parse::<f64>() else {
        return Err(Error::invalid(format!(
            "nodata '{}' is not a number: give one such as -9999, 0 or nan",
            crate::format::npy::shown(text)
        )));
    };
    match crate::format::tiff::nodata_as(dtype, text) {
        Some(held) if held == v || (held.is_nan() && v.is_nan()) => Ok(held),
        Some(held) => Err(Error::invalid(format!(
            "nodata {text} is not exactly representable in {dtype} (it would be {}): give a \
             value the output type holds",
            crate::format::tiff::nodata_text(held)
        ))),
        None => {
            let range = if dtype == DType::Bool {
                "0 or 1".to_string()
            } else {
                let bits = 8 * dtype.size() as u32;
                if dtype.is_unsigned() {
                    format!("an integer from 0 to {}", 2u128.pow(bits) - 1)
                } else {
                    format!(
                        "an integer from -{} to {}",
                        2u128.pow(bits - 1),
                        2u128.pow(bits - 1) - 1
                    )
                }
            };
            Err(Error::invalid(format!(
                "nodata {text} does not fit the {dtype} output: give {range}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_nodata_takes_exactly_the_values_the_type_holds() {
        let ok = |t: &str, d: DType| output_nodata(t, d).map_err(|e| e.to_string());
        for (text, dtype, want) in [
            ("0", DType::U8, 0.0),
            ("255", DType::U8, 255.0),
            ("-128", DType::I8, -128.0),
            ("65535", DType::U16, 65535.0),
            ("-9999", DType::F32, -9999.0),
            ("-10000", DType::F16, -10000.0),
            ("1", DType::Bool, 1.0),
            (" -9999\n", DType::I16, -9999.0),
            ("-3.4028234663852886e38", DType::F32, f64::from(f32::MIN)),
            ("inf", DType::F16, f64::INFINITY),
            // as the f64 the value compares as (u64::MAX is 2^64 there)
            ("18446744073709551615", DType::U64, 2f64.powi(64)),
        ] {
            assert_eq!(ok(text, dtype), Ok(want), "{text:?} {dtype}");
        }
        assert!(ok("nan", DType::F32).is_ok_and(f64::is_nan));
        assert!(ok("NaN", DType::BF16).is_ok_and(f64::is_nan));
        for (text, dtype, says) in [
            (
                "256",
                DType::U8,
                "does not fit the u8 output: give an integer from 0 to 255",
            ),
            ("-1", DType::U16, "from 0 to 65535"),
            ("0.5", DType::I32, "from -2147483648 to 2147483647"),
            ("nan", DType::I16, "does not fit the i16 output"),
            ("2", DType::Bool, "give 0 or 1"),
            (
                "-9999",
                DType::F16,
                "not exactly representable in f16 (it would be -10000)",
            ),
            ("0.1", DType::F32, "(it would be 0.10000000149011612)"),
            ("1e40", DType::F32, "(it would be inf)"),
            ("abc", DType::F32, "'abc' is not a number"),
            ("", DType::F32, "is not a number"),
            (
                "-18446744073709551615",
                DType::I64,
                "does not fit the i64 output",
            ),
        ] {
            let e = ok(text, dtype).expect_err(text);
            assert!(
                e.contains(says) && !e.contains('\n'),
                "{text:?} {dtype}: {e}"
            );
        }
    }

    #[test]
    fn input_nodata_is_the_value_the_file_type_holds() {
        use crate::format::tiff::nodata_as;
        assert_eq!(nodata_as(DType::U16, "0"), Some(0.0));
        assert_eq!(nodata_as(DType::I16, "-32768"), Some(-32768.0));
        // a float file stores the nodata value rounded to its type
        assert_eq!(nodata_as(DType::F32, "0.1"), Some(f64::from(0.1f32)));
        assert!(nodata_as(DType::F32, "nan").is_some_and(f64::is_nan));
        // values an integer file cannot hold mark no pixel
        for (d, t) in [
            (DType::U16, "-9999"),
            (DType::U8, "0.5"),
            (DType::I8, "nan"),
        ] {
            assert_eq!(nodata_as(d, t), None, "{d} {t}");
        }
        assert_eq!(nodata_as(DType::F32, "nodata"), None);
        // integers from their digits: u64::MAX is held (as the f64 it compares as), 2^64
        // is not; bool holds 0 and 1
        assert_eq!(
            nodata_as(DType::U64, "18446744073709551615"),
            Some(2f64.powi(64))
        );
        assert_eq!(nodata_as(DType::U64, "18446744073709551616"), None);
        assert_eq!(
            nodata_as(DType::I64, "-9223372036854775808"),
            Some(-(2f64.powi(63)))
        );
        assert_eq!(nodata_as(DType::I64, "9223372036854775808"), None);
        assert_eq!(nodata_as(DType::I16, "-1e4"), Some(-10000.0));
        assert_eq!(nodata_as(DType::Bool, "1"), Some(1.0));
        assert_eq!(nodata_as(DType::Bool, "2"), None);
    }
}
