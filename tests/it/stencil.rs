//! Filters, transpose and patches against untiled oracles, and the oracle against scipy.
//!
//! The oracle here is written independently of `src/spec/ops/stencil/`: whole images, f64,
//! one plain loop per 1-D pass, boundaries resolved by walking the mirror/wrap instead of
//! modular arithmetic. It is itself checked against scipy goldens (`tests/golden`, made by
//! `tests/golden/make_stencil_golden.py`).
#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)]

use std::path::{Path, PathBuf};

use crate::common::{Lcg, read_npy_data, write_npy};
use tilestream::spec::stencil::{Filter, Stencil};
use tilestream::tiling::Boundary;
use tilestream::{DType, Engine, MemoryBudget, TensorFile};
use tilestream::{Edge, PatchSpec};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

// ---------------------------------------------------------------- the oracle

/// Source index of `i` along an axis of `n`, by walking (independent of the library's
/// modular formula).
pub(crate) fn walk(mode: Boundary, mut i: i64, n: i64) -> Option<usize> {
    match mode {
        Boundary::Constant(_) => (0..n).contains(&i).then_some(i as usize),
        Boundary::Nearest => Some(i.clamp(0, n - 1) as usize),
        Boundary::Wrap => {
            while i < 0 {
                i += n;
            }
            while i >= n {
                i -= n;
            }
            Some(i as usize)
        }
        Boundary::Reflect => {
            // mirror about -0.5 and n - 0.5 until inside
            loop {
                if i < 0 {
                    i = -1 - i;
                } else if i >= n {
                    i = 2 * n - 1 - i;
                } else {
                    return Some(i as usize);
                }
            }
        }
    }
}

fn cval(mode: Boundary) -> f64 {
    match mode {
        Boundary::Constant(c) => c,
        _ => 0.0,
    }
}

/// 1-D correlation along `axis` (0 rows, 1 columns) of an `h × w` image:
/// `out[i] = Σ_t k[t] · in[i + t - before]`.
fn corr1d(
    x: &[f64],
    h: usize,
    w: usize,
    axis: usize,
    k: &[f64],
    before: usize,
    mode: Boundary,
) -> Vec<f64> {
    let mut out = vec![0.0; h * w];
    for r in 0..h {
        for c in 0..w {
            let mut acc = 0.0;
            for (t, &kt) in k.iter().enumerate() {
                let off = t as i64 - before as i64;
                let v = if axis == 0 {
                    walk(mode, r as i64 + off, h as i64).map(|rr| x[rr * w + c])
                } else {
                    walk(mode, c as i64 + off, w as i64).map(|cc| x[r * w + cc])
                };
                acc += kt * v.unwrap_or(cval(mode));
            }
            out[r * w + c] = acc;
        }
    }
    out
}

