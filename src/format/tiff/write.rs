//! Writing tiled GeoTIFF ([`write_tiled`]): 512x512 tiles (by default), Deflate or ZSTD
//! compressed in parallel, planar or pixel-interleaved, BigTIFF when the data could pass
//! 4 GB, with the georeferencing tags of an input ([`GeoRef`]) copied verbatim. Reading
//! is `geotiff.rs` (layout and tags) and `tiff_decode.rs` (chunks).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::tiff::GeoRef;
use crate::format::tiff::decode::Wrapping;
pub use crate::format::tiff::options::{TiffCompression, TiffPredictor, TiffWriteOptions};

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
            crate::format::fmt_shape(shape)
        ))),
        // SamplesPerPixel is a 16-bit field, ImageWidth and ImageLength 32-bit ones
        [_, h, w] | [h, w] if h > u32::MAX as usize || w > u32::MAX as usize => {
            Err(Error::invalid(format!(
                "a GeoTIFF image is at most {} pixels on a side; this output has shape {}",
                u32::MAX,
                crate::format::fmt_shape(shape)
            )))
        }
        [b, ..] if shape.len() == 3 && b > usize::from(u16::MAX) => Err(Error::invalid(format!(
            "a GeoTIFF holds at most {} bands; this output has shape {} (write it as .npy or \
             .zarr)",
            u16::MAX,
            crate::format::fmt_shape(shape)
        ))),
        [h, w] => Ok((1, h, w)),
        [b, h, w] => Ok((b, h, w)),
        _ => Err(Error::invalid(format!(
            "a GeoTIFF holds a (rows, cols) or (bands, rows, cols) image; this output has shape {}",
            crate::format::fmt_shape(shape)
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
        DType::C64 | DType::C128 => {
            return Err(Error::invalid(format!(
                "a GeoTIFF output of {} is not supported: write a .npy or a Zarr store",
                dtype.numpy_name()
            )));
        }
        DType::Bool | DType::BF16 => {
            return Err(Error::invalid(format!(
                "a GeoTIFF cannot hold {dtype}: give `dtype=u8` (for bool) or `dtype=f32` (for bf16)"
            )));
        }
    })
}

/// One IFD entry: tag, TIFF type, count and the value bytes (little-endian).
pub(crate) struct Entry {
    tag: u16,
    typ: u16,
    count: u64,
    data: Vec<u8>,
}

