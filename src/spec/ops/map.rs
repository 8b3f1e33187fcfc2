//! `map`: an element-wise expression over named inputs, compiled once and evaluated per
//! tile, with nodata masking.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Operation, PipelineStep};
use crate::format::TensorFile;
use crate::scheduler::InputStream;
use crate::spec::{OutputLayout, Source, SpecPlan, georef_from, map_rule, open_named};
use crate::tiling::BoxPlan;
use crate::{DType, Engine, Plan, Result, RunReport};

/// An elementwise expression over named inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapSpec {
    /// The expression.
    pub expr: String,
    /// The inputs, by the names the expression uses.
    pub inputs: Vec<(String, Source)>,
    /// Output file.
    pub output: PathBuf,
    /// Output dtype (default: the widest float input, f64 if none).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// The output's nodata value (`"nan"`, `"-9999"`), given to the pixels where an
    /// input is nodata and written to a GeoTIFF output (see [`crate::MapNodata`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
    /// Compute the pixels where an input is nodata like any other. Always written
    /// out, so that a run from before nodata masking is not resumed as this one.
    #[serde(default)]
    pub ignore_nodata: bool,
    /// The nodata value of named inputs in place of their files' (`None`: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_nodata: Vec<(String, Option<String>)>,
}

impl MapSpec {
    fn rule(&self) -> crate::MapNodata {
        map_rule(self.nodata.as_ref(), self.ignore_nodata, &self.input_nodata)
    }
}

/// The inputs opened, and by name.
fn named(files: &[(String, TensorFile)]) -> Vec<(&str, &TensorFile)> {
    files.iter().map(|(n, f)| (n.as_str(), f)).collect()
}

impl PipelineStep for MapSpec {
    const KEYS: Option<&'static [&'static str]> =
        Some(&["expr", "names", "dtype", "nodata", "ignore_nodata"]);
    /// A pipeline's `map` reads the names its expression uses.
    const NAMES: &'static [&'static str] = &[];
}

impl Operation for MapSpec {
    fn inputs(&self) -> Vec<&Path> {
        self.inputs.iter().map(|(_, s)| s.path.as_path()).collect()
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (
            self.inputs.iter_mut().map(|(_, s)| s).collect(),
            &mut self.output,
        )
    }

    fn output_layout(&self) -> Result<OutputLayout> {
        // the shape the expression iterates over (a plane `x[k]` of an input is one axis
        // short of it) and its default dtype, as the run binds them; nodata refused
        // before the job is split
        let files = open_named(&self.inputs)?;
        let bound = Engine::bind_map(&self.expr, &named(&files), self.dtype, &self.rule())?;
        Ok(OutputLayout {
            shape: bound.shape,
            dtype: bound.dtype,
            halo_rows: (0, 0),
        })
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let files = open_named(&self.inputs)?;
        let named = named(&files);
        // refused here as the run would refuse it: a nodata value the output does not
        // hold, masked pixels without a value to give them
        Engine::bind_map(&self.expr, &named, self.dtype, &self.rule())?;
        e.plan_map(&self.expr, &named, self.dtype)
            .map(SpecPlan::Flat)
    }

    fn boxes(
        &self,
        e: &Engine,
        flat: &Plan,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        let files = open_named(&self.inputs)?;
        let (_, streams, _, _): (_, Vec<InputStream<'_>>, _, _) =
            Engine::bind(&self.expr, &named(&files))?;
        e.elementwise_boxes(flat, &streams, &self.output, shape, dtype)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let files = open_named(&self.inputs)?;
        // the georeferencing of the first input that has one
        let e = match files.iter().find(|(_, f)| f.georef().is_some()) {
            Some((_, f)) => georef_from(e, f, None),
            None => e.clone(),
        };
        e.map_with(
            &self.expr,
            &named(&files),
            &self.output,
            self.dtype,
            &self.rule(),
        )
    }
}
