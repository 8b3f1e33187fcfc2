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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use super::Touch;
use crate::dtype::DType;
use crate::error::Result;

/// Most memory the cache of decoded chunks may hold.
const CACHE_MAX: u64 = 64 << 20;

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
}

/// A chunked tensor: its shape, dtype and the source of its chunks.
#[derive(Debug)]
pub struct Chunked {
    shape: Vec<usize>,
    dtype: DType,
    source: Box<dyn ChunkSource>,
    /// Chunks decoded at once (the decode scratch is this many chunks).
    batch: usize,
    /// Recently decoded chunks, so that a chunk row shared by consecutive tiles (whose
    /// rows rarely fall on chunk boundaries) is decoded once, not once per tile.
    cache: Mutex<Cache>,
    /// Chunks decoded so far.
    decoded: std::sync::atomic::AtomicU64,
}

/// Least-recently-used decoded chunks, up to `capacity` bytes.
#[derive(Debug, Default)]
struct Cache {
    capacity: u64,
    held: u64,
    map: HashMap<u64, Arc<Vec<u8>>>,
    order: VecDeque<u64>,
}

impl Cache {
    fn get(&mut self, key: u64) -> Option<Arc<Vec<u8>>> {
        let v = self.map.get(&key)?.clone();
        if let Some(i) = self.order.iter().position(|&k| k == key) {
            self.order.remove(i);
        }
        self.order.push_back(key);
        Some(v)
    }

    fn put(&mut self, key: u64, v: Arc<Vec<u8>>) {
        let n = v.len() as u64;
        if n > self.capacity || self.map.contains_key(&key) {
            return;
        }
        while self.held + n > self.capacity {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(o) = self.map.remove(&old) {
                self.held -= o.len() as u64;
            }
        }
        self.held += n;
        self.map.insert(key, v);
        self.order.push_back(key);
    }
}

/// One piece of a window that lies in one chunk: `len` elements from element `at` of
/// the decoded chunk to element `out_at` of window `out`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    out: usize,
    out_at: usize,
    at: usize,
    len: usize,
}

impl Chunked {
    /// A chunked tensor of `shape` and `dtype` read from `source`.
    #[must_use]
    pub fn new(shape: Vec<usize>, dtype: DType, source: Box<dyn ChunkSource>) -> Self {
        // never more chunks in flight or cached than the tensor has
        let n_chunks = shape
            .iter()
            .zip(source.chunk_shape())
            .map(|(&n, &c)| n.div_ceil(c.max(1)) as u64)
            .product::<u64>()
            .max(1);
        let batch = (2 * rayon::current_num_threads()).clamp(1, n_chunks as usize);
        let chunk_bytes =
            source.chunk_shape().iter().product::<usize>() as u64 * dtype.size() as u64;
        // three rows of chunks across the last axis (the chunk rows a tile and its halo
        // span, and the next one, with room for least-recently-used order to keep the
        // shared row), at most 64 MiB
        let across = match (shape.last(), source.chunk_shape().last()) {
            (Some(&n), Some(&c)) => n.div_ceil(c.max(1)) as u64,
            _ => 1,
        };
        let capacity = (3 * across * chunk_bytes)
            .min(CACHE_MAX.max(chunk_bytes))
            .min(n_chunks * chunk_bytes);
        Chunked {
            shape,
            dtype,
            source,
            batch,
            cache: Mutex::new(Cache {
                capacity,
                ..Cache::default()
            }),
            decoded: 0.into(),
        }
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
        self.decoded.load(std::sync::atomic::Ordering::Relaxed)
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

    /// Memory the decoding of a window may hold beyond the window itself: the cache of
    /// recent chunks, one batch of decoded chunks, and a buffer for each decoding thread.
    #[must_use]
    pub fn scratch_bytes(&self) -> u64 {
        let cache = self.cache.lock().map_or(0, |c| c.capacity);
        let threads = rayon::current_num_threads().min(self.batch);
        cache + (self.batch + threads) as u64 * self.chunk_bytes() + self.source.resident_bytes()
    }

    /// Reads windows `(start, count, touch)` (flat element ranges, as
    /// [`TensorFile::map_window_touch`](super::TensorFile::map_window_touch) takes them)
    /// into compact buffers, decoding each chunk they touch once.
    ///
    /// # Errors
    /// The first chunk that fails to decode.
    pub fn read(&self, windows: &[(u64, u64, Touch)]) -> Result<Vec<Vec<u8>>> {
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
        let mut outs = Vec::with_capacity(windows.len());
        let mut pieces: BTreeMap<u64, Vec<Piece>> = BTreeMap::new();
        let mut coords = vec![0usize; rank];
        for (w, &(start, count, touch)) in windows.iter().enumerate() {
            let mut segs: Vec<(u64, u64)> = Vec::new();
            match touch {
                Touch::All => segs.push((start, count)),
                Touch::Rows { row, runs, nruns } => {
                    let rows = count / row.max(1);
                    for r in 0..rows {
                        for &(c0, n) in &runs[..nruns] {
                            segs.push((start + r * row + c0, n));
                        }
                    }
                }
            }
            let mut out_at = 0usize;
            for (s, n) in segs {
                // split at the tensor's rows (runs along the last axis)
                let mut e = s;
                let end = s + n;
                while e < end {
                    let run_end = ((e / last + 1) * last).min(end);
                    // coordinates of e
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
                        let key = key_prefix * grid[rank - 1] as u64 + cx as u64;
                        pieces.entry(key).or_default().push(Piece {
                            out: w,
                            out_at: out_at + (c - c_first),
                            at: within_prefix * cw + c % cw,
                            len: piece_end - c,
                        });
                        c = piece_end;
                    }
                    out_at += (run_end - e) as usize;
                    e = run_end;
                }
            }
            outs.push(vec![0u8; out_at * es]);
        }
        let chunk_bytes = self.chunk_bytes() as usize;
        let copy = |outs: &mut Vec<Vec<u8>>, key: u64, buf: &[u8]| {
            for p in &pieces[&key] {
                outs[p.out][p.out_at * es..(p.out_at + p.len) * es]
                    .copy_from_slice(&buf[p.at * es..(p.at + p.len) * es]);
            }
        };
        // chunks still cached from the previous tile
        let mut keys = Vec::with_capacity(pieces.len());
        for &key in pieces.keys() {
            let hit = self.cache.lock().ok().and_then(|mut c| c.get(key));
            match hit {
                Some(buf) => copy(&mut outs, key, &buf),
                None => keys.push(key),
            }
        }
        for batch in keys.chunks(self.batch) {
            let decoded: Vec<Result<Vec<u8>>> = batch
                .par_iter()
                .map(|&key| {
                    let mut pos = vec![0usize; rank];
                    let mut rem = key;
                    for a in (0..rank).rev() {
                        pos[a] = (rem % grid[a] as u64) as usize;
                        rem /= grid[a] as u64;
                    }
                    let mut buf = vec![0u8; chunk_bytes];
                    self.source.decode(&pos, &mut buf)?;
                    self.decoded
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(buf)
                })
                .collect();
            for (&key, buf) in batch.iter().zip(decoded) {
                let buf = Arc::new(buf?);
                copy(&mut outs, key, &buf);
                if let Ok(mut c) = self.cache.lock() {
                    c.put(key, buf);
                }
            }
        }
        Ok(outs)
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
