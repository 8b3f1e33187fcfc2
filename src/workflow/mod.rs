//! Pipeline files: `tilestream run pipeline.toml` — named inputs, a sequence of steps
//! (any streaming operation of the command line) and named outputs, under one memory
//! budget.
//!
//! ```toml
//! memory = "256MiB"                 # optional; --memory on the command line wins
//!
//! [inputs]
//! scene = "scene.npy"               # paths relative to this file
//!
//! [[steps]]
//! op = "map"
//! expr = "(s[3] - s[2]) / (s[3] + s[2])"
//! names = { s = "scene" }           # optional: expression name -> pipeline name
//! out = "ndvi"
//!
//! [[steps]]
//! op = "map"
//! expr = "clip(ndvi, 0, 1)"
//! out = "veg"
//! dtype = "f32"
//!
//! [[steps]]
//! op = "stencil"
//! input = "veg"
//! filter = "gaussian:sigma=2"
//! out = "smooth"
//!
//! [outputs]
//! smooth = "smooth.npy"
//! ```
//!
//! A step is any operation a pipeline runs ([`OpSpec::pipeline_keys`]), with the keys of
//! its spec; the keys that name its inputs (`input`, matmul's `x` and `w`) give the
//! names of earlier values, and the step's `out` names its result.
//!
//! Elementwise steps (`map`, `affine`, `cast`, `clip`) that follow one another fuse into one
//! pass: a result that is not an output and has no `dtype` of its own is not written
//! anywhere — its expression is substituted into the steps that use it (kept in f64 in
//! between; give a step a `dtype` to round it there). A step with a `nodata` or
//! `ignore_nodata` of its own is written, and reads the values before it from files, so
//! that its rule is not theirs; each step reads an earlier value with the nodata value
//! that value was given. Every other result goes to its
//! output path, or to a temporary file in a directory beside the first output that is
//! removed at the end or on error.
//!
//! Everything is checked before anything runs: unknown keys, missing or misspelled names,
//! shapes and dtypes through every step (each step is planned on placeholder files of the
//! shapes the previous steps produce), and the budget; errors name the line of the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::spec::OpSpec;

mod file;
mod fuse;
mod names;

use file::{check_name, line_of, parse_file};
use fuse::Fuser;
pub(crate) use names::expr_names;

/// An elementwise pass (fused steps): an expression over named pipeline values.
#[derive(Clone, Debug)]
struct FusedMap {
    expr: String,
    dtype: Option<DType>,
    /// Written in the dtype the fused evaluation carries (f64, or complex128 for a
    /// complex value): a value written out only because fusing it grew too long.
    wide: bool,
    /// Names whose dtypes decide the default output dtype, when the expression reads
    /// values written in f64 only because fusing them grew too long (empty: the
    /// expression's own names).
    like: Vec<String>,
    /// What it does where an input is nodata.
    nodata: crate::MapNodata,
}

/// One job a pipeline runs.
#[derive(Clone, Debug)]
enum Job {
    /// Fused element-wise steps.
    Map(FusedMap),
    /// Any other operation: its spec, whose sources' paths are the names of the values
    /// it reads (`names`, in order) and whose output is bound when it is planned or run.
    Op {
        spec: Box<OpSpec>,
        names: Vec<String>,
    },
}

/// A job with where it came from and what it produces.
#[derive(Clone, Debug)]
struct Planned {
    job: Job,
    out: String,
    line: usize,
    what: String,
}

/// A checked pipeline, ready to plan or run.
#[derive(Debug)]
pub struct Workflow {
    path: PathBuf,
    memory: Option<String>,
    device: Option<crate::device::DeviceRequest>,
    inputs: BTreeMap<String, PathBuf>,
    outputs: BTreeMap<String, PathBuf>,
    jobs: Vec<Planned>,
}

impl Workflow {
    /// Reads and checks a pipeline file (syntax, keys, names, fusion). Shapes, dtypes
    /// and budgets are checked by [`Workflow::plan`].
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the line of the file.
    pub fn load(path: impl AsRef<Path>) -> Result<Workflow> {
        Self::load_with(path, &[], &[])
    }

