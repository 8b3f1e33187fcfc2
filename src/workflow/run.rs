//! Planning and running a loaded pipeline file: each job is planned on placeholder files
//! of the shapes the jobs before it produce (the dry run), then run as an [`OpSpec`]
//! through [`Engine::run_spec`], the path the command line takes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Job, Planned, Workflow, expr_names};
use crate::MapNodata;
use crate::dtype::DType;
use crate::engine::{Engine, RunReport};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::io::own_files::{Written as WrittenPath, check_run_paths};
use crate::ops::reduce::{Reduce, ReduceOver};
use crate::plan::Plan;
use crate::spec::{
    MapSpec, MatmulSpec, OpSpec, ReduceSpec, Source, StandardizeSpec, StencilSpec, TransposeSpec,
};

/// The nodata value of each job's result, by the name of the value.
type Written = BTreeMap<String, Option<String>>;

impl Workflow {
    /// Plans every job on placeholder files of the shapes the jobs before produce (sparse
    /// files: no disk is used), returning each job's plan as text. This is the check that
    /// shapes, dtypes and the budget work for every step.
    ///
    /// # Errors
    /// [`Error::Invalid`] or [`Error::Budget`] naming the line of the step.
    pub fn plan(&self, engine: &Engine) -> Result<String> {
        self.plan_all(engine).map(|(text, _)| text)
    }

