//! OpenJPEG, loaded at run time, decoding one region of a JPEG 2000 file: a whole tile
//! of the codestream (`opj_get_decoded_tile`) or an area of a file with one large tile
//! (`opj_set_decode_area`, which since OpenJPEG 2.3 decodes only the code-blocks the
//! area needs and holds memory for the area only). OpenJPEG is the library GDAL's
//! JP2OpenJPEG driver uses, and wavelet decoding has one exact result per library, so
//! the values are GDAL's.
//!
//! The codestream is read through OpenJPEG's stream callbacks with positioned reads, so
//! no more of it is in memory than OpenJPEG asks for (the headers, and the stored bytes
//! of the tile being decoded). Each decode opens its own codec and stream: a chunk decodes
//! on any thread, and nothing is shared between them but the library.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::fs::File;
use std::sync::OnceLock;

use crate::io::native::Native;

/// `OPJ_CODEC_J2K`: a raw codestream. A JP2 file's codestream is decoded as one too,
/// as GDAL decodes it, so that OpenJPEG applies none of the JP2 colour boxes (palette,
/// channel definitions), which GDAL reads as metadata only.
const CODEC_J2K: c_int = 0;

/// `opj_dparameters_t` of OpenJPEG 2.x (`openjpeg.h`), field for field.
#[repr(C)]
struct DParameters {
    cp_reduce: u32,
    cp_layer: u32,
    infile: [c_char; 4096],
    outfile: [c_char; 4096],
    decod_format: c_int,
    cod_format: c_int,
    da_x0: u32,
    da_x1: u32,
    da_y0: u32,
    da_y1: u32,
    m_verbose: c_int,
    tile_index: u32,
    nb_tile_to_decode: u32,
    jpwl_correct: c_int,
    jpwl_exp_comps: c_int,
    jpwl_max_tiles: c_int,
    flags: u32,
    dump_state: u32,
}

/// `opj_image_comp_t`.
#[repr(C)]
struct ImageComp {
    dx: u32,
    dy: u32,
    w: u32,
    h: u32,
    x0: u32,
    y0: u32,
    prec: u32,
    bpp: u32,
    sgnd: u32,
    resno_decoded: u32,
    factor: u32,
    data: *mut i32,
    alpha: u16,
}

/// `opj_image_t`.
#[repr(C)]
struct Image {
    x0: u32,
    y0: u32,
    x1: u32,
    y1: u32,
    numcomps: u32,
    color_space: c_int,
    comps: *mut ImageComp,
    icc_profile_buf: *mut u8,
    icc_profile_len: u32,
}

type Codec = *mut c_void;
type Stream = *mut c_void;
type MsgFn = unsafe extern "C" fn(*const c_char, *mut c_void);
type ReadFn = unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> usize;
type SkipFn = unsafe extern "C" fn(i64, *mut c_void) -> i64;
type SeekFn = unsafe extern "C" fn(i64, *mut c_void) -> c_int;

/// The OpenJPEG functions tilestream calls.
struct OpenJpeg {
    create_decompress: unsafe extern "C" fn(c_int) -> Codec,
    destroy_codec: unsafe extern "C" fn(Codec),
    set_default_decoder_parameters: unsafe extern "C" fn(*mut DParameters),
    setup_decoder: unsafe extern "C" fn(Codec, *mut DParameters) -> c_int,
    set_error_handler: unsafe extern "C" fn(Codec, Option<MsgFn>, *mut c_void) -> c_int,
    set_warning_handler: unsafe extern "C" fn(Codec, Option<MsgFn>, *mut c_void) -> c_int,
    read_header: unsafe extern "C" fn(Stream, Codec, *mut *mut Image) -> c_int,
    set_decode_area: unsafe extern "C" fn(Codec, *mut Image, i32, i32, i32, i32) -> c_int,
    decode: unsafe extern "C" fn(Codec, Stream, *mut Image) -> c_int,
    get_decoded_tile: unsafe extern "C" fn(Codec, Stream, *mut Image, u32) -> c_int,
    image_destroy: unsafe extern "C" fn(*mut Image),
    stream_create: unsafe extern "C" fn(usize, c_int) -> Stream,
    stream_destroy: unsafe extern "C" fn(Stream),
    stream_set_read_function: unsafe extern "C" fn(Stream, Option<ReadFn>),
    stream_set_skip_function: unsafe extern "C" fn(Stream, Option<SkipFn>),
    stream_set_seek_function: unsafe extern "C" fn(Stream, Option<SeekFn>),
    stream_set_user_data: unsafe extern "C" fn(Stream, *mut c_void, Option<MsgFn>),
    stream_set_user_data_length: unsafe extern "C" fn(Stream, u64),
    version: unsafe extern "C" fn() -> *const c_char,
    /// Keeps the library mapped while the pointers above live (the process).
    _lib: libloading::Library,
}

