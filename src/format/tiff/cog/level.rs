//! The overview levels of a COG, built in one pass: each level keeps the few source rows
//! its next row needs, averages (GDAL's windows, nodata left out) or picks (nearest) its
//! pixels, and compresses a row of its tiles as soon as it is whole.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use super::{
    DType, Element, Error, Resampling, Result, TiffWriteOptions, TiledLayout, append_tiles,
    batch_for,
};

/// The source pixels `[lo, hi)` one output pixel averages, with the weights of the first
/// and last (fractional coverage); the ones between weigh 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Win {
    pub(super) lo: usize,
    pub(super) hi: usize,
    pub(super) w_lo: f64,
    pub(super) w_hi: f64,
}

impl Win {
    /// The weight of source pixel `s` (in `lo..hi`).
    pub(super) fn weight(&self, s: usize) -> f64 {
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
pub(super) fn avg_windows(src: usize, dst: usize) -> Vec<Win> {
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
pub(super) fn nearest_index(src: usize, dst: usize) -> Vec<usize> {
    let r = src as f64 / dst as f64;
    (0..dst)
        .map(|i| ((0.5 + i as f64 * r) as usize).min(src - 1))
        .collect()
}

/// The value an average that equals the nodata value is written as (GDAL's replacement:
/// the next representable value up, down at the top of the type's range).
pub(super) fn nodata_replacement(nodata: f64, dtype: DType) -> f64 {
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
        let max = crate::dispatch_dtype!(dtype, T => Element::to_f64(T::HIGHEST), complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
        if nodata >= max {
            nodata - 1.0
        } else {
            nodata + 1.0
        }
    }
}

/// Samples of `dtype` as f64.
pub(super) fn load_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    crate::dispatch_dtype!(dtype, T => {
        crate::dtype::typed::<T>(bytes).iter().map(|v| Element::to_f64(*v)).collect()
    }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"))
}

/// An overview level being computed and written.
pub(super) struct Level {
    /// Its size.
    pub(super) w: usize,
    pub(super) h: usize,
    /// The size of the rows it is computed from (the level above, or the full image for
    /// nearest).
    pub(super) src_w: usize,
    /// Average: the windows across and down; nearest: the source pixels.
    pub(super) xwin: Vec<Win>,
    pub(super) ywin: Vec<Win>,
    pub(super) xidx: Vec<usize>,
    pub(super) yidx: Vec<usize>,
    /// Every column window is two pixels, back to back (a factor of exactly 2 across):
    /// GDAL then averages two-row windows with equal weights.
    pub(super) x_two: bool,
    /// Source rows kept for the next output rows: (row index, bands x `src_w` values).
    pub(super) ring: VecDeque<(usize, Vec<f64>)>,
    /// The next output row.
    pub(super) next: usize,
    /// The row of tiles being filled: bands x tile rows x `w` samples.
    pub(super) strip: Vec<u8>,
    /// Rows of it filled.
    pub(super) filled: usize,
    /// Its geometry as a tiled image (tile side, interleave, batch of tiles in flight).
    pub(super) layout: TiledLayout,
    /// Its tiles, written one after another (leader, data, trailer).
    pub(super) file: tempfile::NamedTempFile,
    pub(super) pos: u64,
    /// Each tile's offset in `file` (after its leader) and compressed length.
    pub(super) offsets: Vec<u64>,
    pub(super) counts: Vec<u64>,
}

/// What the levels share: sample type, bands per tile, tile side, codec, nodata.
pub(super) struct Shared<'a> {
    pub(super) dtype: DType,
    pub(super) es: usize,
    /// Bands computed together (all of them when pixel-interleaved, else one).
    pub(super) nb: usize,
    pub(super) t: usize,
    pub(super) pixel: bool,
    pub(super) opts: &'a TiffWriteOptions,
    pub(super) nodata: Option<f64>,
    pub(super) dest_path: &'a Path,
}

impl Level {
    pub(super) fn new(
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
    pub(super) fn restart(&mut self) {
        self.ring.clear();
        self.next = 0;
        self.filled = 0;
    }

    /// Takes source row `y` (average): computes every output row it completes, writes
    /// them, and returns them (as written, in f64) for the level below.
    pub(super) fn feed_average(
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
    pub(super) fn feed_nearest(&mut self, y: usize, row: &[u8], sh: &Shared) -> Result<()> {
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
    pub(super) fn put_row(&mut self, bytes: &[u8], sh: &Shared) -> Result<()> {
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
    pub(super) fn flush(&mut self, sh: &Shared) -> Result<()> {
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
pub(super) fn write_framed(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    out.write_all(&(data.len() as u32).to_le_bytes())?;
    out.write_all(data)?;
    let mut tail = [0u8; 4];
    let n = data.len().min(4);
    tail[4 - n..].copy_from_slice(&data[data.len() - n..]);
    out.write_all(&tail)
}

/// One average: band plane at `plane` of the source `rows` (the window's rows, in
/// order), over column window `xw` and row window `yw`, as GDAL computes it.
pub(super) fn average_one(
    rows: &[&[f64]],
    plane: usize,
    xw: &Win,
    yw: &Win,
    fast: bool,
    sh: &Shared,
) -> f64 {
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
pub(super) fn round_for(v: f64, dtype: DType) -> f64 {
    if dtype.is_float() { v } else { v.round() }
}
