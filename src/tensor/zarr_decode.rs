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
//! decoded approximately. Writing stays with `zarrs` (see [`super::zarr`]).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::dtype::DType;
use crate::error::{Error, Result, shown};

/// A bytes-to-bytes codec, applied after `bytes` when writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compressor {
    Zstd,
    Gzip,
    Blosc,
    /// A CRC-32C checksum of the preceding bytes, at the end (`true`) or the start.
    Crc32c {
        at_end: bool,
    },
}

/// How one chunk's bytes are encoded: `transpose`, `bytes`, then bytes-to-bytes codecs.
#[derive(Clone, Debug)]
struct Chain {
    /// `transpose` order: axis `i` of the encoded array is axis `order[i]` of the chunk.
    order: Option<Vec<usize>>,
    big_endian: bool,
    /// In the order they are applied when writing (decoding goes backwards).
    compressors: Vec<Compressor>,
}

/// Most bytes one compression stage may add to what it compresses: zstd, gzip and blosc
/// all stay far below `n / 16 + 4 KiB` on incompressible data, so a stored chunk larger
/// than that is corrupt or hostile and is refused before it is read.
fn max_encoded(n: u64) -> u64 {
    n.saturating_add(n / 16).saturating_add(4096)
}

impl Chain {
    /// Largest stored size of a chunk of `bytes` decoded bytes.
    fn max_stored(&self, bytes: u64) -> u64 {
        self.compressors.iter().fold(bytes, |n, c| match c {
            Compressor::Crc32c { .. } => n.saturating_add(4),
            _ => max_encoded(n),
        })
    }
}

/// How a store's chunks are laid out: plain chunks or shards of inner chunks.
#[derive(Clone, Debug)]
enum Storage {
    Plain(Chain),
    Sharded {
        /// Inner chunk shape.
        inner: Vec<usize>,
        /// Inner chunks per shard along each axis.
        per_shard: Vec<usize>,
        chain: Chain,
        /// The index is stored little-endian unless this is set.
        index_big_endian: bool,
        /// The index ends with a CRC-32C of its entries.
        index_crc: bool,
        index_at_start: bool,
    },
}

/// What [`ZarrDecoder`] needs from the metadata, parsed and checked.
#[derive(Clone, Debug)]
pub struct Codecs {
    storage: Storage,
    /// `default` (`c/1/2`) or `v2` (`1.2`) keys, and the separator.
    v2_keys: bool,
    separator: char,
    /// One element of the fill value, in native byte order.
    fill: Vec<u8>,
}

fn bad(meta: &Path, msg: impl Into<String>) -> Error {
    Error::format(meta, msg.into())
}

/// Parses the codecs, the chunk key encoding and the fill value of the array whose
/// metadata is `m` (read from `meta`), with `chunk_shape` (the regular grid's) and
/// `dtype` already checked.
///
/// # Errors
/// [`Error::Format`] naming the codec, configuration or value tilestream does not
/// decode exactly.
pub fn parse(meta: &Path, m: &Value, dtype: DType, chunk_shape: &[usize]) -> Result<Codecs> {
    if m.get("storage_transformers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(bad(
            meta,
            "storage_transformers are set: tilestream reads arrays without them",
        ));
    }
    let codecs = m["codecs"]
        .as_array()
        .ok_or_else(|| bad(meta, "no codecs list"))?;
    let storage = if codecs.iter().any(|c| c["name"] == "sharding_indexed") {
        sharded(meta, codecs, dtype, chunk_shape)?
    } else {
        Storage::Plain(chain(meta, codecs, dtype, chunk_shape.len(), false)?)
    };
    let (v2_keys, separator) = key_encoding(meta, &m["chunk_key_encoding"])?;
    Ok(Codecs {
        storage,
        v2_keys,
        separator,
        fill: fill_value(meta, &m["fill_value"], dtype)?,
    })
}

