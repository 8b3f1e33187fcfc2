//! LZMA-compressed TIFF chunks (`Compression` 34925, GDAL's `COMPRESS=LZMA`), decoded by
//! liblzma, the library libtiff (and so GDAL) decodes them with. LZMA is lossless: any
//! correct decoder gives the same bytes, and liblzma is the reference one. It is loaded
//! at run time, as libwebp is, so building tilestream needs no C library; it is part of
//! XZ Utils, on every Linux system, and a file that needs it where it is missing is
//! refused in one line saying what to install.
//!
//! What libtiff writes (`tif_lzma.c`): each strip or tile is one `.xz` stream of the
//! chunk's decoded bytes, with no integrity check (check type none: damage is found only
//! where the LZMA2 stream stops making sense, as in libtiff), through a delta filter and
//! LZMA2 with the preset GDAL's `LZMA_PRESET` gives (6 by default: an 8 MiB dictionary;
//! 9: 64 MiB). The horizontal and floating-point predictors apply to it as to Deflate.
//!
//! The dictionary is the decoder's memory, and it is the stream's choice, not the
//! chunk's size: a 64 KiB tile written at preset 9 is decoded with a 64 MiB dictionary.
//! So the memory one decoding takes is read from the first chunk's block header when
//! the file is opened ([`memory_limit`]), counted in the plan for each decoding thread,
//! and given to liblzma as its memory limit: a chunk whose stream needs more is refused
//! in one line, never decoded past what was counted. A stream that decodes to more than
//! its chunk (a decompression bomb) is refused at the chunk's size.

use std::ffi::c_int;
use std::sync::OnceLock;

use crate::io::native::Native;

/// `lzma_stream_buffer_decode(memlimit, flags, allocator, in, in_pos, in_size, out,
/// out_pos, out_size)`: `LZMA_OK` once the whole stream is decoded.
type BufferDecodeFn = unsafe extern "C" fn(
    *mut u64,
    u32,
    *const std::ffi::c_void,
    *const u8,
    *mut usize,
    usize,
    *mut u8,
    *mut usize,
    usize,
) -> c_int;

/// liblzma's return codes (`lzma/base.h`) this decoder tells apart.
const LZMA_OK: c_int = 0;
const LZMA_MEM_ERROR: c_int = 5;
const LZMA_MEMLIMIT_ERROR: c_int = 6;
const LZMA_FORMAT_ERROR: c_int = 7;
const LZMA_OPTIONS_ERROR: c_int = 8;
const LZMA_DATA_ERROR: c_int = 9;
const LZMA_BUF_ERROR: c_int = 10;

/// What liblzma holds besides the dictionary while it decodes one stream: the LZMA
/// decoder's probabilities (at most 24 KiB for the `lc + lp <= 4` LZMA2 allows), the
/// stream, block and index decoders, and a filter before LZMA2 (delta: 256 bytes),
/// rounded up with room to spare: the tests decode GDAL's streams of each preset within it.
pub const DECODER_OVERHEAD: u64 = 128 << 10;

/// The xz stream's magic bytes.
const MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0];

/// The bytes of a chunk [`memory_limit`] reads: the stream header (12) and the largest
/// block header (1024).
pub const HEADER_BYTES: usize = 12 + 1024;

/// The liblzma function tilestream calls, from the library loaded once per process.
struct Lzma {
    decode: BufferDecodeFn,
    /// Keeps the library mapped while the pointer above lives (the process).
    _lib: libloading::Library,
}

/// liblzma.
const NATIVE: Native = Native {
    env: "TILESTREAM_LZMA",
    names: &[
        "liblzma.so.5",
        "liblzma.so",
        "liblzma.5.dylib",
        "liblzma.dylib",
    ],
    install: "LZMA-compressed TIFFs are decoded by liblzma (the decoder GDAL uses, from \
              XZ Utils), which is not installed: install it (Debian and Ubuntu: apt-get \
              install liblzma5; macOS: brew install xz) or set TILESTREAM_LZMA to its \
              path, or convert the file with gdal_translate -co COMPRESS=DEFLATE first",
};

