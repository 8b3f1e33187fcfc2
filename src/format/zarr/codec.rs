//! The metadata side of Zarr v3 decoding: a store's codecs (`transpose`, `bytes`,
//! `zstd`, `gzip`, `blosc`, `crc32c`, `sharding_indexed`), chunk key encoding and fill
//! value, parsed and checked into [`Codecs`] for [`crate::format::zarr::decode::ZarrDecoder`].
//! Anything tilestream does not decode exactly is refused here, in one line naming it.

use std::path::Path;

use serde_json::Value;

use crate::dtype::DType;
use crate::error::{Error, Result, ZarrError, shown};

/// A bytes-to-bytes codec, applied after `bytes` when writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compressor {
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
pub(crate) struct Chain {
    /// `transpose` order: axis `i` of the encoded array is axis `order[i]` of the chunk.
    pub(crate) order: Option<Vec<usize>>,
    pub(crate) big_endian: bool,
    /// In the order they are applied when writing (decoding goes backwards).
    pub(crate) compressors: Vec<Compressor>,
}

/// Most bytes one compression stage may add to what it compresses: zstd, gzip and blosc
/// all stay far below `n / 16 + 4 KiB` on incompressible data, so a stored chunk larger
/// than that is corrupt or hostile and is refused before it is read.
pub(crate) fn max_encoded(n: u64) -> u64 {
    n.saturating_add(n / 16).saturating_add(4096)
}

impl Chain {
    /// Largest stored size of a chunk of `bytes` decoded bytes.
    pub(crate) fn max_stored(&self, bytes: u64) -> u64 {
        self.compressors.iter().fold(bytes, |n, c| match c {
            Compressor::Crc32c { .. } => n.saturating_add(4),
            _ => max_encoded(n),
        })
    }
}

