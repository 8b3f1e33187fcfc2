//! JPEG-compressed TIFF chunks (`Compression` 7), decoded by libjpeg-turbo exactly as
//! libtiff (and so GDAL) decodes them: JPEG is lossy, so the only exact reading is the
//! one the same decoder gives. libjpeg-turbo is loaded at run time (`libturbojpeg`, its
//! `TurboJPEG` interface) so that building tilestream needs no C library; a file that
//! needs it where it is missing is refused in one line saying what to install.
//!
//! What libtiff does, and so what is done here:
//! - the `JPEGTables` tag's quantisation and Huffman tables are read before each
//!   chunk's abbreviated stream: here the two are spliced into one stream (the tables'
//!   end-of-image marker and the chunk's start-of-image marker dropped);
//! - a YCbCr image is converted to RGB by libjpeg (GDAL sets `JPEGCOLORMODE_RGB`):
//!   here `tjDecompress2` to RGB, the same conversion and the same upsampling;
//! - any other image is taken without colour conversion (`JCS_UNKNOWN`): here one
//!   component through `tjDecompress2` to grey, three through
//!   `tjDecompressToYUVPlanes` (the raw components, no conversion), four through
//!   `tjDecompress2` to CMYK when libjpeg sees them as CMYK (no conversion either);
//! - a stream whose size is not the chunk's is refused, but for the last strip of an
//!   image coded at the full strip height, which libtiff accepts and crops.
//!
//! Any warning from libjpeg (a damaged stream that libtiff would decode with gaps) is a
//! refusal: no value is given that GDAL might not give.

use std::ffi::{CStr, c_char, c_int, c_uchar, c_ulong, c_void};
use std::sync::OnceLock;

use crate::io::native::Native;

/// `tjhandle`.
type Handle = *mut c_void;

/// `TurboJPEG` pixel formats used here.
const TJPF_RGB: c_int = 0;
const TJPF_GRAY: c_int = 6;
const TJPF_CMYK: c_int = 11;
/// `TJFLAG_STOPONWARNING`: stop at the first warning (a damaged stream) instead of
/// decoding the rest around it.
const TJFLAG_STOPONWARNING: c_int = 8192;
/// `TJFLAG_LIMITSCANS`: refuse a progressive stream of more than 500 scans (a known
/// denial-of-service shape; no real image has that many).
const TJFLAG_LIMITSCANS: c_int = 32768;
const FLAGS: c_int = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
/// `TurboJPEG` colour spaces (`TJCS_*`).
const TJCS_YCBCR: c_int = 1;
const TJCS_GRAY: c_int = 2;
const TJCS_CMYK: c_int = 3;

type InitFn = unsafe extern "C" fn() -> Handle;
type DestroyFn = unsafe extern "C" fn(Handle) -> c_int;
type ErrorFn = unsafe extern "C" fn(Handle) -> *mut c_char;
/// `tjDecompressHeader3(handle, buf, size, &width, &height, &subsamp, &colorspace)`.
type HeaderFn = unsafe extern "C" fn(
    Handle,
    *const c_uchar,
    c_ulong,
    *mut c_int,
    *mut c_int,
    *mut c_int,
    *mut c_int,
) -> c_int;
/// `tjDecompress2(handle, buf, size, dst, width, pitch, height, format, flags)`.
type DecompressFn = unsafe extern "C" fn(
    Handle,
    *const c_uchar,
    c_ulong,
    *mut c_uchar,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
) -> c_int;
/// `tjDecompressToYUVPlanes(handle, buf, size, planes, width, strides, height, flags)`.
type PlanesFn = unsafe extern "C" fn(
    Handle,
    *const c_uchar,
    c_ulong,
    *mut *mut c_uchar,
    c_int,
    *mut c_int,
    c_int,
    c_int,
) -> c_int;

/// The `TurboJPEG` functions tilestream calls, from the library loaded once per process.
struct TurboJpeg {
    init: InitFn,
    destroy: DestroyFn,
    error: ErrorFn,
    header: HeaderFn,
    decompress: DecompressFn,
    planes: PlanesFn,
    /// Keeps the library mapped for as long as the function pointers above live (the
    /// whole process: this struct is in a `static`).
    _lib: libloading::Library,
}

/// libjpeg-turbo's `TurboJPEG` library.
const NATIVE: Native = Native {
    env: "TILESTREAM_TURBOJPEG",
    names: &[
        "libturbojpeg.so.0",
        "libturbojpeg.so",
        "libturbojpeg.0.dylib",
        "libturbojpeg.dylib",
    ],
    install: "JPEG-compressed TIFFs are decoded by libjpeg-turbo's TurboJPEG library \
              (the decoder GDAL uses), which is not installed: install it (Debian and \
              Ubuntu: apt-get install libturbojpeg0; macOS: brew install jpeg-turbo) \
              or set TILESTREAM_TURBOJPEG to its path, or convert the file with \
              gdal_translate -co COMPRESS=DEFLATE first",
};

