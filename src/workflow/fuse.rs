//! A pipeline's steps turned into jobs, one step at a time: each step's keys checked
//! against the operation's ([`OpSpec::pipeline_keys`]), the names it reads checked
//! against those defined above it, and element-wise steps (`map`, `affine`, `cast`)
//! fused into the steps that use them until a value must be written.

use std::collections::BTreeMap;
use std::path::Path;

use super::file::{StepSpec, check_name};
use super::names::{expand_names, expr_names, like_of, paren_depth, substitute, substitute_all};
use super::{FusedMap, Job, Planned};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::spec::OpSpec;

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
    /// The file's text from its `[[steps]]` line.
    body: &'s str,
}

impl At<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> Error {
        self.err_at(self.line, msg)
    }

    fn err_at(&self, line: usize, msg: impl std::fmt::Display) -> Error {
        Error::Invalid(format!(
            "{} line {line}: step `{}` -> `{}`: {msg}",
            self.file, self.step.op, self.step.out
        ))
    }

    /// The line of the step's `key = ...` (its `[[steps]]` line if it cannot be found:
    /// a key given in an inline table).
    fn line_of(&self, key: &str) -> usize {
        self.body
            .lines()
            .enumerate()
            .skip(1)
            .take_while(|(_, l)| !l.trim_start().starts_with('['))
            .find(|(_, l)| {
                l.trim_start()
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            })
            .map_or(self.line, |(i, _)| self.line + i)
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

    /// Reads the step `st` (at `line`, its text `body`): checks its op, keys and names,
    /// then fuses it or adds its job.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the line.
    pub(super) fn step(&mut self, st: &StepSpec, line: usize, body: &str) -> Result<()> {
        let file = self.file.clone();
        let at = At {
            file: &file,
            line,
            step: st,
            body,
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
            return Err(at.err_at(
                at.line_of(k),
                format!(
                    "`{k}` does not apply to {} (it takes {})",
                    st.op,
                    allowed.join(", ")
                ),
            ));
        }
        check_name(&st.out).map_err(|m| at.err(m))?;
        if let Some(l) = self.known.get(&st.out) {
            return Err(at.err(format!("the name `{}` is already used (line {l})", st.out)));
        }
        let dtype = st
            .text("dtype")
            .map_err(|m| at.err(m))?
            .map(str::parse::<DType>)
            .transpose()
            .map_err(|e| at.err(e))?;
        if st.op == "map" {
            // the operation fused steps become: an expression over names
            let mut expr = st
                .text("expr")
                .map_err(|m| at.err(m))?
                .ok_or_else(|| at.err("give `expr`"))?
                .to_string();
            if let Some(names) = st.keys.get("names") {
                let names: BTreeMap<String, String> = names
                    .clone()
                    .try_into()
                    .map_err(|_| at.err("`names` must map expression names to pipeline names"))?;
                expr = substitute_all(&expr, |n| names.get(n).cloned());
            }
            return self.fuse(&at, expr, dtype);
        }
        let (spec, names) = self.spec(&at)?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        if let Some(expr) = spec.operation().expression(&refs).map_err(|e| at.err(e))? {
            return self.fuse(&at, expr, dtype);
        }
        // other operations read their inputs from files
        for name in &names {
            if self.virt.contains_key(name) {
                self.materialize(name, line, false);
            }
        }
        let what = format!("{} {}", st.op, describe(st, &names));
        self.known.insert(st.out.clone(), line);
        self.jobs.push(Planned {
            job: Job::Op {
                spec: Box::new(spec),
                names,
            },
            out: st.out.clone(),
            line,
            what,
        });
        Ok(())
    }

    /// The step's operation as its spec ([`OpSpec`]): its sources are the names its keys
    /// give ([`OpSpec::pipeline_names`], each defined above it), which are their paths
    /// until the pipeline binds them to files; its output, the step's result's name.
    fn spec(&self, at: &At<'_>) -> Result<(OpSpec, Vec<String>)> {
        let st = at.step;
        let mut table = st.keys.clone();
        // an element-wise step's nodata rule is the fused map's, not its operation's
        table.remove("nodata");
        table.remove("ignore_nodata");
        let mut names = Vec::new();
        let source = |name: &str| {
            let mut source = toml::Table::new();
            source.insert("path".into(), name.into());
            toml::Value::Table(source)
        };
        for &key in OpSpec::pipeline_names(&st.op) {
            // a list of names (a function of several inputs), or one
            if let Some(toml::Value::Array(list)) = st.keys.get(key) {
                let mut sources = Vec::new();
                for v in list {
                    let name = self.need(at, key, v.as_str())?;
                    sources.push(source(&name));
                    names.push(name);
                }
                table.insert(key.into(), sources.into());
                continue;
            }
            let v = st.text(key).map_err(|m| at.err(m))?;
            let name = self.need(at, key, v)?;
            table.insert(key.into(), source(&name));
            names.push(name);
        }
        table.insert("op".into(), st.op.clone().into());
        table.insert("output".into(), st.out.clone().into());
        let mut spec: OpSpec = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| at.err(e.message().trim()))?;
        spec.operation_mut().relative_to(self.base);
        Ok((spec, names))
    }

    /// The name the step's `key` gives (`v`), which must be defined above it.
    fn need(&self, at: &At<'_>, key: &str, v: Option<&str>) -> Result<String> {
        let v = v
            .ok_or_else(|| at.err(format!("give `{key}`")))?
            .to_string();
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

    /// Fuses the element-wise step's `expr`: the values it reads that are not written
    /// are substituted into it (or written first, when it indexes them, has a nodata rule
    /// of its own, or would grow too long); it is itself written when it has a dtype, is
    /// an output or has a nodata rule, and otherwise kept for the steps that use it.
    fn fuse(&mut self, at: &At<'_>, mut expr: String, dtype: Option<DType>) -> Result<()> {
        let (st, line) = (at.step, at.line);
        // a step with a nodata rule of its own is written with it, not fused into the
        // steps after it, and reads the values before it from files: its rule is not
        // theirs
        let rule = st.nodata_rule().map_err(|m| at.err(m))?;
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
                self.materialize(&name, line, false);
            } else if own_rule
                || expr.len() + uses * (v.len() + 2) > FUSED_MAX
                || paren_depth(&expr) + 1 + paren_depth(&v) > FUSED_DEPTH
            {
                // a step with a rule of its own reads the value from a file, and so does
                // one whose expression fusing would grow past the cap (a value used twice
                // per step doubles it each step): the value is written in f64 (complex128
                // for a complex value), which is what the fused evaluation carries, and
                // its pixels where an input is
                // nodata are NaN, which the step that reads it masks again (an integer
                // output with no nodata value to give them is refused)
                let real = expand_names(&v, &self.proxy);
                self.materialize(&name, line, true);
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
                job: Job::Map(FusedMap {
                    like: like_of(&expr, &self.proxy),
                    expr,
                    dtype,
                    wide: false,
                    nodata: rule,
                }),
                out: st.out.clone(),
                line,
            });
        } else {
            self.virt.insert(st.out.clone(), expr);
        }
        Ok(())
    }

    /// Writes a fused (virtual) value to disk before a step that needs it as a file:
    /// `wide`, in the dtype the fused evaluation carries (f64, complex128 for a complex
    /// value), else in its default dtype.
    fn materialize(&mut self, name: &str, line: usize, wide: bool) {
        if let Some(expr) = self.virt.remove(name) {
            self.jobs.push(Planned {
                what: format!("map '{expr}'"),
                job: Job::Map(FusedMap {
                    like: like_of(&expr, &self.proxy),
                    expr,
                    dtype: None,
                    wide,
                    nodata: crate::MapNodata::default(),
                }),
                out: name.to_string(),
                line,
            });
        }
    }
}

/// A step's keys in words, for the plan: `filter = "box:size=3" of x`.
fn describe(st: &StepSpec, names: &[String]) -> String {
    let mut words: Vec<String> = st
        .keys
        .iter()
        .filter(|(k, _)| !OpSpec::pipeline_names(&st.op).contains(&k.as_str()))
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    words.push(format!("of {}", names.join(" and ")));
    words.join(" ")
}
