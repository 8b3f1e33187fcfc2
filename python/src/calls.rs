//! The operations: planned and run from their description (an `OpSpec` as JSON), and
//! the reductions whose result comes back in memory, whole or as partials of a cluster
//! job.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyBytesMethods};
use serde_json::Value;
use tilestream::{Partial, Reduce, ReduceOver, Source};

/// What a reduction over `axis` runs over: every element for `None`, else those axes
/// (non-negative, as the Python side normalised them).
fn over_of(axis: Option<Vec<usize>>) -> Result<ReduceOver, tilestream::Error> {
    match axis {
        None => Ok(ReduceOver::All),
        Some(list) => ReduceOver::axes(&list),
    }
}

use crate::errors::{bad_json, to_py};
use crate::options::{engine, parse_opts, parse_spec};
use crate::worker::run_on_worker;

/// Runs the operation `spec` (an `OpSpec` as JSON) with the options `opts` (JSON);
/// returns the run report as JSON.
#[pyfunction]
#[pyo3(signature = (spec, opts, progress=None))]
pub(crate) fn run_spec(
    py: Python<'_>,
    spec: &str,
    opts: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let spec = parse_spec(spec)?;
    let opts = parse_opts(opts)?;
    let mut e = engine(&opts).map_err(to_py)?;
    let resume = opts["resume"].as_bool().unwrap_or(false);
    let region = !opts["out_region"].is_null();
    if region && resume {
        return Err(PyValueError::new_err(
            "tilestream: a run writing rows of a cluster job's output cannot resume",
        ));
    }
    match spec.job_key().map_err(to_py)? {
        _ if region => {}
        Some(key) => e = e.with_journal(key, resume),
        None if resume => {
            return Err(PyValueError::new_err(
                "tilestream: resume is not available for tiles: each patch file is written whole",
            ));
        }
        None => {}
    }
    let report = run_on_worker(py, e, progress, move |e| e.run_spec(&spec))?;
    serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Plans the operation `spec` without running it; returns the plan as JSON.
#[pyfunction]
pub(crate) fn plan_spec(py: Python<'_>, spec: &str, opts: &str) -> PyResult<String> {
    let spec = parse_spec(spec)?;
    let opts = parse_opts(opts)?;
    py.detach(|| {
        let e = engine(&opts)?;
        let p = e.plan_spec(&spec)?;
        let mut j = p.json();
        j["text"] = Value::String(p.to_string());
        Ok(j.to_string())
    })
    .map_err(to_py)
}

/// Reduces `source` (a `Source` as JSON) in memory: returns (bytes, dtype name, shape,
/// report JSON), the bytes exactly those the command line writes.
///
/// Quantiles, percentiles and medians take `q` (one number when `q_scalar`) and `method`.
#[pyfunction]
#[pyo3(signature = (source, op, axis, ddof, opts, progress=None, q=None, q_scalar=false, method=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    py: Python<'_>,
    source: &str,
    op: &str,
    axis: Option<Vec<usize>>,
    ddof: u32,
    opts: &str,
    progress: Option<Py<PyAny>>,
    q: Option<Vec<f64>>,
    q_scalar: bool,
    method: Option<String>,
) -> PyResult<(Py<PyBytes>, String, Vec<usize>, String)> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let quantiles =
        tilestream::ops::quantile::Quantiles::parse(op, q.as_deref(), q_scalar, method.as_deref())
            .map_err(to_py)?;
    let reduce = match &quantiles {
        Some(_) => None,
        None if q.is_some() || method.is_some() => {
            return Err(PyValueError::new_err(format!(
                "tilestream: q and method are for quantile, percentile and median (and their \
                 nan forms), not {op}"
            )));
        }
        None => Some(Reduce::parse(op, ddof).map_err(to_py)?),
    };
    let over = over_of(axis).map_err(to_py)?;
    let e = engine(&opts).map_err(to_py)?;
    let (array, report) = run_on_worker(py, e, progress, move |e| {
        let input = source.open()?;
        match (&quantiles, reduce) {
            (Some(qs), _) => e.quantile(&input, over, qs),
            (None, Some(r)) => e.reduce(&input, r, over),
            (None, None) => Err(tilestream::Error::Internal("no reduction".into())),
        }
    })?;
    let report =
        serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((
        PyBytes::new(py, array.bytes()).unbind(),
        array.dtype().name().to_string(),
        array.shape().to_vec(),
        report,
    ))
}

