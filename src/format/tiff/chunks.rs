//! A TIFF's strips or tiles as a chunk source ([`TiffChunks`]): each chunk's stored
//! bytes read with one positioned read and decoded by [`decode`](super::decode), exactly
//! as GDAL reads them; sparse chunks read as the nodata value.

use std::path::{Path, PathBuf};

use super::decode::ChunkRows;
use super::nodata::nodata_sample;
use super::{TiffLayout, decode};
use crate::error::{Error, Result, TiffError};
use crate::format::chunked::{ChunkSource, decode_each};
use crate::io::source::{COALESCE_GAP, Source, fetch_coalesced};

/// Decodes the strips or tiles of a TIFF for [`Chunked`](crate::format::chunked::Chunked): each
/// chunk's stored bytes are read with one positioned read and decoded by
/// [`decode`], exactly as GDAL reads them.
#[derive(Debug)]
pub struct TiffChunks {
    path: PathBuf,
    file: Source,
    file_len: u64,
    layout: TiffLayout,
    chunk_shape: Vec<usize>,
    /// One sample of the value a sparse chunk (offset and byte count 0) reads as: the
    /// nodata value when the file has one that the sample type holds, else zero (GDAL's
    /// rule).
    sparse: Vec<u8>,
    /// The largest byte count of the offset tables (asked for by every batch).
    most_stored: u64,
}

impl TiffChunks {
    /// A chunk source for the TIFF at `path`, open as `file`, with the given layout;
    /// `nodata` is the file's `GDAL_NODATA` text, which sparse chunks read as.
    ///
    /// # Errors
    /// [`Error::Io`] if the file's size cannot be read.
    pub fn new(
        path: &Path,
        file: Source,
        layout: TiffLayout,
        nodata: Option<&str>,
    ) -> Result<Self> {
        let (cw, ch) = layout.chunk;
        let chunk_shape = match (layout.bands, layout.planar) {
            (1, _) => vec![ch, cw],
            // planar 8-bit CMYK: the four inks of a position make one RGBA chunk
            (_, true) if layout.cmyk => vec![4, ch, cw],
            (_, true) => vec![1, ch, cw],
            (b, false) => vec![b, ch, cw],
        };
        let file_len = file.len(path)?;
        let sparse = nodata
            .and_then(|t| nodata_sample(layout.dtype, t))
            .unwrap_or_else(|| vec![0; layout.dtype.size()]);
        let most_stored = layout.byte_counts.iter().copied().max().unwrap_or(0);
        Ok(TiffChunks {
            path: path.to_path_buf(),
            file,
            file_len,
            layout,
            chunk_shape,
            sparse,
            most_stored,
        })
    }
}

