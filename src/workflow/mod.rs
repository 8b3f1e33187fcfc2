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
//! Elementwise steps (`map`, `affine`, `cast`) that follow one another fuse into one
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

use serde::Deserialize;
use toml::Spanned;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::reduce::Reduce;
use crate::ops::stencil::{Filter, Stencil};
use crate::spec::OpSpec;
use crate::tiling::Boundary;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    memory: Option<String>,
    device: Option<crate::device::DeviceRequest>,
    #[serde(default)]
    inputs: BTreeMap<String, Spanned<String>>,
    steps: Vec<Spanned<StepSpec>>,
    #[serde(default)]
    outputs: BTreeMap<String, Spanned<String>>,
}

#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
struct StepSpec {
    op: String,
    out: String,
    expr: Option<String>,
    names: Option<BTreeMap<String, String>>,
    input: Option<String>,
    x: Option<String>,
    w: Option<String>,
    dtype: Option<String>,
    scale: Option<f64>,
    offset: Option<f64>,
    reduce: Option<String>,
    axis: Option<usize>,
    ddof: Option<u32>,
    filter: Option<String>,
    boundary: Option<String>,
    nodata: Option<NodataKey>,
    ignore_nodata: Option<bool>,
}

/// A step's `nodata`: a number (`-9999`, `nan`) or its text (`"nan"`).
#[derive(Deserialize, Clone, Debug)]
#[serde(
    untagged,
    expecting = "`nodata` must be a number or a string such as \"nan\""
)]
enum NodataKey {
    Number(f64),
    Text(String),
}

impl StepSpec {
    /// What an elementwise step does with the pixels where an input is nodata.
    fn nodata_rule(&self) -> crate::MapNodata {
        crate::MapNodata {
            value: self.nodata.as_ref().map(|k| match k {
                NodataKey::Number(v) => crate::format::tiff::nodata_text(*v),
                NodataKey::Text(t) => t.clone(),
            }),
            ignore_inputs: self.ignore_nodata.unwrap_or(false),
            inputs: Vec::new(),
        }
    }
}

impl StepSpec {
    /// The keys given, besides `op` and `out`.
    fn given(&self) -> Vec<&'static str> {
        let mut k = Vec::new();
        let mut add = |name: &'static str, present: bool| {
            if present {
                k.push(name);
            }
        };
        add("expr", self.expr.is_some());
        add("names", self.names.is_some());
        add("input", self.input.is_some());
        add("x", self.x.is_some());
        add("w", self.w.is_some());
        add("dtype", self.dtype.is_some());
        add("scale", self.scale.is_some());
        add("offset", self.offset.is_some());
        add("reduce", self.reduce.is_some());
        add("axis", self.axis.is_some());
        add("ddof", self.ddof.is_some());
        add("filter", self.filter.is_some());
        add("boundary", self.boundary.is_some());
        add("nodata", self.nodata.is_some());
        add("ignore_nodata", self.ignore_nodata.is_some());
        k
    }
}

