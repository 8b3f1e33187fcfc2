//! Devices: which one a run asks for (`--device auto|cpu|cuda|cuda:N`), what the machine
//! has, and the errors of that domain.
//!
//! Finding a GPU must never panic or abort. The CUDA driver and NVRTC are loaded at run
//! time (cudarc's dynamic loading), and cudarc panics on the first call into a library
//! that is not there, so [`probe`] and [`nvrtc_available`] check that the libraries load
//! before anything else calls into them. A build without the `cuda` feature keeps the
//! same functions; they answer that CUDA support was not built.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod compile;
// NVRTC compilation and its caches: for the backend, the tests and the GPU kit
#[doc(hidden)]
pub use compile::*;

/// The device a run asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeviceRequest {
    /// The GPU when one can run the operation, else the CPU (the default).
    #[default]
    Auto,
    /// The CPU backend (rayon).
    Cpu,
    /// A CUDA device: the first one (`None`) or device `n`. Refused when it cannot be used.
    Cuda(Option<usize>),
}

impl FromStr for DeviceRequest {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, DeviceError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda(None)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceRequest::Cuda(Some(n))),
                _ => Err(DeviceError::Unknown(
                    s.chars().take(40).flat_map(char::escape_debug).collect(),
                )),
            },
        }
    }
}

impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(None) => f.write_str("cuda"),
            DeviceRequest::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

impl Serialize for DeviceRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A CUDA device found on this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// Device number.
    pub ordinal: usize,
    /// The driver's name for it ("NVIDIA H100 80GB HBM3").
    pub name: String,
    /// Compute capability (major, minor): (9, 0) for Hopper.
    pub compute_capability: (u32, u32),
    /// Device memory, bytes.
    pub total_bytes: u64,
    /// Device memory free when probed, bytes.
    pub free_bytes: u64,
}

impl GpuInfo {
    /// The NVRTC target of this device's own architecture (`sm_90`).
    #[must_use]
    pub fn arch(&self) -> String {
        let (major, minor) = self.compute_capability;
        format!("sm_{major}{minor}")
    }
}

/// Errors of finding, opening and compiling for a device. Each is one line a person can
/// act on.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A `--device` value that names no device.
    #[error("unknown device '{0}': expected auto, cpu, cuda or cuda:N")]
    Unknown(String),
    /// This binary was built without the `cuda` feature.
    #[error(
        "this tilestream was built without CUDA support (the `cuda` feature): use `device=cpu` or `device=auto`"
    )]
    NotBuilt,
    /// The CUDA driver library could not be loaded.
    #[error(
        "no CUDA driver found (libcuda.so could not be loaded): install the NVIDIA driver, or use `device=cpu` or `device=auto`"
    )]
    NoDriver,
    /// The driver is there but the requested device is not.
    #[error("{}", no_device(*.requested, *.count))]
    NoDevice {
        /// The device asked for.
        requested: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// NVRTC, the runtime compiler of the kernels, could not be loaded.
    #[error(
        "NVRTC not found (libnvrtc.so is on neither LD_LIBRARY_PATH, $CUDA_HOME/lib64, /usr/local/cuda/lib64 nor TILESTREAM_NVRTC_DIRS): install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and name its lib folder in one of those, or use `device=cpu`"
    )]
    NoNvrtc,
    /// A kernel did not compile (a bug in tilestream's kernels: please report it).
    #[error("CUDA kernel {kernel} did not compile for {arch}: {log}")]
    Compile {
        /// The kernel's name.
        kernel: String,
        /// The target (`sm_90`, `compute_80`).
        arch: String,
        /// The compiler's log, on one line.
        log: String,
    },
    /// A call into the CUDA driver failed.
    #[error("CUDA driver error while trying to {action}: {msg}")]
    Driver {
        /// What was being done.
        action: &'static str,
        /// The driver's error name and text.
        msg: String,
    },
}

