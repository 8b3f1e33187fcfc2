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
mod georef;
pub mod jpeg;
pub mod lerc;
pub mod lzma;
mod nodata;
mod options;
mod precheck;
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
use georef::read_georef;
pub use georef::{GeoRef, georef_from_bytes};
pub use nodata::{holds_nodata, nodata_as, nodata_round_trips, nodata_text};
use precheck::precheck_tables;

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
    let codec = match codec {
        Codec::Lzma(_) => Codec::Lzma(lzma_limit(path, &mut d, &offsets, &byte_counts)?),
        c => c,
    };
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

/// What the `tiff` crate reads directories through: a buffered reader of a local file
/// or of an object.
type Reader = BufReader<SourceReader>;

/// The memory liblzma needs for the chunks of an LZMA-compressed file: what the `.xz`
/// header of its first stored chunk declares ([`lzma::memory_limit`]). libtiff writes
/// every chunk of a file with the same options, and a chunk that needs more is refused
/// when it is decoded.
fn lzma_limit(
    path: &Path,
    d: &mut Decoder<Reader>,
    offsets: &[u64],
    counts: &[u64],
) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let Some((&offset, &count)) = offsets.iter().zip(counts).find(|&(_, &n)| n > 0) else {
        return Ok(lzma::DECODER_OVERHEAD);
    };
    // at most HEADER_BYTES, so the cast cannot truncate
    let mut head = vec![0u8; count.min(lzma::HEADER_BYTES as u64) as usize];
    let r = d.inner();
    r.seek(SeekFrom::Start(offset))
        .and_then(|_| r.read_exact(&mut head))
        .map_err(|e| Error::io("read", path, e))?;
    lzma::memory_limit(&head).map_err(|reason| {
        Error::tiff_at(
            path,
            TiffError::Decode {
                chunk: "the first chunk".into(),
                reason,
            },
        )
    })
}

fn decoder(path: &Path, file: Source) -> Result<Decoder<Reader>> {
    precheck_tables(path, &file)?;
    Ok(
        Decoder::new(BufReader::with_capacity(1 << 16, SourceReader::new(file)))
            .map_err(|e| tiff_err(path, &e))?
            .with_limits(Limits::unlimited()),
    )
}

/// True if the path names a TIFF (`.tif` or `.tiff`, case-insensitive).
#[must_use]
pub fn is_tiff_path(path: &Path) -> bool {
    crate::format::kind::is_tiff_name(path)
}

pub use crate::format::tiff::write::{
    TiffCompression, TiffPredictor, TiffWriteOptions, image_dims, tiff_sample, write_tiled,
};

#[cfg(test)]
mod tests;
