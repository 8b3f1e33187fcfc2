//! HDF5 and NetCDF-4 inputs: one dataset of an HDF5 file (`file.h5:/group/data`,
//! `file.nc:variable`), read as its elements are stored, never loaded whole.
//!
//! The metadata is read by the HDF5 library itself (`lib.rs`, loaded at run time): the
//! dataspace, datatype, storage layout, filter pipeline, fill value, `NetCDF` attributes
//! and each chunk's place in the file. What it says is checked and turned into
//! tilestream's own reading:
//! - a **contiguous** dataset is a block of the file: read through mapped windows like
//!   a `.npy` (byte-swapped in the read stage when big-endian);
//! - a **chunked** dataset is a grid of chunks: each chunk's stored bytes are read by
//!   the library as they are in the file (one caller at a time), then decoded by
//!   tilestream ([`chunks::Hdf5Chunks`]) in parallel, its filters undone within the
//!   chunk's size (deflate, shuffle, fletcher32, LZF, Zstandard, Blosc; LZ4 and
//!   bitshuffle in `plugins.rs`; szip by libaec in `szip.rs`; bzip2 by libbz2 in
//!   `bzip2.rs`); chunks never
//!   written hold the fill value, as h5py reads them;
//! - a **compact** dataset (at most 64 KiB, inside the object header) is read whole by
//!   the library.
//!
//! Anything that cannot be read exactly (a datatype tilestream lacks, n-bit or
//! scale-offset packing, external or virtual storage) is refused in one line.

mod bzip2;
pub mod chunks;
pub(crate) mod lib;
mod plugins;
mod szip;

use std::os::raw::c_uint;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result, shown};

use lib::{DEFAULT, Hid, Lib, UNDEF};

/// The 8 bytes every HDF5 file starts with (at byte 0, or after a user block of 512,
/// 1024, 2048... bytes).
pub const SIGNATURE: [u8; 8] = *b"\x89HDF\r\n\x1a\n";

/// Whether `path` names an HDF5 or `NetCDF` file by its extension.
#[must_use]
pub fn is_hdf5_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| {
        ["h5", "hdf5", "hdf", "he5", "nc", "nc4", "cdf"]
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
}

pub use crate::io::own_files::{container_of, split_dataset};

/// How a dataset's elements are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    /// One block of the file, from this byte on.
    Contiguous {
        /// Byte offset of the first element in the file.
        offset: u64,
    },
    /// A regular grid of chunks.
    Chunked {
        /// The shape of a chunk.
        chunk: Vec<usize>,
        /// Chunks in the grid.
        count: u64,
        /// Chunks written (the others hold the fill value).
        allocated: u64,
    },
    /// Inside the object header (small datasets).
    Compact,
    /// Nothing written yet: every element is the fill value.
    Unallocated,
}

/// One filter of a chunked dataset's pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The filter's registered id (1 deflate, 2 shuffle, 3 fletcher32, 32000 LZF,
    /// 32001 Blosc, 32004 LZ4, 32008 bitshuffle, 32015 Zstandard).
    pub id: i32,
    /// The filter's client data.
    pub params: Vec<u32>,
}

impl Filter {
    /// The filter's name.
    #[must_use]
    pub fn name(&self) -> String {
        match self.id {
            1 => format!(
                "deflate (level {})",
                self.params.first().copied().unwrap_or(0)
            ),
            2 => "shuffle".into(),
            3 => "fletcher32".into(),
            4 => "szip".into(),
            5 => "nbit".into(),
            6 => "scaleoffset".into(),
            307 => "bzip2".into(),
            32000 => "lzf".into(),
            32001 => "blosc".into(),
            32004 => "lz4".into(),
            32008 => match self.params.get(4) {
                Some(2) => "bitshuffle+lz4".into(),
                Some(3) => "bitshuffle+zstd".into(),
                _ => "bitshuffle".into(),
            },
            32015 => "zstd".into(),
            32013 => "zfp".into(),
            32026 => "blosc2".into(),
            id => format!("filter {id}"),
        }
    }
}

