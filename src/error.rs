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
    /// A structured (record) dtype.
    #[error("structured dtypes are not supported")]
    Structured,
    /// A dtype tilestream does not read (big-endian, object, complex...).
    #[error("{0}")]
    Dtype(String),
}

/// What kind of problem a TIFF or Zarr error is: what a caller can do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatErrorKind {
    /// The metadata is not valid for the format (bad JSON, a missing or malformed field).
    Metadata,
    /// Valid data that tilestream does not decode exactly, refused rather than read
    /// approximately: convert the file (the message says how).
    Unsupported,
    /// More than tilestream reads at once (tag counts, chunk tables, a shard index over
    /// its bound), refused before it is parsed.
    TooLarge,
    /// The file is truncated or corrupt.
    Corrupt,
}

/// Why a TIFF file is not read. The variant names the tag, value or chunk at fault with
/// its figures as fields (zarrs' `array_errors.rs` is the model); [`TiffError::kind`]
/// says what a caller can do about it. Messages are one line, without the file name,
/// which [`Error::Tiff`] adds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TiffError {
    /// A tag whose value tilestream does not decode exactly (a photometric
    /// interpretation, codec, fill order, predictor, bit depth).
    #[error("{tag} {value} {reason}")]
    UnsupportedTag {
        /// The tag's name (`Compression`).
        tag: &'static str,
        /// Its value, with its name where it has one (`7 (JPEG)`).
        value: String,
        /// What tilestream reads instead, and how to convert the file.
        reason: String,
    },
    /// Chunk tables (offsets, byte counts) shorter than the image needs.
    #[error(
        "the file lists {offsets} chunk offsets and {byte_counts} byte counts; its \
         {width}x{height} image in {chunk_width}x{chunk_height} chunks needs {expected}"
    )]
    ChunkTables {
        /// Offsets listed.
        offsets: usize,
        /// Byte counts listed.
        byte_counts: usize,
        /// Image width.
        width: u32,
        /// Image height.
        height: u32,
        /// Chunk width.
        chunk_width: u32,
        /// Chunk height.
        chunk_height: u32,
        /// Entries the image needs.
        expected: usize,
    },
    /// A chunk whose stored bytes lie past the end of the file, or are more than any
    /// encoding of its decoded size.
    #[error(
        "{chunk} claims {stored} bytes at offset {offset}, but the file has {file_len} bytes \
         and the chunk decodes to {decoded}: the file is truncated or corrupt"
    )]
    ChunkOutside {
        /// The chunk (`tile 3 of band 0`).
        chunk: String,
        /// Where its bytes start.
        offset: u64,
        /// Its stored bytes.
        stored: u64,
        /// The file's length.
        file_len: u64,
        /// Its decoded bytes.
        decoded: usize,
    },
    /// A chunk that decodes to fewer or more bytes than the layout needs.
    #[error(
        "{chunk} decodes to {found} bytes, but the layout needs {expected}: the file is \
         truncated or corrupt"
    )]
    ChunkSize {
        /// The chunk.
        chunk: String,
        /// Bytes the layout needs.
        expected: usize,
        /// Bytes it decoded to.
        found: usize,
    },
    /// A chunk its codec fails on.
    #[error("cannot decode {chunk}: {reason}")]
    Decode {
        /// The chunk.
        chunk: String,
        /// The codec's error.
        reason: String,
    },
    /// Other valid TIFF that tilestream does not decode exactly (lossy codecs, bands of
    /// different depths, what the `tiff` crate refuses): the message says how to convert
    /// the file.
    #[error("{0}")]
    Unsupported(String),
    /// Other metadata larger than tilestream reads (tag counts, strip or tile tables),
    /// refused before it is parsed.
    #[error("{0}")]
    TooLarge(String),
    /// Other corruption: a tag that contradicts the samples, what the `tiff` crate finds.
    #[error("{0}")]
    Corrupt(String),
}

