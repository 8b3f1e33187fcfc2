//! `tilestream info`: what a file holds (format, shape, dtype, bytes) and how (chunks,
//! compression, bands, georeferencing), as text or JSON.

use std::path::{Path, PathBuf};

use tilestream::format::{Format, fmt_shape};
use tilestream::{Result, TensorFile};

use tilestream::spec::cli::RawSpec;

/// Prints what the file at `path` holds (a raw file read with `raw`), as JSON with `json`.
pub(crate) fn info(path: &PathBuf, raw: &RawSpec, json: bool) -> Result<()> {
    if raw.shape.is_none() && raw.in_dtype.is_none() && path.is_file() && is_hdf5(path) {
        let all = tilestream::format::list_arrays(path)?;
        if all.len() != 1 {
            print_datasets(path, &all, json);
            return Ok(());
        }
    }
    let t = crate::open(path, raw)?;
    let format = format_of(&t);
    if json {
        let i = t.info();
        let mut v = serde_json::json!({
            "path": path, "format": format, "shape": i.shape, "dtype": i.dtype.name(),
            "elements": i.len(), "bytes": i.nbytes(), "data_offset": i.data_offset,
        });
        if let Some(o) = v.as_object_mut() {
            o.extend(layout(&t));
            if let Some(origin) = t.window_origin() {
                o.insert(
                    "window".into(),
                    serde_json::json!({"origin": origin, "file_shape": t.file_shape()}),
                );
            }
        }
        println!("{v}");
    } else {
        print_text(path, &t, &format);
    }
    Ok(())
}

/// The format's name, with its version or variant.
fn format_of(t: &TensorFile) -> String {
    match t.info().format {
        Format::Npy { version: (a, b) } => match t.npy_order() {
            Some(order) => format!("npy {a}.{b} ({order})"),
            None => format!("npy {a}.{b}"),
        },
        Format::Raw => "raw".into(),
        Format::GeoTiff => match t.tiff() {
            Some((l, _)) if l.bigtiff => "geotiff (BigTIFF)".into(),
            _ => "geotiff".into(),
        },
        Format::Zarr => "zarr v3".into(),
        Format::Jp2 => match t.jp2() {
            Some(j) if j.header.jp2 => "jpeg 2000 (jp2)".into(),
            _ => "jpeg 2000 (codestream)".into(),
        },
        Format::Hdf5 => match t.hdf5() {
            Some(h) => format!("hdf5, dataset {}", h.dataset),
            None => "hdf5".into(),
        },
        Format::NetCdf3 { version } => match t.hdf5() {
            Some(h) => format!("netcdf-3 (CDF-{version}), variable {}", h.dataset),
            None => format!("netcdf-3 (CDF-{version})"),
        },
    }
}

/// Whether `path` is an HDF5 (or NetCDF-4) file: by its extension, or by its
/// signature at the start or after a user block.
fn is_hdf5(path: &Path) -> bool {
    use std::os::unix::fs::FileExt as _;
    use tilestream::format::hdf5;
    if hdf5::is_hdf5_path(path) {
        return true;
    }
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut magic = [0u8; 8];
    [0u64, 512, 1024, 2048, 4096]
        .iter()
        .any(|&at| f.read_exact_at(&mut magic, at).is_ok() && magic == hdf5::SIGNATURE)
        || (f.read_exact_at(&mut magic[..4], 0).is_ok()
            && tilestream::format::netcdf3::is_netcdf3(&magic[..4]))
}

/// The datasets of an HDF5 file that holds other than one, which is what `info` says of
/// it: each is read by naming it, `FILE:/name`.
fn print_datasets(path: &Path, all: &[tilestream::format::hdf5::DatasetEntry], json: bool) {
    if json {
        let list: Vec<_> = all
            .iter()
            .map(|d| match &d.shape {
                Ok((shape, dtype)) => {
                    serde_json::json!({"name": d.name, "shape": shape, "dtype": dtype.name()})
                }
                Err(why) => serde_json::json!({"name": d.name, "refused": why}),
            })
            .collect();
        println!("{}", serde_json::json!({"path": path, "datasets": list}));
        return;
    }
    println!("{}", path.display());
    println!(
        "  format:      {} datasets (read one as {}:/name)",
        all.len(),
        path.display()
    );
    for d in all {
        match &d.shape {
            Ok((shape, dtype)) => println!("  {}  {} {dtype}", d.name, fmt_shape(shape)),
            Err(why) => println!("  {}  (not read: {why})", d.name),
        }
    }
}

