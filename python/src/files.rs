//! Files: what one holds and its bytes read through the engine's windows, and the
//! shared outputs the tasks of a cluster job fill by rows.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::json;
use tilestream::{Error, Format, Source};

use crate::errors::{bad_json, to_py};
use crate::options::{parse_opts, zarr_options};

/// Creates the temporary `.npy` that the tasks of a job writing `dest` fill by rows;
/// returns its path.
#[pyfunction]
pub(crate) fn create_npy_for_rows(
    dest: PathBuf,
    shape: Vec<usize>,
    dtype: &str,
) -> PyResult<String> {
    let dtype = dtype.parse().map_err(to_py)?;
    let p = tilestream::create_npy_for_rows(&dest, &shape, dtype).map_err(to_py)?;
    Ok(p.to_string_lossy().into_owned())
}

/// Flushes the file [`create_npy_for_rows`] made and renames it onto `dest`.
#[pyfunction]
#[pyo3(signature = (tmp, dest, durable=true))]
pub(crate) fn commit_npy(tmp: PathBuf, dest: PathBuf, durable: bool) -> PyResult<()> {
    tilestream::commit_npy(&tmp, &dest, durable).map_err(to_py)
}

/// Rows of the leading axis in one chunk of a Zarr output of `shape` and `dtype`
/// written with the options `opts` (JSON).
#[pyfunction]
pub(crate) fn zarr_chunk_rows(shape: Vec<usize>, dtype: &str, opts: &str) -> PyResult<usize> {
    let opts = parse_opts(opts)?;
    let dtype = dtype.parse().map_err(to_py)?;
    let z = zarr_options(&opts).map_err(to_py)?;
    tilestream::format::zarr::chunk_rows(&z, &shape, dtype).map_err(to_py)
}

/// Creates the temporary Zarr store that the tasks of a job writing `dest` fill by chunk
/// rows, with the Zarr options of `opts` (JSON); returns its path.
#[pyfunction]
pub(crate) fn create_zarr_for_rows(
    dest: PathBuf,
    shape: Vec<usize>,
    dtype: &str,
    opts: &str,
) -> PyResult<String> {
    let opts = parse_opts(opts)?;
    let dtype = dtype.parse().map_err(to_py)?;
    let z = zarr_options(&opts).map_err(to_py)?;
    let p = tilestream::create_zarr_for_rows(&dest, &shape, dtype, &z).map_err(to_py)?;
    Ok(p.to_string_lossy().into_owned())
}

/// Renames the store [`create_zarr_for_rows`] made onto `dest`.
#[pyfunction]
pub(crate) fn commit_zarr(tmp: PathBuf, dest: PathBuf) -> PyResult<()> {
    tilestream::commit_zarr(&tmp, &dest).map_err(to_py)
}

/// What a file holds: format, dtype, shape, data offset, georeferencing (JSON).
#[pyfunction]
pub(crate) fn info(py: Python<'_>, source: &str) -> PyResult<String> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    py.detach(|| {
        let t = source.open()?;
        let georef = t.georef().map(|g| {
            json!({
                "geotransform": g.geotransform(),
                "epsg": g.epsg(),
                "nodata": g.nodata,
                "citation": g.geo_ascii,
            })
        });
        let format = match t.info().format {
            Format::Npy { .. } => "npy",
            Format::Raw => "raw",
            Format::GeoTiff => "geotiff",
            Format::Zarr => "zarr",
            Format::Hdf5 => "hdf5",
            Format::Jp2 => "jp2",
            Format::NetCdf3 { .. } => "netcdf3",
        };
        Ok(json!({
            "format": format,
            "dtype": t.dtype().name(),
            "shape": t.shape(),
            "offset": t.info().data_offset,
            "nbytes": t.info().nbytes(),
            "georef": georef,
            // whether the nan reductions leave a nodata value out (the file's, or the
            // source's in its place)
            "masked": t.missing().is_some(),
            // whether its bytes can be mapped as they are by np.memmap (a local .npy or
            // raw file of native C order, and no window of one): what iter_tiles maps
            "mappable": matches!(t.info().format, Format::Npy { .. } | Format::Raw)
                && t.file().is_some()
                && t.chunked().is_none()
                && t.npy_order().is_none()
                && t.window_origin().is_none(),
        })
        .to_string())
    })
    .map_err(to_py)
}

/// Reads `count` elements from element `start` of `source` (its bytes, C order),
/// through the same mapped (or decoded) windows the engine reads.
#[pyfunction]
pub(crate) fn read_range(
    py: Python<'_>,
    source: &str,
    start: u64,
    count: u64,
) -> PyResult<Py<PyBytes>> {
    let source: Source = serde_json::from_str(source).map_err(|e| bad_json(&e))?;
    let bytes = py
        .detach(|| -> Result<Vec<u8>, Error> {
            let t = source.open()?;
            let w = t.map_window(start, count)?;
            Ok(w.bytes().to_vec())
        })
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &bytes).unbind())
}
