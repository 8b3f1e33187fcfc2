//! GeoTIFF in and out: satellite scenes as tilestream tensors.
//!
//! An image of `B` bands, `H` rows and `W` columns is the tensor `(B, H, W)` (band
//! sequential, whatever the file's interleave), or `(H, W)` with one band, so that
//! `s[3]` is band 4 for `map` as it is for a `.npy` scene.
//!
//! Reading: the layout (strips or tiles, planar or pixel-interleaved, compression,
//! predictor) and the georeferencing tags are parsed with the `tiff` crate. An
//! uncompressed single-band or planar file whose strips lie back to back is a plain
//! array at an offset, reached through memory-mapped windows like a `.npy`; anything
//! else is decoded chunk by chunk by [`Chunked`](super::chunked::Chunked), the `tiff`
//! crate doing the decompression and predictor (one decoder per thread).
//!
//! Writing ([`write_tiled`]): 512x512 tiles (by default), Deflate or ZSTD compressed in
//! parallel, planar or pixel-interleaved, BigTIFF when the data could pass 4 GB, with
//! the georeferencing tags of an input copied verbatim.

use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tiff::decoder::{ChunkType, Decoder, Limits};
use tiff::tags::Tag;

use super::chunked::ChunkSource;
use crate::dtype::DType;
use crate::error::{Error, Result};

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
    /// Element type of a sample.
    pub dtype: DType,
    /// True when each band is stored on its own (`PlanarConfiguration` 2).
    pub planar: bool,
    /// True when tiled, false when striped.
    pub tiled: bool,
    /// Chunk (tile or strip) width and height in pixels.
    pub chunk: (usize, usize),
    /// Compression name (`none`, `deflate`, `lzw`, `zstd`, `packbits`, ...).
    pub compression: String,
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
    Error::format(path, format!("cannot read TIFF: {e}"))
}

fn compression_name(code: u16) -> String {
    match code {
        1 => "none".into(),
        5 => "lzw".into(),
        7 => "jpeg".into(),
        8 | 32946 => "deflate".into(),
        32773 => "packbits".into(),
        50000 => "zstd".into(),
        34887 => "lerc".into(),
        50001 => "webp".into(),
        c => format!("code {c}"),
    }
}

fn sample_dtype(path: &Path, format: u16, bits: u16) -> Result<DType> {
    Ok(match (format, bits) {
        (1, 8) => DType::U8,
        (1, 16) => DType::U16,
        (1, 32) => DType::U32,
        (1, 64) => DType::U64,
        (2, 8) => DType::I8,
        (2, 16) => DType::I16,
        (2, 32) => DType::I32,
        (2, 64) => DType::I64,
        (3, 16) => DType::F16,
        (3, 32) => DType::F32,
        (3, 64) => DType::F64,
        _ => {
            return Err(Error::format(
                path,
                format!(
                    "unsupported TIFF sample type: SampleFormat {format} with {bits} bits \
                     (tilestream reads 8-64 bit integers and 16-64 bit floats)"
                ),
            ));
        }
    })
}

