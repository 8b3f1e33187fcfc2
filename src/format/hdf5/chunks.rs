//! The chunks of an HDF5 dataset, decoded by tilestream: each chunk's stored bytes are
//! read through the library as they are in the file (`H5Dread_chunk`: no filter
//! applied), and its filter pipeline is undone backwards, each stage stopped at the
//! chunk's size (a filter bomb is refused, never inflated), as HDF5's own `H5Z_pipeline`
//! does: a filter whose bit is set in the chunk's filter mask was skipped when the chunk
//! was written and is skipped again here.

use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkSource, Chunked};

use super::lib::{self, DEFAULT, Hid};
use super::plugins::{self, Bitshuffle};
use super::szip::{self, Szip};
use super::{Filter, Hdf5Layout, Stored};

/// An open file and dataset of the library, closed when dropped.
#[derive(Debug)]
struct Open {
    file: Hid,
    dataset: Hid,
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = lib::with(|l| {
            // SAFETY: both were opened by the library, kept open for this reader, and are
            // closed once, here, inside the library's lock
            unsafe {
                (l.dclose)(self.dataset);
                (l.fclose)(self.file);
            }
        });
    }
}

/// How one chunk's bytes are reached.
#[derive(Debug)]
enum Source {
    /// Read through the library from the open dataset.
    Direct(Open),
    /// A compact dataset, held (one chunk: the whole dataset).
    Held(Vec<u8>),
    /// Nothing written: every chunk is the fill value.
    Fill,
}

/// One filter as decoded: what is done to undo it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Undo {
    Deflate,
    Shuffle {
        size: usize,
    },
    Fletcher32,
    Lzf,
    Blosc,
    Zstd,
    /// The LZ4 filter (32004), `cd_values[0]` bytes a block when written (0: 1 GiB).
    Lz4 {
        block: u32,
    },
    Bitshuffle(Bitshuffle),
    Szip(Szip),
    /// bzip2 (307), in blocks of this many 100 000 bytes.
    Bzip2 {
        level: u32,
    },
}

/// An HDF5 dataset's chunks, for [`Chunked`].
#[derive(Debug)]
pub struct Hdf5Chunks {
    path: PathBuf,
    shape: Vec<usize>,
    dtype: DType,
    chunk: Vec<usize>,
    /// Chunks along each axis.
    grid: Vec<usize>,
    chunk_bytes: usize,
    big_endian: bool,
    /// In the order they were applied when writing.
    filters: Vec<Undo>,
    source: Source,
    /// One element of fill value, native byte order.
    fill: Vec<u8>,
    /// Most bytes a stored chunk may have: what the filters can make of a chunk at
    /// most (a larger one is damaged, and refused before it is read).
    max_stored: u64,
    /// Bytes a decode holds beside its two buffers (a bitshuffle block decompressed).
    scratch: u64,
}

/// Most rows of elements a dataset with no chunks of its own (compact, never written)
/// is cut into, so that a huge never-written dataset is not one chunk.
const FILL_CHUNK_BYTES: usize = 1 << 20;

