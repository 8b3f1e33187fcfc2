//! The engine's own buffers handed to a Python function over blocks without a copy: its
//! padded blocks to read, and the place of its result in the output slot to fill.
//!
//! Each buffer is a [`Memory`]: an object with numpy's `__array_interface__` (an address,
//! a length in bytes, read-only or not), which `np.asarray` wraps as an array whose
//! `base` is that object, and every view, reshape and wrapper of that array (a memoryview
//! of it, `torch.from_numpy`) keeps it alive in turn. So after a call:
//! - every `Memory` is ended ([`View::end`]): numpy cannot make a new array over it;
//! - an input's `Memory` still alive (weakly referenced only by us, after a garbage
//!   collection) means the function kept something pointing into the block, in what it
//!   returned or stored, or a traceback's frame does: the caller then keeps that buffer
//!   alive for good (`Block::keep_inputs`) instead of reusing it;
//! - the output's `Memory` is used by tilestream's own code alone, which deletes the
//!   array it makes over it before the call returns, even when the copy raises.
//!
//! Nothing here is `unsafe` Rust, but an address handed to numpy is a pointer all the
//! same: the rules above are what keep every array over it within the memory's life.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyWeakrefReference};

/// Bytes of the engine's memory, for the length of one call of a Python function.
#[pyclass(
    frozen,
    weakref,
    module = "tilestream._tilestream",
    name = "BlockMemory"
)]
pub(crate) struct Memory {
    addr: usize,
    len: usize,
    readonly: bool,
    ended: AtomicBool,
}

#[pymethods]
impl Memory {
    /// numpy's array interface: the bytes as a one-dimensional `uint8` array; refused
    /// once the call is over.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.ended.load(Ordering::Acquire) {
            return Err(PyValueError::new_err(
                "tilestream: a block's memory is only valid during the call of the function: \
                 keep a copy (`b.copy()`)",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("data", (self.addr, self.readonly))?;
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

/// A [`Memory`] handed to Python for one call.
pub(crate) struct View<'py> {
    memory: Bound<'py, Memory>,
}

impl<'py> View<'py> {
    /// The read-only bytes `data`, which the caller neither frees nor reuses before
    /// [`View::released`] says nothing points there.
    pub(crate) fn read(py: Python<'py>, data: &[u8]) -> PyResult<Self> {
        Self::new(py, data.as_ptr() as usize, data.len(), true)
    }

    /// The writable bytes `data`, borrowed by the caller for the length of the call.
    pub(crate) fn write(py: Python<'py>, data: &mut [u8]) -> PyResult<Self> {
        Self::new(py, data.as_mut_ptr() as usize, data.len(), false)
    }

    fn new(py: Python<'py>, addr: usize, len: usize, readonly: bool) -> PyResult<Self> {
        let memory = Bound::new(
            py,
            Memory {
                addr,
                len,
                readonly,
                ended: AtomicBool::new(false),
            },
        )?;
        Ok(View { memory })
    }

    /// The object to hand to Python.
    pub(crate) fn as_any(&self) -> &Bound<'py, PyAny> {
        self.memory.as_any()
    }

    /// Ends the call: numpy can no longer make an array over the memory.
    pub(crate) fn end(&self) {
        self.memory.get().ended.store(true, Ordering::Release);
    }

    /// Ends the call and drops this handle; true when nothing else keeps the memory's
    /// object alive (after a garbage collection, when something did), so no array
    /// points into the bytes any more.
    pub(crate) fn released(self) -> PyResult<bool> {
        self.end();
        let py = self.memory.py();
        let weak = PyWeakrefReference::new(&self.memory)?;
        drop(self);
        if weak.upgrade().is_none() {
            return Ok(true);
        }
        py.import("gc")?.call_method0("collect")?;
        Ok(weak.upgrade().is_none())
    }
}
