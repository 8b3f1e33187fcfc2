//! A GeoTIFF output encoded as the run writes it ([`TiffStream`]), as the engine sees
//! it through [`Encoding`].

use super::TiffWriteOptions;
use super::stream::TiffStream;
use super::write::TiledLayout;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::encoding::{BoxChunks, Encoding, Fitted, Least, Room};

/// GeoTIFF outputs written with these options.
pub(crate) struct TiffEncoding(pub TiffWriteOptions);

impl Encoding for TiffEncoding {
    fn kind(&self) -> &'static str {
        "GeoTIFF"
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
            chunks: "tiles (--tiff-tile)",
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