impl Hdf5Chunks {
    pub(crate) fn new(
        path: &Path,
        layout: &Hdf5Layout,
        stored: Stored,
        fill: Vec<u8>,
    ) -> Result<Self> {
        let es = layout.dtype.size();
        let (chunk, source) = match (&layout.storage, stored) {
            (super::Storage::Chunked { chunk, .. }, Stored::Direct { file, dataset }) => {
                (chunk.clone(), Source::Direct(Open { file, dataset }))
            }
            (_, Stored::Bytes(b)) => (
                layout.shape.iter().map(|&n| n.max(1)).collect(),
                Source::Held(b),
            ),
            (_, _) => (fill_chunk(&layout.shape, es), Source::Fill),
        };
        let filters = layout
            .filters
            .iter()
            .map(|f| undo_of(f, es))
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(|m| Error::format(path, format!("dataset '{}': {m}", layout.dataset)))?;
        let grid = layout
            .shape
            .iter()
            .zip(&chunk)
            .map(|(&s, &c)| s.div_ceil(c))
            .collect();
        let chunk_bytes = chunk.iter().product::<usize>() * es;
        let max_stored = filters.iter().fold(chunk_bytes as u64, |n, f| match f {
            Undo::Fletcher32 => n + 4,
            Undo::Shuffle { .. } => n,
            Undo::Lz4 { block } => plugins::lz4_max_stored(*block, n),
            Undo::Bitshuffle(b) => b.max_stored(n),
            _ => crate::format::zarr::codec::max_encoded(n),
        });
        let scratch = filters.iter().fold(0, |s, f| match f {
            Undo::Bitshuffle(b) => s.max(b.scratch_bytes(chunk_bytes as u64)),
            Undo::Szip(z) => s.max(z.scratch_bytes(chunk_bytes as u64)),
            Undo::Bzip2 { level } => s.max(super::bzip2::scratch_bytes(*level)),
            _ => s,
        });
        Ok(Hdf5Chunks {
            path: path.to_path_buf(),
            shape: layout.shape.clone(),
            dtype: layout.dtype,
            chunk,
            grid,
            chunk_bytes,
            big_endian: layout.big_endian,
            filters,
            source,
            fill,
            max_stored,
            scratch,
        })
    }

    /// The chunked reader over these chunks.
    ///
    /// # Errors
    /// As [`Chunked::new`].
    pub(crate) fn into_chunked(self) -> Chunked {
        Chunked::new(self.shape.clone(), self.dtype, Box::new(self))
    }

    /// The stored bytes of the chunk at grid position `pos` and its filter mask, read by
    /// the library; `None` for a chunk never written.
    fn read_stored(&self, open: &Open, pos: &[usize]) -> Result<Option<(Vec<u8>, u32)>> {
        let coord: Vec<u64> = pos
            .iter()
            .zip(&self.chunk)
            .map(|(&p, &c)| (p * c) as u64)
            .collect();
        let r = lib::with(|l| -> std::result::Result<_, String> {
            let mut n = 0u64;
            // SAFETY: an open dataset; `coord` holds one coordinate per dimension
            if unsafe { (l.dget_chunk_storage_size)(open.dataset, coord.as_ptr(), &raw mut n) } < 0
            {
                // HDF5 1.10 fails here for a chunk never written: ask the index whether it
                // is one (a slower lookup, taken only for such chunks), else refuse
                let failed = l.last_error();
                let (mut mask, mut addr) = (0, 0);
                // SAFETY: as above, with valid out-pointers
                let r = unsafe {
                    (l.dget_chunk_info_by_coord)(
                        open.dataset,
                        coord.as_ptr(),
                        &raw mut mask,
                        &raw mut addr,
                        &raw mut n,
                    )
                };
                if r >= 0 && addr == lib::UNDEF {
                    return Ok(None);
                }
                return Err(failed);
            }
            if n == 0 {
                return Ok(None);
            }
            if n > self.max_stored {
                return Err(format!(
                    "it is stored in {n} bytes, more than its filters make of a chunk of {} \
                     (at most {}): its index is damaged",
                    self.chunk_bytes, self.max_stored
                ));
            }
            let mut buf = take(n as usize);
            let mut mask = 0u32;
            // SAFETY: `buf` has room for the chunk's `n` stored bytes, which is what
            // H5Dread_chunk writes
            let r = unsafe {
                (l.dread_chunk)(
                    open.dataset,
                    DEFAULT,
                    coord.as_ptr(),
                    &raw mut mask,
                    buf.as_mut_ptr().cast(),
                )
            };
            if r < 0 {
                give(buf);
                return Err(l.last_error());
            }
            Ok(Some((buf, mask)))
        });
        r.and_then(|r| r).map_err(|m| self.decode_err(pos, m))
    }

    /// Fills a chunk with the fill value (already in native byte order).
    fn fill_out(&self, out: &mut [u8]) {
        for e in out.chunks_exact_mut(self.fill.len()) {
            e.copy_from_slice(&self.fill);
        }
    }

