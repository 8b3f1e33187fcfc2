//! The CUDA matmul kernels (`kernels/matmul.cu`), every one the engine can ask for (X of
//! each dtype, each compute type chosen for it, to each output dtype), compiled as host
//! C++ (`TS_HOST_EMULATION`, see `cuda_emulation.rs`) and run over edge values and random
//! data. Each output is compared bit for bit with an oracle written here: X widened to
//! the compute type, one `mul_add` chain over k in ascending order from +0, the result
//! cast by the CPU backend's own cast. The CPU backend's blocked sgemm/dgemm sums in
//! another order, so on finite data it is compared with the same oracle to rounding: the
//! two devices compute the same product, not the same bits.

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::process::Command;

use tilestream::backend::cuda::source::{all_matmul, matmul_kernel_name, matmul_source};
use tilestream::ops::matmul::Resident;
use tilestream::{Backend, CpuBackend, DType};

use crate::common::Lcg;
use crate::cuda_emulation::{PRELUDE, compile, element};

const ROWS: usize = 40;
const K: usize = 7;
const N: usize = 3;

/// X for dtype `d`: edge values (NaN, infinities, limits, values that round) in the first
/// rows, then values in [-100, 100) cast to `d`.
fn x_values(cpu: &CpuBackend, d: DType) -> Vec<u8> {
    let mut v: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        65504.0,
        65520.0,
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        1e-40,
        3.5e38,
        1e300,
        -1e300,
        2f64.powi(31),
        2f64.powi(63),
        1.8e19,
        (1u64 << 53) as f64 + 2.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
    ];
    let mut rng = Lcg(0x5eed ^ d.size() as u64);
    while v.len() < ROWS * K {
        v.push((rng.f64() * 200.0 - 100.0).round() + if d.is_float() { rng.f64() } else { 0.0 });
    }
    let mut b = vec![0u8; v.len() * d.size()];
    cpu.cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
        .unwrap();
    b
}

/// W (K x N) in the compute type: finite values with fractions.
fn w_values(c: DType) -> Vec<u8> {
    let mut rng = Lcg(77);
    let v: Vec<f64> = (0..K * N).map(|_| rng.f64() * 4.0 - 2.0).collect();
    let mut b = vec![0u8; v.len() * c.size()];
    CpuBackend::new(Some(1))
        .unwrap()
        .cast(bytemuck::cast_slice(&v), DType::F64, &mut b, c)
        .unwrap();
    b
}

/// The oracle: one `mul_add` chain per output in the compute type, then the CPU's cast.
fn oracle(cpu: &CpuBackend, x: &[u8], xd: DType, w: &[u8], c: DType, od: DType) -> Vec<u8> {
    let mut xs = vec![0u8; ROWS * K * 8];
    cpu.cast(x, xd, &mut xs, DType::F64).unwrap();
    let xs: Vec<f64> = bytemuck::pod_collect_to_vec(&xs);
    let mut acc_bytes = Vec::with_capacity(ROWS * N * c.size());
    for r in 0..ROWS {
        for j in 0..N {
            if c == DType::F32 {
                let ws: Vec<f32> = bytemuck::pod_collect_to_vec(w);
                let mut acc = 0f32;
                for p in 0..K {
                    // exact: X is chosen for f32 compute only when exact in f32
                    acc = (xs[r * K + p] as f32).mul_add(ws[p * N + j], acc);
                }
                acc_bytes.extend_from_slice(&acc.to_le_bytes());
            } else {
                let ws: Vec<f64> = bytemuck::pod_collect_to_vec(w);
                let mut acc = 0f64;
                for p in 0..K {
                    acc = xs[r * K + p].mul_add(ws[p * N + j], acc);
                }
                acc_bytes.extend_from_slice(&acc.to_le_bytes());
            }
        }
    }
    let mut out = vec![0u8; ROWS * N * od.size()];
    cpu.cast(&acc_bytes, c, &mut out, od).unwrap();
    out
}

