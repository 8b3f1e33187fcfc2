//! File formats: opening `.npy`, raw, GeoTIFF/COG, Zarr v3, HDF5/NetCDF and JPEG 2000 arrays
//! ([`TensorFile::open`]), the write options of GeoTIFF, COG and Zarr outputs,
//! reading windows of them, and creating outputs that appear at their path only once
//! complete. A format is a folder here (or one file when it is small); what every format
//! shares (windows, positioned reads, temporary files, locks) is in `crate::io`.
//!
//! Input data is only ever reached through windows: a memory map of the byte range one
//! tile needs (page-aligned outward), prefaulted by the read stage and unmapped as soon as
//! the compute stage is done with it, so resident memory stays bounded by the windows in
//! flight. The whole file is never mapped, which is what lets a 6 GB file be processed
//! under `ulimit -v 2GiB`.
//!
//! Outputs are written with positioned writes (`pwrite`) from staging buffers into a
//! temporary file beside the destination, then fsynced and renamed into place: a failed
//! or interrupted run leaves nothing at the output path.

pub(crate) mod chunk_assembly;
#[doc(hidden)]
pub mod chunked;
mod encode_queue;
pub(crate) mod encoding;
#[doc(hidden)]
pub mod hdf5;
#[doc(hidden)]
pub mod jp2;
mod kind;
#[doc(hidden)]
pub mod netcdf3;
#[doc(hidden)]
pub mod npy;
mod open;
mod output;
mod read;
#[doc(hidden)]
pub mod tiff;
mod view;
#[doc(hidden)]
pub mod zarr;

pub(crate) use kind::CodecSpec;
pub use kind::{Format, OutFormat};

pub(crate) use crate::io::own_files::dir_and_name;
#[doc(hidden)]
pub use crate::io::own_files::same_file;
#[doc(hidden)]
pub use crate::io::remote::is_url;
#[doc(hidden)]
pub use crate::io::temp::{
    JOURNAL_MAGIC, PIPELINE_DIR_PREFIX, TEMP_SUFFIX, clean_stale, lock, temp_beside,
};
#[doc(hidden)]
pub use crate::io::window::{Window, page_size, window_slack};
pub use hdf5::DatasetEntry;
pub use open::list_arrays;
pub(crate) use open::refuse_object;
// a cluster job's outputs: created once, filled region by region by its tasks, committed
// once (the Python package's `tilestream.dask` drives them)
#[doc(hidden)]
pub use output::objects::clean_leftovers as clean_object_leftovers;
#[doc(hidden)]
pub use output::{OutRegion, OutputFile, commit_npy, create_npy_for_rows};
#[doc(hidden)]
pub use zarr::{commit_zarr, create_zarr_for_rows};
// what a library user sets to write a GeoTIFF, COG or Zarr output
pub use tiff::cog::{CogOptions, Overviews, Resampling};
pub use tiff::{GeoRef, TiffCompression, TiffPredictor, TiffWriteOptions};
pub use zarr::{ZarrCompression, ZarrWriteOptions};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
#[doc(hidden)]
pub use crate::shape::{fmt_shape, parse_shape};

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
pub(crate) fn checked_nbytes(path: &Path, shape: &[usize], dtype: DType) -> Result<u64> {
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

#[doc(hidden)]
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
    /// The runs of elements `(first, count)` the read `(start, count)` of this touch
    /// covers, in the order its window lays them out: the whole range, or each row's
    /// column runs.
    pub(crate) fn runs(self, start: u64, count: u64) -> impl Iterator<Item = (u64, u64)> {
        let (rows, row, runs, nruns) = match self {
            Touch::All => (1, 0, [(0, count), (0, 0), (0, 0)], 1),
            Touch::Rows { row, runs, nruns } => (count / row.max(1), row, runs, nruns),
        };
        (0..rows).flat_map(move |r| {
            runs.into_iter()
                .take(nruns)
                .map(move |(c0, n)| (start + r * row + c0, n))
        })
    }

    #[doc(hidden)]
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
    file: crate::io::source::Source,
    info: TensorInfo,
    /// Set when windows are decoded from compressed chunks rather than mapped.
    chunked: Option<Arc<chunked::Chunked>>,
    /// Layout and georeferencing of a TIFF input.
    tiff: Option<Box<(tiff::TiffLayout, tiff::GeoRef)>>,
    /// Layout of a Zarr input.
    zarr: Option<Box<zarr::ZarrLayout>>,
    /// The dataset of an HDF5 or NetCDF-4 input.
    hdf5: Option<Box<hdf5::Hdf5Layout>>,
    /// The layout of a JPEG 2000 input.
    jp2: Option<Box<jp2::Jp2Layout>>,
    /// How a `.npy` input in Fortran order is read (its windows are then decoded by
    /// `chunked`).
    npy: Option<Box<npy::chunks::NpyChunks>>,
    /// The elements are big-endian (a C-order `.npy` such as `'>f4'`): windows are read
    /// with positioned reads and their bytes swapped, never mapped.
    swap: bool,
    /// Where the nodata value comes from: the file, or
    /// [`with_nodata`](Self::with_nodata).
    given_nodata: NodataFrom,
    /// Where this tensor lies in its file's when it is a [`window`](Self::window) of it;
    /// `None` for the whole.
    view: Option<Box<view::View>>,
}

