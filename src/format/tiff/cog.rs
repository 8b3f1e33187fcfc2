//! Cloud-Optimized GeoTIFF output (`--cog`, `--format cog`): the tiled GeoTIFF a run
//! wrote, rewritten with overviews and in the layout the COG specification asks for, so
//! that a reader over HTTP range requests finds every directory in the first bytes and
//! each zoom level's tiles together.
//!
//! [`build`] runs after the run's GeoTIFF is complete (streamed as it was written), within the
//! memory the encoding may hold:
//!
//! 1. **Overviews, in one pass over the image.** The full-resolution tiles are decoded a
//!    row of tiles at a time; each overview level takes the rows of the level above it
//!    as they come (average) or of the full image (nearest), keeps only the few source
//!    rows its next output row needs, and compresses a row of its own tiles as soon as
//!    it is whole, into a temporary file per level. Nothing of the size of a level is
//!    ever held.
//! 2. **Assembly.** With every tile's compressed size known, the file is written in COG
//!    order: header, GDAL's structural metadata ("ghost area"), the directories (full
//!    resolution first, then each overview), then the tile data of the smallest overview
//!    first and of the full resolution last. Each tile is preceded by its size (4 bytes)
//!    and followed by a copy of its last 4 bytes, as GDAL writes COGs: `gdalinfo`
//!    reports `LAYOUT=COG` only with those.
//!
//! The resampling is GDAL's (`gdaladdo` 3.6): each average level is computed from the
//! level above it, over source windows of `src/dst` pixels with fractional edge
//! pixels weighted, rounded to the nearest integer for integer types; nearest takes the
//! pixel at `floor(0.5 + i * src/dst)` of the full image. Pixels equal to the nodata
//! value are left out of averages (a window of nodata only gives nodata), and a mean
//! of valid pixels that equals the nodata value is written as the next value (as newer
//! GDAL does; GDAL 3.6 writes it as nodata, which the next level then leaves out).

// nodata is a value: samples equal to it exactly are missing
#![allow(clippy::float_cmp)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use rayon::prelude::*;

use crate::budget::fmt_bytes;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::format::chunked::ChunkSource;
use crate::format::tiff::write::{
    Entry, TiffWriteOptions, TiledLayout, append_tiles, batch_for, ifd_bytes, longs,
};
use crate::format::tiff::{GeoRef, TiffChunks, TiffLayout, read_layout};

pub use super::options::{CogOptions, Overviews, Resampling};

/// `(width, height)` of each overview level of a `width` x `height` image in `tile`-pixel
/// tiles: level k is `ceil(width / 2^k)` x `ceil(height / 2^k)`, as GDAL sizes them.
///
/// # Errors
/// [`Error::Invalid`] when `Count(n)` asks for more levels than halving down to 1x1
/// gives.
pub fn overview_sizes(
    width: usize,
    height: usize,
    tile: usize,
    overviews: Overviews,
) -> Result<Vec<(usize, usize)>> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let (mut w, mut h) = (width, height);
    loop {
        let more = match overviews {
            Overviews::Auto => w.max(h) > tile,
            Overviews::Count(n) => out.len() < n,
        };
        if !more {
            return Ok(out);
        }
        if w.max(h) <= 1 {
            return Err(Error::invalid(format!(
                "--overviews {}: a {width}x{height} image has {} overview levels at most \
                 (the last one 1x1)",
                out.len() + 1,
                out.len()
            )));
        }
        let f = 1usize << (out.len() + 1);
        (w, h) = (width.div_ceil(f), height.div_ceil(f));
        out.push((w, h));
    }
}

/// The source pixels `[lo, hi)` one output pixel averages, with the weights of the first
/// and last (fractional coverage); the ones between weigh 1.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Win {
    lo: usize,
    hi: usize,
    w_lo: f64,
    w_hi: f64,
}

impl Win {
    /// The weight of source pixel `s` (in `lo..hi`).
    fn weight(&self, s: usize) -> f64 {
        if s == self.lo {
            self.w_lo
        } else if s + 1 == self.hi {
            self.w_hi
        } else {
            1.0
        }
    }
}