/// OpenJPEG 2.
const NATIVE: Native = Native {
    env: "TILESTREAM_OPENJPEG",
    names: &[
        "libopenjp2.so.7",
        "libopenjp2.so",
        "libopenjp2.7.dylib",
        "libopenjp2.dylib",
    ],
    install: "JPEG 2000 files are decoded by OpenJPEG (the library GDAL uses), which is not \
              installed: install it (Debian and Ubuntu: apt-get install libopenjp2-7; \
              macOS: brew install openjpeg) or set TILESTREAM_OPENJPEG to its path, or \
              convert the file with gdal_translate -of GTiff -co COMPRESS=DEFLATE first",
};

/// The oldest OpenJPEG whose area decoding holds memory for the area only.
const MIN_VERSION: (u32, u32) = (2, 3);

fn load() -> Result<OpenJpeg, String> {
    let lib = NATIVE.load()?;
    let v = "OpenJPEG 2.3";
    // SAFETY: each symbol is taken with the signature `openjpeg.h` (2.x) gives it; the
    // pointers are kept beside the library, never unloaded.
    let o = unsafe {
        OpenJpeg {
            create_decompress: NATIVE.symbol(&lib, "opj_create_decompress", v)?,
            destroy_codec: NATIVE.symbol(&lib, "opj_destroy_codec", v)?,
            set_default_decoder_parameters: NATIVE.symbol(
                &lib,
                "opj_set_default_decoder_parameters",
                v,
            )?,
            setup_decoder: NATIVE.symbol(&lib, "opj_setup_decoder", v)?,
            set_error_handler: NATIVE.symbol(&lib, "opj_set_error_handler", v)?,
            set_warning_handler: NATIVE.symbol(&lib, "opj_set_warning_handler", v)?,
            read_header: NATIVE.symbol(&lib, "opj_read_header", v)?,
            set_decode_area: NATIVE.symbol(&lib, "opj_set_decode_area", v)?,
            decode: NATIVE.symbol(&lib, "opj_decode", v)?,
            get_decoded_tile: NATIVE.symbol(&lib, "opj_get_decoded_tile", v)?,
            image_destroy: NATIVE.symbol(&lib, "opj_image_destroy", v)?,
            stream_create: NATIVE.symbol(&lib, "opj_stream_create", v)?,
            stream_destroy: NATIVE.symbol(&lib, "opj_stream_destroy", v)?,
            stream_set_read_function: NATIVE.symbol(&lib, "opj_stream_set_read_function", v)?,
            stream_set_skip_function: NATIVE.symbol(&lib, "opj_stream_set_skip_function", v)?,
            stream_set_seek_function: NATIVE.symbol(&lib, "opj_stream_set_seek_function", v)?,
            stream_set_user_data: NATIVE.symbol(&lib, "opj_stream_set_user_data", v)?,
            stream_set_user_data_length: NATIVE.symbol(
                &lib,
                "opj_stream_set_user_data_length",
                v,
            )?,
            version: NATIVE.symbol(&lib, "opj_version", v)?,
            _lib: lib,
        }
    };
    // SAFETY: opj_version returns a static NUL-terminated string
    let text = unsafe { CStr::from_ptr((o.version)()) }
        .to_string_lossy()
        .into_owned();
    let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if have < MIN_VERSION {
        return Err(format!(
            "{} (found OpenJPEG {text}; {}.{} or later is needed)",
            NATIVE.install, MIN_VERSION.0, MIN_VERSION.1
        ));
    }
    Ok(o)
}