    /// Reads and checks a pipeline file as [`Workflow::load`], with the same steps run on
    /// other files: each `(name, path)` of `inputs` replaces the file of the input `name`
    /// (the file's own need not exist), each of `outputs` the destination of the output
    /// `name` (how one pipeline is run over thousands of scenes). Paths given here are
    /// taken as they are (relative to the current directory), not from the file's.
    ///
    /// # Errors
    /// As [`Workflow::load`]; [`Error::Invalid`] for a name the file does not have.
    pub fn load_with(
        path: impl AsRef<Path>,
        in_paths: &[(String, PathBuf)],
        out_paths: &[(String, PathBuf)],
    ) -> Result<Workflow> {
        let path = path.as_ref();
        let (text, spec) = parse_file(path)?;
        let file = path.display().to_string();
        let base = path.parent().unwrap_or(Path::new("."));
        let at = |line: usize, msg: String| Error::Invalid(format!("{file} line {line}: {msg}"));
        let given = |list: &[(String, PathBuf)],
                     names: &BTreeMap<String, Spanned<String>>,
                     what| {
            match list.iter().find(|(n, _)| !names.contains_key(n)) {
                Some((n, _)) => Err(Error::Invalid(format!(
                    "{file} has no {what} `{n}` (its {what}s: {})",
                    names.keys().cloned().collect::<Vec<_>>().join(", ")
                ))),
                None => Ok(()),
            }
        };
        given(in_paths, &spec.inputs, "input")?;
        given(out_paths, &spec.outputs, "output")?;
        let replaced = |list: &[(String, PathBuf)], name: &str| {
            list.iter().find(|(n, _)| n == name).map(|(_, p)| p.clone())
        };
        let mut known: BTreeMap<String, usize> = BTreeMap::new();
        let mut inputs = BTreeMap::new();
        for (name, p) in &spec.inputs {
            let line = line_of(&text, p.span().start);
            check_name(name).map_err(|m| at(line, format!("input `{name}`: {m}")))?;
            let full = replaced(in_paths, name).unwrap_or_else(|| beside(base, p.get_ref()));
            // (an object is looked for when it is opened, with one request)
            if !crate::io::remote::is_url(&full) && !full.exists() {
                return Err(at(
                    line,
                    format!("input `{name}`: {} does not exist", full.display()),
                ));
            }
            known.insert(name.clone(), line);
            inputs.insert(name.clone(), full);
        }
        if spec.steps.is_empty() {
            return Err(at(1, "no [[steps]]: give at least one step".into()));
        }
        let out_names = spec.outputs.keys().cloned().collect();
        let mut fuser = Fuser::new(file.clone(), base, out_names, known);
        for s in &spec.steps {
            // a step's span starts after the table before it: report its `[[steps]]` line
            let start = s.span().start;
            let header = start + text[start..].find("[[steps]]").unwrap_or(0);
            let body = &text[header..];
            fuser.step(s.get_ref(), line_of(&text, header), body)?;
        }
        let (known, jobs) = (fuser.known, fuser.jobs);
        let mut outputs = BTreeMap::new();
        for (name, p) in &spec.outputs {
            let line = line_of(&text, p.span().start);
            if !known.contains_key(name) || inputs.contains_key(name) {
                return Err(at(
                    line,
                    format!("output `{name}` is not produced by any step"),
                ));
            }
            let dest = replaced(out_paths, name).unwrap_or_else(|| beside(base, p.get_ref()));
            if crate::io::remote::is_url(&dest) {
                // an object: one that takes writes (the gate says why not in its words)
                crate::io::own_files::check_destination(
                    &dest,
                    crate::io::own_files::Dest::of(&dest),
                )
                .map_err(|e| at(line, e.to_string()))?;
            }
            if let Some((other, _)) = outputs.iter().find(|(_, d)| **d == dest) {
                return Err(at(
                    line,
                    format!(
                        "outputs `{other}` and `{name}` are both written to {}; give each its \
                         own path",
                        dest.display()
                    ),
                ));
            }
            outputs.insert(name.clone(), dest);
        }
        if outputs.is_empty() {
            return Err(at(
                1,
                "no [outputs]: name at least one result to write".into(),
            ));
        }
        Ok(Workflow {
            path: path.to_path_buf(),
            memory: spec.memory,
            device: spec.device,
            inputs,
            outputs,
            jobs,
        })
    }

    /// The names of the inputs and outputs of the pipeline file `path`, read without
    /// checking the rest (its input files need not exist).
    ///
    /// # Errors
    /// [`Error::Invalid`] if it is not a pipeline file; I/O errors.
    pub fn names_of(path: impl AsRef<Path>) -> Result<(Vec<String>, Vec<String>)> {
        let (_, spec) = parse_file(path.as_ref())?;
        Ok((
            spec.inputs.keys().cloned().collect(),
            spec.outputs.keys().cloned().collect(),
        ))
    }

    /// The budget the file asks for (`memory = "..."`), if any.
    #[must_use]
    pub fn memory(&self) -> Option<&str> {
        self.memory.as_deref()
    }

    /// The device the file asks for (`device = "cuda"`), if any.
    #[must_use]
    pub fn device(&self) -> Option<crate::device::DeviceRequest> {
        self.device
    }
}

pub use crate::spec::load_kernel;

mod run;

/// A path the pipeline file gives, relative to the file's folder `base`; an object's URL
/// stays as it is (it is relative to nothing).
fn beside(base: &Path, given: &str) -> PathBuf {
    let given = Path::new(given);
    if crate::io::remote::is_url(given) {
        given.to_path_buf()
    } else {
        base.join(given)
    }
}
