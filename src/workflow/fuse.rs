//! A pipeline's steps turned into jobs, one step at a time: each step's keys checked
//! against the operation's ([`OpSpec::pipeline_keys`]), the names it reads checked
//! against those defined above it, and element-wise steps (`map`, `affine`, `cast`)
//! fused into the steps that use them until a value must be written.

use std::collections::BTreeMap;
use std::path::Path;

use super::file::{StepSpec, check_name};
use super::names::{expand_names, expr_names, like_of, paren_depth, substitute, substitute_all};
use super::{Job, Planned};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::reduce::Reduce;
use crate::ops::stencil::{Filter, Stencil};
use crate::spec::{OpSpec, load_kernel};
use crate::tiling::Boundary;

/// Longest expression fusion builds (characters): past it, the value about to be
/// substituted is written to a file instead, so a chain of steps that each use their
/// input twice grows linearly, not exponentially.
const FUSED_MAX: usize = 4 << 10;

/// Deepest nesting of parentheses fusion builds: past it, the value about to be
/// substituted is written to a file instead, so a chain of hundreds of steps runs in
/// passes of fused steps rather than being refused as an expression nested too deeply
/// (the parser's bound, well above this).
const FUSED_DEPTH: usize = 40;

/// The jobs of a pipeline as its steps are read: what each name is, and the element-wise
/// values not written (yet), fused into the steps that use them.
pub(super) struct Fuser<'a> {
    /// The pipeline file, as errors name it.
    file: String,
    /// Its directory (convolution kernels are found from it).
    base: &'a Path,
    /// The names of the file's outputs (values that are always written).
    out_names: Vec<String>,
    /// Every name defined so far, with the line that defines it.
    pub(super) known: BTreeMap<String, usize>,
    /// Element-wise results not (yet) written: name -> expression over real names.
    virt: BTreeMap<String, String>,
    /// Values written in f64 because fusing them grew too long -> the real names whose
    /// dtypes a fused evaluation would have defaulted from.
    proxy: BTreeMap<String, Vec<String>>,
    /// The jobs so far.
    pub(super) jobs: Vec<Planned>,
}

/// One step being read: where it is, for its errors.
struct At<'s> {
    file: &'s str,
    line: usize,
    step: &'s StepSpec,
}

impl At<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(format!(
            "{} line {}: step `{}` -> `{}`: {msg}",
            self.file, self.line, self.step.op, self.step.out
        ))
    }
}

impl<'a> Fuser<'a> {
    /// A fuser for the file `file` in `base`, whose outputs are `out_names` and whose
    /// inputs are `known` (name -> line).
    pub(super) fn new(
        file: String,
        base: &'a Path,
        out_names: Vec<String>,
        known: BTreeMap<String, usize>,
    ) -> Self {
        Fuser {
            file,
            base,
            out_names,
            known,
            virt: BTreeMap::new(),
            proxy: BTreeMap::new(),
            jobs: Vec::new(),
        }
    }

    /// Reads the step `st` (at `line`): checks its op, keys and names, then fuses it or
    /// adds its job.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the line.
    pub(super) fn step(&mut self, st: &StepSpec, line: usize) -> Result<()> {
        let file = self.file.clone();
        let at = At {
            file: &file,
            line,
            step: st,
        };
        let Some(allowed) = OpSpec::pipeline_keys(&st.op) else {
            let ops: Vec<&str> = OpSpec::NAMES
                .iter()
                .copied()
                .filter(|n| OpSpec::pipeline_keys(n).is_some())
                .collect();
            let (last, rest) = ops.split_last().unwrap_or((&"", &[]));
            return Err(Error::Invalid(format!(
                "{file} line {line}: unknown op `{}`: use {} or {last}",
                st.op,
                rest.join(", ")
            )));
        };
        if let Some(k) = st.given().into_iter().find(|k| !allowed.contains(k)) {
            return Err(at.err(format!(
                "`{k}` does not apply to {} (it takes {})",
                st.op,
                allowed.join(", ")
            )));
        }
        check_name(&st.out).map_err(|m| at.err(m))?;
        if let Some(l) = self.known.get(&st.out) {
            return Err(at.err(format!("the name `{}` is already used (line {l})", st.out)));
        }
        let dtype = st
            .dtype
            .as_deref()
            .map(str::parse::<DType>)
            .transpose()
            .map_err(|e| at.err(e))?;
        if let Some(expr) = self.elementwise_expr(&at, dtype)? {
            return self.fuse(&at, expr, dtype);
        }
        let (job, what) = self.job(&at, dtype)?;
        self.known.insert(st.out.clone(), line);
        self.jobs.push(Planned {
            job,
            out: st.out.clone(),
            line,
            what,
        });
        Ok(())
    }