/// What a dataset is and how it is stored, as `tilestream info` shows it.
#[derive(Clone, Debug)]
pub struct Hdf5Layout {
    /// The dataset's path in the file (`/group/data`).
    pub dataset: String,
    /// The dataset's shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Whether the file stores the elements big-endian.
    pub big_endian: bool,
    /// How the elements are stored.
    pub storage: Storage,
    /// The filter pipeline of a chunked dataset, in the order it was applied.
    pub filters: Vec<Filter>,
    /// The fill value, as text, when the file defines one.
    pub fill_value: Option<String>,
    /// The `NetCDF` `_FillValue` (else `missing_value`) attribute, as text: the input's
    /// nodata value.
    pub nodata: Option<String>,
    /// The `NetCDF` `scale_factor` attribute (reported; not applied).
    pub scale_factor: Option<f64>,
    /// The `NetCDF` `add_offset` attribute (reported; not applied).
    pub add_offset: Option<f64>,
}

/// A dataset opened: its layout and how its elements are reached.
pub(crate) struct Opened {
    pub layout: Hdf5Layout,
    /// Present for every storage but contiguous.
    pub chunks: Option<chunks::Hdf5Chunks>,
}

/// One dataset of a file, as [`list_arrays`](crate::format::list_arrays) gives it.
#[derive(Clone, Debug)]
pub struct DatasetEntry {
    /// Its path in the file.
    pub name: String,
    /// Its shape, or why it is not read.
    pub shape: std::result::Result<(Vec<usize>, DType), String>,
}

fn refuse(path: &Path, msg: impl Into<String>) -> Error {
    Error::format(path, msg)
}

/// Every dataset of the HDF5 file `path`, with its shape and dtype (or why tilestream
/// does not read it). [`crate::format::list_arrays`] takes NetCDF-3 files too.
///
/// # Errors
/// [`Error::Format`] if the file is not one the library opens, or the library is
/// missing.
pub fn list(path: &Path) -> Result<Vec<DatasetEntry>> {
    let cpath = Lib::cstr(&path.to_string_lossy()).map_err(|m| refuse(path, m))?;
    lib::with(|l| -> std::result::Result<Vec<DatasetEntry>, String> {
        let file = open_file(l, &cpath)?;
        let names = l.datasets(file.raw)?;
        Ok(names
            .into_iter()
            .map(|name| {
                let shape = Lib::cstr(&name).and_then(|c| {
                    let d = l.id(unsafe_dopen(l, file.raw, &c), l.dclose)?;
                    Ok((space_of(l, d.raw)?, type_of(l, d.raw)?.0))
                });
                DatasetEntry { name, shape }
            })
            .collect())
    })
    .and_then(|r| r)
    .map_err(|m| refuse(path, m))
}

fn open_file<'a>(l: &'a Lib, cpath: &std::ffi::CStr) -> std::result::Result<lib::Id<'a>, String> {
    // SAFETY: a valid C string; read-only access with the default access properties.
    let id = unsafe { (l.fopen)(cpath.as_ptr(), 0, DEFAULT) };
    l.id(id, l.fclose)
        .map_err(|e| format!("the HDF5 library does not open it: {e}"))
}

fn unsafe_dopen(l: &Lib, file: Hid, name: &std::ffi::CStr) -> Hid {
    // SAFETY: an open file and a valid C string
    unsafe { (l.dopen2)(file, name.as_ptr(), DEFAULT) }
}

