//! A user's function over blocks (`Engine::run_blocks`) against whole-array oracles: the
//! function here is a neighbourhood sum written over the padded block it is given, the
//! oracle the same sum over the whole image with the boundary resolved by walking (see
//! `stencil.rs`, whose `walk` it uses); both in f64, so equal bytes mean every block saw the right halo. The
//! results must be identical at every budget.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::common::{Lcg, read_npy_data, write_npy};
use crate::stencil::walk;
use tilestream::tiling::Boundary;
use tilestream::{
    Block, BlockOut, BlockShape, Blocks, BlocksOut, DType, Edges, Engine, Error, MemoryBudget,
    TensorFile, Working,
};

fn engine(budget: u64) -> Engine {
    Engine::new(MemoryBudget::new(budget)).unwrap()
}

/// A run of `what` over blocks of `shape` with `halo` around them: the default working
/// memory, one call at a time, every row.
fn blocks(halo: (usize, usize), edges: Edges, shape: BlockShape, what: &str) -> Blocks {
    Blocks {
        halo,
        edges,
        shape,
        working: Working::default(),
        what: what.into(),
        calls: 1,
        rows: None,
        pinned: None,
    }
}

/// The weighted neighbourhood sum of each pixel of each band within `r`, over the whole
/// image: weight `1 + 3|dy| + |dx|` (not symmetric, so a misplaced halo shows).
fn oracle(img: &[f64], (b, h, w): (usize, usize, usize), r: i64, edges: Edges) -> Vec<f64> {
    let (mode, cval) = match edges {
        Edges::Pad(m @ Boundary::Constant(c)) => (m, c),
        Edges::Pad(m) => (m, 0.0),
        Edges::Clip => (Boundary::Constant(0.0), 0.0),
    };
    let mut out = vec![0.0; b * h * w];
    for k in 0..b {
        for y in 0..h as i64 {
            for x in 0..w as i64 {
                let mut s = 0.0;
                for dy in -r..=r {
                    for dx in -r..=r {
                        let wgt = (1 + 3 * dy.abs() + dx.abs()) as f64;
                        let v = match (walk(mode, y + dy, h as i64), walk(mode, x + dx, w as i64)) {
                            (Some(yy), Some(xx)) => img[(k * h + yy) * w + xx],
                            _ => cval,
                        };
                        s += wgt * v;
                    }
                }
                out[(k * h + y as usize) * w + x as usize] = s;
            }
        }
    }
    out
}

/// The same sum computed from a padded block (f64 in, f64 out), over the block's own
/// positions; positions left out of a clipped block count as nothing.
fn block_sum(block: &Block<'_>, out: Option<BlockOut<'_>>, r: i64) -> tilestream::Result<()> {
    let input = &block.inputs[0];
    let data = input.as_slice::<f64>()?;
    let (b, ph, pw) = match input.shape.as_slice() {
        &[h, w] => (1, h, w),
        &[b, h, w] => (b, h, w),
        s => panic!("unexpected block shape {s:?}"),
    };
    let out = out.expect("an output");
    let res: &mut [f64] = bytemuck::cast_slice_mut(out.bytes);
    let ((r0, r1), (c0, c1)) = block.tile;
    let (th, tw) = (r1 - r0, c1 - c0);
    let (iy, ix) = block.inner;
    for k in 0..b {
        for y in 0..th {
            for x in 0..tw {
                let mut s = 0.0;
                for dy in -r..=r {
                    for dx in -r..=r {
                        let (py, px) = ((iy + y) as i64 + dy, (ix + x) as i64 + dx);
                        if (0..ph as i64).contains(&py) && (0..pw as i64).contains(&px) {
                            let wgt = (1 + 3 * dy.abs() + dx.abs()) as f64;
                            s += wgt * data[(k * ph + py as usize) * pw + px as usize];
                        }
                    }
                }
                res[(k * th + y) * tw + x] = s;
            }
        }
    }
    Ok(())
}

