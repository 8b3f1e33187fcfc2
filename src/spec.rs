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

use crate::engine::{Edge, PatchSpec};
use crate::format::tiff::is_tiff_path;
use crate::io::own_files::{Written, check_run_paths};
use crate::ops::stencil::{Filter, Stencil};
use crate::shape::fmt_shape;
use crate::tiling::{Boundary, BoxPlan};
use crate::{
    DType, Engine, Error, JobKey, Plan, Reduce, ReduceOver, Result, RunReport, TensorFile,
};

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

    /// Opens the whole tensor, whatever `rows` says.
    ///
    /// # Errors
    /// As [`TensorFile::open`] or [`TensorFile::open_raw`].
    pub fn open_whole(&self) -> Result<TensorFile> {
        match &self.raw {
            Some(r) if r.offset > 0 => {
                TensorFile::open_raw_at(&self.path, &r.shape, r.dtype, r.offset)
            }
            Some(r) => TensorFile::open_raw(&self.path, &r.shape, r.dtype),
            None => TensorFile::open(&self.path),
        }
    }
}

/// An operation: its inputs, its output and every parameter that changes the output's
/// bytes. Serialised with an `"op"` tag (`{"op": "reduce", ...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpSpec {
    /// A reduction (`sum`, `mean`, `var`, `std`, `min`, `max`) over one axis or all.
    Reduce {
        /// Input.
        input: Source,
        /// Output file.
        output: PathBuf,
        /// The reduction's name.
        reduce: String,
        /// Delta degrees of freedom of `var` and `std`.
        #[serde(default)]
        ddof: u32,
        /// The axis reduced over; `None` for all elements.
        #[serde(default)]
        axis: Option<usize>,
        /// Output dtype (default: the reduction's).
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
    },
    /// `y = scale * x + offset`, cast.
    Affine {
        /// Input.
        input: Source,
        /// Output file.
        output: PathBuf,
        /// Factor.
        scale: f64,
        /// Term.
        offset: f64,
        /// Output dtype (default: the input's).
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
        /// The output's nodata value, as [`OpSpec::Map`]'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nodata: Option<String>,
        /// Compute the pixels where the input is nodata like any other (always written
        /// out, as [`OpSpec::Map`]'s).
        #[serde(default)]
        ignore_nodata: bool,
    },
    /// A cast to `dtype`.
    Cast {
        /// Input.
        input: Source,
        /// Output file.
        output: PathBuf,
        /// Output dtype.
        #[serde(with = "dtype_name")]
        dtype: DType,
    },
    /// A format conversion (and optional cast): the output's format is its name's (or the
    /// engine's output format).
    Convert {
        /// Input.
        input: Source,
        /// Output file or store.
        output: PathBuf,
        /// Output dtype (default: the input's).
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
    },
    /// An elementwise expression over named inputs.
    Map {
        /// The expression.
        expr: String,
        /// The inputs, by the names the expression uses.
        inputs: Vec<(String, Source)>,
        /// Output file.
        output: PathBuf,
        /// Output dtype (default: the widest float input, f64 if none).
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
        /// The output's nodata value (`"nan"`, `"-9999"`), given to the pixels where an
        /// input is nodata and written to a GeoTIFF output (see [`crate::MapNodata`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nodata: Option<String>,
        /// Compute the pixels where an input is nodata like any other. Always written
        /// out, so that a run from before nodata masking is not resumed as this one.
        #[serde(default)]
        ignore_nodata: bool,
        /// The nodata value of named inputs in place of their files' (`None`: none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        input_nodata: Vec<(String, Option<String>)>,
    },
    /// `x @ w` with `w` resident.
    Matmul {
        /// Left operand, streamed by rows.
        x: Source,
        /// Right operand, held in memory.
        w: Source,
        /// Output file.
        output: PathBuf,
        /// Output dtype.
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
    },
    /// Per-column `(x - mean) / std`.
    Standardize {
        /// Input.
        input: Source,
        /// Output file.
        output: PathBuf,
        /// Delta degrees of freedom of the std.
        #[serde(default)]
        ddof: u32,
        /// Output dtype.
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
        /// Where to save the statistics (`.npz`), if anywhere.
        #[serde(default)]
        stats: Option<PathBuf>,
        /// The column means and stds to use (`.npy` files of one value per column), in
        /// place of a statistics pass: a cluster job computes them once for all its tasks.
        /// With them, `ddof` is not used and `stats` is not written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        given: Option<(Source, Source)>,
    },
    /// A neighbourhood filter over halo'd tiles.
    Stencil {
        /// Input image.
        input: Source,
        /// Output file.
        output: PathBuf,
        /// The filter (`gaussian:sigma=2`, `box:size=5`, `sobel`, `median:size=3`,
        /// `convolve:KERNEL.npy`).
        filter: String,
        /// The boundary mode (`reflect`, `nearest`, `wrap`, `mirror`, `constant:V`).
        #[serde(default = "default_boundary")]
        boundary: String,
        /// Output dtype.
        #[serde(default, with = "opt_dtype_name")]
        dtype: Option<DType>,
    },
    /// Swaps the last two axes.
    Transpose {
        /// Input.
        input: Source,
        /// Output file.
        output: PathBuf,
    },
    /// Cuts an image into patch files and an index.
    Tiles {
        /// Input image.
        input: Source,
        /// Directory of the patches.
        outdir: PathBuf,
        /// Patch side.
        size: usize,
        /// Pixels shared by neighbours.
        #[serde(default)]
        overlap: usize,
        /// `shift` or `pad`.
        #[serde(default = "default_edge")]
        edge: String,
        /// `npy` or `tif`.
        #[serde(default = "default_patch_format")]
        patch_format: String,
    },
    /// `tilestream gen` data, reproducible from the seed: `dist` is `demo` (N(col/100, 1),
    /// the default), `normal` (with `mean` and `std`) or `uniform` (with `low` and
    /// `high`), as [`crate::ops::generate::Dist::parse`] reads them.
    Generate {
        /// Output file.
        output: PathBuf,
        /// Shape.
        shape: Vec<usize>,
        /// Dtype.
        #[serde(with = "dtype_name")]
        dtype: DType,
        /// Seed.
        #[serde(default)]
        seed: u64,
        /// Distribution: `demo`, `normal` or `uniform`.
        #[serde(default = "default_dist")]
        dist: String,
        /// Mean of `normal` (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mean: Option<f64>,
        /// Standard deviation of `normal` (default 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        std: Option<f64>,
        /// Lower bound of `uniform` (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        low: Option<f64>,
        /// Upper bound of `uniform`, not reached (default 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        high: Option<f64>,
    },
}

