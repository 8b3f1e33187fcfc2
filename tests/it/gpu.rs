//! The GPU suite: every operation with a CUDA kernel, run on each device this machine
//! has (the CPU always, `cuda:0` when a GPU can be used), through the same engine calls,
//! with odd shapes, every dtype pair and budgets down to tiles of a few hundred
//! elements; each device's output must equal the CPU's byte for byte (NaNs equal to
//! NaNs), whatever the budget. Without a GPU only the CPU runs and the test says so on
//! one line; `benches/gpu/kit.py suite` runs this suite on a GPU machine, where
//! `TILESTREAM_REQUIRE_GPU=1` makes a missing GPU a failure.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tilestream::device::DeviceRequest;
use tilestream::{DType, Engine, MemoryBudget, TensorFile};

use crate::common::{read_npy_data, write_npy};

fn engine(device: DeviceRequest, budget: &str) -> Engine {
    let budget = tilestream::parse_size(budget).unwrap();
    Engine::new(MemoryBudget::new(
        budget + crate::common::driver_share(device),
    ))
    .unwrap()
    .with_device(device)
    .unwrap()
}

/// Deterministic bytes for `n` elements of `d`: every bit pattern of floats (NaNs,
/// subnormals, infinities) and of integers.
fn data(d: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n * d.size())
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 56) as u8
        })
        .collect()
}

/// Equal bytes, except that any NaN equals any NaN.
fn same(a: &[u8], b: &[u8], d: DType) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let es = d.size();
    a.chunks(es).zip(b.chunks(es)).all(|(x, y)| {
        x == y || {
            let bits = |c: &[u8]| {
                let mut w = [0u8; 8];
                w[..es].copy_from_slice(c);
                u64::from_le_bytes(w)
            };
            let nan = |v: u64| match d {
                DType::F16 => (v & 0x7fff) > 0x7c00,
                DType::BF16 => (v & 0x7fff) > 0x7f80,
                DType::F32 => (v & 0x7fff_ffff) > 0x7f80_0000,
                DType::F64 => f64::from_bits(v).is_nan(),
                _ => false,
            };
            nan(bits(x)) && nan(bits(y))
        }
    })
}

/// Runs `op` on every device at every budget and checks each output against the CPU's
/// at the largest budget.
fn on_every_device(
    dir: &Path,
    name: &str,
    od: DType,
    op: impl Fn(&Engine, &Path) -> tilestream::Result<tilestream::RunReport>,
) {
    let mut want: Option<Vec<u8>> = None;
    for device in crate::common::backends() {
        for budget in ["64MiB", "1MiB", "256KiB"] {
            let out = dir.join(format!("{name}-{device}-{budget}.npy"));
            let e = engine(device, budget);
            let report =
                op(&e, &out).unwrap_or_else(|err| panic!("{name} on {device} at {budget}: {err}"));
            if device != DeviceRequest::Cpu {
                assert!(report.device.starts_with("cuda"), "{name}: {report:?}");
            }
            let got = read_npy_data(&out);
            match &want {
                None => want = Some(got),
                Some(w) => assert!(same(w, &got, od), "{name} on {device} at {budget} differs"),
            }
        }
    }
}

#[test]
fn affine_cast_and_standardize_agree_on_every_device_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    // odd shapes: a prime width, one row, a long column
    for (k, shape) in [[4099usize, 7], [1, 13], [20011, 1]]
        .into_iter()
        .enumerate()
    {
        for i in [
            DType::F32,
            DType::U8,
            DType::I64,
            DType::F16,
            DType::BF16,
            DType::F64,
        ] {
            let n = shape[0] * shape[1];
            let path = dir.path().join(format!("x{k}-{i}.npy"));
            write_npy(&path, i, &shape, &data(i, n, 7 + k as u64));
            let x = TensorFile::open(&path).unwrap();
            for o in [
                DType::F16,
                DType::BF16,
                DType::F32,
                DType::I16,
                DType::U8,
                DType::Bool,
            ] {
                let tag = format!("{k}-{i}-{o}");
                on_every_device(dir.path(), &format!("affine-{tag}"), o, |e, out| {
                    e.affine(&x, out, 2.5, -3.0, Some(o))
                });
                on_every_device(dir.path(), &format!("cast-{tag}"), o, |e, out| {
                    e.cast(&x, out, o)
                });
            }
            on_every_device(
                dir.path(),
                &format!("standardize-{k}-{i}"),
                DType::F32,
                |e, out| {
                    e.standardize(&x, out, Some(DType::F32), 1, None)
                        .map(|(_, r)| r)
                },
            );
        }
    }
}