fn image(
    dir: &Path,
    (b, h, w): (usize, usize, usize),
    seed: u64,
) -> (std::path::PathBuf, Vec<f64>) {
    let mut rng = Lcg(seed);
    let v: Vec<f64> = (0..b * h * w)
        .map(|_| (rng.f64() * 100.0).round())
        .collect();
    let p = dir.join(format!("img{seed}.npy"));
    let shape: Vec<usize> = if b == 1 { vec![h, w] } else { vec![b, h, w] };
    write_npy(&p, DType::F64, &shape, bytemuck::cast_slice(&v));
    (p, v)
}

#[test]
fn a_neighbourhood_function_over_padded_blocks_equals_the_whole_image_at_every_budget() {
    let dir = tempfile::tempdir().unwrap();
    let dims = (2, 37, 29);
    let (p, img) = image(dir.path(), dims, 7);
    let input = TensorFile::open(&p).unwrap();
    let r = 2;
    for edges in [
        Edges::Pad(Boundary::Reflect),
        Edges::Pad(Boundary::Nearest),
        Edges::Pad(Boundary::Wrap),
        Edges::Pad(Boundary::Constant(-3.0)),
        Edges::Clip,
    ] {
        let want = oracle(&img, dims, r as i64, edges);
        let mut seen_tiles = Vec::new();
        for (budget, calls) in [(160 << 10, 1), (256 << 10, 3), (1 << 20, 1), (64 << 20, 2)] {
            let out = dir.path().join("out.npy");
            let req = Blocks {
                calls,
                ..blocks((r, r), edges, BlockShape::Auto, "sum")
            };
            let o = BlocksOut {
                path: &out,
                shape: input.shape().to_vec(),
                dtype: DType::F64,
            };
            let rep = engine(budget)
                .run_blocks(
                    &[&input],
                    &req,
                    Some(&o),
                    |b: &Block<'_>, o: Option<BlockOut<'_>>| block_sum(b, o, r as i64),
                )
                .unwrap();
            seen_tiles.push(rep.tiles);
            let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
            assert_eq!(
                got, want,
                "{edges:?} at {budget} bytes, {calls} calls at once ({} blocks)",
                rep.tiles
            );
        }
        assert!(
            seen_tiles.first() > seen_tiles.last(),
            "the budgets cut differently: {seen_tiles:?}"
        );
    }
}

#[test]
fn fixed_blocks_a_different_output_band_count_and_a_typed_closure() {
    let dir = tempfile::tempdir().unwrap();
    let (h, w) = (20, 23);
    let mut rng = Lcg(3);
    let v: Vec<u16> = (0..3 * h * w)
        .map(|_| (rng.next_u64() % 1000) as u16)
        .collect();
    let p = dir.path().join("s.npy");
    write_npy(&p, DType::U16, &[3, h, w], bytemuck::cast_slice(&v));
    let input = TensorFile::open(&p).unwrap();
    let out = dir.path().join("o.npy");
    let shapes = Mutex::new(Vec::new());
    let req = blocks(
        (0, 0),
        Edges::Pad(Boundary::Reflect),
        BlockShape::Fixed(8, 10),
        "bands",
    );
    engine(1 << 20)
        .run_blocks(
            &[&input],
            &req,
            Some(&BlocksOut {
                path: &out,
                shape: vec![2, h, w],
                dtype: DType::F32,
            }),
            |b: &Block<'_>, o: Option<BlockOut<'_>>| {
                let x = b.inputs[0].as_slice::<u16>()?;
                shapes.lock().unwrap().push(b.inputs[0].shape.clone());
                let o = o.unwrap();
                let n = o.shape[1] * o.shape[2];
                let res: &mut [f32] = bytemuck::cast_slice_mut(o.bytes);
                for i in 0..n {
                    res[i] = f32::from(x[i]) + f32::from(x[n + i]);
                    res[n + i] = f32::from(x[2 * n + i]) * 0.5;
                }
                Ok(())
            },
        )
        .unwrap();
    let shapes = shapes.into_inner().unwrap();
    assert_eq!(shapes.len(), 3 * 3, "8x10 blocks of 20x23");
    assert_eq!(shapes[0], vec![3, 8, 10]);
    assert_eq!(
        shapes[8],
        vec![3, 4, 3],
        "the last block is cut at the edges"
    );
    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&read_npy_data(&out));
    let plane = h * w;
    for i in 0..plane {
        assert_eq!(got[i], f32::from(v[i]) + f32::from(v[plane + i]));
        assert_eq!(got[plane + i], f32::from(v[2 * plane + i]) * 0.5);
    }
    // reading a block as the wrong type is refused, not reinterpreted
    let err = engine(1 << 20)
        .run_blocks(
            &[&input],
            &req,
            None,
            |b: &Block<'_>, _: Option<BlockOut<'_>>| b.inputs[0].as_slice::<f32>().map(|_| ()),
        )
        .unwrap_err();
    assert!(err.to_string().contains("u16 read as f32"), "{err}");
}