fn default_dist() -> String {
    "demo".into()
}

fn default_boundary() -> String {
    "reflect".into()
}
fn default_edge() -> String {
    "shift".into()
}
fn default_patch_format() -> String {
    "npy".into()
}

/// A [`DType`] as its name (`"f32"`).
mod dtype_name {
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
mod opt_dtype_name {
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
        }
    }
}

impl std::fmt::Display for SpecPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecPlan::Flat(p) => p.fmt(f),
            SpecPlan::Box(p) => p.fmt(f),
        }
    }
}

impl OpSpec {
    /// Every file the operation reads (a convolution kernel included).
    #[must_use]
    pub fn inputs(&self) -> Vec<&Path> {
        match self {
            OpSpec::Generate { .. } => vec![],
            OpSpec::Map { inputs, .. } => inputs.iter().map(|(_, s)| s.path.as_path()).collect(),
            OpSpec::Matmul { x, w, .. } => vec![&x.path, &w.path],
            OpSpec::Stencil { input, filter, .. } => {
                let mut v = vec![input.path.as_path()];
                if let Some(k) = filter.strip_prefix("convolve:") {
                    v.push(Path::new(k));
                }
                v
            }
            OpSpec::Standardize {
                input,
                given: Some((m, sd)),
                ..
            } => vec![&input.path, &m.path, &sd.path],
            OpSpec::Reduce { input, .. }
            | OpSpec::Affine { input, .. }
            | OpSpec::Cast { input, .. }
            | OpSpec::Convert { input, .. }
            | OpSpec::Standardize { input, .. }
            | OpSpec::Transpose { input, .. }
            | OpSpec::Tiles { input, .. } => vec![&input.path],
        }
    }

    /// The file (or store, or patch directory) the operation writes.
    #[must_use]
    pub fn output(&self) -> &Path {
        match self {
            OpSpec::Tiles { outdir, .. } => outdir,
            OpSpec::Reduce { output, .. }
            | OpSpec::Affine { output, .. }
            | OpSpec::Cast { output, .. }
            | OpSpec::Convert { output, .. }
            | OpSpec::Map { output, .. }
            | OpSpec::Matmul { output, .. }
            | OpSpec::Standardize { output, .. }
            | OpSpec::Stencil { output, .. }
            | OpSpec::Transpose { output, .. }
            | OpSpec::Generate { output, .. } => output,
        }
    }

