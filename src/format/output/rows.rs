//! Outputs written a share at a time by the runs of a job split over a cluster: each run
//! writes its rows into a file ([`OutputFile::region`]) or the chunks of its rows into a
//! Zarr store ([`OutputFile::zarr_region`]) that [`create_npy_for_rows`] or
//! [`create_zarr_for_rows`] made beforehand, and [`commit_npy`] or [`commit_zarr`] puts
//! the whole in place once every run is done.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{OutRegion, OutputFile, Target, ZarrRows, checked_nbytes};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{OutFormat, zarr};
use crate::io::own_files;
use crate::io::own_files::{TEMP_SUFFIX, dir_and_name};
use crate::io::temp::temp_beside;

impl OutputFile {
    /// Writes a run's output of `shape` and `dtype` into rows of the existing `.npy` file
    /// `dest` (created whole beforehand, for instance by [`create_npy_for_rows`]), as
    /// `region` says: run output rows `[skip_rows, skip_rows + rows)` go to file rows
    /// `[at_row, at_row + rows)`, the rest is dropped. The file is written in place:
    /// [`finish`](Self::finish) flushes it and renames nothing, and an error leaves it
    /// as it is (a retried run rewrites the same rows).
    ///
    /// # Errors
    /// [`Error::Invalid`] if `dest` is not a `.npy` of `dtype` whose rows are the
    /// output's rows and hold the region; [`Error::Io`] if it cannot be opened.
    pub fn region(dest: &Path, region: OutRegion, shape: &[usize], dtype: DType) -> Result<Self> {
        let file = crate::format::TensorFile::open(dest)?;
        let info = file.info();
        let fits = |what: String| {
            Error::invalid(format!("{}: cannot write {what} into it", dest.display()))
        };
        let run_rows = shape.first().map_or(1, |&n| n as u64);
        let rows = region
            .rows
            .unwrap_or(run_rows.saturating_sub(region.skip_rows));
        let out_desc = || {
            format!(
                "rows {}..{} of a {} {dtype} output",
                region.skip_rows,
                region.skip_rows + rows,
                crate::format::fmt_shape(shape)
            )
        };
        if !matches!(info.format, crate::format::Format::Npy { .. })
            || info.dtype != dtype
            || info.shape.len() != shape.len()
            || info.shape.get(1..) != shape.get(1..)
        {
            return Err(fits(format!(
                "{} (it holds {} {})",
                out_desc(),
                crate::format::fmt_shape(&info.shape),
                info.dtype
            )));
        }
        if region.skip_rows + rows > run_rows
            || region.at_row + rows > info.shape.first().map_or(1, |&n| n as u64)
        {
            return Err(fits(format!(
                "{} at row {} (it holds {} rows)",
                out_desc(),
                region.at_row,
                info.shape[0]
            )));
        }
        let row_elems: u64 = shape.iter().skip(1).map(|&d| d as u64).product();
        let es = dtype.size() as u64;
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dest)
            .map_err(|e| Error::io("open for writing", dest, e))?;
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: Target::Region(writer),
            keep: (
                region.skip_rows * row_elems,
                (region.skip_rows + rows) * row_elems,
            ),
            data_offset: info.data_offset + region.at_row * row_elems * es,
            dtype,
            shape: shape.to_vec(),
            stream: None,
            adopted: false,
            finish_memory: 64 << 20,
            format: OutFormat::Npy,
            zarr_rows: None,
        })
    }

    /// Writes a run's output of `shape` and `dtype` into rows of the existing Zarr store
    /// `dest` (made by [`create_zarr_for_rows`] with the same `opts`), as `region` says:
    /// made a stream ([`with_zarr_stream`](Self::with_zarr_stream)), it stores the chunks
    /// of those rows into it as the run completes them (the store's other chunks are not
    /// touched, its `zarr.json` is not rewritten). The rows must fall on the store's
    /// chunks.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `dest` is not a Zarr store of `dtype` whose rows are the
    /// output's rows and hold the region on its chunk grid; [`Error::Io`] if the
    /// temporary file naming the run's output cannot be made.
    pub fn zarr_region(
        dest: &Path,
        region: OutRegion,
        shape: &[usize],
        dtype: DType,
        opts: &zarr::ZarrWriteOptions,
        memory: u64,
    ) -> Result<Self> {
        let store = crate::format::TensorFile::open_zarr(dest)?;
        let info = store.info();
        let run_rows = shape.first().map_or(1, |&n| n as u64);
        let rows = region
            .rows
            .unwrap_or(run_rows.saturating_sub(region.skip_rows));
        let store_rows = info.shape.first().map_or(1, |&n| n as u64);
        // the chunks these options make must be the store's (and fit the budget)
        let (inner, outer) = zarr::chunk_shapes(opts, &info.shape, dtype, memory)?;
        let compressor = match opts.compression {
            zarr::ZarrCompression::None => None,
            zarr::ZarrCompression::Zstd(_) => Some("zstd"),
            zarr::ZarrCompression::Gzip(_) => Some("gzip"),
            zarr::ZarrCompression::Blosc(_) => Some("blosc"),
        };
        if let Some(layout) = store.zarr() {
            let same = layout.chunk_shape == outer
                && layout.inner_chunks == opts.shard.as_ref().map(|_| inner.clone())
                && (opts.shard.is_some()
                    || compressor.is_none_or(|c| layout.codecs.iter().any(|n| n == c)));
            if !same {
                return Err(Error::invalid(format!(
                    "{}: its chunks ({}) or codecs ({}) are not what this run's Zarr options \
                     make ({}, {}): give every task the options the store was made with",
                    dest.display(),
                    crate::format::fmt_shape(&layout.chunk_shape),
                    layout.codecs.join(", "),
                    crate::format::fmt_shape(&outer),
                    compressor.unwrap_or("no compression")
                )));
            }
        }
        let chunk = outer.first().copied().unwrap_or(1) as u64;
        let end = region.at_row + rows;
        if info.dtype != dtype
            || info.shape.len() != shape.len()
            || info.shape.get(1..) != shape.get(1..)
            || region.skip_rows + rows > run_rows
            || end > store_rows
            || !region.at_row.is_multiple_of(chunk)
            || (!end.is_multiple_of(chunk) && end != store_rows)
        {
            return Err(Error::invalid(format!(
                "{}: cannot write rows {}..{} of a {} {dtype} output at row {} of it: it is \
                 {} {} in chunks of {chunk} rows",
                dest.display(),
                region.skip_rows,
                region.skip_rows + rows,
                crate::format::fmt_shape(shape),
                region.at_row,
                crate::format::fmt_shape(&info.shape),
                info.dtype
            )));
        }
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        // an empty file naming the run's output: the stream stores the rows' chunks
        let tmp = temp_beside(dest)?;
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: Target::Temp(tmp),
            keep: (0, nbytes / dtype.size().max(1) as u64),
            data_offset: 0,
            dtype,
            shape: shape.to_vec(),
            stream: None,
            adopted: false,
            finish_memory: 64 << 20,
            format: OutFormat::Zarr,
            zarr_rows: Some(ZarrRows {
                store_shape: info.shape.clone(),
                at_row: region.at_row,
                rows,
                skip_rows: region.skip_rows,
            }),
        })
    }
}

