//! WebP-compressed TIFF chunks (`Compression` 50001), decoded by libwebp exactly as
//! libtiff (and so GDAL) decodes them: lossy WebP has only one exact reading, the one
//! its reference decoder gives. libwebp is loaded at run time, as libjpeg-turbo is, so
//! building tilestream needs no C library; a file that needs it where it is missing is
//! refused in one line saying what to install.
//!
//! What libtiff does (`tif_webp.c`), and so what is done here: each strip or tile is one
//! WebP image of the chunk's size (a last strip of the rows left), 8-bit samples, three
//! a pixel (RGB) or four (RGBA, not premultiplied), pixel-interleaved; it is decoded with
//! libwebp's default options (fancy upsampling, the in-loop filter) into RGB or RGBA
//! rows of the chunk's width. libtiff's incremental decoder and `WebPDecodeRGBInto` /
//! `WebPDecodeRGBAInto` run the same decoder core with the same defaults, which the
//! tests check against GDAL. A stream of another size than its chunk is refused, where
//! libtiff fails too.

use std::ffi::c_int;
use std::sync::OnceLock;

use crate::io::native::Native;

/// `WebPGetInfo(data, size, &width, &height)`: nonzero when the header is valid.
type InfoFn = unsafe extern "C" fn(*const u8, usize, *mut c_int, *mut c_int) -> c_int;
/// `WebPDecodeRGBInto(data, size, out, out_size, stride)` (and `...RGBAInto`): `out` on
/// success, null on failure.
type IntoFn = unsafe extern "C" fn(*const u8, usize, *mut u8, usize, c_int) -> *mut u8;

/// The libwebp functions tilestream calls, from the library loaded once per process.
struct WebP {
    info: InfoFn,
    rgb: IntoFn,
    rgba: IntoFn,
    /// Keeps the library mapped while the pointers above live (the process).
    _lib: libloading::Library,
}

/// libwebp.
const NATIVE: Native = Native {
    env: "TILESTREAM_WEBP",
    names: &[
        "libwebp.so.7",
        "libwebp.so",
        "libwebp.7.dylib",
        "libwebp.dylib",
    ],
    install: "WebP-compressed TIFFs are decoded by libwebp (the decoder GDAL uses), which \
              is not installed: install it (Debian and Ubuntu: apt-get install libwebp7; \
              macOS: brew install webp) or set TILESTREAM_WEBP to its path, or convert \
              the file with gdal_translate -co COMPRESS=DEFLATE first",
};

fn load() -> Result<WebP, String> {
    let lib = NATIVE.load()?;
    let v = "libwebp 0.5";
    // SAFETY: each symbol is taken with the signature `webp/decode.h` gives it; these
    // three are plain exported functions (not the ABI-versioned inline wrappers), stable
    // since libwebp 0.5. The pointers are kept beside the library, never unloaded.
    unsafe {
        Ok(WebP {
            info: NATIVE.symbol(&lib, "WebPGetInfo", v)?,
            rgb: NATIVE.symbol(&lib, "WebPDecodeRGBInto", v)?,
            rgba: NATIVE.symbol(&lib, "WebPDecodeRGBAInto", v)?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static WebP, String> {
    static LIB: OnceLock<Result<WebP, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Decodes one chunk's WebP stream `stored` into `out`: `rows` rows of `width` pixels of
/// `spp` (3 or 4) interleaved 8-bit samples, `out` holding exactly that.
///
/// # Errors
/// One line saying why the chunk is refused: the library missing, a stream that is not
/// a WebP image of the chunk's size, or one libwebp cannot decode.
pub fn decode(
    stored: &[u8],
    width: usize,
    rows: usize,
    spp: usize,
    out: &mut [u8],
) -> Result<(), String> {
    let lib = library()?;
    let stride = width * spp;
    if !matches!(spp, 3 | 4) || out.len() != stride * rows {
        return Err(format!(
            "a WebP chunk of {width} x {rows} pixels of {spp} samples does not fit {} bytes",
            out.len()
        ));
    }
    let (mut w, mut h) = (0, 0);
    // SAFETY: `stored` is a valid slice for its length; w and h are valid out-pointers.
    let valid = unsafe { (lib.info)(stored.as_ptr(), stored.len(), &raw mut w, &raw mut h) };
    if valid == 0 {
        return Err("the chunk is not a WebP image".into());
    }
    if usize::try_from(w).ok() != Some(width) || usize::try_from(h).ok() != Some(rows) {
        return Err(format!(
            "the chunk's WebP image is {w} x {h} pixels where the chunk is {width} x {rows}"
        ));
    }
    let into = if spp == 4 { lib.rgba } else { lib.rgb };
    let stride = c_int::try_from(stride).map_err(|_| "the chunk is too wide".to_string())?;
    // SAFETY: libwebp writes at most `out.len()` bytes at `out` (it checks the size and
    // stride against the image before writing: h rows of `stride` bytes, which is
    // `out.len()` here); `stored` is read within its length.
    let got = unsafe {
        into(
            stored.as_ptr(),
            stored.len(),
            out.as_mut_ptr(),
            out.len(),
            stride,
        )
    };
    if got.is_null() {
        return Err("libwebp could not decode the chunk's WebP image".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_webp_is_refused_in_one_line() {
        let mut out = vec![0u8; 3 * 4 * 2];
        let Err(e) = decode(b"RIFF\0\0\0\0WEBPVP8 ", 4, 2, 3, &mut out) else {
            panic!("a truncated header decoded")
        };
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.contains("not a WebP image") || e.contains("libwebp"),
            "{e}"
        );
        let e = decode(b"", 4, 2, 5, &mut out).expect_err("five samples");
        assert!(e.contains("5 samples") || e.contains("libwebp"), "{e}");
    }
}
