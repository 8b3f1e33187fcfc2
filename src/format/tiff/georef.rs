//! The GeoTIFF tags that place an image on the earth, read as they are in the file so
//! that an output carries exactly its input's georeferencing.

use std::path::Path;

use tiff::decoder::{Decoder, Limits};
use tiff::tags::Tag;

use super::nodata::plain_nodata;
use super::tiff_err;
use crate::error::Result;

/// GeoTIFF tags that place an image on the earth, kept as they are in the file so that
/// an output carries exactly the input's georeferencing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeoRef {
    /// `ModelPixelScaleTag` (33550): pixel size in model units (x, y, z).
    pub pixel_scale: Option<Vec<f64>>,
    /// `ModelTiepointTag` (33922): (i, j, k, x, y, z) tie points.
    pub tiepoint: Option<Vec<f64>>,
    /// `ModelTransformationTag` (34264): a 4x4 affine matrix, row major.
    pub transformation: Option<Vec<f64>>,
    /// `GeoKeyDirectoryTag` (34735): the CRS description.
    pub geo_keys: Option<Vec<u16>>,
    /// `GeoDoubleParamsTag` (34736).
    pub geo_doubles: Option<Vec<f64>>,
    /// `GeoAsciiParamsTag` (34737).
    pub geo_ascii: Option<String>,
    /// `GDAL_NODATA` (42113), as text.
    pub nodata: Option<String>,
}

impl GeoRef {
    /// True when no georeferencing tag is present.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == GeoRef::default()
    }

    /// The affine geotransform in GDAL's order (x0, dx, rx, y0, ry, dy), from the
    /// transformation matrix or from the first tie point and the pixel scale.
    #[must_use]
    pub fn geotransform(&self) -> Option<[f64; 6]> {
        if let Some(m) = &self.transformation
            && m.len() >= 8
        {
            return Some([m[3], m[0], m[1], m[7], m[4], m[5]]);
        }
        let (s, t) = (self.pixel_scale.as_ref()?, self.tiepoint.as_ref()?);
        if s.len() < 2 || t.len() < 6 {
            return None;
        }
        Some([
            t[3] - t[0] * s[0],
            s[0],
            0.0,
            t[4] + t[1] * s[1],
            0.0,
            -s[1],
        ])
    }

    /// The georeferencing of the window starting at pixel (`row`, `col`) of this grid:
    /// the origin moves by the offset, the CRS and pixel size stay.
    #[must_use]
    pub fn shifted(&self, row: f64, col: f64) -> GeoRef {
        let mut g = self.clone();
        if let Some(m) = &mut g.transformation
            && m.len() >= 8
        {
            m[3] += col * m[0] + row * m[1];
            m[7] += col * m[4] + row * m[5];
        } else if let Some(t) = &mut g.tiepoint
            && t.len() >= 6
        {
            // the tie point keeps its model coordinates; its raster position moves
            t[0] -= col;
            t[1] -= row;
        }
        g
    }

    /// The EPSG code of the projected or geographic CRS, if the key directory names one.
    #[must_use]
    pub fn epsg(&self) -> Option<u16> {
        let k = self.geo_keys.as_ref()?;
        // header of 4 shorts, then entries (key, location, count, value)
        k.get(4..)?.chunks_exact(4).find_map(|e| {
            ((e[0] == 3072 || e[0] == 2048) && e[1] == 0 && e[3] != 32767).then_some(e[3])
        })
    }
}

/// The georeferencing tags of the image `d` is at.
pub(super) fn read_georef<R: std::io::Read + std::io::Seek>(
    path: &Path,
    d: &mut Decoder<R>,
) -> Result<GeoRef> {
    let f64s = |d: &mut Decoder<R>, t: Tag| -> Result<Option<Vec<f64>>> {
        match d.find_tag(t).map_err(|e| tiff_err(path, &e))? {
            None => Ok(None),
            Some(v) => v.into_f64_vec().map(Some).map_err(|e| tiff_err(path, &e)),
        }
    };
    let ascii = |d: &mut Decoder<R>, t: Tag| -> Result<Option<String>> {
        match d.find_tag(t).map_err(|e| tiff_err(path, &e))? {
            None => Ok(None),
            Some(v) => v.into_string().map(Some).map_err(|e| tiff_err(path, &e)),
        }
    };
    Ok(GeoRef {
        pixel_scale: f64s(d, Tag::ModelPixelScaleTag)?,
        tiepoint: f64s(d, Tag::ModelTiepointTag)?,
        transformation: f64s(d, Tag::ModelTransformationTag)?,
        geo_keys: d
            .find_tag_unsigned_vec::<u16>(Tag::GeoKeyDirectoryTag)
            .map_err(|e| tiff_err(path, &e))?,
        geo_doubles: f64s(d, Tag::GeoDoubleParamsTag)?,
        geo_ascii: ascii(d, Tag::GeoAsciiParamsTag)?,
        nodata: ascii(d, Tag::GdalNodata)?
            .map(|s| plain_nodata(path, s.trim_end_matches('\0')))
            .transpose()?,
    })
}

/// The georeferencing of the TIFF held in `bytes` (a GeoJP2 box's degenerate GeoTIFF),
/// read as a GeoTIFF file's is.
///
/// # Errors
/// [`Error::Tiff`](crate::Error::Tiff) when the bytes are no TIFF or its tags cannot be read.
pub fn georef_from_bytes(path: &Path, bytes: &[u8]) -> Result<GeoRef> {
    let mut d = Decoder::new(std::io::Cursor::new(bytes))
        .map_err(|e| tiff_err(path, &e))?
        .with_limits(Limits::default());
    read_georef(path, &mut d)
}
