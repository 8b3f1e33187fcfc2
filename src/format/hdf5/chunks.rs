//! The chunks of an HDF5 dataset, read and decoded by tilestream: each chunk's stored
//! bytes are read from the file at the place the library gave at open, and its filter
//! pipeline is undone backwards, each stage stopped at the chunk's size (a filter bomb
//! is refused, never inflated), as HDF5's own `H5Z_pipeline` does: a filter whose bit is
//! set in the chunk's filter mask was skipped when the chunk was written and is skipped
//! again here.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkSource, Chunked};

use super::{Filter, Hdf5Layout, Stored, lib::UNDEF};

/// Where one chunk is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Byte offset in the file ([`UNDEF`]: never written).
    pub addr: u64,
    /// Stored bytes.
    pub size: u32,
    /// Filters skipped when it was written (bit `i`: filter `i`).
    pub mask: u32,
}

impl Entry {
    /// A chunk never written: it holds the fill value.
    pub const UNWRITTEN: Entry = Entry {
        addr: UNDEF,
        size: 0,
        mask: 0,
    };
}

/// How one chunk's bytes are reached.
#[derive(Debug)]
enum Source {
    /// Read from the file at the table's places.
    Table(Vec<Entry>),
    /// A compact dataset, held (one chunk: the whole dataset).
    Held(Vec<u8>),
    /// Nothing written: every chunk is the fill value.
    Fill,
}

/// One filter as decoded: what is done to undo it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Undo {
    Deflate,
    Shuffle { size: usize },
    Fletcher32,
    Lzf,
    Blosc,
    Zstd,
}

/// An HDF5 dataset's chunks, for [`Chunked`].
#[derive(Debug)]
pub struct Hdf5Chunks {
    path: PathBuf,
    file: File,
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
    /// Largest stored chunk.
    max_stored: u64,
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
            (super::Storage::Chunked { chunk, .. }, Stored::Table(t)) => {
                (chunk.clone(), Source::Table(t))
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
        let max_stored = match &source {
            Source::Table(t) => t.iter().map(|e| u64::from(e.size)).max().unwrap_or(0),
            _ => 0,
        };
        Ok(Hdf5Chunks {
            path: path.to_path_buf(),
            file: crate::io::own_files::open_input(path)?,
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
        })
    }

    /// The chunked reader over these chunks.
    ///
    /// # Errors
    /// As [`Chunked::new`].
    pub(crate) fn into_chunked(self) -> Chunked {
        Chunked::new(self.shape.clone(), self.dtype, Box::new(self))
    }

    fn decode_err(&self, pos: &[usize], why: impl std::fmt::Display) -> Error {
        Error::format(
            &self.path,
            format!("the chunk at {pos:?} cannot be decoded: {why}"),
        )
    }

    /// Undoes the filters of a chunk whose stored bytes are `stored`.
    fn unfilter(&self, pos: &[usize], mut data: Vec<u8>, mask: u32) -> Result<Vec<u8>> {
        let size = self.chunk_bytes;
        for (i, f) in self.filters.iter().enumerate().rev() {
            if i < 32 && mask & (1 << i) != 0 {
                continue;
            }
            data = match *f {
                Undo::Fletcher32 => {
                    if data.len() < 4 {
                        return Err(self.decode_err(pos, "shorter than its fletcher32 checksum"));
                    }
                    let (body, sum) = data.split_at(data.len() - 4);
                    let stored = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
                    let f = fletcher32(body);
                    // HDF5 also accepts the checksum of files written before 1.6.2, whose
                    // 16-bit halves had their bytes swapped
                    let old = ((f & 0x00ff_00ff) << 8) | ((f >> 8) & 0x00ff_00ff);
                    if stored != f && stored != old {
                        return Err(self.decode_err(pos, "its fletcher32 checksum does not match"));
                    }
                    data.truncate(data.len() - 4);
                    data
                }
                Undo::Shuffle { size: es } => {
                    let mut out = vec![0u8; data.len()];
                    unshuffle(&data, &mut out, es);
                    out
                }
                Undo::Deflate => crate::format::zarr::decode::bounded_read(
                    flate2::read::ZlibDecoder::new(data.as_slice()),
                    size,
                    false,
                )
                .map_err(|e| self.bound_err(pos, e.map(|e| e.to_string())))?,
                Undo::Zstd => {
                    let d = zstd::stream::read::Decoder::with_buffer(data.as_slice())
                        .map_err(|e| self.decode_err(pos, e))?;
                    crate::format::zarr::decode::bounded_read(d, size, false)
                        .map_err(|e| self.bound_err(pos, e.map(|e| e.to_string())))?
                }
                Undo::Blosc => crate::format::zarr::decode::blosc(&data, size, false)
                    .map_err(|e| self.bound_err(pos, e))?,
                Undo::Lzf => {
                    let mut out = vec![0u8; size];
                    let n = lzf_decompress(&data, &mut out).map_err(|e| self.decode_err(pos, e))?;
                    out.truncate(n);
                    out
                }
            };
        }
        Ok(data)
    }

