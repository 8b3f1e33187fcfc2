//! Jobs split by rows, as a cluster runs them (`tilestream.dask`): reduction partials of
//! any split on the row step merge into the bytes of one run; outputs written row range
//! by row range into one pre-created `.npy` equal the output of one run; and the
//! refusals (a split off the step, partials that do not cover the rows once, a region
//! that does not fit the file).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::path::Path;

use crate::common::{Lcg, read_npy_data, write_npy};
use tilestream::format::{OutRegion, commit_npy, create_npy_for_rows};
use tilestream::{
    DType, Element, Engine, MemoryBudget, Partial, Reduce, ReduceOver, TensorFile, merge_partials,
    row_step,
};

fn engine(budget: u64) -> Engine {
    Engine::new(MemoryBudget::new(budget))
        .unwrap()
        .with_threads(2)
        .unwrap()
}

/// Values with a large offset and a spread, so sums round and variance cancels: a wrong
/// order of operations shows in the last bits.
fn data(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        let u = rng.f64();
        tilestream::dispatch_dtype!(dtype, T => {
            let v = if dtype.is_float() { 1000.0 + (u - 0.5) * 7.3 } else { (u * 250.0).floor() };
            out.extend_from_slice(bytemuck::bytes_of(&T::from_f64(v)));
        }, complex => unreachable!("the tests give real dtypes here"));
    }
    out
}

/// Splits `0..n` at multiples of `step`: `parts` shares, as even as the step allows.
fn split(n: u64, step: u64, parts: u64) -> Vec<(u64, u64)> {
    let blocks = n.div_ceil(step);
    let mut cuts: Vec<u64> = (0..=parts)
        .map(|i| ((blocks * i / parts) * step).min(n))
        .collect();
    cuts.dedup();
    cuts.windows(2).map(|w| (w[0], w[1])).collect()
}

fn merged(
    e: &Engine,
    input: &TensorFile,
    op: Reduce,
    over: ReduceOver,
    cuts: &[(u64, u64)],
) -> Vec<u8> {
    // computed in reverse order and shipped as bytes, as a cluster would
    let parts: Vec<Partial> = cuts
        .iter()
        .rev()
        .map(|&(a, b)| {
            let (p, _) = e.reduce_partial(input, op, over, a..b).unwrap();
            Partial::from_bytes(&p.to_bytes()).unwrap()
        })
        .collect();
    merge_partials(&parts).unwrap().bytes().to_vec()
}

#[test]
fn partials_of_any_split_merge_into_the_bytes_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let ops = [
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Min,
        Reduce::Max,
        Reduce::Var { ddof: 0 },
        Reduce::Std { ddof: 1 },
    ];
    // (shape, dtype, over): columns (256 rows a block), all elements (128 Ki a block,
    // rows of 96 elements: a step of 4096 rows, three blocks), a rank-1
    // input, an inner axis (rows are outputs of their own), a wide matrix
    let cases: [(&[usize], DType, ReduceOver); 6] = [
        (&[3000, 512], DType::F32, ReduceOver::Axis(0)),
        (&[10_000, 96], DType::F32, ReduceOver::All),
        (&[700_001], DType::F64, ReduceOver::Axis(0)),
        (&[40, 30, 50], DType::I16, ReduceOver::Axis(1)),
        (&[900, 300], DType::U8, ReduceOver::Axis(0)),
        (&[50, 20_000], DType::F32, ReduceOver::Axis(0)),
    ];
    for (k, (shape, dtype, over)) in cases.into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let path = dir.path().join(format!("x{k}.npy"));
        write_npy(&path, dtype, shape, &data(dtype, n, k as u64 + 1));
        let input = TensorFile::open(&path).unwrap();
        let step = row_step(shape, over).unwrap();
        let rows = shape[0] as u64;
        assert!(
            split(rows, step, 7).len() > 1,
            "{shape:?}: no split to test"
        );
        for op in ops {
            let (whole, _) = engine(64 << 20).reduce(&input, op, over).unwrap();
            for (budget, parts) in [(64u64 << 20, 1), (16 << 20, 2), (12 << 20, 3), (8 << 20, 7)] {
                let cuts = split(rows, step, parts);
                let got = merged(&engine(budget), &input, op, over, &cuts);
                assert!(
                    got == whole.bytes(),
                    "{op:?} over {over:?} of {shape:?} {dtype}: split {cuts:?} (step {step}) \
                     differs from one run"
                );
            }
        }
    }
}

