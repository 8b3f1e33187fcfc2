//! The CUDA filters (`kernels/stencil.cu`) run on the host exactly as the CUDA runtime
//! runs them: for every tile of a plan, the padded box gathered by the CPU's own code,
//! then the launches `StencilProgram::launches` lists, in order, on buffers of the
//! sizes the runtime allocates, compiled as host C++ (`TS_HOST_EMULATION`, see
//! `cuda_emulation.rs`). Each tile's output is compared byte for byte with the CPU
//! backend's run of the same filter at the same budget: every filter kind (separable in
//! both pass orders, Sobel's magnitude, dense, medians of odd and even sizes), every
//! boundary mode, f32 and f64 arithmetic, integer and float outputs, tiles inside the
//! image and at its edges.

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::process::Command;

use tilestream::scheduler::Layout;
use tilestream::spec::stencil::cpu::gather;
use tilestream::spec::stencil::cuda::{Buf, StencilProgram, Val, stencil_source};
use tilestream::spec::stencil::{Filter, Stencil, TileJob};
use tilestream::tiling::Boundary;
use tilestream::{DType, Engine, MemoryBudget, TensorFile};

use crate::common::{Lcg, read_npy_data, write_npy};
use crate::cuda_emulation::{PRELUDE, compile};

struct Case {
    filter: Filter,
    boundary: Boundary,
    input: DType,
    output: DType,
    shape: Vec<usize>,
    budget: u64,
}

fn cases() -> Vec<Case> {
    let f = |s: &str| Filter::parse(s, |_| unreachable!()).unwrap();
    let case = |filter, boundary, input, output, shape: &[usize], budget| Case {
        filter,
        boundary,
        input,
        output,
        shape: shape.to_vec(),
        budget,
    };
    vec![
        case(
            f("gaussian:sigma=1.5"),
            Boundary::Reflect,
            DType::F32,
            DType::F32,
            &[67, 45],
            48 << 10,
        ),
        case(
            f("box:size=4"),
            Boundary::Constant(2.5),
            DType::U16,
            DType::U8,
            &[41, 53],
            40 << 10,
        ),
        case(
            f("sobel"),
            Boundary::Nearest,
            DType::I16,
            DType::F32,
            &[39, 40],
            48 << 10,
        ),
        case(
            f("sobel:axis=1"),
            Boundary::Constant(-3.0),
            DType::F32,
            DType::F16,
            &[33, 47],
            40 << 10,
        ),
        case(
            f("sobel:axis=0"),
            Boundary::Wrap,
            DType::U8,
            DType::I16,
            &[2, 31, 19],
            40 << 10,
        ),
        case(
            f("median:size=3"),
            Boundary::Reflect,
            DType::U8,
            DType::U8,
            &[45, 38],
            40 << 10,
        ),
        case(
            f("median:size=4"),
            Boundary::Constant(7.0),
            DType::F64,
            DType::F64,
            &[29, 31],
            64 << 10,
        ),
        case(
            f("median:size=7"),
            Boundary::Nearest,
            DType::F32,
            DType::F32,
            &[30, 27],
            64 << 10,
        ),
        case(
            f("gaussian:sigma=1"),
            Boundary::Wrap,
            DType::I32,
            DType::F64,
            &[35, 33],
            64 << 10,
        ),
        case(
            Filter::Convolve {
                weights: vec![1.0, -2.0, 0.5, 0.25, 3.0, -1.0],
                rows: 2,
                cols: 3,
            },
            Boundary::Constant(1.0),
            DType::F32,
            DType::I32,
            &[37, 41],
            40 << 10,
        ),
    ]
}

