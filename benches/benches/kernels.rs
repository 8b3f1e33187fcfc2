//! Micro benchmarks of the CPU kernels on in-memory tiles (no disk): reductions,
//! expression evaluation, casts, stencils, matmul, transpose and `gen`, each reported as input
//! bytes per second, so a regression in a kernel shows without I/O noise.
//!
//! ```text
//! cargo bench -p tilestream-benches --bench kernels                 # all
//! cargo bench -p tilestream-benches --bench kernels -- cast         # a group
//! ```

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tilestream::DType;
use tilestream::backend::cpu::reduce::reducer;
use tilestream::backend::{Backend, CpuBackend};
use tilestream::ops::expr::{Program, parse};
use tilestream::ops::matmul::{Resident, compute_dtype};
use tilestream::ops::reduce::{Geometry, Reduce, ReduceOver};
use tilestream::spec::stencil::cpu::run_tile;
use tilestream::spec::stencil::{Filter, Stencil, TileJob};
use tilestream::tiling::{Boundary, BoxPlan, BoxRequest, Cuts, OutMap};

/// A 16 MiB tile: 8192 rows x 512 f32 (the size the planner picks by default).
const ROWS: usize = 8192;
const COLS: usize = 512;

fn data() -> Vec<f32> {
    (0..ROWS * COLS)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect()
}

fn reductions(c: &mut Criterion) {
    let x = data();
    let bytes: &[u8] = bytemuck::cast_slice(&x);
    let mut g = c.benchmark_group("reduce");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    for (name, op) in [
        ("mean_axis0", Reduce::Mean),
        ("std_axis0", Reduce::Std { ddof: 0 }),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let geo = Geometry::new(&[ROWS, COLS], ReduceOver::Axis(0)).unwrap();
                let mut r = reducer(op, DType::F32, geo, 2);
                r.feed_bytes(0, bytes);
                black_box(r.into_bytes())
            });
        });
    }
    g.finish();
}

fn expressions_and_casts(c: &mut Criterion) {
    let cpu = CpuBackend::new(None).unwrap();
    let x = data();
    let bytes: &[u8] = bytemuck::cast_slice(&x);
    let mut out = vec![0u8; bytes.len() * 2];
    let mut g = c.benchmark_group("elementwise");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    let program = Program::compile(&parse("x*2+1").unwrap()).unwrap();
    g.bench_function("map_x*2+1_to_f16", |b| {
        b.iter(|| {
            cpu.map(
                &program,
                &[bytes],
                &[DType::F32],
                &mut out[..bytes.len() / 2],
                DType::F16,
            )
            .unwrap();
        });
    });
    let heavy = Program::compile(&parse("where(x > 0, sqrt(x), exp(x)) * 0.5").unwrap()).unwrap();
    g.bench_function("map_where_sqrt_exp_to_f32", |b| {
        b.iter(|| {
            cpu.map(
                &heavy,
                &[bytes],
                &[DType::F32],
                &mut out[..bytes.len()],
                DType::F32,
            )
            .unwrap();
        });
    });
    for (name, to, size) in [
        ("cast_f32_to_f16", DType::F16, 2),
        ("cast_f32_to_bf16", DType::BF16, 2),
        ("cast_f32_to_f64", DType::F64, 8),
        ("cast_f32_to_i16", DType::I16, 2),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                cpu.cast(bytes, DType::F32, &mut out[..x.len() * size], to)
                    .unwrap();
            });
        });
    }
    // the way back: half-precision inputs widened to f32 (throughput in input bytes)
    let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
    let bh: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
    for (name, from, src) in [
        (
            "cast_f16_to_f32",
            DType::F16,
            bytemuck::cast_slice::<_, u8>(&h),
        ),
        (
            "cast_bf16_to_f32",
            DType::BF16,
            bytemuck::cast_slice::<_, u8>(&bh),
        ),
    ] {
        g.throughput(Throughput::Bytes(src.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                cpu.cast(src, from, &mut out[..x.len() * 4], DType::F32)
                    .unwrap();
            });
        });
    }
    g.finish();
}

