//! GeoTIFF in and out: satellite scenes as tilestream tensors.
//!
//! An image of `B` bands, `H` rows and `W` columns is the tensor `(B, H, W)` (band
//! sequential, whatever the file's interleave), or `(H, W)` with one band, so that
//! `s[3]` is band 4 for `map` as it is for a `.npy` scene.
//!
//! Reading: the layout (strips or tiles, planar or pixel-interleaved, compression,
//! predictor) and the georeferencing tags are parsed with the `tiff` crate, and every
//! tag that changes how samples decode is checked ([`tiff_decode::validate`]): a file is
//! read exactly as GDAL reads it, or refused in one line. An uncompressed single-band or
//! planar file whose strips lie back to back is a plain array at an offset, reached
//! through memory-mapped windows like a `.npy`; anything else is decoded chunk by chunk
//! by [`Chunked`](super::chunked::Chunked), each chunk's bytes read with one positioned
//! read and decoded by [`tiff_decode`].
//!
//! Writing ([`write_tiled`]): 512x512 tiles (by default), Deflate or ZSTD compressed in
//! parallel, planar or pixel-interleaved, BigTIFF when the data could pass 4 GB, with
//! the georeferencing tags of an input copied verbatim.

use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tiff::decoder::{ChunkType, Decoder, Limits};
use tiff::tags::Tag;

use super::chunked::ChunkSource;
use super::tiff_decode::{self, ChunkRows, Codec};
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
    /// Compression name (`none`, `deflate`, `lzw`, `zstd`, `packbits`).
    pub compression: String,
    /// The codec that decodes the chunks.
    pub codec: Codec,
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
                    "BitsPerSample {bits} with SampleFormat {format} is not read by tilestream \
                     (it reads 8, 16, 32 and 64-bit integers and 16, 32 and 64-bit floats); \
                     widen it with gdal_translate -ot Byte (or -ot UInt16) first"
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
    let file = super::own_files::open_input(path)?;
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
    let compression_code = tag_u16(&mut d, Tag::Compression, 1)?;
    let photometric = d
        .find_tag_unsigned_vec::<u16>(Tag::PhotometricInterpretation)
        .map_err(|e| tiff_err(path, &e))?
        .and_then(|v| v.first().copied());
    let predictor = tag_u16(&mut d, Tag::Predictor, 1)?;
    // every tag that changes how samples decode is checked before the sample type, so
    // that a JPEG or YCbCr file is refused for what it is
    let codec = tiff_decode::validate(
        path,
        &tiff_decode::SampleTags {
            photometric,
            compression: compression_code,
            predictor,
            fill_order: tag_u16(&mut d, Tag::FillOrder, 1)?,
            sample_format: format,
            bits: bits_all[0],
        },
    )?;
    let dtype = sample_dtype(path, format, bits_all[0])?;
    let planar = tag_u16(&mut d, Tag::PlanarConfiguration, 1)? == 2;
    let compression = tiff_decode::compression_label(compression_code);
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
        codec,
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

/// Most strips or tiles one image may list. The `tiff` crate reads the whole offset and
/// byte-count tables when it opens a file, holding each entry in a 32-byte value while
/// it parses, so this bounds what a file's metadata can cost (a million entries: 32 MiB
/// for a moment, then the 16 MiB tables, counted in the budget).
const MAX_CHUNKS: u64 = 1 << 20;

/// Most entries of the first directory (real files have a few dozen).
const MAX_ENTRIES: u64 = 4096;

