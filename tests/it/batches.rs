//! Batches for a training loop (`Engine::batches`): every row delivered once an epoch,
//! aligned across inputs, with and without shuffling, split between workers, whatever
//! the budget; the ring never refilled under a batch the caller holds; budgets too
//! small refused with the arithmetic. Each row of the test arrays holds its own index,
//! so a batch says which rows it carries.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc, clippy::float_cmp)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::write_npy;
use tilestream::{
    Batch, BatchRequest, DType, Edge, Engine, MemoryBudget, Next, PatchSpec, Shuffle, TensorFile,
};

fn engine(budget: u64) -> Engine {
    Engine::new(MemoryBudget::new(budget)).unwrap()
}

/// `rows` rows of `cols` f64, row `i` holding `i` in every column; and labels: row `i`
/// of an `(rows,)` u32 array holding `i * 7`.
fn arrays(dir: &Path, rows: usize, cols: usize) -> (PathBuf, PathBuf) {
    let x: Vec<f64> = (0..rows * cols).map(|k| (k / cols) as f64).collect();
    let y: Vec<u32> = (0..rows as u32).map(|i| i * 7).collect();
    let (px, py) = (dir.join("x.npy"), dir.join("y.npy"));
    write_npy(&px, DType::F64, &[rows, cols], bytemuck::cast_slice(&x));
    write_npy(&py, DType::U32, &[rows], bytemuck::cast_slice(&y));
    (px, py)
}

/// The rows each batch carries (checked aligned across the two inputs and whole).
fn rows_of(b: &Batch, cols: usize) -> Vec<u64> {
    let x: &[f64] = bytemuck::cast_slice(b.bytes(0));
    let y: &[u32] = bytemuck::cast_slice(b.bytes(1));
    assert_eq!(x.len(), b.rows * cols);
    assert_eq!(y.len(), b.rows);
    (0..b.rows)
        .map(|r| {
            let i = x[r * cols];
            assert!(
                x[r * cols..(r + 1) * cols].iter().all(|&v| v == i),
                "a torn row"
            );
            assert_eq!(
                u64::from(y[r]),
                i as u64 * 7,
                "labels out of line with features"
            );
            i as u64
        })
        .collect()
}

/// Every batch of a stream: (epoch, rows), dropping each batch once read.
fn collect(e: &Engine, inputs: &[&Path], req: &BatchRequest, cols: usize) -> Vec<(u64, Vec<u64>)> {
    let files = inputs
        .iter()
        .map(|p| TensorFile::open(p).unwrap())
        .collect();
    let s = e.batches(files, req).unwrap();
    let mut out = Vec::new();
    loop {
        match s.next(Duration::from_secs(60)).unwrap() {
            Next::Batch(b) => out.push((b.epoch, rows_of(&b, cols))),
            Next::End => return out,
            Next::NotYet => panic!("no batch within a minute"),
        }
    }
}

