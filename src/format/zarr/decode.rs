//! Decoding Zarr v3 chunks exactly and within a bound, as tilestream's own code rather
//! than through `zarrs`: every decoder stops at the size the metadata allows (a chunk
//! that inflates to gigabytes costs no more than the chunk it claims to be), a sharded array
//! is read one *inner* chunk at a time (its shard index located, checked and cached, the
//! inner chunk's bytes read with one `pread`), and a missing chunk costs one failed
//! `open`, not a pass through a codec pipeline.
//!
//! What it decodes: the `bytes` codec (either byte order), `transpose` before it,
//! `zstd`, `gzip`, `blosc` and `crc32c` after it, and `sharding_indexed` (index at the
//! end or the start, `bytes` + optional `crc32c` index codecs) with any of those inside;
//! the `default` and `v2` chunk key encodings; every fill value form the specification
//! allows for tilestream's types. Anything else is refused in one line naming it, never
//! decoded approximately. Writing stays with `zarrs` (see [`crate::format::zarr`]).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::dtype::DType;
use crate::error::{Error, Result, ZarrError};
use crate::io::remote::{self, Object};
use crate::io::source::{COALESCE_GAP, Source, fetch_coalesced};

use crate::format::zarr::codec::{Chain, Compressor, Storage, max_encoded};
pub use crate::format::zarr::codec::{Codecs, parse};
pub(crate) use undo::{blosc, bounded_read};
use undo::{undo, untranspose};

mod undo;

/// Largest shard index tilestream reads: 16 bytes per inner chunk, so 2^20 inner chunks
/// per shard. A larger index would be one allocation beyond any sensible budget.
const INDEX_MAX: u64 = 16 << 20;

/// Decoded shard indexes kept, at most this many bytes (at least one index, at most
/// every shard's).
const INDEX_CACHE: u64 = 1 << 20;

/// Shards remembered in the index cache (missing shards included), at most.
const INDEX_ENTRIES: usize = 4096;

/// Decodes chunks (or, for sharded arrays, inner chunks) of one Zarr v3 array.
#[derive(Debug)]
pub struct ZarrDecoder {
    /// The store: a local directory, or the URL of an object-store prefix (its keys
    /// joined with `/`, as a path joins them).
    root: PathBuf,
    /// Whether `root` is a URL ([`remote::is_url`]).
    remote: bool,
    dtype: DType,
    /// The unit decoded: the chunk, or the inner chunk of a sharded array.
    unit: Vec<usize>,
    codecs: Codecs,
    /// Shard indexes by shard key, newest last; `None` for a missing shard.
    indexes: Mutex<IndexCache>,
    /// Bytes of shard indexes kept.
    index_cache: u64,
    /// Directories of chunk keys found missing (a sparse store's absent rows): their
    /// chunks are fill without a failed `open` each. At most [`MISSING_DIRS`].
    missing_dirs: Mutex<std::collections::HashSet<PathBuf>>,
}

/// Where an inner chunk is stored (see [`ZarrDecoder::inner_entry`]).
#[derive(Debug)]
struct InnerEntry {
    shard: Arc<Shard>,
    off: u64,
    n: u64,
    path: PathBuf,
    what: String,
}

/// Missing chunk directories remembered (then forgotten all at once).
const MISSING_DIRS: usize = 1024;

/// A shard's decoded index, (offset, bytes) per inner chunk, and for a shard in an object
/// store the object its inner chunks are read from (opened once, with the index).
#[derive(Debug)]
struct Shard {
    index: Vec<u64>,
    object: Option<Arc<Object>>,
}

#[derive(Debug, Default)]
struct IndexCache {
    map: HashMap<Vec<usize>, Option<Arc<Shard>>>,
    order: VecDeque<Vec<usize>>,
    held: u64,
}

