//! A Zarr v3 output encoded while the run writes it: chunks are compressed and stored as
//! soon as the tiles covering them are written, into the store being built beside the
//! destination, with no raw staging file and nothing to encode after the run.
//!
//! The unit that completes is an *outer chunk* (a shard, when sharded), assembled from
//! the pieces the run writes (`chunk_assembly`) and stored when whole. A flat
//! plan holds the outer chunks of the *slab* it crosses (those that share their grid
//! positions along the leading axes up to the first axis whose chunk is longer than 1:
//! with the default chunks, 512 rows of one 2-D plane); a box plan cut along the chunk
//! grid holds those across one box.
//!
//! An object output (`s3://...`) is built in its local spool directory the same way, and
//! each run of chunks, once stored there, is uploaded and its files removed
//! (`crate::io::remote::upload`): the local store holds only the chunks in flight, and
//! `zarr.json` is uploaded last, when every chunk is in. The keys uploaded are logged
//! beforehand in a record beside the spool (`.NAME.chunk-keys.tilestream-tmp`), from which a
//! failed run's chunks are deleted, and a killed run's by `tilestream clean URL` or the
//! next run to the same URL.
//!
//! Each run of consecutive chunks stored together is reported
//! ([`ZarrStream::take_appended`], with the CRC-32 of its chunk files) for the resume
//! journal; a resumed run keeps the runs whose files still have their checksums and
//! stores the rest again.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunk_assembly::ChunkRun;
use crate::format::chunk_assembly::{ChunkAssembly, ChunkGrid, consecutive_runs};
use crate::format::lock;
use crate::format::output::objects as upload;
use crate::format::zarr::encode::ZarrEncoder;
use crate::format::zarr::{ZarrWriteOptions, chunk_shapes, encode_chunk_range};
use crate::io::own_files;
use crate::io::remote::upload::Bucket;

/// The most outer chunks a stream encodes at once.
const MAX_BATCH: u64 = 16;

/// A Zarr store encoded chunk by chunk as the run writes it; see the module documentation.
pub struct ZarrStream {
    dir: PathBuf,
    dest: PathBuf,
    /// Holds the array's shape, dtype and outer chunk shape.
    encoder: ZarrEncoder,
    /// The outer chunks over the array (what the assembly fills).
    chunk_grid: ChunkGrid,
    /// CRC-32 of the store's `zarr.json`, the seed of every run's checksum: chunks an
    /// interrupted run stored with other options (`--resume` with another
    /// `--zarr-compress` or chunking) never match, and are stored again.
    seed: u32,
    memory: u64,
    inner: Mutex<Inner>,
    /// Held while the store is written, so that `tilestream clean` leaves it alone (not
    /// for rows of a shared store, [`ZarrStream::into_rows`]).
    _lock: Option<File>,
    reserved: Option<Reservation>,
    /// Writing rows of an existing store: what of the run it keeps and where that goes.
    rows: Option<StoreRows>,
    /// An object output's destination, where each run of chunks is uploaded.
    bucket: Option<Bucket>,
    /// An object output's record of the chunk keys uploaded, held while the run lives.
    record: Option<File>,
}

/// The rows of an existing store a run writes ([`ZarrStream::into_rows`]): elements
/// `keep` of the run (flat) are the store's from element `at` on.
#[derive(Clone, Copy, Debug)]
struct StoreRows {
    keep: (u64, u64),
    at: u64,
    /// Outer chunks those rows cover.
    chunks: usize,
}

impl std::fmt::Debug for ZarrStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrStream")
            .field("dir", &self.dir)
            .field("outer", &self.encoder.outer())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Inner {
    /// The chunks being filled.
    asm: ChunkAssembly,
    /// Runs of chunks stored since the last [`ZarrStream::take_appended`].
    appended: Vec<ChunkRun>,
    /// Set once the store is renamed into place or kept for a resume: not removed on
    /// drop.
    settled: bool,
    /// Set once an object output's `zarr.json` was sent: a failed run deletes it first
    /// (it may have landed though the answer was lost).
    meta_sent: bool,
}

