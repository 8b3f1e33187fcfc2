//! `function`: a user's own function over blocks, named by text (`module:function`), for
//! pipeline files run from Python (`tilestream.run`): a step of the pipeline like any
//! other, planned before anything runs and run under the same budget, as
//! `tilestream.map_blocks`/`map_overlap` run it. The engine calls it through the
//! [`FunctionRunner`](crate::engine::FunctionRunner) the Python package sets; the command
//! line has none and refuses such a step in one line.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use super::{Operation, PipelineStep, Tiling};
use crate::engine::BlocksOut;
use crate::spec::{Source, SpecPlan};
use crate::{DType, Engine, Error, Result, RunReport, TensorFile};

/// A function over blocks of one or more aligned inputs, named `module:function`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// The inputs (one, or several sharing their rows and columns), in the order the
    /// function takes their blocks.
    #[serde(deserialize_with = "one_or_many")]
    pub input: Vec<Source>,
    /// Output file.
    pub output: PathBuf,
    /// The function: `module:function` (`scipy.ndimage:median_filter` is no function of
    /// one block; a function of your own module is: `filters:smooth`).
    pub function: String,
    /// Halo rows and columns read around each block (one number for every spatial axis,
    /// or one per axis of the inputs, 0 for the bands); none by default.
    #[serde(default, deserialize_with = "one_or_many")]
    pub halo: Vec<usize>,
    /// What the halo holds past the edges: `reflect`, `nearest`, `constant` (with
    /// `cval`), `wrap` or `none`.
    #[serde(default = "default_boundary")]
    pub boundary: String,
    /// The constant of `boundary = "constant"`.
    #[serde(default)]
    pub cval: f64,
    /// The output's dtype (default: the function's).
    #[serde(default, with = "crate::spec::opt_dtype_name")]
    pub dtype: Option<DType>,
    /// The output's shape (default: the inputs' rows and columns, with the function's
    /// leading axis).
    #[serde(default)]
    pub shape: Option<Vec<usize>>,
    /// A fixed block shape, rows and columns (default: the planner's).
    #[serde(default)]
    pub block: Option<Vec<usize>>,
    /// The function's working memory: a multiple of its padded blocks' bytes, or a size
    /// (`"64MiB"`); measured on a first block when left out.
    #[serde(default)]
    pub working: Option<WorkingMemory>,
    /// Calls of the function at once (for a function that releases the GIL).
    #[serde(default)]
    pub threads: Option<usize>,
}

/// A function's working memory as a step declares it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WorkingMemory {
    /// A multiple of the bytes of the padded blocks it is given.
    Times(f64),
    /// A size (`"64MiB"`).
    Size(String),
}

fn default_boundary() -> String {
    "reflect".into()
}

/// One value or a list of them.
fn one_or_many<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Vec<T>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        Many(Vec<T>),
        One(T),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::Many(v) => v,
        OneOrMany::One(x) => vec![x],
    })
}

impl PipelineStep for FunctionSpec {
    const KEYS: Option<&'static [&'static str]> = Some(&[
        "input", "function", "halo", "boundary", "cval", "dtype", "shape", "block", "working",
        "threads",
    ]);
}

impl FunctionSpec {
    /// The spec as the runner takes it.
    fn step(&self) -> Result<serde_json::Value> {
        serde_json::to_value(self)
            .map_err(|e| Error::invalid(format!("a function step as JSON: {e}")))
    }

    /// The runner of `e`, or the one line refusing the step where there is none.
    fn runner<'e>(&self, e: &'e Engine) -> Result<&'e dyn crate::engine::FunctionRunner> {
        e.functions().map(AsRef::as_ref).ok_or_else(|| {
            Error::invalid(format!(
                "function = \"{}\" names a Python function: run this pipeline from Python \
                 (tilestream.run), which can call it; the command line cannot",
                self.function
            ))
        })
    }

    fn open_all(&self) -> Result<Vec<TensorFile>> {
        if self.input.is_empty() {
            return Err(Error::invalid("a function step needs at least one input"));
        }
        self.input.iter().map(Source::open).collect()
    }
}

impl Operation for FunctionSpec {
    fn inputs(&self) -> Vec<&Path> {
        self.input.iter().map(|s| s.path.as_path()).collect()
    }

    fn output(&self) -> &Path {
        &self.output
    }

    fn paths_mut(&mut self) -> (Vec<&mut Source>, &mut PathBuf) {
        (self.input.iter_mut().collect(), &mut self.output)
    }

    fn tiling(&self) -> Tiling {
        Tiling::Boxes
    }

    fn resumable(&self) -> bool {
        // a function named by text may change between runs while its name does not
        false
    }

    fn written(&self, e: &Engine) -> Result<Option<(Vec<usize>, DType)>> {
        // the runner measures the function (once: it keeps what it found)
        let (_, shape, dtype) = self.runner(e)?.prepare(e, &self.step()?)?;
        Ok(Some((shape, dtype)))
    }

    fn plan_tiles(&self, e: &Engine) -> Result<SpecPlan> {
        let files = self.open_all()?;
        let refs: Vec<&TensorFile> = files.iter().collect();
        let (blocks, shape, dtype) = self.runner(e)?.prepare(e, &self.step()?)?;
        let out = BlocksOut {
            path: &self.output,
            shape,
            dtype,
        };
        e.plan_blocks(&refs, &blocks, Some(&out))
            .map(SpecPlan::Blocks)
    }

    fn run(&self, e: &Engine) -> Result<RunReport> {
        let files = self.open_all()?;
        let refs: Vec<&TensorFile> = files.iter().collect();
        let runner = self.runner(e)?;
        let step = self.step()?;
        let (blocks, shape, dtype) = runner.prepare(e, &step)?;
        let out = BlocksOut {
            path: &self.output,
            shape,
            dtype,
        };
        runner.run(e, &step, &refs, &blocks, &out)
    }
}
