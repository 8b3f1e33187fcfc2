//! `histogram`: numpy's `np.histogram` per position of the kept axes (per band) or over
//! every element, written as an `.npz` of `counts` and `edges`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::reduce::Axes;
use super::{Operation, PipelineStep, Tiling};
use crate::ops::histogram::Bins;
use crate::spec::{Source, SpecPlan};
use crate::{Engine, Result, RunReport};

/// numpy's `bins`: how many equal bins, or their edges.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BinsSpec {
    /// How many equal bins.
    Count(usize),
    /// The edges, increasing.
    Edges(Vec<f64>),
}

impl BinsSpec {
    /// Parses `64` or `0,1,2,5` (the command line's `--bins`).
    ///
    /// # Errors
    /// A message naming what is not a number.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        if let Ok(n) = s.trim().parse::<usize>() {
            return Ok(BinsSpec::Count(n));
        }
        s.split(',')
            .map(|a| {
                a.trim().parse::<f64>().map_err(|_| {
                    format!("`{a}` is not a number: give a count of bins (64) or edges (0,1,2,5)")
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(BinsSpec::Edges)
    }
}

#[cfg(feature = "cli")]
fn parse_range(s: &str) -> std::result::Result<(f64, f64), String> {
    match s
        .split(',')
        .map(|a| a.trim().parse::<f64>())
        .collect::<Vec<_>>()
        .as_slice()
    {
        [Ok(a), Ok(b)] => Ok((*a, *b)),
        _ => Err(format!(
            "`{s}` is not a range: give two numbers such as 0,1"
        )),
    }
}

/// A histogram of one input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramSpec {
    /// Input.
    pub input: Source,
    /// Output `.npz` (`counts`, `edges`).
    pub output: PathBuf,
    /// How many equal bins (default 10, numpy's), or their edges.
    #[serde(default = "ten")]
    pub bins: BinsSpec,
    /// The outer edges of equal bins; `None`: each output's minimum and maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<(f64, f64)>,
    /// The axes counted over (per band of a scene: `[1, 2]`); `None` for every element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<Axes>,
    /// With a count of bins and no range: each output's `[min, max]` (C order over the
    /// kept axes; `null` for an output with nothing to count) to take the automatic
    /// range of, in place of the input's own: what each share of a histogram split over
    /// Dask counts with (the whole input's extremes). Integers as JSON integers, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extremes: Option<Vec<Option<(ExtremeValue, ExtremeValue)>>>,
}

/// A minimum or maximum in a spec: a JSON integer (exact, to 64 bits) or a number.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ExtremeValue {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer beyond `i64`.
    UInt(u64),
    /// Any other number.
    Float(f64),
}

impl ExtremeValue {
    /// As the `(value, exact integer)` pair [`Bins::Extremes`] takes.
    #[must_use]
    pub fn pair(self) -> crate::ops::histogram::Extreme {
        match self {
            // the nearest f64, as an integer element's to_f64 gives
            ExtremeValue::Int(v) => (v as f64, i128::from(v)),
            ExtremeValue::UInt(v) => (v as f64, i128::from(v)),
            ExtremeValue::Float(v) => (v, 0),
        }
    }
}

fn ten() -> BinsSpec {
    BinsSpec::Count(10)
}

impl HistogramSpec {
    /// The bins asked for.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a range given with edges.
    pub fn bins(&self) -> Result<Bins> {
        match (&self.bins, self.range, &self.extremes) {
            (BinsSpec::Count(n), None, Some(per)) => Ok(Bins::Extremes {
                n: *n,
                per: per
                    .iter()
                    .map(|e| e.map(|(lo, hi)| (lo.pair(), hi.pair())))
                    .collect(),
            }),
            (_, _, Some(_)) => Err(crate::Error::invalid(
                "histogram extremes are for a count of bins without a range",
            )),
            (BinsSpec::Count(n), range, None) => Ok(Bins::Count { n: *n, range }),
            (BinsSpec::Edges(e), None, None) => Ok(Bins::Edges(e.clone())),
            (BinsSpec::Edges(_), Some(_), None) => Err(crate::Error::invalid(
                "a histogram range is for a count of bins: edges give their own",
            )),
        }
    }
}

impl PipelineStep for HistogramSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&["input", "bins", "range", "axis"]);
}

impl Operation for HistogramSpec {
    fn inputs(&self) -> Vec<&Path> {
        vec![&self.input.path]
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (vec![&mut self.input], &mut self.output)
    }

    fn resumable(&self) -> bool {
        // counts are not checkpointed: a run starts again
        false
    }

    fn tiling(&self) -> Tiling {
        Tiling::FlatResult
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let x = self.input.open()?;
        let bins = self.bins()?;
        bins.check()?;
        e.plan_histogram(&x, Axes::over(self.axis.as_ref())?, bins.len())
            .map(SpecPlan::Flat)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let x = self.input.open()?;
        e.histogram_to_file(
            &x,
            Axes::over(self.axis.as_ref())?,
            &self.bins()?,
            &self.output,
        )
    }
}

/// The `histogram` subcommand's arguments.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug)]
#[command(
    about = "numpy's np.histogram per band or over everything, within the budget, into an .npz",
    after_help = "Examples:
  tilestream histogram scene.tif hist.npz --bins 256 --axis 1,2   # per band, each over its own range
  tilestream histogram x.npy hist.npz --bins 64 --range 0,1
  tilestream histogram x.npy hist.npz --bins 0,0.5,1,2,10           # explicit edges

The .npz holds counts (i64: the kept axes, then the bins) and edges (bins + 1; per output
when the range is each output's own minimum and maximum). Each output's counts are
numpy's np.histogram of its elements exactly, edges included: equal bins are computed
in the types numpy computes them in. NaN is never counted (an automatic range over NaN
or infinities is refused, as numpy raises: give --range); nodata pixels (a GeoTIFF's, or
--in-nodata) are left out."
)]
pub struct HistogramArgs {
    /// Input tensor (.npy, GeoTIFF, Zarr, or raw with --shape and --in-dtype).
    pub input: PathBuf,
    /// Output .npz (counts, edges).
    pub output: PathBuf,
    /// How many equal bins (default 10), or increasing edges (0,1,2,5).
    #[arg(long, default_value = "10", value_parser = BinsSpec::parse)]
    pub bins: BinsSpec,
    /// The outer edges of the equal bins (lo,hi); default each output's minimum and
    /// maximum.
    #[arg(long, value_parser = parse_range, allow_hyphen_values = true)]
    pub range: Option<(f64, f64)>,
    /// Axes to count over (1,2 of bands x rows x cols: per band); omit for every element.
    #[arg(long, value_parser = Axes::parse)]
    pub axis: Option<Axes>,
    /// The input's nodata value (left out), in place of what its file says; `none`.
    #[arg(long = "in-nodata", allow_hyphen_values = true)]
    pub in_nodata: Option<String>,
    #[command(flatten)]
    pub raw: crate::spec::cli::RawSpec,
}

#[cfg(feature = "cli")]
impl super::Arguments for HistogramArgs {
    fn spec(&self) -> Result<crate::spec::OpSpec> {
        Ok(crate::spec::OpSpec::Histogram(HistogramSpec {
            input: crate::spec::Source {
                nodata: self.in_nodata.clone(),
                ..crate::spec::cli::source(&self.input, &self.raw)?
            },
            output: self.output.clone(),
            bins: self.bins.clone(),
            range: self.range,
            axis: self.axis.clone(),
            extremes: None,
        }))
    }
}
