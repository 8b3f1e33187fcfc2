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

    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
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

/// The `gen` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Write a tensor of N(col/100, 1) values, streamed (any size)",
    after_help = "Example:
  tilestream gen x.npy --shape 3075200x512 --dtype f32 --seed 1   # 6.3 GB"
)]
pub struct GenArgs {
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    /// Shape, e.g. 3075200x512.
    #[arg(long)]
    pub shape: String,
    /// Element type.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Random seed (the values depend only on it, never on budget or threads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Distribution: demo (N(col/100, 1): each column's mean is its index / 100),
    /// normal (--mean, --std) or uniform (--low, --high).
    #[arg(long, default_value = "demo")]
    pub dist: String,
    /// Mean of --dist normal [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub mean: Option<f64>,
    /// Standard deviation of --dist normal [default: 1].
    #[arg(long)]
    pub std: Option<f64>,
    /// Smallest value of --dist uniform [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub low: Option<f64>,
    /// Bound above of --dist uniform, not reached [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    pub high: Option<f64>,
}

#[cfg(feature = "cli")]
impl super::Arguments for GenArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Generate(GenerateSpec {
            output: self.output.clone(),
            shape: crate::format::parse_shape(&self.shape)?,
            dtype: self.dtype.parse()?,
            seed: self.seed,
            dist: self.dist.clone(),
            mean: self.mean,
            std: self.std,
            low: self.low,
            high: self.high,
        }))
    }
}