/// The windows of `dst` output pixels over `src` source pixels, as GDAL's average
/// resampling cuts them (with its 1e-8 tolerance on the edges).
fn avg_windows(src: usize, dst: usize) -> Vec<Win> {
    let r = src as f64 / dst as f64;
    (0..dst)
        .map(|i| {
            let a = i as f64 * r;
            let b = (i + 1) as f64 * r;
            let lo = (a + 1e-8) as usize;
            let mut hi = (b - 1e-8).ceil() as usize;
            if hi == lo {
                hi += 1;
            }
            let hi = hi.min(src);
            Win {
                lo,
                hi,
                w_lo: if hi == lo + 1 {
                    1.0
                } else {
                    1.0 - (a - lo as f64)
                },
                w_hi: 1.0 - (hi as f64 - b),
            }
        })
        .collect()
}

/// The source pixel each of `dst` output pixels takes (nearest), as GDAL 3.6 picks it.
fn nearest_index(src: usize, dst: usize) -> Vec<usize> {
    let r = src as f64 / dst as f64;
    (0..dst)
        .map(|i| ((0.5 + i as f64 * r) as usize).min(src - 1))
        .collect()
}

/// The value an average that equals the nodata value is written as (GDAL's replacement:
/// the next representable value up, down at the top of the type's range).
fn nodata_replacement(nodata: f64, dtype: DType) -> f64 {
    if dtype.is_float() {
        if dtype == DType::F32 {
            let v = nodata as f32;
            let next = if v == f32::MAX {
                f32::from_bits(v.to_bits() - 1)
            } else if v >= 0.0 {
                f32::from_bits(v.to_bits() + 1)
            } else {
                f32::from_bits(v.to_bits() - 1)
            };
            f64::from(next)
        } else if nodata == f64::MAX {
            f64::from_bits(nodata.to_bits() - 1)
        } else if nodata >= 0.0 {
            f64::from_bits(nodata.to_bits() + 1)
        } else {
            f64::from_bits(nodata.to_bits() - 1)
        }
    } else {
        let max = crate::dispatch_dtype!(dtype, T => Element::to_f64(T::HIGHEST));
        if nodata >= max {
            nodata - 1.0
        } else {
            nodata + 1.0
        }
    }
}

/// Samples of `dtype` as f64.
fn load_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    crate::dispatch_dtype!(dtype, T => {
        crate::dtype::typed::<T>(bytes).iter().map(|v| Element::to_f64(*v)).collect()
    })
}

/// An overview level being computed and written.
struct Level {
    /// Its size.
    w: usize,
    h: usize,
    /// The size of the rows it is computed from (the level above, or the full image for
    /// nearest).
    src_w: usize,
    /// Average: the windows across and down; nearest: the source pixels.
    xwin: Vec<Win>,
    ywin: Vec<Win>,
    xidx: Vec<usize>,
    yidx: Vec<usize>,
    /// Every column window is two pixels, back to back (a factor of exactly 2 across):
    /// GDAL then averages two-row windows with equal weights.
    x_two: bool,
    /// Source rows kept for the next output rows: (row index, bands x `src_w` values).
    ring: VecDeque<(usize, Vec<f64>)>,
    /// The next output row.
    next: usize,
    /// The row of tiles being filled: bands x tile rows x `w` samples.
    strip: Vec<u8>,
    /// Rows of it filled.
    filled: usize,
    /// Its geometry as a tiled image (tile side, interleave, batch of tiles in flight).
    layout: TiledLayout,
    /// Its tiles, written one after another (leader, data, trailer).
    file: tempfile::NamedTempFile,
    pos: u64,
    /// Each tile's offset in `file` (after its leader) and compressed length.
    offsets: Vec<u64>,
    counts: Vec<u64>,
}

/// What the levels share: sample type, bands per tile, tile side, codec, nodata.
struct Shared<'a> {
    dtype: DType,
    es: usize,
    /// Bands computed together (all of them when pixel-interleaved, else one).
    nb: usize,
    t: usize,
    pixel: bool,
    opts: &'a TiffWriteOptions,
    nodata: Option<f64>,
    dest_path: &'a Path,
}

