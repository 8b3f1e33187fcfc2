//! `stencil`: a neighbourhood filter (gaussian, box, sobel, median, convolve) over box
//! tiles with halos, exact at every budget. The whole operation is this folder: this
//! file holds its spec and subcommand, what a filter is ([`Filter`], [`Stencil`]), its
//! plan and run (`Engine::plan_stencil`, `Engine::stencil`) and the filter as a
//! [`BoxOp`], whose kernel the device the engine chose asks it for; `cpu.rs` is its CPU
//! kernel, `cuda.rs` its CUDA kernel (the launches as data, and their run on a device),
//! `kernels/stencil.cu` the CUDA source, `tests.rs` its unit tests.
//!
//! The filters have the `scipy.ndimage` semantics people already validate against
//! (kernel shapes, centring, boundary modes, constant padding per 1-D pass). A tile's
//! padded box is gathered from its source rows (see [`crate::tiling`]) into a float
//! scratch buffer, the filter runs over it, and the result is stored in the output
//! dtype. Every output pixel is computed by the same sequence of operations whatever the
//! tile it falls in, so a tiled result is bit-identical to the untiled one.
//!
//! Arithmetic is in f32 for inputs of at most 16 bits (and f32), in f64 for f64 and for
//! 32- and 64-bit integers. Integer outputs round toward zero and saturate, as a cast does
//! (and as `scipy.ndimage` does).

#[doc(hidden)]
pub mod cpu;
#[doc(hidden)]
pub mod cuda;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::backend::cuda::CudaDevice;
use crate::backend::{Backend, BoxKernel, BoxOp, Family};
use crate::budget::Reservation;
use crate::engine::{ImageNeeds, check_not_input};
use crate::format::TensorFile;
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, load_kernel};
use crate::tiling::{Boundary, BoxPlan, BoxTile, Halo};
use crate::{DType, Engine, Error, Result, RunReport};
use cuda::{MAX_GPU_MEDIAN, StencilProgram};

/// A filter, as given on the command line (`gaussian:sigma=2`, `box:size=5`, `sobel`,
/// `median:size=3`, `convolve:kernel.npy`).
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// Gaussian blur: `sigma` in pixels, kernel radius `int(truncate * sigma + 0.5)`.
    Gaussian {
        /// Standard deviation in pixels.
        sigma: f64,
        /// Radius in standard deviations (scipy's default is 4).
        truncate: f64,
    },
    /// Mean over a `size × size` window.
    Box {
        /// Window side.
        size: usize,
    },
    /// Sobel gradient: the magnitude `hypot(d/drow, d/dcol)`, or one derivative (`axis`
    /// 0: along rows, i.e. vertical; 1: along columns) as `scipy.ndimage.sobel`.
    Sobel {
        /// `None` for the magnitude.
        axis: Option<usize>,
    },
    /// Median over a `size × size` window (the upper median for even sizes, as scipy).
    Median {
        /// Window side.
        size: usize,
    },
    /// True 2-D convolution with a kernel (`scipy.ndimage.convolve`): the kernel is
    /// flipped and centred at `shape // 2`.
    Convolve {
        /// Kernel weights, row-major.
        weights: Vec<f64>,
        /// Kernel rows.
        rows: usize,
        /// Kernel columns.
        cols: usize,
    },
}

/// Widest window of a filter along one axis (gaussian, box), in pixels: it bounds the
/// kernel and the halo before the planner sizes anything from them.
const MAX_WINDOW: usize = 65535;

/// Widest median window (its `size x size` values are sorted for every pixel).
const MAX_MEDIAN: usize = 255;

