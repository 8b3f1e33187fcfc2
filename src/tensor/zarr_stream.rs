//! A Zarr v3 output encoded while the run writes it: chunks are compressed and stored as
//! soon as the tiles covering them are written, into the store being built beside the
//! destination, with no raw staging file and nothing to encode after the run.
//!
//! The unit that completes is a *slab*: the outer chunks (shards, when sharded) that
//! share their grid positions along the leading axes up to the first axis whose chunk
//! is longer than 1. A slab is a contiguous range of the output's flat C-order elements
//! (the axes before that one have chunks of 1, the axes after it are whole), so as the
//! run's tiles arrive in plan order, slabs complete one after another, exactly as the
//! strips of a GeoTIFF do ([`super::tiff_stream`]). With the default chunks (512 along
//! the last two axes) a slab is 512 rows of one 2-D plane.
//!
//! Each stored slab is reported ([`ZarrStream::take_appended`], with the CRC-32 of its
//! chunk files) for the resume journal; a resumed run keeps the slabs whose files still
//! have their checksums and stores the rest again.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use zarrs::filesystem::FilesystemStore;

use super::tiff_stream::{Assembly, StripDone, Units};
use super::zarr::{ZarrWriteOptions, build_array, chunk_shapes, encode_chunk_range};
use super::{lock, own_files};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The most outer chunks a stream encodes at once.
const MAX_BATCH: u64 = 16;

/// A Zarr store encoded slab by slab as the run writes it; see the module documentation.
pub struct ZarrStream {
    dir: PathBuf,
    dest: PathBuf,
    array: zarrs::array::Array<FilesystemStore>,
    shape: Vec<usize>,
    dtype: DType,
    outer: Vec<usize>,
    grid: Vec<usize>,
    /// The first axis whose outer chunk is longer than 1 (the last axis if none).
    axis: usize,
    /// Outer chunks per slab.
    per: usize,
    /// CRC-32 of the store's `zarr.json`, the seed of every slab's checksum: slabs an
    /// interrupted run stored with other options (`--resume` with another
    /// `--zarr-compress` or chunking) never match, and are stored again.
    seed: u32,
    memory: u64,
    inner: Mutex<Inner>,
    /// Held while the store is written, so that `tilestream clean` leaves it alone.
    _lock: File,
    reserved: Option<Reservation>,
}