impl Level {
    fn new(
        (w, h, bands): (usize, usize, usize),
        src: (usize, usize),
        resampling: Resampling,
        sh: &Shared,
    ) -> Result<Level> {
        let (xwin, ywin, xidx, yidx) = match resampling {
            Resampling::Average => (
                avg_windows(src.0, w),
                avg_windows(src.1, h),
                Vec::new(),
                Vec::new(),
            ),
            Resampling::Nearest => (
                Vec::new(),
                Vec::new(),
                nearest_index(src.0, w),
                nearest_index(src.1, h),
            ),
        };
        let shape = if bands == 1 {
            vec![h, w]
        } else {
            vec![bands, h, w]
        };
        let mut layout = TiledLayout::new(&shape, sh.dtype, sh.opts)?;
        layout.batch = batch_for(sh.opts.memory / 4, layout.chunk_bytes);
        let x_two = !xwin.is_empty()
            && xwin
                .iter()
                .enumerate()
                .all(|(i, x)| x.hi - x.lo == 2 && (i == 0 || xwin[i - 1].hi == x.lo));
        Ok(Level {
            w,
            h,
            src_w: src.0,
            xwin,
            ywin,
            xidx,
            yidx,
            x_two,
            ring: VecDeque::new(),
            next: 0,
            strip: vec![0; sh.nb * sh.t * w * sh.es],
            filled: 0,
            layout,
            file: crate::format::temp_beside(sh.dest_path)?,
            pos: 0,
            offsets: Vec::new(),
            counts: Vec::new(),
        })
    }

    /// Starts the level again for the next group of bands.
    fn restart(&mut self) {
        self.ring.clear();
        self.next = 0;
        self.filled = 0;
    }

    /// Takes source row `y` (average): computes every output row it completes, writes
    /// them, and returns them (as written, in f64) for the level below.
    fn feed_average(
        &mut self,
        y: usize,
        row: Vec<f64>,
        sh: &Shared,
    ) -> Result<Vec<(usize, Vec<f64>)>> {
        self.ring.push_back((y, row));
        let mut out = Vec::new();
        while self.next < self.h && self.ywin[self.next].hi <= y + 1 {
            let yw = self.ywin[self.next];
            let fast = self.x_two && yw.hi - yw.lo == 2 && sh.nodata.is_none();
            let first = self.ring.front().map_or(0, |r| r.0);
            let rows: Vec<&[f64]> = (yw.lo..yw.hi)
                .map(|s| self.ring[s - first].1.as_slice())
                .collect();
            let mut vals = vec![0f64; sh.nb * self.w];
            for b in 0..sh.nb {
                let dst = &mut vals[b * self.w..(b + 1) * self.w];
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = average_one(&rows, b * self.src_w, &self.xwin[i], &yw, fast, sh);
                }
            }
            let mut bytes = vec![0u8; vals.len() * sh.es];
            crate::dtype::store_f64(&vals, &mut bytes, sh.dtype);
            self.put_row(&bytes, sh)?;
            out.push((self.next, load_f64(&bytes, sh.dtype)));
            self.next += 1;
            if let Some(w) = self.ywin.get(self.next) {
                while self.ring.front().is_some_and(|r| r.0 < w.lo) {
                    self.ring.pop_front();
                }
            }
        }
        Ok(out)
    }

    /// Takes full-resolution row `y` (nearest, bands x `src_w` samples of raw bytes).
    fn feed_nearest(&mut self, y: usize, row: &[u8], sh: &Shared) -> Result<()> {
        let es = sh.es;
        while self.next < self.h && self.yidx[self.next] == y {
            let mut bytes = vec![0u8; sh.nb * self.w * es];
            for b in 0..sh.nb {
                let src = &row[b * self.src_w * es..(b + 1) * self.src_w * es];
                let dst = &mut bytes[b * self.w * es..(b + 1) * self.w * es];
                for (i, &s) in self.xidx.iter().enumerate() {
                    dst[i * es..(i + 1) * es].copy_from_slice(&src[s * es..(s + 1) * es]);
                }
            }
            self.put_row(&bytes, sh)?;
            self.next += 1;
        }
        Ok(())
    }

    /// Adds an output row (bands x `w` samples) to the row of tiles; writes the tiles
    /// when it is whole or the level's last row is in.
    fn put_row(&mut self, bytes: &[u8], sh: &Shared) -> Result<()> {
        let (t, w, es) = (sh.t, self.w, sh.es);
        for b in 0..sh.nb {
            let at = ((b * t + self.filled) * w) * es;
            self.strip[at..at + w * es].copy_from_slice(&bytes[b * w * es..(b + 1) * w * es]);
        }
        self.filled += 1;
        if self.filled == t || self.next + 1 == self.h {
            self.flush(sh)?;
        }
        Ok(())
    }

    /// Compresses the row of tiles (in parallel) and appends it to the level's file.
    fn flush(&mut self, sh: &Shared) -> Result<()> {
        let (l, rows) = (&self.layout, self.filled);
        let tile = |tx: usize| -> Result<Vec<u8>> {
            let c = l.encode_tile(l.raw_tile(&self.strip, sh.t, rows, tx), sh.dest_path)?;
            let mut framed = Vec::with_capacity(c.len() + 8);
            write_framed(&mut framed, &c).map_err(|e| Error::io("write", self.file.path(), e))?;
            Ok(framed)
        };
        let (offsets, counts) = (&mut self.offsets, &mut self.counts);
        let mut at = self.pos;
        let (end, _) = append_tiles(
            self.file.as_file(),
            self.file.path(),
            self.pos,
            0..l.across,
            l.batch,
            &tile,
            |c| {
                offsets.push(at + 4);
                counts.push(c.len() as u64 - 8);
                at += c.len() as u64;
            },
        )?;
        self.pos = end;
        self.filled = 0;
        self.strip.fill(0);
        Ok(())
    }
}

