//! A GeoTIFF output encoded while the run writes it: no raw staging file, no encoding
//! pass after the run, and compression overlapping the compute of later tiles.
//!
//! The output's tiles (one band each: a band-sequential or single-band TIFF) are
//! assembled from the pieces the run writes ([`super::chunk_assembly`]); as soon as a
//! tile is whole it is compressed (the tiles completed together in parallel, a batch
//! at a time) and appended to the file, and its offset is recorded. The directory, with
//! the offsets table in tile order, goes after the last tile ([`TiffStream::finish`]).
//! A run over a flat plan completes the tiles in file order, row of tiles after row of
//! tiles: its file equals the staged writer's ([`super::tiff_write::write_tiled`]) byte
//! for byte. A run over box tiles cut along the tile grid completes a box's tiles box by
//! box: the same tiles, in the order of the boxes.
//!
//! Each run of consecutive tiles appended together is reported
//! ([`TiffStream::take_appended`]: its first tile, offset, the tiles' compressed lengths
//! and the CRC-32 of its bytes) for the resume journal, which takes a killed run up with
//! the runs whose bytes are intact ([`TiffStream::resume`]).
//!
//! Pixel-interleaved outputs of several bands are not streamed (a tile holds every
//! band, which arrive one after the other): they are staged.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use super::chunk_assembly::{ChunkAssembly, ChunkGrid, consecutive_runs};
use super::tiff_write::{TiffWriteOptions, TiledLayout, append_tiles};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The most tiles a stream compresses at once (fewer on machines with fewer than four
/// threads per four tiles).
pub const MAX_BATCH: u64 = 16;

/// A run of consecutive output chunks (GeoTIFF tiles, Zarr chunks) written together:
/// what the journal records so that a resumed run can check it and keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRun {
    /// Index of its first chunk (a TIFF's tile order: band, then row, then column).
    pub first: usize,
    /// File offset of its first tile (0 for Zarr chunks, which are files of their own).
    pub offset: u64,
    /// Length of each of its chunks, in order (compressed TIFF tiles; Zarr chunk files).
    pub counts: Vec<u64>,
    /// CRC-32 of its bytes.
    pub crc: u32,
}

/// A GeoTIFF encoded tile by tile as the run writes it; see the module documentation.
#[derive(Debug)]
pub struct TiffStream {
    layout: TiledLayout,
    dtype: DType,
    opts: TiffWriteOptions,
    inner: Mutex<Inner>,
    /// The memory the tiles being filled and those in flight take, held for the run.
    memory: Option<Reservation>,
}

#[derive(Debug)]
struct Inner {
    /// The tiles being filled.
    asm: ChunkAssembly,
    /// What is in the file.
    written: Written,
}

#[derive(Debug)]
struct Written {
    /// Where the next tile goes in the file.
    pos: u64,
    /// Offset and compressed length of each tile in the file, in tile order (0, 0 for
    /// one not written yet).
    offsets: Vec<u64>,
    counts: Vec<u64>,
    /// Runs appended since the last [`TiffStream::take_appended`].
    appended: Vec<ChunkRun>,
}

/// A whole tile's raw bytes (with its index), taken by the thread that compresses it.
type TileSlot = Mutex<Option<(usize, Vec<u8>)>>;

/// The grid of a TIFF's tiles over the output's flat elements: `(bands, height, width)`
/// cut in `1 x t x t` chunks, numbered as the TIFF numbers its tiles.
fn tile_grid(l: &TiledLayout) -> Result<ChunkGrid> {
    ChunkGrid::new(&[l.bands, l.height, l.width], &[1, l.t, l.t])
}

impl TiffStream {
    /// Whether an output of `shape` written as `opts` say can be streamed within
    /// `room` bytes: not pixel-interleaved with several bands, and `room` holds the
    /// tiles being filled and at least one tile in flight (raw and compressed). The
    /// tiles being filled are those of `open` tiles across one row of tiles (`None`: a
    /// whole row, which a flat plan crosses; a box plan cut along the tile grid, the
    /// tiles across one box). Returns the bytes the stream then holds and the options to
    /// create it with (their `memory` set to what is left for tiles in flight: at most
    /// [`MAX_BATCH`], so the figure, which a plan holds, does not depend on the machine).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a shape or dtype a TIFF cannot hold.
    pub fn fit(
        shape: &[usize],
        dtype: DType,
        opts: &TiffWriteOptions,
        room: u64,
        open: Option<usize>,
    ) -> Result<Option<(u64, TiffWriteOptions)>> {
        let l = TiledLayout::new(shape, dtype, opts)?;
        let cols = open.map_or(l.width, |n| (n.max(1) * l.t).min(l.width));
        let filling = (l.t.min(l.height) * cols * l.es) as u64;
        let tile = 2 * l.chunk_bytes as u64;
        if l.pixel || filling + tile > room {
            return Ok(None);
        }
        let batch = ((room - filling) / tile).min(MAX_BATCH);
        let mut o = opts.clone();
        o.memory = batch * tile;
        Ok(Some((filling + batch * tile, o)))
    }

