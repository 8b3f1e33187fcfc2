//! `map`: an element-wise expression over named inputs, compiled once and evaluated per
//! tile, with nodata masking.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::format::TensorFile;
use crate::scheduler::InputStream;
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, map_rule, open_named};
use crate::tiling::BoxPlan;
use crate::{DType, Engine, Plan, Result, RunReport};

/// An elementwise expression over named inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapSpec {
    /// The expression.
    pub expr: String,
    /// The inputs, by the names the expression uses.
    pub inputs: Vec<(String, Source)>,
    /// Output file.
    pub output: PathBuf,
    /// Output dtype (default: the widest float input, f64 if none).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// The output's nodata value (`"nan"`, `"-9999"`), given to the pixels where an
    /// input is nodata and written to a GeoTIFF output (see [`crate::MapNodata`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
    /// Compute the pixels where an input is nodata like any other. Always written
    /// out, so that a run from before nodata masking is not resumed as this one.
    #[serde(default)]
    pub ignore_nodata: bool,
    /// The nodata value of named inputs in place of their files' (`None`: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_nodata: Vec<(String, Option<String>)>,
}

impl MapSpec {
    fn rule(&self) -> crate::MapNodata {
        map_rule(self.nodata.as_ref(), self.ignore_nodata, &self.input_nodata)
    }
}

/// The inputs opened, and by name.
fn named(files: &[(String, TensorFile)]) -> Vec<(&str, &TensorFile)> {
    files.iter().map(|(n, f)| (n.as_str(), f)).collect()
}

impl PipelineStep for MapSpec {
    const KEYS: Option<&'static [&'static str]> =
        Some(&["expr", "names", "dtype", "nodata", "ignore_nodata"]);
    /// A pipeline's `map` reads the names its expression uses.
    const NAMES: &'static [&'static str] = &[];
}

impl Operation for MapSpec {
    fn inputs(&self) -> Vec<&Path> {
        self.inputs.iter().map(|(_, s)| s.path.as_path()).collect()
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (
            self.inputs.iter_mut().map(|(_, s)| s).collect(),
            &mut self.output,
        )
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        // the shape the expression iterates over (a plane `x[k]` of an input is one axis
        // short of it) and its default dtype, as the run binds them; nodata refused
        // before the job is split
        let files = open_named(&self.inputs)?;
        let bound = Engine::bind_map(&self.expr, &named(&files), self.dtype, &self.rule())?;
        Ok(OutputLayout {
            shape: bound.shape,
            dtype: bound.dtype,
            halo_rows: (0, 0),
        })
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let files = open_named(&self.inputs)?;
        let named = named(&files);
        // refused here as the run would refuse it: a nodata value the output does not
        // hold, masked pixels without a value to give them
        Engine::bind_map(&self.expr, &named, self.dtype, &self.rule())?;
        e.plan_map(&self.expr, &named, self.dtype)
            .map(SpecPlan::Flat)
    }