impl TiffError {
    /// What kind of problem it is.
    #[must_use]
    pub fn kind(&self) -> FormatErrorKind {
        match self {
            TiffError::UnsupportedTag { .. } | TiffError::Unsupported(_) => {
                FormatErrorKind::Unsupported
            }
            TiffError::TooLarge(_) => FormatErrorKind::TooLarge,
            TiffError::ChunkTables { .. }
            | TiffError::ChunkOutside { .. }
            | TiffError::ChunkSize { .. }
            | TiffError::Decode { .. }
            | TiffError::Corrupt(_) => FormatErrorKind::Corrupt,
        }
    }
}

/// Why a Zarr store is not read. As [`TiffError`]: typed fields for the chunk or shard
/// at fault, [`ZarrError::kind`] for callers, the message (without the path, which
/// [`Error::Zarr`] adds) for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZarrError {
    /// A chunk stored in more bytes than any encoding of its size takes.
    #[error(
        "{chunk} is stored in {stored} bytes, more than a chunk of {chunk_size} can take \
         ({max}): the store is corrupt"
    )]
    StoredTooLarge {
        /// The chunk (`chunk [0, 3]`, `inner chunk [1, 2] of shard [0, 0]`).
        chunk: String,
        /// Its stored bytes.
        stored: u64,
        /// Its decoded size, as people read it (`1.0 MiB`).
        chunk_size: String,
        /// The most any encoding of it takes.
        max: u64,
    },
    /// A shard index entry giving an inner chunk more bytes than any encoding takes.
    #[error(
        "the index gives {chunk} {stored} bytes, more than it can take ({max}): the shard is \
         corrupt"
    )]
    IndexEntryTooLarge {
        /// The inner chunk.
        chunk: String,
        /// The bytes the index gives it.
        stored: u64,
        /// The most any encoding of it takes.
        max: u64,
    },
    /// A shard shorter than its own index.
    #[error(
        "shard {shard:?} is {len} bytes, shorter than its {index_bytes}-byte index: it is truncated"
    )]
    ShardTruncated {
        /// The shard's position in the grid of shards.
        shard: Vec<usize>,
        /// Its length.
        len: u64,
        /// Its index's bytes.
        index_bytes: u64,
    },
    /// A shard index whose crc32c does not match.
    #[error("the index of shard {shard:?} fails its crc32c checksum")]
    IndexChecksum {
        /// The shard's position in the grid of shards.
        shard: Vec<usize>,
    },
    /// A shard index placing an inner chunk past the shard's end.
    #[error(
        "the index of shard {shard:?} puts inner chunk {inner} at bytes {offset}+{stored}, \
         past the shard's {len} bytes: it is corrupt"
    )]
    IndexPastEnd {
        /// The shard's position in the grid of shards.
        shard: Vec<usize>,
        /// The inner chunk's number within the shard.
        inner: usize,
        /// Where the index says it starts.
        offset: u64,
        /// Its bytes.
        stored: u64,
        /// The shard's length.
        len: u64,
    },
    /// A chunk that decodes to other than a chunk's bytes.
    #[error("{chunk} decodes to {found} bytes, but a chunk is {expected}: the store is corrupt")]
    ChunkSize {
        /// The chunk.
        chunk: String,
        /// A chunk's bytes.
        expected: usize,
        /// Bytes it decoded to.
        found: usize,
    },
    /// A chunk that decodes to more than its chunk can be (stopped there).
    #[error(
        "{chunk} decodes to more than the {limit} bytes its chunk can be: the store is \
         corrupt (or a decompression bomb)"
    )]
    DecodesPast {
        /// The chunk.
        chunk: String,
        /// The most it can decode to.
        limit: usize,
    },
    /// A chunk a codec fails on.
    #[error("cannot decode {chunk}: {reason}")]
    Decode {
        /// The chunk.
        chunk: String,
        /// The codec's error.
        reason: String,
    },
    /// The metadata is not valid Zarr v3 (bad JSON, a missing or malformed field).
    #[error("{0}")]
    Metadata(String),
    /// Valid Zarr v3 that tilestream does not decode exactly (a codec, data type, chunk
    /// grid or key encoding), refused in one line naming it.
    #[error("{0}")]
    Unsupported(String),
    /// More than tilestream reads at once (a shard index over its bound).
    #[error("{0}")]
    TooLarge(String),
    /// Other corruption (a shard that disappeared while it was read).
    #[error("{0}")]
    Corrupt(String),
}