fn gaussian_weights(sigma: f64) -> Vec<f64> {
    let r = (4.0 * sigma + 0.5) as i64;
    let w: Vec<f64> = (-r..=r)
        .map(|x| (-(x * x) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let s: f64 = w.iter().sum();
    w.iter().map(|v| v / s).collect()
}

fn oracle(filter: &Filter, mode: Boundary, x: &[f64], h: usize, w: usize) -> Vec<f64> {
    let sep = |x: &[f64], a: &[f64], b: &[f64], first_axis: usize| {
        let (ka, kb) = if first_axis == 0 { (a, b) } else { (b, a) };
        let y = corr1d(x, h, w, first_axis, ka, ka.len() / 2, mode);
        corr1d(&y, h, w, 1 - first_axis, kb, kb.len() / 2, mode)
    };
    match filter {
        Filter::Gaussian { sigma, .. } => {
            let k = gaussian_weights(*sigma);
            sep(x, &k, &k, 0)
        }
        Filter::Box { size } => {
            let k = vec![1.0 / *size as f64; *size];
            sep(x, &k, &k, 0)
        }
        Filter::Sobel { axis } => {
            let (d, s) = ([-1.0, 0.0, 1.0], [1.0, 2.0, 1.0]);
            // derivative pass first, along its axis; smoothing pass along the other
            let g0 = sep(x, &d, &s, 0);
            let g1 = sep(x, &s, &d, 1);
            match axis {
                Some(0) => g0,
                Some(_) => g1,
                None => g0.iter().zip(&g1).map(|(a, b)| a.hypot(*b)).collect(),
            }
        }
        Filter::Median { size } => {
            let k = *size as i64;
            let mut out = vec![0.0; h * w];
            for r in 0..h as i64 {
                for c in 0..w as i64 {
                    let mut v = Vec::new();
                    for a in 0..k {
                        for b in 0..k {
                            let rr = walk(mode, r + a - k / 2, h as i64);
                            let cc = walk(mode, c + b - k / 2, w as i64);
                            v.push(match (rr, cc) {
                                (Some(rr), Some(cc)) => x[rr * w + cc],
                                _ => cval(mode),
                            });
                        }
                    }
                    v.sort_by(f64::total_cmp);
                    out[(r * w as i64 + c) as usize] = v[v.len() / 2];
                }
            }
            out
        }
        Filter::Convolve {
            weights,
            rows,
            cols,
        } => {
            let (kr, kc) = (*rows as i64, *cols as i64);
            let mut out = vec![0.0; h * w];
            for r in 0..h as i64 {
                for c in 0..w as i64 {
                    let mut acc = 0.0;
                    for a in 0..kr {
                        for b in 0..kc {
                            let rr = walk(mode, r - a + kr / 2, h as i64);
                            let cc = walk(mode, c - b + kc / 2, w as i64);
                            let v = match (rr, cc) {
                                (Some(rr), Some(cc)) => x[rr * w + cc],
                                _ => cval(mode),
                            };
                            acc += weights[(a * kc + b) as usize] * v;
                        }
                    }
                    out[(r * w as i64 + c) as usize] = acc;
                }
            }
            out
        }
    }
}

fn oracle_bands(filter: &Filter, mode: Boundary, x: &[f64], shape: &[usize]) -> Vec<f64> {
    let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    x.chunks(h * w)
        .flat_map(|band| oracle(filter, mode, band, h, w))
        .collect()
}

// ---------------------------------------------------------------- helpers

fn f32s(path: &Path) -> Vec<f64> {
    let b = read_npy_data(path);
    bytemuck::pod_collect_to_vec::<u8, f32>(&b)
        .into_iter()
        .map(f64::from)
        .collect()
}

fn f64s(path: &Path) -> Vec<f64> {
    bytemuck::pod_collect_to_vec(&read_npy_data(path))
}

fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0, f64::max)
}

fn engine(budget: &str, max_tile: u64) -> Engine {
    Engine::new(MemoryBudget::parse(budget).unwrap())
        .unwrap()
        .with_threads(2)
        .unwrap()
        .with_max_tile_bytes(max_tile)
}

const MODES: [Boundary; 4] = [
    Boundary::Reflect,
    Boundary::Nearest,
    Boundary::Wrap,
    Boundary::Constant(-1.25),
];

fn filters(dir: &Path) -> Vec<Filter> {
    let kernel = dir.join("kernel.npy");
    let weights: Vec<f64> = (0..12).map(|i| f64::from(i) * 0.25 - 1.3).collect();
    write_npy(&kernel, DType::F64, &[3, 4], bytemuck::cast_slice(&weights));
    vec![
        Filter::parse("gaussian:sigma=1.3", |_| unreachable!()).unwrap(),
        Filter::parse("gaussian:sigma=3", |_| unreachable!()).unwrap(),
        Filter::parse("box:size=4", |_| unreachable!()).unwrap(),
        Filter::parse("sobel", |_| unreachable!()).unwrap(),
        Filter::parse("sobel:axis=1", |_| unreachable!()).unwrap(),
        Filter::parse("median:size=3", |_| unreachable!()).unwrap(),
        Filter::Convolve {
            weights,
            rows: 3,
            cols: 4,
        },
    ]
}

// ---------------------------------------------------------------- tests

#[test]
fn oracle_matches_scipy_goldens() {
    let x = f32s(&golden("stencil_x.npy"));
    let shape = [2, 37, 45];
    let cases = [
        (
            "gaussian:sigma=1.5",
            Boundary::Reflect,
            "stencil_gaussian_s1.5_reflect.npy",
        ),
        (
            "gaussian:sigma=3",
            Boundary::Wrap,
            "stencil_gaussian_s3_wrap.npy",
        ),
        (
            "sobel",
            Boundary::Constant(2.0),
            "stencil_sobel_constant2.npy",
        ),
        ("sobel", Boundary::Nearest, "stencil_sobel_nearest.npy"),
    ];
    for (spec, mode, file) in cases {
        let f = Filter::parse(spec, |_| unreachable!()).unwrap();
        let want = f64s(&golden(file));
        let got = oracle_bands(&f, mode, &x, &shape);
        let e = max_rel_err(&got, &want);
        assert!(e < 1e-12, "oracle {spec} {mode}: {e:e}");
    }
    for (size, mode, file) in [
        (3, Boundary::Reflect, "stencil_median3_reflect.npy"),
        (4, Boundary::Constant(0.5), "stencil_median4_constant.npy"),
    ] {
        let want = f32s(&golden(file));
        let got = oracle_bands(&Filter::Median { size }, mode, &x, &shape);
        assert_eq!(got, want, "oracle median {size} {mode}");
    }
}