/// Reads the first directory's entry count and the counts of its offset and byte-count
/// tables straight from the file, before the `tiff` crate parses anything, and refuses a
/// file whose tables would cost more than [`MAX_CHUNKS`] entries.
fn precheck_tables(path: &Path, file: &File) -> Result<()> {
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
        return Err(Error::format(
            path,
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
            return Err(Error::format(
                path,
                format!("its tag {tag} claims {n} values; tilestream reads at most 65536"),
            ));
        }
        // any other tag: the crate may parse it as a list too (a BigTIFF entry can claim
        // 2^64 values), and no real tag holds a million values
        if !matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::format(
                path,
                format!("its tag {tag} claims {n} values; tilestream reads at most {MAX_CHUNKS}"),
            ));
        }
        // StripOffsets, StripByteCounts, TileOffsets, TileByteCounts
        if matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::format(
                path,
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

fn decoder(path: &Path, file: File) -> Result<Decoder<BufReader<File>>> {
    precheck_tables(path, &file)?;
    Ok(Decoder::new(BufReader::with_capacity(1 << 16, file))
        .map_err(|e| tiff_err(path, &e))?
        .with_limits(Limits::unlimited()))
}

/// Decodes the strips or tiles of a TIFF for [`Chunked`](super::chunked::Chunked): each
/// chunk's stored bytes are read with one positioned read and decoded by
/// [`tiff_decode`], exactly as GDAL reads them.
#[derive(Debug)]
pub struct TiffChunks {
    path: PathBuf,
    file: File,
    file_len: u64,
    layout: TiffLayout,
    chunk_shape: Vec<usize>,
    /// One sample of the value a sparse chunk (offset and byte count 0) reads as: the
    /// nodata value when the file has one that the sample type holds, else zero (GDAL's
    /// rule).
    sparse: Vec<u8>,
}

impl TiffChunks {
    /// A chunk source for the TIFF at `path` with the given layout; `nodata` is the
    /// file's `GDAL_NODATA` text, which sparse chunks read as.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened.
    pub fn new(path: &Path, layout: TiffLayout, nodata: Option<&str>) -> Result<Self> {
        let (cw, ch) = layout.chunk;
        let chunk_shape = match (layout.bands, layout.planar) {
            (1, _) => vec![ch, cw],
            (_, true) => vec![1, ch, cw],
            (b, false) => vec![b, ch, cw],
        };
        let file = super::own_files::open_input(path)?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::io("read the size of", path, e))?
            .len();
        let sparse = nodata
            .and_then(|t| nodata_sample(layout.dtype, t))
            .unwrap_or_else(|| vec![0; layout.dtype.size()]);
        Ok(TiffChunks {
            path: path.to_path_buf(),
            file,
            file_len,
            layout,
            chunk_shape,
            sparse,
        })
    }
}

/// The nodata text of a file as one sample of `dtype`, if that type holds it exactly.
fn nodata_sample(dtype: DType, text: &str) -> Option<Vec<u8>> {
    let v: f64 = text.trim().parse().ok()?;
    if !dtype.is_float() {
        let bits = 8 * dtype.size() as i32;
        let (lo, hi) = if dtype.is_unsigned() {
            (0.0, 2f64.powi(bits) - 1.0)
        } else {
            (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0)
        };
        if !(v.fract() == 0.0 && v >= lo && v <= hi) {
            return None;
        }
    }
    let mut out = vec![0; dtype.size()];
    crate::dtype::store_f64(&[v], &mut out, dtype);
    Some(out)
}

