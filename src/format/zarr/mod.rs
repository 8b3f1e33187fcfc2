//! Zarr v3 in and out: the chunked format large scientific arrays increasingly come in.
//!
//! Reading: a store (a directory with a `zarr.json`) with a regular chunk grid is a
//! [`Chunked`](crate::format::chunked::Chunked) tensor: each chunk (or inner chunk, when the
//! array is sharded) a tile touches is decoded once, by tilestream's own bounded decoder
//! ([`decode`]: bytes, transpose, zstd, gzip, blosc, crc32c, sharding).
//!
//! Writing: runs encode a store's chunks as they complete them ([`crate::format::zarr::stream`],
//! through `encode_chunk_range` and tilestream's own encoder, `zarr_encode`),
//! into a store built in a temporary directory beside the destination and renamed into
//! place once complete; nothing is staged raw. This module holds the layout
//! ([`ZarrWriteOptions`], [`chunk_shapes`]).

#[doc(hidden)]
pub use rows::{commit_zarr, create_zarr_for_rows};

pub mod codec;
#[doc(hidden)]
pub mod decode;
mod encode;
pub(crate) mod encoding;
mod rows;
#[doc(hidden)]
pub mod stream;

use std::path::Path;

use rayon::prelude::*;

use crate::dtype::DType;
use crate::error::{Error, Result, ZarrError};
use crate::format::chunked::ChunkSource;
use crate::format::zarr::encode::ZarrEncoder;

/// True if the path names a Zarr store: a `.zarr` name, or a directory holding a
/// `zarr.json`.
#[must_use]
pub fn is_zarr_path(path: &Path) -> bool {
    crate::io::own_files::Dest::of(path) == crate::io::own_files::Dest::Store
}

/// What a Zarr v3 array's metadata says about its layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZarrLayout {
    /// Shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Chunk (or shard) shape of the regular grid.
    pub chunk_shape: Vec<usize>,
    /// Inner chunk shape when the array is sharded.
    pub inner_chunks: Option<Vec<usize>>,
    /// Codec chain, by name (`bytes`, `zstd`, `sharding_indexed`...).
    pub codecs: Vec<String>,
    /// The fill value as written in the metadata.
    pub fill_value: String,
}

fn zarr_dtype(path: &Path, name: &str) -> Result<DType> {
    Ok(match name {
        "bool" => DType::Bool,
        "int8" => DType::I8,
        "int16" => DType::I16,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "uint8" => DType::U8,
        "uint16" => DType::U16,
        "uint32" => DType::U32,
        "uint64" => DType::U64,
        "float16" => DType::F16,
        "float32" => DType::F32,
        "float64" => DType::F64,
        "bfloat16" => DType::BF16,
        "complex64" => DType::C64,
        "complex128" => DType::C128,
        other => {
            return Err(Error::zarr(
                path,
                ZarrError::Unsupported,
                format!(
                    "Zarr data type `{other}` is not one tilestream handles (bool, ints, floats, complex64, complex128)"
                ),
            ));
        }
    })
}

fn usizes(v: &serde_json::Value) -> Option<Vec<usize>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().map(|n| n as usize))
        .collect()
}

/// Most bytes of a `zarr.json` read: metadata and attributes of real arrays take a few
/// KiB; a larger file is refused before it is parsed into memory.
const ZARR_JSON_MAX: u64 = 1 << 20;

/// Reads the metadata (`zarr.json`) of the array at the root of the store at `path`.
///
/// # Errors
/// [`Error::Zarr`] for a group, a Zarr v2 store, or a chunk grid that is not regular.
pub fn read_layout(path: &Path) -> Result<ZarrLayout> {
    read_meta(path).map(|(layout, _)| layout)
}

