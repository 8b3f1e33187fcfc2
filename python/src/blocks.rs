//! A Python callable over blocks (`map_blocks`, `map_overlap`, `reduce_blocks`): the
//! engine's `run_blocks` with a function that takes the GIL for the call alone. Reading,
//! halo assembly and writing run on the engine's threads without it.
//!
//! The callable gets each block as `(index, count, tile, inner, inputs, out_shape, out)`:
//! `tile` the block's rows and columns in the image, `inner` where the block lies in the
//! padded blocks, `inputs` a list of `(memory, dtype name, shape)` (the engine's gathered
//! blocks, read-only, which the Python side wraps with numpy without a copy), `out_shape`
//! the shape its result must have and `out` the writable memory of the result's place in
//! the output slot (C order, the output's dtype), which it fills; both `None` without an
//! output. The memory is valid for the call only (see `views.rs`). An exception it raises
//! stops the run after that block and reaches the caller unchanged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use serde_json::Value;
use tilestream::{
    Block, BlockOut, BlockShape, Blocks, BlocksOut, Boundary, DType, Edges, Engine, Error, JobKey,
    Source, TensorFile, Working,
};

use crate::errors::{bad_json, to_py};
use crate::options::{engine, parse_opts};
use crate::views::View;
use crate::worker::run_on_worker;

/// What `req` (JSON) asks: `halo` `[rows, cols]`, `edges` (`reflect`, `nearest`, `wrap`,
/// `constant`, `none`), `cval`, `block` `[rows, cols]` or null, `first` (one block at the
/// origin only), `working` `{per_block, per_out, bytes}`, `what`, `calls` (of the
/// function at once), `rows` `[first, end)` (a share of the image) or null.
fn blocks_of(req: &Value) -> Result<Blocks, Error> {
    let pair = |v: &Value| -> Option<(usize, usize)> {
        let a = v.as_array()?;
        Some((
            usize::try_from(a.first()?.as_u64()?).ok()?,
            usize::try_from(a.get(1)?.as_u64()?).ok()?,
        ))
    };
    let halo = pair(&req["halo"]).unwrap_or((0, 0));
    let edges = match req["edges"].as_str().unwrap_or("reflect") {
        "reflect" => Edges::Pad(Boundary::Reflect),
        "nearest" => Edges::Pad(Boundary::Nearest),
        "wrap" => Edges::Pad(Boundary::Wrap),
        "constant" => Edges::Pad(Boundary::Constant(req["cval"].as_f64().unwrap_or(0.0))),
        "none" => Edges::Clip,
        other => {
            return Err(Error::invalid(format!(
                "boundary={other:?} is not one of \"reflect\", \"nearest\", \"constant\", \
                 \"wrap\", \"none\""
            )));
        }
    };
    let shape = match (pair(&req["block"]), req["first"].as_bool().unwrap_or(false)) {
        (Some((r, c)), true) => BlockShape::First(r, c),
        (Some((r, c)), false) if r > 0 && c > 0 => BlockShape::Fixed(r, c),
        (Some(_), false) => return Err(Error::invalid("a block shape of 0 holds nothing")),
        (None, _) => BlockShape::Auto,
    };
    let w = &req["working"];
    let working = Working {
        per_block: w["per_block"].as_f64().unwrap_or(1.0).max(0.0),
        per_out: w["per_out"].as_f64().unwrap_or(0.0).max(0.0),
        bytes: w["bytes"].as_u64().unwrap_or(0),
    };
    Ok(Blocks {
        halo,
        edges,
        shape,
        working,
        what: req["what"].as_str().unwrap_or("function").to_string(),
        calls: req["calls"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(1)
            .max(1),
        rows: pair(&req["rows"]),
        pinned: req["pinned"].as_u64().and_then(|n| usize::try_from(n).ok()),
    })
}

/// The output `out` (JSON: `path`, `shape`, `dtype`) asks for.
fn out_of(out: &Value) -> Result<Option<(PathBuf, Vec<usize>, DType)>, Error> {
    if out.is_null() {
        return Ok(None);
    }
    let path = out["path"]
        .as_str()
        .ok_or_else(|| Error::invalid("an output needs a path"))?;
    let shape = out["shape"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
                .collect::<Option<Vec<usize>>>()
        })
        .ok_or_else(|| Error::invalid("an output needs a shape"))?;
    let dtype: DType = out["dtype"]
        .as_str()
        .ok_or_else(|| Error::invalid("an output needs a dtype"))?
        .parse()?;
    Ok(Some((PathBuf::from(path), shape, dtype)))
}