#[test]
fn a_reduction_over_fixed_blocks_is_identical_at_every_budget_and_several_inputs_align() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, a) = image(dir.path(), (1, 50, 31), 11);
    let (pb, b) = image(dir.path(), (1, 50, 31), 12);
    let (fa, fb) = (
        TensorFile::open(&pa).unwrap(),
        TensorFile::open(&pb).unwrap(),
    );
    let mut results = Vec::new();
    for (budget, calls) in [(200 << 10, 1), (512 << 10, 4), (8 << 20, 2)] {
        let partials = Mutex::new(Vec::new());
        let req = Blocks {
            calls,
            ..blocks(
                (0, 0),
                Edges::Pad(Boundary::Reflect),
                BlockShape::Fixed(7, 31),
                "dot",
            )
        };
        engine(budget)
            .run_blocks(
                &[&fa, &fb],
                &req,
                None,
                |blk: &Block<'_>, o: Option<BlockOut<'_>>| {
                    assert!(o.is_none());
                    let (x, y) = (
                        blk.inputs[0].as_slice::<f64>()?,
                        blk.inputs[1].as_slice::<f64>()?,
                    );
                    let dot = x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
                    partials.lock().unwrap().push((blk.index, dot));
                    Ok(())
                },
            )
            .unwrap();
        let mut partials = partials.into_inner().unwrap();
        if calls == 1 {
            assert!(
                partials.windows(2).all(|p| p[0].0 + 1 == p[1].0),
                "one call at a time: blocks in order"
            );
        }
        // several at once end in any order: the partials are summed in block order
        partials.sort_by_key(|p| p.0);
        assert_eq!(partials.len(), 8, "7-row blocks of 50 rows, {calls} calls");
        results.push(partials.iter().map(|p| p.1).sum::<f64>().to_bits());
    }
    assert!(results.windows(2).all(|r| r[0] == r[1]), "{results:?}");
    let direct: f64 = a.iter().zip(&b).map(|(p, q)| p * q).sum();
    assert!((f64::from_bits(results[0]) - direct).abs() < 1e-6 * direct.abs());
}

#[test]
fn a_failing_function_stops_the_run_and_leaves_nothing_at_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = image(dir.path(), (1, 64, 16), 5);
    let input = TensorFile::open(&p).unwrap();
    let out = dir.path().join("never.npy");
    let req = blocks(
        (1, 1),
        Edges::Pad(Boundary::Reflect),
        BlockShape::Fixed(8, 16),
        "failing",
    );
    let calls = AtomicUsize::new(0);
    let err = engine(1 << 20)
        .run_blocks(
            &[&input],
            &req,
            Some(&BlocksOut {
                path: &out,
                shape: vec![64, 16],
                dtype: DType::F64,
            }),
            |b: &Block<'_>, _: Option<BlockOut<'_>>| {
                calls.fetch_add(1, Ordering::Relaxed);
                if b.index == 3 {
                    Err(Error::Function {
                        block: b.index,
                        message: "no".into(),
                    })
                } else {
                    Ok(())
                }
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::Function { block: 3, .. }), "{err}");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        4,
        "stopped at the failing block"
    );
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the input is left: {left:?}");
}