/// [`read_layout`], with the codecs parsed for decoding.
fn read_meta(path: &Path) -> Result<(ZarrLayout, decode::Codecs)> {
    let meta_path = path.join("zarr.json");
    let text = match crate::io::own_files::read_small_input(&meta_path, ZARR_JSON_MAX) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            let v2 = [".zarray", ".zgroup"].iter().any(|k| {
                let p = path.join(k);
                if crate::io::remote::is_url(path) {
                    let url = p.to_str().unwrap_or_default();
                    matches!(crate::io::remote::Object::open_if_exists(url), Ok(Some(_)))
                } else {
                    p.is_file()
                }
            });
            let msg = if v2 {
                "a Zarr v2 store: tilestream reads Zarr v3 (convert with zarr-python or zarrs)"
            } else {
                "no zarr.json here: not a Zarr v3 array"
            };
            return Err(Error::zarr(path, ZarrError::Unsupported, msg));
        }
        r => r?,
    };
    let m: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Error::zarr(
            &meta_path,
            ZarrError::Metadata,
            format!("not valid JSON: {e}"),
        )
    })?;
    if m["zarr_format"] != 3 {
        return Err(Error::zarr(
            &meta_path,
            ZarrError::Unsupported,
            "zarr_format is not 3",
        ));
    }
    if m["node_type"] != "array" {
        return Err(Error::zarr(
            path,
            ZarrError::Unsupported,
            "a Zarr group, not an array: give the path of one of its arrays",
        ));
    }
    let shape = usizes(&m["shape"])
        .ok_or_else(|| Error::zarr(&meta_path, ZarrError::Metadata, "bad shape"))?;
    if shape.len() > crate::format::MAX_RANK {
        return Err(Error::zarr(
            &meta_path,
            ZarrError::Unsupported,
            format!(
                "{} dimensions; tilestream reads at most {} (numpy's limit)",
                shape.len(),
                crate::format::MAX_RANK
            ),
        ));
    }
    if shape.is_empty() {
        return Err(Error::zarr(
            path,
            ZarrError::Unsupported,
            "a 0-dimensional Zarr array is not supported",
        ));
    }
    let dtype = zarr_dtype(path, m["data_type"].as_str().unwrap_or("?"))?;
    if m["chunk_grid"]["name"] != "regular" {
        return Err(Error::zarr(
            path,
            ZarrError::Unsupported,
            format!(
                "chunk grid `{}` is not regular: tilestream reads regular chunk grids",
                m["chunk_grid"]["name"]
            ),
        ));
    }
    let chunk_shape = usizes(&m["chunk_grid"]["configuration"]["chunk_shape"])
        .filter(|c| c.len() == shape.len() && c.iter().all(|&d| d > 0))
        .ok_or_else(|| Error::zarr(&meta_path, ZarrError::Metadata, "bad chunk_shape"))?;
    let decode = decode::parse(&meta_path, &m, dtype, &chunk_shape)?;
    let mut codecs = Vec::new();
    let mut inner_chunks = None;
    for c in m["codecs"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?").to_string();
        if name == "sharding_indexed" {
            inner_chunks = usizes(&c["configuration"]["chunk_shape"]);
            if let Some(inner) = &inner_chunks {
                check_chunk_bytes(&meta_path, "the shards' chunk_shape", inner, dtype)?;
            }
            // shards are read one inner chunk at a time: their size only has to be one
            check_chunk_bytes(&meta_path, "chunk_shape", &chunk_shape, DType::U8)?;
            let inner: Vec<String> = c["configuration"]["codecs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| x["name"].as_str().unwrap_or("?").to_string())
                .collect();
            codecs.push(format!("sharding_indexed({})", inner.join(", ")));
        } else {
            codecs.push(name);
        }
    }
    if inner_chunks.is_none() {
        check_chunk_bytes(&meta_path, "chunk_shape", &chunk_shape, dtype)?;
    }
    let layout = ZarrLayout {
        shape,
        dtype,
        chunk_shape,
        inner_chunks,
        codecs,
        fill_value: m["fill_value"].to_string(),
    };
    Ok((layout, decode))
}

/// Largest decoded chunk (or shard) tilestream reads: chunks are decoded whole, so one
/// larger than this could never fit a budget (and sizes past 2^64 bytes overflow).
const CHUNK_MAX: u64 = 16 << 30;

/// Refuses a chunk shape whose decoded size overflows or passes [`CHUNK_MAX`].
fn check_chunk_bytes(meta: &Path, what: &str, chunk: &[usize], dtype: DType) -> Result<()> {
    let bytes = chunk
        .iter()
        .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64));
    match bytes {
        Some(b) if b <= CHUNK_MAX => Ok(()),
        _ => Err(Error::zarr(
            meta,
            ZarrError::TooLarge,
            format!(
                "{what} {} of {} decodes to {} a chunk; tilestream decodes chunks whole and \
                 reads chunks of at most {}",
                crate::format::fmt_shape(chunk),
                dtype.name(),
                bytes.map_or_else(|| "over 16 EiB".to_string(), crate::budget::fmt_bytes),
                crate::budget::fmt_bytes(CHUNK_MAX)
            ),
        )),
    }
}

/// Decodes the chunks of a Zarr array for [`Chunked`](crate::format::chunked::Chunked): the
/// array's chunks, or the inner chunks of its shards (see [`decode`]).
#[derive(Debug)]
pub struct ZarrChunks {
    decoder: decode::ZarrDecoder,
}

