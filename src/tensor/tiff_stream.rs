//! A GeoTIFF output encoded while the run writes it: no raw staging file, no encoding
//! pass after the run, and compression overlapping the compute of later tiles.
//!
//! The output's tiles are grouped in *strips*: one row of tiles of one band (a
//! band-sequential or single-band TIFF), which is a contiguous range of the output's
//! flat C-order elements. A run's tiles arrive in plan order, so the strip being filled
//! is always the first one not yet written: its raw bytes are assembled in one buffer,
//! and when its last byte arrives its tiles are compressed (in parallel, a batch at a
//! time) and appended to the file. The file's tiles are then in the order
//! [`super::tiff_write::write_tiled`] writes them, with the same bytes: a streamed
//! output equals a staged one byte for byte. The directory goes after the last strip
//! ([`TiffStream::finish`]).
//!
//! Each appended strip is reported ([`TiffStream::take_appended`]: its offset, its
//! tiles' compressed lengths and the CRC-32 of its bytes) for the resume journal, which
//! takes a killed run up after its last intact strip ([`TiffStream::resume`]).
//!
//! Pixel-interleaved outputs of several bands are not streamed (a strip would hold
//! rows of every band, which arrive one band after the other): they are staged.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use super::tiff_write::{TiffWriteOptions, TiledLayout, append_tiles, compress_tile};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The most tiles a stream compresses at once (fewer on machines with fewer than four
/// threads per four tiles).
pub const MAX_BATCH: u64 = 16;

/// A strip appended to the file: what the journal records so that a resumed run can
/// check it and continue after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripDone {
    /// Strip number (band-major, then tile row).
    pub strip: usize,
    /// File offset of its first tile.
    pub offset: u64,
    /// Compressed length of each of its tiles, left to right.
    pub counts: Vec<u64>,
    /// CRC-32 of its bytes in the file.
    pub crc: u32,
}

/// A GeoTIFF encoded strip by strip as the run writes it; see the module documentation.
#[derive(Debug)]
pub struct TiffStream {
    layout: TiledLayout,
    dtype: DType,
    opts: TiffWriteOptions,
    inner: Mutex<Inner>,
    /// The memory the strip buffer and the tiles in flight take, held for the run.
    memory: Option<Reservation>,
}

/// How a streamed output is cut into units (GeoTIFF strips, Zarr slabs): contiguous
/// ranges of its flat C-order elements, in order, which a run writing in plan order
/// completes one after another.
pub(crate) trait Units {
    /// The unit holding flat element `e`.
    fn unit_of(&self, e: u64) -> usize;
    /// Flat element range `[start, end)` of unit `u`.
    fn unit_elems(&self, u: usize) -> (u64, u64);
    /// Number of units.
    fn units(&self) -> usize;
}

/// The unit of a streamed output being filled, assembled from the bytes the run writes.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    /// The unit being filled; every unit before it is done.
    pub(crate) next: usize,
    /// Its raw bytes.
    buf: Vec<u8>,
    /// Bytes of it written so far.
    filled: usize,
}

impl Assembly {
    /// Takes `bytes` of the output from flat element `start` on (elements of `es`
    /// bytes). Bytes of units already done (a resumed run redoing a tile that began
    /// before its first open unit) are dropped; each unit completed here is handed to
    /// `complete` with its raw bytes, and the next one is filled.
    ///
    /// # Errors
    /// What `complete` returns; [`Error::Internal`] for bytes past the unit being filled
    /// (tiles must arrive in plan order), naming `what`.
    pub(crate) fn feed(
        &mut self,
        units: &impl Units,
        es: usize,
        start: u64,
        bytes: &[u8],
        what: &str,
        mut complete: impl FnMut(usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (mut e, mut b) = (start, bytes);
        while !b.is_empty() {
            let s = units.unit_of(e);
            let (s0, s1) = units.unit_elems(s);
            let n = ((b.len() / es) as u64).min(s1 - e) as usize;
            if s > self.next {
                return Err(Error::Internal(format!(
                    "{what}: elements from {e} reached unit {s} while unit {} is incomplete",
                    self.next
                )));
            }
            if s == self.next {
                let len = ((s1 - s0) as usize) * es;
                if self.buf.len() != len {
                    self.buf.resize(len, 0);
                }
                let at = ((e - s0) as usize) * es;
                self.buf[at..at + n * es].copy_from_slice(&b[..n * es]);
                self.filled += n * es;
                if self.filled == len {
                    complete(s, &self.buf)?;
                    self.next += 1;
                    self.filled = 0;
                    if self.next == units.units() {
                        self.buf = Vec::new();
                    }
                }
            }
            e += n as u64;
            b = &b[n * es..];
        }
        Ok(())
    }

    /// Fills unit `u` next (a resumed run, after the units it kept).
    pub(crate) fn restart_at(&mut self, u: usize) {
        self.next = u;
        self.filled = 0;
    }
}

#[derive(Debug)]
struct Inner {
    /// The strip being filled.
    asm: Assembly,
    /// What is in the file.
    written: Written,
}

#[derive(Debug)]
struct Written {
    /// Where the next tile goes in the file.
    pos: u64,
    offsets: Vec<u64>,
    counts: Vec<u64>,
    /// Strips appended since the last [`TiffStream::take_appended`].
    appended: Vec<StripDone>,
}

impl TiffStream {
    /// Whether an output of `shape` written as `opts` say can be streamed within
    /// `room` bytes: not pixel-interleaved with several bands, and `room` holds one
    /// strip's raw bytes and at least one tile in flight (raw and compressed). Returns
    /// the bytes the stream then holds and the options to create it with (their
    /// `memory` set to what is left for tiles in flight: at most [`MAX_BATCH`], so the
    /// figure, which a plan holds, does not depend on the machine).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a shape or dtype a TIFF cannot hold.
    pub fn fit(
        shape: &[usize],
        dtype: DType,
        opts: &TiffWriteOptions,
        room: u64,
    ) -> Result<Option<(u64, TiffWriteOptions)>> {
        let l = TiledLayout::new(shape, dtype, opts)?;
        let strip = (l.t * l.width * l.es) as u64;
        let tile = 2 * l.chunk_bytes as u64;
        if l.pixel || strip + tile > room {
            return Ok(None);
        }
        let batch = ((room - strip) / tile).min(MAX_BATCH);
        let mut o = opts.clone();
        o.memory = batch * tile;
        Ok(Some((strip + batch * tile, o)))
    }

