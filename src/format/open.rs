//! Opening an array file: by extension or first bytes (`.npy`, TIFF, Zarr), raw data of a
//! given shape, or a share of another file's rows.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result, TiffError};
use crate::io::source::Source;
use crate::io::{own_files, remote};

use super::{
    Format, NPY_HEADER_MAX, NodataFrom, TensorFile, TensorInfo, checked_nbytes, chunked, file_len,
    fmt_shape, hdf5, is_npy_path, jp2, netcdf3, npy, tiff, zarr,
};

impl TensorFile {
    /// Opens a tensor file: `.npy`, GeoTIFF (`.tif`/`.tiff`, see
    /// [`open_tiff`](Self::open_tiff)) or Zarr v3 (`.zarr`, see
    /// [`open_zarr`](Self::open_zarr)), by extension or, failing that, by content.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened or read; [`Error::Npy`] if the header is
    /// malformed or describes an unsupported dtype or order; [`Error::Format`] if it
    /// disagrees with the file size;
    /// [`Error::Invalid`] if it is neither `.npy`, TIFF nor Zarr, by name or by its first
    /// bytes (raw files need [`open_raw`](Self::open_raw)).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let object = remote::is_url(path);
        refuse_object(path)?;
        if !object && let Some((file, dataset)) = hdf5::split_dataset(path) {
            return Self::open_hdf5(file, Some(&dataset));
        }
        if hdf5::is_hdf5_path(path) {
            return Self::open_hdf5(path, None);
        }
        if tiff::is_tiff_path(path) {
            return Self::open_tiff(path);
        }
        if zarr::is_zarr_path(path) {
            return Self::open_zarr(path);
        }
        if jp2::is_jp2_path(path) {
            return Self::open_jp2(path);
        }
        if !is_npy_path(path) {
            // no telling extension: recognise the format by its first bytes
            let mut magic = [0u8; 12];
            let f = Source::open(path)?;
            let got = f.read_at(&mut magic, 0).unwrap_or(0);
            let refuse = |what| Err(object_refusal(path, what));
            if jp2::is_jp2(&magic[..got]) {
                return if object {
                    refuse("JPEG 2000")
                } else {
                    Self::open_jp2(path)
                };
            }
            match &magic[..got.min(8)] {
                [b'I', b'I', 42 | 43, 0, ..] | [b'M', b'M', 0, 42 | 43, ..] => {
                    return Self::open_tiff(path);
                }
                m if object && (m == hdf5::SIGNATURE || netcdf3::is_netcdf3(m)) => {
                    return refuse("HDF5 and NetCDF");
                }
                m if m == hdf5::SIGNATURE => return Self::open_hdf5(path, None),
                m if netcdf3::is_netcdf3(m) => return Self::open_hdf5(path, None),
                m if m.starts_with(b"\x93NUMPY") => {}
                _ => {
                    return Err(Error::invalid(format!(
                        "{}: not a .npy, TIFF, JPEG 2000, HDF5, NetCDF or Zarr v3 file; for \
                         raw binary data give its `shape` and `in_dtype`",
                        path.display()
                    )));
                }
            }
        }
        let file = Source::open(path)?;
        let file_len = source_len(&file, path)?;
        let mut pre = [0u8; npy::PREAMBLE];
        let got = file
            .read_at(&mut pre, 0)
            .map_err(|e| Error::io("read", path, e))?;
        let hlen = npy::header_len(&pre[..got]).map_err(|source| Error::Npy {
            path: path.to_path_buf(),
            source,
        })?;
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
        let h = npy::parse_header(&head).map_err(|source| Error::Npy {
            path: path.to_path_buf(),
            source,
        })?;
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
        let npy = if h.fortran {
            let src = npy::chunks::NpyChunks::new(
                path,
                &file,
                h.data_offset,
                &h.shape,
                h.dtype,
                h.big_endian,
            )?;
            Some(Box::new(src))
        } else {
            None
        };
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            chunked: npy.as_ref().map(|n| n.chunked()).transpose()?,
            info: TensorInfo {
                format: Format::Npy { version: h.version },
                dtype: h.dtype,
                shape: h.shape,
                data_offset: h.data_offset,
            },
            tiff: None,
            zarr: None,
            hdf5: None,
            jp2: None,
            swap: h.big_endian && !h.fortran,
            given_nodata: NodataFrom::File,
            view: None,
            npy,
        })
    }

    /// Opens a (Geo)TIFF: its first image, as `(bands, rows, columns)` or `(rows,
    /// columns)`. Uncompressed band-sequential data is mapped; anything else is decoded
    /// chunk by chunk.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Tiff`] if it is not a TIFF
    /// tilestream can read.
    pub fn open_tiff(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // one open (for an object, one metadata request) for the tables and the chunks
        let file = Source::open(path)?;
        let (layout, georef) = tiff::read_layout_of(path, file.try_clone(path)?)?;
        let shape = layout.shape();
        let dtype = layout.dtype;
        let nbytes = checked_nbytes(path, &shape, dtype)?;
        let (data_offset, chunked) = match layout.contiguous_offset() {
            Some(off) => {
                // mapped: a file shorter than its tables say would fault when read
                let len = source_len(&file, path)?;
                if off.checked_add(nbytes).is_none_or(|end| end > len) {
                    return Err(Error::tiff(
                        path,
                        TiffError::Corrupt,
                        format!(
                            "its data runs from byte {off} for {nbytes} bytes, but the file has \
                             {len}: it is truncated"
                        ),
                    ));
                }
                (off, None)
            }
            None => {
                let src = tiff::TiffChunks::new(
                    path,
                    file.try_clone(path)?,
                    layout.clone(),
                    georef.nodata.as_deref(),
                )?;
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
            hdf5: None,
            jp2: None,
            npy: None,
            swap: false,
            given_nodata: NodataFrom::File,
            view: None,
        })
    }

    /// Opens the Zarr v3 array at the root of the store `path`; its chunks are decoded
    /// by `zarrs` as tiles need them.
    ///
    /// # Errors
    /// [`Error::Zarr`] for a Zarr v2 store, a group, an irregular chunk grid or a data
    /// type tilestream does not handle; [`Error::Io`] if it cannot be read.
    pub fn open_zarr(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (layout, src) = zarr::ZarrChunks::open(path)?;
        let file = Source::open(&path.join("zarr.json"))?;
        checked_nbytes(path, &layout.shape, layout.dtype)?;
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
            hdf5: None,
            jp2: None,
            npy: None,
            swap: false,
            given_nodata: NodataFrom::File,
            view: None,
        })
    }

    /// Opens dataset `dataset` of the HDF5 or NetCDF-4 file `path`, or variable
    /// `dataset` of a NetCDF-3 file (its only one when `None`; `TensorFile::open` takes
    /// `file.h5:/group/data`). A contiguous dataset is mapped; a chunked one is decoded
    /// chunk by chunk.
    ///
    /// # Errors
    /// [`Error::Format`] for a file the HDF5 library does not open, a dataset that is
    /// not there or not read (its type, layout or filters), or a missing HDF5 library;
    /// [`Error::Io`] if it cannot be opened.
    pub fn open_hdf5(path: impl AsRef<Path>, dataset: Option<&str>) -> Result<Self> {
        let path = path.as_ref();
        if remote::is_url(path) {
            return Err(object_refusal(path, "HDF5 and NetCDF"));
        }
        let file = own_files::open_input(path)?;
        let len = file_len(&file, path)?;
        let mut magic = [0u8; 4];
        let (format, layout, chunked) =
            if file.read_exact_at(&mut magic, 0).is_ok() && netcdf3::is_netcdf3(&magic) {
                let (layout, chunked) = netcdf3::open(path, &file, len, dataset)?;
                (Format::NetCdf3 { version: magic[3] }, layout, chunked)
            } else {
                let opened = hdf5::open(path, dataset, len)?;
                let chunked = opened.chunks.map(hdf5::chunks::Hdf5Chunks::into_chunked);
                (Format::Hdf5, opened.layout, chunked)
            };
        checked_nbytes(path, &layout.shape, layout.dtype)?;
        let (data_offset, swap) = match layout.storage {
            hdf5::Storage::Contiguous { offset } => (offset, layout.big_endian),
            _ => (0, false),
        };
        Ok(TensorFile {
            path: path.to_path_buf(),
            file: Source::File(file),
            info: TensorInfo {
                format,
                dtype: layout.dtype,
                shape: layout.shape.clone(),
                data_offset,
            },
            chunked: chunked.map(Arc::new),
            tiff: None,
            zarr: None,
            hdf5: Some(Box::new(layout)),
            jp2: None,
            npy: None,
            swap,
            given_nodata: NodataFrom::File,
            view: None,
        })
    }

    /// Opens a JPEG 2000 file (`.jp2`, or a raw `.j2k`/`.j2c` codestream): its image as
    /// `(bands, rows, columns)` or `(rows, columns)`, decoded block by block by OpenJPEG
    /// as GDAL decodes it (`src/format/jp2/`).
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Format`] if it is not a JPEG 2000
    /// file tilestream reads, or OpenJPEG is missing.
    pub fn open_jp2(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if remote::is_url(path) {
            return Err(object_refusal(path, "JPEG 2000"));
        }
        let file = own_files::open_input(path)?;
        let layout = jp2::open(path, &file)?;
        let shape = layout.shape();
        let dtype = layout.dtype;
        checked_nbytes(path, &shape, dtype)?;
        let src = jp2::Jp2Chunks::new(
            path,
            file.try_clone().map_err(|e| Error::io("open", path, e))?,
            layout.clone(),
        );
        let c = chunked::Chunked::new(shape.clone(), dtype, Box::new(src));
        Ok(TensorFile {
            path: path.to_path_buf(),
            file: Source::File(file),
            info: TensorInfo {
                format: Format::Jp2,
                dtype,
                shape,
                data_offset: 0,
            },
            chunked: Some(Arc::new(c)),
            tiff: None,
            zarr: None,
            hdf5: None,
            jp2: Some(Box::new(layout)),
            npy: None,
            swap: false,
            given_nodata: NodataFrom::File,
            view: None,
        })
    }

    /// Opens a headerless raw file of the given shape and dtype (little-endian, C order).
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Format`] if its size is not exactly
    /// what the shape and dtype need.
    pub fn open_raw(path: impl AsRef<Path>, shape: &[usize], dtype: DType) -> Result<Self> {
        Self::raw(path.as_ref(), shape, dtype, None)
    }

    /// Opens the raw data of the given shape and dtype that starts `offset` bytes into
    /// `path` (a view into a larger file, such as a sliced `np.memmap`): the file must
    /// hold at least `offset` plus the data's bytes.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be opened; [`Error::Format`] if it is too short.
    pub fn open_raw_at(
        path: impl AsRef<Path>,
        shape: &[usize],
        dtype: DType,
        offset: u64,
    ) -> Result<Self> {
        Self::raw(path.as_ref(), shape, dtype, Some(offset))
    }

    /// A raw file holding exactly the data (`offset` `None`), or holding it from byte
    /// `offset` on.
    fn raw(path: &Path, shape: &[usize], dtype: DType, offset: Option<u64>) -> Result<Self> {
        let file = Source::open(path)?;
        let len = source_len(&file, path)?;
        let nbytes = checked_nbytes(path, shape, dtype)?;
        let refusal = match offset {
            None if len != nbytes => Some(format!(
                "size mismatch: `shape={}` `in_dtype={dtype}` needs {nbytes} bytes, file holds {len}",
                fmt_shape(shape)
            )),
            Some(at) if at.checked_add(nbytes).is_none_or(|end| end > len) => Some(format!(
                "{} {dtype} from byte {at} needs {nbytes} bytes, but the file holds {len}",
                fmt_shape(shape)
            )),
            _ => None,
        };
        if let Some(msg) = refusal {
            return Err(Error::format(path, msg));
        }
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            info: TensorInfo {
                format: Format::Raw,
                dtype,
                shape: shape.to_vec(),
                data_offset: offset.unwrap_or(0),
            },
            chunked: None,
            tiff: None,
            zarr: None,
            hdf5: None,
            jp2: None,
            npy: None,
            swap: false,
            given_nodata: NodataFrom::File,
            view: None,
        })
    }

    /// The rows `[rows.start, rows.end)` of the leading axis as a tensor of their own, with
    /// no copy: the same file, its data starting `rows.start` rows further in (how a
    /// cluster task reads its share of an input). An input decoded in chunks (GeoTIFF,
    /// Zarr) gives a [`window`](Self::window) of its leading axis.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a rank-0 input or rows out of range;
    /// [`Error::Io`] if the file cannot be opened again.
    pub fn rows(&self, rows: std::ops::Range<u64>) -> Result<Self> {
        let shape = &self.info.shape;
        let Some(&n) = shape.first() else {
            return Err(Error::invalid(format!(
                "{}: a 0-d tensor has no rows to select",
                self.path.display()
            )));
        };
        if rows.start > rows.end || rows.end > n as u64 {
            return Err(Error::invalid(format!(
                "{}: rows {}..{} are out of range for {} rows",
                self.path.display(),
                rows.start,
                rows.end,
                n
            )));
        }
        if (self.chunked.is_some() && self.npy.is_none())
            || self.view.is_some()
            || self.tiff.is_some()
        {
            // decoded in chunks (GeoTIFF, Zarr, HDF5, JPEG 2000), a GeoTIFF (its nodata
            // and georeferencing kept, even when its data is mapped), or a window
            // already: a window of the leading axis
            let mut ranges = vec![rows];
            ranges.extend(shape[1..].iter().map(|&d| 0..d as u64));
            return self.window(&ranges);
        }
        let row_bytes =
            shape[1..].iter().map(|&d| d as u64).product::<u64>() * self.info.dtype.size() as u64;
        let mut info = self.info.clone();
        info.shape[0] = (rows.end - rows.start) as usize;
        let npy = match &self.npy {
            // Fortran order or big-endian: the same decoding of fewer rows
            Some(n) => Some(Box::new(n.rows(rows.start, rows.end)?)),
            None => {
                info.data_offset += rows.start * row_bytes;
                None
            }
        };
        Ok(TensorFile {
            path: self.path.clone(),
            file: self.file.try_clone(&self.path)?,
            info,
            chunked: npy.as_ref().map(|n| n.chunked()).transpose()?,
            tiff: None,
            zarr: None,
            hdf5: self.hdf5.clone(),
            jp2: self.jp2.clone(),
            npy,
            swap: self.swap,
            given_nodata: self.given_nodata.clone(),
            view: None,
        })
    }

    /// A two-dimensional Fortran-order `.npy` input of native byte order seen as what
    /// its bytes are: a C-order raw array of `(columns, file rows)`, each row of it one
    /// column of this tensor, and the first of the file's rows this tensor starts at
    /// (0 but for a selection of rows, [`rows`](Self::rows)). `None` for other inputs.
    /// A reduction of the leading axis reads such a file column by column through it.
    ///
    /// # Errors
    /// As [`open_raw_at`](Self::open_raw_at).
    pub(crate) fn fortran_columns(&self) -> Result<Option<(Self, u64)>> {
        if self.view.is_some() {
            return Ok(None);
        }
        let Some((offset, file_rows, row0)) = self.npy.as_ref().and_then(|n| n.column_runs())
        else {
            return Ok(None);
        };
        let cols = self.info.shape[1];
        let raw = Self::open_raw_at(
            &self.path,
            &[cols, file_rows as usize],
            self.info.dtype,
            offset,
        )?;
        Ok(Some((raw, row0)))
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
}