#[test]
fn fused_map_kernels_agree_on_every_device_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [3001usize, 5];
    let n = shape[0] * shape[1];
    // finite values: the GPU's transcendentals may differ from the CPU's libm in the last
    // bit, so this suite keeps to operations IEEE defines exactly (the host emulation
    // checks every function bit for bit against the same libm)
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 4001) as f32 * 0.37 - 700.0)
        .collect();
    let ys: Vec<u16> = (0..n).map(|i| ((i * 104_729) % 65_521) as u16).collect();
    let (xp, yp) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
    write_npy(&xp, DType::F32, &shape, bytemuck::cast_slice(&xs));
    write_npy(&yp, DType::U16, &shape, bytemuck::cast_slice(&ys));
    let (x, y) = (
        TensorFile::open(&xp).unwrap(),
        TensorFile::open(&yp).unwrap(),
    );
    for (k, e) in [
        "(x - y) / (x + y)",
        "where(x > y / 100, x * 2 + 1, -y)",
        "min(x, y) + max(x / 3, -y) + abs(x) + sqrt(y) + floor(x) + round(x / 7)",
        "clip(x / 100, -1, 1) * 3 - ceil(x)",
    ]
    .iter()
    .enumerate()
    {
        for od in [DType::F32, DType::F16, DType::I32] {
            on_every_device(dir.path(), &format!("map{k}-{od}"), od, |eng, out| {
                eng.map(e, &[("x", &x), ("y", &y)], out, Some(od))
            });
        }
    }
    // masked: a GeoTIFF copy of y whose nodata value is one of its values (its pixels
    // become NaN, or -1 for an integer output, through the same fused kernel)
    let yt = dir.path().join("y.tif");
    let rule = |value: Option<&str>| tilestream::MapNodata {
        value: value.map(str::to_string),
        ..Default::default()
    };
    let nd = ys[3].to_string();
    // in 16x16 tiles: decoding it fits the smallest budget
    let small_tiles = tilestream::format::tiff::write::TiffWriteOptions {
        tile: 16,
        ..Default::default()
    };
    engine(DeviceRequest::Cpu, "64MiB")
        .with_tiff_output(small_tiles)
        .map_with("y", &[("y", &y)], &yt, Some(DType::U16), &rule(Some(&nd)))
        .unwrap();
    let masked = TensorFile::open(&yt).unwrap();
    assert_eq!(
        masked.georef().and_then(|g| g.nodata.as_deref()),
        Some(&*nd)
    );
    for (od, value) in [(DType::F32, None), (DType::I32, Some("-1"))] {
        on_every_device(dir.path(), &format!("masked-{od}"), od, |eng, out| {
            eng.map_with(
                "(x - y) / (x + y) * 100",
                &[("x", &x), ("y", &masked)],
                out,
                Some(od),
                &rule(value),
            )
        });
    }
    // the CPU's result against its definition
    let got = read_npy_data(&dir.path().join("masked-i32-cpu-64MiB.npy"));
    for (i, c) in got.chunks_exact(4).enumerate() {
        let v = i32::from_le_bytes(c.try_into().unwrap());
        let (a, b) = (f64::from(xs[i]), f64::from(ys[i]));
        let want = if ys[i] == ys[3] {
            -1
        } else {
            ((a - b) / (a + b) * 100.0) as i32
        };
        assert_eq!(v, want, "masked pixel {i}");
    }
}

#[test]
fn reductions_agree_on_every_device_and_budget() {
    use tilestream::{Backend, CpuBackend, Reduce, ReduceOver};
    let dir = tempfile::tempdir().unwrap();
    let cpu = CpuBackend::new(Some(1)).unwrap();
    // lanes over a long run, a prime width, outer indices shorter than the lanes, and
    // columns with two summation blocks each
    let cases: [(&[usize], ReduceOver); 5] = [
        (&[200_003], ReduceOver::All),
        (&[4099, 7], ReduceOver::Axis(0)),
        (&[4099, 7], ReduceOver::Axis(1)),
        (&[13, 3, 5], ReduceOver::Axis(1)),
        (&[90_001, 3], ReduceOver::Axis(0)),
    ];
    for (k, (shape, over)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        for d in [
            DType::F32,
            DType::F16,
            DType::F64,
            DType::U8,
            DType::I32,
            DType::Bool,
        ] {
            // finite values with a large common offset (the variance's shift matters)
            let v: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 4001) as f64 * 0.37 + if d.is_float() { 900.0 } else { 0.0 })
                .collect();
            let mut b = vec![0u8; n * d.size()];
            cpu.cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
                .unwrap();
            let path = dir.path().join(format!("r{k}-{d}.npy"));
            write_npy(&path, d, shape, &b);
            let x = TensorFile::open(&path).unwrap();
            for op in [
                Reduce::Sum,
                Reduce::Mean,
                Reduce::Std { ddof: 1 },
                Reduce::Min,
                Reduce::Max,
            ] {
                let od = op.output_dtype(d);
                on_every_device(
                    dir.path(),
                    &format!("reduce-{k}-{d}-{}", op.name()),
                    od,
                    |e, out| e.reduce_to_file(&x, op, *over, out, None),
                );
            }
        }
    }
}