/// Opens dataset `dataset` of the file `path` (the only dataset when `None`).
pub(crate) fn open(path: &Path, dataset: Option<&str>, file_len: u64) -> Result<Opened> {
    let cpath = Lib::cstr(&path.to_string_lossy()).map_err(|m| refuse(path, m))?;
    let r = lib::with(|l| -> std::result::Result<_, String> {
        let file = open_file(l, &cpath)?;
        let name = match dataset {
            Some(d) if d.starts_with('/') => d.to_string(),
            Some(d) => format!("/{d}"),
            None => {
                let all = l.datasets(file.raw)?;
                match all.as_slice() {
                    [one] => one.clone(),
                    [] => return Err("the file holds no dataset".into()),
                    many => {
                        return Err(format!(
                            "the file holds {} datasets: name one as FILE:/name ({}{})",
                            many.len(),
                            many.iter()
                                .take(8)
                                .map(|n| shown(n))
                                .collect::<Vec<_>>()
                                .join(", "),
                            if many.len() > 8 { ", ..." } else { "" }
                        ));
                    }
                }
            }
        };
        let cname = Lib::cstr(&name)?;
        let d = l
            .id(unsafe_dopen(l, file.raw, &cname), l.dclose)
            .map_err(|e| {
                let known = l.datasets(file.raw).unwrap_or_default();
                format!(
                    "no dataset '{name}' in the file ({e}); its datasets: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known
                            .iter()
                            .take(8)
                            .map(|n| shown(n))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )
            })?;
        let (layout, stored, fill) = describe(l, d.raw, name, file_len)?;
        // a chunked dataset stays open: its chunks are read through it
        let stored = match stored {
            Stored::Direct { .. } => Stored::Direct {
                file: file.keep(),
                dataset: d.keep(),
            },
            other => other,
        };
        Ok((layout, stored, fill))
    });
    let (layout, stored, fill) = r
        .and_then(|r| r)
        .map_err(|m| refuse(path, format!("{}{m}", dataset_prefix(dataset))))?;
    let chunks = match stored {
        Stored::Mapped => None,
        other => Some(chunks::Hdf5Chunks::new(path, &layout, other, fill)?),
    };
    Ok(Opened { layout, chunks })
}

fn dataset_prefix(dataset: Option<&str>) -> String {
    dataset.map_or(String::new(), |d| format!("dataset '{d}': "))
}

/// Where a dataset's bytes are, beyond its layout.
pub(crate) enum Stored {
    /// Contiguous: mapped.
    Mapped,
    /// Chunks read through the library (`H5Dread_chunk`) from the open file and
    /// dataset, which the reader closes.
    Direct {
        /// The open file.
        file: Hid,
        /// The open dataset.
        dataset: Hid,
    },
    /// A compact dataset's bytes, as stored.
    Bytes(Vec<u8>),
    /// Nothing written.
    Fill,
}

/// The dataspace's shape.
fn space_of(l: &Lib, d: Hid) -> std::result::Result<Vec<usize>, String> {
    // SAFETY: `d` is an open dataset
    let s = l.id(unsafe { (l.dget_space)(d) }, l.sclose)?;
    // SAFETY: `s` is an open dataspace; `dims` has room for `n` values
    unsafe {
        match (l.sget_simple_extent_type)(s.raw) {
            lib::S_SCALAR => Ok(Vec::new()),
            lib::S_SIMPLE => {
                let n = (l.sget_simple_extent_ndims)(s.raw);
                if n < 0 || n as usize > crate::format::MAX_RANK {
                    return Err(format!("a dataspace of rank {n} is not read"));
                }
                let mut dims = vec![0u64; n as usize];
                if (l.sget_simple_extent_dims)(s.raw, dims.as_mut_ptr(), std::ptr::null_mut()) < 0 {
                    return Err(l.last_error());
                }
                dims.iter()
                    .map(|&d| {
                        usize::try_from(d).map_err(|_| format!("a dimension of {d} is too large"))
                    })
                    .collect()
            }
            _ => Err("an empty (null) dataspace holds no array".into()),
        }
    }
}

/// The dataset's element type and whether it is stored big-endian.
fn type_of(l: &Lib, d: Hid) -> std::result::Result<(DType, bool), String> {
    // SAFETY: `d` is an open dataset
    let t = l.id(unsafe { (l.dget_type)(d) }, l.tclose)?;
    dtype_of(l, t.raw)
}

