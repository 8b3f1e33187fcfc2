//! Tells the tests which optional checks can run here, so that a check that cannot run is
//! listed as ignored (with the reason) instead of passing without checking anything:
//! - `TILESTREAM_PYTHON` (a Python with numpy and zarr): the cross-checks against numpy and
//!   zarr-python (`cfg(tilestream_python)`);
//! - `TILESTREAM_REQUIRE_NVRTC=1` (NVRTC on the library path, as `scripts/test` sets up) in a
//!   build with the `cuda` feature (the default): the compilation of every CUDA kernel
//!   (`cfg(tilestream_nvrtc)`), which then fails if NVRTC cannot be loaded;
//! - a C++ compiler with `_Float16` as `c++`: the CUDA kernels run on the host against the
//!   CPU backend (`cfg(tilestream_cxx)`, `tests/it/cuda_emulation.rs`).

fn main() {
    println!("cargo::rerun-if-env-changed=TILESTREAM_PYTHON");
    println!("cargo::rerun-if-env-changed=TILESTREAM_REQUIRE_NVRTC");
    println!("cargo::rustc-check-cfg=cfg(tilestream_python)");
    println!("cargo::rustc-check-cfg=cfg(tilestream_nvrtc)");
    println!("cargo::rustc-check-cfg=cfg(tilestream_cxx)");
    if std::env::var_os("TILESTREAM_PYTHON").is_some_and(|p| !p.is_empty()) {
        println!("cargo::rustc-cfg=tilestream_python");
    }
    // NVRTC is reached through the `cuda` feature: a CPU-only build has nothing to compile
    if std::env::var_os("TILESTREAM_REQUIRE_NVRTC").is_some_and(|v| v == "1")
        && std::env::var_os("CARGO_FEATURE_CUDA").is_some()
    {
        println!("cargo::rustc-cfg=tilestream_nvrtc");
    }
    if cxx_with_float16() {
        println!("cargo::rustc-cfg=tilestream_cxx");
    }
}

/// Whether `c++` compiles C++17 with `_Float16` (g++ 12 or later on x86-64).
fn cxx_with_float16() -> bool {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("c++")
        .args(["-x", "c++", "-std=c++17", "-fsyntax-only", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"_Float16 x = (_Float16)1.5f; int main() { return (int)x; }\n");
    }
    child.wait().is_ok_and(|s| s.success())
}