#[test]
fn every_row_is_delivered_once_an_epoch_with_and_without_shuffling_and_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (1003, 5);
    let (px, py) = arrays(dir.path(), rows, cols);
    let shuffles = [
        None,
        Some(Shuffle {
            seed: 3,
            block_rows: 17,
            window_blocks: 4,
        }),
        Some(Shuffle {
            seed: 3,
            block_rows: 2000,
            window_blocks: 1,
        }),
    ];
    for shuffle in shuffles {
        for parts in [1, 2, 3] {
            for drop_last in [false, true] {
                for batch in [1u64, 64, 250] {
                    let mut per_epoch: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
                    let mut sizes = Vec::new();
                    for k in 0..parts {
                        let req = BatchRequest {
                            batch,
                            shuffle,
                            drop_last,
                            epochs: 2,
                            part: (k, parts),
                            ..BatchRequest::default()
                        };
                        for (epoch, got) in collect(&engine(4 << 20), &[&px, &py], &req, cols) {
                            sizes.push(got.len() as u64);
                            per_epoch.entry(epoch).or_default().extend(got);
                        }
                    }
                    let what =
                        format!("{shuffle:?} parts {parts} drop_last {drop_last} batch {batch}");
                    assert_eq!(per_epoch.len(), 2, "{what}");
                    for (epoch, mut got) in per_epoch {
                        let n = got.len();
                        got.sort_unstable();
                        got.dedup();
                        assert_eq!(got.len(), n, "{what}: a row twice in epoch {epoch}");
                        if drop_last {
                            // each worker leaves out at most its short last batch
                            assert!(rows - n < parts * batch as usize, "{what}: {n} of {rows}");
                        } else {
                            assert_eq!(n, rows, "{what}: epoch {epoch}");
                        }
                    }
                    assert!(
                        sizes
                            .iter()
                            .all(|&s| s <= batch && (!drop_last || s == batch)),
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_seed_gives_the_same_batches_at_any_budget_and_ring_and_epochs_differ() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (2000, 3);
    let (px, py) = arrays(dir.path(), rows, cols);
    let base = Shuffle {
        seed: 11,
        block_rows: 25,
        window_blocks: 8,
    };
    let shuffle = Some(base);
    let req = BatchRequest {
        batch: 96,
        shuffle,
        epochs: 2,
        ..BatchRequest::default()
    };
    let first = collect(&engine(64 << 20), &[&px, &py], &req, cols);
    for (budget, ring) in [(200 << 10, 2), (1 << 20, 3), (16 << 20, 8)] {
        let again = collect(
            &engine(budget),
            &[&px, &py],
            &BatchRequest {
                ring,
                ..req.clone()
            },
            cols,
        );
        assert_eq!(again, first, "budget {budget}, ring {ring}");
    }
    // an epoch started on its own is that epoch of the run
    let second = collect(
        &engine(1 << 20),
        &[&px, &py],
        &BatchRequest {
            epochs: 1,
            first_epoch: 1,
            ..req.clone()
        },
        cols,
    );
    let (e0, e1): (Vec<_>, Vec<_>) = first.iter().cloned().partition(|(e, _)| *e == 0);
    assert_eq!(second, e1);
    assert_ne!(
        e0.iter().map(|b| &b.1).collect::<Vec<_>>(),
        e1.iter().map(|b| &b.1).collect::<Vec<_>>()
    );
    // shuffled: not the file's order, and another seed another order
    let flat: Vec<u64> = e0.iter().flat_map(|b| b.1.clone()).collect();
    assert_ne!(flat, (0..rows as u64).collect::<Vec<_>>());
    let other = collect(
        &engine(1 << 20),
        &[&px, &py],
        &BatchRequest {
            shuffle: Some(Shuffle { seed: 12, ..base }),
            epochs: 1,
            ..req.clone()
        },
        cols,
    );
    assert_ne!(other[0].1, first[0].1);
}

#[test]
fn the_windows_of_an_epoch_cover_every_block_once() {
    let s = Shuffle {
        seed: 5,
        block_rows: 10,
        window_blocks: 3,
    };
    let windows = s.epoch(95, 2);
    assert_eq!(windows.len(), 4); // 10 blocks, 3 to a window
    let mut starts: Vec<u64> = windows
        .iter()
        .flat_map(|w| w.ranges.iter().map(|r| r.0))
        .collect();
    starts.sort_unstable();
    assert_eq!(starts, (0..10).map(|b| b * 10).collect::<Vec<_>>());
    assert_eq!(
        windows
            .iter()
            .map(tilestream::ShuffleWindow::rows)
            .sum::<u64>(),
        95
    );
    for w in &windows {
        let mut o = w.order();
        o.sort_unstable();
        assert_eq!(o, (0..w.rows()).collect::<Vec<_>>());
    }
    assert_eq!(
        s.epoch(95, 2),
        windows,
        "a function of the seed and the epoch"
    );
    assert_ne!(s.epoch(95, 3), windows);
}

#[test]
fn a_batch_held_is_never_refilled_and_holding_the_whole_ring_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (400, 4);
    let (px, py) = arrays(dir.path(), rows, cols);
    let files = vec![
        TensorFile::open(&px).unwrap(),
        TensorFile::open(&py).unwrap(),
    ];
    let req = BatchRequest {
        batch: 10,
        ring: 3,
        ..BatchRequest::default()
    };
    let s = engine(1 << 20).batches(files, &req).unwrap();
    let next = || match s.next(Duration::from_secs(60)).unwrap() {
        Next::Batch(b) => b,
        other => panic!("{other:?}"),
    };
    let (a, b, c) = (next(), next(), next());
    assert_eq!(s.held(), 3);
    let e = s.next(Duration::from_secs(1)).unwrap_err().to_string();
    assert!(
        e.contains("holds all 3 batches of the ring") && !e.contains('\n'),
        "{e}"
    );
    // what they hold is what they were given, however long the reader ran meanwhile
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rows_of(&a, cols), (0..10).collect::<Vec<_>>());
    assert_eq!(rows_of(&c, cols), (20..30).collect::<Vec<_>>());
    drop(b);
    assert_eq!(rows_of(&next(), cols), (30..40).collect::<Vec<_>>());
    assert_eq!(rows_of(&a, cols), (0..10).collect::<Vec<_>>());
    drop((a, c));
    // dropping the stream with batches still held stops the reader; they stay valid
    let d = next();
    drop(s);
    assert_eq!(rows_of(&d, cols), (40..50).collect::<Vec<_>>());
}

#[test]
fn budgets_too_small_and_bad_requests_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (px, py) = arrays(dir.path(), 1000, 64);
    let x = TensorFile::open(&px).unwrap();
    let y = TensorFile::open(&py).unwrap();
    let req = BatchRequest {
        batch: 500,
        ..BatchRequest::default()
    };
    // 4 buffers x 500 x (512 + 4) bytes = 1032000 B
    let e = engine(1000 << 10)
        .plan_batches(&[&x, &y], &req)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("4 buffers × 252.0 KiB for a batch of 500 rows = 1007.8 KiB")
            && e.contains("give memory=1008KiB or more"),
        "{e}"
    );
    let plan = engine(2 << 20).plan_batches(&[&x, &y], &req).unwrap();
    assert_eq!(plan.reserved_bytes, 4 * 500 * 516);
    assert!(
        plan.to_string().contains("batches:        2 an epoch"),
        "{plan}"
    );
    let shuffled = BatchRequest {
        shuffle: Some(Shuffle::for_rows(0, 516)),
        ..req.clone()
    };
    let e = engine(2 << 20)
        .plan_batches(&[&x, &y], &shuffled)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("3 shuffle windows") && e.contains("smaller shuffle window"),
        "{e}"
    );
    let other = dir.path().join("short");
    std::fs::create_dir(&other).unwrap();
    let short = TensorFile::open(arrays(&other, 10, 2).0).unwrap();
    let e = engine(2 << 20)
        .plan_batches(&[&x, &short], &req)
        .unwrap_err()
        .to_string();
    assert!(e.contains("as many rows each"), "{e}");
    for bad in [
        BatchRequest {
            batch: 0,
            ..req.clone()
        },
        BatchRequest {
            ring: 1,
            ..req.clone()
        },
        BatchRequest {
            part: (2, 2),
            ..req.clone()
        },
    ] {
        let e = engine(64 << 20)
            .plan_batches(&[&x, &y], &bad)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn compressed_inputs_give_the_batches_of_their_npy() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (300, 6);
    let (px, _) = arrays(dir.path(), rows, cols);
    let zarr = dir.path().join("x.zarr");
    crate::common::ok(&[
        "convert",
        px.to_str().unwrap(),
        zarr.to_str().unwrap(),
        "--zarr-chunks",
        "32x6",
    ]);
    let req = BatchRequest {
        batch: 40,
        shuffle: Some(Shuffle {
            seed: 1,
            block_rows: 9,
            window_blocks: 5,
        }),
        ..BatchRequest::default()
    };
    let read = |p: &Path| {
        let s = engine(4 << 20)
            .batches(vec![TensorFile::open(p).unwrap()], &req)
            .unwrap();
        let mut v = Vec::new();
        while let Next::Batch(b) = s.next(Duration::from_secs(60)).unwrap() {
            v.push(b.bytes(0).to_vec());
        }
        v
    };
    let (a, b) = (read(&px), read(&zarr));
    assert_eq!(a.len(), 8);
    assert_eq!(a, b);
}