/// The layout of a chunked format, for `--json`: chunks, compression, bands,
/// georeferencing.
fn layout(t: &TensorFile) -> serde_json::Map<String, serde_json::Value> {
    let mut layout = serde_json::Map::new();
    if let Some((l, _)) = t.tiff() {
        layout.insert(
            "chunks".into(),
            serde_json::json!({
                "kind": if l.tiled { "tiles" } else { "strips" },
                "width": l.chunk.0, "height": l.chunk.1,
                "count": l.offsets.len(),
            }),
        );
        layout.insert("compression".into(), l.compression.clone().into());
        layout.insert("predictor".into(), l.predictor.into());
        layout.insert("bits_per_sample".into(), l.bits.into());
        layout.insert("cmyk_as_rgba".into(), l.cmyk.into());
        layout.insert("bands".into(), l.bands.into());
        layout.insert(
            "interleave".into(),
            if l.planar || l.bands == 1 {
                "band"
            } else {
                "pixel"
            }
            .into(),
        );
        layout.insert(
            "access".into(),
            if t.chunked().is_some() {
                "decoded chunks"
            } else {
                "memory-mapped"
            }
            .into(),
        );
        // the georeferencing of what is read (a window's starts at its first pixel)
        if let Some(g) = t.georef() {
            layout.insert(
                "georef".into(),
                serde_json::json!({
                    "geotransform": g.geotransform(), "epsg": g.epsg(),
                    "nodata": g.nodata, "citation": g.geo_ascii,
                }),
            );
        }
    }
    if let Some(h) = t.hdf5() {
        use tilestream::format::hdf5::Storage;
        layout.insert("dataset".into(), h.dataset.clone().into());
        layout.insert(
            "storage".into(),
            match &h.storage {
                Storage::Contiguous { .. } => serde_json::json!({"kind": "contiguous"}),
                Storage::Chunked {
                    chunk,
                    count,
                    allocated,
                } => serde_json::json!({
                    "kind": "chunked", "chunks": chunk, "count": count, "written": allocated,
                }),
                Storage::Compact => serde_json::json!({"kind": "compact"}),
                Storage::Unallocated => serde_json::json!({"kind": "unallocated"}),
            },
        );
        let filters: Vec<String> = h
            .filters
            .iter()
            .map(tilestream::format::hdf5::Filter::name)
            .collect();
        layout.insert("filters".into(), filters.into());
        layout.insert("big_endian".into(), h.big_endian.into());
        layout.insert("fill_value".into(), h.fill_value.clone().into());
        layout.insert("nodata".into(), h.nodata.clone().into());
        layout.insert("scale_factor".into(), h.scale_factor.into());
        layout.insert("add_offset".into(), h.add_offset.into());
    }
    if let Some(z) = t.zarr() {
        layout.insert(
            "chunks".into(),
            serde_json::json!({
                "kind": if z.inner_chunks.is_some() { "shards" } else { "chunks" },
                "shape": z.chunk_shape, "inner": z.inner_chunks,
            }),
        );
        layout.insert("codecs".into(), serde_json::json!(z.codecs));
        layout.insert("fill_value".into(), z.fill_value.clone().into());
    }
    layout
}

/// The text `tilestream info` prints.
fn print_text(path: &Path, t: &TensorFile, format: &str) {
    let i = t.info();
    println!("{}", path.display());
    println!("  format:      {format}");
    println!(
        "  shape:       {} (rank {})",
        fmt_shape(&i.shape),
        i.shape.len()
    );
    if let Some(origin) = t.window_origin() {
        let at: Vec<String> = origin.iter().map(ToString::to_string).collect();
        println!(
            "  window:      of the file's {}, from element ({})",
            fmt_shape(t.file_shape()),
            at.join(", ")
        );
    }
    println!("  dtype:       {}", i.dtype);
    println!("  elements:    {}", i.len());
    if let Some(order) = t.npy_order() {
        println!(
            "  data:        {} bytes ({}) at offset {}, {order}: read as C order, \
             little-endian",
            i.nbytes(),
            tilestream::fmt_bytes(i.nbytes()),
            i.data_offset
        );
    } else if t.chunked().is_some() {
        println!(
            "  data:        {} bytes ({}) decoded",
            i.nbytes(),
            tilestream::fmt_bytes(i.nbytes())
        );
    } else {
        println!(
            "  data:        {} bytes ({}) at offset {}",
            i.nbytes(),
            tilestream::fmt_bytes(i.nbytes()),
            i.data_offset
        );
    }
    if let Some(z) = t.zarr() {
        print_zarr(z);
    }
    if t.tiff().is_some() {
        print_tiff(t);
    }
    if let Some(h) = t.hdf5() {
        print_hdf5(h);
    }
}

