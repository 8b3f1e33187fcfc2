//! GeoTIFF in and out: satellite scenes as tilestream tensors.
//!
//! An image of `B` bands, `H` rows and `W` columns is the tensor `(B, H, W)` (band
//! sequential, whatever the file's interleave), or `(H, W)` with one band, so that
//! `s[3]` is band 4 for `map` as it is for a `.npy` scene.
//!
//! Reading: the layout (strips or tiles, planar or pixel-interleaved, compression,
//! predictor) and the georeferencing tags are parsed with the `tiff` crate, and every
//! tag that changes how samples decode is checked ([`decode::validate`]): a file is
//! read exactly as GDAL reads it, or refused in one line. An uncompressed single-band or
//! planar file whose strips lie back to back is a plain array at an offset, reached
//! through memory-mapped windows like a `.npy`; anything else is decoded chunk by chunk
//! by [`Chunked`](crate::format::chunked::Chunked), each chunk's bytes read with one positioned
//! read and decoded by [`decode`].
//!
//! Writing ([`write_tiled`], in `tiff_write.rs`): 512x512 tiles (by default), Deflate or ZSTD compressed in
//! parallel, planar or pixel-interleaved, BigTIFF when the data could pass 4 GB, with
//! the georeferencing tags of an input copied verbatim.

mod chunks;
pub mod cog;
#[doc(hidden)]
pub mod decode;
pub(crate) mod encoding;
#[doc(hidden)]
pub mod fax;
pub mod jpeg;
pub mod lerc;
mod options;
#[doc(hidden)]
pub mod stream;
pub mod webp;
#[doc(hidden)]
pub mod write;

use std::io::BufReader;
use std::path::Path;

use tiff::decoder::{ChunkType, Decoder, Limits};
use tiff::tags::Tag;

use crate::dtype::DType;
use crate::error::{Error, Result, TiffError};
use crate::io::source::{Source, SourceReader};
pub use chunks::TiffChunks;
use decode::Codec;

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

/// How the pixels of a TIFF are laid out on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)]
pub struct TiffLayout {
    /// Columns.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Samples per pixel (bands).
    pub bands: usize,
    /// Element type a sample reads as.
    pub dtype: DType,
    /// Bits of one stored sample (`BitsPerSample`): the element type's width, or fewer
    /// for packed unsigned samples (1 to 31 bits, GDAL's `NBITS`), which are unpacked
    /// into `dtype` as GDAL unpacks them.
    pub bits: u16,
    /// True when each band is stored on its own (`PlanarConfiguration` 2).
    pub planar: bool,
    /// `FillOrder` 2: the bits of every stored byte are in reverse order (least
    /// significant first); they are reversed before decoding, as libtiff does.
    pub lsb_first: bool,
    /// An 8-bit CMYK image, read as GDAL reads it: its four inks converted to red,
    /// green, blue and an opaque alpha (CMYK of other sample types reads as the inks).
    pub cmyk: bool,
    /// True when tiled, false when striped.
    pub tiled: bool,
    /// Chunk (tile or strip) width and height in pixels.
    pub chunk: (usize, usize),
    /// Compression name (`none`, `deflate`, `lzw`, `zstd`, `packbits`).
    pub compression: String,
    /// The codec that decodes the chunks.
    pub codec: Codec,
    /// For JPEG-compressed files, the tables and how components are taken.
    pub jpeg: Option<jpeg::JpegTags>,
    /// For LERC-compressed files, the additional compression and the alpha mask.
    pub lerc: Option<lerc::LercTags>,
    /// `PhotometricInterpretation` (1, `MinIsBlack`, when absent).
    pub photometric: u16,
    /// Predictor (1 none, 2 horizontal, 3 floating point).
    pub predictor: u16,
    /// BigTIFF (64-bit offsets).
    pub bigtiff: bool,
    /// Little-endian byte order.
    pub little_endian: bool,
    /// Byte offset of every chunk.
    pub offsets: Vec<u64>,
    /// Stored byte count of every chunk.
    pub byte_counts: Vec<u64>,
}

impl TiffLayout {
    /// True when samples are stored in fewer bits than their element type (packed).
    #[must_use]
    pub fn packed(&self) -> bool {
        usize::from(self.bits) != 8 * self.dtype.size()
    }

