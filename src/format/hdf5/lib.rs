//! The HDF5 C library, loaded at run time, for what only it should parse: an HDF5
//! file's metadata (groups and links, a dataset's dataspace, datatype, layout, filter
//! pipeline, fill value and attributes), and each chunk's stored bytes as they are in
//! the file (`H5Dread_chunk`, the library's own lookup of a chunk in its index, with
//! no filter applied). The chunks are decoded by tilestream (`chunks.rs`), in parallel,
//! within the budget; the library is never asked for decoded data but for a compact
//! dataset's few bytes.
//!
//! Loading at run time keeps `cargo build` free of C libraries, as for libjpeg-turbo;
//! a file that needs the library where it is missing is refused in one line saying
//! what to install. The library is used by one thread at a time (a serial build of
//! HDF5 is not thread-safe): every call goes through [`with`], which holds one lock.
//!
//! The ABI taken is HDF5 1.10.5 and later (64-bit `hid_t`, `H5Dread_chunk`,
//! `H5Dget_num_chunks`); 1.12 and 1.14 keep these functions unchanged.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use crate::io::native::Native;

/// `hid_t`.
pub(crate) type Hid = i64;
type Herr = c_int;
type Htri = c_int;
type Hsize = u64;
type Haddr = u64;

/// `H5P_DEFAULT`, `H5S_ALL`, `H5E_DEFAULT`: all 0.
pub(crate) const DEFAULT: Hid = 0;
/// `HADDR_UNDEF`: no storage allocated.
pub(crate) const UNDEF: u64 = u64::MAX;

/// `H5T_class_t` values used.
pub(crate) const T_INTEGER: c_int = 0;
pub(crate) const T_FLOAT: c_int = 1;
pub(crate) const T_ENUM: c_int = 8;
pub(crate) const T_COMPOUND: c_int = 6;
/// `H5S_class_t` values.
pub(crate) const S_SCALAR: c_int = 0;
pub(crate) const S_SIMPLE: c_int = 1;
/// `H5D_layout_t` values.
pub(crate) const D_COMPACT: c_int = 0;
pub(crate) const D_CONTIGUOUS: c_int = 1;
pub(crate) const D_CHUNKED: c_int = 2;
pub(crate) const D_VIRTUAL: c_int = 3;
/// `H5I_DATASET`.
const I_DATASET: c_int = 5;
/// `H5L_TYPE_HARD`.
const L_HARD: c_int = 0;

pub(crate) type VisitCb =
    unsafe extern "C" fn(Hid, *const c_char, *const c_void, *mut c_void) -> Herr;
pub(crate) type WalkCb = unsafe extern "C" fn(c_uint, *const ErrorEntry, *mut c_void) -> Herr;

/// `H5E_error2_t`.
#[repr(C)]
pub(crate) struct ErrorEntry {
    cls_id: Hid,
    maj_num: Hid,
    min_num: Hid,
    line: c_uint,
    func_name: *const c_char,
    file_name: *const c_char,
    desc: *const c_char,
}