impl ZarrDecoder {
    /// A decoder for the store at `root` of an array of `shape` whose grid has chunks of
    /// `chunk_shape`.
    ///
    /// # Errors
    /// [`Error::Zarr`] if a shard's index would be larger than 16 MiB.
    pub fn new(
        root: &Path,
        dtype: DType,
        shape: &[usize],
        chunk_shape: &[usize],
        codecs: Codecs,
    ) -> Result<Self> {
        let unit = match &codecs.storage {
            Storage::Plain(_) => chunk_shape.to_vec(),
            Storage::Sharded { inner, .. } => inner.clone(),
        };
        let shards: u64 = shape
            .iter()
            .zip(chunk_shape)
            .map(|(&n, &c)| n.div_ceil(c.max(1)) as u64)
            .product();
        let mut dec = ZarrDecoder {
            root: root.to_path_buf(),
            remote: remote::is_url(root),
            dtype,
            unit,
            codecs,
            indexes: Mutex::default(),
            index_cache: 0,
            missing_dirs: Mutex::default(),
        };
        if dec.index_bytes() > INDEX_MAX {
            return Err(Error::zarr(
                root.join("zarr.json"),
                ZarrError::TooLarge,
                format!(
                    "each shard indexes {} inner chunks ({} of index); tilestream reads \
                     shard indexes of at most {}",
                    dec.index_bytes() / 16,
                    crate::budget::fmt_bytes(dec.index_bytes()),
                    crate::budget::fmt_bytes(INDEX_MAX)
                ),
            ));
        }
        let n = dec.index_bytes();
        dec.index_cache = n.max(INDEX_CACHE.min(n.saturating_mul(shards)));
        Ok(dec)
    }

    /// Shape of the unit [`ZarrDecoder::decode`] decodes.
    #[must_use]
    pub fn unit_shape(&self) -> &[usize] {
        &self.unit
    }

    fn unit_bytes(&self) -> u64 {
        self.unit.iter().map(|&d| d as u64).product::<u64>() * self.dtype.size() as u64
    }

    /// Bytes of one decoded shard index (0 for an array without shards).
    fn index_bytes(&self) -> u64 {
        match &self.codecs.storage {
            Storage::Plain(_) => 0,
            Storage::Sharded { per_shard, .. } => per_shard
                .iter()
                .try_fold(16u64, |n, &p| n.checked_mul(p as u64))
                .unwrap_or(u64::MAX),
        }
    }

    /// Memory the decoder holds while open: its cache of shard indexes (their bytes and
    /// their entries) and the missing directories it remembers.
    #[must_use]
    pub fn resident_bytes(&self) -> u64 {
        let path = self.root.as_os_str().len() as u64 + 32;
        let entries = if self.index_bytes() > 0 {
            INDEX_ENTRIES as u64 * (96 + 8 * self.unit.len() as u64)
        } else {
            0
        };
        self.index_cache + entries + MISSING_DIRS as u64 * (64 + path)
    }

    /// Memory one decode holds beyond its output: the stored bytes and, for a chain of
    /// several codecs, one intermediate buffer.
    #[must_use]
    pub fn work_bytes(&self) -> u64 {
        let chain = self.chain();
        let stored = chain.max_stored(self.unit_bytes());
        if chain.compressors.len() > 1 || chain.order.is_some() {
            2 * stored
        } else {
            stored
        }
    }

    fn chain(&self) -> &Chain {
        match &self.codecs.storage {
            Storage::Plain(c) | Storage::Sharded { chain: c, .. } => c,
        }
    }

    /// Store key of the grid chunk (or shard) at `pos`.
    fn key(&self, pos: &[usize]) -> String {
        let sep = self.codecs.separator.to_string();
        let parts: Vec<String> = pos.iter().map(ToString::to_string).collect();
        if self.codecs.v2_keys {
            parts.join(&sep)
        } else {
            let mut k = String::from("c");
            for p in parts {
                k.push_str(&sep);
                k.push_str(&p);
            }
            k
        }
    }

    /// Whether the store is in an object store (read with [`ZarrDecoder::decode_batch`]).
    #[must_use]
    pub fn is_remote(&self) -> bool {
        self.remote
    }