    fn boxes(
        &self,
        e: &Engine,
        flat: &Plan,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        let files = open_named(&self.inputs)?;
        let (_, streams, _, _): (_, Vec<InputStream<'_>>, _, _) =
            Engine::bind(&self.expr, &named(&files))?;
        e.elementwise_boxes(flat, &streams, &self.output, shape, dtype)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let files = open_named(&self.inputs)?;
        // the georeferencing of the first input that has one
        let e = match files.iter().find(|(_, f)| f.georef().is_some()) {
            Some((_, f)) => georef_from(e, f, None),
            None => e.clone(),
        };
        e.map_with(
            &self.expr,
            &named(&files),
            &self.output,
            self.dtype,
            &self.rule(),
        )
    }
}

/// The `map` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Evaluate an elementwise expression over named inputs in one pass",
    after_help = "Examples:
  tilestream map '(x*2+1)' y.npy --in x=x.npy --dtype f16
  tilestream map 'where(a > b, a - b, 0)' d.npy --in a=a.npy --in b=b.npy
  tilestream map '(s[7] - s[3]) / (s[7] + s[3])' ndvi.npy --in s=scene.npy   # bands of one file

Operators: + - * / ** (right-assoc), unary -, < <= > >= == != (give 1 or 0).
Functions: abs sqrt exp log log1p sin cos tanh floor ceil round isnan min max atan2(y,x)
clip(x,lo,hi) where(cond,a,b) fma(a,b,c) (a*b+c rounded once). Literals: 1, 2.5, 1e-3, nan,
inf, 2j. Evaluated in f64, cast once at the end.

Complex inputs and values (2j, complex(re,im)) take + - * / ** unary -, comparisons, abs
isnan min max clip where round sqrt exp log log1p sin cos tanh, and real imag conj angle,
computed as numpy computes complex128 (floor ceil atan2 fma: numpy has no complex form):
  tilestream map 'abs(s[0] * conj(s[1]))' mag.npy --in s=slc_pair.npy

Nodata: where an input is nodata (a GeoTIFF pixel equal to its GDAL nodata value), the
output is the output's nodata value: --nodata, by default nan for a float output and the
inputs' shared nodata value for an integer one (refused when there is none to give).
A GeoTIFF output carries that value as its nodata. --in-nodata x=-9999 says an input's
nodata value where its file cannot (.npy, raw). --ignore-nodata computes those pixels like
any other: give it to fill them yourself (where(isnan(x), 0, x) is masked again without)."
)]
pub struct MapArgs {
    /// The expression, e.g. '(x*2+1)' or '(s[7] - s[3]) / (s[7] + s[3])'.
    #[arg(allow_hyphen_values = true)]
    pub expr: String,
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    /// A named input, NAME=FILE (repeatable).
    #[arg(long = "in", value_name = "NAME=FILE", required = true, value_parser = clap::value_parser!(std::ffi::OsString))]
    pub inputs: Vec<std::ffi::OsString>,
    /// Output dtype (default: the widest float input, f64 if there is none).
    #[arg(long)]
    pub dtype: Option<String>,
    /// The output's nodata value (nan, -9999): given to the pixels where an input is
    /// nodata, and written to a GeoTIFF output (default: nan for a float output, the
    /// inputs' nodata value for an integer one).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    pub nodata: Option<String>,
    /// Compute the pixels where an input is nodata like any other (no masking).
    #[arg(long)]
    pub ignore_nodata: bool,
    /// The nodata value of input NAME, in place of what its file says (a .npy or raw
    /// file says none; VALUE none: no nodata). Repeatable.
    #[arg(long, value_name = "NAME=VALUE", allow_hyphen_values = true)]
    pub in_nodata: Vec<String>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for MapArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        let inputs = named_sources(&self.inputs, &self.raw)?;
        Ok(crate::spec::OpSpec::Map(MapSpec {
            expr: self.expr.clone(),
            input_nodata: input_nodata(&self.in_nodata, &inputs)?,
            inputs,
            output: self.output.clone(),
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
            nodata: self.nodata.clone(),
            ignore_nodata: self.ignore_nodata,
        }))
    }
}

/// The `--in NAME=FILE` inputs (the file's path may be any bytes, as paths may).
#[cfg(feature = "cli")]
fn named_sources(
    specs: &[std::ffi::OsString],
    raw: &crate::spec::cli::RawSpec,
) -> Result<Vec<(String, Source)>> {
    use std::os::unix::ffi::OsStrExt;
    specs
        .iter()
        .map(|s| {
            let bytes = s.as_bytes();
            let bad = || {
                crate::Error::invalid(format!(
                    "--in '{}': expected NAME=FILE, e.g. --in x=x.npy",
                    s.to_string_lossy().escape_debug()
                ))
            };
            let eq = bytes.iter().position(|&b| b == b'=').ok_or_else(bad)?;
            let (name, path) = (&bytes[..eq], &bytes[eq + 1..]);
            let name = std::str::from_utf8(name).map_err(|_| bad())?.trim();
            if name.is_empty() || path.is_empty() {
                return Err(bad());
            }
            let path = Path::new(std::ffi::OsStr::from_bytes(path));
            Ok((name.to_string(), crate::spec::cli::source(path, raw)?))
        })
        .collect()
}

/// `--in-nodata NAME=VALUE` of `map`: the nodata value of the input NAME in place of
/// what its file says (`none`: it has none).
#[cfg(feature = "cli")]
fn input_nodata(
    specs: &[String],
    inputs: &[(String, Source)],
) -> Result<Vec<(String, Option<String>)>> {
    specs
        .iter()
        .map(|s| {
            let (name, v) = s
                .split_once('=')
                .map(|(n, v)| (n.trim(), v.trim()))
                .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                .ok_or_else(|| {
                    crate::Error::invalid(format!(
                        "--in-nodata '{}': expected NAME=VALUE, e.g. --in-nodata x=-9999",
                        s.escape_debug()
                    ))
                })?;
            if !inputs.iter().any(|(n, _)| n == name) {
                let known: Vec<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
                return Err(crate::Error::invalid(format!(
                    "--in-nodata {}: no input is named {} (inputs: {})",
                    s.escape_debug(),
                    name.escape_debug(),
                    known.join(", ")
                )));
            }
            Ok((
                name.to_string(),
                (!v.eq_ignore_ascii_case("none")).then(|| v.to_string()),
            ))
        })
        .collect()
}
