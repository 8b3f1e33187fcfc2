//! Outputs that appear at their path only once complete: a temporary file beside the
//! destination (`crate::io::temp`), positioned writes into it, encoding for GeoTIFF and
//! Zarr destinations, then flush and rename.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunk_assembly::ChunkRun;
use crate::format::{OutFormat, checked_nbytes, file_len, npy};
use crate::io::own_files;
use crate::io::own_files::{TEMP_SUFFIX, dir_and_name};
use crate::io::temp::{clean_stale, lock, temp_beside};
use crate::io::window::whole_pages;

pub(crate) mod objects;
mod rows;
pub(crate) use rows::is_temp_of;
pub use rows::{commit_npy, create_npy_for_rows};

/// Where an output's bytes go.
#[derive(Debug)]
pub(crate) enum Target {
    /// A temporary file beside the destination, renamed onto it at the end.
    Temp(tempfile::NamedTempFile),
    /// Rows of an existing `.npy` that other runs write too (a cluster job's output):
    /// written in place, never renamed or removed.
    Region(File),
}

/// The rows of an existing `.npy` file a run writes its output into, instead of a file of
/// its own: how the tasks of a job split over a cluster fill one output, each its rows
/// (see [`OutputFile::region`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutRegion {
    /// The first row of the file written.
    pub at_row: u64,
    /// Leading rows of the run's output not written (the halo rows a filter computes
    /// above its share).
    pub skip_rows: u64,
    /// Rows of the run's output written, from `skip_rows` on; `None` for all the rest.
    pub rows: Option<u64>,
}

/// An output tensor being written: a temporary file beside the destination that becomes
/// the destination in [`finish`](Self::finish). Dropped without `finish`, it is deleted.
#[derive(Debug)]
pub struct OutputFile {
    pub(crate) durable: bool,
    pub(crate) dest: PathBuf,
    pub(crate) tmp: Target,
    /// Elements `[keep.0, keep.1)` of the run's output are written (region outputs);
    /// the others are dropped.
    pub(crate) keep: (u64, u64),
    pub(crate) data_offset: u64,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    /// The destination's format: a GeoTIFF or a Zarr store is written only through a
    /// stream (`stream`), never staged raw.
    pub(crate) format: OutFormat,
    /// Set when the run writes rows of an existing Zarr store (a cluster job's output):
    /// its stream stores those rows' chunks instead of a store of its own.
    pub(crate) zarr_rows: Option<ZarrRows>,
    /// Set when the destination is a GeoTIFF or Zarr store encoded as the run writes it
    /// (no staging): the temporary file is the TIFF being built, or stays empty beside
    /// the store being built.
    pub(crate) stream: Option<Box<dyn StreamWriter>>,
    /// True for an interrupted run's temporary output taken up by
    /// [`adopt`](Self::adopt).
    pub(crate) adopted: bool,
    /// Memory the work in [`finish`](Self::finish) may hold (building a COG's
    /// overviews).
    pub(crate) finish_memory: u64,
}

/// An output encoded as the run writes it (a GeoTIFF in the temporary file; a Zarr
/// store in a temporary directory named after it, the file staying empty to name the
/// run's output in the journal): the one interface an [`OutputFile`] writes an encoded
/// format through. Each encoded format implements it in its folder
/// (`src/format/tiff/encoding.rs`, `src/format/zarr/encoding.rs`).
pub(crate) trait StreamWriter: Send + Sync + std::fmt::Debug {
    /// Writes `bytes` at element index `start` (flat C order).
    ///
    /// # Errors
    /// A failed encode or write.
    fn write(&self, start: u64, bytes: &[u8]) -> Result<()>;

    /// The runs of chunks written since the last call (for the journal).
    fn take_appended(&self) -> Vec<ChunkRun>;

    /// Waits until the chunks still being compressed are written.
    ///
    /// # Errors
    /// The error of a chunk's compression or write.
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// Keeps the intact runs of chunks of `done` an interrupted run wrote into `file`
    /// (the temporary file at `dest`'s side); the chunks kept.
    ///
    /// # Errors
    /// I/O errors reading or cutting what is there.
    fn resume(&self, file: &File, dest: &Path, done: &[ChunkRun]) -> Result<usize>;