#[test]
fn splits_off_the_step_and_partials_that_do_not_cover_the_rows_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    write_npy(
        &path,
        DType::F32,
        &[1000, 512],
        &data(DType::F32, 512_000, 9),
    );
    let input = TensorFile::open(&path).unwrap();
    let e = engine(16 << 20);
    let over = ReduceOver::Axis(0);
    assert_eq!(row_step(&[1000, 512], over).unwrap(), 256);
    let msg = e
        .reduce_partial(&input, Reduce::Mean, over, 100..512)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("multiple of 256 rows"), "{msg}");
    // the last share may end anywhere
    let last = e
        .reduce_partial(&input, Reduce::Mean, over, 768..1000)
        .unwrap()
        .0;
    let first = e
        .reduce_partial(&input, Reduce::Mean, over, 0..256)
        .unwrap()
        .0;
    let msg = merge_partials(&[first.clone(), last.clone()])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("rows 256..768 are in no partial"), "{msg}");
    let msg = merge_partials(&[first.clone(), first.clone()])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("rows 0..256 are in two partials"), "{msg}");
    let other = e
        .reduce_partial(&input, Reduce::Sum, over, 256..1000)
        .unwrap()
        .0;
    let msg = merge_partials(&[first.clone(), other])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("different reductions"), "{msg}");
    let mut cut = first.to_bytes();
    cut.truncate(cut.len() - 8);
    let mid = e
        .reduce_partial(&input, Reduce::Mean, over, 256..768)
        .unwrap()
        .0;
    let msg = merge_partials(&[Partial::from_bytes(&cut).unwrap(), mid, last])
        .unwrap_err()
        .to_string();
    assert!(msg.contains("bytes, not"), "{msg}");
    assert!(Partial::from_bytes(b"not a partial").is_err());
}

/// Runs `affine` of rows `a..b` of `src` into rows `a..b` of the file being made.
fn affine_rows(e: &Engine, src: &Path, tmp: &Path, (a, b): (u64, u64)) {
    let input = TensorFile::open(src).unwrap().rows(a..b).unwrap();
    let region = OutRegion {
        at_row: a,
        skip_rows: 0,
        rows: None,
    };
    e.clone()
        .with_output_region(Some(region))
        .affine(&input, tmp, 0.5, -3.0, Some(DType::F32))
        .unwrap();
}

#[test]
fn outputs_written_by_row_ranges_equal_one_run_and_appear_only_when_committed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.npy");
    write_npy(
        &src,
        DType::U16,
        &[1001, 37],
        &data(DType::U16, 1001 * 37, 3),
    );
    let one = dir.path().join("one.npy");
    let e = engine(1 << 20);
    e.affine(
        &TensorFile::open(&src).unwrap(),
        &one,
        0.5,
        -3.0,
        Some(DType::F32),
    )
    .unwrap();
    let dest = dir.path().join("split.npy");
    let tmp = create_npy_for_rows(&dest, &[1001, 37], DType::F32).unwrap();
    assert!(
        !dest.exists(),
        "nothing at the destination before the commit"
    );
    // out of order, one share written twice (a retried task)
    for cut in [(600, 1001), (0, 300), (300, 600), (600, 1001)] {
        affine_rows(&e, &src, &tmp, cut);
    }
    assert!(!dest.exists());
    commit_npy(&tmp, &dest, true).unwrap();
    assert!(!tmp.exists());
    assert_eq!(std::fs::read(&dest).unwrap(), std::fs::read(&one).unwrap());
}

