//! Running an [`OpSpec`](super::OpSpec): planning it ([`Engine::plan_spec`]) and
//! running it ([`Engine::run_spec`]) by the engine call of its operation, the one place
//! the command line, pipeline files and the Python package all go through.

use std::path::Path;

use super::ops::Tiling;
use super::{
    DType, Engine, Error, OpSpec, Plan, Result, RunReport, Source, SpecPlan, TensorFile,
    georef_from,
};
use crate::scheduler::InputStream;
use crate::tiling::BoxPlan;

impl Engine {
    /// How a cast or convert of `x` into `output` of `dtype` keeps `x`'s nodata pixels,
    /// by the rule `map` follows: a type that holds the nodata value exactly keeps it
    /// (false: a plain cast); into a GeoTIFF of a float type that does not (-9999 in f16
    /// is -10000, 70000 is inf), the cast runs as the map `x`, which gives those pixels
    /// NaN and tags NaN (true); into an integer type that does not (NaN or -9999 in u8),
    /// it is refused, as such a map is: its nodata pixels would become values a GIS reads
    /// as data.
    pub(crate) fn cast_masks(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<bool> {
        let Some((text, _)) = x.nodata() else {
            return Ok(false);
        };
        if self.format_of(output) != crate::format::OutFormat::GeoTiff
            || crate::format::tiff::holds_nodata(dtype, text)
        {
            return Ok(false);
        }
        if dtype.is_float() {
            return Ok(true);
        }
        let why = match crate::format::tiff::nodata_as(dtype, text) {
            Some(v) => format!("it would be {}", crate::format::tiff::nodata_text(v)),
            None => format!("{dtype} cannot hold it"),
        };
        Err(Error::invalid(format!(
            "{}: its nodata value {text} is not exactly representable in {dtype} ({why}), so \
             its nodata pixels would become data in {}; cast to a type that holds it, or give \
             them a value with the map `x` (`dtype={dtype}`, `nodata=V`)",
            x.path().display(),
            output.display(),
        )))
    }

    /// Plans a cast (or convert) of `x` to `dtype` into `output`: as the map `x` where
    /// [`Engine::cast_masks`] says its nodata pixels are masked.
    pub(crate) fn plan_cast_to(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<Plan> {
        if self.cast_masks(x, output, dtype)? {
            self.plan_map("x", &[("x", x)], Some(dtype))
        } else {
            self.plan_cast(x, dtype)
        }
    }

    /// Runs a cast (or convert) of `x` to `dtype` into `output`, with `x`'s
    /// georeferencing: as the map `x` where [`Engine::cast_masks`] says its nodata pixels
    /// are masked.
    pub(crate) fn cast_to(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<RunReport> {
        if !self.cast_masks(x, output, dtype)? {
            return georef_from(self, x, Some(dtype)).cast(x, output, dtype);
        }
        let mut r = georef_from(self, x, None).map_with(
            "x",
            &[("x", x)],
            output,
            Some(dtype),
            &crate::MapNodata::default(),
        )?;
        r.op = format!("cast {} to {dtype}", x.path().display());
        Ok(r)
    }

    /// The boxes along the output's chunks an element-wise operation on one `input`
    /// runs in ([`Engine::elementwise_boxes`]).
    pub(crate) fn boxes_of_one(
        &self,
        input: &Source,
        flat: &Plan,
        output: &Path,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        let x = input.open()?;
        let streams = [InputStream::whole(&x)];
        self.elementwise_boxes(flat, &streams, output, shape, dtype)
    }

    /// Plans `spec` without running it (nothing is written).
    ///
    /// # Errors
    /// Whatever planning the operation returns: bad parameters, unreadable inputs, a
    /// budget too small.
    pub fn plan_spec(&self, spec: &OpSpec) -> Result<SpecPlan> {
        spec.check_paths()?;
        let mut plan = self.plan_spec_tiles(spec).map_err(|e| self.as_given(e))?;
        if let Some(after) = self.after_the_run(spec).map_err(|e| self.as_given(e))? {
            match &mut plan {
                SpecPlan::Flat(p) => p.after = Some(after),
                SpecPlan::Box(p) => p.after = Some(after),
                SpecPlan::Blocks(p) => p.boxes.after = Some(after),
            }
        }
        Ok(plan)
    }

    /// What runs after the tiles of `spec` ([`Engine::cog_after_the_run`]).
    fn after_the_run(&self, spec: &OpSpec) -> Result<Option<String>> {
        match spec.operation().written(self)? {
            Some((shape, dtype)) => self.cog_after_the_run(spec.output(), &shape, dtype),
            None => Ok(None),
        }
    }

    /// [`Engine::plan_spec`] without what runs after the tiles: an operation that writes
    /// its output as flat tiles sets aside what encoding it as it is written takes (what
    /// the run sets aside, shown too), or runs in boxes along the output's chunks.
    fn plan_spec_tiles(&self, spec: &OpSpec) -> Result<SpecPlan> {
        let op = spec.operation();
        let flat = |e: &Engine| match op.plan_tiles(e)? {
            SpecPlan::Flat(p) => Ok(p),
            SpecPlan::Box(_) | SpecPlan::Blocks(_) => Err(crate::Error::Internal(
                "a box plan for a flat operation".into(),
            )),
        };
        match op.tiling() {
            Tiling::Boxes => op.plan_tiles(self),
            Tiling::FlatResult => Ok(SpecPlan::Flat(flat(self)?)),
            Tiling::FlatWriting => {
                let Some((shape, dtype)) = op.written(self)? else {
                    return Ok(SpecPlan::Flat(flat(self)?));
                };
                let p = self.plan_writing(spec.output(), &shape, dtype, flat)?;
                // an element-wise run whose flat plan cannot encode its output as it
                // writes it runs in boxes along the output's chunks when they fit
                Ok(match op.boxes(self, &p, &shape, dtype)? {
                    Some(b) => SpecPlan::Box(b),
                    // refused as the run refuses it: an output it cannot encode as it
                    // writes it (a GPU run, matmul) is not staged raw instead
                    None if p.output_bytes == 0 && self.encodes(spec.output()) => {
                        return Err(self.cannot_stream(spec.output(), &shape, dtype, None));
                    }
                    None => SpecPlan::Flat(p),
                })
            }
        }
    }

    /// Runs `spec`: reads its inputs, writes its output (atomically, resumable where the
    /// engine has a journal), and reports what it did. GeoTIFF outputs on an input's grid
    /// carry its georeferencing.
    ///
    /// # Errors
    /// Whatever the operation returns.
    pub fn run_spec(&self, spec: &OpSpec) -> Result<RunReport> {
        spec.check_paths()?;
        spec.operation().run(self).map_err(|e| self.as_given(e))
    }
}
