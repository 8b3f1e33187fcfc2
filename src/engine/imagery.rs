//! Engine entry points for box-tiled operations on images: the out-of-core transpose,
//! and what operations with kernels of their own share with it (`box_op.rs`; cutting an
//! image into patch files is `patches.rs`). They share the box
//! planner of [`crate::tiling`] and the pipeline's general [`Layout`] form.
//!
//! [`Layout`]: crate::scheduler::Layout

use std::path::Path;

use super::boxed::BandsTogether;
use super::{Engine, Ran, RunReport, check_not_input};
use crate::backend::Family;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::scheduler::{self, Hooks, Layout, TileKernel};
use crate::tiling::{Boundary, BoxPlan, BoxRequest, BoxTile, Cuts, Halo, OutMap, Scratch};

/// `bands × height × width` of a rank-2 or rank-3 image.
pub(super) fn image_dims(input: &TensorFile, op: &str) -> Result<[usize; 3]> {
    match *input.shape() {
        [h, w] => Ok([1, h, w]),
        [b, h, w] => Ok([b, h, w]),
        _ => Err(Error::Invalid(format!(
            "{op} works on rank-2 (height, width) or rank-3 (bands, height, width) arrays; \
             {} has shape {}",
            input.path().display(),
            fmt_shape(input.shape())
        ))),
    }
}

/// The shape of `transpose`'s output: `shape` with its last two axes swapped.
pub(crate) fn transposed_shape(shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    let k = s.len();
    if k >= 2 {
        s.swap(k - 1, k - 2);
    }
    s
}