    /// Whether the flat elements `[start, start + len)` are all in chunks written.
    fn covers(&self, start: u64, len: u64) -> bool;

    /// Gives back the memory held for the unit in flight (all is written).
    fn release_memory(&mut self);

    /// Whether finishing rewrites the output as a Cloud-Optimized GeoTIFF.
    fn builds_cog(&self) -> bool {
        false
    }

    /// Keeps what an interrupted run wrote, for `--resume`.
    fn keep(&self) {}

    /// Finishes the output and puts it in place at `dest`: `tmp` is the temporary file
    /// ([`finish_file`] renames it), `memory` what building a COG may hold.
    ///
    /// # Errors
    /// A failed final write, flush or rename; nothing is left at `dest` then.
    fn finish(
        &self,
        tmp: tempfile::NamedTempFile,
        dest: &Path,
        durable: bool,
        memory: u64,
    ) -> Result<()>;
}

/// The rows of an existing Zarr store a run writes ([`OutputFile::zarr_region`]).
#[derive(Clone, Debug)]
pub(crate) struct ZarrRows {
    /// The store's shape.
    pub(crate) store_shape: Vec<usize>,
    /// The first row of the store written.
    pub(crate) at_row: u64,
    /// Rows written.
    pub(crate) rows: u64,
    /// Rows of the run's output before the first one written.
    pub(crate) skip_rows: u64,
}

