//! A GeoTIFF output encoded while the run writes it: no raw staging file, no encoding
//! pass after the run, and compression overlapping the compute of later tiles.
//!
//! The output's tiles (one band each: a band-sequential or single-band TIFF) are
//! assembled from the pieces the run writes (`chunk_assembly`); as soon as a
//! tile is whole it is handed to an `EncodeQueue`, which predicts and compresses it on
//! a worker thread while the write stage goes on with the next pipeline tile, and
//! appends it to the file, in the order the tiles completed, recording its offset. The
//! directory, with the offsets table in tile order, goes after the last tile
//! ([`TiffStream::finish`]). A run over a flat plan completes the tiles in file order,
//! row of tiles after row of tiles: its file equals the writer of whole images'
//! ([`crate::format::tiff::write::write_tiled`]) byte for byte. A run over box tiles cut along the
//! tile grid completes a box's tiles box by box: the same tiles, in the order of the
//! boxes.
//!
//! Each run of consecutive tiles appended one after the other is reported
//! ([`TiffStream::take_appended`]: its first tile, offset, the tiles' compressed lengths
//! and the CRC-32 of its bytes) for the resume journal, which takes a killed run up with
//! the runs whose bytes are intact ([`TiffStream::resume`]).
//!
//! A pixel-interleaved TIFF of several bands has tiles holding every band of their
//! region: it streams when the run visits the bands of each position one after another
//! (a flat plan whose `bands_inner` is set: one row of tiles fills at a time; a box plan
//! whose `bands_together` is: the tiles of one box); otherwise it is refused.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunk_assembly::{ChunkAssembly, ChunkGrid, ChunkRun};
use crate::format::encode_queue::{EncodeQueue, Sink};
use crate::format::tiff::write::{TiffWriteOptions, TiledLayout};

/// The most tiles a stream has in flight (fewer when its memory holds fewer).
pub const MAX_BATCH: u64 = 16;

/// A GeoTIFF encoded tile by tile as the run writes it; see the module documentation.
pub struct TiffStream {
    layout: TiledLayout,
    dtype: DType,
    opts: TiffWriteOptions,
    /// The tiles being filled.
    asm: Mutex<ChunkAssembly>,
    /// The tiles in flight, and what is in the file.
    queue: EncodeQueue<Written>,
    /// The memory the tiles being filled and those in flight take, held for the run.
    memory: Option<Reservation>,
}

impl std::fmt::Debug for TiffStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiffStream")
            .field("layout", &self.layout)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

/// What is in the file: the sink of the stream's [`EncodeQueue`].
#[derive(Debug)]
struct Written {
    file: File,
    path: PathBuf,
    /// Where the next tile goes in the file.
    pos: u64,
    /// Offset and compressed length of each tile in the file, in tile order (0, 0 for
    /// one not written yet).
    offsets: Vec<u64>,
    counts: Vec<u64>,
    /// The run the last tiles appended belong to, still growing.
    open: Option<(ChunkRun, crc32fast::Hasher)>,
    /// Runs ended since the last [`TiffStream::take_appended`].
    appended: Vec<ChunkRun>,
    /// Seed of every run's CRC-32 (see [`TiffStream::strip_hasher`]).
    seed: u32,
}

impl Written {
    /// Ends the open run.
    fn close_run(&mut self) {
        if let Some((mut run, h)) = self.open.take() {
            run.crc = h.finalize();
            self.appended.push(run);
        }
    }
}

impl Sink for Written {
    fn put(&mut self, k: usize, c: Vec<u8>) -> Result<()> {
        self.file
            .write_all_at(&c, self.pos)
            .map_err(|e| Error::io("write", &self.path, e))?;
        let (at, len) = (self.pos, c.len() as u64);
        self.offsets[k] = at;
        self.counts[k] = len;
        self.pos += len;
        // a tile following the open run's last, in index and in the file, extends it
        let extends = self
            .open
            .as_ref()
            .is_some_and(|(r, _)| r.first + r.counts.len() == k);
        if !extends {
            self.close_run();
            let run = ChunkRun {
                first: k,
                offset: at,
                counts: Vec::new(),
                crc: 0,
            };
            self.open = Some((run, crc32fast::Hasher::new_with_initial(self.seed)));
        }
        if let Some((run, h)) = self.open.as_mut() {
            run.counts.push(len);
            h.update(&c);
        }
        Ok(())
    }
}

