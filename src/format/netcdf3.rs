//! NetCDF-3 inputs (the classic format, CDF-1; 64-bit offsets, CDF-2; 64-bit data,
//! CDF-5): one variable of a file, `file.nc:t2m`, read as it is stored. The format is a
//! header followed by big-endian arrays, so no library is needed: the header is parsed
//! here (every count checked against the bytes left before anything is sized by it), a
//! fixed-size variable is one block of the file (mapped, bytes swapped in the read
//! stage), and a record variable is one slab per record, `recsize` bytes apart, read
//! record by record (`Records`).
//!
//! The layout follows the format's specification (Unidata's "NetCDF Classic and 64-bit
//! Offset Format" and the CDF-5 addendum): each slab of a record variable is padded to
//! 4 bytes, but for a file with a single record variable, which is not padded.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result, shown};
use crate::format::chunked::{ChunkSource, Chunked};

use super::hdf5::{Hdf5Layout, Storage};

/// Most bytes of header read: a header lists names, dimensions and attributes, and real
/// ones take a few KiB; a longer one is refused.
const MAX_HEADER: u64 = 64 << 20;

/// Bytes of records a chunk of a record variable aims for.
const RECORD_CHUNK: usize = 1 << 20;

/// Whether `magic` (a file's first 4 bytes) is a NetCDF-3 file's.
#[must_use]
pub fn is_netcdf3(magic: &[u8]) -> bool {
    matches!(magic, [b'C', b'D', b'F', 1 | 2 | 5, ..])
}

/// One variable of a NetCDF-3 file.
#[derive(Clone, Debug, PartialEq)]
pub struct Variable {
    /// Its name.
    pub name: String,
    /// Its shape (the record dimension first, at the number of records, for a record
    /// variable).
    pub shape: Vec<usize>,
    /// Its element type, or why it is not read (`char` text).
    pub dtype: std::result::Result<DType, String>,
    /// Whether it has the record dimension.
    pub record: bool,
    /// Where its data (its first record's slab) starts.
    pub begin: u64,
    /// Its `_FillValue` (else `missing_value`) attribute, as text.
    pub nodata: Option<String>,
    /// Its `scale_factor` attribute.
    pub scale_factor: Option<f64>,
    /// Its `add_offset` attribute.
    pub add_offset: Option<f64>,
}

/// A NetCDF-3 file's header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// 1 (classic), 2 (64-bit offsets) or 5 (64-bit data).
    pub version: u8,
    /// Number of records.
    pub records: u64,
    /// Bytes from one record to the next.
    pub recsize: u64,
    /// The variables, in the file's order.
    pub vars: Vec<Variable>,
}

/// A cursor over the header's bytes.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    /// CDF-5: counts are 8 bytes.
    wide: bool,
}

const SHORT: &str = "its header ends early";

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(SHORT)?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        let s = self.take(8)?;
        Ok(u64::from_be_bytes(s.try_into().map_err(|_| SHORT)?))
    }
    /// A count (`NON_NEG`): 4 bytes, 8 in CDF-5.
    fn count(&mut self) -> std::result::Result<u64, String> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }
    /// A count of items each at least `min` bytes long, checked against what is left.
    fn items(&mut self, min: usize) -> std::result::Result<usize, String> {
        let n = self.count()?;
        let left = (self.b.len() - self.at) as u64;
        if n.saturating_mul(min as u64) > left {
            return Err(format!(
                "its header lists {n} items where {left} bytes are left"
            ));
        }
        Ok(n as usize)
    }
    fn name(&mut self) -> std::result::Result<String, String> {
        let n = self.items(1)?;
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.take((4 - n % 4) % 4)?;
        Ok(s)
    }
    /// A list's tag and length: `ABSENT` (zero, zero) gives 0.
    fn list(&mut self, tag: u32, what: &str) -> std::result::Result<usize, String> {
        let t = self.u32()?;
        let n = self.items(4)?;
        match (t, n) {
            (0, 0) => Ok(0),
            (t, n) if t == tag => Ok(n),
            _ => Err(format!("its {what} list has tag {t:#x}")),
        }
    }
}

