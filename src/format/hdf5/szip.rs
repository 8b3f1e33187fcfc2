//! HDF5's szip filter (id 4): the compression of NASA's HDF-EOS and many satellite
//! products, decoded by libaec, the library HDF5's szip is built on (`libsz` is its
//! compatibility layer). libaec is loaded at run time, as the HDF5 library is (the HDF5
//! packages bring it along); a dataset that needs it where it is missing is refused in
//! one line saying what to install.
//!
//! What HDF5's `H5Z__filter_szip` does, and so what is done here: a stored chunk is its
//! decoded size (4 bytes, little-endian), then the szip stream, decoded with the filter's
//! client data (options mask, pixels per block, bits per pixel, pixels per scanline) as
//! libaec's `SZ_BufftoBuffDecompress` decodes it (`sz_compat.c`): 32- and 64-bit pixels
//! as byte planes of 8-bit samples, put back together after; a scanline that is not a
//! whole number of blocks padded to one, the padding removed after. That function is
//! not called itself: on a stream that ends early it returns the bytes of its own
//! uninitialised buffer as data; here the stream must fill what its chunk's size makes,
//! or the chunk is refused. The size is checked against the chunk's before anything is
//! decoded, and libaec stops at the end of its output.

use std::ffi::{c_int, c_uint};
use std::sync::OnceLock;

use crate::io::native::Native;

/// libaec's `struct aec_stream` (`libaec.h`, unchanged since libaec 1.0).
#[repr(C)]
struct AecStream {
    next_in: *const u8,
    avail_in: usize,
    total_in: usize,
    next_out: *mut u8,
    avail_out: usize,
    total_out: usize,
    bits_per_sample: c_uint,
    block_size: c_uint,
    rsi: c_uint,
    flags: c_uint,
    state: *mut std::ffi::c_void,
}

/// `aec_buffer_decode(&strm)`: 0 (`AEC_OK`) on success.
type DecodeFn = unsafe extern "C" fn(*mut AecStream) -> c_int;

/// libaec's sample flags that szip's options map to (`AEC_DATA_MSB`,
/// `AEC_DATA_PREPROCESS`), from szip's (`SZ_MSB_OPTION_MASK`, `SZ_NN_OPTION_MASK`).
const AEC_DATA_MSB: c_uint = 4;
const AEC_DATA_PREPROCESS: c_uint = 8;
const SZ_MSB_OPTION_MASK: u32 = 16;
const SZ_NN_OPTION_MASK: u32 = 32;

struct LibAec {
    decode: DecodeFn,
    /// Keeps the library mapped while the pointer above lives (the process).
    _lib: libloading::Library,
}

const NATIVE: Native = Native {
    env: "TILESTREAM_SZIP",
    names: &["libaec.so.0", "libaec.so", "libaec.0.dylib", "libaec.dylib"],
    install: "szip-compressed HDF5 datasets are decoded by libaec (the library HDF5's szip \
              is built on), which is not installed: install it (Debian and Ubuntu: apt-get \
              install libaec0; macOS: brew install libaec) or set TILESTREAM_SZIP to its \
              path, or rewrite the file with h5repack -f GZIP=4",
};