fn load() -> Result<TurboJpeg, String> {
    let lib = NATIVE.load()?;
    let v = "version 2.0";
    // SAFETY: each symbol is taken with the signature `turbojpeg.h` gives it (TurboJPEG
    // 2.0 and later, whose ABI keeps these functions unchanged); the pointers are kept
    // beside the library, which is never unloaded.
    unsafe {
        Ok(TurboJpeg {
            init: NATIVE.symbol(&lib, "tjInitDecompress", v)?,
            destroy: NATIVE.symbol(&lib, "tjDestroy", v)?,
            error: NATIVE.symbol(&lib, "tjGetErrorStr2", v)?,
            header: NATIVE.symbol(&lib, "tjDecompressHeader3", v)?,
            decompress: NATIVE.symbol(&lib, "tjDecompress2", v)?,
            planes: NATIVE.symbol(&lib, "tjDecompressToYUVPlanes", v)?,
            _lib: lib,
        })
    }
}

fn library() -> Result<&'static TurboJpeg, String> {
    static LIB: OnceLock<Result<TurboJpeg, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// One decompressor a thread, destroyed when the thread ends (a `TurboJPEG` handle must not
/// be used by two threads at once).
struct ThreadHandle(Handle);

impl Drop for ThreadHandle {
    fn drop(&mut self) {
        if let Ok(lib) = library()
            && !self.0.is_null()
        {
            // SAFETY: the handle came from tjInitDecompress and is destroyed once, here.
            unsafe { (lib.destroy)(self.0) };
        }
    }
}

thread_local! {
    static HANDLE: std::cell::RefCell<Option<ThreadHandle>> = const { std::cell::RefCell::new(None) };
    /// The tables and the chunk's stream spliced into one.
    static SPLICE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The pixel-interleaved decoded rows of a colour-converted or four-component chunk.
    static INTERLEAVED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How a chunk's components are taken out of its JPEG stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// One component (a grey image, or one band of a planar file).
    Gray,
    /// YCbCr converted to RGB by libjpeg, as with libtiff's `JPEGCOLORMODE_RGB`.
    YcbcrToRgb,
    /// Three components as stored, without colour conversion.
    Raw3,
    /// Four components as stored (RGB with an extra sample).
    Raw4,
}

impl Output {
    /// Components a pixel.
    #[must_use]
    pub fn components(self) -> usize {
        match self {
            Output::Gray => 1,
            Output::YcbcrToRgb | Output::Raw3 => 3,
            Output::Raw4 => 4,
        }
    }
}

/// What a JPEG-compressed TIFF's chunks need besides their bytes, read once from its
/// tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JpegTags {
    /// The `JPEGTables` tag, if the file has one.
    pub tables: Option<Vec<u8>>,
    /// How a chunk's components are taken.
    pub output: Output,
    /// The `YCbCrSubsampling` tag of a YCbCr image, if present.
    pub subsampling: Option<(u16, u16)>,
}

/// Most bytes of a `JPEGTables` tag (four quantisation and four Huffman tables take
/// about 2.3 KiB).
pub const MAX_TABLES: usize = 1 << 16;

/// One chunk to decode.
#[derive(Clone, Copy, Debug)]
pub struct Chunk<'a> {
    /// The `JPEGTables` tag, if the file has one.
    pub tables: Option<&'a [u8]>,
    /// The chunk's stored bytes.
    pub stored: &'a [u8],
    /// How its components are taken.
    pub output: Output,
    /// Width of the chunk in pixels (a tile's, or the image's for a strip).
    pub width: usize,
    /// Rows the chunk holds.
    pub rows: usize,
    /// Rows of the chunk's slot (a strip's `RowsPerStrip`): a last strip coded at this
    /// height is accepted and cropped, as libtiff does.
    pub slot_rows: usize,
    /// The `YCbCrSubsampling` tag (horizontal, vertical) of a YCbCr image, if present:
    /// libtiff refuses a stream sampled otherwise.
    pub subsampling: Option<(u16, u16)>,
}