/// The element type of NetCDF type code `t`.
fn dtype_of(t: u32) -> std::result::Result<DType, String> {
    Ok(match t {
        1 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::F32,
        6 => DType::F64,
        7 => DType::U8,
        8 => DType::U16,
        9 => DType::U32,
        10 => DType::I64,
        11 => DType::U64,
        2 => return Err("it is text (char), not numbers".into()),
        t => return Err(format!("its type code {t} is not NetCDF's")),
    })
}

/// Size in bytes of NetCDF type code `t` (char is 1).
fn type_size(t: u32) -> std::result::Result<usize, String> {
    match t {
        2 => Ok(1),
        t => dtype_of(t).map(DType::size),
    }
}

/// An attribute list: the ones read (`_FillValue`, `missing_value`, `scale_factor`,
/// `add_offset`) as (name, text, value).
fn attributes(c: &mut Cursor<'_>) -> std::result::Result<Vec<(String, String, f64)>, String> {
    let n = c.list(0x0C, "attribute")?;
    let mut out = Vec::new();
    for _ in 0..n {
        let name = c.name()?;
        let t = c.u32()?;
        let es = type_size(t)?;
        let count = c.items(es)?;
        let bytes = c.take(count * es)?.to_vec();
        c.take((4 - (count * es) % 4) % 4)?;
        if count == 1
            && matches!(
                name.as_str(),
                "_FillValue" | "missing_value" | "scale_factor" | "add_offset"
            )
            && let Ok(dt) = dtype_of(t)
        {
            let mut le = bytes;
            le.reverse();
            out.push((name, value_text(dt, &le), value_f64(dt, &le)));
        }
    }
    Ok(out)
}

fn value_f64(dt: DType, le: &[u8]) -> f64 {
    use crate::dtype::Element;
    // NetCDF-3 has no complex type
    crate::dispatch_dtype!(dt, T => bytemuck::pod_read_unaligned::<T>(le).to_f64(), complex => f64::NAN)
}

fn value_text(dt: DType, le: &[u8]) -> String {
    super::hdf5::value_text(dt, le)
}

