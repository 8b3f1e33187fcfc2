//! On-disk tensors: opening `.npy` and raw files, mapping windows of them, and creating
//! outputs that appear at their path only once complete.
//!
//! Input data is only ever reached through [`Window`]s: a memory map of the byte range one
//! tile needs (page-aligned outward), prefaulted by the read stage and unmapped as soon as
//! the compute stage is done with it, so resident memory stays bounded by the windows in
//! flight. The whole file is never mapped, which is what lets a 6 GB file be processed
//! under `ulimit -v 2GiB`.
//!
//! Outputs are written with positioned writes (`pwrite`) from staging buffers into a
//! temporary file beside the destination, then fsynced and renamed into place: a failed
//! or interrupted run leaves nothing at the output path.

pub mod chunked;
pub mod geotiff;
pub mod npy;
pub mod own_files;
pub mod tiff_decode;
pub mod zarr;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

use crate::dtype::DType;
use crate::error::{Error, Result};
pub use crate::shape::{fmt_shape, parse_shape};

/// How a tensor is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// numpy `.npy`, with its version.
    Npy {
        /// (major, minor) format version.
        version: (u8, u8),
    },
    /// Headerless little-endian C-order data; shape and dtype given by the user.
    Raw,
    /// A GeoTIFF (or plain TIFF): bands x rows x columns.
    GeoTiff,
    /// A Zarr v3 array (a directory with `zarr.json`).
    Zarr,
}

/// The format an output is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFormat {
    /// `.npy` with its header.
    Npy,
    /// Headerless little-endian C-order data.
    Raw,
    /// Tiled GeoTIFF.
    GeoTiff,
    /// Zarr v3 store.
    Zarr,
}

impl OutFormat {
    /// The format a destination's name asks for: `.npy`, `.tif`/`.tiff`, `.zarr`, else
    /// raw.
    #[must_use]
    pub fn of(dest: &Path) -> Self {
        if is_npy_path(dest) {
            OutFormat::Npy
        } else if geotiff::is_tiff_path(dest) {
            OutFormat::GeoTiff
        } else if zarr::is_zarr_path(dest) {
            OutFormat::Zarr
        } else {
            OutFormat::Raw
        }
    }
}

impl std::str::FromStr for OutFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "npy" => Ok(OutFormat::Npy),
            "raw" => Ok(OutFormat::Raw),
            "tif" | "tiff" | "geotiff" => Ok(OutFormat::GeoTiff),
            "zarr" => Ok(OutFormat::Zarr),
            _ => Err(Error::invalid(format!(
                "unknown output format `{s}`: use npy, raw, tif or zarr"
            ))),
        }
    }
}

/// A compression given as `name[:level]` on the command line.
pub(crate) struct CodecSpec<'a, B: Fn() -> Error> {
    /// The name, lower-cased.
    pub name: String,
    /// The level as written, if given.
    pub level: Option<&'a str>,
    bad: B,
}

impl<'a, B: Fn() -> Error> CodecSpec<'a, B> {
    /// Splits `s`; `bad` makes the error for a spec that does not hold.
    pub fn parse(s: &'a str, bad: B) -> Self {
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n, Some(l)),
            None => (s, None),
        };
        CodecSpec {
            name: name.to_ascii_lowercase(),
            level,
            bad,
        }
    }

    /// The level, `default` when none was given, checked to lie in `lo..=hi`.
    pub fn level_in(&self, default: i64, lo: i64, hi: i64) -> Result<i64> {
        match self.level {
            None => Ok(default),
            Some(l) => l
                .parse::<i64>()
                .ok()
                .filter(|v| (lo..=hi).contains(v))
                .ok_or_else(&self.bad),
        }
    }

    /// The error for this spec.
    pub fn bad(&self) -> Error {
        (self.bad)()
    }
}

/// How a staged output is encoded when it is finished.
#[derive(Clone, Debug, PartialEq)]
pub enum Encode {
    /// A tiled GeoTIFF.
    Tiff(geotiff::TiffWriteOptions),
    /// A Zarr v3 store.
    Zarr(zarr::ZarrWriteOptions),
}

/// Shape, dtype and layout of a tensor file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Storage format.
    pub format: Format,
    /// Element type.
    pub dtype: DType,
    /// Shape, C order.
    pub shape: Vec<usize>,
    /// Byte offset of the first element in the file.
    pub data_offset: u64,
}

