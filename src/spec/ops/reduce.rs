//! `reduce`: a reduction (`sum`, `mean`, `var`, `std`, `min`, `max`, ...; quantiles,
//! percentiles and medians) over one axis, several or all elements, written to a small
//! file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::ops::quantile::Quantiles;
use crate::spec::{Source, SpecPlan};
use crate::{DType, Engine, Reduce, ReduceOver, Result, RunReport};

/// The `q` of a quantile or percentile: one number (`"q": 0.5`, no axis for it in the
/// result) or several (`"q": [0.02, 0.98]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Qs {
    /// One quantile.
    One(f64),
    /// Several quantiles.
    Many(Vec<f64>),
}

impl Qs {
    /// Parses `0.5` or `0.02,0.98` (the command line's `--q`).
    ///
    /// # Errors
    /// A message naming what is not a number.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let list = s
            .split(',')
            .map(|a| {
                a.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("`{a}` is not a number: give q such as 0.5 or 0.02,0.98"))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(match list.as_slice() {
            [q] => Qs::One(*q),
            _ => Qs::Many(list),
        })
    }

    fn list(&self) -> (Vec<f64>, bool) {
        match self {
            Qs::One(q) => (vec![*q], true),
            Qs::Many(v) => (v.clone(), false),
        }
    }
}

/// The axes a reduction runs over: one (`"axis": 1`) or several (`"axis": [0, 2, 3]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Axes {
    /// One axis.
    One(usize),
    /// Several axes (numpy's `axis=(0, 2, 3)`).
    Many(Vec<usize>),
}

impl Axes {
    /// What a reduction over these axes (all elements for `None`) runs over.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for no axis or an axis given twice.
    pub fn over(axes: Option<&Axes>) -> Result<ReduceOver> {
        match axes {
            None => Ok(ReduceOver::All),
            Some(Axes::One(a)) => Ok(ReduceOver::Axis(*a)),
            Some(Axes::Many(v)) => ReduceOver::axes(v),
        }
    }