/// Reads the layout and georeferencing of the first image of a TIFF file.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened; [`Error::Format`] if it is not a TIFF tilestream
/// can read (bit-packed samples, mixed sample types, JPEG).
pub fn read_layout(path: &Path) -> Result<(TiffLayout, GeoRef)> {
    let file = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let mut head = [0u8; 4];
    file.read_exact_at(&mut head, 0)
        .map_err(|e| Error::io("read", path, e))?;
    let bigtiff = matches!(head, [b'I', b'I', 43, 0] | [b'M', b'M', 0, 43]);
    let mut d = decoder(path, file)?;
    let (width, height) = d.dimensions().map_err(|e| tiff_err(path, &e))?;
    let tag_u16 = |d: &mut Decoder<BufReader<File>>, t: Tag, default: u16| -> Result<u16> {
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
        return Err(Error::format(
            path,
            format!("bands of different bit depths ({bits_all:?}) are not supported"),
        ));
    }
    let format = tag_u16(&mut d, Tag::SampleFormat, 1)?;
    let dtype = sample_dtype(path, format, bits_all[0])?;
    let planar = tag_u16(&mut d, Tag::PlanarConfiguration, 1)? == 2;
    let compression_code = tag_u16(&mut d, Tag::Compression, 1)?;
    let compression = compression_name(compression_code);
    if matches!(compression_code, 6 | 7) {
        return Err(Error::format(
            path,
            "JPEG-compressed TIFFs are lossy imagery tilestream does not decode; convert with \
             gdal_translate -co COMPRESS=DEFLATE first",
        ));
    }
    let predictor = tag_u16(&mut d, Tag::Predictor, 1)?;
    let tiled = d.get_chunk_type() == ChunkType::Tile;
    let (cw, ch) = d.chunk_dimensions();
    let (off_tag, cnt_tag) = if tiled {
        (Tag::TileOffsets, Tag::TileByteCounts)
    } else {
        (Tag::StripOffsets, Tag::StripByteCounts)
    };
    let offsets = d.get_tag_u64_vec(off_tag).map_err(|e| tiff_err(path, &e))?;
    let byte_counts = d.get_tag_u64_vec(cnt_tag).map_err(|e| tiff_err(path, &e))?;
    let f64s = |d: &mut Decoder<BufReader<File>>, t: Tag| -> Result<Option<Vec<f64>>> {
        match d.find_tag(t).map_err(|e| tiff_err(path, &e))? {
            None => Ok(None),
            Some(v) => v.into_f64_vec().map(Some).map_err(|e| tiff_err(path, &e)),
        }
    };
    let ascii = |d: &mut Decoder<BufReader<File>>, t: Tag| -> Result<Option<String>> {
        match d.find_tag(t).map_err(|e| tiff_err(path, &e))? {
            None => Ok(None),
            Some(v) => v.into_string().map(Some).map_err(|e| tiff_err(path, &e)),
        }
    };
    let georef = GeoRef {
        pixel_scale: f64s(&mut d, Tag::ModelPixelScaleTag)?,
        tiepoint: f64s(&mut d, Tag::ModelTiepointTag)?,
        transformation: f64s(&mut d, Tag::ModelTransformationTag)?,
        geo_keys: d
            .find_tag_unsigned_vec::<u16>(Tag::GeoKeyDirectoryTag)
            .map_err(|e| tiff_err(path, &e))?,
        geo_doubles: f64s(&mut d, Tag::GeoDoubleParamsTag)?,
        geo_ascii: ascii(&mut d, Tag::GeoAsciiParamsTag)?,
        nodata: ascii(&mut d, Tag::GdalNodata)?.map(|s| s.trim_end_matches('\0').to_string()),
    };
    let layout = TiffLayout {
        width: width as usize,
        height: height as usize,
        bands,
        dtype,
        planar: planar && bands > 1,
        tiled,
        chunk: (cw as usize, ch as usize),
        compression,
        predictor,
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
        return Err(Error::format(
            path,
            format!(
                "the file lists {} chunk offsets and {} byte counts; its {}x{} image in {}x{} \
                 chunks needs {want}",
                layout.offsets.len(),
                layout.byte_counts.len(),
                width,
                height,
                cw,
                ch
            ),
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

fn decoder(path: &Path, file: File) -> Result<Decoder<BufReader<File>>> {
    Ok(Decoder::new(BufReader::with_capacity(1 << 16, file))
        .map_err(|e| tiff_err(path, &e))?
        .with_limits(Limits::unlimited()))
}

/// Decodes the strips or tiles of a TIFF for [`Chunked`](super::chunked::Chunked), with
/// a pool of decoders (one per thread that asks at once).
#[derive(Debug)]
pub struct TiffChunks {
    path: PathBuf,
    layout: TiffLayout,
    chunk_shape: Vec<usize>,
    pool: Mutex<Vec<Decoder<BufReader<File>>>>,
}

impl TiffChunks {
    /// A chunk source for the TIFF at `path` with the given layout.
    #[must_use]
    pub fn new(path: &Path, layout: TiffLayout) -> Self {
        let (cw, ch) = layout.chunk;
        let chunk_shape = match (layout.bands, layout.planar) {
            (1, _) => vec![ch, cw],
            (_, true) => vec![1, ch, cw],
            (b, false) => vec![b, ch, cw],
        };
        TiffChunks {
            path: path.to_path_buf(),
            layout,
            chunk_shape,
            pool: Mutex::new(Vec::new()),
        }
    }

    fn with_decoder<T>(
        &self,
        f: impl FnOnce(&mut Decoder<BufReader<File>>) -> Result<T>,
    ) -> Result<T> {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        let mut d = match pooled {
            Some(d) => d,
            None => {
                let file = File::open(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
                decoder(&self.path, file)?
            }
        };
        let r = f(&mut d);
        if let Ok(mut p) = self.pool.lock() {
            p.push(d);
        }
        r
    }
}

impl ChunkSource for TiffChunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk_shape
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let l = &self.layout;
        let (band, cy, cx) = match pos.len() {
            2 => (0, pos[0], pos[1]),
            _ => (pos[0], pos[1], pos[2]),
        };
        let index = (band * l.chunks_per_plane() + cy * l.chunks_across() + cx) as u32;
        let es = l.dtype.size();
        let (cw, _) = l.chunk;
        let spp = if l.planar { 1 } else { l.bands };
        self.with_decoder(|d| {
            let (dw, dh) = d.chunk_data_dimensions(index);
            let (dw, dh) = (dw as usize, dh as usize);
            let pref = d
                .image_chunk_buffer_layout(index)
                .map_err(|e| tiff_err(&self.path, &e))?;
            let stride = pref
                .row_stride
                .map_or(dw * spp * es, std::num::NonZero::get);
            let mut raw = vec![0u8; pref.len];
            d.read_chunk_bytes(index, &mut raw)
                .map_err(|e| tiff_err(&self.path, &e))?;
            let ch = self.chunk_shape[self.chunk_shape.len() - 2];
            if spp == 1 {
                for y in 0..dh {
                    out[y * cw * es..(y * cw + dw) * es]
                        .copy_from_slice(&raw[y * stride..y * stride + dw * es]);
                }
            } else {
                // pixel-interleaved: scatter each sample to its band plane
                for y in 0..dh {
                    let row = &raw[y * stride..y * stride + dw * spp * es];
                    for (x, px) in row.chunks_exact(spp * es).enumerate() {
                        for (b, s) in px.chunks_exact(es).enumerate() {
                            let at = ((b * ch + y) * cw + x) * es;
                            out[at..at + es].copy_from_slice(s);
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// True if the path names a TIFF (`.tif` or `.tiff`, case-insensitive).
#[must_use]
pub fn is_tiff_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
}
