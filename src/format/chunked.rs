//! Reading windows of tensors stored in compressed chunks (GeoTIFF strips and tiles, Zarr
//! chunks), for the same pipeline that maps windows of `.npy` files.
//!
//! A compressed chunk cannot be mapped: it has to be decoded whole. A tile's windows are
//! therefore served by decoding every chunk they touch, once per tile (all the windows a
//! tile takes from one file are read together, so the red and near-infrared bands of a
//! pixel-interleaved scene cost one decode, not two), and copying the touched runs out
//! into compact buffers laid out exactly like a mapped window would be. Chunks are decoded
//! in parallel, a bounded batch at a time: the decode scratch is
//! [`Chunked::scratch_bytes`], which the engine takes out of the budget before planning.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::Touch;

/// Most memory the cache of decoded chunks may hold.
const CACHE_MAX: u64 = 64 << 20;

/// Bookkeeping of one decoded chunk beyond its bytes (its buffer's header and allocator
/// overhead, its cache entry): counted with every chunk, so that stores of tiny chunks
/// cost what they hold.
const CHUNK_OVERHEAD: u64 = 96;

/// Decoded bytes a batch aims for when chunks are small: enough that the handing out of
/// parallel work does not dominate decoding.
const BATCH_TARGET: u64 = 1 << 20;

/// Chunks a batch of a source fetched over a network aims for (when the budget holds
/// them): as many requests in flight at once.
const NETWORK_BATCH: u64 = 32;

/// Pieces of windows gathered before the chunks they need are decoded: bounds the
/// bookkeeping of a tile whatever the chunk size (a store of 1x1 chunks has one piece
/// per element).
const PIECE_GROUP: usize = 1 << 14;

/// A tensor stored as a regular grid of chunks, each decodable on its own.
pub trait ChunkSource: Send + Sync + fmt::Debug {
    /// Shape of a (full) chunk, in the tensor's own axes.
    fn chunk_shape(&self) -> &[usize];
    /// Decodes the chunk at grid position `pos` into `out`, C order over the full chunk
    /// shape (parts past the tensor's edge are left as they are). `out` holds exactly
    /// one full chunk.
    ///
    /// # Errors
    /// Any failure to read or decode the chunk, naming the file.
    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()>;
    /// Bytes the source holds for as long as it is open (a TIFF's chunk offset tables),
    /// counted with the decode scratch.
    fn resident_bytes(&self) -> u64 {
        0
    }
    /// Memory one [`ChunkSource::decode`] holds beyond its output (the stored bytes it
    /// reads, intermediate buffers); at least one decoded chunk is always counted.
    fn work_bytes(&self) -> u64 {
        0
    }
    /// Memory each chunk of a batch holds while [`ChunkSource::decode_batch`] runs,
    /// beyond its decoded bytes: a source that fetches a whole batch's stored bytes at
    /// once (an object store's, in concurrent requests) holds them all. 0 for sources
    /// that read each chunk as they decode it.
    fn fetch_bytes(&self) -> u64 {
        0
    }
    /// Decodes the chunk at `pos[i]` into `outs[i]` for each `i`, as
    /// [`ChunkSource::decode`] does. By default each on its own, in parallel on the I/O
    /// pool, `per_task` chunks to a task (a batch no larger than that on this thread);
    /// a source read over a network fetches the batch with fewer, concurrent requests.
    ///
    /// # Errors
    /// The first chunk that fails to read or decode.
    fn decode_batch(
        &self,
        pos: &[Vec<usize>],
        outs: &mut [Vec<u8>],
        per_task: usize,
    ) -> Result<()> {
        decode_each(self, pos, outs, per_task)
    }
}

/// [`ChunkSource::decode_batch`]'s default: each chunk decoded on its own, in parallel.
///
/// # Errors
/// The first chunk that fails to read or decode.
pub fn decode_each<S: ChunkSource + ?Sized>(
    source: &S,
    pos: &[Vec<usize>],
    outs: &mut [Vec<u8>],
    per_task: usize,
) -> Result<()> {
    // a batch one task would decode anyway is decoded here: handing it to the pool and
    // waiting costs more than decoding small chunks (a TIFF of 16 x 16 tiles: about 80 us
    // a batch)
    if pos.len() <= per_task {
        return pos
            .iter()
            .zip(outs.iter_mut())
            .try_for_each(|(p, o)| source.decode(p, o));
    }
    crate::io::pool::install(|| {
        pos.par_iter()
            .zip(outs.par_iter_mut())
            .with_min_len(per_task)
            .try_for_each(|(p, o)| source.decode(p, o))
    })
}