/// Writes a tile as a COG holds it: its length (u32, little-endian), its bytes, then its
/// last 4 bytes again (GDAL's `BLOCK_LEADER=SIZE_AS_UINT4` and
/// `BLOCK_TRAILER=LAST_4_BYTES_REPEATED`).
fn write_framed(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    out.write_all(&(data.len() as u32).to_le_bytes())?;
    out.write_all(data)?;
    let mut tail = [0u8; 4];
    let n = data.len().min(4);
    tail[4 - n..].copy_from_slice(&data[data.len() - n..]);
    out.write_all(&tail)
}

/// One average: band plane at `plane` of the source `rows` (the window's rows, in
/// order), over column window `xw` and row window `yw`, as GDAL computes it.
fn average_one(rows: &[&[f64]], plane: usize, xw: &Win, yw: &Win, fast: bool, sh: &Shared) -> f64 {
    let (mut total, mut weight) = (0f64, 0f64);
    let mut valid = 0usize;
    for (k, row) in rows.iter().enumerate() {
        let wy = if fast { 1.0 } else { yw.weight(yw.lo + k) };
        let (mut line, mut line_w) = (0f64, 0f64);
        for s in xw.lo..xw.hi {
            let v = row[plane + s];
            if let Some(nd) = sh.nodata
                && (v == nd || (nd.is_nan() && v.is_nan()))
            {
                continue;
            }
            let wx = if fast { 1.0 } else { xw.weight(s) };
            line += v * wx;
            line_w += wx;
            valid += 1;
        }
        total += line * wy;
        weight += line_w * wy;
    }
    let Some(nd) = sh.nodata else {
        return round_for(total / weight, sh.dtype);
    };
    if valid == 0 {
        return nd;
    }
    let v = round_for(total / weight, sh.dtype);
    if v == nd {
        nodata_replacement(nd, sh.dtype)
    } else {
        v
    }
}

/// `v` rounded to the nearest integer (halves away from zero) for integer types.
fn round_for(v: f64, dtype: DType) -> f64 {
    if dtype.is_float() { v } else { v.round() }
}

