//! Unit tests of the box planner (proptest): budgets kept, every element covered once,
//! no more output chunks held than the plan counts.
#![allow(clippy::unwrap_used)]
use proptest::prelude::*;

use super::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, .. ProptestConfig::default() })]

    /// Every box plan stays within its budget and its tiles cover every pixel of every
    /// band exactly once; every refusal names a budget that then plans.
    #[test]
    fn box_plans_fit_the_budget_and_cover_every_pixel_once(
        bands in 1usize..4,
        h in 1usize..120,
        w in 1usize..120,
        halo in 0usize..6,
        in_bytes in 1u64..9,
        out_bytes in 0u64..9,
        prefer_rows: bool,
        depth in 1usize..5,
        budget in (4u64 << 10)..(8 << 20),
        chunks in proptest::option::of((1usize..50, 1usize..50, 1usize..4, 0usize..50)),
        transposed: bool,
    ) {
        let out = if transposed { OutMap::Transposed } else { OutMap::Same };
        let out_chunks = chunks.map(|(rows, cols, planes, offset)| {
            let planes = planes.min(bands);
            let chunk = (rows * cols * planes) as u64 * out_bytes.max(1);
            OutChunks {
                rows,
                cols,
                row_offset: offset % rows,
                elem_bytes: out_bytes.max(1),
                planes,
                fixed: 2 * chunk,
                what: "property output".into(),
            }
        });
        let req = BoxRequest {
            what: "property".into(),
            dims: [bands, h, w],
            in_bytes,
            out_bytes,
            halo_rows: Halo::symmetric(halo),
            halo_cols: Halo::symmetric(halo),
            boundary: Boundary::Reflect,
            scratch: Scratch { padded: 8, row_pass: 8, tile: in_bytes },
            resident_bytes: 0,
            resident_what: String::new(),
            depth,
            budget,
            max_tile_bytes: 16 << 20,
            cuts: Cuts::Auto { prefer_rows },
            out,
            out_chunks,
        };
        match BoxPlan::new(&req) {
            Ok(p) => {
                prop_assert!(p.reserved_bytes <= budget, "{} > {budget}", p.reserved_bytes);
                let mut seen = vec![0u8; bands * h * w];
                for i in 0..p.num_tiles {
                    let t = p.box_tile(i);
                    prop_assert!(t.r0 >= 0 && t.r1 as usize <= h && t.c0 >= 0 && t.c1 as usize <= w);
                    prop_assert!(t.rows() <= p.tile.0 && t.cols() <= p.tile.1);
                    for r in t.r0..t.r1 {
                        for c in t.c0..t.c1 {
                            seen[(t.band * h + r as usize) * w + c as usize] += 1;
                        }
                    }
                }
                prop_assert!(seen.iter().all(|&n| n == 1), "a pixel covered {:?} times",
                    seen.iter().find(|&&n| n != 1));
                // boxes cut along (or within) the output's chunks never hold more
                // chunks than the plan counts
                if p.cut_along_out_chunks() {
                    let open = super::tests::most_chunks_open(&p);
                    prop_assert!(open <= p.open_out_chunks(), "{open} open\n{p}");
                }
            }
            Err(BudgetError::TooSmall { needed, .. }) => {
                prop_assert!(needed > budget);
                let again = BoxPlan::new(&BoxRequest { budget: needed, ..req });
                prop_assert!(again.is_ok(), "the suggested {needed} does not plan: {again:?}");
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}