impl Filter {
    /// Parses a filter spec. `convolve:PATH` reads a small kernel with `load_kernel`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown filter or a bad parameter; whatever
    /// `load_kernel` returns.
    pub fn parse(
        spec: &str,
        load_kernel: impl FnOnce(&str) -> Result<(Vec<f64>, usize, usize)>,
    ) -> Result<Filter> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let bad = |msg: String| Error::Invalid(format!("filter `{spec}`: {msg}"));
        if name == "convolve" {
            if args.is_empty() {
                return Err(bad("give the kernel file: convolve:kernel.npy".into()));
            }
            let (weights, rows, cols) = load_kernel(args)?;
            return Ok(Filter::Convolve {
                weights,
                rows,
                cols,
            });
        }
        let mut params: Vec<(&str, &str)> = Vec::new();
        for kv in args.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("`{kv}` is not KEY=VALUE")))?;
            params.push((k.trim(), v.trim()));
        }
        let allowed: &[&str] = match name {
            "gaussian" => &["sigma", "truncate"],
            "box" | "median" => &["size"],
            "sobel" => &["axis"],
            _ => {
                return Err(bad(
                    "unknown filter: use gaussian:sigma=S, box:size=N, sobel, median:size=N or \
                     convolve:KERNEL.npy"
                        .into(),
                ));
            }
        };
        if let Some((k, _)) = params.iter().find(|(k, _)| !allowed.contains(k)) {
            return Err(bad(format!(
                "unknown parameter `{k}` (takes {})",
                allowed.join(", ")
            )));
        }
        let get = |k: &str| params.iter().find(|p| p.0 == k).map(|p| p.1);
        let num = |k: &str| -> Result<Option<f64>> {
            get(k)
                .map(|v| {
                    v.parse::<f64>()
                        .map_err(|_| bad(format!("{k}=`{v}` is not a number")))
                })
                .transpose()
        };
        let size = || -> Result<usize> {
            let v = get("size").ok_or_else(|| bad("give size=N".into()))?;
            let max = if name == "median" {
                MAX_MEDIAN
            } else {
                MAX_WINDOW
            };
            match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(bad(format!(
                    "size=`{v}` must be a whole number from 1 to {max}"
                ))),
            }
        };
        Ok(match name {
            "gaussian" => {
                let sigma = num("sigma")?.ok_or_else(|| bad("give sigma=S".into()))?;
                let truncate = num("truncate")?.unwrap_or(4.0);
                if !(sigma > 0.0 && sigma.is_finite()) {
                    return Err(bad("sigma must be a positive number".into()));
                }
                if !(truncate > 0.0 && truncate.is_finite()) {
                    return Err(bad("truncate must be a positive number".into()));
                }
                let radius = truncate * sigma + 0.5;
                if radius >= (MAX_WINDOW / 2 + 1) as f64 {
                    return Err(bad(format!(
                        "truncate x sigma = {} pixels: the window would pass {MAX_WINDOW} \
                         pixels (give a smaller sigma, or downsample first)",
                        truncate * sigma
                    )));
                }
                Filter::Gaussian { sigma, truncate }
            }
            "box" => Filter::Box { size: size()? },
            "median" => Filter::Median { size: size()? },
            _ => Filter::Sobel {
                axis: match get("axis") {
                    None => None,
                    Some("0") => Some(0),
                    Some("1") => Some(1),
                    Some(v) => {
                        return Err(bad(format!(
                            "axis=`{v}`: use 0 (along rows) or 1 (along columns)"
                        )));
                    }
                },
            },
        })
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::Gaussian { sigma, truncate } => {
                write!(f, "gaussian sigma={sigma} truncate={truncate}")
            }
            Filter::Box { size } => write!(f, "box {size}x{size}"),
            Filter::Sobel { axis: None } => write!(f, "sobel magnitude"),
            Filter::Sobel { axis: Some(a) } => write!(f, "sobel axis={a}"),
            Filter::Median { size } => write!(f, "median {size}x{size}"),
            Filter::Convolve { rows, cols, .. } => write!(f, "convolve {rows}x{cols}"),
        }
    }
}

/// A 1-D correlation kernel: `out[i] = Σ_t w[t] · in[i + t - before]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Kernel1 {
    pub(crate) w: Vec<f64>,
    pub(crate) before: usize,
}

impl Kernel1 {
    fn halo(&self) -> Halo {
        Halo {
            before: self.before,
            after: self.w.len() - 1 - self.before,
        }
    }
}

/// What runs over a padded box.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Pass {
    /// Rows kernel and columns kernel; the rows pass first unless `cols_first` (the
    /// order matters at a constant boundary, where each 1-D pass pads with the constant).
    Separable(Kernel1, Kernel1, bool),
    /// Magnitude of two separable passes.
    Magnitude([(Kernel1, Kernel1, bool); 2]),
    /// Dense correlation (the kernel already flipped), `rows × cols`, centred at
    /// `(before_r, before_c)`.
    Dense {
        w: Vec<f64>,
        rows: usize,
        cols: usize,
        before_r: usize,
        before_c: usize,
    },
    /// Order statistic of a `size × size` window.
    Median { size: usize },
}

/// A filter compiled to passes, with its halos.
#[derive(Clone, Debug, PartialEq)]
pub struct Stencil {
    pub(crate) pass: Pass,
    /// The filter it came from.
    pub filter: Filter,
    /// Boundary mode.
    pub boundary: Boundary,
}

fn gaussian_kernel(sigma: f64, truncate: f64) -> Kernel1 {
    // scipy.ndimage._gaussian_kernel1d, order 0
    let radius = (truncate * sigma + 0.5) as usize;
    let s2 = sigma * sigma;
    let mut w: Vec<f64> = (0..=2 * radius)
        .map(|i| {
            let x = i as f64 - radius as f64;
            (-0.5 / s2 * x * x).exp()
        })
        .collect();
    let sum: f64 = w.iter().sum();
    for v in &mut w {
        *v /= sum;
    }
    Kernel1 { w, before: radius }
}

