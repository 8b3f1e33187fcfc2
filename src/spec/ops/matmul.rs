//! `matmul`: `x @ w`, `x` streamed by rows and `w` held in memory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::spec::{OutputLayout, Source, SpecPlan};
use crate::{DType, Engine, Result, RunReport};

/// `x @ w` with `w` resident.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatmulSpec {
    /// Left operand, streamed by rows.
    pub x: Source,
    /// Right operand, held in memory.
    pub w: Source,
    /// Output file.
    pub output: PathBuf,
    /// Output dtype.
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
}

impl PipelineStep for MatmulSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&["x", "w", "dtype"]);
    const NAMES: &'static [&'static str] = &["x", "w"];
}

impl Operation for MatmulSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.x.path, &self.w.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.x, &mut self.w], &mut self.output)
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        let (x, w) = (self.x.open()?, self.w.open()?);
        let (r, _, n) = Engine::matmul_shapes(&x, &w)?;
        let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
        Ok(OutputLayout {
            shape: vec![r, n],
            dtype: self.dtype.unwrap_or(c),
            halo_rows: (0, 0),
        })
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        e.plan_matmul(&self.x.open()?, &self.w.open()?, self.dtype)
            .map(SpecPlan::Flat)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        e.matmul(&self.x.open()?, &self.w.open()?, &self.output, self.dtype)
    }
}
