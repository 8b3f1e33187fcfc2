//! Errors of the engine as the Python exceptions a Python user expects (see the
//! package's documentation for the mapping), and the package's own `BudgetError`.

use pyo3::create_exception;
use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use tilestream::{BudgetError as TsBudgetError, Error};

create_exception!(
    tilestream,
    BudgetError,
    PyMemoryError,
    "The memory budget is too small for the operation (or exhausted); the message has the arithmetic."
);

/// An error of the engine as the Python exception a Python user expects: see the
/// package's documentation for the mapping.
pub(crate) fn to_py(e: Error) -> PyErr {
    let msg = for_python(&e.one_line());
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

/// A message with the arguments it names as Python's keywords: the library's names,
/// but for the few the package calls otherwise (`in` is a key of `inputs=`, a raw file's
/// `in_dtype` is `dtype=` of `tilestream.open`).
fn for_python(msg: &str) -> String {
    tilestream::error::render_arguments(msg, |name, _, value| {
        Some(match (name, value) {
            ("in", Some(v)) => match v.split_once('=') {
                Some((n, f)) => format!("`inputs={{\"{n}\": {f}}}`"),
                None => "`inputs`".to_string(),
            },
            ("in", None) => "`inputs`".to_string(),
            ("in_dtype", v) => match v {
                Some(v) => format!("`dtype={v}`"),
                None => "`dtype`".to_string(),
            },
            (n, Some(v)) => format!("`{n}={v}`"),
            (n, None) => format!("`{n}`"),
        })
    })
}

pub(crate) fn bad_json(e: &serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("tilestream: bad operation description: {e}"))
}