    /// Every path the operation writes: its output (or `tiles`' patch directory) and
    /// `standardize`'s statistics file.
    #[must_use]
    pub fn writes(&self) -> Vec<Written<'_>> {
        let mut w = vec![Written {
            role: "output",
            path: self.output(),
            dir: matches!(self, OpSpec::Tiles { .. }),
        }];
        if let OpSpec::Standardize {
            stats: Some(p),
            given: None,
            ..
        } = self
        {
            w.push(Written {
                role: "statistics file",
                path: p,
                dir: false,
            });
        }
        w
    }

    /// The destination policy (`check_run_paths` in `src/io/own_files.rs`): no path the operation writes is a
    /// device, FIFO or socket, or any file it reads, and no two are one; checked by the
    /// plan and the run before anything is written.
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
        if matches!(self, OpSpec::Tiles { .. }) {
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

fn stencil_of(filter: &str, boundary: &str) -> Result<Stencil> {
    Stencil::new(
        Filter::parse(filter, |k| load_kernel(Path::new(k)))?,
        boundary.parse::<Boundary>()?,
    )
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

impl OpSpec {
    /// The shape and dtype of what an operation writes and the input rows each output
    /// row depends on, for the operations whose output rows follow the input's (affine,
    /// cast, convert, map, matmul, standardize, filters).
    ///
    /// # Errors
    /// [`Error::Invalid`] for other operations or bad parameters; I/O errors opening the
    /// inputs.
    pub fn output_layout(&self) -> Result<OutputLayout> {
        let same = |input: &Source, dtype: Option<DType>| -> Result<OutputLayout> {
            let x = input.open()?;
            Ok(OutputLayout {
                shape: x.shape().to_vec(),
                dtype: dtype.unwrap_or(x.dtype()),
                halo_rows: (0, 0),
            })
        };
        match self {
            OpSpec::Affine {
                input,
                dtype,
                scale,
                offset,
                nodata,
                ignore_nodata,
                ..
            } => {
                // a nodata value refused before the job is split, not by each task
                let x = input.open()?;
                let rule = map_rule(nodata.as_ref(), *ignore_nodata, &[]);
                Engine::affine_masked(&x, *scale, *offset, *dtype, &rule)?;
                same(input, *dtype)
            }
            OpSpec::Convert { input, dtype, .. } => same(input, *dtype),
            OpSpec::Cast { input, dtype, .. } => same(input, Some(*dtype)),
            OpSpec::Standardize { input, dtype, .. } => {
                // by default f64 for an f64 input, f32 otherwise
                let mut out = same(input, *dtype)?;
                if dtype.is_none() && out.dtype != DType::F64 {
                    out.dtype = DType::F32;
                }
                Ok(out)
            }
            OpSpec::Map {
                expr,
                inputs,
                dtype,
                nodata,
                ignore_nodata,
                input_nodata,
                ..
            } => {
                // the shape the expression iterates over (a plane `x[k]` of an input is
                // one axis short of it) and its default dtype, as the run binds them;
                // nodata refused before the job is split
                let files = open_named(inputs)?;
                let named: Vec<(&str, &TensorFile)> =
                    files.iter().map(|(n, f)| (n.as_str(), f)).collect();
                let rule = map_rule(nodata.as_ref(), *ignore_nodata, input_nodata);
                let bound = Engine::bind_map(expr, &named, *dtype, &rule)?;
                Ok(OutputLayout {
                    shape: bound.shape,
                    dtype: bound.dtype,
                    halo_rows: (0, 0),
                })
            }
            OpSpec::Matmul { x, w, dtype, .. } => {
                let (x, w) = (x.open()?, w.open()?);
                let (r, _, n) = Engine::matmul_shapes(&x, &w)?;
                let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
                Ok(OutputLayout {
                    shape: vec![r, n],
                    dtype: dtype.unwrap_or(c),
                    halo_rows: (0, 0),
                })
            }
            OpSpec::Stencil {
                input,
                filter,
                boundary,
                dtype,
                ..
            } => {
                let mut out = same(input, *dtype)?;
                // rows are image rows of a 2-D image; the bands of a 3-D one are
                // filtered one by one
                if out.shape.len() == 2 {
                    let stencil = stencil_of(filter, boundary)?;
                    if matches!(stencil.boundary, Boundary::Wrap) {
                        return Err(Error::invalid(
                            "boundary wrap needs the whole image: it cannot be split by rows \
                             (filter it with one process, or split a 3-D image by bands)",
                        ));
                    }
                    // as many rows each side as the longer side needs: near an edge of
                    // the image, a reflected row lies up to that far inside
                    let (rows, _) = stencil.halos();
                    let h = rows.before.max(rows.after);
                    out.halo_rows = (h, h);
                }
                Ok(out)
            }
            _ => Err(Error::invalid(
                "only affine, cast, convert, map, matmul, standardize and filters write \
                 outputs whose rows follow their input's",
            )),
        }
    }
}

mod run;

#[cfg(test)]
mod tests;