/// Reduces the rows `[start, end)` of `source` (the whole input, a `Source` as JSON)
/// with each reduction of `requested` (`(name, ddof)`), in one pass, into partials (bytes) for
/// [`merge_partials`]; returns them with the run report (JSON).
#[pyfunction]
#[pyo3(signature = (source, requested, axis, start, end, opts))]
pub(crate) fn reduce_partials(
    py: Python<'_>,
    source: &str,
    requested: Vec<(String, u32)>,
    axis: Option<Vec<usize>>,
    start: u64,
    end: u64,
    opts: &str,
) -> PyResult<(Vec<Py<PyBytes>>, String)> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let reductions = requested
        .iter()
        .map(|(name, ddof)| Reduce::parse(name, *ddof))
        .collect::<Result<Vec<_>, _>>()
        .map_err(to_py)?;
    let over = over_of(axis).map_err(to_py)?;
    let e = engine(&opts).map_err(to_py)?;
    let (parts, report) = run_on_worker(py, e, None, move |e| {
        let input = source.open_whole()?;
        e.reduce_partials(&input, &reductions, over, start..end)
    })?;
    let report =
        serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let parts = parts
        .iter()
        .map(|p| PyBytes::new(py, &p.to_bytes()).unbind())
        .collect();
    Ok((parts, report))
}

/// Merges partials (bytes from [`reduce_partials`], any order) into the result: (bytes,
/// dtype name, shape), the bytes of one run over the whole input.
#[pyfunction]
pub(crate) fn merge_partials(
    py: Python<'_>,
    parts: Vec<Vec<u8>>,
) -> PyResult<(Py<PyBytes>, String, Vec<usize>)> {
    let array = py
        .detach(|| {
            let parts = parts
                .iter()
                .map(|b| Partial::from_bytes(b))
                .collect::<Result<Vec<_>, _>>()?;
            tilestream::merge_partials(&parts)
        })
        .map_err(to_py)?;
    Ok((
        PyBytes::new(py, array.bytes()).unbind(),
        array.dtype().name().to_string(),
        array.shape().to_vec(),
    ))
}

/// The quantiles `op` (`quantile`, `percentile`, `median` or a `nan` form, with `q` and
/// `method` as [`reduce`] takes them) of `source` over `axis`, started for a cluster: the
/// selection's state (bytes) before its first pass, its digits those the budget of
/// `opts` picks for the whole input.
#[pyfunction]
#[pyo3(signature = (source, op, axis, opts, q=None, q_scalar=false, method=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn quantile_start(
    py: Python<'_>,
    source: &str,
    op: &str,
    axis: Option<Vec<usize>>,
    opts: &str,
    q: Option<Vec<f64>>,
    q_scalar: bool,
    method: Option<String>,
) -> PyResult<Py<PyBytes>> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let spec =
        tilestream::ops::quantile::Quantiles::parse(op, q.as_deref(), q_scalar, method.as_deref())
            .map_err(to_py)?
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "tilestream: {op} is not a quantile, percentile or median"
                ))
            })?;
    let over = over_of(axis).map_err(to_py)?;
    let state = py
        .detach(|| {
            let e = engine(&opts)?;
            let input = source.open_whole()?;
            Ok::<_, tilestream::Error>(e.quantile_selection(&input, over, &spec)?.to_bytes())
        })
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &state).unbind())
}

