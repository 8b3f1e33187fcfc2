//! Outputs written a share at a time by the runs of a job split over a cluster: each run
//! writes its rows into a file ([`OutputFile::region`]) that [`create_npy_for_rows`]
//! made beforehand, and [`commit_npy`] puts the whole in place once every run is done.
//! The same for a Zarr store is in `src/format/zarr/rows.rs`.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::{OutRegion, OutputFile, Target};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::OutFormat;
use crate::io::own_files;
use crate::io::own_files::dir_and_name;

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
        if let Some(order) = file.npy_order() {
            return Err(fits(format!(
                "{} (its elements are stored {order}, where tilestream writes C order, \
                 little-endian)",
                out_desc()
            )));
        }
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
    own_files::refuse_shared_object(dest)?;
    let out = OutputFile::create_as(dest, shape, dtype, OutFormat::Npy)?;
    let Target::Temp(tmp) = out.tmp else {
        return Err(Error::Internal(
            "a new output is not a temporary file".into(),
        ));
    };
    let (_, path) = tmp.keep().map_err(|e| Error::io("keep", dest, e.error))?;
    Ok(path)
}

/// True if `tmp` is one of tilestream's temporary outputs of `dest`: named so, in the
/// same directory however each path spells it (a temporary file's path is absolute).
pub(crate) fn is_temp_of(tmp: &Path, dest: &Path) -> Result<bool> {
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
    super::finish_file(tmp, dest, durable, 64 << 20)
}
