//! How GeoTIFF outputs are written: compression, predictor, tiles, interleave, BigTIFF,
//! georeferencing and what makes one a COG. The writer (`write.rs`), the streaming
//! encoder (`stream.rs`) and the COG builder (`cog.rs`) all read them.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::tiff::GeoRef;

/// Compression of written GeoTIFF tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TiffCompression {
    /// Stored as is.
    None,
    /// zlib Deflate (TIFF compression 8) at a level 1-9.
    Deflate(u32),
    /// Zstandard (TIFF compression 50000) at a level 1-22.
    Zstd(i32),
}

impl std::str::FromStr for TiffCompression {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let spec = crate::format::CodecSpec::parse(s, || {
            Error::invalid(format!(
                "unknown GeoTIFF compression `{s}`: use none, deflate[:1-9] or zstd[:1-22]"
            ))
        });
        match spec.name.as_str() {
            "none" if spec.level.is_none() => Ok(TiffCompression::None),
            "deflate" => Ok(TiffCompression::Deflate(spec.level_in(6, 1, 9)? as u32)),
            "zstd" => Ok(TiffCompression::Zstd(spec.level_in(9, 1, 22)? as i32)),
            _ => Err(spec.bad()),
        }
    }
}

/// The predictor applied to each row of a tile before it is compressed (TIFF tag 317),
/// which makes neighbouring values compress better; readers undo it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TiffPredictor {
    /// The floating-point predictor for float outputs that are compressed, none
    /// otherwise. On smooth float rasters it makes Deflate both smaller and faster
    /// (`benches/compare/results/codecs.md`); on integer imagery with sensor noise the
    /// horizontal predictor gains little and costs time, so it is not the default.
    #[default]
    Auto,
    /// No predictor (1).
    None,
    /// Horizontal differencing (2): each sample minus the same band's sample before it,
    /// with wrapping integer arithmetic on the sample's bits.
    Horizontal,
    /// The floating-point predictor (3, Adobe's TIFF technote 3): each row's bytes
    /// regrouped by significance, then differenced byte by byte. For f16, f32, f64.
    Float,
}

impl std::str::FromStr for TiffPredictor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(TiffPredictor::Auto),
            "none" | "1" => Ok(TiffPredictor::None),
            "horizontal" | "2" => Ok(TiffPredictor::Horizontal),
            "float" | "floating-point" | "3" => Ok(TiffPredictor::Float),
            _ => Err(Error::invalid(format!(
                "unknown GeoTIFF predictor `{s}`: use auto, none (1), horizontal (2) or \
                 float (3)"
            ))),
        }
    }
}

impl TiffPredictor {
    /// The `Predictor` tag value for tiles of `dtype` compressed with `compression`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a predictor on uncompressed tiles, or the floating-point
    /// predictor on an integer output.
    pub fn tag(self, dtype: DType, compression: TiffCompression) -> Result<u16> {
        let float = matches!(dtype, DType::F16 | DType::F32 | DType::F64);
        match (self, compression) {
            (TiffPredictor::Auto, TiffCompression::None) | (TiffPredictor::None, _) => Ok(1),
            (_, TiffCompression::None) => Err(Error::invalid(
                "a GeoTIFF predictor only helps compressed tiles: drop `tiff_predictor`, or \
                 give `tiff_compress=deflate` or `tiff_compress=zstd`",
            )),
            (TiffPredictor::Auto, _) => Ok(if float { 3 } else { 1 }),
            (TiffPredictor::Horizontal, _) => Ok(2),
            (TiffPredictor::Float, _) if float => Ok(3),
            (TiffPredictor::Float, _) => Err(Error::invalid(format!(
                "the floating-point GeoTIFF predictor is for f16, f32 and f64 outputs; this \
                 output is {dtype}: give `tiff_predictor=horizontal` or `tiff_predictor=none`"
            ))),
        }
    }
}

/// How a GeoTIFF output is laid out and compressed.
#[derive(Clone, Debug, PartialEq)]
pub struct TiffWriteOptions {
    /// Tile side in pixels (a multiple of 16).
    pub tile: usize,
    /// Tile compression.
    pub compression: TiffCompression,
    /// The predictor applied before compression.
    pub predictor: TiffPredictor,
    /// Pixel-interleaved (all bands of a pixel together) instead of band-sequential.
    pub pixel_interleave: bool,
    /// Georeferencing to write (tags copied as they are).
    pub georef: Option<GeoRef>,
    /// Memory the encoder may hold (tiles in flight, raw and compressed).
    pub memory: u64,
    /// BigTIFF: `None` chooses it when the data passes 4 GB; `Some` forces it on or off
    /// (off fails for files that need it).
    pub bigtiff: Option<bool>,
    /// Written as a Cloud-Optimized GeoTIFF with these overviews.
    pub cog: Option<CogOptions>,
}

impl Default for TiffWriteOptions {
    fn default() -> Self {
        TiffWriteOptions {
            tile: 512,
            compression: TiffCompression::Deflate(6),
            predictor: TiffPredictor::Auto,
            pixel_interleave: false,
            georef: None,
            memory: 64 << 20,
            bigtiff: None,
            cog: None,
        }
    }
}

impl TiffWriteOptions {
    /// Refuses, before a run, what these options cannot write for an image of `shape`
    /// and `dtype`: a shape or sample type GeoTIFF cannot hold, a predictor the dtype or
    /// the compression cannot take.
    ///
    /// # Errors
    /// [`Error::Invalid`] saying which option to change.
    pub(crate) fn check_writes(&self, shape: &[usize], dtype: DType) -> Result<()> {
        super::image_dims(shape)?;
        super::tiff_sample(dtype)?;
        self.predictor.tag(dtype, self.compression).map(|_| ())
    }
}

/// How overview pixels are computed from the level above.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resampling {
    /// The (area-weighted) mean of the source pixels a pixel covers (`gdaladdo -r
    /// average`).
    #[default]
    Average,
    /// One source pixel (`gdaladdo -r nearest`): values are kept as they are.
    Nearest,
}

impl std::str::FromStr for Resampling {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "average" => Ok(Resampling::Average),
            "nearest" => Ok(Resampling::Nearest),
            _ => Err(Error::invalid(format!(
                "unknown overview resampling `{s}`: use average or nearest"
            ))),
        }
    }
}

/// How many overview levels a COG gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overviews {
    /// Halve until the smallest level fits in one tile (GDAL's COG default).
    #[default]
    Auto,
    /// This many levels (factors 2, 4, ... 2^N); 0 for none.
    Count(usize),
}

impl std::str::FromStr for Overviews {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Overviews::Auto);
        }
        s.parse::<usize>().map(Overviews::Count).map_err(|_| {
            Error::invalid(format!(
                "`overviews={s}` is neither auto nor a number of levels (0, 1, 2...)"
            ))
        })
    }
}

/// What makes a GeoTIFF output a COG.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CogOptions {
    /// The overview levels.
    pub overviews: Overviews,
    /// How they are computed.
    pub resampling: Resampling,
}