/// How a store's chunks are laid out: plain chunks or shards of inner chunks.
#[derive(Clone, Debug)]
pub(crate) enum Storage {
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

/// What the Zarr decoder needs from the metadata, parsed and checked.
#[derive(Clone, Debug)]
pub struct Codecs {
    pub(crate) storage: Storage,
    /// `default` (`c/1/2`) or `v2` (`1.2`) keys, and the separator.
    pub(crate) v2_keys: bool,
    pub(crate) separator: char,
    /// One element of the fill value, in native byte order.
    pub(crate) fill: Vec<u8>,
}

/// Parses the codecs, the chunk key encoding and the fill value of the array whose
/// metadata is `m` (read from `meta`), with `chunk_shape` (the regular grid's) and
/// `dtype` already checked.
///
/// # Errors
/// [`Error::Zarr`] naming the codec, configuration or value tilestream does not
/// decode exactly.
pub fn parse(meta: &Path, m: &Value, dtype: DType, chunk_shape: &[usize]) -> Result<Codecs> {
    if m.get("storage_transformers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(Error::zarr(
            meta,
            ZarrError::Unsupported,
            "storage_transformers are set: tilestream reads arrays without them",
        ));
    }
    let codecs = m["codecs"]
        .as_array()
        .ok_or_else(|| Error::zarr(meta, ZarrError::Metadata, "no codecs list"))?;
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
        return Err(Error::zarr(
            meta,
            ZarrError::Unsupported,
            "sharding_indexed with other codecs around it: tilestream reads shards that \
             are the array's only codec",
        ));
    }
    let cfg = &codecs[0]["configuration"];
    let inner: Vec<usize> = cfg["chunk_shape"]
        .as_array()
        .and_then(|a| a.iter().map(|x| x.as_u64().map(|n| n as usize)).collect())
        .filter(|c: &Vec<usize>| c.len() == shard.len())
        .ok_or_else(|| {
            Error::zarr(
                meta,
                ZarrError::Metadata,
                "sharding_indexed: bad chunk_shape",
            )
        })?;
    if inner.iter().zip(shard).any(|(&i, &s)| i == 0 || s % i != 0) {
        return Err(Error::zarr(
            meta,
            ZarrError::Metadata,
            format!(
                "sharding_indexed: inner chunks {} do not divide shards {}",
                crate::format::fmt_shape(&inner),
                crate::format::fmt_shape(shard)
            ),
        ));
    }
    let inner_codecs = cfg["codecs"]
        .as_array()
        .ok_or_else(|| Error::zarr(meta, ZarrError::Metadata, "sharding_indexed: no codecs"))?;
    let chain = chain(meta, inner_codecs, dtype, shard.len(), true)?;
    // the index: bytes (either order), then an optional crc32c, nothing else
    let idx = cfg["index_codecs"].as_array().ok_or_else(|| {
        Error::zarr(
            meta,
            ZarrError::Metadata,
            "sharding_indexed: no index_codecs",
        )
    })?;
    let index = chain_of_index(meta, idx)?;
    let index_at_start = match cfg["index_location"].as_str() {
        None | Some("end") => false,
        Some("start") => true,
        Some(o) => {
            return Err(Error::zarr(
                meta,
                ZarrError::Metadata,
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
        Error::zarr(
            meta,
            ZarrError::Unsupported,
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
        None => Err(Error::zarr(
            meta,
            ZarrError::Metadata,
            "the bytes codec has no endian for a multi-byte data type",
        )),
        Some(o) => Err(Error::zarr(
            meta,
            ZarrError::Metadata,
            format!("the bytes codec's endian `{}`", shown(o)),
        )),
    }
}

fn crc_at_end(meta: &Path, cfg: &Value) -> Result<bool> {
    match cfg.get("location").and_then(Value::as_str) {
        None | Some("end") => Ok(true),
        Some("start") => Ok(false),
        Some(o) => Err(Error::zarr(
            meta,
            ZarrError::Metadata,
            format!("crc32c location `{}`", shown(o)),
        )),
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
                    return Err(Error::zarr(
                        meta,
                        ZarrError::Unsupported,
                        "two transpose codecs",
                    ));
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
                return Err(Error::zarr(
                    meta,
                    ZarrError::Unsupported,
                    "shards inside shards: tilestream reads one level of sharding_indexed",
                ));
            }
            _ => {
                return Err(Error::zarr(
                    meta,
                    ZarrError::Unsupported,
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
    let big_endian = big_endian.ok_or_else(|| {
        Error::zarr(
            meta,
            ZarrError::Metadata,
            "no bytes codec in the codec chain",
        )
    })?;
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
        Error::zarr(
            meta,
            ZarrError::Metadata,
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
        o => {
            return Err(Error::zarr(
                meta,
                ZarrError::Unsupported,
                format!("chunk_key_encoding `{}`", shown(o)),
            ));
        }
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
        Some(o) => {
            return Err(Error::zarr(
                meta,
                ZarrError::Metadata,
                format!("chunk key separator `{}`", shown(o)),
            ));
        }
    };
    Ok((v2, sep))
}

/// One element of `dtype` holding the fill value `v`, in native byte order.
pub(crate) fn fill_value(meta: &Path, v: &Value, dtype: DType) -> Result<Vec<u8>> {
    let refuse = || {
        Error::zarr(
            meta,
            ZarrError::Metadata,
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
        // hex digits only: from_str_radix would also take a sign
        if !dtype.is_float() || hex.len() != 2 * size || !hex.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(refuse());
        }
        let bits = u64::from_str_radix(hex, 16).map_err(|_| refuse())?;
        return Ok(bits.to_le_bytes()[..size].to_vec());
    }
    if dtype.is_complex() {
        // the specification's form: [real, imaginary], each as a float's fill value
        let parts = v.as_array().filter(|a| a.len() == 2).ok_or_else(refuse)?;
        let mut out = fill_value(meta, &parts[0], dtype.part())?;
        out.extend(fill_value(meta, &parts[1], dtype.part())?);
        return Ok(out);
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
