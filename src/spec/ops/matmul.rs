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
        let form = crate::ops::matmul::MatmulForm::new(x.dtype(), w.dtype(), self.dtype)?;
        Ok(OutputLayout {
            shape: vec![r, n],
            dtype: form.out,
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

/// The `matmul` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Matrix product X @ W with X streamed and W resident",
    after_help = "Example:
  tilestream matmul x.npy w.npy proj.npy --memory 512MiB    # 3075200x512 @ 512x64

Kernel: matrixmultiply's blocked sgemm/dgemm, rows split across --threads. Computed in f32
when both operands are exact in f32 (f16, bf16, f32, small integers, complex64's parts),
else in f64. Complex operands give a complex product (complex64 or complex128, as numpy)."
)]
pub struct MatmulArgs {
    /// Left operand X (R x K), streamed by row tiles.
    pub x: PathBuf,
    /// Right operand W (K x N), held in memory (counts in --memory).
    pub w: PathBuf,
    /// Output file (R x N; .npy, or raw for any other extension).
    pub output: PathBuf,
    /// Output dtype (default: f32 when both operands are exact in f32, f64 otherwise;
    /// complex64 or complex128 when an operand is complex).
    #[arg(long)]
    pub dtype: Option<String>,
}

#[cfg(feature = "cli")]
impl super::Arguments for MatmulArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Matmul(MatmulSpec {
            x: Source::file(&self.x),
            w: Source::file(&self.w),
            output: self.output.clone(),
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
        }))
    }
}
