//! Reading a window of a tensor's elements: mapped in place (prefaulted, the file's size
//! checked again first), copied into a staging slot with `pread` (whole or by column
//! runs of rows), or decoded chunk by chunk for compressed formats.

use memmap2::MmapOptions;

use crate::error::{Error, Result};
use crate::format::{TensorFile, Touch, Window, file_len, page_size};
use crate::io::window::{fully_resident, populate};

impl TensorFile {
    #[doc(hidden)]
    /// Maps the elements `[start, start + count)` (flat C-order indices), prefaulting the
    /// pages so that the compute stage does not stall on them.
    ///
    /// The file size is checked again first: a file truncated since it was opened gives an
    /// error here instead of a SIGBUS later.
    ///
    /// # Errors
    /// [`Error::Format`] if the file shrank; [`Error::Io`] if the map fails.
    pub fn map_window(&self, start: u64, count: u64) -> Result<Window> {
        self.map_window_touch(start, count, Touch::All)
    }

    #[doc(hidden)]
    /// Reads the elements `[start, start + count)` as `touch` says: [`Touch::All`] maps
    /// them like [`TensorFile::map_window`]; [`Touch::Rows`] reads only the column runs of
    /// each row, with positioned reads, into a compact owned buffer (each row the runs
    /// one after another).
    ///
    /// Why narrow windows are read rather than mapped: on a fault the kernel maps up to
    /// 64 KiB of cached pages around the faulting one (fault-around), so touching a
    /// 2 KiB run of each row of a mapped window would cost up to 32 times that in
    /// resident memory, beyond any budget's reach.
    ///
    /// # Errors
    /// As for [`TensorFile::map_window`].
    pub fn map_window_touch(&self, start: u64, count: u64, touch: Touch) -> Result<Window> {
        if self.chunked.is_some() || self.view.is_some() {
            let mut w = self.map_windows(&[(start, count, touch)])?;
            return w
                .pop()
                .ok_or_else(|| Error::Internal("no window decoded".into()));
        }
        self.map_file_window(start, count, touch)
    }

    /// The windows of a [`window`](Self::window) of the file: each request's `parts`
    /// (reads of the file's elements, from [`TensorFile::view_pieces`]) one after
    /// another. A request of one part is mapped as it would be for the whole file.
    pub(crate) fn read_pieces(
        &self,
        reqs: &[(u64, u64, Touch)],
        parts: &[Vec<(u64, u64, Touch)>],
    ) -> Result<Vec<Window>> {
        if let Some(c) = &self.chunked {
            return Ok(c
                .read_joined(parts)?
                .into_iter()
                .map(Window::owned)
                .collect());
        }
        let es = self.info.dtype.size() as u64;
        reqs.iter()
            .zip(parts)
            .map(|(&(_, count, touch), part)| match part.as_slice() {
                [(s, n, t)] => self.map_file_window(*s, *n, *t),
                _ => {
                    let mut v = vec![0u8; (touch.touched(count) * es) as usize];
                    let mut at = 0;
                    for &(s, n, t) in part {
                        at += self.read_file_into(s, n, t, &mut v[at..])?;
                    }
                    Ok(Window::owned(v))
                }
            })
            .collect()
    }