    /// A stream writing into `file`, holding `memory` for the run; `opts.memory` bounds
    /// the tiles compressed at once. A `fresh` file is emptied first; otherwise (an
    /// interrupted run's, taken up) its tiles stay for [`TiffStream::resume`] to check.
    /// Either way the header is written.
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
        if layout.pixel {
            return Err(Error::Internal(
                "a pixel-interleaved GeoTIFF of several bands cannot be streamed".into(),
            ));
        }
        if fresh {
            file.set_len(0).map_err(|e| Error::io("size", path, e))?;
        }
        file.write_all_at(layout.header(), 0)
            .map_err(|e| Error::io("write", path, e))?;
        let pos = layout.data_start();
        let asm = ChunkAssembly::new(tile_grid(&layout)?, layout.es);
        let n = asm.grid().chunks();
        Ok(TiffStream {
            layout,
            dtype,
            opts,
            inner: Mutex::new(Inner {
                asm,
                written: Written {
                    pos,
                    offsets: vec![0; n],
                    counts: vec![0; n],
                    appended: Vec::new(),
                },
            }),
            memory,
        })
    }

    /// Number of tiles.
    #[must_use]
    pub fn tiles(&self) -> usize {
        self.layout.bands * self.layout.down * self.layout.across
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::Internal("GeoTIFF stream lock poisoned".into()))
    }

    /// Takes `bytes` of the output from flat element `start` on. Bytes of tiles already
    /// in the file (a resumed run redoing a box that began among kept tiles) are
    /// dropped; tiles completed here are compressed and appended to `file`.
    ///
    /// # Errors
    /// [`Error::Io`] on a failed write or compression; [`Error::Internal`] for bytes past
    /// the output's end.
    pub fn write(&self, file: &File, path: &Path, start: u64, bytes: &[u8]) -> Result<()> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let (asm, rest) = (&mut inner.asm, &mut inner.written);
        asm.feed(start, bytes, |done| {
            for run in consecutive_runs(done) {
                self.append(run, rest, file, path)?;
            }
            Ok(())
        })
    }

    /// The raw tile `k` (its clipped bytes `buf`), padded with zeros to the full tile.
    fn padded(&self, k: usize, buf: Vec<u8>) -> Vec<u8> {
        let l = &self.layout;
        let (ty, tx) = ((k / l.across) % l.down, k % l.across);
        let rows = l.t.min(l.height - ty * l.t);
        let cols = l.t.min(l.width - tx * l.t);
        if rows == l.t && cols == l.t {
            return buf;
        }
        let mut raw = vec![0u8; l.chunk_bytes];
        for y in 0..rows {
            let (from, to) = (y * cols * l.es, y * l.t * l.es);
            raw[to..to + cols * l.es].copy_from_slice(&buf[from..from + cols * l.es]);
        }
        raw
    }

    /// Compresses the consecutive whole tiles `run` and appends them.
    fn append(
        &self,
        run: Vec<(usize, Vec<u8>)>,
        inner: &mut Written,
        file: &File,
        path: &Path,
    ) -> Result<()> {
        let first = run.first().map_or(0, |c| c.0);
        let n = run.len();
        // each tile's raw bytes, taken by the thread that compresses it
        let raws: Vec<TileSlot> = run.into_iter().map(|c| Mutex::new(Some(c))).collect();
        let tile = |i: usize| -> Result<Vec<u8>> {
            let (k, buf) = raws[i]
                .lock()
                .ok()
                .and_then(|mut c| c.take())
                .ok_or_else(|| Error::Internal("a GeoTIFF tile compressed twice".into()))?;
            self.layout.encode_tile(self.padded(k, buf), path)
        };
        let offset = inner.pos;
        let mut crc = self.strip_hasher();
        let (mut at, mut k) = (offset, first);
        let batch = self.layout.batch;
        let (pos, counts) = append_tiles(file, path, offset, 0..n, batch, &tile, |c| {
            crc.update(c);
            inner.offsets[k] = at;
            inner.counts[k] = c.len() as u64;
            at += c.len() as u64;
            k += 1;
        })?;
        inner.pos = pos;
        inner.appended.push(ChunkRun {
            first,
            offset,
            counts,
            crc: crc.finalize(),
        });
        Ok(())
    }

    /// A hasher for a run's CRC-32, seeded with everything that decides how its bytes
    /// were encoded (tile side, compression and level, predictor, BigTIFF, dtype, shape): tiles an
    /// interrupted run encoded otherwise (`--resume` with other `--tiff-*` options)
    /// never match, and are redone.
    fn strip_hasher(&self) -> crc32fast::Hasher {
        let l = &self.layout;
        let id = format!(
            "tile {} {:?} predictor {} big {} {} {}x{}x{}",
            l.t, l.compression, l.predictor, l.big, self.dtype, l.bands, l.height, l.width
        );
        crc32fast::Hasher::new_with_initial(crc32fast::hash(id.as_bytes()))
    }

    /// The runs of tiles appended since the last call, in order.
    #[must_use]
    pub fn take_appended(&self) -> Vec<ChunkRun> {
        self.inner
            .lock()
            .map(|mut i| std::mem::take(&mut i.written.appended))
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
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let mut pos = self.layout.data_start();
        let mut buf = vec![0u8; 64 << 10];
        let mut kept = 0;
        for d in done {
            let tiles = d.first..d.first + d.counts.len();
            if d.offset != pos
                || d.counts.is_empty()
                || tiles.end > self.tiles()
                || tiles.clone().any(|k| inner.asm.is_done(k))
            {
                break;
            }
            let len: u64 = d.counts.iter().sum();
            let mut crc = self.strip_hasher();
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
                inner.asm.mark_done(k);
                inner.written.offsets[k] = pos;
                inner.written.counts[k] = c;
                pos += c;
                kept += 1;
            }
        }
        file.set_len(pos).map_err(|e| Error::io("size", path, e))?;
        inner.written.pos = pos;
        Ok(kept)
    }

    /// Whether every element of the flat range `[start, start + len)` is in a tile
    /// already in the file (a resumed run need not write it again).
    #[must_use]
    pub fn covers(&self, start: u64, len: u64) -> bool {
        self.inner.lock().is_ok_and(|i| i.asm.covers(start, len))
    }

    /// The options the stream encodes with.
    #[must_use]
    pub fn options(&self) -> &TiffWriteOptions {
        &self.opts
    }

    /// Gives back the memory held for the tiles in flight (when the run is done).
    pub fn release_memory(&mut self) {
        self.memory = None;
    }

    /// Writes the directory after the last tile, once every tile is in the file.
    ///
    /// # Errors
    /// [`Error::Internal`] if a tile is missing; [`Error::Io`] on a failed write.
    pub fn finish(&self, file: &File, path: &Path) -> Result<u64> {
        let inner = self.lock()?;
        if inner.asm.done_count() != self.tiles() {
            return Err(Error::Internal(format!(
                "GeoTIFF stream finished with {} of {} tiles written",
                inner.asm.done_count(),
                self.tiles()
            )));
        }
        self.layout.finish(
            file,
            path,
            self.dtype,
            &self.opts,
            inner.written.pos,
            &inner.written.offsets,
            &inner.written.counts,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tensor::tiff_write::{TiffCompression, write_tiled};

    /// Test data: a pattern that compresses, but not to nothing.
    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i * 7919) % 251 / 3) as u8).collect()
    }

    /// A streamed file written in pieces of `piece` bytes equals the staged writer's.
    #[test]
    fn a_streamed_file_equals_the_staged_one_whatever_the_pieces() {
        let dir = tempfile::tempdir().unwrap();
        for (shape, dtype, tile, comp) in [
            (vec![37, 50], DType::U8, 16, TiffCompression::Deflate(6)),
            (vec![3, 40, 33], DType::U16, 16, TiffCompression::Zstd(3)),
            (vec![2, 16, 16], DType::F32, 16, TiffCompression::None),
            (vec![1, 100, 7], DType::F64, 32, TiffCompression::Deflate(1)),
        ] {
            let opts = TiffWriteOptions {
                tile,
                compression: comp,
                memory: 3000,
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
                for (k, c) in src.chunks(piece).enumerate() {
                    s.write(&f, &path, (k * piece / dtype.size()) as u64, c)
                        .unwrap();
                    appended += s
                        .take_appended()
                        .iter()
                        .map(|d| d.counts.len())
                        .sum::<usize>();
                }
                assert_eq!(appended, s.tiles());
                s.finish(&f, &path).unwrap();
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
            s.write(f, &path, from, &src[(from * es) as usize..])
                .unwrap();
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
        let end5 = row_start(5);
        s.write(&f, &path, 0, &src[..(end5 as usize + 100) * 2])
            .unwrap();
        let done = s.take_appended();
        // a run of tiles a row: each row's tiles complete together
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