    /// [`Workflow::plan`], with the nodata value of each job's result (what the pixels
    /// its map masked hold; `None` for a result without), which the jobs after it read
    /// in place of what their files say: a `.npy` intermediate carries no tag, and a
    /// GeoTIFF output's is known before it is written.
    fn plan_all(&self, engine: &Engine) -> Result<(String, Written)> {
        // a dry run that passes must not leave a run to fail on a missing directory
        for (name, dest) in &self.outputs {
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(Error::Invalid(format!(
                    "{}: output `{name}` goes to {}, but the directory {} does not exist; \
                     create it first",
                    self.path.display(),
                    dest.display(),
                    parent.display()
                )));
            }
        }
        self.check_paths()?;
        let dir =
            tempfile::tempdir().map_err(|e| Error::io("create", "a temporary directory", e))?;
        let mut files: BTreeMap<String, TensorFile> = BTreeMap::new();
        for (name, p) in &self.inputs {
            files.insert(name.clone(), TensorFile::open(p)?);
        }
        let mut text = String::new();
        let mut written = Written::new();
        for (i, j) in self.jobs.iter().enumerate() {
            // a step writing an output is planned with it: the room for encoding a
            // GeoTIFF or Zarr destination as it is written, a COG's overviews
            let dest = self.outputs.get(&j.out).map(PathBuf::as_path);
            let (plan, shape, dtype, nodata) =
                Self::plan_job(engine, j, &files, &written, dest).map_err(|e| self.at(j, e))?;
            written.insert(j.out.clone(), nodata);
            let _ = writeln!(
                text,
                "step {} (line {}): {} -> {} {} {dtype}\n{plan}\n",
                i + 1,
                j.line,
                j.what,
                j.out,
                fmt_shape(&shape)
            );
            let p = dir.path().join(format!("{}.raw", j.out));
            let f = std::fs::File::create(&p).map_err(|e| Error::io("create", &p, e))?;
            let n: u64 = shape.iter().map(|&d| d as u64).product::<u64>() * dtype.size() as u64;
            f.set_len(n).map_err(|e| Error::io("size", &p, e))?;
            files.insert(j.out.clone(), TensorFile::open_raw(&p, &shape, dtype)?);
        }
        Ok((text, written))
    }

    /// The destination policy over the whole pipeline ([`check_run_paths`]): no output
    /// is a device, FIFO or socket, the pipeline file itself, a declared input (used or
    /// not) or a convolution kernel, and no two outputs are one path.
    fn check_paths(&self) -> Result<()> {
        let writes: Vec<WrittenPath<'_>> = self
            .outputs
            .values()
            .map(|p| WrittenPath {
                role: "output",
                path: p,
                dir: false,
            })
            .collect();
        let mut reads: Vec<(&str, &Path)> = vec![("pipeline file", &self.path)];
        reads.extend(self.inputs.values().map(|p| ("input", p.as_path())));
        for j in &self.jobs {
            if let Job::Stencil { filter, .. } = &j.job
                && let Some(k) = filter.strip_prefix("convolve:")
            {
                reads.push(("convolution kernel", Path::new(k)));
            }
        }
        check_run_paths(&writes, &reads)
            .map_err(|e| Error::Invalid(format!("{}: {e}", self.path.display())))
    }

    /// A map job's nodata rule, with the nodata values of the earlier jobs' results it
    /// reads.
    fn map_rule(rule: &MapNodata, expr: &str, written: &Written) -> MapNodata {
        let mut r = rule.clone();
        for (n, _) in expr_names(expr) {
            if let Some(nd) = written.get(&n)
                && !r.inputs.iter().any(|(m, _)| *m == n)
            {
                r.inputs.push((n, nd.clone()));
            }
        }
        r
    }

    fn at(&self, j: &Planned, e: Error) -> Error {
        let msg = format!(
            "{} line {}: step -> `{}`: {e}",
            self.path.display(),
            j.line,
            j.out
        );
        match e {
            Error::Budget(_) | Error::Invalid(_) => Error::Invalid(msg),
            other => other,
        }
    }

    fn plan_job(
        e: &Engine,
        j: &Planned,
        files: &BTreeMap<String, TensorFile>,
        written: &Written,
        dest: Option<&Path>,
    ) -> Result<(String, Vec<usize>, DType, Option<String>)> {
        let (mut plan, shape, dtype, nodata) = Self::plan_tiles(e, j, files, written, dest)?;
        if let Some(d) = dest
            && let Some(after) = e.cog_after_the_run(d, &shape, dtype)?
        {
            plan = format!("{plan}\nafter the run:  {after}");
        }
        Ok((plan, shape, dtype, nodata))
    }

    /// The tiles of a job's plan (see [`Workflow::plan_job`]), the shape and dtype of its
    /// result, and the nodata value of its result (what the pixels its map masked hold;
    /// a transpose's is that of what it moves).
    fn plan_tiles(
        e: &Engine,
        j: &Planned,
        files: &BTreeMap<String, TensorFile>,
        written: &Written,
        dest: Option<&Path>,
    ) -> Result<(String, Vec<usize>, DType, Option<String>)> {
        // flat plans writing a destination set aside what encoding it takes
        let flat =
            |shape: &[usize], dtype: DType, plan: &dyn Fn(&Engine) -> Result<Plan>| match dest {
                Some(d) => e.plan_writing(d, shape, dtype, plan),
                None => plan(e),
            };
        let f = |n: &str| {
            files
                .get(n)
                .ok_or_else(|| Error::Internal(format!("pipeline value `{n}` missing")))
        };
        let mut result_nodata = None;
        let (text, shape, dtype) = match &j.job {
            Job::Map {
                expr,
                dtype,
                like,
                nodata,
            } => {
                let named = Self::named(expr, files);
                let refs: Vec<(&str, &TensorFile)> =
                    named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
                let dtype = &Self::map_dtype(*dtype, like, files)?;
                // refused before anything runs, as the run would refuse it
                let rule = Self::map_rule(nodata, expr, written);
                let bound = Engine::bind_map(expr, &refs, *dtype, &rule)?;
                result_nodata = bound.nodata;
                let (streams, shape, od) = (bound.streams, bound.shape, bound.dtype);
                let p = flat(&shape, od, &|e: &Engine| e.plan_map(expr, &refs, *dtype))?;
                // as the run: in boxes along the output's chunks when the flat plan cannot
                // encode it as it writes it, refused when neither can
                let boxes = match dest {
                    Some(d) => e.elementwise_boxes(&p, &streams, d, &shape, od)?,
                    None => None,
                };
                let text = match (boxes, dest) {
                    (Some(b), _) => b.to_string(),
                    (None, Some(d)) if p.output_bytes == 0 && e.encodes(d) => {
                        return Err(e.cannot_stream(d, &shape, od, None));
                    }
                    (None, _) => p.to_string(),
                };
                (text, shape, od)
            }
            Job::Reduce {
                input,
                op,
                axis,
                dtype,
            } => {
                let x = f(input)?;
                let over = ReduceOver::from(*axis);
                let p = e.plan_reduce(x, *op, over)?;
                let shape = over.out_shape(x.shape());
                (
                    p.to_string(),
                    shape,
                    dtype.unwrap_or(op.output_dtype(x.dtype())),
                )
            }
            Job::Stencil {
                input,
                stencil,
                dtype,
                ..
            } => {
                let x = f(input)?;
                let p = e.plan_stencil_to(x, stencil, *dtype, dest)?;
                (
                    p.to_string(),
                    x.shape().to_vec(),
                    dtype.unwrap_or(x.dtype()),
                )
            }
            Job::Transpose { input } => {
                let x = f(input)?;
                let p = e.plan_transpose_to(x, dest)?;
                let shape = crate::engine::transposed_shape(x.shape());
                // values moved, not computed: the nodata value of the value read (a
                // pipeline input's is its file's)
                result_nodata = match written.get(input) {
                    Some(nodata) => nodata.clone(),
                    None => x.nodata().map(|(text, _)| text.to_string()),
                };
                (p.to_string(), shape, x.dtype())
            }
            Job::Matmul { x, w, dtype } => {
                let (xf, wf) = (f(x)?, f(w)?);
                let c = crate::ops::matmul::compute_dtype(xf.dtype(), wf.dtype());
                let (shape, od) = (vec![xf.shape()[0], wf.shape()[1]], dtype.unwrap_or(c));
                let p = flat(&shape, od, &|e: &Engine| e.plan_matmul(xf, wf, *dtype))?;
                if let Some(d) = dest
                    && p.output_bytes == 0
                    && e.encodes(d)
                {
                    // refused as the run refuses it (no box fallback for matmul)
                    return Err(e.cannot_stream(d, &shape, od, None));
                }
                (p.to_string(), shape, od)
            }
            Job::Standardize { input, dtype, .. } => {
                let x = f(input)?;
                let p = e.plan_reduce(x, Reduce::Std { ddof: 0 }, ReduceOver::Axis(0))?;
                let d = dtype.unwrap_or(if x.dtype() == DType::F64 {
                    DType::F64
                } else {
                    DType::F32
                });
                (p.to_string(), x.shape().to_vec(), d)
            }
        };
        Ok((text, shape, dtype, result_nodata))
    }

    /// The dtype of a map job: the one given, else (for a job reading values written in
    /// f64 for length) the default over the names they stand for, so that the output is
    /// what a fused evaluation would have written.
    fn map_dtype(
        dtype: Option<DType>,
        like: &[String],
        files: &BTreeMap<String, TensorFile>,
    ) -> Result<Option<DType>> {
        if dtype.is_some() || like.is_empty() {
            return Ok(dtype);
        }
        let dtypes = like
            .iter()
            .map(|n| {
                files
                    .get(n)
                    .map(TensorFile::dtype)
                    .ok_or_else(|| Error::Internal(format!("pipeline value `{n}` missing")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Engine::map_default_dtype(&dtypes)))
    }

    /// The files an expression names.
    fn named<'a>(
        expr: &str,
        files: &'a BTreeMap<String, TensorFile>,
    ) -> Vec<(String, &'a TensorFile)> {
        let mut v: Vec<(String, &TensorFile)> = Vec::new();
        for (n, _) in expr_names(expr) {
            if let Some(t) = files.get(&n)
                && !v.iter().any(|(m, _)| *m == n)
            {
                v.push((n, t));
            }
        }
        v
    }

    /// Checks everything ([`Workflow::plan`]), then runs the jobs in order. Results that
    /// are not outputs live in a temporary directory beside the first output, removed at
    /// the end or on error.
    ///
    /// # Errors
    /// The first failing step's error, naming its line.
    pub fn run(&self, engine: &Engine) -> Result<Vec<RunReport>> {
        let (_, written) = self.plan_all(engine)?;
        let first = self.outputs.values().next().cloned().unwrap_or_default();
        let parent = first
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = tempfile::Builder::new()
            .prefix(crate::format::PIPELINE_DIR_PREFIX)
            .tempdir_in(parent)
            .map_err(|e| Error::io("create a temporary directory in", parent, e))?;
        // held while the pipeline runs, so `tilestream clean` leaves this directory alone
        let lock_path = tmp.path().join(".lock");
        let lock_file =
            std::fs::File::create(&lock_path).map_err(|e| Error::io("create", &lock_path, e))?;
        let _held = crate::format::lock(&lock_file);
        let mut files: BTreeMap<String, TensorFile> = BTreeMap::new();
        for (name, p) in &self.inputs {
            files.insert(name.clone(), TensorFile::open(p)?);
        }
        let mut reports = Vec::new();
        for (i, j) in self.jobs.iter().enumerate() {
            tracing::info!(step = i + 1, line = j.line, what = %j.what, out = %j.out, "pipeline step");
            let out = self
                .outputs
                .get(&j.out)
                .cloned()
                .unwrap_or_else(|| tmp.path().join(format!("{}.npy", j.out)));
            let r = Self::run_job(engine, j, &files, &written, &out).map_err(|e| self.at(j, e))?;
            reports.push(r);
            files.insert(j.out.clone(), TensorFile::open(&out)?);
        }
        Ok(reports)
    }

    /// Runs one job: its [`OpSpec`], over the files of the values it names, through
    /// [`Engine::run_spec`] like every other front end.
    fn run_job(
        e: &Engine,
        j: &Planned,
        files: &BTreeMap<String, TensorFile>,
        written: &Written,
        out: &Path,
    ) -> Result<RunReport> {
        let src = |n: &str| -> Result<Source> {
            files
                .get(n)
                .map(|t| Source::file(t.path()))
                .ok_or_else(|| Error::Internal(format!("pipeline value `{n}` missing")))
        };
        let output = out.to_path_buf();
        let spec = match &j.job {
            Job::Map {
                expr,
                dtype,
                like,
                nodata,
            } => OpSpec::Map(MapSpec {
                expr: expr.clone(),
                inputs: Self::named(expr, files)
                    .into_iter()
                    .map(|(n, t)| (n, Source::file(t.path())))
                    .collect(),
                output,
                dtype: Self::map_dtype(*dtype, like, files)?,
                nodata: nodata.value.clone(),
                ignore_nodata: nodata.ignore_inputs,
                input_nodata: Self::map_rule(nodata, expr, written).inputs,
            }),
            Job::Reduce {
                input,
                op,
                axis,
                dtype,
            } => OpSpec::Reduce(ReduceSpec {
                input: src(input)?,
                output,
                reduce: op.name().into(),
                ddof: match *op {
                    Reduce::Var { ddof } | Reduce::Std { ddof } => ddof,
                    _ => 0,
                },
                axis: *axis,
                dtype: *dtype,
            }),
            Job::Stencil {
                input,
                filter,
                boundary,
                dtype,
                ..
            } => OpSpec::Stencil(StencilSpec {
                input: src(input)?,
                output,
                filter: filter.clone(),
                boundary: boundary.clone(),
                dtype: *dtype,
            }),
            Job::Transpose { input } => OpSpec::Transpose(TransposeSpec {
                input: src(input)?,
                output,
            }),
            Job::Matmul { x, w, dtype } => OpSpec::Matmul(MatmulSpec {
                x: src(x)?,
                w: src(w)?,
                output,
                dtype: *dtype,
            }),
            Job::Standardize { input, ddof, dtype } => OpSpec::Standardize(StandardizeSpec {
                input: src(input)?,
                output,
                ddof: *ddof,
                dtype: *dtype,
                stats: None,
                given: None,
            }),
        };
        e.run_spec(&spec)
    }
}