impl TensorInfo {
    /// Number of elements (checked against overflow when the file was opened).
    #[must_use]
    pub fn len(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// True if some dimension is zero.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of data.
    #[must_use]
    pub fn nbytes(&self) -> u64 {
        self.len() * self.dtype.size() as u64
    }
}

/// Number of elements of `shape`, or an error naming `path` if the count or the byte size
/// overflows.
fn checked_nbytes(path: &Path, shape: &[usize], dtype: DType) -> Result<u64> {
    npy::data_bytes(shape, dtype).ok_or_else(|| {
        // which count overflowed: the elements, or only the bytes
        let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let msg = if elements.is_none() {
            format!(
                "shape {} overflows a 64-bit element count",
                fmt_shape(shape)
            )
        } else {
            format!(
                "shape {} of {dtype} overflows a 64-bit byte count",
                fmt_shape(shape)
            )
        };
        Error::format(path, msg)
    })
}

/// Which part of a mapped window a tile reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// Every element.
    All,
    /// Only some column runs of each row of `row` elements: `runs[..nruns]` as
    /// `(first column, columns)`. They are read into a compact buffer (each row's runs
    /// one after another), so a 1000-column tile of a 100000-column image costs a
    /// thousand columns of memory, not a hundred thousand.
    Rows {
        /// Row length in elements.
        row: u64,
        /// Column runs `(first, count)`.
        runs: [(u64, u64); 3],
        /// Runs used.
        nruns: usize,
    },
}

impl Touch {
    /// Elements touched in a window of `len` elements.
    #[must_use]
    pub fn touched(&self, len: u64) -> u64 {
        match *self {
            Touch::All => len,
            Touch::Rows { row, runs, nruns } => {
                (len / row.max(1)) * runs[..nruns].iter().map(|r| r.1).sum::<u64>()
            }
        }
    }
}

/// An open input tensor. Holds the file open; maps nothing until asked for a window.
#[derive(Debug)]
pub struct TensorFile {
    path: PathBuf,
    file: File,
    info: TensorInfo,
    /// Set when windows are decoded from compressed chunks rather than mapped.
    chunked: Option<Arc<chunked::Chunked>>,
    /// Layout and georeferencing of a TIFF input.
    tiff: Option<Box<(geotiff::TiffLayout, geotiff::GeoRef)>>,
    /// Layout of a Zarr input.
    zarr: Option<Box<zarr::ZarrLayout>>,
}

