//! Helpers shared by the integration tests: writing `.npy` files independently of the
//! engine's output path, and running the binary.
#![allow(dead_code)]
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod gdal;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tilestream::DType;
use tilestream::format::npy::build_header;

/// Writes `data` (little-endian element bytes) as a `.npy` of `shape` and `dtype`.
pub fn write_npy(path: &Path, dtype: DType, shape: &[usize], data: &[u8]) {
    let mut bytes = build_header(dtype, shape);
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

/// Reads the data bytes of a `.npy` written by tilestream (header parsed independently:
/// the header length field is at bytes 8..10 for version 1).
pub fn read_npy_data(path: &Path) -> Vec<u8> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let start = match b[6] {
        1 => 10 + u16::from_le_bytes([b[8], b[9]]) as usize,
        _ => 12 + u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize,
    };
    b[start..].to_vec()
}

/// The tilestream binary built by cargo for these tests, or the one `TILESTREAM_BIN`
/// names: the GPU kit runs this test binary on a machine without the build folder, with
/// the binary it carried beside it (benches/gpu/kit.py).
pub fn bin() -> Command {
    match std::env::var_os("TILESTREAM_BIN") {
        Some(p) => Command::new(p),
        None => Command::new(env!("CARGO_BIN_EXE_tilestream")),
    }
}

/// Runs the binary with `args` and returns its output.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

/// Runs the binary with `args`, killed (SIGKILL, by fault injection) at `kill`, asserts
/// that it was, calls `between` to look at what the kill left, then runs `args` again
/// with `--resume`, asserting success and, for a kill after the first tile of pass 0,
/// that the report says work was kept.
pub fn kill_then_resume(args: &[String], kill: &str, between: impl FnOnce()) {
    use std::os::unix::process::ExitStatusExt;
    let o = bin()
        .args(args)
        .env("TILESTREAM_FAULT_KILL_AT", kill)
        .output()
        .unwrap();
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGKILL),
        "{args:?} at {kill}: not killed"
    );
    between();
    let o = bin().args(args).arg("--resume").output().unwrap();
    assert!(
        o.status.success(),
        "{args:?} resumed after {kill}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    if kill != "written:0:0" {
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            stdout.contains("resumed:"),
            "{args:?} after {kill}: {stdout}"
        );
    }
}

/// Runs the binary, asserting success, and returns stdout.
/// Runs the CLI with `args`, expecting the refusal of an output the budget cannot
/// encode as it is written: exit code 2, one line naming `--memory`, and nothing left in
/// `dir` but what was there before.
pub fn refused_to_stream(args: &[&str], dir: &Path) {
    let before = listing(dir);
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.contains("too small") && err.contains("--memory"),
        "{args:?}: {err}"
    );
    assert_eq!(listing(dir), before, "{args:?} left files");
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "tilestream {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A small deterministic pseudo-random generator (so the tests need no extra crate).
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 42) as f64
    }
}

/// The backends this machine can run, for tests written once per backend: the CPU
/// always, and `cuda:0` when a GPU can be opened (probed once per test binary, which
/// says on one line which backends run). With `TILESTREAM_REQUIRE_GPU=1` a machine
/// where no GPU can be opened fails the test instead of running the CPU alone.
pub fn backends() -> Vec<tilestream::device::DeviceRequest> {
    use tilestream::device::DeviceRequest;
    static BACKENDS: std::sync::OnceLock<Vec<DeviceRequest>> = std::sync::OnceLock::new();
    BACKENDS
        .get_or_init(|| match tilestream::device::probe(0) {
            Ok(gpu) => {
                eprintln!("backends: cpu and cuda:0 ({})", gpu.name);
                vec![DeviceRequest::Cpu, DeviceRequest::Cuda(Some(0))]
            }
            Err(e) if std::env::var_os("TILESTREAM_REQUIRE_GPU").is_some_and(|v| v == "1") => {
                panic!("TILESTREAM_REQUIRE_GPU=1 but no GPU can be used: {e}")
            }
            Err(e) => {
                eprintln!("backends: cpu alone (no GPU: {e})");
                vec![DeviceRequest::Cpu]
            }
        })
        .clone()
}

/// An engine on `device` with a budget of `budget` bytes.
pub fn engine_on(device: tilestream::device::DeviceRequest, budget: u64) -> tilestream::Engine {
    tilestream::Engine::new(tilestream::MemoryBudget::new(budget + driver_share(device)))
        .unwrap()
        .with_device(device)
        .unwrap()
}

/// The CUDA driver's host memory a GPU engine takes out of its budget (0 on the CPU), so
/// that a test's budget is what its tiles get on either device: a GPU test at "256 KiB"
/// plans the same small tiles as the CPU's.
pub fn driver_share(device: tilestream::device::DeviceRequest) -> u64 {
    match device {
        tilestream::device::DeviceRequest::Cuda(n) => {
            // the context (and with it the measurement) exists once a device is probed
            let _ = tilestream::device::probe(n.unwrap_or(0));
            tilestream::device::driver_host_bytes()
        }
        _ => 0,
    }
}

/// A test written once and run on every backend of [`backends`]: `$device` is bound to
/// each in turn (build engines with [`engine_on`]), so a new backend gets the oracle
/// tests that use this for free.
#[allow(unused_macros)] // tests/cli.rs and tests/hostile_params.rs include this module too
macro_rules! on_every_backend {
    ($(#[$attr:meta])* fn $name:ident($device:ident) $body:block) => {
        $(#[$attr])*
        #[test]
        fn $name() {
            for $device in $crate::common::backends() {
                eprintln!(concat!(stringify!($name), ": {}"), $device);
                $body
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_every_backend;

/// Runs `cmd`, killing it after 20 s (a FIFO that blocks the run would otherwise hang
/// the test).
pub fn bounded(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after 20 s: it blocked");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The Python of `TILESTREAM_PYTHON` (set by `bash scripts/test`), which must have
/// `needs`; `None` (the test says it skipped) only outside CI and `scripts/test`, which
/// fail instead.
pub fn python(needs: &str) -> Option<std::ffi::OsString> {
    let p = std::env::var_os("TILESTREAM_PYTHON");
    if p.is_none() {
        assert!(
            std::env::var_os("CI").is_none() && std::env::var_os("TILESTREAM_TEST_ALL").is_none(),
            "CI and scripts/test must set TILESTREAM_PYTHON to a Python with {needs}"
        );
        eprintln!("SKIPPED: TILESTREAM_PYTHON is not set (a Python with {needs})");
    }
    p
}