/// Parses a NetCDF-3 header from the file's first bytes `b` (`file_len` bytes in all).
///
/// # Errors
/// A one-line reason the header is not one (or one tilestream reads).
pub fn parse_header(b: &[u8], file_len: u64) -> std::result::Result<Header, String> {
    let [b'C', b'D', b'F', version, ..] = *b else {
        return Err("not a NetCDF-3 file".into());
    };
    if !matches!(version, 1 | 2 | 5) {
        return Err(format!(
            "NetCDF-3 version {version} is not one NetCDF defines"
        ));
    }
    let mut c = Cursor {
        b,
        at: 4,
        wide: version == 5,
    };
    let numrecs = c.count()?;
    let streaming = numrecs == u64::from(u32::MAX) || numrecs == u64::MAX;
    let ndims = c.list(0x0A, "dimension")?;
    let mut dims = Vec::with_capacity(ndims);
    for _ in 0..ndims {
        let _name = c.name()?;
        dims.push(c.count()?);
    }
    if dims.iter().filter(|&&d| d == 0).count() > 1 {
        return Err("it has more than one record (unlimited) dimension".into());
    }
    attributes(&mut c)?;
    let nvars = c.list(0x0B, "variable")?;
    // (name, dimension lengths, record, type, begin, attributes)
    let mut raw = Vec::with_capacity(nvars);
    for _ in 0..nvars {
        let name = c.name()?;
        let rank = c.items(4)?;
        if rank > crate::format::MAX_RANK {
            return Err(format!("variable '{}' has {rank} dimensions", shown(&name)));
        }
        let mut ids = Vec::with_capacity(rank);
        for _ in 0..rank {
            let id = c.count()?;
            let len = *dims
                .get(usize::try_from(id).unwrap_or(usize::MAX))
                .ok_or_else(|| {
                    format!(
                        "variable '{}' names dimension {id} of {ndims}",
                        shown(&name)
                    )
                })?;
            ids.push(len);
        }
        let attrs = attributes(&mut c)?;
        let t = c.u32()?;
        let _vsize = c.count()?;
        let begin = if version == 1 {
            u64::from(c.u32()?)
        } else {
            c.u64()?
        };
        let record = ids.first() == Some(&0);
        if ids.iter().skip(1).any(|&d| d == 0) {
            return Err(format!(
                "variable '{}' has the record dimension other than first",
                shown(&name)
            ));
        }
        raw.push((name, ids, record, t, begin, attrs));
    }
    // bytes of one record: each record variable's slab, padded to 4 bytes unless it is
    // the only one
    let nrec_vars = raw.iter().filter(|v| v.2).count();
    let mut recsize = 0u64;
    let mut slab_of = Vec::with_capacity(raw.len());
    for (name, ids, record, t, _, _) in &raw {
        let es = type_size(*t)? as u64;
        let inner = ids
            .iter()
            .skip(usize::from(*record))
            .try_fold(es, |a, &d| a.checked_mul(d));
        let slab = inner.ok_or_else(|| format!("variable '{}' is too large", shown(name)))?;
        slab_of.push(slab);
        if *record {
            let padded = if nrec_vars == 1 {
                slab
            } else {
                slab.div_ceil(4) * 4
            };
            recsize = recsize
                .checked_add(padded)
                .ok_or("its records are too large")?;
        }
    }
    let first_record = raw.iter().filter(|v| v.2).map(|v| v.4).min();
    let records = match first_record {
        Some(at) if streaming && recsize > 0 => file_len.saturating_sub(at) / recsize,
        _ if streaming => 0,
        _ => numrecs,
    };
    let mut vars = Vec::with_capacity(raw.len());
    for ((name, ids, record, t, begin, attrs), slab) in raw.into_iter().zip(slab_of) {
        let mut shape: Vec<u64> = ids;
        if record {
            shape[0] = records;
        }
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| format!("variable '{}' is too large", shown(&name)))
            })
            .collect::<std::result::Result<_, _>>()?;
        // its last byte must be in the file
        let span = if record {
            (records > 0).then(|| (records - 1).checked_mul(recsize)?.checked_add(slab))
        } else {
            (slab > 0).then_some(Some(slab))
        };
        if let Some(span) = span {
            let end = span.and_then(|s| s.checked_add(begin));
            if end.is_none_or(|e| e > file_len) {
                return Err(format!(
                    "variable '{}' runs past the end of the file ({file_len} bytes): it is \
                     truncated",
                    shown(&name)
                ));
            }
        }
        let attr = |k: &str| attrs.iter().find(|a| a.0 == k);
        vars.push(Variable {
            name,
            shape,
            dtype: dtype_of(t),
            record,
            begin,
            nodata: attr("_FillValue")
                .or_else(|| attr("missing_value"))
                .map(|a| a.1.clone()),
            scale_factor: attr("scale_factor").map(|a| a.2),
            add_offset: attr("add_offset").map(|a| a.2),
        });
    }
    Ok(Header {
        version,
        records,
        recsize,
        vars,
    })
}

/// Reads and parses the header of the NetCDF-3 file `file`.
pub(crate) fn read_header(path: &Path, file: &File, file_len: u64) -> Result<Header> {
    let mut n = file_len.min(1 << 16);
    loop {
        let mut b = vec![0u8; n as usize];
        file.read_exact_at(&mut b, 0)
            .map_err(|e| Error::io("read", path, e))?;
        match parse_header(&b, file_len) {
            Err(m) if m == SHORT && n < file_len.min(MAX_HEADER) => {
                n = (n * 4).min(file_len.min(MAX_HEADER));
            }
            Err(m) if m == SHORT && n >= MAX_HEADER => {
                return Err(Error::format(
                    path,
                    format!("its NetCDF-3 header is longer than {MAX_HEADER} bytes"),
                ));
            }
            r => return r.map_err(|m| Error::format(path, m)),
        }
    }
}