thread_local! {
    /// Stored bytes of the chunk being decoded, the decoded pixel-interleaved chunk, and
    /// the decompressed packed samples, reused across the chunks a decode thread handles.
    static SCRATCH: std::cell::RefCell<(Vec<u8>, Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

impl ChunkSource for TiffChunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk_shape
    }

    fn resident_bytes(&self) -> u64 {
        8 * (self.layout.offsets.len() + self.layout.byte_counts.len()) as u64
    }

    fn work_bytes(&self) -> u64 {
        // packed samples: the stored bytes of the largest chunk (bounded by the check in
        // `decode`), the decompressed packed rows and, pixel-interleaved, the unpacked
        // chunk before its bands are gathered. (Other files are counted as one decoded
        // chunk, the default, as before this was written.)
        let l = &self.layout;
        let (cw, ch) = l.chunk;
        if let Some(j) = &l.jpeg {
            // the stored bytes, the same spliced after the tables, the pixel-interleaved
            // rows of a converted chunk, and libjpeg's own buffers (a progressive
            // stream's coefficients: two bytes a sample)
            let decoded = (ch * cw * j.output.components()) as u64;
            let stored = self.largest_stored(decoded as usize, ch);
            let tables = j.tables.as_ref().map_or(0, Vec::len) as u64;
            return 2 * stored + tables + 3 * decoded;
        }
        let spp = if l.planar { 1 } else { l.bands };
        let pixels = (ch * cw) as u64;
        let interleaved = pixels * (spp * l.dtype.size()) as u64;
        if l.codec == decode::Codec::WebP {
            // the stored bytes, the decoded RGB(A) rows, and libwebp's own buffers (a
            // lossless image's ARGB pixels and its transforms' rows)
            let stored = self.largest_stored(interleaved as usize, ch);
            return stored + interleaved + 5 * pixels + 65536;
        }
        if l.lerc.is_some() {
            // the stored bytes, the blob once inflated, the mask, the interleaved rows,
            // and LERC's own decoding state (about one chunk of values)
            let stored = self.largest_stored(interleaved as usize, ch);
            let blob = super::lerc::blob_limit(interleaved as usize) as u64;
            return stored + blob + pixels + 2 * interleaved;
        }
        // liblzma's memory (its dictionary: the stream's choice, see `lzma.rs`), which
        // it is held to
        let lzma = match l.codec {
            decode::Codec::Lzma(limit) => limit,
            _ => 0,
        };
        if !l.packed() {
            if lzma == 0 {
                return 0;
            }
            return lzma + self.largest_stored(interleaved as usize, ch);
        }
        let unpacked = (ch * cw * spp * l.dtype.size()) as u64;
        let packed = (ch * (cw * spp * usize::from(l.bits)).div_ceil(8)) as u64;
        let stored = self.largest_stored(packed as usize, ch);
        let interleaving = if spp > 1 { unpacked } else { 0 };
        stored + packed + interleaving + lzma
    }

    fn fetch_bytes(&self) -> u64 {
        match self.file {
            // a batch's stored chunks fetched at once, with the gaps between them
            Source::Object(_) => {
                let most = self.chunk_stored_max();
                most + COALESCE_GAP.min(most)
            }
            Source::File(_) => 0,
        }
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        self.decode_with(pos, out, None)
    }

    fn decode_batch(
        &self,
        pos: &[Vec<usize>],
        outs: &mut [Vec<u8>],
        per_task: usize,
    ) -> Result<()> {
        use rayon::prelude::*;
        let l = &self.layout;
        let Source::Object(object) = &self.file else {
            return decode_each(self, pos, outs, per_task);
        };
        if l.cmyk && l.planar {
            return decode_each(self, pos, outs, per_task);
        }
        // the stored bytes of every chunk of the batch that can be read (a sparse chunk
        // has none; one that could not be is left to `decode` to refuse), fetched with
        // the requests in flight at once, neighbours within a gap in one
        let most = self.chunk_stored_max();
        let mut want: Vec<(u64, u64, usize)> = pos
            .iter()
            .enumerate()
            .filter_map(|(k, p)| {
                let i = self.index_of(p);
                let (off, n) = (l.offsets[i], l.byte_counts[i]);
                let readable =
                    n > 0 && n <= most && off.checked_add(n).is_some_and(|e| e <= self.file_len);
                readable.then_some((off, n, k))
            })
            .collect();
        want.sort_unstable();
        let ranges: Vec<(u64, u64)> = want.iter().map(|w| (w.0, w.1)).collect();
        let spans = fetch_coalesced(object, &ranges, COALESCE_GAP.min(most))
            .map_err(|e| Error::io("read", &self.path, e))?;
        let mut pre: Vec<Option<&[u8]>> = vec![None; pos.len()];
        for span in &spans {
            for &m in &span.members {
                let (off, n, k) = want[m];
                pre[k] = Some(span.part(off, n));
            }
        }
        crate::io::pool::install(|| {
            pos.par_iter()
                .zip(outs.par_iter_mut())
                .zip(pre.par_iter())
                .try_for_each(|((p, o), pre)| self.decode_with(p, o, *pre))
        })
    }
}

impl TiffChunks {
    /// The index of the chunk at grid position `pos` in the offset tables.
    fn index_of(&self, pos: &[usize]) -> usize {
        let l = &self.layout;
        let (band, cy, cx) = match pos.len() {
            2 => (0, pos[0], pos[1]),
            _ => (pos[0], pos[1], pos[2]),
        };
        band * l.chunks_per_plane() + cy * l.chunks_across() + cx
    }

    /// The most stored bytes a chunk of this file is read with: the largest byte count,
    /// no more than a full chunk's codec allows.
    fn chunk_stored_max(&self) -> u64 {
        let l = &self.layout;
        let (cw, ch) = l.chunk;
        let spp = if l.planar { 1 } else { l.bands };
        let row_bytes = (cw * spp * usize::from(l.bits)).div_ceil(8);
        self.largest_stored(ch * row_bytes, ch)
    }