impl TensorFile {
    /// Opens a tensor file: `.npy`, GeoTIFF (`.tif`/`.tiff`, see
    /// [`open_tiff`](Self::open_tiff)) or Zarr v3 (`.zarr`, see
    /// [`open_zarr`](Self::open_zarr)), by extension or, failing that, by content.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened or read; [`Error::Format`] if the header is
    /// malformed, describes an unsupported dtype or order, or disagrees with the file size;
    /// [`Error::Invalid`] if it is neither `.npy`, TIFF nor Zarr, by name or by its first
    /// bytes (raw files need [`open_raw`](Self::open_raw)).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if geotiff::is_tiff_path(path) {
            return Self::open_tiff(path);
        }
        if zarr::is_zarr_path(path) {
            return Self::open_zarr(path);
        }
        if !is_npy_path(path) {
            // no telling extension: recognise the format by its first bytes
            let mut magic = [0u8; 6];
            let mut f = own_files::open_input(path)?;
            let got = read_up_to(&mut f, &mut magic).unwrap_or(0);
            match &magic[..got.min(6)] {
                [b'I', b'I', 42 | 43, 0, ..] | [b'M', b'M', 0, 42 | 43, ..] => {
                    return Self::open_tiff(path);
                }
                b"\x93NUMPY" => {}
                _ => {
                    return Err(Error::invalid(format!(
                        "{}: not a .npy, TIFF or Zarr v3 file; for raw binary data give its \
                         --shape and --in-dtype",
                        path.display()
                    )));
                }
            }
        }
        let mut file = own_files::open_input(path)?;
        let file_len = file_len(&file, path)?;
        let mut pre = [0u8; npy::PREAMBLE];
        let got = read_up_to(&mut file, &mut pre).map_err(|e| Error::io("read", path, e))?;
        let hlen = npy::header_len(&pre[..got]).map_err(|m| Error::format(path, m))?;
        if hlen > NPY_HEADER_MAX {
            return Err(Error::format(
                path,
                format!(
                    "the .npy header length field says {hlen} bytes; tilestream reads headers \
                     of at most {NPY_HEADER_MAX} bytes (numpy's own limit is 10000)"
                ),
            ));
        }
        if hlen as u64 > file_len {
            return Err(Error::format(
                path,
                format!(
                    "truncated .npy header: header length field says {hlen} bytes, file has {file_len}"
                ),
            ));
        }
        let mut head = vec![0u8; hlen];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read", path, e))?;
        let h = npy::parse_header(&head).map_err(|m| Error::format(path, m))?;
        let nbytes = checked_nbytes(path, &h.shape, h.dtype)?;
        let have = file_len - h.data_offset;
        if have != nbytes {
            let what = if have < nbytes {
                "truncated"
            } else {
                "longer than its header says"
            };
            return Err(Error::format(
                path,
                format!(
                    "file is {what}: header says {} {} = {nbytes} bytes of data, file holds {have}",
                    fmt_shape(&h.shape),
                    h.dtype
                ),
            ));
        }
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            info: TensorInfo {
                format: Format::Npy { version: h.version },
                dtype: h.dtype,
                shape: h.shape,
                data_offset: h.data_offset,
            },
            chunked: None,
            tiff: None,
            zarr: None,
        })
    }

    /// Opens a (Geo)TIFF: its first image, as `(bands, rows, columns)` or `(rows,
    /// columns)`. Uncompressed band-sequential data is mapped; anything else is decoded
    /// chunk by chunk.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Format`] if it is not a TIFF
    /// tilestream can read.
    pub fn open_tiff(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (layout, georef) = geotiff::read_layout(path)?;
        let file = own_files::open_input(path)?;
        let shape = layout.shape();
        let dtype = layout.dtype;
        let nbytes = checked_nbytes(path, &shape, dtype)?;
        let (data_offset, chunked) = match layout.contiguous_offset() {
            Some(off) => {
                // mapped: a file shorter than its tables say would fault when read
                let len = file_len(&file, path)?;
                if off.checked_add(nbytes).is_none_or(|end| end > len) {
                    return Err(Error::format(
                        path,
                        format!(
                            "its data runs from byte {off} for {nbytes} bytes, but the file has \
                             {len}: it is truncated"
                        ),
                    ));
                }
                (off, None)
            }
            None => {
                let src = geotiff::TiffChunks::new(path, layout.clone(), georef.nodata.as_deref())?;
                let c = chunked::Chunked::new(shape.clone(), dtype, Box::new(src));
                (0, Some(Arc::new(c)))
            }
        };
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            info: TensorInfo {
                format: Format::GeoTiff,
                dtype,
                shape,
                data_offset,
            },
            chunked,
            tiff: Some(Box::new((layout, georef))),
            zarr: None,
        })
    }

    /// Opens the Zarr v3 array at the root of the store `path`; its chunks are decoded
    /// by `zarrs` as tiles need them.
    ///
    /// # Errors
    /// [`Error::Format`] for a Zarr v2 store, a group, an irregular chunk grid or a data
    /// type tilestream does not handle; [`Error::Io`] if it cannot be read.
    pub fn open_zarr(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let layout = zarr::read_layout(path)?;
        let meta = path.join("zarr.json");
        let file = own_files::open_input(&meta)?;
        checked_nbytes(path, &layout.shape, layout.dtype)?;
        let src = zarr::ZarrChunks::open(path, &layout)?;
        let c = chunked::Chunked::new(layout.shape.clone(), layout.dtype, Box::new(src));
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            info: TensorInfo {
                format: Format::Zarr,
                dtype: layout.dtype,
                shape: layout.shape.clone(),
                data_offset: 0,
            },
            chunked: Some(Arc::new(c)),
            tiff: None,
            zarr: Some(Box::new(layout)),
        })
    }

    /// The layout of a Zarr input.
    #[must_use]
    pub fn zarr(&self) -> Option<&zarr::ZarrLayout> {
        self.zarr.as_deref()
    }

    /// The TIFF layout and georeferencing, for a TIFF input.
    #[must_use]
    pub fn tiff(&self) -> Option<(&geotiff::TiffLayout, &geotiff::GeoRef)> {
        self.tiff.as_deref().map(|(l, g)| (l, g))
    }

    /// The georeferencing of a GeoTIFF input (`None` for other formats or a TIFF
    /// without georeferencing tags).
    #[must_use]
    pub fn georef(&self) -> Option<&geotiff::GeoRef> {
        self.tiff().map(|t| t.1).filter(|g| !g.is_empty())
    }

    /// The chunk decoder of a compressed input (`None` when windows are mapped).
    #[must_use]
    pub fn chunked(&self) -> Option<&chunked::Chunked> {
        self.chunked.as_deref()
    }

    /// Memory that reading this input needs beyond its windows (decode scratch of a
    /// compressed file; 0 for mapped files).
    #[must_use]
    pub fn read_scratch_bytes(&self) -> u64 {
        self.chunked.as_ref().map_or(0, |c| c.scratch_bytes())
    }

    /// Reads several windows at once; for a compressed file each chunk they touch is
    /// decoded once for all of them.
    ///
    /// # Errors
    /// As for [`TensorFile::map_window_touch`].
    pub fn map_windows(&self, reqs: &[(u64, u64, Touch)]) -> Result<Vec<Window>> {
        match &self.chunked {
            Some(c) => Ok(c
                .read(reqs)?
                .into_iter()
                .map(|owned| Window {
                    map: None,
                    len: owned.len(),
                    owned,
                    skip: 0,
                })
                .collect()),
            None => reqs
                .iter()
                .map(|&(s, n, t)| self.map_window_touch(s, n, t))
                .collect(),
        }
    }

    /// Opens a headerless raw file of the given shape and dtype (little-endian, C order).
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Format`] if its size is not exactly
    /// what the shape and dtype need.
    pub fn open_raw(path: impl AsRef<Path>, shape: &[usize], dtype: DType) -> Result<Self> {
        let path = path.as_ref();
        let file = own_files::open_input(path)?;
        let len = file_len(&file, path)?;
        let nbytes = checked_nbytes(path, shape, dtype)?;
        if len != nbytes {
            return Err(Error::format(
                path,
                format!(
                    "size mismatch: --shape {} --in-dtype {dtype} needs {nbytes} bytes, file holds {len}",
                    fmt_shape(shape)
                ),
            ));
        }
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            info: TensorInfo {
                format: Format::Raw,
                dtype,
                shape: shape.to_vec(),
                data_offset: 0,
            },
            chunked: None,
            tiff: None,
            zarr: None,
        })
    }

    /// Opens `path` as `.npy`, or as raw data when `raw` gives (shape, dtype).
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`open_raw`](Self::open_raw).
    pub fn open_any(path: impl AsRef<Path>, raw: Option<(&[usize], DType)>) -> Result<Self> {
        match raw {
            Some((shape, dtype)) => Self::open_raw(path, shape, dtype),
            None => Self::open(path),
        }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shape, dtype and layout.
    #[must_use]
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }

    /// Shape.
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.info.shape
    }

    /// Element type.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.info.dtype
    }

    /// The underlying open file (used to compare identities of inputs and outputs).
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Maps the elements `[start, start + count)` (flat C-order indices), prefaulting the
    /// pages so that the compute stage does not stall on them.
    ///
    /// The file size is checked again first: a file truncated since it was opened gives an
    /// error here instead of a SIGBUS later.
    ///
    /// # Errors
    /// [`Error::Format`] if the file shrank; [`Error::Io`] if the map fails.
    pub fn map_window(&self, start: u64, count: u64) -> Result<Window> {
        self.map_window_touch(start, count, Touch::All)
    }

    /// Reads the elements `[start, start + count)` as `touch` says: [`Touch::All`] maps
    /// them like [`TensorFile::map_window`]; [`Touch::Rows`] reads only the column runs of
    /// each row, with positioned reads, into a compact owned buffer (each row the runs
    /// one after another).
    ///
    /// Why narrow windows are read rather than mapped: on a fault the kernel maps up to
    /// 64 KiB of cached pages around the faulting one (fault-around), so touching a
    /// 2 KiB run of each row of a mapped window would cost up to 32 times that in
    /// resident memory, beyond any budget's reach.
    ///
    /// # Errors
    /// As for [`TensorFile::map_window`].
    pub fn map_window_touch(&self, start: u64, count: u64, touch: Touch) -> Result<Window> {
        if self.chunked.is_some() {
            let mut w = self.map_windows(&[(start, count, touch)])?;
            return w
                .pop()
                .ok_or_else(|| Error::Internal("no window decoded".into()));
        }
        if let Touch::Rows { row, runs, nruns } = touch {
            return self.read_runs(start, count, row, &runs[..nruns]);
        }
        let es = self.info.dtype.size() as u64;
        let begin = self.info.data_offset + start * es;
        let len = count * es;
        if len == 0 {
            return Ok(Window {
                map: None,
                owned: Vec::new(),
                skip: 0,
                len: 0,
            });
        }
        let now = file_len(&self.file, &self.path)?;
        if begin + len > now {
            return Err(Error::format(
                &self.path,
                format!(
                    "file changed size while in use: it now holds {now} bytes, {} are needed",
                    begin + len
                ),
            ));
        }
        let page = page_size();
        let aligned = begin / page * page;
        let skip = (begin - aligned) as usize;
        let mut opts = MmapOptions::new();
        opts.offset(aligned).len(skip + len as usize);
        // SAFETY: the map is read-only and private to this process. Another process could
        // truncate or rewrite the file while it is mapped; the size was checked just above,
        // which is the best a reader of a shared file can do (documented in the README).
        let map = unsafe { opts.map(&self.file) }
            .map_err(|e| Error::io("map a window of", &self.path, e))?;
        // Pages already in the page cache are cheapest faulted in lazily by the compute
        // threads (the kernel maps them in batches); pages that are not are read here, in
        // the read stage, so disk I/O overlaps the compute of the previous tile.
        if !fully_resident(&map) {
            populate(&map, 0, map.len());
        }
        Ok(Window {
            map: Some(map),
            owned: Vec::new(),
            skip,
            len: len as usize,
        })
    }

    /// Reads column runs `(first, count)` of each row of `row` elements in the elements
    /// `[start, start + count)` into a compact buffer.
    fn read_runs(&self, start: u64, count: u64, row: u64, runs: &[(u64, u64)]) -> Result<Window> {
        let es = self.info.dtype.size() as u64;
        let rows = count / row.max(1);
        let width: u64 = runs.iter().map(|r| r.1).sum();
        let end = self.info.data_offset + (start + count) * es;
        let now = file_len(&self.file, &self.path)?;
        if end > now {
            return Err(Error::format(
                &self.path,
                format!(
                    "file changed size while in use: it now holds {now} bytes, {end} are needed"
                ),
            ));
        }
        let mut owned = vec![0u8; (rows * width * es) as usize];
        let mut at = 0usize;
        for r in 0..rows {
            for &(c0, n) in runs {
                let len = (n * es) as usize;
                let off = self.info.data_offset + (start + r * row + c0) * es;
                self.file
                    .read_exact_at(&mut owned[at..at + len], off)
                    .map_err(|e| Error::io("read a window of", &self.path, e))?;
                at += len;
            }
        }
        let len = owned.len();
        Ok(Window {
            map: None,
            owned,
            skip: 0,
            len,
        })
    }
}

/// Faults in `len` bytes of `map` from `offset` (a page boundary) in one call where the
/// kernel has `MADV_POPULATE_READ` (5.14+), else by touching one byte per page.
fn populate(map: &Mmap, offset: usize, len: usize) {
    let len = len.min(map.len().saturating_sub(offset));
    if len == 0
        || map
            .advise_range(memmap2::Advice::PopulateRead, offset, len)
            .is_ok()
    {
        return;
    }
    let mut acc = 0u8;
    for b in map[offset..offset + len]
        .iter()
        .step_by(page_size() as usize)
    {
        acc ^= *b;
    }
    std::hint::black_box(acc);
}

/// True if every page of `map` is in the page cache (`mincore`). On error, false.
fn fully_resident(map: &Mmap) -> bool {
    let page = page_size() as usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes starting at a page boundary, and
    // `vec` has one byte per page of it, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    rc == 0 && vec.iter().all(|&v| v & 1 == 1)
}

/// Bytes that mapping `count` elements may cost beyond the data itself (page alignment at
/// both ends).
#[must_use]
pub fn window_slack() -> u64 {
    2 * page_size()
}

/// The system page size.
#[must_use]
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// The pages lying wholly inside the byte range `off .. off + len`, as a byte range
/// `lo .. hi` (empty, `hi <= lo`, when the range covers no whole page).
fn whole_pages(off: u64, len: u64) -> (u64, u64) {
    let page = page_size();
    (off.div_ceil(page) * page, (off + len) / page * page)
}

#[cfg(test)]
mod page_tests {
    use super::{page_size, whole_pages};

    #[test]
    fn whole_pages_keeps_only_pages_the_range_covers() {
        let p = page_size();
        assert_eq!(whole_pages(0, 3 * p), (0, 3 * p));
        assert_eq!(whole_pages(1, 3 * p), (p, 3 * p));
        assert_eq!(whole_pages(p - 1, p + 2), (p, 2 * p));
        // a few KiB inside one or two pages: nothing whole
        let (lo, hi) = whole_pages(p / 2, p);
        assert!(hi <= lo);
        let (lo, hi) = whole_pages(10, 100);
        assert!(hi <= lo);
    }
}

/// A byte range of an input file: mapped (unmapped on drop), or read into a compact
/// buffer for narrow windows ([`Touch::Rows`]).
#[derive(Debug)]
pub struct Window {
    map: Option<Mmap>,
    owned: Vec<u8>,
    skip: usize,
    len: usize,
}

impl Window {
    /// The mapped data bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.skip..self.skip + self.len],
            None => &self.owned,
        }
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn file_len(file: &File, path: &Path) -> Result<u64> {
    let m = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if m.is_dir() {
        return Err(Error::format(path, "is a directory, not a tensor file"));
    }
    Ok(m.len())
}

/// True if the path names a `.npy` file (by extension, case-insensitive).
#[must_use]
pub fn is_npy_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

/// A temporary file in the directory of `dest` (so that renaming it onto `dest` is
/// atomic), named `.{dest name}.XXXX.tilestream-tmp`, created 0666 less the umask.
///
/// # Errors
/// [`Error::Io`] if the directory is missing or not writable.
pub fn temp_beside(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let tmp = temp_beside_unlocked(dest)?;
    // Held until the file is renamed or removed: tells `clean_stale` it is in use.
    let _ = lock(tmp.as_file());
    Ok(tmp)
}

/// Most dimensions of a tensor (numpy's `NPY_MAXDIMS`): a header or `zarr.json` giving
/// more is refused before anything is sized by it.
pub const MAX_RANK: usize = 64;

/// Most bytes of a `.npy` header read (numpy's own `np.load` stops at 10000 by default;
/// a header of 64 dimensions takes under 2 KiB).
const NPY_HEADER_MAX: usize = 1 << 20;

/// Suffix of every temporary output file.
pub const TEMP_SUFFIX: &str = ".tilestream-tmp";

/// Prefix of a pipeline file's directory of intermediates.
pub const PIPELINE_DIR_PREFIX: &str = ".tilestream-pipeline-";

/// Takes an exclusive advisory lock on `f` without waiting; true if taken.
#[must_use]
pub fn lock(f: &File) -> bool {
    // SAFETY: flock on an open descriptor has no memory-safety preconditions.
    unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(f),
            libc::LOCK_EX | libc::LOCK_NB,
        ) == 0
    }
}

/// Removes what killed runs left in `dir`: temporary outputs (`*.tilestream-tmp`) and
/// pipeline intermediate directories that no running process holds (each live one is
/// locked by its process). With `only_for`, just the temporary files of that output name.
/// Returns the paths removed.
///
/// # Errors
/// [`Error::Io`] if `dir` cannot be listed.
pub fn clean_stale(dir: &Path, only_for: Option<&str>) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_temp = name.ends_with(TEMP_SUFFIX)
            && only_for.is_none_or(|n| name.starts_with(&format!(".{n}.")));
        let is_pipeline = only_for.is_none() && name.starts_with(PIPELINE_DIR_PREFIX);
        if is_temp {
            // never opened through a link or blocking on a FIFO: a link or special file
            // under one of tilestream's own names is removed as it is (the name, not
            // what it points to); a regular file only when no live run holds its lock
            let free = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_file() => std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                    .open(&path)
                    .is_ok_and(|f| lock(&f)),
                Ok(m) if m.file_type().is_dir() => {
                    // a Zarr output being encoded: its process holds `.lock` inside
                    let lockfile = path.join(".lock");
                    let free = File::open(&lockfile).map_or(true, |f| lock(&f));
                    if free && std::fs::remove_dir_all(&path).is_ok() {
                        removed.push(path);
                    }
                    continue;
                }
                Ok(_) => true,
                Err(_) => false,
            };
            if free && std::fs::remove_file(&path).is_ok() {
                removed.push(path);
            }
        } else if is_pipeline {
            let lockfile = path.join(".lock");
            let free = File::open(&lockfile).map_or(true, |f| lock(&f));
            if free && std::fs::remove_dir_all(&path).is_ok() {
                removed.push(path);
            }
        }
    }
    Ok(removed)
}

/// The directory of `dest` (`.` for a bare name) and its file name.
pub(crate) fn dir_and_name(dest: &Path) -> Result<(PathBuf, String)> {
    let name = dest
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{}: not a file name", dest.display())))?
        .to_string_lossy()
        .into_owned();
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

fn temp_beside_unlocked(dest: &Path) -> Result<tempfile::NamedTempFile> {
    let (dir, name) = dir_and_name(dest)?;
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(TEMP_SUFFIX)
        // like any new file: 0666 less the umask (tempfile's default is 0600)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create a temporary output file in", &dir, e))
}

/// An output tensor being written: a temporary file beside the destination that becomes
/// the destination in [`finish`](Self::finish). Dropped without `finish`, it is deleted.
#[derive(Debug)]
pub struct OutputFile {
    durable: bool,
    dest: PathBuf,
    tmp: tempfile::NamedTempFile,
    data_offset: u64,
    dtype: DType,
    shape: Vec<usize>,
    /// Set when the destination is a GeoTIFF or a Zarr store: the data is staged raw in
    /// `tmp`, then encoded by [`finish`](Self::finish).
    encode: Option<Encode>,
}

impl OutputFile {
    /// Creates the temporary file for an output of `shape` and `dtype` at `dest`: `.npy`
    /// (with header) if the name ends in `.npy`, a GeoTIFF (staged raw, encoded by
    /// [`finish`](Self::finish) with default [`geotiff::TiffWriteOptions`]) if it ends in
    /// `.tif`/`.tiff`, raw data otherwise.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory is missing or not writable, or the file cannot be
    /// sized.
    pub fn create(dest: impl AsRef<Path>, shape: &[usize], dtype: DType) -> Result<Self> {
        let dest = dest.as_ref();
        Self::create_as(dest, shape, dtype, OutFormat::of(dest))
    }

    /// [`OutputFile::create`] in `format` whatever the name says.
    ///
    /// # Errors
    /// As [`OutputFile::create`].
    pub fn create_as(
        dest: &Path,
        shape: &[usize],
        dtype: DType,
        format: OutFormat,
    ) -> Result<Self> {
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        own_files::check_destination(dest, format)?;
        if let Ok((dir, name)) = dir_and_name(dest) {
            // what a killed run of this same output left behind
            let _ = clean_stale(&dir, Some(&name));
        }
        let encode = default_encode(dest, shape, dtype, format)?;
        let tmp = temp_beside(dest)?;
        let header = if format == OutFormat::Npy {
            npy::build_header(dtype, shape)
        } else {
            Vec::new()
        };
        let data_offset = header.len() as u64;
        tmp.as_file()
            .write_all_at(&header, 0)
            .map_err(|e| Error::io("write", tmp.path(), e))?;
        tmp.as_file()
            .set_len(data_offset + nbytes)
            .map_err(|e| Error::io("size", dest, e))?;
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp,
            data_offset,
            dtype,
            shape: shape.to_vec(),
            encode,
        })
    }

    /// Takes up the temporary output `tmp` that an interrupted run left for `dest`, if it
    /// is free (no live run holds it) and has exactly the size and header a new one of
    /// `shape` and `dtype` would have. Its data is left as it is.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Invalid`] if another run holds it
    /// or it does not match.
    pub fn adopt(dest: &Path, tmp: &Path, shape: &[usize], dtype: DType) -> Result<Self> {
        Self::adopt_as(dest, tmp, shape, dtype, OutFormat::of(dest))
    }

    /// [`OutputFile::adopt`] of an output in `format` whatever the name says.
    ///
    /// # Errors
    /// As [`OutputFile::adopt`].
    pub fn adopt_as(
        dest: &Path,
        tmp: &Path,
        shape: &[usize],
        dtype: DType,
        format: OutFormat,
    ) -> Result<Self> {
        let nbytes = checked_nbytes(dest, shape, dtype)?;
        own_files::check_destination(dest, format)?;
        let (dir, name) = dir_and_name(dest)?;
        let own_name = tmp
            .file_name()
            .is_some_and(|n| own_files::temp_name_of(&name, &n.to_string_lossy()));
        if !own_name || tmp.parent().map(Path::to_path_buf).unwrap_or_default() != dir {
            return Err(Error::invalid(format!(
                "{}: not a temporary output of {}; tilestream takes up only its own",
                tmp.display(),
                dest.display()
            )));
        }
        let file = own_files::open_own(tmp, false)?;
        if !lock(&file) {
            return Err(Error::invalid(format!(
                "{}: held by another run",
                tmp.display()
            )));
        }
        let header = if format == OutFormat::Npy {
            npy::build_header(dtype, shape)
        } else {
            Vec::new()
        };
        let len = file_len(&file, tmp)?;
        let mut head = vec![0u8; header.len()];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read", tmp, e))?;
        if len != header.len() as u64 + nbytes || head != header {
            return Err(Error::invalid(format!(
                "{}: not the temporary output of this run",
                tmp.display()
            )));
        }
        Ok(OutputFile {
            durable: true,
            dest: dest.to_path_buf(),
            tmp: tempfile::NamedTempFile::from_parts(
                file,
                tempfile::TempPath::try_from_path(tmp).map_err(|e| Error::io("open", tmp, e))?,
            ),
            data_offset: header.len() as u64,
            dtype,
            shape: shape.to_vec(),
            encode: default_encode(dest, shape, dtype, format)?,
        })
    }

    /// Makes this output a tiled GeoTIFF written as `opts` say: the run's data is staged
    /// raw in the temporary file and encoded into compressed tiles by
    /// [`finish`](Self::finish) (which needs the staged size again in free disk space
    /// for a moment).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the shape is not an image or the dtype has no TIFF form.
    pub fn with_tiff(mut self, opts: geotiff::TiffWriteOptions) -> Result<Self> {
        geotiff::image_dims(&self.shape)?;
        geotiff::tiff_sample(self.dtype)?;
        self.encode = Some(Encode::Tiff(opts));
        Ok(self)
    }

    /// Makes this output a Zarr v3 store written as `opts` say (staged raw, encoded by
    /// [`finish`](Self::finish) into a temporary directory renamed into place).
    #[must_use]
    pub fn with_zarr(mut self, opts: zarr::ZarrWriteOptions) -> Self {
        self.encode = Some(Encode::Zarr(opts));
        self
    }

    /// The destination path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// True when the data is staged raw and encoded by [`finish`](Self::finish)
    /// (GeoTIFF destinations).
    #[must_use]
    pub fn is_staged(&self) -> bool {
        self.encode.is_some()
    }

    /// Memory the encoding in [`finish`](Self::finish) may hold.
    pub fn set_encode_memory(&mut self, bytes: u64) {
        match &mut self.encode {
            Some(Encode::Tiff(t)) => t.memory = bytes,
            Some(Encode::Zarr(z)) => z.memory = bytes,
            None => {}
        }
    }

    /// The temporary file the data goes to until [`finish`](Self::finish).
    #[must_use]
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// Reads back `buf.len()` bytes from element index `start` (flat C order).
    ///
    /// # Errors
    /// [`Error::Io`] on a failed read.
    pub fn read_at(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        let off = self.data_offset + start * self.dtype.size() as u64;
        self.tmp
            .as_file()
            .read_exact_at(buf, off)
            .map_err(|e| Error::io("read back", self.tmp.path(), e))
    }

    /// Leaves the temporary file in place (an interrupted run that can be resumed):
    /// the next run with `--resume` takes it up, `tilestream clean` removes it.
    pub fn keep(self) {
        let _ = self.tmp.keep();
    }

    /// Shape of the output.
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type of the output.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Writes `bytes` at element index `start` (flat C order).
    ///
    /// # Errors
    /// [`Error::Io`] on a failed write (disk full, file size limit...).
    pub fn write_at(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let off = self.data_offset + start * self.dtype.size() as u64;
        let file = self.tmp.as_file();
        file.write_all_at(bytes, off)
            .map_err(|e| Error::io("write", &self.dest, e))?;
        if self.durable {
            // Start writing this range back now, asynchronously, so the disk works while
            // later tiles compute and the flush in `finish` has little left to wait for.
            // Only the pages the write covers whole: a page shared with a neighbouring
            // write (a row of a 2-D tile is a few KiB) would be written back half done,
            // and the neighbour would then wait for that writeback to dirty it again —
            // 5x slower on 2-D tiles. Partial pages go out with the final flush.
            let (lo, hi) = whole_pages(off, bytes.len() as u64);
            if hi > lo {
                // SAFETY: the descriptor is open; the call only schedules writeback.
                unsafe {
                    libc::sync_file_range(
                        std::os::fd::AsRawFd::as_raw_fd(file),
                        lo as libc::off64_t,
                        (hi - lo) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether [`finish`](Self::finish) flushes the data to disk before the rename
    /// (default true). Without it the output is still complete and atomically renamed,
    /// but a power failure soon after may lose it, as with `cp` or `np.save`.
    #[must_use]
    pub fn durable(mut self, yes: bool) -> Self {
        self.durable = yes;
        self
    }

    /// Flushes the data to disk and renames the file into place (replacing what was
    /// there), then syncs the directory so the rename survives a crash.
    ///
    /// # Errors
    /// [`Error::Io`] if the flush or rename fails; the temporary file is removed then.
    pub fn finish(self) -> Result<()> {
        let staged = self.tmp.as_file();
        let off = self.data_offset;
        let read = |at: u64, buf: &mut [u8]| {
            staged
                .read_exact_at(buf, off + at)
                .map_err(|e| Error::io("read back", self.tmp.path(), e))
        };
        match &self.encode {
            Some(Encode::Tiff(opts)) => {
                let encoded = temp_beside(&self.dest)?;
                geotiff::write_tiled(
                    encoded.as_file(),
                    &self.dest,
                    &self.shape,
                    self.dtype,
                    opts,
                    &read,
                )?;
                return Self::persist(encoded, &self.dest, self.durable);
            }
            Some(Encode::Zarr(opts)) => {
                let (parent, name) = dir_and_name(&self.dest)?;
                let dir = tempfile::Builder::new()
                    .prefix(&format!(".{name}."))
                    .suffix(TEMP_SUFFIX)
                    .tempdir_in(&parent)
                    .map_err(|e| Error::io("create a directory in", &parent, e))?;
                // held while the store is written, so that `clean` leaves it alone
                let lock_path = dir.path().join(".lock");
                let held = own_files::open_own(&lock_path, true)?;
                let _ = lock(&held);
                zarr::write_store(dir.path(), &self.dest, &self.shape, self.dtype, opts, &read)?;
                std::fs::remove_file(&lock_path).map_err(|e| Error::io("remove", &lock_path, e))?;
                if std::fs::symlink_metadata(&self.dest).is_ok() {
                    own_files::check_destination(&self.dest, OutFormat::Zarr)?;
                    std::fs::remove_dir_all(&self.dest)
                        .map_err(|e| Error::io("replace", &self.dest, e))?;
                }
                std::fs::rename(dir.path(), &self.dest)
                    .map_err(|e| Error::io("rename the finished output to", &self.dest, e))?;
                let _ = dir.keep();
                return Ok(());
            }
            None => {}
        }
        Self::persist(self.tmp, &self.dest, self.durable)
    }

    fn persist(tmp: tempfile::NamedTempFile, dest: &Path, durable: bool) -> Result<()> {
        // what may have appeared at the destination while the run went on
        own_files::check_destination(dest, OutFormat::Npy)?;
        if durable {
            tmp.as_file()
                .sync_all()
                .map_err(|e| Error::io("flush", dest, e))?;
        }
        crate::fault::crash_point(|| "synced".into());
        tmp.persist(dest)
            .map_err(|e| Error::io("rename the finished output to", dest, e.error))?;
        crate::fault::crash_point(|| "renamed".into());
        if let Some(dir) = dest
            .parent()
            .filter(|p| durable && !p.as_os_str().is_empty())
        {
            // Best effort: some filesystems refuse fsync on a directory.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        crate::fault::crash_point(|| "dir-synced".into());
        Ok(())
    }

    /// The open temporary file (used to compare identities of inputs and outputs).
    #[must_use]
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }
}

/// The encoding `format` needs: GeoTIFF (checking that the shape is an image and the
/// dtype has a TIFF form) or Zarr v3; none for `.npy` and raw.
fn default_encode(
    dest: &Path,
    shape: &[usize],
    dtype: DType,
    format: OutFormat,
) -> Result<Option<Encode>> {
    if format == OutFormat::GeoTiff {
        geotiff::image_dims(shape)?;
        geotiff::tiff_sample(dtype)?;
        return Ok(Some(Encode::Tiff(geotiff::TiffWriteOptions::default())));
    }
    if format == OutFormat::Zarr {
        if shape.is_empty() {
            return Err(Error::invalid(format!(
                "{}: a Zarr output needs at least one dimension",
                dest.display()
            )));
        }
        return Ok(Some(Encode::Zarr(zarr::ZarrWriteOptions::default())));
    }
    Ok(None)
}

/// True if `a` and `b` are the same file on disk (same device and inode).
#[must_use]
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
