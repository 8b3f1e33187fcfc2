//! Outputs that appear at their path only once complete: a temporary file beside the
//! destination (locked while its run lives), positioned writes into it, encoding for
//! GeoTIFF and Zarr destinations, then flush and rename; and the cleaning of what killed
//! runs left behind.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::window::whole_pages;
use super::{Encode, OutFormat, checked_nbytes, file_len, geotiff, npy, own_files, zarr};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// A temporary file in the directory of `dest` (so that renaming it onto `dest` is
/// atomic), named `.{dest name}.XXXX.tilestream-tmp`, created 0666 less the umask.
///
/// # Errors
/// [`Error::Io`] if the directory is missing or not writable.
pub fn temp_beside(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let tmp = temp_beside_unlocked(dest)?;
    // Held until the file is renamed or removed: tells `clean_stale` it is in use.
    let _ = lock(tmp.as_file());
    Ok(tmp)
}

/// Suffix of every temporary output file.
pub const TEMP_SUFFIX: &str = ".tilestream-tmp";

/// Prefix of a pipeline file's directory of intermediates.
pub const PIPELINE_DIR_PREFIX: &str = ".tilestream-pipeline-";

/// Takes an exclusive advisory lock on `f` without waiting; true if taken.
#[must_use]
pub fn lock(f: &File) -> bool {
    // SAFETY: flock on an open descriptor has no memory-safety preconditions.
    unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(f),
            libc::LOCK_EX | libc::LOCK_NB,
        ) == 0
    }
}

/// Removes what killed runs left in `dir`: temporary outputs (`*.tilestream-tmp`) and
/// pipeline intermediate directories that no running process holds (each live one is
/// locked by its process). With `only_for`, just the temporary files of that output name.
/// Returns the paths removed.
///
/// # Errors
/// [`Error::Io`] if `dir` cannot be listed.
pub fn clean_stale(dir: &Path, only_for: Option<&str>) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_temp = name.ends_with(TEMP_SUFFIX)
            && only_for.is_none_or(|n| name.starts_with(&format!(".{n}.")));
        let is_pipeline = only_for.is_none() && name.starts_with(PIPELINE_DIR_PREFIX);
        if is_temp {
            // never opened through a link or blocking on a FIFO: a link or special file
            // under one of tilestream's own names is removed as it is (the name, not
            // what it points to); a regular file only when no live run holds its lock
            let free = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_file() => std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                    .open(&path)
                    .is_ok_and(|f| lock(&f)),
                Ok(m) if m.file_type().is_dir() => {
                    // a Zarr output being encoded: its process holds `.lock` inside
                    let lockfile = path.join(".lock");
                    let free = File::open(&lockfile).map_or(true, |f| lock(&f));
                    if free && std::fs::remove_dir_all(&path).is_ok() {
                        removed.push(path);
                    }
                    continue;
                }
                Ok(_) => true,
                Err(_) => false,
            };
            if free && std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        } else if is_pipeline {
            let lockfile = path.join(".lock");
            let free = File::open(&lockfile).map_or(true, |f| lock(&f));
            if free && std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    Ok(removed)
}

