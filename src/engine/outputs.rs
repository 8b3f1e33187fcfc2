//! How an engine writes its outputs: the format a destination gets (by extension or
//! forced), GeoTIFF and Zarr encoding options, the georeferencing an output inherits,
//! and the encoding step when a run's output is finished.

use std::path::Path;

use super::Engine;
use crate::budget::{BudgetError, fmt_bytes};
use crate::error::{Error, Result};
use crate::format::encoding::{Encoding, Fitted, Room};
use crate::format::encoding_of;
use crate::format::tiff::{GeoRef, TiffWriteOptions};
use crate::format::zarr::ZarrWriteOptions;
use crate::format::{OutFormat, OutputFile, TensorFile, fmt_shape};
use crate::plan::Plan;
use crate::tiling::{BoxPlan, OutChunks};

/// The room of a box plan, when it is cut along its output's chunks.
pub(super) fn room_of_box(plan: &BoxPlan) -> Option<Room> {
    plan.cut_along_out_chunks().then(|| Room {
        bytes: plan.out_chunk_bytes,
        open: Some(plan.open_out_chunks()),
        bands_inner: plan.bands_together(),
    })
}

impl Engine {
    /// How GeoTIFF outputs (`.tif`/`.tiff` destinations) are written: tile size,
    /// compression, interleave (default 512x512 Deflate tiles, band-sequential). Its
    /// `georef` and `memory` are ignored: see [`Engine::with_georef`]; the encoder works
    /// within this engine's budget.
    #[must_use]
    pub fn with_tiff_output(mut self, opts: TiffWriteOptions) -> Self {
        self.tiff_out = opts;
        self
    }

    /// Writes outputs in `format` whatever their names say (`None`: by extension, the
    /// default).
    #[must_use]
    pub fn with_out_format(mut self, format: Option<OutFormat>) -> Self {
        self.out_format = format;
        self
    }

    /// The format `out` is written in.
    pub(crate) fn format_of(&self, out: &Path) -> OutFormat {
        self.out_format.unwrap_or_else(|| OutFormat::of(out))
    }

    /// How Zarr v3 outputs (`.zarr` destinations) are written: chunk and shard shapes,
    /// compression (default 512x512 chunks over the last two axes, zstd level 3). Its
    /// `memory` is ignored: the encoder works within this engine's budget.
    #[must_use]
    pub fn with_zarr_output(mut self, opts: ZarrWriteOptions) -> Self {
        self.zarr_out = opts;
        self
    }

    /// Georeferencing written to GeoTIFF outputs whose grid is `rows x cols` (the
    /// input's). Outputs of another grid (a reduction, a transpose of a non-square
    /// image) are written without it, with a note on stderr. Its nodata value is written
    /// as given, except by `map` and `affine`, which write their own; [`Engine::run_spec`]
    /// drops it for the other operations that compute new values (filters, standardize).
    #[must_use]
    pub fn with_georef(mut self, georef: Option<(GeoRef, (usize, usize))>) -> Self {
        self.georef = georef;
        self
    }

    /// This engine with `nodata` as the nodata value of GeoTIFF outputs of `shape` (and
    /// no nodata when `None`): on the georeferencing it writes, or alone on an output of
    /// no georeferenced input.
    pub(super) fn with_output_nodata(&self, nodata: Option<String>, shape: &[usize]) -> Engine {
        let georef = match (self.georef.clone(), nodata) {
            (Some((mut g, grid)), nodata) => {
                g.nodata = nodata;
                Some((g, grid))
            }
            (None, Some(n)) => crate::format::tiff::image_dims(shape)
                .ok()
                .map(|(_, h, w)| {
                    let g = GeoRef {
                        nodata: Some(n),
                        ..GeoRef::default()
                    };
                    (g, (h, w))
                }),
            (None, None) => None,
        };
        self.clone().with_georef(georef)
    }

    /// The georeferencing of `input` (with its grid), for [`Engine::with_georef`].
    #[must_use]
    pub fn georef_of(input: &TensorFile) -> Option<(GeoRef, (usize, usize))> {
        let g = input.georef()?.clone();
        let (_, h, w) = crate::format::tiff::image_dims(input.shape()).ok()?;
        Some((g, (h, w)))
    }