/// Values with fractions (floats) or spanning the type (integers), some NaNs in floats.
fn image(d: DType, n: usize, seed: u64) -> Vec<u8> {
    use tilestream::{Backend, CpuBackend};
    let mut rng = Lcg(seed);
    let v: Vec<f64> = (0..n)
        .map(|i| {
            if d.is_float() && i % 97 == 13 {
                f64::NAN
            } else if d.is_float() {
                rng.f64() * 200.0 - 100.0
            } else {
                (rng.f64() * 250.0).floor() - if d.is_unsigned() { 0.0 } else { 120.0 }
            }
        })
        .collect();
    let mut b = vec![0u8; n * d.size()];
    CpuBackend::new(Some(1))
        .unwrap()
        .cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
        .unwrap();
    b
}

fn scalar(v: Val) -> String {
    match v {
        Val::U64(x) => format!("{x}ull"),
        Val::I64(x) => format!("(long long){x}ll"),
        Val::F64(x) => format!("__longlong_as_double({}ll)", x.to_bits() as i64),
    }
}

#[test]
#[cfg_attr(
    not(tilestream_cxx),
    ignore = "needs a C++ compiler with _Float16 (g++ 12 or later) as `c++` when the tests are built"
)]
fn every_filter_kind_matches_the_cpu_backend_bit_for_bit_tile_by_tile() {
    let dir = tempfile::tempdir().unwrap();
    let mut names: Vec<String> = Vec::new();
    let mut main = String::from(
        r#"
struct AnyPtr { void* p; template <class T> operator T*() const { return (T*)p; } };
static const char* DIR;
static void* load(const char* name, unsigned long long bytes) {
    char p[4096]; snprintf(p, sizeof p, "%s/%s", DIR, name);
    void* m = calloc(bytes + 64, 1); FILE* f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    size_t got = fread(m, 1, bytes, f); (void)got; fclose(f); return m;
}
static void save(const char* name, const void* b, unsigned long long bytes) {
    char p[4096]; snprintf(p, sizeof p, "%s/%s", DIR, name);
    FILE* f = fopen(p, "wb"); if (!f || fwrite(b, 1, bytes, f) != bytes) exit(1); fclose(f);
}
int main(int argc, char** argv) {
    if (argc != 2) return 2;
    DIR = argv[1];
"#,
    );
    // (case, tile index, tile, CPU output of the case)
    let mut checks = Vec::new();
    for (c, case) in cases().iter().enumerate() {
        let stencil = Stencil::new(case.filter.clone(), case.boundary).unwrap();
        let n: usize = case.shape.iter().product();
        let path = dir.path().join(format!("x{c}.npy"));
        write_npy(
            &path,
            case.input,
            &case.shape,
            &image(case.input, n, 5 + c as u64),
        );
        let x = TensorFile::open(&path).unwrap();
        // the budget lowered until the image is cut into at least 4 tiles
        let mut budget = case.budget;
        let (engine, plan) = loop {
            let engine = Engine::new(MemoryBudget::new(budget)).unwrap();
            let plan = engine
                .plan_stencil(&x, &stencil, Some(case.output))
                .unwrap();
            if plan.num_tiles >= 4 {
                break (engine, plan);
            }
            budget = budget * 7 / 8;
        };
        let out = dir.path().join(format!("y{c}.npy"));
        engine
            .stencil(&x, &out, &stencil, Some(case.output))
            .unwrap();
        let want = read_npy_data(&out);
        let program = StencilProgram::new(&stencil, &plan, case.input, case.output).unwrap();
        names.extend(program.kernels());
        let fsz = program.float.size();
        let (padded, pass, tile) = program.buffer_elems(plan.tile);
        for (k, w) in program.weights.iter().enumerate() {
            let bytes: Vec<u8> = if fsz == 8 {
                bytemuck::cast_slice(w).to_vec()
            } else {
                let v: Vec<f32> = w.iter().map(|&x| x as f32).collect();
                bytemuck::cast_slice(&v).to_vec()
            };
            std::fs::write(dir.path().join(format!("w{c}-{k}.bin")), bytes).unwrap();
        }
        let _ = writeln!(
            main,
            "    {{ void* pass = calloc({}, 1); void* ta = calloc({}, 1); void* tb = calloc({}, 1); void* out = calloc({}, 1);",
            pass * fsz + 64,
            tile * fsz + 64,
            tile * fsz + 64,
            tile * case.output.size() + 64
        );
        for (k, w) in program.weights.iter().enumerate() {
            let _ = writeln!(
                main,
                "    void* w{k} = load(\"w{c}-{k}.bin\", {});",
                w.len() * fsz
            );
        }
        for i in 0..plan.num_tiles {
            let t = plan.tile(i);
            let mut reads = Vec::new();
            plan.reads(&t, &mut reads);
            let windows: Vec<_> = reads
                .iter()
                .map(|r| x.map_window_touch(r.start, r.len, r.touch).unwrap())
                .collect();
            let slices: Vec<&[u8]> = windows
                .iter()
                .map(tilestream::format::Window::bytes)
                .collect();
            let job = TileJob {
                stencil: &stencil,
                plan: &plan,
                tile: &t,
                windows: &slices,
                in_dtype: case.input,
                out_dtype: case.output,
            };
            let pw = t.cols() + plan.halo_cols.total();
            let ph = t.rows() + plan.halo_rows.total();
            let bytes: Vec<u8> = if fsz == 8 {
                let mut p = vec![0f64; ph * pw];
                gather::<f64>(&job, &mut p, pw).unwrap();
                bytemuck::cast_slice(&p).to_vec()
            } else {
                let mut p = vec![0f32; ph * pw];
                gather::<f32>(&job, &mut p, pw).unwrap();
                bytemuck::cast_slice(&p).to_vec()
            };
            assert!(bytes.len() <= padded * fsz);
            std::fs::write(dir.path().join(format!("p{c}-{i}.bin")), &bytes).unwrap();
            let _ = writeln!(
                main,
                "    {{ void* padded = load(\"p{c}-{i}.bin\", {});",
                bytes.len()
            );
            for l in program.launches(&t) {
                let mut args: Vec<String> = l
                    .bufs
                    .iter()
                    .map(|b| {
                        let v = match b {
                            Buf::Padded => "padded".to_string(),
                            Buf::Pass => "pass".into(),
                            Buf::TileA => "ta".into(),
                            Buf::TileB => "tb".into(),
                            Buf::Out => "out".into(),
                            Buf::Weights(k) => format!("w{k}"),
                        };
                        format!("AnyPtr{{{v}}}")
                    })
                    .collect();
                args.extend(l.args.iter().map(|&v| scalar(v)));
                let _ = writeln!(main, "      {}({});", l.kernel, args.join(", "));
            }
            let _ = writeln!(
                main,
                "      save(\"o{c}-{i}.bin\", out, {}); free(padded); }}",
                t.rows() * t.cols() * case.output.size()
            );
            checks.push((c, i, t, case.shape.clone(), case.output, want.clone()));
        }
        main.push_str("    }\n");
    }
    main.push_str("    return 0;\n}\n");
    names.sort();
    names.dedup();
    let mut src = String::from(PRELUDE);
    src.push_str(&stencil_source(&names));
    src.push_str(&main);
    let exe = compile(dir.path(), &src);
    let st = Command::new(&exe).arg(dir.path()).status().unwrap();
    assert!(st.success(), "the emulated stencil kernels failed: {st}");
    let mut bad = Vec::new();
    for (c, i, t, shape, od, want) in checks {
        let got = std::fs::read(dir.path().join(format!("o{c}-{i}.bin"))).unwrap();
        let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let es = od.size();
        let (r0, c0) = (t.r0 as usize, t.c0 as usize);
        for r in 0..t.rows() {
            let at = ((t.band * h + r0 + r) * w + c0) * es;
            let want_row = &want[at..at + t.cols() * es];
            let got_row = &got[r * t.cols() * es..(r + 1) * t.cols() * es];
            if want_row != got_row {
                bad.push(format!(
                    "case {c} ({:?}), tile {i} at ({r0}, {c0}) band {}: row {r} differs",
                    cases()[c].filter,
                    t.band
                ));
                break;
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
