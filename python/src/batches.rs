//! Batches of rows for a training loop (`tilestream.batches`): the engine's
//! [`tilestream::BatchStream`] behind a Python iterator. Waiting for a batch releases the
//! GIL (in short slices, checking for Ctrl-C between them); each batch's rows reach
//! Python without a copy, as objects with numpy's `__array_interface__` over the ring's
//! buffer ([`BatchMemory`]). A `BatchMemory` holds its batch, and every array over it
//! holds the `BatchMemory` (numpy's `base`), so the buffer goes back to the ring only
//! when nothing points into it any more: it is never refilled under an array.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::Value;
use tilestream::{
    Batch, BatchRequest, BatchStream, Edge, Error, Next, PatchSpec, Shuffle, TensorFile,
};

use crate::blocks::open_all;
use crate::errors::{bad_json, to_py};
use crate::options::{engine, parse_opts};

/// The inputs `sources` (each a `Source` as JSON) and what `req` (JSON) asks of them:
/// `batch`, `shuffle` (`{seed, block_rows, window_blocks}`, the sizes null for
/// [`Shuffle::for_inputs`]'s, or [`Shuffle::for_patches`]'s with patches; or null),
/// `drop_last`, `epochs`, `first_epoch`, `ring`, `pinned` (a device number or null),
/// `part` `[k, n]`, `patches` (`{size, overlap, edge}` or null).
fn request_of(req: &Value, sources: &[String]) -> Result<(BatchRequest, Vec<TensorFile>), Error> {
    let files = open_all(sources)?;
    let u = |v: &Value, name: &str| -> Result<u64, Error> {
        v.as_u64()
            .ok_or_else(|| Error::invalid(format!("{name} must be a whole number, not {v}")))
    };
    let n = |v: &Value, name: &str| -> Result<usize, Error> {
        usize::try_from(u(v, name)?).map_err(|_| Error::invalid(format!("{name} {v} is too large")))
    };
    let patches = match &req["patches"] {
        Value::Null => None,
        p => Some(PatchSpec {
            size: n(&p["size"], "patch size")?,
            overlap: n(&p["overlap"], "patch overlap")?,
            edge: p["edge"].as_str().unwrap_or("shift").parse::<Edge>()?,
        }),
    };
    let shuffle = match &req["shuffle"] {
        Value::Null => None,
        s => {
            let refs: Vec<&TensorFile> = files.iter().collect();
            let seed = u(&s["seed"], "seed")?;
            let default = match patches {
                None => Shuffle::for_inputs(seed, &refs),
                Some(p) => Shuffle::for_patches(seed, &refs, p.size),
            };
            let or = |v: &Value, name: &str, d: u64| match v {
                Value::Null => Ok(d),
                v => u(v, name),
            };
            Some(Shuffle {
                block_rows: or(&s["block_rows"], "block", default.block_rows)?,
                window_blocks: or(&s["window_blocks"], "window", default.window_blocks)?,
                ..default
            })
        }
    };
    let part = match req["part"].as_array() {
        Some(p) if p.len() == 2 => (n(&p[0], "part")?, n(&p[1], "part")?),
        _ => (0, 1),
    };
    let req = BatchRequest {
        batch: u(&req["batch"], "batch")?,
        shuffle,
        drop_last: req["drop_last"].as_bool().unwrap_or(false),
        epochs: req["epochs"].as_u64().unwrap_or(1),
        first_epoch: req["first_epoch"].as_u64().unwrap_or(0),
        ring: n(&req["ring"], "ring")?,
        pinned: match &req["pinned"] {
            Value::Null => None,
            v => Some(n(v, "pinned")?),
        },
        part,
        patches,
    };
    Ok((req, files))
}

/// The plan of batches of `req` over `sources` (each a `Source` as JSON), as JSON with
/// its text under `text`.
#[pyfunction]
pub(crate) fn plan_batches(
    py: Python<'_>,
    sources: Vec<String>,
    req: &str,
    opts: &str,
) -> PyResult<String> {
    let req: Value = serde_json::from_str(req).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    py.detach(|| -> Result<String, Error> {
        let (req, files) = request_of(&req, &sources)?;
        let refs: Vec<&TensorFile> = files.iter().collect();
        let plan = engine(&opts)?.plan_batches(&refs, &req)?;
        let mut j = plan.json();
        j["text"] = Value::String(plan.to_string());
        Ok(j.to_string())
    })
    .map_err(to_py)
}