    /// The tensor shape: `(bands, height, width)`, or `(height, width)` for one band.
    #[must_use]
    pub fn shape(&self) -> Vec<usize> {
        if self.bands == 1 {
            vec![self.height, self.width]
        } else {
            vec![self.bands, self.height, self.width]
        }
    }

    /// Where the data starts if the file is one plain band-sequential array (no
    /// compression, native byte order, chunks back to back in order, full-width strips
    /// of one band each): then windows of it can be memory-mapped.
    #[must_use]
    pub fn contiguous_offset(&self) -> Option<u64> {
        if self.compression != "none"
            || self.lsb_first
            || self.packed()
            || self.cmyk
            || !(self.little_endian || self.dtype.size() == 1)
            || self.tiled
            || !(self.planar || self.bands == 1)
        {
            return None;
        }
        let es = self.dtype.size() as u64;
        let mut next = *self.offsets.first()?;
        for (&o, &n) in self.offsets.iter().zip(&self.byte_counts) {
            if o != next {
                return None;
            }
            next = o + n;
        }
        let total = (self.width * self.height * self.bands) as u64 * es;
        (next - self.offsets[0] == total).then(|| self.offsets[0])
    }
}

fn tiff_err(path: &Path, e: &tiff::TiffError) -> Error {
    let kind = match e {
        tiff::TiffError::UnsupportedError(_) => TiffError::Unsupported,
        tiff::TiffError::LimitsExceeded => TiffError::TooLarge,
        _ => TiffError::Corrupt,
    };
    Error::tiff(path, kind, format!("cannot read TIFF: {e}"))
}

/// The sample type a file's samples read as: their own for 8, 16, 32 and 64 bits;
/// unsigned integers of fewer bits (packed, `NBITS` in GDAL's words) widened to the
/// smallest of u8, u16 and u32 that holds them, as GDAL reads them.
fn sample_dtype(path: &Path, format: u16, bits: u16) -> Result<DType> {
    Ok(match (format, bits) {
        (1, 1..=8) => DType::U8,
        (1, 9..=16) => DType::U16,
        (1, 17..=32) => DType::U32,
        (1, 64) => DType::U64,
        (2, 8) => DType::I8,
        (2, 16) => DType::I16,
        (2, 32) => DType::I32,
        (2, 64) => DType::I64,
        (3, 16) => DType::F16,
        (3, 24 | 32) => DType::F32,
        (3, 64) => DType::F64,
        // GDAL's CFloat32 and CFloat64: numpy's complex64 and complex128
        (6, 64) => DType::C64,
        (6, 128) => DType::C128,
        (5, _) => {
            return Err(Error::tiff(
                path,
                TiffError::Unsupported,
                format!(
                    "complex integer samples ({bits} bits, GDAL's CInt16/CInt32) have no numpy \
                     dtype; convert them with gdal_translate -ot CFloat32 first"
                ),
            ));
        }
        _ => {
            return Err(Error::tiff(
                path,
                TiffError::Unsupported,
                format!(
                    "BitsPerSample {bits} with SampleFormat {format} is not read by tilestream \
                     (it reads unsigned integers of 1 to 32 and 64 bits, signed integers of 8, \
                     16, 32 and 64 bits, 16, 24, 32 and 64-bit floats, and 64 and 128-bit complex \
                     floats); convert it with \
                     gdal_translate -ot Int16 (or -ot Float32) first"
                ),
            ));
        }
    })
}

/// Whether a CMYK (`Separated`) image is read as GDAL reads it by default, converted to
/// RGBA (8-bit unsigned inks: true), or as its inks (wider samples: false); refuses what
/// GDAL's conversion does not take (other than four samples, an `InkSet` other than
/// CMYK) and packed inks.
fn cmyk_as_rgba(
    path: &Path,
    d: &mut Decoder<Reader>,
    dtype: DType,
    bits: u16,
    bands: usize,
) -> Result<bool> {
    let refuse = |what: String| {
        Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "PhotometricInterpretation",
                value: "5 (CMYK (Separated))".into(),
                reason: format!(
                    "with {what} is not read by tilestream (it reads 8-bit CMYK of four inks as \
                     GDAL does, converted to RGBA, and wider CMYK samples as they are)"
                ),
            },
        ))
    };
    if bits < 8 {
        return refuse(format!("{bits}-bit samples"));
    }
    if dtype == DType::I8 {
        // GDAL converts these too, taking the signed inks as unsigned
        return refuse("signed 8-bit samples".into());
    }
    if dtype != DType::U8 {
        return Ok(false);
    }
    let ink_set = d
        .find_tag_unsigned_vec::<u16>(Tag::Unknown(332))
        .map_err(|e| tiff_err(path, &e))?
        .and_then(|v| v.first().copied())
        .unwrap_or(1);
    if ink_set != 1 {
        return refuse(format!("InkSet {ink_set} (not CMYK)"));
    }
    if bands != 4 {
        return refuse(format!("{bands} samples a pixel"));
    }
    Ok(true)
}