fn k1(w: &[f64]) -> Kernel1 {
    Kernel1 {
        w: w.to_vec(),
        before: w.len() / 2,
    }
}

impl Stencil {
    /// Compiles `filter` with `boundary`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a kernel that is empty or too large to be sensible.
    pub fn new(filter: Filter, boundary: Boundary) -> Result<Stencil> {
        let pass = match &filter {
            Filter::Gaussian { sigma, truncate } => {
                let k = gaussian_kernel(*sigma, *truncate);
                if k.w.len() > 4097 {
                    return Err(Error::Invalid(format!(
                        "gaussian sigma={sigma}: a kernel of {} taps is too wide",
                        k.w.len()
                    )));
                }
                Pass::Separable(k.clone(), k, false)
            }
            Filter::Box { size } => {
                let k = k1(&vec![1.0 / *size as f64; *size]);
                Pass::Separable(k.clone(), k, false)
            }
            Filter::Sobel { axis } => {
                let d = k1(&[-1.0, 0.0, 1.0]);
                let s = k1(&[1.0, 2.0, 1.0]);
                // scipy: the derivative pass first, then the smoothing pass
                let along_rows = (d.clone(), s.clone(), false);
                let along_cols = (s, d, true);
                match axis {
                    Some(0) => Pass::Separable(along_rows.0, along_rows.1, along_rows.2),
                    Some(_) => Pass::Separable(along_cols.0, along_cols.1, along_cols.2),
                    None => Pass::Magnitude([along_rows, along_cols]),
                }
            }
            Filter::Median { size } => {
                if *size > 255 {
                    return Err(Error::Invalid(format!(
                        "median size={size} is too large (at most 255)"
                    )));
                }
                Pass::Median { size: *size }
            }
            Filter::Convolve {
                weights,
                rows,
                cols,
            } => {
                if weights.is_empty() || weights.len() != rows * cols {
                    return Err(Error::Invalid(
                        "convolve: the kernel is empty or not 2-D".into(),
                    ));
                }
                // correlate with the flipped kernel; centre (k - 1 - k // 2) in flipped
                // coordinates puts the original centre at k // 2, as scipy.
                let w: Vec<f64> = weights.iter().rev().copied().collect();
                Pass::Dense {
                    w,
                    rows: *rows,
                    cols: *cols,
                    before_r: rows - 1 - rows / 2,
                    before_c: cols - 1 - cols / 2,
                }
            }
        };
        Ok(Stencil {
            pass,
            filter,
            boundary,
        })
    }

    #[doc(hidden)]
    /// Halos along rows and columns.
    #[must_use]
    pub fn halos(&self) -> (Halo, Halo) {
        match &self.pass {
            Pass::Separable(r, c, _) => (r.halo(), c.halo()),
            Pass::Magnitude([(r0, c0, _), (r1, c1, _)]) => (
                Halo {
                    before: r0.halo().before.max(r1.halo().before),
                    after: r0.halo().after.max(r1.halo().after),
                },
                Halo {
                    before: c0.halo().before.max(c1.halo().before),
                    after: c0.halo().after.max(c1.halo().after),
                },
            ),
            Pass::Dense {
                rows,
                cols,
                before_r,
                before_c,
                ..
            } => (
                Halo {
                    before: *before_r,
                    after: rows - 1 - before_r,
                },
                Halo {
                    before: *before_c,
                    after: cols - 1 - before_c,
                },
            ),
            Pass::Median { size } => {
                let h = Halo {
                    before: size / 2,
                    after: size - 1 - size / 2,
                };
                (h, h)
            }
        }
    }

    /// The arithmetic type for `dtype`: true for f64.
    #[must_use]
    pub fn wide(dtype: DType) -> bool {
        matches!(
            dtype,
            DType::F64 | DType::I32 | DType::U32 | DType::I64 | DType::U64
        )
    }

    #[doc(hidden)]
    /// Scratch bytes per element of the padded box, of a row pass and of the tile.
    #[must_use]
    pub fn scratch(&self, dtype: DType) -> crate::tiling::Scratch {
        let f = if Stencil::wide(dtype) { 8 } else { 4 };
        let (row_pass, tile) = match &self.pass {
            Pass::Separable(..) => (f, f),
            Pass::Magnitude(_) => (f, 2 * f),
            Pass::Dense { .. } | Pass::Median { .. } => (0, f),
        };
        crate::tiling::Scratch {
            padded: f,
            row_pass,
            tile,
        }
    }
}