/// A chunked tensor: its shape, dtype and the source of its chunks.
#[derive(Debug)]
pub struct Chunked {
    shape: Vec<usize>,
    dtype: DType,
    source: Box<dyn ChunkSource>,
    /// Chunks decoded at once (the decode scratch holds this many decoded chunks).
    batch: AtomicUsize,
    /// Recently decoded chunks, so that a chunk row shared by consecutive tiles (whose
    /// rows rarely fall on chunk boundaries) is decoded once, not once per tile.
    cache: Mutex<Cache>,
    /// Decoded-chunk buffers no longer used (evicted from the cache, or never kept),
    /// at most one batch of them, reused by the next decodes: a chunk of several MiB then costs
    /// neither fresh zeroed pages nor an allocation that the allocator keeps per thread
    /// after it is freed. Counted within the batch of [`Chunked::batch_cost`]: a batch
    /// in flight takes its buffers from here first.
    spare: Mutex<Vec<Vec<u8>>>,
    /// Chunks decoded so far.
    decoded: AtomicU64,
}

/// Least-recently-used decoded chunks, up to `capacity` bytes (each counted with
/// [`CHUNK_OVERHEAD`]).
#[derive(Debug, Default)]
struct Cache {
    capacity: u64,
    held: u64,
    /// Chunk key to (chunk, last use).
    map: HashMap<u64, (Arc<Vec<u8>>, u64)>,
    /// Last use to chunk key: the oldest first.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl Cache {
    fn cost(v: &[u8]) -> u64 {
        v.len() as u64 + CHUNK_OVERHEAD
    }

    fn get(&mut self, key: u64) -> Option<Arc<Vec<u8>>> {
        self.clock += 1;
        let now = self.clock;
        let (v, used) = self.map.get_mut(&key)?;
        self.order.remove(used);
        *used = now;
        self.order.insert(now, key);
        Some(Arc::clone(v))
    }

    /// Keeps `v` under `key`; returns what it does not keep (`v` itself, or the chunks
    /// evicted for it).
    fn put(&mut self, key: u64, v: Arc<Vec<u8>>) -> Vec<Arc<Vec<u8>>> {
        let n = Self::cost(&v);
        if n > self.capacity || self.map.contains_key(&key) {
            return vec![v];
        }
        let mut dropped = Vec::new();
        while self.held + n > self.capacity {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            if let Some((o, _)) = self.map.remove(&old) {
                self.held -= Self::cost(&o);
                dropped.push(o);
            }
        }
        self.clock += 1;
        self.held += n;
        self.map.insert(key, (v, self.clock));
        self.order.insert(self.clock, key);
        dropped
    }

    /// Empties the cache and sets its capacity.
    fn resize(&mut self, capacity: u64) {
        *self = Cache {
            capacity,
            ..Cache::default()
        };
    }
}

/// One piece of a window that lies in one chunk: `len` elements from element `at` of
/// the decoded chunk to element `out_at` of window `out`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    key: u64,
    out: usize,
    out_at: usize,
    at: usize,
    len: usize,
}

impl Chunked {
    /// A chunked tensor of `shape` and `dtype` read from `source`, with the decode
    /// scratch it would choose without a budget (see [`Chunked::fit_scratch`]).
    #[must_use]
    pub fn new(shape: Vec<usize>, dtype: DType, source: Box<dyn ChunkSource>) -> Self {
        let c = Chunked {
            shape,
            dtype,
            source,
            batch: AtomicUsize::new(1),
            cache: Mutex::default(),
            spare: Mutex::default(),
            decoded: 0.into(),
        };
        c.fit_scratch(u64::MAX);
        c
    }

