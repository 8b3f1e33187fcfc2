//! What a call passes besides its data: the options (`memory=`, `threads=`, output
//! formats...) and the operation, both as JSON the Python layer writes.

use pyo3::prelude::*;
use serde_json::Value;
use tilestream::{
    CogOptions, Engine, Error, MemoryBudget, OpSpec, OutRegion, Overviews, TiffWriteOptions,
    ZarrWriteOptions,
};

use crate::errors::bad_json;

/// The options of a call (`memory=`, `threads=`...), as the Python layer passes them.
pub(crate) fn engine(opts: &Value) -> Result<Engine, Error> {
    let memory = match &opts["memory"] {
        Value::Number(n) => MemoryBudget::new(n.as_u64().unwrap_or(0)),
        Value::String(s) => MemoryBudget::parse(s)?,
        _ => MemoryBudget::parse("1GiB")?,
    };
    let mut tiff = TiffWriteOptions::default();
    if let Some(c) = opts["tiff_compress"].as_str() {
        tiff.compression = c.parse()?;
    }
    if let Some(p) = opts["tiff_predictor"].as_str() {
        tiff.predictor = p.parse()?;
    }
    let format = opts["format"].as_str();
    let cog_format = format.is_some_and(|f| f.eq_ignore_ascii_case("cog"));
    if opts["cog"].as_bool() == Some(true) || cog_format {
        tiff.cog = Some(CogOptions {
            overviews: match &opts["overviews"] {
                Value::Number(n) => Overviews::Count(
                    n.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| Error::invalid(format!("overviews={n} is not a count")))?,
                ),
                Value::String(s) => s.parse()?,
                _ => Overviews::Auto,
            },
            resampling: opts["overview_resampling"]
                .as_str()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
        });
    }
    let format = if cog_format { Some("tif") } else { format };
    let zarr = zarr_options(opts)?;
    let mut e = Engine::new(memory)?
        .with_tiff_output(tiff)
        .with_zarr_output(zarr)
        .with_out_format(format.map(str::parse).transpose()?)
        .with_device(
            opts["device"]
                .as_str()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
        )?;
    if let Some(n) = opts["threads"].as_u64() {
        e = e.with_threads(usize::try_from(n).unwrap_or(usize::MAX))?;
    }
    if let Some(r) = opts.get("out_region").filter(|r| !r.is_null()) {
        e = e.with_output_region(Some(OutRegion {
            at_row: r["at_row"].as_u64().unwrap_or(0),
            skip_rows: r["skip_rows"].as_u64().unwrap_or(0),
            rows: r["rows"].as_u64(),
        }));
    }
    Ok(e)
}

/// The Zarr output options of a call (`zarr_compress=`, `zarr_chunks=`, `zarr_shard=`).
pub(crate) fn zarr_options(opts: &Value) -> Result<ZarrWriteOptions, Error> {
    let mut zarr = ZarrWriteOptions::default();
    if let Some(c) = opts["zarr_compress"].as_str() {
        zarr.compression = c.parse()?;
    }
    if let Some(c) = opts["zarr_chunks"].as_str() {
        zarr.chunks = Some(tilestream::parse_shape(c)?);
    }
    if let Some(c) = opts["zarr_shard"].as_str() {
        zarr.shard = Some(tilestream::parse_shape(c)?);
    }
    Ok(zarr)
}

pub(crate) fn parse_spec(spec: &str) -> PyResult<OpSpec> {
    serde_json::from_str(spec).map_err(|e| bad_json(&e))
}

pub(crate) fn parse_opts(opts: &str) -> PyResult<Value> {
    serde_json::from_str(opts).map_err(|e| bad_json(&e))
}
