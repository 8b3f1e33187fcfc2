//! Tests of `src/plan.rs`.
#![allow(clippy::unwrap_used)]
use super::*;

fn req(shape: &[usize], budget: u64) -> PlanRequest {
    PlanRequest {
        what: "test".into(),
        shape: shape.to_vec(),
        in_bytes_per_elem: 4,
        inputs: 1,
        out_bytes_per_elem: 2,
        resident_bytes: 0,
        scratch_per_elem: 0,
        resident_what: String::new(),
        depth: 3,
        budget,
        max_tile_bytes: DEFAULT_MAX_TILE_BYTES,
        window_slack: 8192,
        min_tile: MIN_TILE_ELEMS,
        device: None,
        chunked_inputs: false,
        bands_inner: None,
        chunk_rows: None,
    }
}

fn check_cover(p: &Plan) {
    let total: u64 = p.shape.iter().map(|&d| d as u64).product();
    let mut next = 0;
    for t in p.tiles() {
        assert_eq!(t.start, next, "tiles must be contiguous and in order");
        assert!(t.len > 0 && t.len <= p.tile_elems);
        next += t.len;
    }
    assert_eq!(next, total);
    assert!(p.reserved_bytes <= p.budget);
}

/// With the bands inner, every element is in one tile, no tile spans two bands, a
/// tile cut along rows never straddles two rows of `t`, and the plan visits the bands
/// of each position one after another; without enough bands it plans as usual.
#[test]
fn bands_inner_plans_visit_each_position_in_every_band_in_turn() {
    for (shape, budget, t) in [
        (vec![3usize, 300, 1100], 4u64 << 20, 64usize),
        (vec![4, 50, 40], 64 << 20, 16),
        (vec![2, 1000, 30], 1 << 20, 512),
        (vec![5, 7, 9000], 1 << 20, 16),
        (vec![3, 37, 41], 600 << 10, 16),
    ] {
        let mut r = req(&shape, budget);
        r.bands_inner = Some(t);
        let p = Plan::new(&r).unwrap();
        assert!(p.bands_inner && p.split_axis >= 1, "{shape:?}");
        let (bands, h, w) = (shape[0] as u64, shape[1] as u64, shape[2] as u64);
        let plane = h * w;
        let mut seen = vec![false; (bands * plane) as usize];
        let per_band = p.num_tiles as u64 / bands;
        for (i, tile) in p.tiles().enumerate() {
            assert_eq!(tile.index, i);
            let band = tile.start / plane;
            assert_eq!(band, i as u64 % bands, "{shape:?} tile {i}");
            assert_eq!((tile.start + tile.len - 1) / plane, band, "spans two bands");
            // the same position in every band
            let pos = tile.start % plane;
            let first = p.tile(i - (i % bands as usize));
            assert_eq!(pos, first.start % plane, "{shape:?} tile {i}");
            if p.split_axis == 1 {
                let (r0, r1) = (pos / w, (pos + tile.len - 1) / w);
                assert_eq!(r0 / t as u64, r1 / t as u64, "{shape:?}: rows {r0}..={r1}");
            }
            for e in tile.start..tile.start + tile.len {
                assert!(!std::mem::replace(&mut seen[e as usize], true));
            }
        }
        assert!(seen.iter().all(|&s| s), "{shape:?}");
        assert_eq!(per_band * bands, p.num_tiles as u64);
        assert!(p.reserved_bytes <= p.budget);
    }
    // one band, or rank 2: planned as usual
    for shape in [vec![1usize, 300, 1100], vec![300, 1100]] {
        let mut r = req(&shape, 4 << 20);
        r.bands_inner = Some(64);
        let p = Plan::new(&r).unwrap();
        assert!(!p.bands_inner);
        check_cover(&p);
    }
}

#[test]
#[allow(clippy::type_complexity)]
fn table() {
    // (shape, budget, expected split axis, expected tile shape, expected tiles)
    let cases: &[(&[usize], u64, usize, &[usize], usize)] = &[
        // 16 MiB cap / 6 B = 2796202 elements = 5461 rows -> 564 tiles, evened to 5453 rows
        (&[3_075_200, 512], 256 << 20, 0, &[5453, 512], 564),
        (&[100, 10], 1 << 20, 0, &[100, 10], 1),
        // a row of 1M f32+f16 (6 MB) does not fit 3 slots in 4 MiB: split along axis 1;
        // (4 MiB - 3 x 8 KiB) / 18 B = 231651 elements -> 5 tiles per row of 209716
        (&[4, 1 << 20], 4 << 20, 1, &[1, 209_716], 20),
        (&[7], 1 << 20, 0, &[7], 1),
        (&[3, 5, 7, 11], 1 << 20, 0, &[3, 5, 7, 11], 1),
        (&[0, 5], 1 << 20, 0, &[0, 5], 0),
    ];
    for &(shape, budget, axis, tshape, n) in cases {
        let p = Plan::new(&req(shape, budget)).unwrap();
        assert_eq!(p.split_axis, axis, "{shape:?}");
        assert_eq!(p.tile_shape, tshape, "{shape:?}");
        assert_eq!(p.num_tiles, n, "{shape:?}");
        check_cover(&p);
    }
}