thread_local! {
    /// Stored bytes of the chunk being decoded, and the decoded pixel-interleaved chunk,
    /// reused across the chunks a decode thread handles.
    static SCRATCH: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

impl ChunkSource for TiffChunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk_shape
    }

    fn resident_bytes(&self) -> u64 {
        8 * (self.layout.offsets.len() + self.layout.byte_counts.len()) as u64
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let l = &self.layout;
        let (band, cy, cx) = match pos.len() {
            2 => (0, pos[0], pos[1]),
            _ => (pos[0], pos[1], pos[2]),
        };
        let index = band * l.chunks_per_plane() + cy * l.chunks_across() + cx;
        let es = l.dtype.size();
        let (cw, ch) = l.chunk;
        let spp = if l.planar { 1 } else { l.bands };
        // a tile is stored whole (padding included); a strip at the bottom holds only
        // the rows left
        let rows = if l.tiled {
            ch
        } else {
            ch.min(l.height - cy * ch)
        };
        let geometry = ChunkRows {
            rows,
            row_bytes: cw * spp * es,
            spp,
            es,
        };
        let what = format!("TIFF chunk {index} (band {band}, row {cy}, column {cx})");
        let (offset, count) = (l.offsets[index], l.byte_counts[index]);
        let need = geometry.bytes();
        if offset == 0 && count == 0 {
            // a sparse chunk (GDAL's SPARSE_OK): nodata, or zeros
            for s in out.chunks_exact_mut(es) {
                s.copy_from_slice(&self.sparse);
            }
            return Ok(());
        }
        // stored bytes beyond twice the decoded size (plus a margin) cannot be a chunk of
        // any of the codecs read here; refusing them bounds the read buffer
        let limit = 2 * need as u64 + 4096;
        if count > limit || offset.checked_add(count).is_none_or(|e| e > self.file_len) {
            return Err(Error::format(
                &self.path,
                format!(
                    "{what} claims {count} bytes at offset {offset}, but the file has {} bytes                      and the chunk decodes to {need}: the file is truncated or corrupt",
                    self.file_len
                ),
            ));
        }
        SCRATCH.with_borrow_mut(|(stored, decoded)| {
            stored.resize(count as usize, 0);
            self.file
                .read_exact_at(stored, offset)
                .map_err(|e| Error::io("read", &self.path, e))?;
            let target: &mut [u8] = if spp == 1 {
                // one band per chunk: decode straight into the chunk's rows
                &mut out[..need]
            } else {
                decoded.resize(need, 0);
                decoded
            };
            tiff_decode::decompress(&self.path, &what, l.codec, stored, target)?;
            tiff_decode::unpredict(&geometry, l.little_endian, l.predictor, target);
            if spp > 1 {
                // pixel-interleaved: gather each band's samples into its plane
                let stride = geometry.row_bytes;
                for y in 0..rows {
                    let row = &decoded[y * stride..(y + 1) * stride];
                    for b in 0..spp {
                        let at = (b * ch + y) * cw * es;
                        let dst = &mut out[at..at + cw * es];
                        match es {
                            1 => gather::<1>(row, spp, b, dst),
                            2 => gather::<2>(row, spp, b, dst),
                            4 => gather::<4>(row, spp, b, dst),
                            _ => gather::<8>(row, spp, b, dst),
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

/// Copies sample `b` of every `spp`-sample pixel of `row` (samples of `N` bytes) into
/// `dst`, one after another.
fn gather<const N: usize>(row: &[u8], spp: usize, b: usize, dst: &mut [u8]) {
    let src: &[[u8; N]] = bytemuck::cast_slice(row);
    let dst: &mut [[u8; N]] = bytemuck::cast_slice_mut(dst);
    for (x, d) in dst.iter_mut().enumerate() {
        *d = src[x * spp + b];
    }
}

/// True if the path names a TIFF (`.tif` or `.tiff`, case-insensitive).
#[must_use]
pub fn is_tiff_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"))
}

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
        let spec = super::CodecSpec::parse(s, || {
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

/// How [`write_tiled`] lays out a GeoTIFF.
#[derive(Clone, Debug, PartialEq)]
pub struct TiffWriteOptions {
    /// Tile side in pixels (a multiple of 16).
    pub tile: usize,
    /// Tile compression.
    pub compression: TiffCompression,
    /// Pixel-interleaved (all bands of a pixel together) instead of band-sequential.
    pub pixel_interleave: bool,
    /// Georeferencing to write (tags copied as they are).
    pub georef: Option<GeoRef>,
    /// Memory the encoder may hold (tiles in flight, raw and compressed).
    pub memory: u64,
    /// BigTIFF: `None` chooses it when the data passes 4 GB; `Some` forces it on or off
    /// (off fails for files that need it).
    pub bigtiff: Option<bool>,
}

impl Default for TiffWriteOptions {
    fn default() -> Self {
        TiffWriteOptions {
            tile: 512,
            compression: TiffCompression::Deflate(6),
            pixel_interleave: false,
            georef: None,
            memory: 64 << 20,
            bigtiff: None,
        }
    }
}

/// Above this much data a GeoTIFF is written as BigTIFF (32-bit offsets end at 4 GiB;
/// compression may not bring the file under it, so uncompressed size decides, less a
/// margin for the directory).
const BIGTIFF_ABOVE: u64 = (4 << 30) - (64 << 20);

/// `(bands, height, width)` of a tensor shape written as an image.
///
/// # Errors
/// [`Error::Invalid`] for shapes that are not 2-D or 3-D, or that hold no pixels.
pub fn image_dims(shape: &[usize]) -> Result<(usize, usize, usize)> {
    match *shape {
        _ if shape.contains(&0) => Err(Error::invalid(format!(
            "a GeoTIFF cannot hold an image without pixels; this output has shape {}",
            super::fmt_shape(shape)
        ))),
        [h, w] => Ok((1, h, w)),
        [b, h, w] => Ok((b, h, w)),
        _ => Err(Error::invalid(format!(
            "a GeoTIFF holds a (rows, cols) or (bands, rows, cols) image; this output has shape {}",
            super::fmt_shape(shape)
        ))),
    }
}

/// TIFF `(SampleFormat, BitsPerSample)` of a dtype.
///
/// # Errors
/// [`Error::Invalid`] for dtypes a TIFF cannot hold (bool, bf16).
pub fn tiff_sample(dtype: DType) -> Result<(u16, u16)> {
    let bits = (dtype.size() * 8) as u16;
    Ok(match dtype {
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => (1, bits),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => (2, bits),
        DType::F16 | DType::F32 | DType::F64 => (3, bits),
        DType::Bool | DType::BF16 => {
            return Err(Error::invalid(format!(
                "a GeoTIFF cannot hold {dtype}: give --dtype u8 (for bool) or f32 (for bf16)"
            )));
        }
    })
}

/// One IFD entry: tag, TIFF type, count and the value bytes (little-endian).
struct Entry {
    tag: u16,
    typ: u16,
    count: u64,
    data: Vec<u8>,
}

fn shorts(tag: u16, v: &[u16]) -> Entry {
    Entry {
        tag,
        typ: 3,
        count: v.len() as u64,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn longs(tag: u16, v: &[u64], big: bool) -> Entry {
    if big {
        Entry {
            tag,
            typ: 16,
            count: v.len() as u64,
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    } else {
        Entry {
            tag,
            typ: 4,
            count: v.len() as u64,
            data: v.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect(),
        }
    }
}

fn doubles(tag: u16, v: &[f64]) -> Entry {
    Entry {
        tag,
        typ: 12,
        count: v.len() as u64,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn ascii(tag: u16, s: &str) -> Entry {
    let mut data = s.as_bytes().to_vec();
    data.push(0);
    Entry {
        tag,
        typ: 2,
        count: data.len() as u64,
        data,
    }
}

/// Serializes an IFD placed at `at`, its out-of-line values right after it.
fn ifd_bytes(mut entries: Vec<Entry>, at: u64, big: bool) -> Vec<u8> {
    entries.sort_by_key(|e| e.tag);
    let (count_len, entry_len, next_len, inline) = if big {
        (8u64, 20u64, 8u64, 8usize)
    } else {
        (2, 12, 4, 4)
    };
    let head = count_len + entry_len * entries.len() as u64 + next_len;
    let mut out = Vec::new();
    let mut extra: Vec<u8> = Vec::new();
    if big {
        out.extend((entries.len() as u64).to_le_bytes());
    } else {
        out.extend((entries.len() as u16).to_le_bytes());
    }
    for e in &entries {
        out.extend(e.tag.to_le_bytes());
        out.extend(e.typ.to_le_bytes());
        if big {
            out.extend(e.count.to_le_bytes());
        } else {
            out.extend((e.count as u32).to_le_bytes());
        }
        if e.data.len() <= inline {
            let mut v = e.data.clone();
            v.resize(inline, 0);
            out.extend(v);
        } else {
            if extra.len() % 2 == 1 {
                extra.push(0);
            }
            let off = at + head + extra.len() as u64;
            if big {
                out.extend(off.to_le_bytes());
            } else {
                out.extend((off as u32).to_le_bytes());
            }
            extra.extend(&e.data);
        }
    }
    out.extend(vec![0u8; next_len as usize]);
    out.extend(extra);
    out
}

/// Writes a tiled GeoTIFF to `dest` from little-endian C-order `(bands, height, width)`
/// data that `read(at, buf)` reads by byte offset (the staged output of a run).
/// Tiles are compressed in parallel, a batch at a time within `opts.memory`, and
/// appended in order; the directory goes at the end.
///
/// # Errors
/// [`Error::Io`] on a failed read or write; [`Error::Invalid`] for a shape or dtype a
/// TIFF cannot hold.
pub fn write_tiled(
    dest: &File,
    dest_path: &Path,
    shape: &[usize],
    dtype: DType,
    opts: &TiffWriteOptions,
    read: &(dyn Fn(u64, &mut [u8]) -> Result<()> + Sync),
) -> Result<u64> {
    use rayon::prelude::*;
    let (bands, height, width) = image_dims(shape)?;
    let (format, bits) = tiff_sample(dtype)?;
    let es = dtype.size();
    let t = opts.tile.max(16);
    let across = width.div_ceil(t);
    let down = height.div_ceil(t);
    let pixel = opts.pixel_interleave && bands > 1;
    let (planes, spp_chunk) = if pixel { (1, bands) } else { (bands, 1) };
    let n_chunks = planes * across * down;
    let nbytes = (bands * height * width * es) as u64;
    let big = opts.bigtiff.unwrap_or(nbytes > BIGTIFF_ABOVE);
    let chunk_bytes = t * t * spp_chunk * es;
    let batch = ((opts.memory / (2 * chunk_bytes as u64).max(1)) as usize)
        .clamp(1, 4 * rayon::current_num_threads().max(1));
    let wr = |at: u64, b: &[u8]| {
        dest.write_all_at(b, at)
            .map_err(|e| Error::io("write", dest_path, e))
    };
    // header; the first IFD's offset is patched at the end
    let mut pos: u64 = if big {
        wr(0, &[b'I', b'I', 43, 0, 8, 0, 0, 0])?;
        16
    } else {
        wr(0, &[b'I', b'I', 42, 0])?;
        8
    };
    let encode = |k: usize| -> Result<Vec<u8>> {
        let plane = k / (across * down);
        let (ty, tx) = ((k % (across * down)) / across, k % across);
        let (y0, x0) = (ty * t, tx * t);
        let rows = t.min(height - y0);
        let cols = t.min(width - x0);
        let mut raw = vec![0u8; chunk_bytes];
        let mut line = vec![0u8; cols * es];
        for y in 0..rows {
            if pixel {
                for b in 0..bands {
                    let at = (((b * height + y0 + y) * width + x0) * es) as u64;
                    read(at, &mut line)?;
                    for x in 0..cols {
                        let o = ((y * t + x) * bands + b) * es;
                        raw[o..o + es].copy_from_slice(&line[x * es..(x + 1) * es]);
                    }
                }
            } else {
                let at = (((plane * height + y0 + y) * width + x0) * es) as u64;
                read(at, &mut raw[y * t * es..(y * t + cols) * es])?;
            }
        }
        match opts.compression {
            TiffCompression::None => Ok(raw),
            TiffCompression::Deflate(level) => {
                use std::io::Write as _;
                let mut z = flate2::write::ZlibEncoder::new(
                    Vec::with_capacity(chunk_bytes / 2),
                    flate2::Compression::new(level),
                );
                z.write_all(&raw)
                    .and_then(|()| z.finish())
                    .map_err(|e| Error::io("compress a tile of", dest_path, e))
            }
            TiffCompression::Zstd(level) => zstd::bulk::compress(&raw, level)
                .map_err(|e| Error::io("compress a tile of", dest_path, e)),
        }
    };
    let mut offsets = Vec::with_capacity(n_chunks);
    let mut counts = Vec::with_capacity(n_chunks);
    let all: Vec<usize> = (0..n_chunks).collect();
    for group in all.chunks(batch) {
        let done: Vec<Result<Vec<u8>>> = group.par_iter().map(|&k| encode(k)).collect();
        for c in done {
            let c = c?;
            wr(pos, &c)?;
            offsets.push(pos);
            counts.push(c.len() as u64);
            pos += c.len() as u64;
        }
    }
    if !big && pos > u64::from(u32::MAX) - (1 << 20) {
        return Err(Error::invalid(format!(
            "{}: the compressed tiles pass 4 GiB, more than a classic TIFF can address; \
             write it as BigTIFF (--tiff-bigtiff yes)",
            dest_path.display()
        )));
    }
    pos += pos % 2;
    let b16 = |v: usize| u16::try_from(v).unwrap_or(u16::MAX);
    let mut e = vec![
        longs(256, &[width as u64], false),
        longs(257, &[height as u64], false),
        shorts(258, &vec![bits; bands]),
        shorts(
            259,
            &[match opts.compression {
                TiffCompression::None => 1,
                TiffCompression::Deflate(_) => 8,
                TiffCompression::Zstd(_) => 50000,
            }],
        ),
        shorts(262, &[1]),
        shorts(277, &[b16(bands)]),
        shorts(284, &[if pixel || bands == 1 { 1 } else { 2 }]),
        shorts(322, &[b16(t)]),
        shorts(323, &[b16(t)]),
        longs(324, &offsets, big),
        longs(325, &counts, big),
        shorts(339, &vec![format; bands]),
    ];
    if bands > 1 {
        e.push(shorts(338, &vec![0; bands - 1]));
    }
    if let Some(g) = &opts.georef {
        if let Some(v) = &g.pixel_scale {
            e.push(doubles(33550, v));
        }
        if let Some(v) = &g.tiepoint {
            e.push(doubles(33922, v));
        }
        if let Some(v) = &g.transformation {
            e.push(doubles(34264, v));
        }
        if let Some(v) = &g.geo_keys {
            e.push(shorts(34735, v));
        }
        if let Some(v) = &g.geo_doubles {
            e.push(doubles(34736, v));
        }
        if let Some(v) = &g.geo_ascii {
            e.push(ascii(34737, v.trim_end_matches('\0')));
        }
        if let Some(v) = &g.nodata {
            e.push(ascii(42113, v));
        }
    }
    let ifd = ifd_bytes(e, pos, big);
    wr(pos, &ifd)?;
    if big {
        wr(8, &pos.to_le_bytes())?;
    } else {
        wr(4, &(pos as u32).to_le_bytes())?;
    }
    let end = pos + ifd.len() as u64;
    dest.set_len(end)
        .map_err(|e| Error::io("size", dest_path, e))?;
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::zarr::ZarrCompression;

    #[test]
    fn compression_specs_parse_with_levels_in_range() {
        let t = |s: &str| s.parse::<TiffCompression>();
        assert_eq!(t("deflate").ok(), Some(TiffCompression::Deflate(6)));
        assert_eq!(t("DEFLATE:3").ok(), Some(TiffCompression::Deflate(3)));
        assert_eq!(t("zstd").ok(), Some(TiffCompression::Zstd(9)));
        assert_eq!(t("none").ok(), Some(TiffCompression::None));
        for bad in ["deflate:10", "deflate:0", "zstd:x", "none:1", "lzw", ""] {
            assert!(t(bad).is_err(), "{bad}");
        }
        let z = |s: &str| s.parse::<ZarrCompression>();
        assert_eq!(z("blosc:9").ok(), Some(ZarrCompression::Blosc(9)));
        assert_eq!(z("gzip").ok(), Some(ZarrCompression::Gzip(5)));
        assert_eq!(z("zstd:-3").ok(), Some(ZarrCompression::Zstd(-3)));
        for bad in ["gzip:10", "blosc:-1", "lz4", "none:0"] {
            assert!(z(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn geotransform_from_tiepoint_or_matrix_and_shifted_to_a_window() {
        let g = GeoRef {
            pixel_scale: Some(vec![10.0, 10.0, 0.0]),
            tiepoint: Some(vec![0.0, 0.0, 0.0, 500_000.0, 4_000_000.0, 0.0]),
            ..GeoRef::default()
        };
        assert_eq!(
            g.geotransform(),
            Some([500_000.0, 10.0, 0.0, 4_000_000.0, 0.0, -10.0])
        );
        // the window at row 3, column 5 starts 5 pixels east and 3 south
        assert_eq!(
            g.shifted(3.0, 5.0).geotransform(),
            Some([500_050.0, 10.0, 0.0, 3_999_970.0, 0.0, -10.0])
        );
        // a rotated matrix: the origin moves along both axes of the matrix
        let m = GeoRef {
            transformation: Some(vec![
                2.0, 0.5, 0.0, 100.0, 0.25, -2.0, 0.0, 200.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                1.0,
            ]),
            ..GeoRef::default()
        };
        assert_eq!(m.geotransform(), Some([100.0, 2.0, 0.5, 200.0, 0.25, -2.0]));
        assert_eq!(
            m.shifted(4.0, 1.0).geotransform(),
            Some([
                100.0 + 2.0 + 4.0 * 0.5,
                2.0,
                0.5,
                200.0 + 0.25 - 8.0,
                0.25,
                -2.0
            ])
        );
    }
}
