//! Where an input's bytes come from: a local file or an object in an object store
//! ([`remote`](super::remote)). Formats read both the same way — positioned reads of the
//! ranges a tile needs — and ask [`Source::mappable`] before mapping a window, which only
//! a local file allows.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::remote::{self, Object};
use crate::error::{Error, Result};

/// An input's bytes: a local file, or an object read by ranges.
#[derive(Debug)]
pub enum Source {
    /// A regular file, opened through [`open_input`](super::own_files::open_input).
    File(File),
    /// An object in an object store.
    Object(Arc<Object>),
}

impl Source {
    /// Opens `path`: an object when it is a URL ([`remote::is_url`]), else a regular
    /// local file.
    ///
    /// # Errors
    /// As [`open_input`](super::own_files::open_input) and [`Object::open`].
    pub fn open(path: &Path) -> Result<Self> {
        if remote::is_url(path) {
            let url = path.to_str().unwrap_or_default();
            return Ok(Source::Object(Arc::new(Object::open_with_head(url)?)));
        }
        super::own_files::open_input(path).map(Source::File)
    }

    /// The local file, when it is one (mapping windows, comparing identities).
    #[must_use]
    pub fn file(&self) -> Option<&File> {
        match self {
            Source::File(f) => Some(f),
            Source::Object(_) => None,
        }
    }

    /// Whether windows of it may be memory-mapped (a local file).
    #[must_use]
    pub fn mappable(&self) -> bool {
        matches!(self, Source::File(_))
    }

    /// Its size in bytes now (a local file's is asked again each time: a file that
    /// shrank while in use is reported, not read past).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be inspected.
    pub fn len(&self, path: &Path) -> Result<u64> {
        match self {
            Source::File(f) => f
                .metadata()
                .map(|m| m.len())
                .map_err(|e| Error::io("inspect", path, e)),
            Source::Object(o) => Ok(o.len()),
        }
    }

    /// Fills `buf` with the bytes at `offset`.
    ///
    /// # Errors
    /// The read's error: `UnexpectedEof` past the end.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Source::File(f) => f.read_exact_at(buf, offset),
            Source::Object(o) => o.read_exact_at(buf, offset),
        }
    }

    /// Reads what there is of `buf.len()` bytes at `offset`; the count read (short only
    /// at the end).
    ///
    /// # Errors
    /// The read's error.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        match self {
            Source::File(f) => {
                let mut n = 0;
                while n < buf.len() {
                    match f.read_at(&mut buf[n..], offset + n as u64) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(n)
            }
            Source::Object(o) => o.read_at(buf, offset),
        }
    }

    /// A second handle on the same bytes (a reader with a position of its own).
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be duplicated.
    pub fn try_clone(&self, path: &Path) -> Result<Self> {
        match self {
            Source::File(f) => f
                .try_clone()
                .map(Source::File)
                .map_err(|e| Error::io("open", path, e)),
            Source::Object(o) => Ok(Source::Object(Arc::clone(o))),
        }
    }
}

/// Two ranges of an object needed at once are fetched with one request when at most this
/// many bytes lie between them (and no more than a chunk of the format stores, see
/// [`fetch_coalesced`]): at 100 MB/s a gap of 256 KiB costs 2.6 ms of transfer, against
/// the 10 to 50 ms of a request to an object store.
pub const COALESCE_GAP: u64 = 256 << 10;

/// Ranges `(offset, length)` sorted by offset, merged into spans: a range joins the span
/// before it when at most `gap` bytes lie between them. Each span with the positions (in
/// `ranges`) of the ranges it holds.
#[must_use]
pub fn coalesce(ranges: &[(u64, u64)], gap: u64) -> Vec<(std::ops::Range<u64>, Vec<usize>)> {
    let mut spans: Vec<(std::ops::Range<u64>, Vec<usize>)> = Vec::new();
    for (k, &(off, n)) in ranges.iter().enumerate() {
        let end = off + n;
        match spans.last_mut() {
            Some((span, members)) if off <= span.end.saturating_add(gap) => {
                span.start = span.start.min(off);
                span.end = span.end.max(end);
                members.push(k);
            }
            _ => spans.push((off..end, vec![k])),
        }
    }
    spans
}