fn load() -> Result<LibAec, String> {
    let lib = NATIVE.load()?;
    // SAFETY: the symbol is taken with the signature `libaec.h` gives it, unchanged since
    // libaec 1.0; the pointer is kept beside the library, never unloaded
    unsafe {
        Ok(LibAec {
            decode: NATIVE.symbol(&lib, "aec_buffer_decode", "libaec 1.0")?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static LibAec, String> {
    static LIB: OnceLock<Result<LibAec, String>> = OnceLock::new();
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
        // what HDF5 writes (and libaec takes): blocks of 8, 16, 32 or 64 pixels, samples
        // of 1 to 32 bits or 64 (taken as bytes), a scanline of one block to 128 blocks
        // (so that the padded copy of a chunk is at most about twice the chunk)
        if !matches!(block, 8 | 16 | 32 | 64)
            || !(matches!(bits, 1..=32) || bits == 64)
            || scanline < block
            || scanline > 128 * block
        {
            return Err(format!(
                "its szip parameters ({bits} bits a pixel, {block} pixels a block, \
                 {scanline} a scanline) are not ones HDF5 writes"
            ));
        }
        Ok(Szip {
            mask,
            bits,
            block,
            scanline,
        })
    }

    /// Whether 32- and 64-bit pixels are coded as byte planes of 8-bit samples.
    fn deinterleave(self) -> bool {
        matches!(self.bits, 32 | 64)
    }

    /// Bytes of a coded sample.
    fn pixel(self) -> usize {
        match if self.deinterleave() { 8 } else { self.bits } {
            17.. => 4,
            9..=16 => 2,
            _ => 1,
        }
    }

    /// Bytes the stream decodes to for a chunk of `n` bytes: `n`, or its scanlines
    /// padded to whole blocks.
    fn coded_bytes(self, n: usize) -> usize {
        let (line, block) = (self.scanline as usize, self.block as usize);
        if line.is_multiple_of(block) {
            n
        } else {
            let scanlines = (n / self.pixel()).div_ceil(line);
            line.div_ceil(block) * block * self.pixel() * scanlines
        }
    }

    /// Bytes a decode holds beside the output for a chunk of `n` bytes: the padded
    /// scanlines, or the byte planes of 32- and 64-bit pixels.
    pub(super) fn scratch_bytes(self, n: u64) -> u64 {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if !self.scanline.is_multiple_of(self.block) || self.deinterleave() {
            self.coded_bytes(n) as u64
        } else {
            0
        }
    }
}

/// Undoes the szip filter: decodes the stored chunk `data` into the front of `dest` and
/// returns the bytes decoded.
///
/// # Errors
/// A one-line reason: a header cut short or claiming more than `dest`, libaec missing,
/// a stream libaec cannot decode or that does not fill what the chunk's size makes.
pub(super) fn undo(p: Szip, data: &[u8], dest: &mut [u8]) -> Result<usize, String> {
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
    let word = p.bits as usize / 8;
    if p.deinterleave() && !n.is_multiple_of(word) {
        return Err(format!(
            "its szip header gives {n} bytes, not whole pixels of {word} bytes"
        ));
    }
    let lib = library()?;
    let padded = !p.scanline.is_multiple_of(p.block);
    let want = p.coded_bytes(n);
    let mut scratch = if padded || p.deinterleave() {
        vec![0u8; want]
    } else {
        Vec::new()
    };
    let out: &mut [u8] = if scratch.is_empty() {
        &mut dest[..n]
    } else {
        &mut scratch
    };
    let mut flags = 0;
    if p.mask & SZ_MSB_OPTION_MASK != 0 {
        flags |= AEC_DATA_MSB;
    }
    if p.mask & SZ_NN_OPTION_MASK != 0 {
        flags |= AEC_DATA_PREPROCESS;
    }
    let mut strm = AecStream {
        next_in: stream.as_ptr(),
        avail_in: stream.len(),
        total_in: 0,
        next_out: out.as_mut_ptr(),
        avail_out: out.len(),
        total_out: 0,
        bits_per_sample: if p.deinterleave() { 8 } else { p.bits },
        block_size: p.block,
        rsi: p.scanline.div_ceil(p.block),
        flags,
        state: std::ptr::null_mut(),
    };
    // SAFETY: `strm` points at `stream` (readable for `avail_in` bytes) and at `out`
    // (writable for `avail_out` bytes), both alive across the call; libaec reads and
    // writes within those counts, keeps its state in memory it frees before returning,
    // and keeps no pointer to either
    let r = unsafe { (lib.decode)(&raw mut strm) };
    if r != 0 {
        return Err(format!(
            "libaec could not decode its szip stream (error {r})"
        ));
    }
    if strm.total_out != want {
        return Err(format!(
            "its szip stream ends after {} of the {want} bytes its header makes",
            strm.total_out
        ));
    }
    if padded {
        // scanlines of `line` bytes, each followed by `pad` bytes of padding
        let line = p.scanline as usize * p.pixel();
        let stride = p.scanline.div_ceil(p.block) as usize * p.block as usize * p.pixel();
        let mut to = line;
        let mut from = stride;
        while from < want {
            scratch.copy_within(from..from + line, to);
            to += line;
            from += stride;
        }
    }
    if p.deinterleave() {
        let planes = n / word;
        for (i, e) in dest[..n].chunks_exact_mut(word).enumerate() {
            for (j, b) in e.iter_mut().enumerate() {
                *b = scratch[j * planes + i];
            }
        }
    } else if padded {
        dest[..n].copy_from_slice(&scratch[..n]);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_hdf5_does_not_write_are_refused_in_one_line() {
        for bad in [
            &[141, 8, 8][..],
            &[141, 7, 8, 64],
            &[141, 8, 40, 64],
            &[141, 8, 8, 0],
            &[141, 64, 8, 1],
            &[141, 8, 8, 8 * 128 + 1],
        ] {
            let e = Szip::from_params(bad).expect_err("refused");
            assert!(!e.contains('\n'), "{e}");
        }
        let p = Szip::from_params(&[141, 16, 32, 100]).expect("HDF5's own");
        // a scanline of 100 pixels in blocks of 16: 7 blocks a line, samples of 1 byte
        // (32-bit pixels are coded as byte planes)
        assert_eq!(p.scratch_bytes(4000), 7 * 16 * 40);
        let q = Szip::from_params(&[141, 16, 16, 64]).expect("whole blocks");
        assert_eq!(q.scratch_bytes(4000), 0);
    }

    #[test]
    fn headers_past_the_chunk_and_cut_short_are_refused_before_any_decoding() {
        let p = Szip::from_params(&[141, 8, 8, 64]).expect("valid");
        let w = Szip::from_params(&[141, 8, 32, 64]).expect("valid");
        let mut out = vec![0u8; 64];
        let mut long = 65u32.to_le_bytes().to_vec();
        long.extend([0u8; 16]);
        let mut odd = 10u32.to_le_bytes().to_vec();
        odd.extend([0u8; 16]);
        for (p, bad) in [(p, &long[..]), (p, &[1, 0]), (w, &odd)] {
            let e = undo(p, bad, &mut out).expect_err("refused");
            assert!(!e.contains('\n') && !e.contains("not installed"), "{e}");
        }
    }
}
