//! Unit tests of the box planner and its sources.
#![allow(clippy::unwrap_used)]
use super::*;

fn req(dims: [usize; 3], halo: usize, budget: u64, boundary: Boundary) -> BoxRequest {
    BoxRequest {
        what: "test".into(),
        dims,
        in_bytes: 4,
        out_bytes: 4,
        halo_rows: Halo::symmetric(halo),
        halo_cols: Halo::symmetric(halo),
        boundary,
        scratch: Scratch {
            padded: 4,
            row_pass: 4,
            tile: 4,
        },
        resident_bytes: 0,
        resident_what: String::new(),
        depth: 3,
        budget,
        max_tile_bytes: 16 << 20,
        cuts: Cuts::Auto { prefer_rows: true },
        out: OutMap::Same,
        out_chunks: None,
    }
}

#[test]
fn boundary_sources_follow_scipy() {
    // scipy.ndimage docs: reflect (d c b a | a b c d | d c b a), etc.
    let n = 4;
    let got = |m: Boundary| -> Vec<Option<usize>> { (-4..8).map(|i| m.source(i, n)).collect() };
    let s = |v: &[usize]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
    assert_eq!(
        got(Boundary::Reflect),
        s(&[3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0])
    );
    assert_eq!(
        got(Boundary::Nearest),
        s(&[0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3])
    );
    assert_eq!(
        got(Boundary::Wrap),
        s(&[0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3])
    );
    let c = got(Boundary::Constant(1.0));
    assert_eq!(c[3], None);
    assert_eq!(c[4], Some(0));
    // reflect beyond one period (an image smaller than the filter)
    assert_eq!(Boundary::Reflect.source(-9, 4), Some(0));
    assert_eq!(Boundary::Reflect.source(1, 1), Some(0));
}

#[test]
fn boundary_parse() {
    assert_eq!("wrap".parse::<Boundary>().unwrap(), Boundary::Wrap);
    assert_eq!(
        "constant:-2.5".parse::<Boundary>().unwrap(),
        Boundary::Constant(-2.5)
    );
    assert!("constant:x".parse::<Boundary>().is_err());
    assert!("mirror".parse::<Boundary>().is_err());
}

#[test]
fn runs_coalesce() {
    assert_eq!(runs(-2, 3, 10, Boundary::Wrap), vec![(0, 3), (8, 10)]);
    assert_eq!(runs(-2, 3, 10, Boundary::Reflect), vec![(0, 3)]);
    assert_eq!(runs(-5, 1, 10, Boundary::Reflect), vec![(0, 5)]);
    assert_eq!(runs(8, 12, 10, Boundary::Constant(0.0)), vec![(8, 10)]);
    assert_eq!(runs(-3, 30, 10, Boundary::Nearest), vec![(0, 10)]);
    // a narrow tile inside a halo wider than itself, at the left edge
    assert_eq!(runs(-6, 8, 20, Boundary::Reflect), vec![(0, 8)]);
}

fn check_cover(p: &BoxPlan) {
    let [bands, h, w] = p.dims;
    let mut seen = vec![0u8; bands * h * w];
    for i in 0..p.num_tiles {
        let t = p.box_tile(i);
        for r in t.r0..t.r1 {
            for c in t.c0..t.c1 {
                seen[(t.band * h + r as usize) * w + c as usize] += 1;
            }
        }
    }
    assert!(
        seen.iter().all(|&s| s == 1),
        "tiles must cover every pixel once"
    );
}

#[test]
fn wide_image_splits_in_two_dimensions() {
    // 100000 x 100000 f32 at 64 MiB: full rows cannot fit, so blocks split both axes.
    let p = BoxPlan::new(&req([1, 100_000, 100_000], 8, 64 << 20, Boundary::Reflect)).unwrap();
    assert!(p.tile.1 < 100_000, "{p}");
    assert!(p.tile.0 > 100 && p.tile.1 > 100, "{p}");
    assert!(p.reserved_bytes <= 64 << 20, "{p}");
    let small = BoxPlan::new(&req([2, 300, 500], 3, 2_000_000, Boundary::Wrap)).unwrap();
    assert!(small.num_tiles > 2);
    check_cover(&small);
    assert!(small.reserved_bytes <= 2_000_000);
}

#[test]
fn full_width_rows_when_they_fit() {
    let p = BoxPlan::new(&req([1, 20_000, 20_000], 8, 128 << 20, Boundary::Reflect)).unwrap();
    assert_eq!(p.tile.1, 20_000, "{p}");
    check_cover(&p);
    assert!(p.reserved_bytes <= 128 << 20);
}

#[test]
fn too_small_budget_explains() {
    let e = BoxPlan::new(&req([1, 100, 100], 50, 1000, Boundary::Reflect)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("halo of 100 rows"), "{msg}");
}

