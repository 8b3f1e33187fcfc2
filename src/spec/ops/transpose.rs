//! `transpose`: the last two axes swapped, through square blocks.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::format::tiff::is_tiff_path;
use crate::spec::{Source, SpecPlan};
use crate::{DType, Engine, Result, RunReport};

/// Swaps the last two axes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransposeSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
}

impl PipelineStep for TransposeSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&["input"]);
}

impl Operation for TransposeSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn moves_values(&self) -> bool {
        true
    }

    fn tiling(&self) -> Tiling {
        Tiling::Boxes
    }

    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        let x = self.input.open()?;
        Ok(Some((
            crate::engine::transposed_shape(x.shape()),
            x.dtype(),
        )))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        e.plan_transpose_to(&self.input.open()?, Some(&self.output))
            .map(SpecPlan::Box)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        if x.georef().is_some() && is_tiff_path(&self.output) {
            eprintln!(
                "note: transpose swaps rows and columns, so {} is written without the input's \
                 georeferencing",
                self.output.display()
            );
        }
        e.transpose(&x, &self.output)
    }
}

/// The `transpose` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Out-of-core transpose of a rank-2 array (or of the last two axes of rank 3)",
    after_help = "Example:
  tilestream transpose x.npy xt.npy --memory 256MiB

Works in square-ish blocks: each block reads runs of its width from the source rows and
writes runs of its height into the destination rows."
)]
pub struct TransposeArgs {
    /// Input array (rank 2, or rank 3 to transpose the last two axes of each band).
    pub input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for TransposeArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Transpose(TransposeSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
        }))
    }
}