    /// [`ChunkSource::decode`], with the chunk's stored bytes already fetched (`pre`) or
    /// read now.
    fn decode_with(&self, pos: &[usize], out: &mut [u8], pre: Option<&[u8]>) -> Result<()> {
        let l = &self.layout;
        let (band, cy, cx) = match pos.len() {
            2 => (0, pos[0], pos[1]),
            _ => (pos[0], pos[1], pos[2]),
        };
        let at = cy * l.chunks_across() + cx;
        if !(l.cmyk && l.planar) {
            let index = band * l.chunks_per_plane() + at;
            let sparse = self.decode_stored(index, band, cy, cx, out, pre)?;
            if l.cmyk && !sparse {
                cmyk_to_rgba(out);
            }
            return Ok(());
        }
        // planar CMYK: the four inks' chunks at this position, then the conversion (a
        // sparse ink makes the whole chunk sparse)
        let plane = out.len() / 4;
        let mut sparse = false;
        for (ink, dst) in out.chunks_exact_mut(plane).enumerate() {
            sparse |=
                self.decode_stored(ink * l.chunks_per_plane() + at, ink, cy, cx, dst, None)?;
        }
        if sparse {
            self.fill_sparse(out);
        } else {
            cmyk_to_rgba(out);
        }
        Ok(())
    }

    /// The stored bytes of the largest chunk, as far as `decode` reads them (chunks of
    /// `need` decoded bytes in `rows` rows).
    fn largest_stored(&self, need: usize, rows: usize) -> u64 {
        self.most_stored
            .min(stored_limit(self.layout.codec, need, rows))
    }

    fn fill_sparse(&self, out: &mut [u8]) {
        for s in out.chunks_exact_mut(self.sparse.len()) {
            s.copy_from_slice(&self.sparse);
        }
    }

    /// Decodes the stored chunk `index` (of `band`, at chunk row `cy` and column `cx`)
    /// into `out`, its samples gathered into band planes, from its stored bytes `pre`
    /// when they were fetched already; returns true for a sparse chunk, which reads as
    /// the sparse value.
    fn decode_stored(
        &self,
        index: usize,
        band: usize,
        cy: usize,
        cx: usize,
        out: &mut [u8],
        pre: Option<&[u8]>,
    ) -> Result<bool> {
        let l = &self.layout;
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
        // the stored rows: packed samples fill whole bytes a row, as libtiff stores them
        let bits = usize::from(l.bits);
        let geometry = ChunkRows {
            rows,
            row_bytes: (cw * spp * bits).div_ceil(8),
            spp,
            es,
            unit: l.dtype.swap_unit(),
        };
        // the rows once unpacked into elements
        let stride = cw * spp * es;
        let unpacked = rows * stride;
        let what = format!("TIFF chunk {index} (band {band}, row {cy}, column {cx})");
        let (offset, count) = (l.offsets[index], l.byte_counts[index]);
        let need = geometry.bytes();
        if offset == 0 && count == 0 {
            // a sparse chunk (GDAL's SPARSE_OK): nodata, or zeros
            self.fill_sparse(out);
            return Ok(true);
        }
        // stored bytes beyond twice the decoded size (plus a margin) cannot be a chunk of
        // any of the codecs read here; refusing them bounds the read buffer. CCITT codes
        // a pixel in up to 9 bits (a run of one white pixel, 6 bits, with make-up
        // codes) and each row's end-of-line code in 12 or more
        let limit = stored_limit(l.codec, need, rows);
        if count > limit || offset.checked_add(count).is_none_or(|e| e > self.file_len) {
            return Err(Error::tiff_at(
                &self.path,
                TiffError::ChunkOutside {
                    chunk: what,
                    offset,
                    stored: count,
                    file_len: self.file_len,
                    decoded: need,
                },
            ));
        }
        let failed = |reason: String| {
            Error::tiff_at(
                &self.path,
                TiffError::Decode {
                    chunk: what.clone(),
                    reason,
                },
            )
        };
        SCRATCH.with_borrow_mut(|(stored, decoded, packed)| {
            stored.resize(count as usize, 0);
            match pre {
                Some(b) => stored.copy_from_slice(b),
                None => self
                    .file
                    .read_exact_at(stored, offset)
                    .map_err(|e| Error::io("read", &self.path, e))?,
            }
            if l.lsb_first {
                for b in stored.iter_mut() {
                    *b = b.reverse_bits();
                }
            }
            if let Some(j) = &l.jpeg {
                // libjpeg-turbo writes the chunk's band planes itself
                let chunk = super::jpeg::Chunk {
                    tables: j.tables.as_deref(),
                    stored,
                    output: j.output,
                    width: cw,
                    rows,
                    slot_rows: ch,
                    subsampling: j.subsampling,
                };
                super::jpeg::decode(&chunk, out).map_err(failed)?;
                return Ok(false);
            }
            let target: &mut [u8] = if spp == 1 {
                // one band per chunk: decode straight into the chunk's rows
                &mut out[..unpacked]
            } else {
                decoded.resize(unpacked, 0);
                decoded
            };
            if l.codec == decode::Codec::WebP {
                super::webp::decode(stored, cw, rows, spp, target).map_err(failed)?;
            } else if let Some(tags) = l.lerc {
                let chunk = super::lerc::Chunk {
                    stored,
                    tags,
                    dtype: l.dtype,
                    width: cw,
                    rows,
                    spp,
                };
                super::lerc::decode(&chunk, target).map_err(failed)?;
                // in the file's byte order, as libtiff leaves them
                decode::unpredict(&geometry, l.little_endian, 1, target);
            } else if l.packed() {
                packed.resize(need, 0);
                self.decode_packed(stored, packed, &geometry, &what, &failed, target)?;
            } else {
                decode::decompress(&self.path, &what, l.codec, stored, target)?;
                decode::unpredict(&geometry, l.little_endian, l.predictor, target);
            }
            if spp > 1 {
                to_planes(decoded, out, rows, (cw, ch), spp, es);
            }
            Ok(false)
        })
    }

