//! JPEG 2000 inputs (`.jp2` files and raw `.j2k`/`.j2c` codestreams: Sentinel-2's
//! format), decoded by OpenJPEG block by block exactly as GDAL's JP2OpenJPEG driver
//! (GDAL 3.6 with OpenJPEG 2.5) decodes them, so that the values are GDAL's:
//!
//! - the codestream alone is decoded (as a raw codestream, also inside a JP2 file): the
//!   JP2 palette and channel-definition boxes change nothing, a palette image reads as
//!   its indices;
//! - the sample type is the first component's: 8 bits or fewer `u8`, 9 to 16 `u16` or
//!   `i16`, more `u32` or `i32` by its sign, and every sample is saturated to it, as
//!   GDAL's copy does (a signed 8-bit sample below 0 reads as 0);
//! - blocks are GDAL's: the codestream's tiles (decoded whole), or, for a single tile
//!   larger than 1024 pixels, a tile larger than the image, or tiny tiles, areas of the
//!   image (decoded with `opj_set_decode_area`, which decodes only the code-blocks the
//!   area touches).
//!
//! Refused in one line: sub-sampled components (4:2:0 and the like, which GDAL converts
//! to RGB with its own arithmetic or refuses), a tile grid that does not start at the
//! image's first pixel when tiles are blocks (GDAL would misplace them), and a 1-bit
//! channel beside a channel-definition box (GDAL may promote a 1-bit alpha to 0/255).
//!
//! A GeoJP2 box's georeferencing is read as a GeoTIFF's; GML-in-JPEG 2000 is not read
//! (the array is, without georeferencing).

pub mod header;
pub mod openjpeg;

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunked::ChunkSource;
use crate::format::tiff::GeoRef;

use header::{Header, ReadAt};
use openjpeg::{Plane, Region};

/// Whether `path` names a JPEG 2000 file by its extension.
#[must_use]
pub fn is_jp2_path(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        ["jp2", "j2k", "j2c", "jpc"]
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
}

/// Whether `magic` (a file's first 12 bytes, or fewer) starts a JPEG 2000 file.
#[must_use]
pub fn is_jp2(magic: &[u8]) -> bool {
    magic.starts_with(&header::J2K_SIGNATURE)
        || (magic.len() >= 12 && magic[..12] == header::JP2_SIGNATURE)
}

/// How a block is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocks {
    /// Each block is one codestream tile, decoded whole.
    Tiles,
    /// Each block is an area of the image.
    Areas,
}

/// What a JPEG 2000 input is: its headers, blocks, sample type and georeferencing.
#[derive(Clone, Debug)]
pub struct Jp2Layout {
    /// The file's headers.
    pub header: Header,
    /// How blocks are decoded.
    pub blocks: Blocks,
    /// Block width and height in pixels.
    pub block: (usize, usize),
    /// The sample type.
    pub dtype: DType,
    /// The GeoJP2 georeferencing (empty without).
    pub georef: GeoRef,
}

impl Jp2Layout {
    /// Bands (components).
    #[must_use]
    pub fn bands(&self) -> usize {
        self.header.components.len()
    }

    /// Decodes the block at block row `by`, column `bx` of `src` (the whole file) into
    /// `out`, which holds one full block, band after band.
    ///
    /// # Errors
    /// One line naming the block: what OpenJPEG or the checks of its output refuse.
    pub fn decode_block(
        &self,
        src: &dyn openjpeg::Positioned,
        (by, bx): (usize, usize),
        out: &mut [u8],
    ) -> std::result::Result<(), String> {
        let (bw, bh) = self.block;
        let (w, h) = self.header.size();
        let (w, h) = (w as usize, h as usize);
        let (x0, y0) = (bx * bw, by * bh);
        if x0 >= w || y0 >= h || out.len() != bw * bh * self.bands() * self.dtype.size() {
            return Err(format!("no block at row {y0}, column {x0}"));
        }
        let (cw, ch) = ((w - x0).min(bw), (h - y0).min(bh));
        let c = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        let region = match self.blocks {
            Blocks::Tiles => Region::Tile(c(by * w.div_ceil(bw) + bx)),
            Blocks::Areas => Region::Area {
                x0: c(x0),
                y0: c(y0),
                x1: c(x0 + cw),
                y1: c(y0 + ch),
            },
        };
        openjpeg::decode(src, self.header.codestream, region, |planes| {
            self.copy(planes, cw, ch, out)
        })
        .map_err(|m| format!("block at row {y0}, column {x0}: {m}"))
    }