    fn decode_err(&self, pos: &[usize], why: impl std::fmt::Display) -> Error {
        Error::format(
            &self.path,
            format!("the chunk at {pos:?} cannot be decoded: {why}"),
        )
    }
}

thread_local! {
    /// Buffers a thread's chunk decodes reuse (the stored bytes, a stage's output), so
    /// that a chunk of MiBs does not cost fresh pages each time: at most two of at most
    /// 16 MiB each, within what the budget counts for one decode
    /// ([`Hdf5Chunks::work_bytes`]); larger chunks take fresh buffers.
    static POOL: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `n` zero bytes from the thread's pool.
fn take(n: usize) -> Vec<u8> {
    let mut v = POOL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    v.clear();
    v.resize(n, 0);
    v
}

/// Returns a buffer to the thread's pool.
fn give(v: Vec<u8>) {
    if v.capacity() <= 16 << 20 {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < 2 {
                p.push(v);
            }
        });
    }
}

/// Undoes `filters` (in the order they were applied when writing) on a chunk's stored
/// bytes `data` (a buffer of the pool, returned to it), skipping those whose bit is set
/// in `mask`; every stage stops at `size` bytes. The chunk must come out exactly `size`
/// bytes, and is written into `out` (`size` bytes; a last stage that is a shuffle or
/// deflate writes there directly).
fn unfilter(
    filters: &[Undo],
    data: Vec<u8>,
    mask: u32,
    size: usize,
    out: &mut [u8],
) -> std::result::Result<(), String> {
    let steps: Vec<Undo> = filters
        .iter()
        .enumerate()
        .rev()
        .filter(|&(i, _)| i >= 32 || mask & (1 << i) == 0)
        .map(|(_, &f)| f)
        .collect();
    let mut data = data;
    let r = run_steps(&steps, &mut data, size, out);
    give(data);
    r
}

fn run_steps(
    steps: &[Undo],
    data: &mut Vec<u8>,
    size: usize,
    out: &mut [u8],
) -> std::result::Result<(), String> {
    let past = || format!("it decodes past the chunk's {size} bytes");
    let wrong = |n: usize| format!("it holds {n} bytes, not the chunk's {size}");
    if out.len() != size {
        return Err(wrong(out.len()));
    }
    for (k, f) in steps.iter().enumerate() {
        let last = k + 1 == steps.len();
        let next = match *f {
            Undo::Fletcher32 => {
                if data.len() < 4 {
                    return Err("it is shorter than its fletcher32 checksum".into());
                }
                let (body, sum) = data.split_at(data.len() - 4);
                let stored = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
                let f = fletcher32(body);
                // HDF5 also accepts the checksum of files written before 1.6.2, whose
                // 16-bit halves had their bytes swapped
                let old = ((f & 0x00ff_00ff) << 8) | ((f >> 8) & 0x00ff_00ff);
                if stored != f && stored != old {
                    return Err("its fletcher32 checksum does not match".into());
                }
                data.truncate(data.len() - 4);
                continue;
            }
            Undo::Shuffle { size: es } => {
                if last {
                    if data.len() != size {
                        return Err(wrong(data.len()));
                    }
                    unshuffle(data, out, es);
                    return Ok(());
                }
                let mut v = take(data.len());
                unshuffle(data, &mut v, es);
                v
            }
            Undo::Deflate => {
                // libdeflate: the whole stream into a buffer of the chunk's size, which it
                // refuses to pass (a bomb costs one chunk)
                let mut v = if last { Vec::new() } else { take(size) };
                let dest: &mut [u8] = if last { out } else { &mut v };
                match libdeflater::Decompressor::new().zlib_decompress(data, dest) {
                    Ok(n) if last && n == size => return Ok(()),
                    Ok(n) if last => return Err(wrong(n)),
                    Ok(n) => v.truncate(n),
                    Err(libdeflater::DecompressionError::InsufficientSpace) => return Err(past()),
                    Err(libdeflater::DecompressionError::BadData) => {
                        return Err("its deflate stream is damaged".into());
                    }
                }
                v
            }
            Undo::Zstd => {
                let d = zstd::stream::read::Decoder::with_buffer(data.as_slice())
                    .map_err(|e| e.to_string())?;
                crate::format::zarr::decode::bounded_read(d, size, true)
                    .map_err(|e| e.map_or_else(past, |e| e.to_string()))?
            }
            Undo::Blosc => crate::format::zarr::decode::blosc(data, size, false)
                .map_err(|e| e.unwrap_or_else(past))?,
            Undo::Lzf => {
                let mut v = take(size);
                let n = lzf_decompress(data, &mut v)?;
                v.truncate(n);
                v
            }
            Undo::Lz4 { .. } | Undo::Bitshuffle(_) | Undo::Szip(_) | Undo::Bzip2 { .. } => {
                let mut v = if last { Vec::new() } else { take(size) };
                let dest: &mut [u8] = if last { out } else { &mut v };
                let n = match *f {
                    Undo::Bitshuffle(b) => plugins::undo_bitshuffle(b, data, dest)?,
                    Undo::Szip(z) => szip::undo(z, data, dest)?,
                    Undo::Bzip2 { level } => super::bzip2::undo(level, data, dest)?,
                    _ => plugins::undo_lz4(data, dest)?,
                };
                if last {
                    return if n == size { Ok(()) } else { Err(wrong(n)) };
                }
                v.truncate(n);
                v
            }
        };
        give(std::mem::replace(data, next));
    }
    if data.len() != size {
        return Err(wrong(data.len()));
    }
    out.copy_from_slice(data);
    Ok(())
}