/// The tags a JPEG-compressed file's chunks are decoded with, refusing the layouts
/// libtiff does not take, or takes through its RGBA interface (CMYK, Palette).
fn jpeg_tags(
    path: &Path,
    d: &mut Decoder<Reader>,
    photometric: u16,
    bands: usize,
    planar: bool,
) -> Result<jpeg::JpegTags> {
    use jpeg::Output;
    let refuse = |what: String| {
        Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: "7 (jpeg)".into(),
                reason: format!(
                    "with {what} is not read by tilestream (it reads JPEG of one band, of \
                     three (RGB or YCbCr) or four (RGB and an extra sample, or CMYK), and of \
                     any band count stored band by band); convert with gdal_translate -co \
                     COMPRESS=DEFLATE first"
                ),
            },
        ))
    };
    let output = match (photometric, bands, planar) {
        // CMYK: the inks as stored, then converted to RGBA as for any 8-bit CMYK file
        (5, 4, false) => Output::Raw4,
        (5, _, true) => Output::Gray,
        (3 | 5, ..) => {
            return refuse(format!(
                "PhotometricInterpretation {photometric} ({})",
                decode::photometric_name(photometric)
            ));
        }
        (6, 3, false) => Output::YcbcrToRgb,
        (6, ..) => {
            return refuse(format!(
                "YCbCr of {bands} samples a pixel, or stored by band"
            ));
        }
        (_, 1, _) | (_, _, true) => Output::Gray,
        (_, 3, false) => Output::Raw3,
        (_, 4, false) => Output::Raw4,
        _ => return refuse(format!("{bands} samples a pixel")),
    };
    let tables = match d
        .find_tag(Tag::JPEGTables)
        .map_err(|e| tiff_err(path, &e))?
    {
        None => None,
        Some(v) => Some(v.into_u8_vec().map_err(|e| tiff_err(path, &e))?),
    };
    if tables.as_ref().is_some_and(|t| t.len() > jpeg::MAX_TABLES) {
        return Err(Error::tiff(
            path,
            TiffError::Corrupt,
            format!(
                "the JPEGTables tag holds more than {} bytes, which no JPEG's tables need",
                jpeg::MAX_TABLES
            ),
        ));
    }
    let subsampling = if output == Output::YcbcrToRgb {
        d.find_tag_unsigned_vec::<u16>(Tag::Unknown(530))
            .map_err(|e| tiff_err(path, &e))?
            .and_then(|v| Some((*v.first()?, *v.get(1)?)))
    } else {
        None
    };
    Ok(jpeg::JpegTags {
        tables,
        output,
        subsampling,
    })
}

/// The LERC parameters of a LERC-compressed file: the `LercParameters` tag (50674:
/// version, additional compression; none when absent, as libtiff takes it), and whether
/// its blobs may carry an 8-bit alpha sample as their mask (`ExtraSamples` ending in
/// unassociated alpha, pixel interleave).
fn lerc_tags(
    path: &Path,
    d: &mut Decoder<Reader>,
    dtype: crate::dtype::DType,
    bits: u16,
    bands: usize,
    planar: bool,
) -> Result<lerc::LercTags> {
    let refuse = |reason: String| {
        Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: "34887 (lerc)".into(),
                reason,
            },
        )
    };
    if lerc::data_type(dtype).is_none() || usize::from(bits) != 8 * dtype.size() {
        return Err(refuse(format!(
            "of {bits}-bit {dtype} samples is not read by tilestream, nor by GDAL (LERC \
             stores 8, 16 and 32-bit integers, f32 and f64)"
        )));
    }
    let params = d
        .find_tag_unsigned_vec::<u32>(Tag::Unknown(50674))
        .map_err(|e| tiff_err(path, &e))?;
    let extra = match params.as_deref() {
        None => lerc::Extra::None,
        Some([_, code, ..]) => lerc::Extra::from_code(*code).ok_or_else(|| {
            refuse(format!(
                "with additional compression {code} in LercParameters is not read by \
                 tilestream, nor by GDAL (0 none, 1 Deflate, 2 Zstandard)"
            ))
        })?,
        Some(v) => {
            return Err(refuse(format!(
                "with LercParameters of {} value(s) is not valid (version, additional \
                 compression)",
                v.len()
            )));
        }
    };
    let extra_samples = d
        .find_tag_unsigned_vec::<u16>(Tag::ExtraSamples)
        .map_err(|e| tiff_err(path, &e))?
        .unwrap_or_default();
    let alpha_mask = !planar
        && bands > 1
        && dtype == crate::dtype::DType::U8
        && extra_samples.last() == Some(&2);
    let big_endian = d.byte_order() == tiff::tags::ByteOrder::BigEndian;
    Ok(lerc::LercTags {
        extra,
        alpha_mask,
        big_endian,
    })
}

