//! The writing side of Zarr v3: the `zarr.json` and the chunks of the stores tilestream
//! writes, encoded here (`bytes`, little-endian, then `zstd`, `gzip` or `blosc`; or
//! `sharding_indexed` over such inner chunks, with the index at the end, checked by
//! `crc32c`). The counterpart of [`crate::format::zarr_decode`], which reads back every store
//! written here (the unit tests), as zarr-python does (`tests/it/zarr.rs`).
//!
//! A chunk (or inner chunk) whose bytes are all zero, the fill value, is not stored: a
//! reader takes a missing chunk for the fill value (the specification's rule, which
//! zarr-python and zarrs follow when writing too). Chunks at the array's edge are stored
//! whole, padded with the fill value.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::{Value, json};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::zarr::{ZarrCompression, ZarrWriteOptions, chunk_shapes};

/// The layout and codecs of a store being written, and the chunk encoder.
#[derive(Clone, Debug)]
pub(crate) struct ZarrEncoder {
    /// The store's directory.
    dir: PathBuf,
    shape: Vec<usize>,
    dtype: DType,
    /// The chunk grid's chunk shape: the shard shape when sharded.
    outer: Vec<usize>,
    /// The inner chunk shape when sharded.
    inner: Option<Vec<usize>>,
    compression: ZarrCompression,
}

impl ZarrEncoder {
    /// The encoder of a store in `dir` of an array of `shape` and `dtype` written as
    /// `opts` say (its outer chunks no larger than `opts.memory`).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a 0-d array or chunk and shard shapes that do not fit.
    pub(crate) fn new(
        dir: &Path,
        shape: &[usize],
        dtype: DType,
        opts: &ZarrWriteOptions,
    ) -> Result<Self> {
        if shape.is_empty() {
            return Err(Error::invalid("a Zarr output needs at least one dimension"));
        }
        let (inner, outer) = chunk_shapes(opts, shape, dtype, opts.memory)?;
        if let ZarrCompression::Blosc(l) = opts.compression
            && l > 9
        {
            return Err(Error::invalid(format!("blosc level {l}: give 0-9")));
        }
        if let ZarrCompression::Gzip(l) = opts.compression
            && l > 9
        {
            return Err(Error::invalid(format!("gzip level {l}: give 0-9")));
        }
        Ok(ZarrEncoder {
            dir: dir.to_path_buf(),
            shape: shape.to_vec(),
            dtype,
            inner: opts.shard.is_some().then_some(inner),
            outer,
            compression: opts.compression,
        })
    }

    /// The chunk grid's chunk shape (the shard shape when sharded).
    pub(crate) fn outer(&self) -> &[usize] {
        &self.outer
    }

    /// The array's shape.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The array's element type.
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// The codecs that encode one chunk (or inner chunk): `bytes`, then the compressor.
    fn chunk_codecs(&self) -> Vec<Value> {
        let mut c = vec![json!({"name": "bytes", "configuration": {"endian": "little"}})];
        match self.compression {
            ZarrCompression::None => {}
            ZarrCompression::Zstd(level) => c.push(json!({
                "name": "zstd",
                "configuration": {"level": level, "checksum": false}
            })),
            ZarrCompression::Gzip(level) => c.push(json!({
                "name": "gzip",
                "configuration": {"level": level}
            })),
            ZarrCompression::Blosc(level) => c.push(json!({
                "name": "blosc",
                "configuration": {
                    "cname": "lz4",
                    "clevel": level,
                    "shuffle": "shuffle",
                    "typesize": self.dtype.size(),
                    "blocksize": 0
                }
            })),
        }
        c
    }

