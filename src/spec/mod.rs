//! One description of an operation, [`OpSpec`], that every front end builds: the command
//! line builds one from its arguments, and the Rust library (and, later, the Python
//! bindings and pipeline files) can build the same value, serialise it, plan it with
//! [`Engine::plan_spec`] and run it with [`Engine::run_spec`]. What makes two runs the same
//! run for `--resume` ([`OpSpec::job_key`]) is derived from it too, so a front end has
//! nothing of its own to keep in step.
//!
//! Parameters that have a textual form on the command line (`gaussian:sigma=2`,
//! `reflect`, `shift`) are kept in that form and parsed when the spec is planned or run,
//! so every front end gets the same messages for the same mistakes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::io::own_files::{Written, check_run_paths};
use crate::shape::fmt_shape;
use crate::tiling::BoxPlan;
use crate::{DType, Engine, Error, JobKey, Plan, Result, RunReport, TensorFile};

/// Where an operation reads a tensor from: a file, and for a raw (headerless) file its
/// shape and dtype.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The file (`.npy`, GeoTIFF, a Zarr v3 store, or raw data with `raw`).
    pub path: PathBuf,
    /// Shape and dtype of a raw file; `None` for self-describing formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawLayout>,
    /// Only the rows `[start, end)` of the leading axis (uncompressed inputs only): the
    /// share of one task of a job split over a cluster. `None` for the whole tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<(u64, u64)>,
    /// The input's nodata value in place of its file's (`"-9999"`, `"nan"`; `"none"`:
    /// it has none); `None` for what the file says (a GeoTIFF's GDAL nodata tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
    /// Only a box of the input ([`TensorFile::window`]): `[start, end)` of each of its
    /// last axes (an image's rows and columns, every band kept). Applied before `rows`,
    /// which then counts the box's rows. `None` for the whole tensor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Vec<(u64, u64)>>,
}

/// The layout of a raw input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawLayout {
    /// Shape.
    pub shape: Vec<usize>,
    /// Element type.
    #[serde(with = "dtype_name")]
    pub dtype: DType,
    /// Where the data starts in the file (a view into a larger file, such as a sliced
    /// `np.memmap`); 0 for a file that holds exactly the data.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Source {
    /// A self-describing file.
    #[must_use]
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Source {
            path: path.into(),
            raw: None,
            rows: None,
            nodata: None,
            window: None,
        }
    }

    /// Opens it.
    ///
    /// # Errors
    /// As [`TensorFile::open`] or [`TensorFile::open_raw`], and [`TensorFile::rows`]
    /// with `rows`.
    pub fn open(&self) -> Result<TensorFile> {
        let whole = self.open_whole()?;
        match self.rows {
            Some((a, b)) => whole.rows(a..b),
            None => Ok(whole),
        }
    }

    /// Opens the whole tensor (its `window` when it has one), whatever `rows` says.
    ///
    /// # Errors
    /// As [`TensorFile::open`] or [`TensorFile::open_raw`], and [`TensorFile::window`]
    /// with `window`.
    pub fn open_whole(&self) -> Result<TensorFile> {
        let file = self.open_file()?;
        match &self.window {
            Some(w) => file.window(&w.iter().map(|&(a, b)| a..b).collect::<Vec<_>>()),
            None => Ok(file),
        }
    }

    /// Opens the file's whole tensor with its nodata value.
    fn open_file(&self) -> Result<TensorFile> {
        let file = match &self.raw {
            Some(r) if r.offset > 0 => {
                TensorFile::open_raw_at(&self.path, &r.shape, r.dtype, r.offset)
            }
            Some(r) => TensorFile::open_raw(&self.path, &r.shape, r.dtype),
            None => TensorFile::open(&self.path),
        }?;
        match self.nodata.as_deref().map(str::trim) {
            None => Ok(file),
            Some(t) if t.eq_ignore_ascii_case("none") => file.with_nodata(None),
            Some(t) => file.with_nodata(Some(t)),
        }
    }
}

/// A [`DType`] as its name (`"f32"`).
pub(crate) mod dtype_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::DType;

    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
    pub fn serialize<S: Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// An optional [`DType`] as its name.