    /// The chunk shape.
    #[must_use]
    pub fn chunk_shape(&self) -> &[usize] {
        self.source.chunk_shape()
    }

    /// Chunks decoded since the file was opened (a chunk decoded twice counts twice):
    /// how well tiles and the cache line up with the file's chunks.
    #[must_use]
    pub fn decoded_chunks(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// Number of chunks in the tensor.
    #[must_use]
    pub fn num_chunks(&self) -> u64 {
        self.shape
            .iter()
            .zip(self.chunk_shape())
            .map(|(&n, &c)| n.div_ceil(c.max(1)) as u64)
            .product()
    }

    /// Bytes of one decoded chunk.
    #[must_use]
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_shape()
            .iter()
            .map(|&d| d as u64)
            .product::<u64>()
            * self.dtype.size() as u64
    }

    /// Memory one decoding thread holds beyond the decoded chunk.
    fn work(&self) -> u64 {
        self.source.work_bytes().max(self.chunk_bytes())
    }

    /// The decode scratch for a batch of `batch` chunks: the decoded chunks, and the
    /// working memory of each thread decoding them.
    fn batch_cost(&self, batch: usize) -> u64 {
        let threads = crate::io::pool::threads().min(batch).max(1);
        batch as u64 * (self.chunk_bytes() + CHUNK_OVERHEAD + self.source.fetch_bytes())
            + threads as u64 * self.work()
    }

    /// The smallest decode scratch: one chunk decoded at a time, no cache.
    #[must_use]
    pub fn min_scratch_bytes(&self) -> u64 {
        self.batch_cost(1) + self.source.resident_bytes()
    }

    /// Sizes the decode scratch (chunks decoded at once, and the cache of decoded
    /// chunks) to fit `share` bytes where it can: never less than
    /// [`Chunked::min_scratch_bytes`] (one chunk at a time, no cache), more when the
    /// share allows, which is faster (decoding in parallel, and chunk rows shared by
    /// consecutive tiles decoded once). Empties the cache.
    pub fn fit_scratch(&self, share: u64) {
        self.fit_scratch_across(share, None);
    }

    /// [`Chunked::fit_scratch`] for reads that touch only `across_window` chunks of the last
    /// axis (a window's columns; `None`: all of them), whose chunk rows the cache is
    /// sized to hold.
    pub fn fit_scratch_across(&self, share: u64, across_window: Option<u64>) {
        let n_chunks = self.num_chunks().max(1);
        let threads = crate::io::pool::threads() as u64;
        let unit = self.chunk_bytes() + CHUNK_OVERHEAD;
        // a source fetched over a network keeps more requests in flight than there are
        // threads: its batch is what hides the latency of each request
        let network = if self.source.fetch_bytes() > 0 {
            NETWORK_BATCH
        } else {
            1
        };
        let want_batch = (2 * threads)
            .max(BATCH_TARGET / unit)
            .max(network)
            .min(n_chunks)
            .max(1) as usize;
        let avail = share.saturating_sub(self.source.resident_bytes());
        // first a batch per thread pair (halved until it fits), then the cache, then a
        // larger batch with what is left (for small chunks, whose decoding is cheap next
        // to handing it out)
        let mut batch = (2 * threads).min(n_chunks).max(1) as usize;
        while batch > 1 && self.batch_cost(batch) > avail {
            batch /= 2;
        }
        // three rows of chunks across the last axis (the chunk rows a tile and its halo
        // span, and the next one, with room for least-recently-used order to keep the
        // shared row), at most 64 MiB
        let across = match (self.shape.last(), self.chunk_shape().last()) {
            (Some(&n), Some(&c)) => n.div_ceil(c.max(1)) as u64,
            _ => 1,
        };
        let across = across.min(across_window.unwrap_or(u64::MAX)).max(1);
        let ideal = (3 * across * unit)
            .min(CACHE_MAX.max(unit))
            .min(n_chunks * unit);
        let mut cache = ideal.min(avail.saturating_sub(self.batch_cost(batch)));
        if cache < unit {
            cache = 0;
        }
        while 2 * batch <= want_batch && self.batch_cost(2 * batch) + cache <= avail {
            batch *= 2;
        }
        self.batch.store(batch, Ordering::Relaxed);
        if let Ok(mut c) = self.cache.lock() {
            c.resize(cache);
        }
        if let Ok(mut spare) = self.spare.lock() {
            spare.clear();
        }
    }