impl ZarrError {
    /// What kind of problem it is.
    #[must_use]
    pub fn kind(&self) -> FormatErrorKind {
        match self {
            ZarrError::Metadata(_) => FormatErrorKind::Metadata,
            ZarrError::Unsupported(_) => FormatErrorKind::Unsupported,
            ZarrError::TooLarge(_) => FormatErrorKind::TooLarge,
            ZarrError::StoredTooLarge { .. }
            | ZarrError::IndexEntryTooLarge { .. }
            | ZarrError::ShardTruncated { .. }
            | ZarrError::IndexChecksum { .. }
            | ZarrError::IndexPastEnd { .. }
            | ZarrError::ChunkSize { .. }
            | ZarrError::DecodesPast { .. }
            | ZarrError::Decode { .. }
            | ZarrError::Corrupt(_) => FormatErrorKind::Corrupt,
        }
    }
}

/// Where an argument a message names is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// An option of every run (the budget, the device, output formats): a command-line
    /// option of every command, a keyword of every Python call, a pipeline file's key.
    Option,
    /// A parameter of one operation: its subcommand's option, its Python function's
    /// keyword, its pipeline step's key.
    Parameter,
}

/// The arguments the library's messages name, by their library names (the Python
/// keywords and pipeline keys; the command line's flags are these with `--` and dashes).
/// A message names one in backticks, alone (`` `memory` ``) or with a value
/// (`` `memory=512MiB` ``), and each front end writes it its own way
/// ([`render_arguments`]): `--memory 512MiB` on the command line, `memory="512MiB"` in
/// Python. Text in backticks that is not one of these is left as it is.
pub const ARGUMENTS: &[(&str, ArgKind)] = &[
    ("memory", ArgKind::Option),
    ("gpu_memory", ArgKind::Option),
    ("threads", ArgKind::Option),
    ("depth", ArgKind::Option),
    ("resume", ArgKind::Option),
    ("device", ArgKind::Option),
    ("format", ArgKind::Option),
    ("tiff_tile", ArgKind::Option),
    ("tiff_compress", ArgKind::Option),
    ("tiff_predictor", ArgKind::Option),
    ("tiff_bigtiff", ArgKind::Option),
    ("cog", ArgKind::Option),
    ("overviews", ArgKind::Option),
    ("zarr_chunks", ArgKind::Option),
    ("zarr_shard", ArgKind::Option),
    ("dtype", ArgKind::Parameter),
    ("dist", ArgKind::Parameter),
    ("edge", ArgKind::Parameter),
    ("size", ArgKind::Parameter),
    ("in", ArgKind::Parameter),
    ("shape", ArgKind::Parameter),
    ("in_dtype", ArgKind::Parameter),
    ("nodata", ArgKind::Parameter),
    ("ignore_nodata", ArgKind::Parameter),
];

/// `msg` with every argument it names (see [`ARGUMENTS`]) written by `write(name, kind,
/// value)`; an argument for which `write` gives `None` keeps its library form.
#[must_use]
pub fn render_arguments(
    msg: &str,
    write: impl Fn(&str, ArgKind, Option<&str>) -> Option<String>,
) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(open) = rest.find('`') {
        let Some(len) = rest[open + 1..].find('`') else {
            break;
        };
        let inner = &rest[open + 1..open + 1 + len];
        let (name, value) = match inner.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (inner, None),
        };
        let written = ARGUMENTS
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|&(n, kind)| write(n, kind, value));
        out.push_str(&rest[..open]);
        match written {
            Some(w) => out.push_str(&w),
            None => out.push_str(&rest[open..open + len + 2]),
        }
        rest = &rest[open + len + 2..];
    }
    out.push_str(rest);
    out
}