/// Decodes one stored chunk of `size` bytes through the filter pipeline `filters` (in
/// the order applied when writing, each with its client data; a shuffle without any
/// shuffles elements of `es` bytes), skipping those `mask` marks: what [`Hdf5Chunks`] does with each chunk
/// it reads, for the fuzz target.
///
/// # Errors
/// A one-line reason: an unknown filter, a damaged stream, a checksum mismatch, or a
/// chunk that does not decode to `size` bytes.
pub fn decode_stored(
    filters: &[Filter],
    es: usize,
    mask: u32,
    size: usize,
    stored: &[u8],
) -> std::result::Result<Vec<u8>, String> {
    let undo = filters
        .iter()
        .map(|f| undo_of(f, es))
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let mut out = vec![0u8; size];
    let mut data = take(stored.len());
    data.copy_from_slice(stored);
    unfilter(&undo, data, mask, size, &mut out)?;
    Ok(out)
}

/// A chunk shape for a dataset with none: rows of the trailing axes, about 1 MiB.
fn fill_chunk(shape: &[usize], es: usize) -> Vec<usize> {
    let mut chunk: Vec<usize> = shape.iter().map(|&n| n.max(1)).collect();
    for a in 0..chunk.len() {
        let bytes = chunk.iter().product::<usize>() * es;
        if bytes <= FILL_CHUNK_BYTES {
            break;
        }
        let rest = bytes / chunk[a];
        chunk[a] = (FILL_CHUNK_BYTES / rest).max(1);
    }
    chunk
}

fn undo_of(f: &Filter, es: usize) -> std::result::Result<Undo, String> {
    Ok(match f.id {
        1 => Undo::Deflate,
        2 => Undo::Shuffle {
            size: f.params.first().map_or(es, |&s| s as usize).max(1),
        },
        3 => Undo::Fletcher32,
        32000 => Undo::Lzf,
        32001 => Undo::Blosc,
        32015 => Undo::Zstd,
        32004 => Undo::Lz4 {
            block: f.params.first().copied().unwrap_or(0),
        },
        32008 => Undo::Bitshuffle(Bitshuffle::from_params(&f.params)?),
        4 => Undo::Szip(Szip::from_params(&f.params)?),
        307 => Undo::Bzip2 {
            level: super::bzip2::level_of(&f.params),
        },
        _ => {
            return Err(format!(
                "its {} filter is not one tilestream decodes (deflate, shuffle, fletcher32, \
                 lzf, blosc, zstd, lz4, bitshuffle, szip and bzip2 are): rewrite it with \
                 h5repack -f GZIP=4",
                f.name()
            ));
        }
    })
}