    /// [`TensorFile::map_window_touch`] of the file's own elements (not a window's) of
    /// a file that is not decoded in chunks.
    fn map_file_window(&self, start: u64, count: u64, touch: Touch) -> Result<Window> {
        if let Touch::Rows { row, runs, nruns } = touch {
            let mut v = self.runs_vec(start, count, row, &runs[..nruns])?;
            if self.swap {
                swap_bytes(&mut v, self.info.dtype.swap_unit());
            }
            return Ok(Window::owned(v));
        }
        if self.swap {
            // big-endian elements: read (never mapped) and swapped in place
            let mut v = self.runs_vec(start, count, count.max(1), &[(0, count)])?;
            swap_bytes(&mut v, self.info.dtype.swap_unit());
            return Ok(Window::owned(v));
        }
        if !self.file.mappable() {
            // an object: read by ranges
            let v = self.runs_vec(start, count, count.max(1), &[(0, count)])?;
            return Ok(Window::owned(v));
        }
        let es = self.info.dtype.size() as u64;
        let begin = self.info.data_offset + start * es;
        let len = count * es;
        if len == 0 {
            return Ok(Window::owned(Vec::new()));
        }
        let Some(file) = self.file.file() else {
            return Err(Error::Internal("a window of an object mapped".into()));
        };
        let now = file_len(file, &self.path)?;
        if begin + len > now {
            return Err(Error::format(
                &self.path,
                format!(
                    "file changed size while in use: it now holds {now} bytes, {} are needed",
                    begin + len
                ),
            ));
        }
        let page = page_size();
        let aligned = begin / page * page;
        let skip = (begin - aligned) as usize;
        let mut opts = MmapOptions::new();
        opts.offset(aligned).len(skip + len as usize);
        // SAFETY: the map is read-only and private to this process. Another process could
        // truncate or rewrite the file while it is mapped; the size was checked just above,
        // which is the best a reader of a shared file can do (documented in docs/limits.md).
        let map =
            unsafe { opts.map(file) }.map_err(|e| Error::io("map a window of", &self.path, e))?;
        // Pages already in the page cache are cheapest faulted in lazily by the compute
        // threads (the kernel maps them in batches); pages that are not are read here, in
        // the read stage, so disk I/O overlaps the compute of the previous tile.
        if !fully_resident(&map) {
            populate(&map, 0, map.len());
        }
        Ok(Window::mapped(map, skip, len as usize))
    }

    /// Reads column runs `(first, count)` of each row of `row` elements in the elements
    /// `[start, start + count)` into a compact buffer.
    fn runs_vec(&self, start: u64, count: u64, row: u64, runs: &[(u64, u64)]) -> Result<Vec<u8>> {
        let es = self.info.dtype.size() as u64;
        let width: u64 = runs.iter().map(|r| r.1).sum();
        let mut owned = vec![0u8; (count / row.max(1) * width * es) as usize];
        self.pread_runs(start, count, row, runs, &mut owned)?;
        Ok(owned)
    }

    /// Reads the column runs of each row of `[start, start + count)` (rows of `row`
    /// elements) into `dst`, one after another, with positioned reads.
    fn pread_runs(
        &self,
        start: u64,
        count: u64,
        row: u64,
        runs: &[(u64, u64)],
        dst: &mut [u8],
    ) -> Result<()> {
        let es = self.info.dtype.size() as u64;
        let rows = count / row.max(1);
        let end = self.info.data_offset + (start + count) * es;
        let now = self.file.len(&self.path)?;
        if end > now {
            return Err(Error::format(
                &self.path,
                format!(
                    "file changed size while in use: it now holds {now} bytes, {end} are needed"
                ),
            ));
        }
        let width: u64 = runs.iter().map(|r| r.1).sum();
        if ((rows * width * es) as usize) > dst.len() {
            return Err(Error::Internal(format!(
                "a read of {} bytes into a buffer of {}",
                rows * width * es,
                dst.len()
            )));
        }
        let total = (rows * width * es) as usize;
        if total == 0 {
            return Ok(());
        }
        let base = self.info.data_offset + start * es;
        let read = |buf: &mut [u8], off: u64| {
            self.file
                .read_exact_at(buf, off)
                .map_err(|e| Error::io("read a window of", &self.path, e))
        };
        if rows * runs.len() as u64 == 1 || runs == [(0, row)] {
            // one contiguous range: split across threads (one thread reads the page cache
            // at a fraction of what the cores together do)
            let first = base + runs[0].0 * es;
            return crate::format::par_pieces_of(&mut dst[..total], 1, |at, piece| {
                read(piece, first + at as u64)
            });
        }
        let row_bytes = (width * es) as usize;
        if let crate::io::source::Source::Object(o) = &self.file {
            return self.fetch_runs(o, base, rows, row, runs, row_bytes, &mut dst[..total]);
        }
        // runs of each row: whole rows per piece, pieces across threads
        crate::format::par_pieces_of(&mut dst[..total], row_bytes, |at, piece| {
            for (r, dst_row) in ((at / row_bytes) as u64..).zip(piece.chunks_mut(row_bytes)) {
                let mut o = 0usize;
                for &(c0, n) in runs {
                    let len = (n * es) as usize;
                    read(&mut dst_row[o..o + len], base + (r * row + c0) * es)?;
                    o += len;
                }
            }
            Ok(())
        })
    }

