//! `gen`: reproducible data drawn from a seed, tile by tile, the same bytes at any budget
//! and on any backend.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::spec::{Source, SpecPlan};
use crate::tiling::BoxPlan;
use crate::{DType, Engine, Plan, Result, RunReport};

/// `tilestream gen` data, reproducible from the seed: `dist` is `demo` (N(col/100, 1),
/// the default), `normal` (with `mean` and `std`) or `uniform` (with `low` and `high`),
/// as [`crate::ops::generate::Dist::parse`] reads them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSpec {
    /// Output file.
    pub output: PathBuf,
    /// Shape.
    pub shape: Vec<usize>,
    /// Dtype.
    #[serde(with = "crate::spec::dtype_name")]
    pub dtype: DType,
    /// Seed.
    #[serde(default)]
    pub seed: u64,
    /// Distribution: `demo`, `normal` or `uniform`.
    #[serde(default = "default_dist")]
    pub dist: String,
    /// Mean of `normal` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    /// Standard deviation of `normal` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<f64>,
    /// Lower bound of `uniform` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low: Option<f64>,
    /// Upper bound of `uniform`, not reached (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<f64>,
}

fn default_dist() -> String {
    "demo".into()
}

/// Not a pipeline step (yet).
impl PipelineStep for GenerateSpec {}

impl Operation for GenerateSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (Vec::new(), &mut self.output)
    }

    fn written(&self) -> Result<Option<(Vec<usize>, DType)>> {
        Ok(Some((self.shape.clone(), self.dtype)))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        e.plan_generate(&self.shape, self.dtype).map(SpecPlan::Flat)
    }

    fn boxes(
        &self,
        e: &Engine,
        flat: &Plan,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        e.elementwise_boxes(flat, &[], &self.output, shape, dtype)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let dist = crate::ops::generate::Dist::parse(
            &self.dist, self.mean, self.std, self.low, self.high,
        )?;
        e.generate_dist(&self.output, &self.shape, self.dtype, self.seed, dist)
    }
}