/// Decodes `chunk` into `out`, which holds the chunk's components as band planes of
/// `slot_rows x width` samples each (the rows past `rows` are left as they are).
///
/// # Errors
/// One line saying why the chunk is refused: the library missing, a stream that is
/// not a JPEG of the chunk's size or sampling, or one libjpeg-turbo reports damaged.
pub fn decode(chunk: &Chunk<'_>, out: &mut [u8]) -> Result<(), String> {
    let lib = library()?;
    // libjpeg-turbo writes through raw pointers: the room is checked here, not assumed
    let room = chunk.output.components() * chunk.slot_rows * chunk.width;
    if out.len() < room || chunk.rows > chunk.slot_rows {
        return Err(format!(
            "the chunk's buffer holds {} bytes where {room} are needed",
            out.len()
        ));
    }
    SPLICE.with_borrow_mut(|buf| {
        buf.clear();
        let stream = splice(chunk.tables, chunk.stored, buf)?;
        HANDLE.with_borrow_mut(|h| {
            if h.is_none() {
                // SAFETY: tjInitDecompress takes nothing and returns a new handle or null.
                let raw = unsafe { (lib.init)() };
                if raw.is_null() {
                    return Err("libjpeg-turbo could not create a decompressor".to_string());
                }
                *h = Some(ThreadHandle(raw));
            }
            let handle = h.as_ref().map_or(std::ptr::null_mut(), |t| t.0);
            decode_with(lib, handle, chunk, stream, out)
        })
    })
}

/// The stream libtiff decodes: the tables' markers, then the chunk's, as one JPEG.
fn splice<'a>(
    tables: Option<&[u8]>,
    stored: &'a [u8],
    buf: &'a mut Vec<u8>,
) -> Result<&'a [u8], String> {
    const SOI: [u8; 2] = [0xFF, 0xD8];
    const EOI: [u8; 2] = [0xFF, 0xD9];
    if stored.get(..2) != Some(&SOI[..]) {
        return Err("the chunk is not a JPEG stream (no start-of-image marker)".into());
    }
    match tables {
        // libtiff writes the tables as a stream of their own: SOI, tables, EOI
        Some(t) if t.len() >= 4 => {
            if t[..2] != SOI || t[t.len() - 2..] != EOI {
                return Err("the JPEGTables tag is not a JPEG tables stream".into());
            }
            buf.extend_from_slice(&t[..t.len() - 2]);
            buf.extend_from_slice(&stored[2..]);
            Ok(buf)
        }
        Some(t) if !t.is_empty() => Err("the JPEGTables tag is not a JPEG tables stream".into()),
        _ => Ok(stored),
    }
}

fn decode_with(
    lib: &TurboJpeg,
    handle: Handle,
    chunk: &Chunk<'_>,
    stream: &[u8],
    out: &mut [u8],
) -> Result<(), String> {
    let fail = |what: &str| {
        // SAFETY: tjGetErrorStr2 returns a NUL-terminated string owned by the handle
        // (or a static one), valid until the next call on it; it is copied at once.
        let msg = unsafe { CStr::from_ptr((lib.error)(handle)) };
        format!("{what}: {}", msg.to_string_lossy().trim_end())
    };
    let len = c_ulong::try_from(stream.len()).map_err(|_| "the JPEG stream is too large")?;
    let (mut w, mut h, mut sub, mut cs) = (0, 0, 0, 0);
    // SAFETY: `stream` is valid for `len` bytes; the four outputs are valid pointers.
    let rc = unsafe {
        (lib.header)(
            handle,
            stream.as_ptr(),
            len,
            &raw mut w,
            &raw mut h,
            &raw mut sub,
            &raw mut cs,
        )
    };
    if rc != 0 {
        return Err(fail("the JPEG stream's header cannot be read"));
    }
    let (w, h) = (w as usize, h as usize);
    // libtiff's rule: the stream is the chunk's size, or a last strip coded at the full
    // strip height
    let size_ok = w == chunk.width && (h == chunk.rows || (h == chunk.slot_rows && h > chunk.rows));
    if !size_ok {
        return Err(format!(
            "the JPEG stream is {w}x{h} pixels where the chunk is {}x{}",
            chunk.width, chunk.rows
        ));
    }
    let format = checked_format(chunk, sub, cs)?;
    let decoded = |rc: c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(fail("the JPEG stream cannot be decoded"))
        }
    };
    let comps = chunk.output.components();
    let plane = chunk.slot_rows * chunk.width;
    let cw = c_int::try_from(w).map_err(|_| "the JPEG stream is too wide")?;
    let ch = c_int::try_from(h).map_err(|_| "the JPEG stream is too tall")?;
    if chunk.output == Output::Raw3 {
        // the raw components straight into the chunk's band planes
        let (p0, rest) = out.split_at_mut(plane);
        let (p1, p2) = rest.split_at_mut(plane);
        let mut ptrs = [p0.as_mut_ptr(), p1.as_mut_ptr(), p2.as_mut_ptr()];
        let mut strides = [cw; 3];
        // SAFETY: each plane pointer has room for `h <= slot_rows` rows of `w` samples
        // at stride `w` (checked above: `w == width`, `h <= slot_rows`); 4:4:4 sampling
        // (checked) makes every plane the image's size.
        let rc = unsafe {
            (lib.planes)(
                handle,
                stream.as_ptr(),
                len,
                ptrs.as_mut_ptr(),
                cw,
                strides.as_mut_ptr(),
                ch,
                FLAGS,
            )
        };
        return decoded(rc);
    }
    if comps == 1 {
        // SAFETY: `out` holds at least `slot_rows * width >= h * w` bytes (checked).
        let rc = unsafe {
            (lib.decompress)(
                handle,
                stream.as_ptr(),
                len,
                out.as_mut_ptr(),
                cw,
                cw,
                ch,
                format,
                FLAGS,
            )
        };
        return decoded(rc);
    }
    // pixel-interleaved rows, then each component into its plane
    INTERLEAVED.with_borrow_mut(|rows| {
        rows.resize(w * h * comps, 0);
        let pitch = c_int::try_from(w * comps).map_err(|_| "the JPEG stream is too wide")?;
        // SAFETY: `rows` holds `h` rows of `w * comps` bytes, the pitch given.
        let rc = unsafe {
            (lib.decompress)(
                handle,
                stream.as_ptr(),
                len,
                rows.as_mut_ptr(),
                cw,
                pitch,
                ch,
                format,
                FLAGS,
            )
        };
        decoded(rc)?;
        for (b, dst) in out.chunks_exact_mut(plane).take(comps).enumerate() {
            for (d, px) in dst[..w * h].iter_mut().zip(rows.chunks_exact(comps)) {
                *d = px[b];
            }
        }
        Ok(())
    })
}