#[test]
fn several_calls_at_once_overlap_and_a_failure_among_them_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = image(dir.path(), (1, 64, 16), 5);
    let input = TensorFile::open(&p).unwrap();
    let out = dir.path().join("never.npy");
    let req = Blocks {
        calls: 2,
        ..blocks(
            (1, 1),
            Edges::Pad(Boundary::Reflect),
            BlockShape::Fixed(8, 16),
            "waiting",
        )
    };
    let plan = engine(1 << 20).plan_blocks(&[&input], &req, None).unwrap();
    assert_eq!(plan.calls(), 2);
    assert!(plan.to_string().contains("2 at once"), "{plan}");
    // block 0 waits until block 1's call has started: it can only if two run at once
    let started = (Mutex::new(0usize), Condvar::new());
    let o = BlocksOut {
        path: &out,
        shape: vec![64, 16],
        dtype: DType::F64,
    };
    let err = engine(1 << 20)
        .run_blocks(
            &[&input],
            &req,
            Some(&o),
            |b: &Block<'_>, _: Option<BlockOut<'_>>| {
                let (n, cv) = &started;
                *n.lock().unwrap() += 1;
                cv.notify_all();
                if b.index == 0 {
                    let (g, timeout) = cv
                        .wait_timeout_while(n.lock().unwrap(), Duration::from_secs(60), |n| *n < 2)
                        .unwrap();
                    assert!(
                        !timeout.timed_out(),
                        "block 1 never ran beside block 0 ({})",
                        *g
                    );
                }
                if b.index == 5 {
                    return Err(Error::Function {
                        block: 5,
                        message: "no".into(),
                    });
                }
                Ok(())
            },
        )
        .unwrap_err();
    assert!(matches!(err, Error::Function { block: 5, .. }), "{err}");
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the input is left: {left:?}");
}

#[test]
fn shares_of_the_rows_written_into_one_output_equal_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let dims = (2, 41, 23);
    let (p, img) = image(dir.path(), dims, 21);
    let input = TensorFile::open(&p).unwrap();
    let r = 3;
    let edges = Edges::Pad(Boundary::Reflect);
    let want = oracle(&img, dims, r as i64, edges);
    let dest = dir.path().join("o.npy");
    let tmp = tilestream::create_npy_for_rows(&dest, &[2, 41, 23], DType::F64).unwrap();
    // three shares of uneven rows, each under its own small budget, as cluster tasks
    for (share, budget) in [
        ((0, 10), 160 << 10),
        ((10, 11), 256 << 10),
        ((11, 41), 1 << 20),
    ] {
        let req = Blocks {
            rows: Some(share),
            ..blocks((r, r), edges, BlockShape::Auto, "sum")
        };
        let plan = engine(budget).plan_blocks(&[&input], &req, None).unwrap();
        let rows: usize = (0..plan.num_blocks())
            .map(|i| {
                let t = plan.boxes.box_tile(i);
                assert!(
                    t.r0 as usize >= share.0 && t.r1 as usize <= share.1,
                    "{t:?}"
                );
                if t.c0 == 0 { t.rows() } else { 0 }
            })
            .sum();
        assert_eq!(rows, share.1 - share.0, "the share's rows, each once");
        engine(budget)
            .with_output_region(Some(tilestream::OutRegion {
                at_row: 0,
                skip_rows: 0,
                rows: None,
            }))
            .run_blocks(
                &[&input],
                &req,
                Some(&BlocksOut {
                    path: &tmp,
                    shape: vec![2, 41, 23],
                    dtype: DType::F64,
                }),
                |b: &Block<'_>, o: Option<BlockOut<'_>>| block_sum(b, o, r as i64),
            )
            .unwrap();
    }
    tilestream::commit_npy(&tmp, &dest, false).unwrap();
    let got: Vec<f64> = bytemuck::pod_collect_to_vec(&read_npy_data(&dest));
    assert_eq!(got, want);
    let req = Blocks {
        rows: Some((30, 30)),
        ..blocks((0, 0), edges, BlockShape::Auto, "sum")
    };
    let err = engine(1 << 20)
        .plan_blocks(&[&input], &req, None)
        .unwrap_err();
    assert!(err.to_string().contains("hold no block"), "{err}");
}