/// Reads the layout and georeferencing of the first image of a TIFF file.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened; [`Error::Tiff`] if it is not a TIFF tilestream
/// can read (signed packed samples, mixed sample types, JPEG).
pub fn read_layout(path: &Path) -> Result<(TiffLayout, GeoRef)> {
    read_layout_of(path, Source::open(path)?)
}

/// [`read_layout`] of the TIFF `path` already open as `file` (an object is then not asked
/// for its metadata again).
///
/// # Errors
/// As [`read_layout`].
pub fn read_layout_of(path: &Path, file: Source) -> Result<(TiffLayout, GeoRef)> {
    let mut head = [0u8; 4];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| Error::io("read", path, e))?;
    let bigtiff = matches!(head, [b'I', b'I', 43, 0] | [b'M', b'M', 0, 43]);
    let mut d = decoder(path, file)?;
    let (width, height) = d.dimensions().map_err(|e| tiff_err(path, &e))?;
    let tag_u16 = |d: &mut Decoder<Reader>, t: Tag, default: u16| -> Result<u16> {
        Ok(d.find_tag_unsigned_vec::<u16>(t)
            .map_err(|e| tiff_err(path, &e))?
            .and_then(|v| v.first().copied())
            .unwrap_or(default))
    };
    let bands = tag_u16(&mut d, Tag::SamplesPerPixel, 1)? as usize;
    let bits_all = d
        .find_tag_unsigned_vec::<u16>(Tag::BitsPerSample)
        .map_err(|e| tiff_err(path, &e))?
        .unwrap_or_else(|| vec![1]);
    if bits_all.iter().any(|&b| b != bits_all[0]) {
        return Err(Error::tiff(
            path,
            TiffError::Unsupported,
            format!("bands of different bit depths ({bits_all:?}) are not supported"),
        ));
    }
    let format = tag_u16(&mut d, Tag::SampleFormat, 1)?;
    let compression_code = tag_u16(&mut d, Tag::Compression, 1)?;
    let photometric = d
        .find_tag_unsigned_vec::<u16>(Tag::PhotometricInterpretation)
        .map_err(|e| tiff_err(path, &e))?
        .and_then(|v| v.first().copied());
    let predictor = tag_u16(&mut d, Tag::Predictor, 1)?;
    let fill_order = tag_u16(&mut d, Tag::FillOrder, 1)?;
    // every tag that changes how samples decode is checked before the sample type, so
    // that a JPEG or YCbCr file is refused for what it is
    let codec = decode::validate(
        path,
        &decode::SampleTags {
            photometric,
            compression: compression_code,
            predictor,
            fill_order,
            sample_format: format,
            bits: bits_all[0],
            t4_options: d
                .find_tag_unsigned_vec::<u32>(Tag::Unknown(292))
                .map_err(|e| tiff_err(path, &e))?
                .and_then(|v| v.first().copied())
                .unwrap_or(0),
        },
    )?;
    if matches!(codec, Codec::Fax(_)) && bands != 1 {
        return Err(Error::tiff(
            path,
            TiffError::Unsupported,
            format!("CCITT fax coding of {bands} samples a pixel is not read by tilestream"),
        ));
    }
    let dtype = sample_dtype(path, format, bits_all[0])?;
    let planar = tag_u16(&mut d, Tag::PlanarConfiguration, 1)? == 2;
    let jpeg = if codec == Codec::Jpeg {
        Some(jpeg_tags(
            path,
            &mut d,
            photometric.unwrap_or(1),
            bands,
            planar,
        )?)
    } else {
        None
    };
    let lerc = if codec == Codec::Lerc {
        Some(lerc_tags(path, &mut d, dtype, bits_all[0], bands, planar)?)
    } else {
        None
    };
    if codec == Codec::WebP && (!matches!(bands, 3 | 4) || planar) {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: "50001 (webp)".into(),
                reason: format!(
                    "of {bands} band(s){} is not valid (WebP codes three or four \
                     interleaved samples a pixel)",
                    if planar { " stored band by band" } else { "" }
                ),
            },
        ));
    }
    let cmyk = photometric == Some(5) && cmyk_as_rgba(path, &mut d, dtype, bits_all[0], bands)?;
    let compression = decode::compression_label(compression_code);
    let tiled = d.get_chunk_type() == ChunkType::Tile;
    let (cw, ch) = d.chunk_dimensions();
    let (off_tag, cnt_tag) = if tiled {
        (Tag::TileOffsets, Tag::TileByteCounts)
    } else {
        (Tag::StripOffsets, Tag::StripByteCounts)
    };
    let offsets = d.get_tag_u64_vec(off_tag).map_err(|e| tiff_err(path, &e))?;
    let byte_counts = d.get_tag_u64_vec(cnt_tag).map_err(|e| tiff_err(path, &e))?;
    let georef = read_georef(path, &mut d)?;
    let layout = TiffLayout {
        width: width as usize,
        height: height as usize,
        bands,
        dtype,
        bits: bits_all[0],
        planar: planar && bands > 1,
        // libtiff reverses no bits for JPEG (its codec sets TIFF_NOBITREV)
        lsb_first: fill_order == 2 && codec != Codec::Jpeg,
        cmyk,
        tiled,
        chunk: (cw as usize, ch as usize),
        compression,
        codec,
        jpeg,
        lerc,
        photometric: photometric.unwrap_or(1),
        predictor: if codec.uses_predictor() { predictor } else { 1 },
        bigtiff,
        little_endian: d.byte_order() == tiff::tags::ByteOrder::LittleEndian,
        offsets,
        byte_counts,
    };
    let per_plane = layout.chunks_per_plane();
    let want = if layout.planar {
        per_plane * bands
    } else {
        per_plane
    };
    if layout.offsets.len() < want || layout.byte_counts.len() < want {
        return Err(Error::tiff_at(
            path,
            TiffError::ChunkTables {
                offsets: layout.offsets.len(),
                byte_counts: layout.byte_counts.len(),
                width,
                height,
                chunk_width: cw,
                chunk_height: ch,
                expected: want,
            },
        ));
    }
    Ok((layout, georef))
}