fn sharded(meta: &Path, codecs: &[Value], dtype: DType, shard: &[usize]) -> Result<Storage> {
    if codecs.len() != 1 {
        return Err(bad(
            meta,
            "sharding_indexed with other codecs around it: tilestream reads shards that \
             are the array's only codec",
        ));
    }
    let cfg = &codecs[0]["configuration"];
    let inner: Vec<usize> = cfg["chunk_shape"]
        .as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect())
        .filter(|c: &Vec<usize>| c.len() == shard.len())
        .ok_or_else(|| bad(meta, "sharding_indexed: bad chunk_shape"))?;
    if inner.iter().zip(shard).any(|(&i, &s)| i == 0 || s % i != 0) {
        return Err(bad(
            meta,
            format!(
                "sharding_indexed: inner chunks {} do not divide shards {}",
                super::fmt_shape(&inner),
                super::fmt_shape(shard)
            ),
        ));
    }
    let inner_codecs = cfg["codecs"]
        .as_array()
        .ok_or_else(|| bad(meta, "sharding_indexed: no codecs"))?;
    let chain = chain(meta, inner_codecs, dtype, shard.len(), true)?;
    // the index: bytes (either order), then an optional crc32c, nothing else
    let idx = cfg["index_codecs"]
        .as_array()
        .ok_or_else(|| bad(meta, "sharding_indexed: no index_codecs"))?;
    let index = chain_of_index(meta, idx)?;
    let index_at_start = match cfg["index_location"].as_str() {
        None | Some("end") => false,
        Some("start") => true,
        Some(o) => {
            return Err(bad(
                meta,
                format!("sharding_indexed: index_location `{}`", shown(o)),
            ));
        }
    };
    Ok(Storage::Sharded {
        per_shard: shard.iter().zip(&inner).map(|(&s, &i)| s / i).collect(),
        inner,
        chain,
        index_big_endian: index.0,
        index_crc: index.1,
        index_at_start,
    })
}

/// (big-endian, checksummed) of a shard index's codecs.
fn chain_of_index(meta: &Path, codecs: &[Value]) -> Result<(bool, bool)> {
    let names: Vec<String> = codecs
        .iter()
        .map(|c| shown(c["name"].as_str().unwrap_or("?")))
        .collect();
    let refuse = || {
        bad(
            meta,
            format!(
                "sharding_indexed: index_codecs [{}]; tilestream reads indexes encoded with \
                 bytes and an optional crc32c",
                names.join(", ")
            ),
        )
    };
    let plain: Vec<&str> = names.iter().map(String::as_str).collect();
    match plain.as_slice() {
        ["bytes"] | ["bytes", "crc32c"] => {}
        _ => return Err(refuse()),
    }
    let big = bytes_big_endian(meta, &codecs[0]["configuration"], 8)?;
    if names.len() == 2 && !crc_at_end(meta, &codecs[1]["configuration"])? {
        return Err(refuse());
    }
    Ok((big, names.len() == 2))
}

fn bytes_big_endian(meta: &Path, cfg: &Value, size: usize) -> Result<bool> {
    match cfg.get("endian").and_then(Value::as_str) {
        Some("little") => Ok(false),
        Some("big") => Ok(true),
        None if size == 1 => Ok(false),
        None => Err(bad(
            meta,
            "the bytes codec has no endian for a multi-byte data type",
        )),
        Some(o) => Err(bad(
            meta,
            format!("the bytes codec's endian `{}`", shown(o)),
        )),
    }
}

fn crc_at_end(meta: &Path, cfg: &Value) -> Result<bool> {
    match cfg.get("location").and_then(Value::as_str) {
        None | Some("end") => Ok(true),
        Some("start") => Ok(false),
        Some(o) => Err(bad(meta, format!("crc32c location `{}`", shown(o)))),
    }
}