/// Creates the file the runs of a job split over a cluster fill, each its rows (see
/// [`OutputFile::region`]): a `.npy` of `shape` and `dtype`, full size, as a temporary
/// file beside `dest` named as tilestream's temporary outputs are (so that
/// `tilestream clean` removes it if the job dies). Returns its path; [`commit_npy`] puts
/// it in place when every run is done. The caller should hold [`lock`](super::lock) on it meanwhile.
///
/// # Errors
/// [`Error::Io`] if the directory is missing or not writable or the file cannot be
/// sized; [`Error::Invalid`] if `dest` is something tilestream does not replace.
pub fn create_npy_for_rows(dest: &Path, shape: &[usize], dtype: DType) -> Result<PathBuf> {
    let out = OutputFile::create_as(dest, shape, dtype, OutFormat::Npy)?;
    let Target::Temp(tmp) = out.tmp else {
        return Err(Error::Internal(
            "a new output is not a temporary file".into(),
        ));
    };
    let (_, path) = tmp.keep().map_err(|e| Error::io("keep", dest, e.error))?;
    Ok(path)
}

/// Creates the Zarr store the runs of a job split over a cluster fill, each the chunks
/// of its rows (see [`OutputFile::zarr_region`]): its `zarr.json` for an array of
/// `shape` and `dtype` written with `opts`, in a temporary directory beside `dest` named
/// as tilestream's temporary outputs are. Returns its path; [`commit_zarr`] puts it in
/// place. The caller should hold [`lock`](super::lock) on its `.lock` file meanwhile (so that
/// `tilestream clean` leaves it alone).
///
/// # Errors
/// [`Error::Invalid`] for chunk shapes that do not fit the array or a destination
/// tilestream does not replace; [`Error::Io`] if the directory cannot be made.
pub fn create_zarr_for_rows(
    dest: &Path,
    shape: &[usize],
    dtype: DType,
    opts: &zarr::ZarrWriteOptions,
) -> Result<PathBuf> {
    own_files::check_destination(dest, own_files::Dest::Store)?;
    let (parent, name) = dir_and_name(dest)?;
    let dir = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        .tempdir_in(&parent)
        .map_err(|e| Error::io("create a directory in", &parent, e))?;
    own_files::open_own(&dir.path().join(".lock"), true)?;
    zarr::create_store(dir.path(), shape, dtype, opts)?;
    Ok(dir.keep())
}

