//! `affine`: `scale * x + offset`, rounded once and cast; with a nodata rule, it runs as
//! the map it is.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, map_rule};
use crate::{DType, Engine, Result, RunReport};

/// `y = scale * x + offset`, cast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffineSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// Factor (default 1).
    #[serde(default = "one")]
    pub scale: f64,
    /// Term (default 0).
    #[serde(default)]
    pub offset: f64,
    /// Output dtype (default: the input's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// The output's nodata value, as [`MapSpec`](super::MapSpec)'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
    /// Compute the pixels where the input is nodata like any other (always written
    /// out, as [`MapSpec`](super::MapSpec)'s).
    #[serde(default)]
    pub ignore_nodata: bool,
}

fn one() -> f64 {
    1.0
}

impl PipelineStep for AffineSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&[
        "input",
        "scale",
        "offset",
        "dtype",
        "nodata",
        "ignore_nodata",
    ]);
}

impl Operation for AffineSpec {
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
        // rounded once, as the affine operation computes it
        Ok(Some(format!(
            "fma({}, {}, {})",
            names[0],
            crate::ops::expr::literal(self.scale),
            crate::ops::expr::literal(self.offset)
        )))
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        // a nodata value refused before the job is split, not by each task
        let x = self.input.open()?;
        let rule = map_rule(self.nodata.as_ref(), self.ignore_nodata, &[]);
        Engine::affine_masked(&x, self.scale, self.offset, self.dtype, &rule)?;
        OutputLayout::same(&self.input, self.dtype)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        let rule = map_rule(self.nodata.as_ref(), self.ignore_nodata, &[]);
        let plan = match Engine::affine_masked(&x, self.scale, self.offset, self.dtype, &rule)? {
            // planned (and refused) as the map it runs as
            Some(src) => {
                let od = Some(self.dtype.unwrap_or(x.dtype()));
                e.plan_map(&src, &[("x", &x)], od)
            }
            None => e.plan_affine(&x, self.dtype),
        };
        plan.map(SpecPlan::Flat)
    }

    fn elementwise_input(&self) -> Option<&Source> {
        Some(&self.input)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        georef_from(e, &x, None).affine_with(
            &x,
            &self.output,
            self.scale,
            self.offset,
            self.dtype,
            &map_rule(self.nodata.as_ref(), self.ignore_nodata, &[]),
        )
    }
}

/// The `affine` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Elementwise y = scale * x + offset, cast to --dtype",
    after_help = "Examples:
  tilestream affine x.npy y.npy --scale 2 --offset 1 --dtype f16 --memory 512MiB
  tilestream affine scene.tif refl.tif --scale 0.0001 --dtype f32   # nodata pixels: nan

scale * x + offset is rounded once (a fused multiply-add), then cast. Pixels where the
input is nodata (a GeoTIFF's GDAL nodata value) become the output's nodata value, as in
map: --nodata, by default nan for a float output and the input's value for an integer
one; --ignore-nodata computes them like any other."
)]
pub struct AffineArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    /// Multiplier a in y = a*x + b.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub scale: f64,
    /// Offset b in y = a*x + b.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub offset: f64,
    /// Output dtype (default: the input's). Floats round to nearest even; integers
    /// round toward zero, saturate, and take NaN to 0.
    #[arg(long)]
    pub dtype: Option<String>,
    /// The output's nodata value (nan, -9999): given to the pixels where the input is
    /// nodata, and written to a GeoTIFF output (default: nan for a float output, the
    /// input's nodata value for an integer one).
    #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
    pub nodata: Option<String>,
    /// Compute the pixels where the input is nodata like any other (no masking).
    #[arg(long)]
    pub ignore_nodata: bool,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for AffineArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Affine(AffineSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            scale: self.scale,
            offset: self.offset,
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
            nodata: self.nodata.clone(),
            ignore_nodata: self.ignore_nodata,
        }))
    }
}