/// One request's worth of [`fetch_coalesced`]: the bytes of a span and the ranges in it.
#[derive(Debug)]
pub struct Span {
    /// Where the span lies in the object.
    pub range: std::ops::Range<u64>,
    /// The positions (in the ranges asked for) of the ranges it holds.
    pub members: Vec<usize>,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Span {
    /// The bytes of the range `(offset, length)`, which lies within the span.
    #[must_use]
    pub fn part(&self, offset: u64, len: u64) -> &[u8] {
        let from = (offset - self.range.start) as usize;
        &self.bytes[from..from + len as usize]
    }
}

/// The bytes of `ranges` (`(offset, length)`, sorted by offset) of an object, fetched
/// [`coalesce`]d by `gap` with every request in flight at once.
///
/// # Errors
/// The first request that fails, as [`Object::read_ranges`].
pub fn fetch_coalesced(
    object: &Object,
    ranges: &[(u64, u64)],
    gap: u64,
) -> std::io::Result<Vec<Span>> {
    let spans = coalesce(ranges, gap);
    let want: Vec<std::ops::Range<u64>> = spans.iter().map(|s| s.0.clone()).collect();
    let data = object.read_ranges(&want)?;
    Ok(spans
        .into_iter()
        .zip(data)
        .map(|((range, members), bytes)| Span {
            range,
            members,
            bytes,
        })
        .collect())
}

/// A reader with a position over a [`Source`], for parsers that want `Read + Seek`
/// (the `tiff` crate reading directories). Reads of an object go through
/// [`BLOCK`]-sized, aligned blocks, the last [`BLOCKS`] of them kept, so a parser's
/// small reads and seeks cost a few ranged requests rather than one each.
#[derive(Debug)]
pub struct SourceReader {
    src: Source,
    pos: u64,
    blocks: Vec<(u64, Vec<u8>)>,
}

/// The size of the blocks a [`SourceReader`] fetches from an object.
pub const BLOCK: usize = 16 << 10;
/// How many blocks a [`SourceReader`] keeps (a fixed `BLOCK * BLOCKS` bytes).
pub const BLOCKS: usize = 16;

impl SourceReader {
    /// A reader at the start of `src`.
    #[must_use]
    pub fn new(src: Source) -> Self {
        SourceReader {
            src,
            pos: 0,
            blocks: Vec::new(),
        }
    }

    fn object_read(&mut self, o: &Object, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= o.len() || buf.is_empty() {
            return Ok(0);
        }
        let start = self.pos / BLOCK as u64 * BLOCK as u64;
        let at = (self.pos - start) as usize;
        let i = match self.blocks.iter().position(|b| b.0 == start) {
            Some(i) => i,
            None => {
                let n = (o.len() - start).min(BLOCK as u64) as usize;
                let mut block = vec![0u8; n];
                o.read_exact_at(&mut block, start)?;
                if self.blocks.len() == BLOCKS {
                    self.blocks.remove(0);
                }
                self.blocks.push((start, block));
                self.blocks.len() - 1
            }
        };
        let block = &self.blocks[i].1;
        let n = (block.len() - at).min(buf.len());
        buf[..n].copy_from_slice(&block[at..at + n]);
        Ok(n)
    }
}

impl Read for SourceReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match &self.src {
            Source::File(f) => f.read_at(buf, self.pos)?,
            Source::Object(o) => {
                let o = Arc::clone(o);
                self.object_read(&o, buf)?
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SourceReader {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let len = || match &self.src {
            Source::File(f) => f.metadata().map(|m| m.len()),
            Source::Object(o) => Ok(o.len()),
        };
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => len()?.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start")
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_coalesce_across_small_gaps_only() {
        // adjacent, a gap of 10, a gap of exactly `gap`, one past it, an overlap
        let ranges = [
            (0, 100),
            (100, 50),
            (160, 40),
            (300, 10),
            (411, 5),
            (412, 2),
        ];
        let spans = coalesce(&ranges, 100);
        let got: Vec<(std::ops::Range<u64>, Vec<usize>)> = spans;
        assert_eq!(
            got,
            vec![(0..310, vec![0, 1, 2, 3]), (411..416, vec![4, 5])]
        );
        // no gap allowed: only touching ranges merge
        let spans = coalesce(&ranges, 0);
        assert_eq!(spans.len(), 4, "{spans:?}");
        assert_eq!(spans[0], (0..150, vec![0, 1]));
        assert!(coalesce(&[], 10).is_empty());
    }
}