/// True if `tmp` is one of tilestream's temporary outputs of `dest`: named so, in the
/// same directory however each path spells it (a temporary file's path is absolute).
fn is_temp_of(tmp: &Path, dest: &Path) -> Result<bool> {
    let (dir, name) = dir_and_name(dest)?;
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let tmp_dir = match tmp.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(tmp
        .file_name()
        .is_some_and(|n| own_files::temp_name_of(&name, &n.to_string_lossy()))
        && real(&tmp_dir) == real(&dir))
}

/// Puts the store made by [`create_zarr_for_rows`] in place at `dest` (replacing a store
/// there): removes its `.lock` and renames it.
///
/// # Errors
/// [`Error::Invalid`] if `tmp` is not a temporary output of `dest`; [`Error::Io`] if the
/// rename fails.
pub fn commit_zarr(tmp: &Path, dest: &Path) -> Result<()> {
    if !is_temp_of(tmp, dest)? || !tmp.join("zarr.json").is_file() {
        return Err(Error::invalid(format!(
            "{}: not a temporary Zarr output of {}",
            tmp.display(),
            dest.display()
        )));
    }
    // an old store is replaced atomically; the `.lock` goes once the store is in place
    own_files::replace_dir(tmp, dest)
}

/// Puts the file made by [`create_npy_for_rows`] in place at `dest`: flushes it (with
/// `durable`), renames it onto `dest` and syncs the directory.
///
/// # Errors
/// [`Error::Invalid`] if `tmp` is not a temporary output of `dest`; [`Error::Io`] if the
/// flush or rename fails.
pub fn commit_npy(tmp: &Path, dest: &Path, durable: bool) -> Result<()> {
    if !is_temp_of(tmp, dest)? {
        return Err(Error::invalid(format!(
            "{}: not a temporary output of {}",
            tmp.display(),
            dest.display()
        )));
    }
    let file = own_files::open_own(tmp, false)?;
    let tmp = tempfile::NamedTempFile::from_parts(
        file,
        tempfile::TempPath::try_from_path(tmp).map_err(|e| Error::io("open", tmp, e))?,
    );
    OutputFile::persist(tmp, dest, durable)
}