fn dtype_of(l: &Lib, t: Hid) -> std::result::Result<(DType, bool), String> {
    // SAFETY: `t` is an open datatype; the out-pointers are valid
    unsafe {
        let class = (l.tget_class)(t);
        let size = (l.tget_size)(t);
        let order = || match (l.tget_order)(t) {
            0 => Ok(false),
            1 => Ok(true),
            _ if size == 1 => Ok(false),
            _ => Err("a datatype of VAX or mixed byte order is not read".to_string()),
        };
        match class {
            lib::T_INTEGER => {
                if (l.tget_precision)(t) != size * 8 || (l.tget_offset)(t) != 0 {
                    return Err(format!(
                        "an n-bit integer datatype ({} bits in {size} bytes) is not read",
                        (l.tget_precision)(t)
                    ));
                }
                let signed = (l.tget_sign)(t) == 1;
                let dt = match (size, signed) {
                    (1, false) => DType::U8,
                    (2, false) => DType::U16,
                    (4, false) => DType::U32,
                    (8, false) => DType::U64,
                    (1, true) => DType::I8,
                    (2, true) => DType::I16,
                    (4, true) => DType::I32,
                    (8, true) => DType::I64,
                    _ => return Err(format!("a {size}-byte integer datatype is not read")),
                };
                Ok((dt, order()?))
            }
            lib::T_FLOAT => {
                let mut f = [0usize; 5];
                let [spos, epos, esize, mpos, msize] = &mut f;
                if (l.tget_fields)(t, spos, epos, esize, mpos, msize) < 0 {
                    return Err(l.last_error());
                }
                let bias = (l.tget_ebias)(t);
                let dt = match (size, f, bias) {
                    (2, [15, 10, 5, 0, 10], 15) => DType::F16,
                    (2, [15, 7, 8, 0, 7], 127) => DType::BF16,
                    (4, [31, 23, 8, 0, 23], 127) => DType::F32,
                    (8, [63, 52, 11, 0, 52], 1023) => DType::F64,
                    _ => {
                        return Err(format!(
                            "a {size}-byte floating-point datatype of a non-IEEE layout \
                             (sign, exponent and mantissa at {f:?}, bias {bias}) is not read"
                        ));
                    }
                };
                Ok((dt, order()?))
            }
            lib::T_ENUM => {
                let base = l.id((l.tget_super)(t), l.tclose)?;
                let (dt, big) = dtype_of(l, base.raw)?;
                if matches!(dt, DType::I8 | DType::U8) && (l.tget_nmembers)(t) == 2 {
                    let mut names = Vec::new();
                    for i in 0..2 {
                        let mut v = 0u8;
                        (l.tget_member_value)(t, i, (&raw mut v).cast());
                        names.push((l.take_string((l.tget_member_name)(t, i)), v));
                    }
                    if names == [(Some("FALSE".into()), 0), (Some("TRUE".into()), 1)] {
                        // h5py's numpy bool
                        return Ok((DType::Bool, false));
                    }
                }
                Ok((dt, big))
            }
            lib::T_COMPOUND => complex_of(l, t, size).ok_or_else(|| {
                "its datatype is a compound (a record: tilestream reads integers, IEEE \
                 floats, h5py's booleans and complex numbers)"
                    .to_string()
            }),
            c => Err(format!(
                "its datatype is {} (tilestream reads integers, IEEE floats, h5py's \
                 booleans and complex numbers)",
                match c {
                    2 => "a time",
                    3 => "a string",
                    4 => "a bitfield",
                    5 => "opaque",
                    7 => "a reference",
                    9 => "variable-length",
                    10 => "an array type",
                    _ => "of an unknown class",
                }
            )),
        }
    }
}