/// A `(bands, rows, cols)` u16 image whose every pixel is distinct (band, row and column
/// in its value), and its `(rows, cols)` u32 label mask (row and column in its value).
fn image(dir: &Path, bands: usize, rows: usize, cols: usize) -> (PathBuf, PathBuf) {
    let img: Vec<u16> = (0..bands * rows * cols)
        .map(|k| u16::try_from(k % 65_521).unwrap())
        .collect();
    let mask: Vec<u32> = (0..rows * cols)
        .map(|k| u32::try_from(k).unwrap() + 1_000_000)
        .collect();
    let (pi, pm) = (dir.join("img.npy"), dir.join("mask.npy"));
    write_npy(
        &pi,
        DType::U16,
        &[bands, rows, cols],
        bytemuck::cast_slice(&img),
    );
    write_npy(&pm, DType::U32, &[rows, cols], bytemuck::cast_slice(&mask));
    (pi, pm)
}

/// `tilestream tiles`' patches of `path` (cut into `out`): `(row, col)` → bytes, in the
/// order of its `index.csv`.
fn tiles_of(
    path: &Path,
    out: &Path,
    size: usize,
    overlap: usize,
    edge: &str,
) -> Vec<((usize, usize), Vec<u8>)> {
    crate::common::ok(&[
        "tiles",
        path.to_str().unwrap(),
        out.to_str().unwrap(),
        "--size",
        &size.to_string(),
        "--overlap",
        &overlap.to_string(),
        "--edge",
        edge,
    ]);
    let index = std::fs::read_to_string(out.join("index.csv")).unwrap();
    index
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let at = (f[1].parse().unwrap(), f[2].parse().unwrap());
            (at, crate::common::read_npy_data(&out.join(f[0])))
        })
        .collect()
}

