//! HDF5's szip filter (id 4): the compression of NASA's HDF-EOS and many satellite
//! products, decoded by libaec's `libsz`, the szip library HDF5 itself is built with
//! (`SZ_BufftoBuffDecompress`). It is loaded at run time, as the HDF5 library is (the
//! HDF5 packages bring it along); a dataset that needs it where it is missing is refused
//! in one line saying what to install.
//!
//! What HDF5's `H5Z__filter_szip` does, and so what is done here: a stored chunk is its
//! decoded size (4 bytes, little-endian), then the szip stream; it is decoded with the
//! filter's client data (options mask, bits per pixel, pixels per block, pixels per
//! scanline) into a buffer of that size and must fill it. The size is checked against
//! the chunk's before anything is decoded, and libaec stops at the buffer's end, so a
//! chunk that would decode past its size is refused.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::io::native::Native;

/// libsz's `SZ_com_t`.
#[repr(C)]
struct SzCom {
    options_mask: c_int,
    bits_per_pixel: c_int,
    pixels_per_block: c_int,
    pixels_per_scanline: c_int,
}

/// `SZ_BufftoBuffDecompress(dest, &dest_len, source, source_len, &param)`: 0 (`SZ_OK`)
/// on success, `dest_len` then the bytes written.
type DecompressFn =
    unsafe extern "C" fn(*mut c_void, *mut usize, *const c_void, usize, *const SzCom) -> c_int;

struct LibSz {
    decompress: DecompressFn,
    /// Keeps the library mapped while the pointer above lives (the process).
    _lib: libloading::Library,
}

const NATIVE: Native = Native {
    env: "TILESTREAM_SZIP",
    names: &["libsz.so.2", "libsz.so", "libsz.2.dylib", "libsz.dylib"],
    install: "szip-compressed HDF5 datasets are decoded by libaec's libsz (the szip library \
              HDF5 uses), which is not installed: install it (Debian and Ubuntu: apt-get \
              install libsz2; macOS: brew install libaec) or set TILESTREAM_SZIP to its \
              path, or rewrite the file with h5repack -f GZIP=4",
};