fn stencils_and_layout(c: &mut Criterion) {
    let cpu = CpuBackend::new(None).unwrap();
    let (h, w) = (2048usize, 2048usize);
    let img: Vec<f32> = (0..h * w).map(|i| ((i * 31) % 255) as f32).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&img);
    let mut out = vec![0u8; bytes.len()];
    let mut g = c.benchmark_group("image");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(10);
    for (name, spec) in [
        ("gaussian_sigma2", "gaussian:sigma=2"),
        ("box_5", "box:size=5"),
        ("sobel", "sobel"),
        ("median_3", "median:size=3"),
    ] {
        let st = Stencil::new(
            Filter::parse(spec, |_| unreachable!()).unwrap(),
            Boundary::Reflect,
        )
        .unwrap();
        let (hr, hc) = st.halos();
        let plan = BoxPlan::new(&BoxRequest {
            what: name.into(),
            dims: [1, h, w],
            in_bytes: 4,
            out_bytes: 4,
            halo_rows: hr,
            halo_cols: hc,
            boundary: Boundary::Reflect,
            scratch: st.scratch(DType::F32),
            resident_bytes: 0,
            resident_what: String::new(),
            depth: 1,
            budget: 1 << 40,
            max_tile_bytes: 1 << 40,
            cuts: Cuts::Auto { prefer_rows: true },
            out: OutMap::Same,
            out_chunks: None,
        })
        .unwrap();
        let tile = plan.box_tile(0);
        let windows = [bytes];
        let mut arena = Vec::new();
        g.bench_function(name, |b| {
            b.iter(|| {
                let job = TileJob {
                    stencil: &st,
                    plan: &plan,
                    tile: &tile,
                    windows: &windows,
                    in_dtype: DType::F32,
                    out_dtype: DType::F32,
                };
                cpu.install(&mut || run_tile(&job, &mut arena, &mut out))
                    .unwrap();
            });
        });
    }
    g.bench_function("transpose_f32", |b| {
        b.iter(|| cpu.transpose(bytes, w, 0, h, w, 4, &mut out).unwrap());
    });
    g.finish();

    let x = data();
    let xb: &[u8] = bytemuck::cast_slice(&x);
    let wv: Vec<f32> = (0..COLS * 64).map(|i| (i % 17) as f32 * 0.01).collect();
    let cd = compute_dtype(DType::F32, DType::F32);
    let resident = Resident::new(bytemuck::cast_slice(&wv), DType::F32, cd);
    let mut out = vec![0u8; ROWS * 64 * 4];
    let mut g = c.benchmark_group("matmul");
    g.throughput(Throughput::Bytes(xb.len() as u64));
    g.bench_function("8192x512_at_512x64_f32", |b| {
        b.iter(|| {
            cpu.matmul(xb, DType::F32, &resident, COLS, 64, &mut out, DType::F32)
                .unwrap();
        });
    });
    g.finish();
}

/// `gen` on one thread: elements generated per second (as output bytes).
fn generate(c: &mut Criterion) {
    use tilestream::ops::generate::Dist;
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let mut out = vec![0u8; ROWS * COLS * 4];
    let mut g = c.benchmark_group("generate");
    g.throughput(Throughput::Bytes(out.len() as u64));
    for (name, dist) in [
        ("gen_demo_f32", Dist::Demo),
        (
            "gen_normal_f32",
            Dist::Normal {
                mean: 1.0,
                std: 2.0,
            },
        ),
        (
            "gen_uniform_f32",
            Dist::Uniform {
                low: 0.0,
                high: 1.0,
            },
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                cpu.generate(&mut out, DType::F32, 3, COLS as u64, 7, dist)
                    .unwrap();
                black_box(&out);
            });
        });
    }
    g.finish();
}

criterion_group!(
    kernels,
    generate,
    reductions,
    expressions_and_casts,
    stencils_and_layout
);
criterion_main!(kernels);