/// A chunk's codec chain: array-to-array codecs (transpose), one array-to-bytes codec
/// (bytes), bytes-to-bytes codecs, in that order.
fn chain(meta: &Path, codecs: &[Value], dtype: DType, rank: usize, inner: bool) -> Result<Chain> {
    let mut order = None;
    let mut big_endian = None;
    let mut compressors = Vec::new();
    for c in codecs {
        let name = c["name"].as_str().unwrap_or("?");
        let cfg = &c["configuration"];
        match (name, big_endian.is_some()) {
            ("transpose", false) => {
                if order.is_some() {
                    return Err(bad(meta, "two transpose codecs"));
                }
                order = Some(transpose_order(meta, &cfg["order"], rank)?);
            }
            ("bytes", false) => big_endian = Some(bytes_big_endian(meta, cfg, dtype.size())?),
            ("zstd", true) => compressors.push(Compressor::Zstd),
            ("gzip", true) => compressors.push(Compressor::Gzip),
            ("blosc", true) => compressors.push(Compressor::Blosc),
            ("crc32c", true) => compressors.push(Compressor::Crc32c {
                at_end: crc_at_end(meta, cfg)?,
            }),
            ("sharding_indexed", _) if inner => {
                return Err(bad(
                    meta,
                    "shards inside shards: tilestream reads one level of sharding_indexed",
                ));
            }
            _ => {
                return Err(bad(
                    meta,
                    format!(
                        "codec `{}`{}: tilestream decodes transpose, bytes, zstd, gzip, \
                         blosc, crc32c and sharding_indexed, in the specification's order",
                        shown(name),
                        if big_endian.is_some() {
                            " after bytes"
                        } else {
                            " before bytes"
                        }
                    ),
                ));
            }
        }
    }
    let big_endian = big_endian.ok_or_else(|| bad(meta, "no bytes codec in the codec chain"))?;
    Ok(Chain {
        order,
        big_endian: big_endian && dtype.size() > 1,
        compressors,
    })
}

fn transpose_order(meta: &Path, v: &Value, rank: usize) -> Result<Vec<usize>> {
    let order: Option<Vec<usize>> = match v {
        Value::String(s) if s == "C" => Some((0..rank).collect()),
        Value::String(s) if s == "F" => Some((0..rank).rev().collect()),
        Value::Array(a) => a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect(),
        _ => None,
    };
    let ok = order.filter(|o| {
        let mut seen = vec![false; rank];
        o.len() == rank
            && o.iter()
                .all(|&i| i < rank && !std::mem::replace(&mut seen[i], true))
    });
    ok.ok_or_else(|| {
        bad(
            meta,
            format!(
                "transpose order {} is not a permutation of the axes",
                shown(&v.to_string())
            ),
        )
    })
}

fn key_encoding(meta: &Path, v: &Value) -> Result<(bool, char)> {
    let name = v["name"].as_str().unwrap_or("default");
    let v2 = match name {
        "default" => false,
        "v2" => true,
        o => return Err(bad(meta, format!("chunk_key_encoding `{}`", shown(o)))),
    };
    let sep = match v["configuration"]["separator"].as_str() {
        None => {
            if v2 {
                '.'
            } else {
                '/'
            }
        }
        Some("/") => '/',
        Some(".") => '.',
        Some(o) => return Err(bad(meta, format!("chunk key separator `{}`", shown(o)))),
    };
    Ok((v2, sep))
}

