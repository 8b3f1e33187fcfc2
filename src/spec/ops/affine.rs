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