fn no_device(requested: usize, count: usize) -> String {
    if count == 0 {
        "the CUDA driver reports no GPU on this machine: use `device=cpu` or `device=auto`".into()
    } else {
        format!(
            "no CUDA device {requested}: this machine has {count} (cuda:0..cuda:{})",
            count - 1
        )
    }
}

#[doc(hidden)]
/// The compiler's log made fit for one line: whitespace runs become one space, at most
/// 600 characters.
#[must_use]
pub fn one_line_log(log: &str) -> String {
    let joined = log.split_whitespace().collect::<Vec<_>>().join(" ");
    match joined.char_indices().nth(600) {
        Some((i, _)) => format!("{}...", &joined[..i]),
        None => joined,
    }
}

/// Finds CUDA device `ordinal` and reads what the planner needs of it.
///
/// # Errors
/// [`DeviceError::NotBuilt`] without the `cuda` feature, [`DeviceError::NoDriver`] when the
/// driver library cannot be loaded, [`DeviceError::NoDevice`] when there is no such device,
/// [`DeviceError::Driver`] when the driver fails.
pub fn probe(ordinal: usize) -> Result<GpuInfo, DeviceError> {
    imp::probe(ordinal)
}

/// The context of CUDA device `ordinal`, created once per process and kept for its life
/// (the probe and every engine share it).
///
/// # Errors
/// As [`probe`].
#[cfg(feature = "cuda")]
pub(crate) fn context(
    ordinal: usize,
) -> Result<std::sync::Arc<cudarc::driver::CudaContext>, DeviceError> {
    imp::context(ordinal)
}

/// Whether NVRTC can be loaded (kernels can be compiled here). Besides the loader's own
/// path (`LD_LIBRARY_PATH`, the ld cache), NVRTC is looked for in `$CUDA_HOME/lib64`,
/// `$CUDA_PATH/lib64`, `/usr/local/cuda/lib64` and the folders of `TILESTREAM_NVRTC_DIRS`
/// (colon-separated: the `nvidia/cu13/lib` folder of the `nvidia-cuda-nvrtc` wheel, say).
#[must_use]
pub fn nvrtc_available() -> bool {
    imp::nvrtc_available()
}

#[doc(hidden)]
/// What this process has done with CUDA so far: contexts created and kernel sets
/// compiled. A device's context is created once per process and kept; a kernel set is
/// compiled once per (source, architecture): tests check both stay that way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// CUDA contexts created (at most one per device).
    pub contexts: usize,
    /// NVRTC compilations run (the rest came from the caches).
    pub compilations: usize,
    /// Kernel sets loaded from the disk cache ([`kernel_cache_dir`]) instead.
    pub disk_loads: usize,
}

#[doc(hidden)]
/// The counters of this process (see [`Counters`]).
#[must_use]
pub fn counters() -> Counters {
    imp::counters()
}

/// Host memory the CUDA driver holds for itself in this process, besides tilestream's
/// own page-locked buffers, or 0 while no context exists. It is what the resident set
/// grew by while each device's context was created (the driver's bookkeeping: about 100
/// MiB on an H200 with driver 580), plus [`DRIVER_EXTRA_BYTES`] for what loading modules
/// and creating streams and events add later. A GPU run counts it in its host budget
/// ([`crate::Engine::with_device`]), so that the process's peak resident memory stays
/// within the budget plus the fixed overhead a CPU run has too.
#[must_use]
pub fn driver_host_bytes() -> u64 {
    imp::driver_host_bytes()
}

/// What loading kernel modules and creating streams and events add to the CUDA driver's
/// host memory once its context exists. Measured on an H200 (driver 580.159, 2026-11-28):
/// a CUDA run over a tiny input peaked 147 MiB above the same run on the CPU, 100 MiB
/// of which appeared while the context was created.
pub const DRIVER_EXTRA_BYTES: u64 = 48 << 20;