    /// `output` set to be encoded as `format` says, with this engine's GeoTIFF or Zarr
    /// options (nothing to do for `.npy` and raw). A GeoTIFF or Zarr output is encoded
    /// as the run writes it when `stream_room` (what the plan set aside, see
    /// [`Engine::to_file_with`]) holds what that needs.
    ///
    /// # Errors
    /// [`BudgetError::CannotEncode`] when the room does not hold the encoder (outputs
    /// are never staged raw to be encoded at the end); the format's refusals.
    pub(super) fn encoded_as(
        &self,
        output: OutputFile,
        out: &Path,
        format: OutFormat,
        stream_room: Option<Room>,
    ) -> Result<OutputFile> {
        self.check_tiff_output(out, output.shape(), output.dtype())?;
        let tiff = || self.tiff_options(out, output.shape());
        let Some(encoding) = encoding_of(format, tiff, &self.zarr_out) else {
            return Ok(output);
        };
        let (shape, dtype) = (output.shape().to_vec(), output.dtype());
        encoding.check(&shape, dtype, self.budget.limit())?;
        let fit = match stream_room {
            Some(r) if !output.is_region() => encoding.fit(&shape, dtype, r)?,
            _ => None,
        };
        let open = stream_room.and_then(|r| r.open);
        self.streamed(output, fit, || self.cannot_stream(out, &shape, dtype, open))
    }

    /// `output` encoded as the run writes it by `fit` (an encoder fitted to the room the
    /// plan set aside), its memory reserved; else (the room does not hold it) the error
    /// `refused` makes. A whole output and the rows of a shared store
    /// ([`OutputFile::zarr_region`]) both go through here.
    pub(super) fn streamed(
        &self,
        output: OutputFile,
        fit: Option<Fitted>,
        refused: impl FnOnce() -> Error,
    ) -> Result<OutputFile> {
        let Some(fit) = fit else {
            return Err(refused());
        };
        let memory = self.budget.reserve(fit.what, fit.need)?;
        tracing::info!(
            bytes = fit.need,
            what = fit.what,
            "output encoded as the run writes it"
        );
        fit.attach(output, memory)
    }

