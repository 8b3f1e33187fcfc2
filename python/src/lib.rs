//! `tilestream._tilestream`: the Rust side of the Python package. It is deliberately
//! thin: the Python layer (`python/tilestream/__init__.py`) builds an operation as the
//! engine's single description, [`OpSpec`] (as JSON), and this module plans or runs it
//! with an engine made for the call, exactly as the command line does. Arrays come back
//! as bytes with their dtype and shape, which the Python layer wraps with numpy (so the
//! extension does not depend on numpy's C API, and numpy 1.26 and 2.x both work).
//!
//! Every run happens on a worker thread while the calling thread, with the GIL
//! released, waits in short slices: between them it checks for signals (Ctrl-C raises
//! `KeyboardInterrupt` within a fraction of a second, after the engine has stopped at
//! the tile in flight and removed its unfinished output) and hands progress to a
//! Python callable; an exception raised by that callable cancels the run and reaches
//! the caller unchanged. An engine (and its worker threads) is made per call, so the
//! module is safe to use after `fork`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{Value, json};
use tilestream::format::tiff::TiffWriteOptions;
use tilestream::format::tiff::cog::{CogOptions, Overviews};
use tilestream::format::zarr::ZarrWriteOptions;
use tilestream::format::{Format, OutRegion};
use tilestream::{
    BudgetError as TsBudgetError, Engine, Error, MemoryBudget, OpSpec, Partial, Progress, Reduce,
    ReduceOver, Source,
};

create_exception!(
    tilestream,
    BudgetError,
    PyMemoryError,
    "The memory budget is too small for the operation (or exhausted); the message has the arithmetic."
);

/// How long the waiting thread sleeps between checks for signals and progress.
const SLICE: Duration = Duration::from_millis(50);

/// An error of the engine as the Python exception a Python user expects: see the
/// package's documentation for the mapping.
fn to_py(e: Error) -> PyErr {
    let msg = e.one_line();
    match e {
        Error::Budget(b) => {
            let parse = matches!(b, TsBudgetError::Parse(_));
            let smallest = match b {
                // the device's: the message names --gpu-memory (`gpu_memory=`)
                TsBudgetError::TooSmall { needed, .. }
                | TsBudgetError::DeviceTooSmall { needed, .. } => Some(needed),
                TsBudgetError::Exhausted {
                    held, requested, ..
                } => Some(held + requested),
                // a bound below which the output cannot stream, not the smallest that works
                TsBudgetError::CannotEncode { .. } | TsBudgetError::Parse(_) => None,
            };
            match smallest {
                None if parse => PyValueError::new_err(msg),
                None => BudgetError::new_err((msg,)),
                Some(n) => BudgetError::new_err((msg, n)),
            }
        }
        Error::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
            std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
            _ => PyOSError::new_err(msg),
        },
        Error::Interrupted { .. } => PyKeyboardInterrupt::new_err(msg),
        Error::Internal(_) | Error::Device(_) => PyRuntimeError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

fn bad_json(e: &serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("tilestream: bad operation description: {e}"))
}

/// The options of a call (`memory=`, `threads=`...), as the Python layer passes them.
fn engine(opts: &Value) -> Result<Engine, Error> {
    let memory = match &opts["memory"] {
        Value::Number(n) => MemoryBudget::new(n.as_u64().unwrap_or(0)),
        Value::String(s) => MemoryBudget::parse(s)?,
        _ => MemoryBudget::parse("1GiB")?,
    };
    let mut tiff = TiffWriteOptions::default();
    if let Some(c) = opts["tiff_compress"].as_str() {
        tiff.compression = c.parse()?;
    }
    if let Some(p) = opts["tiff_predictor"].as_str() {
        tiff.predictor = p.parse()?;
    }
    let format = opts["format"].as_str();
    let cog_format = format.is_some_and(|f| f.eq_ignore_ascii_case("cog"));
    if opts["cog"].as_bool() == Some(true) || cog_format {
        tiff.cog = Some(CogOptions {
            overviews: match &opts["overviews"] {
                Value::Number(n) => Overviews::Count(
                    n.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| Error::invalid(format!("overviews={n} is not a count")))?,
                ),
                Value::String(s) => s.parse()?,
                _ => Overviews::Auto,
            },
            resampling: opts["overview_resampling"]
                .as_str()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
        });
    }
    let format = if cog_format { Some("tif") } else { format };
    let zarr = zarr_options(opts)?;
    let mut e = Engine::new(memory)?
        .with_tiff_output(tiff)
        .with_zarr_output(zarr)
        .with_out_format(format.map(str::parse).transpose()?)
        .with_device(
            opts["device"]
                .as_str()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
        )?;
    if let Some(n) = opts["threads"].as_u64() {
        e = e.with_threads(usize::try_from(n).unwrap_or(usize::MAX))?;
    }
    if let Some(r) = opts.get("out_region").filter(|r| !r.is_null()) {
        e = e.with_output_region(Some(OutRegion {
            at_row: r["at_row"].as_u64().unwrap_or(0),
            skip_rows: r["skip_rows"].as_u64().unwrap_or(0),
            rows: r["rows"].as_u64(),
        }));
    }
    Ok(e)
}