    /// Parses `1` or `0,2,3` (the command line's `--axis`).
    ///
    /// # Errors
    /// A message naming what is not an axis.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let list = s
            .split(',')
            .map(|a| {
                a.trim().parse::<usize>().map_err(|_| {
                    format!("`{a}` is not an axis: give a number or a list such as 0,2,3")
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(match list.as_slice() {
            [a] => Axes::One(*a),
            _ => Axes::Many(list),
        })
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

/// A reduction over one axis, several or all elements.
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
    /// The axis or axes reduced over; `None` for all elements.
    #[serde(default)]
    pub axis: Option<Axes>,
    /// Keep the reduced axes in the result's shape, as length 1 (numpy's `keepdims`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub keepdims: bool,
    /// Output dtype (default: the reduction's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// The quantiles of `quantile` (in `[0, 1]`) or percentiles of `percentile` (in
    /// `[0, 100]`), and their `nan` forms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<Qs>,
    /// How a quantile between two elements is taken: `linear` (default), `lower`,
    /// `higher`, `nearest` or `midpoint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

fn sum() -> String {
    "sum".into()
}

impl ReduceSpec {
    /// The quantiles asked for, when the reduction is a quantile, percentile or median.
    ///
    /// # Errors
    /// As [`Quantiles::parse`]; [`crate::Error::Invalid`] for a `q` or `method` given to
    /// another reduction.
    pub fn quantiles(&self) -> Result<Option<Quantiles>> {
        let (q, scalar) = self.q.as_ref().map(Qs::list).unzip();
        let found = Quantiles::parse(
            &self.reduce,
            q.as_deref(),
            scalar.unwrap_or(false),
            self.method.as_deref(),
        )?;
        if found.is_none() && (self.q.is_some() || self.method.is_some()) {
            return Err(crate::Error::invalid(format!(
                "q and method are for quantile, percentile and median (and their nan forms), \
                 not {}",
                self.reduce
            )));
        }
        Ok(found)
    }
}

impl PipelineStep for ReduceSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&[
        "input", "reduce", "axis", "keepdims", "ddof", "dtype", "q", "method",
    ]);
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

    fn written(&self, _e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        let x = self.input.open()?;
        if let Some(q) = self.quantiles()? {
            let over = Axes::over(self.axis.as_ref())?;
            return Ok(Some((
                q.out_shape(&over.out_shape_keeping(x.shape(), self.keepdims)),
                self.dtype.unwrap_or(q.output_dtype(x.dtype())),
            )));
        }
        let r = Reduce::parse(&self.reduce, self.ddof)?;
        Ok(Some((
            Axes::over(self.axis.as_ref())?.out_shape_keeping(x.shape(), self.keepdims),
            self.dtype.unwrap_or(r.output_dtype(x.dtype())),
        )))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        if let Some(q) = self.quantiles()? {
            let over = Axes::over(self.axis.as_ref())?;
            return e
                .plan_quantile(&self.input.open()?, over, &q)
                .map(SpecPlan::Flat);
        }
        let op = Reduce::parse(&self.reduce, self.ddof)?;
        let x = self.input.open()?;
        Engine::check_result_cast(&x, op, self.dtype)?;
        e.plan_reduce(&x, op, Axes::over(self.axis.as_ref())?)
            .map(SpecPlan::Flat)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        let over = Axes::over(self.axis.as_ref())?;
        if let Some(q) = self.quantiles()? {
            return e.quantile_to_file(&x, over, &q, &self.output, self.dtype, self.keepdims);
        }
        let r = Reduce::parse(&self.reduce, self.ddof)?;
        e.reduce_to_file_keeping(&x, r, over, &self.output, self.dtype, self.keepdims)
    }
}

/// The `reduce` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "Reduce along axes or over everything: sum, mean, min, max, var, std, their nan forms, count, argmin, argmax, nanargmin, nanargmax, quantiles",
    after_help = "Examples:
  tilestream reduce x.npy colmean.npy --op mean --axis 0 --memory 256MiB
  tilestream reduce x.npy total.npy --op sum
  tilestream reduce batch.npy chmean.npy --op mean --axis 0,2,3 --memory 256MiB   # per channel of NCHW
  tilestream reduce x.raw rowstd.npy --op std --axis 1 --ddof 1 --shape 1000x512 --in-dtype f32
  tilestream reduce x.npy peakrow.npy --op argmax --axis 0   # row of each column's maximum
  tilestream reduce scene.tif stretch.npy --op percentile --q 2,98 --axis 1,2   # per band
  tilestream reduce x.npy med.npy --op median --axis 0

Results: sum is f64 for floats, i64 for signed ints and bool, u64 for unsigned; mean, var
and std are f64; min and max keep the input dtype; count is i64. The nan forms (nansum,
nanmean, nanmin, nanmax, nanvar, nanstd, count, nanargmin, nanargmax, and the nan
quantiles) leave out NaN and the input's nodata pixels (a GeoTIFF's GDAL nodata, or
--in-nodata); an integer input's nanmin/nanmax of nodata alone is the nodata value; the
plain forms take every element, as numpy does. argmin and argmax are i64 indices along
the axis (flat over all elements), numpy's: the first occurrence, the first NaN if any;
one axis or none; nanargmin/nanargmax refuse a slice with nothing valid, as numpy raises.
quantile (--q in [0, 1]), percentile (--q in [0, 100]), median and their nan forms are
numpy's, exactly (--method linear, lower, higher, nearest, midpoint), with a leading axis
for --q when it lists several. Bit-identical whatever --memory and --threads."
)]
pub struct ReduceArgs {
    /// Input tensor (.npy, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output file for the result (.npy, .tif GeoTIFF, .zarr store, or raw for any other
    /// extension).
    pub output: PathBuf,
    /// Reduction: sum, mean, min, max, var, std; nansum, nanmean, nanmin, nanmax, nanvar,
    /// nanstd (NaN and nodata left out); count (of the valid elements); argmin, argmax
    /// (where the extreme first occurs, i64: one axis or none), nanargmin, nanargmax;
    /// quantile, percentile, median and nanquantile, nanpercentile, nanmedian (with --q).
    #[arg(long, default_value = "sum")]
    pub op: String,
    /// Axis to reduce, or several (`0,2,3`); omit to reduce over all elements.
    #[arg(long, value_parser = Axes::parse)]
    pub axis: Option<Axes>,
    /// Keep the reduced axes in the result's shape, as length 1.
    #[arg(long)]
    pub keepdims: bool,
    /// Delta degrees of freedom for var and std (divisor n - ddof).
    #[arg(long, default_value_t = 0)]
    pub ddof: u32,
    /// Quantiles of quantile (in [0, 1]) or percentiles of percentile (in [0, 100]): one,
    /// or several (`2,98`: the result gets a leading axis of them).
    #[arg(long, value_parser = Qs::parse, allow_hyphen_values = true)]
    pub q: Option<Qs>,
    /// How a quantile between two elements is taken: linear (numpy's default), lower,
    /// higher, nearest or midpoint.
    #[arg(long)]
    pub method: Option<String>,
    /// Cast the result to this dtype.
    #[arg(long)]
    pub dtype: Option<String>,
    /// The input's nodata value (-9999, nan), which the nan forms, count and the nan
    /// quantiles leave out, in place of what its file says (a GeoTIFF's GDAL nodata);
    /// `none` for none.
    #[arg(long = "in-nodata", allow_hyphen_values = true)]
    pub in_nodata: Option<String>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for ReduceArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Reduce(ReduceSpec {
            input: crate::spec::Source {
                nodata: self.in_nodata.clone(),
                ..crate::spec::cli::source(&self.input, &self.raw)?
            },
            output: self.output.clone(),
            reduce: self.op.clone(),
            ddof: self.ddof,
            axis: self.axis.clone(),
            keepdims: self.keepdims,
            dtype: crate::spec::cli::dtype_opt(self.dtype.as_ref())?,
            q: self.q.clone(),
            method: self.method.clone(),
        }))
    }
}