/// The first axis whose chunk is longer than 1 (the last if none).
fn slab_axis(outer: &[usize]) -> usize {
    outer
        .iter()
        .position(|&c| c > 1)
        .unwrap_or(outer.len().saturating_sub(1))
}

impl ZarrStream {
    /// Whether an output of `shape` written as `opts` say can be streamed within `room`
    /// bytes: the outer chunks being filled (`open` of them; `None`: a slab, which a
    /// flat plan crosses) and at least one in flight, three times its size (raw, encoded
    /// and the encoder's working copy). Returns the bytes the stream holds and the options to
    /// create it with (their `memory` set to the chunks in flight, at most 16, so the
    /// figure does not depend on the machine).
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk or shard shapes that do not fit the array.
    pub fn fit(
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        room: u64,
        open: Option<usize>,
    ) -> Result<Option<(u64, ZarrWriteOptions)>> {
        let Some((filling, chunk)) = Self::least(shape, dtype, opts, open)? else {
            return Ok(None);
        };
        if filling.saturating_add(chunk) > room {
            return Ok(None);
        }
        let batch = ((room - filling) / chunk).min(MAX_BATCH);
        let mut o = opts.clone();
        o.memory = batch * chunk;
        Ok(Some((filling + batch * chunk, o)))
    }

    /// What streaming an output of `shape` written as `opts` say holds at the least, as
    /// [`ZarrStream::fit`] counts it: the bytes of the chunks being filled (`open` of
    /// them, or a slab) and of one chunk in flight; `None` for an empty array.
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk or shard shapes that do not fit the array.
    pub fn least(
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        open: Option<usize>,
    ) -> Result<Option<(u64, u64)>> {
        if shape.is_empty() || shape.contains(&0) {
            return Ok(None);
        }
        let (_, outer) = chunk_shapes(opts, shape, dtype, u64::MAX)?;
        let a = slab_axis(&outer);
        let es = dtype.size() as u64;
        // a chunk as the array holds it (a chunk deeper than the array is not filled)
        let one = outer
            .iter()
            .zip(shape)
            .fold(es, |n, (&d, &s)| n.saturating_mul(d.min(s) as u64));
        let filling = match open {
            None => (outer[a].min(shape[a]) as u64)
                .saturating_mul(
                    shape[a + 1..]
                        .iter()
                        .fold(1u64, |n, &d| n.saturating_mul(d as u64)),
                )
                .saturating_mul(es),
            Some(n) => one.saturating_mul(n.max(1) as u64),
        };
        Ok(Some((filling, one.saturating_mul(3))))
    }

