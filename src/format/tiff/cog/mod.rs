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

mod level;

use level::{Level, Shared, load_f64, write_framed};
#[cfg(test)]
use level::{Win, avg_windows, nearest_index, nodata_replacement};

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
                "`overviews={}`: a {width}x{height} image has {} overview levels at most \
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

/// The line a plan shows for building the overviews of the COG `opts` write for an
/// image of `shape` and `dtype` within `budget` bytes (`None` when they write no COG).
///
/// # Errors
/// [`Error::Invalid`] for overviews the image cannot have or the budget cannot build.
pub(crate) fn plan_line(
    opts: &TiffWriteOptions,
    shape: &[usize],
    dtype: DType,
    budget: u64,
) -> Result<Option<String>> {
    let Some(cog) = &opts.cog else {
        return Ok(None);
    };
    check_budget(shape, dtype, opts, cog, budget)?;
    let need = memory_needed(shape, dtype, opts, cog)?;
    let (_, h, w) = crate::format::tiff::image_dims(shape)?;
    let levels = overview_sizes(w, h, opts.tile.max(16), cog.overviews)?.len();
    let resampling = format!("{:?}", cog.resampling).to_lowercase();
    Ok(Some(format!(
        "COG overviews: {levels} level{} ({resampling}), built in one pass over the \
         written image within {} (a row of tiles of the image and of each level)",
        if levels == 1 { "" } else { "s" },
        fmt_bytes(need)
    )))
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
             tiles of the image and of each level), more than the {} budget: give `memory={}MiB` \
             or more, or smaller tiles (`tiff_tile`)",
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
    let chunks = TiffChunks::new(
        main,
        crate::io::source::Source::open(main)?,
        layout.clone(),
        georef.nodata.as_deref(),
    )?;
    let (w, h, t, es, nb) = (layout.width, layout.height, sh.t, sh.es, sh.nb);
    let across = w.div_ceil(t);
    let groups = if sh.pixel { 1 } else { layout.bands };
    let tile_bytes = nb * t * t * es;
    for g in 0..groups {
        for l in levels.iter_mut() {
            l.restart();
        }
        for ty in 0..h.div_ceil(t) {
            let tiles: Vec<Vec<u8>> = crate::io::pool::install(|| {
                (0..across)
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
                    .collect::<Result<_>>()
            })?;
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
             as BigTIFF (`tiff_bigtiff=yes`)",
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