/// The variable `name` of a parsed header (its only numeric one when `None`), as a
/// layout, with the chunked reader of a record variable that is not one block.
pub(crate) fn open(
    path: &Path,
    file: &File,
    file_len: u64,
    name: Option<&str>,
) -> Result<(Hdf5Layout, Option<Chunked>)> {
    let h = read_header(path, file, file_len)?;
    let refuse = |m: String| Error::format(path, m);
    let names = || {
        h.vars
            .iter()
            .take(8)
            .map(|v| shown(&v.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let v = match name {
        Some(n) => {
            let n = n.trim_start_matches('/');
            h.vars.iter().find(|v| v.name == n).ok_or_else(|| {
                refuse(format!(
                    "no variable '{}' in the file; its variables: {}",
                    shown(n),
                    names()
                ))
            })?
        }
        None => {
            let mut numeric = h.vars.iter().filter(|v| v.dtype.is_ok());
            match (numeric.next(), numeric.next()) {
                (Some(one), None) => one,
                _ => {
                    return Err(refuse(format!(
                        "the file holds {} variables: name one as FILE:name ({})",
                        h.vars.len(),
                        names()
                    )));
                }
            }
        }
    };
    let dtype = v
        .dtype
        .clone()
        .map_err(|m| refuse(format!("variable '{}': {m}", shown(&v.name))))?;
    let es = dtype.size();
    let slab: usize = v
        .shape
        .iter()
        .skip(usize::from(v.record))
        .product::<usize>()
        * es;
    let contiguous = !v.record || h.recsize == slab as u64 || v.shape[0] <= 1;
    let (storage, chunked) = if contiguous {
        (Storage::Contiguous { offset: v.begin }, None)
    } else {
        let per = (RECORD_CHUNK / slab.max(1)).clamp(1, v.shape[0]);
        let mut chunk = v.shape.clone();
        chunk[0] = per;
        let src = Records {
            path: path.to_path_buf(),
            file: file
                .try_clone()
                .map_err(|e| Error::io("open again", path, e))?,
            chunk: chunk.clone(),
            total: v.shape[0],
            begin: v.begin,
            recsize: h.recsize,
            slab,
            es,
        };
        let count = v.shape[0].div_ceil(per) as u64;
        (
            Storage::Chunked {
                chunk,
                count,
                allocated: count,
            },
            Some(Chunked::new(v.shape.clone(), dtype, Box::new(src))),
        )
    };
    let layout = Hdf5Layout {
        dataset: v.name.clone(),
        shape: v.shape.clone(),
        dtype,
        big_endian: es > 1,
        storage,
        filters: Vec::new(),
        fill_value: None,
        nodata: v.nodata.clone(),
        scale_factor: v.scale_factor,
        add_offset: v.add_offset,
    };
    Ok((layout, chunked))
}

/// The variables of a NetCDF-3 file, for `tilestream info`.
pub(crate) fn list(path: &Path) -> Result<Vec<super::hdf5::DatasetEntry>> {
    let file = crate::io::own_files::open_input(path)?;
    let len = super::file_len(&file, path)?;
    let h = read_header(path, &file, len)?;
    Ok(h.vars
        .into_iter()
        .map(|v| super::hdf5::DatasetEntry {
            name: v.name,
            shape: v.dtype.map(|d| (v.shape, d)),
        })
        .collect())
}

/// A record variable's records, `per` records a chunk, each record's slab read at its
/// place and its bytes swapped.
#[derive(Debug)]
struct Records {
    path: PathBuf,
    file: File,
    chunk: Vec<usize>,
    /// Records in the file.
    total: usize,
    begin: u64,
    recsize: u64,
    slab: usize,
    es: usize,
}

impl ChunkSource for Records {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let per = self.chunk[0];
        let first = pos[0] * per;
        let n = per.min(self.total - first);
        for (k, dst) in out.chunks_exact_mut(self.slab).take(n).enumerate() {
            let at = self.begin + (first + k) as u64 * self.recsize;
            self.file
                .read_exact_at(dst, at)
                .map_err(|e| Error::io("read", &self.path, e))?;
        }
        if self.es > 1 {
            for e in out[..n * self.slab].chunks_exact_mut(self.es) {
                e.reverse();
            }
        }
        Ok(())
    }
}
