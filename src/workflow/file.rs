//! A pipeline file as written: its TOML read into [`FileSpec`] (syntax and unknown
//! keys refused, naming the line) and the names it gives checked, before anything is
//! fused or planned.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSpec {
    pub(super) memory: Option<String>,
    pub(super) device: Option<crate::device::DeviceRequest>,
    #[serde(default)]
    pub(super) inputs: BTreeMap<String, Spanned<String>>,
    pub(super) steps: Vec<Spanned<StepSpec>>,
    #[serde(default)]
    pub(super) outputs: BTreeMap<String, Spanned<String>>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct StepSpec {
    pub(super) op: String,
    pub(super) out: String,
    pub(super) expr: Option<String>,
    pub(super) names: Option<BTreeMap<String, String>>,
    pub(super) input: Option<String>,
    pub(super) x: Option<String>,
    pub(super) w: Option<String>,
    pub(super) dtype: Option<String>,
    pub(super) scale: Option<f64>,
    pub(super) offset: Option<f64>,
    pub(super) reduce: Option<String>,
    pub(super) axis: Option<usize>,
    pub(super) ddof: Option<u32>,
    pub(super) filter: Option<String>,
    pub(super) boundary: Option<String>,
    pub(super) nodata: Option<NodataKey>,
    pub(super) ignore_nodata: Option<bool>,
}

/// A step's `nodata`: a number (`-9999`, `nan`) or its text (`"nan"`).
#[derive(Deserialize, Clone, Debug)]
#[serde(
    untagged,
    expecting = "`nodata` must be a number or a string such as \"nan\""
)]
pub(super) enum NodataKey {
    Number(f64),
    Text(String),
}

impl StepSpec {
    /// What an elementwise step does with the pixels where an input is nodata.
    pub(super) fn nodata_rule(&self) -> crate::MapNodata {
        crate::MapNodata {
            value: self.nodata.as_ref().map(|k| match k {
                NodataKey::Number(v) => crate::format::tiff::nodata_text(*v),
                NodataKey::Text(t) => t.clone(),
            }),
            ignore_inputs: self.ignore_nodata.unwrap_or(false),
            inputs: Vec::new(),
        }
    }
}

impl StepSpec {
    /// The keys given, besides `op` and `out`.
    pub(super) fn given(&self) -> Vec<&'static str> {
        let mut k = Vec::new();
        let mut add = |name: &'static str, present: bool| {
            if present {
                k.push(name);
            }
        };
        add("expr", self.expr.is_some());
        add("names", self.names.is_some());
        add("input", self.input.is_some());
        add("x", self.x.is_some());
        add("w", self.w.is_some());
        add("dtype", self.dtype.is_some());
        add("scale", self.scale.is_some());
        add("offset", self.offset.is_some());
        add("reduce", self.reduce.is_some());
        add("axis", self.axis.is_some());
        add("ddof", self.ddof.is_some());
        add("filter", self.filter.is_some());
        add("boundary", self.boundary.is_some());
        add("nodata", self.nodata.is_some());
        add("ignore_nodata", self.ignore_nodata.is_some());
        k
    }
}

/// Most bytes of a pipeline file read (one is a few hundred bytes; this bounds what a
/// mistaken path, a device or a huge file can cost).
const PIPELINE_FILE_MAX: u64 = 1 << 20;

/// Checks that a name given to an input or a step's result is an identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 characters): names are used in expressions and
/// for the step's intermediate file inside the run's own temporary directory, so a path
/// such as `../x` or `/abs/x` must never be one.
pub(super) fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a name: use letters, digits and _ (not starting with a digit, at \
             most 64 characters)"
        ))
    }
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads a pipeline file's text and parses it (syntax and keys), errors naming the line.
pub(super) fn parse_file(path: &Path) -> Result<(String, FileSpec)> {
    let text = crate::io::own_files::read_small_input(path, PIPELINE_FILE_MAX)?;
    let spec: FileSpec = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(&text, s.start));
        Error::Invalid(format!(
            "{} line {line}: {}",
            path.display(),
            e.message().trim().replace('\n', "; ")
        ))
    })?;
    Ok((text, spec))
}