    /// [`TensorFile::pread_runs`]'s column runs of `rows` rows of an object (`base` the
    /// byte of the first row), `row_bytes` of `dst` a row: many rows' runs fetched at
    /// once, in concurrent requests, runs close together in one request (the gap between
    /// them at most the shortest run, so a request holds at most twice the bytes it
    /// needs), a group of at most [`RUNS_GROUP_BYTES`] of them at a time. A request a run
    /// would cost a round trip per row of a window.
    #[allow(clippy::too_many_arguments)]
    fn fetch_runs(
        &self,
        object: &crate::io::remote::Object,
        base: u64,
        rows: u64,
        row: u64,
        runs: &[(u64, u64)],
        row_bytes: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let es = self.info.dtype.size() as u64;
        let shortest = runs
            .iter()
            .map(|r| r.1 * es)
            .filter(|&n| n > 0)
            .min()
            .unwrap_or(1);
        let gap = shortest.min(crate::io::source::COALESCE_GAP);
        let per_group = (RUNS_GROUP_BYTES / row_bytes.max(1) as u64).clamp(1, RUNS_GROUP_ROWS);
        let mut r0 = 0u64;
        while r0 < rows {
            let r1 = (r0 + per_group).min(rows);
            // (file offset, bytes, where in dst), sorted by offset
            let mut items: Vec<(u64, u64, usize)> = Vec::new();
            for r in r0..r1 {
                let mut at = (r as usize) * row_bytes;
                for &(c0, n) in runs {
                    items.push((base + (r * row + c0) * es, n * es, at));
                    at += (n * es) as usize;
                }
            }
            items.sort_unstable_by_key(|i| i.0);
            let ranges: Vec<(u64, u64)> = items.iter().map(|i| (i.0, i.1)).collect();
            let spans = crate::io::source::fetch_coalesced(object, &ranges, gap)
                .map_err(|e| Error::io("read a window of", &self.path, e))?;
            for span in &spans {
                for &k in &span.members {
                    let (off, n, at) = items[k];
                    let from = (off - span.range.start) as usize;
                    dst[at..at + n as usize].copy_from_slice(&span.bytes[from..from + n as usize]);
                }
            }
            r0 = r1;
        }
        Ok(())
    }

    #[doc(hidden)]
    /// Reads the elements `[start, start + count)` as `touch` says straight into `dst`
    /// with positioned reads, laid out as [`TensorFile::map_window_touch`] lays out its
    /// window (the whole range, or each row's column runs one after another), with no
    /// mapping and no buffer in between: how a device backend's page-locked staging slot
    /// is filled. Returns the bytes written, or `None` for a compressed input, whose
    /// chunks must be decoded (use [`TensorFile::map_window_touch`]).
    ///
    /// # Errors
    /// As [`TensorFile::map_window_touch`]; [`Error::Internal`] if `dst` is too short.
    pub fn read_into(
        &self,
        start: u64,
        count: u64,
        touch: Touch,
        dst: &mut [u8],
    ) -> Result<Option<usize>> {
        if self.chunked.is_some() {
            return Ok(None);
        }
        if let Some(parts) = self.view_pieces(&[(start, count, touch)]) {
            let mut at = 0;
            for &(s, n, t) in parts.iter().flatten() {
                at += self.read_file_into(s, n, t, &mut dst[at..])?;
            }
            return Ok(Some(at));
        }
        self.read_file_into(start, count, touch, dst).map(Some)
    }