/// The NaN- and nodata-aware reductions: NaN and infinities placed at tile and block
/// boundaries, a nodata value that occurs (and, for floats, a slice of NaN alone), on
/// every device and budget.
#[test]
fn nan_and_nodata_reductions_agree_on_every_device_and_budget() {
    use tilestream::{Backend, CpuBackend, Reduce, ReduceOver};
    let dir = tempfile::tempdir().unwrap();
    let cpu = CpuBackend::new(Some(1)).unwrap();
    let cases: [(&[usize], ReduceOver); 4] = [
        (&[200_003], ReduceOver::All),
        (&[4099, 7], ReduceOver::Axis(0)),
        (&[4099, 7], ReduceOver::Axis(1)),
        (&[90_001, 3], ReduceOver::Axis(0)),
    ];
    for (k, (shape, over)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        for d in [DType::F32, DType::F16, DType::F64, DType::U16, DType::I32] {
            let mut v: Vec<f64> = (0..n)
                .map(|i| ((i * 7919) % 4001) as f64 * 0.37 + if d.is_float() { 900.0 } else { 0.0 })
                .collect();
            if d.is_float() {
                for i in [0, 1, 7, 8, n / 3, n / 2, 16_384 * 8, n - 1] {
                    if i < n {
                        v[i] = f64::NAN;
                    }
                }
                v[n / 4] = f64::INFINITY;
                // one output's slice all NaN where the last axis is reduced
                if shape.len() == 2 && *over == ReduceOver::Axis(1) {
                    v[7..14].fill(f64::NAN);
                }
            }
            let mut b = vec![0u8; n * d.size()];
            cpu.cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
                .unwrap();
            let path = dir.path().join(format!("n{k}-{d}.npy"));
            write_npy(&path, d, shape, &b);
            // a value of the data (the element a fifth of the way in) as nodata
            let mut nd = [0.0f64];
            let e = n / 5 * d.size();
            cpu.cast(
                &b[e..e + d.size()],
                d,
                bytemuck::cast_slice_mut(&mut nd),
                DType::F64,
            )
            .unwrap();
            let nodata = format!("{}", nd[0]);
            for (m, x) in [
                TensorFile::open(&path).unwrap(),
                TensorFile::open(&path)
                    .unwrap()
                    .with_nodata(Some(&nodata))
                    .unwrap(),
            ]
            .iter()
            .enumerate()
            {
                for op in [
                    Reduce::NanSum,
                    Reduce::NanMean,
                    Reduce::NanStd { ddof: 1 },
                    Reduce::NanMin,
                    Reduce::NanMax,
                    Reduce::Count,
                ] {
                    let od = op.output_dtype(d);
                    on_every_device(
                        dir.path(),
                        &format!("nan-{k}-{d}-{m}-{}", op.name()),
                        od,
                        |e, out| e.reduce_to_file(x, op, *over, out, None),
                    );
                }
            }
        }
    }
}

/// Integer values in `[lo, hi]` as `n` elements of `d`.
fn integers(d: DType, n: usize, lo: i64, hi: i64, seed: u64) -> Vec<u8> {
    use tilestream::{Backend, CpuBackend};
    let mut s = seed;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (lo + ((s >> 33) % (hi - lo + 1) as u64) as i64) as f64
        })
        .collect();
    let mut b = vec![0u8; n * d.size()];
    CpuBackend::new(Some(1))
        .unwrap()
        .cast(bytemuck::cast_slice(&v), DType::F64, &mut b, d)
        .unwrap();
    b
}

