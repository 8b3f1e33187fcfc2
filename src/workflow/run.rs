//! Planning and running a loaded pipeline file: each job is planned on placeholder files
//! of the shapes the jobs before it produce (the dry run), then run as an [`OpSpec`]
//! through [`Engine::run_spec`], the path the command line takes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{FusedMap, Job, Planned, Workflow, expr_names};
use crate::MapNodata;
use crate::dtype::DType;
use crate::engine::{Engine, RunReport};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::io::own_files::{Written as WrittenPath, check_run_paths};
use crate::spec::{MapSpec, OpSpec, RawLayout, Source};

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
        let mut v = self.input_values()?;
        let mut text = String::new();
        for (i, j) in self.jobs.iter().enumerate() {
            // a step writing an output is planned with it: the room for encoding a
            // GeoTIFF or Zarr destination as it is written, a COG's overviews
            let dest = self.outputs.get(&j.out).map(PathBuf::as_path);
            let held = dir.path().join(format!("{}.npy", j.out));
            let (plan, shape, dtype, nodata) =
                Self::plan_job(engine, j, &v, dest, &held).map_err(|e| self.at(j, e))?;
            v.written.insert(j.out.clone(), nodata);
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
            let layout = RawLayout {
                shape,
                dtype,
                offset: 0,
            };
            let placeholder = Source {
                path: p,
                raw: Some(layout),
                rows: None,
                nodata: None,
                window: None,
            };
            v.add(&j.out, placeholder)?;
        }
        Ok((text, v.written))
    }

    /// The pipeline's inputs, as the first values its jobs read.
    fn input_values(&self) -> Result<Values> {
        let mut v = Values::default();
        for (name, p) in &self.inputs {
            v.add(name, Source::file(p))?;
        }
        Ok(v)
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
        // what a step reads besides the values it names (a convolution kernel)
        for j in &self.jobs {
            if let Job::Op { spec, names } = &j.job {
                for p in spec.inputs() {
                    if !names.iter().any(|n| Path::new(n) == p) {
                        reads.push(("file a step reads", p));
                    }
                }
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

    /// A job's plan as text, the shape and dtype of its result, and the nodata value of
    /// its result (what the pixels its map masked hold; a transpose's is that of what
    /// it moves). `dest` is where it is written if it is an output; `held`, where the
    /// run would keep it otherwise.
    fn plan_job(
        e: &Engine,
        j: &Planned,
        v: &Values,
        dest: Option<&Path>,
        held: &Path,
    ) -> Result<(String, Vec<usize>, DType, Option<String>)> {
        let (spec, names) = match &j.job {
            Job::Map(m) => {
                let (mut plan, shape, dtype, nodata) = Self::plan_map_job(e, m, v, dest)?;
                if let Some(d) = dest
                    && let Some(after) = e.cog_after_the_run(d, &shape, dtype)?
                {
                    plan = format!("{plan}\nafter the run:  {after}");
                }
                return Ok((plan, shape, dtype, nodata));
            }
            Job::Op { spec, names } => (spec, names),
        };
        // planned as the command line plans it, on the files of the values it reads
        let spec = v.bind(spec, dest.unwrap_or(held))?;
        let plan = e.plan_spec(&spec)?;
        let op = spec.operation();
        let (shape, dtype) = op.written(e)?.ok_or_else(|| {
            Error::Internal(format!("a pipeline's {} has no result", spec.name()))
        })?;
        let mut nodata = None;
        if op.moves_values()
            && let Some(input) = names.first()
        {
            // values moved, not computed: the nodata value of the value read (a
            // pipeline input's is its file's)
            nodata = match v.written.get(input) {
                Some(nodata) => nodata.clone(),
                None => v.file(input)?.nodata().map(|(text, _)| text.to_string()),
            };
        }
        Ok((plan.to_string(), shape, dtype, nodata))
    }

    /// The plan of a map job (see [`Workflow::plan_job`]), without what runs after it.
    fn plan_map_job(
        e: &Engine,
        m: &FusedMap,
        v: &Values,
        dest: Option<&Path>,
    ) -> Result<(String, Vec<usize>, DType, Option<String>)> {
        let expr = &m.expr;
        let named = Self::named(expr, &v.files);
        let refs: Vec<(&str, &TensorFile)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let dtype = &Self::map_dtype(m, &v.files)?;
        // refused before anything runs, as the run would refuse it
        let rule = Self::map_rule(&m.nodata, expr, &v.written);
        let bound = Engine::bind_map(expr, &refs, *dtype, &rule)?;
        let (streams, shape, od) = (bound.streams, bound.shape, bound.dtype);
        // flat plans writing a destination set aside what encoding it takes
        let plan = |e: &Engine| e.plan_map(expr, &refs, *dtype);
        let p = match dest {
            Some(d) => e.plan_writing(d, &shape, od, plan)?,
            None => plan(e)?,
        };
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
        Ok((text, shape, od, bound.nodata))
    }

    /// The dtype of a map job: the one given, else for a value written out wide, f64
    /// (complex128 for a complex value), else (for a job reading values written wide)
    /// the default over the names they stand for, so that the output is what a fused
    /// evaluation would have written.
    fn map_dtype(m: &FusedMap, files: &BTreeMap<String, TensorFile>) -> Result<Option<DType>> {
        if m.dtype.is_some() || (!m.wide && m.like.is_empty()) {
            return Ok(m.dtype);
        }
        let named = Self::named(&m.expr, files);
        let refs: Vec<(&str, &TensorFile)> = named.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let complex = Engine::bind(&m.expr, &refs)?.0.is_complex();
        if m.wide {
            return Ok(Some(if complex { DType::C128 } else { DType::F64 }));
        }
        let dtypes = m
            .like
            .iter()
            .map(|n| {
                files
                    .get(n)
                    .map(TensorFile::dtype)
                    .ok_or_else(|| Error::Internal(format!("pipeline value `{n}` missing")))
            })
            .collect::<Result<Vec<_>>>()?;
        let real = Engine::map_default_dtype(&dtypes);
        Ok(Some(if complex {
            real.complex_of().unwrap_or(DType::C64)
        } else {
            real
        }))
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
        let mut v = self.input_values()?;
        v.written = written;
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
        let mut reports = Vec::new();
        for (i, j) in self.jobs.iter().enumerate() {
            tracing::info!(step = i + 1, line = j.line, what = %j.what, out = %j.out, "pipeline step");
            let out = self
                .outputs
                .get(&j.out)
                .cloned()
                .unwrap_or_else(|| tmp.path().join(format!("{}.npy", j.out)));
            let r = Self::run_job(engine, j, &v, &out).map_err(|e| self.at(j, e))?;
            reports.push(r);
            v.add(&j.out, Source::file(&out))?;
        }
        Ok(reports)
    }

    /// Runs one job: its [`OpSpec`], over the files of the values it names, through
    /// [`Engine::run_spec`] like every other front end.
    fn run_job(e: &Engine, j: &Planned, v: &Values, out: &Path) -> Result<RunReport> {
        let spec = match &j.job {
            Job::Map(m) => OpSpec::Map(MapSpec {
                expr: m.expr.clone(),
                inputs: Self::named(&m.expr, &v.files)
                    .into_iter()
                    .map(|(n, t)| (n, Source::file(t.path())))
                    .collect(),
                output: out.to_path_buf(),
                dtype: Self::map_dtype(m, &v.files)?,
                nodata: m.nodata.value.clone(),
                ignore_nodata: m.nodata.ignore_inputs,
                input_nodata: Self::map_rule(&m.nodata, &m.expr, &v.written).inputs,
            }),
            Job::Op { spec, .. } => v.bind(spec, out)?,
        };
        e.run_spec(&spec)
    }
}

/// The values a pipeline's jobs read, by name: how each is read (a dry run's
/// placeholders are raw files) and its opened file, and the nodata value each job's
/// result was given.
#[derive(Default)]
struct Values {
    sources: BTreeMap<String, Source>,
    files: BTreeMap<String, TensorFile>,
    written: Written,
}

impl Values {
    /// Adds the value `name`, read from `source`.
    fn add(&mut self, name: &str, source: Source) -> Result<()> {
        self.files.insert(name.to_string(), source.open()?);
        self.sources.insert(name.to_string(), source);
        Ok(())
    }

    fn file(&self, name: &str) -> Result<&TensorFile> {
        self.files
            .get(name)
            .ok_or_else(|| Error::Internal(format!("pipeline value `{name}` missing")))
    }

    /// `spec` with each source (a name, see [`Job::Op`]) bound to that value's source
    /// and its output set to `output`.
    fn bind(&self, spec: &OpSpec, output: &Path) -> Result<OpSpec> {
        let mut spec = spec.clone();
        let (sources, out) = spec.operation_mut().paths_mut();
        for s in sources {
            let name = s.path.to_string_lossy().into_owned();
            *s = self
                .sources
                .get(&name)
                .cloned()
                .ok_or_else(|| Error::Internal(format!("pipeline value `{name}` missing")))?;
        }
        *out = output.to_path_buf();
        Ok(spec)
    }
}