#[test]
fn engine_matches_scipy_goldens_at_any_budget() {
    let dir = tempfile::tempdir().unwrap();
    let x = TensorFile::open(golden("stencil_x.npy")).unwrap();
    let cases = [
        (
            "gaussian:sigma=1.5",
            "reflect",
            "stencil_gaussian_s1.5_reflect.npy",
            2e-6,
        ),
        (
            "gaussian:sigma=3",
            "wrap",
            "stencil_gaussian_s3_wrap.npy",
            2e-6,
        ),
        ("sobel", "constant:2", "stencil_sobel_constant2.npy", 2e-6),
        ("sobel", "nearest", "stencil_sobel_nearest.npy", 2e-6),
        (
            "median:size=3",
            "reflect",
            "stencil_median3_reflect.npy",
            0.0,
        ),
        (
            "median:size=4",
            "constant:0.5",
            "stencil_median4_constant.npy",
            0.0,
        ),
    ];
    for (spec, mode, file, tol) in cases {
        let st = Stencil::new(
            Filter::parse(spec, |_| unreachable!()).unwrap(),
            mode.parse().unwrap(),
        )
        .unwrap();
        let want = if tol == 0.0 {
            f32s(&golden(file))
        } else {
            f64s(&golden(file))
        };
        for (budget, max_tile) in [("64MiB", 16 << 20), ("1MiB", 3000), ("1MiB", 600)] {
            let out = dir.path().join("y.npy");
            let e = engine(budget, max_tile);
            let r = e.stencil(&x, &out, &st, Some(DType::F32)).unwrap();
            let got = f32s(&out);
            let err = max_rel_err(&got, &want);
            assert!(
                err <= tol,
                "{spec} {mode} at {budget}/{max_tile}: {err:e} ({} tiles)",
                r.tiles
            );
        }
    }
}

/// Random images through every filter and boundary mode at budgets that force many 2-D
/// tiles (down to tiles smaller than the halo), against the oracle; and bit-identical
/// output whatever the tiling.
#[test]
fn every_filter_and_mode_matches_the_oracle_and_ignores_tiling() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Lcg(7);
    let shapes: [&[usize]; 4] = [&[29, 61], &[2, 23, 17], &[3, 2], &[1, 1]];
    for shape in shapes {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| rng.f64() as f32 * 4.0 - 2.0).collect();
        let path = dir.path().join("x.npy");
        write_npy(&path, DType::F32, shape, bytemuck::cast_slice(&data));
        let x = TensorFile::open(&path).unwrap();
        let xf: Vec<f64> = data.iter().map(|&v| f64::from(v)).collect();
        for f in filters(dir.path()) {
            for mode in MODES {
                let st = Stencil::new(f.clone(), mode).unwrap();
                let want = oracle_bands(&f, mode, &xf, shape);
                let mut first: Option<Vec<u8>> = None;
                let mut most_tiles = 0;
                for (budget, max_tile) in [("64MiB", 16 << 20), ("2MiB", 1500), ("2MiB", 100)] {
                    let out = dir.path().join("y.npy");
                    let r = engine(budget, max_tile)
                        .stencil(&x, &out, &st, None)
                        .unwrap();
                    most_tiles = most_tiles.max(r.tiles);
                    if max_tile == 100 && shape == [29, 61] {
                        // 2-D tiles, narrower and shorter than the halo of sigma=3 (12)
                        assert!(
                            r.tile_shape[1] < 61 && r.tile_shape[0] > 1,
                            "{:?}",
                            r.tile_shape
                        );
                        if matches!(f, Filter::Gaussian { sigma, .. } if sigma > 2.0) {
                            assert!(
                                r.tile_shape[0] < 12 && r.tile_shape[1] < 12,
                                "{:?}",
                                r.tile_shape
                            );
                        }
                    }
                    let bytes = read_npy_data(&out);
                    let got: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, f32>(&bytes)
                        .into_iter()
                        .map(f64::from)
                        .collect();
                    let tol = if matches!(f, Filter::Median { .. }) {
                        0.0
                    } else {
                        3e-6
                    };
                    let err = max_rel_err(&got, &want);
                    assert!(err <= tol, "{f} {mode} {shape:?} at {max_tile}: {err:e}");
                    match &first {
                        None => first = Some(bytes),
                        Some(b) => {
                            assert!(b == &bytes, "{f} {mode} {shape:?}: tiling changed bits");
                        }
                    }
                }
                if n > 100 {
                    assert!(most_tiles >= 8, "{f} {shape:?}: only {most_tiles} tiles");
                }
            }
        }
    }
}