impl ZarrChunks {
    /// Opens the array at the root of the store at `path`.
    ///
    /// # Errors
    /// As [`read_layout`]; [`Error::Zarr`] for codecs tilestream does not decode
    /// exactly.
    pub fn open(path: &Path) -> Result<(ZarrLayout, Self)> {
        let (layout, codecs) = read_meta(path)?;
        let decoder = decode::ZarrDecoder::new(
            path,
            layout.dtype,
            &layout.shape,
            &layout.chunk_shape,
            codecs,
        )?;
        Ok((layout, ZarrChunks { decoder }))
    }
}

impl ChunkSource for ZarrChunks {
    fn chunk_shape(&self) -> &[usize] {
        self.decoder.unit_shape()
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        self.decoder.decode(pos, out)
    }

    fn resident_bytes(&self) -> u64 {
        self.decoder.resident_bytes()
    }

    fn work_bytes(&self) -> u64 {
        self.decoder.work_bytes()
    }

    fn fetch_bytes(&self) -> u64 {
        self.decoder.fetch_bytes()
    }

    fn decode_batch(
        &self,
        pos: &[Vec<usize>],
        outs: &mut [Vec<u8>],
        per_task: usize,
    ) -> Result<()> {
        if self.decoder.is_remote() {
            self.decoder.decode_batch(pos, outs)
        } else {
            crate::format::chunked::decode_each(self, pos, outs, per_task)
        }
    }
}

/// Compression of written Zarr chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZarrCompression {
    /// The `bytes` codec alone.
    None,
    /// Zstandard at a level.
    Zstd(i32),
    /// gzip at a level 0-9.
    Gzip(u32),
    /// Blosc (LZ4, byte shuffle) at a level 0-9.
    Blosc(u8),
}

impl std::str::FromStr for ZarrCompression {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let spec = crate::format::CodecSpec::parse(s, || {
            Error::invalid(format!(
                "unknown Zarr compression `{s}`: use none, zstd[:level], gzip[:0-9] or blosc[:0-9]"
            ))
        });
        match spec.name.as_str() {
            "none" if spec.level.is_none() => Ok(ZarrCompression::None),
            "zstd" => Ok(ZarrCompression::Zstd(spec.level_in(3, -7, 22)? as i32)),
            "gzip" => Ok(ZarrCompression::Gzip(spec.level_in(5, 0, 9)? as u32)),
            "blosc" => Ok(ZarrCompression::Blosc(spec.level_in(5, 0, 9)? as u8)),
            _ => Err(spec.bad()),
        }
    }
}

/// How a Zarr v3 output is laid out: chunks, shards, compression.
#[derive(Clone, Debug, PartialEq)]
pub struct ZarrWriteOptions {
    /// Chunk shape (`None`: 512 along the last two axes, 1 before them; 1 Mi elements for
    /// one axis). With `shard`, this is the inner chunk shape.
    pub chunks: Option<Vec<usize>>,
    /// Shard shape (a multiple of the chunk shape), for the sharding codec.
    pub shard: Option<Vec<usize>>,
    /// Chunk compression.
    pub compression: ZarrCompression,
    /// Memory the encoder may hold (chunks in flight).
    pub memory: u64,
}

impl Default for ZarrWriteOptions {
    fn default() -> Self {
        ZarrWriteOptions {
            chunks: None,
            shard: None,
            compression: ZarrCompression::Zstd(3),
            memory: 64 << 20,
        }
    }
}

/// The default chunk shape for an array of `shape`.
#[must_use]
pub fn default_chunks(shape: &[usize]) -> Vec<usize> {
    let r = shape.len();
    match r {
        0 => vec![],
        1 => vec![shape[0].clamp(1, 1 << 20)],
        _ => (0..r)
            .map(|a| {
                if a + 2 >= r {
                    shape[a].clamp(1, 512)
                } else {
                    1
                }
            })
            .collect(),
    }
}

