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

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod batches;
mod blocks;
mod calls;
mod errors;
mod files;
mod options;
mod pipeline;
mod views;
mod worker;

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
    m.add_function(wrap_pyfunction!(calls::run_spec, m)?)?;
    m.add_function(wrap_pyfunction!(blocks::run_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(batches::open_batches, m)?)?;
    m.add_function(wrap_pyfunction!(batches::plan_batches, m)?)?;
    m.add_class::<batches::Batches>()?;
    m.add_class::<batches::BatchMemory>()?;
    m.add_function(wrap_pyfunction!(blocks::plan_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(calls::plan_spec, m)?)?;
    m.add_function(wrap_pyfunction!(calls::reduce, m)?)?;
    m.add_function(wrap_pyfunction!(calls::reduce_partials, m)?)?;
    m.add_function(wrap_pyfunction!(calls::merge_partials, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_start, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_counts, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_next, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_fold, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_done, m)?)?;
    m.add_function(wrap_pyfunction!(calls::quantile_finish, m)?)?;
    m.add_function(wrap_pyfunction!(calls::row_step, m)?)?;
    m.add_function(wrap_pyfunction!(calls::output_layout, m)?)?;
    m.add_function(wrap_pyfunction!(calls::op_names, m)?)?;
    m.add_function(wrap_pyfunction!(calls::normalize_spec, m)?)?;
    m.add_function(wrap_pyfunction!(files::create_npy_for_rows, m)?)?;
    m.add_function(wrap_pyfunction!(files::commit_npy, m)?)?;
    m.add_function(wrap_pyfunction!(files::zarr_chunk_rows, m)?)?;
    m.add_function(wrap_pyfunction!(files::create_zarr_for_rows, m)?)?;
    m.add_function(wrap_pyfunction!(files::commit_zarr, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::pipeline_names, m)?)?;
    m.add_function(wrap_pyfunction!(files::info, m)?)?;
    m.add_function(wrap_pyfunction!(files::read_range, m)?)?;
    m.add_function(wrap_pyfunction!(pipeline::run_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("BudgetError", m.py().get_type::<errors::BudgetError>())?;
    Ok(())
}
