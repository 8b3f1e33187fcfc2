//! The CUDA kernels' arithmetic, run on the host: `kernels/common.cuh` and
//! `kernels/elementwise.cu` compile as C++ with `TS_HOST_EMULATION` (the three PTX `cvt`
//! instructions become the host's IEEE conversions, a grid of one thread walks the whole
//! tile), and every elementwise kernel — affine, cast and standardize, for every pair of
//! the 13 dtypes — is run over edge values and random bit patterns of its input type and
//! compared byte for byte with the CPU backend. This checks the kernels' cast rules
//! (saturation, NaN to 0, rounding to odd before f16/bf16, integer paths) where no GPU is
//! at hand; `tests/gpu.rs` runs the same comparison on a GPU. NaNs compare equal to NaNs:
//! their payloads are not specified across devices (the CPU's follow the compiler's
//! choice of FMA form).

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use tilestream::backend::cuda::source::{Elementwise, all_elementwise, elementwise_source};
use tilestream::{Backend, CpuBackend, DType};

/// Host stand-ins for the CUDA built-ins the kernels use.
pub(crate) const PRELUDE: &str = r"
#define TS_HOST_EMULATION 1
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__
struct ts_dim3 { unsigned int x; };
static const ts_dim3 blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline long long __double_as_longlong(double d) { long long x; memcpy(&x, &d, 8); return x; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline unsigned int __float_as_uint(float f) { unsigned int x; memcpy(&x, &f, 4); return x; }
static inline float __uint_as_float(unsigned int x) { float f; memcpy(&f, &x, 4); return f; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline float ts_host_f16_to_f32(unsigned short h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
static inline unsigned short ts_host_f32_to_f16(float f) {
    _Float16 v = (_Float16)f; unsigned short h; memcpy(&h, &v, 2); return h;
}
static inline unsigned short ts_host_f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f); u += 0x7fffu + ((u >> 16) & 1u); return (unsigned short)(u >> 16);
}
";

const SCALE: f64 = 2.5;
const OFFSET: f64 = -3.0;
const START: u64 = 3;
const COLS: usize = 7;
/// Elements per statistic of standardize (a channel of 3 elements; 1 is per column).
const INNER: u64 = 3;

fn mean() -> Vec<f64> {
    (0..COLS).map(|c| c as f64 * 0.37 - 1.0).collect()
}

fn sd() -> Vec<f64> {
    (0..COLS).map(|c| 0.5 + c as f64 * 0.25).collect()
}

/// The runner: reads `in_<dtype>.bin`, runs every kernel, writes `<kernel>.bin`.
fn runner(kernels: &[(Elementwise, DType, DType)]) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str(&elementwise_source(kernels));
    let m: Vec<String> = mean().iter().map(|v| format!("{v:e}")).collect();
    let d: Vec<String> = sd().iter().map(|v| format!("{v:e}")).collect();
    let _ = write!(
        s,
        r#"
static const char* DIR;
static void* load(const char* dt, unsigned long long* bytes) {{
    char p[4096]; snprintf(p, sizeof p, "%s/in_%s.bin", DIR, dt);
    FILE* f = fopen(p, "rb"); if (!f) {{ perror(p); exit(1); }}
    fseek(f, 0, SEEK_END); *bytes = (unsigned long long)ftell(f); fseek(f, 0, SEEK_SET);
    void* b = malloc(*bytes + 8); if (fread(b, 1, *bytes, f) != *bytes) exit(1); fclose(f); return b;
}}
static void save(const char* name, const void* b, unsigned long long bytes) {{
    char p[4096]; snprintf(p, sizeof p, "%s/%s.bin", DIR, name);
    FILE* f = fopen(p, "wb"); if (!f || fwrite(b, 1, bytes, f) != bytes) exit(1); fclose(f);
}}
static const double MEAN[{COLS}] = {{{m}}};
static const double SD[{COLS}] = {{{d}}};
template <typename I, typename O>
static void affine(const char* name, const char* dt, void (*k)(const I*, O*, unsigned long long, double, double)) {{
    unsigned long long b; I* x = (I*)load(dt, &b); unsigned long long n = b / sizeof(I);
    O* y = (O*)calloc(n + 1, sizeof(O)); k(x, y, n, {SCALE:e}, {OFFSET:e}); save(name, y, n * sizeof(O)); free(x); free(y);
}}
template <typename I, typename O>
static void cast(const char* name, const char* dt, void (*k)(const I*, O*, unsigned long long)) {{
    unsigned long long b; I* x = (I*)load(dt, &b); unsigned long long n = b / sizeof(I);
    O* y = (O*)calloc(n + 1, sizeof(O)); k(x, y, n); save(name, y, n * sizeof(O)); free(x); free(y);
}}
template <typename I, typename O>
static void standardize(const char* name, const char* dt,
                        void (*k)(const I*, O*, unsigned long long, unsigned long long, const double*, const double*, unsigned long long, unsigned long long)) {{
    unsigned long long b; I* x = (I*)load(dt, &b); unsigned long long n = b / sizeof(I);
    O* y = (O*)calloc(n + 1, sizeof(O)); k(x, y, n, {START}, MEAN, SD, {COLS}, {INNER}); save(name, y, n * sizeof(O)); free(x); free(y);
}}
int main(int argc, char** argv) {{
    if (argc != 2) return 2;
    DIR = argv[1];
"#,
        m = m.join(", "),
        d = d.join(", "),
    );
    for &(k, i, o) in kernels {
        let name = k.kernel_name(i, o);
        let _ = writeln!(
            s,
            "    {}(\"{name}\", \"{}\", {name});",
            k.op_name(),
            i.name()
        );
    }
    s.push_str("    return 0;\n}\n");
    s
}

/// Edge values and random bit patterns of `d`, as bytes.
fn inputs(backend: &CpuBackend, d: DType) -> Vec<u8> {
    let floats: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        127.5,
        128.0,
        -128.5,
        -129.0,
        255.5,
        256.0,
        65504.0,
        65519.99,
        65520.0,
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        -50.625_015_258_789_06,
        1e-8,
        6e-8,
        1e-40,
        3.4e38,
        3.5e38,
        1e300,
        -1e300,
        2f64.powi(31),
        -(2f64.powi(31)) - 1.0,
        2f64.powi(63),
        2f64.powi(64),
        1.8e19,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
    ];
    let ints: Vec<i64> = vec![
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        -(1 << 53) - 1,
        (1 << 53) + 1,
        (1 << 24) + 1,
        -2_147_483_649,
        2_147_483_648,
        65535,
        65536,
        -32769,
        255,
        256,
        -1,
        0,
        1,
    ];
    let uints: Vec<u64> = vec![u64::MAX, u64::MAX - 1, 1 << 63, (1 << 60) + (1 << 52) + 1];
    let mut out = Vec::new();
    let mut add = |src: &[u8], from: DType, n: usize| {
        let mut b = vec![0u8; n * d.size()];
        backend.cast(src, from, &mut b, d).unwrap();
        out.extend_from_slice(&b);
    };
    add(bytemuck::cast_slice(&floats), DType::F64, floats.len());
    add(bytemuck::cast_slice(&ints), DType::I64, ints.len());
    add(bytemuck::cast_slice(&uints), DType::U64, uints.len());
    // random bit patterns: NaNs with payloads, subnormals, every exponent
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15 ^ d.size() as u64;
    for _ in 0..4096 * d.size() {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        out.push((s >> 56) as u8);
    }
    out
}

/// Element `i` of `b` (dtype `d`) as bits, and whether it is a NaN.
pub(crate) fn element(b: &[u8], d: DType, i: usize) -> (u64, bool) {
    let es = d.size();
    let mut w = [0u8; 8];
    w[..es].copy_from_slice(&b[i * es..(i + 1) * es]);
    let bits = u64::from_le_bytes(w);
    let nan = match d {
        DType::F16 => (bits & 0x7fff) > 0x7c00,
        DType::BF16 => (bits & 0x7fff) > 0x7f80,
        DType::F32 => (bits & 0x7fff_ffff) > 0x7f80_0000,
        DType::F64 => f64::from_bits(bits).is_nan(),
        _ => false,
    };
    (bits, nan)
}

fn cpu(backend: &CpuBackend, k: Elementwise, x: &[u8], i: DType, o: DType) -> Vec<u8> {
    let n = x.len() / i.size();
    let mut y = vec![0u8; n * o.size()];
    match k {
        Elementwise::Affine => backend.affine(x, i, &mut y, o, SCALE, OFFSET),
        Elementwise::Cast => backend.cast(x, i, &mut y, o),
        Elementwise::Standardize => {
            backend.standardize(x, i, START, INNER, &mean(), &sd(), &mut y, o)
        }
    }
    .unwrap();
    y
}

pub(crate) fn compile(dir: &Path, src: &str) -> std::path::PathBuf {
    let cpp = dir.join("emulation.cpp");
    std::fs::write(&cpp, src).unwrap();
    let exe = dir.join("emulation");
    // -O0: IEEE arithmetic on x86-64 (SSE) is the same at every level, and the generated
    // sources compile in a fifth of the time -O1 takes (the generate kernels: 2.6 s
    // against 14.9 s for the whole test)
    let out = Command::new("c++")
        .args(["-std=c++17", "-O0", "-ffp-contract=off", "-fno-fast-math"])
        .arg("-o")
        .arg(&exe)
        .arg(&cpp)
        .output()
        .expect("run c++");
    assert!(
        out.status.success(),
        "the kernels do not compile as host C++:\n{}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    );
    exe
}

#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_elementwise_kernel_matches_the_cpu_backend_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    let kernels = all_elementwise();
    let exe = compile(dir.path(), &runner(&kernels));
    let mut ins = std::collections::HashMap::new();
    for d in DType::ALL {
        let b = inputs(&backend, d);
        std::fs::write(dir.path().join(format!("in_{}.bin", d.name())), &b).unwrap();
        ins.insert(d, b);
    }
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated kernels failed: {st}");
    let mut bad = Vec::new();
    for &(k, i, o) in &kernels {
        let name = k.kernel_name(i, o);
        let got = std::fs::read(dir.path().join(format!("{name}.bin"))).unwrap();
        let x = &ins[&i];
        let want = cpu(&backend, k, x, i, o);
        assert_eq!(got.len(), want.len(), "{name}");
        for e in 0..want.len() / o.size() {
            let (g, gn) = element(&got, o, e);
            let (w, wn) = element(&want, o, e);
            if g != w && !(gn && wn) {
                let (xi, _) = element(x, i, e);
                bad.push(format!(
                    "{name}[{e}]: input bits {xi:#x}: kernel {g:#x}, CPU {w:#x}"
                ));
                break;
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} kernels differ from the CPU backend:\n{}",
        bad.len(),
        kernels.len(),
        bad.join("\n")
    );
}

/// Expressions covering every operator and function of `map` (the map oracle's list),
/// plus the zero-sign and NaN cases of min and max.
pub(crate) const EXPRESSIONS: &[&str] = &[
    "x * 2 + 1",
    "-x - y / 3",
    "x ** 2 - y ** 0.5",
    "x / y",
    "(x < y) + (x <= 1) * 2 + (x > 0) * 4 + (x >= y) * 8 + (x == 1) * 16 + (x != -1) * 32",
    "where(x > 0, x, y)",
    "abs(x) + sqrt(abs(y))",
    "exp(x / 4) - log(abs(y) + 1) + log1p(abs(x))",
    "log(x)",
    "sin(x) * cos(y) + tanh(x)",
    "floor(x) + ceil(x) * 10 + round(x) * 100",
    "isnan(x) + isnan(x / 0)",
    "min(x, y) * 1000 + max(x, y)",
    "min(x * 0, -y * 0)",
    "max(-x * 0, y * 0)",
    "clip(x, -1, 1)",
    // the form map's nodata masking compiles to
    "where((x == 0) + isnan(y), nan, x / y)",
    "fma(x, y, -x / 3)",
];

#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_fused_map_kernel_matches_the_cpu_backend_bit_for_bit() {
    use tilestream::backend::cuda::source::{map_kernel_name, map_source};
    use tilestream::ops::expr::{Program, parse};
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    // x: f32 edge values and a ramp through zero; y: f64 of its own
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.5,
        -2.5,
        f32::NAN,
        f32::INFINITY,
    ];
    xs.extend((0..2000).map(|i| (i as f32 - 1000.0) * 0.013));
    let mut ys: Vec<f64> = vec![
        -0.0,
        0.0,
        1.0,
        3.0,
        -2.5,
        2.5,
        0.0,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    ys.extend((0..2000).map(|i| ((i * 7919) % 2003) as f64 * 0.01 - 10.0));
    let n = xs.len();
    let (xb, yb): (&[u8], &[u8]) = (bytemuck::cast_slice(&xs), bytemuck::cast_slice(&ys));
    let ins = [DType::F32, DType::F64];
    let mut src = String::from(PRELUDE);
    let mut main = String::from(
        "#include <stdio.h>\nint main(int argc, char** argv) {\n    if (argc != 2) return 2;\n",
    );
    let _ = writeln!(
        main,
        "    static float x[{n}]; static double y[{n}]; static unsigned char out[{}];",
        n * 8
    );
    main.push_str(
        "    char p[4096]; snprintf(p, sizeof p, \"%s/x.bin\", argv[1]); FILE* f = fopen(p, \"rb\");\n    if (!f || fread(x, 1, sizeof x, f) != sizeof x) return 3; fclose(f);\n    snprintf(p, sizeof p, \"%s/y.bin\", argv[1]); f = fopen(p, \"rb\");\n    if (!f || fread(y, 1, sizeof y, f) != sizeof y) return 3; fclose(f);\n",
    );
    let mut cases = Vec::new();
    let mut first = true;
    for (k, e) in EXPRESSIONS.iter().enumerate() {
        let program = Program::compile(&parse(e).unwrap()).unwrap();
        // streams in order of first use: x first in every expression here
        assert_eq!(
            program.streams.len(),
            1 + usize::from(e.contains('y')),
            "{e}"
        );
        let dts = &ins[..program.streams.len()];
        for od in [DType::F64, DType::F32, DType::I16] {
            let name = map_kernel_name(&program, dts, od);
            let mut kernel = map_source(&name, &program, dts, od);
            if !first {
                // the common header once
                kernel = kernel[tilestream::backend::cuda::source::COMMON.len()..].to_string();
            }
            first = false;
            src.push_str(&kernel);
            let args = if dts.len() == 2 {
                "(const ts_f32*)x, (const ts_f64*)y"
            } else {
                "(const ts_f32*)x"
            };
            let _ = writeln!(
                main,
                "    {name}({args}, ({}*)out, {n}ull); snprintf(p, sizeof p, \"%s/{k}-{}.bin\", argv[1]); f = fopen(p, \"wb\"); fwrite(out, 1, {}, f); fclose(f);",
                tilestream::backend::cuda::source::cuda_type(od),
                od.name(),
                n * od.size()
            );
            cases.push((k, program.clone(), od));
        }
    }
    main.push_str("    return 0;\n}\n");
    src.push_str(&main);
    let exe = compile(dir.path(), &src);
    std::fs::write(dir.path().join("x.bin"), xb).unwrap();
    std::fs::write(dir.path().join("y.bin"), yb).unwrap();
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated map kernels failed: {st}");
    let mut bad = Vec::new();
    for (k, program, od) in cases {
        let got = std::fs::read(dir.path().join(format!("{k}-{}.bin", od.name()))).unwrap();
        let streams: Vec<&[u8]> = [xb, yb][..program.streams.len()].to_vec();
        let mut want = vec![0u8; n * od.size()];
        backend
            .map(&program, &streams, &ins[..streams.len()], &mut want, od)
            .unwrap();
        for e in 0..n {
            let (g, gn) = element(&got, od, e);
            let (w, wn) = element(&want, od, e);
            if g != w && !(gn && wn) {
                bad.push(format!(
                    "'{}' to {od}: element {e} (x = {:e}, y = {:e}): kernel {g:#x}, CPU {w:#x}",
                    EXPRESSIONS[k], xs[e], ys[e]
                ));
                break;
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The transpose kernels (`kernels/transpose.cu`), one per element size, on the host:
/// blocks at a column offset inside wider window rows, a single row, a single column and
/// a square, each compared byte for byte with the CPU backend's block transpose.
#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_transpose_kernel_matches_the_cpu_backend_bit_for_bit() {
    use tilestream::backend::cuda::source::{transpose_kernel_name, transpose_source};
    // (rows, cols, row_len, c0)
    let cases = [
        (70usize, 33usize, 50usize, 9usize),
        (1, 17, 17, 0),
        (23, 1, 5, 4),
        (64, 64, 64, 0),
    ];
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    let mut src = String::from(PRELUDE);
    src.push_str(&transpose_source());
    src.push_str(
        "int main(int argc, char** argv) {\n    if (argc != 2) return 2;\n    static unsigned char in[1 << 16], out[1 << 16]; char p[4096]; FILE* f;\n    for (int i = 0; i < (1 << 16); ++i) in[i] = (unsigned char)(i * 131 + (i >> 8) * 7);\n",
    );
    let mut runs = Vec::new();
    for es in [1usize, 2, 4, 8] {
        for (k, &(rows, cols, row_len, c0)) in cases.iter().enumerate() {
            let name = transpose_kernel_name(es);
            let bits = es * 8;
            let _ = writeln!(
                src,
                "    {name}((const ts_u{bits}*)in, (ts_u{bits}*)out, {row_len}ull, {c0}ull, {rows}ull, {cols}ull); snprintf(p, sizeof p, \"%s/t{es}-{k}.bin\", argv[1]); f = fopen(p, \"wb\"); fwrite(out, 1, {}, f); fclose(f);",
                rows * cols * es
            );
            runs.push((es, k));
        }
    }
    src.push_str("    return 0;\n}\n");
    let exe = compile(dir.path(), &src);
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated transpose kernels failed: {st}");
    let input: Vec<u8> = (0..1usize << 16)
        .map(|i| (i * 131 + (i >> 8) * 7) as u8)
        .collect();
    for (es, k) in runs {
        let (rows, cols, row_len, c0) = cases[k];
        let got = std::fs::read(dir.path().join(format!("t{es}-{k}.bin"))).unwrap();
        let mut want = vec![0u8; rows * cols * es];
        backend
            .transpose(
                &input[..rows * row_len * es],
                row_len,
                c0,
                rows,
                cols,
                es,
                &mut want,
            )
            .unwrap();
        assert!(
            got == want,
            "transpose of {es}-byte elements, {rows}x{cols} at column {c0} of rows of {row_len}: kernel differs from the CPU"
        );
    }
}

/// `gen`'s kernels (`kernels/generate.cu`) on the host, against the CPU backend byte for
/// byte: every distribution and output dtype, from an odd start; and the generator's two
/// numerical pieces over chosen arguments: `ts_ln` against `ln` (random doubles, values
/// next to powers of two, its short path) and `ts_normal_quantile` against
/// `normal_quantile` (the centre, both tails, the far tails below 1.4e-11).
#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_generate_kernel_matches_the_cpu_backend_bit_for_bit() {
    use tilestream::backend::cuda::source::{all_gen, gen_kernel_name, gen_source};
    use tilestream::ops::generate::{Dist, ln, normal_quantile};
    const START: u64 = 999_999_999_999;
    const N: usize = 60_001;
    const LAST: u64 = 13;
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(2)).unwrap();
    let kernels = all_gen();
    let dist = |name: &str| match name {
        "demo" => Dist::Demo,
        "normal" => Dist::Normal {
            mean: 0.25,
            std: 7.0,
        },
        _ => Dist::Uniform {
            low: -3.0,
            high: 300.0,
        },
    };
    let mut src = String::from(PRELUDE);
    src.push_str(&gen_source(&kernels));
    src.push_str(
        "static void save(const char* dir, const char* name, const void* b, unsigned long long n) {\n    char p[4096]; snprintf(p, sizeof p, \"%s/%s.bin\", dir, name);\n    FILE* f = fopen(p, \"wb\"); if (!f || fwrite(b, 1, n, f) != n) exit(1); fclose(f);\n}\n",
    );
    let _ = writeln!(
        src,
        "int main(int argc, char** argv) {{\n    if (argc != 2) return 2;\n    static unsigned char y[{N} * 8];"
    );
    for &(d, o) in &kernels {
        let name = gen_kernel_name(d, o);
        let (a, b) = tilestream::backend::cuda::source::gen_params(&dist(d));
        let _ = writeln!(
            src,
            "    {name}(({t}*)y, {N}ull, {START}ull, 77ull, {LAST}ull, {a:e}, {b:e}); save(argv[1], \"{name}\", y, {N} * sizeof({t}));",
            t = tilestream::backend::cuda::source::cuda_type(o),
        );
    }
    // the numerical pieces over chosen arguments
    let mut xs: Vec<f64> = vec![2f64.powi(-10) * (1.0 + 2f64.powi(-40)), 0.5, 0.075, 1e-300];
    let mut ps: Vec<f64> = vec![1e-300, 1e-12, 1.4e-11, 2f64.powi(-53), 0.075, 0.0749, 0.5];
    let mut s = 7u64;
    for i in 0..20_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let u = (s >> 11) as f64 / 9_007_199_254_740_992.0;
        xs.push(if i % 2 == 0 {
            f64::from_bits((s >> 2) % 0x7fd0_0000_0000_0000 + (1 << 52))
        } else {
            2f64.powi((s % 200) as i32 - 100) * (1.0 + u * 1e-6)
        });
        ps.push(match i % 3 {
            0 => u.max(1e-300),
            1 => u * 1e-9 + 1e-300,
            _ => 1.0 - u * 0.07,
        });
    }
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("__longlong_as_double({:#x}ll)", x.to_bits()))
            .collect::<Vec<_>>()
            .join(",")
    };
    let _ = writeln!(
        src,
        "    static const double xs[] = {{{}}}; static double lx[{}];\n    for (unsigned i = 0; i < {}; ++i) lx[i] = ts_ln(xs[i]);\n    save(argv[1], \"ln\", lx, sizeof lx);",
        list(&xs),
        xs.len(),
        xs.len()
    );
    let _ = writeln!(
        src,
        "    static const double ps[] = {{{}}}; static double qx[{}];\n    for (unsigned i = 0; i < {}; ++i) qx[i] = ts_normal_quantile(ps[i]);\n    save(argv[1], \"quantile\", qx, sizeof qx);",
        list(&ps),
        ps.len(),
        ps.len()
    );
    src.push_str("    return 0;\n}\n");
    let exe = compile(dir.path(), &src);
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated gen kernels failed: {st}");
    for &(d, o) in &kernels {
        let name = gen_kernel_name(d, o);
        let got = std::fs::read(dir.path().join(format!("{name}.bin"))).unwrap();
        let mut want = vec![0u8; N * o.size()];
        backend
            .generate(&mut want, o, START, LAST, 77, dist(d))
            .unwrap();
        assert!(
            got == want,
            "{name}: the kernel's bytes differ from the CPU's"
        );
    }
    let read = |name: &str| -> Vec<f64> {
        std::fs::read(dir.path().join(format!("{name}.bin")))
            .unwrap()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    for (x, got) in xs.iter().zip(read("ln")) {
        assert_eq!(got.to_bits(), ln(*x).to_bits(), "ts_ln({x:e})");
    }
    for (p, got) in ps.iter().zip(read("quantile")) {
        assert_eq!(
            got.to_bits(),
            normal_quantile(*p).to_bits(),
            "ts_normal_quantile({p:e})"
        );
    }
}

