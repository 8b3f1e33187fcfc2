//! HDF5's bzip2 filter (registered id 307, the `H5Zbzip2.c` of `PyTables`, which writes it,
//! as does `hdf5plugin.BZip2`): each stored chunk is one bzip2 stream, decoded by libbz2 (what
//! the filter calls), loaded at run time like the other C libraries (every Linux and
//! macOS system has it); a dataset that needs it where it is missing is refused in one
//! line saying what to install.
//!
//! The stream is decoded into a buffer of the chunk's size, which libbz2 does not pass
//! (`BZ2_bzBuffToBuffDecompress` answers `BZ_OUTBUFF_FULL`): a chunk that would decode
//! past it is refused, never inflated.

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use crate::io::native::Native;

/// `BZ2_bzBuffToBuffDecompress(dest, &dest_len, source, source_len, small, verbosity)`:
/// `BZ_OK` (0) on success, `dest_len` then the bytes written.
type DecompressFn =
    unsafe extern "C" fn(*mut c_char, *mut c_uint, *const c_char, c_uint, c_int, c_int) -> c_int;

struct LibBz2 {
    decompress: DecompressFn,
    /// Keeps the library mapped while the pointer above lives (the process).
    _lib: libloading::Library,
}

const NATIVE: Native = Native {
    env: "TILESTREAM_BZIP2",
    names: &[
        "libbz2.so.1.0",
        "libbz2.so.1",
        "libbz2.so",
        "libbz2.1.0.dylib",
        "libbz2.dylib",
    ],
    install: "bzip2-compressed HDF5 datasets are decoded by libbz2, which is not installed: \
              install it (Debian and Ubuntu: apt-get install libbz2-1.0; macOS: brew \
              install bzip2) or set TILESTREAM_BZIP2 to its path, or rewrite the file with \
              h5repack -f GZIP=4",
};

fn load() -> Result<LibBz2, String> {
    let lib = NATIVE.load()?;
    // SAFETY: the symbol is taken with the signature `bzlib.h` gives it, unchanged since
    // bzip2 1.0; the pointer is kept beside the library, never unloaded
    unsafe {
        Ok(LibBz2 {
            decompress: NATIVE.symbol(&lib, "BZ2_bzBuffToBuffDecompress", "bzip2 1.0")?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static LibBz2, String> {
    static LIB: OnceLock<Result<LibBz2, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The block size (in 100 000 bytes, 1 to 9) of the filter's client data `params`
/// (`cd_values[0]`, 9 when absent): what libbz2's tables for its streams take.
pub(super) fn level_of(params: &[u32]) -> u32 {
    params.first().copied().unwrap_or(9).clamp(1, 9)
}

/// Bytes libbz2 holds to decode a stream of blocks of `level` x 100 000 bytes (its
/// default decoder, not `small`: 100 KB and four bytes a block byte).
pub(super) fn scratch_bytes(level: u32) -> u64 {
    100_000 + 400_000 * u64::from(level)
}

/// Undoes the bzip2 filter written with blocks of `level` x 100 000 bytes: decodes the
/// stored chunk `data` into the front of `dest` and returns the bytes decoded.
///
/// # Errors
/// A one-line reason: a stream of larger blocks than its filter's (whose tables the
/// budget does not hold), libbz2 missing, a chunk of 4 GiB or more, a stream that
/// decodes past `dest`, a damaged or cut stream.
pub(super) fn undo(level: u32, data: &[u8], dest: &mut [u8]) -> Result<usize, String> {
    if let [b'B', b'Z', b'h', d @ b'1'..=b'9', ..] = data {
        let blocks = u32::from(d - b'0');
        if blocks > level {
            return Err(format!(
                "its bzip2 stream has blocks of {blocks}00k, larger than its filter's \
                 {level}00k"
            ));
        }
    }
    let lib = library()?;
    let (Ok(n), Ok(cap)) = (c_uint::try_from(data.len()), c_uint::try_from(dest.len())) else {
        return Err("it is a bzip2 chunk of 4 GiB or more, which libbz2 cannot take".into());
    };
    let mut got = cap;
    // SAFETY: `dest` has room for `cap` bytes, which is what `got` tells libbz2 it may
    // write (it stops there, answering BZ_OUTBUFF_FULL); `data` is read within its
    // length; the call keeps no pointer
    let r = unsafe {
        (lib.decompress)(
            dest.as_mut_ptr().cast(),
            &raw mut got,
            data.as_ptr().cast(),
            n,
            0,
            0,
        )
    };
    match r {
        0 => Ok(got as usize),
        -8 => Err(format!(
            "its bzip2 stream decodes past the chunk's {} bytes",
            dest.len()
        )),
        -7 => Err("its bzip2 stream ends before it is whole".into()),
        -4 | -5 => Err("its bzip2 stream is damaged".into()),
        e => Err(format!(
            "libbz2 could not decode its bzip2 stream (error {e})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_whole_stream_is_refused_in_one_line() {
        let mut out = vec![0u8; 64];
        // not bzip2 at all, and a stream header with nothing after it
        for bad in [&b"not bzip2"[..], b"BZh9", b"", b"BZh9\x31\x41\x59"] {
            let e = undo(9, bad, &mut out).expect_err("refused");
            assert!(!e.contains('\n') && !e.contains("not installed"), "{e}");
        }
        // blocks larger than the filter's (whose tables the budget counts)
        let e = undo(1, b"BZh9\x31\x41\x59", &mut out).expect_err("refused");
        assert!(e.contains("larger than its filter's 100k"), "{e}");
    }
}
