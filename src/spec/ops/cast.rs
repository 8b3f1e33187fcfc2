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

/// The `cast` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Cast to another dtype",
    after_help = "Examples:
  tilestream cast x.npy x16.npy --dtype f16
  tilestream cast counts.npy c8.npy --dtype u8      # saturates at 0 and 255

Floats to f16/bf16 round to nearest even; floats to integers round toward zero, saturate,
and take NaN to 0; integers to integers are exact and saturate."
)]
pub struct CastArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    /// Target dtype.
    #[arg(long)]
    pub dtype: String,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for CastArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Cast(CastSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            dtype: self.dtype.parse()?,
        }))
    }
}