/// One tile's job: the stencil, the plan it belongs to, the tile and its windows.
pub struct TileJob<'a> {
    /// The compiled filter.
    pub stencil: &'a Stencil,
    /// The plan (image dims, halos, sources).
    pub plan: &'a BoxPlan,
    /// The tile.
    pub tile: &'a BoxTile,
    /// The tile's windows, one per source row range.
    pub windows: &'a [&'a [u8]],
    /// Input dtype.
    pub in_dtype: DType,
    /// Output dtype.
    pub out_dtype: DType,
}

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

impl Engine {
    /// Plans a filter without running it.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for an input that is not an image; [`crate::Error::Budget`]
    /// if not even a one-pixel tile fits.
    pub fn plan_stencil(
        &self,
        input: &TensorFile,
        stencil: &Stencil,
        dtype: Option<DType>,
    ) -> Result<BoxPlan> {
        self.plan_stencil_to(input, stencil, dtype, None)
    }

    /// [`Engine::plan_stencil`] of a run writing `out`: a GeoTIFF or Zarr output is
    /// encoded as the run writes it when the budget also holds its encoder (the boxes are
    /// then cut along its chunks), else refused.
    ///
    /// # Errors
    /// As [`Engine::plan_stencil`].
    pub fn plan_stencil_to(
        &self,
        input: &TensorFile,
        stencil: &Stencil,
        dtype: Option<DType>,
        out: Option<&Path>,
    ) -> Result<BoxPlan> {
        input.dtype().real_only("a filter")?;
        dtype.unwrap_or(DType::F64).real_only("a filter")?;
        let (ind, od) = (input.dtype(), dtype.unwrap_or(input.dtype()));
        // on a GPU: each lane's buffers, and the weights once
        let device_bytes = |plan: &BoxPlan| {
            StencilProgram::new(stencil, plan, ind, od).map_or(0, |p| {
                let (lane, weights) = p.device_bytes(plan.tile);
                plan.depth.max(1) as u64 * lane + weights
            })
        };
        let resident = match &stencil.filter {
            Filter::Convolve { weights, .. } => {
                Some((16 * weights.len() as u64, "convolution kernel".to_string()))
            }
            _ => None,
        };
        let needs = ImageNeeds {
            name: "stencil",
            what: format!("{} ({} boundary)", stencil.filter, stencil.boundary),
            halos: stencil.halos(),
            boundary: stencil.boundary,
            scratch: stencil.scratch(ind),
            resident,
            device_bytes: &device_bytes,
        };
        self.plan_image_op(input, od, out, &needs)
    }

    /// Filters each band of a rank-2 `(H, W)` or rank-3 `(bands, H, W)` image with
    /// `stencil`, writing `out` (same shape, `dtype` or the input's). The result equals
    /// filtering the whole image at once: tiles overlap by the filter's halo.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad input or `out` being the input;
    /// [`crate::Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn stencil(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        stencil: &Stencil,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        let out = out.as_ref();
        check_not_input(out, &[input])?;
        let od = dtype.unwrap_or(input.dtype());
        let plan = self.plan_stencil_to(input, stencil, dtype, Some(out))?;
        let what = format!(
            "stencil {} ({} boundary) of {}",
            stencil.filter,
            stencil.boundary,
            input.path().display()
        );
        let scratch_what = "filter scratch and kernel";
        self.run_box_op(stencil, input, out, &plan, od, (scratch_what, what))
    }
}

impl BoxOp for Stencil {
    fn family(&self) -> Family {
        // a median's window is sorted in registers on a GPU: the wide ones run on the CPU
        let cuda = match self.filter {
            Filter::Median { size } => size <= MAX_GPU_MEDIAN,
            _ => true,
        };
        Family::Op {
            name: "stencil",
            cuda,
        }
    }

    fn host_kernel<'a>(
        &'a self,
        host: &'a dyn Backend,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        Ok(cpu::host_kernel(host, self, plan, input, output, scratch))
    }

    #[cfg(feature = "cuda")]
    fn cuda_kernel<'a>(
        &'a self,
        dev: &'a Arc<CudaDevice>,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        // family() sent the medians it has no program for to the host
        let program = StencilProgram::new(self, plan, input, output).ok_or_else(|| {
            crate::Error::Internal(format!("no GPU program for the filter {}", self.filter))
        })?;
        let k = cuda::run::prepare(dev, program, self, plan, input, scratch)?;
        Ok(Box::new(k))
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_kernel<'a>(
        &'a self,
        dev: &'a Arc<CudaDevice>,
        _plan: &'a BoxPlan,
        _input: DType,
        _output: DType,
        _scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        match **dev {}
    }
}
