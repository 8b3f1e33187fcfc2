//! A GeoTIFF output encoded as the run writes it ([`TiffStream`]): as the engine plans
//! it ([`Encoding`]) and as an output writes it ([`StreamWriter`]).

use std::fs::File;
use std::path::Path;

use tempfile::NamedTempFile;

use super::TiffWriteOptions;
use super::stream::TiffStream;
use super::write::TiledLayout;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunk_assembly::ChunkRun;
use crate::format::encoding::{BoxChunks, Encoding, Fitted, Least, Room};
use crate::format::output::{OutputFile, StreamWriter, Target, finish_file};
use crate::io::own_files::dir_and_name;
use crate::io::temp::{clean_stale, temp_beside};

/// GeoTIFF outputs written with these options.
pub(crate) struct TiffEncoding(pub TiffWriteOptions);

impl Encoding for TiffEncoding {
    fn kind(&self) -> &'static str {
        "GeoTIFF"
    }

    fn check_shape(&self, _dest: &Path, shape: &[usize], dtype: DType) -> Result<()> {
        super::image_dims(shape)?;
        super::tiff_sample(dtype).map(|_| ())
    }

    fn check(&self, shape: &[usize], dtype: DType, limit: u64) -> Result<()> {
        match &self.0.cog {
            // refused before the run, not after it
            Some(cog) => super::cog::check_budget(shape, dtype, &self.0, cog, limit),
            None => Ok(()),
        }
    }

    fn fit(&self, shape: &[usize], dtype: DType, room: Room) -> Result<Option<Fitted>> {
        let fit = TiffStream::fit(
            shape,
            dtype,
            &self.0,
            room.bytes,
            room.open,
            room.bands_inner,
        )?;
        Ok(fit.map(|(need, opts)| {
            Fitted::new(
                need,
                "GeoTIFF encoding (tiles being filled and in flight)",
                move |output, memory| output.with_tiff_stream(opts, memory),
            )
        }))
    }

    fn least(&self, shape: &[usize], dtype: DType, open: Option<usize>) -> Result<Option<Least>> {
        let t = TiledLayout::new(shape, dtype, &self.0)?.t;
        let (filling, one) = TiffStream::least(shape, dtype, &self.0, open)?;
        Ok(Some(Least {
            filling,
            one,
            unit: format!("{t}x{t} tile"),
            chunks: "tiles (`tiff_tile`)",
        }))
    }

    fn flat_what(&self) -> &'static str {
        "GeoTIFF output encoded as it is written (a strip of tiles)"
    }

    fn pixel_rows(&self, shape: &[usize], dtype: DType) -> Option<usize> {
        // a pixel-interleaved TIFF's tiles hold every band: a flat plan visits them
        // inner, in tiles no taller than the TIFF's
        TiledLayout::new(shape, dtype, &self.0)
            .ok()
            .filter(|l| l.pixel)
            .map(|l| l.t)
    }

    fn box_chunks(&self, shape: &[usize], dtype: DType, _limit: u64) -> Option<BoxChunks> {
        let l = TiledLayout::new(shape, dtype, &self.0).ok()?;
        let chunk = (l.t * l.t * l.spp()) as u64 * dtype.size() as u64;
        Some(BoxChunks {
            rows: l.t,
            cols: l.t,
            planes: l.spp(),
            in_flight_each: 2 * chunk,
            what: "GeoTIFF output encoded as it is written (tiles being filled and in flight)",
        })
    }
}

/// A GeoTIFF written tile by tile into the temporary file, as an output writes it.
impl StreamWriter for TiffStream {
    fn write(&self, start: u64, bytes: &[u8]) -> Result<()> {
        TiffStream::write(self, start, bytes)
    }

    fn take_appended(&self) -> Vec<ChunkRun> {
        TiffStream::take_appended(self)
    }

    fn settle(&self) -> Result<()> {
        TiffStream::settle(self)
    }

    fn resume(&self, file: &File, dest: &Path, done: &[ChunkRun]) -> Result<usize> {
        TiffStream::resume(self, file, dest, done)
    }

    fn covers(&self, start: u64, len: u64) -> bool {
        TiffStream::covers(self, start, len)
    }

    fn release_memory(&mut self) {
        TiffStream::release_memory(self);
    }

    fn builds_cog(&self) -> bool {
        self.options().cog.is_some()
    }

    fn finish(&self, tmp: NamedTempFile, dest: &Path, durable: bool, memory: u64) -> Result<()> {
        TiffStream::finish(self, tmp.as_file(), dest)?;
        let tmp = cog_of(tmp, dest, self.options(), memory)?;
        finish_file(tmp, dest, durable, memory)
    }
}

/// The GeoTIFF in `tiff`, rewritten as a COG into a new temporary file when `opts` asks
/// for one (see [`super::cog`]); `tiff` itself otherwise.
fn cog_of(
    tiff: NamedTempFile,
    dest: &Path,
    opts: &TiffWriteOptions,
    memory: u64,
) -> Result<NamedTempFile> {
    let Some(cog) = &opts.cog else {
        return Ok(tiff);
    };
    if let Ok((dir, name)) = dir_and_name(dest) {
        // the level files and COG of a run killed while it built its COG (this run's own
        // temporary files are locked, and stay)
        let _ = clean_stale(&dir, Some(&name));
    }
    let out = temp_beside(dest)?;
    let mut o = opts.clone();
    o.memory = memory;
    super::cog::build(tiff.path(), out.as_file(), dest, &o, cog)?;
    Ok(out)
}

impl OutputFile {
    /// Makes this output a tiled GeoTIFF encoded as the run writes it, tile by tile
    /// (see [`TiffStream`]): no raw staging and no encoding after the run. `memory` pays
    /// for the tiles being filled and those in flight ([`TiffStream::fit`]). Each element
    /// must be written once (tiles already kept by a resume excepted).
    ///
    /// # Errors
    /// [`Error::Invalid`] if the shape is not an image or the dtype has no TIFF form;
    /// [`Error::Internal`] for a region output or a layout that cannot be streamed;
    /// [`Error::Io`] if the file cannot be written.
    pub fn with_tiff_stream(
        mut self,
        opts: TiffWriteOptions,
        memory: crate::budget::Reservation,
    ) -> Result<Self> {
        let Target::Temp(t) = &self.tmp else {
            return Err(Error::Internal(
                "a GeoTIFF written into rows of a file cannot be streamed".into(),
            ));
        };
        let stream = TiffStream::create(
            t.as_file(),
            &self.dest,
            &self.shape,
            self.dtype,
            opts,
            Some(memory),
            !self.adopted,
        )?;
        self.stream = Some(Box::new(stream));
        Ok(self)
    }
}