/// An argument as the command line gives it: `--name-with-dashes` and its value.
#[must_use]
pub fn command_line_flag(name: &str, value: Option<&str>) -> String {
    let flag = format!("--{}", name.replace('_', "-"));
    match value {
        Some(v) => format!("{flag} {v}"),
        None => flag,
    }
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
    /// A user's function over blocks failed on a block (the run stopped there and
    /// nothing was left at the output).
    #[error("the function failed on block {block}: {message}")]
    Function {
        /// Index of the block, in plan order.
        block: usize,
        /// What it said.
        message: String,
    },
    /// A pipeline worker thread panicked (a bug: please report it).
    #[error("internal error: {0}")]
    Internal(String),
    /// The run was stopped on request (Ctrl-C, or [`crate::Engine::cancel_token`]).
    #[error(
        "interrupted after {done} of {total} tiles: the output was not written{}",
        if *resumable { "; run it again with `resume` to continue" } else { "" }
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

    /// An [`Error::Tiff`] of `path`.
    pub fn tiff_at(path: impl AsRef<Path>, source: TiffError) -> Self {
        Error::Tiff {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An [`Error::Zarr`] of `path`.
    pub fn zarr_at(path: impl AsRef<Path>, source: ZarrError) -> Self {
        Error::Zarr {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Builds an [`Error::Invalid`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }

    /// The message on one line, as a person reads it: control characters that a path or
    /// name brought in (a newline, a carriage return, an escape) are written as escapes
    /// (`\n`), so an error is always one line; the URLs it quotes lose their query
    /// strings and user information ([`redact_urls`]), which may be credentials.
    #[must_use]
    pub fn one_line(&self) -> String {
        let text = redact_urls(&self.to_string());
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
            | Error::Function { .. }
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

/// `url` as it may be shown: without its query string or fragment (a pre-signed URL's
/// signature) and without user information (`user:password@`); a query becomes `?…`.
#[must_use]
pub fn shown_url(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let (mut base, rest) = (url[..cut].to_string(), &url[cut..]);
    if let Some((scheme, after)) = base.split_once("://") {
        let host_end = after.find('/').unwrap_or(after.len());
        if let Some(at) = after[..host_end].rfind('@') {
            base = format!("{scheme}://{}", &after[at + 1..]);
        }
    }
    if rest.is_empty() {
        base
    } else {
        format!("{base}?…")
    }
}

/// `text` with every URL it quotes (`scheme://...`, up to white space or a quote) shown
/// as [`shown_url`] shows it: what errors and the resume journal write.
#[must_use]
pub fn redact_urls(text: &str) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let start = rest[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.'))
            .map_or(0, |p| p + 1);
        let end = rest[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ','))
            .map_or(rest.len(), |e| i + e);
        out.push_str(&rest[..start]);
        out.push_str(&shown_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::{ArgKind, Error, command_line_flag, redact_urls, render_arguments, shown_url};

    #[test]
    fn quoted_urls_lose_queries_and_user_information() {
        assert_eq!(shown_url("s3://b/k.tif"), "s3://b/k.tif");
        assert_eq!(shown_url("https://u:pw@h/k?sig=1#f"), "https://h/k?…");
        let t = redact_urls("cannot open https://h/k?X-Amz-Signature=abc, or 'http://a:b@h2/x?y'");
        assert_eq!(t, "cannot open https://h/k?…, or 'http://h2/x?…'");
        assert_eq!(redact_urls("no urls here: a/b?c"), "no urls here: a/b?c");
        let e = Error::invalid("x https://h/k?token=zz y");
        assert_eq!(e.one_line(), "x https://h/k?… y");
    }

    /// The library names arguments by its own names; the command line writes its flags
    /// in their place, and text in backticks that names no argument stays as it is.
    #[test]
    fn messages_name_arguments_as_each_front_end_takes_them() {
        let msg = "raise `memory` to at least 1 MiB (`memory=1MiB`), or `resume`; \
                   `zarr_chunks=64x64` is too big; `colour` is no argument; `half";
        let cli = render_arguments(msg, |n, _, v| Some(command_line_flag(n, v)));
        assert_eq!(
            cli,
            "raise --memory to at least 1 MiB (--memory 1MiB), or --resume; \
             --zarr-chunks 64x64 is too big; `colour` is no argument; `half"
        );
        let options_only = render_arguments("`memory` and `dtype=u8`", |n, k, v| {
            (k == ArgKind::Option).then(|| command_line_flag(n, v))
        });
        assert_eq!(options_only, "--memory and `dtype=u8`");
    }
}