fn load() -> Result<Lzma, String> {
    let lib = NATIVE.load()?;
    // SAFETY: the symbol is taken with the signature `lzma/container.h` gives it
    // (`uint64_t *memlimit, uint32_t flags, const lzma_allocator *allocator, const
    // uint8_t *in, size_t *in_pos, size_t in_size, uint8_t *out, size_t *out_pos, size_t
    // out_size`, returning the `lzma_ret` enum, an int), stable since liblzma 5.0. The
    // pointer is kept beside the library, never unloaded.
    unsafe {
        Ok(Lzma {
            decode: NATIVE.symbol(&lib, "lzma_stream_buffer_decode", "liblzma 5.0")?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static Lzma, String> {
    static LIB: OnceLock<Result<Lzma, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Reads a multibyte integer of the xz format (7 bits a byte, least significant first,
/// at most 9 bytes) at `*at`.
fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..9 {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The memory liblzma needs to decode the `.xz` stream that starts with `head` (at least
/// its first [`HEADER_BYTES`], or the whole stream when shorter): the LZMA2 dictionary
/// its first block declares plus [`DECODER_OVERHEAD`]. `Ok(DECODER_OVERHEAD)` for a
/// stream with no block (an empty chunk).
///
/// # Errors
/// One line saying why `head` is not the start of an `.xz` stream tilestream reads.
pub fn memory_limit(head: &[u8]) -> Result<u64, String> {
    if head.len() < 13 || head[..6] != MAGIC {
        return Err("the chunk is not an .xz stream (LZMA as libtiff writes it)".into());
    }
    // the stream header (magic, flags, CRC32), then the first block's header, or 0: the
    // index of a stream with no block
    let size = usize::from(head[12]);
    if size == 0 {
        return Ok(DECODER_OVERHEAD);
    }
    let block = head
        .get(12..12 + (size + 1) * 4)
        .ok_or("the chunk's .xz block header is truncated")?;
    let flags = block[1];
    let mut at = 2;
    if flags & 0x40 != 0 {
        varint(block, &mut at).ok_or("the chunk's .xz block header is damaged")?;
    }
    if flags & 0x80 != 0 {
        varint(block, &mut at).ok_or("the chunk's .xz block header is damaged")?;
    }
    let mut dict = 0u64;
    for _ in 0..=(flags & 3) {
        let id = varint(block, &mut at).ok_or("the chunk's .xz filter flags are damaged")?;
        let n = varint(block, &mut at).ok_or("the chunk's .xz filter flags are damaged")?;
        let props = usize::try_from(n)
            .ok()
            .and_then(|n| block.get(at..at.checked_add(n)?))
            .ok_or("the chunk's .xz filter flags are damaged")?;
        at += props.len();
        // LZMA2 (0x21): one byte, the dictionary size as 2 or 3 times a power of two
        if id == 0x21 {
            let code = *props.first().ok_or("the chunk's LZMA2 options are empty")? & 0x3F;
            dict = dict.max(match code {
                0..40 => u64::from(2 | (code & 1)) << (code / 2 + 11),
                40 => u64::from(u32::MAX),
                _ => {
                    return Err(format!(
                        "the chunk's LZMA2 dictionary code {code} is not valid"
                    ));
                }
            });
        }
    }
    Ok(dict + DECODER_OVERHEAD)
}

/// Decodes one chunk's `.xz` stream `stored` into `out`, which it must fill exactly,
/// within `memlimit` bytes of liblzma's memory.
///
/// # Errors
/// One line saying why the chunk is refused: the library missing, a stream that is not
/// `.xz`, that liblzma finds damaged or truncated, that decodes to more or fewer bytes
/// than the chunk holds, or that needs more memory than `memlimit`.
pub fn decode(stored: &[u8], out: &mut [u8], memlimit: u64) -> Result<(), String> {
    let lib = library()?;
    let (mut limit, mut in_pos, mut out_pos) = (memlimit, 0usize, 0usize);
    // SAFETY: liblzma reads `stored` within its length and writes at most `out.len()`
    // bytes at `out` (`out_size`), advancing the positions it is given pointers to; the
    // allocator is the default (null); flags 0 ask for one stream, its integrity check
    // verified.
    let ret = unsafe {
        (lib.decode)(
            &raw mut limit,
            0,
            std::ptr::null(),
            stored.as_ptr(),
            &raw mut in_pos,
            stored.len(),
            out.as_mut_ptr(),
            &raw mut out_pos,
            out.len(),
        )
    };
    match ret {
        LZMA_OK if out_pos == out.len() => Ok(()),
        LZMA_OK => Err(format!(
            "the chunk decodes to {out_pos} bytes where it holds {}",
            out.len()
        )),
        LZMA_MEMLIMIT_ERROR => Err(format!(
            "the chunk's LZMA stream needs {} MiB to decode, more than the {} MiB its \
             file's first chunk declared and the plan counted (its dictionary differs)",
            limit.div_ceil(1 << 20),
            memlimit.div_ceil(1 << 20)
        )),
        // the output is full while the stream goes on (or its end is missing), or the
        // stream ends early
        LZMA_BUF_ERROR if out_pos == out.len() => Err(format!(
            "the chunk's LZMA stream does not end after the {} bytes the chunk holds",
            out.len()
        )),
        LZMA_BUF_ERROR => Err(format!(
            "the chunk's LZMA stream is truncated ({out_pos} of {} bytes decoded)",
            out.len()
        )),
        LZMA_FORMAT_ERROR => Err("the chunk is not an .xz stream".into()),
        LZMA_OPTIONS_ERROR => {
            Err("the chunk's .xz stream uses options liblzma does not support".into())
        }
        LZMA_DATA_ERROR => Err("the chunk's LZMA stream is damaged".into()),
        LZMA_MEM_ERROR => Err("liblzma could not allocate its memory".into()),
        r => Err(format!("liblzma could not decode the chunk (error {r})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `.xz` stream header (no check) and one block header of LZMA2 with `code`.
    fn header(code: u8) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        // block header: 12 bytes (size byte 2), one filter, no sizes; LZMA2, 1 byte
        h.extend_from_slice(&[2, 0, 0x21, 1, code, 0, 0, 0, 0, 0, 0, 0]);
        h
    }

    #[test]
    fn the_dictionary_is_read_from_the_first_block_header() {
        // xz's presets: 6 is an 8 MiB dictionary (code 22), 9 is 64 MiB (code 28), 0 is
        // 256 KiB (code 12), as GDAL's streams say (the corpus of the lzma_chunk fuzz
        // target); odd codes are 3 times a power of two
        assert_eq!(memory_limit(&header(22)), Ok((8 << 20) + DECODER_OVERHEAD));
        assert_eq!(memory_limit(&header(28)), Ok((64 << 20) + DECODER_OVERHEAD));
        assert_eq!(
            memory_limit(&header(12)),
            Ok((256 << 10) + DECODER_OVERHEAD)
        );
        assert_eq!(memory_limit(&header(23)), Ok((12 << 20) + DECODER_OVERHEAD));
        assert_eq!(
            memory_limit(&header(40)),
            Ok(u64::from(u32::MAX) + DECODER_OVERHEAD)
        );
        let e = memory_limit(&header(41)).expect_err("code 41");
        assert!(e.contains("41") && !e.contains('\n'), "{e}");
        // a stream with no block: its index follows the stream header
        let mut empty = MAGIC.to_vec();
        empty.extend_from_slice(&[0; 7]);
        assert_eq!(memory_limit(&empty), Ok(DECODER_OVERHEAD));
    }

    #[test]
    fn what_is_not_an_xz_header_is_refused_in_one_line() {
        for bad in [
            &b""[..],
            b"\x1f\x8b\x08\0\0\0\0\0\0\0\0\0\0",
            &header(18)[..14],
        ] {
            let e = memory_limit(bad).expect_err("not a header");
            assert!(!e.contains('\n') && e.contains("xz"), "{e}");
        }
        // a filter whose properties run past the block header
        let mut h = header(18);
        h[15] = 200;
        assert!(memory_limit(&h).is_err());
    }
}