impl TiffLayout {
    fn chunks_across(&self) -> usize {
        self.width.div_ceil(self.chunk.0.max(1))
    }
    fn chunks_per_plane(&self) -> usize {
        self.chunks_across() * self.height.div_ceil(self.chunk.1.max(1))
    }
}

/// Most strips or tiles one image may list. The `tiff` crate reads the whole offset and
/// byte-count tables when it opens a file, holding each entry in a 32-byte value while
/// it parses, so this bounds what a file's metadata can cost before any budget is asked:
/// 2^19 entries peak at 48 MiB of RSS in all (measured: a reduction of such a file at
/// `--memory 16MiB`), within the budget plus the fixed overhead; 2^20 reached 73 MiB.
/// That is a 185000 x 185000 image in 256 x 256 tiles.
const MAX_CHUNKS: u64 = 1 << 19;

/// Most entries of the first directory (real files have a few dozen).
const MAX_ENTRIES: u64 = 4096;

/// Reads the first directory's entry count and the counts of its offset and byte-count
/// tables straight from the file, before the `tiff` crate parses anything, and refuses a
/// file whose tables would cost more than [`MAX_CHUNKS`] entries.
fn precheck_tables(path: &Path, file: &Source) -> Result<()> {
    let mut head = [0u8; 16];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| Error::io("read", path, e))?;
    let le = match head.get(..2) {
        Some(b"II") => true,
        Some(b"MM") => false,
        _ => return Ok(()), // the crate says what is wrong
    };
    let u16_at = |b: &[u8]| {
        if le {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        }
    };
    let u32_at = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let u64_at = |b: &[u8]| {
        let a: [u8; 8] = b[..8].try_into().unwrap_or_default();
        if le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    };
    if n < 16 {
        return Ok(());
    }
    let big = u16_at(&head[2..]) == 43;
    let ifd = if big {
        u64_at(&head[8..])
    } else {
        u64::from(u32_at(&head[4..]))
    };
    let mut count = [0u8; 8];
    let got = file
        .read_at(&mut count, ifd)
        .map_err(|e| Error::io("read", path, e))?;
    if got < 8 {
        return Ok(());
    }
    let entries = if big {
        u64_at(&count)
    } else {
        u64::from(u16_at(&count))
    };
    if entries > MAX_ENTRIES {
        return Err(Error::tiff(
            path,
            TiffError::TooLarge,
            format!(
                "its first directory lists {entries} tags; tilestream reads at most {MAX_ENTRIES}"
            ),
        ));
    }
    let (first, size) = if big {
        (ifd + 8, 20u64)
    } else {
        (ifd + 2, 12u64)
    };
    let mut table = vec![0u8; (entries * size) as usize];
    let got = file
        .read_at(&mut table, first)
        .map_err(|e| Error::io("read", path, e))?;
    for e in table[..got - got % size as usize].chunks_exact(size as usize) {
        let tag = u16_at(e);
        let n = if big {
            u64_at(&e[4..])
        } else {
            u64::from(u32_at(&e[4..]))
        };
        // every other tag the crate or tilestream reads holds a few values (bits and
        // formats per sample, georeferencing): a count past 2^16 is a lie that would be
        // allocated as such
        let small = matches!(
            tag,
            258 | 259
                | 262
                | 266
                | 277
                | 284
                | 317
                | 338
                | 339
                | 347
                | 530
                | 33550
                | 33922
                | 34264
                | 34735
                | 34736
                | 34737
                | 42113
        );
        if small && n > 1 << 16 {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!("its tag {tag} claims {n} values; tilestream reads at most 65536"),
            ));
        }
        // any other tag: the crate may parse it as a list too (a BigTIFF entry can claim
        // 2^64 values), and no real tag holds a million values
        if !matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!("its tag {tag} claims {n} values; tilestream reads at most {MAX_CHUNKS}"),
            ));
        }
        // StripOffsets, StripByteCounts, TileOffsets, TileByteCounts
        if matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!(
                    "the image lists {n} strips or tiles; tilestream reads at most {MAX_CHUNKS} \
                     (rewrite it with larger tiles: gdal_translate -co TILED=YES -co \
                     BLOCKXSIZE=1024 -co BLOCKYSIZE=1024)"
                ),
            ));
        }
    }
    Ok(())
}

