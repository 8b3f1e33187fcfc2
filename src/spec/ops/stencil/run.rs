//! The filter to the engine: its plan (what it needs of the box planner, on the host
//! and on a GPU), its run, and the filter as a [`BoxOp`], whose kernel the device the
//! engine chose asks it for.

use std::path::Path;
use std::sync::Arc;

use super::cuda::{MAX_GPU_MEDIAN, StencilProgram};
use super::filter::{Filter, Stencil};
use crate::backend::cuda::CudaDevice;
use crate::backend::{Backend, BoxKernel, BoxOp, Family};
use crate::budget::Reservation;
use crate::dtype::DType;
use crate::engine::{ImageNeeds, check_not_input};
use crate::error::Result;
use crate::format::TensorFile;
use crate::tiling::{BoxPlan, BoxTile};
use crate::{Engine, RunReport};

impl Engine {
    /// Plans a filter without running it.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for an input that is not an image; [`crate::Error::Budget`]
    /// if not even a one-pixel tile fits.
    pub fn plan_stencil(
        &self,
        input: &TensorFile,
        stencil: &Stencil,
        dtype: Option<DType>,
    ) -> Result<BoxPlan> {
        self.plan_stencil_to(input, stencil, dtype, None)
    }

    /// [`Engine::plan_stencil`] of a run writing `out`: a GeoTIFF or Zarr output is
    /// encoded as the run writes it when the budget also holds its encoder (the boxes are
    /// then cut along its chunks), else refused.
    ///
    /// # Errors
    /// As [`Engine::plan_stencil`].
    pub fn plan_stencil_to(
        &self,
        input: &TensorFile,
        stencil: &Stencil,
        dtype: Option<DType>,
        out: Option<&Path>,
    ) -> Result<BoxPlan> {
        input.dtype().real_only("a filter")?;
        dtype.unwrap_or(DType::F64).real_only("a filter")?;
        let (ind, od) = (input.dtype(), dtype.unwrap_or(input.dtype()));
        // on a GPU: each lane's buffers, and the weights once
        let device_bytes = |plan: &BoxPlan| {
            StencilProgram::new(stencil, plan, ind, od).map_or(0, |p| {
                let (lane, weights) = p.device_bytes(plan.tile);
                plan.depth.max(1) as u64 * lane + weights
            })
        };
        let resident = match &stencil.filter {
            Filter::Convolve { weights, .. } => {
                Some((16 * weights.len() as u64, "convolution kernel".to_string()))
            }
            _ => None,
        };
        let needs = ImageNeeds {
            name: "stencil",
            what: format!("{} ({} boundary)", stencil.filter, stencil.boundary),
            halos: stencil.halos(),
            boundary: stencil.boundary,
            scratch: stencil.scratch(ind),
            resident,
            device_bytes: &device_bytes,
        };
        self.plan_image_op(input, od, out, &needs)
    }

    /// Filters each band of a rank-2 `(H, W)` or rank-3 `(bands, H, W)` image with
    /// `stencil`, writing `out` (same shape, `dtype` or the input's). The result equals
    /// filtering the whole image at once: tiles overlap by the filter's halo.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad input or `out` being the input;
    /// [`crate::Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn stencil(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        stencil: &Stencil,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        let out = out.as_ref();
        check_not_input(out, &[input])?;
        let od = dtype.unwrap_or(input.dtype());
        let plan = self.plan_stencil_to(input, stencil, dtype, Some(out))?;
        let what = format!(
            "stencil {} ({} boundary) of {}",
            stencil.filter,
            stencil.boundary,
            input.path().display()
        );
        let scratch_what = "filter scratch and kernel";
        self.run_box_op(stencil, input, out, &plan, od, (scratch_what, what))
    }
}

impl BoxOp for Stencil {
    fn family(&self) -> Family {
        // a median's window is sorted in registers on a GPU: the wide ones run on the CPU
        let cuda = match self.filter {
            Filter::Median { size } => size <= MAX_GPU_MEDIAN,
            _ => true,
        };
        Family::Op {
            name: "stencil",
            cuda,
        }
    }

    fn host_kernel<'a>(
        &'a self,
        host: &'a dyn Backend,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        Ok(super::cpu::host_kernel(
            host, self, plan, input, output, scratch,
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda_kernel<'a>(
        &'a self,
        dev: &'a Arc<CudaDevice>,
        plan: &'a BoxPlan,
        input: DType,
        output: DType,
        scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        // family() sent the medians it has no program for to the host
        let program = StencilProgram::new(self, plan, input, output).ok_or_else(|| {
            crate::Error::Internal(format!("no GPU program for the filter {}", self.filter))
        })?;
        let k = super::cuda_run::prepare(dev, program, self, plan, input, scratch)?;
        Ok(Box::new(k))
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda_kernel<'a>(
        &'a self,
        dev: &'a Arc<CudaDevice>,
        _plan: &'a BoxPlan,
        _input: DType,
        _output: DType,
        _scratch: Reservation,
    ) -> Result<BoxKernel<'a, BoxTile>> {
        match **dev {}
    }
}