/// The memory [`build`] holds for a COG of `shape` and `dtype` written as `opts` say: a
/// row of decoded full-resolution tiles and one row of it in f64, and per level its
/// source rows, its row of tiles and that row compressed.
///
/// # Errors
/// [`Error::Invalid`] for a shape that is not an image, or overviews it cannot have.
pub fn memory_needed(
    shape: &[usize],
    dtype: DType,
    opts: &TiffWriteOptions,
    cog: &CogOptions,
) -> Result<u64> {
    let (bands, h, w) = crate::format::tiff::write::image_dims(shape)?;
    let t = opts.tile.max(16);
    let sizes = overview_sizes(w, h, t, cog.overviews)?;
    let (t, es, w) = (t as u64, dtype.size() as u64, w as u64);
    let nb = if opts.pixel_interleave {
        bands as u64
    } else {
        1
    };
    let mut need = w.div_ceil(t) * t * t * nb * es + nb * w * (8 + es);
    let mut src_w = w;
    for &(lw, _) in &sizes {
        let lw = lw as u64;
        need += 3 * nb * src_w * 8 + 3 * nb * t * lw.div_ceil(t) * t * es;
        src_w = lw;
    }
    Ok(need)
}

/// Refuses, before a run, a COG whose overviews `budget` cannot build.
///
/// # Errors
/// [`Error::Invalid`] naming what building them needs; what [`memory_needed`] returns.
pub fn check_budget(
    shape: &[usize],
    dtype: DType,
    opts: &TiffWriteOptions,
    cog: &CogOptions,
    budget: u64,
) -> Result<()> {
    let need = memory_needed(shape, dtype, opts, cog)?;
    if need > budget {
        let (_, h, w) = crate::format::tiff::write::image_dims(shape)?;
        return Err(Error::invalid(format!(
            "building the overviews of a {w}x{h} COG in {t}-pixel tiles needs {} (a row of \
             tiles of the image and of each level), more than the {} budget: give --memory {}MiB \
             or more, or smaller tiles (--tiff-tile)",
            fmt_bytes(need),
            fmt_bytes(budget),
            need.div_ceil(1 << 20),
            t = opts.tile.max(16),
        )));
    }
    Ok(())
}

/// Rewrites the tiled GeoTIFF at `main` (written by tilestream with `opts`) as a
/// Cloud-Optimized GeoTIFF into `dest`, with the overviews `cog` asks for; see the
/// module documentation. Returns the file's length.
///
/// # Errors
/// [`Error::Invalid`] for overviews the image cannot have, or when `opts.memory` cannot
/// hold a row of tiles of every level (the message gives the sizes);
/// [`Error::Io`] on a failed read or write.
pub fn build(
    main: &Path,
    dest: &File,
    dest_path: &Path,
    opts: &TiffWriteOptions,
    cog: &CogOptions,
) -> Result<u64> {
    let (layout, georef) = read_layout(main)?;
    if !layout.tiled || layout.chunk.0 != layout.chunk.1 {
        return Err(Error::Internal(format!(
            "{}: a COG is made from a tiled GeoTIFF with square tiles",
            main.display()
        )));
    }
    let (w, h, t) = (layout.width, layout.height, layout.chunk.0);
    let sizes = overview_sizes(w, h, t, cog.overviews)?;
    let mut lopts = opts.clone();
    lopts.tile = t;
    lopts.pixel_interleave = !layout.planar && layout.bands > 1;
    check_budget(&layout.shape(), layout.dtype, &lopts, cog, opts.memory)?;
    let nodata = georef
        .nodata
        .as_deref()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let pixel = lopts.pixel_interleave;
    let sh = Shared {
        dtype: layout.dtype,
        es: layout.dtype.size(),
        nb: if pixel { layout.bands } else { 1 },
        t,
        pixel,
        opts: &lopts,
        nodata,
        dest_path,
    };
    let mut levels = Vec::with_capacity(sizes.len());
    let mut src = (w, h);
    for &(lw, lh) in &sizes {
        levels.push(Level::new(
            (lw, lh, layout.bands),
            src,
            cog.resampling,
            &sh,
        )?);
        if cog.resampling == Resampling::Average {
            src = (lw, lh);
        }
    }
    if !levels.is_empty() {
        overview_pass(main, &layout, &georef, &mut levels, cog.resampling, &sh)?;
    }
    crate::fault::crash_point(|| "cog-overviews".into());
    assemble(main, &layout, &georef, &levels, dest, dest_path, &lopts)
}

