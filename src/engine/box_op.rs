//! Operations with kernels of their own over the bands of an image ([`BoxOp`]): the
//! engine plans their boxes from what they say they need ([`ImageNeeds`]) and runs them
//! on the device chosen once for them. Everything else about such an operation (its
//! descriptor, its kernels, its spec) lives in its folder under `spec/ops/`, so the
//! engine never names one.

use std::path::Path;

use super::imagery::{along_out_chunks, fit_device, image_dims};
use super::{Engine, Ran, RunReport, hold, on_gpu};
use crate::backend::BoxOp;
use crate::dtype::DType;
use crate::error::Result;
use crate::format::{TensorFile, fmt_shape};
use crate::tiling::{Boundary, BoxPlan, Cuts, Halo, OutMap, Scratch};

/// What an operation of its own over each band of an image needs of the box planner.
pub(crate) struct ImageNeeds<'a> {
    /// Its name in refusals (`stencil`).
    pub(crate) name: &'static str,
    /// How the plan describes it (`gaussian(sigma=2) (reflect boundary)`).
    pub(crate) what: String,
    /// Its halos: rows, then columns.
    pub(crate) halos: (Halo, Halo),
    /// What it reads beyond the image's edges.
    pub(crate) boundary: Boundary,
    /// Its working memory per tile.
    pub(crate) scratch: Scratch,
    /// What it holds for the whole run besides (a convolution kernel): bytes and their
    /// description.
    pub(crate) resident: Option<(u64, String)>,
    /// The device memory a plan of it takes on a GPU (0 where it has no device kernel).
    pub(crate) device_bytes: &'a dyn Fn(&BoxPlan) -> u64,
}

impl Engine {
    /// Plans an operation of its own over each band of a rank-2 `(H, W)` or rank-3
    /// `(bands, H, W)` image `input`, writing `od` elements (to `out` when given: a
    /// GeoTIFF or Zarr output is encoded as the run writes it when the budget also holds
    /// its encoder, the boxes then cut along its chunks).
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for an input that is not an image; [`crate::Error::Budget`]
    /// if not even a one-pixel tile fits.
    pub(crate) fn plan_image_op(
        &self,
        input: &TensorFile,
        od: DType,
        out: Option<&Path>,
        needs: &ImageNeeds<'_>,
    ) -> Result<BoxPlan> {
        let dims = image_dims(input, needs.name)?;
        let limit = self.planning_device();
        let out_chunks = out.map_or_else(Vec::new, |o| {
            self.box_out_chunks(o, input.shape(), od, false)
        });
        let attempt = |scratch_limit: u64| {
            let mut req = self.box_request_at(
                scratch_limit,
                input,
                format!(
                    "{} of {} {} -> {od}",
                    needs.what,
                    fmt_shape(input.shape()),
                    input.dtype()
                ),
                dims,
                (input.dtype().size() as u64, od.size() as u64),
                needs.halos,
                needs.boundary,
                needs.scratch,
                Cuts::Auto { prefer_rows: true },
                OutMap::Same,
            );
            if let Some((bytes, what)) = &needs.resident {
                hold(
                    &mut req.resident_bytes,
                    &mut req.resident_what,
                    *bytes,
                    what.clone(),
                );
            }
            along_out_chunks(req, out_chunks.clone(), |req| {
                fit_device(req, limit, needs.device_bytes)
            })
        };
        self.scratch_giving_way(&[input], !out_chunks.is_empty(), attempt)
    }

    /// Runs `op` over the boxes of `plan` (from [`Engine::plan_image_op`]), reading
    /// `input` and writing `out` (same shape, `od` elements), on the device chosen for
    /// it: the GPU when the engine computes on one and `op` has a CUDA kernel, else the
    /// host. `scratch_what` names its scratch and resident data in the budget's
    /// accounts, `what` the run in its report. The caller has refused an `out` that is
    /// the input (`check_not_input`) before planning.
    ///
    /// # Errors
    /// [`crate::Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub(crate) fn run_box_op(
        &self,
        op: &dyn BoxOp,
        input: &TensorFile,
        out: &Path,
        plan: &BoxPlan,
        od: DType,
        (scratch_what, what): (&str, String),
    ) -> Result<RunReport> {
        self.budget.reset_peak();
        // what a device's kernel stages on the host (the page-locked buffer a filter
        // gathers each box into) replaces the CPU's scratch: the same reservation pays
        let scratch = self.budget.reserve(
            scratch_what,
            plan.scratch_bytes + plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let family = op.family();
        let dev = self.kernels_for(family);
        let gpu = on_gpu(dev);
        let kernel = dev.box_op_kernel(op, plan, input.dtype(), od, scratch)?;
        let times = self.run_box(plan, input, out, input.shape(), od, kernel)?;
        Ok(self.report_tiles(
            (plan.num_tiles, vec![plan.tile.0, plan.tile.1], plan.depth),
            Ran::on(family, what, gpu),
            input.shape(),
            input.shape(),
            od,
            times,
        ))
    }
}
