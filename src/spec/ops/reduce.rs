//! `reduce`: a reduction (`sum`, `mean`, `var`, `std`, `min`, `max`) over one axis or all
//! elements, written to a small file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::spec::{Source, SpecPlan};
use crate::{DType, Engine, Reduce, ReduceOver, Result, RunReport};

/// A reduction over one axis or all elements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// The reduction's name (default `sum`).
    #[serde(default = "sum")]
    pub reduce: String,
    /// Delta degrees of freedom of `var` and `std`.
    #[serde(default)]
    pub ddof: u32,
    /// The axis reduced over; `None` for all elements.
    #[serde(default)]
    pub axis: Option<usize>,
    /// Output dtype (default: the reduction's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
}

fn sum() -> String {
    "sum".into()
}

impl PipelineStep for ReduceSpec {
    const KEYS: Option<&'static [&'static str]> =
        Some(&["input", "reduce", "axis", "ddof", "dtype"]);
}

impl Operation for ReduceSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn tiling(&self) -> Tiling {
        Tiling::FlatResult
    }

    fn written(&self) -> Result<Option<(Vec<usize>, DType)>> {
        let x = self.input.open()?;
        let r = Reduce::parse(&self.reduce, self.ddof)?;
        Ok(Some((
            ReduceOver::from(self.axis).out_shape(x.shape()),
            self.dtype.unwrap_or(r.output_dtype(x.dtype())),
        )))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let op = Reduce::parse(&self.reduce, self.ddof)?;
        e.plan_reduce(&self.input.open()?, op, ReduceOver::from(self.axis))
            .map(SpecPlan::Flat)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let r = Reduce::parse(&self.reduce, self.ddof)?;
        e.reduce_to_file(&x, r, ReduceOver::from(self.axis), &self.output, self.dtype)
    }
}