/// The grid of a TIFF's tiles over the output's flat elements: `(bands, height, width)`
/// cut in `1 x t x t` chunks (`bands x t x t` for a pixel-interleaved TIFF, whose tiles
/// hold every band), numbered as the TIFF numbers its tiles.
fn tile_grid(l: &TiledLayout) -> Result<ChunkGrid> {
    ChunkGrid::new(&[l.bands, l.height, l.width], &[l.spp(), l.t, l.t])
}

/// The raw tile `k` of `l` from its clipped C-order bytes `buf` (band, row, column):
/// padded with zeros to the full tile and, for a pixel-interleaved TIFF, with the bands
/// of each pixel together.
fn padded(l: &TiledLayout, k: usize, buf: Vec<u8>) -> Vec<u8> {
    let (ty, tx) = ((k / l.across) % l.down, k % l.across);
    let rows = l.t.min(l.height - ty * l.t);
    let cols = l.t.min(l.width - tx * l.t);
    if !l.pixel && rows == l.t && cols == l.t {
        return buf;
    }
    l.gather_tile(&buf, cols, 0, rows, rows, cols)
}

impl TiffStream {
    /// Whether an output of `shape` written as `opts` say can be streamed within
    /// `room` bytes: `room` holds the tiles being filled and at least one tile in flight
    /// (raw and compressed). The tiles being filled are `open` whole tiles (a box plan
    /// cut along the tile grid: those across one box; `None`: a whole row of tiles,
    /// which a flat plan crosses), with every band for a pixel-interleaved TIFF of
    /// several bands, which streams only when the run visits the bands of each position
    /// one after another (`bands_inner`). Returns the bytes
    /// the stream then holds and the options to create it with (their `memory` set to
    /// what is left for tiles in flight: at most [`MAX_BATCH`], so the figure, which a
    /// plan holds, does not depend on the machine).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a shape or dtype a TIFF cannot hold.
    pub fn fit(
        shape: &[usize],
        dtype: DType,
        opts: &TiffWriteOptions,
        room: u64,
        open: Option<usize>,
        bands_inner: bool,
    ) -> Result<Option<(u64, TiffWriteOptions)>> {
        let (filling, tile) = Self::least(shape, dtype, opts, open)?;
        let pixel = TiledLayout::new(shape, dtype, opts)?.pixel;
        if (pixel && !bands_inner) || filling + tile > room {
            return Ok(None);
        }
        let batch = ((room - filling) / tile).min(MAX_BATCH);
        let mut o = opts.clone();
        o.memory = batch * tile;
        Ok(Some((filling + batch * tile, o)))
    }

    /// What streaming an output of `shape` written as `opts` say holds at the least, as
    /// [`TiffStream::fit`] counts it: the bytes of the tiles being filled (`open` of
    /// them, or a row of tiles) and of one tile in flight (raw and compressed).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a shape or dtype a TIFF cannot hold.
    pub fn least(
        shape: &[usize],
        dtype: DType,
        opts: &TiffWriteOptions,
        open: Option<usize>,
    ) -> Result<(u64, u64)> {
        let l = TiledLayout::new(shape, dtype, opts)?;
        let filling = match open {
            None => (l.t.min(l.height) * l.width * l.es * l.spp()) as u64,
            Some(n) => (n.max(1) * l.t * l.t * l.es * l.spp()) as u64,
        };
        Ok((filling, 2 * l.chunk_bytes as u64))
    }

