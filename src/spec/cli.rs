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

/// How to read an input: the layout of one that is not self-describing, and the box of
/// it to read.
#[derive(Args, Clone, Debug)]
pub struct RawSpec {
    /// Shape of a raw (headerless) input, e.g. 3075200x512.
    #[arg(long)]
    pub shape: Option<String>,
    /// Dtype of a raw input (bool, u8..u64, i8..i64, f16, bf16, f32, f64, c64, c128).
    #[arg(long = "in-dtype")]
    pub in_dtype: Option<String>,
    /// Only a box of each input: START:END ranges of its last axes, comma-separated, e.g.
    /// 1000:3000,2000:4000 for rows 1000..3000 and columns 2000..4000 of every band of
    /// a scene. Only what the box touches is read (a COG's tiles, a Zarr store's chunks).
    #[arg(long, value_name = "R0:R1,C0:C1")]
    pub window: Option<String>,
}

/// Parses a `--window`: comma-separated `START:END` ranges.
///
/// # Errors
/// [`Error::Invalid`] naming the range that is not two whole numbers, start first.
pub fn parse_window(text: &str) -> Result<Vec<(u64, u64)>> {
    text.split(',')
        .map(|r| {
            let parsed = r.trim().split_once(':').and_then(|(a, b)| {
                Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?))
            });
            match parsed {
                Some((a, b)) if a <= b => Ok((a, b)),
                _ => Err(Error::invalid(format!(
                    "--window {text}: '{r}' is not a range START:END of whole numbers with \
                     START <= END (give one range per axis, the last axes, e.g. \
                     1000:3000,2000:4000)"
                ))),
            }
        })
        .collect()
}

/// The input `path`, with its raw layout when `--shape` and `--in-dtype` give one and
/// its box when `--window` gives one.
///
/// # Errors
/// [`Error::Invalid`] for a shape, dtype or window that does not parse, or only one of
/// shape and dtype.
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
        window: raw.window.as_deref().map(parse_window).transpose()?,
    })
}

/// An optional `--dtype`.
///
/// # Errors
/// [`Error::Invalid`] for a name that is not a dtype.
pub(crate) fn dtype_opt(d: Option<&String>) -> Result<Option<DType>> {
    d.map(|s| s.parse()).transpose()
}
