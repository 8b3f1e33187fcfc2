//! The command line's side of the vocabulary: each operation's module defines the
//! arguments of its subcommand (a clap `Args` struct beside its spec) and how they make
//! its spec (`Arguments` in `src/spec/ops/mod.rs`); `operations!` lists them once as the
//! `Op` subcommands. This module holds what they share: how a raw input's layout is
//! given, and dtypes.
//! Built with the `cli` feature only: the library and the Python extension do without
//! clap.

use std::path::Path;

use clap::Args;

use super::{RawLayout, Source};
use crate::format::parse_shape;
use crate::{DType, Error, Result};

/// How to read an input that is not self-describing.
#[derive(Args, Clone, Debug)]
pub struct RawSpec {
    /// Shape of a raw (headerless) input, e.g. 3075200x512.
    #[arg(long)]
    pub shape: Option<String>,
    /// Dtype of a raw input (bool, u8..u64, i8..i64, f16, bf16, f32, f64, c64, c128).
    #[arg(long = "in-dtype")]
    pub in_dtype: Option<String>,
}

/// The input `path`, with its raw layout when `--shape` and `--in-dtype` give one.
///
/// # Errors
/// [`Error::Invalid`] for a shape or dtype that does not parse, or only one of them.
pub fn source(path: &Path, raw: &RawSpec) -> Result<Source> {
    Ok(Source {
        path: path.to_path_buf(),
        raw: match (&raw.shape, &raw.in_dtype) {
            (Some(s), Some(d)) => Some(RawLayout {
                shape: parse_shape(s)?,
                dtype: d.parse()?,
                offset: 0,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::invalid(
                    "a raw input needs both --shape and --in-dtype",
                ));
            }
        },
        rows: None,
        nodata: None,
    })
}

/// An optional `--dtype`.
///
/// # Errors
/// [`Error::Invalid`] for a name that is not a dtype.
pub(crate) fn dtype_opt(d: Option<&String>) -> Result<Option<DType>> {
    d.map(|s| s.parse()).transpose()
}
