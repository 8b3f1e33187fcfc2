//! Runs on a worker thread while the calling thread, with the GIL released, waits in
//! short slices, checking for signals and handing progress to a Python callable.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tilestream::{Engine, Error, Progress};

use crate::errors::to_py;

/// How long the waiting thread sleeps between checks for signals and progress.
const SLICE: Duration = Duration::from_millis(50);

/// Runs `work` on a worker thread with the engine `e`, the GIL released, checking for
/// signals and passing progress to `progress` (a Python callable taking a dict) between
/// short waits. A signal or an exception in `progress` cancels the run; the exception
/// is what the caller gets.
pub(crate) fn run_on_worker<T: Send + 'static>(
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

pub(crate) fn call_progress(py: Python<'_>, cb: &Py<PyAny>, p: &Progress) -> PyResult<()> {
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