    /// The text of the store's `zarr.json`.
    pub(crate) fn metadata(&self) -> String {
        let codecs = match &self.inner {
            None => self.chunk_codecs(),
            Some(inner) => vec![json!({
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": inner,
                    "codecs": self.chunk_codecs(),
                    "index_codecs": [
                        {"name": "bytes", "configuration": {"endian": "little"}},
                        {"name": "crc32c"}
                    ],
                    "index_location": "end"
                }
            })],
        };
        let fill = match self.dtype {
            DType::Bool => json!(false),
            d if d.is_float() => json!(0.0),
            d if d.is_complex() => json!([0.0, 0.0]),
            _ => json!(0),
        };
        let meta = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": self.shape,
            "data_type": self.dtype.numpy_name(),
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": self.outer}
            },
            "chunk_key_encoding": {
                "name": "default",
                "configuration": {"separator": "/"}
            },
            "fill_value": fill,
            "codecs": codecs,
            "attributes": {}
        });
        // a `Value` always serialises
        serde_json::to_string_pretty(&meta).unwrap_or_default()
    }

    /// Writes the store's `zarr.json` and returns its text.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be written.
    pub(crate) fn store_metadata(&self) -> Result<String> {
        let text = self.metadata();
        let path = self.dir.join("zarr.json");
        std::fs::write(&path, &text).map_err(|e| Error::io("write", &path, e))?;
        Ok(text)
    }

    /// The file of the chunk (or shard) at grid position `pos`: `c/i/j/...`.
    pub(crate) fn chunk_path(&self, pos: &[usize]) -> PathBuf {
        let mut p = self.dir.join("c");
        for i in pos {
            p.push(i.to_string());
        }
        p
    }

    /// Encodes the outer chunk at grid position `pos` from `raw` (its bytes, C order,
    /// the whole outer chunk shape) and stores it, or removes its file if every byte is
    /// the fill value.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be written; [`Error::Format`] if a compressor
    /// fails.
    pub(crate) fn store_chunk(&self, pos: &[usize], raw: &[u8]) -> Result<()> {
        let path = self.chunk_path(pos);
        let encoded = match &self.inner {
            None if is_fill(raw) => None,
            None => Some(self.encode(raw, &path)?),
            Some(inner) => self.shard(inner, raw, &path)?,
        };
        let Some(bytes) = encoded else {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io("remove", &path, e))
                }
                _ => Ok(()),
            };
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        // through the gate of every file written: not a link, FIFO or hard link planted
        // where a chunk goes
        let mut f = crate::io::own_files::open_own(&path, true)?;
        f.set_len(0)
            .and_then(|()| f.write_all(&bytes))
            .map_err(|e| Error::io("write", &path, e))
    }

    /// `raw` through the chunk codecs: `bytes` (the data is already little-endian) and
    /// the compressor.
    fn encode(&self, raw: &[u8], path: &Path) -> Result<Vec<u8>> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            Error::format(path, format!("cannot {what}-compress a Zarr chunk: {e}"))
        };
        match self.compression {
            ZarrCompression::None => Ok(raw.to_vec()),
            ZarrCompression::Zstd(level) => {
                zstd::bulk::compress(raw, level).map_err(|e| failed("zstd", &e))
            }
            ZarrCompression::Gzip(level) => {
                let mut g = flate2::write::GzEncoder::new(
                    Vec::with_capacity(raw.len() / 2),
                    flate2::Compression::new(level),
                );
                g.write_all(raw).map_err(|e| failed("gzip", &e))?;
                g.finish().map_err(|e| failed("gzip", &e))
            }
            ZarrCompression::Blosc(level) => {
                blosc_compress(raw, level, self.dtype.size()).map_err(|e| failed("blosc", &e))
            }
        }
    }

    /// The shard of inner chunks of `inner` shape in the outer chunk `raw`: the inner
    /// chunks that hold anything but the fill value, encoded and laid end to end in C
    /// order, then the index (offset and length of each, `u64::MAX` twice for a missing
    /// one, little-endian) and its CRC-32C. `None` if every inner chunk is fill.
    fn shard(&self, inner: &[usize], raw: &[u8], path: &Path) -> Result<Option<Vec<u8>>> {
        let rank = inner.len();
        let per: Vec<usize> = self.outer.iter().zip(inner).map(|(o, i)| o / i).collect();
        let count: usize = per.iter().product();
        let es = self.dtype.size();
        let encoded = crate::io::pool::install(|| {
            (0..count)
                .into_par_iter()
                .map(|k| {
                    let mut origin = vec![0; rank];
                    let mut rem = k;
                    for a in (0..rank).rev() {
                        origin[a] = rem % per[a] * inner[a];
                        rem /= per[a];
                    }
                    let piece = sub_box(raw, &self.outer, &origin, inner, es);
                    if is_fill(&piece) {
                        Ok(None)
                    } else {
                        self.encode(&piece, path).map(Some)
                    }
                })
                .collect::<Result<Vec<Option<Vec<u8>>>>>()
        })?;
        if encoded.iter().all(Option::is_none) {
            return Ok(None);
        }
        let data: usize = encoded.iter().flatten().map(Vec::len).sum();
        let mut out = Vec::with_capacity(data + 16 * count + 4);
        let mut index = Vec::with_capacity(16 * count);
        for e in &encoded {
            let (offset, len) = match e {
                Some(b) => {
                    let at = out.len() as u64;
                    out.extend_from_slice(b);
                    (at, b.len() as u64)
                }
                None => (u64::MAX, u64::MAX),
            };
            index.extend_from_slice(&offset.to_le_bytes());
            index.extend_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(&index);
        out.extend_from_slice(&crc32c::crc32c(&index).to_le_bytes());
        Ok(Some(out))
    }
}