/// Every array of the HDF5, NetCDF-4 or NetCDF-3 file `path` (each dataset, or each
/// variable), with its shape and dtype or why it is not read: what `tilestream info`
/// lists for a file of several.
///
/// # Errors
/// [`Error::Format`] if the file is not one the HDF5 library opens, or the library is
/// missing; [`Error::Io`] if the file cannot be read.
pub fn list_arrays(path: &Path) -> Result<Vec<hdf5::DatasetEntry>> {
    let f = own_files::open_input(path)?;
    let mut magic = [0u8; 4];
    if f.read_exact_at(&mut magic, 0).is_ok() && netcdf3::is_netcdf3(&magic) {
        return netcdf3::list(path);
    }
    hdf5::list(path)
}

/// The size of an input's bytes; a directory is refused as it is for local files.
fn source_len(src: &Source, path: &Path) -> Result<u64> {
    match src.file() {
        Some(f) => file_len(f, path),
        None => src.len(path),
    }
}

/// The format of an object URL that tilestream does not read from object stores yet,
/// told by its name: Zarr stores, HDF5 and NetCDF files, JPEG 2000.
fn not_read_as_object(url: &Path) -> Option<&'static str> {
    if hdf5::is_hdf5_path(url)
        || url
            .to_str()
            .is_some_and(|u| u.contains(".h5:") || u.contains(".nc:"))
    {
        Some("HDF5 and NetCDF")
    } else if jp2::is_jp2_path(url) {
        Some("JPEG 2000")
    } else {
        None
    }
}

/// Refuses, in one line, an object URL whose format (told by its name) is read from
/// local files only; `Ok` for anything else (a local path, an object tilestream reads).
///
/// # Errors
/// [`Error::Invalid`] naming the format.
pub(crate) fn refuse_object(path: &Path) -> Result<()> {
    match not_read_as_object(path) {
        Some(what) if remote::is_url(path) => Err(object_refusal(path, what)),
        _ => Ok(()),
    }
}

/// The one-line refusal of an object whose format is read from local files only.
fn object_refusal(url: &Path, what: &str) -> Error {
    Error::invalid(format!(
        "{}: {what} inputs are read from local files only; from object stores tilestream \
         reads .npy, raw and GeoTIFF/COG objects (copy this one to a local path first)",
        crate::error::shown_url(&url.to_string_lossy())
    ))
}