/// Declares [`Lib`]: one function pointer per HDF5 function used, each taken by its C
/// name with the signature `hdf5.h` gives it.
macro_rules! hdf5_functions {
    ($($field:ident = $name:literal : fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The HDF5 functions tilestream calls, from the library loaded once per process.
        pub(crate) struct Lib {
            $(pub(crate) $field: unsafe extern "C" fn($($arg),*) -> $ret,)*
            /// `H5Lvisit2` (1.12 and later) or `H5Lvisit` (1.10): the same arguments, a
            /// link-info struct that starts with the link's type in both.
            lvisit: unsafe extern "C" fn(Hid, c_int, c_int, VisitCb, *mut c_void) -> Herr,
            /// Keeps the library mapped while the pointers above live (the process).
            #[allow(dead_code)] // held, never read
            library: libloading::Library,
        }

        impl Lib {
            /// # Safety
            /// `lib` must be an HDF5 library of the ABI this module declares.
            unsafe fn take(lib: libloading::Library) -> Result<Self, String> {
                // SAFETY: the caller vouches for the ABI; each symbol is given its
                // `hdf5.h` signature.
                unsafe {
                    let lvisit = match NATIVE.symbol(&lib, "H5Lvisit2", V) {
                        Ok(f) => f,
                        Err(_) => NATIVE.symbol(&lib, "H5Lvisit", V)?,
                    };
                    Ok(Lib {
                        $($field: NATIVE.symbol(&lib, $name, V)?,)*
                        lvisit,
                        library: lib,
                    })
                }
            }
        }
    };
}

hdf5_functions! {
    open = "H5open": fn() -> Herr;
    get_libversion = "H5get_libversion": fn(*mut c_uint, *mut c_uint, *mut c_uint) -> Herr;
    free_memory = "H5free_memory": fn(*mut c_void) -> Herr;
    eset_auto2 = "H5Eset_auto2": fn(Hid, *const c_void, *mut c_void) -> Herr;
    ewalk2 = "H5Ewalk2": fn(Hid, c_int, WalkCb, *mut c_void) -> Herr;
    eclear2 = "H5Eclear2": fn(Hid) -> Herr;
    fopen = "H5Fopen": fn(*const c_char, c_uint, Hid) -> Hid;
    fclose = "H5Fclose": fn(Hid) -> Herr;
    oopen = "H5Oopen": fn(Hid, *const c_char, Hid) -> Hid;
    oclose = "H5Oclose": fn(Hid) -> Herr;
    iget_type = "H5Iget_type": fn(Hid) -> c_int;
    dopen2 = "H5Dopen2": fn(Hid, *const c_char, Hid) -> Hid;
    dclose = "H5Dclose": fn(Hid) -> Herr;
    dget_space = "H5Dget_space": fn(Hid) -> Hid;
    dget_type = "H5Dget_type": fn(Hid) -> Hid;
    dget_create_plist = "H5Dget_create_plist": fn(Hid) -> Hid;
    dget_offset = "H5Dget_offset": fn(Hid) -> Haddr;
    dget_chunk_storage_size = "H5Dget_chunk_storage_size": fn(Hid, *const Hsize, *mut Hsize) -> Herr;
    dget_chunk_info_by_coord = "H5Dget_chunk_info_by_coord":
        fn(Hid, *const Hsize, *mut c_uint, *mut Haddr, *mut Hsize) -> Herr;
    dread_chunk = "H5Dread_chunk": fn(Hid, Hid, *const Hsize, *mut u32, *mut c_void) -> Herr;
    dget_num_chunks = "H5Dget_num_chunks": fn(Hid, Hid, *mut Hsize) -> Herr;
    dread = "H5Dread": fn(Hid, Hid, Hid, Hid, Hid, *mut c_void) -> Herr;
    sget_simple_extent_type = "H5Sget_simple_extent_type": fn(Hid) -> c_int;
    sget_simple_extent_ndims = "H5Sget_simple_extent_ndims": fn(Hid) -> c_int;
    sget_simple_extent_dims = "H5Sget_simple_extent_dims": fn(Hid, *mut Hsize, *mut Hsize) -> c_int;
    sget_simple_extent_npoints = "H5Sget_simple_extent_npoints": fn(Hid) -> i64;
    sclose = "H5Sclose": fn(Hid) -> Herr;
    tget_class = "H5Tget_class": fn(Hid) -> c_int;
    tget_size = "H5Tget_size": fn(Hid) -> usize;
    tget_order = "H5Tget_order": fn(Hid) -> c_int;
    tget_sign = "H5Tget_sign": fn(Hid) -> c_int;
    tget_precision = "H5Tget_precision": fn(Hid) -> usize;
    tget_offset = "H5Tget_offset": fn(Hid) -> c_int;
    tget_fields = "H5Tget_fields": fn(Hid, *mut usize, *mut usize, *mut usize, *mut usize, *mut usize) -> Herr;
    tget_ebias = "H5Tget_ebias": fn(Hid) -> usize;
    tget_super = "H5Tget_super": fn(Hid) -> Hid;
    tget_nmembers = "H5Tget_nmembers": fn(Hid) -> c_int;
    tget_member_name = "H5Tget_member_name": fn(Hid, c_uint) -> *mut c_char;
    tget_member_value = "H5Tget_member_value": fn(Hid, c_uint, *mut c_void) -> Herr;
    tget_member_offset = "H5Tget_member_offset": fn(Hid, c_uint) -> usize;
    tget_member_type = "H5Tget_member_type": fn(Hid, c_uint) -> Hid;
    tclose = "H5Tclose": fn(Hid) -> Herr;
    pget_layout = "H5Pget_layout": fn(Hid) -> c_int;
    pget_chunk = "H5Pget_chunk": fn(Hid, c_int, *mut Hsize) -> c_int;
    pget_nfilters = "H5Pget_nfilters": fn(Hid) -> c_int;
    pget_filter2 = "H5Pget_filter2":
        fn(Hid, c_uint, *mut c_uint, *mut usize, *mut c_uint, usize, *mut c_char, *mut c_uint) -> c_int;
    pget_external_count = "H5Pget_external_count": fn(Hid) -> c_int;
    pfill_value_defined = "H5Pfill_value_defined": fn(Hid, *mut c_int) -> Herr;
    pget_fill_value = "H5Pget_fill_value": fn(Hid, Hid, *mut c_void) -> Herr;
    pclose = "H5Pclose": fn(Hid) -> Herr;
    aexists = "H5Aexists": fn(Hid, *const c_char) -> Htri;
    aopen = "H5Aopen": fn(Hid, *const c_char, Hid) -> Hid;
    aget_type = "H5Aget_type": fn(Hid) -> Hid;
    aget_space = "H5Aget_space": fn(Hid) -> Hid;
    aread = "H5Aread": fn(Hid, Hid, *mut c_void) -> Herr;
    aclose = "H5Aclose": fn(Hid) -> Herr;
}

/// The HDF5 library: Debian and Ubuntu's serial builds (1.10, 1.14), then the plain
/// names of other builds (conda, Homebrew, Fedora).
const NATIVE: Native = Native {
    env: "TILESTREAM_HDF5",
    names: &[
        "libhdf5_serial.so.103",
        "libhdf5_serial.so.310",
        "libhdf5_serial.so.200",
        "libhdf5.so.310",
        "libhdf5.so.200",
        "libhdf5.so.103",
        "libhdf5.so",
        "libhdf5.310.dylib",
        "libhdf5.dylib",
    ],
    install: INSTALL,
};

/// The oldest HDF5 whose functions this module takes.
const V: &str = "HDF5 1.10.5";

/// What to say when the library is missing.
const INSTALL: &str = "HDF5 and NetCDF-4 files are read through the HDF5 \
     library (1.10.5 or later), which is not installed: install it (Debian and Ubuntu: \
     apt-get install libhdf5-103-1 or libhdf5-310; macOS: brew install hdf5) or set \
     TILESTREAM_HDF5 to its path";

fn load() -> Result<Lib, String> {
    let lib = NATIVE.load()?;
    // SAFETY: an HDF5 library of 1.10.5 or later has these symbols with these
    // signatures; the version is checked right after, before anything else is called.
    let lib = unsafe { Lib::take(lib) }?;
    let (mut maj, mut min, mut rel) = (0, 0, 0);
    // SAFETY: three valid out-pointers; H5open initialises the library (idempotent) and
    // H5Eset_auto2 with a null function stops it printing errors on stderr: they are
    // collected by `last_error` instead.
    unsafe {
        if (lib.open)() < 0 || (lib.get_libversion)(&raw mut maj, &raw mut min, &raw mut rel) < 0 {
            return Err(format!("{INSTALL} (the library found does not start)"));
        }
        (lib.eset_auto2)(DEFAULT, std::ptr::null(), std::ptr::null_mut());
    }
    if (maj, min, rel) < (1, 10, 5) {
        return Err(format!(
            "{INSTALL} (the library found is HDF5 {maj}.{min}.{rel}, older than 1.10.5)"
        ));
    }
    Ok(lib)
}

/// Runs `f` with the library, one caller at a time.
///
/// # Errors
/// The one-line refusal when the library cannot be loaded.
pub(crate) fn with<T>(f: impl FnOnce(&Lib) -> T) -> Result<T, String> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let _held = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let lib = LIB.get_or_init(load).as_ref().map_err(Clone::clone)?;
    // SAFETY: stops the library printing errors on stderr (they are collected by
    // `last_error`); a thread-safe build keeps this setting per thread, so it is set on
    // whichever thread calls
    unsafe { (lib.eset_auto2)(DEFAULT, std::ptr::null(), std::ptr::null_mut()) };
    Ok(f(lib))
}