/// One job a pipeline runs.
#[derive(Clone, Debug)]
enum Job {
    /// An elementwise pass (fused steps): expression over named pipeline values.
    Map {
        expr: String,
        dtype: Option<DType>,
        /// Names whose dtypes decide the default output dtype, when the expression
        /// reads values written in f64 only because fusing them grew too long (empty:
        /// the expression's own names).
        like: Vec<String>,
        /// What it does where an input is nodata.
        nodata: crate::MapNodata,
    },
    Reduce {
        input: String,
        op: Reduce,
        axis: Option<usize>,
        dtype: Option<DType>,
    },
    Stencil {
        input: String,
        stencil: Box<Stencil>,
        /// The filter as the spec gives it to the engine (a kernel path resolved against
        /// the pipeline file's directory) and the boundary.
        filter: String,
        boundary: String,
        dtype: Option<DType>,
    },
    Transpose {
        input: String,
    },
    Matmul {
        x: String,
        w: String,
        dtype: Option<DType>,
    },
    Standardize {
        input: String,
        ddof: u32,
        dtype: Option<DType>,
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

/// Longest expression fusion builds (characters): past it, the value about to be
/// substituted is written to a file instead, so a chain of steps that each use their
/// input twice grows linearly, not exponentially.
const FUSED_MAX: usize = 4 << 10;

/// Deepest nesting of parentheses fusion builds: past it, the value about to be
/// substituted is written to a file instead, so a chain of hundreds of steps runs in
/// passes of fused steps rather than being refused as an expression nested too deeply
/// (the parser's bound, well above this).
const FUSED_DEPTH: usize = 40;

/// The deepest nesting of parentheses in `expr`.
fn paren_depth(expr: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in expr.chars() {
        match c {
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Most bytes of a pipeline file read (one is a few hundred bytes; this bounds what a
/// mistaken path, a device or a huge file can cost).
const PIPELINE_FILE_MAX: u64 = 1 << 20;

/// Checks that a name given to an input or a step's result is an identifier
/// (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 characters): names are used in expressions and
/// for the step's intermediate file inside the run's own temporary directory, so a path
/// such as `../x` or `/abs/x` must never be one.
fn check_name(name: &str) -> std::result::Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a name: use letters, digits and _ (not starting with a digit, at \
             most 64 characters)"
        ))
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

/// Identifier tokens of `expr`: `(start, end, next non-space char)` in char indices.
fn idents(chars: &[char]) -> Vec<(usize, usize, Option<char>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        // an identifier starts with a letter or `_` not glued to a number (1e-3)
        if is_ident_start(chars[i]) && (i == 0 || !chars[i - 1].is_ascii_alphanumeric()) {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let next = chars[i..].iter().copied().find(|c| !c.is_whitespace());
            out.push((start, i, next));
        } else {
            i += 1;
        }
    }
    out
}

/// The identifiers of `expr` that are names (not functions: not followed by `(`; not
/// `nan` or `inf`), with whether each is indexed (`s[3]`).
fn expr_names(expr: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = expr.chars().collect();
    idents(&chars)
        .into_iter()
        .filter_map(|(a, b, next)| {
            let name: String = chars[a..b].iter().collect();
            let keep = next != Some('(') && !matches!(name.as_str(), "nan" | "inf");
            keep.then_some((name, next == Some('[')))
        })
        .collect()
}

/// `expr` with every name `from` (not a function call) replaced by `to`.
fn substitute(expr: &str, from: &str, to: &str) -> String {
    substitute_all(expr, |name| (name == from).then(|| to.to_string()))
}

/// `expr` with every name (not a function) that `to` maps replaced, in one pass: a
/// replacement is not itself replaced (`{a = "b", b = "a"}` swaps them).
fn substitute_all(expr: &str, to: impl Fn(&str) -> Option<String>) -> String {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let mut at = 0;
    for (a, b, next) in idents(&chars) {
        out.extend(&chars[at..a]);
        let name: String = chars[a..b].iter().collect();
        match to(&name) {
            Some(t) if next != Some('(') => out.push_str(&t),
            _ => out.push_str(&name),
        }
        at = b;
    }
    out.extend(&chars[at..]);
    out
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
            let full = replaced(in_paths, name).unwrap_or_else(|| base.join(p.get_ref()));
            if !full.exists() {
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
        // elementwise results not (yet) written: name -> expression over real names
        let mut virt: BTreeMap<String, String> = BTreeMap::new();
        // values written in f64 because fusing them grew too long -> the real names
        // whose dtypes a fused evaluation would have defaulted from
        let mut proxy: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut jobs = Vec::new();
        let out_names: Vec<&String> = spec.outputs.keys().collect();
        for s in &spec.steps {
            // a step's span starts after the table before it: report its `[[steps]]` line
            let start = s.span().start;
            let line = line_of(&text, start + text[start..].find("[[steps]]").unwrap_or(0));
            let st = s.get_ref();
            let err = |msg: String| at(line, format!("step `{}` -> `{}`: {msg}", st.op, st.out));
            let Some(allowed) = OpSpec::pipeline_keys(&st.op) else {
                let ops: Vec<&str> = OpSpec::NAMES
                    .iter()
                    .copied()
                    .filter(|n| OpSpec::pipeline_keys(n).is_some())
                    .collect();
                let (last, rest) = ops.split_last().unwrap_or((&"", &[]));
                return Err(at(
                    line,
                    format!("unknown op `{}`: use {} or {last}", st.op, rest.join(", ")),
                ));
            };
            if let Some(k) = st.given().into_iter().find(|k| !allowed.contains(k)) {
                return Err(err(format!(
                    "`{k}` does not apply to {} (it takes {})",
                    st.op,
                    allowed.join(", ")
                )));
            }
            check_name(&st.out).map_err(&err)?;
            if known.contains_key(&st.out) {
                return Err(err(format!(
                    "the name `{}` is already used (line {})",
                    st.out, known[&st.out]
                )));
            }
            let dtype = st
                .dtype
                .as_deref()
                .map(str::parse::<DType>)
                .transpose()
                .map_err(|e| err(e.to_string()))?;
            let need = |key: &str, v: &Option<String>| -> Result<String> {
                let v = v.clone().ok_or_else(|| err(format!("give `{key}`")))?;
                if !known.contains_key(&v) {
                    return Err(err(format!(
                        "`{key} = \"{v}\"` names nothing defined above (known: {})",
                        known.keys().cloned().collect::<Vec<_>>().join(", ")
                    )));
                }
                Ok(v)
            };
            // An elementwise step becomes an expression over names.
            let elementwise = match st.op.as_str() {
                "map" => {
                    let mut expr = st.expr.clone().ok_or_else(|| err("give `expr`".into()))?;
                    if let Some(names) = &st.names {
                        expr = substitute_all(&expr, |n| names.get(n).cloned());
                    }
                    Some(expr)
                }
                "affine" => {
                    // rounded once, as the affine subcommand computes it
                    let input = need("input", &st.input)?;
                    Some(format!(
                        "fma({input}, {}, {})",
                        crate::ops::expr::literal(st.scale.unwrap_or(1.0)),
                        crate::ops::expr::literal(st.offset.unwrap_or(0.0))
                    ))
                }
                "cast" => {
                    if dtype.is_none() {
                        return Err(err("give `dtype`".into()));
                    }
                    Some(need("input", &st.input)?)
                }
                _ => None,
            };
            if let Some(mut expr) = elementwise {
                // a step with a nodata rule of its own is written with it, not fused into
                // the steps after it, and reads the values before it from files: its rule
                // is not theirs
                let rule = st.nodata_rule();
                let own_rule = rule != crate::MapNodata::default();
                for (name, indexed) in expr_names(&expr.clone()) {
                    if !known.contains_key(&name) {
                        return Err(err(format!(
                            "the expression uses `{name}`, defined nowhere above (known: {})",
                            known.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    }
                    if let Some(v) = virt.get(&name) {
                        let uses = expr_names(&expr).iter().filter(|(n, _)| *n == name).count();
                        if indexed {
                            // indexing needs the value on disk
                            materialize(&mut jobs, &mut virt, &proxy, &name, line, None);
                        } else if own_rule
                            || expr.len() + uses * (v.len() + 2) > FUSED_MAX
                            || paren_depth(&expr) + 1 + paren_depth(v) > FUSED_DEPTH
                        {
                            // a step with a rule of its own reads the value from a file,
                            // and so does one whose expression fusing would grow past the
                            // cap (a value used twice per step doubles it each step): the
                            // value is written in f64, which is what the fused evaluation
                            // carries, and its pixels where an input is nodata are NaN,
                            // which the step that reads it masks again (an integer output
                            // with no nodata value to give them is refused)
                            let real = expand_names(v, &proxy);
                            materialize(
                                &mut jobs,
                                &mut virt,
                                &proxy,
                                &name,
                                line,
                                Some(DType::F64),
                            );
                            proxy.insert(name.clone(), real);
                        } else {
                            expr = substitute(&expr, &name, &format!("({v})"));
                        }
                    }
                }
                known.insert(st.out.clone(), line);
                let keep = dtype.is_some() || out_names.contains(&&st.out) || own_rule;
                if keep {
                    jobs.push(Planned {
                        what: format!("map '{expr}'"),
                        job: Job::Map {
                            like: like_of(&expr, &proxy),
                            expr,
                            dtype,
                            nodata: rule,
                        },
                        out: st.out.clone(),
                        line,
                    });
                } else {
                    virt.insert(st.out.clone(), expr);
                }
                continue;
            }
            let mut take = |key: &str, v: &Option<String>| -> Result<String> {
                let name = need(key, v)?;
                if virt.contains_key(&name) {
                    materialize(&mut jobs, &mut virt, &proxy, &name, line, None);
                }
                Ok(name)
            };
            let (job, what) = match st.op.as_str() {
                "reduce" => {
                    let input = take("input", &st.input)?;
                    let op =
                        Reduce::parse(st.reduce.as_deref().unwrap_or("sum"), st.ddof.unwrap_or(0))
                            .map_err(|e| err(e.to_string()))?;
                    (
                        Job::Reduce {
                            input: input.clone(),
                            op,
                            axis: st.axis,
                            dtype,
                        },
                        format!("reduce {} of {input}", op.name()),
                    )
                }
                "stencil" => {
                    let input = take("input", &st.input)?;
                    let spec = st
                        .filter
                        .clone()
                        .ok_or_else(|| err("give `filter`".into()))?;
                    let filter = Filter::parse(&spec, |k| load_kernel(&base.join(k)))
                        .map_err(|e| err(e.to_string()))?;
                    let boundary: Boundary = st
                        .boundary
                        .as_deref()
                        .unwrap_or("reflect")
                        .parse()
                        .map_err(|e: Error| err(e.to_string()))?;
                    let stencil =
                        Box::new(Stencil::new(filter, boundary).map_err(|e| err(e.to_string()))?);
                    let resolved = match spec.strip_prefix("convolve:") {
                        Some(k) => format!("convolve:{}", base.join(k).display()),
                        None => spec.clone(),
                    };
                    (
                        Job::Stencil {
                            input: input.clone(),
                            stencil,
                            filter: resolved,
                            boundary: st.boundary.clone().unwrap_or_else(|| "reflect".into()),
                            dtype,
                        },
                        format!("stencil {spec} of {input}"),
                    )
                }
                "transpose" => {
                    let input = take("input", &st.input)?;
                    (
                        Job::Transpose {
                            input: input.clone(),
                        },
                        format!("transpose of {input}"),
                    )
                }
                "matmul" => {
                    let x = take("x", &st.x)?;
                    let w = take("w", &st.w)?;
                    (
                        Job::Matmul {
                            x: x.clone(),
                            w: w.clone(),
                            dtype,
                        },
                        format!("matmul {x} @ {w}"),
                    )
                }
                _ => {
                    let input = take("input", &st.input)?;
                    (
                        Job::Standardize {
                            input: input.clone(),
                            ddof: st.ddof.unwrap_or(0),
                            dtype,
                        },
                        format!("standardize {input}"),
                    )
                }
            };
            known.insert(st.out.clone(), line);
            jobs.push(Planned {
                job,
                out: st.out.clone(),
                line,
                what,
            });
        }
        let mut outputs = BTreeMap::new();
        for (name, p) in &spec.outputs {
            let line = line_of(&text, p.span().start);
            if !known.contains_key(name) || inputs.contains_key(name) {
                return Err(at(
                    line,
                    format!("output `{name}` is not produced by any step"),
                ));
            }
            let dest = replaced(out_paths, name).unwrap_or_else(|| base.join(p.get_ref()));
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

/// Reads a pipeline file's text and parses it (syntax and keys), errors naming the line.
fn parse_file(path: &Path) -> Result<(String, FileSpec)> {
    let text = crate::io::own_files::read_small_input(path, PIPELINE_FILE_MAX)?;
    let spec: FileSpec = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(&text, s.start));
        Error::Invalid(format!(
            "{} line {line}: {}",
            path.display(),
            e.message().trim().replace('\n', "; ")
        ))
    })?;
    Ok((text, spec))
}

/// The names of `expr`, each value written in f64 for length replaced by the names it
/// stands for.
fn expand_names(expr: &str, proxy: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (n, _) in expr_names(expr) {
        for m in proxy.get(&n).cloned().unwrap_or_else(|| vec![n]) {
            if !out.contains(&m) {
                out.push(m);
            }
        }
    }
    out
}

/// The `like` of a map job over `expr`: empty unless it reads a value written in f64
/// for length.
fn like_of(expr: &str, proxy: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    if expr_names(expr).iter().any(|(n, _)| proxy.contains_key(n)) {
        expand_names(expr, proxy)
    } else {
        Vec::new()
    }
}

/// Writes a fused (virtual) value to disk before a step that needs it as a file.
fn materialize(
    jobs: &mut Vec<Planned>,
    virt: &mut BTreeMap<String, String>,
    proxy: &BTreeMap<String, Vec<String>>,
    name: &str,
    line: usize,
    dtype: Option<DType>,
) {
    if let Some(expr) = virt.remove(name) {
        jobs.push(Planned {
            what: format!("map '{expr}'"),
            job: Job::Map {
                like: like_of(&expr, proxy),
                expr,
                dtype,
                nodata: crate::MapNodata::default(),
            },
            out: name.to_string(),
            line,
        });
    }
}

pub use crate::spec::load_kernel;

mod run;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_and_substitution() {
        let n = expr_names("where(x > 0, sqrt(x), s[3]) + nan * y1e");
        let names: Vec<&str> = n.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["x", "x", "s", "y1e"]);
        assert!(n[2].1);
        assert_eq!(
            substitute("x + exp(x) * xx", "x", "(a*2)"),
            "(a*2) + exp((a*2)) * xx"
        );
        assert_eq!(substitute("max(x, 1)", "max", "y"), "max(x, 1)");
        // `names` maps in one pass: a swap and a chain are not applied twice
        let names: BTreeMap<&str, &str> = [("a", "b"), ("b", "a"), ("x", "y"), ("y", "z")].into();
        let to = |n: &str| names.get(n).map(|t| (*t).to_string());
        assert_eq!(substitute_all("a - b + x * y", to), "b - a + y * z");
    }
}
