//! `.npy` files in Fortran order (`np.save(path, a.T)`, `np.asfortranarray`), with or
//! without big-endian elements: read as a chunked tensor ([`crate::format::chunked`]), so
//! their windows come through the same bounded decode scratch and cache as a GeoTIFF's
//! or a Zarr store's; "decoding" a chunk reads its bytes with positioned reads, puts them
//! in C order and swaps each element's bytes where they are big-endian. (A C-order
//! big-endian file needs no chunks: its windows are read and swapped in place,
//! `src/format/read.rs`.)
//!
//! # Chunks
//! A chunk is a run of rows of the leading axis, every other axis whole: `(k, d1, ...)`,
//! about [`TARGET_F`] bytes, so the row-by-row plans of flat operations decode each chunk
//! once. The first axis is the file's fastest: a chunk of `k` rows is one run of `k`
//! elements per position of the other axes (each `d0` elements after the last), read a
//! batch of runs at a time (as one read when the gaps between them are small, one read
//! per run when they are large) and transposed into the chunk. A file whose rows (every
//! axis but the first) hold more than [`ROW_MAX`] bytes is refused: each of its C-order
//! rows would gather elements from across the whole file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::chunked::{ChunkSource, Chunked};
use crate::io::source::Source;

/// Bytes a chunk aims for (one read per run of rows: longer runs, fewer reads).
pub(crate) const TARGET_F: u64 = 4 << 20;

/// Most bytes of one row (every axis but the first) of a Fortran-order file.
pub(crate) const ROW_MAX: u64 = 16 << 20;

/// Most bytes one read of a Fortran-order chunk brings in (runs and the gaps between
/// them): the decode's working buffer.
const READ_MAX: u64 = 1 << 20;

/// A gap between two runs that is read and thrown away rather than skipped with a new
/// read: a read costs about as much as copying this many bytes.
const GAP_READ: u64 = 64 << 10;

/// How a Fortran-order `.npy` file's elements are laid out.
#[derive(Debug)]
pub(crate) struct NpyChunks {
    path: PathBuf,
    file: Source,
    /// Byte offset of the file's element 0.
    offset: u64,
    /// The tensor's shape (a selection of rows of the file's, see `row0`).
    shape: Vec<usize>,
    /// The file's length along the first axis (the stride of a Fortran-order run).
    file_rows: u64,
    /// The first row of the file this tensor starts at.
    row0: u64,
    dtype: DType,
    swap: bool,
    chunk: Vec<usize>,
}

impl NpyChunks {
    /// The chunk source of the Fortran-order file `path` (open as `file`) whose elements
    /// start at byte `offset`, of `shape` and `dtype`, big-endian if `swap`.
    ///
    /// # Errors
    /// [`Error::Format`] for a Fortran-order file whose rows are longer than
    /// [`ROW_MAX`]; [`Error::Io`] if the file cannot be opened again.
    pub(crate) fn new(
        path: &Path,
        file: &Source,
        offset: u64,
        shape: &[usize],
        dtype: DType,
        swap: bool,
    ) -> Result<Self> {
        let es = dtype.size() as u64;
        let row: u64 = shape.iter().skip(1).map(|&d| d as u64).product();
        if row * es > ROW_MAX {
            return Err(Error::format(
                path,
                format!(
                    "a Fortran-order .npy whose rows (every axis but the first, {} elements) \
                     hold {}: tilestream reads Fortran-order files whose rows hold at most {}; \
                     give the array's transpose instead (np.save(path, a.T) of this file's \
                     array is C order)",
                    row,
                    fmt_bytes(row * es),
                    fmt_bytes(ROW_MAX)
                ),
            ));
        }
        let chunk = chunk_shape(shape, es);
        Ok(NpyChunks {
            path: path.to_path_buf(),
            file: file.try_clone(path)?,
            offset,
            shape: shape.to_vec(),
            file_rows: shape.first().map_or(1, |&d| d as u64),
            row0: 0,
            dtype,
            swap,
            chunk,
        })
    }