/// What [`driver_host_bytes`] takes for a context when the resident set cannot be read
/// (no `/proc`): above what was measured on an H200.
#[cfg(feature = "cuda")]
const DRIVER_CONTEXT_FALLBACK_BYTES: u64 = 128 << 20;

/// The most [`driver_host_bytes`] takes for one context: the resident set's growth while
/// it is created includes what other threads allocate meanwhile.
#[cfg(feature = "cuda")]
const DRIVER_CONTEXT_MAX_BYTES: u64 = 384 << 20;

/// The process's resident set in bytes (`VmRSS` of `/proc/self/status`), when readable.
#[cfg(feature = "cuda")]
fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib << 10)
}

/// The versions of the CUDA pieces found on this machine, for reports and `devices`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// The CUDA version the driver supports (`13.0`), when a driver loads.
    pub driver: Option<String>,
    /// NVRTC's version (`13.0`), when NVRTC loads.
    pub nvrtc: Option<String>,
    /// Where NVRTC was loaded from, when tilestream looked for it outside the loader's
    /// path.
    pub nvrtc_path: Option<String>,
}

/// The driver's and NVRTC's versions (each `None` when it does not load). Never panics.
#[must_use]
pub fn versions() -> Versions {
    imp::versions()
}

#[cfg(feature = "cuda")]
mod imp {
    use std::ffi::{CStr, CString};
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, OnceLock};

    use cudarc::driver::CudaContext;

    use super::{Compiled, Counters, DeviceError, GpuInfo, Versions, nvrtc_options, one_line_log};

    static CONTEXTS: AtomicUsize = AtomicUsize::new(0);
    /// What the resident set grew by while this process's contexts were created.
    static CONTEXT_RESIDENT: AtomicU64 = AtomicU64::new(0);
    static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

    pub(super) fn driver_host_bytes() -> u64 {
        if CONTEXTS.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        CONTEXT_RESIDENT.load(Ordering::Relaxed) + super::DRIVER_EXTRA_BYTES
    }

    pub(super) fn counters() -> Counters {
        Counters {
            contexts: CONTEXTS.load(Ordering::Relaxed),
            compilations: COMPILATIONS.load(Ordering::Relaxed),
            disk_loads: super::DISK_LOADS.load(Ordering::Relaxed),
        }
    }

    fn driver_present() -> bool {
        // SAFETY: from cudarc 0.19.5 on, this only tries to open the library (dlopen) and
        // reports whether it loaded; it calls nothing in it and cannot panic.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// Where NVRTC was loaded from outside the loader's path, once looked for.
    static NVRTC_FOUND: OnceLock<Option<String>> = OnceLock::new();

    /// The folders NVRTC is looked for in when the loader's path has none.
    fn nvrtc_dirs() -> Vec<std::path::PathBuf> {
        let mut dirs = Vec::new();
        if let Some(v) = std::env::var_os("TILESTREAM_NVRTC_DIRS") {
            dirs.extend(std::env::split_paths(&v));
        }
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(v) = std::env::var_os(var) {
                dirs.push(std::path::PathBuf::from(v).join("lib64"));
            }
        }
        dirs.push("/usr/local/cuda/lib64".into());
        dirs
    }

    /// Loads NVRTC by its full path from one of [`nvrtc_dirs`] when the loader's path has
    /// none, so that cudarc's own load by name (`libnvrtc.so.13`) finds the library already
    /// loaded (the dynamic loader matches a loaded library's soname). Its builtins library
    /// beside it is loaded first, for the same reason.
    fn find_nvrtc() -> Option<String> {
        for dir in nvrtc_dirs() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            names.sort();
            let pick = |prefix: &str| {
                names
                    .iter()
                    .filter(|n| n.starts_with(prefix) && !n.ends_with(".alt.so"))
                    .min_by_key(|n| n.len())
                    .cloned()
            };
            let (Some(lib), builtins) = (pick("libnvrtc.so."), pick("libnvrtc-builtins.so."))
            else {
                continue;
            };
            if let Some(b) = builtins {
                dlopen(&dir.join(b));
            }
            if dlopen(&dir.join(&lib)) {
                return Some(dir.join(lib).display().to_string());
            }
        }
        None
    }

    /// Loads the library at `path` for the life of the process; whether it loaded.
    fn dlopen(path: &std::path::Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: `c` is a valid C string; a library that loads is never closed, so
        // nothing it holds is unmapped under a caller.
        !unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) }.is_null()
    }

    pub(super) fn nvrtc_available() -> bool {
        // SAFETY: as for the driver: it only tries to open libnvrtc.
        let on_path = || unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if on_path() {
            return true;
        }
        NVRTC_FOUND.get_or_init(find_nvrtc).is_some() && on_path()
    }

    pub(super) fn versions() -> Versions {
        let mut v = Versions::default();
        if driver_present() {
            let mut n = 0i32;
            // SAFETY: the driver library loaded (checked above); `n` is a valid place.
            if unsafe { cudarc::driver::sys::cuDriverGetVersion(&raw mut n) }
                == cudarc::driver::sys::CUresult::CUDA_SUCCESS
            {
                v.driver = Some(format!("{}.{}", n / 1000, n % 1000 / 10));
            }
        }
        if nvrtc_available() {
            let (mut major, mut minor) = (0i32, 0i32);
            // SAFETY: NVRTC loaded (checked above); both are valid places.
            if unsafe { cudarc::nvrtc::sys::nvrtcVersion(&raw mut major, &raw mut minor) }
                == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS
            {
                v.nvrtc = Some(format!("{major}.{minor}"));
            }
            v.nvrtc_path = NVRTC_FOUND.get().cloned().flatten();
        }
        v
    }

    fn driver_err(action: &'static str) -> impl Fn(cudarc::driver::DriverError) -> DeviceError {
        move |e| DeviceError::Driver {
            action,
            msg: e.to_string(),
        }
    }

    /// The context of device `ordinal`, created once per process and kept: creating a
    /// primary context costs a few hundred milliseconds, and dropping the last handle to
    /// it destroys it (with every module loaded in it).
    pub(crate) fn context(ordinal: usize) -> Result<Arc<CudaContext>, DeviceError> {
        static CTX: OnceLock<Mutex<Vec<Option<Arc<CudaContext>>>>> = OnceLock::new();
        if !driver_present() {
            return Err(DeviceError::NoDriver);
        }
        let count = CudaContext::device_count().map_err(driver_err("count the devices"))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(DeviceError::NoDevice {
                requested: ordinal,
                count,
            });
        }
        let mut all = CTX
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.len() <= ordinal {
            all.resize(ordinal + 1, None);
        }
        if let Some(c) = &all[ordinal] {
            return Ok(Arc::clone(c));
        }
        let before = super::resident_bytes();
        let ctx = CudaContext::new(ordinal).map_err(driver_err("open the device"))?;
        // other threads may allocate meanwhile: what they add is counted too (on the
        // safe side), up to a bound no driver has come near
        let grew = match (before, super::resident_bytes()) {
            (Some(b), Some(a)) => a.saturating_sub(b).min(super::DRIVER_CONTEXT_MAX_BYTES),
            _ => super::DRIVER_CONTEXT_FALLBACK_BYTES,
        };
        CONTEXT_RESIDENT.fetch_add(grew, Ordering::Relaxed);
        CONTEXTS.fetch_add(1, Ordering::Relaxed);
        all[ordinal] = Some(Arc::clone(&ctx));
        Ok(ctx)
    }

    pub(super) fn probe(ordinal: usize) -> Result<GpuInfo, DeviceError> {
        let ctx = context(ordinal)?;
        let name = ctx.name().map_err(driver_err("read the device's name"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver_err("read the compute capability"))?;
        let (free, total) = ctx
            .mem_get_info()
            .map_err(driver_err("read the device memory"))?;
        Ok(GpuInfo {
            ordinal,
            name,
            compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            total_bytes: total as u64,
            free_bytes: free as u64,
        })
    }

    pub(super) fn compile(
        name: &str,
        src: &str,
        arch: &str,
        spills_as_errors: bool,
    ) -> Result<Compiled, DeviceError> {
        use cudarc::nvrtc::{result, sys};
        if !nvrtc_available() {
            return Err(DeviceError::NoNvrtc);
        }
        let fail = |log: String| DeviceError::Compile {
            kernel: name.into(),
            arch: arch.into(),
            log,
        };
        let src = CString::new(src).map_err(|_| fail("the source holds a NUL byte".into()))?;
        let cname = CString::new(format!("{name}.cu")).map_err(|_| fail("bad name".into()))?;
        COMPILATIONS.fetch_add(1, Ordering::Relaxed);
        let prog = result::create_program(&src, Some(&cname))
            .map_err(|e| fail(format!("cannot create the program: {e:?}")))?;
        let opts = nvrtc_options(arch, spills_as_errors);
        let out = (|| {
            // SAFETY: `prog` is a live program created above and destroyed below; the
            // options are valid C strings that outlive the call.
            let compiled = unsafe { result::compile_program(prog, &opts) };
            // SAFETY: `prog` is live; the log is copied out.
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| {
                    // SAFETY: NVRTC's log is a NUL-terminated C string.
                    unsafe { CStr::from_ptr(l.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            if let Err(e) = compiled {
                return Err(fail(format!("{e:?}: {}", one_line_log(&log))));
            }
            if spills_as_errors && log.contains("spill") && !log.contains(" 0 bytes spill") {
                return Err(fail(format!("registers spilled: {}", one_line_log(&log))));
            }
            // SAFETY: `prog` compiled successfully, so its PTX can be read.
            let ptx = unsafe { result::get_ptx(prog) }
                .map_err(|e| fail(format!("cannot read the PTX: {e:?}")))?;
            // SAFETY: NVRTC's PTX is a NUL-terminated C string.
            let ptx = unsafe { CStr::from_ptr(ptx.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            let mut cubin = Vec::new();
            if arch.starts_with("sm_") {
                let mut size = 0usize;
                // SAFETY: `prog` compiled for a real architecture, so it has a cubin;
                // `size` is a valid place for its size.
                unsafe { sys::nvrtcGetCUBINSize(prog, &raw mut size) }
                    .result()
                    .map_err(|e| fail(format!("cannot read the cubin's size: {e:?}")))?;
                cubin = vec![0u8; size];
                // SAFETY: `cubin` has exactly the size NVRTC reported for it.
                unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast()) }
                    .result()
                    .map_err(|e| fail(format!("cannot read the cubin: {e:?}")))?;
            }
            Ok(Compiled { ptx, cubin, log })
        })();
        // SAFETY: `prog` is live and not used after this.
        let _ = unsafe { result::destroy_program(prog) };
        out
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    //! A build without CUDA: every answer is that CUDA support was not built. Nothing
    //! here can panic.
    use super::{Compiled, Counters, DeviceError, GpuInfo, Versions};

    pub(super) fn nvrtc_available() -> bool {
        false
    }

    pub(super) fn counters() -> Counters {
        Counters::default()
    }

    pub(super) fn versions() -> Versions {
        Versions::default()
    }

    pub(super) fn driver_host_bytes() -> u64 {
        0
    }

    pub(super) fn probe(_ordinal: usize) -> Result<GpuInfo, DeviceError> {
        Err(DeviceError::NotBuilt)
    }

    pub(super) fn compile(
        _name: &str,
        _src: &str,
        _arch: &str,
        _spills: bool,
    ) -> Result<Compiled, DeviceError> {
        Err(DeviceError::NotBuilt)
    }
}

#[cfg(test)]
mod tests;
