//! Shapes as people write them (`3075200x512`): formatting for messages and parsing
//! from the command line. The lowest layer beside element types: every other one prints
//! shapes.

use crate::error::{Error, Result};

/// Formats a shape the way the command line takes it: `3075200x512`.
#[must_use]
pub fn fmt_shape(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

/// Parses a shape such as `3075200x512` or `4,20000,20000`.
///
/// # Errors
/// [`Error::Invalid`] if an entry is not a non-negative integer.
pub fn parse_shape(s: &str) -> Result<Vec<usize>> {
    let parts: Vec<&str> = s.split(['x', 'X', ',', '*']).map(str::trim).collect();
    if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(Error::invalid(format!(
            "cannot parse shape '{s}': expected dimensions separated by 'x', e.g. 3075200x512"
        )));
    }
    parts
        .iter()
        .map(|p| {
            p.parse::<usize>().map_err(|_| {
                Error::invalid(format!(
                    "cannot parse shape '{s}': '{p}' is not a non-negative integer"
                ))
            })
        })
        .collect()
}