/// The directory of `dest` (`.` for a bare name) and its file name.
pub(crate) fn dir_and_name(dest: &Path) -> Result<(PathBuf, String)> {
    let name = dest
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: not a file name", dest.display())))?
        .to_string_lossy()
        .into_owned();
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

fn temp_beside_unlocked(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let (dir, name) = dir_and_name(dest)?;
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        // like any new file: 0666 less the umask (tempfile's default is 0600)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create a temporary output file in", &dir, e))
}

/// An output tensor being written: a temporary file beside the destination that becomes
/// the destination in [`finish`](Self::finish). Dropped without `finish`, it is deleted.
#[derive(Debug)]
pub struct OutputFile {
    durable: bool,
    dest: PathBuf,
    tmp: tempfile::NamedTempFile,
    data_offset: u64,
    dtype: DType,
    shape: Vec<usize>,
    /// Set when the destination is a GeoTIFF or a Zarr store: the data is staged raw in
    /// `tmp`, then encoded by [`finish`](Self::finish).
    encode: Option<Encode>,
}

impl OutputFile {
    /// Creates the temporary file for an output of `shape` and `dtype` at `dest`: `.npy`
    /// (with header) if the name ends in `.npy`, a GeoTIFF (staged raw, encoded by
    /// [`finish`](Self::finish) with default [`geotiff::TiffWriteOptions`]) if it ends in
    /// `.tif`/`.tiff`, raw data otherwise.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory is missing or not writable, or the file cannot be
    /// sized.
    pub fn create(dest: impl AsRef<Path>, shape: &[usize], dtype: DType) -> Result<Self> {
        let dest = dest.as_ref();
        Self::create_as(dest, shape, dtype, OutFormat::of(dest))
    }

    /// [`OutputFile::create`] in `format` whatever the name says.
    ///
    /// # Errors
    /// As [`OutputFile::create`].
    pub fn create_as(
        dest: &Path,
        shape: &[usize],
        dtype: DType,
        format: OutFormat,
    ) -> Result<Self> {
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        own_files::check_destination(dest, format)?;
        if let Ok((dir, name)) = dir_and_name(dest) {
            // what a killed run of this same output left behind
            let _ = clean_stale(&dir, Some(&name));
        }
        let encode = default_encode(dest, shape, dtype, format)?;
        let tmp = temp_beside(dest)?;
        let header = if format == OutFormat::Npy {
            npy::build_header(dtype, shape)
        } else {
            Vec::new()
        };
        let data_offset = header.len() as u64;
        tmp.as_file()
            .write_all_at(&header, 0)
            .map_err(|e| Error::io("write", tmp.path(), e))?;
        tmp.as_file()
            .set_len(data_offset + nbytes)
            .map_err(|e| Error::io("size", dest, e))?;
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp,
            data_offset,
            dtype,
            shape: shape.to_vec(),
            encode,
        })
    }

    /// Takes up the temporary output `tmp` that an interrupted run left for `dest`, if it
    /// is free (no live run holds it) and has exactly the size and header a new one of
    /// `shape` and `dtype` would have. Its data is left as it is.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Invalid`] if another run holds it
    /// or it does not match.
    pub fn adopt(dest: &Path, tmp: &Path, shape: &[usize], dtype: DType) -> Result<Self> {
        Self::adopt_as(dest, tmp, shape, dtype, OutFormat::of(dest))
    }

    /// [`OutputFile::adopt`] of an output in `format` whatever the name says.
    ///
    /// # Errors
    /// As [`OutputFile::adopt`].
    pub fn adopt_as(
        dest: &Path,
        tmp: &Path,
        shape: &[usize],
        dtype: DType,
        format: OutFormat,
    ) -> Result<Self> {
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        own_files::check_destination(dest, format)?;
        let (dir, name) = dir_and_name(dest)?;
        let own_name = tmp
            .file_name()
            .is_some_and(|n| own_files::temp_name_of(&name, &n.to_string_lossy()));
        if !own_name || tmp.parent().map(Path::to_path_buf).unwrap_or_default() != dir {
            return Err(Error::invalid(format!(
                "{}: not a temporary output of {}; tilestream takes up only its own",
                tmp.display(),
                dest.display()
            )));
        }
        let file = own_files::open_own(tmp, false)?;
        if !lock(&file) {
            return Err(Error::invalid(format!(
                "{}: held by another run",
                tmp.display()
            )));
        }
        let header = if format == OutFormat::Npy {
            npy::build_header(dtype, shape)
        } else {
            Vec::new()
        };
        let len = file_len(&file, tmp)?;
        let mut head = vec![0u8; header.len()];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read", tmp, e))?;
        if len != header.len() as u64 + nbytes || head != header {
            return Err(Error::invalid(format!(
                "{}: not the temporary output of this run",
                tmp.display()
            )));
        }
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: tempfile::NamedTempFile::from_parts(
                file,
                tempfile::TempPath::try_from_path(tmp).map_err(|e| Error::io("open", tmp, e))?,
            ),
            data_offset: header.len() as u64,
            dtype,
            shape: shape.to_vec(),
            encode: default_encode(dest, shape, dtype, format)?,
        })
    }

    /// Makes this output a tiled GeoTIFF written as `opts` say: the run's data is staged
    /// raw in the temporary file and encoded into compressed tiles by
    /// [`finish`](Self::finish) (which needs the staged size again in free disk space
    /// for a moment).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the shape is not an image or the dtype has no TIFF form.
    pub fn with_tiff(mut self, opts: geotiff::TiffWriteOptions) -> Result<Self> {
        geotiff::image_dims(&self.shape)?;
        geotiff::tiff_sample(self.dtype)?;
        self.encode = Some(Encode::Tiff(opts));
        Ok(self)
    }

    /// Makes this output a Zarr v3 store written as `opts` say (staged raw, encoded by
    /// [`finish`](Self::finish) into a temporary directory renamed into place).
    #[must_use]
    pub fn with_zarr(mut self, opts: zarr::ZarrWriteOptions) -> Self {
        self.encode = Some(Encode::Zarr(opts));
        self
    }

    /// The destination path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// True when the data is staged raw and encoded by [`finish`](Self::finish)
    /// (GeoTIFF destinations).
    #[must_use]
    pub fn is_staged(&self) -> bool {
        self.encode.is_some()
    }

    /// Memory the encoding in [`finish`](Self::finish) may hold.
    pub fn set_encode_memory(&mut self, bytes: u64) {
        match &mut self.encode {
            Some(Encode::Tiff(t)) => t.memory = bytes,
            Some(Encode::Zarr(z)) => z.memory = bytes,
            None => {}
        }
    }

    /// The temporary file the data goes to until [`finish`](Self::finish).
    #[must_use]
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// Reads back `buf.len()` bytes from element index `start` (flat C order).
    ///
    /// # Errors
    /// [`Error::Io`] on a failed read.
    pub fn read_at(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        let off = self.data_offset + start * self.dtype.size() as u64;
        self.tmp
            .as_file()
            .read_exact_at(buf, off)
            .map_err(|e| Error::io("read back", self.tmp.path(), e))
    }

    /// Leaves the temporary file in place (an interrupted run that can be resumed):
    /// the next run with `--resume` takes it up, `tilestream clean` removes it.
    pub fn keep(self) {
        let _ = self.tmp.keep();
    }

    /// Shape of the output.
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type of the output.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Writes `bytes` at element index `start` (flat C order).
    ///
    /// # Errors
    /// [`Error::Io`] on a failed write (disk full, file size limit...).
    pub fn write_at(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let off = self.data_offset + start * self.dtype.size() as u64;
        let file = self.tmp.as_file();
        file.write_all_at(bytes, off)
            .map_err(|e| Error::io("write", &self.dest, e))?;
        if self.durable {
            // Start writing this range back now, asynchronously, so the disk works while
            // later tiles compute and the flush in `finish` has little left to wait for.
            // Only the pages the write covers whole: a page shared with a neighbouring
            // write (a row of a 2-D tile is a few KiB) would be written back half done,
            // and the neighbour would then wait for that writeback to dirty it again —
            // 5x slower on 2-D tiles. Partial pages go out with the final flush.
            let (lo, hi) = whole_pages(off, bytes.len() as u64);
            if hi > lo {
                // SAFETY: the descriptor is open; the call only schedules writeback.
                unsafe {
                    libc::sync_file_range(
                        std::os::fd::AsRawFd::as_raw_fd(file),
                        lo as libc::off64_t,
                        (hi - lo) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether [`finish`](Self::finish) flushes the data to disk before the rename
    /// (default true). Without it the output is still complete and atomically renamed,
    /// but a power failure soon after may lose it, as with `cp` or `np.save`.
    #[must_use]
    pub fn durable(mut self, yes: bool) -> Self {
        self.durable = yes;
        self
    }

    /// Flushes the data to disk and renames the file into place (replacing what was
    /// there), then syncs the directory so the rename survives a crash.
    ///
    /// # Errors
    /// [`Error::Io`] if the flush or rename fails; the temporary file is removed then.
    pub fn finish(self) -> Result<()> {
        let staged = self.tmp.as_file();
        let off = self.data_offset;
        let read = |at: u64, buf: &mut [u8]| {
            staged
                .read_exact_at(buf, off + at)
                .map_err(|e| Error::io("read back", self.tmp.path(), e))
        };
        match &self.encode {
            Some(Encode::Tiff(opts)) => {
                let encoded = temp_beside(&self.dest)?;
                geotiff::write_tiled(
                    encoded.as_file(),
                    &self.dest,
                    &self.shape,
                    self.dtype,
                    opts,
                    &read,
                )?;
                return Self::persist(encoded, &self.dest, self.durable);
            }
            Some(Encode::Zarr(opts)) => {
                let (parent, name) = dir_and_name(&self.dest)?;
                let dir = tempfile::Builder::new()
                    .prefix(&format!(".{name}."))
                    .suffix(TEMP_SUFFIX)
                    .tempdir_in(&parent)
                    .map_err(|e| Error::io("create a directory in", &parent, e))?;
                // held while the store is written, so that `clean` leaves it alone
                let lock_path = dir.path().join(".lock");
                let held = own_files::open_own(&lock_path, true)?;
                let _ = lock(&held);
                zarr::write_store(dir.path(), &self.dest, &self.shape, self.dtype, opts, &read)?;
                std::fs::remove_file(&lock_path).map_err(|e| Error::io("remove", &lock_path, e))?;
                if std::fs::symlink_metadata(&self.dest).is_ok() {
                    own_files::check_destination(&self.dest, OutFormat::Zarr)?;
                    std::fs::remove_dir_all(&self.dest)
                        .map_err(|e| Error::io("replace", &self.dest, e))?;
                }
                std::fs::rename(dir.path(), &self.dest)
                    .map_err(|e| Error::io("rename the finished output to", &self.dest, e))?;
                let _ = dir.keep();
                return Ok(());
            }
            None => {}
        }
        Self::persist(self.tmp, &self.dest, self.durable)
    }

    fn persist(tmp: tempfile::NamedTempFile, dest: &Path, durable: bool) -> Result<()> {
        // what may have appeared at the destination while the run went on
        own_files::check_destination(dest, OutFormat::Npy)?;
        if durable {
            tmp.as_file()
                .sync_all()
                .map_err(|e| Error::io("flush", dest, e))?;
        }
        crate::fault::crash_point(|| "synced".into());
        tmp.persist(dest)
            .map_err(|e| Error::io("rename the finished output to", dest, e.error))?;
        crate::fault::crash_point(|| "renamed".into());
        if let Some(dir) = dest
            .parent()
            .filter(|p| durable && !p.as_os_str().is_empty())
        {
            // Best effort: some filesystems refuse fsync on a directory.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        crate::fault::crash_point(|| "dir-synced".into());
        Ok(())
    }

    /// The open temporary file (used to compare identities of inputs and outputs).
    #[must_use]
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }
}

/// The encoding `format` needs: GeoTIFF (checking that the shape is an image and the
/// dtype has a TIFF form) or Zarr v3; none for `.npy` and raw.
fn default_encode(
    dest: &Path,
    shape: &[usize],
    dtype: DType,
    format: OutFormat,
) -> Result<Option<Encode>> {
    if format == OutFormat::GeoTiff {
        geotiff::image_dims(shape)?;
        geotiff::tiff_sample(dtype)?;
        return Ok(Some(Encode::Tiff(geotiff::TiffWriteOptions::default())));
    }
    if format == OutFormat::Zarr {
        if shape.is_empty() {
            return Err(Error::invalid(format!(
                "{}: a Zarr output needs at least one dimension",
                dest.display()
            )));
        }
        return Ok(Some(Encode::Zarr(zarr::ZarrWriteOptions::default())));
    }
    Ok(None)
}
