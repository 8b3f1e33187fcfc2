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

/// One `[[steps]]` table as written: its operation, the name of its result, and the
/// operation's own keys, checked against the operation's ([`OpSpec::pipeline_keys`])
/// and read into its spec by the fuser.
///
/// [`OpSpec::pipeline_keys`]: crate::spec::OpSpec::pipeline_keys
#[derive(Deserialize, Clone, Debug)]
pub(super) struct StepSpec {
    pub(super) op: String,
    pub(super) out: String,
    #[serde(flatten)]
    pub(super) keys: toml::Table,
}

impl StepSpec {
    /// The keys given, besides `op` and `out`.
    pub(super) fn given(&self) -> Vec<&str> {
        self.keys.keys().map(String::as_str).collect()
    }

    /// The string value of `key`, if given.
    ///
    /// # Errors
    /// A message for a value that is not a string.
    pub(super) fn text(&self, key: &str) -> std::result::Result<Option<&str>, String> {
        match self.keys.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(format!("`{key}` must be a string, not {}", v.type_str())),
        }
    }

    /// What an elementwise step does with the pixels where an input is nodata: its
    /// `nodata` (a number such as `-9999` or `nan`, or its text `"nan"`) and
    /// `ignore_nodata` keys.
    ///
    /// # Errors
    /// A message for a value of another type.
    pub(super) fn nodata_rule(&self) -> std::result::Result<crate::MapNodata, String> {
        let value = match self.keys.get("nodata") {
            None => None,
            Some(toml::Value::Float(v)) => Some(crate::format::tiff::nodata_text(*v)),
            #[allow(clippy::cast_precision_loss)] // as the number parsed as f64 would be
            Some(toml::Value::Integer(v)) => Some(crate::format::tiff::nodata_text(*v as f64)),
            Some(toml::Value::String(t)) => Some(t.clone()),
            Some(_) => {
                return Err("`nodata` must be a number or a string such as \"nan\"".into());
            }
        };
        let ignore_inputs = match self.keys.get("ignore_nodata") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(v) => {
                return Err(format!(
                    "`ignore_nodata` must be true or false, not {}",
                    v.type_str()
                ));
            }
        };
        Ok(crate::MapNodata {
            value,
            ignore_inputs,
            inputs: Vec::new(),
        })
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