/// The pixel format to decode a chunk's stream into, once its sampling (`sub`) and
/// colour space (`cs`), from its header, are what the TIFF tags say (`Raw3` decodes
/// component planes: no pixel format).
fn checked_format(chunk: &Chunk<'_>, sub: c_int, cs: c_int) -> Result<c_int, String> {
    let sampling = match sub {
        // 4:4:4 and grey
        0 | 3 => (1, 1),
        1 => (2, 1),
        2 => (2, 2),
        4 => (1, 2),
        5 => (4, 1),
        _ => (0, 0),
    };
    let (format, want_cs) = match chunk.output {
        Output::Gray => (TJPF_GRAY, Some(TJCS_GRAY)),
        Output::YcbcrToRgb => (TJPF_RGB, Some(TJCS_YCBCR)),
        Output::Raw3 => (-1, None),
        Output::Raw4 => (TJPF_CMYK, Some(TJCS_CMYK)),
    };
    if let Some(want) = want_cs
        && cs != want
    {
        return Err(format!(
            "the JPEG stream's colour space ({}) is not the {} the TIFF tags say",
            cs_name(cs),
            cs_name(want)
        ));
    }
    match chunk.output {
        Output::YcbcrToRgb => {
            if let Some(tag) = chunk.subsampling
                && (u32::from(tag.0), u32::from(tag.1)) != sampling
            {
                return Err(format!(
                    "the JPEG stream is sampled {}x{} where the YCbCrSubsampling tag says {}x{}",
                    sampling.0, sampling.1, tag.0, tag.1
                ));
            }
        }
        // libtiff takes these components as they are, each at full resolution
        Output::Raw3 | Output::Raw4 if sub != 0 => {
            return Err(
                "the JPEG stream's components are subsampled, which libtiff refuses \
                 outside YCbCr"
                    .into(),
            );
        }
        _ => {}
    }
    Ok(format)
}

fn cs_name(cs: c_int) -> &'static str {
    match cs {
        0 => "RGB",
        TJCS_YCBCR => "YCbCr",
        TJCS_GRAY => "grey",
        TJCS_CMYK => "CMYK",
        4 => "YCCK",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splicing_drops_the_tables_end_and_the_chunks_start() {
        let tables = [0xFF, 0xD8, 0xFF, 0xDB, 1, 2, 0xFF, 0xD9];
        let stored = [0xFF, 0xD8, 0xFF, 0xDA, 9, 0xFF, 0xD9];
        let mut buf = Vec::new();
        let s = splice(Some(&tables), &stored, &mut buf).expect("splices");
        assert_eq!(s, [0xFF, 0xD8, 0xFF, 0xDB, 1, 2, 0xFF, 0xDA, 9, 0xFF, 0xD9]);
        let mut buf = Vec::new();
        assert_eq!(splice(None, &stored, &mut buf).expect("as is"), stored);
    }

    #[test]
    fn what_is_not_a_jpeg_is_refused_before_the_library_sees_it() {
        let mut buf = Vec::new();
        let e = splice(None, &[0, 1, 2], &mut buf).expect_err("no SOI");
        assert!(e.contains("not a JPEG stream"), "{e}");
        let e = splice(
            Some(&[0xFF, 0xD8, 0, 0]),
            &[0xFF, 0xD8, 0xFF, 0xD9],
            &mut buf,
        )
        .expect_err("bad tables");
        assert!(e.contains("JPEGTables"), "{e}");
    }
}