pub(crate) mod opt_dtype_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::DType;

    #[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)] // serde's signature
    pub fn serialize<S: Serializer>(d: &Option<DType>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(d.name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DType>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|n| n.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The plan of an operation: flat tiles, or boxes with halos.
#[derive(Debug)]
pub enum SpecPlan {
    /// Flat C-order tiles.
    Flat(Plan),
    /// Box-shaped tiles (filters, transpose, patches).
    Box(BoxPlan),
    /// A user's function over blocks (a pipeline's `function` step).
    Blocks(crate::engine::BlocksPlan),
}

impl SpecPlan {
    /// The plan as JSON (`tilestream plan --json`).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        match self {
            SpecPlan::Flat(p) => serde_json::json!({
                "what": p.what, "tiles": p.num_tiles, "tile_shape": p.tile_shape,
                "split_axis": p.split_axis, "halo": [0, 0], "depth": p.depth,
                "window_bytes": p.window_bytes, "out_buffer_bytes": p.out_buffer_bytes,
                "resident_bytes": p.resident_bytes, "reserved_bytes": p.reserved_bytes,
                "budget_bytes": p.budget, "after": p.after,
            }),
            SpecPlan::Box(p) => serde_json::json!({
                "what": p.what, "tiles": p.num_tiles, "tile_shape": [p.tile.0, p.tile.1],
                "full_width": p.tile.1 == p.dims[2],
                "halo": [p.halo_rows.total(), p.halo_cols.total()], "depth": p.depth,
                "window_bytes": p.window_bytes, "out_buffer_bytes": p.out_slot_elems * p.out_bytes,
                "scratch_bytes": p.scratch_bytes,
                "resident_bytes": p.resident_bytes, "reserved_bytes": p.reserved_bytes,
                "budget_bytes": p.budget, "after": p.after,
            }),
            SpecPlan::Blocks(p) => {
                let mut j = p.json();
                j["what"] = p.boxes.what.clone().into();
                j["after"] = serde_json::json!(p.boxes.after);
                j
            }
        }
    }
}

impl std::fmt::Display for SpecPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecPlan::Flat(p) => p.fmt(f),
            SpecPlan::Box(p) => p.fmt(f),
            SpecPlan::Blocks(p) => p.fmt(f),
        }
    }
}

impl OpSpec {
    /// Every file the operation reads (a convolution kernel included).
    #[must_use]
    pub fn inputs(&self) -> Vec<&Path> {
        self.operation().inputs()
    }

    /// The file (or store, or patch directory) the operation writes.
    #[must_use]
    pub fn output(&self) -> &Path {
        self.operation().output()
    }

    /// Every path the operation writes: its output (or `tiles`' patch directory) and
    /// `standardize`'s statistics file.
    #[must_use]
    pub(crate) fn writes(&self) -> Vec<Written<'_>> {
        self.operation().writes()
    }

    /// The destination policy (`check_run_paths` in `src/io/own_files.rs`): no path the
    /// operation writes is a device, FIFO or socket, or any file it reads, and no two are
    /// one; checked by the plan and the run before anything is written.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the path.
    pub fn check_paths(&self) -> Result<()> {
        let reads: Vec<(&str, &Path)> = self.inputs().into_iter().map(|p| ("input", p)).collect();
        check_run_paths(&self.writes(), &reads)
    }

    /// What makes a run of this operation the same run (the spec itself and the
    /// identity of each input file), for the journal that lets `--resume` continue it;
    /// `None` for operations that do not resume (`tiles`, with many outputs).
    ///
    /// # Errors
    /// [`Error::Io`] if an input cannot be inspected.
    pub fn job_key(&self) -> Result<Option<JobKey>> {
        if !self.operation().resumable() {
            return Ok(None);
        }
        // a path that is not UTF-8 has no JSON form: the operation is described by its
        // Debug form then, which writes such bytes as escapes and so tells any two apart
        let text = serde_json::to_string(self).unwrap_or_else(|_| format!("debug:{self:?}"));
        let mut key = JobKey::new(text);
        for p in self.inputs() {
            key = key.input(p)?;
        }
        Ok(Some(key))
    }
}