fn library() -> Result<&'static OpenJpeg, String> {
    static LIB: OnceLock<Result<OpenJpeg, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Checks that OpenJPEG can be loaded (when a file is opened, so that a missing library
/// is said then, not at the first tile).
///
/// # Errors
/// The install line.
pub fn check() -> Result<(), String> {
    library().map(|_| ())
}

/// Bytes read at a position: a file (with `pread`), or bytes in memory (the fuzz target).
pub trait Positioned: Sync {
    /// Reads into `buf` from byte `at`; fewer bytes (0 at the end) than asked only at
    /// the end.
    ///
    /// # Errors
    /// The read's error.
    fn pread(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize>;
}

impl Positioned for File {
    fn pread(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, at)
    }
}

impl Positioned for &[u8] {
    fn pread(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        let start = usize::try_from(at).unwrap_or(usize::MAX).min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// The codestream OpenJPEG reads, through the stream callbacks: `len` bytes from byte
/// `base` of `file`; `pos` counts from `base`.
struct Source<'a> {
    file: &'a dyn Positioned,
    base: u64,
    pos: u64,
    len: u64,
    /// The first read error, said in place of OpenJPEG's own message.
    failed: Option<std::io::Error>,
}

unsafe extern "C" fn read_cb(buf: *mut c_void, n: usize, user: *mut c_void) -> usize {
    // SAFETY: `user` is the `Source` set as the stream's user data, alive for the
    // stream's life (the stream is destroyed before it), used by one thread at a time.
    let s = unsafe { &mut *user.cast::<Source<'_>>() };
    let left = s.len.saturating_sub(s.pos);
    if left == 0 {
        return usize::MAX; // OpenJPEG's "end of stream"
    }
    let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
    // SAFETY: OpenJPEG gives a buffer of at least `n` bytes (n was only lowered)
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    match s.file.pread(out, s.base + s.pos) {
        Ok(0) => usize::MAX,
        Ok(got) => {
            s.pos += got as u64;
            got
        }
        Err(e) => {
            s.failed.get_or_insert(e);
            usize::MAX
        }
    }
}

unsafe extern "C" fn skip_cb(n: i64, user: *mut c_void) -> i64 {
    // SAFETY: as in `read_cb`
    let s = unsafe { &mut *user.cast::<Source<'_>>() };
    let to = i128::from(s.pos) + i128::from(n);
    if to < 0 || to > i128::from(s.len) {
        return -1;
    }
    s.pos = to as u64;
    n
}

unsafe extern "C" fn seek_cb(to: i64, user: *mut c_void) -> c_int {
    // SAFETY: as in `read_cb`
    let s = unsafe { &mut *user.cast::<Source<'_>>() };
    match u64::try_from(to) {
        Ok(to) if to <= s.len => {
            s.pos = to;
            1
        }
        _ => 0,
    }
}

unsafe extern "C" fn error_cb(msg: *const c_char, user: *mut c_void) {
    if msg.is_null() || user.is_null() {
        return;
    }
    // SAFETY: `user` is the `RefCell<String>` set with the handler, alive while the
    // codec is; `msg` is a NUL-terminated message from OpenJPEG.
    let (log, msg) = unsafe { (&*user.cast::<RefCell<String>>(), CStr::from_ptr(msg)) };
    if let Ok(mut log) = log.try_borrow_mut()
        && log.is_empty()
    {
        // one line: OpenJPEG's messages end with a line break, some hold more
        let text = msg.to_string_lossy();
        log.push_str(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    }
}

unsafe extern "C" fn quiet_cb(_msg: *const c_char, _user: *mut c_void) {}

/// What to decode.
#[derive(Clone, Copy, Debug)]
pub enum Region {
    /// Codestream tile `index`, whole.
    Tile(u32),
    /// The area `x0..x1, y0..y1` of the image, in pixels from its first.
    Area {
        /// First column.
        x0: u32,
        /// First row.
        y0: u32,
        /// One past the last column.
        x1: u32,
        /// One past the last row.
        y1: u32,
    },
}

/// One decoded component: its sample's precision and sign, and its samples, `w x h`.
pub struct Plane<'a> {
    /// Width.
    pub w: usize,
    /// Height.
    pub h: usize,
    /// Bits a sample.
    pub prec: u32,
    /// Signed samples.
    pub signed: bool,
    /// Sub-sampling, 1 when none.
    pub sub: (u32, u32),
    /// Resolution levels discarded (0 at full resolution).
    pub factor: u32,
    /// The samples, row after row.
    pub data: &'a [i32],
}

/// Owns what one decode creates; destroys it in the right order.
struct Session<'l> {
    lib: &'l OpenJpeg,
    codec: Codec,
    stream: Stream,
    image: *mut Image,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // SAFETY: each was created by the library for this session alone and is
        // destroyed once, here; null ones were never created.
        unsafe {
            if !self.image.is_null() {
                (self.lib.image_destroy)(self.image);
            }
            if !self.codec.is_null() {
                (self.lib.destroy_codec)(self.codec);
            }
            if !self.stream.is_null() {
                (self.lib.stream_destroy)(self.stream);
            }
        }
    }
}

/// Bytes OpenJPEG's stream buffer holds (a tile's stored bytes are read past it, straight
/// into OpenJPEG's own buffer).
pub const STREAM_BUFFER: usize = 64 << 10;

/// Decodes `region` of the codestream `codestream` (offset and length) of `file` and
/// hands its components to `take`.
///
/// # Errors
/// One line: the library missing, OpenJPEG's own message when it cannot decode, a read
/// error, or what `take` refuses.
pub fn decode<T>(
    file: &dyn Positioned,
    codestream: (u64, u64),
    region: Region,
    take: impl FnOnce(&[Plane<'_>]) -> Result<T, String>,
) -> Result<T, String> {
    let lib = library()?;
    let log = RefCell::new(String::new());
    let (base, len) = codestream;
    let mut source = Source {
        file,
        base,
        pos: 0,
        len,
        failed: None,
    };
    // SAFETY: all calls follow OpenJPEG's documented decoding sequence; the codec,
    // stream and image are owned by `s` and destroyed when it drops (image, codec,
    // stream); `source` and `log` outlive them (declared before `s`), and the pointers
    // given to the callbacks point at them.
    unsafe {
        let mut s = Session {
            lib,
            codec: (lib.create_decompress)(CODEC_J2K),
            stream: (lib.stream_create)(STREAM_BUFFER, 1),
            image: std::ptr::null_mut(),
        };
        if s.codec.is_null() || s.stream.is_null() {
            return Err("OpenJPEG could not create a decoder".into());
        }
        let log_ptr = (&raw const log).cast_mut().cast::<c_void>();
        (lib.set_error_handler)(s.codec, Some(error_cb), log_ptr);
        (lib.set_warning_handler)(s.codec, Some(quiet_cb), std::ptr::null_mut());
        let mut p = std::mem::MaybeUninit::<DParameters>::zeroed();
        (lib.set_default_decoder_parameters)(p.as_mut_ptr());
        let mut p = p.assume_init();
        if (lib.setup_decoder)(s.codec, &raw mut p) == 0 {
            return Err(fail("could not set up the decoder", &log, &source));
        }
        (lib.stream_set_read_function)(s.stream, Some(read_cb));
        (lib.stream_set_skip_function)(s.stream, Some(skip_cb));
        (lib.stream_set_seek_function)(s.stream, Some(seek_cb));
        (lib.stream_set_user_data)(s.stream, (&raw mut source).cast::<c_void>(), None);
        (lib.stream_set_user_data_length)(s.stream, len);
        if (lib.read_header)(s.stream, s.codec, &raw mut s.image) == 0 || s.image.is_null() {
            return Err(fail("could not read the header", &log, &source));
        }
        let ok = match region {
            Region::Tile(t) => (lib.get_decoded_tile)(s.codec, s.stream, s.image, t),
            Region::Area { x0, y0, x1, y1 } => {
                let img = &*s.image;
                let at = |o: u32, v: u32| i32::try_from(u64::from(o) + u64::from(v)).ok();
                let (Some(ax0), Some(ay0), Some(ax1), Some(ay1)) = (
                    at(img.x0, x0),
                    at(img.y0, y0),
                    at(img.x0, x1),
                    at(img.y0, y1),
                ) else {
                    return Err("the area lies past 2^31 pixels".into());
                };
                if (lib.set_decode_area)(s.codec, s.image, ax0, ay0, ax1, ay1) == 0 {
                    return Err(fail("could not set the decode area", &log, &source));
                }
                (lib.decode)(s.codec, s.stream, s.image)
            }
        };
        if ok == 0 {
            return Err(fail("could not decode", &log, &source));
        }
        let img = &*s.image;
        if img.comps.is_null() {
            return Err("OpenJPEG decoded no components".into());
        }
        let comps = std::slice::from_raw_parts(img.comps, img.numcomps as usize);
        let mut planes = Vec::with_capacity(comps.len());
        for c in comps {
            let n = (c.w as usize)
                .checked_mul(c.h as usize)
                .ok_or("a decoded component is too large")?;
            if c.data.is_null() {
                return Err("OpenJPEG decoded a component without data".into());
            }
            planes.push(Plane {
                w: c.w as usize,
                h: c.h as usize,
                prec: c.prec,
                signed: c.sgnd != 0,
                sub: (c.dx, c.dy),
                factor: c.factor,
                // SAFETY: OpenJPEG allocated w x h samples for the decoded component,
                // alive until the image is destroyed (after `take` returns)
                data: std::slice::from_raw_parts(c.data, n),
            });
        }
        take(&planes)
    }
}

/// The message for a failed call: the read error if there was one, else OpenJPEG's own
/// first error message.
fn fail(what: &str, log: &RefCell<String>, source: &Source<'_>) -> String {
    if let Some(e) = &source.failed {
        return format!("OpenJPEG {what}: reading the file failed: {e}");
    }
    let msg = log.borrow();
    if msg.is_empty() {
        format!("OpenJPEG {what}")
    } else {
        format!("OpenJPEG {what}: {msg}")
    }
}