    /// A stream writing into `file`, holding `memory` for the run; `opts.memory` bounds
    /// the tiles in flight. A `fresh` file is emptied first; otherwise (an interrupted
    /// run's, taken up) its tiles stay for [`TiffStream::resume`] to check. Either way
    /// the header is written.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a shape or dtype a TIFF cannot hold; [`Error::Internal`]
    /// for a layout that cannot be streamed ([`TiffStream::fit`] says which);
    /// [`Error::Io`] if the file cannot be written.
    pub fn create(
        file: &File,
        path: &Path,
        shape: &[usize],
        dtype: DType,
        opts: TiffWriteOptions,
        memory: Option<Reservation>,
        fresh: bool,
    ) -> Result<Self> {
        let layout = TiledLayout::new(shape, dtype, &opts)?;
        if fresh {
            file.set_len(0).map_err(|e| Error::io("size", path, e))?;
        }
        file.write_all_at(layout.header(), 0)
            .map_err(|e| Error::io("write", path, e))?;
        let asm = ChunkAssembly::new(tile_grid(&layout)?, layout.es);
        let n = asm.grid().chunks();
        let written = Written {
            file: file
                .try_clone()
                .map_err(|e| Error::io("open a second handle on", path, e))?,
            path: path.to_path_buf(),
            pos: layout.data_start(),
            offsets: vec![0; n],
            counts: vec![0; n],
            open: None,
            appended: Vec::new(),
            seed: Self::seed(&layout, dtype),
        };
        let (enc_layout, enc_path) = (layout.clone(), path.to_path_buf());
        let encode = Arc::new(move |k: usize, buf: Vec<u8>| {
            enc_layout.encode_tile(padded(&enc_layout, k, buf), &enc_path)
        });
        Ok(TiffStream {
            queue: EncodeQueue::new(written, layout.batch, encode),
            layout,
            dtype,
            opts,
            asm: Mutex::new(asm),
            memory,
        })
    }

