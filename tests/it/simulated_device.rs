//! The device planning paths on a machine with no GPU: every operation with a CUDA
//! kernel, planned for a simulated device (`Engine::with_simulated_device`) at the GPU
//! suite's host budgets, with an H200's device budget and with a small one. Wherever
//! the CPU runs at that host budget, each must plan within both budgets and run (compute stays on the CPU, with the device's
//! tiles), writing the bytes of a plain CPU run; the small device budget must cut
//! smaller tiles than the host alone would (the device path was taken). CI can never
//! open a GPU, so without this nothing would reach these paths before a GPU session
//! (the first one on an H200 found two of them counting less than the run held).

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tilestream::spec::stencil::{Filter, Stencil};
use tilestream::tiling::Boundary;
use tilestream::{DType, Engine, MemoryBudget, Reduce, ReduceOver, RunReport, TensorFile};

use crate::common::{read_npy_data, write_npy};

/// An H200's default device budget: 90% of its free memory.
const H200: u64 = 126 << 30;

type Op<'a> = Box<dyn Fn(&Engine, &Path) -> tilestream::Result<RunReport> + 'a>;

fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .flat_map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // finite f32 values in [-512, 512)
            (((s >> 40) as f32) / (1u64 << 24) as f32 * 1024.0 - 512.0).to_le_bytes()
        })
        .collect()
}

#[test]
fn every_operation_plans_and_runs_for_a_simulated_device() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_npy(
        &d.join("x.npy"),
        DType::F32,
        &[4099, 37],
        &data(4099 * 37, 1),
    );
    write_npy(&d.join("w.npy"), DType::F32, &[37, 5], &data(37 * 5, 2));
    write_npy(
        &d.join("img.npy"),
        DType::F32,
        &[2, 301, 257],
        &data(2 * 301 * 257, 3),
    );
    let x = TensorFile::open(d.join("x.npy")).unwrap();
    let w = TensorFile::open(d.join("w.npy")).unwrap();
    let img = TensorFile::open(d.join("img.npy")).unwrap();
    // a GeoTIFF input (decoded chunk by chunk: its window counts beside the slots)
    Engine::new(MemoryBudget::parse("64MiB").unwrap())
        .unwrap()
        .cast(&img, d.join("img.tif"), DType::F32)
        .unwrap();
    let tif = TensorFile::open(d.join("img.tif")).unwrap();
    let filter = |s: &str| {
        Stencil::new(
            Filter::parse(s, |_| unreachable!()).unwrap(),
            Boundary::Reflect,
        )
        .unwrap()
    };
    let (gauss, median) = (filter("gaussian:sigma=2"), filter("median:size=5"));
    let ops: Vec<(&str, Op<'_>)> = vec![
        (
            "affine",
            Box::new(|e, o| e.affine(&x, o, 2.0, 1.0, Some(DType::F16))),
        ),
        ("cast", Box::new(|e, o| e.cast(&x, o, DType::BF16))),
        (
            "map",
            Box::new(|e, o| e.map("sqrt(abs(a)) - a / 3", &[("a", &x)], o, Some(DType::F32))),
        ),
        (
            "map of a GeoTIFF",
            Box::new(|e, o| e.map("s[1] - s[0]", &[("s", &tif)], o, Some(DType::F32))),
        ),
        (
            "matmul",
            Box::new(|e, o| e.matmul(&x, &w, o, Some(DType::F32))),
        ),
        (
            "gen",
            Box::new(|e, o| e.generate(o, &[3001, 41], DType::F32, 7)),
        ),
        ("transpose", Box::new(|e, o| e.transpose(&x, o))),
        (
            "standardize",
            Box::new(|e, o| e.standardize(&x, o, Some(DType::F32), 1, None).map(|r| r.1)),
        ),
        (
            "gaussian",
            Box::new(|e, o| e.stencil(&img, o, &gauss, Some(DType::F32))),
        ),
        (
            "median",
            Box::new(|e, o| e.stencil(&tif, o, &median, Some(DType::F32))),
        ),
        (
            "var along 0",
            Box::new(|e, o| {
                e.reduce_to_file(&x, Reduce::Var { ddof: 0 }, ReduceOver::Axis(0), o, None)
            }),
        ),
        (
            "sum along 1",
            Box::new(|e, o| e.reduce_to_file(&x, Reduce::Sum, ReduceOver::Axis(1), o, None)),
        ),
        (
            "max of all",
            Box::new(|e, o| e.reduce_to_file(&x, Reduce::Max, ReduceOver::All, o, None)),
        ),
    ];
    for (name, op) in &ops {
        let plain = d.join("plain.npy");
        let cpu = op(
            &Engine::new(MemoryBudget::parse("64MiB").unwrap()).unwrap(),
            &plain,
        )
        .unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
        let want = read_npy_data(&plain);
        for budget in ["256KiB", "1MiB", "64MiB"] {
            // a budget the CPU refuses too (a GeoTIFF's decode scratch) plans nothing
            let engine = Engine::new(MemoryBudget::parse(budget).unwrap()).unwrap();
            if op(&engine, &d.join("cpu.npy")).is_err() {
                continue;
            }
            for device in [H200, 4 << 20] {
                let e = Engine::new(MemoryBudget::parse(budget).unwrap())
                    .unwrap()
                    .with_simulated_device(device);
                let out = d.join("dev.npy");
                let r = op(&e, &out).unwrap_or_else(|err| {
                    panic!("{name} at {budget} for a device of {device} bytes: {err}")
                });
                assert!(
                    r.peak_reserved_bytes <= MemoryBudget::parse(budget).unwrap().limit(),
                    "{name} at {budget}: {r:?}"
                );
                assert!(
                    read_npy_data(&out) == want,
                    "{name} at {budget}, device {device}: other bytes"
                );
                if budget == "64MiB" && device == 4 << 20 && cpu.tiles > 1 {
                    assert!(
                        r.tiles > cpu.tiles,
                        "{name}: the small device did not cut smaller tiles ({} vs {})",
                        r.tiles,
                        cpu.tiles
                    );
                }
            }
        }
    }
}