/// A compound of `size` bytes that holds complex numbers as h5py writes them (and
/// netCDF4-python, `nc-complex`, HDF5.jl): two members, the real part at 0 and the
/// imaginary part at `size / 2`, IEEE floats of one type and byte order, named `r`/`i`,
/// `re`/`im` or `real`/`imag` (in any case).
/// `None` for any other compound.
///
/// # Safety
/// `t` is an open compound datatype.
unsafe fn complex_of(l: &Lib, t: Hid, size: usize) -> Option<(DType, bool)> {
    // SAFETY: per the contract; member indices below the member count
    unsafe {
        if (l.tget_nmembers)(t) != 2 {
            return None;
        }
        let name = |i| {
            l.take_string((l.tget_member_name)(t, i))
                .map(|n| n.to_ascii_lowercase())
        };
        let names = (name(0)?, name(1)?);
        if !matches!(
            (names.0.as_str(), names.1.as_str()),
            ("r", "i") | ("re", "im") | ("real", "imag")
        ) {
            return None;
        }
        if (l.tget_member_offset)(t, 0) != 0 || (l.tget_member_offset)(t, 1) != size / 2 {
            return None;
        }
        let part = |i| -> Option<(DType, bool)> {
            let m = l.id((l.tget_member_type)(t, i), l.tclose).ok()?;
            if (l.tget_class)(m.raw) != lib::T_FLOAT {
                return None;
            }
            dtype_of(l, m.raw).ok()
        };
        let (a, b) = (part(0)?, part(1)?);
        match (a, a == b, size) {
            ((DType::F32, big), true, 8) => Some((DType::C64, big)),
            ((DType::F64, big), true, 16) => Some((DType::C128, big)),
            _ => None,
        }
    }
}

/// The element value `bytes` (native order) holds, as text.
pub(crate) fn value_text(dtype: DType, bytes: &[u8]) -> String {
    use bytemuck::pod_read_unaligned as read;
    let b = &bytes[..dtype.size()];
    match dtype {
        DType::Bool => u8::from(b[0] != 0).to_string(),
        DType::U8 => b[0].to_string(),
        DType::I8 => (b[0] as i8).to_string(),
        DType::U16 => read::<u16>(b).to_string(),
        DType::I16 => read::<i16>(b).to_string(),
        DType::U32 => read::<u32>(b).to_string(),
        DType::I32 => read::<i32>(b).to_string(),
        DType::U64 => read::<u64>(b).to_string(),
        DType::I64 => read::<i64>(b).to_string(),
        DType::F16 => crate::format::tiff::nodata_text(half::f16::from_bits(read(b)).to_f64()),
        DType::BF16 => crate::format::tiff::nodata_text(half::bf16::from_bits(read(b)).to_f64()),
        DType::F32 => crate::format::tiff::nodata_text(f64::from(read::<f32>(b))),
        DType::F64 => crate::format::tiff::nodata_text(read::<f64>(b)),
        DType::C64 | DType::C128 => {
            let p = dtype.part();
            let h = dtype.size() / 2;
            let (re, im) = (value_text(p, &b[..h]), value_text(p, &b[h..]));
            let sign = if im.starts_with('-') { "" } else { "+" };
            format!("{re}{sign}{im}j")
        }
    }
}

/// Reads the scalar attribute `name` of `d` as its own type: its value as text in the
/// dataset's element type, and as f64. `None` when absent.
fn attribute(l: &Lib, d: Hid, name: &str) -> std::result::Result<Option<(String, f64)>, String> {
    use crate::dtype::Element;
    let c = Lib::cstr(name)?;
    // SAFETY: open dataset, valid C string
    if unsafe { (l.aexists)(d, c.as_ptr()) } <= 0 {
        // SAFETY: clears a failed lookup's error
        unsafe { (l.eclear2)(DEFAULT) };
        return Ok(None);
    }
    // SAFETY: the attribute exists
    let a = l.id(unsafe { (l.aopen)(d, c.as_ptr(), DEFAULT) }, l.aclose)?;
    // SAFETY: open attribute
    let s = l.id(unsafe { (l.aget_space)(a.raw) }, l.sclose)?;
    // SAFETY: open dataspace
    if unsafe { (l.sget_simple_extent_npoints)(s.raw) } != 1 {
        return Ok(None);
    }
    // SAFETY: open attribute
    let t = l.id(unsafe { (l.aget_type)(a.raw) }, l.tclose)?;
    // a complex attribute (16 bytes for complex128) is not a number tilestream uses
    let Ok((dt, big)) = dtype_of(l, t.raw) else {
        return Ok(None);
    };
    let mut buf = [0u8; 8];
    if dt.is_complex() || dt.size() > buf.len() {
        return Ok(None);
    }
    // SAFETY: one element of at most 8 bytes (checked just above), read in its own type
    if unsafe { (l.aread)(a.raw, t.raw, buf.as_mut_ptr().cast()) } < 0 {
        return Err(l.last_error());
    }
    let es = dt.size();
    if big {
        buf[..es].reverse();
    }
    let Some(v) = crate::dispatch_dtype!(dt, T => Some(bytemuck::pod_read_unaligned::<T>(&buf[..es]).to_f64()), complex => None)
    else {
        return Ok(None);
    };
    Ok(Some((value_text(dt, &buf[..es]), v)))
}