/// Matmul sums in another order on a GPU (one fused multiply-add chain per output) than
/// the CPU's blocked sgemm, so the devices agree exactly where every partial sum is exact:
/// integer-valued operands whose sums stay below 2^24. Each device is also identical to
/// itself at every budget (`on_every_device` compares every run with the first); the
/// rounding-level agreement on fractional data is `matmul.rs`'s oracle test, run on
/// every backend.
#[test]
fn matmul_agrees_on_every_device_and_budget_on_integer_data() {
    let dir = tempfile::tempdir().unwrap();
    for (c, (r, k, n, xd, wd, od)) in [
        (
            4099usize,
            37usize,
            7usize,
            DType::U8,
            DType::I16,
            DType::F32,
        ),
        (1, 5, 64, DType::F16, DType::F32, DType::F32),
        (513, 300, 1, DType::I32, DType::U8, DType::F64),
        (2003, 64, 16, DType::F32, DType::F32, DType::F16),
        (97, 13, 5, DType::BF16, DType::I8, DType::I16),
    ]
    .into_iter()
    .enumerate()
    {
        let (lo, hi) = if xd.is_unsigned() { (0, 16) } else { (-8, 8) };
        let xp = dir.path().join(format!("mx{c}.npy"));
        let wp = dir.path().join(format!("mw{c}.npy"));
        write_npy(&xp, xd, &[r, k], &integers(xd, r * k, lo, hi, 3 + c as u64));
        let (wlo, whi) = if wd.is_unsigned() { (0, 8) } else { (-8, 8) };
        write_npy(
            &wp,
            wd,
            &[k, n],
            &integers(wd, k * n, wlo, whi, 9 + c as u64),
        );
        let (x, w) = (
            TensorFile::open(&xp).unwrap(),
            TensorFile::open(&wp).unwrap(),
        );
        on_every_device(dir.path(), &format!("matmul-{c}"), od, |e, out| {
            e.matmul(&x, &w, out, Some(od))
        });
    }
}

/// `gen` writes the same bytes on every device: each distribution, every output dtype
/// family, ranks 1 to 3 with odd widths, at every budget.
#[test]
fn generate_agrees_on_every_device_and_budget() {
    use tilestream::ops::generate::Dist;
    let dir = tempfile::tempdir().unwrap();
    let shapes: [&[usize]; 3] = [&[100_003], &[4099, 7], &[3, 257, 31]];
    let dists = [
        Dist::Demo,
        Dist::Normal {
            mean: -2.0,
            std: 3.5,
        },
        Dist::Uniform {
            low: -1.0,
            high: 250.0,
        },
    ];
    for (k, shape) in shapes.iter().enumerate() {
        for (j, dist) in dists.iter().enumerate() {
            for d in [
                DType::F32,
                DType::F64,
                DType::F16,
                DType::BF16,
                DType::U8,
                DType::I32,
            ] {
                on_every_device(dir.path(), &format!("gen-{k}-{j}-{d}"), d, |e, out| {
                    e.generate_dist(out, shape, d, 12_345 + k as u64, *dist)
                });
            }
        }
    }
}

/// The out-of-core transpose moves bits: every device writes the CPU's bytes, for every
/// element size, rank 2 and 3, odd and prime shapes, at budgets that cut the image into
/// many blocks.
#[test]
fn transpose_agrees_on_every_device_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let shapes: [&[usize]; 4] = [&[1, 4099], &[4099, 7], &[3, 257, 1031], &[613, 617]];
    for (k, shape) in shapes.iter().enumerate() {
        for d in [DType::U8, DType::F16, DType::F32, DType::F64] {
            let n: usize = shape.iter().product();
            let path = dir.path().join(format!("t{k}-{d}.npy"));
            write_npy(&path, d, shape, &data(d, n, 11 + k as u64));
            let x = TensorFile::open(&path).unwrap();
            on_every_device(dir.path(), &format!("transpose-{k}-{d}"), d, |e, out| {
                e.transpose(&x, out)
            });
        }
    }
}