/// Every batch of a patch stream: each batch's patches of each input, as bytes.
fn patch_batches(e: &Engine, inputs: &[&Path], req: &BatchRequest) -> Vec<Vec<Vec<Vec<u8>>>> {
    let files = inputs
        .iter()
        .map(|p| TensorFile::open(p).unwrap())
        .collect();
    let s = e.batches(files, req).unwrap();
    let mut out = Vec::new();
    loop {
        match s.next(Duration::from_secs(60)).unwrap() {
            Next::Batch(b) => out.push(
                (0..inputs.len())
                    .map(|k| {
                        let part = &b.parts()[k];
                        assert_eq!(part.shape[0], b.rows);
                        let per = b.bytes(k).len() / b.rows;
                        b.bytes(k).chunks(per).map(<[u8]>::to_vec).collect()
                    })
                    .collect(),
            ),
            Next::End => return out,
            Next::NotYet => panic!("no batch within a minute"),
        }
    }
}

#[test]
fn patches_equal_the_patches_tiles_cuts_for_an_image_and_its_mask() {
    let dir = tempfile::tempdir().unwrap();
    // prime sizes: the strides land on neither edge
    let (bands, rows, cols) = (3, 37, 53);
    let (pi, pm) = image(dir.path(), bands, rows, cols);
    for (size, overlap, edge) in [
        (8, 3, Edge::Shift),
        (8, 3, Edge::Pad),
        (37, 0, Edge::Shift),
        (16, 15, Edge::Pad),
    ] {
        let name = if edge == Edge::Shift { "shift" } else { "pad" };
        let what = format!("size {size} overlap {overlap} {name}");
        let want_img = tiles_of(
            &pi,
            &dir.path().join(format!("ti{size}{overlap}{name}")),
            size,
            overlap,
            name,
        );
        let want_mask = tiles_of(
            &pm,
            &dir.path().join(format!("tm{size}{overlap}{name}")),
            size,
            overlap,
            name,
        );
        // the grid in row-major order, as a patch stream lists it
        let mut img_sorted = want_img.clone();
        img_sorted.sort_by_key(|(at, _)| *at);
        let mut mask_sorted = want_mask.clone();
        mask_sorted.sort_by_key(|(at, _)| *at);
        assert_eq!(
            img_sorted.iter().map(|p| p.0).collect::<Vec<_>>(),
            mask_sorted.iter().map(|p| p.0).collect::<Vec<_>>()
        );
        for (budget, batch, ring) in [(256 << 10, 5u64, 2usize), (8 << 20, 64, 4)] {
            let req = BatchRequest {
                batch,
                ring,
                patches: Some(PatchSpec {
                    size,
                    overlap,
                    edge,
                }),
                ..BatchRequest::default()
            };
            let got = patch_batches(&engine(budget), &[&pi, &pm], &req);
            let imgs: Vec<Vec<u8>> = got.iter().flat_map(|b| b[0].clone()).collect();
            let masks: Vec<Vec<u8>> = got.iter().flat_map(|b| b[1].clone()).collect();
            assert_eq!(imgs.len(), img_sorted.len(), "{what}");
            for (k, ((at, want), got)) in img_sorted.iter().zip(&imgs).enumerate() {
                assert!(want == got, "{what}: image patch {k} at {at:?}");
            }
            for (k, ((at, want), got)) in mask_sorted.iter().zip(&masks).enumerate() {
                assert!(want == got, "{what}: mask patch {k} at {at:?}");
            }
            assert!(got.iter().all(|b| b[0].len() as u64 <= batch));
        }
    }
}