/// An identifier the library gave, closed (with `close`) when dropped. Only made and
/// dropped inside [`with`].
pub(crate) struct Id<'a> {
    pub(crate) raw: Hid,
    close: unsafe extern "C" fn(Hid) -> Herr,
    _lib: &'a Lib,
}

impl Drop for Id<'_> {
    fn drop(&mut self) {
        // SAFETY: the identifier is open (negative ones are never wrapped) and closed
        // once, here, by the function of its kind, inside `with`'s lock.
        unsafe { (self.close)(self.raw) };
    }
}

impl Id<'_> {
    /// The identifier, kept open past this handle (for a reader that holds the dataset
    /// open and closes it itself, inside [`with`]).
    pub(crate) fn keep(self) -> Hid {
        let id = self.raw;
        std::mem::forget(self);
        id
    }
}

impl Lib {
    /// Wraps `id` (closed by `close`), or the library's last error when it is negative.
    pub(crate) fn id(
        &self,
        id: Hid,
        close: unsafe extern "C" fn(Hid) -> Herr,
    ) -> Result<Id<'_>, String> {
        if id < 0 {
            return Err(self.last_error());
        }
        Ok(Id {
            raw: id,
            close,
            _lib: self,
        })
    }

    /// The library's innermost error message (what was wrong, as specific as it says
    /// it), clearing its error stack.
    pub(crate) fn last_error(&self) -> String {
        unsafe extern "C" fn first(n: c_uint, e: *const ErrorEntry, out: *mut c_void) -> Herr {
            // SAFETY: `out` is the `String` `last_error` passed; `e` is the entry the
            // library hands over for this call, its `desc` a C string or null.
            unsafe {
                let out = &mut *out.cast::<String>();
                if n == 0 && !e.is_null() && !(*e).desc.is_null() {
                    *out = CStr::from_ptr((*e).desc).to_string_lossy().into_owned();
                }
            }
            0
        }
        let mut msg = String::new();
        // SAFETY: walks the default error stack from its innermost entry; the callback
        // writes only into `msg`, which outlives the call.
        unsafe {
            (self.ewalk2)(DEFAULT, 0, first, (&raw mut msg).cast());
            (self.eclear2)(DEFAULT);
        }
        if msg.is_empty() {
            "the HDF5 library refused it".into()
        } else {
            msg
        }
    }

    /// A C string of `s`, refused if it holds a NUL byte.
    pub(crate) fn cstr(s: &str) -> Result<CString, String> {
        CString::new(s).map_err(|_| format!("'{s}' holds a NUL byte"))
    }

    /// The paths of every dataset reached by hard links from the root group, in name
    /// order, each once (`H5Lvisit` follows hard links only, and visits a group reached
    /// twice once: cyclic files end).
    pub(crate) fn datasets(&self, file: Hid) -> Result<Vec<String>, String> {
        struct Walk<'a> {
            lib: &'a Lib,
            names: Vec<String>,
        }
        unsafe extern "C" fn visit(
            group: Hid,
            name: *const c_char,
            info: *const c_void,
            data: *mut c_void,
        ) -> Herr {
            // SAFETY: `data` is the `Walk` passed below; `name` a C string; `info`
            // points at an `H5L_info_t`/`H5L_info2_t`, whose first field is the link
            // type (an enum, C int) in every version.
            unsafe {
                let w = &mut *data.cast::<Walk<'_>>();
                if *info.cast::<c_int>() != L_HARD {
                    return 0;
                }
                let obj = (w.lib.oopen)(group, name, DEFAULT);
                if obj < 0 {
                    (w.lib.eclear2)(DEFAULT);
                    return 0;
                }
                if (w.lib.iget_type)(obj) == I_DATASET {
                    w.names
                        .push(format!("/{}", CStr::from_ptr(name).to_string_lossy()));
                }
                (w.lib.oclose)(obj);
            }
            0
        }
        let mut w = Walk {
            lib: self,
            names: Vec::new(),
        };
        // SAFETY: the callback above matches `H5L_iterate2_t`; `w` outlives the call.
        let r = unsafe { (self.lvisit)(file, 0, 0, visit, (&raw mut w).cast()) };
        if r < 0 {
            return Err(self.last_error());
        }
        Ok(w.names)
    }

    /// A string the library allocated, freed.
    ///
    /// # Safety
    /// `p` is null or a C string from the library, not used again.
    pub(crate) unsafe fn take_string(&self, p: *mut c_char) -> Option<String> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract
        unsafe {
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            (self.free_memory)(p.cast());
            Some(s)
        }
    }
}