    /// The encoding of the outputs at `out` as plans size it (GeoTIFF options within
    /// this engine's budget); `None` for outputs written as they are.
    pub(super) fn planning_encoding(&self, out: &Path) -> Option<Box<dyn Encoding + '_>> {
        self.planning_encoding_as(self.format_of(out))
    }

    /// [`Engine::planning_encoding`] of `format`.
    pub(super) fn planning_encoding_as(&self, format: OutFormat) -> Option<Box<dyn Encoding + '_>> {
        encoding_of(format, || self.planning_tiff(), &self.zarr_out)
    }

    /// The GeoTIFF options plans are sized with: this engine's, within its budget.
    fn planning_tiff(&self) -> TiffWriteOptions {
        let mut opts = self.tiff_out.clone();
        opts.memory = self.budget.limit();
        opts
    }

    /// Whether `out` is encoded (a GeoTIFF or a Zarr store), so that a run must set
    /// room aside for encoding it as it writes it.
    pub(crate) fn encodes(&self, out: &Path) -> bool {
        self.planning_encoding(out).is_some()
    }

    /// The refusal of `out` (a GeoTIFF or Zarr output of `shape` and `dtype`) when the
    /// budget cannot hold its encoder beside the run's tiles: the tiles or chunks being
    /// filled (`open` across a box of a box plan; `None`: a row of them, which a flat
    /// plan fills within three quarters of the budget at most) and one in flight.
    pub(crate) fn cannot_stream(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
        open: Option<usize>,
    ) -> Error {
        let limit = self.budget.limit();
        let Some(encoding) = self.planning_encoding(out) else {
            return Error::Internal(format!("{}: not an encoded output", out.display()));
        };
        let least = match encoding.least(shape, dtype, open) {
            Ok(Some(least)) => least,
            Ok(None) => {
                return Error::Internal(format!(
                    "{}: an empty {} has nothing to encode",
                    out.display(),
                    encoding.kind()
                ));
            }
            Err(e) => return e,
        };
        let (unit, chunks) = (least.unit, least.chunks.to_string());
        let least = (least.filling, least.one);
        let (filling, one) = least;
        let held = filling.saturating_add(one);
        let (filled, bound, within) = match open {
            None => (
                format!("a row of its {unit}s being filled ({})", fmt_bytes(filling)),
                held.saturating_mul(4) / 3,
                "within three quarters of the budget, beside the pipeline's tiles",
            ),
            Some(n) => (
                format!(
                    "{n} {unit}s being filled across a box ({})",
                    fmt_bytes(filling)
                ),
                held,
                "beside the pipeline's boxes",
            ),
        };
        let kind = encoding.kind();
        let what = format!(
            "{} (a {kind} of {} {})",
            out.display(),
            fmt_shape(shape),
            dtype.name()
        );
        BudgetError::CannotEncode {
            what,
            arithmetic: format!(
                "{filled} + one {unit} in flight, raw and encoded ({}) = {}, {within}",
                fmt_bytes(one),
                fmt_bytes(held)
            ),
            least: bound,
            limit,
            chunks,
        }
        .into()
    }

    /// Finishes `output`; a COG's overviews are built, and an object output's parts
    /// uploaded, with what the budget has left, reserved for the time.
    pub(super) fn finish_output(&self, mut output: OutputFile) -> Result<()> {
        // a streamed output is written: its encoder's memory goes to building a COG
        output.release_stream_memory();
        let _encoding = if output.builds_cog() || crate::io::remote::is_url(output.path()) {
            let free = self.budget.limit().saturating_sub(self.budget.reserved());
            output.set_encode_memory(free);
            Some(self.budget.reserve("COG overviews and upload", free)?)
        } else {
            None
        };
        output.finish()
    }

    /// Plans a run writing `out` (of `shape` and `dtype`) with `plan` (called with the
    /// engine to plan with: this one, or a copy whose plans set aside what the output
    /// needs), setting aside in the plan what encoding a GeoTIFF or Zarr output as it is written needs (a strip of
    /// tiles or a slab of chunks, and those in flight, within a quarter of the budget, or
    /// the smallest of a half and three quarters that holds it), so that the tiles do not
    /// take that room; when the plan cannot hold it, the plan without it
    /// ([`Plan::output_bytes`] 0: an element-wise run then tries boxes along the output's
    /// chunks, and others are refused). Other outputs: `plan` as it is.
    ///
    /// # Errors
    /// What `plan` returns.
    pub(crate) fn plan_writing(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
        plan: impl Fn(&Engine) -> Result<Plan>,
    ) -> Result<Plan> {
        // a quarter of the budget, or as much as three quarters when a row of the
        // output's tiles needs it (smaller pipeline tiles cost less than writing the
        // output twice), the plan visiting the bands inner if the output asks
        let limit = self.budget.limit();
        let need = [limit / 4, limit / 2, limit / 4 * 3]
            .into_iter()
            .find_map(|room| self.stream_need(out, shape, dtype, room));
        if let Some((n, what, pixel_rows)) = need {
            let reserving = Engine {
                out_reserve: Some(super::OutReserve {
                    bytes: n,
                    what,
                    bands_inner: pixel_rows,
                }),
                ..self.clone()
            };
            // a pixel-interleaved output streams only over a plan of its own shape that
            // visits the bands inner
            if let Ok(mut p) = plan(&reserving)
                && (pixel_rows.is_none() || (p.bands_inner && p.shape == shape))
            {
                p.output_bytes = n;
                return Ok(p);
            }
        }
        plan(self)
    }

    /// What encoding `out` (of `shape` and `dtype`) as a flat plan writes it holds when
    /// given `room` bytes ([`Encoding::fit`]), what it is, and
    /// the height of a pixel-interleaved TIFF's tiles (whose bands the plan visits
    /// inner); `None` when `room` cannot hold it or the output is not encoded.
    fn stream_need(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
        room: u64,
    ) -> Option<(u64, &'static str, Option<usize>)> {
        // rows of a Zarr store ([`OutputFile::zarr_region`]) stream into it too; rows
        // of a `.npy` are written as they are
        let format = match self.out_region {
            None => self.format_of(out),
            Some(_) => OutFormat::of(out),
        };
        let encoding = self.planning_encoding_as(format)?;
        let room = Room {
            bytes: room,
            open: None,
            bands_inner: true,
        };
        let need = encoding.fit(shape, dtype, room).ok().flatten()?.need;
        Some((
            need,
            encoding.flat_what(),
            encoding.pixel_rows(shape, dtype),
        ))
    }

    /// The chunks a box plan writing `out` (of `shape` and `dtype`; `transposed`: the
    /// input's last two axes swapped) cuts its boxes along so that the output is encoded
    /// as the run writes it: a GeoTIFF's tiles (every band of a pixel-interleaved one),
    /// a Zarr store's outer chunks (their depth along the bands of a rank-3 array).
    /// Two of them, to try in turn: with as many chunks in flight as a quarter of the
    /// budget holds (1 to 16), then with one (for budgets that hold no more; the same
    /// when a quarter holds one). Empty for other outputs, which are written as they are.
    pub(super) fn box_out_chunks(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
        transposed: bool,
    ) -> Vec<OutChunks> {
        let quarter = (self.budget.limit() / 4).max(1);
        let mut v: Vec<OutChunks> = [quarter, 1]
            .into_iter()
            .filter_map(|room| self.box_out_chunks_in(out, shape, dtype, transposed, room))
            .collect();
        v.dedup();
        v
    }

    /// [`Engine::box_out_chunks`] with as many chunks in flight as `room` holds (1 to
    /// 16).
    fn box_out_chunks_in(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
        transposed: bool,
        room: u64,
    ) -> Option<OutChunks> {
        // rows of a shared Zarr store (a `tilestream.dask` task): its chunks are the
        // store's, starting past the rows the run does not write (a filter's halo rows),
        // for an image (rank 2) or whole bands (rank 3); rows of a `.npy` are written as
        // they are
        let (format, chunked_shape, row_offset) = match self.out_region {
            None => (self.format_of(out), shape.to_vec(), 0),
            Some(region) if !transposed && out.join("zarr.json").is_file() => {
                let store = crate::format::TensorFile::open_zarr(out).ok()?;
                let outer_rows = store.zarr()?.chunk_shape.first().copied()?;
                let offset = match shape.len() {
                    2 => (region.skip_rows % outer_rows as u64) as usize,
                    3 if region.skip_rows == 0 => 0,
                    _ => return None,
                };
                (OutFormat::of(out), store.shape().to_vec(), offset)
            }
            Some(_) => return None,
        };
        let es = dtype.size() as u64;
        let c = self.planning_encoding_as(format)?.box_chunks(
            &chunked_shape,
            dtype,
            self.budget.limit(),
        )?;
        let fixed = (room / c.in_flight_each.max(1))
            .clamp(1, crate::format::tiff::stream::MAX_BATCH)
            * c.in_flight_each;
        let (ch, cw, planes, what) = (c.rows, c.cols, c.planes, c.what);
        let (rows, cols) = if transposed { (cw, ch) } else { (ch, cw) };
        Some(OutChunks {
            rows,
            cols,
            row_offset,
            elem_bytes: es,
            planes,
            fixed,
            what: what.to_string(),
        })
    }

    /// Refuses, before a run, GeoTIFF options that cannot write an output of `shape` and
    /// `dtype` at `out`: `--cog` for another format, a predictor the dtype or the
    /// compression cannot take.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] saying which option to change.
    pub(crate) fn check_tiff_output(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
    ) -> crate::Result<()> {
        let format = self.format_of(out);
        if format != OutFormat::GeoTiff {
            if self.tiff_out.cog.is_some() {
                return Err(crate::Error::invalid(format!(
                    "`cog` (or `format=cog`) writes Cloud-Optimized GeoTIFFs, but {} is \
                     written as {}: name it .tif",
                    out.display(),
                    format!("{format:?}").to_lowercase()
                )));
            }
            return Ok(());
        }
        self.tiff_out.check_writes(shape, dtype)
    }

    /// The line a plan shows for building the overviews of a COG written to `out`
    /// (`None` when it is not one); refuses what the run refuses before it starts
    /// ([`Engine::check_tiff_output`], and a budget that cannot build the overviews:
    /// `format::tiff::cog::plan_line`).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for options that cannot write the output, overviews the
    /// image cannot have or the budget cannot build.
    pub(crate) fn cog_after_the_run(
        &self,
        out: &Path,
        shape: &[usize],
        dtype: crate::DType,
    ) -> crate::Result<Option<String>> {
        self.check_tiff_output(out, shape, dtype)?;
        // check_tiff_output refused --cog for any other format
        if self.tiff_out.cog.is_none() {
            return Ok(None);
        }
        let opts = self.tiff_options(out, shape);
        crate::format::tiff::cog::plan_line(&opts, shape, dtype, self.budget.limit())
    }

    /// The GeoTIFF options for an output of `shape` at `out`.
    pub(super) fn tiff_options(&self, out: &Path, shape: &[usize]) -> TiffWriteOptions {
        let mut o = self.tiff_out.clone();
        o.memory = self.budget.limit();
        o.georef = match (&self.georef, crate::format::tiff::image_dims(shape)) {
            (Some((g, grid)), Ok((_, h, w))) if *grid == (h, w) => Some(g.clone()),
            (Some((_, grid)), _) => {
                eprintln!(
                    "note: {} is written without georeferencing: its grid {} is not the \
                     input's {}x{}",
                    out.display(),
                    fmt_shape(shape),
                    grid.0,
                    grid.1
                );
                None
            }
            (None, _) => None,
        };
        o
    }
}
