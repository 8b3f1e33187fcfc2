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

/// The `convert` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Convert between formats (.npy, raw, GeoTIFF, Zarr v3), optionally casting",
    after_help = "Examples:
  tilestream convert scene.tif scene.npy --memory 256MiB      # bands x rows x cols
  tilestream convert scene.npy scene.tif --tiff-compress zstd  # georeferencing: see below
  tilestream convert x.raw x.npy --shape 1000x512 --in-dtype f32
  tilestream convert x.npy x.zarr --zarr-chunks 4096x512 --zarr-compress blosc

The format follows the extension: .npy, .tif/.tiff (tiled GeoTIFF, 512x512 Deflate tiles
by default, BigTIFF above 4 GB), .zarr (Zarr v3 store, zstd chunks), anything else raw. A GeoTIFF input's georeferencing
(geotransform, CRS, nodata) is copied to a GeoTIFF output (the nodata value where the
output type holds it)."
)]
pub struct ConvertArgs {
    /// Input tensor (.npy, .tif/.tiff, .zarr, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file (.npy, .tif/.tiff, .zarr, or raw for any other extension).
    pub output: PathBuf,
    /// Cast to this dtype on the way (default: keep the input's).
    #[arg(long)]
    pub dtype: Option<String>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for ConvertArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Convert(ConvertSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
        }))
    }
}
