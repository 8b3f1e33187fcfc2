//! `standardize`: `(x - mean) / std` per column (statistics over axis 0) or per position
//! of adjacent kept axes (per channel: statistics over `axis: [0, 2, 3]` of NCHW), with
//! the statistics computed in a first pass (and saved as `.npz` if asked) or given.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::reduce::Axes;
use super::{Operation, PipelineStep, Tiling};
use crate::io::own_files::Written;
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, read_small};
use crate::{DType, Engine, Reduce, ReduceOver, Result, RunReport};

/// Per-column `(x - mean) / std`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandardizeSpec {
    /// Input.
    pub input: Source,
    /// Output file.
    pub output: PathBuf,
    /// Delta degrees of freedom of the std.
    #[serde(default)]
    pub ddof: u32,
    /// Output dtype.
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// Where to save the statistics (`.npz`), if anywhere.
    #[serde(default)]
    pub stats: Option<PathBuf>,
    /// The column means and stds to use (`.npy` files of one value per column), in
    /// place of a statistics pass: a cluster job computes them once for all its tasks.
    /// With them, `ddof` is not used and `stats` is not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given: Option<(Source, Source)>,
    /// The axes the statistics are taken over (default 0: per column); several for per
    /// channel (`[0, 2, 3]` of NCHW). The axes they keep must be adjacent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<Axes>,
}

impl StandardizeSpec {
    fn over(&self) -> Result<ReduceOver> {
        match &self.axis {
            None => Ok(ReduceOver::Axis(0)),
            some => Axes::over(some.as_ref()),
        }
    }
}

impl PipelineStep for StandardizeSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&["input", "ddof", "dtype", "axis"]);
}

impl Operation for StandardizeSpec {
    fn inputs(&self) -> Vec<&Path> {
        match &self.given {
            Some((m, sd)) => vec![&self.input.path, &m.path, &sd.path],
            None => vec![&self.input.path],
        }
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        let mut v = vec![&mut self.input];
        if let Some((m, sd)) = &mut self.given {
            v.extend([m, sd]);
        }
        (v, &mut self.output)
    }

    fn writes(&self) -> Vec<Written<'_>> {
        let mut w = vec![Written {
            role: "output",
            path: &self.output,
            dir: false,
        }];
        if let (Some(p), None) = (&self.stats, &self.given) {
            w.push(Written {
                role: "statistics file",
                path: p,
                dir: false,
            });
        }
        w
    }

    fn tiling(&self) -> Tiling {
        Tiling::FlatResult
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        // by default f64 for an f64 input, f32 otherwise
        let mut out = OutputLayout::same(&self.input, self.dtype)?;
        if self.dtype.is_none() && out.dtype != DType::F64 {
            out.dtype = DType::F32;
        }
        Ok(out)
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let std = Reduce::Std { ddof: self.ddof };
        let x = self.input.open()?;
        x.dtype().real_only("standardize")?;
        e.plan_reduce_rows(&x, std, self.over()?)
            .map(SpecPlan::Flat)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let e = georef_from(e, &x, None);
        if let Some((mean, std)) = &self.given {
            let (mean, std) = (read_small(mean)?, read_small(std)?);
            return match self.axis {
                None => e.standardize_with_stats(&x, &self.output, self.dtype, &mean, &std),
                Some(_) => e.standardize_over_with_stats(
                    &x,
                    &self.output,
                    self.dtype,
                    &mean,
                    &std,
                    self.over()?,
                ),
            };
        }
        let (stats, apply) = match self.axis {
            None => e.standardize(
                &x,
                &self.output,
                self.dtype,
                self.ddof,
                self.stats.as_deref(),
            )?,
            Some(_) => e.standardize_over(
                &x,
                &self.output,
                self.dtype,
                self.ddof,
                self.stats.as_deref(),
                self.over()?,
            )?,
        };
        // the two passes, reported as one run: times and bytes add up
        let mut r = apply;
        r.op = format!(
            "standardize {} (statistics pass, then apply pass)",
            self.input.path.display()
        );
        r.tiles += stats.tiles;
        r.resumed_tiles += stats.resumed_tiles;
        r.bytes_read += stats.bytes_read;
        r.wall_s += stats.wall_s;
        r.read_busy_s += stats.read_busy_s;
        r.compute_busy_s += stats.compute_busy_s;
        r.peak_reserved_bytes = r.peak_reserved_bytes.max(stats.peak_reserved_bytes);
        r.gb_per_s = (r.bytes_read + r.bytes_written) as f64 / r.wall_s.max(1e-9) / 1e9;
        Ok(r)
    }
}

/// The `standardize` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Per-column (or per-channel) (x - mean) / std in two passes: statistics, then apply",
    after_help = "Examples:
  tilestream standardize x.npy z.npy --memory 512MiB
  tilestream standardize x.npy z16.npy --dtype f16 --stats stats.npz
  tilestream standardize batch.npy z.npy --axis 0,2,3 --memory 256MiB   # per channel of NCHW

Pass 1 computes each column's mean and std in one read (the same arithmetic as reduce
--op mean / --op std); pass 2 writes (x - mean) / std. With --axis the statistics are
taken over those axes, one mean and std per position of the others, which must be
adjacent (0,2,3 of NCHW: per channel; 1,2 of bands x rows x cols: per band). A constant
column gives inf or NaN, as in numpy."
)]
pub struct StandardizeArgs {
    /// Input tensor (rows x columns...; .npy, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file (.npy, or raw for any other extension).
    pub output: PathBuf,
    /// Output dtype (default f32; f64 for f64 input).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Delta degrees of freedom of the std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    pub ddof: u32,
    /// Also write the mean and std used to this .npz (`np.load(path)["mean"]`, `["std"]`).
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Axes to take the statistics over (default 0: per column); `0,2,3` per channel of
    /// NCHW. The axes left must be adjacent.
    #[arg(long, value_parser = Axes::parse)]
    pub axis: Option<Axes>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for StandardizeArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Standardize(StandardizeSpec {
            input: crate::spec::cli::source(&self.input, &self.raw)?,
            output: self.output.clone(),
            ddof: self.ddof,
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
            stats: self.stats.clone(),
            given: None,
            axis: self.axis.clone(),
        }))
    }
}
