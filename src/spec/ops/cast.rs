//! `cast`: the input converted to another element type. Into a GeoTIFF whose type does
//! not hold the input's nodata value exactly, it runs as the map `x`
//! ([`Engine::cast_masks`](crate::Engine)).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::spec::{OutputLayout, Source, SpecPlan};
use crate::{DType, Engine, Result, RunReport};

/// A cast to `dtype`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CastSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// Output dtype.
    #[serde(with = "crate::spec::dtype_name")]
    pub dtype: DType,
}

impl PipelineStep for CastSpec {
    const KEYS: Option<&'static [&'static str]> =
        Some(&["input", "dtype", "nodata", "ignore_nodata"]);
}

impl Operation for CastSpec {
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
        Ok(Some(names[0].to_string()))
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        OutputLayout::same(&self.input, Some(self.dtype))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        e.plan_cast_to(&self.input.open()?, &self.output, self.dtype)
            .map(SpecPlan::Flat)
    }

    fn elementwise_input(&self) -> Option<&Source> {
        Some(&self.input)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        e.cast_to(&self.input.open()?, &self.output, self.dtype)
    }
}