/// One element of `dtype` holding the fill value `v`, in native byte order.
fn fill_value(meta: &Path, v: &Value, dtype: DType) -> Result<Vec<u8>> {
    let refuse = || {
        bad(
            meta,
            format!(
                "fill_value {} is not a {}",
                shown(&v.to_string()),
                dtype.name()
            ),
        )
    };
    let size = dtype.size();
    // "0x..." is the element's bytes, big-endian, for floats
    if let Some(hex) = v.as_str().and_then(|s| s.strip_prefix("0x")) {
        if !dtype.is_float() || hex.len() != 2 * size {
            return Err(refuse());
        }
        let bits = u64::from_str_radix(hex, 16).map_err(|_| refuse())?;
        return Ok(bits.to_le_bytes()[..size].to_vec());
    }
    if dtype == DType::Bool {
        return v.as_bool().map(|b| vec![u8::from(b)]).ok_or_else(refuse);
    }
    if dtype.is_float() {
        let x = match v {
            Value::Number(n) => n.as_f64().ok_or_else(refuse)?,
            Value::String(s) if s == "NaN" => f64::NAN,
            Value::String(s) if s == "Infinity" => f64::INFINITY,
            Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
            _ => return Err(refuse()),
        };
        let mut out = vec![0u8; size];
        crate::dtype::store_f64(&[x], &mut out, dtype);
        return Ok(out);
    }
    // integers: exactly, in range
    let fits = |lo: i128, hi: i128| -> Result<i128> {
        let x = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))
            .ok_or_else(refuse)?;
        if (lo..=hi).contains(&x) {
            Ok(x)
        } else {
            Err(refuse())
        }
    };
    let bits = |bytes: usize, signed: bool| -> Result<Vec<u8>> {
        let width = 8 * bytes as u32;
        let (lo, hi) = if signed {
            (-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
        } else {
            (0, (1i128 << width) - 1)
        };
        Ok(fits(lo, hi)?.to_le_bytes()[..bytes].to_vec())
    };
    let le = match dtype {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => bits(size, true)?,
        _ => bits(size, false)?,
    };
    // native order (every supported target is little-endian; keep it honest anyway)
    Ok(if cfg!(target_endian = "big") {
        le.into_iter().rev().collect()
    } else {
        le
    })
}

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
    root: PathBuf,
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

/// Missing chunk directories remembered (then forgotten all at once).
const MISSING_DIRS: usize = 1024;

#[derive(Debug, Default)]
struct IndexCache {
    map: HashMap<Vec<usize>, Option<Arc<Vec<u64>>>>,
    order: VecDeque<Vec<usize>>,
    held: u64,
}