fn load() -> Result<LibSz, String> {
    let lib = NATIVE.load()?;
    // SAFETY: the symbol is taken with the signature `szlib.h` gives it, unchanged since
    // szip 2.0 and kept by libaec's compatibility library; the pointer is kept beside
    // the library, never unloaded
    unsafe {
        Ok(LibSz {
            decompress: NATIVE.symbol(&lib, "SZ_BufftoBuffDecompress", "libaec 1.0")?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static LibSz, String> {
    static LIB: OnceLock<Result<LibSz, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// An szip filter's client data: options mask, pixels per block, bits per pixel, pixels
/// per scanline (HDF5's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Szip {
    mask: u32,
    bits: u32,
    block: u32,
    scanline: u32,
}

impl Szip {
    /// The filter of client data `params`, or why it cannot be undone.
    pub(super) fn from_params(params: &[u32]) -> Result<Self, String> {
        // H5Z_SZIP_PARM_MASK, _PPB, _BPP, _PPS
        let &[mask, block, bits, scanline, ..] = params else {
            return Err(format!(
                "its szip filter has {} parameters, not the 4 HDF5 writes",
                params.len()
            ));
        };
        // what libaec accepts (and HDF5 writes): blocks of 8, 16, 32 (or 64) pixels,
        // samples of 1 to 32 bits or 64 (taken as bytes), a scanline of pixels
        if !matches!(block, 8 | 16 | 32 | 64)
            || !(matches!(bits, 1..=32) || bits == 64)
            || scanline == 0
            || scanline > 1 << 20
        {
            return Err(format!(
                "its szip parameters ({bits} bits a pixel, {block} pixels a block, \
                 {scanline} a scanline) are not ones szip decodes"
            ));
        }
        Ok(Szip {
            mask,
            bits,
            block,
            scanline,
        })
    }

    /// Bytes libsz allocates beside the output to decode a chunk of `n` bytes: a padded
    /// copy when the scanline is not a whole number of blocks, else a copy to
    /// de-interleave 32- and 64-bit samples (`sz_compat.c`).
    pub(super) fn scratch_bytes(self, n: u64) -> u64 {
        let deinterleave = matches!(self.bits, 32 | 64);
        let pixel = match if deinterleave { 8 } else { self.bits } {
            17.. => 4u64,
            9..=16 => 2,
            _ => 1,
        };
        let (line, block) = (u64::from(self.scanline), u64::from(self.block));
        if line % block != 0 {
            let rsi = line.div_ceil(block);
            let scanlines = (n / pixel).div_ceil(line);
            rsi * block * pixel * scanlines
        } else if deinterleave {
            n
        } else {
            0
        }
    }
}

/// Undoes the szip filter: decodes the stored chunk `data` into the front of `dest` and
/// returns the bytes decoded.
///
/// # Errors
/// A one-line reason: libsz missing, a header cut short or claiming more than `dest`,
/// a stream libsz cannot decode or that does not fill the size its header gives.
pub(super) fn undo(p: Szip, data: &[u8], dest: &mut [u8]) -> Result<usize, String> {
    let lib = library()?;
    let Some((head, stream)) = data.split_first_chunk::<4>() else {
        return Err("it is shorter than its 4-byte szip header".into());
    };
    let n = u32::from_le_bytes(*head) as usize;
    if n > dest.len() {
        return Err(format!(
            "its szip header gives {n} bytes, past the chunk's {}",
            dest.len()
        ));
    }
    let param = SzCom {
        options_mask: p.mask as c_int,
        bits_per_pixel: p.bits as c_int,
        pixels_per_block: p.block as c_int,
        pixels_per_scanline: p.scanline as c_int,
    };
    let mut got = n;
    // SAFETY: `dest` has room for `n` bytes, which is what `got` tells libsz it may
    // write (libaec stops at the end of its output); `stream` is read within its
    // length; `param` outlives the call, which keeps no pointer
    let r = unsafe {
        (lib.decompress)(
            dest.as_mut_ptr().cast(),
            &raw mut got,
            stream.as_ptr().cast(),
            stream.len(),
            &raw const param,
        )
    };
    if r != 0 {
        return Err(format!(
            "libsz could not decode its szip stream (error {r})"
        ));
    }
    if got != n {
        return Err(format!(
            "its szip stream holds {got} bytes, not the {n} its header gives"
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_libaec_cannot_take_are_refused_in_one_line() {
        for bad in [
            &[141, 8, 8][..],
            &[141, 7, 8, 64],
            &[141, 8, 40, 64],
            &[141, 8, 8, 0],
        ] {
            let e = Szip::from_params(bad).expect_err("refused");
            assert!(!e.contains('\n'), "{e}");
        }
        let p = Szip::from_params(&[141, 16, 32, 100]).expect("HDF5's own");
        // a scanline of 100 pixels in blocks of 16: 7 blocks a line, bytes of 1 byte
        // (32-bit samples are de-interleaved into bytes)
        assert_eq!(p.scratch_bytes(4000), 7 * 16 * 40);
        let q = Szip::from_params(&[141, 16, 16, 64]).expect("whole blocks");
        assert_eq!(q.scratch_bytes(4000), 0);
    }

    #[test]
    fn headers_past_the_chunk_and_cut_short_are_refused() {
        let p = Szip::from_params(&[141, 8, 8, 64]).expect("valid");
        let mut out = vec![0u8; 64];
        let mut long = 65u32.to_le_bytes().to_vec();
        long.extend([0u8; 16]);
        for bad in [&long[..], &[1, 0]] {
            match undo(p, bad, &mut out) {
                Ok(n) => panic!("decoded {n}"),
                Err(e) => assert!(!e.contains('\n'), "{e}"),
            }
        }
    }
}