pub(crate) fn open_all(sources: &[String]) -> Result<Vec<TensorFile>, Error> {
    sources
        .iter()
        .map(|s| {
            let src: Source = serde_json::from_str(s)
                .map_err(|e| Error::invalid(format!("bad input description: {e}")))?;
            src.open()
        })
        .collect()
}

fn parse(s: &str) -> PyResult<Value> {
    serde_json::from_str(s).map_err(|e| bad_json(&e))
}

/// Plans `callback` over the blocks of `sources` (each a `Source` as JSON); returns the
/// plan as JSON, with its text under `text`.
#[pyfunction]
pub(crate) fn plan_blocks(
    py: Python<'_>,
    sources: Vec<String>,
    req: &str,
    out: &str,
    opts: &str,
) -> PyResult<String> {
    let (req, out, opts) = (parse(req)?, parse(out)?, parse_opts(opts)?);
    py.detach(|| -> Result<String, Error> {
        let blocks = blocks_of(&req)?;
        let out = out_of(&out)?;
        let files = open_all(&sources)?;
        let refs: Vec<&TensorFile> = files.iter().collect();
        let e = engine(&opts)?;
        let o = out.as_ref().map(|(path, shape, dtype)| BlocksOut {
            path,
            shape: shape.clone(),
            dtype: *dtype,
        });
        let plan = e.plan_blocks(&refs, &blocks, o.as_ref())?;
        let mut j = plan.json();
        j["text"] = Value::String(plan.to_string());
        Ok(j.to_string())
    })
    .map_err(to_py)
}