#[test]
fn bad_requests_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = image(dir.path(), (1, 10, 12), 1);
    let (q, _) = image(dir.path(), (1, 10, 13), 2);
    let (fp, fq) = (TensorFile::open(&p).unwrap(), TensorFile::open(&q).unwrap());
    let req = blocks((0, 0), Edges::Clip, BlockShape::Auto, "f");
    let e = engine(1 << 20);
    let err = e.plan_blocks(&[&fp, &fq], &req, None).unwrap_err();
    assert!(
        err.to_string().contains("share their rows and columns"),
        "{err}"
    );
    let out = dir.path().join("o.npy");
    let o = BlocksOut {
        path: &out,
        shape: vec![10, 11],
        dtype: DType::F32,
    };
    let err = e.plan_blocks(&[&fp], &req, Some(&o)).unwrap_err();
    assert!(
        err.to_string()
            .contains("ends with their rows and columns (10, 12)"),
        "{err}"
    );
    // the output over its own input
    let over = BlocksOut {
        path: &p,
        shape: vec![10, 12],
        dtype: DType::F64,
    };
    let err = e
        .run_blocks(
            &[&fp],
            &req,
            Some(&over),
            |_: &Block<'_>, _: Option<BlockOut<'_>>| Ok(()),
        )
        .unwrap_err();
    assert!(err.to_string().contains("also an input"), "{err}");
    // fixed blocks across an encoded output's chunks: refused, naming what to give
    let tif = dir.path().join("o.tif");
    let fixed = Blocks {
        shape: BlockShape::Fixed(3, 5),
        ..req.clone()
    };
    let o = BlocksOut {
        path: &tif,
        shape: vec![10, 12],
        dtype: DType::F32,
    };
    let err = e
        .with_tiff_output(tilestream::TiffWriteOptions {
            tile: 16,
            ..Default::default()
        })
        .plan_blocks(&[&fp], &fixed, Some(&o))
        .unwrap_err();
    assert!(err.to_string().contains("do not fit the chunks"), "{err}");
    let e = engine(1 << 20);
    // a working memory the budget cannot hold, even for the smallest block
    let heavy = Blocks {
        working: Working {
            per_block: 1.0,
            per_out: 0.0,
            bytes: 2 << 20,
        },
        ..req
    };
    let err = e.plan_blocks(&[&fp], &heavy, None).unwrap_err();
    assert!(matches!(err, Error::Budget(_)), "{err}");
}

#[test]
fn encoded_outputs_of_several_bands_equal_the_npy_output() {
    let dir = tempfile::tempdir().unwrap();
    let dims = (3, 70, 90);
    let (p, img) = image(dir.path(), dims, 9);
    let input = TensorFile::open(&p).unwrap();
    let want = oracle(&img, dims, 1, Edges::Pad(Boundary::Nearest));
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    for name in ["o.tif", "o.zarr"] {
        let out = dir.path().join(name);
        let req = blocks(
            (1, 1),
            Edges::Pad(Boundary::Nearest),
            BlockShape::Auto,
            "sum",
        );
        let e = engine(1 << 20)
            .with_tiff_output(tilestream::TiffWriteOptions {
                tile: 32,
                ..Default::default()
            })
            .with_zarr_output(tilestream::ZarrWriteOptions {
                chunks: Some(vec![2, 16, 32]),
                ..Default::default()
            });
        e.run_blocks(
            &[&input],
            &req,
            Some(&BlocksOut {
                path: &out,
                shape: vec![3, 70, 90],
                dtype: DType::F32,
            }),
            |b: &Block<'_>, o: Option<BlockOut<'_>>| {
                let o = o.unwrap();
                let mut tmp = vec![0u8; o.bytes.len() * 2];
                block_sum(
                    b,
                    Some(BlockOut {
                        bytes: &mut tmp,
                        dtype: DType::F64,
                        shape: o.shape.clone(),
                    }),
                    1,
                )?;
                let wide: &[f64] = bytemuck::cast_slice(&tmp);
                let res: &mut [f32] = bytemuck::cast_slice_mut(o.bytes);
                for (r, &v) in res.iter_mut().zip(wide) {
                    *r = v as f32;
                }
                Ok(())
            },
        )
        .unwrap();
        let back = TensorFile::open(&out).unwrap();
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(back.map_window(0, want.len() as u64).unwrap().bytes());
        assert_eq!(got, want, "{name}");
    }
}