    /// A stream building the store in `dir` for `dest`: a new directory, or (`adopt`)
    /// an interrupted run's, taken up when it holds only directories and regular files
    /// (else it is removed and made anew). `zarr.json` is written either way.
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk shapes that do not fit; [`Error::Io`] if the
    /// directory cannot be made or written.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        dir: &Path,
        dest: &Path,
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        memory: Option<Reservation>,
        adopt: bool,
    ) -> Result<Self> {
        let (bucket, record) = if crate::io::remote::is_url(dest) {
            let bucket = Bucket::open(&dest.to_string_lossy())?;
            if !adopt {
                // chunks a killed run to the same URL left; then nothing may be there, or
                // a chunk this store leaves out (all fill value) would be read from it
                upload::clean_leftovers(dest)?;
                if !bucket.is_empty_prefix()? {
                    return Err(crate::io::remote::upload::prefix_not_empty(&bucket));
                }
            }
            (Some(bucket), Some(upload::hold_chunks_record(dest)?))
        } else {
            (None, None)
        };
        let usable = adopt && only_files_and_dirs(dir);
        if !usable && std::fs::symlink_metadata(dir).is_ok() {
            std::fs::remove_dir_all(dir).map_err(|e| Error::io("remove", dir, e))?;
        }
        if !usable {
            std::fs::create_dir(dir)
                .map_err(|e| Error::io("create a temporary Zarr store", dir, e))?;
        }
        let made = Self::open_store(dir, dest, shape, dtype, opts);
        if made.is_err() && !usable {
            // a store this run made and cannot use is not left behind
            let _ = std::fs::remove_dir_all(dir);
        }
        let (held, encoder, seed) = made?;
        let chunk_grid = ChunkGrid::new(shape, encoder.outer())?;
        let asm = ChunkAssembly::new(chunk_grid.clone(), dtype.size());
        Ok(ZarrStream {
            seed,
            dir: dir.to_path_buf(),
            dest: dest.to_path_buf(),
            encoder,
            chunk_grid,
            memory: opts.memory,
            inner: Mutex::new(Inner {
                asm,
                appended: Vec::new(),
                settled: false,
                meta_sent: false,
            }),
            _lock: Some(held),
            reserved: memory,
            rows: None,
            bucket,
            record,
        })
    }

    /// A stream storing the chunks of rows `at_row..at_row + rows` of the existing store
    /// `dest` (made with the same `opts` for an array of `store_shape`; other tasks of a
    /// job write its other rows) from a run whose rows `skip_rows..skip_rows + rows` they
    /// are: no staging file, and `zarr.json` is not rewritten. The rows must fall on the
    /// store's outer chunks (`OutputFile::zarr_region` checks that). Chunks stored before
    /// a failure stay (the job removes the store if a task fails for good).
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk shapes that do not fit the store.
    #[allow(clippy::too_many_arguments)]
    pub fn into_rows(
        dest: &Path,
        store_shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        memory: Option<Reservation>,
        at_row: u64,
        skip_rows: u64,
        rows: u64,
    ) -> Result<Self> {
        let Some((&n, rest)) = store_shape.split_first() else {
            return Err(Error::invalid(format!(
                "{}: a 0-d array has no rows to write",
                dest.display()
            )));
        };
        let encoder = ZarrEncoder::new(dest, store_shape, dtype, opts)?;
        let outer = encoder.outer().to_vec();
        let chunk_grid = ChunkGrid::new(store_shape, &outer)?;
        let row: u64 = rest.iter().map(|&d| d as u64).product();
        let c = outer[0] as u64;
        let per_chunk_row = chunk_grid.chunks() / n.div_ceil(outer[0]).max(1);
        let chunk_rows = (at_row + rows).div_ceil(c) - at_row / c;
        Ok(ZarrStream {
            seed: 0,
            dir: dest.to_path_buf(),
            dest: dest.to_path_buf(),
            encoder,
            chunk_grid: chunk_grid.clone(),
            memory: opts.memory,
            inner: Mutex::new(Inner {
                asm: ChunkAssembly::new(chunk_grid, dtype.size()),
                appended: Vec::new(),
                // the store is the job's: never removed here
                settled: true,
                meta_sent: false,
            }),
            _lock: None,
            reserved: memory,
            rows: Some(StoreRows {
                keep: (skip_rows * row, (skip_rows + rows) * row),
                at: at_row * row,
                chunks: chunk_rows as usize * per_chunk_row,
            }),
            bucket: None,
            record: None,
        })
    }

    /// Locks the store in `dir`, writes its `zarr.json` and returns the lock, the
    /// store's encoder and the CRC-32 of its `zarr.json` (which seeds the checksums of its
    /// runs of chunks).
    fn open_store(
        dir: &Path,
        dest: &Path,
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
    ) -> Result<(File, ZarrEncoder, u32)> {
        let held = own_files::open_own(&dir.join(".lock"), true)?;
        if !lock(&held) {
            return Err(Error::invalid(format!(
                "{}: another tilestream run is writing this output",
                dest.display()
            )));
        }
        let encoder = ZarrEncoder::new(dir, shape, dtype, opts)?;
        let text = encoder.store_metadata()?;
        Ok((held, encoder, crc32fast::hash(text.as_bytes())))
    }

    /// The store directory being built.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of outer chunks.
    #[must_use]
    pub fn chunks(&self) -> usize {
        self.chunk_grid.chunks()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::Internal("Zarr stream lock poisoned".into()))
    }

    /// Takes `bytes` of the output from flat element `start` on; see
    /// [`crate::format::tiff::stream::TiffStream::write`], whose rules these are.
    ///
    /// # Errors
    /// [`Error::Io`]/[`Error::Format`] if a chunk cannot be stored; [`Error::Internal`]
    /// for bytes past the array's end.
    pub fn write(&self, start: u64, bytes: &[u8]) -> Result<()> {
        // rows of a store: only the rows kept, moved to their place in the store
        let (start, bytes) = match self.rows {
            None => (start, bytes),
            Some(r) => {
                let es = self.encoder.dtype().size() as u64;
                let end = start + bytes.len() as u64 / es;
                let (a, b) = (start.max(r.keep.0), end.min(r.keep.1));
                if a >= b {
                    return Ok(());
                }
                let bytes = &bytes[((a - start) * es) as usize..((b - start) * es) as usize];
                (a - r.keep.0 + r.at, bytes)
            }
        };
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let (asm, appended) = (&mut inner.asm, &mut inner.appended);
        let grid = &self.chunk_grid;
        asm.feed(start, bytes, |done| {
            for run in consecutive_runs(done) {
                let first = run.first().map_or(0, |c| c.0);
                let n = run.len();
                self.store_run(grid, &run)?;
                let (crc, counts) = self.files_crc(first..first + n)?;
                if let Some(bucket) = &self.bucket {
                    self.upload_run(bucket, first..first + n)?;
                }
                appended.push(ChunkRun {
                    first,
                    offset: 0,
                    counts,
                    crc,
                });
            }
            Ok(())
        })
    }

    /// Encodes and stores the whole outer chunks `run` (consecutive, with their clipped
    /// C-order bytes).
    fn store_run(&self, grid: &ChunkGrid, run: &[(usize, Vec<u8>)]) -> Result<()> {
        let es = self.encoder.dtype().size() as u64;
        let first = run.first().map_or(0, |c| c.0);
        // the encoder asks for runs along the last axis by their array byte offset
        let read = |at: u64, out: &mut [u8]| -> Result<()> {
            let mut found = None;
            grid.locate(at / es, |k, local| found = Some((k, local)));
            let (k, local) = found.ok_or_else(|| Error::Internal("Zarr chunk read".into()))?;
            let buf = &run
                .get(k.wrapping_sub(first))
                .ok_or_else(|| Error::Internal(format!("Zarr chunk {k} not assembled")))?
                .1;
            let from = local * es as usize;
            out.copy_from_slice(&buf[from..from + out.len()]);
            Ok(())
        };
        encode_chunk_range(
            &self.encoder,
            self.encoder.shape(),
            self.encoder.dtype(),
            self.encoder.outer(),
            self.memory,
            first..first + run.len(),
            &read,
        )
    }

    /// The key of outer chunk `k` within the store (`c/0/1`): its file's path in the
    /// store being built, as the encoder names it.
    fn chunk_key(&self, k: usize) -> String {
        let path = self.encoder.chunk_path(&self.chunk_grid.position(k));
        let rel = path.strip_prefix(&self.dir).unwrap_or(&path);
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Uploads the files of outer chunks `chunks` (an object output's), logging their
    /// keys in the store's record first (a failed run deletes what the record lists),
    /// then removes the files.
    fn upload_run(&self, bucket: &Bucket, chunks: std::ops::Range<usize>) -> Result<()> {
        let mut items = Vec::new();
        let mut files = Vec::new();
        for k in chunks {
            let path = self.encoder.chunk_path(&self.chunk_grid.position(k));
            match std::fs::read(&path) {
                Ok(bytes) => items.push((self.chunk_key(k), bytes)),
                // all fill value: not stored
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("read", &path, e)),
            }
            files.push(path);
        }
        let keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
        if let Some(record) = &self.record {
            upload::log_chunks(record, &keys)?;
        }
        bucket.put_many(items)?;
        for f in files {
            let _ = std::fs::remove_file(f);
        }
        Ok(())
    }

    /// [`files_crc`](Self::files_crc) of an object output's chunks, read back from
    /// `bucket` (their files are removed once uploaded): what a resumed run checks.
    fn objects_crc(
        &self,
        bucket: &Bucket,
        chunks: std::ops::Range<usize>,
    ) -> Result<(u32, Vec<u64>)> {
        let urls: Vec<String> = chunks.map(|k| bucket.url_of(&self.chunk_key(k))).collect();
        // a chunk is at most its raw size and a few bytes of codec framing
        let max = self.encoder.outer().iter().product::<usize>() as u64
            * self.encoder.dtype().size() as u64
            * 2
            + (1 << 20);
        let mut h = crc32fast::Hasher::new_with_initial(self.seed);
        let mut lens = Vec::with_capacity(urls.len());
        for got in crate::io::remote::fetch_whole_many(&urls, max)? {
            match got {
                Some(crate::io::remote::Whole::Bytes(b)) => {
                    h.update(b"+");
                    h.update(&b);
                    lens.push(b.len() as u64);
                }
                // larger than any chunk this run stores: not its chunk
                Some(crate::io::remote::Whole::TooLarge(n)) => {
                    h.update(b"?");
                    lens.push(n);
                }
                None => {
                    h.update(b"-");
                    lens.push(0);
                }
            }
        }
        Ok((h.finalize(), lens))
    }

    /// CRC-32 of the files of outer chunks `chunks` (flat grid indices), in order, and
    /// their lengths; a chunk without a file (all fill value, which is not stored)
    /// counts as a marker byte and length 0.
    fn files_crc(&self, chunks: std::ops::Range<usize>) -> Result<(u32, Vec<u64>)> {
        let mut h = crc32fast::Hasher::new_with_initial(self.seed);
        let mut buf = vec![0u8; 64 << 10];
        let mut lens = Vec::with_capacity(chunks.len());
        for k in chunks {
            let mut len = 0u64;
            let path = self.encoder.chunk_path(&self.chunk_grid.position(k));
            match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(mut f) => {
                    h.update(b"+");
                    loop {
                        let n = f.read(&mut buf).map_err(|e| Error::io("read", &path, e))?;
                        if n == 0 {
                            break;
                        }
                        h.update(&buf[..n]);
                        len += n as u64;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => h.update(b"-"),
                Err(e) => return Err(Error::io("read", &path, e)),
            }
            lens.push(len);
        }
        Ok((h.finalize(), lens))
    }

    /// The runs of chunks stored since the last call, in order (as [`ChunkRun`]s with
    /// offset 0 and, as counts, the lengths of their files).
    #[must_use]
    pub fn take_appended(&self) -> Vec<ChunkRun> {
        self.inner
            .lock()
            .map(|mut i| std::mem::take(&mut i.appended))
            .unwrap_or_default()
    }

    /// Takes up the chunks an interrupted run stored: the longest prefix of the runs
    /// `done` whose chunk files still have their checksums. Returns the number of chunks
    /// kept; the others are stored again.
    ///
    /// # Errors
    /// [`Error::Io`] if a chunk file cannot be read.
    pub fn resume(&self, done: &[ChunkRun]) -> Result<usize> {
        let mut inner = self.lock()?;
        let mut kept = 0;
        for d in done {
            let run = d.first..d.first + d.counts.len();
            if d.counts.is_empty()
                || run.end > self.chunks()
                || run.clone().any(|k| inner.asm.is_done(k))
                || match &self.bucket {
                    Some(b) => self.objects_crc(b, run.clone()),
                    None => self.files_crc(run.clone()),
                }
                .ok()
                .map(|c| c.0)
                    != Some(d.crc)
            {
                break;
            }
            for k in run {
                inner.asm.mark_done(k);
                kept += 1;
            }
        }
        Ok(kept)
    }

    /// Whether every element of the flat range `[start, start + len)` is in a chunk
    /// already stored (a resumed run need not write it again).
    #[must_use]
    pub fn covers(&self, start: u64, len: u64) -> bool {
        self.inner.lock().is_ok_and(|i| i.asm.covers(start, len))
    }

    /// Gives back the memory held for the chunks in flight (when the run is done).
    pub fn release_memory(&mut self) {
        self.reserved = None;
    }

    /// Checks that every chunk is stored and moves the store to the destination,
    /// replacing a Zarr store there.
    ///
    /// # Errors
    /// [`Error::Internal`] if a chunk is missing; [`Error::Io`] if the rename fails.
    pub fn finish(&self) -> Result<()> {
        let mut inner = self.lock()?;
        let want = self.rows.map_or(self.chunks(), |r| r.chunks);
        if inner.asm.done_count() != want {
            return Err(Error::Internal(format!(
                "Zarr stream finished with {} of {want} chunks stored",
                inner.asm.done_count(),
            )));
        }
        if self.rows.is_some() {
            // rows of a store: its chunks are in place, the job renames the store
            return Ok(());
        }
        if let Some(bucket) = &self.bucket {
            // every chunk is in: the metadata last, then the spool and the record go
            let meta = self.dir.join("zarr.json");
            let text = std::fs::read(&meta).map_err(|e| Error::io("read", &meta, e))?;
            crate::fault::crash_point(|| "chunks-uploaded".into());
            inner.meta_sent = true;
            bucket.put_many(vec![("zarr.json".into(), text)])?;
            inner.settled = true;
            let _ = std::fs::remove_dir_all(&self.dir);
            upload::forget_chunks(&self.dest);
            return Ok(());
        }
        // an old store is replaced atomically: a kill at any instant leaves it or this one;
        // locked until it is in place: `clean` never takes a finished store for a stale one
        let done = own_files::replace_dir(&self.dir, &self.dest);
        inner.settled = true;
        done
    }

    /// Leaves the store for a resumed run (an interrupted run).
    pub fn keep(&self) {
        if let Ok(mut i) = self.inner.lock() {
            i.settled = true;
        }
    }
}

impl Drop for ZarrStream {
    fn drop(&mut self) {
        // a failed run leaves nothing behind
        if let Ok(i) = self.inner.lock()
            && !i.settled
        {
            let _ = std::fs::remove_dir_all(&self.dir);
            if let (Some(bucket), Some(record)) = (&self.bucket, &self.record) {
                // the metadata first: never an array over chunks being deleted
                let meta = !i.meta_sent || bucket.delete_many(&["zarr.json".into()]).is_ok();
                // every chunk the record lists: this run's and an interrupted one's it
                // took up
                if meta && upload::delete_recorded_chunks(record, &self.dest, bucket).is_ok() {
                    upload::forget_chunks(&self.dest);
                }
            }
        }
    }
}

/// True if `dir` is a directory (not a link) holding only directories and regular files,
/// at most a few levels deep: what a store tilestream builds holds. Anything else (a
/// link planted in it) and it is not taken up.
fn only_files_and_dirs(dir: &Path) -> bool {
    fn walk(p: &Path, depth: usize) -> bool {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return false;
        };
        if m.file_type().is_file() {
            return true;
        }
        if !m.file_type().is_dir() || depth > 40 {
            return false;
        }
        std::fs::read_dir(p).is_ok_and(|rd| {
            rd.into_iter()
                .all(|e| e.is_ok_and(|e| walk(&e.path(), depth + 1)))
        })
    }
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir()) && walk(dir, 0)
}