/// Runs `callback` over the blocks of `sources` (each a `Source` as JSON) as `req`
/// (JSON) says, writing `out` (JSON, or `null` for none); `key` makes the run resumable
/// (the journal's description of the job, with the inputs' identities added). Returns
/// the run report as JSON.
#[pyfunction]
#[pyo3(signature = (sources, req, out, callback, opts, progress=None, key=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_blocks(
    py: Python<'_>,
    sources: Vec<String>,
    req: &str,
    out: &str,
    callback: Py<PyAny>,
    opts: &str,
    progress: Option<Py<PyAny>>,
    key: Option<String>,
) -> PyResult<String> {
    let (req, out, opts) = (parse(req)?, parse(out)?, parse_opts(opts)?);
    let blocks = blocks_of(&req).map_err(to_py)?;
    let out = out_of(&out).map_err(to_py)?;
    let mut e = engine(&opts).map_err(to_py)?;
    let resume = opts["resume"].as_bool().unwrap_or(false);
    match (&key, &out) {
        (Some(k), Some(_)) => {
            let mut jk = JobKey::new(k.clone());
            for s in &sources {
                let src: Source = serde_json::from_str(s).map_err(|e| bad_json(&e))?;
                jk = jk.input(&src.path).map_err(to_py)?;
            }
            e = e.with_journal(jk, resume);
        }
        _ if resume => {
            return Err(PyValueError::new_err(
                "tilestream: resume needs an output to continue writing",
            ));
        }
        _ => {}
    }
    // the exception of the first block that raised (calls at once may raise out of order)
    let raised: Raised = Arc::default();
    let slot = Arc::clone(&raised);
    let result = run_on_worker(py, e, progress, move |e: &Engine| {
        let files = open_all(&sources)?;
        let refs: Vec<&TensorFile> = files.iter().collect();
        let o = out.as_ref().map(|(path, shape, dtype)| BlocksOut {
            path,
            shape: shape.clone(),
            dtype: *dtype,
        });
        e.run_blocks(&refs, &blocks, o.as_ref(), block_fn(callback, slot))
    });
    // the function's own exception, unchanged, before what the engine made of it
    if let Some((_, err)) = raised.lock().ok().and_then(|mut s| s.take()) {
        return Err(err);
    }
    let report = result?;
    serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The exception of the first block that raised, with its index, kept to be raised
/// unchanged once the run has stopped.
type Raised = Arc<Mutex<Option<(usize, PyErr)>>>;

/// The engine's function for the Python callable `callback`: the GIL taken for each call;
/// an exception kept in `slot` (the lowest block's) and the run stopped.
fn block_fn(
    callback: Py<PyAny>,
    slot: Raised,
) -> impl Fn(&Block<'_>, Option<BlockOut<'_>>) -> Result<(), Error> + Send + Sync {
    move |b: &Block<'_>, o: Option<BlockOut<'_>>| -> Result<(), Error> {
        Python::attach(|py| match call(py, &callback, b, o) {
            Ok(()) => Ok(()),
            Err(err) => {
                let message = err.to_string();
                keep(&slot, b.index, err);
                Err(Error::Function {
                    block: b.index,
                    message,
                })
            }
        })
    }
}

/// Keeps `err` in `slot` unless an exception of an earlier block is there.
fn keep(slot: &Raised, index: usize, err: PyErr) {
    if let Ok(mut s) = slot.lock()
        && s.as_ref().is_none_or(|(first, _)| index < *first)
    {
        *s = Some((index, err));
    }
}

/// The runner of a pipeline's `function` steps (`module:function`) on the engines of
/// `tilestream.run`: `tilestream._blocks._step` resolves the name and measures the
/// function as `map_overlap` does (once per step and inputs: the plan of the pipeline
/// and its run share what it found), and the engine of the pipeline runs it, so its
/// budget, threads, progress and Ctrl-C apply. An exception the function (or the import
/// of its module) raised is kept, and raised unchanged by the pipeline's call.
pub(crate) struct PyFunctions {
    /// Step (JSON) -> what `_step` returned, for this pipeline call only: a function
    /// edited between two calls is measured again.
    cache: Py<pyo3::types::PyDict>,
    /// The first exception raised.
    pub(crate) raised: Raised,
}

impl PyFunctions {
    pub(crate) fn new(py: Python<'_>) -> Self {
        PyFunctions {
            cache: pyo3::types::PyDict::new(py).unbind(),
            raised: Arc::default(),
        }
    }

    /// `_step`'s answer for `step`: the blocks request and the output (JSON), and the
    /// callback.
    fn step(&self, py: Python<'_>, e: &Engine, step: &Value) -> Result<Step, Error> {
        let got = (|| -> PyResult<(String, String, Py<PyAny>)> {
            py.import("tilestream._blocks")?
                .getattr("_step")?
                .call1((step.to_string(), e.budget().limit(), self.cache.bind(py)))?
                .extract()
        })();
        let (req, out, callback) = got.map_err(|err| {
            let message = err.to_string();
            keep(&self.raised, usize::MAX, err);
            Error::invalid(message)
        })?;
        let blocks =
            blocks_of(&serde_json::from_str(&req).map_err(|e| Error::Internal(e.to_string()))?)?;
        let (_, shape, dtype) =
            out_of(&serde_json::from_str(&out).map_err(|e| Error::Internal(e.to_string()))?)?
                .ok_or_else(|| Error::Internal("a function step without an output".into()))?;
        Ok(Step {
            blocks,
            shape,
            dtype,
            callback,
        })
    }

    /// What a step raised, unchanged, with the pipeline's error `e` (naming the step's
    /// line) as a note; `e` when no step raised.
    pub(crate) fn raise(&self, py: Python<'_>, e: PyErr) -> PyErr {
        match self.raised.lock().ok().and_then(|mut s| s.take()) {
            Some((_, raised)) => {
                let value = raised.value(py);
                let note = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
                if value.hasattr("add_note").unwrap_or(false) {
                    let _ = value.call_method1("add_note", (format!("tilestream: {note}"),));
                }
                raised
            }
            None => e,
        }
    }
}

/// A `function` step made ready: the blocks request, the output's shape and dtype, and
/// the callback calling the function on each block.
struct Step {
    blocks: Blocks,
    shape: Vec<usize>,
    dtype: DType,
    callback: Py<PyAny>,
}

impl tilestream::FunctionRunner for PyFunctions {
    fn prepare(&self, e: &Engine, step: &Value) -> Result<(Blocks, Vec<usize>, DType), Error> {
        Python::attach(|py| self.step(py, e, step).map(|s| (s.blocks, s.shape, s.dtype)))
    }

    fn run(
        &self,
        e: &Engine,
        step: &Value,
        inputs: &[&TensorFile],
        blocks: &Blocks,
        out: &BlocksOut<'_>,
    ) -> Result<tilestream::RunReport, Error> {
        // the function's memory is watched for the whole run, as map_overlap watches it
        let (callback, watch) = Python::attach(|py| {
            let callback = self.step(py, e, step)?.callback;
            let watch = callback
                .getattr(py, "watch")
                .and_then(|w| w.call_method0(py, "__enter__").map(|_| w))
                .map_err(|err| Error::Internal(format!("the memory watch: {err}")))?;
            Ok::<_, Error>((callback, watch))
        })?;
        let r = e.run_blocks(
            inputs,
            blocks,
            Some(out),
            block_fn(callback, Arc::clone(&self.raised)),
        );
        Python::attach(|py| {
            watch
                .call_method1(py, "__exit__", (py.None(), py.None(), py.None()))
                .map(|_| ())
                .map_err(|err| Error::Internal(format!("the memory watch: {err}")))
        })?;
        r
    }
}

/// Calls the Python side for block `b`: its padded blocks as read-only [`View`]s of the
/// engine's buffers, and the result's place in the output slot as a writable one that
/// the Python side fills; all end with the call. An input still referenced then (an array
/// over it that the function kept, or a traceback's frame) leaves that buffer to Python
/// for good, and stops the run.
fn call(py: Python<'_>, cb: &Py<PyAny>, b: &Block<'_>, out: Option<BlockOut<'_>>) -> PyResult<()> {
    let views = b
        .inputs
        .iter()
        .map(|i| View::read(py, i.data))
        .collect::<PyResult<Vec<_>>>()?;
    let inputs = PyList::empty(py);
    for (i, v) in b.inputs.iter().zip(&views) {
        inputs.append((v.as_any(), i.dtype.name(), PyTuple::new(py, &i.shape)?))?;
    }
    let (out_shape, out_view) = match out {
        Some(o) => (
            Some(PyTuple::new(py, &o.shape)?),
            Some(View::write(py, o.bytes)?),
        ),
        None => (None, None),
    };
    let got = cb.call1(
        py,
        (
            b.index,
            b.count,
            b.tile,
            b.inner,
            inputs,
            out_shape,
            out_view.as_ref().map(View::as_any),
        ),
    );
    if let Some(v) = &out_view {
        v.end();
    }
    let mut kept = false;
    for v in views {
        kept |= !v.released()?;
    }
    if kept {
        b.keep_inputs();
        got?;
        return Err(PyRuntimeError::new_err(format!(
            "tilestream: the function kept block {}'s input arrays past its call (a view of \
             them in what it returned or stored): return or keep copies (`b.copy()`)",
            b.index
        )));
    }
    got.map(|_| ())
}
