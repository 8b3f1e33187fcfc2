//! `clip`: each element limited to `[lo, hi]` (numpy's `np.clip`), in the input's dtype
//! unless another is given. It runs as the expression `clip(x, lo, hi)`, so both backends
//! run it (the CPU's expression evaluator, the GPU's fused map kernel) and nodata pixels
//! are masked as `map` masks them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::ops::expr::literal;
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from};
use crate::{DType, Engine, Error, Result, RunReport};

/// Each element limited to `[lo, hi]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// Lower bound.
    pub lo: f64,
    /// Upper bound (at least `lo`).
    pub hi: f64,
    /// Output dtype (default: the input's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
}

impl ClipSpec {
    /// The expression it runs, over the input named `x`.
    fn expr(&self) -> Result<String> {
        self.expr_over("x")
    }

    /// The expression it runs, over the input named `x`.
    ///
    /// # Errors
    /// Bounds that are not a range.
    fn expr_over(&self, x: &str) -> Result<String> {
        if self.lo.is_nan() || self.hi.is_nan() || self.lo > self.hi {
            return Err(Error::invalid(format!(
                "clip: bounds [{}, {}] are not a range: give lo <= hi, neither nan",
                self.lo, self.hi
            )));
        }
        Ok(format!(
            "clip({x}, {}, {})",
            literal(self.lo),
            literal(self.hi)
        ))
    }
}

impl PipelineStep for ClipSpec {
    const KEYS: Option<&'static [&'static str]> =
        Some(&["input", "lo", "hi", "dtype", "nodata", "ignore_nodata"]);
}

impl Operation for ClipSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn expression(&self, names: &[&str]) -> Result<Option<String>> {
        self.expr_over(names[0]).map(Some)
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        self.expr()?;
        OutputLayout::same(&self.input, self.dtype)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        let od = Some(self.dtype.unwrap_or(x.dtype()));
        e.plan_map(&self.expr()?, &[("x", &x)], od)
            .map(SpecPlan::Flat)
    }

    fn elementwise_input(&self) -> Option<&Source> {
        Some(&self.input)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let od = Some(self.dtype.unwrap_or(x.dtype()));
        let rule = crate::MapNodata::default();
        let mut r = georef_from(e, &x, None).map_with(
            &self.expr()?,
            &[("x", &x)],
            &self.output,
            od,
            &rule,
        )?;
        r.op = format!(
            "clip to [{}, {}] of {}",
            self.lo,
            self.hi,
            self.input.path.display()
        );
        Ok(r)
    }
}

/// The `clip` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Limit each element to [lo, hi] (numpy's clip)",
    after_help = "Examples:
  tilestream clip x.npy y.npy --lo 0 --hi 1
  tilestream clip scene.tif s.tif --lo 0 --hi 10000      # nodata pixels stay nodata

Runs as the map 'clip(x, lo, hi)': in f64, then cast to --dtype (default: the input's);
pixels where the input is nodata are masked as map masks them."
)]
pub struct ClipArgs {
    /// Input tensor (.npy, .tif/.tiff, .zarr, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file (.npy, .tif/.tiff, .zarr, or raw for any other extension).
    pub output: PathBuf,
    /// Lower bound.
    #[arg(long, allow_negative_numbers = true)]
    pub lo: f64,
    /// Upper bound (at least --lo).
    #[arg(long, allow_negative_numbers = true)]
    pub hi: f64,
    /// Output dtype (default: the input's).
    #[arg(long)]
    pub dtype: Option<String>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for ClipArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Clip(ClipSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            lo: self.lo,
            hi: self.hi,
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
        }))
    }
}