/// Decodes the image a row of tiles at a time and feeds its rows to the levels.
fn overview_pass(
    main: &Path,
    layout: &TiffLayout,
    georef: &GeoRef,
    levels: &mut [Level],
    resampling: Resampling,
    sh: &Shared,
) -> Result<()> {
    let chunks = TiffChunks::new(main, layout.clone(), georef.nodata.as_deref())?;
    let (w, h, t, es, nb) = (layout.width, layout.height, sh.t, sh.es, sh.nb);
    let across = w.div_ceil(t);
    let groups = if sh.pixel { 1 } else { layout.bands };
    let tile_bytes = nb * t * t * es;
    for g in 0..groups {
        for l in levels.iter_mut() {
            l.restart();
        }
        for ty in 0..h.div_ceil(t) {
            let tiles: Vec<Vec<u8>> = (0..across)
                .into_par_iter()
                .map(|tx| {
                    let pos = match (layout.bands, sh.pixel) {
                        (1, _) => vec![ty, tx],
                        (_, true) => vec![0, ty, tx],
                        (_, false) => vec![g, ty, tx],
                    };
                    let mut buf = vec![0u8; tile_bytes];
                    chunks.decode(&pos, &mut buf).map(|()| buf)
                })
                .collect::<Result<_>>()?;
            let mut row = vec![0u8; nb * w * es];
            for y in 0..t.min(h - ty * t) {
                for b in 0..nb {
                    for (tx, tile) in tiles.iter().enumerate() {
                        let x0 = tx * t;
                        let cols = t.min(w - x0);
                        let src = &tile[((b * t + y) * t) * es..((b * t + y) * t + cols) * es];
                        let at = (b * w + x0) * es;
                        row[at..at + cols * es].copy_from_slice(src);
                    }
                }
                let gy = ty * t + y;
                match resampling {
                    Resampling::Nearest => {
                        for l in levels.iter_mut() {
                            l.feed_nearest(gy, &row, sh)?;
                        }
                    }
                    Resampling::Average => {
                        // each level's finished rows go on to the one below
                        let mut rows = vec![(gy, load_f64(&row, sh.dtype))];
                        for l in levels.iter_mut() {
                            let mut next = Vec::new();
                            for (ry, r) in rows {
                                next.extend(l.feed_average(ry, r, sh)?);
                            }
                            rows = next;
                            if rows.is_empty() {
                                break;
                            }
                        }
                    }
                }
            }
        }
        for (k, l) in levels.iter().enumerate() {
            if l.next != l.h {
                return Err(Error::Internal(format!(
                    "COG overview level {} made {} of its {} rows",
                    k + 1,
                    l.next,
                    l.h
                )));
            }
        }
    }
    Ok(())
}