/// Whether `p` points into page-locked memory the CUDA driver allocated; else the
/// driver's answer. The block callback runs on a compute thread, where no context is
/// current (the driver would answer `CUDA_ERROR_INVALID_CONTEXT` whatever `p` is), so
/// device 0's primary context, the one the engine allocated in, is bound first.
#[cfg(feature = "cuda")]
fn page_locked(p: *const u8) -> Result<(), String> {
    let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| format!("{e:?}"))?;
    ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
    let mut flags = 0u32;
    // SAFETY: cuMemHostGetFlags only looks the pointer up in the driver's table of
    // page-locked allocations; it reads and writes nothing through it. A context is
    // current on this thread (bound above).
    let r = unsafe { cudarc::driver::sys::cuMemHostGetFlags(&raw mut flags, p as *mut _) };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{r:?}"))
    }
}

#[test]
fn page_locked_blocks_equal_plain_ones_on_a_gpu_and_are_refused_in_one_line_without() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = image(dir.path(), (2, 40, 24), 9);
    let input = TensorFile::open(&p).unwrap();
    let plain = blocks((2, 2), Edges::Pad(Boundary::Wrap), BlockShape::Auto, "sum");
    let (a, b) = (dir.path().join("plain.npy"), dir.path().join("locked.npy"));
    let out = |path| BlocksOut {
        path,
        shape: vec![2, 40, 24],
        dtype: DType::F64,
    };
    engine(96 << 10)
        .run_blocks(
            &[&input],
            &plain,
            Some(&out(&a)),
            |b: &Block<'_>, o: Option<BlockOut<'_>>| block_sum(b, o, 2),
        )
        .unwrap();
    for calls in [1, 2] {
        let locked = Blocks {
            pinned: Some(0),
            calls,
            ..plain.clone()
        };
        let plan = engine(96 << 10)
            .plan_blocks(&[&input], &locked, None)
            .unwrap();
        assert!(
            plan.to_string()
                .contains("page-locked:    the padded blocks, by cuda:0"),
            "{plan}"
        );
        // every band of the input is in each block
        assert!(plan.to_string().contains("; 2 bands of 40x24)"), "{plan}");
        let seen = AtomicUsize::new(0);
        let run = engine(96 << 10).run_blocks(
            &[&input],
            &locked,
            Some(&out(&b)),
            |blk: &Block<'_>, o: Option<BlockOut<'_>>| {
                #[cfg(feature = "cuda")]
                if let Err(why) = page_locked(blk.inputs[0].data.as_ptr()) {
                    panic!("block {} is not page-locked: {why}", blk.index);
                }
                seen.fetch_add(1, Ordering::Relaxed);
                block_sum(blk, o, 2)
            },
        );
        // a GPU where one can be used (required by the GPU kit's suite)
        match tilestream::device::probe(0).map(|_| crate::common::backends()) {
            Ok(_) => {
                run.unwrap();
                assert!(seen.load(Ordering::Relaxed) > 1);
                assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
                std::fs::remove_file(&b).unwrap();
            }
            Err(why) => {
                assert_eq!(crate::common::backends().len(), 1);
                eprintln!("page-locked blocks: refused without a GPU ({why})");
                let e = run.unwrap_err().to_string();
                assert!(
                    e.starts_with("pinned=cuda:0 asks for the blocks in page-locked memory"),
                    "{e}"
                );
                assert!(
                    e.ends_with("leave `pinned` out where no GPU is used") && !e.contains('\n'),
                    "{e}"
                );
                assert_eq!(seen.load(Ordering::Relaxed), 0, "no block ran");
                assert!(!b.exists());
            }
        }
    }
}