    /// [`TensorFile::read_into`] of the file's own elements (not a window's) of a file
    /// that is not decoded in chunks; returns the bytes written.
    fn read_file_into(
        &self,
        start: u64,
        count: u64,
        touch: Touch,
        dst: &mut [u8],
    ) -> Result<usize> {
        let bytes = (touch.touched(count) * self.info.dtype.size() as u64) as usize;
        match touch {
            Touch::All => self.pread_runs(start, count, count.max(1), &[(0, count)], dst)?,
            Touch::Rows { row, runs, nruns } => {
                self.pread_runs(start, count, row, &runs[..nruns], dst)?;
            }
        }
        if self.swap {
            swap_bytes(&mut dst[..bytes], self.info.dtype.swap_unit());
        }
        Ok(bytes)
    }
}

/// Most bytes of rows' column runs [`TensorFile::fetch_runs`] fetches at once from an
/// object: the requests' bodies it holds beside the window are at most twice that (1 MiB
/// a reading thread, part of the fixed overhead).
const RUNS_GROUP_BYTES: u64 = 512 << 10;

/// Most rows whose runs are fetched at once: with one run a row, the requests in flight.
const RUNS_GROUP_ROWS: u64 = 32;

/// Reverses the bytes of each element of `es` bytes in `buf` (big-endian to native),
/// across threads when it is large.
fn swap_bytes(buf: &mut [u8], es: usize) {
    fn each<const N: usize>(piece: &mut [u8]) {
        for e in piece.chunks_exact_mut(N) {
            e.reverse();
        }
    }
    let f: fn(&mut [u8]) = match es {
        2 => each::<2>,
        4 => each::<4>,
        8 => each::<8>,
        _ => return,
    };
    if buf.len() >= 1 << 20 {
        use rayon::prelude::*;
        buf.par_chunks_mut(es << 14).for_each(f);
    } else {
        f(buf);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::dtype::DType;
    use crate::format::{TensorFile, Touch};

    /// Positioned reads large enough to be split across threads give the file's bytes:
    /// a contiguous range (split at any byte) and column runs of many rows (split at
    /// whole rows), against the bytes read plainly.
    #[test]
    fn large_reads_split_across_threads_give_the_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.npy");
        let (h, w) = (1500usize, 2003usize); // 12 MB of f32, an odd row length
        let mut bytes = crate::format::npy::build_header(DType::F32, &[h, w]);
        let head = bytes.len();
        bytes.extend((0..h * w * 4).map(|i| (i * 7 + i / 4093) as u8));
        std::fs::write(&path, &bytes).unwrap();
        let data = &bytes[head..];
        let t = TensorFile::open(&path).unwrap();
        for (start, count) in [
            (0u64, (h * w) as u64),
            (1, (h * w - 3) as u64),
            (2003 * 7 + 5, 2_500_000),
        ] {
            let mut dst = vec![0u8; count as usize * 4];
            let n = t
                .read_into(start, count, Touch::All, &mut dst)
                .unwrap()
                .unwrap();
            assert_eq!(n, dst.len());
            assert!(
                dst == data[start as usize * 4..(start + count) as usize * 4],
                "{start} {count}"
            );
        }
        let runs = [(1995u64, 8u64), (0, 1500), (1600, 300)];
        for nruns in 1..=3 {
            let touch = Touch::Rows {
                row: w as u64,
                runs,
                nruns,
            };
            let rows = 1400u64;
            let width: u64 = runs[..nruns].iter().map(|r| r.1).sum();
            let mut dst = vec![0u8; (rows * width * 4) as usize];
            let start = 2 * w as u64;
            t.read_into(start, rows * w as u64, touch, &mut dst)
                .unwrap()
                .unwrap();
            let mut want = Vec::new();
            for r in 0..rows {
                for &(c0, n) in &runs[..nruns] {
                    let at = ((start + r * w as u64 + c0) * 4) as usize;
                    want.extend_from_slice(&data[at..at + n as usize * 4]);
                }
            }
            assert!(dst == want, "{nruns} runs");
        }
    }
}