/// GDAL's structural metadata, right after the header: what makes `gdalinfo` report
/// `LAYOUT=COG`.
fn ghost() -> Vec<u8> {
    let body = "LAYOUT=IFDS_BEFORE_DATA\nBLOCK_ORDER=ROW_MAJOR\nBLOCK_LEADER=SIZE_AS_UINT4\n\
                BLOCK_TRAILER=LAST_4_BYTES_REPEATED\nKNOWN_INCOMPATIBLE_EDITION=NO\n ";
    format!(
        "GDAL_STRUCTURAL_METADATA_SIZE={:06} bytes\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Writes the COG: header, ghost area, directories, then the levels' tiles (smallest
/// first) and the full-resolution tiles copied from `main` with their leaders and
/// trailers. `opts` are the options of `main` (its tile side and interleave).
fn assemble(
    main: &Path,
    layout: &TiffLayout,
    georef: &GeoRef,
    levels: &[Level],
    dest: &File,
    dest_path: &Path,
    opts: &TiffWriteOptions,
) -> Result<u64> {
    let n_main = layout.offsets.len();
    let n_levels: usize = levels.iter().map(|l| l.offsets.len()).sum();
    let data_len: u64 = layout.byte_counts.iter().sum::<u64>()
        + 8 * (n_main + n_levels) as u64
        + levels.iter().map(|l| l.pos).sum::<u64>();
    // the directories take a few KiB per 1000 tiles: BigTIFF when the data nears 4 GiB
    let big = match opts.bigtiff {
        Some(b) => b,
        None => layout.bigtiff || data_len > (4 << 30) - (64 << 20),
    };
    if !big && data_len > u64::from(u32::MAX) - (64 << 20) {
        return Err(Error::invalid(format!(
            "{}: the COG's tiles pass 4 GiB, more than a classic TIFF can address; write it \
             as BigTIFF (--tiff-bigtiff yes)",
            dest_path.display()
        )));
    }
    // directories: the full image's, then each level's
    let ifd_for = |l: Option<&Level>, offsets: &[u64], counts: &[u64]| -> Result<Vec<Entry>> {
        let mut tl = match l {
            None => TiledLayout::new(&layout.shape(), layout.dtype, opts)?,
            Some(l) => l.layout.clone(),
        };
        tl.big = big;
        let g = match l {
            None => Some(georef.clone()),
            Some(_) => georef.nodata.clone().map(|n| GeoRef {
                nodata: Some(n),
                ..GeoRef::default()
            }),
        };
        let mut e = tl.entries(layout.dtype, g.as_ref(), offsets, counts)?;
        if l.is_some() {
            // NewSubfileType: a reduced-resolution version of the image
            e.push(longs(254, &[1], false));
        }
        Ok(e)
    };
    let header_len: u64 = if big { 16 } else { 8 };
    let ghost = ghost();
    let mut at = header_len + ghost.len() as u64;
    at += at % 2;
    let mut ifd_at = Vec::with_capacity(levels.len() + 1);
    let zeros = |n: usize| vec![0u64; n];
    for k in 0..=levels.len() {
        let n = if k == 0 {
            n_main
        } else {
            levels[k - 1].offsets.len()
        };
        let l = (k > 0).then(|| &levels[k - 1]);
        let len = ifd_bytes(ifd_for(l, &zeros(n), &zeros(n))?, 0, big, 0).len() as u64;
        ifd_at.push(at);
        at += len;
        at += at % 2;
    }
    // tile data: the smallest level first
    let data_start = at;
    let mut level_base = vec![0u64; levels.len()];
    for k in (0..levels.len()).rev() {
        level_base[k] = at;
        at += levels[k].pos;
    }
    let mut main_offsets = Vec::with_capacity(n_main);
    for &c in &layout.byte_counts {
        main_offsets.push(at + 4);
        at += 8 + c;
    }
    let end = at;
    let mut head = Vec::new();
    if big {
        head.extend([b'I', b'I', 43, 0, 8, 0, 0, 0]);
        head.extend(ifd_at[0].to_le_bytes());
    } else {
        head.extend([b'I', b'I', 42, 0]);
        head.extend((ifd_at[0] as u32).to_le_bytes());
    }
    head.extend(&ghost);
    for k in 0..=levels.len() {
        head.resize(ifd_at[k] as usize, 0);
        let next = ifd_at.get(k + 1).copied().unwrap_or(0);
        let ifd = if k == 0 {
            ifd_for(None, &main_offsets, &layout.byte_counts)?
        } else {
            let l = &levels[k - 1];
            let offs: Vec<u64> = l.offsets.iter().map(|o| o + level_base[k - 1]).collect();
            ifd_for(Some(l), &offs, &l.counts)?
        };
        head.extend(ifd_bytes(ifd, ifd_at[k], big, next));
    }
    head.resize(data_start as usize, 0);
    let io = |e: std::io::Error| Error::io("write", dest_path, e);
    let mut d = dest;
    d.set_len(0).map_err(io)?;
    d.seek(SeekFrom::Start(0)).map_err(io)?;
    d.write_all(&head).map_err(io)?;
    for k in (0..levels.len()).rev() {
        let at = d.stream_position().map_err(io)?;
        if at != level_base[k] {
            return Err(Error::Internal(format!(
                "COG level {} written at {at} instead of {}",
                k + 1,
                level_base[k]
            )));
        }
        let mut f = levels[k].file.as_file();
        f.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io("read back", levels[k].file.path(), e))?;
        std::io::copy(&mut f, &mut d).map_err(io)?;
    }
    let src = crate::io::own_files::open_input(main)?;
    let mut out = BufWriter::with_capacity(1 << 20, d);
    let mut buf = Vec::new();
    for (&o, &c) in layout.offsets.iter().zip(&layout.byte_counts) {
        buf.resize(c as usize, 0);
        src.read_exact_at(&mut buf, o)
            .map_err(|e| Error::io("read back", main, e))?;
        write_framed(&mut out, &buf).map_err(io)?;
    }
    let mut d = out.into_inner().map_err(|e| io(e.into_error()))?;
    let at = d.stream_position().map_err(io)?;
    if at != end {
        return Err(Error::Internal(format!(
            "COG written up to {at} instead of {end}"
        )));
    }
    Ok(end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn overview_sizes_halve_until_a_tile_holds_the_smallest() {
        let auto = |w, h, t| overview_sizes(w, h, t, Overviews::Auto).unwrap();
        assert_eq!(
            auto(20000, 20000, 512),
            vec![
                (10000, 10000),
                (5000, 5000),
                (2500, 2500),
                (1250, 1250),
                (625, 625),
                (313, 313)
            ]
        );
        assert_eq!(auto(512, 512, 512), vec![]);
        assert_eq!(auto(513, 10, 512), vec![(257, 5)]);
        assert_eq!(auto(1000, 700, 256), vec![(500, 350), (250, 175)]);
        let n = |w, h, k| overview_sizes(w, h, 512, Overviews::Count(k));
        assert_eq!(n(5, 3, 3).unwrap(), vec![(3, 2), (2, 1), (1, 1)]);
        assert_eq!(n(5, 3, 0).unwrap(), vec![]);
        let e = n(5, 3, 4).unwrap_err().to_string();
        assert!(e.contains("3 overview levels at most"), "{e}");
    }

    #[test]
    fn average_windows_weigh_partly_covered_edge_pixels() {
        let w = |lo, hi, w_lo, w_hi| Win { lo, hi, w_lo, w_hi };
        assert_eq!(
            avg_windows(4, 2),
            vec![w(0, 2, 1.0, 1.0), w(2, 4, 1.0, 1.0)]
        );
        let odd = avg_windows(5, 3);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert_eq!((odd[0].lo, odd[0].hi), (0, 2));
        assert!(close(odd[0].w_lo, 1.0) && close(odd[0].w_hi, 2.0 / 3.0));
        assert_eq!((odd[1].lo, odd[1].hi), (1, 4));
        assert!(close(odd[1].w_lo, 1.0 / 3.0) && close(odd[1].w_hi, 1.0 / 3.0));
        assert_eq!((odd[2].lo, odd[2].hi), (3, 5));
        assert!(close(odd[2].w_lo, 2.0 / 3.0) && close(odd[2].w_hi, 1.0));
        // a 1-pixel window weighs 1
        assert_eq!(avg_windows(3, 3)[1], w(1, 2, 1.0, 1.0));
        assert_eq!(nearest_index(5, 3), vec![0, 2, 3]);
        assert_eq!(nearest_index(4, 2), vec![0, 2]);
    }

    #[test]
    fn nodata_replacements_are_the_next_value() {
        assert_eq!(nodata_replacement(0.0, DType::U16), 1.0);
        assert_eq!(nodata_replacement(255.0, DType::U8), 254.0);
        assert_eq!(nodata_replacement(-9999.0, DType::I16), -9998.0);
        let f = nodata_replacement(-9999.0, DType::F32);
        // the next f32 up, as GDAL replaces float nodata
        assert!(f > -9999.0 && f < -9998.999 && f64::from(f as f32) == f);
    }

    #[test]
    fn ghost_area_says_its_own_size() {
        let g = String::from_utf8(ghost()).unwrap();
        let (first, rest) = g.split_once('\n').unwrap();
        assert_eq!(
            first,
            format!("GDAL_STRUCTURAL_METADATA_SIZE={:06} bytes", rest.len())
        );
        assert_eq!(rest.len(), 140);
    }
}