pub(crate) fn shorts(tag: u16, v: &[u16]) -> Entry {
    Entry {
        tag,
        typ: 3,
        count: v.len() as u64,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

pub(crate) fn longs(tag: u16, v: &[u64], big: bool) -> Entry {
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

/// Serializes an IFD placed at `at` (even), its out-of-line values right after it, with
/// `next` as the offset of the next IFD (0 for the last). Its length does not depend on
/// `at`, `next` or the values, only on the entries' types and counts.
pub(crate) fn ifd_bytes(mut entries: Vec<Entry>, at: u64, big: bool, next: u64) -> Vec<u8> {
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
    if big {
        out.extend(next.to_le_bytes());
    } else {
        out.extend((next as u32).to_le_bytes());
    }
    debug_assert_eq!(out.len() as u64, head);
    out.extend(extra);
    out
}

/// The geometry of a tiled GeoTIFF being written: what [`write_tiled`] and the
/// streaming encoder ([`crate::format::tiff::stream::TiffStream`]) share.
#[derive(Clone, Debug)]
pub(crate) struct TiledLayout {
    pub bands: usize,
    pub height: usize,
    pub width: usize,
    /// Bytes per sample.
    pub es: usize,
    /// Tile side.
    pub t: usize,
    /// Tiles across and down.
    pub across: usize,
    pub down: usize,
    /// Pixel-interleaved chunks (all bands of a pixel together).
    pub pixel: bool,
    /// BigTIFF (64-bit offsets).
    pub big: bool,
    /// Bytes of one raw tile.
    pub chunk_bytes: usize,
    /// Tiles compressed at once (each holds a raw and a compressed tile).
    pub batch: usize,
    /// The `Predictor` tag value (1 none, 2 horizontal, 3 floating point).
    pub predictor: u16,
    /// How tiles are compressed.
    pub compression: TiffCompression,
}

impl TiledLayout {
    /// The layout of a GeoTIFF of `shape` and `dtype` written as `opts` say.
    pub(crate) fn new(shape: &[usize], dtype: DType, opts: &TiffWriteOptions) -> Result<Self> {
        let (bands, height, width) = image_dims(shape)?;
        tiff_sample(dtype)?;
        let es = dtype.size();
        // no larger than the image needs (rounded up to 16, as TIFF tiles are): a band
        // of 1x1 in a 512x512 tile made `gen --shape 70000x1x1` encode 70 GB of padding
        let t = opts
            .tile
            .min(height.max(width).next_multiple_of(16))
            .max(16);
        let pixel = opts.pixel_interleave && bands > 1;
        let spp_chunk = if pixel { bands } else { 1 };
        let nbytes = (bands * height * width * es) as u64;
        let chunk_bytes = t * t * spp_chunk * es;
        Ok(TiledLayout {
            bands,
            height,
            width,
            es,
            t,
            across: width.div_ceil(t),
            down: height.div_ceil(t),
            pixel,
            big: opts.bigtiff.unwrap_or(nbytes > BIGTIFF_ABOVE),
            chunk_bytes,
            batch: batch_for(opts.memory, chunk_bytes),
            predictor: opts.predictor.tag(dtype, opts.compression)?,
            compression: opts.compression,
        })
    }

    /// Planes of tiles (bands, or 1 when pixel-interleaved).
    pub(crate) fn planes(&self) -> usize {
        if self.pixel { 1 } else { self.bands }
    }

    /// Samples of a pixel in a tile (all bands when pixel-interleaved, else one).
    pub(crate) fn spp(&self) -> usize {
        self.bands / self.planes()
    }

    /// The raw tile `tx` of a row of tiles held in `strip`: `rows` image rows of each
    /// plane the row holds (all bands when pixel-interleaved, else one), plane `b` from
    /// row `b * stride` of `strip` (rows of `width` samples). The tile is padded with
    /// zeros past the image's edge.
    pub(crate) fn raw_tile(&self, strip: &[u8], stride: usize, rows: usize, tx: usize) -> Vec<u8> {
        let x0 = tx * self.t;
        let cols = self.t.min(self.width - x0);
        self.gather_tile(strip, self.width, x0, stride, rows, cols)
    }

    /// A raw tile (`chunk_bytes`, zero-padded) from `rows x cols` samples of each plane
    /// in `src`: plane `b`'s row `y` starts at sample `(b * stride + y) * row_len + x0`.
    /// The bands of a pixel go together when pixel-interleaved.
    pub(crate) fn gather_tile(
        &self,
        src: &[u8],
        row_len: usize,
        x0: usize,
        stride: usize,
        rows: usize,
        cols: usize,
    ) -> Vec<u8> {
        let (t, es, nb) = (self.t, self.es, self.spp());
        let mut raw = vec![0u8; self.chunk_bytes];
        for y in 0..rows {
            for b in 0..nb {
                let from = ((b * stride + y) * row_len + x0) * es;
                let src = &src[from..from + cols * es];
                if self.pixel {
                    for x in 0..cols {
                        let o = ((y * t + x) * nb + b) * es;
                        raw[o..o + es].copy_from_slice(&src[x * es..(x + 1) * es]);
                    }
                } else {
                    raw[y * t * es..(y * t + cols) * es].copy_from_slice(src);
                }
            }
        }
        raw
    }

    /// Encodes one raw tile (`chunk_bytes`, padded to the full tile): the predictor, row
    /// by row, then the compression (`path` names the output in errors).
    ///
    /// # Errors
    /// [`Error::Io`] when the codec fails.
    pub(crate) fn encode_tile(&self, mut raw: Vec<u8>, path: &Path) -> Result<Vec<u8>> {
        let spp = self.spp();
        predict(
            &mut raw,
            self.t * spp * self.es,
            spp,
            self.es,
            self.predictor,
        );
        compress_tile(raw, self.compression, path)
    }

    /// Where tile data starts (after the header).
    pub(crate) fn data_start(&self) -> u64 {
        if self.big { 16 } else { 8 }
    }

    /// The file header; its first IFD offset is patched by [`TiledLayout::finish`].
    pub(crate) fn header(&self) -> &'static [u8] {
        if self.big {
            &[b'I', b'I', 43, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        } else {
            &[b'I', b'I', 42, 0, 0, 0, 0, 0]
        }
    }

    /// The IFD entries of this image: its geometry, compression and predictor, the
    /// tiles' `offsets` and `counts`, and `georef`'s tags (copied as they are) when given.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a dtype a TIFF cannot hold.
    pub(crate) fn entries(
        &self,
        dtype: DType,
        georef: Option<&GeoRef>,
        offsets: &[u64],
        counts: &[u64],
    ) -> Result<Vec<Entry>> {
        let (bands, big) = (self.bands, self.big);
        let (format, bits) = tiff_sample(dtype)?;
        let b16 = |v: usize| u16::try_from(v).unwrap_or(u16::MAX);
        let mut e = vec![
            longs(256, &[self.width as u64], false),
            longs(257, &[self.height as u64], false),
            shorts(258, &vec![bits; bands]),
            shorts(
                259,
                &[match self.compression {
                    TiffCompression::None => 1,
                    TiffCompression::Deflate(_) => 8,
                    TiffCompression::Zstd(_) => 50000,
                }],
            ),
            shorts(262, &[1]),
            shorts(277, &[b16(bands)]),
            shorts(284, &[if self.pixel || bands == 1 { 1 } else { 2 }]),
            shorts(322, &[b16(self.t)]),
            shorts(323, &[b16(self.t)]),
            longs(324, offsets, big),
            longs(325, counts, big),
            shorts(339, &vec![format; bands]),
        ];
        if bands > 1 {
            e.push(shorts(338, &vec![0; bands - 1]));
        }
        if self.predictor != 1 {
            e.push(shorts(317, &[self.predictor]));
        }
        if let Some(g) = georef {
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
        Ok(e)
    }

    /// Writes the directory after the tiles (which end at `pos`), points the header at
    /// it and cuts the file there; returns the file's length.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &self,
        dest: &File,
        dest_path: &Path,
        dtype: DType,
        opts: &TiffWriteOptions,
        mut pos: u64,
        offsets: &[u64],
        counts: &[u64],
    ) -> Result<u64> {
        let big = self.big;
        let wr = |at: u64, b: &[u8]| {
            dest.write_all_at(b, at)
                .map_err(|e| Error::io("write", dest_path, e))
        };
        if !big && pos > u64::from(u32::MAX) - (1 << 20) {
            return Err(Error::invalid(format!(
                "{}: the compressed tiles pass 4 GiB, more than a classic TIFF can address; \
                 write it as BigTIFF (`tiff_bigtiff=yes`)",
                dest_path.display()
            )));
        }
        pos += pos % 2;
        let e = self.entries(dtype, opts.georef.as_ref(), offsets, counts)?;
        let ifd = ifd_bytes(e, pos, big, 0);
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
}

/// Tiles compressed at once within `memory` (a raw and a compressed copy each), at
/// least one, at most four per thread.
pub(crate) fn batch_for(memory: u64, chunk_bytes: usize) -> usize {
    ((memory / (2 * chunk_bytes as u64).max(1)) as usize)
        .clamp(1, 4 * crate::io::pool::threads().max(1))
}

/// Encodes tiles `tiles` with `encode` in parallel, `batch` at a time, and writes them
/// one after another into `dest` from offset `pos`, handing each one's bytes to
/// `each` in order. Returns where the last one ends and their compressed lengths.
pub(crate) fn append_tiles(
    dest: &File,
    dest_path: &Path,
    mut pos: u64,
    tiles: std::ops::Range<usize>,
    batch: usize,
    encode: &(dyn Fn(usize) -> Result<Vec<u8>> + Sync),
    mut each: impl FnMut(&[u8]),
) -> Result<(u64, Vec<u64>)> {
    use rayon::prelude::*;
    let all: Vec<usize> = tiles.collect();
    let mut counts = Vec::with_capacity(all.len());
    for group in all.chunks(batch.max(1)) {
        let done: Vec<Result<Vec<u8>>> =
            crate::io::pool::install(|| group.par_iter().map(|&k| encode(k)).collect());
        for c in done {
            let c = c?;
            dest.write_all_at(&c, pos)
                .map_err(|e| Error::io("write", dest_path, e))?;
            each(&c);
            counts.push(c.len() as u64);
            pos += c.len() as u64;
        }
    }
    Ok((pos, counts))
}

/// Applies TIFF predictor `predictor` (the tag value) in place to `raw`, rows of
/// `row_bytes` bytes of little-endian samples of `es` bytes, `spp` samples a pixel: what
/// libtiff's `horDiff` and `fpDiff` do when they write, and `tiff_decode::unpredict`
/// undoes.
fn predict(raw: &mut [u8], row_bytes: usize, spp: usize, es: usize, predictor: u16) {
    match predictor {
        2 => {
            for row in raw.chunks_exact_mut(row_bytes) {
                match es {
                    1 => hor_diff::<u8>(row, spp),
                    2 => hor_diff::<u16>(row, spp),
                    4 => hor_diff::<u32>(row, spp),
                    _ => hor_diff::<u64>(row, spp),
                }
            }
        }
        3 => {
            let mut planes = vec![0u8; row_bytes];
            for row in raw.chunks_exact_mut(row_bytes) {
                match es {
                    2 => byte_planes::<2>(row, &mut planes),
                    4 => byte_planes::<4>(row, &mut planes),
                    _ => byte_planes::<8>(row, &mut planes),
                }
                // each byte minus the byte `spp` before it in the planes (two inputs, one
                // output: no chain between iterations)
                row[..spp].copy_from_slice(&planes[..spp]);
                for ((d, &cur), &prev) in row[spp..]
                    .iter_mut()
                    .zip(&planes[spp..])
                    .zip(&planes[..row_bytes - spp])
                {
                    *d = cur.wrapping_sub(prev);
                }
            }
        }
        _ => {}
    }
}

/// The bytes of the little-endian `N`-byte samples of `row` regrouped into `N` planes in
/// `planes`: plane 0 holds every sample's most significant byte (its last), plane `N - 1`
/// its least.
fn byte_planes<const N: usize>(row: &[u8], planes: &mut [u8]) {
    let n = row.len() / N;
    for (k, s) in row.chunks_exact(N).enumerate() {
        for (b, &v) in s.iter().enumerate() {
            planes[(N - 1 - b) * n + k] = v;
        }
    }
}

/// Horizontal differencing of one row of `T` samples, `spp` apart, from the end (each
/// sample minus the original sample before it, wrapping): what the decoder's `hor_acc`
/// undoes. Samples are in the host's order, which the file's little-endian tiles are
/// written in.
fn hor_diff<T: Wrapping>(row: &mut [u8], spp: usize) {
    let w = size_of::<T>();
    for at in (spp * w..row.len() - row.len() % w).step_by(w).rev() {
        let from = at - spp * w;
        let prev: T = bytemuck::pod_read_unaligned(&row[from..from + w]);
        let v: T = bytemuck::pod_read_unaligned(&row[at..at + w]);
        row[at..at + w].copy_from_slice(bytemuck::bytes_of(&v.wsub(prev)));
    }
}

/// Compresses one raw tile as `compression` says (`path` names the output in errors).
pub(crate) fn compress_tile(
    raw: Vec<u8>,
    compression: TiffCompression,
    path: &Path,
) -> Result<Vec<u8>> {
    match compression {
        TiffCompression::None => Ok(raw),
        TiffCompression::Deflate(level) => {
            // libdeflate, as GDAL: 1.8-1.9x the speed of zlib-rs at level 6 for the same
            // size (benches/benches/codecs.rs)
            let lvl = libdeflater::CompressionLvl::new(level as i32)
                .map_err(|_| Error::invalid(format!("Deflate level {level} is not 1-9")))?;
            let mut c = libdeflater::Compressor::new(lvl);
            let mut out = vec![0u8; c.zlib_compress_bound(raw.len())];
            let n = c.zlib_compress(&raw, &mut out).map_err(|e| {
                Error::io(
                    "compress a tile of",
                    path,
                    std::io::Error::other(format!("{e:?}")),
                )
            })?;
            out.truncate(n);
            Ok(out)
        }
        TiffCompression::Zstd(level) => {
            zstd::bulk::compress(&raw, level).map_err(|e| Error::io("compress a tile of", path, e))
        }
    }
}

/// Writes a tiled GeoTIFF to `dest` from little-endian C-order `(bands, height, width)`
/// data that `read(at, buf)` reads by byte offset (a patch in memory; the tests' oracle
/// for the streamed writer).
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
    let l = TiledLayout::new(shape, dtype, opts)?;
    let (bands, height, width, es, t) = (l.bands, l.height, l.width, l.es, l.t);
    let (across, down) = (l.across, l.down);
    let n_chunks = l.planes() * across * down;
    dest.write_all_at(l.header(), 0)
        .map_err(|e| Error::io("write", dest_path, e))?;
    let mut pos = l.data_start();
    let encode = |k: usize| -> Result<Vec<u8>> {
        let plane = k / (across * down);
        let (ty, tx) = ((k % (across * down)) / across, k % across);
        let (y0, x0) = (ty * t, tx * t);
        let rows = t.min(height - y0);
        let cols = t.min(width - x0);
        let mut raw = vec![0u8; l.chunk_bytes];
        let mut line = vec![0u8; cols * es];
        for y in 0..rows {
            if l.pixel {
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
        l.encode_tile(raw, dest_path)
    };
    let mut offsets = Vec::with_capacity(n_chunks);
    let (end, counts) = append_tiles(dest, dest_path, pos, 0..n_chunks, l.batch, &encode, |c| {
        offsets.push(pos);
        pos += c.len() as u64;
    })?;
    l.finish(dest, dest_path, dtype, opts, end, &offsets, &counts)
}

#[cfg(test)]
mod tests;