#[test]
fn writes_cover_the_output() {
    let mut r = req([2, 37, 53], 2, 600_000, Boundary::Nearest);
    r.max_tile_bytes = 2000;
    for out in [OutMap::Same, OutMap::Transposed] {
        r.out = out;
        r.cuts = Cuts::Auto { prefer_rows: false };
        let p = BoxPlan::new(&r).unwrap();
        assert!(p.num_tiles > 4);
        let mut seen = vec![0u8; 2 * 37 * 53];
        let mut ws = Vec::new();
        for i in 0..p.num_tiles {
            let t = p.box_tile(i);
            ws.clear();
            p.writes(&t, &mut ws);
            let n: u64 = ws.iter().map(|w| w.len).sum();
            assert_eq!(n, p.out_elems(&t));
            for w in &ws {
                for k in 0..w.len {
                    seen[(w.file_elem + k) as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{out:?}");
    }
}

/// A plan asked to cut along an output's chunks does so whenever a chunk fits, keeps
/// covering every pixel once, and counts the encoder's bytes within the budget.
#[test]
fn boxes_are_cut_along_the_output_chunks_and_the_encoder_counts() {
    for (dims, out, budget) in [
        ([1, 1000, 1000], OutMap::Same, 4u64 << 20),
        ([3, 700, 1300], OutMap::Same, 2 << 20),
        ([2, 1000, 600], OutMap::Transposed, 3 << 20),
        ([1, 100, 90], OutMap::Same, 1 << 20),
    ] {
        let mut r = req(dims, 2, budget, Boundary::Reflect);
        r.out = out;
        r.out_chunks = Some(OutChunks {
            rows: 64,
            cols: 32,
            row_offset: 0,
            elem_bytes: 4,
            planes: 1,
            fixed: 4 * (64 * 32 * 4) * 2,
            what: "test output".into(),
        });
        let p = BoxPlan::new(&r).unwrap();
        assert!(p.cut_along_out_chunks(), "{dims:?} {:?}", p.tile);
        assert!(p.reserved_bytes <= budget, "{dims:?}");
        let chunk = 64 * 32 * 4;
        assert_eq!(
            p.out_chunk_bytes,
            p.open_out_chunks() as u64 * chunk + 4 * chunk * 2
        );
        // every row and column once, in order
        let [_, h, w] = dims;
        let covered = |cuts: &[(i64, usize)], n: usize| {
            cuts.iter().fold(0i64, |at, c| {
                assert_eq!(c.0, at);
                at + c.1 as i64
            }) == n as i64
        };
        assert!(covered(&p.row_cuts, h) && covered(&p.col_cuts, w));
        // the same request without the output chunks: no encoder bytes
        r.out_chunks = None;
        assert_eq!(BoxPlan::new(&r).unwrap().out_chunk_bytes, 0);
    }
    // a budget below one chunk per box: boxes are not cut along the chunks
    let mut r = req([1, 1000, 1000], 2, 200 << 10, Boundary::Reflect);
    r.out_chunks = Some(OutChunks {
        rows: 512,
        cols: 512,
        row_offset: 0,
        elem_bytes: 4,
        planes: 1,
        fixed: 0,
        what: "test output".into(),
    });
    assert!(BoxPlan::new(&r).is_err_and(|e| e.to_string().contains("test output")));
}

/// Output chunks holding several bands (a pixel-interleaved GeoTIFF's tiles, Zarr chunks
/// deeper than one band) are held whole across a box, every band deep: the plan counts
/// each chunk of the box once at its full depth, and asks for the bands to be visited
/// together; one band deep, only a row of chunks of the box and band after band.
#[test]
fn chunks_of_several_bands_are_held_across_the_whole_box() {
    for (dims, out, planes) in [
        ([3, 700, 1300], OutMap::Same, 3),
        ([4, 700, 1300], OutMap::Same, 2),
        ([3, 1000, 600], OutMap::Transposed, 3),
        ([3, 700, 1300], OutMap::Same, 1),
    ] {
        let mut r = req(dims, 2, 8 << 20, Boundary::Reflect);
        r.out = out;
        let chunk = 64 * 32 * 4 * planes as u64;
        r.out_chunks = Some(OutChunks {
            rows: 64,
            cols: 32,
            row_offset: 0,
            elem_bytes: 4,
            planes,
            fixed: 2 * chunk,
            what: "test output".into(),
        });
        let p = BoxPlan::new(&r).unwrap();
        assert!(p.cut_along_out_chunks(), "{dims:?} {planes}");
        assert!(p.reserved_bytes <= r.budget, "{dims:?} {planes}");
        let (th, tw) = (p.tile.0 as u64, p.tile.1 as u64);
        let open = match (planes, out) {
            (1, OutMap::Transposed) => th.div_ceil(64),
            (1, _) => tw.div_ceil(32),
            _ => th.div_ceil(64) * tw.div_ceil(32),
        };
        assert_eq!(p.open_out_chunks() as u64, open, "{dims:?} {planes}");
        assert_eq!(
            p.out_chunk_bytes,
            open * chunk + 2 * chunk,
            "{dims:?} {planes}"
        );
        assert_eq!(p.bands_together(), planes > 1, "{dims:?} {planes}");
    }
}

/// The most output chunks partly written at once when the tiles of `p` are written in
/// plan order (bands together when the plan asks): what the encoder must hold. A chunk
/// is `planes` bands deep and `rows x cols` in the input's coordinates.
pub(super) fn most_chunks_open(p: &BoxPlan) -> usize {
    let c = p.out_chunks.as_ref().unwrap();
    let [bands, h, w] = p.dims;
    let planes = c.planes.max(1);
    // rows of chunks: the first `row_offset` rows, then `rows` at a time
    let runs = chunk_runs(h as u64, c.rows as u64, c.row_offset as u64);
    let run_of = |r: usize| runs.partition_point(|&(first, _)| first <= r as u64) - 1;
    let key = |b: usize, r: usize, col: usize| (b / planes, run_of(r), col / c.cols);
    let size = |(d, i, j): (usize, usize, usize)| {
        let depth = planes.min(bands - d * planes);
        let rows = runs[i].1 as usize;
        let cols = c.cols.min(w - j * c.cols);
        depth * rows * cols
    };
    let mut filled = std::collections::HashMap::new();
    let mut most = 0;
    for i in 0..p.num_tiles {
        let t = if p.bands_together() {
            p.box_tile_bands_together(i)
        } else {
            p.box_tile(i)
        };
        for r in t.r0 as usize..t.r1 as usize {
            for col in t.c0 as usize..t.c1 as usize {
                let k = key(t.band, r, col);
                let n = filled.entry(k).or_insert(0usize);
                *n += 1;
                if *n == size(k) {
                    filled.remove(&k);
                }
            }
        }
        most = most.max(filled.len());
    }
    assert!(filled.is_empty(), "chunks never completed: {filled:?}");
    most
}

/// A budget that holds no box of whole output chunks still streams: the boxes are pieces
/// of one chunk each, the pieces of a chunk visited one after another, so the encoder
/// holds one chunk (every band deep when its chunks hold several bands and the bands
/// are visited together); every pixel is covered once and the plan keeps its budget.
#[test]
fn boxes_below_a_chunk_are_pieces_of_one_chunk_visited_in_turn() {
    for (dims, out, planes, halo) in [
        ([1, 1000, 1000], OutMap::Same, 1, 0),
        ([1, 1000, 1000], OutMap::Same, 1, 4),
        ([2, 1000, 700], OutMap::Transposed, 1, 0),
        ([3, 700, 1300], OutMap::Same, 3, 2),
        ([4, 600, 900], OutMap::Same, 2, 0),
        ([1, 100, 90], OutMap::Same, 1, 0),
        ([1, 1000, 1000], OutMap::Same, 1, 100),
    ] {
        let chunk = 256 * 128 * 4 * planes as u64;
        // (a halo of 100 stands for rows of a store from past a run's first 100 rows)
        let (halo, row_offset) = if halo == 100 { (0, 100) } else { (halo, 0) };
        let mut r = req(dims, halo, 0, Boundary::Reflect);
        r.out = out;
        r.out_chunks = Some(OutChunks {
            rows: 256,
            cols: 128,
            row_offset,
            elem_bytes: 4,
            planes,
            fixed: 2 * chunk,
            what: "test output".into(),
        });
        let groups = dims[0].div_ceil(planes) as u64;
        // room for the chunks and pieces of about 64 rows, not for whole boxes
        r.budget = (2 + groups) * chunk + 3 * 64 * 128 * 16;
        let p = BoxPlan::new(&r).unwrap();
        assert!(p.cut_along_out_chunks(), "{dims:?}\n{p}");
        assert!(p.boxes_within_chunks(), "{dims:?}\n{p}");
        assert!(p.reserved_bytes <= r.budget, "{dims:?}\n{p}");
        check_cover(&p);
        let open = most_chunks_open(&p);
        assert!(open <= p.open_out_chunks(), "{dims:?}: {open} open\n{p}");
        let held = if planes > 1 { groups } else { 1 };
        assert_eq!(p.open_out_chunks() as u64, held, "{dims:?}\n{p}");
        assert_eq!(p.out_chunk_bytes, held * chunk + 2 * chunk, "{dims:?}");
    }
}