/// True if every byte is zero: the fill value of every store tilestream writes.
fn is_fill(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// The box of `size` at `origin` of the C-order array of `shape` (elements of `es`
/// bytes) in `src`, C order.
fn sub_box(src: &[u8], shape: &[usize], origin: &[usize], size: &[usize], es: usize) -> Vec<u8> {
    let run = size.last().map_or(0, |&n| n * es);
    let mut out = Vec::with_capacity(size.iter().product::<usize>() * es);
    let rows = crate::format::chunk_assembly::for_each_box_row(shape, origin, size, |_, at| {
        out.extend_from_slice(&src[at * es..at * es + run]);
        Ok::<(), std::convert::Infallible>(())
    });
    match rows {
        Ok(()) => out,
    }
}

/// Blosc 1 compression of `src` with LZ4 at `level`, byte shuffle over elements of
/// `typesize` bytes, one thread (the chunks are encoded in parallel already).
fn blosc_compress(src: &[u8], level: u8, typesize: usize) -> std::result::Result<Vec<u8>, String> {
    let overhead = blosc_src::BLOSC_MAX_OVERHEAD as usize;
    if src.len() > i32::MAX as usize - overhead {
        return Err(format!(
            "{} bytes is more than blosc takes in one buffer (2 GiB); give smaller chunks",
            src.len()
        ));
    }
    let mut out = vec![0u8; src.len() + overhead];
    // SAFETY: `src` is readable for `src.len()` bytes and `out` writable for
    // `out.len()`; they do not overlap; the compressor name is a NUL-terminated static
    // string. blosc_compress_ctx keeps no state between calls (thread-safe) and writes at
    // most `destsize` bytes; `nbytes + BLOSC_MAX_OVERHEAD` always suffices.
    let n = unsafe {
        blosc_src::blosc_compress_ctx(
            i32::from(level),
            blosc_src::BLOSC_SHUFFLE as i32,
            typesize,
            src.len(),
            src.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            out.len(),
            c"lz4".as_ptr(),
            0,
            1,
        )
    };
    if n <= 0 {
        return Err(format!("blosc_compress_ctx returned {n}"));
    }
    out.truncate(n as usize);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::chunked::ChunkSource as _;
    use crate::format::zarr::ZarrChunks;

    /// Stores a 37x50 u16 array whose first 16 rows are fill, with every compression,
    /// plain and sharded, and reads each unit back through tilestream's own decoder.
    #[test]
    fn stores_decode_back_to_their_array_and_fill_chunks_are_not_stored() {
        let (rows, cols) = (37usize, 50usize);
        // the array padded to the grid of 16x16 units (64x64), zero outside it
        let mut padded = vec![0u16; 64 * 64];
        for i in 16..rows {
            for j in 0..cols {
                padded[i * 64 + j] = (i * cols + j) as u16 ^ 0x5a5a;
            }
        }
        let bytes: Vec<u8> = padded.iter().flat_map(|v| v.to_le_bytes()).collect();
        for compression in [
            ZarrCompression::None,
            ZarrCompression::Zstd(3),
            ZarrCompression::Gzip(5),
            ZarrCompression::Blosc(5),
        ] {
            for shard in [None, Some(vec![32, 32])] {
                let what = format!("{compression:?} shard {shard:?}");
                let dir = tempfile::tempdir().unwrap();
                let opts = ZarrWriteOptions {
                    chunks: Some(vec![16, 16]),
                    shard: shard.clone(),
                    compression,
                    memory: 1 << 20,
                };
                let enc = ZarrEncoder::new(dir.path(), &[rows, cols], DType::U16, &opts).unwrap();
                enc.store_metadata().unwrap();
                let outer = enc.outer().to_vec();
                for oi in 0..rows.div_ceil(outer[0]) {
                    for oj in 0..cols.div_ceil(outer[1]) {
                        let raw = sub_box(
                            &bytes,
                            &[64, 64],
                            &[oi * outer[0], oj * outer[1]],
                            &outer,
                            2,
                        );
                        enc.store_chunk(&[oi, oj], &raw).unwrap();
                    }
                }
                // the units of the first 16 rows are fill: no plain chunk file there
                assert_eq!(
                    enc.chunk_path(&[0, 0]).exists(),
                    shard.is_some(),
                    "{what}: a fill chunk stored, or a shard with data missing"
                );
                if shard.is_some() {
                    // shard (0, 0): its index lists inner chunks (0, 0) and (0, 1), all
                    // fill, as missing, and (1, 0), (1, 1) as stored
                    let f = std::fs::read(enc.chunk_path(&[0, 0])).unwrap();
                    let index = &f[f.len() - 4 * 16 - 4..f.len() - 4];
                    let word =
                        |i: usize| u64::from_le_bytes(index[8 * i..8 * i + 8].try_into().unwrap());
                    assert!((0..4).all(|i| word(i) == u64::MAX), "{what}: fill stored");
                    assert!((4..8).all(|i| word(i) != u64::MAX), "{what}: data missing");
                }
                let (layout, chunks) = ZarrChunks::open(dir.path()).unwrap();
                assert_eq!(layout.shape, [rows, cols]);
                assert_eq!(layout.dtype, DType::U16);
                assert_eq!(chunks.chunk_shape(), [16, 16]);
                for ui in 0..4 {
                    for uj in 0..4 {
                        if ui * 16 >= rows || uj * 16 >= cols {
                            continue;
                        }
                        let mut got = vec![0xffu8; 16 * 16 * 2];
                        chunks.decode(&[ui, uj], &mut got).unwrap();
                        let want = sub_box(&bytes, &[64, 64], &[ui * 16, uj * 16], &[16, 16], 2);
                        assert_eq!(got, want, "{what}: unit ({ui}, {uj})");
                    }
                }
            }
        }
    }

    #[test]
    fn sub_box_takes_the_box_in_c_order() {
        // a 3x4 array of u16 (elements 0..12), the 2x2 box at (1, 1)
        let src: Vec<u8> = (0u16..12).flat_map(u16::to_le_bytes).collect();
        let b = sub_box(&src, &[3, 4], &[1, 1], &[2, 2], 2);
        let got: Vec<u16> = b
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, [5, 6, 9, 10]);
    }
}