#[test]
fn a_region_keeps_only_its_rows_of_a_run_with_halo_rows() {
    // a 3x3 box filter of rows 40..90 computed over rows 39..91 (one halo row each
    // side), its first and last rows dropped: the rows of the filter of the whole image
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("img.npy");
    write_npy(&src, DType::F32, &[128, 64], &data(DType::F32, 128 * 64, 5));
    let stencil = tilestream::spec::stencil::Stencil::new(
        tilestream::spec::stencil::Filter::parse("box:size=3", |_| unreachable!()).unwrap(),
        "reflect".parse().unwrap(),
    )
    .unwrap();
    let e = engine(1 << 20);
    let one = dir.path().join("one.npy");
    e.stencil(&TensorFile::open(&src).unwrap(), &one, &stencil, None)
        .unwrap();
    let dest = dir.path().join("split.npy");
    let tmp = create_npy_for_rows(&dest, &[128, 64], DType::F32).unwrap();
    for (a, b) in [(0u64, 40u64), (40, 90), (90, 128)] {
        let (lo, hi) = (a.saturating_sub(1), (b + 1).min(128));
        let input = TensorFile::open(&src).unwrap().rows(lo..hi).unwrap();
        let region = OutRegion {
            at_row: a,
            skip_rows: a - lo,
            rows: Some(b - a),
        };
        e.clone()
            .with_output_region(Some(region))
            .stencil(&input, &tmp, &stencil, None)
            .unwrap();
    }
    commit_npy(&tmp, &dest, false).unwrap();
    assert_eq!(read_npy_data(&dest), read_npy_data(&one));
}

#[test]
fn a_region_that_does_not_fit_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.npy");
    write_npy(&src, DType::F32, &[100, 8], &data(DType::F32, 800, 4));
    let dest = dir.path().join("o.npy");
    let tmp = create_npy_for_rows(&dest, &[100, 8], DType::F32).unwrap();
    let input = TensorFile::open(&src).unwrap().rows(50..100).unwrap();
    let at = |at_row| {
        engine(1 << 20)
            .with_output_region(Some(OutRegion {
                at_row,
                skip_rows: 0,
                rows: None,
            }))
            .affine(&input, &tmp, 1.0, 0.0, Some(DType::F32))
    };
    let msg = at(60).unwrap_err().to_string();
    assert!(msg.contains("at row 60 (it holds 100 rows)"), "{msg}");
    at(50).unwrap();
    let msg = engine(1 << 20)
        .with_output_region(Some(OutRegion {
            at_row: 0,
            skip_rows: 0,
            rows: None,
        }))
        .affine(&input, &tmp, 1.0, 0.0, Some(DType::F64))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("cannot write") && msg.contains("f64"), "{msg}");
    let msg = TensorFile::open(&src)
        .unwrap()
        .rows(90..101)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("out of range"), "{msg}");
}

/// Every file of a directory tree, by relative path, with its bytes.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A progress callback that records, after every tile, the most bytes seen in temporary
/// files beside the store `tmp` (a staged region's raw rows would be there), and that
/// figure.
#[allow(clippy::type_complexity)]
fn watch_beside(
    tmp: &Path,
) -> (
    std::sync::Arc<std::sync::Mutex<u64>>,
    std::sync::Arc<dyn Fn(&tilestream::scheduler::Progress) + Send + Sync>,
) {
    let parent = tmp.parent().unwrap().to_path_buf();
    let beside = std::sync::Arc::new(std::sync::Mutex::new(0u64));
    let (b, tmp) = (beside.clone(), tmp.to_path_buf());
    let watch = std::sync::Arc::new(move |_: &tilestream::scheduler::Progress| {
        let staged: u64 = std::fs::read_dir(&parent)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|f| f.path() != tmp && f.path().is_file())
            .filter(|f| f.file_name().to_string_lossy().contains("tilestream-tmp"))
            .map(|f| f.metadata().map_or(0, |m| m.len()))
            .sum();
        let mut b = b.lock().unwrap();
        *b = (*b).max(staged);
    });
    (beside, watch)
}