    fn bound_err(&self, pos: &[usize], e: Option<String>) -> Error {
        match e {
            Some(m) => self.decode_err(pos, m),
            None => self.decode_err(
                pos,
                format!("it decodes past the chunk's {} bytes", self.chunk_bytes),
            ),
        }
    }
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
        _ => {
            return Err(format!(
                "its {} filter is not one tilestream decodes (deflate, shuffle, fletcher32, \
                 lzf, blosc and zstd are): rewrite it with h5repack -f GZIP=4",
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
        let es = self.dtype.size();
        let mut k = 0usize;
        for (p, g) in pos.iter().zip(&self.grid) {
            k = k * g + p;
        }
        let (entry, held) = match &self.source {
            Source::Table(t) => (t.get(k).copied().unwrap_or(Entry::UNWRITTEN), None),
            Source::Held(b) => (Entry::UNWRITTEN, Some(b)),
            Source::Fill => (Entry::UNWRITTEN, None),
        };
        if let Some(b) = held {
            out[..b.len()].copy_from_slice(b);
        } else if entry.addr == UNDEF {
            for e in out.chunks_exact_mut(es) {
                e.copy_from_slice(&self.fill);
            }
            return Ok(());
        } else {
            let mut stored = vec![0u8; entry.size as usize];
            self.file
                .read_exact_at(&mut stored, entry.addr)
                .map_err(|e| Error::io("read", &self.path, e))?;
            let data = self.unfilter(pos, stored, entry.mask)?;
            if data.len() != self.chunk_bytes {
                return Err(self.decode_err(
                    pos,
                    format!(
                        "it holds {} bytes, not the chunk's {}",
                        data.len(),
                        self.chunk_bytes
                    ),
                ));
            }
            out[..data.len()].copy_from_slice(&data);
        }
        if self.big_endian {
            for e in out.chunks_exact_mut(es) {
                e.reverse();
            }
        }
        Ok(())
    }

    fn resident_bytes(&self) -> u64 {
        match &self.source {
            Source::Table(t) => (t.len() * std::mem::size_of::<Entry>()) as u64,
            Source::Held(b) => b.len() as u64,
            Source::Fill => 0,
        }
    }

    fn work_bytes(&self) -> u64 {
        // the stored bytes, and one intermediate buffer of a chunk's size a stage
        self.max_stored
            + if self.filters.is_empty() {
                0
            } else {
                2 * self.chunk_bytes as u64
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
    for b in 0..es {
        let plane = &src[b * n..(b + 1) * n];
        for (i, &v) in plane.iter().enumerate() {
            out[i * es + b] = v;
        }
    }
    let tail = n * es;
    out[tail..].copy_from_slice(&src[tail..]);
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
        let elems: Vec<u8> = (0..4 * 5 + 3).map(|i| i as u8).collect();
        let n = 5;
        let mut shuffled = vec![0u8; elems.len()];
        for i in 0..n {
            for b in 0..4 {
                shuffled[b * n + i] = elems[i * 4 + b];
            }
        }
        shuffled[20..].copy_from_slice(&elems[20..]);
        let mut out = vec![0u8; elems.len()];
        unshuffle(&shuffled, &mut out, 4);
        assert_eq!(out, elems);
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
