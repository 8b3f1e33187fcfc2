//! Errors of every layer, gathered in one [`Error`] so callers match on one type.
//!
//! Messages are one line, lowercase, name the file or value at fault and carry the
//! numbers involved, so a person can act on them without a backtrace.

use std::path::{Path, PathBuf};

use crate::budget::BudgetError;
use crate::device::DeviceError;

/// Why a `.npy` header cannot be read. Each message is one line without the file name
/// (the caller adds it: [`Error::Npy`]). Defined here, below the
/// formats, so that [`Error`] can gather it; `format::npy` re-exports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NpyError {
    /// The file does not start with the `.npy` magic.
    #[error("not a .npy file (missing the \\x93NUMPY magic)")]
    NotNpy,
    /// The header is longer than the bytes there are.
    #[error("truncated .npy header: needs {needed} bytes, file has {has}")]
    Truncated {
        /// Bytes the header needs.
        needed: usize,
        /// Bytes there are.
        has: usize,
    },
    /// A format version tilestream does not read.
    #[error("unsupported .npy format version {0}.{1} (supported: 1.0, 2.0, 3.0)")]
    Version(u8, u8),
    /// Text that is not ASCII (before 3.0) or UTF-8 (3.0).
    #[error("the .npy header is not {0}")]
    Encoding(&'static str),
    /// The dict literal does not parse.
    #[error("malformed .npy header: {0}")]
    Malformed(String),
    /// A required key is missing.
    #[error("the .npy header has no '{0}' key")]
    MissingKey(&'static str),
    /// More dimensions than numpy allows.
    #[error("the .npy header gives {0} dimensions; tilestream reads at most {1} (numpy's limit)")]
    TooManyDims(usize, usize),
    /// A Fortran-order array with more than one non-trivial axis.
    #[error(
        "Fortran-order arrays are not supported: save a C-order copy with numpy `np.save(path, np.ascontiguousarray(a))`"
    )]
    FortranOrder,
    /// A structured (record) dtype.
    #[error("structured dtypes are not supported")]
    Structured,
    /// A dtype tilestream does not read (big-endian, object, complex...).
    #[error("{0}")]
    Dtype(String),
}

/// Why a TIFF file is not read. The kind says what a caller can do about it; the message
/// (one line, without the file name, which [`Error::Tiff`] adds) names the tag, value or
/// chunk at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TiffError {
    /// Valid TIFF that tilestream does not decode exactly (a photometric interpretation,
    /// codec, predictor, bit depth...): refused rather than read approximately; the
    /// message says how to convert the file.
    #[error("{0}")]
    Unsupported(String),
    /// Metadata larger than tilestream reads (tag counts, strip or tile tables), refused
    /// before it is parsed.
    #[error("{0}")]
    TooLarge(String),
    /// The file is truncated or corrupt: tables that do not match the image, a chunk past
    /// the end of the file or one that does not decode to its size.
    #[error("{0}")]
    Corrupt(String),
}

/// Why a Zarr store is not read. As [`TiffError`]: the kind for callers, the message
/// (without the path, which [`Error::Zarr`] adds) for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZarrError {
    /// The metadata is not valid Zarr v3 (bad JSON, a missing or malformed field).
    #[error("{0}")]
    Metadata(String),
    /// Valid Zarr v3 that tilestream does not decode exactly (a codec, data type, chunk
    /// grid or key encoding), refused in one line naming it.
    #[error("{0}")]
    Unsupported(String),
    /// More than tilestream reads at once (a shard index over its bound, a stored chunk
    /// larger than any encoding of its size).
    #[error("{0}")]
    TooLarge(String),
    /// A chunk or shard that is truncated, fails its checksum or does not decode to its
    /// size.
    #[error("{0}")]
    Corrupt(String),
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error tilestream reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call on a file failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done ("open", "read", "write", "map a window of", ...).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file's contents do not describe a tensor tilestream can read.
    #[error("{}: {msg}", path.display())]
    Format {
        /// The file concerned.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// A `.npy` file whose header cannot be read.
    #[error("{}: {source}", path.display())]
    Npy {
        /// The file concerned.
        path: PathBuf,
        /// What is wrong with its header.
        source: NpyError,
    },
    /// A TIFF file tilestream does not read.
    #[error("{}: {source}", path.display())]
    Tiff {
        /// The file concerned.
        path: PathBuf,
        /// Why, and what kind of problem it is.
        source: TiffError,
    },
    /// A Zarr store (or one of its chunks) tilestream does not read.
    #[error("{}: {source}", path.display())]
    Zarr {
        /// The metadata file or chunk concerned.
        path: PathBuf,
        /// Why, and what kind of problem it is.
        source: ZarrError,
    },
    /// The memory budget cannot hold what the operation needs.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A device cannot be used as asked (no driver, no such GPU, a kernel that does not
    /// compile).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The request itself is wrong (bad axis, shape mismatch, unknown dtype...): a usage error.
    #[error("{0}")]
    Invalid(String),
    /// A pipeline worker thread panicked (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
    /// The run was stopped on request (Ctrl-C, or [`crate::Engine::cancel_token`]).
    #[error(
        "interrupted after {done} of {total} tiles: the output was not written{}",
        if *resumable { "; run the same command with --resume to continue" } else { "" }
    )]
    Interrupted {
        /// Tiles completed.
        done: usize,
        /// Tiles planned.
        total: usize,
        /// The run's journal and temporary output were kept: it can be resumed.
        resumable: bool,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(action: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Builds an [`Error::Format`].
    pub fn format(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.as_ref().to_path_buf(),
            msg: msg.into(),
        }
    }

    /// Builds an [`Error::Tiff`] of the kind `kind` (a [`TiffError`] variant).
    pub fn tiff(
        path: impl AsRef<Path>,
        kind: fn(String) -> TiffError,
        msg: impl Into<String>,
    ) -> Self {
        Error::Tiff {
            path: path.as_ref().to_path_buf(),
            source: kind(msg.into()),
        }
    }

    /// Builds an [`Error::Zarr`] of the kind `kind` (a [`ZarrError`] variant).
    pub fn zarr(
        path: impl AsRef<Path>,
        kind: fn(String) -> ZarrError,
        msg: impl Into<String>,
    ) -> Self {
        Error::Zarr {
            path: path.as_ref().to_path_buf(),
            source: kind(msg.into()),
        }
    }

    /// Builds an [`Error::Invalid`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// The message on one line, as a person reads it: control characters that a path or
    /// name brought in (a newline, a carriage return, an escape) are written as escapes
    /// (`\n`), so an error is always one line.
    #[must_use]
    pub fn one_line(&self) -> String {
        let text = self.to_string();
        if !text.chars().any(char::is_control) {
            return text;
        }
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    }

    /// Process exit code for this error: 2 for usage errors (bad arguments, a budget too
    /// small for the request), 1 for runtime failures (I/O, corrupt files).
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Invalid(_) | Error::Budget(_) | Error::Device(_) => 2,
            Error::Io { .. }
            | Error::Format { .. }
            | Error::Npy { .. }
            | Error::Tiff { .. }
            | Error::Zarr { .. }
            | Error::Internal(_) => 1,
            Error::Interrupted { .. } => 130,
        }
    }
}

/// Text from a file, made fit for a one-line message: control characters escaped, cut
/// after 40 characters.
pub(crate) fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(40).flat_map(char::escape_debug).collect();
    if s.chars().nth(40).is_some() {
        out.push_str("...");
    }
    out
}