#[test]
fn a_zarr_store_written_chunk_rows_by_chunk_rows_equals_one_run() {
    use tilestream::format::zarr::{ZarrCompression, ZarrWriteOptions};
    use tilestream::format::{commit_zarr, create_zarr_for_rows};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("x.npy");
    write_npy(&src, DType::U16, &[1000, 70], &data(DType::U16, 70_000, 6));
    for shard in [None, Some(vec![256, 70])] {
        let opts = ZarrWriteOptions {
            chunks: Some(vec![128, 35]),
            shard: shard.clone(),
            compression: ZarrCompression::Zstd(3),
            memory: 1 << 20,
        };
        let e = engine(2 << 20).with_zarr_output(opts.clone());
        let one = dir.path().join("one.zarr");
        e.affine(
            &TensorFile::open(&src).unwrap(),
            &one,
            2.0,
            1.0,
            Some(DType::F32),
        )
        .unwrap();
        let dest = dir.path().join("split.zarr");
        let tmp = create_zarr_for_rows(&dest, &[1000, 70], DType::F32, &opts).unwrap();
        let cuts: &[(u64, u64)] = if shard.is_some() {
            &[(512, 1000), (0, 256), (256, 512)]
        } else {
            &[(768, 1000), (0, 128), (128, 768)]
        };
        // each share's chunks go straight into the store: after every tile, the files
        // beside the store (none of the store's own) hold no raw staging of the rows
        let (beside, watch) = watch_beside(&tmp);
        for &(a, b) in cuts {
            let input = TensorFile::open(&src).unwrap().rows(a..b).unwrap();
            e.clone()
                .with_output_region(Some(OutRegion {
                    at_row: a,
                    skip_rows: 0,
                    rows: None,
                }))
                .with_progress(watch.clone())
                .affine(&input, &tmp, 2.0, 1.0, Some(DType::F32))
                .unwrap();
        }
        assert_eq!(*beside.lock().unwrap(), 0, "{shard:?}: rows staged raw");
        assert!(!dest.exists());
        // a share off the chunk grid is refused
        let input = TensorFile::open(&src).unwrap().rows(100..200).unwrap();
        let msg = e
            .clone()
            .with_output_region(Some(OutRegion {
                at_row: 100,
                skip_rows: 0,
                rows: None,
            }))
            .affine(&input, &tmp, 2.0, 1.0, Some(DType::F32))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("in chunks of"), "{msg}");
        // a task with other chunk options than the store's is refused
        let other = ZarrWriteOptions {
            chunks: Some(vec![64, 35]),
            ..opts.clone()
        };
        let input = TensorFile::open(&src).unwrap().rows(0..256).unwrap();
        let msg = engine(2 << 20)
            .with_zarr_output(other)
            .with_output_region(Some(OutRegion {
                at_row: 0,
                skip_rows: 0,
                rows: None,
            }))
            .affine(&input, &tmp, 2.0, 1.0, Some(DType::F32))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("give every task the options"), "{msg}");
        commit_zarr(&tmp, &dest).unwrap();
        let (a, b) = (tree(&one), tree(&dest));
        assert_eq!(
            a.iter().map(|f| &f.0).collect::<Vec<_>>(),
            b.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        // sharded too: a shard's inner chunks are laid out in C order, whatever order
        // their parallel encoding finishes in
        assert!(a == b, "the stores differ (shard {shard:?})");
        std::fs::remove_dir_all(&one).unwrap();
        std::fs::remove_dir_all(&dest).unwrap();
    }
    // nothing left beside them
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["x.npy".to_string()]);
}

#[test]
fn filter_tasks_with_halo_rows_stream_their_rows_into_a_zarr_store() {
    // a gaussian of radius 4 split as tilestream.dask splits it: each share's input
    // carries 4 halo rows each side, the run's first rows (skip_rows) are not written, so
    // the store's chunks start 4 rows into the run: its boxes are cut along them
    use tilestream::format::zarr::{ZarrCompression, ZarrWriteOptions};
    use tilestream::format::{commit_zarr, create_zarr_for_rows};
    let dir = tempfile::tempdir().unwrap();
    let (h, w) = (300u64, 200usize);
    let src = dir.path().join("img.npy");
    write_npy(
        &src,
        DType::F32,
        &[h as usize, w],
        &data(DType::F32, h as usize * w, 9),
    );
    let stencil = tilestream::spec::stencil::Stencil::new(
        tilestream::spec::stencil::Filter::parse("gaussian:sigma=1", |_| unreachable!()).unwrap(),
        "reflect".parse().unwrap(),
    )
    .unwrap();
    let r = 4u64;
    let opts = ZarrWriteOptions {
        chunks: Some(vec![64, 50]),
        shard: None,
        compression: ZarrCompression::Zstd(3),
        memory: 1 << 20,
    };
    // 256 KiB: a share's boxes hold a few chunks, not a whole row of the image
    for budget in [256u64 << 10, 4 << 20] {
        let e = engine(budget).with_zarr_output(opts.clone());
        let one = dir.path().join("one.zarr");
        engine(64 << 20)
            .with_zarr_output(opts.clone())
            .stencil(&TensorFile::open(&src).unwrap(), &one, &stencil, None)
            .unwrap();
        let dest = dir.path().join("split.zarr");
        let tmp = create_zarr_for_rows(&dest, &[h as usize, w], DType::F32, &opts).unwrap();
        let (beside, watch) = watch_beside(&tmp);
        for (a, b) in [(128u64, 256u64), (0, 128), (256, h)] {
            let (lo, hi) = (a.saturating_sub(r), (b + r).min(h));
            let input = TensorFile::open(&src).unwrap().rows(lo..hi).unwrap();
            e.clone()
                .with_output_region(Some(OutRegion {
                    at_row: a,
                    skip_rows: a - lo,
                    rows: Some(b - a),
                }))
                .with_progress(watch.clone())
                .stencil(&input, &tmp, &stencil, None)
                .unwrap();
        }
        assert_eq!(*beside.lock().unwrap(), 0, "{budget}: rows staged raw");
        commit_zarr(&tmp, &dest).unwrap();
        assert!(tree(&one) == tree(&dest), "{budget}: the stores differ");
        std::fs::remove_dir_all(&one).unwrap();
        std::fs::remove_dir_all(&dest).unwrap();
    }
}

