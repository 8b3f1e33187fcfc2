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
        "this tilestream was built without CUDA support (the `cuda` feature): use --device cpu or auto"
    )]
    NotBuilt,
    /// The CUDA driver library could not be loaded.
    #[error(
        "no CUDA driver found (libcuda.so could not be loaded): install the NVIDIA driver, or use --device cpu or auto"
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
        "NVRTC not found (libnvrtc.so could not be loaded): install the nvidia-cuda-nvrtc package and put its lib directory on LD_LIBRARY_PATH, or use --device cpu"
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
        "the CUDA driver reports no GPU on this machine: use --device cpu or auto".into()
    } else {
        format!(
            "no CUDA device {requested}: this machine has {count} (cuda:0..cuda:{})",
            count - 1
        )
    }
}

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

/// Whether NVRTC can be loaded (kernels can be compiled here).
#[must_use]
pub fn nvrtc_available() -> bool {
    imp::nvrtc_available()
}

/// A kernel compiled by NVRTC: the PTX, the cubin when the target was a real
/// architecture (`sm_90`), and the compiler's log (ptxas's register and spill report).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// PTX text.
    pub ptx: String,
    /// Machine code for `sm_*` targets; empty for `compute_*` targets.
    pub cubin: Vec<u8>,
    /// The compiler's log.
    pub log: String,
}

/// Compiles `src` with NVRTC for `arch` (`sm_90`, `compute_80`), with tilestream's flags:
/// no contraction (`--fmad=false`: results match the CPU's), IEEE division and square
/// root, and with `spills_as_errors` a register spill reported as an error.
///
/// # Errors
/// [`DeviceError::NotBuilt`] without the `cuda` feature, [`DeviceError::NoNvrtc`] when NVRTC
/// cannot be loaded, [`DeviceError::Compile`] with the compiler's log.
pub fn compile(
    name: &str,
    src: &str,
    arch: &str,
    spills_as_errors: bool,
) -> Result<Compiled, DeviceError> {
    imp::compile(name, src, arch, spills_as_errors)
}

/// The NVRTC options tilestream compiles every kernel with.
#[must_use]
pub fn nvrtc_options(arch: &str, spills_as_errors: bool) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--std=c++17".into(),
    ];
    if spills_as_errors && arch.starts_with("sm_") {
        o.push("--ptxas-options=--warn-on-spills".into());
        o.push("--ptxas-options=--warning-as-error".into());
    }
    o
}

#[cfg(feature = "cuda")]
mod imp {
    use std::ffi::{CStr, CString};

    use cudarc::driver::CudaContext;

    use super::{Compiled, DeviceError, GpuInfo, nvrtc_options, one_line_log};

    fn driver_present() -> bool {
        // SAFETY: from cudarc 0.19.5 on, this only tries to open the library (dlopen) and
        // reports whether it loaded; it calls nothing in it and cannot panic.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    pub(super) fn nvrtc_available() -> bool {
        // SAFETY: as for the driver: it only tries to open libnvrtc.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    }

    fn driver_err(action: &'static str) -> impl Fn(cudarc::driver::DriverError) -> DeviceError {
        move |e| DeviceError::Driver {
            action,
            msg: e.to_string(),
        }
    }

    pub(super) fn probe(ordinal: usize) -> Result<GpuInfo, DeviceError> {
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
        let ctx = CudaContext::new(ordinal).map_err(driver_err("open the device"))?;
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
    use super::{Compiled, DeviceError, GpuInfo};

    pub(super) fn nvrtc_available() -> bool {
        false
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn device_requests_parse_and_print_back() {
        for (s, d) in [
            ("auto", DeviceRequest::Auto),
            ("cpu", DeviceRequest::Cpu),
            ("CPU", DeviceRequest::Cpu),
            ("cuda", DeviceRequest::Cuda(None)),
            ("cuda:1", DeviceRequest::Cuda(Some(1))),
        ] {
            let got: DeviceRequest = s.parse().unwrap();
            assert_eq!(got, d);
            assert_eq!(got.to_string().parse::<DeviceRequest>().unwrap(), d);
        }
        for bad in ["cuda:", "cuda:x", "tpu", "cuda:-1", ""] {
            let e = bad.parse::<DeviceRequest>().unwrap_err();
            assert!(matches!(e, DeviceError::Unknown(_)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn no_device_messages_show_what_there_is() {
        let e = DeviceError::NoDevice {
            requested: 3,
            count: 2,
        };
        assert_eq!(
            e.to_string(),
            "no CUDA device 3: this machine has 2 (cuda:0..cuda:1)"
        );
        let e = DeviceError::NoDevice {
            requested: 0,
            count: 0,
        };
        assert!(e.to_string().contains("no GPU"), "{e}");
    }

    #[test]
    fn spills_become_errors_only_for_real_architectures() {
        let o = nvrtc_options("sm_90", true);
        assert!(o.contains(&"--ptxas-options=--warning-as-error".to_string()));
        assert!(o.contains(&"--fmad=false".to_string()));
        let o = nvrtc_options("compute_80", true);
        assert!(!o.iter().any(|x| x.contains("ptxas")));
    }

    #[test]
    fn logs_are_one_line() {
        let log = "a\n  b\tc\n".repeat(500);
        let l = one_line_log(&log);
        assert!(!l.contains('\n'));
        assert!(l.len() <= 603);
        assert!(l.starts_with("a b c a b c"));
    }
}