    /// The chunked tensor whose chunks this source decodes.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened again.
    pub(crate) fn chunked(&self) -> Result<Arc<Chunked>> {
        let me = self.select(self.shape.clone(), 0)?;
        Ok(Arc::new(Chunked::new(
            self.shape.clone(),
            self.dtype,
            Box::new(me),
        )))
    }

    /// The same file's rows `[start, end)` of the leading axis (within this tensor's), as
    /// a source of its own.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened again.
    pub(crate) fn rows(&self, start: u64, end: u64) -> Result<Self> {
        let mut shape = self.shape.clone();
        if let Some(d) = shape.first_mut() {
            *d = (end - start) as usize;
        }
        self.select(shape, start)
    }

    /// This source over `shape`, starting `start` rows further into the file.
    fn select(&self, shape: Vec<usize>, start: u64) -> Result<Self> {
        let es = self.dtype.size() as u64;
        Ok(NpyChunks {
            path: self.path.clone(),
            file: self.file.try_clone(&self.path)?,
            offset: self.offset,
            chunk: chunk_shape(&shape, es),
            shape,
            file_rows: self.file_rows,
            row0: self.row0 + start,
            dtype: self.dtype,
            swap: self.swap,
        })
    }

    /// Where a two-dimensional file's columns lie, when its elements are in native byte
    /// order: the byte offset of element 0, the file's rows (the stride from one column's
    /// run to the next, in elements) and this tensor's first row in them. Column `c`'s
    /// rows `a..b` are then elements `c * file_rows + row0 + a ..` of the file's data,
    /// one contiguous run.
    pub(crate) fn column_runs(&self) -> Option<(u64, u64, u64)> {
        (self.shape.len() == 2 && !self.swap).then_some((self.offset, self.file_rows, self.row0))
    }

    /// What the file holds, for a plan or `info`: `Fortran order, big-endian`.
    pub(crate) fn describe(&self) -> String {
        if self.swap {
            "Fortran order, big-endian".into()
        } else {
            "Fortran order".into()
        }
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<()> {
        self.file.read_exact_at(buf, at).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::format(
                    &self.path,
                    "file changed size while in use: it is shorter than its header says",
                )
            } else {
                Error::io("read", &self.path, e)
            }
        })
    }

    /// A Fortran-order chunk of rows `a..a + e`: the run of each position of the other
    /// axes (in the file's order), read a batch at a time and written into its C-order
    /// column of the chunk.
    fn decode_f(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        let es = self.dtype.size();
        let k = self.chunk[0];
        let a = pos[0] * k;
        let e = k.min(self.shape[0] - a);
        let rest = &self.shape[1..];
        let m: usize = rest.iter().product();
        let run = (e * es) as u64;
        let stride = self.file_rows * es as u64;
        let first = self.offset + (self.row0 + a as u64) * es as u64;
        // C-order strides of the other axes, to place the file's runs (F order)
        let mut cstride = vec![1usize; rest.len()];
        for i in (0..rest.len().saturating_sub(1)).rev() {
            cstride[i] = cstride[i + 1] * rest[i + 1];
        }
        let mut coord = vec![0usize; rest.len()];
        let mut col = 0usize; // C-order index of the run at `coord`
        // runs per batch: the gaps read when small, each run its own read when large
        let gap = stride - run;
        let together = gap <= GAP_READ;
        let span = |n: u64| (n - 1) * stride + run;
        let mut per = (READ_MAX / stride.max(1)).max(1);
        if !together {
            per = (READ_MAX / run.max(1)).max(1);
        }
        let per = per.min(m as u64) as usize;
        let mut buf = vec![
            0u8;
            if together {
                span(per as u64)
            } else {
                run * per as u64
            } as usize
        ];
        let mut cols = Vec::with_capacity(per);
        let mut f = 0usize;
        while f < m {
            let n = per.min(m - f);
            let at = first + f as u64 * stride;
            if together {
                let len = span(n as u64) as usize;
                self.read_at(&mut buf[..len], at)?;
            } else {
                for r in 0..n {
                    let s = r * run as usize;
                    self.read_at(&mut buf[s..s + run as usize], at + r as u64 * stride)?;
                }
            }
            cols.clear();
            for _ in 0..n {
                cols.push(col);
                // next position in F order: the first of the other axes fastest
                for (i, c) in coord.iter_mut().enumerate() {
                    *c += 1;
                    col += cstride[i];
                    if *c < rest[i] {
                        break;
                    }
                    col -= cstride[i] * *c;
                    *c = 0;
                }
            }
            let step = if together {
                stride as usize
            } else {
                run as usize
            };
            // a complex element's two parts are swapped one by one
            match (es, self.dtype.swap_unit()) {
                (1, _) => place::<1, 1>(&buf, step, &cols, e, m, self.swap, out),
                (2, _) => place::<2, 2>(&buf, step, &cols, e, m, self.swap, out),
                (4, _) => place::<4, 4>(&buf, step, &cols, e, m, self.swap, out),
                (8, 4) => place::<8, 4>(&buf, step, &cols, e, m, self.swap, out),
                (8, _) => place::<8, 8>(&buf, step, &cols, e, m, self.swap, out),
                _ => place::<16, 8>(&buf, step, &cols, e, m, self.swap, out),
            }
            f += n;
        }
        Ok(())
    }
}