#[test]
fn shuffled_patches_come_once_an_epoch_the_same_at_any_budget_and_split_between_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (bands, rows, cols) = (2, 41, 29);
    let (pi, pm) = image(dir.path(), bands, rows, cols);
    let spec = PatchSpec {
        size: 6,
        overlap: 2,
        edge: Edge::Pad,
    };
    let want = tiles_of(&pi, &dir.path().join("t"), 6, 2, "pad");
    let mut want: Vec<Vec<u8>> = want.into_iter().map(|p| p.1).collect();
    want.sort();
    let shuffle = Shuffle {
        seed: 9,
        block_rows: 2,
        window_blocks: 3,
    };
    let req = BatchRequest {
        batch: 7,
        shuffle: Some(shuffle),
        epochs: 2,
        patches: Some(spec),
        ..BatchRequest::default()
    };
    let first = patch_batches(&engine(8 << 20), &[&pi, &pm], &req);
    for (budget, ring) in [(300 << 10, 2), (64 << 20, 6)] {
        assert!(
            first
                == patch_batches(
                    &engine(budget),
                    &[&pi, &pm],
                    &BatchRequest {
                        ring,
                        ..req.clone()
                    }
                ),
            "budget {budget}"
        );
    }
    let per_epoch = first.len() / 2;
    let epoch = |bs: &[Vec<Vec<Vec<u8>>>]| {
        let mut v: Vec<Vec<u8>> = bs.iter().flat_map(|b| b[0].clone()).collect();
        v.sort();
        v
    };
    // each epoch is every patch once, in another order than the grid's and the other epoch's
    assert!(epoch(&first[..per_epoch]) == want);
    assert!(epoch(&first[per_epoch..]) == want);
    assert!(first[0][0] != first[per_epoch][0]);
    // the mask's patch stays with its image patch: pixel (r, c) of band 0 is r * cols + c
    for b in &first {
        for (img, mask) in b[0].iter().zip(&b[1]) {
            let i: &[u16] = bytemuck::cast_slice(img);
            let m: &[u32] = bytemuck::cast_slice(mask);
            for (a, &v) in i[..36].iter().zip(m) {
                if v != 0 {
                    assert_eq!(u32::from(*a), (v - 1_000_000) % 65_521);
                }
            }
        }
    }
    // three workers together: every patch once
    let mut all = Vec::new();
    for k in 0..3 {
        let part = BatchRequest {
            part: (k, 3),
            epochs: 1,
            ..req.clone()
        };
        all.extend(patch_batches(&engine(4 << 20), &[&pi], &part));
    }
    assert!(epoch(&all) == want);
}

#[test]
fn patch_streams_refuse_what_they_cannot_cut_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (pi, _) = image(dir.path(), 2, 30, 40);
    let other = dir.path().join("other.npy");
    write_npy(&other, DType::U8, &[31, 40], &[0u8; 31 * 40]);
    let flat = dir.path().join("flat.npy");
    write_npy(&flat, DType::U8, &[1200], &[0u8; 1200]);
    let open = |p: &Path| TensorFile::open(p).unwrap();
    let req = |size, overlap| BatchRequest {
        batch: 4,
        patches: Some(PatchSpec {
            size,
            overlap,
            edge: Edge::Shift,
        }),
        ..BatchRequest::default()
    };
    let e = engine(8 << 20);
    let err = |inputs: &[&TensorFile], r: &BatchRequest| {
        e.plan_batches(inputs, r).unwrap_err().to_string()
    };
    let (i, o, f) = (open(&pi), open(&other), open(&flat));
    let m = err(&[&i, &o], &req(8, 0));
    assert!(
        m.contains("as many rows and columns") && m.contains("30 x 40") && m.contains("31 x 40"),
        "{m}"
    );
    let m = err(&[&f], &req(8, 0));
    assert!(m.contains("rank-2 (height, width) or rank-3"), "{m}");
    let m = err(&[&i], &req(8, 8));
    assert!(m.contains("overlap must be smaller than the size"), "{m}");
    let m = err(&[&i], &req(31, 0));
    assert!(
        m.contains("fewer than the patch size 31") && m.contains("edge=pad"),
        "{m}"
    );
    // a budget that cannot hold the ring and three strips: the arithmetic, and what works
    // 4 buffers of 4 patches of 2 x 8 x 8 u16 (4096 B) + 3 strips of 8 x 40 x 2 u16 (3840 B)
    let m = engine(6 << 10)
        .plan_batches(&[&i], &req(8, 2))
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("for batches of 4 patches")
            && m.contains("4 buffers × 1.0 KiB for a batch of 4 patches")
            && m.contains("3 strips of patches × 1.2 KiB")
            && m.contains("= 7.8 KiB")
            && m.contains("memory=8KiB")
            && !m.contains('\n'),
        "{m}"
    );
}
