//! Every CUDA kernel compiles with NVRTC, for a virtual architecture (`compute_80`: PTX
//! any GPU from Ampere on can load) and for Hopper's own (`sm_90`: NVRTC also runs ptxas,
//! and a register spill is an error). Runs where NVRTC is installed and
//! `TILESTREAM_REQUIRE_NVRTC=1` says so (`scripts/test` installs the NVRTC wheel); listed as
//! ignored elsewhere. Executing the kernels needs a GPU (the GPU suite); their arithmetic
//! is checked on the host by `cuda_emulation.rs`.

#![allow(clippy::unwrap_used)]

use tilestream::backend::cuda::source::{all_elementwise, elementwise_source};
use tilestream::device::{self, DeviceError};

/// Compiles `src` for `compute_80` and `sm_90` (spills as errors) and checks that every
/// kernel of `names` is in the PTX and that nothing uses local memory.
fn compiles_everywhere(what: &str, src: &str, names: &[String]) {
    assert!(
        device::nvrtc_available(),
        "TILESTREAM_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: put the lib directory of \
         the nvidia-cuda-nvrtc wheel on LD_LIBRARY_PATH"
    );
    for arch in ["compute_80", "sm_90"] {
        let c = device::compile(what, src, arch, true).unwrap_or_else(|e| panic!("{e}"));
        for name in names {
            let entry = format!(".entry {name}(");
            assert!(c.ptx.contains(&entry), "{arch}: no {entry} in the PTX");
        }
        assert_eq!(
            c.cubin.is_empty(),
            !arch.starts_with("sm_"),
            "{arch}: machine code only for a real architecture"
        );
        // nothing left to local memory (spills or stack arrays)
        assert!(!c.ptx.contains(".local"), "{arch}: local memory used");
    }
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_elementwise_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    let kernels = all_elementwise();
    let names: Vec<String> = kernels
        .iter()
        .map(|&(k, i, o)| k.kernel_name(i, o))
        .collect();
    compiles_everywhere("elementwise", &elementwise_source(&kernels), &names);
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn a_kernel_that_does_not_compile_is_one_line_naming_it() {
    let e = device::compile(
        "broken",
        "extern \"C\" __global__ void k() { x; }",
        "sm_90",
        true,
    )
    .unwrap_err();
    assert!(matches!(e, DeviceError::Compile { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(
        msg.contains("broken") && msg.contains("sm_90") && msg.contains("identifier"),
        "{msg}"
    );
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_fused_map_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::DType;
    use tilestream::backend::cuda::source::{map_kernel_name, map_source};
    use tilestream::ops::expr::{Program, parse};
    for e in crate::cuda_emulation::EXPRESSIONS {
        let program = Program::compile(&parse(e).unwrap()).unwrap();
        let ins = [DType::U16, DType::F32][..program.streams.len()].to_vec();
        for od in [DType::F32, DType::F16, DType::U8] {
            let name = map_kernel_name(&program, &ins, od);
            let src = map_source(&name, &program, &ins, od);
            for arch in ["compute_80", "sm_90"] {
                let c = device::compile(&name, &src, arch, true)
                    .unwrap_or_else(|err| panic!("'{e}' to {od}: {err}"));
                assert!(c.ptx.contains(&format!(".entry {name}(")), "'{e}' {arch}");
            }
        }
    }
}

/// The complex expressions and functions of `map` (`kernels/cmath.cuh` included where
/// one is used), complex64 and complex128 inputs, written as complex128, complex64 and
/// (a real value) f32: no spill, and no local memory but that of CUDA's sine and cosine
/// (their reduction of a huge angle keeps a table there), so the functions' results,
/// written through pointers, stay in registers.
#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_complex_map_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::DType;
    use tilestream::backend::cuda::source::{map_kernel_name, map_source};
    use tilestream::ops::expr::{Program, parse};
    let expressions = crate::cuda_emulation::COMPLEX_EXPRESSIONS
        .iter()
        .chain(crate::cuda_emulation::COMPLEX_FUNCTIONS);
    for e in expressions {
        let program = Program::compile_typed(&parse(e).unwrap(), |_| true).unwrap();
        let ins = [DType::C64, DType::C128];
        let outs: &[DType] = if program.is_complex() {
            &[DType::C128, DType::C64]
        } else {
            &[DType::F32]
        };
        for &od in outs {
            let name = map_kernel_name(&program, &ins, od);
            let src = map_source(&name, &program, &ins, od);
            for arch in ["compute_80", "sm_90"] {
                let c = device::compile(&name, &src, arch, true)
                    .unwrap_or_else(|err| panic!("'{e}' to {od}: {err}"));
                assert!(c.ptx.contains(&format!(".entry {name}(")), "'{e}' {arch}");
                let trig = ["exp", "sin", "cos", "tanh", "**"]
                    .iter()
                    .any(|f| e.contains(f));
                assert!(
                    trig || !c.ptx.contains(".local"),
                    "'{e}' to {od}, {arch}: local memory used"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_reduction_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::backend::cuda::source::{all_reductions, reduce_source};
    let kernels = all_reductions();
    let names: Vec<String> = kernels
        .iter()
        .flat_map(|&(k, d)| [k.blocks_name(d), k.merge_name(d)])
        .collect();
    compiles_everywhere("reduce", &reduce_source(&kernels), &names);
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_matmul_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::backend::cuda::source::{all_matmul, matmul_kernel_name, matmul_source};
    let kernels = all_matmul();
    let names: Vec<String> = kernels
        .iter()
        .map(|&(x, c, y)| matmul_kernel_name(x, c, y))
        .collect();
    compiles_everywhere("matmul", &matmul_source(&kernels), &names);
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_transpose_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::backend::cuda::source::{transpose_kernel_name, transpose_source};
    let names: Vec<String> = [1, 2, 4, 8].map(transpose_kernel_name).to_vec();
    compiles_everywhere("transpose", &transpose_source(), &names);
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_stencil_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::spec::stencil::cuda::{all_stencil_kernels, stencil_source};
    let names = all_stencil_kernels();
    compiles_everywhere("stencil", &stencil_source(&names), &names);
}

#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn every_generate_kernel_compiles_for_compute_80_and_sm_90_without_spills() {
    use tilestream::backend::cuda::source::{all_gen, gen_kernel_name, gen_source};
    let kernels = all_gen();
    let names: Vec<String> = kernels
        .iter()
        .map(|&(d, o)| gen_kernel_name(d, o))
        .collect();
    compiles_everywhere("generate", &gen_source(&kernels), &names);
}

/// The disk cache of compiled kernels: the first compilation writes the machine code,
/// the next one (another process, in life) loads it without NVRTC and gets the same
/// bytes; a damaged file, another source, or a file not of this user is compiled
/// again, never loaded; `compute_*` targets (PTX for the driver) are not cached.
#[test]
#[cfg_attr(
    not(tilestream_nvrtc),
    ignore = "set TILESTREAM_REQUIRE_NVRTC=1 with libnvrtc.so.13 on LD_LIBRARY_PATH (bash scripts/test does), in a build with the cuda feature, to compile the CUDA kernels"
)]
fn compiled_kernels_are_kept_on_disk_and_checked_when_loaded() {
    use tilestream::DType;
    use tilestream::backend::cuda::source::Elementwise;
    let dir = tempfile::tempdir().unwrap();
    let src = elementwise_source(&[(Elementwise::Affine, DType::F32, DType::F16)]);
    let name = Elementwise::Affine.kernel_name(DType::F32, DType::F16);
    let through = |src: &str| {
        device::compile_through_disk(Some(dir.path()), &name, src, "sm_90", false).unwrap()
    };
    let (first, cached) = through(&src);
    assert!(!cached && !first.cubin.is_empty());
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let (second, cached) = through(&src);
    assert!(cached, "the second compilation did not load the file");
    assert_eq!(second.cubin, first.cubin);
    // a flipped byte in the machine code: compiled again and the file rewritten
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&files[0], &bytes).unwrap();
    let (third, cached) = through(&src);
    assert!(!cached, "a damaged file was loaded");
    assert_eq!(third.cubin, first.cubin);
    assert!(through(&src).1, "the damaged file was not rewritten");
    // a file of another user is not loaded (root can make one; others cannot, and
    // cannot be handed one either)
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(files[0].to_str().unwrap()).unwrap();
        // SAFETY: a valid path; 65534 is nobody.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        assert!(!through(&src).1, "a file of another user was loaded");
        assert!(through(&src).1, "the file was not rewritten as this user's");
    }
    // another source is another file
    let (_, cached) = through(&format!("{src}\n// another\n"));
    assert!(!cached);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    // PTX targets are not kept
    let (_, cached) =
        device::compile_through_disk(Some(dir.path()), &name, &src, "compute_80", false).unwrap();
    assert!(!cached);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}