    /// Copies the decoded `planes` of the block at pixel (`x0`, `y0`), `w x h` pixels,
    /// into `out` (the full block, band after band), each sample saturated to the
    /// sample type as GDAL's copy does.
    fn copy(&self, planes: &[Plane<'_>], w: usize, h: usize, out: &mut [u8]) -> Result<(), String> {
        let bands = self.bands();
        if planes.len() != bands {
            return Err(format!(
                "OpenJPEG decoded {} components where the header says {bands}",
                planes.len()
            ));
        }
        let (bw, bh) = self.block;
        let dt = self.dtype;
        let es = dt.size();
        for (b, p) in planes.iter().enumerate() {
            if p.w != w || p.h != h || p.factor != 0 {
                return Err(format!(
                    "OpenJPEG decoded component {b} as {} x {} samples where the block is \
                     {w} x {h}",
                    p.w, p.h
                ));
            }
            for y in 0..h {
                let src = &p.data[y * w..(y + 1) * w];
                let at = ((b * bh + y) * bw) * es;
                let dst = &mut out[at..at + w * es];
                match dt {
                    DType::U8 => {
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d = v.clamp(0, 255) as u8;
                        }
                    }
                    DType::U16 => {
                        for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
                            d.copy_from_slice(&(v.clamp(0, 65535) as u16).to_ne_bytes());
                        }
                    }
                    DType::I16 => {
                        for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
                            d.copy_from_slice(&(v.clamp(-32768, 32767) as i16).to_ne_bytes());
                        }
                    }
                    DType::U32 => {
                        for (d, &v) in dst.chunks_exact_mut(4).zip(src) {
                            d.copy_from_slice(&(v.max(0) as u32).to_ne_bytes());
                        }
                    }
                    _ => {
                        for (d, &v) in dst.chunks_exact_mut(4).zip(src) {
                            d.copy_from_slice(&v.to_ne_bytes());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `(bands, rows, columns)`, or `(rows, columns)` for one band.
    #[must_use]
    pub fn shape(&self) -> Vec<usize> {
        let (w, h) = self.header.size();
        let (w, h) = (w as usize, h as usize);
        if self.bands() == 1 {
            vec![h, w]
        } else {
            vec![self.bands(), h, w]
        }
    }
}

/// GDAL's block size and decoding for a codestream of this image and tile size
/// (`JP2OpenJPEGDataset::Open`).
fn gdal_blocks(h: &Header) -> (Blocks, (u32, u32)) {
    let (w, ht) = h.size();
    let (tw, th) = h.tile;
    let single = w == tw && ht == th;
    if w <= 1024 && ht <= 1024 && tw < 32 && th < 32 {
        (Blocks::Areas, (w, ht))
    } else if w < tw && ht < th {
        (Blocks::Areas, (w.min(2048), ht.min(2048)))
    } else if single && (w > 1024 || ht > 1024) {
        if th == 1 && tw < 20 * 1024 * 1024 {
            (Blocks::Areas, (tw, th))
        } else {
            (Blocks::Areas, (tw.min(1024), th.min(1024)))
        }
    } else {
        (Blocks::Tiles, (tw.min(w), th.min(ht)))
    }
}

/// The sample type GDAL gives a codestream whose first component is `c`.
fn gdal_dtype(c: header::Component) -> DType {
    match (c.precision, c.signed) {
        (17.., true) => DType::I32,
        (17.., false) => DType::U32,
        (9.., true) => DType::I16,
        (9.., false) => DType::U16,
        _ => DType::U8,
    }
}

impl ReadAt for File {
    fn read_at(&self, offset: u64, len: usize) -> std::result::Result<Vec<u8>, String> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match FileExt::read_at(self, &mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading it failed: {e}")),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
}

/// Reads what `file` (at `path`) holds and how it will be decoded.
///
/// # Errors
/// [`Error::Format`]: not a JPEG 2000 file tilestream reads (the reason, in one line),
/// or OpenJPEG missing.
pub fn open<R: ReadAt + ?Sized>(path: &Path, file: &R) -> Result<Jp2Layout> {
    let refuse = |m: String| Error::format(path, m);
    let header = header::read(file).map_err(refuse)?;
    openjpeg::check().map_err(refuse)?;
    if let Some((i, c)) = header
        .components
        .iter()
        .enumerate()
        .find(|(_, c)| c.sub != (1, 1))
    {
        return Err(refuse(format!(
            "its component {i} is sampled every {} x {} pixels (chroma sub-sampling): \
             tilestream reads JPEG 2000 files whose components are all at full \
             resolution; convert it with gdal_translate first",
            c.sub.0, c.sub.1
        )));
    }
    if header.colour_boxes.iter().any(|b| b == b"cdef")
        && header.components.len() > 1
        && header.components.iter().any(|c| c.precision == 1)
    {
        return Err(refuse(
            "it has a 1-bit channel and a channel definition box, which GDAL may read as \
             a 1-bit alpha promoted to 0 and 255: convert it with gdal_translate first"
                .into(),
        ));
    }
    let (blocks, (bw, bh)) = gdal_blocks(&header);
    if blocks == Blocks::Tiles && !header.tiles_on_image_grid() {
        return Err(refuse(format!(
            "its tile grid starts at ({}, {}) where the image starts at ({}, {}): tiles \
             that straddle the image's edge are not read by tilestream (nor placed right \
             by GDAL)",
            header.tile_origin.0, header.tile_origin.1, header.image.0, header.image.1
        )));
    }
    let georef = match &header.geojp2 {
        Some(b) => crate::format::tiff::georef_from_bytes(path, b).unwrap_or_default(),
        None => GeoRef::default(),
    };
    let dtype = gdal_dtype(header.components[0]);
    Ok(Jp2Layout {
        header,
        blocks,
        block: (bw as usize, bh as usize),
        dtype,
        georef,
    })
}

/// A JPEG 2000 input's blocks, for [`Chunked`](crate::format::chunked::Chunked).
#[derive(Debug)]
pub struct Jp2Chunks {
    path: PathBuf,
    file: File,
    layout: Jp2Layout,
    chunk: Vec<usize>,
}

impl Jp2Chunks {
    /// The blocks of `layout`, read from `file`.
    #[must_use]
    pub fn new(path: &Path, file: File, layout: Jp2Layout) -> Self {
        let (bw, bh) = layout.block;
        let chunk = if layout.bands() == 1 {
            vec![bh, bw]
        } else {
            vec![layout.bands(), bh, bw]
        };
        Jp2Chunks {
            path: path.to_path_buf(),
            file,
            layout,
            chunk,
        }
    }
}

impl ChunkSource for Jp2Chunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let n = pos.len();
        self.layout
            .decode_block(&self.file, (pos[n - 2], pos[n - 1]), out)
            .map_err(|m| Error::format(&self.path, m))
    }

    fn work_bytes(&self) -> u64 {
        // OpenJPEG holds the block's stored bytes (at most its tile's), its samples as
        // 32-bit integers twice (the tile-component buffer and the image it hands out),
        // its code-block scratch (within the first) and the stream buffer
        let (bw, bh) = self.layout.block;
        let samples = (bw * bh * self.layout.bands()) as u64;
        self.layout.header.max_tile_bytes + 8 * samples + openjpeg::STREAM_BUFFER as u64
    }
}