/// The Zarr output options of a call (`zarr_compress=`, `zarr_chunks=`, `zarr_shard=`).
fn zarr_options(opts: &Value) -> Result<ZarrWriteOptions, Error> {
    let mut zarr = ZarrWriteOptions::default();
    if let Some(c) = opts["zarr_compress"].as_str() {
        zarr.compression = c.parse()?;
    }
    if let Some(c) = opts["zarr_chunks"].as_str() {
        zarr.chunks = Some(tilestream::shape::parse_shape(c)?);
    }
    if let Some(c) = opts["zarr_shard"].as_str() {
        zarr.shard = Some(tilestream::shape::parse_shape(c)?);
    }
    Ok(zarr)
}

/// Runs `work` on a worker thread with the engine `e`, the GIL released, checking for
/// signals and passing progress to `progress` (a Python callable taking a dict) between
/// short waits. A signal or an exception in `progress` cancels the run; the exception
/// is what the caller gets.
fn run_on_worker<T: Send + 'static>(
    py: Python<'_>,
    e: Engine,
    progress: Option<Py<PyAny>>,
    work: impl FnOnce(&Engine) -> Result<T, Error> + Send + 'static,
) -> PyResult<T> {
    let latest: Arc<Mutex<Option<Progress>>> = Arc::default();
    // the last progress of a pass is handed over and waited for: the callback sees it
    // before the output is put in place, and an exception it raises then stops the run
    // (the scheduler checks the cancel token once more after its last tile)
    let last_pass_tile: Arc<(Mutex<bool>, Condvar)> = Arc::default();
    let e = {
        let latest = Arc::clone(&latest);
        let last = Arc::clone(&last_pass_tile);
        let waits = progress.is_some();
        e.with_progress(Arc::new(move |p: &Progress| {
            if let Ok(mut l) = latest.lock() {
                *l = Some(p.clone());
            }
            if waits && p.tiles_done == p.tiles_total {
                let (flag, cv) = &*last;
                if let Ok(mut waiting) = flag.lock() {
                    *waiting = true;
                    while *waiting {
                        match cv.wait_timeout(waiting, SLICE) {
                            Ok((w, _)) => waiting = w,
                            Err(_) => return,
                        }
                    }
                }
            }
        }))
    };
    let cancel = e.cancel_token();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let worker = std::thread::Builder::new()
        .name("tilestream-run".into())
        .spawn(move || {
            let _ = tx.send(work(&e));
        })
        .map_err(|err| PyRuntimeError::new_err(format!("cannot start a worker thread: {err}")))?;
    let mut pending: Option<PyErr> = None;
    let result = loop {
        let got = py.detach(|| rx.recv_timeout(SLICE));
        match got {
            Ok(r) => break r,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                break Err(Error::Internal(
                    "the worker thread ended without a result".into(),
                ));
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        // a pass's last progress waiting for its hand-over: released below, whatever
        // happens, so the worker never waits on a caller that has stopped listening
        let last_waiting = last_pass_tile.0.lock().is_ok_and(|w| *w);
        if pending.is_none() {
            if let Err(err) = py.check_signals() {
                cancel.store(true, Ordering::SeqCst);
                pending = Some(err);
            } else if let Some(cb) = &progress {
                let p = latest.lock().ok().and_then(|mut l| l.take());
                if let Some(p) = p
                    && let Err(err) = call_progress(py, cb, &p)
                {
                    cancel.store(true, Ordering::SeqCst);
                    pending = Some(err);
                }
            }
        }
        if last_waiting {
            let (flag, cv) = &*last_pass_tile;
            if let Ok(mut w) = flag.lock() {
                *w = false;
            }
            cv.notify_all();
        }
    };
    let _ = py.detach(|| worker.join());
    if let Some(err) = pending {
        // the run stopped because of it (or finished just before): the caller's
        // exception wins either way, and nothing is left at the output
        return Err(err);
    }
    // a progress not yet shown (the last was handed over before the output was put in
    // place; this is one that came after it, if any), so that a bar reaches its end
    if let (Some(cb), Ok(_)) = (&progress, &result) {
        let p = latest.lock().ok().and_then(|mut l| l.take());
        if let Some(p) = p {
            call_progress(py, cb, &p)?;
        }
    }
    result.map_err(to_py)
}

fn call_progress(py: Python<'_>, cb: &Py<PyAny>, p: &Progress) -> PyResult<()> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("tiles_done", p.tiles_done)?;
    d.set_item("tiles_total", p.tiles_total)?;
    d.set_item("bytes_done", p.bytes_done)?;
    d.set_item("reserved", p.reserved)?;
    d.set_item("budget", p.budget)?;
    d.set_item("elapsed", p.elapsed.as_secs_f64())?;
    cb.call1(py, (d,))?;
    Ok(())
}

fn parse_spec(spec: &str) -> PyResult<OpSpec> {
    serde_json::from_str(spec).map_err(|e| bad_json(&e))
}

fn parse_opts(opts: &str) -> PyResult<Value> {
    serde_json::from_str(opts).map_err(|e| bad_json(&e))
}

/// Runs the operation `spec` (an `OpSpec` as JSON) with the options `opts` (JSON);
/// returns the run report as JSON.
#[pyfunction]
#[pyo3(signature = (spec, opts, progress=None))]
fn run_spec(
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
fn plan_spec(py: Python<'_>, spec: &str, opts: &str) -> PyResult<String> {
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
#[pyfunction]
#[pyo3(signature = (source, op, axis, ddof, opts, progress=None))]
fn reduce(
    py: Python<'_>,
    source: &str,
    op: &str,
    axis: Option<usize>,
    ddof: u32,
    opts: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<(Py<PyBytes>, String, Vec<usize>, String)> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let reduce = Reduce::parse(op, ddof).map_err(to_py)?;
    let over = axis.map_or(ReduceOver::All, ReduceOver::Axis);
    let e = engine(&opts).map_err(to_py)?;
    let (array, report) = run_on_worker(py, e, progress, move |e| {
        let input = source.open()?;
        e.reduce(&input, reduce, over)
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
fn reduce_partials(
    py: Python<'_>,
    source: &str,
    requested: Vec<(String, u32)>,
    axis: Option<usize>,
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
    let over = axis.map_or(ReduceOver::All, ReduceOver::Axis);
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
fn merge_partials(
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

/// What the operation `spec` (JSON) writes: its shape, dtype and halo rows (JSON).
#[pyfunction]
fn output_layout(py: Python<'_>, spec: &str) -> PyResult<String> {
    let spec = parse_spec(spec)?;
    let layout = py.detach(|| spec.output_layout()).map_err(to_py)?;
    serde_json::to_string(&layout).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The step in rows on which a reduction of `shape` over `axis` may be split.
#[pyfunction]
fn row_step(shape: Vec<usize>, axis: Option<usize>) -> PyResult<u64> {
    tilestream::row_step(&shape, axis.map_or(ReduceOver::All, ReduceOver::Axis)).map_err(to_py)
}

/// Creates the temporary `.npy` that the tasks of a job writing `dest` fill by rows;
/// returns its path.
#[pyfunction]
fn create_npy_for_rows(dest: PathBuf, shape: Vec<usize>, dtype: &str) -> PyResult<String> {
    let dtype = dtype.parse().map_err(to_py)?;
    let p = tilestream::format::create_npy_for_rows(&dest, &shape, dtype).map_err(to_py)?;
    Ok(p.to_string_lossy().into_owned())
}

/// Flushes the file [`create_npy_for_rows`] made and renames it onto `dest`.
#[pyfunction]
#[pyo3(signature = (tmp, dest, durable=true))]
fn commit_npy(tmp: PathBuf, dest: PathBuf, durable: bool) -> PyResult<()> {
    tilestream::format::commit_npy(&tmp, &dest, durable).map_err(to_py)
}

/// The input and output names of the pipeline file `path`.
#[pyfunction]
fn pipeline_names(py: Python<'_>, path: PathBuf) -> PyResult<(Vec<String>, Vec<String>)> {
    py.detach(|| tilestream::workflow::Workflow::names_of(&path))
        .map_err(to_py)
}

/// Rows of the leading axis in one chunk of a Zarr output of `shape` and `dtype`
/// written with the options `opts` (JSON).
#[pyfunction]
fn zarr_chunk_rows(shape: Vec<usize>, dtype: &str, opts: &str) -> PyResult<usize> {
    let opts = parse_opts(opts)?;
    let dtype = dtype.parse().map_err(to_py)?;
    let z = zarr_options(&opts).map_err(to_py)?;
    tilestream::format::zarr::chunk_rows(&z, &shape, dtype).map_err(to_py)
}

/// Creates the temporary Zarr store that the tasks of a job writing `dest` fill by chunk
/// rows, with the Zarr options of `opts` (JSON); returns its path.
#[pyfunction]
fn create_zarr_for_rows(
    dest: PathBuf,
    shape: Vec<usize>,
    dtype: &str,
    opts: &str,
) -> PyResult<String> {
    let opts = parse_opts(opts)?;
    let dtype = dtype.parse().map_err(to_py)?;
    let z = zarr_options(&opts).map_err(to_py)?;
    let p = tilestream::format::create_zarr_for_rows(&dest, &shape, dtype, &z).map_err(to_py)?;
    Ok(p.to_string_lossy().into_owned())
}

/// Renames the store [`create_zarr_for_rows`] made onto `dest`.
#[pyfunction]
fn commit_zarr(tmp: PathBuf, dest: PathBuf) -> PyResult<()> {
    tilestream::format::commit_zarr(&tmp, &dest).map_err(to_py)
}

/// What a file holds: format, dtype, shape, data offset, georeferencing (JSON).
#[pyfunction]
fn info(py: Python<'_>, source: &str) -> PyResult<String> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    py.detach(|| {
        let t = source.open()?;
        let georef = t.georef().map(|g| {
            json!({
                "geotransform": g.geotransform(),
                "epsg": g.epsg(),
                "nodata": g.nodata,
                "citation": g.geo_ascii,
            })
        });
        let format = match t.info().format {
            Format::Npy { .. } => "npy",
            Format::Raw => "raw",
            Format::GeoTiff => "geotiff",
            Format::Zarr => "zarr",
        };
        Ok(json!({
            "format": format,
            "dtype": t.dtype().name(),
            "shape": t.shape(),
            "offset": t.info().data_offset,
            "nbytes": t.info().nbytes(),
            "georef": georef,
        })
        .to_string())
    })
    .map_err(to_py)
}

/// Reads `count` elements from element `start` of `source` (its bytes, C order),
/// through the same mapped (or decoded) windows the engine reads.
#[pyfunction]
fn read_range(py: Python<'_>, source: &str, start: u64, count: u64) -> PyResult<Py<PyBytes>> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let bytes = py
        .detach(|| -> Result<Vec<u8>, Error> {
            let t = source.open()?;
            let w = t.map_window(start, count)?;
            Ok(w.bytes().to_vec())
        })
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// The pipeline file at `path`: runs it (`dry_run=False`, returns a JSON list of
/// reports) or plans it (returns the plan's text).
#[pyfunction]
#[pyo3(signature = (path, opts, dry_run, progress=None, inputs=None, outputs=None))]
fn run_pipeline(
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
            tilestream::workflow::Workflow::load_with(
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
    let e = engine(&opts).map_err(to_py)?;
    if dry_run {
        return py.detach(|| wf.plan(&e)).map_err(to_py);
    }
    let reports = run_on_worker(py, e, progress, move |e| wf.run(e))?;
    serde_json::to_string(&reports).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Bytes of a memory size written as on the command line (`512MiB`, `2GB`, `1048576`).
#[pyfunction]
fn parse_size(s: &str) -> PyResult<u64> {
    tilestream::parse_size(s).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The version of the tilestream crate this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _tilestream(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_spec, m)?)?;
    m.add_function(wrap_pyfunction!(plan_spec, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_partials, m)?)?;
    m.add_function(wrap_pyfunction!(merge_partials, m)?)?;
    m.add_function(wrap_pyfunction!(row_step, m)?)?;
    m.add_function(wrap_pyfunction!(output_layout, m)?)?;
    m.add_function(wrap_pyfunction!(create_npy_for_rows, m)?)?;
    m.add_function(wrap_pyfunction!(commit_npy, m)?)?;
    m.add_function(wrap_pyfunction!(zarr_chunk_rows, m)?)?;
    m.add_function(wrap_pyfunction!(create_zarr_for_rows, m)?)?;
    m.add_function(wrap_pyfunction!(commit_zarr, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline_names, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(read_range, m)?)?;
    m.add_function(wrap_pyfunction!(run_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("BudgetError", m.py().get_type::<BudgetError>())?;
    Ok(())
}