/// Counts the next pass of the selection `state` over the rows `[start, end)` of
/// `source` (the whole input, a `Source` as JSON): the counts (bytes) for
/// [`quantile_next`], and the run report (JSON).
#[pyfunction]
#[pyo3(signature = (source, state, start, end, opts))]
pub(crate) fn quantile_counts(
    py: Python<'_>,
    source: &str,
    state: &[u8],
    start: u64,
    end: u64,
    opts: &str,
) -> PyResult<(Py<PyBytes>, String)> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let e = engine(&opts).map_err(to_py)?;
    let state = state.to_vec();
    let (counts, report) = run_on_worker(py, e, None, move |e| {
        let sel = tilestream::ops::quantile::Selection::from_bytes(&state)?;
        let input = source.open_whole()?;
        e.quantile_counts(&input, &sel, start..end)
    })?;
    let report =
        serde_json::to_string(&report).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok((PyBytes::new(py, &counts).unbind(), report))
}

/// The selection `state` advanced by one pass, its counts those of every share
/// (`counts`, from [`quantile_counts`]) added: the new state and whether it is complete.
#[pyfunction]
pub(crate) fn quantile_next(
    py: Python<'_>,
    state: &[u8],
    counts: Vec<Bound<'_, PyBytes>>,
) -> PyResult<(Py<PyBytes>, bool)> {
    let parts: Vec<&[u8]> = counts.iter().map(PyBytesMethods::as_bytes).collect();
    let (state, done) = py
        .detach(|| {
            let mut sel = tilestream::ops::quantile::Selection::from_bytes(state)?;
            sel.add(&parts)?;
            Ok::<_, tilestream::Error>((sel.to_bytes(), sel.is_done()))
        })
        .map_err(to_py)?;
    Ok((PyBytes::new(py, &state).unbind(), done))
}

/// Two shares' counts of a pass of the selection `state` as the counts of both (see
/// `Selection::fold`: they are not added word by word).
#[pyfunction]
pub(crate) fn quantile_fold(
    py: Python<'_>,
    state: &[u8],
    a: &[u8],
    b: &[u8],
) -> PyResult<Py<PyBytes>> {
    let both = py
        .detach(|| tilestream::ops::quantile::Selection::from_bytes(state)?.fold(a, b))
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &both).unbind())
}

/// Whether the selection `state` is complete (no pass left to count).
#[pyfunction]
pub(crate) fn quantile_done(state: &[u8]) -> PyResult<bool> {
    Ok(tilestream::ops::quantile::Selection::from_bytes(state)
        .map_err(to_py)?
        .is_done())
}

/// The result of the complete selection `state`: (bytes, dtype name, shape), the bytes
/// [`reduce`] gives for the same quantiles.
#[pyfunction]
pub(crate) fn quantile_finish(
    py: Python<'_>,
    state: &[u8],
) -> PyResult<(Py<PyBytes>, String, Vec<usize>)> {
    let sel = tilestream::ops::quantile::Selection::from_bytes(state).map_err(to_py)?;
    let data = py.detach(|| sel.finish_bytes()).map_err(to_py)?;
    Ok((
        PyBytes::new(py, &data).unbind(),
        sel.out_dtype().name().to_string(),
        sel.out_shape(),
    ))
}

/// The name of every operation, as a spec's `"op"` tag spells it (the library's list,
/// which `tilestream._specs.SPECS` mirrors).
#[pyfunction]
pub(crate) fn op_names() -> Vec<&'static str> {
    tilestream::OpSpec::NAMES.to_vec()
}

/// The operation `spec` (JSON) as the library reads it, written back whole (defaults
/// filled in): refused as a run refuses it for an unknown operation or key, a missing
/// one or a value of the wrong type.
#[pyfunction]
pub(crate) fn normalize_spec(spec: &str) -> PyResult<String> {
    let spec = parse_spec(spec)?;
    serde_json::to_string(&spec).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// What the operation `spec` (JSON) writes: its shape, dtype and halo rows (JSON).
#[pyfunction]
pub(crate) fn output_layout(py: Python<'_>, spec: &str) -> PyResult<String> {
    let spec = parse_spec(spec)?;
    let layout = py.detach(|| spec.output_layout()).map_err(to_py)?;
    serde_json::to_string(&layout).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The step in rows on which a reduction of `shape` over `axis` may be split.
#[pyfunction]
pub(crate) fn row_step(shape: Vec<usize>, axis: Option<Vec<usize>>) -> PyResult<u64> {
    tilestream::row_step(&shape, over_of(axis).map_err(to_py)?).map_err(to_py)
}