impl Engine {
    /// The box request of an operation over `input`, its compressed input's decode
    /// scratch sized from `scratch_limit` (the budget, or less:
    /// [`Engine::scratch_giving_way`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn box_request_at(
        &self,
        scratch_limit: u64,
        input: &TensorFile,
        what: String,
        dims: [usize; 3],
        (in_bytes, out_bytes): (u64, u64),
        halos: (Halo, Halo),
        boundary: Boundary,
        scratch: Scratch,
        cuts: Cuts,
        out: OutMap,
    ) -> BoxRequest {
        let (resident_bytes, resident_what) = super::decode_scratch(scratch_limit, &[input]);
        BoxRequest {
            what,
            dims,
            in_bytes,
            out_bytes,
            halo_rows: halos.0,
            halo_cols: halos.1,
            boundary,
            scratch,
            resident_bytes,
            resident_what,
            depth: self.depth,
            budget: self.budget.limit(),
            max_tile_bytes: self.max_tile_bytes,
            cuts,
            out,
            out_chunks: None,
        }
    }

    /// The plan `attempt` makes with the compressed inputs' decode scratch sized from
    /// the budget; when that is refused and the run encodes its output as it writes it
    /// (`encoded`), from a quarter of the budget, then the least (one chunk at a time, no
    /// cache), so that the encoder has room: the first that plans (the file keeps that
    /// sizing), else the last refusal.
    ///
    /// # Errors
    /// What `attempt` returns with the least scratch.
    pub(super) fn scratch_giving_way(
        &self,
        inputs: &[&TensorFile],
        encoded: bool,
        attempt: impl Fn(u64) -> Result<BoxPlan>,
    ) -> Result<BoxPlan> {
        let mut planned = attempt(self.budget.limit());
        for less in self.scratch_fallbacks(inputs, encoded) {
            if planned.is_ok() {
                break;
            }
            planned = attempt(less);
        }
        planned
    }

    /// The smaller decode scratch a run over `files` tries, in order, when its plan with
    /// scratch sized from the whole budget is refused: when it encodes its output as it
    /// writes it (`encoded`) and an input is compressed, a quarter of the budget, then
    /// the least (one chunk at a time, no cache), so that the encoder has room; none
    /// otherwise.
    pub(super) fn scratch_fallbacks(&self, files: &[&TensorFile], encoded: bool) -> Vec<u64> {
        let limit = self.budget.limit();
        if encoded && files.iter().any(|f| f.chunked().is_some()) {
            vec![limit / 4, 0]
        } else {
            Vec::new()
        }
    }

    pub(super) fn hooks(&self) -> Hooks<'_> {
        Hooks {
            progress: self
                .progress
                .as_deref()
                .map(|p| p as &(dyn Fn(&crate::scheduler::Progress) + Sync)),
            cancel: Some(&self.cancel),
            journal: None,
        }
    }

    /// Streams a box plan over `input` into a new output file at `out`.
    pub(super) fn run_box<K>(
        &self,
        plan: &BoxPlan,
        input: &TensorFile,
        out: &Path,
        shape: &[usize],
        dtype: DType,
        kernel: K,
    ) -> Result<scheduler::StageTimes>
    where
        K: TileKernel<BoxTile>,
    {
        // A pixel-interleaved compressed input holds every band of a position in one
        // chunk: visiting the bands of a position one after another lets the chunk cache
        // serve them all from one decode (band after band would decode each chunk once
        // per band). An output whose chunks hold several bands needs that order to be
        // encoded as it is written.
        let bands = plan.dims[0];
        let together = plan.bands_together()
            || (bands > 1
                && input.shape().len() == 3
                && plan.num_tiles.is_multiple_of(bands)
                && input
                    .chunked()
                    .is_some_and(|c| c.chunk_shape().first() == Some(&bands)));
        let journal = self.open_journal(out)?;
        let room = super::outputs::room_of_box(plan);
        self.to_file_with(journal, out, shape, dtype, room, |output, journal| {
            let hooks = Hooks {
                journal,
                ..self.hooks()
            };
            if together {
                let order = BandsTogether { plan };
                scheduler::run_layout(&order, &[input], &self.budget, Some(output), hooks, kernel)
            } else {
                scheduler::run_layout(plan, &[input], &self.budget, Some(output), hooks, kernel)
            }
        })
    }

    /// Plans a transpose without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an input of rank other than 2 or 3; [`Error::Budget`].
    pub fn plan_transpose(&self, input: &TensorFile) -> Result<BoxPlan> {
        self.plan_transpose_to(input, None)
    }

    /// [`Engine::plan_transpose`] of a run writing `out` (see
    /// [`Engine::plan_stencil_to`]).
    ///
    /// # Errors
    /// As [`Engine::plan_transpose`].
    pub fn plan_transpose_to(&self, input: &TensorFile, out: Option<&Path>) -> Result<BoxPlan> {
        let dims = image_dims(input, "transpose")?;
        let es = input.dtype().size() as u64;
        let out_chunks = out.map_or_else(Vec::new, |o| {
            self.box_out_chunks(o, &transposed_shape(input.shape()), input.dtype(), true)
        });
        let limit = self.planning_device();
        let attempt = |scratch_limit: u64| {
            let req = self.box_request_at(
                scratch_limit,
                input,
                format!(
                    "transpose of the last two axes of {} {}",
                    fmt_shape(input.shape()),
                    input.dtype()
                ),
                dims,
                (es, es),
                (Halo::default(), Halo::default()),
                Boundary::Nearest,
                Scratch::default(),
                Cuts::Auto { prefer_rows: false },
                OutMap::Transposed,
            );
            along_out_chunks(req, out_chunks.clone(), |req| {
                fit_device(req, limit, |plan| {
                    // each lane: a staged window and a transposed block
                    plan.depth.max(1) as u64 * (plan.window_bytes + plan.out_slot_elems * es)
                })
            })
        };
        self.scratch_giving_way(&[input], !out_chunks.is_empty(), attempt)
    }

    /// Writes the transpose of the last two axes of a rank-2 or rank-3 array to `out`,
    /// in square-ish blocks: reads are runs of block width from each source row, writes
    /// runs of block height into each destination row.
    ///
    /// # Errors
    /// As [`Engine::stencil`].
    pub fn transpose(&self, input: &TensorFile, out: impl AsRef<Path>) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        let plan = self.plan_transpose_to(input, Some(out.as_ref()))?;
        let [bands, h, w] = plan.dims;
        let out_shape: Vec<usize> = if input.shape().len() == 2 {
            vec![w, h]
        } else {
            vec![bands, w, h]
        };
        self.budget.reset_peak();
        let es = input.dtype().size();
        // where a tile's block lies in its window: the window's row length and the
        // block's first column within a row
        let at = |tile: &BoxTile| {
            let src = plan.sources(tile);
            (src.row_len(), src.col_pos(tile.c0 as usize).unwrap_or(0))
        };
        // the CUDA kernels move elements of at most 8 bytes (a complex128 has 16)
        let dev: &dyn crate::backend::Kernels = if es > 8 {
            &*self.backend
        } else {
            self.kernels_for(Family::Transpose)
        };
        let out_bytes = plan.out_slot_elems() * es as u64;
        let kernel =
            dev.transpose_kernel(es, plan.window_bytes(), out_bytes, plan.depth, Box::new(at))?;
        let times = self.run_box(
            &plan,
            input,
            out.as_ref(),
            &out_shape,
            input.dtype(),
            kernel,
        )?;
        let op = format!("transpose of {}", input.path().display());
        Ok(self.report_tiles(
            (plan.num_tiles, vec![plan.tile.0, plan.tile.1], plan.depth),
            Ran::on(Family::Transpose, op, super::on_gpu(dev)),
            input.shape(),
            &out_shape,
            input.dtype(),
            times,
        ))
    }
}