impl ZarrDecoder {
    /// A decoder for the store at `root` of an array of `shape` whose grid has chunks of
    /// `chunk_shape`.
    ///
    /// # Errors
    /// [`Error::Format`] if a shard's index would be larger than 16 MiB.
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
            dtype,
            unit,
            codecs,
            indexes: Mutex::default(),
            index_cache: 0,
            missing_dirs: Mutex::default(),
        };
        if dec.index_bytes() > INDEX_MAX {
            return Err(bad(
                &root.join("zarr.json"),
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

    /// Decodes the unit at `pos` (in the grid of [`ZarrDecoder::unit_shape`]) into
    /// `out`, which holds exactly one unit, C order.
    ///
    /// # Errors
    /// [`Error::Format`] naming the chunk for anything corrupt, oversized or truncated;
    /// [`Error::Io`] if it cannot be read.
    pub fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let stored = match &self.codecs.storage {
            Storage::Plain(chain) => {
                let path = self.root.join(self.key(pos));
                let what = format!("chunk {pos:?}");
                match self.open_chunk(&path)? {
                    None => None,
                    Some(f) => {
                        let len = f
                            .metadata()
                            .map_err(|e| Error::io("inspect", &path, e))?
                            .len();
                        let max = chain.max_stored(self.unit_bytes());
                        if len > max {
                            return Err(bad(
                                &path,
                                format!(
                                    "{what} is stored in {len} bytes, more than a chunk of {} \
                                     can take ({max}): the store is corrupt",
                                    crate::budget::fmt_bytes(self.unit_bytes())
                                ),
                            ));
                        }
                        Some((read_at(&f, &path, 0, len)?, path, what))
                    }
                }
            }
            Storage::Sharded { per_shard, .. } => {
                let shard: Vec<usize> = pos.iter().zip(per_shard).map(|(&p, &n)| p / n).collect();
                let within = pos
                    .iter()
                    .zip(per_shard)
                    .fold(0usize, |k, (&p, &n)| k * n + p % n);
                let path = self.root.join(self.key(&shard));
                let what = format!("inner chunk {pos:?} of shard {shard:?}");
                match self.index(&shard, &path)? {
                    None => None,
                    Some(index) => {
                        let (off, n) = (index[2 * within], index[2 * within + 1]);
                        if off == u64::MAX && n == u64::MAX {
                            None
                        } else {
                            let max = self.chain().max_stored(self.unit_bytes());
                            if n > max {
                                return Err(bad(
                                    &path,
                                    format!(
                                        "the index gives {what} {n} bytes, more than it can \
                                         take ({max}): the shard is corrupt"
                                    ),
                                ));
                            }
                            let f = open_chunk(&path)?.ok_or_else(|| {
                                bad(&path, "the shard disappeared while it was read")
                            })?;
                            Some((read_at(&f, &path, off, n)?, path, what))
                        }
                    }
                }
            }
        };
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

    /// The index of the shard at `shard`, stored at `path`: (offset, bytes) per inner
    /// chunk; `None` for a shard with no file.
    fn index(&self, shard: &[usize], path: &Path) -> Result<Option<Arc<Vec<u64>>>> {
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
        let idx = match self.open_chunk(path)? {
            None => None,
            Some(f) => {
                let len = f
                    .metadata()
                    .map_err(|e| Error::io("inspect", path, e))?
                    .len();
                let entries = self.index_bytes();
                let size = entries + if *index_crc { 4 } else { 0 };
                if len < size {
                    return Err(bad(
                        path,
                        format!(
                            "shard {shard:?} is {len} bytes, shorter than its {size}-byte \
                             index: it is truncated"
                        ),
                    ));
                }
                let at = if *index_at_start { 0 } else { len - size };
                let raw = read_at(&f, path, at, size)?;
                let (body, crc) = raw.split_at(entries as usize);
                if *index_crc && crc32c::crc32c(body).to_le_bytes() != crc {
                    return Err(bad(
                        path,
                        format!("the index of shard {shard:?} fails its crc32c checksum"),
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
                        return Err(bad(
                            path,
                            format!(
                                "the index of shard {shard:?} puts inner chunk {k} at bytes \
                                 {off}+{n}, past the shard's {len} bytes: it is corrupt"
                            ),
                        ));
                    }
                }
                Some(Arc::new(v))
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
            return Err(bad(
                path,
                format!(
                    "{what} decodes to {} bytes, but a chunk is {need}: the store is corrupt",
                    data.len()
                ),
            ));
        }
        let es = self.dtype.size();
        if chain.big_endian {
            for e in data.chunks_exact_mut(es) {
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
                Err(bad(
                    path,
                    "a chunk of the store is not a regular file (a FIFO, device or directory)",
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("open", path, e)),
    }
}

fn read_at(f: &File, path: &Path, off: u64, n: u64) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; n as usize];
    f.read_exact_at(&mut buf, off)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(buf)
}

/// Undoes one bytes-to-bytes codec: its output is `size` bytes exactly (`exact`) or at
/// most; decoding stops there.
fn undo(
    path: &Path,
    what: &str,
    c: Compressor,
    src: &[u8],
    size: usize,
    exact: bool,
) -> Result<Vec<u8>> {
    let corrupt = |e: &dyn std::fmt::Display| bad(path, format!("cannot decode {what}: {e}"));
    let over = || {
        bad(
            path,
            format!(
                "{what} decodes to more than the {size} bytes its chunk can be: the store is \
                 corrupt (or a decompression bomb)"
            ),
        )
    };
    match c {
        Compressor::Crc32c { at_end } => {
            if src.len() < 4 {
                return Err(corrupt(&"shorter than its crc32c checksum"));
            }
            let (body, sum) = if at_end {
                let (b, s) = src.split_at(src.len() - 4);
                (b, s)
            } else {
                let (s, b) = src.split_at(4);
                (b, s)
            };
            if crc32c::crc32c(body).to_le_bytes() != sum {
                return Err(corrupt(&"its crc32c checksum does not match"));
            }
            Ok(body.to_vec())
        }
        Compressor::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(src).map_err(|e| corrupt(&e))?;
            bounded_read(d, size, exact).map_err(|e| e.map_or_else(over, |e| corrupt(&e)))
        }
        Compressor::Gzip => bounded_read(flate2::read::GzDecoder::new(src), size, exact)
            .map_err(|e| e.map_or_else(over, |e| corrupt(&e))),
        Compressor::Blosc => blosc(src, size, exact).map_err(|e| match e {
            None => over(),
            Some(m) => corrupt(&m),
        }),
    }
}

/// Reads `r` to its end, refusing more than `size` bytes (`Err(None)`).
fn bounded_read(
    r: impl Read,
    size: usize,
    exact: bool,
) -> std::result::Result<Vec<u8>, Option<std::io::Error>> {
    let mut out = Vec::with_capacity(if exact { size } else { size.min(1 << 20) });
    let got = r
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .map_err(Some)?;
    if got > size {
        return Err(None);
    }
    Ok(out)
}

/// Blosc 1 decompression of `src`, whose header must declare at most `size` bytes.
fn blosc(src: &[u8], size: usize, exact: bool) -> std::result::Result<Vec<u8>, Option<String>> {
    let mut n: usize = 0;
    // SAFETY: `src` is a valid slice of `src.len()` bytes and `n` a valid out-pointer;
    // blosc_cbuffer_validate reads only within the given length.
    let valid =
        unsafe { blosc_src::blosc_cbuffer_validate(src.as_ptr().cast(), src.len(), &raw mut n) };
    if valid != 0 {
        return Err(Some("not a valid blosc buffer".into()));
    }
    if n > size || (exact && n != size) {
        return if n > size {
            Err(None)
        } else {
            Err(Some(format!(
                "its blosc header declares {n} bytes, not {size}"
            )))
        };
    }
    let mut out = vec![0u8; n];
    // SAFETY: the buffer was validated above (its header is consistent with its length
    // and declares `n` decoded bytes); `out` has room for exactly `n` bytes, which is
    // what blosc_decompress_ctx writes at most.
    let got = unsafe {
        blosc_src::blosc_decompress_ctx(src.as_ptr().cast(), out.as_mut_ptr().cast(), n, 1)
    };
    if got < 0 || got as usize != n {
        return Err(Some(format!("blosc failed ({got})")));
    }
    Ok(out)
}

/// Writes the C-order array `src` (the chunk transposed: its axis `i` is axis
/// `order[i]` of the chunk) into `out` in the chunk's own C order.
fn untranspose(src: &[u8], out: &mut [u8], shape: &[usize], order: &[usize], es: usize) {
    let rank = shape.len();
    // stride in `out` of each encoded axis
    let mut strides = vec![0usize; rank];
    let mut s = es;
    for a in (0..rank).rev() {
        strides[a] = s;
        s *= shape[a];
    }
    let enc_shape: Vec<usize> = order.iter().map(|&o| shape[o]).collect();
    let enc_strides: Vec<usize> = order.iter().map(|&o| strides[o]).collect();
    let mut idx = vec![0usize; rank];
    let mut at = 0usize;
    for e in src.chunks_exact(es) {
        out[at..at + es].copy_from_slice(e);
        // next encoded index, C order
        for a in (0..rank).rev() {
            idx[a] += 1;
            at += enc_strides[a];
            if idx[a] < enc_shape[a] {
                break;
            }
            at -= enc_strides[a] * enc_shape[a];
            idx[a] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untranspose_inverts_a_permutation() {
        // a 2x3x4 chunk of u16 whose element (i, j, k) is 100i + 10j + k
        let shape = [2usize, 3, 4];
        let order = [2usize, 0, 1];
        let val = |i: usize, j: usize, k: usize| (100 * i + 10 * j + k) as u16;
        // encoded: axes (k, i, j)
        let mut enc = Vec::new();
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    enc.extend_from_slice(&val(i, j, k).to_le_bytes());
                }
            }
        }
        let mut out = vec![0u8; enc.len()];
        untranspose(&enc, &mut out, &shape, &order, 2);
        let mut want = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    want.extend_from_slice(&val(i, j, k).to_le_bytes());
                }
            }
        }
        assert_eq!(out, want);
    }

    #[test]
    fn fill_values_of_every_form() {
        let m = Path::new("zarr.json");
        let f = |v: Value, d: DType| fill_value(m, &v, d);
        assert_eq!(
            f(serde_json::json!(-2), DType::I16).ok(),
            Some(vec![0xfe, 0xff])
        );
        assert_eq!(
            f(serde_json::json!(u64::MAX), DType::U64).ok(),
            Some(vec![0xff; 8])
        );
        assert!(f(serde_json::json!(256), DType::U8).is_err());
        assert!(f(serde_json::json!(-1), DType::U32).is_err());
        assert!(f(serde_json::json!(1.5), DType::I32).is_err());
        assert_eq!(
            f(serde_json::json!("NaN"), DType::F32).ok(),
            Some(f32::NAN.to_le_bytes().to_vec())
        );
        assert_eq!(
            f(serde_json::json!("-Infinity"), DType::F64).ok(),
            Some(f64::NEG_INFINITY.to_le_bytes().to_vec())
        );
        assert_eq!(
            f(serde_json::json!("0x7fc00001"), DType::F32).ok(),
            Some(0x7fc0_0001u32.to_le_bytes().to_vec())
        );
        assert!(f(serde_json::json!("0x7fc0"), DType::F32).is_err());
        assert_eq!(
            f(serde_json::json!(0.1), DType::F32).ok(),
            Some(0.1f32.to_le_bytes().to_vec())
        );
        assert_eq!(f(serde_json::json!(true), DType::Bool).ok(), Some(vec![1]));
        assert!(f(serde_json::json!(1), DType::Bool).is_err());
    }

    #[test]
    fn decoders_stop_at_the_chunk_size() {
        let p = Path::new("c/0");
        // 1 MiB of zeros claims to be a 1 KiB chunk
        let big = vec![0u8; 1 << 20];
        let z = zstd::encode_all(&big[..], 3).expect("zstd");
        let e = undo(p, "chunk [0]", Compressor::Zstd, &z, 1024, true).expect_err("bomb");
        assert!(
            e.to_string()
                .contains("decodes to more than the 1024 bytes"),
            "{e}"
        );
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut g, &big).expect("gzip");
        let g = g.finish().expect("gzip");
        assert!(undo(p, "chunk [0]", Compressor::Gzip, &g, 1024, true).is_err());
        // and give exactly the chunk when it is one
        let small = zstd::encode_all(&big[..1024], 3).expect("zstd");
        assert_eq!(
            undo(p, "c", Compressor::Zstd, &small, 1024, true)
                .expect("decode")
                .len(),
            1024
        );
        // a checksum that does not match is refused
        let mut c = vec![1u8, 2, 3];
        c.extend_from_slice(&crc32c::crc32c(&[1, 2, 3]).to_le_bytes());
        assert_eq!(
            undo(p, "c", Compressor::Crc32c { at_end: true }, &c, 3, true).expect("crc"),
            vec![1, 2, 3]
        );
        c[0] = 9;
        assert!(undo(p, "c", Compressor::Crc32c { at_end: true }, &c, 3, true).is_err());
    }

    #[test]
    fn codec_chains_outside_the_specification_are_refused() {
        let m = Path::new("zarr.json");
        let parse_codecs = |codecs: Value| {
            let meta = serde_json::json!({
                "codecs": codecs, "fill_value": 0,
                "chunk_key_encoding": {"name": "default"}
            });
            parse(m, &meta, DType::U16, &[4, 4]).map(|_| ())
        };
        let ok = serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
                                    {"name": "zstd", "configuration": {"level": 1}}]);
        assert!(parse_codecs(ok).is_ok());
        for (codecs, says) in [
            (serde_json::json!([{"name": "zstd"}]), "before bytes"),
            (
                serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}},
                                {"name": "bitround"}]),
                "codec `bitround`",
            ),
            (serde_json::json!([{"name": "bytes"}]), "no endian"),
            (
                serde_json::json!([{"name": "transpose", "configuration": {"order": [0, 0]}},
                                {"name": "bytes", "configuration": {"endian": "big"}}]),
                "not a permutation",
            ),
        ] {
            let e = parse_codecs(codecs).expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
