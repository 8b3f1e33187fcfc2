//! `stencil`: a neighbourhood filter (gaussian, box, sobel, median, convolve) over box
//! tiles with halos, exact at every budget. The whole operation is this folder: its spec
//! and subcommand (here), what a filter is (`filter.rs`), its plan and run (`run.rs`),
//! its CPU kernel (`cpu.rs`) and its CUDA kernel (`cuda.rs`, the launches as data, and
//! `cuda_run.rs`, which runs them; `kernels/stencil.cu`).

#[doc(hidden)]
pub mod cpu;
#[doc(hidden)]
pub mod cuda;
#[cfg(feature = "cuda")]
mod cuda_run;
mod filter;
mod run;

pub use filter::{Filter, Stencil, TileJob};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, load_kernel};
use crate::tiling::Boundary;
use crate::{DType, Engine, Error, Result, RunReport};

/// A neighbourhood filter over halo'd tiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StencilSpec {
    /// Input image.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// The filter (`gaussian:sigma=2`, `box:size=5`, `sobel`, `median:size=3`,
    /// `convolve:KERNEL.npy`).
    pub filter: String,
    /// The boundary mode (`reflect`, `nearest`, `wrap`, `mirror`, `constant:V`).
    #[serde(default = "default_boundary")]
    pub boundary: String,
    /// Output dtype.
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
}

/// The filter `filter` with the boundary mode `boundary`, as the spec gives them.
fn stencil_of(filter: &str, boundary: &str) -> Result<Stencil> {
    Stencil::new(
        Filter::parse(filter, |k| load_kernel(Path::new(k)))?,
        boundary.parse::<Boundary>()?,
    )
}

fn default_boundary() -> String {
    "reflect".into()
}

impl PipelineStep for StencilSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&["input", "filter", "boundary", "dtype"]);
}

impl Operation for StencilSpec {
    fn inputs(&self) -> Vec<&Path> {
        let mut v = vec![self.input.path.as_path()];
        if let Some(k) = self.filter.strip_prefix("convolve:") {
            v.push(Path::new(k));
        }
        v
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn relative_to(&mut self, base: &Path) {
        if let Some(k) = self.filter.strip_prefix("convolve:") {
            self.filter = format!("convolve:{}", base.join(k).display());
        }
    }

    fn tiling(&self) -> Tiling {
        Tiling::Boxes
    }

    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        // a filter's output is its input's shape (output_layout refuses the 2-D wrap
        // boundary, which is planned whole)
        let x = self.input.open()?;
        Ok(Some((x.shape().to_vec(), self.dtype.unwrap_or(x.dtype()))))
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        let mut out = OutputLayout::same(&self.input, self.dtype)?;
        // rows are image rows of a 2-D image; the bands of a 3-D one are filtered one by
        // one
        if out.shape.len() == 2 {
            let stencil = stencil_of(&self.filter, &self.boundary)?;
            if matches!(stencil.boundary, Boundary::Wrap) {
                return Err(Error::invalid(
                    "boundary wrap needs the whole image: it cannot be split by rows (filter \
                     it with one process, or split a 3-D image by bands)",
                ));
            }
            // as many rows each side as the longer side needs: near an edge of the image,
            // a reflected row lies up to that far inside
            let (rows, _) = stencil.halos();
            let h = rows.before.max(rows.after);
            out.halo_rows = (h, h);
        }
        Ok(out)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        let stencil = stencil_of(&self.filter, &self.boundary)?;
        e.plan_stencil_to(&x, &stencil, self.dtype, Some(&self.output))
            .map(SpecPlan::Box)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let stencil = stencil_of(&self.filter, &self.boundary)?;
        georef_from(e, &x, None).stencil(&x, &self.output, &stencil, self.dtype)
    }
}

/// The `stencil` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Neighbourhood filter over each band of an image, tiled with halos (no seams)",
    after_help = "Examples:
  tilestream stencil scene.npy blur.npy --filter gaussian:sigma=2 --memory 128MiB
  tilestream stencil dem.npy edges.npy --filter sobel --boundary nearest --dtype f32
  tilestream stencil img.npy med.npy --filter median:size=3
  tilestream stencil img.npy out.npy --filter convolve:kernel.npy --boundary constant:0

Semantics follow scipy.ndimage (gaussian_filter, uniform_filter, sobel, median_filter,
convolve) applied to each (height, width) plane; `sobel` without an axis is the gradient
magnitude hypot(sobel axis 0, sobel axis 1). Computed in f32 for inputs of up to 16 bits
and f32, in f64 otherwise. Tiles are full-width row blocks when a few rows fit the budget,
else 2-D blocks with halos on both axes."
)]
pub struct StencilArgs {
    /// Input image: (height, width) or (bands, height, width); .npy, or raw with --shape
    /// and --in-dtype.
    pub input: PathBuf,
    /// Output file (same shape; .npy, or raw for any other extension).
    pub output: PathBuf,
    /// The filter: gaussian:sigma=S[,truncate=T] | box:size=N | sobel[:axis=0|1] |
    /// median:size=N | convolve:KERNEL.npy
    #[arg(long)]
    pub filter: String,
    /// Values outside the image: reflect | nearest | wrap | constant:V.
    #[arg(long, default_value = "reflect")]
    pub boundary: String,
    /// Output dtype (default: the input's; integers round toward zero and saturate).
    #[arg(long)]
    pub dtype: Option<String>,
    /// The layout of a raw input (`--shape`, `--in-dtype`).
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for StencilArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Stencil(StencilSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            filter: self.filter.clone(),
            boundary: self.boundary.clone(),
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
        }))
    }
}
