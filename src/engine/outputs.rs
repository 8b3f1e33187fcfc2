//! How an engine writes its outputs: the format a destination gets (by extension or
//! forced), GeoTIFF and Zarr encoding options, the georeferencing an output inherits,
//! and the encoding step when a run's output is finished.

use std::path::Path;

use super::Engine;
use crate::error::Result;
use crate::tensor::geotiff::{GeoRef, TiffWriteOptions};
use crate::tensor::zarr::ZarrWriteOptions;
use crate::tensor::{OutFormat, OutputFile, TensorFile, fmt_shape};

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
    pub(super) fn format_of(&self, out: &Path) -> OutFormat {
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
    /// image) are written without it, with a note on stderr.
    #[must_use]
    pub fn with_georef(mut self, georef: Option<(GeoRef, (usize, usize))>) -> Self {
        self.georef = georef;
        self
    }

    /// The georeferencing of `input` (with its grid), for [`Engine::with_georef`].
    #[must_use]
    pub fn georef_of(input: &TensorFile) -> Option<(GeoRef, (usize, usize))> {
        let g = input.georef()?.clone();
        let (_, h, w) = crate::tensor::geotiff::image_dims(input.shape()).ok()?;
        Some((g, (h, w)))
    }

    /// `output` set to be encoded as `format` says, with this engine's GeoTIFF or Zarr
    /// options (nothing to do for `.npy` and raw).
    pub(super) fn encoded_as(
        &self,
        output: OutputFile,
        out: &Path,
        format: OutFormat,
    ) -> Result<OutputFile> {
        match format {
            OutFormat::GeoTiff => {
                let opts = self.tiff_options(out, output.shape());
                output.with_tiff(opts)
            }
            OutFormat::Zarr => {
                // refused before the run, not after it: chunks the budget cannot encode
                crate::tensor::zarr::chunk_shapes(
                    &self.zarr_out,
                    output.shape(),
                    output.dtype(),
                    self.budget.limit(),
                )?;
                Ok(output.with_zarr(self.zarr_out.clone()))
            }
            OutFormat::Npy | OutFormat::Raw => Ok(output),
        }
    }

    /// Finishes `output`; a staged one is encoded with what the budget has left, reserved
    /// for the time (tiles or chunks in flight).
    pub(super) fn finish_output(&self, mut output: OutputFile) -> Result<()> {
        let _encoding = if output.is_staged() {
            let free = self.budget.limit().saturating_sub(self.budget.reserved());
            output.set_encode_memory(free);
            Some(self.budget.reserve("GeoTIFF/Zarr encoding", free)?)
        } else {
            None
        };
        output.finish()
    }

    /// The GeoTIFF options for an output of `shape` at `out`.
    pub(super) fn tiff_options(&self, out: &Path, shape: &[usize]) -> TiffWriteOptions {
        let mut o = self.tiff_out.clone();
        o.memory = self.budget.limit();
        o.georef = match (&self.georef, crate::tensor::geotiff::image_dims(shape)) {
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