    fn cache_capacity(&self) -> u64 {
        self.cache.lock().map_or(0, |c| c.capacity)
    }

    /// Memory the decoding of a window may hold beyond the window itself: the cache of
    /// recent chunks, one batch of decoded chunks, the working memory of each decoding
    /// thread, and what the source keeps open.
    #[must_use]
    pub fn scratch_bytes(&self) -> u64 {
        self.cache_capacity()
            + self.batch_cost(self.batch.load(Ordering::Relaxed))
            + self.source.resident_bytes()
    }

    /// The decode scratch in words, for plans: chunks decoded at once and the cache.
    #[must_use]
    pub fn describe_scratch(&self) -> String {
        let batch = self.batch.load(Ordering::Relaxed);
        let cache = self.cache_capacity();
        format!(
            "{} at a time of {} chunks of {}, {}{}",
            batch,
            crate::format::fmt_shape(self.chunk_shape()),
            fmt_bytes(self.chunk_bytes()),
            if cache == 0 {
                "no chunk cache".to_string()
            } else {
                format!("{} chunk cache", fmt_bytes(cache))
            },
            if self.source.fetch_bytes() > 0 {
                format!("; up to {batch} requests in flight")
            } else {
                String::new()
            }
        )
    }

    /// Reads windows `(start, count, touch)` (flat element ranges, as
    /// [`TensorFile::map_window_touch`](crate::format::TensorFile::map_window_touch) takes them)
    /// into compact buffers, decoding each chunk they touch once (when the cache holds
    /// the chunk rows a tile spans; with a small cache a chunk may be decoded again).
    ///
    /// # Errors
    /// The first chunk that fails to decode.
    pub fn read(&self, windows: &[(u64, u64, Touch)]) -> Result<Vec<Vec<u8>>> {
        let parts: Vec<&[(u64, u64, Touch)]> = windows.iter().map(std::slice::from_ref).collect();
        self.read_joined(&parts)
    }

    /// Reads windows each made of several reads of the tensor's elements, one after
    /// another (how a window of the tensor, [`TensorFile::window`](crate::format::TensorFile::window),
    /// is laid out), as [`Chunked::read`] reads each.
    ///
    /// # Errors
    /// The first chunk that fails to decode.
    pub fn read_joined<P: AsRef<[(u64, u64, Touch)]>>(
        &self,
        windows: &[P],
    ) -> Result<Vec<Vec<u8>>> {
        let es = self.dtype.size();
        let rank = self.shape.len();
        let chunk = self.chunk_shape().to_vec();
        let last = self.shape.last().copied().unwrap_or(1).max(1) as u64;
        let cw = chunk.last().copied().unwrap_or(1).max(1);
        // chunk grid extents
        let grid: Vec<usize> = self
            .shape
            .iter()
            .zip(&chunk)
            .map(|(&n, &c)| n.div_ceil(c.max(1)))
            .collect();
        let mut outs: Vec<Vec<u8>> = windows
            .iter()
            .map(|parts| {
                let elems: u64 = parts.as_ref().iter().map(|&(_, n, t)| t.touched(n)).sum();
                vec![0u8; elems as usize * es]
            })
            .collect();
        let mut group: Vec<Piece> = Vec::with_capacity(PIECE_GROUP);
        let mut coords = vec![0usize; rank];
        for (w, parts) in windows.iter().enumerate() {
            let mut out_at = 0usize;
            let runs = parts.as_ref().iter().flat_map(|&(s, n, t)| t.runs(s, n));
            for (first, n) in runs {
                // split at the tensor's rows (runs along the last axis)
                let mut e = first;
                let end = e + n;
                while e < end {
                    let run_end = ((e / last + 1) * last).min(end);
                    let mut rem = e;
                    for a in (0..rank).rev() {
                        let d = self.shape[a].max(1) as u64;
                        coords[a] = (rem % d) as usize;
                        rem /= d;
                    }
                    let c_first = coords[rank - 1];
                    let c_end = c_first + (run_end - e) as usize;
                    // the chunk row holding this run, then the chunks along the last axis
                    let mut key_prefix = 0u64;
                    let mut within_prefix = 0usize;
                    for a in 0..rank - 1 {
                        key_prefix = key_prefix * grid[a] as u64 + (coords[a] / chunk[a]) as u64;
                        within_prefix = within_prefix * chunk[a] + coords[a] % chunk[a];
                    }
                    let mut c = c_first;
                    while c < c_end {
                        let cx = c / cw;
                        let piece_end = ((cx + 1) * cw).min(c_end);
                        group.push(Piece {
                            key: key_prefix * grid[rank - 1] as u64 + cx as u64,
                            out: w,
                            out_at: out_at + (c - c_first),
                            at: within_prefix * cw + c % cw,
                            len: piece_end - c,
                        });
                        if group.len() == PIECE_GROUP {
                            self.serve(&mut group, &mut outs, &grid)?;
                        }
                        c = piece_end;
                    }
                    out_at += (run_end - e) as usize;
                    e = run_end;
                }
            }
        }
        self.serve(&mut group, &mut outs, &grid)?;
        Ok(outs)
    }

