//! Assembles a box tile's padded box from the windows the read stage mapped, keeping the
//! input's element type: the halo rows and columns around the tile, taken from the image
//! or made up at its edges by the boundary mode (or left out, [`Edges::Clip`]).
//!
//! The filters gather into their float type (`spec/ops/stencil/cpu.rs`); a user's
//! function over blocks ([`crate::engine`]'s `run_blocks`) gets the input's own bytes, so
//! this gather copies elements as they are and needs no dtype dispatch.

use super::{Boundary, BoxPlan, BoxTile};
use crate::error::{Error, Result};

/// What a padded box holds where the halo runs past the image.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Edges {
    /// Positions made up by the boundary mode, so every box has the full halo.
    Pad(Boundary),
    /// No position past the image: a box at an edge is smaller by the halo it lacks
    /// (`boundary="none"`, as `dask.array.map_overlap` names it).
    Clip,
}

impl Edges {
    /// The boundary mode the planner reads the windows with: [`Edges::Clip`] reads the
    /// rows and columns within the image that the halo reaches, which is what nearest
    /// reads.
    #[must_use]
    pub fn reading(self) -> Boundary {
        match self {
            Edges::Pad(b) => b,
            Edges::Clip => Boundary::Nearest,
        }
    }
}

/// The extent of a tile's padded box: its first row and column (in image coordinates,
/// negative where padding starts before the image) and its rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaddedBox {
    /// First row, in the image's rows.
    pub row: i64,
    /// First column, in the image's columns.
    pub col: i64,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl PaddedBox {
    /// The padded box of tile `t` under `plan` with `edges`.
    #[must_use]
    pub fn of(plan: &BoxPlan, t: &BoxTile, edges: Edges) -> PaddedBox {
        let [_, h, w] = plan.dims;
        let (hr, hc) = (plan.halo_rows, plan.halo_cols);
        let (mut r0, mut r1) = (t.r0 - hr.before as i64, t.r1 + hr.after as i64);
        let (mut c0, mut c1) = (t.c0 - hc.before as i64, t.c1 + hc.after as i64);
        if edges == Edges::Clip {
            (r0, r1) = (r0.max(0), r1.min(h as i64));
            (c0, c1) = (c0.max(0), c1.min(w as i64));
        }
        PaddedBox {
            row: r0,
            col: c0,
            rows: (r1 - r0).max(0) as usize,
            cols: (c1 - c0).max(0) as usize,
        }
    }

    /// Elements of the box.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the box is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Copies tile `t`'s padded box `bx` of one band into `out` (`bx.rows × bx.cols`
/// elements of `es` bytes, C order) from `windows`, the tile's windows of that band in
/// the order [`BoxPlan::sources`] lists their rows. Positions outside the image take
/// `cval` (`es` bytes) under a constant boundary.
///
/// # Errors
/// [`Error::Internal`] if the windows do not match the plan.
pub fn gather_box(
    plan: &BoxPlan,
    t: &BoxTile,
    bx: PaddedBox,
    windows: &[&[u8]],
    (es, cval): (usize, &[u8]),
    out: &mut [u8],
) -> Result<()> {
    let [_, h, w] = plan.dims;
    let src = plan.sources(t);
    let rl = src.row_len();
    let row_bytes = bx.cols * es;
    if src.rows.len() != windows.len() || out.len() != bx.rows * row_bytes || cval.len() != es {
        return Err(Error::Internal(format!(
            "block {}: {} windows for {} source row ranges, {} bytes for a {}x{} box",
            t.index,
            windows.len(),
            src.rows.len(),
            out.len(),
            bx.rows,
            bx.cols
        )));
    }
    if row_bytes == 0 {
        return Ok(());
    }
    let boundary = plan.boundary;
    // position in a window row of each box column's source (None: the constant)
    let cols: Vec<Option<usize>> = (0..bx.cols)
        .map(|j| {
            boundary
                .source(bx.col + j as i64, w)
                .and_then(|c| src.col_pos(c))
        })
        .collect();
    // the box columns inside the image, which are contiguous in a window row
    let first_in = (-bx.col).clamp(0, bx.cols as i64) as usize;
    let last_in = (w as i64 - bx.col).clamp(first_in as i64, bx.cols as i64) as usize;
    for (i, orow) in out.chunks_exact_mut(row_bytes).enumerate() {
        let Some(r) = boundary.source(bx.row + i as i64, h) else {
            for e in orow.chunks_exact_mut(es) {
                e.copy_from_slice(cval);
            }
            continue;
        };
        let (k, off) = src.locate(r).ok_or_else(|| {
            Error::Internal(format!(
                "block {}: source row {r} is in none of its windows",
                t.index
            ))
        })?;
        let srow = windows[k]
            .get(off * rl * es..(off + 1) * rl * es)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "block {}: window {k} is too short for its rows",
                    t.index
                ))
            })?;
        if last_in > first_in {
            let c = cols[first_in].unwrap_or(0);
            orow[first_in * es..last_in * es]
                .copy_from_slice(&srow[c * es..(c + last_in - first_in) * es]);
        }
        for j in (0..first_in).chain(last_in..bx.cols) {
            let e = &mut orow[j * es..(j + 1) * es];
            match cols[j] {
                Some(c) => e.copy_from_slice(&srow[c * es..(c + 1) * es]),
                None => e.copy_from_slice(cval),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{BoxRequest, Cuts, Halo, OutMap, Scratch, fixed_cuts};

    /// A plan of `h x w` u16 cut into boxes of `th x tw` with a halo of `halo`.
    fn plan(h: usize, w: usize, (th, tw): (usize, usize), halo: usize, b: Boundary) -> BoxPlan {
        BoxPlan::new(&BoxRequest {
            what: "test".into(),
            dims: [1, h, w],
            in_bytes: 2,
            out_bytes: 2,
            halo_rows: Halo::symmetric(halo),
            halo_cols: Halo::symmetric(halo),
            boundary: b,
            scratch: Scratch::default(),
            resident_bytes: 0,
            resident_what: String::new(),
            depth: 1,
            budget: 1 << 30,
            max_tile_bytes: 1 << 30,
            cuts: Cuts::Given {
                rows: fixed_cuts(h, th),
                cols: fixed_cuts(w, tw),
            },
            out: OutMap::Same,
            out_chunks: None,
        })
        .expect("plan")
    }

    /// The windows of tile `t` as the read stage maps them: the source rows, each row's
    /// column runs one after another.
    fn windows(p: &BoxPlan, t: &BoxTile, img: &[u16]) -> Vec<Vec<u8>> {
        let w = p.dims[2];
        let src = p.sources(t);
        src.rows
            .iter()
            .map(|&(a, b)| {
                let mut v = Vec::new();
                for r in a..b {
                    for &(c0, c1) in &src.cols {
                        for x in &img[r * w + c0..r * w + c1] {
                            v.extend_from_slice(&x.to_le_bytes());
                        }
                    }
                }
                v
            })
            .collect()
    }

    /// The padded box computed directly from the image, position by position.
    fn oracle(
        img: &[u16],
        (h, w): (usize, usize),
        bx: PaddedBox,
        b: Boundary,
        cv: u16,
    ) -> Vec<u16> {
        let mut v = Vec::new();
        for i in 0..bx.rows {
            for j in 0..bx.cols {
                let r = b.source(bx.row + i as i64, h);
                let c = b.source(bx.col + j as i64, w);
                v.push(match (r, c) {
                    (Some(r), Some(c)) => img[r * w + c],
                    _ => cv,
                });
            }
        }
        v
    }

    #[test]
    fn every_box_equals_the_image_padded_position_by_position() {
        let (h, w) = (7, 9);
        let img: Vec<u16> = (0..(h * w) as u16).map(|x| x * 3 + 1).collect();
        for b in [
            Boundary::Reflect,
            Boundary::Nearest,
            Boundary::Wrap,
            Boundary::Constant(5.0),
        ] {
            for edges in [Edges::Pad(b), Edges::Clip] {
                for (tile, halo) in [((3, 4), 2), ((7, 9), 3), ((2, 2), 0), ((1, 9), 4)] {
                    let p = plan(h, w, tile, halo, edges.reading());
                    for i in 0..p.num_tiles {
                        let t = p.box_tile(i);
                        let bx = PaddedBox::of(&p, &t, edges);
                        let ws = windows(&p, &t, &img);
                        let refs: Vec<&[u8]> = ws.iter().map(Vec::as_slice).collect();
                        let mut out = vec![0u8; bx.len() * 2];
                        gather_box(&p, &t, bx, &refs, (2, &5u16.to_le_bytes()), &mut out)
                            .expect("gather");
                        let got: Vec<u16> = bytemuck::pod_collect_to_vec(&out);
                        let want = oracle(&img, (h, w), bx, edges.reading(), 5);
                        assert_eq!(got, want, "{edges:?} tile {tile:?} halo {halo} box {i}");
                        if edges == Edges::Clip {
                            assert!(bx.row >= 0 && bx.col >= 0);
                            assert!(
                                bx.row as usize + bx.rows <= h && bx.col as usize + bx.cols <= w
                            );
                        } else {
                            assert_eq!(
                                (bx.rows, bx.cols),
                                (t.rows() + 2 * halo, t.cols() + 2 * halo)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn windows_that_do_not_match_the_plan_are_an_internal_error() {
        let p = plan(4, 4, (2, 2), 1, Boundary::Reflect);
        let t = p.box_tile(0);
        let bx = PaddedBox::of(&p, &t, Edges::Pad(Boundary::Reflect));
        let mut out = vec![0u8; bx.len() * 2];
        let err = gather_box(&p, &t, bx, &[], (2, &[0, 0]), &mut out).expect_err("no windows");
        assert!(matches!(err, Error::Internal(_)), "{err}");
    }
}