/// Every filter kind on every device: separable (both pass orders), Sobel's magnitude,
/// dense convolution, medians (odd, even and the widest the GPU sorts), every boundary
/// mode, f32 and f64 arithmetic; a device's bytes equal the CPU's at every budget.
#[test]
fn filters_agree_on_every_device_and_budget() {
    use tilestream::spec::stencil::{Filter, Stencil};
    use tilestream::tiling::Boundary;
    let dir = tempfile::tempdir().unwrap();
    let f = |s: &str| Filter::parse(s, |_| unreachable!()).unwrap();
    let cases = [
        (
            f("gaussian:sigma=2"),
            Boundary::Reflect,
            DType::F32,
            DType::F32,
        ),
        (
            f("box:size=5"),
            Boundary::Constant(3.0),
            DType::U16,
            DType::U16,
        ),
        (f("sobel"), Boundary::Nearest, DType::I16, DType::F32),
        (
            f("sobel:axis=1"),
            Boundary::Constant(0.0),
            DType::U8,
            DType::F16,
        ),
        (f("median:size=3"), Boundary::Reflect, DType::U8, DType::U8),
        (f("median:size=4"), Boundary::Wrap, DType::F64, DType::F64),
        (
            f("median:size=7"),
            Boundary::Nearest,
            DType::F32,
            DType::F32,
        ),
        (
            f("gaussian:sigma=1"),
            Boundary::Wrap,
            DType::I32,
            DType::F64,
        ),
        (
            Filter::Convolve {
                weights: vec![1.0, -2.0, 0.5, 0.25, 3.0, -1.0],
                rows: 2,
                cols: 3,
            },
            Boundary::Constant(1.0),
            DType::F32,
            DType::I32,
        ),
    ];
    for (k, (filter, boundary, i, o)) in cases.into_iter().enumerate() {
        let stencil = Stencil::new(filter, boundary).unwrap();
        let shape = [2usize, 257, 311];
        let n: usize = shape.iter().product();
        // finite values: integers spanning the type, floats from the integer pattern
        let path = dir.path().join(format!("img{k}.npy"));
        let lo = if i.is_unsigned() { 0 } else { -120 };
        write_npy(&path, i, &shape, &integers(i, n, lo, 120, 21 + k as u64));
        let x = TensorFile::open(&path).unwrap();
        on_every_device(dir.path(), &format!("stencil-{k}"), o, |e, out| {
            e.stencil(&x, out, &stencil, Some(o))
        });
    }
}

/// A process creates one CUDA context per device and compiles each kernel set once,
/// whatever the number of engines: the same job run by three fresh engines finds its
/// kernels compiled after the first (the compile cache was asked for them again and
/// compiled nothing: the device's counters say so). Without a GPU the counters stay at
/// zero, which is checked too: the CPU path never touches CUDA.
#[test]
fn a_context_per_process_and_a_compilation_per_kernel_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    write_npy(
        &path,
        DType::F32,
        &[3001, 7],
        &data(DType::F32, 3001 * 7, 5),
    );
    let x = TensorFile::open(&path).unwrap();
    let gpu = crate::common::backends()
        .into_iter()
        .find(|d| *d != DeviceRequest::Cpu);
    let Some(gpu) = gpu else {
        // (other tests compile kernels with NVRTC meanwhile, never through the cache)
        engine(DeviceRequest::Cpu, "1MiB")
            .affine(&x, dir.path().join("c.npy"), 0.5, 1.25, Some(DType::F16))
            .unwrap();
        assert_eq!(tilestream::device::counters().contexts, 0);
        assert!(tilestream::device::compiled_sets().is_empty());
        return;
    };
    // a fused map whose constants make its kernel set this test's own
    let expr = "x * 0.123456789 - 98.765";
    let job = |k: usize| {
        let out = dir.path().join(format!("g{k}.npy"));
        let r = engine(gpu, "1MiB")
            .map(expr, &[("x", &x)], &out, Some(DType::F32))
            .unwrap();
        assert!(r.device.starts_with("cuda"), "{r:?}");
    };
    let before: Vec<String> = tilestream::device::compiled_sets()
        .into_iter()
        .map(|s| s.0)
        .collect();
    job(0);
    // the map kernel this job compiled: new after its first run (other tests running
    // beside this one compile other sets meanwhile; no other one has this program)
    let new: Vec<String> = tilestream::device::compiled_sets()
        .into_iter()
        .filter(|s| s.0.starts_with("map_") && !before.contains(&s.0))
        .map(|s| s.0)
        .collect();
    assert!(!new.is_empty(), "the first engine compiled nothing");
    job(1);
    job(2);
    let c = tilestream::device::counters();
    assert_eq!(c.contexts, 1, "{c:?}");
    // each asked for three times, compiled once (a set is in the cache once)
    let sets = tilestream::device::compiled_sets();
    for name in &new {
        let asked: Vec<usize> = sets.iter().filter(|s| &s.0 == name).map(|s| s.1).collect();
        assert_eq!(asked, vec![3], "{name}: {sets:?}");
    }
    assert_eq!(
        read_npy_data(&dir.path().join("g0.npy")),
        read_npy_data(&dir.path().join("g2.npy"))
    );
}
