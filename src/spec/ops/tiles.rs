//! `tiles`: an image cut into patch files (`.npy` or GeoTIFF) and an index, for training
//! sets.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::engine::{Edge, PatchSpec};
use crate::io::own_files::Written;
use crate::spec::{Source, SpecPlan};
use crate::{DType, Engine, Result, RunReport};

/// Cuts an image into patch files and an index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TilesSpec {
    /// Input image.
    pub input: Source,
    /// Directory of the patches.
    pub outdir: PathBuf,
    /// Patch side.
    pub size: usize,
    /// Pixels shared by neighbours.
    #[serde(default)]
    pub overlap: usize,
    /// `shift` or `pad`.
    #[serde(default = "default_edge")]
    pub edge: String,
    /// `npy` or `tif`.
    #[serde(default = "default_patch_format")]
    pub patch_format: String,
}

fn default_edge() -> String {
    "shift".into()
}

fn default_patch_format() -> String {
    "npy".into()
}

impl TilesSpec {
    fn patches(&self) -> Result<PatchSpec> {
        Ok(PatchSpec {
            size: self.size,
            overlap: self.overlap,
            edge: self.edge.parse::<Edge>()?,
        })
    }
}

/// Not a pipeline step (yet).
impl PipelineStep for TilesSpec {}

impl Operation for TilesSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.outdir
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.outdir)
    }

    fn writes(&self) -> Vec<Written<'_>> {
        vec![Written {
            role: "output",
            path: &self.outdir,
            dir: true,
        }]
    }

    fn resumable(&self) -> bool {
        false
    }

    fn tiling(&self) -> Tiling {
        Tiling::Boxes
    }

    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        // many files, none of them a COG
        Ok(None)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        e.plan_patches_as(&x, self.patches()?, self.patch_format.parse()?)
            .map(SpecPlan::Box)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let (mut r, n) = e.patches_as(
            &x,
            &self.outdir,
            self.patches()?,
            self.patch_format.parse()?,
        )?;
        r.op = format!("{} -> {n} patches in {}", r.op, self.outdir.display());
        Ok(r)
    }
}

/// The `tiles` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Cut an image into patch files with overlap, plus an index.csv",
    after_help = "Example:
  tilestream tiles scene.npy patches/ --size 512 --overlap 32

Each patch is written as <stem>_r<row>_c<col>.npy (row, col: its offset in the image; all
bands of a rank-3 image in one file), or .tif with --patch-format tif: a GeoTIFF georeferenced at
its own origin, so that GIS tools put each patch where it lies in the scene. index.csv (file,row,col,height,width) is written
last, after every patch is flushed: a directory with an index.csv is complete."
)]
pub struct TilesArgs {
    /// Input image: (height, width) or (bands, height, width).
    pub input: PathBuf,
    /// Directory for the patches and index.csv (created if missing).
    pub outdir: PathBuf,
    /// Patch side in pixels.
    #[arg(long, default_value_t = 512)]
    pub size: usize,
    /// Pixels shared by neighbouring patches (stride = size - overlap).
    #[arg(long, default_value_t = 0)]
    pub overlap: usize,
    /// At the right and bottom edges: shift (move the last patch back to end at the edge)
    /// or pad (keep the stride, pad with zeros).
    #[arg(long, default_value = "shift")]
    pub edge: String,
    /// Patch files: npy, or tif (tiled GeoTIFFs, each with the input's georeferencing
    /// moved to its own origin; see the --tiff-* options).
    #[arg(long, default_value = "npy")]
    pub patch_format: String,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for TilesArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Tiles(TilesSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            outdir: self.outdir.clone(),
            size: self.size,
            overlap: self.overlap,
            edge: self.edge.clone(),
            patch_format: self.patch_format.clone(),
        }))
    }
}
