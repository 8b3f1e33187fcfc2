//! Pipeline files: their names, and a plan or a run of one.

use std::path::PathBuf;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use serde_json::Value;

use std::sync::Arc;

use crate::blocks::PyFunctions;
use crate::errors::to_py;
use crate::options::{engine, parse_opts};
use crate::worker::run_on_worker;

/// The input and output names of the pipeline file `path`.
#[pyfunction]
pub(crate) fn pipeline_names(
    py: Python<'_>,
    path: PathBuf,
) -> PyResult<(Vec<String>, Vec<String>)> {
    py.detach(|| tilestream::Workflow::names_of(&path))
        .map_err(to_py)
}

/// The pipeline file at `path`: runs it (`dry_run=False`, returns a JSON list of
/// reports) or plans it (returns the plan's text).
#[pyfunction]
#[pyo3(signature = (path, opts, dry_run, progress=None, inputs=None, outputs=None))]
pub(crate) fn run_pipeline(
    py: Python<'_>,
    path: PathBuf,
    opts: &str,
    dry_run: bool,
    progress: Option<Py<PyAny>>,
    inputs: Option<Vec<(String, PathBuf)>>,
    outputs: Option<Vec<(String, PathBuf)>>,
) -> PyResult<String> {
    let wf = py
        .detach(|| {
            tilestream::Workflow::load_with(
                &path,
                &inputs.unwrap_or_default(),
                &outputs.unwrap_or_default(),
            )
        })
        .map_err(to_py)?;
    let mut opts = parse_opts(opts)?;
    if opts["memory"].is_null()
        && let Some(m) = wf.memory()
    {
        opts["memory"] = Value::String(m.to_string());
    }
    if opts["device"].is_null()
        && let Some(d) = wf.device()
    {
        opts["device"] = Value::String(d.to_string());
    }
    // `function` steps call Python functions through it
    let functions = Arc::new(PyFunctions::new(py));
    let e = engine(&opts)
        .map_err(to_py)?
        .with_functions(Arc::clone(&functions) as Arc<dyn tilestream::FunctionRunner>);
    if dry_run {
        return py
            .detach(|| wf.plan(&e))
            .map_err(|e| functions.raise(py, to_py(e)));
    }
    // a function's exception, unchanged, before what the engine made of it
    let reports =
        run_on_worker(py, e, progress, move |e| wf.run(e)).map_err(|e| functions.raise(py, e))?;
    serde_json::to_string(&reports).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}
