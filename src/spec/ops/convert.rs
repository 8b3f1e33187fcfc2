//! `convert`: the input written in another format (the output's name's, or the engine's
//! output format), cast when a dtype is given.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::spec::{OutputLayout, Source, SpecPlan};
use crate::{DType, Engine, Result, RunReport};

/// A format conversion (and optional cast): the output's format is its name's (or the
/// engine's output format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertSpec {
    /// Input.
    pub input: Source,
    /// Output file or store.
    pub output: PathBuf,
    /// Output dtype (default: the input's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
}

/// Not a pipeline step (yet).
impl PipelineStep for ConvertSpec {}

impl Operation for ConvertSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        OutputLayout::same(&self.input, self.dtype)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        e.plan_cast_to(&x, &self.output, self.dtype.unwrap_or(x.dtype()))
            .map(SpecPlan::Flat)
    }

    fn elementwise_input(&self) -> Option<&Source> {
        Some(&self.input)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let mut r = e.cast_to(&x, &self.output, self.dtype.unwrap_or(x.dtype()))?;
        r.op = format!(
            "convert {} -> {}",
            self.input.path.display(),
            self.output.display()
        );
        Ok(r)
    }
}