/// Reads a small convolution kernel (rank 1 or 2, at most 65536 weights) as f64.
///
/// # Errors
/// [`Error::Invalid`] for a kernel of another rank or size; I/O and format errors.
pub fn load_kernel(path: &Path) -> Result<(Vec<f64>, usize, usize)> {
    let t = TensorFile::open(path)?;
    t.dtype().real_only("a convolve kernel")?;
    let (rows, cols) = match *t.shape() {
        [n] => (1, n),
        [r, c] => (r, c),
        _ => {
            return Err(Error::invalid(format!(
                "convolve kernel {} has shape {}: give a 1-D or 2-D array",
                path.display(),
                fmt_shape(t.shape())
            )));
        }
    };
    if rows * cols == 0 || rows * cols > 65536 {
        return Err(Error::invalid(format!(
            "convolve kernel {} has {} weights: give between 1 and 65536",
            path.display(),
            rows * cols
        )));
    }
    let w = t.map_window(0, (rows * cols) as u64)?;
    let a = crate::engine::Array::from_bytes(t.dtype(), vec![rows * cols], w.bytes().to_vec())?;
    Ok((a.to_f64(), rows, cols))
}

/// Reads a small tensor (statistics: at most 64 MiB) whole.
fn read_small(source: &Source) -> Result<crate::Array> {
    let t = source.open()?;
    let bytes = t.info().nbytes();
    if bytes > 64 << 20 {
        return Err(Error::invalid(format!(
            "{}: {} bytes is too big for statistics (at most 64 MiB)",
            source.path.display(),
            bytes
        )));
    }
    let w = t.map_window(0, t.info().len())?;
    crate::Array::from_bytes(t.dtype(), t.shape().to_vec(), w.bytes().to_vec())
}

fn open_named(inputs: &[(String, Source)]) -> Result<Vec<(String, TensorFile)>> {
    inputs
        .iter()
        .map(|(n, s)| Ok((n.clone(), s.open()?)))
        .collect()
}

/// `e` writing the georeferencing of `x` (if any) to GeoTIFF outputs on its grid. The
/// nodata value follows the operation: kept where the operation keeps values (`keeps`:
/// a convert or cast to that type, when the type holds the value exactly), dropped
/// where it computes new ones (`None`: a map, filter, affine or standardize, among whose
/// results the input's nodata value, 0 say, is a valid value and not a missing pixel).
fn georef_from(e: &Engine, x: &TensorFile, keeps: Option<DType>) -> Engine {
    let georef = Engine::georef_of(x).map(|(mut g, grid)| {
        let held =
            |text: &String| keeps.is_some_and(|d| crate::format::tiff::holds_nodata(d, text));
        if !g.nodata.as_ref().is_some_and(held) {
            g.nodata = None;
        }
        (g, grid)
    });
    e.clone().with_georef(georef)
}

/// The nodata rule of a map spec.
pub(crate) fn map_rule(
    nodata: Option<&String>,
    ignore_nodata: bool,
    input_nodata: &[(String, Option<String>)],
) -> crate::MapNodata {
    crate::MapNodata {
        value: nodata.cloned(),
        ignore_inputs: ignore_nodata,
        inputs: input_nodata.to_vec(),
    }
}

/// What an operation writes, known before it runs: how a job split by rows over a
/// cluster makes the file its tasks fill ([`OpSpec::output_layout`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OutputLayout {
    /// The output's shape.
    pub shape: Vec<usize>,
    /// The output's dtype.
    #[serde(with = "dtype_name")]
    pub dtype: DType,
    /// Rows of input beyond a share of the leading axis that its output rows depend on,
    /// above and below (a filter's halo; 0 for element-wise operations).
    pub halo_rows: (usize, usize),
}

impl OutputLayout {
    /// The layout of an element-wise operation on `input`: its shape, and `dtype` or
    /// the input's.
    ///
    /// # Errors
    /// As [`Source::open`].
    pub(crate) fn same(input: &Source, dtype: Option<DType>) -> Result<OutputLayout> {
        let x = input.open()?;
        Ok(OutputLayout {
            shape: x.shape().to_vec(),
            dtype: dtype.unwrap_or(x.dtype()),
            halo_rows: (0, 0),
        })
    }
}

impl OpSpec {
    /// The shape and dtype of what an operation writes and the input rows each output
    /// row depends on, for the operations whose output rows follow the input's (affine,
    /// cast, convert, map, matmul, standardize, filters).
    ///
    /// # Errors
    /// [`Error::Invalid`] for other operations or bad parameters; I/O errors opening the
    /// inputs.
    pub fn output_layout(&self) -> Result<OutputLayout> {
        self.operation().output_layout()
    }
}

mod ops;
mod run;

// every operation's spec, and `OpSpec` ([`ops::operations!`] lists them)
pub use ops::*;

#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;

#[cfg(test)]
mod tests;