/// Where an input's nodata value comes from.
#[derive(Clone, Debug)]
enum NodataFrom {
    /// What the file says (a GeoTIFF's GDAL nodata tag; other formats say none).
    File,
    /// Given in its place: a value's text, or none.
    Given(Option<String>),
}

impl TensorFile {
    #[doc(hidden)]
    /// The dataset of an HDF5 or NetCDF-4 input.
    #[must_use]
    pub fn hdf5(&self) -> Option<&hdf5::Hdf5Layout> {
        self.hdf5.as_deref()
    }

    #[doc(hidden)]
    /// The layout of a Zarr input.
    #[must_use]
    pub fn zarr(&self) -> Option<&zarr::ZarrLayout> {
        self.zarr.as_deref()
    }

    #[doc(hidden)]
    /// The TIFF layout and georeferencing, for a TIFF input.
    #[must_use]
    pub fn tiff(&self) -> Option<(&tiff::TiffLayout, &tiff::GeoRef)> {
        self.tiff.as_deref().map(|(l, g)| (l, g))
    }

    #[doc(hidden)]
    /// The layout of a JPEG 2000 input.
    #[must_use]
    pub fn jp2(&self) -> Option<&jp2::Jp2Layout> {
        self.jp2.as_deref()
    }

    /// The georeferencing of a GeoTIFF input, or of a JPEG 2000 input's GeoJP2 box
    /// (`None` for other formats or a file without georeferencing).
    #[must_use]
    pub fn georef(&self) -> Option<&tiff::GeoRef> {
        match &self.view {
            Some(v) => v.georef.as_ref(),
            None => self.file_georef(),
        }
    }

    /// The georeferencing the file holds (a window's is moved from it).
    fn file_georef(&self) -> Option<&tiff::GeoRef> {
        self.tiff()
            .map(|t| t.1)
            .or(self.jp2().map(|j| &j.georef))
            .filter(|g| !g.is_empty())
    }

    /// The GDAL nodata value of a GeoTIFF input, as its text and as the value its
    /// samples hold there; `None` without one, or with one its
    /// sample type cannot hold (no pixel is nodata then).
    #[must_use]
    pub fn nodata(&self) -> Option<(&str, f64)> {
        let text = match &self.given_nodata {
            NodataFrom::Given(given) => given.as_deref()?,
            NodataFrom::File => match &self.hdf5 {
                Some(h) => h.nodata.as_deref()?,
                None => self.georef()?.nodata.as_deref()?,
            },
        };
        tiff::nodata_as(self.dtype(), text).map(|v| (text, v))
    }

    /// The value of [`nodata`](Self::nodata): the elements equal to it are missing
    /// pixels, which the `nan` reductions and quantiles leave out.
    #[must_use]
    pub fn missing(&self) -> Option<f64> {
        self.nodata().map(|(_, v)| v)
    }

    /// This input with `nodata` as its nodata value in place of what its file says
    /// (`None`: it has none), for a `.npy`, raw or Zarr input whose file cannot say it, or
    /// a GeoTIFF whose tag is wrong.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a value that is no number or that the input's type does
    /// not hold (`-9999` for `u16`, `nan` for an integer type, `0.5` for an integer type).
    pub fn with_nodata(mut self, nodata: Option<&str>) -> Result<Self> {
        if let Some(text) = nodata
            && !tiff::nodata_round_trips(self.dtype(), text)
        {
            return Err(Error::invalid(format!(
                "{}: nodata value '{text}' is not a {} value: give one the input's type \
                 holds (64-bit integers: within 2^53 or an f64's value), or none",
                self.path.display(),
                self.dtype()
            )));
        }
        self.given_nodata = NodataFrom::Given(nodata.map(str::to_string));
        Ok(self)
    }

    /// How a `.npy` input's elements are stored when they are not C order and
    /// little-endian (`Fortran order`, `big-endian`); `None` for the others.
    #[must_use]
    pub fn npy_order(&self) -> Option<String> {
        match &self.npy {
            Some(n) => Some(n.describe()),
            None => self.swap.then(|| "big-endian".to_string()),
        }
    }

    #[doc(hidden)]
    /// The chunk decoder of a compressed input (`None` when windows are mapped).
    #[must_use]
    pub fn chunked(&self) -> Option<&chunked::Chunked> {
        self.chunked.as_deref()
    }

    #[doc(hidden)]
    /// Memory that reading this input needs beyond its windows (decode scratch of a
    /// compressed file; 0 for mapped files).
    #[must_use]
    pub fn read_scratch_bytes(&self) -> u64 {
        self.chunked.as_ref().map_or(0, |c| c.scratch_bytes())
    }