    /// Packed samples (bit depths other than 8, 16, 32 and 64, and 24-bit floats): the
    /// chunk's `stored` bytes decompressed into `packed` (its `geometry`'s bytes), then
    /// unpacked into elements in `target`. No predictor is allowed on packed samples
    /// (`decode::validate`).
    fn decode_packed(
        &self,
        stored: &[u8],
        packed: &mut [u8],
        geometry: &ChunkRows,
        what: &str,
        failed: &dyn Fn(String) -> Error,
        target: &mut [u8],
    ) -> Result<()> {
        let l = &self.layout;
        let (cw, spp) = (l.chunk.0, geometry.spp);
        if let decode::Codec::Fax(kind) = l.codec {
            super::fax::decode(kind, stored, cw, packed).map_err(failed)?;
        } else {
            decode::decompress(&self.path, what, l.codec, stored, packed)?;
        }
        if l.dtype == crate::dtype::DType::F32 {
            decode::unpack_fp24(
                packed,
                geometry.row_bytes,
                cw * spp,
                l.little_endian,
                target,
            );
        } else {
            decode::unpack_samples(
                packed,
                geometry.row_bytes,
                cw * spp,
                usize::from(l.bits),
                l.little_endian,
                geometry.es,
                target,
            );
        }
        Ok(())
    }
}

/// Pixel-interleaved rows (`rows` rows of `cw` pixels of `spp` samples of `es` bytes)
/// gathered into each band's plane of a chunk's slot `out` (`ch` rows a plane).
fn to_planes(
    decoded: &[u8],
    out: &mut [u8],
    rows: usize,
    (cw, ch): (usize, usize),
    spp: usize,
    es: usize,
) {
    let stride = cw * spp * es;
    for y in 0..rows {
        let row = &decoded[y * stride..(y + 1) * stride];
        for b in 0..spp {
            let at = (b * ch + y) * cw * es;
            let dst = &mut out[at..at + cw * es];
            match es {
                1 => gather::<1>(row, spp, b, dst),
                2 => gather::<2>(row, spp, b, dst),
                4 => gather::<4>(row, spp, b, dst),
                8 => gather::<8>(row, spp, b, dst),
                // complex128
                _ => gather::<16>(row, spp, b, dst),
            }
        }
    }
}

/// The most stored bytes a chunk of `need` decoded bytes in `rows` rows can take.
fn stored_limit(codec: decode::Codec, need: usize, rows: usize) -> u64 {
    match codec {
        decode::Codec::Fax(_) => 9 * need as u64 + 8 * rows as u64 + 4096,
        // a JPEG of noise at quality 100 takes more than its pixels; 8 bytes a sample is
        // beyond any real stream (the worst Huffman codes of a block)
        decode::Codec::Jpeg => 8 * need as u64 + 65536,
        _ => 2 * need as u64 + 4096,
    }
}

/// GDAL's reading of an 8-bit CMYK image (through libtiff's RGBA interface): red, green
/// and blue of each pixel from the inks, `k = 255 - K`, `R = k * (255 - C) / 255` in
/// integer arithmetic (likewise G from M, B from Y), and an opaque alpha band. `chunk`
/// holds the four ink planes and becomes the four RGBA planes.
fn cmyk_to_rgba(chunk: &mut [u8]) {
    let plane = chunk.len() / 4;
    let (c, rest) = chunk.split_at_mut(plane);
    let (m, rest) = rest.split_at_mut(plane);
    let (y, k) = rest.split_at_mut(plane);
    let ink = |v: u8, k: u32| ((k * (255 - u32::from(v))) / 255) as u8;
    for i in 0..plane {
        let kk = 255 - u32::from(k[i]);
        c[i] = ink(c[i], kk);
        m[i] = ink(m[i], kk);
        y[i] = ink(y[i], kk);
        k[i] = 255;
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
