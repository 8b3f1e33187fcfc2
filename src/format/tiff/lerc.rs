//! LERC-compressed TIFF chunks (`Compression` 34887), decoded by Esri's LERC library
//! exactly as libtiff (and so GDAL) decodes them: LERC is lossy within a bound the
//! writer chose, so the only exact reading is the one the same decoder gives. The
//! library is loaded at run time (`libLerc`, its C interface, version 4), as
//! libjpeg-turbo is; a file that needs it where it is missing is refused in one line.
//!
//! What libtiff 4.5 (GDAL 3.6 to 3.8) does (`tif_lerc.c`), and so what is done here:
//! - the `LercParameters` tag (50674) gives the LERC version and an additional
//!   compression of the blob: none, Deflate (zlib) or Zstandard, undone first into a
//!   buffer of `100 + n + n/3` bytes for a chunk of `n` (more is refused);
//! - each strip or tile is one LERC blob of the chunk's size (a last strip of the rows
//!   left), pixel-interleaved samples as `nDim` values a pixel (one for a band-planar
//!   file), whose type, size, depth, one band and byte count are checked against the
//!   chunk's;
//! - pixels the blob's mask marks invalid: NaN for floats of one sample a pixel (or
//!   band-planar), zero for integers; an 8-bit image whose last extra sample is
//!   unassociated alpha may store that alpha as the mask (`nDim` one less), read as 255
//!   where valid and 0 where not;
//! - floats of several interleaved samples with invalid pixels read as 0 in libtiff 4.5
//!   and NaN in 4.7 (GDAL 3.9 on): they are refused here rather than read as one of the
//!   two;
//! - values come out in the file's byte order (libtiff swaps a big-endian file's values
//!   before coding them and after decoding), swapped in the read stage as for the other
//!   codecs; the NaN of an invalid pixel, written in the machine's order before that
//!   swap, reads as another value in GDAL: such chunks are refused.

use std::ffi::{c_int, c_uint};
use std::sync::OnceLock;

use crate::dtype::DType;
use crate::io::native::Native;

/// `lerc_getBlobInfo(blob, size, info, ranges, info_size, ranges_size)`: 0 when it
/// succeeds.
type InfoFn =
    unsafe extern "C" fn(*const u8, c_uint, *mut c_uint, *mut f64, c_int, c_int) -> c_uint;
/// `lerc_decode(blob, size, n_masks, valid, n_dim, cols, rows, bands, data_type, data)`
/// (LERC 3 and later): 0 when it succeeds.
type DecodeFn = unsafe extern "C" fn(
    *const u8,
    c_uint,
    c_int,
    *mut u8,
    c_int,
    c_int,
    c_int,
    c_int,
    c_uint,
    *mut u8,
) -> c_uint;

/// The LERC functions tilestream calls, from the library loaded once per process.
struct Lerc {
    info: InfoFn,
    decode: DecodeFn,
    /// Keeps the library mapped while the pointers above live (the process).
    _lib: libloading::Library,
}

/// The LERC library.
const NATIVE: Native = Native {
    env: "TILESTREAM_LERC",
    names: &[
        "libLerc.so.4",
        "libLerc.so",
        "libLerc.4.dylib",
        "libLerc.dylib",
    ],
    install: "LERC-compressed TIFFs are decoded by Esri's LERC library (the decoder GDAL \
              uses), version 4, which is not installed: install it (Debian and Ubuntu: \
              apt-get install liblerc4; macOS: brew install lerc) or set TILESTREAM_LERC \
              to its path, or convert the file with gdal_translate -co COMPRESS=DEFLATE \
              first",
};