    /// The name the step's `key` gives (`v`), which must be defined above it.
    fn need(&self, at: &At<'_>, key: &str, v: Option<&String>) -> Result<String> {
        let v = v.cloned().ok_or_else(|| at.err(format!("give `{key}`")))?;
        if !self.known.contains_key(&v) {
            return Err(at.err(format!(
                "`{key} = \"{v}\"` names nothing defined above (known: {})",
                self.known_names()
            )));
        }
        Ok(v)
    }

    fn known_names(&self) -> String {
        self.known.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The expression an element-wise step (`map`, `affine`, `cast`) computes over
    /// names; `None` for other steps.
    fn elementwise_expr(&self, at: &At<'_>, dtype: Option<DType>) -> Result<Option<String>> {
        let st = at.step;
        Ok(match st.op.as_str() {
            "map" => {
                let mut expr = st.expr.clone().ok_or_else(|| at.err("give `expr`"))?;
                if let Some(names) = &st.names {
                    expr = substitute_all(&expr, |n| names.get(n).cloned());
                }
                Some(expr)
            }
            "affine" => {
                // rounded once, as the affine subcommand computes it
                let input = self.need(at, "input", st.input.as_ref())?;
                Some(format!(
                    "fma({input}, {}, {})",
                    crate::ops::expr::literal(st.scale.unwrap_or(1.0)),
                    crate::ops::expr::literal(st.offset.unwrap_or(0.0))
                ))
            }
            "cast" => {
                if dtype.is_none() {
                    return Err(at.err("give `dtype`"));
                }
                Some(self.need(at, "input", st.input.as_ref())?)
            }
            _ => None,
        })
    }

    /// Fuses the element-wise step's `expr`: the values it reads that are not written
    /// are substituted into it (or written first, when it indexes them, has a nodata rule
    /// of its own, or would grow too long); it is itself written when it has a dtype, is
    /// an output or has a nodata rule, and otherwise kept for the steps that use it.
    fn fuse(&mut self, at: &At<'_>, mut expr: String, dtype: Option<DType>) -> Result<()> {
        let (st, line) = (at.step, at.line);
        // a step with a nodata rule of its own is written with it, not fused into the
        // steps after it, and reads the values before it from files: its rule is not
        // theirs
        let rule = st.nodata_rule();
        let own_rule = rule != crate::MapNodata::default();
        for (name, indexed) in expr_names(&expr.clone()) {
            if !self.known.contains_key(&name) {
                return Err(at.err(format!(
                    "the expression uses `{name}`, defined nowhere above (known: {})",
                    self.known_names()
                )));
            }
            let Some(v) = self.virt.get(&name).cloned() else {
                continue;
            };
            let uses = expr_names(&expr).iter().filter(|(n, _)| *n == name).count();
            if indexed {
                // indexing needs the value on disk
                self.materialize(&name, line, None);
            } else if own_rule
                || expr.len() + uses * (v.len() + 2) > FUSED_MAX
                || paren_depth(&expr) + 1 + paren_depth(&v) > FUSED_DEPTH
            {
                // a step with a rule of its own reads the value from a file, and so does
                // one whose expression fusing would grow past the cap (a value used twice
                // per step doubles it each step): the value is written in f64, which is
                // what the fused evaluation carries, and its pixels where an input is
                // nodata are NaN, which the step that reads it masks again (an integer
                // output with no nodata value to give them is refused)
                let real = expand_names(&v, &self.proxy);
                self.materialize(&name, line, Some(DType::F64));
                self.proxy.insert(name.clone(), real);
            } else {
                expr = substitute(&expr, &name, &format!("({v})"));
            }
        }
        self.known.insert(st.out.clone(), line);
        let keep = dtype.is_some() || self.out_names.contains(&st.out) || own_rule;
        if keep {
            self.jobs.push(Planned {
                what: format!("map '{expr}'"),
                job: Job::Map {
                    like: like_of(&expr, &self.proxy),
                    expr,
                    dtype,
                    nodata: rule,
                },
                out: st.out.clone(),
                line,
            });
        } else {
            self.virt.insert(st.out.clone(), expr);
        }
        Ok(())
    }

    /// The name the step's `key` gives, written first if it is a fused value: steps
    /// other than element-wise ones read their inputs from files.
    fn take(&mut self, at: &At<'_>, key: &str, v: Option<&String>) -> Result<String> {
        let name = self.need(at, key, v)?;
        if self.virt.contains_key(&name) {
            self.materialize(&name, at.line, None);
        }
        Ok(name)
    }

    /// The job of a step that is not element-wise, and what it does in words.
    fn job(&mut self, at: &At<'_>, dtype: Option<DType>) -> Result<(Job, String)> {
        let st = at.step;
        Ok(match st.op.as_str() {
            "reduce" => {
                let input = self.take(at, "input", st.input.as_ref())?;
                let op = Reduce::parse(st.reduce.as_deref().unwrap_or("sum"), st.ddof.unwrap_or(0))
                    .map_err(|e| at.err(e))?;
                let what = format!("reduce {} of {input}", op.name());
                let job = Job::Reduce {
                    input,
                    op,
                    axis: st.axis,
                    dtype,
                };
                (job, what)
            }
            "stencil" => {
                let input = self.take(at, "input", st.input.as_ref())?;
                let spec = st.filter.clone().ok_or_else(|| at.err("give `filter`"))?;
                let base = self.base;
                let filter =
                    Filter::parse(&spec, |k| load_kernel(&base.join(k))).map_err(|e| at.err(e))?;
                let boundary: Boundary = st
                    .boundary
                    .as_deref()
                    .unwrap_or("reflect")
                    .parse()
                    .map_err(|e: Error| at.err(e))?;
                let stencil = Box::new(Stencil::new(filter, boundary).map_err(|e| at.err(e))?);
                let resolved = match spec.strip_prefix("convolve:") {
                    Some(k) => format!("convolve:{}", base.join(k).display()),
                    None => spec.clone(),
                };
                let what = format!("stencil {spec} of {input}");
                let job = Job::Stencil {
                    input,
                    stencil,
                    filter: resolved,
                    boundary: st.boundary.clone().unwrap_or_else(|| "reflect".into()),
                    dtype,
                };
                (job, what)
            }
            "transpose" => {
                let input = self.take(at, "input", st.input.as_ref())?;
                let what = format!("transpose of {input}");
                (Job::Transpose { input }, what)
            }
            "matmul" => {
                let x = self.take(at, "x", st.x.as_ref())?;
                let w = self.take(at, "w", st.w.as_ref())?;
                let what = format!("matmul {x} @ {w}");
                (Job::Matmul { x, w, dtype }, what)
            }
            _ => {
                let input = self.take(at, "input", st.input.as_ref())?;
                let what = format!("standardize {input}");
                let job = Job::Standardize {
                    input,
                    ddof: st.ddof.unwrap_or(0),
                    dtype,
                };
                (job, what)
            }
        })
    }

    /// Writes a fused (virtual) value to disk before a step that needs it as a file.
    fn materialize(&mut self, name: &str, line: usize, dtype: Option<DType>) {
        if let Some(expr) = self.virt.remove(name) {
            self.jobs.push(Planned {
                what: format!("map '{expr}'"),
                job: Job::Map {
                    like: like_of(&expr, &self.proxy),
                    expr,
                    dtype,
                    nodata: crate::MapNodata::default(),
                },
                out: name.to_string(),
                line,
            });
        }
    }
}