impl ChunkSource for Hdf5Chunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let mut k = 0usize;
        for (p, g) in pos.iter().zip(&self.grid) {
            k = k * g + p;
        }
        match &self.source {
            Source::Held(b) => out[..b.len()].copy_from_slice(b),
            Source::Fill => {
                self.fill_out(out);
                return Ok(());
            }
            Source::Direct(open) => {
                let Some((stored, mask)) = self.read_stored(open, pos)? else {
                    self.fill_out(out);
                    return Ok(());
                };
                unfilter(
                    &self.filters,
                    stored,
                    mask,
                    self.chunk_bytes,
                    &mut out[..self.chunk_bytes],
                )
                .map_err(|m| self.decode_err(pos, m))?;
            }
        }
        if self.big_endian {
            for e in out.chunks_exact_mut(self.dtype.swap_unit()) {
                e.reverse();
            }
        }
        Ok(())
    }

    fn resident_bytes(&self) -> u64 {
        match &self.source {
            Source::Held(b) => b.len() as u64,
            Source::Direct(_) | Source::Fill => 0,
        }
    }

    fn work_bytes(&self) -> u64 {
        // `run_steps` holds at most two buffers, the one a stage reads (the stored
        // bytes first) and the one it writes (the last stage writes into the decoded
        // chunk itself, counted apart), and the thread's pool keeps at most those two;
        // as the pool reuses them for either, each may grow to the larger of a stored
        // chunk and a decoded one, which is the stored bound; a compressed bitshuffle
        // stage also holds one decompressed block (and a Zstandard context), szip its
        // padded copy, bzip2 libbz2's tables
        let one = self.max_stored.max(self.chunk_bytes as u64);
        if self.filters.is_empty() {
            one
        } else {
            2 * one + self.scratch
        }
    }
}