fn load() -> Result<Lerc, String> {
    let lib = NATIVE.load()?;
    let v = "LERC 4.0";
    // SAFETY: `lerc_decode_4D` exists from LERC 4.0 on, whose `lerc_getBlobInfo` and
    // `lerc_decode` have the signatures above (`Lerc_c_api.h`); an older library (whose
    // `lerc_decode` lacks the mask count) is refused by its absence before either is
    // taken. The pointers are kept beside the library, never unloaded.
    unsafe {
        NATIVE.symbol::<DecodeFn>(&lib, "lerc_decode_4D", v)?;
        Ok(Lerc {
            info: NATIVE.symbol(&lib, "lerc_getBlobInfo", v)?,
            decode: NATIVE.symbol(&lib, "lerc_decode", v)?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static Lerc, String> {
    static LIB: OnceLock<Result<Lerc, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The compression of a blob on top of LERC's own (`LercParameters`' second value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extra {
    /// 0: the blob as stored.
    None,
    /// 1: Deflate with a zlib header.
    Deflate,
    /// 2: Zstandard.
    Zstd,
}

impl Extra {
    /// The additional compression of a `LercParameters` value, or `None` for one libtiff
    /// does not know either.
    #[must_use]
    pub fn from_code(code: u32) -> Option<Extra> {
        match code {
            0 => Some(Extra::None),
            1 => Some(Extra::Deflate),
            2 => Some(Extra::Zstd),
            _ => None,
        }
    }
}

/// How a file's chunks are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LercTags {
    /// The additional compression.
    pub extra: Extra,
    /// An 8-bit pixel-interleaved image whose last extra sample is unassociated alpha:
    /// its blobs may carry that alpha as their mask.
    pub alpha_mask: bool,
    /// A big-endian file: its values come out of LERC in the file's byte order (libtiff
    /// swaps them before coding and after decoding).
    pub big_endian: bool,
}

/// LERC's data type code of `dtype`, if LERC stores it.
#[must_use]
pub fn data_type(dtype: DType) -> Option<c_uint> {
    Some(match dtype {
        DType::I8 => 0,
        DType::U8 => 1,
        DType::I16 => 2,
        DType::U16 => 3,
        DType::I32 => 4,
        DType::U32 => 5,
        DType::F32 => 6,
        DType::F64 => 7,
        _ => return None,
    })
}

/// The largest blob libtiff accepts for a chunk of `need` decoded bytes.
#[must_use]
pub fn blob_limit(need: usize) -> usize {
    100 + need + need / 3
}

thread_local! {
    /// The blob once its additional compression is undone, and the valid-pixel mask.
    static WORK: std::cell::RefCell<(Vec<u8>, Vec<u8>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// One chunk to decode.
#[derive(Clone, Copy, Debug)]
pub struct Chunk<'a> {
    /// The chunk's stored bytes.
    pub stored: &'a [u8],
    /// The file's LERC parameters.
    pub tags: LercTags,
    /// The samples' type.
    pub dtype: DType,
    /// Width of the chunk in pixels (a tile's, or the image's for a strip).
    pub width: usize,
    /// Rows the chunk holds.
    pub rows: usize,
    /// Samples a pixel in the chunk (1 for a band-planar file).
    pub spp: usize,
}

/// Decodes `chunk` into `out`, which holds exactly its pixel-interleaved samples, in
/// the file's byte order as the other codecs leave them.
///
/// # Errors
/// One line saying why the chunk is refused: the library missing, a blob that does not
/// decompress within its bound, or is not a LERC blob of the chunk's type and size.
pub fn decode(chunk: &Chunk<'_>, out: &mut [u8]) -> Result<(), String> {
    let lib = library()?;
    let es = chunk.dtype.size();
    let pixels = chunk.width * chunk.rows;
    if out.len() != pixels * chunk.spp * es {
        return Err(format!(
            "the chunk's buffer holds {} bytes where {} are needed",
            out.len(),
            pixels * chunk.spp * es
        ));
    }
    let dt = data_type(chunk.dtype)
        .ok_or_else(|| format!("LERC does not store {} samples", chunk.dtype))?;
    WORK.with_borrow_mut(|(inflated, mask)| {
        let blob: &[u8] = match chunk.tags.extra {
            Extra::None => chunk.stored,
            Extra::Deflate | Extra::Zstd => {
                inflated.resize(blob_limit(out.len()), 0);
                let n = undo_extra(chunk.tags.extra, chunk.stored, inflated)?;
                &inflated[..n]
            }
        };
        let size =
            c_uint::try_from(blob.len()).map_err(|_| "the LERC blob is too large".to_string())?;
        let mut info = [0 as c_uint; 11];
        // SAFETY: `blob` is valid for `size` bytes; `info` holds the 11 values asked for
        // (LERC 4's); no data ranges are asked for (null, 0).
        let status = unsafe {
            (lib.info)(
                blob.as_ptr(),
                size,
                info.as_mut_ptr(),
                std::ptr::null_mut(),
                11,
                0,
            )
        };
        if status != 0 {
            return Err(format!(
                "the chunk is not a LERC blob (LERC error {status})"
            ));
        }
        let [
            _,
            blob_dt,
            n_dim,
            cols,
            rows,
            bands,
            valid,
            blob_size,
            n_masks,
            ..,
        ] = info;
        let spp = chunk.spp;
        let alpha = chunk.tags.alpha_mask && spp > 1 && n_dim as usize == spp - 1;
        let want_dim = if alpha { spp - 1 } else { spp };
        if blob_dt != dt
            || n_dim as usize != want_dim
            || cols as usize != chunk.width
            || rows as usize != chunk.rows
            || bands != 1
            || blob_size != size
        {
            return Err(format!(
                "the chunk's LERC blob holds {bands} band(s) of {cols} x {rows} pixels of \
                 {n_dim} value(s) of type {blob_dt} in {blob_size} bytes, where the chunk \
                 is {} x {} pixels of {want_dim} of type {dt} in {size} bytes",
                chunk.width, chunk.rows
            ));
        }
        if n_masks > 1 {
            return Err(format!(
                "the chunk's LERC blob has {n_masks} masks where libtiff reads one"
            ));
        }
        let float = matches!(chunk.dtype, DType::F32 | DType::F64);
        let all_valid = valid as usize == pixels;
        if float && spp > 1 && !all_valid {
            return Err(format!(
                "the chunk's LERC blob marks {} pixels of {spp} interleaved floats invalid, \
                 which libtiff reads as 0 before 4.7 and as NaN from 4.7 (GDAL 3.9): \
                 convert it with gdal_translate -co INTERLEAVE=BAND first",
                pixels - valid as usize
            ));
        }
        if float && big_endian_invalid(chunk.tags.big_endian, all_valid) {
            return Err(format!(
                "the chunk's LERC blob marks {} pixels invalid in a big-endian file, whose \
                 NaN libtiff 4.5 byte-swaps into another value: convert it with \
                 gdal_translate -co ENDIANNESS=LITTLE first",
                pixels - valid as usize
            ));
        }
        // the mask is asked for where libtiff asks for it: one-sample floats and alpha
        let use_mask = alpha || (float && spp == 1);
        if use_mask {
            mask.resize(pixels, 0);
        }
        let dims = |v: usize| c_int::try_from(v).map_err(|_| "the chunk is too large".to_string());
        let data_bytes = pixels * want_dim * es;
        // SAFETY: LERC writes `n_dim * cols * rows` values of the blob's type (checked
        // above to be the chunk's: `data_bytes` <= `out.len()`) at `out`, and
        // `cols * rows` mask bytes when one mask is asked for (`mask` has that length).
        let status = unsafe {
            (lib.decode)(
                blob.as_ptr(),
                size,
                c_int::from(use_mask),
                if use_mask {
                    mask.as_mut_ptr()
                } else {
                    std::ptr::null_mut()
                },
                dims(want_dim)?,
                dims(chunk.width)?,
                dims(chunk.rows)?,
                1,
                dt,
                out[..data_bytes].as_mut_ptr(),
            )
        };
        if status != 0 {
            return Err(format!(
                "LERC could not decode the chunk (LERC error {status})"
            ));
        }
        if alpha {
            add_alpha(out, mask, spp);
        } else if float && use_mask && !all_valid {
            nan_where_invalid(out, mask, es);
        }
        Ok(())
    })
}

/// Whether a float chunk's invalid pixels would read as libtiff's swapped NaN.
fn big_endian_invalid(big_endian: bool, all_valid: bool) -> bool {
    big_endian && !all_valid && cfg!(target_endian = "little")
}

/// Undoes the additional compression of `stored` into `buf`, which is as long as the
/// largest blob accepted; returns the blob's length.
fn undo_extra(extra: Extra, stored: &[u8], buf: &mut [u8]) -> Result<usize, String> {
    match extra {
        Extra::None => {
            let n = stored.len();
            buf.get_mut(..n)
                .ok_or_else(|| "the LERC blob is larger than its chunk allows".to_string())?
                .copy_from_slice(stored);
            Ok(n)
        }
        Extra::Deflate => libdeflater::Decompressor::new()
            .zlib_decompress(stored, buf)
            .map_err(|e| match e {
                libdeflater::DecompressionError::InsufficientSpace => {
                    "the chunk's Deflate stream inflates past the largest LERC blob its chunk allows"
                        .to_string()
                }
                libdeflater::DecompressionError::BadData => {
                    "the chunk's Deflate stream is damaged".to_string()
                }
            }),
        Extra::Zstd => zstd::bulk::Decompressor::new()
            .and_then(|mut d| d.decompress_to_buffer(stored, buf))
            .map_err(|e| format!("the chunk's Zstandard stream does not decode within the largest LERC blob its chunk allows: {e}")),
    }
}

/// Spreads the `spp - 1` decoded samples of each pixel (at the start of `out`) to their
/// places and writes the alpha sample from the mask (255 valid, 0 invalid), from the
/// last pixel back, as libtiff does.
fn add_alpha(out: &mut [u8], mask: &[u8], spp: usize) {
    let colour = spp - 1;
    for i in (0..mask.len()).rev() {
        out.copy_within(i * colour..(i + 1) * colour, i * spp);
        out[i * spp + colour] = if mask[i] == 0 { 0 } else { 255 };
    }
}

/// Writes NaN (the quiet NaN libtiff writes: `0x7fc00000`, widened for f64) over every
/// sample whose pixel the mask marks invalid (one sample a pixel).
fn nan_where_invalid(out: &mut [u8], mask: &[u8], es: usize) {
    let nan: &[u8] = if es == 4 {
        &0x7fc0_0000_u32.to_ne_bytes()
    } else {
        &0x7ff8_0000_0000_0000_u64.to_ne_bytes()
    };
    for (v, &m) in out.chunks_exact_mut(es).zip(mask) {
        if m == 0 {
            v.copy_from_slice(nan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_is_spread_from_the_last_pixel_back() {
        // three pixels of RGB decoded at the start, then room for their alpha
        let mut out = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0];
        add_alpha(&mut out, &[1, 0, 1], 4);
        assert_eq!(out, [1, 2, 3, 255, 4, 5, 6, 0, 7, 8, 9, 255]);
    }

    #[test]
    fn invalid_floats_become_libtiffs_nan() {
        let mut out: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|v| v.to_ne_bytes()).collect();
        nan_where_invalid(&mut out, &[0, 1], 4);
        assert_eq!(&out[..4], &0x7fc0_0000_u32.to_ne_bytes());
        assert_eq!(&out[4..], &2.5f32.to_ne_bytes());
    }

    #[test]
    fn a_bomb_stops_at_the_blob_bound() {
        let big = vec![0u8; 1 << 20];
        let z = {
            use std::io::Write;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(&big).expect("deflate");
            e.finish().expect("deflate")
        };
        let mut buf = vec![0u8; blob_limit(1000)];
        let e = undo_extra(Extra::Deflate, &z, &mut buf).expect_err("a bomb inflated");
        assert!(e.contains("inflates past"), "{e}");
        let z = zstd::bulk::compress(&big, 3).expect("zstd");
        let e = undo_extra(Extra::Zstd, &z, &mut buf).expect_err("a bomb inflated");
        assert!(e.contains("Zstandard"), "{e}");
    }
}
