//! Undoing a chunk's codecs, each stopped at the size the metadata allows: the
//! bytes-to-bytes codecs (`zstd`, `gzip`, `blosc`, `crc32c`) and the `transpose` of the
//! array-to-bytes step. HDF5's filters reuse the bounded readers.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result, ZarrError};
use crate::format::zarr::codec::Compressor;

/// Undoes one bytes-to-bytes codec: its output is `size` bytes exactly (`exact`) or at
/// most; decoding stops there.
pub(super) fn undo(
    path: &Path,
    what: &str,
    c: Compressor,
    src: &[u8],
    size: usize,
    exact: bool,
) -> Result<Vec<u8>> {
    let corrupt = |e: &dyn std::fmt::Display| {
        Error::zarr_at(
            path,
            ZarrError::Decode {
                chunk: what.to_string(),
                reason: e.to_string(),
            },
        )
    };
    let over = || {
        Error::zarr_at(
            path,
            ZarrError::DecodesPast {
                chunk: what.to_string(),
                limit: size,
            },
        )
    };
    match c {
        Compressor::Crc32c { at_end } => {
            if src.len() < 4 {
                return Err(corrupt(&"shorter than its crc32c checksum"));
            }
            let (body, sum) = if at_end {
                let (b, s) = src.split_at(src.len() - 4);
                (b, s)
            } else {
                let (s, b) = src.split_at(4);
                (b, s)
            };
            if crc32c::crc32c(body).to_le_bytes() != sum {
                return Err(corrupt(&"its crc32c checksum does not match"));
            }
            Ok(body.to_vec())
        }
        Compressor::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(src).map_err(|e| corrupt(&e))?;
            bounded_read(d, size, exact).map_err(|e| e.map_or_else(over, |e| corrupt(&e)))
        }
        Compressor::Gzip => bounded_read(flate2::read::GzDecoder::new(src), size, exact)
            .map_err(|e| e.map_or_else(over, |e| corrupt(&e))),
        Compressor::Blosc => blosc(src, size, exact).map_err(|e| match e {
            None => over(),
            Some(m) => corrupt(&m),
        }),
    }
}

/// Reads `r` to its end, refusing more than `size` bytes (`Err(None)`).
pub(crate) fn bounded_read(
    r: impl Read,
    size: usize,
    exact: bool,
) -> std::result::Result<Vec<u8>, Option<std::io::Error>> {
    let mut out = Vec::with_capacity(if exact { size } else { size.min(1 << 20) });
    let got = r
        .take(size as u64 + 1)
        .read_to_end(&mut out)
        .map_err(Some)?;
    if got > size {
        return Err(None);
    }
    Ok(out)
}

/// Blosc 1 decompression of `src`, whose header must declare at most `size` bytes.
pub(crate) fn blosc(
    src: &[u8],
    size: usize,
    exact: bool,
) -> std::result::Result<Vec<u8>, Option<String>> {
    let mut n: usize = 0;
    // SAFETY: `src` is a valid slice of `src.len()` bytes and `n` a valid out-pointer;
    // blosc_cbuffer_validate reads only within the given length.
    let valid =
        unsafe { blosc_src::blosc_cbuffer_validate(src.as_ptr().cast(), src.len(), &raw mut n) };
    if valid != 0 {
        return Err(Some("not a valid blosc buffer".into()));
    }
    if n > size || (exact && n != size) {
        return if n > size {
            Err(None)
        } else {
            Err(Some(format!(
                "its blosc header declares {n} bytes, not {size}"
            )))
        };
    }
    let mut out = vec![0u8; n];
    // SAFETY: the buffer was validated above (its header is consistent with its length
    // and declares `n` decoded bytes); `out` has room for exactly `n` bytes, which is
    // what blosc_decompress_ctx writes at most.
    let got = unsafe {
        blosc_src::blosc_decompress_ctx(src.as_ptr().cast(), out.as_mut_ptr().cast(), n, 1)
    };
    if got < 0 || got as usize != n {
        return Err(Some(format!("blosc failed ({got})")));
    }
    Ok(out)
}

/// Writes the C-order array `src` (the chunk transposed: its axis `i` is axis
/// `order[i]` of the chunk) into `out` in the chunk's own C order.
pub(super) fn untranspose(src: &[u8], out: &mut [u8], shape: &[usize], order: &[usize], es: usize) {
    let rank = shape.len();
    // stride in `out` of each encoded axis
    let mut strides = vec![0usize; rank];
    let mut s = es;
    for a in (0..rank).rev() {
        strides[a] = s;
        s *= shape[a];
    }
    let enc_shape: Vec<usize> = order.iter().map(|&o| shape[o]).collect();
    let enc_strides: Vec<usize> = order.iter().map(|&o| strides[o]).collect();
    let mut idx = vec![0usize; rank];
    let mut at = 0usize;
    for e in src.chunks_exact(es) {
        out[at..at + es].copy_from_slice(e);
        // next encoded index, C order
        for a in (0..rank).rev() {
            idx[a] += 1;
            at += enc_strides[a];
            if idx[a] < enc_shape[a] {
                break;
            }
            at -= enc_strides[a] * enc_shape[a];
            idx[a] = 0;
        }
    }
}