    /// Memory each unit of a [`ZarrDecoder::decode_batch`] holds beyond its decoded
    /// bytes: a store in an object store has the whole batch's stored bytes fetched at
    /// once (a shard's with the gaps of coalesced requests, a copy of each inner chunk's
    /// bytes cut from them, and the shard's index); a local store reads each as it
    /// decodes it (0).
    #[must_use]
    pub fn fetch_bytes(&self) -> u64 {
        if !self.remote {
            return 0;
        }
        let stored = self.chain().max_stored(self.unit_bytes());
        match &self.codecs.storage {
            Storage::Plain(_) => stored,
            // and the index of its shard, which the batch holds until it is decoded (a
            // batch may span as many shards as it has chunks)
            Storage::Sharded { .. } => 2 * stored + self.coalesce_gap() + self.index_bytes(),
        }
    }

    /// The largest gap between two ranges of a shard fetched with one request:
    /// [`COALESCE_GAP`], or less for small chunks (no more than one chunk can store),
    /// so that the gaps a batch fetches cost no more than its chunks.
    fn coalesce_gap(&self) -> u64 {
        COALESCE_GAP.min(self.chain().max_stored(self.unit_bytes()))
    }

    fn stored_too_large(&self, path: &Path, what: &str, stored: u64) -> Error {
        Error::zarr_at(
            path,
            ZarrError::StoredTooLarge {
                chunk: what.to_string(),
                stored,
                chunk_size: crate::budget::fmt_bytes(self.unit_bytes()),
                max: self.chain().max_stored(self.unit_bytes()),
            },
        )
    }

    /// Where the inner chunk at `pos` of a sharded array is stored: its shard (with the
    /// shard's path and the chunk's name, for errors), offset and stored size; `None`
    /// if its shard or its entry is missing (the fill value).
    fn inner_entry(&self, pos: &[usize]) -> Result<Option<InnerEntry>> {
        let Storage::Sharded { per_shard, .. } = &self.codecs.storage else {
            return Ok(None);
        };
        let shard: Vec<usize> = pos.iter().zip(per_shard).map(|(&p, &n)| p / n).collect();
        let within = pos
            .iter()
            .zip(per_shard)
            .fold(0usize, |k, (&p, &n)| k * n + p % n);
        let path = self.root.join(self.key(&shard));
        let what = format!("inner chunk {pos:?} of shard {shard:?}");
        let Some(sh) = self.index(&shard, &path)? else {
            return Ok(None);
        };
        let (off, n) = (sh.index[2 * within], sh.index[2 * within + 1]);
        if off == u64::MAX && n == u64::MAX {
            return Ok(None);
        }
        let max = self.chain().max_stored(self.unit_bytes());
        if n > max {
            return Err(Error::zarr_at(
                &path,
                ZarrError::IndexEntryTooLarge {
                    chunk: what,
                    stored: n,
                    max,
                },
            ));
        }
        Ok(Some(InnerEntry {
            shard: sh,
            off,
            n,
            path,
            what,
        }))
    }