#[test]
fn dtypes_in_and_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Lcg(3);
    let (h, w) = (31, 27);
    // u16 median is exact and keeps the dtype
    let data: Vec<u16> = (0..h * w).map(|_| (rng.f64() * 60000.0) as u16).collect();
    let p = dir.path().join("u.npy");
    write_npy(&p, DType::U16, &[h, w], bytemuck::cast_slice(&data));
    let x = TensorFile::open(&p).unwrap();
    let st = Stencil::new(Filter::Median { size: 3 }, Boundary::Nearest).unwrap();
    let out = dir.path().join("m.npy");
    engine("4MiB", 700).stencil(&x, &out, &st, None).unwrap();
    let got: Vec<u16> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
    let xf: Vec<f64> = data.iter().map(|&v| f64::from(v)).collect();
    let want = oracle(&Filter::Median { size: 3 }, Boundary::Nearest, &xf, h, w);
    assert!(got.iter().zip(&want).all(|(&g, &e)| f64::from(g) == e));

    // i32 box filter computes in f64: to f64 output it matches the oracle closely
    let data: Vec<i32> = (0..h * w).map(|_| (rng.f64() * 2e9 - 1e9) as i32).collect();
    let p = dir.path().join("i.npy");
    write_npy(&p, DType::I32, &[h, w], bytemuck::cast_slice(&data));
    let x = TensorFile::open(&p).unwrap();
    let f = Filter::Box { size: 5 };
    let st = Stencil::new(f.clone(), Boundary::Reflect).unwrap();
    engine("4MiB", 700)
        .stencil(&x, &out, &st, Some(DType::F64))
        .unwrap();
    let got = f64s(&out);
    let xf: Vec<f64> = data.iter().map(|&v| f64::from(v)).collect();
    let want = oracle(&f, Boundary::Reflect, &xf, h, w);
    assert!(max_rel_err(&got, &want) < 1e-14);
    // ...and to i32 output it rounds toward zero, as a cast
    engine("4MiB", 700).stencil(&x, &out, &st, None).unwrap();
    let got: Vec<i32> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
    let close = got
        .iter()
        .zip(&want)
        .all(|(&g, &e)| (f64::from(g) - e.trunc()).abs() <= 1.0);
    assert!(close);
}

#[test]
fn bad_inputs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.npy");
    write_npy(&p, DType::F32, &[10], &[0u8; 40]);
    let x = TensorFile::open(&p).unwrap();
    let st = Stencil::new(Filter::Box { size: 3 }, Boundary::Reflect).unwrap();
    let e = engine("4MiB", 1 << 20)
        .stencil(&x, dir.path().join("o.npy"), &st, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank-2"), "{e}");
    assert!(!dir.path().join("o.npy").exists());
}

#[test]
fn transpose_matches_and_ignores_tiling() {
    let dir = tempfile::tempdir().unwrap();
    for (shape, dtype) in [
        (vec![37usize, 53], DType::F32),
        (vec![3, 20, 9], DType::U8),
        (vec![1, 70], DType::F64),
        (vec![64, 64], DType::I16),
    ] {
        let n: usize = shape.iter().product();
        let es = dtype.size();
        let data: Vec<u8> = (0..n * es).map(|i| (i * 7 % 251) as u8).collect();
        let p = dir.path().join("t.npy");
        write_npy(&p, dtype, &shape, &data);
        let x = TensorFile::open(&p).unwrap();
        let (b, h, w) = if shape.len() == 2 {
            (1, shape[0], shape[1])
        } else {
            (shape[0], shape[1], shape[2])
        };
        let mut want = vec![0u8; n * es];
        for band in 0..b {
            for r in 0..h {
                for c in 0..w {
                    let s = ((band * h + r) * w + c) * es;
                    let d = ((band * w + c) * h + r) * es;
                    want[d..d + es].copy_from_slice(&data[s..s + es]);
                }
            }
        }
        for max_tile in [16 << 20, 2000, 64] {
            let out = dir.path().join("tt.npy");
            let r = engine("2MiB", max_tile).transpose(&x, &out).unwrap();
            let t = TensorFile::open(&out).unwrap();
            let mut want_shape = shape.clone();
            let k = want_shape.len();
            want_shape.swap(k - 1, k - 2);
            assert_eq!(t.shape(), &want_shape[..]);
            assert!(
                read_npy_data(&out) == want,
                "{shape:?} {dtype} at {max_tile} ({} tiles)",
                r.tiles
            );
        }
    }
}