fn runner(kernels: &[(DType, DType, DType)]) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str(&matmul_source(kernels));
    s.push_str(
        r#"
static const char* DIR;
static void* load(const char* name) {
    char p[4096]; snprintf(p, sizeof p, "%s/%s.bin", DIR, name);
    FILE* f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); long b = ftell(f); fseek(f, 0, SEEK_SET);
    void* m = malloc(b + 8); if (fread(m, 1, b, f) != (size_t)b) exit(1); fclose(f); return m;
}
static void save(const char* name, const void* b, unsigned long long bytes) {
    char p[4096]; snprintf(p, sizeof p, "%s/%s.bin", DIR, name);
    FILE* f = fopen(p, "wb"); if (!f || fwrite(b, 1, bytes, f) != bytes) exit(1); fclose(f);
}
int main(int argc, char** argv) {
    if (argc != 2) return 2;
    DIR = argv[1];
    static unsigned char y[4096];
"#,
    );
    for &(x, c, o) in kernels {
        let name = matmul_kernel_name(x, c, o);
        let _ = writeln!(
            s,
            "    {name}((const ts_{x}*)load(\"x_{x}\"), (ts_{o}*)y, {ROWS}ull, (const ts_{c}*)load(\"w_{c}\"), {K}ull, {N}ull); save(\"{name}\", y, {});",
            ROWS * N * o.size(),
            x = x.name(),
            c = c.name(),
            o = o.name(),
        );
    }
    s.push_str("    return 0;\n}\n");
    s
}

#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_matmul_kernel_matches_its_fma_chain_oracle_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let kernels = all_matmul();
    let exe = compile(dir.path(), &runner(&kernels));
    for d in DType::ALL {
        std::fs::write(
            dir.path().join(format!("x_{}.bin", d.name())),
            x_values(&cpu, d),
        )
        .unwrap();
    }
    for c in [DType::F32, DType::F64] {
        std::fs::write(dir.path().join(format!("w_{}.bin", c.name())), w_values(c)).unwrap();
    }
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated matmul kernels failed: {st}");
    let mut bad = Vec::new();
    for &(x, c, o) in &kernels {
        let name = matmul_kernel_name(x, c, o);
        let got = std::fs::read(dir.path().join(format!("{name}.bin"))).unwrap();
        let want = oracle(&cpu, &x_values(&cpu, x), x, &w_values(c), c, o);
        assert_eq!(got.len(), want.len(), "{name}");
        for e in 0..ROWS * N {
            let (g, gn) = element(&got, o, e);
            let (w, wn) = element(&want, o, e);
            if g != w && !(gn && wn) {
                bad.push(format!("{name}[{e}]: kernel {g:#x}, oracle {w:#x}"));
                break;
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} matmul kernels differ from the oracle:\n{}",
        bad.len(),
        kernels.len(),
        bad.join("\n")
    );
}

/// The CPU backend computes the same product as the kernels' order of operations, to
/// rounding: on finite rows, within a few units in the last place of the sum of |terms|.
#[test]
fn the_cpu_backend_agrees_with_the_kernels_order_to_rounding() {
    let cpu = CpuBackend::new(Some(1)).unwrap();
    for (x, c) in [
        (DType::F32, DType::F32),
        (DType::U16, DType::F32),
        (DType::F64, DType::F64),
        (DType::I32, DType::F64),
    ] {
        let xb = x_values(&cpu, x);
        let wb = w_values(c);
        let want = oracle(&cpu, &xb, x, &wb, c, DType::F64);
        let want: Vec<f64> = bytemuck::pod_collect_to_vec(&want);
        let mut got = vec![0u8; ROWS * N * 8];
        cpu.matmul(
            &xb,
            x,
            &Resident::new(&wb, c, c),
            K,
            N,
            &mut got,
            DType::F64,
        )
        .unwrap();
        let got: Vec<f64> = bytemuck::pod_collect_to_vec(&got);
        let mut xs = vec![0u8; ROWS * K * 8];
        cpu.cast(&xb, x, &mut xs, DType::F64).unwrap();
        let xs: Vec<f64> = bytemuck::pod_collect_to_vec(&xs);
        let ws: Vec<f64> = {
            let mut b = vec![0u8; K * N * 8];
            cpu.cast(&wb, c, &mut b, DType::F64).unwrap();
            bytemuck::pod_collect_to_vec(&b)
        };
        let eps = if c == DType::F32 {
            f64::from(f32::EPSILON)
        } else {
            f64::EPSILON
        };
        let mut compared = 0;
        for r in 0..ROWS {
            let row = &xs[r * K..(r + 1) * K];
            if row.iter().any(|v| !v.is_finite() || v.abs() > 1e6) {
                continue;
            }
            for j in 0..N {
                let scale: f64 = (0..K).map(|p| (row[p] * ws[p * N + j]).abs()).sum();
                let (g, w) = (got[r * N + j], want[r * N + j]);
                assert!(
                    (g - w).abs() <= 4.0 * K as f64 * eps * scale.max(f64::MIN_POSITIVE),
                    "{x} with {c} compute, [{r},{j}]: CPU {g}, kernels' order {w}"
                );
                compared += 1;
            }
        }
        assert!(
            compared >= (ROWS - 4) * N,
            "{x}: only {compared} outputs compared"
        );
    }
}