/// The lines of an HDF5 dataset's storage and attributes.
fn print_hdf5(h: &tilestream::format::hdf5::Hdf5Layout) {
    use tilestream::format::hdf5::Storage;
    match &h.storage {
        Storage::Contiguous { .. } => println!("  layout:      contiguous, memory-mapped"),
        Storage::Chunked {
            chunk,
            count,
            allocated,
        } => println!(
            "  layout:      chunks {} ({count} of them, {allocated} written), decoded chunk \
             by chunk",
            fmt_shape(chunk)
        ),
        Storage::Compact => println!("  layout:      compact (in the object header)"),
        Storage::Unallocated => {
            println!("  layout:      nothing written: every element is the fill value");
        }
    }
    if !h.filters.is_empty() {
        let names: Vec<String> = h
            .filters
            .iter()
            .map(tilestream::format::hdf5::Filter::name)
            .collect();
        println!("  filters:     {}", names.join(", "));
    }
    if h.big_endian {
        println!("  byte order:  big-endian, read as little-endian");
    }
    if let Some(f) = &h.fill_value {
        println!("  fill value:  {f}");
    }
    if let Some(n) = &h.nodata {
        println!("  nodata:      {n} (its _FillValue or missing_value)");
    }
    if h.scale_factor.is_some() || h.add_offset.is_some() {
        println!(
            "  packing:     scale_factor {}, add_offset {} (reported, not applied: values are \
             read as stored)",
            h.scale_factor.unwrap_or(1.0),
            h.add_offset.unwrap_or(0.0)
        );
    }
}

/// The lines of a Zarr store's layout.
fn print_zarr(z: &tilestream::format::zarr::ZarrLayout) {
    match &z.inner_chunks {
        Some(inner) => println!(
            "  layout:      shards {} of chunks {}, decoded shard by shard",
            fmt_shape(&z.chunk_shape),
            fmt_shape(inner)
        ),
        None => println!(
            "  layout:      chunks {}, decoded chunk by chunk",
            fmt_shape(&z.chunk_shape)
        ),
    }
    println!("  codecs:      {}", z.codecs.join(", "));
    println!("  fill value:  {}", z.fill_value);
}

/// The lines of a GeoTIFF's layout and georeferencing.
fn print_tiff(t: &TensorFile) {
    let Some((l, _)) = t.tiff() else {
        return;
    };
    // the georeferencing of what is read (a window's starts at its first pixel)
    let none = tilestream::format::tiff::GeoRef::default();
    let g = t.georef().unwrap_or(&none);
    println!(
        "  layout:      {} {}x{} ({} of them), {} interleave, {}",
        if l.tiled { "tiles" } else { "strips" },
        l.chunk.0,
        l.chunk.1,
        l.offsets.len(),
        if l.planar || l.bands == 1 {
            "band"
        } else {
            "pixel"
        },
        if t.chunked().is_some() {
            "decoded chunk by chunk"
        } else {
            "memory-mapped"
        }
    );
    let pred = match l.predictor {
        2 => ", horizontal predictor",
        3 => ", floating-point predictor",
        _ => "",
    };
    println!("  compression: {}{pred}", l.compression);
    println!("  bands:       {}", l.bands);
    if l.cmyk {
        println!("  colour:      CMYK, read as RGBA with an opaque alpha (as GDAL reads it)");
    }
    if l.packed() {
        println!(
            "  samples:     {} bits each (NBITS), unpacked into {}",
            l.bits, l.dtype
        );
    }
    match g.geotransform() {
        Some(gt) => println!(
            "  georef:      origin ({}, {}), pixel {} x {}{}",
            gt[0],
            gt[3],
            gt[1],
            gt[5],
            g.epsg().map_or(String::new(), |c| format!(", EPSG:{c}"))
        ),
        None => println!("  georef:      none"),
    }
    if let Some(n) = &g.nodata {
        println!("  nodata:      {n}");
    }
}