#[test]
fn patches_cover_the_image_with_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let (b, h, w) = (2usize, 23usize, 30usize);
    let data: Vec<u16> = (0..b * h * w).map(|i| i as u16).collect();
    let p = dir.path().join("scene.npy");
    write_npy(&p, DType::U16, &[b, h, w], bytemuck::cast_slice(&data));
    let x = TensorFile::open(&p).unwrap();
    for edge in [Edge::Shift, Edge::Pad] {
        let out = dir.path().join(format!("patches-{edge:?}"));
        let spec = PatchSpec {
            size: 8,
            overlap: 2,
            edge,
        };
        let (_, n) = engine("2MiB", 1 << 20).patches(&x, &out, spec).unwrap();
        let index = std::fs::read_to_string(out.join("index.csv")).unwrap();
        let lines: Vec<&str> = index.lines().skip(1).collect();
        assert_eq!(lines.len(), n);
        let mut covered = vec![false; h * w];
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            let (r0, c0): (i64, i64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            let t = TensorFile::open(out.join(f[0])).unwrap();
            assert_eq!(t.shape(), &[b, 8, 8]);
            let got: Vec<u16> = bytemuck::pod_collect_to_vec(&read_npy_data(&out.join(f[0])));
            for band in 0..b {
                for i in 0..8i64 {
                    for j in 0..8i64 {
                        let (r, c) = (r0 + i, c0 + j);
                        let v = got[(band * 64) + (i * 8 + j) as usize];
                        if r < h as i64 && c < w as i64 {
                            assert_eq!(v, data[(band * h + r as usize) * w + c as usize]);
                            covered[r as usize * w + c as usize] = true;
                        } else {
                            assert_eq!(edge, Edge::Pad);
                            assert_eq!(v, 0);
                        }
                    }
                }
            }
        }
        assert!(
            covered.iter().all(|&c| c),
            "{edge:?}: some pixel in no patch"
        );
    }
}

/// Where a run computed, and why, is the dispatch's own answer: with `--device auto` on
/// any machine, an operation the CUDA backend has a kernel for says it stays on the CPU
/// by choice, and one it has none for (medians wider than 7x7, patches, the column
/// statistics of standardize) says so.
#[test]
fn run_reports_say_where_each_family_ran_under_auto() {
    let dir = tempfile::tempdir().unwrap();
    let (h, w) = (40, 36);
    let data: Vec<f32> = (0..h * w).map(|i| (i % 97) as f32).collect();
    let p = dir.path().join("x.npy");
    write_npy(&p, DType::F32, &[h, w], bytemuck::cast_slice(&data));
    let x = TensorFile::open(&p).unwrap();
    let e = engine("4MiB", 4096);
    let out = dir.path().join("o.npy");
    let note = |r: &tilestream::RunReport| {
        assert_eq!(r.device, "cpu", "{r:?}");
        r.device_note.clone().unwrap_or_default()
    };
    let chosen = "passed the GPU suite on an H200 but ran slower there than the CPU";
    for (size, has) in [(3, true), (7, true), (9, false)] {
        let st = Stencil::new(Filter::Median { size }, Boundary::Nearest).unwrap();
        let n = note(&e.stencil(&x, &out, &st, None).unwrap());
        if has {
            assert!(
                n.contains(&format!("CUDA kernel for stencil {chosen}")),
                "{n}"
            );
        } else {
            assert_eq!(n, "auto: no CUDA kernel for stencil yet");
        }
    }
    let st = Stencil::new(Filter::Box { size: 5 }, Boundary::Reflect).unwrap();
    assert!(note(&e.stencil(&x, &out, &st, None).unwrap()).contains(chosen));
    assert!(note(&e.transpose(&x, &out).unwrap()).contains("kernel for transpose"));
    let (_, _, stats) = e.column_stats(&x, 0).unwrap();
    assert_eq!(
        note(&stats),
        "auto: no CUDA kernel for column mean and std yet"
    );
    let spec = PatchSpec {
        size: 16,
        overlap: 0,
        edge: Edge::Pad,
    };
    let (tiles, _) = e.patches(&x, dir.path().join("tiles"), spec).unwrap();
    assert_eq!(note(&tiles), "auto: no CUDA kernel for tiles yet");
}