/// Writes runs of `e` elements of `ES` bytes (run `r` at byte `r * step` of `buf`) into
/// the C-order columns `cols[r]` of a chunk `m` elements wide, swapping the bytes of each
/// `UNIT` if asked; row by row, so the writes of one row of the chunk are close together.
fn place<const ES: usize, const UNIT: usize>(
    buf: &[u8],
    step: usize,
    cols: &[usize],
    e: usize,
    m: usize,
    swap: bool,
    out: &mut [u8],
) {
    for i in 0..e {
        let row = &mut out[i * m * ES..(i + 1) * m * ES];
        for (r, &c) in cols.iter().enumerate() {
            let s = r * step + i * ES;
            let mut v: [u8; ES] = buf[s..s + ES].try_into().unwrap_or([0; ES]);
            if swap {
                v.chunks_exact_mut(UNIT).for_each(<[u8]>::reverse);
            }
            row[c * ES..(c + 1) * ES].copy_from_slice(&v);
        }
    }
}

/// The chunk shape of a tensor of `shape` with elements of `es` bytes (see the module's
/// notes).
fn chunk_shape(shape: &[usize], es: u64) -> Vec<usize> {
    let mut chunk = shape.to_vec();
    if let Some(c) = chunk.first_mut() {
        let row: u64 = shape[1..].iter().map(|&d| d as u64).product::<u64>() * es;
        *c = (TARGET_F / row.max(1)).clamp(1, shape[0].max(1) as u64) as usize;
    }
    chunk
}

impl ChunkSource for NpyChunks {
    fn chunk_shape(&self) -> &[usize] {
        &self.chunk
    }

    fn decode(&self, pos: &[usize], out: &mut [u8]) -> Result<()> {
        self.decode_f(pos, out)
    }

    fn work_bytes(&self) -> u64 {
        // the read buffer: at most READ_MAX, or one run when a run is longer
        READ_MAX.max(self.chunk[0] as u64 * self.dtype.size() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_runs_of_rows() {
        assert_eq!(chunk_shape(&[3_075_200, 512], 4), vec![2048, 512]);
        assert_eq!(chunk_shape(&[100, 7], 8), vec![100, 7]);
        assert_eq!(chunk_shape(&[3, 4, 1 << 20], 4), vec![1, 4, 1 << 20]);
        assert_eq!(chunk_shape(&[], 4), Vec::<usize>::new());
    }
}