/// Starts a stream of batches of `req` over `sources`.
#[pyfunction]
pub(crate) fn open_batches(
    py: Python<'_>,
    sources: Vec<String>,
    req: &str,
    opts: &str,
) -> PyResult<Batches> {
    let req: Value = serde_json::from_str(req).map_err(|e| bad_json(&e))?;
    let opts = parse_opts(opts)?;
    let stream = py
        .detach(|| -> Result<BatchStream, Error> {
            let (req, files) = request_of(&req, &sources)?;
            engine(&opts)?.batches(files, &req)
        })
        .map_err(to_py)?;
    let mut plan = stream.plan().json();
    plan["text"] = Value::String(stream.plan().to_string());
    Ok(Batches {
        stream: Mutex::new(Some(stream)),
        plan: plan.to_string(),
    })
}

/// A running stream of batches.
#[pyclass(module = "tilestream._tilestream", name = "BatchStream")]
pub(crate) struct Batches {
    stream: Mutex<Option<BatchStream>>,
    plan: String,
}

/// One batch as Python gets it: its number, its epoch, and each input's rows as
/// `(memory, dtype name, shape)`.
type PyBatch<'py> = (
    u64,
    u64,
    Vec<(Bound<'py, BatchMemory>, &'static str, Bound<'py, PyTuple>)>,
);

#[pymethods]
impl Batches {
    /// The next batch, or `None` at the end of the stream.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Option<PyBatch<'py>>> {
        let guard = self.stream.lock().map_err(|_| {
            PyRuntimeError::new_err("tilestream: a batch stream used after a panic")
        })?;
        let Some(stream) = guard.as_ref() else {
            return Ok(None);
        };
        let batch = loop {
            match py.detach(|| stream.next(Duration::from_millis(100))) {
                Ok(Next::Batch(b)) => break b,
                Ok(Next::End) => return Ok(None),
                Ok(Next::NotYet) => py.check_signals()?,
                Err(e) => return Err(to_py(e)),
            }
        };
        let (index, epoch) = (batch.index, batch.epoch);
        let shared = Arc::new(Mutex::new(batch));
        let parts = {
            let b = shared
                .lock()
                .map_err(|_| PyRuntimeError::new_err("tilestream: a batch used after a panic"))?;
            b.parts()
                .iter()
                .map(|p| {
                    let (addr, len) = p.memory();
                    let memory = Bound::new(
                        py,
                        BatchMemory {
                            _batch: Arc::clone(&shared),
                            addr,
                            len,
                        },
                    )?;
                    Ok((memory, p.dtype.name(), PyTuple::new(py, &p.shape)?))
                })
                .collect::<PyResult<Vec<_>>>()?
        };
        Ok(Some((index, epoch, parts)))
    }

    /// Stops the stream: its reader ends and its buffers go once no batch holds them.
    fn close(&self, py: Python<'_>) {
        let taken = self.stream.lock().ok().and_then(|mut s| s.take());
        py.detach(move || drop(taken));
    }

    /// The plan (JSON, its text under `text`).
    #[getter]
    fn plan(&self) -> &str {
        &self.plan
    }

    /// Batches the caller holds now.
    #[getter]
    fn held(&self) -> usize {
        self.stream
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(BatchStream::held))
            .unwrap_or(0)
    }
}

/// One input's rows of a batch: numpy's array interface over the ring's buffer, which
/// stays out of the ring while this object lives.
#[pyclass(frozen, module = "tilestream._tilestream", name = "BatchMemory")]
pub(crate) struct BatchMemory {
    _batch: Arc<Mutex<Batch>>,
    addr: usize,
    len: usize,
}

#[pymethods]
impl BatchMemory {
    /// numpy's array interface: the bytes as a one-dimensional, writable `uint8` array.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("data", (self.addr, false))?;
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}