/// HDF5's Fletcher-32 (`H5_checksum_fletcher32`): over big-endian 16-bit words, a last
/// odd byte as the high byte of a word.
#[must_use]
pub fn fletcher32(data: &[u8]) -> u32 {
    let (mut s1, mut s2) = (0u32, 0u32);
    let mut words = data.chunks_exact(2);
    let mut left = data.len() / 2;
    while left > 0 {
        let n = left.min(360);
        left -= n;
        for w in words.by_ref().take(n) {
            s1 += (u32::from(w[0]) << 8) | u32::from(w[1]);
            s2 += s1;
        }
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    if let [last] = words.remainder() {
        s1 += u32::from(*last) << 8;
        s2 += s1;
        s1 = (s1 & 0xffff) + (s1 >> 16);
        s2 = (s2 & 0xffff) + (s2 >> 16);
    }
    s1 = (s1 & 0xffff) + (s1 >> 16);
    s2 = (s2 & 0xffff) + (s2 >> 16);
    (s2 << 16) | s1
}

/// Undoes HDF5's shuffle filter: byte `b` of every element was stored together. A tail
/// of fewer bytes than an element's was left as it was (`H5Z__filter_shuffle`).
pub fn unshuffle(src: &[u8], out: &mut [u8], es: usize) {
    let n = src.len() / es;
    if es <= 1 || n <= 1 {
        out.copy_from_slice(src);
        return;
    }
    let tail = n * es;
    match es {
        2 => gather::<2>(src, out, n),
        4 => gather::<4>(src, out, n),
        8 => gather::<8>(src, out, n),
        _ => {
            for b in 0..es {
                let plane = &src[b * n..(b + 1) * n];
                for (i, &v) in plane.iter().enumerate() {
                    out[i * es + b] = v;
                }
            }
        }
    }
    out[tail..].copy_from_slice(&src[tail..]);
}

/// Unshuffles elements of `E` bytes one by one, gathering from the byte planes: the
/// writes run in order.
fn gather<const E: usize>(src: &[u8], out: &mut [u8], n: usize) {
    let planes: [&[u8]; E] = std::array::from_fn(|b| &src[b * n..(b + 1) * n]);
    for (i, e) in out[..n * E].chunks_exact_mut(E).enumerate() {
        for b in 0..E {
            e[b] = planes[b][i];
        }
    }
}

/// liblzf's `lzf_decompress`, safe: decodes `src` into `out`, refusing a stream that
/// would write past it or refer before its start. Returns the bytes written.
///
/// # Errors
/// A one-line reason for a damaged stream or one that decodes past `out`.
pub fn lzf_decompress(src: &[u8], out: &mut [u8]) -> std::result::Result<usize, &'static str> {
    const PAST: &str = "its LZF stream decodes past the chunk's size";
    const BAD: &str = "its LZF stream is damaged";
    let (mut ip, mut op) = (0usize, 0usize);
    while ip < src.len() {
        let ctrl = src[ip] as usize;
        ip += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            if op + n > out.len() {
                return Err(PAST);
            }
            if ip + n > src.len() {
                return Err(BAD);
            }
            out[op..op + n].copy_from_slice(&src[ip..ip + n]);
            ip += n;
            op += n;
        } else {
            let mut len = ctrl >> 5;
            if ip >= src.len() {
                return Err(BAD);
            }
            if len == 7 {
                len += src[ip] as usize;
                ip += 1;
                if ip >= src.len() {
                    return Err(BAD);
                }
            }
            let back = ((ctrl & 0x1f) << 8) + src[ip] as usize + 1;
            ip += 1;
            len += 2;
            if op + len > out.len() {
                return Err(PAST);
            }
            if back > op {
                return Err(BAD);
            }
            let from = op - back;
            for i in 0..len {
                out[op + i] = out[from + i];
            }
            op += len;
        }
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher32_matches_the_reference_values() {
        // Fletcher-32 of "abcde" and "abcdef" over big-endian words, as HDF5 computes
        // them (odd tail as a high byte): worked by hand from the definition
        // sum1 = Σ words mod 65535, sum2 = Σ running sum1 mod 65535.
        let words = |b: &[u8]| {
            let mut s1 = 0u64;
            let mut s2 = 0u64;
            for w in b.chunks(2) {
                let v = (u64::from(w[0]) << 8) | w.get(1).map_or(0, |&x| u64::from(x));
                s1 = (s1 + v) % 65535;
                s2 = (s2 + s1) % 65535;
            }
            ((s2 << 16) | s1) as u32
        };
        for data in [&b"abcde"[..], b"abcdef", b"", b"\x01\x02\x03"] {
            assert_eq!(fletcher32(data), words(data), "{data:?}");
        }
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7919 % 251) as u8).collect();
        assert_eq!(fletcher32(&big), words(&big));
    }

    #[test]
    fn unshuffle_inverts_the_byte_planes() {
        for es in [2, 3, 4, 8] {
            let n = 5;
            // a tail shorter than an element is stored as it is
            let elems: Vec<u8> = (0..es * n + es - 1).map(|i| i as u8).collect();
            let mut shuffled = vec![0u8; elems.len()];
            for i in 0..n {
                for b in 0..es {
                    shuffled[b * n + i] = elems[i * es + b];
                }
            }
            shuffled[es * n..].copy_from_slice(&elems[es * n..]);
            let mut out = vec![0u8; elems.len()];
            unshuffle(&shuffled, &mut out, es);
            assert_eq!(out, elems, "element size {es}");
        }
    }

    #[test]
    fn lzf_literals_and_back_references() {
        // literal run "abc", then a back reference of length 6 at distance 3
        let src = [2, b'a', b'b', b'c', (4 << 5), 2];
        let mut out = [0u8; 9];
        assert_eq!(lzf_decompress(&src, &mut out), Ok(9));
        assert_eq!(&out, b"abcabcabc");
        let mut small = [0u8; 8];
        assert!(lzf_decompress(&src, &mut small).is_err());
        assert!(
            lzf_decompress(&[(1 << 5), 9], &mut out).is_err(),
            "reference before the start"
        );
        assert!(
            lzf_decompress(&[5, b'a'], &mut out).is_err(),
            "literal run cut short"
        );
    }
}