/// The inner chunk shape and the outer one (the shard, or the chunk when not sharded)
/// that `opts` give an array of `shape` and `dtype`, checked: one size per dimension,
/// none zero, shards a multiple of chunks, and one outer chunk (which the encoder
/// assembles in memory) no larger than `memory`.
///
/// # Errors
/// [`Error::Invalid`] naming the option and the arithmetic.
pub fn chunk_shapes(
    opts: &ZarrWriteOptions,
    shape: &[usize],
    dtype: DType,
    memory: u64,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let rank = shape.len();
    let inner = opts.chunks.clone().unwrap_or_else(|| default_chunks(shape));
    let check = |what: &str, c: &[usize]| -> Result<()> {
        if c.len() != rank || c.contains(&0) {
            return Err(Error::invalid(format!(
                "{what} {} does not fit an array of shape {}: give {rank} positive sizes",
                crate::format::fmt_shape(c),
                crate::format::fmt_shape(shape)
            )));
        }
        let bytes = c
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64));
        if bytes.is_none_or(|b| b > memory) {
            return Err(Error::invalid(format!(
                "{what} {}: one chunk of {} is {}, more than the {} the encoder may hold; give \
                 smaller chunks or a larger `memory`",
                crate::format::fmt_shape(c),
                dtype.name(),
                bytes.map_or_else(|| "over 16 EiB".to_string(), crate::budget::fmt_bytes),
                crate::budget::fmt_bytes(memory)
            )));
        }
        Ok(())
    };
    check("`zarr_chunks`", &inner)?;
    let outer = match &opts.shard {
        Some(s) => {
            if s.len() == rank && s.iter().zip(&inner).any(|(s, c)| *c == 0 || s % c != 0) {
                return Err(Error::invalid(format!(
                    "`zarr_shard={}` is not a multiple of the chunk shape {}",
                    crate::format::fmt_shape(s),
                    crate::format::fmt_shape(&inner)
                )));
            }
            check("`zarr_shard`", s)?;
            s.clone()
        }
        None => inner.clone(),
    };
    Ok((inner, outer))
}

/// Writes only `zarr.json` of the array of `shape` written as `opts` say into `dir`: the
/// store that the tasks of a job split by rows fill (each streaming its rows' chunks).
///
/// # Errors
/// [`Error::Invalid`] for chunk or shard shapes that do not fit the array;
/// [`Error::Io`] if `zarr.json` cannot be written.
pub fn create_store(
    dir: &Path,
    shape: &[usize],
    dtype: DType,
    opts: &ZarrWriteOptions,
) -> Result<()> {
    // each task checks its chunks against its own budget
    let unbounded = ZarrWriteOptions {
        memory: u64::MAX,
        ..opts.clone()
    };
    ZarrEncoder::new(dir, shape, dtype, &unbounded)?.store_metadata()?;
    Ok(())
}

/// Rows of the leading axis in one (outer) chunk of an array written with `opts`: the
/// step on which a job writing a Zarr store by rows splits it.
///
/// # Errors
/// As [`chunk_shapes`].
pub fn chunk_rows(opts: &ZarrWriteOptions, shape: &[usize], dtype: DType) -> Result<usize> {
    let (_, outer) = chunk_shapes(opts, shape, dtype, u64::MAX)?;
    Ok(outer.first().copied().unwrap_or(1))
}

/// Encodes and stores the outer chunks `chunks` (flat C-order indices into the chunk
/// grid), a batch at a time within `memory`; `read(at, buf)` reads the array's bytes
/// by offset (only those of these chunks are asked for).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_chunk_range(
    encoder: &ZarrEncoder,
    shape: &[usize],
    dtype: DType,
    outer: &[usize],
    memory: u64,
    chunks: std::ops::Range<usize>,
    read: &(dyn Fn(u64, &mut [u8]) -> Result<()> + Sync),
) -> Result<()> {
    let rank = shape.len();

    let es = dtype.size();
    let grid: Vec<usize> = shape
        .iter()
        .zip(outer)
        .map(|(&n, &c)| n.div_ceil(c))
        .collect();
    let chunk_elems: usize = outer.iter().product();
    let chunk_bytes = chunk_elems * es;
    let batch = ((memory / (3 * chunk_bytes as u64).max(1)) as usize)
        .clamp(1, 4 * crate::io::pool::threads().max(1));
    let last = outer[rank - 1];
    let encode = |k: usize| -> Result<()> {
        // grid position of chunk k, C order
        let mut pos = vec![0usize; rank];
        let mut rem = k;
        for a in (0..rank).rev() {
            pos[a] = rem % grid[a];
            rem /= grid[a];
        }
        let origin: Vec<usize> = pos.iter().zip(outer).map(|(p, c)| p * c).collect();
        let extent: Vec<usize> = (0..rank)
            .map(|a| outer[a].min(shape[a] - origin[a]))
            .collect();
        let mut buf = vec![0u8; chunk_bytes];
        // every run along the last axis inside the array, to its place in the chunk
        let run = extent[rank - 1] * es;
        crate::format::chunk_assembly::for_each_box_row(shape, &origin, &extent, |idx, at| {
            let row = idx.iter().zip(outer).fold(0, |r, (&i, &o)| r * o + i);
            let c0 = row * last * es;
            read((at * es) as u64, &mut buf[c0..c0 + run])
        })?;
        encoder.store_chunk(&pos, &buf)
    };
    let all: Vec<usize> = chunks.collect();
    for group in all.chunks(batch) {
        crate::io::pool::install(|| group.par_iter().try_for_each(|&k| encode(k)))?;
    }
    Ok(())
}