#[test]
fn element_wise_tasks_below_a_slab_of_chunks_stream_their_rows_in_boxes() {
    // 200x1000 f32 in chunks of 64x100: a slab of chunks is 250 KiB, more than three
    // quarters of 256 KiB hold with a chunk in flight, so each task's run goes in boxes
    // along the store's chunks; below one chunk and one in flight it is refused
    use tilestream::format::zarr::{ZarrCompression, ZarrWriteOptions};
    use tilestream::format::{commit_zarr, create_zarr_for_rows};
    let dir = tempfile::tempdir().unwrap();
    let (h, w) = (200usize, 1000usize);
    let src = dir.path().join("x.npy");
    write_npy(&src, DType::F32, &[h, w], &data(DType::F32, h * w, 3));
    let opts = ZarrWriteOptions {
        chunks: Some(vec![64, 100]),
        shard: None,
        compression: ZarrCompression::Zstd(3),
        memory: 1 << 20,
    };
    let one = dir.path().join("one.zarr");
    engine(64 << 20)
        .with_zarr_output(opts.clone())
        .affine(&TensorFile::open(&src).unwrap(), &one, 2.0, 1.0, None)
        .unwrap();
    let dest = dir.path().join("split.zarr");
    let tmp = create_zarr_for_rows(&dest, &[h, w], DType::F32, &opts).unwrap();
    let (beside, watch) = watch_beside(&tmp);
    let task = |budget: u64, (a, b): (u64, u64)| {
        let input = TensorFile::open(&src).unwrap().rows(a..b).unwrap();
        engine(budget)
            .with_zarr_output(opts.clone())
            .with_output_region(Some(OutRegion {
                at_row: a,
                skip_rows: 0,
                rows: None,
            }))
            .with_progress(watch.clone())
            .affine(&input, &tmp, 2.0, 1.0, None)
    };
    let msg = task(64 << 10, (0, 128)).unwrap_err().to_string();
    assert!(
        msg.contains("too small") && msg.contains("`memory"),
        "{msg}"
    );
    for cut in [(128u64, 200u64), (0, 128)] {
        task(256 << 10, cut).unwrap();
    }
    assert_eq!(*beside.lock().unwrap(), 0, "rows staged raw");
    commit_zarr(&tmp, &dest).unwrap();
    assert!(tree(&one) == tree(&dest), "the stores differ");
}

#[test]
fn several_reductions_in_one_pass_give_the_partials_of_each() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    write_npy(
        &path,
        DType::F32,
        &[3000, 200],
        &data(DType::F32, 600_000, 12),
    );
    let input = TensorFile::open(&path).unwrap();
    let over = ReduceOver::Axis(0);
    let ops = [Reduce::Mean, Reduce::Std { ddof: 1 }, Reduce::Max];
    let step = row_step(&[3000, 200], over).unwrap();
    let e = engine(4 << 20);
    let mut per_op: Vec<Vec<Partial>> = vec![Vec::new(); ops.len()];
    for (a, b) in split(3000, step, 3) {
        let (parts, _) = e.reduce_partials(&input, &ops, over, a..b).unwrap();
        for (k, p) in parts.into_iter().enumerate() {
            per_op[k].push(p);
        }
    }
    for (op, parts) in ops.iter().zip(&per_op) {
        let (one, _) = e.reduce(&input, *op, over).unwrap();
        assert!(
            merge_partials(parts).unwrap().bytes() == one.bytes(),
            "{op:?}"
        );
    }
}