/// The georeferencing tags of the image `d` is at.
fn read_georef<R: std::io::Read + std::io::Seek>(
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
/// [`Error::Tiff`] when the bytes are no TIFF or its tags cannot be read.
pub fn georef_from_bytes(path: &Path, bytes: &[u8]) -> Result<GeoRef> {
    let mut d = Decoder::new(std::io::Cursor::new(bytes))
        .map_err(|e| tiff_err(path, &e))?
        .with_limits(Limits::default());
    read_georef(path, &mut d)
}

/// What the `tiff` crate reads directories through: a buffered reader of a local file
/// or of an object.
type Reader = BufReader<SourceReader>;

fn decoder(path: &Path, file: Source) -> Result<Decoder<Reader>> {
    precheck_tables(path, &file)?;
    Ok(
        Decoder::new(BufReader::with_capacity(1 << 16, SourceReader::new(file)))
            .map_err(|e| tiff_err(path, &e))?
            .with_limits(Limits::unlimited()),
    )
}

/// A `GDAL_NODATA` text, refused unless it is a plain number (as GDAL writes one:
/// `-9999`, `1e+20`, `nan`, `inf`; white space around it allowed): GDAL reads what
/// follows a number's start by prefix (`0x10` as 16, `5\n6` as 5, anything else as 0), and
/// a mask that differed from GDAL's would be wrong values without a word.
///
/// # Errors
/// [`Error::Invalid`], naming the tag's text.
fn plain_nodata(path: &Path, text: &str) -> Result<String> {
    let t = text.trim();
    if !t.is_empty() && t.parse::<f64>().is_ok() {
        return Ok(t.to_string());
    }
    Err(Error::invalid(format!(
        "{}: its GDAL_NODATA tag {:?} is not a plain number, and GDAL reads such a tag by its \
         prefix; set it to the value meant (gdal_edit.py -a_nodata VALUE) or remove it \
         (gdal_edit.py -unsetnodata)",
        path.display(),
        t.chars().take(40).collect::<String>()
    )))
}

/// Whether a sample of `dtype` holds the nodata value `text` exactly (what an output of
/// that type keeps of its input's nodata).
#[must_use]
#[allow(clippy::float_cmp)] // held means the same value exactly
pub fn holds_nodata(dtype: DType, text: &str) -> bool {
    if !dtype.is_float() {
        return nodata_sample(dtype, text).is_some();
    }
    // a float type holds it when the value reads back unchanged (-9999 in f16 is
    // -10000, 70000 is inf, 1e-40 in f32 is 0: none of them is the nodata value)
    let Ok(v) = text.trim().parse::<f64>() else {
        return false;
    };
    nodata_as(dtype, text).is_some_and(|back| back == v || (back.is_nan() && v.is_nan()))
}

/// The value the pixels of a `dtype` file have where they are nodata `text`: the text's
/// value as a sample of that type (rounded to the type for floats, as the file stores
/// it), or `None` when the type cannot hold it (an integer type and a fraction, NaN or an
/// out-of-range value): then no pixel of the file is nodata.
#[must_use]
#[allow(clippy::float_cmp)] // an integer type holds the value exactly or not at all
pub fn nodata_as(dtype: DType, text: &str) -> Option<f64> {
    use crate::dtype::Element;
    let v: f64 = text.trim().parse().ok()?;
    let sample = nodata_sample(dtype, text)?;
    let back = crate::dispatch_dtype!(dtype, T => bytemuck::pod_read_unaligned::<T>(&sample).to_f64(), complex => return None);
    (dtype.is_float() || back == v).then_some(back)
}

/// Whether the value [`nodata_as`] gives for `text` names the sample exactly once it is
/// the type's again (`T::from_f64`): false for a 64-bit integer beyond 2^53 that the f64
/// rounds to another value (`u64::MAX` itself is kept: its f64 saturates back to it).
#[must_use]
pub fn nodata_round_trips(dtype: DType, text: &str) -> bool {
    use crate::dtype::Element;
    let (Some(v), Some(sample)) = (nodata_as(dtype, text), nodata_sample(dtype, text)) else {
        return false;
    };
    crate::dispatch_dtype!(dtype, T => {
        bytemuck::bytes_of(&T::from_f64(v)) == sample.as_slice()
    }, complex => false)
}

/// A nodata value as GDAL's `GDAL_NODATA` tag text: `nan` for NaN, else the shortest
/// decimal that reads back as `v`.
#[must_use]
pub fn nodata_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else {
        format!("{v}")
    }
}