    /// Decodes the unit at `pos` (in the grid of [`ZarrDecoder::unit_shape`]) into
    /// `out`, which holds exactly one unit, C order.
    ///
    /// # Errors
    /// [`Error::Zarr`] naming the chunk for anything corrupt, oversized or truncated;
    /// [`Error::Io`] if it cannot be read.
    pub fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let stored = match &self.codecs.storage {
            Storage::Plain(chain) => {
                let path = self.root.join(self.key(pos));
                let what = format!("chunk {pos:?}");
                let max = chain.max_stored(self.unit_bytes());
                self.read_whole(&path, max, |stored| {
                    self.stored_too_large(&path, &what, stored)
                })?
                .map(|bytes| (bytes, path, what))
            }
            Storage::Sharded { .. } => match self.inner_entry(pos)? {
                None => None,
                Some(e) => {
                    let bytes = match &e.shard.object {
                        Some(o) => {
                            let mut buf = vec![0u8; e.n as usize];
                            o.read_exact_at(&mut buf, e.off)
                                .map_err(|err| Error::io("read", &e.path, err))?;
                            buf
                        }
                        None => {
                            let f = open_chunk(&e.path)?.ok_or_else(|| {
                                Error::zarr(
                                    &e.path,
                                    ZarrError::Corrupt,
                                    "the shard disappeared while it was read",
                                )
                            })?;
                            read_at(&Source::File(f), &e.path, e.off, e.n)?
                        }
                    };
                    Some((bytes, e.path, e.what))
                }
            },
        };
        self.finish(stored, out)
    }

    /// Decodes stored bytes (with their chunk's path and name) into `out`, or fills it
    /// with the fill value for a missing chunk.
    fn finish(&self, stored: Option<(Vec<u8>, PathBuf, String)>, out: &mut [u8]) -> Result<()> {
        match stored {
            None => {
                for e in out.chunks_exact_mut(self.codecs.fill.len()) {
                    e.copy_from_slice(&self.codecs.fill);
                }
                Ok(())
            }
            Some((bytes, path, what)) => self.decode_chain(&path, &what, bytes, out),
        }
    }

    /// Decodes the units at `pos[i]` into `outs[i]` of a store in an object store: the
    /// whole batch's stored bytes fetched at once, in concurrent requests — one `GET` per
    /// chunk, or for inner chunks of a shard one ranged `GET` per run of them whose gaps
    /// are at most [`COALESCE_GAP`] and at most the most one chunk stores — then decoded
    /// in parallel. A local store's units
    /// are decoded one by one ([`ZarrDecoder::decode`]).
    ///
    /// # Errors
    /// As [`ZarrDecoder::decode`], for the first unit that fails.
    pub fn decode_batch(&self, pos: &[Vec<usize>], outs: &mut [Vec<u8>]) -> Result<()> {
        use rayon::prelude::*;
        let mut stored: Vec<Option<(Vec<u8>, PathBuf, String)>> = Vec::with_capacity(pos.len());
        match &self.codecs.storage {
            Storage::Plain(chain) => {
                let max = chain.max_stored(self.unit_bytes());
                let paths: Vec<PathBuf> = pos.iter().map(|p| self.root.join(self.key(p))).collect();
                let urls: Vec<String> = paths
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                let got = remote::fetch_whole_many(&urls, max)?;
                for ((p, path), g) in pos.iter().zip(paths).zip(got) {
                    let what = format!("chunk {p:?}");
                    stored.push(match g {
                        None => None,
                        Some(remote::Whole::TooLarge(n)) => {
                            return Err(self.stored_too_large(&path, &what, n));
                        }
                        Some(remote::Whole::Bytes(b)) => Some((b, path, what)),
                    });
                }
            }
            Storage::Sharded { .. } => {
                let entries = pos
                    .iter()
                    .map(|p| self.inner_entry(p))
                    .collect::<Result<Vec<_>>>()?;
                stored.resize_with(pos.len(), || None);
                // the entries of each shard, in the order of their bytes
                let mut order: Vec<usize> = (0..entries.len())
                    .filter(|&i| entries[i].is_some())
                    .collect();
                let at = |i: usize| entries[i].as_ref().map(|e| (Arc::as_ptr(&e.shard), e.off));
                order.sort_by_key(|&i| at(i));
                for group in order.chunk_by(|&a, &b| at(a).map(|x| x.0) == at(b).map(|x| x.0)) {
                    let Some(first) = entries[group[0]].as_ref() else {
                        continue;
                    };
                    let Some(object) = first.shard.object.as_ref() else {
                        return Err(Error::Internal(
                            "a local shard in a batch fetched from an object store".into(),
                        ));
                    };
                    let ranges: Vec<(u64, u64)> = group
                        .iter()
                        .filter_map(|&i| entries[i].as_ref().map(|e| (e.off, e.n)))
                        .collect();
                    let spans = fetch_coalesced(object, &ranges, self.coalesce_gap())
                        .map_err(|err| Error::io("read", &first.path, err))?;
                    for span in &spans {
                        for &k in &span.members {
                            let i = group[k];
                            if let Some(e) = entries[i].as_ref() {
                                let bytes = span.part(e.off, e.n).to_vec();
                                stored[i] = Some((bytes, e.path.clone(), e.what.clone()));
                            }
                        }
                    }
                }
            }
        }
        crate::io::pool::install(|| {
            stored
                .into_par_iter()
                .zip(outs.par_iter_mut())
                .try_for_each(|(s, out)| self.finish(s, out))
        })
    }

    /// The index of the shard at `shard`, stored at `path`: (offset, bytes) per inner
    /// chunk; `None` for a shard with no file.
    fn index(&self, shard: &[usize], path: &Path) -> Result<Option<Arc<Shard>>> {
        // first in, first out: tiles visit shards in order, so the oldest goes first
        if let Ok(c) = self.indexes.lock()
            && let Some(v) = c.map.get(shard).cloned()
        {
            return Ok(v);
        }
        let Storage::Sharded {
            index_big_endian,
            index_crc,
            index_at_start,
            ..
        } = &self.codecs.storage
        else {
            return Ok(None);
        };
        let idx = match self.open_blob(path)? {
            None => None,
            Some(f) => {
                let len = f.len(path)?;
                let entries = self.index_bytes();
                let size = entries + if *index_crc { 4 } else { 0 };
                if len < size {
                    return Err(Error::zarr_at(
                        path,
                        ZarrError::ShardTruncated {
                            shard: shard.to_vec(),
                            len,
                            index_bytes: size,
                        },
                    ));
                }
                let at = if *index_at_start { 0 } else { len - size };
                let raw = read_at(&f, path, at, size)?;
                let (body, crc) = raw.split_at(entries as usize);
                if *index_crc && crc32c::crc32c(body).to_le_bytes() != crc {
                    return Err(Error::zarr_at(
                        path,
                        ZarrError::IndexChecksum {
                            shard: shard.to_vec(),
                        },
                    ));
                }
                let v: Vec<u64> = body
                    .chunks_exact(8)
                    .map(|b| {
                        let b: [u8; 8] = b.try_into().unwrap_or_default();
                        if *index_big_endian {
                            u64::from_be_bytes(b)
                        } else {
                            u64::from_le_bytes(b)
                        }
                    })
                    .collect();
                // every stored inner chunk within the file
                for (k, e) in v.chunks_exact(2).enumerate() {
                    let (off, n) = (e[0], e[1]);
                    if (off, n) != (u64::MAX, u64::MAX)
                        && off.checked_add(n).is_none_or(|end| end > len)
                    {
                        return Err(Error::zarr_at(
                            path,
                            ZarrError::IndexPastEnd {
                                shard: shard.to_vec(),
                                inner: k,
                                offset: off,
                                stored: n,
                                len,
                            },
                        ));
                    }
                }
                let object = match f {
                    Source::Object(o) => Some(o),
                    Source::File(_) => None,
                };
                Some(Arc::new(Shard { index: v, object }))
            }
        };
        if let Ok(mut c) = self.indexes.lock() {
            let n = self.index_bytes();
            // bounded in bytes of index and in entries (a sparse store's missing shards
            // hold no index, but each entry costs its key)
            while c.held + n > self.index_cache || c.map.len() >= INDEX_ENTRIES {
                let Some(old) = c.order.pop_front() else {
                    break;
                };
                if let Some(Some(_)) = c.map.remove(&old) {
                    c.held -= n;
                }
            }
            if idx.is_some() {
                c.held += n;
            }
            c.map.insert(shard.to_vec(), idx.clone());
            c.order.push_back(shard.to_vec());
        }
        Ok(idx)
    }

    /// The chunk or shard at `path` opened for positioned reads (an object: one metadata
    /// request); `None` if there is none.
    fn open_blob(&self, path: &Path) -> Result<Option<Source>> {
        if self.remote {
            let url = path.to_str().unwrap_or_default();
            return Ok(Object::open_if_exists(url)?.map(|o| Source::Object(Arc::new(o))));
        }
        Ok(self.open_chunk(path)?.map(Source::File))
    }

    /// The whole chunk at `path` (an object: one request); `None` if there is none;
    /// `too_large(size)` if it is larger than `max` bytes (nothing of it read).
    fn read_whole(
        &self,
        path: &Path,
        max: u64,
        too_large: impl FnOnce(u64) -> Error,
    ) -> Result<Option<Vec<u8>>> {
        if self.remote {
            let url = path.to_str().unwrap_or_default();
            return match remote::fetch_whole(url, max)? {
                Some(remote::Whole::TooLarge(n)) => Err(too_large(n)),
                Some(remote::Whole::Bytes(b)) => Ok(Some(b)),
                None => Ok(None),
            };
        }
        let Some(f) = self.open_chunk(path)? else {
            return Ok(None);
        };
        let len = f
            .metadata()
            .map_err(|e| Error::io("inspect", path, e))?
            .len();
        if len > max {
            return Err(too_large(len));
        }
        read_at(&Source::File(f), path, 0, len).map(Some)
    }

    /// [`open_chunk`], skipping the `open` of a chunk whose directory is known missing.
    fn open_chunk(&self, path: &Path) -> Result<Option<File>> {
        let dir = path.parent();
        if let (Some(d), Ok(m)) = (dir, self.missing_dirs.lock())
            && m.contains(d)
        {
            return Ok(None);
        }
        let f = open_chunk(path)?;
        if f.is_none()
            && let Some(d) = dir
            && d != self.root
            && !d.exists()
            && let Ok(mut m) = self.missing_dirs.lock()
        {
            if m.len() >= MISSING_DIRS {
                m.clear();
            }
            m.insert(d.to_path_buf());
        }
        Ok(f)
    }

    /// Undoes the codec chain on `stored` into `out`.
    fn decode_chain(&self, path: &Path, what: &str, stored: Vec<u8>, out: &mut [u8]) -> Result<()> {
        let chain = self.chain();
        let need = out.len();
        // decoded size after each bytes-to-bytes codec, in writing order: exact while
        // only checksums have been added, bounded after a compressor
        let mut sizes = Vec::with_capacity(chain.compressors.len() + 1);
        let mut n = (need as u64, true);
        sizes.push(n);
        for c in &chain.compressors {
            n = match c {
                Compressor::Crc32c { .. } => (n.0 + 4, n.1),
                _ => (max_encoded(n.0), false),
            };
            sizes.push(n);
        }
        let mut data = stored;
        for (k, c) in chain.compressors.iter().enumerate().rev() {
            let (size, exact) = sizes[k];
            data = undo(path, what, *c, &data, size as usize, exact)?;
        }
        if data.len() != need {
            return Err(Error::zarr_at(
                path,
                ZarrError::ChunkSize {
                    chunk: what.to_string(),
                    expected: need,
                    found: data.len(),
                },
            ));
        }
        let es = self.dtype.size();
        if chain.big_endian {
            // each of a complex element's parts is swapped on its own
            for e in data.chunks_exact_mut(self.dtype.swap_unit()) {
                e.reverse();
            }
        }
        match &chain.order {
            Some(order) if order.iter().enumerate().any(|(i, &o)| i != o) => {
                untranspose(&data, out, &self.unit, order, es);
            }
            _ => out.copy_from_slice(&data),
        }
        Ok(())
    }
}

/// Opens a chunk or shard file: `None` if there is none (the fill value), an error if
/// it is not a regular file (a FIFO would block the run).
fn open_chunk(path: &Path) -> Result<Option<File>> {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            let m = f.metadata().map_err(|e| Error::io("inspect", path, e))?;
            if m.file_type().is_file() {
                Ok(Some(f))
            } else {
                Err(Error::zarr(
                    path,
                    ZarrError::Unsupported,
                    "a chunk of the store is not a regular file (a FIFO, device or directory)",
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("open", path, e)),
    }
}

fn read_at(f: &Source, path: &Path, off: u64, n: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n as usize];
    f.read_exact_at(&mut buf, off)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