/// The plan `plan` makes of `req` with its boxes cut along the first of `out_chunks`
/// (an output encoded as it is written, [`Engine::box_out_chunks`]) whose encoder the
/// budget holds with such boxes; of `req` as it is when there are none (an output
/// written as it is).
///
/// # Errors
/// What `plan` returns; when no candidate fits, the refusal of the last (the smallest
/// encoder): outputs are encoded as they are written, never staged raw.
pub(super) fn along_out_chunks(
    req: BoxRequest,
    out_chunks: Vec<crate::tiling::OutChunks>,
    plan: impl Fn(BoxRequest) -> std::result::Result<BoxPlan, crate::budget::BudgetError>,
) -> Result<BoxPlan> {
    if out_chunks.is_empty() {
        return Ok(plan(req)?);
    }
    let mut refused = None;
    for c in out_chunks {
        let (what, cols) = (c.what.clone(), c.cols);
        let along = BoxRequest {
            out_chunks: Some(c),
            ..req.clone()
        };
        match plan(along) {
            Ok(p) if p.cut_along_out_chunks() => return Ok(p),
            // a tile cap (the device's lanes) below a box one chunk wide
            Ok(p) => {
                refused = Some(crate::Error::invalid(format!(
                    "{}: a box one output chunk wide ({cols} columns) is larger than the \
                     largest tile the device's buffers take here ({} by {}); the {what} \
                     needs such boxes: raise `gpu_memory` or write smaller chunks",
                    p.what, p.tile.0, p.tile.1
                )));
            }
            Err(e) => refused = Some(e.into()),
        }
    }
    Err(refused.unwrap_or_else(|| crate::Error::Internal("no output chunks tried".into())))
}

/// The box plan of `req`, with tiles made smaller until the device buffers they need
/// (`need`, for a plan) fit the device budget `limit` (no limit: the CPU computes).
///
/// # Errors
/// [`BudgetError::DeviceTooSmall`] when even one-pixel tiles need more than `limit`;
/// the host planner's errors.
pub(super) fn fit_device(
    mut req: BoxRequest,
    limit: Option<u64>,
    need: impl Fn(&BoxPlan) -> u64,
) -> std::result::Result<BoxPlan, crate::budget::BudgetError> {
    let mut plan = BoxPlan::new(&req)?;
    let Some(limit) = limit else {
        return Ok(plan);
    };
    loop {
        let needed = need(&plan);
        if needed <= limit {
            return Ok(plan);
        }
        if plan.tile.0 * plan.tile.1 <= 1 || req.max_tile_bytes <= 1 {
            return Err(crate::budget::BudgetError::DeviceTooSmall {
                what: plan.what.clone(),
                arithmetic: format!(
                    "{} lanes of one-pixel tiles with their halos need {} on the device",
                    plan.depth,
                    crate::budget::fmt_bytes(needed)
                ),
                needed,
                limit,
            });
        }
        req.max_tile_bytes /= 2;
        plan = BoxPlan::new(&req)?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(budget: u64) -> BoxRequest {
        BoxRequest {
            what: "test".into(),
            dims: [1, 1000, 1000],
            in_bytes: 4,
            out_bytes: 4,
            halo_rows: Halo::symmetric(2),
            halo_cols: Halo::symmetric(2),
            boundary: Boundary::Reflect,
            scratch: Scratch::default(),
            resident_bytes: 0,
            resident_what: String::new(),
            depth: 3,
            budget,
            max_tile_bytes: u64::MAX,
            cuts: Cuts::Auto { prefer_rows: true },
            out: OutMap::Same,
            out_chunks: None,
        }
    }

    /// Device bytes of a plan: each lane holds its padded tile in and its tile out.
    fn lanes(p: &BoxPlan) -> u64 {
        let (h, w) = p.tile;
        3 * (((h + 4) * (w + 4)) as u64 * 4 + (h * w) as u64 * 4)
    }

    #[test]
    fn box_tiles_shrink_until_the_device_buffers_fit() {
        let req = request(64 << 20);
        let host_only = fit_device(req.clone(), None, lanes).unwrap();
        for limit in [8u64 << 20, 1 << 20, 100 << 10, 4 << 10] {
            let p = fit_device(req.clone(), Some(limit), lanes).unwrap();
            assert!(
                lanes(&p) <= limit,
                "{limit}: {:?} needs {}",
                p.tile,
                lanes(&p)
            );
            assert!(p.tile.0 * p.tile.1 <= host_only.tile.0 * host_only.tile.1);
            assert!(p.num_tiles >= host_only.num_tiles);
        }
        // a device budget the host plan already fits changes nothing
        let same = fit_device(req.clone(), Some(u64::MAX), lanes).unwrap();
        assert_eq!(same.tile, host_only.tile);
    }

    #[test]
    fn a_device_budget_below_one_pixel_tiles_is_refused_with_the_arithmetic() {
        let e = fit_device(request(64 << 20), Some(100), lanes).unwrap_err();
        assert!(
            matches!(
                e,
                crate::budget::BudgetError::DeviceTooSmall { limit: 100, .. }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("`gpu_memory=") && !msg.contains('\n'), "{msg}");
    }
}