impl OutputFile {
    /// Creates the temporary file for an output of `shape` and `dtype` at `dest`: `.npy`
    /// (with header) if the name ends in `.npy`, raw data for other names but
    /// `.tif`/`.tiff` and `.zarr`: a GeoTIFF or Zarr output must then be made a stream
    /// ([`with_tiff_stream`](Self::with_tiff_stream),
    /// [`with_zarr_stream`](Self::with_zarr_stream)), which encodes it as it is written;
    /// [`finish`](Self::finish) refuses one that is not.
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
        own_files::check_destination(dest, format.dest())?;
        if crate::io::remote::is_url(dest) {
            // what a killed run to this same object left: its upload, its chunks
            let _ = objects::clean_leftovers(dest);
        } else if let Ok((dir, name)) = dir_and_name(dest) {
            // what a killed run of this same output left behind
            let _ = clean_stale(&dir, Some(&name));
        }
        crate::format::check_encodable(dest, shape, dtype, format)?;
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
            tmp: Target::Temp(tmp),
            keep: (0, nbytes / dtype.size().max(1) as u64),
            data_offset,
            dtype,
            shape: shape.to_vec(),
            stream: None,
            adopted: false,
            finish_memory: 64 << 20,
            format,
            zarr_rows: None,
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
        own_files::check_destination(dest, format.dest())?;
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
        // a GeoTIFF's may be a streamed TIFF (any length), checked run of tiles by run later;
        // a Zarr output's, the empty file that names a streamed store
        let streamed = format == OutFormat::GeoTiff || (format == OutFormat::Zarr && len == 0);
        if (len != header.len() as u64 + nbytes && !streamed) || head != header {
            return Err(Error::invalid(format!(
                "{}: not the temporary output of this run",
                tmp.display()
            )));
        }
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: Target::Temp(tempfile::NamedTempFile::from_parts(
                file,
                tempfile::TempPath::try_from_path(tmp).map_err(|e| Error::io("open", tmp, e))?,
            )),
            keep: (0, nbytes / dtype.size().max(1) as u64),
            data_offset: header.len() as u64,
            dtype,
            shape: shape.to_vec(),
            stream: None,
            adopted: true,
            finish_memory: 64 << 20,
            format: {
                crate::format::check_encodable(dest, shape, dtype, format)?;
                format
            },
            zarr_rows: None,
        })
    }

    /// True for an output written into rows of an existing file
    /// ([`OutputFile::region`]).
    #[must_use]
    pub fn is_region(&self) -> bool {
        matches!(self.tmp, Target::Region(_))
    }

    /// True when this output is a GeoTIFF encoded as the run writes it
    /// ([`with_tiff_stream`](Self::with_tiff_stream)).
    #[must_use]
    pub fn is_streaming(&self) -> bool {
        self.stream.is_some()
    }

    /// True for an interrupted run's temporary output taken up by
    /// [`adopt`](Self::adopt).
    #[must_use]
    pub fn is_adopted(&self) -> bool {
        self.adopted
    }

    /// The runs of chunks a streaming output wrote since the last call (for the journal).
    #[must_use]
    pub fn take_appended(&self) -> Vec<ChunkRun> {
        self.stream
            .as_ref()
            .map_or_else(Vec::new, |s| s.take_appended())
    }

    /// For a streaming output: waits until the chunks it is still compressing are
    /// written (then [`take_appended`](Self::take_appended) has them all).
    ///
    /// # Errors
    /// The error of a chunk's compression or write.
    pub fn settle(&self) -> Result<()> {
        self.stream.as_ref().map_or(Ok(()), |s| s.settle())
    }

    /// For a streaming output taken up from an interrupted run: keeps the intact runs of
    /// chunks of `done` and returns how many chunks it kept; [`covered`](Self::covered)
    /// then tells which writes the run need not redo.
    ///
    /// # Errors
    /// [`Error::Internal`] if this output does not stream; [`Error::Io`] if its file
    /// cannot be read or cut.
    pub fn resume_stream(&self, done: &[ChunkRun]) -> Result<usize> {
        match &self.stream {
            Some(s) => s.resume(self.handle(), &self.dest, done),
            None => Err(Error::Internal(
                "resume_stream on an output that does not stream".into(),
            )),
        }
    }

    /// For a streaming output: whether the flat elements `[start, start + len)` are all in
    /// chunks already written (kept from an interrupted run, or completed).
    #[must_use]
    pub fn covered(&self, start: u64, len: u64) -> bool {
        self.stream.as_ref().is_some_and(|s| s.covers(start, len))
    }

    /// The directory a streamed Zarr output of this temporary file is built in.
    pub(crate) fn stream_dir(&self) -> Option<PathBuf> {
        let Target::Temp(t) = &self.tmp else {
            return None;
        };
        let name = t.path().to_string_lossy();
        let stem = name.strip_suffix(TEMP_SUFFIX)?;
        Some(PathBuf::from(format!("{stem}z{TEMP_SUFFIX}")))
    }

    /// The destination path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Gives back the memory a streamed output holds for its unit in flight (once the
    /// run has written everything, before [`finish`](Self::finish)).
    pub fn release_stream_memory(&mut self) {
        if let Some(s) = &mut self.stream {
            s.release_memory();
        }
    }

    /// True when [`finish`](Self::finish) rewrites the GeoTIFF as a Cloud-Optimized
    /// GeoTIFF (building its overviews).
    #[must_use]
    pub fn builds_cog(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.builds_cog())
    }

    /// Memory the work in [`finish`](Self::finish) may hold (building a COG's
    /// overviews).
    pub fn set_encode_memory(&mut self, bytes: u64) {
        self.finish_memory = bytes;
    }

    /// The temporary file the data goes to until [`finish`](Self::finish) (the file
    /// itself for a region output).
    #[must_use]
    pub fn temp_path(&self) -> &Path {
        match &self.tmp {
            Target::Temp(t) => t.path(),
            Target::Region(_) => &self.dest,
        }
    }

    fn handle(&self) -> &File {
        match &self.tmp {
            Target::Temp(t) => t.as_file(),
            Target::Region(f) => f,
        }
    }

    /// Where the `bytes` bytes from element `start` of the run's output go: the file
    /// offset and the part `[from, to)` of those bytes kept (all of them but for a
    /// region output's dropped rows); `None` if none is kept.
    fn locate(&self, start: u64, bytes: usize) -> Option<(u64, usize, usize)> {
        let es = self.dtype.size() as u64;
        let end = start + bytes as u64 / es;
        let (a, b) = (start.max(self.keep.0), end.min(self.keep.1));
        (a < b).then(|| {
            (
                self.data_offset + (a - self.keep.0) * es,
                ((a - start) * es) as usize,
                ((b - start) * es) as usize,
            )
        })
    }

    /// Reads back `buf.len()` bytes from element index `start` (flat C order).
    ///
    /// # Errors
    /// [`Error::Io`] on a failed read; [`Error::Internal`] for elements a region output
    /// dropped.
    pub fn read_at(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        if self.stream.is_some() && !buf.is_empty() {
            return Err(Error::Internal(
                "a streamed GeoTIFF or Zarr output cannot be read back".into(),
            ));
        }
        match self.locate(start, buf.len()) {
            Some((off, 0, to)) if to == buf.len() => self
                .handle()
                .read_exact_at(buf, off)
                .map_err(|e| Error::io("read back", self.temp_path(), e)),
            _ if buf.is_empty() => Ok(()),
            _ => Err(Error::Internal(format!(
                "reading back elements {start}.. that this output does not keep"
            ))),
        }
    }

    /// Leaves the temporary file in place (an interrupted run that can be resumed):
    /// the next run with `--resume` takes it up, `tilestream clean` removes it.
    pub fn keep(self) {
        if let Some(s) = &self.stream {
            s.keep();
        }
        if let Target::Temp(t) = self.tmp {
            let _ = t.keep();
        }
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
        if let Some(s) = &self.stream {
            return s.write(start, bytes);
        }
        let Some((off, from, to)) = self.locate(start, bytes.len()) else {
            return Ok(());
        };
        let bytes = &bytes[from..to];
        let file = self.handle();
        // one pwrite: the kernel serializes buffered writes to one file on its lock, so
        // splitting them across threads gained nothing on the GPU machine (2.5 against
        // 2.3 GB/s into /dev/shm) and cost up to 9% on two cores
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
        let tmp = match self.tmp {
            Target::Temp(t) => t,
            Target::Region(f) => {
                // the job that made the file renames it when all its runs are done
                if self.durable {
                    f.sync_data()
                        .map_err(|e| Error::io("flush", &self.dest, e))?;
                }
                return Ok(());
            }
        };
        if let Some(s) = &self.stream {
            return s.finish(tmp, &self.dest, self.durable, self.finish_memory);
        }
        if matches!(self.format, OutFormat::GeoTiff | OutFormat::Zarr) {
            // never staged raw: `tmp` holds no encoded output (it goes with `tmp`)
            return Err(Error::Internal(format!(
                "{}: a GeoTIFF or Zarr output is encoded as it is written (a stream), and \
                 this one was not: nothing is written",
                self.dest.display()
            )));
        }
        finish_file(tmp, &self.dest, self.durable, self.finish_memory)
    }

    /// The open temporary file (used to compare identities of inputs and outputs).
    #[must_use]
    pub fn file(&self) -> &File {
        self.handle()
    }
}

/// Flushes the temporary file `tmp` (when `durable`) and renames it onto `dest`, then
/// syncs the directory so the rename survives a crash: how every file output is put in
/// place. An object output (`s3://...`) is uploaded instead, within `memory`
/// ([`crate::io::remote::upload`]).
///
/// # Errors
/// [`Error::Io`] if the flush, rename or upload fails; the temporary file is removed then.
pub(crate) fn finish_file(
    tmp: tempfile::NamedTempFile,
    dest: &Path,
    durable: bool,
    memory: u64,
) -> Result<()> {
    if crate::io::remote::is_url(dest) {
        let len = file_len(tmp.as_file(), tmp.path())?;
        crate::fault::crash_point(|| "built".into());
        return objects::upload_output(tmp.as_file(), len, dest, memory);
    }
    // what may have appeared at the destination while the run went on
    own_files::check_destination(dest, own_files::Dest::File)?;
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