/// The nodata text of a file as one sample of `dtype`, if that type holds it exactly.
fn nodata_sample(dtype: DType, text: &str) -> Option<Vec<u8>> {
    // tilestream takes no nodata value for complex samples
    if dtype.is_complex() {
        return None;
    }
    let t = text.trim();
    let mut out = vec![0; dtype.size()];
    if dtype.is_float() {
        let v: f64 = t.parse().ok()?;
        crate::dtype::store_f64(&[v], &mut out, dtype);
        return Some(out);
    }
    // an integer exactly, from its digits (u64::MAX is not an f64), or from a number
    // written with a point or an exponent ("0.0", "-1e4")
    let n: i128 = match t.parse::<i128>() {
        Ok(n) => n,
        Err(_) => {
            let v: f64 = t.parse().ok()?;
            if v.fract() != 0.0 || v.abs() >= 2f64.powi(100) {
                return None;
            }
            v as i128
        }
    };
    let bits = 8 * dtype.size() as u32;
    let (lo, hi) = match dtype {
        DType::Bool => (0, 1),
        d if d.is_unsigned() => (0, (1i128 << bits) - 1),
        _ => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
    };
    if n < lo || n > hi {
        return None;
    }
    // two's complement, little-endian: the low bytes are the value in the narrower type
    out.copy_from_slice(&n.to_le_bytes()[..dtype.size()]);
    Some(out)
}

/// True if the path names a TIFF (`.tif` or `.tiff`, case-insensitive).
#[must_use]
pub fn is_tiff_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
}

pub use crate::format::tiff::write::{
    TiffCompression, TiffPredictor, TiffWriteOptions, image_dims, tiff_sample, write_tiled,
};

#[cfg(test)]
mod tests;