    /// A stream writing into `file`, holding `memory` for the run; `opts.memory` bounds
    /// the tiles compressed at once. A `fresh` file is emptied first; otherwise (an
    /// interrupted run's, taken up) its strips stay for [`TiffStream::resume`] to check.
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
        Ok(TiffStream {
            layout,
            dtype,
            opts,
            inner: Mutex::new(Inner {
                asm: Assembly::default(),
                written: Written {
                    pos,
                    offsets: Vec::new(),
                    counts: Vec::new(),
                    appended: Vec::new(),
                },
            }),
            memory,
        })
    }

    /// Number of strips.
    #[must_use]
    pub fn strips(&self) -> usize {
        self.layout.bands * self.layout.down
    }

    /// Flat element range `[start, end)` of strip `s`.
    #[must_use]
    pub fn strip_elems(&self, s: usize) -> (u64, u64) {
        let l = &self.layout;
        let (plane, ty) = (s / l.down, s % l.down);
        let y0 = ty * l.t;
        let rows = l.t.min(l.height - y0);
        let start = ((plane * l.height + y0) * l.width) as u64;
        (start, start + (rows * l.width) as u64)
    }

    /// The strip holding flat element `e`.
    fn strip_of(&self, e: u64) -> usize {
        let l = &self.layout;
        let plane_elems = (l.height * l.width) as u64;
        let plane = (e / plane_elems) as usize;
        let row = ((e % plane_elems) / l.width as u64) as usize;
        plane * l.down + row / l.t
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::Internal("GeoTIFF stream lock poisoned".into()))
    }

    /// Takes `bytes` of the output from flat element `start` on. Bytes of strips already
    /// in the file (a resumed run redoing a tile that began before its first open
    /// strip) are dropped; a strip completed here is compressed and appended to `file`.
    ///
    /// # Errors
    /// [`Error::Io`] on a failed write or compression; [`Error::Internal`] for bytes
    /// past the strip being filled (tiles must arrive in plan order).
    pub fn write(&self, file: &File, path: &Path, start: u64, bytes: &[u8]) -> Result<()> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let (asm, rest) = (&mut inner.asm, &mut inner.written);
        asm.feed(
            self,
            self.layout.es,
            start,
            bytes,
            "GeoTIFF stream",
            |s, buf| self.append(s, buf, rest, file, path),
        )
    }

    /// Compresses the full strip `s` (raw bytes `buf`) and appends its tiles.
    fn append(
        &self,
        s: usize,
        buf: &[u8],
        inner: &mut Written,
        file: &File,
        path: &Path,
    ) -> Result<()> {
        let l = &self.layout;
        let y0 = (s % l.down) * l.t;
        let rows = l.t.min(l.height - y0);
        let tile = |tx: usize| -> Result<Vec<u8>> {
            compress_tile(l.raw_tile(buf, rows, rows, tx), self.opts.compression, path)
        };
        let offset = inner.pos;
        let mut crc = self.strip_hasher();
        let mut at = offset;
        let (pos, counts) = append_tiles(file, path, offset, 0..l.across, l.batch, &tile, |c| {
            crc.update(c);
            inner.offsets.push(at);
            at += c.len() as u64;
        })?;
        inner.counts.extend(&counts);
        inner.pos = pos;
        inner.appended.push(StripDone {
            strip: s,
            offset,
            counts,
            crc: crc.finalize(),
        });
        Ok(())
    }

    /// A hasher for a strip's CRC-32, seeded with everything that decides how its bytes
    /// were encoded (tile side, compression and level, BigTIFF, dtype, shape): a strip
    /// an interrupted run encoded otherwise (`--resume` with other `--tiff-*` options)
    /// never matches, and is redone.
    fn strip_hasher(&self) -> crc32fast::Hasher {
        let l = &self.layout;
        let id = format!(
            "tile {} {:?} big {} {} {}x{}x{}",
            l.t, self.opts.compression, l.big, self.dtype, l.bands, l.height, l.width
        );
        crc32fast::Hasher::new_with_initial(crc32fast::hash(id.as_bytes()))
    }

    /// The strips appended since the last call, in order.
    #[must_use]
    pub fn take_appended(&self) -> Vec<StripDone> {
        self.inner
            .lock()
            .map(|mut i| std::mem::take(&mut i.written.appended))
            .unwrap_or_default()
    }

    /// Takes up the strips an interrupted run appended to `file`: the longest prefix of
    /// `done` (strips 0, 1, ... each starting where the last ended) whose bytes in the
    /// file still have their checksums. The file is cut after them and the stream goes
    /// on from the next strip. Returns the number of strips kept.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be read or cut.
    pub fn resume(&self, file: &File, path: &Path, done: &[StripDone]) -> Result<usize> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        inner.written.offsets.clear();
        inner.written.counts.clear();
        let mut pos = self.layout.data_start();
        let mut buf = vec![0u8; 64 << 10];
        let mut kept = 0;
        for (s, d) in done.iter().enumerate() {
            if d.strip != s || d.offset != pos || d.counts.len() != self.layout.across {
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
            for &c in &d.counts {
                inner.written.offsets.push(pos);
                inner.written.counts.push(c);
                pos += c;
            }
            kept = s + 1;
        }
        file.set_len(pos).map_err(|e| Error::io("size", path, e))?;
        inner.asm.restart_at(kept);
        inner.written.pos = pos;
        Ok(kept)
    }

    /// The options the stream encodes with.
    #[must_use]
    pub fn options(&self) -> &TiffWriteOptions {
        &self.opts
    }

    /// Gives back the memory held for the strip in flight (when the run is done).
    pub fn release_memory(&mut self) {
        self.memory = None;
    }

    /// Writes the directory after the last strip, once every strip is in the file.
    ///
    /// # Errors
    /// [`Error::Internal`] if a strip is missing; [`Error::Io`] on a failed write.
    pub fn finish(&self, file: &File, path: &Path) -> Result<u64> {
        let inner = self.lock()?;
        if inner.asm.next != self.strips() {
            return Err(Error::Internal(format!(
                "GeoTIFF stream finished with {} of {} strips written",
                inner.asm.next,
                self.strips()
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

impl Units for TiffStream {
    fn unit_of(&self, e: u64) -> usize {
        self.strip_of(e)
    }
    fn unit_elems(&self, u: usize) -> (u64, u64) {
        self.strip_elems(u)
    }
    fn units(&self) -> usize {
        self.strips()
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
                    appended += s.take_appended().len();
                }
                assert_eq!(appended, s.strips());
                s.finish(&f, &path).unwrap();
                assert!(
                    std::fs::read(&path).unwrap() == want,
                    "{shape:?} {dtype} pieces of {piece}"
                );
            }
        }
    }

    /// A run killed after some strips resumes after the intact ones and gives the same
    /// file; a damaged strip and everything after it are redone.
    #[test]
    fn resume_keeps_the_intact_strips_and_redoes_the_rest() {
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
        // a run that wrote 5 of the 8 strips
        let f = open();
        let s = TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, true).unwrap();
        let (_, end5) = s.strip_elems(4);
        s.write(&f, &path, 0, &src[..(end5 as usize + 100) * 2])
            .unwrap();
        let done = s.take_appended();
        assert_eq!(done.len(), 5);
        drop(s);
        for (damage, kept) in [(None, 5), (Some(3), 3)] {
            let f = open();
            if let Some(k) = damage {
                f.write_all_at(&[0xff, 0xfe], done[k].offset + 3).unwrap();
            }
            let s =
                TiffStream::create(&f, &path, &shape, dtype, opts.clone(), None, false).unwrap();
            assert_eq!(s.resume(&f, &path, &done).unwrap(), kept);
            // the resumed run redoes from the start of a tile before the kept strips' end
            let (from, _) = s.strip_elems(kept);
            assert!(whole(&s, &f, from - 7) == want, "damage {damage:?}");
        }
        // strips encoded with other options (--resume with another --tiff-compress) are
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