#[test]
fn any_shape_fits_one_mebibyte() {
    for shape in [
        vec![1usize << 30],
        vec![3, 1 << 28],
        vec![2, 3, 1 << 26, 5],
        vec![1 << 22, 1 << 20],
    ] {
        let p = Plan::new(&req(&shape, 1 << 20)).unwrap();
        assert!(p.reserved_bytes <= 1 << 20);
        assert!(p.tile_elems >= MIN_TILE_ELEMS);
        // spot-check contiguity at the start and the end
        assert_eq!(p.tile(0).start, 0);
        let last = p.tile(p.num_tiles - 1);
        let total: u64 = shape.iter().map(|&d| d as u64).product();
        assert_eq!(last.start + last.len, total);
    }
}

#[test]
fn too_small_budget_states_arithmetic() {
    let mut r = req(&[1000, 1000], 1 << 20);
    r.budget = 20_000;
    let e = Plan::new(&r).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("3 staging slots × (1024 elements × 6 B + 8.0 KiB page slack)"),
        "{msg}"
    );
    assert!(
        msg.contains("the smallest budget that works is 42.0 KiB"),
        "{msg}"
    );
    if let BudgetError::TooSmall { needed, .. } = e {
        r.budget = needed;
        assert!(Plan::new(&r).is_ok());
        r.budget = needed - 1;
        assert!(Plan::new(&r).is_err());
    } else {
        panic!("wrong error {e:?}");
    }
}

#[test]
fn tiles_shrink_for_the_device_budget_and_a_small_one_is_refused_in_its_terms() {
    let mut r = req(&[100_000, 100], 1 << 30);
    r.in_bytes_per_elem = 4;
    r.out_bytes_per_elem = 4;
    let host_only = Plan::new(&r).unwrap();
    r.device = Some(DeviceFit {
        budget: 3 << 20,
        resident_bytes: 0,
        bytes_per_elem: 8,
        per_stream: 0,
    });
    let both = Plan::new(&r).unwrap();
    assert!(both.tile_elems < host_only.tile_elems);
    // three streams of 8 B per element in 3 MiB: at most 131072 elements a tile
    assert!(both.tile_elems <= 131_072, "{}", both.tile_elems);
    assert!(both.tile_elems >= 100_000, "{}", both.tile_elems);
    r.device = Some(DeviceFit {
        budget: 16 << 10,
        resident_bytes: 4 << 10,
        bytes_per_elem: 8,
        per_stream: 1 << 10,
    });
    let msg = Plan::new(&r).unwrap_err().to_string();
    assert!(
        msg.starts_with("device memory budget 16.0 KiB is too small"),
        "{msg}"
    );
    assert!(
        msg.contains("`gpu_memory=") && !msg.contains("`memory"),
        "{msg}"
    );
}

#[test]
fn resident_bytes_count() {
    let mut r = req(&[1000, 1000], 1 << 20);
    r.resident_bytes = 2 << 20;
    r.resident_what = "accumulators".into();
    let msg = Plan::new(&r).unwrap_err().to_string();
    assert!(msg.contains("2.0 MiB of accumulators"), "{msg}");
}

#[test]
fn tiles_of_a_chunked_input_do_not_straddle_rows_of_chunks() {
    // 6000 x 6000 u16 in chunks of 1024 rows, reduced: the budget allows 667 rows a tile
    let mut r = req(&[6000, 6000], 24 << 20);
    r.in_bytes_per_elem = 2;
    r.out_bytes_per_elem = 0;
    let free = Plan::new(&r).expect("plan");
    r.chunk_rows = Some(1024);
    let aligned = Plan::new(&r).expect("plan");
    assert!(free.extent > 512 && free.extent < 1024, "{}", free.extent);
    // a divisor of 1024 of at least half the rows: 512
    assert_eq!(aligned.extent, 512);
    assert!(aligned.reserved_bytes <= r.budget);
    // more room: a multiple of the chunk rows
    r.budget = 256 << 20;
    let big = Plan::new(&r).expect("plan");
    assert_eq!(big.extent % 1024, 0, "{}", big.extent);
    // chunks of a prime height: no divisor near, the budget's rows stay
    r.budget = 24 << 20;
    r.chunk_rows = Some(1021);
    assert_eq!(Plan::new(&r).expect("plan").extent, free.extent);
}
