//! Running an [`OpSpec`](super::OpSpec): planning it ([`Engine::plan_spec`]) and
//! running it ([`Engine::run_spec`]) by the engine call of its operation, the one place
//! the command line, pipeline files and the Python package all go through.

use std::path::Path;

use super::{
    DType, Edge, Engine, Error, OpSpec, PatchSpec, Plan, Reduce, ReduceOver, Result, RunReport,
    SpecPlan, TensorFile, georef_from, is_tiff_path, map_rule, open_named, read_small, stencil_of,
};

impl Engine {
    /// How a cast or convert of `x` into `output` of `dtype` keeps `x`'s nodata pixels,
    /// by the rule `map` follows: a type that holds the nodata value exactly keeps it
    /// (false: a plain cast); into a GeoTIFF of a float type that does not (-9999 in f16
    /// is -10000, 70000 is inf), the cast runs as the map `x`, which gives those pixels
    /// NaN and tags NaN (true); into an integer type that does not (NaN or -9999 in u8),
    /// it is refused, as such a map is: its nodata pixels would become values a GIS reads
    /// as data.
    fn cast_masks(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<bool> {
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
             them a value with map (`tilestream map x {} --in x={} --dtype {dtype} --nodata V`)",
            x.path().display(),
            output.display(),
            output.display(),
            x.path().display()
        )))
    }

    /// Plans a cast (or convert) of `x` to `dtype` into `output`: as the map `x` where
    /// [`Engine::cast_masks`] says its nodata pixels are masked.
    fn plan_cast_to(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<Plan> {
        if self.cast_masks(x, output, dtype)? {
            self.plan_map("x", &[("x", x)], Some(dtype))
        } else {
            self.plan_cast(x, dtype)
        }
    }

    /// Runs a cast (or convert) of `x` to `dtype` into `output`, with `x`'s
    /// georeferencing: as the map `x` where [`Engine::cast_masks`] says its nodata pixels
    /// are masked.
    fn cast_to(&self, x: &TensorFile, output: &Path, dtype: DType) -> Result<RunReport> {
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

    /// Plans `spec` without running it (nothing is written).
    ///
    /// # Errors
    /// Whatever planning the operation returns: bad parameters, unreadable inputs, a
    /// budget too small.
    pub fn plan_spec(&self, spec: &OpSpec) -> Result<SpecPlan> {
        spec.check_paths()?;
        let mut plan = self.plan_spec_tiles(spec)?;
        if let Some(after) = self.after_the_run(spec)? {
            match &mut plan {
                SpecPlan::Flat(p) => p.after = Some(after),
                SpecPlan::Box(p) => p.after = Some(after),
            }
        }
        Ok(plan)
    }

    /// What runs after the tiles of `spec` ([`Engine::cog_after_the_run`]).
    fn after_the_run(&self, spec: &OpSpec) -> Result<Option<String>> {
        if matches!(spec, OpSpec::Tiles { .. }) {
            return Ok(None);
        }
        let (shape, dtype) = match spec {
            OpSpec::Generate { shape, dtype, .. } => (shape.clone(), *dtype),
            OpSpec::Transpose { input, .. } => {
                let x = input.open()?;
                (crate::engine::transposed_shape(x.shape()), x.dtype())
            }
            // a filter's output is its input's shape (output_layout refuses the 2-D wrap
            // boundary, which is planned whole)
            OpSpec::Stencil { input, dtype, .. } => {
                let x = input.open()?;
                (x.shape().to_vec(), dtype.unwrap_or(x.dtype()))
            }
            OpSpec::Reduce {
                input,
                reduce,
                ddof,
                axis,
                dtype,
                ..
            } => {
                let x = input.open()?;
                let r = Reduce::parse(reduce, *ddof)?;
                (
                    ReduceOver::from(*axis).out_shape(x.shape()),
                    dtype.unwrap_or(r.output_dtype(x.dtype())),
                )
            }
            _ => match spec.output_layout() {
                Ok(l) => (l.shape, l.dtype),
                Err(_) => return Ok(None),
            },
        };
        self.cog_after_the_run(spec.output(), &shape, dtype)
    }

    /// [`Engine::plan_spec`] without what runs after the tiles.
    fn plan_spec_tiles(&self, spec: &OpSpec) -> Result<SpecPlan> {
        if let OpSpec::Stencil { .. } | OpSpec::Transpose { .. } | OpSpec::Tiles { .. } = spec {
            return self.plan_spec_any(spec);
        }
        // what the run sets aside for encoding its output as it is written, shown too
        let writes = !matches!(spec, OpSpec::Reduce { .. } | OpSpec::Standardize { .. });
        let flat = |e: &Engine| match e.plan_spec_any(spec)? {
            SpecPlan::Flat(p) => Ok(p),
            SpecPlan::Box(_) => Err(crate::Error::Internal(
                "a box plan for a flat operation".into(),
            )),
        };
        let layout = match spec {
            OpSpec::Generate { shape, dtype, .. } => Ok((shape.clone(), *dtype)),
            _ => spec.output_layout().map(|l| (l.shape, l.dtype)),
        };
        Ok(match layout {
            Ok((shape, dtype)) if writes => {
                let p = self.plan_writing(spec.output(), &shape, dtype, flat)?;
                // an element-wise run whose flat plan cannot encode its output as it
                // writes it runs in boxes along the output's chunks when they fit
                match self.elementwise_boxes_of(spec, &p, &shape, dtype)? {
                    Some(b) => SpecPlan::Box(b),
                    // refused as the run refuses it: an output it cannot encode as it
                    // writes it (a GPU run, matmul) is not staged raw instead
                    None if p.output_bytes == 0 && self.encodes(spec.output()) => {
                        return Err(self.cannot_stream(spec.output(), &shape, dtype, None));
                    }
                    None => SpecPlan::Flat(p),
                }
            }
            _ => SpecPlan::Flat(flat(self)?),
        })
    }

    /// The box plan [`Engine::elementwise_boxes`] gives an element-wise `spec` (`map`,
    /// `cast`, `convert`, `affine`, `gen`) of flat plan `flat`, output `shape` and `dtype`.
    fn elementwise_boxes_of(
        &self,
        spec: &OpSpec,
        flat: &crate::plan::Plan,
        shape: &[usize],
        dtype: crate::DType,
    ) -> Result<Option<crate::tiling::BoxPlan>> {
        use crate::scheduler::InputStream;
        Ok(match spec {
            OpSpec::Cast { input, .. }
            | OpSpec::Convert { input, .. }
            | OpSpec::Affine { input, .. } => {
                let x = input.open()?;
                let streams = [InputStream::whole(&x)];
                self.elementwise_boxes(flat, &streams, spec.output(), shape, dtype)?
            }
            OpSpec::Map { expr, inputs, .. } => {
                let files = open_named(inputs)?;
                let named: Vec<(&str, &TensorFile)> =
                    files.iter().map(|(n, f)| (n.as_str(), f)).collect();
                let (_, streams, _, _) = Self::bind(expr, &named)?;
                self.elementwise_boxes(flat, &streams, spec.output(), shape, dtype)?
            }
            OpSpec::Generate { .. } => {
                self.elementwise_boxes(flat, &[], spec.output(), shape, dtype)?
            }
            _ => None,
        })
    }

    /// [`Engine::plan_spec`] without the room for encoding the output.
    fn plan_spec_any(&self, spec: &OpSpec) -> Result<SpecPlan> {
        let flat = match spec {
            OpSpec::Stencil {
                input,
                filter,
                boundary,
                dtype,
                ..
            } => {
                let x = input.open()?;
                return Ok(SpecPlan::Box(self.plan_stencil_to(
                    &x,
                    &stencil_of(filter, boundary)?,
                    *dtype,
                    Some(spec.output()),
                )?));
            }
            OpSpec::Transpose { input, .. } => {
                return Ok(SpecPlan::Box(
                    self.plan_transpose_to(&input.open()?, Some(spec.output()))?,
                ));
            }
            OpSpec::Tiles {
                input,
                size,
                overlap,
                edge,
                patch_format,
                ..
            } => {
                let spec = PatchSpec {
                    size: *size,
                    overlap: *overlap,
                    edge: edge.parse::<Edge>()?,
                };
                return Ok(SpecPlan::Box(self.plan_patches_as(
                    &input.open()?,
                    spec,
                    patch_format.parse()?,
                )?));
            }
            OpSpec::Map {
                expr,
                inputs,
                dtype,
                nodata,
                ignore_nodata,
                input_nodata,
                ..
            } => {
                let files = open_named(inputs)?;
                let named: Vec<(&str, &TensorFile)> =
                    files.iter().map(|(n, f)| (n.as_str(), f)).collect();
                // refused here as the run would refuse it: a nodata value the output
                // does not hold, masked pixels without a value to give them
                Self::bind_map(
                    expr,
                    &named,
                    *dtype,
                    &map_rule(nodata.as_ref(), *ignore_nodata, input_nodata),
                )?;
                self.plan_map(expr, &named, *dtype)
            }
            OpSpec::Cast {
                input,
                dtype,
                output,
            } => self.plan_cast_to(&input.open()?, output, *dtype),
            OpSpec::Convert {
                input,
                dtype,
                output,
            } => {
                let x = input.open()?;
                self.plan_cast_to(&x, output, dtype.unwrap_or(x.dtype()))
            }
            OpSpec::Standardize { input, ddof, .. } => self.plan_reduce(
                &input.open()?,
                Reduce::Std { ddof: *ddof },
                ReduceOver::Axis(0),
            ),
            OpSpec::Matmul { x, w, dtype, .. } => self.plan_matmul(&x.open()?, &w.open()?, *dtype),
            OpSpec::Reduce {
                input,
                reduce,
                ddof,
                axis,
                ..
            } => self.plan_reduce(
                &input.open()?,
                Reduce::parse(reduce, *ddof)?,
                ReduceOver::from(*axis),
            ),
            OpSpec::Affine {
                input,
                dtype,
                scale,
                offset,
                nodata,
                ignore_nodata,
                ..
            } => {
                let x = input.open()?;
                let rule = map_rule(nodata.as_ref(), *ignore_nodata, &[]);
                match Self::affine_masked(&x, *scale, *offset, *dtype, &rule)? {
                    // planned (and refused) as the map it runs as
                    Some(src) => {
                        let od = Some(dtype.unwrap_or(x.dtype()));
                        self.plan_map(&src, &[("x", &x)], od)
                    }
                    None => self.plan_affine(&x, *dtype),
                }
            }
            OpSpec::Generate { shape, dtype, .. } => self.plan_generate(shape, *dtype),
        };
        flat.map(SpecPlan::Flat)
    }

    /// Runs `spec`: reads its inputs, writes its output (atomically, resumable where the
    /// engine has a journal), and reports what it did. GeoTIFF outputs on an input's grid
    /// carry its georeferencing.
    ///
    /// # Errors
    /// Whatever the operation returns.
    pub fn run_spec(&self, spec: &OpSpec) -> Result<RunReport> {
        spec.check_paths()?;
        match spec {
            OpSpec::Stencil {
                input,
                output,
                filter,
                boundary,
                dtype,
            } => {
                let x = input.open()?;
                georef_from(self, &x, None).stencil(
                    &x,
                    output,
                    &stencil_of(filter, boundary)?,
                    *dtype,
                )
            }
            OpSpec::Convert {
                input,
                output,
                dtype,
            } => {
                let x = input.open()?;
                let mut r = self.cast_to(&x, output, dtype.unwrap_or(x.dtype()))?;
                r.op = format!("convert {} -> {}", input.path.display(), output.display());
                Ok(r)
            }
            OpSpec::Transpose { input, output } => {
                let x = input.open()?;
                if x.georef().is_some() && is_tiff_path(output) {
                    eprintln!(
                        "note: transpose swaps rows and columns, so {} is written without the \
                         input's georeferencing",
                        output.display()
                    );
                }
                self.transpose(&x, output)
            }
            OpSpec::Tiles {
                input,
                outdir,
                size,
                overlap,
                edge,
                patch_format,
            } => {
                let x = input.open()?;
                let spec = PatchSpec {
                    size: *size,
                    overlap: *overlap,
                    edge: edge.parse::<Edge>()?,
                };
                let (mut r, n) = self.patches_as(&x, outdir, spec, patch_format.parse()?)?;
                r.op = format!("{} -> {n} patches in {}", r.op, outdir.display());
                Ok(r)
            }
            OpSpec::Map {
                expr,
                inputs,
                output,
                dtype,
                nodata,
                ignore_nodata,
                input_nodata,
            } => {
                let files = open_named(inputs)?;
                let named: Vec<(&str, &TensorFile)> =
                    files.iter().map(|(n, f)| (n.as_str(), f)).collect();
                // the georeferencing of the first input that has one
                let e = match files.iter().find(|(_, f)| f.georef().is_some()) {
                    Some((_, f)) => georef_from(self, f, None),
                    None => self.clone(),
                };
                e.map_with(
                    expr,
                    &named,
                    output,
                    *dtype,
                    &map_rule(nodata.as_ref(), *ignore_nodata, input_nodata),
                )
            }
            OpSpec::Cast {
                input,
                output,
                dtype,
            } => self.cast_to(&input.open()?, output, *dtype),
            OpSpec::Standardize {
                input,
                output,
                dtype,
                given: Some((mean, std)),
                ..
            } => {
                let x = input.open()?;
                let (mean, std) = (read_small(mean)?, read_small(std)?);
                georef_from(self, &x, None).standardize_with_stats(&x, output, *dtype, &mean, &std)
            }
            OpSpec::Standardize {
                input,
                output,
                ddof,
                dtype,
                stats,
                given: None,
            } => {
                let x = input.open()?;
                let (stats, apply) = georef_from(self, &x, None).standardize(
                    &x,
                    output,
                    *dtype,
                    *ddof,
                    stats.as_deref(),
                )?;
                // the two passes, reported as one run: times and bytes add up
                let mut r = apply;
                r.op = format!(
                    "standardize {} (statistics pass, then apply pass)",
                    input.path.display()
                );
                r.tiles += stats.tiles;
                r.resumed_tiles += stats.resumed_tiles;
                r.bytes_read += stats.bytes_read;
                r.wall_s += stats.wall_s;
                r.read_busy_s += stats.read_busy_s;
                r.compute_busy_s += stats.compute_busy_s;
                r.peak_reserved_bytes = r.peak_reserved_bytes.max(stats.peak_reserved_bytes);
                r.gb_per_s = (r.bytes_read + r.bytes_written) as f64 / r.wall_s.max(1e-9) / 1e9;
                Ok(r)
            }
            OpSpec::Matmul {
                x,
                w,
                output,
                dtype,
            } => self.matmul(&x.open()?, &w.open()?, output, *dtype),
            OpSpec::Reduce {
                input,
                output,
                reduce,
                ddof,
                axis,
                dtype,
            } => {
                let x = input.open()?;
                let r = Reduce::parse(reduce, *ddof)?;
                self.reduce_to_file(&x, r, ReduceOver::from(*axis), output, *dtype)
            }
            OpSpec::Affine {
                input,
                output,
                scale,
                offset,
                dtype,
                nodata,
                ignore_nodata,
            } => {
                let x = input.open()?;
                georef_from(self, &x, None).affine_with(
                    &x,
                    output,
                    *scale,
                    *offset,
                    *dtype,
                    &map_rule(nodata.as_ref(), *ignore_nodata, &[]),
                )
            }
            OpSpec::Generate {
                output,
                shape,
                dtype,
                seed,
                dist,
                mean,
                std,
                low,
                high,
            } => {
                let dist = crate::ops::generate::Dist::parse(dist, *mean, *std, *low, *high)?;
                self.generate_dist(output, shape, *dtype, *seed, dist)
            }
        }
    }
}