impl std::fmt::Debug for ZarrStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZarrStream")
            .field("dir", &self.dir)
            .field("outer", &self.outer)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The slab being filled.
    asm: Assembly,
    /// Slabs stored since the last [`ZarrStream::take_appended`].
    appended: Vec<StripDone>,
    /// Set once the store is renamed into place or kept for a resume: not removed on
    /// drop.
    settled: bool,
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
    /// bytes (one slab's raw bytes and at least one outer chunk in flight, three times
    /// its size as the staged encoder counts it). Returns the bytes the stream holds and
    /// the options to create it with (their `memory` set to the chunks in flight, at most
    /// 16, so the figure does not depend on the machine).
    ///
    /// # Errors
    /// [`Error::Invalid`] for chunk or shard shapes that do not fit the array.
    pub fn fit(
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
        room: u64,
    ) -> Result<Option<(u64, ZarrWriteOptions)>> {
        if shape.is_empty() || shape.contains(&0) {
            return Ok(None);
        }
        let (_, outer) = chunk_shapes(opts, shape, dtype, u64::MAX)?;
        let a = slab_axis(&outer);
        let es = dtype.size() as u64;
        let slab = (outer[a].min(shape[a]) as u64)
            .saturating_mul(
                shape[a + 1..]
                    .iter()
                    .fold(1u64, |n, &d| n.saturating_mul(d as u64)),
            )
            .saturating_mul(es);
        let chunk = outer
            .iter()
            .fold(3 * es, |n, &d| n.saturating_mul(d as u64));
        if slab.saturating_add(chunk) > room {
            return Ok(None);
        }
        let batch = ((room - slab) / chunk).min(MAX_BATCH);
        let mut o = opts.clone();
        o.memory = batch * chunk;
        Ok(Some((slab + batch * chunk, o)))
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
        let (held, array, outer, seed) = made?;
        let grid: Vec<usize> = shape
            .iter()
            .zip(&outer)
            .map(|(&n, &c)| n.div_ceil(c))
            .collect();
        let axis = slab_axis(&outer);
        Ok(ZarrStream {
            seed,
            dir: dir.to_path_buf(),
            dest: dest.to_path_buf(),
            array,
            shape: shape.to_vec(),
            dtype,
            per: grid[axis + 1..].iter().product(),
            grid,
            outer,
            axis,
            memory: opts.memory,
            inner: Mutex::new(Inner::default()),
            _lock: held,
            reserved: memory,
        })
    }

    /// Locks the store in `dir`, writes its `zarr.json` and returns the lock, the array,
    /// its outer chunk shape and the CRC-32 of its `zarr.json` (which seeds the
    /// checksums of its slabs).
    #[allow(clippy::type_complexity)]
    fn open_store(
        dir: &Path,
        dest: &Path,
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
    ) -> Result<(File, zarrs::array::Array<FilesystemStore>, Vec<usize>, u32)> {
        let held = own_files::open_own(&dir.join(".lock"), true)?;
        if !lock(&held) {
            return Err(Error::invalid(format!(
                "{}: another tilestream run is writing this output",
                dest.display()
            )));
        }
        let (array, outer) = build_array(dir, dest, shape, dtype, opts)?;
        let meta = dir.join("zarr.json");
        array
            .store_metadata()
            .map_err(|e| Error::io("write", &meta, std::io::Error::other(e.to_string())))?;
        let text = std::fs::read(&meta).map_err(|e| Error::io("read", &meta, e))?;
        Ok((held, array, outer, crc32fast::hash(&text)))
    }

    /// The store directory being built.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of slabs.
    #[must_use]
    pub fn slabs(&self) -> usize {
        self.grid[..=self.axis].iter().product()
    }

    /// Elements of the array after one index of `axis` (its stride).
    fn stride(&self, axis: usize) -> u64 {
        self.shape[axis + 1..].iter().map(|&d| d as u64).product()
    }

    /// Flat element range `[start, end)` of slab `u`.
    #[must_use]
    pub fn slab_elems(&self, u: usize) -> (u64, u64) {
        let a = self.axis;
        let mut rem = u;
        let mut start = 0u64;
        let mut pos_a = 0;
        for i in (0..=a).rev() {
            let p = rem % self.grid[i];
            rem /= self.grid[i];
            if i == a {
                pos_a = p;
            }
            start += (p * self.outer[i]) as u64 * self.stride(i);
        }
        let rows = self.outer[a].min(self.shape[a] - pos_a * self.outer[a]);
        (start, start + rows as u64 * self.stride(a))
    }

    /// The slab holding flat element `e`.
    fn slab_of(&self, e: u64) -> usize {
        let mut u = 0;
        for i in 0..=self.axis {
            let idx = ((e / self.stride(i)) % self.shape[i] as u64) as usize;
            u = u * self.grid[i] + idx / self.outer[i];
        }
        u
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::Internal("Zarr stream lock poisoned".into()))
    }

    /// Takes `bytes` of the output from flat element `start` on; see
    /// [`super::tiff_stream::TiffStream::write`], whose rules these are.
    ///
    /// # Errors
    /// [`Error::Io`]/[`Error::Format`] if a chunk cannot be stored; [`Error::Internal`]
    /// for bytes past the slab being filled.
    pub fn write(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let (asm, appended) = (&mut inner.asm, &mut inner.appended);
        asm.feed(
            self,
            self.dtype.size(),
            start,
            bytes,
            "Zarr stream",
            |u, buf| {
                let crc = self.store_slab(u, buf)?;
                appended.push(StripDone {
                    strip: u,
                    offset: 0,
                    counts: vec![self.per as u64],
                    crc,
                });
                Ok(())
            },
        )
    }

    /// Encodes and stores the chunks of the full slab `u` (raw bytes `buf`); returns
    /// the CRC-32 of their files.
    fn store_slab(&self, u: usize, buf: &[u8]) -> Result<u32> {
        let es = self.dtype.size() as u64;
        let base = self.slab_elems(u).0 * es;
        let read = |at: u64, out: &mut [u8]| -> Result<()> {
            let from = (at - base) as usize;
            out.copy_from_slice(&buf[from..from + out.len()]);
            Ok(())
        };
        let chunks = u * self.per..(u + 1) * self.per;
        encode_chunk_range(
            &self.array,
            &self.dest,
            &self.shape,
            self.dtype,
            &self.outer,
            self.memory,
            chunks.clone(),
            &read,
        )?;
        self.files_crc(chunks)
    }

    /// CRC-32 of the files of outer chunks `chunks` (flat grid indices), in order; a
    /// chunk without a file (all fill value, which zarrs does not store) counts as a
    /// marker byte.
    fn files_crc(&self, chunks: std::ops::Range<usize>) -> Result<u32> {
        let mut h = crc32fast::Hasher::new_with_initial(self.seed);
        let mut buf = vec![0u8; 64 << 10];
        for k in chunks {
            let mut rem = k;
            let mut pos = vec![0u64; self.grid.len()];
            for a in (0..self.grid.len()).rev() {
                pos[a] = (rem % self.grid[a]) as u64;
                rem /= self.grid[a];
            }
            let path = self.dir.join(self.array.chunk_key(&pos).as_str());
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
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => h.update(b"-"),
                Err(e) => return Err(Error::io("read", &path, e)),
            }
        }
        Ok(h.finalize())
    }

    /// The slabs stored since the last call, in order (as [`StripDone`]s with offset 0
    /// and, as counts, the number of chunks).
    #[must_use]
    pub fn take_appended(&self) -> Vec<StripDone> {
        self.inner
            .lock()
            .map(|mut i| std::mem::take(&mut i.appended))
            .unwrap_or_default()
    }

    /// Takes up the slabs an interrupted run stored: the longest prefix of `done` whose
    /// chunk files still have their checksums. Returns the number kept; the stream goes
    /// on from the next slab (whose chunks it stores again).
    ///
    /// # Errors
    /// [`Error::Io`] if a chunk file cannot be read.
    pub fn resume(&self, done: &[StripDone]) -> Result<usize> {
        let mut kept = 0;
        for (u, d) in done.iter().enumerate() {
            if d.strip != u
                || d.counts != [self.per as u64]
                || u >= self.slabs()
                || self.files_crc(u * self.per..(u + 1) * self.per).ok() != Some(d.crc)
            {
                break;
            }
            kept = u + 1;
        }
        self.lock()?.asm.restart_at(kept);
        Ok(kept)
    }

    /// Gives back the memory held for the slab in flight (when the run is done).
    pub fn release_memory(&mut self) {
        self.reserved = None;
    }

    /// Checks that every slab is stored and moves the store to the destination,
    /// replacing a Zarr store there.
    ///
    /// # Errors
    /// [`Error::Internal`] if a slab is missing; [`Error::Io`] if the rename fails.
    pub fn finish(&self) -> Result<()> {
        let mut inner = self.lock()?;
        if inner.asm.next != self.slabs() {
            return Err(Error::Internal(format!(
                "Zarr stream finished with {} of {} slabs stored",
                inner.asm.next,
                self.slabs()
            )));
        }
        if std::fs::symlink_metadata(&self.dest).is_ok() {
            own_files::check_destination(&self.dest, super::OutFormat::Zarr)?;
            std::fs::remove_dir_all(&self.dest).map_err(|e| Error::io("replace", &self.dest, e))?;
        }
        std::fs::rename(&self.dir, &self.dest)
            .map_err(|e| Error::io("rename the finished output to", &self.dest, e))?;
        inner.settled = true;
        // locked until it is in place: `clean` never takes a finished store for a stale one
        let lock_path = self.dest.join(".lock");
        std::fs::remove_file(&lock_path).map_err(|e| Error::io("remove", &lock_path, e))
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
        if self.inner.lock().is_ok_and(|i| !i.settled) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Units for ZarrStream {
    fn unit_of(&self, e: u64) -> usize {
        self.slab_of(e)
    }
    fn unit_elems(&self, u: usize) -> (u64, u64) {
        self.slab_elems(u)
    }
    fn units(&self) -> usize {
        self.slabs()
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