/// Everything about dataset `d`.
fn describe(
    l: &Lib,
    d: Hid,
    name: String,
    file_len: u64,
) -> std::result::Result<(Hdf5Layout, Stored, Vec<u8>), String> {
    let shape = space_of(l, d)?;
    let (dtype, big_endian) = type_of(l, d)?;
    let es = dtype.size();
    // SAFETY: `d` is an open dataset
    let dcpl = l.id(unsafe { (l.dget_create_plist)(d) }, l.pclose)?;
    // SAFETY: open property list
    if unsafe { (l.pget_external_count)(dcpl.raw) } > 0 {
        return Err("its data is in external files, which tilestream does not read".into());
    }
    // the fill value, in the file's byte order, then native
    let mut fill_state = 0;
    // SAFETY: open property list, valid out-pointer
    unsafe { (l.pfill_value_defined)(dcpl.raw, &raw mut fill_state) };
    let mut fill = vec![0u8; es];
    let mut fill_value = None;
    if fill_state != 0 {
        // SAFETY: open dataset
        let t = l.id(unsafe { (l.dget_type)(d) }, l.tclose)?;
        // SAFETY: `fill` has room for one element of the dataset's own type
        if unsafe { (l.pget_fill_value)(dcpl.raw, t.raw, fill.as_mut_ptr().cast()) } < 0 {
            return Err(l.last_error());
        }
        if big_endian {
            for u in fill.chunks_exact_mut(dtype.swap_unit()) {
                u.reverse();
            }
        }
        if fill_state == 2 {
            fill_value = Some(value_text(dtype, &fill));
        }
    }
    let nbytes = shape.iter().map(|&n| n as u64).product::<u64>() * es as u64;
    let mut filters = Vec::new();
    // SAFETY: open property list
    let kind = unsafe { (l.pget_layout)(dcpl.raw) };
    let (storage, stored) = match kind {
        lib::D_CONTIGUOUS => {
            // SAFETY: open dataset
            let off = unsafe { (l.dget_offset)(d) };
            if off == UNDEF || nbytes == 0 {
                (Storage::Unallocated, Stored::Fill)
            } else {
                // H5Dget_offset already counts the user block (chunk addresses do not)
                if off.checked_add(nbytes).is_none_or(|e| e > file_len) {
                    return Err(format!(
                        "its {nbytes} bytes of data at byte {off} run past the end of the \
                         file ({file_len} bytes): it is truncated"
                    ));
                }
                (Storage::Contiguous { offset: off }, Stored::Mapped)
            }
        }
        lib::D_COMPACT => {
            let mut bytes = vec![0u8; nbytes as usize];
            // SAFETY: open dataset
            let t = l.id(unsafe { (l.dget_type)(d) }, l.tclose)?;
            if nbytes > 1 << 16
                // SAFETY: `bytes` holds the whole dataset in its own type (a compact
                // dataset is at most 64 KiB)
                || unsafe {
                    (l.dread)(d, t.raw, DEFAULT, DEFAULT, DEFAULT, bytes.as_mut_ptr().cast())
                } < 0
            {
                return Err(format!(
                    "its compact data cannot be read ({})",
                    l.last_error()
                ));
            }
            (Storage::Compact, Stored::Bytes(bytes))
        }
        lib::D_CHUNKED => {
            let rank = shape.len();
            let mut chunk = vec![0u64; rank.max(1)];
            // SAFETY: `chunk` has room for `rank` dimensions
            let n = unsafe { (l.pget_chunk)(dcpl.raw, rank as i32, chunk.as_mut_ptr()) };
            if n != rank as i32 || chunk[..rank].contains(&0) {
                return Err(format!(
                    "its chunk shape ({n} dimensions) is not its rank's ({rank})"
                ));
            }
            let chunk: Vec<usize> = chunk[..rank].iter().map(|&c| c as usize).collect();
            let chunk_bytes = chunk.iter().map(|&c| c as u64).product::<u64>() * es as u64;
            if chunk_bytes > u64::from(u32::MAX) {
                return Err(format!(
                    "its chunks of {chunk_bytes} bytes are over HDF5's 4 GiB"
                ));
            }
            filters = filters_of(l, dcpl.raw)?;
            let grid: Vec<u64> = shape
                .iter()
                .zip(&chunk)
                .map(|(&s, &c)| (s as u64).div_ceil(c as u64))
                .collect();
            let count = grid.iter().product::<u64>();
            // SAFETY: `d` is an open dataset
            let space = l.id(unsafe { (l.dget_space)(d) }, l.sclose)?;
            let mut allocated = 0u64;
            // SAFETY: open dataset and dataspace, valid out-pointer
            if unsafe { (l.dget_num_chunks)(d, space.raw, &raw mut allocated) } < 0 {
                return Err(format!(
                    "its chunk index cannot be read ({})",
                    l.last_error()
                ));
            }
            (
                Storage::Chunked {
                    chunk,
                    count,
                    allocated,
                },
                Stored::Direct {
                    file: -1,
                    dataset: -1,
                },
            )
        }
        lib::D_VIRTUAL => {
            return Err(
                "it is a virtual dataset (a view of other datasets), which tilestream does \
                 not read: give one of the datasets it maps"
                    .into(),
            );
        }
        k => {
            return Err(format!(
                "its storage layout ({k}) is not one HDF5 documents"
            ));
        }
    };
    let nodata = match attribute(l, d, "_FillValue")? {
        Some(v) => Some(v.0),
        None => attribute(l, d, "missing_value")?.map(|v| v.0),
    };
    let layout = Hdf5Layout {
        dataset: name,
        shape,
        dtype,
        big_endian: big_endian && es > 1,
        storage,
        filters,
        fill_value,
        nodata,
        scale_factor: attribute(l, d, "scale_factor")?.map(|v| v.1),
        add_offset: attribute(l, d, "add_offset")?.map(|v| v.1),
    };
    Ok((layout, stored, fill))
}

/// The filter pipeline of a dataset creation property list.
fn filters_of(l: &Lib, dcpl: Hid) -> std::result::Result<Vec<Filter>, String> {
    // SAFETY: open property list
    let n = unsafe { (l.pget_nfilters)(dcpl) };
    let mut out = Vec::new();
    for i in 0..n.max(0) as c_uint {
        let mut flags = 0;
        let mut params = [0u32; 32];
        let mut count = params.len();
        let mut config = 0;
        // SAFETY: `params` has room for `count` values; no name is asked for
        let id = unsafe {
            (l.pget_filter2)(
                dcpl,
                i,
                &raw mut flags,
                &raw mut count,
                params.as_mut_ptr(),
                0,
                std::ptr::null_mut(),
                &raw mut config,
            )
        };
        if id < 0 {
            return Err(l.last_error());
        }
        out.push(Filter {
            id,
            params: params[..count.min(params.len())].to_vec(),
        });
    }
    Ok(out)
}