/// Expressions over complex values (`x` complex64, `y` complex128): every operation
/// complex values take, as the compiler lowers it to real instructions.
pub(crate) const COMPLEX_EXPRESSIONS: &[&str] = &[
    "x * y + x / y - 2j",
    "-x / 3 + conj(y) * 1.5",
    "abs(x) + abs(y) * 2",
    "(x < y) + (x <= y) * 2 + (x > y) * 4 + (x >= y) * 8 + (x == y) * 16 + (x != y) * 32",
    "min(x, y) + max(y, x)",
    "clip(x, y, 1 + 1j) - clip(y, -1j, x)",
    "where(x, y, 1j) + isnan(y)",
    "real(x) * imag(y) + angle(x)",
    "complex(abs(x), real(y))",
];

/// The fused `map` kernels of complex expressions (complex inputs read as parts, complex
/// outputs written as parts), on the host, byte for byte against the CPU backend.
#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_complex_map_kernel_matches_the_cpu_backend_bit_for_bit() {
    use tilestream::backend::cuda::source::{COMMON, cuda_type, map_kernel_name, map_source};
    use tilestream::ops::expr::{Program, parse};
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    let special = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    // every pair of special parts, then a ramp
    let mut parts: Vec<f64> = Vec::new();
    for &r in &special {
        for &i in &special {
            parts.extend([r, i]);
        }
    }
    parts.extend((0..3000).map(|i| ((i * 7919) % 3001) as f64 * 0.013 - 19.0));
    let n = parts.len() / 2;
    let xs: Vec<f32> = parts.iter().map(|&v| v as f32).collect();
    let ys: Vec<f64> = parts.iter().rev().copied().collect();
    let (xb, yb): (&[u8], &[u8]) = (bytemuck::cast_slice(&xs), bytemuck::cast_slice(&ys));
    let ins = [DType::C64, DType::C128];
    let mut src = String::from(PRELUDE);
    src.push_str(COMMON);
    let mut main = complex_main(n, "unsigned char", n * 16);
    let mut cases = Vec::new();
    for (k, e) in COMPLEX_EXPRESSIONS.iter().enumerate() {
        let program = Program::compile_typed(&parse(e).unwrap(), |_| true).unwrap();
        assert_eq!(program.streams.len(), 2, "{e}");
        assert_eq!(program.streams[0].name, "x", "{e}");
        let outs = if program.is_complex() {
            [DType::C128, DType::C64]
        } else {
            [DType::F64, DType::F32]
        };
        for od in outs {
            let name = map_kernel_name(&program, &ins, od);
            let kernel = map_source(&name, &program, &ins, od);
            src.push_str(&kernel[COMMON.len()..]);
            let _ = writeln!(
                main,
                "    {name}((const ts_f32*)x, (const ts_f64*)y, ({}*)out, {n}ull); snprintf(p, sizeof p, \"%s/{k}-{}.bin\", argv[1]); f = fopen(p, \"wb\"); fwrite(out, 1, {}, f); fclose(f);",
                cuda_type(od.part()),
                od.name(),
                n * od.size()
            );
            cases.push((k, program.clone(), od));
        }
    }
    main.push_str("    return 0;\n}\n");
    src.push_str(&main);
    let exe = compile(dir.path(), &src);
    std::fs::write(dir.path().join("x.bin"), xb).unwrap();
    std::fs::write(dir.path().join("y.bin"), yb).unwrap();
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(
        st.success(),
        "the emulated complex map kernels failed: {st}"
    );
    let mut bad = Vec::new();
    for (k, program, od) in cases {
        let got = std::fs::read(dir.path().join(format!("{k}-{}.bin", od.name()))).unwrap();
        let mut want = vec![0u8; n * od.size()];
        backend
            .map(&program, &[xb, yb], &ins, &mut want, od)
            .unwrap();
        // a complex output compared part by part
        let (pd, count) = if od.is_complex() {
            (od.part(), 2 * n)
        } else {
            (od, n)
        };
        for e in 0..count {
            let (g, gn) = element(&got, pd, e);
            let (w, wn) = element(&want, pd, e);
            // atan2 is the math library's: the host's here, the same as the CPU's
            if g != w && !(gn && wn) {
                bad.push(format!(
                    "'{}' to {od}: part {e}: kernel {g:#x}, CPU {w:#x}",
                    COMPLEX_EXPRESSIONS[k]
                ));
                break;
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The start of the host program of the complex kernels: `x` (`n` complex64 values) and
/// `y` (`n` complex128) read from `x.bin` and `y.bin` in the directory its argument
/// names, `out` an array of `len` elements of type `out`.
fn complex_main(n: usize, out: &str, len: usize) -> String {
    let mut main = String::from(
        "#include <stdio.h>\nint main(int argc, char** argv) {\n    if (argc != 2) return 2;\n",
    );
    let _ = writeln!(
        main,
        "    static float x[{}]; static double y[{}]; static {out} out[{len}];",
        2 * n,
        2 * n,
    );
    main.push_str(
        "    char p[4096]; snprintf(p, sizeof p, \"%s/x.bin\", argv[1]); FILE* f = fopen(p, \"rb\");\n    if (!f || fread(x, 1, sizeof x, f) != sizeof x) return 3; fclose(f);\n    snprintf(p, sizeof p, \"%s/y.bin\", argv[1]); f = fopen(p, \"rb\");\n    if (!f || fread(y, 1, sizeof y, f) != sizeof y) return 3; fclose(f);\n",
    );
    main
}

/// Complex functions of `map` (`x` complex64, `y` complex128): the device's are
/// `kernels/cmath.cuh`, written from textbook algorithms; the CPU's are the C library's,
/// as numpy's.
pub(crate) const COMPLEX_FUNCTIONS: &[&str] = &[
    "sqrt(x) + 0 * y",
    "sqrt(y) + 0 * x",
    "exp(y) + 0 * x",
    "log(y) + 0 * x",
    "log1p(y) + 0 * x",
    "sin(y) + 0 * x",
    "cos(y) + 0 * x",
    "tanh(y) + 0 * x",
    "y ** 3 + 0 * x",
    "y ** -5 + 0 * x",
    "y ** x",
    "x ** 2.5 + 0 * y",
];

/// The complex functions of fused `map` kernels on the host against the CPU backend
/// (the C library's `csqrt` and the others): at infinities, NaN, zeros of both signs and
/// arguments whose intermediate results overflow, the same values (NaN for NaN, zeros
/// and infinities with their signs); elsewhere within 3 units in the last place of the
/// result's larger part (numpy's `log1p`, the same formula on both, exactly).
#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn complex_functions_on_the_device_match_the_c_library() {
    use tilestream::backend::cuda::source::{CMATH, COMMON, map_kernel_name, map_source};
    use tilestream::ops::expr::{Program, parse};
    let dir = tempfile::tempdir().unwrap();
    let backend = CpuBackend::new(Some(1)).unwrap();
    let special = [
        0.0,
        -0.0,
        1.0,
        -2.5,
        0.75,
        710.5,
        -800.0,
        1e-310,
        -1.5e308,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    // every pair of special parts, then parts over 30 orders of magnitude, then points
    // near the unit circle and small integers (powers' exponents)
    let mut parts: Vec<f64> = Vec::new();
    for &r in &special {
        for &i in &special {
            parts.extend([r, i]);
        }
    }
    let mut s = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    for _ in 0..3000 {
        let m = (next() * 60.0 - 30.0).exp2() * if next() < 0.5 { -1.0 } else { 1.0 };
        parts.push(m);
    }
    for k in 0..500 {
        let t = k as f64 * 0.0125;
        parts.extend([t.cos() * (1.0 + 1e-9 * next()), t.sin()]);
    }
    for k in 0..100 {
        parts.extend([f64::from(k % 9) - 4.0, if k % 3 == 0 { 0.0 } else { 0.5 }]);
    }
    let n = parts.len() / 2;
    let xs: Vec<f32> = parts.iter().rev().map(|&v| v as f32).collect();
    let ys = parts;
    let (xb, yb): (&[u8], &[u8]) = (bytemuck::cast_slice(&xs), bytemuck::cast_slice(&ys));
    let mut src = String::from(PRELUDE);
    src.push_str(COMMON);
    src.push_str(CMATH);
    let mut main = complex_main(n, "double", 2 * n);
    let mut programs = Vec::new();
    for (k, e) in COMPLEX_FUNCTIONS.iter().enumerate() {
        let program = Program::compile_typed(&parse(e).unwrap(), |_| true).unwrap();
        assert_eq!(program.streams.len(), 2, "{e}");
        let ins = if program.streams[0].name == "x" {
            [DType::C64, DType::C128]
        } else {
            [DType::C128, DType::C64]
        };
        let name = map_kernel_name(&program, &ins, DType::C128);
        let kernel = map_source(&name, &program, &ins, DType::C128);
        let body = kernel
            .strip_prefix(COMMON)
            .and_then(|k| k.strip_prefix(CMATH))
            .expect("a complex function's kernel has the complex header after the common one");
        src.push_str(body);
        let args = if ins[0] == DType::C64 {
            "(const ts_f32*)x, (const ts_f64*)y"
        } else {
            "(const ts_f64*)y, (const ts_f32*)x"
        };
        let _ = writeln!(
            main,
            "    {name}({args}, (ts_f64*)out, {n}ull); snprintf(p, sizeof p, \"%s/{k}.bin\", argv[1]); f = fopen(p, \"wb\"); fwrite(out, 1, sizeof out, f); fclose(f);"
        );
        programs.push((program, ins));
    }
    main.push_str("    return 0;\n}\n");
    src.push_str(&main);
    let exe = compile(dir.path(), &src);
    std::fs::write(dir.path().join("x.bin"), xb).unwrap();
    std::fs::write(dir.path().join("y.bin"), yb).unwrap();
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated complex functions failed: {st}");
    let mut bad = Vec::new();
    let mut worst = vec![0.0f64; programs.len()];
    for (k, (program, ins)) in programs.iter().enumerate() {
        let got: Vec<f64> = std::fs::read(dir.path().join(format!("{k}.bin")))
            .unwrap()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let streams: Vec<&[u8]> = if ins[0] == DType::C64 {
            vec![xb, yb]
        } else {
            vec![yb, xb]
        };
        let mut want = vec![0u8; n * 16];
        backend
            .map(program, &streams, ins, &mut want, DType::C128)
            .unwrap();
        let want: Vec<f64> = want
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let power = COMPLEX_FUNCTIONS[k].contains("**");
        for e in 0..n {
            let (g, w) = ([got[2 * e], got[2 * e + 1]], [want[2 * e], want[2 * e + 1]]);
            let scale = w[0].abs().max(w[1].abs());
            // a ** b = exp(b log a) carries log a's rounding times |b|: its condition
            // number, 1 + |b| |log a|, scales the tolerance (any two implementations
            // differ by that much)
            let condition = if power {
                let (a, b) = base_and_exponent(COMPLEX_FUNCTIONS[k], &xs, &ys, e);
                1.0 + a.0.hypot(a.1).ln().abs().max(std::f64::consts::PI) * b.0.hypot(b.1)
            } else {
                1.0
            };
            let ulp = if scale.is_finite() && scale > 0.0 && condition.is_finite() {
                // units in the last place of the larger part (at least the smallest
                // normal's, for results that are subnormal)
                (scale * f64::EPSILON).max(f64::MIN_POSITIVE * f64::EPSILON) * condition
            } else {
                0.0
            };
            for p in 0..2 {
                let same = if w[p].is_nan() {
                    g[p].is_nan()
                } else if w[p].is_infinite() || w[p] == 0.0 || ulp == 0.0 {
                    g[p].to_bits() == w[p].to_bits()
                } else {
                    let d = (g[p] - w[p]).abs() / ulp;
                    worst[k] = worst[k].max(d);
                    d <= 3.0
                };
                if !same && bad.len() < 20 {
                    bad.push(format!(
                        "'{}': element {e} ({:e}, {:e}) and ({:e}, {:e}): part {p}: kernel {:e}, CPU {:e}",
                        COMPLEX_FUNCTIONS[k],
                        f64::from(xs[2 * e]),
                        f64::from(xs[2 * e + 1]),
                        ys[2 * e],
                        ys[2 * e + 1],
                        g[p],
                        w[p]
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // numpy's log1p is the same formula on the same math library here
    assert!(worst[4] == 0.0, "log1p differs: {} ulp", worst[4]);
    eprintln!("largest differences, in ulp: {worst:?}");
}

/// The base and exponent of element `e` of one of [`COMPLEX_FUNCTIONS`]' powers.
fn base_and_exponent(expr: &str, xs: &[f32], ys: &[f64], e: usize) -> ((f64, f64), (f64, f64)) {
    let x = (f64::from(xs[2 * e]), f64::from(xs[2 * e + 1]));
    let y = (ys[2 * e], ys[2 * e + 1]);
    match expr {
        "y ** x" => (y, x),
        "y ** 3 + 0 * x" => (y, (3.0, 0.0)),
        "y ** -5 + 0 * x" => (y, (5.0, 0.0)),
        "x ** 2.5 + 0 * y" => (x, (2.5, 0.0)),
        _ => unreachable!("{expr} is not a power"),
    }
}