    /// Number of tiles.
    #[must_use]
    pub fn tiles(&self) -> usize {
        self.layout.planes() * self.layout.down * self.layout.across
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, ChunkAssembly>> {
        self.asm
            .lock()
            .map_err(|_| Error::Internal("GeoTIFF stream lock poisoned".into()))
    }

    /// Takes `bytes` of the output from flat element `start` on. Bytes of tiles already
    /// in the file (a resumed run redoing a box that began among kept tiles) are
    /// dropped; tiles completed here are handed on to be compressed and appended, and
    /// this returns without waiting for them unless as many as the stream's memory
    /// holds are in flight already.
    ///
    /// # Errors
    /// [`Error::Io`] on a failed write or compression of this or an earlier tile;
    /// [`Error::Internal`] for bytes past the output's end.
    pub fn write(&self, start: u64, bytes: &[u8]) -> Result<()> {
        self.lock()?.feed(start, bytes, |done| {
            done.into_iter()
                .try_for_each(|(k, buf)| self.queue.submit(k, buf))
        })
    }

    /// The seed of a run's CRC-32: everything that decides how its bytes were encoded
    /// (tile side, compression and level, predictor, BigTIFF, dtype, shape), so that
    /// tiles an interrupted run encoded otherwise (`--resume` with other `--tiff-*`
    /// options) never match, and are redone.
    fn seed(l: &TiledLayout, dtype: DType) -> u32 {
        let id = format!(
            "tile {} {:?} predictor {} big {} {} {}x{}x{}",
            l.t, l.compression, l.predictor, l.big, dtype, l.bands, l.height, l.width
        );
        crc32fast::hash(id.as_bytes())
    }

    /// Waits until the tiles in flight are in the file.
    ///
    /// # Errors
    /// The error of a tile's compression or write.
    pub fn settle(&self) -> Result<()> {
        self.queue.drain()
    }

    /// The runs of tiles appended since the last call, in order (tiles still in flight
    /// come in a later call).
    #[must_use]
    pub fn take_appended(&self) -> Vec<ChunkRun> {
        self.queue
            .with_sink(|w| {
                w.close_run();
                std::mem::take(&mut w.appended)
            })
            .unwrap_or_default()
    }

    /// Takes up the tiles an interrupted run appended to `file`: the longest prefix of
    /// the runs `done` (each starting where the last ended, of tiles not yet taken)
    /// whose bytes in the file still have their checksums. The file is cut after them;
    /// their tiles are done ([`TiffStream::covers`]). Returns the number of tiles kept.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read or cut.
    pub fn resume(&self, file: &File, path: &Path, done: &[ChunkRun]) -> Result<usize> {
        let mut asm = self.lock()?;
        self.queue.drain()?;
        self.queue.with_sink(|w| {
            let mut pos = self.layout.data_start();
            let mut buf = vec![0u8; 64 << 10];
            let mut kept = 0;
            for d in done {
                let tiles = d.first..d.first + d.counts.len();
                if d.offset != pos
                    || d.counts.is_empty()
                    || tiles.end > self.tiles()
                    || tiles.clone().any(|k| asm.is_done(k))
                {
                    break;
                }
                let len: u64 = d.counts.iter().sum();
                let mut crc = crc32fast::Hasher::new_with_initial(w.seed);
                let mut at = 0u64;
                while at < len {
                    let n = (len - at).min(buf.len() as u64) as usize;
                    if file.read_exact_at(&mut buf[..n], pos + at).is_err() {
                        break;
                    }
                    crc.update(&buf[..n]);
                    at += n as u64;
                }
                if at < len || crc.finalize() != d.crc {
                    break;
                }
                for (k, &c) in tiles.zip(&d.counts) {
                    asm.mark_done(k);
                    w.offsets[k] = pos;
                    w.counts[k] = c;
                    pos += c;
                    kept += 1;
                }
            }
            file.set_len(pos).map_err(|e| Error::io("size", path, e))?;
            w.pos = pos;
            Ok(kept)
        })?
    }

    /// Whether every element of the flat range `[start, start + len)` is in a tile
    /// already complete (in the file, or on its way there).
    #[must_use]
    pub fn covers(&self, start: u64, len: u64) -> bool {
        self.asm.lock().is_ok_and(|a| a.covers(start, len))
    }

    /// The options the stream encodes with.
    #[must_use]
    pub fn options(&self) -> &TiffWriteOptions {
        &self.opts
    }

    /// Waits for the tiles in flight, then gives back the memory held for them (when
    /// the run is done). An error of theirs is returned by [`TiffStream::finish`].
    pub fn release_memory(&mut self) {
        if self.queue.drain().is_err() {
            // keep the memory: finish reports the failure
            return;
        }
        self.memory = None;
    }

    /// Writes the directory after the last tile, once every tile is in the file.
    ///
    /// # Errors
    /// The error of a tile's compression or write; [`Error::Internal`] if a tile is
    /// missing; [`Error::Io`] on a failed write.
    pub fn finish(&self, file: &File, path: &Path) -> Result<u64> {
        let asm = self.lock()?;
        self.queue.drain()?;
        if asm.done_count() != self.tiles() {
            return Err(Error::Internal(format!(
                "GeoTIFF stream finished with {} of {} tiles written",
                asm.done_count(),
                self.tiles()
            )));
        }
        self.queue.with_sink(|w| {
            self.layout.finish(
                file, path, self.dtype, &self.opts, w.pos, &w.offsets, &w.counts,
            )
        })?
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::tiff::write::{TiffCompression, write_tiled};

    /// Test data: a pattern that compresses, but not to nothing.
    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7919) % 251 / 3) as u8).collect()
    }

    /// A streamed file written in pieces of `piece` bytes equals the staged writer's.
    #[test]
    fn a_streamed_file_equals_the_staged_one_whatever_the_pieces() {
        let dir = tempfile::tempdir().unwrap();
        for (shape, dtype, tile, comp, pixel) in [
            (
                vec![37, 50],
                DType::U8,
                16,
                TiffCompression::Deflate(6),
                false,
            ),
            (
                vec![3, 40, 33],
                DType::U16,
                16,
                TiffCompression::Zstd(3),
                false,
            ),
            (
                vec![2, 16, 16],
                DType::F32,
                16,
                TiffCompression::None,
                false,
            ),
            (
                vec![1, 100, 7],
                DType::F64,
                32,
                TiffCompression::Deflate(1),
                false,
            ),
            // tiles holding every band, the edge ones clipped, with a predictor
            (
                vec![3, 40, 33],
                DType::U16,
                16,
                TiffCompression::Deflate(6),
                true,
            ),
            (
                vec![4, 17, 20],
                DType::F32,
                16,
                TiffCompression::Zstd(3),
                true,
            ),
        ] {
            let opts = TiffWriteOptions {
                tile,
                compression: comp,
                memory: 3000,
                pixel_interleave: pixel,
                ..TiffWriteOptions::default()
            };
            let n = shape.iter().product::<usize>() * dtype.size();
            let src = data(n);
            let staged = dir.path().join("staged.tif");
            let f = File::create(&staged).unwrap();
            let read = |at: u64, b: &mut [u8]| {
                b.copy_from_slice(&src[at as usize..at as usize + b.len()]);
                Ok(())
            };
            write_tiled(&f, &staged, &shape, dtype, &opts, &read).unwrap();
            let want = std::fs::read(&staged).unwrap();
            for piece in [dtype.size(), 24 * dtype.size(), 1000 * dtype.size(), n] {
                let path = dir.path().join("streamed.tif");
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .unwrap();
                let s =
                    TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, true).unwrap();
                let mut appended = 0;
                let mut runs = |s: &TiffStream| {
                    appended += s
                        .take_appended()
                        .iter()
                        .map(|d| d.counts.len())
                        .sum::<usize>();
                };
                for (k, c) in src.chunks(piece).enumerate() {
                    s.write((k * piece / dtype.size()) as u64, c).unwrap();
                    runs(&s);
                }
                s.finish(&f, &path).unwrap();
                runs(&s);
                assert_eq!(appended, s.tiles());
                assert!(
                    std::fs::read(&path).unwrap() == want,
                    "{shape:?} {dtype} pieces of {piece}"
                );
            }
        }
    }

    /// A run killed after some rows of tiles resumes with the intact runs and gives the
    /// same file; a damaged run and everything after it are redone.
    #[test]
    fn resume_keeps_the_intact_runs_and_redoes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (shape, dtype) = (vec![2, 50, 40], DType::U16);
        let opts = TiffWriteOptions {
            tile: 16,
            compression: TiffCompression::Deflate(6),
            ..TiffWriteOptions::default()
        };
        let src = data(2 * 50 * 40 * 2);
        let path = dir.path().join("o.tif");
        let open = || {
            File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap()
        };
        let whole = |s: &TiffStream, f: &File, from: u64| {
            let es = 2u64;
            s.write(from, &src[(from * es) as usize..]).unwrap();
            s.finish(f, &path).unwrap();
            std::fs::read(&path).unwrap()
        };
        let f = open();
        let s = TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, true).unwrap();
        let want = whole(&s, &f, 0);
        // a run that wrote 5 of the 8 rows of tiles
        let f = open();
        let s = TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, true).unwrap();
        // 3 tiles across, 4 rows of tiles a band: the first element of row of tiles `r`
        let row_start = |r: usize| (((r / 4) * 50 + (r % 4) * 16) * 40) as u64;
        // the journal takes the runs appended after each pipeline tile: here a row of
        // tiles, then 100 elements of the next
        let mut done = Vec::new();
        for r in 0..6 {
            let end = if r < 5 {
                row_start(r + 1)
            } else {
                row_start(5) + 100
            };
            s.write(
                row_start(r),
                &src[row_start(r) as usize * 2..end as usize * 2],
            )
            .unwrap();
            s.queue.drain().unwrap();
            done.extend(s.take_appended());
        }
        assert_eq!(done.len(), 5);
        assert!(done.iter().all(|d| d.counts.len() == 3));
        drop(s);
        for (damage, kept) in [(None, 15), (Some(3), 9)] {
            let f = open();
            if let Some(k) = damage {
                f.write_all_at(&[0xff, 0xfe], done[k].offset + 3).unwrap();
            }
            let s =
                TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, false).unwrap();
            assert_eq!(s.resume(&f, &path, &done).unwrap(), kept);
            // the resumed run redoes from the start of a tile before the kept tiles' end
            let from = row_start(kept / 3);
            assert!(s.covers(0, from) && !s.covers(0, from + 1));
            assert!(whole(&s, &f, from - 7) == want, "damage {damage:?}");
        }
        // tiles encoded with other options (--resume with another --tiff-compress) are
        // all redone, though their offsets and tile counts would fit
        let f = open();
        let zstd = TiffWriteOptions {
            compression: TiffCompression::Zstd(3),
            ..opts.clone()
        };
        let s = TiffStream::create(&f, &path, &shape, dtype, zstd, None, false).unwrap();
        assert_eq!(s.resume(&f, &path, &done).unwrap(), 0);
    }
}