    #[doc(hidden)]
    /// Sizes the decode scratch of a compressed input to `share` bytes where it can
    /// (see [`chunked::Chunked::fit_scratch`]); nothing for mapped files.
    pub fn fit_read_scratch(&self, share: u64) {
        if let Some(c) = &self.chunked {
            c.fit_scratch_across(share, self.window_chunks_across());
        }
    }

    #[doc(hidden)]
    /// Reads several windows at once; for a compressed file each chunk they touch is
    /// decoded once for all of them.
    ///
    /// # Errors
    /// As for [`TensorFile::map_window_touch`].
    pub fn map_windows(&self, reqs: &[(u64, u64, Touch)]) -> Result<Vec<Window>> {
        if let Some(parts) = self.view_pieces(reqs) {
            return self.read_pieces(reqs, &parts);
        }
        match &self.chunked {
            Some(c) => Ok(c.read(reqs)?.into_iter().map(Window::owned).collect()),
            None => reqs
                .iter()
                .map(|&(s, n, t)| self.map_window_touch(s, n, t))
                .collect(),
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

    #[doc(hidden)]
    /// The underlying open file (used to compare identities of inputs and outputs);
    /// `None` for an object in an object store.
    #[must_use]
    pub fn file(&self) -> Option<&File> {
        self.file.file()
    }
}

pub(crate) fn file_len(file: &File, path: &Path) -> Result<u64> {
    let m = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if m.is_dir() {
        return Err(Error::format(path, "is a directory, not a tensor file"));
    }
    Ok(m.len())
}

#[doc(hidden)]
/// True if the path names a `.npy` file (by extension, case-insensitive).
#[must_use]
pub fn is_npy_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

/// Most dimensions of a tensor (numpy's `NPY_MAXDIMS`): a header or `zarr.json` giving
/// more is refused before anything is sized by it.
pub const MAX_RANK: usize = 64;

/// Most bytes of a `.npy` header read (numpy's own `np.load` stops at 10000 by default;
/// a header of 64 dimensions takes under 2 KiB).
const NPY_HEADER_MAX: usize = 1 << 20;

/// Positioned reads of at least this many bytes are split across threads.
const PAR_IO_MIN: usize = 2 << 20;

/// Calls `f(offset, piece)` on pieces of `buf` (whole `unit`s, at least 1 MiB each) on
/// rayon's threads when `buf` is at least [`PAR_IO_MIN`] bytes, else once on the whole:
/// a positioned read of a large tile runs at what all cores draw from the page cache,
/// not one core's share. The first error is returned.
pub(crate) fn par_pieces_of(
    buf: &mut [u8],
    unit: usize,
    f: impl Fn(usize, &mut [u8]) -> crate::error::Result<()> + Sync,
) -> crate::error::Result<()> {
    use rayon::prelude::*;
    let unit = unit.max(1);
    let threads = crate::io::pool::threads().max(1);
    if buf.len() < PAR_IO_MIN || threads == 1 || buf.len() / unit < 2 {
        return f(0, buf);
    }
    let piece = (buf.len().div_ceil(threads).max(1 << 20)).div_ceil(unit) * unit;
    crate::io::pool::install(|| {
        buf.par_chunks_mut(piece)
            .enumerate()
            .try_for_each(|(k, p)| f(k * piece, p))
    })
}

/// The encoding of `format`, written with these options (GeoTIFF's made by `tiff` only
/// for a GeoTIFF); `None` for the formats written as they are (`.npy`, raw). Where
/// encoded formats are registered.
pub(crate) fn encoding_of<'a>(
    format: OutFormat,
    tiff: impl FnOnce() -> tiff::TiffWriteOptions,
    zarr: &'a zarr::ZarrWriteOptions,
) -> Option<Box<dyn encoding::Encoding + 'a>> {
    match format {
        OutFormat::GeoTiff => Some(Box::new(tiff::encoding::TiffEncoding(tiff()))),
        OutFormat::Zarr => Some(Box::new(zarr::encoding::ZarrEncoding(zarr))),
        OutFormat::Npy | OutFormat::Raw => None,
    }
}

/// Whether outputs of `format` are encoded as they are written (have an [`Encoding`](encoding::Encoding)).
pub(crate) fn is_encoded(format: OutFormat) -> bool {
    encoding_of(
        format,
        tiff::TiffWriteOptions::default,
        &zarr::ZarrWriteOptions::default(),
    )
    .is_some()
}

/// Checks that an output of `shape` and `dtype` can be written as `format` (an encoded
/// format's own rule: a GeoTIFF needs an image shape and a dtype with a TIFF form, a
/// Zarr store at least one dimension).
pub(crate) fn check_encodable(
    dest: &Path,
    shape: &[usize],
    dtype: DType,
    format: OutFormat,
) -> Result<()> {
    let zarr = zarr::ZarrWriteOptions::default();
    match encoding_of(format, Default::default, &zarr) {
        Some(e) => e.check_shape(dest, shape, dtype),
        None => Ok(()),
    }
}