    /// Copies the pieces of `group` into `outs`, from the cache or from chunks decoded
    /// now (in parallel, a batch at a time), and empties `group`.
    fn serve(&self, group: &mut Vec<Piece>, outs: &mut [Vec<u8>], grid: &[usize]) -> Result<()> {
        let es = self.dtype.size();
        group.sort_by_key(|p| p.key);
        let copy = |outs: &mut [Vec<u8>], pieces: &[Piece], buf: &[u8]| {
            for p in pieces {
                outs[p.out][p.out_at * es..(p.out_at + p.len) * es]
                    .copy_from_slice(&buf[p.at * es..(p.at + p.len) * es]);
            }
        };
        // the pieces of each chunk, served from the cache where it can
        let mut missing: Vec<&[Piece]> = Vec::new();
        for pieces in group.chunk_by(|a, b| a.key == b.key) {
            let hit = self
                .cache
                .lock()
                .ok()
                .and_then(|mut c| c.get(pieces[0].key));
            match hit {
                Some(buf) => copy(outs, pieces, &buf),
                None => missing.push(pieces),
            }
        }
        let chunk_bytes = self.chunk_bytes() as usize;
        let batch = self.batch.load(Ordering::Relaxed).max(1);
        // small chunks go to a thread several at a time
        let per_task = (BATCH_TARGET as usize / 8 / chunk_bytes.max(1)).max(1);
        let rank = grid.len();
        for b in missing.chunks(batch) {
            let pos: Vec<Vec<usize>> = b
                .iter()
                .map(|pieces| {
                    let mut pos = vec![0usize; rank];
                    let mut rem = pieces[0].key;
                    for a in (0..rank).rev() {
                        pos[a] = (rem % grid[a] as u64) as usize;
                        rem /= grid[a] as u64;
                    }
                    pos
                })
                .collect();
            // a spare buffer is zeroed as a fresh one would be: a source may leave bytes
            // it does not write (past the tensor's edge, a short last strip) as they are
            let mut reused: Vec<Vec<u8>> = match self.spare.lock() {
                Ok(mut s) => {
                    let keep = s.len().saturating_sub(b.len());
                    s.split_off(keep)
                }
                Err(_) => Vec::new(),
            };
            reused.retain(|v| v.len() == chunk_bytes);
            if reused.len() > per_task {
                crate::io::pool::install(|| reused.par_iter_mut().for_each(|v| v.fill(0)));
            } else {
                for v in &mut reused {
                    v.fill(0);
                }
            }
            let fresh = b.len() - reused.len();
            let mut bufs = reused;
            bufs.extend((0..fresh).map(|_| vec![0u8; chunk_bytes]));
            self.source.decode_batch(&pos, &mut bufs, per_task)?;
            self.decoded.fetch_add(b.len() as u64, Ordering::Relaxed);
            for (pieces, buf) in b.iter().zip(bufs) {
                let buf = Arc::new(buf);
                copy(outs, pieces, &buf);
                let dropped = match self.cache.lock() {
                    Ok(mut c) => c.put(pieces[0].key, buf),
                    Err(_) => vec![buf],
                };
                // what the cache does not keep is spare, up to one batch of buffers
                if let Ok(mut spare) = self.spare.lock() {
                    for d in dropped {
                        if spare.len() < batch
                            && let Ok(v) = Arc::try_unwrap(d)
                        {
                            spare.push(v);
                        }
                    }
                }
            }
        }
        group.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3-D u16 tensor whose element at flat index i is i (mod 2^16), in chunks.
    #[derive(Debug)]
    struct Counting {
        shape: Vec<usize>,
        chunk: Vec<usize>,
        decodes: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ChunkSource for Counting {
        fn chunk_shape(&self) -> &[usize] {
            &self.chunk
        }
        fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
            self.decodes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (c0, c1, c2) = (self.chunk[0], self.chunk[1], self.chunk[2]);
            for i in 0..c0 {
                for j in 0..c1 {
                    for k in 0..c2 {
                        let (a, b, c) = (pos[0] * c0 + i, pos[1] * c1 + j, pos[2] * c2 + k);
                        if a < self.shape[0] && b < self.shape[1] && c < self.shape[2] {
                            let v = ((a * self.shape[1] + b) * self.shape[2] + c) as u16;
                            let at = ((i * c1 + j) * c2 + k) * 2;
                            out[at..at + 2].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            Ok(())
        }
    }

    fn values(b: &[u8]) -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    }

    #[test]
    fn windows_match_flat_order_across_chunk_edges() {
        let shape = vec![3, 13, 11];
        let t = Chunked::new(
            shape.clone(),
            DType::U16,
            Box::new(Counting {
                shape,
                chunk: vec![2, 4, 5],
                decodes: Arc::default(),
            }),
        );
        let total = 3 * 13 * 11;
        for (start, count) in [(0u64, total as u64), (7, 100), (140, 3), (142, 287)] {
            let got = t.read(&[(start, count, Touch::All)]).expect("read");
            let want: Vec<u16> = (start..start + count).map(|i| i as u16).collect();
            assert_eq!(values(&got[0]), want, "window {start}+{count}");
        }
        // column runs of rows of 11 elements, from two windows at once
        let touch = Touch::Rows {
            row: 11,
            runs: [(0, 2), (4, 6), (0, 0)],
            nruns: 2,
        };
        let got = t
            .read(&[(22, 44, touch), (143, 11, Touch::All)])
            .expect("read");
        let mut want = Vec::new();
        for r in 0..4u64 {
            for (c0, n) in [(0u64, 2u64), (4, 6)] {
                want.extend((0..n).map(|k| (22 + r * 11 + c0 + k) as u16));
            }
        }
        assert_eq!(values(&got[0]), want);
        assert_eq!(
            values(&got[1]),
            (143..154).map(|i| i as u16).collect::<Vec<_>>()
        );
    }

    #[test]
    fn consecutive_tiles_decode_a_shared_chunk_row_once() {
        // one plane of 8 rows x 40 columns in 4x10 chunks: two chunk rows of 4 chunks
        let shape = vec![1, 8, 40];
        let decodes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let src = Counting {
            shape: shape.clone(),
            chunk: vec![1, 4, 10],
            decodes: Arc::clone(&decodes),
        };
        let t = Chunked::new(shape, DType::U16, Box::new(src));
        // tiles of 3 rows: rows 0-2, 3-5, 6-7 touch chunk rows {0}, {0, 1}, {1}
        for (r0, rows) in [(0u64, 3u64), (3, 3), (6, 2)] {
            let got = t.read(&[(r0 * 40, rows * 40, Touch::All)]).expect("read");
            let want: Vec<u16> = (r0 * 40..(r0 + rows) * 40).map(|i| i as u16).collect();
            assert_eq!(values(&got[0]), want);
        }
        // 8 chunks in all; without the cache the middle tile would decode 8 on its own
        assert_eq!(decodes.load(std::sync::atomic::Ordering::Relaxed), 8);
    }
}
