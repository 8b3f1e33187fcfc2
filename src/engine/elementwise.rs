//! Flat elementwise operations: affine, cast, map (a compiled expression), matmul with
//! a resident right-hand side, and generation; on the CPU, or on a GPU through a
//! prepared CUDA kernel.

use std::path::Path;

use super::nodata::{BoundMap, MapNodata};
use super::{Engine, Ran, RunReport, check_not_input, decode_scratch, hold};
use crate::backend::ElementwiseParams;
use crate::backend::{Family, Kernels};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape, window_slack};
use crate::layout::Layout;
use crate::ops::expr::{self, Expr, Program};
use crate::ops::generate::Dist;
use crate::plan::Plan;
use crate::scheduler::InputStream;

impl Engine {
    /// Visits the bands of each position one after another (the plan's `bands_inner`)
    /// when an input of the plan's shape is decoded in chunks that hold every band (a
    /// pixel-interleaved GeoTIFF) and the output does not already choose the order: the
    /// chunks a band's tile decodes are then in the cache for the other bands' tiles, so
    /// each chunk is decoded once instead of once a band. Elementwise only: the order
    /// of tiles changes nothing in their values.
    fn interleaved_input_order(&self, req: &mut crate::plan::PlanRequest, inputs: &[&TensorFile]) {
        if req.bands_inner.is_some() || self.out_reserve.is_some() || req.shape.len() != 3 {
            return;
        }
        req.bands_inner = inputs.iter().find_map(|f| {
            let c = f.aligned_chunk_shape()?;
            (f.shape() == req.shape.as_slice() && c.len() == 3 && c[0] == req.shape[0] && c[0] > 1)
                .then_some(c[1])
        });
    }

    /// Plans `affine` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_affine(&self, input: &TensorFile, out_dtype: Option<DType>) -> Result<Plan> {
        if input.dtype().is_complex() && !out_dtype.unwrap_or(input.dtype()).is_complex() {
            return Err(Error::invalid(format!(
                "{}: an affine of {} into {} would drop the imaginary parts; give a \
                 complex dtype (c64, c128)",
                input.path().display(),
                input.dtype().numpy_name(),
                out_dtype.unwrap_or(input.dtype())
            )));
        }
        self.plan_one_to_one("affine", input, out_dtype)
    }

    /// The plan of an element-for-element operation `what` of one input (affine, cast).
    fn plan_one_to_one(
        &self,
        what: &str,
        input: &TensorFile,
        out_dtype: Option<DType>,
    ) -> Result<Plan> {
        let od = out_dtype.unwrap_or(input.dtype());
        let mut req = self.request(
            format!(
                "{what} of {} {} -> {od}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = od.size() as u64;
        self.interleaved_input_order(&mut req, &[input]);
        self.on_device(&mut req, 0, 0, 0);
        Ok(Plan::new(&req)?)
    }

    /// Writes `cast(scale * input + offset)` to `out` (`.npy` or raw), streaming
    /// (`scale * input + offset` rounded once, as `fma`). Pixels where the input is
    /// nodata are masked as [`MapNodata::default`] says: see [`Engine::affine_with`].
    ///
    /// # Errors
    /// As [`Engine::affine_with`].
    pub fn affine(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        self.affine_with(input, out, scale, offset, dtype, &MapNodata::default())
    }

    /// [`Engine::affine`] with the rule for the pixels where the input is nodata (a
    /// GeoTIFF with a GDAL nodata value), as [`Engine::map_with`] applies it: they become
    /// the output's nodata value, which a GeoTIFF output carries.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `out` is the input, for a nodata value the output type does
    /// not hold, or masked pixels and an integer output with no value to give them;
    /// [`Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn affine_with(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<RunReport> {
        let od = dtype.unwrap_or(input.dtype());
        if let Some(src) = Self::affine_masked(input, scale, offset, dtype, rule)? {
            let mut r = self.map_with(&src, &[("x", input)], out, Some(od), rule)?;
            r.op = r.op.replacen(
                &format!("map '{src}'"),
                &format!(
                    "affine {scale} * x + {offset} of {}",
                    input.path().display()
                ),
                1,
            );
            return Ok(r);
        }
        // no pixel is nodata: the output carries no nodata value
        self.with_output_nodata(None, input.shape())
            .affine_unmasked(input, out.as_ref(), scale, offset, dtype)
    }

    fn affine_unmasked(
        &self,
        input: &TensorFile,
        out: &Path,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        check_not_input(out, &[input])?;
        let od = dtype.unwrap_or(input.dtype());
        let plan = self.plan_writing(out, input.shape(), od, |e| e.plan_affine(input, dtype))?;
        self.budget.reset_peak();
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let shape = input.shape();
        let op = format!(
            "affine {scale} * x + {offset} of {}",
            input.path().display()
        );
        if let Some(boxes) = self.elementwise_boxes(&plan, &inputs, out, shape, od)? {
            let times =
                self.run_elementwise_boxes(&boxes, &inputs, out, shape, od, |_, ins, o| {
                    backend.affine(ins[0], input.dtype(), o, od, scale, offset)
                })?;
            return Ok(self.report_boxes(&boxes, Ran::cpu(Family::Affine, op), shape, od, times));
        }
        let params = ElementwiseParams::Affine { scale, offset };
        // the CUDA kernels take real dtypes only
        let dev: &dyn Kernels = if input.dtype().is_complex() || od.is_complex() {
            &*self.backend
        } else {
            self.kernels_for(Family::Affine)
        };
        let k = dev.elementwise_kernel(&params, input.dtype(), od, &plan)?;
        let times = self.run_to_file(&plan, &inputs, out, shape, od, 1, k)?;
        let op = Ran::on(Family::Affine, op, super::on_gpu(dev));
        Ok(self.report(&plan, op, input.shape(), input.shape(), od, times))
    }

    /// Plans `cast` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_cast(&self, input: &TensorFile, dtype: DType) -> Result<Plan> {
        if input.dtype().is_complex() && !dtype.is_complex() {
            return Err(Error::invalid(format!(
                "{}: a cast of {} to {dtype} would drop the imaginary parts; cast to c64 or \
                 c128",
                input.path().display(),
                input.dtype().numpy_name()
            )));
        }
        self.plan_one_to_one("cast", input, Some(dtype))
            .map(|mut p| {
                p.what = format!(
                    "cast {} {} -> {dtype}",
                    fmt_shape(input.shape()),
                    input.dtype()
                );
                p
            })
    }

    /// Writes `input` cast to `dtype` to `out`, streaming. Integer to integer casts are
    /// exact and saturate; float to f16/bf16 rounds to nearest even; float to integer
    /// rounds toward zero, saturates and maps NaN to 0.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `out` is the input; [`Error::Budget`]; I/O errors. On error
    /// nothing is left at `out`.
    pub fn cast(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: DType,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        let plan = self.plan_writing(out.as_ref(), input.shape(), dtype, |e| {
            e.plan_cast(input, dtype)
        })?;
        self.budget.reset_peak();
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let (out, shape) = (out.as_ref(), input.shape());
        let op = format!("cast {} to {dtype}", input.path().display());
        if let Some(boxes) = self.elementwise_boxes(&plan, &inputs, out, shape, dtype)? {
            let times =
                self.run_elementwise_boxes(&boxes, &inputs, out, shape, dtype, |_, ins, o| {
                    backend.cast(ins[0], input.dtype(), o, dtype)
                })?;
            return Ok(self.report_boxes(&boxes, Ran::cpu(Family::Cast, op), shape, dtype, times));
        }
        // the CUDA kernels cast real dtypes only
        let dev: &dyn Kernels = if input.dtype().is_complex() || dtype.is_complex() {
            &*self.backend
        } else {
            self.kernels_for(Family::Cast)
        };
        let k = dev.elementwise_kernel(&ElementwiseParams::Cast, input.dtype(), dtype, &plan)?;
        let op = Ran::on(Family::Cast, op, super::on_gpu(dev));
        let times = self.run_to_file(&plan, &inputs, out, shape, dtype, 1, k)?;
        Ok(self.report(&plan, op, input.shape(), input.shape(), dtype, times))
    }

    /// Resolves an expression's inputs: the compiled program, its streams (file and base
    /// offset for each), the shape it iterates over and the default output dtype.
    pub(crate) fn bind<'a>(
        src: &str,
        inputs: &[(&str, &'a TensorFile)],
    ) -> Result<(Program, Vec<InputStream<'a>>, Vec<usize>, DType)> {
        Self::bind_expr(src, &Self::parse_expr(src)?, inputs)
    }

    pub(super) fn parse_expr(src: &str) -> Result<Expr> {
        expr::parse(src).map_err(|e| {
            Error::invalid(format!(
                "cannot parse expression '{}' at {e}",
                crate::format::npy::shown(src)
            ))
        })
    }

    /// [`Engine::bind`] of the parsed `e` (`src` is its text, for messages).
    pub(super) fn bind_expr<'a>(
        src: &str,
        e: &Expr,
        inputs: &[(&str, &'a TensorFile)],
    ) -> Result<(Program, Vec<InputStream<'a>>, Vec<usize>, DType)> {
        let is_complex = |r: &expr::InputRef| {
            inputs
                .iter()
                .find(|(n, _)| *n == r.name)
                .is_some_and(|(_, f)| f.dtype().is_complex())
        };
        let program = Program::compile_typed(e, is_complex).map_err(|err| {
            Error::invalid(format!(
                "expression '{}': {err}",
                crate::format::npy::shown(src)
            ))
        })?;
        if program.streams.is_empty() {
            return Err(Error::invalid(format!(
                "expression '{src}' uses no input: name one given with `in=NAME=FILE`"
            )));
        }
        let mut streams = Vec::new();
        let mut shape: Option<(Vec<usize>, String)> = None;
        for r in &program.streams {
            let Some(&(_, file)) = inputs.iter().find(|(n, _)| *n == r.name) else {
                let known: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
                return Err(Error::invalid(format!(
                    "expression '{src}' at column {}: unknown input '{}' (inputs given: {}); add `in={}=FILE`",
                    r.column,
                    r.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    },
                    r.name
                )));
            };
            let (s, base, label) = match r.index {
                None => (file.shape().to_vec(), 0u64, r.name.clone()),
                Some(i) => {
                    let fs = file.shape();
                    if fs.len() < 2 || i >= fs[0] {
                        return Err(Error::invalid(format!(
                            "expression '{src}' at column {}: {}[{i}] is out of range: {} has shape {} (index the leading axis, 0 to {})",
                            r.column,
                            r.name,
                            r.name,
                            fmt_shape(fs),
                            fs.first().copied().unwrap_or(1).saturating_sub(1)
                        )));
                    }
                    let plane: u64 = fs[1..].iter().map(|&d| d as u64).product();
                    (
                        fs[1..].to_vec(),
                        i as u64 * plane,
                        format!("{}[{i}]", r.name),
                    )
                }
            };
            match &shape {
                None => shape = Some((s, label)),
                Some((s0, l0)) if *s0 != s => {
                    return Err(Error::invalid(format!(
                        "expression '{src}': {l0} has shape {} but {label} has shape {}; inputs must have the same shape",
                        fmt_shape(s0),
                        fmt_shape(&s)
                    )));
                }
                Some(_) => {}
            }
            streams.push(InputStream {
                file,
                base,
                per_item: 1,
            });
        }
        let shape = shape.map(|(s, _)| s).unwrap_or_default();
        let dtypes: Vec<DType> = streams.iter().map(|s| s.file.dtype()).collect();
        let real = Self::map_default_dtype(&dtypes);
        let default = if program.is_complex() {
            // complex64 over f16/bf16/f32 parts, as numpy promotes them
            real.complex_of().unwrap_or(DType::C64)
        } else {
            real
        };
        Ok((program, streams, shape, default))
    }

    /// Refuses an `od` output of `program`'s value that would drop an imaginary part
    /// (numpy warns and drops it).
    pub(super) fn check_map_output(src: &str, program: &Program, od: DType) -> Result<()> {
        if program.is_complex() && !od.is_complex() {
            return Err(Error::invalid(format!(
                "expression '{}' has a complex value, which a {od} output would lose the \
                 imaginary part of: take abs(), real() or imag() of it, or write complex64 \
                 or complex128",
                crate::format::npy::shown(src)
            )));
        }
        Ok(())
    }

    /// The dtype `map` writes by default over inputs of `dtypes` when its value is real:
    /// the widest float input (a complex input counts as its parts' float); f32 for f16
    /// with bf16; f64 if no input is a float. A complex value takes the complex dtype of
    /// those parts (complex64 for f16, bf16 and f32).
    #[must_use]
    pub fn map_default_dtype(dtypes: &[DType]) -> DType {
        let floats: Vec<DType> = dtypes
            .iter()
            .map(|d| d.part())
            .filter(|d| d.is_float())
            .collect();
        if floats.is_empty() || floats.contains(&DType::F64) {
            DType::F64
        } else if floats.contains(&DType::F32)
            || (floats.contains(&DType::F16) && floats.contains(&DType::BF16))
        {
            DType::F32
        } else {
            floats[0]
        }
    }

    /// Plans `map` without running it.
    ///
    /// # Errors
    /// As [`map`](Self::map), without I/O.
    pub fn plan_map(
        &self,
        src: &str,
        inputs: &[(&str, &TensorFile)],
        dtype: Option<DType>,
    ) -> Result<Plan> {
        let (program, streams, shape, default) = Self::bind(src, inputs)?;
        let od = dtype.unwrap_or(default);
        Self::check_map_output(src, &program, od)?;
        let mut streams_files: Vec<&TensorFile> = Vec::new();
        for s in &streams {
            if !streams_files.iter().any(|f| std::ptr::eq(*f, s.file)) {
                streams_files.push(s.file);
            }
        }
        let mut req = self.request(
            format!("map '{src}' over {} -> {od}", fmt_shape(&shape)),
            &shape,
            &streams_files,
        );
        req.in_bytes_per_elem = streams.iter().map(|s| s.file.dtype().size() as u64).sum();
        req.inputs = streams.len();
        req.out_bytes_per_elem = od.size() as u64;
        self.interleaved_input_order(&mut req, &streams_files);
        self.on_device(&mut req, 0, 0, 0);
        Ok(Plan::new(&req)?)
    }

    /// Evaluates the elementwise expression `src` over named inputs of one shape (or
    /// planes `s[k]` of a band-sequential input) in one pass, writing the result cast to
    /// `dtype` (default: the widest float input, f64 if none) to `out`. Pixels where an
    /// input is nodata are masked as [`MapNodata::default`] says: see
    /// [`Engine::map_with`].
    ///
    /// # Errors
    /// As [`Engine::map_with`].
    pub fn map(
        &self,
        src: &str,
        inputs: &[(&str, &TensorFile)],
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        self.map_with(src, inputs, out, dtype, &MapNodata::default())
    }

    /// [`Engine::map`] with the rule for nodata pixels: where an input (a GeoTIFF with a
    /// GDAL nodata value) is nodata, the output is its nodata value (`rule.value`, by
    /// default NaN for a float output and, for an integer one, the inputs' nodata value
    /// when they share one it holds), unless `rule.ignore_inputs`. A GeoTIFF output
    /// carries that value as its nodata, and no other.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a parse error (with its column), an unknown input, an index
    /// out of range, mismatched shapes, `out` being an input, a nodata value the output
    /// type does not hold exactly, or masked inputs and an integer output with no value to
    /// give them; [`Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn map_with(
        &self,
        src: &str,
        inputs: &[(&str, &TensorFile)],
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<RunReport> {
        let files: Vec<&TensorFile> = inputs.iter().map(|(_, f)| *f).collect();
        check_not_input(out.as_ref(), &files)?;
        let BoundMap {
            program,
            streams,
            shape,
            dtype: od,
            nodata,
            masked,
        } = Self::bind_map(src, inputs, dtype, rule)?;
        let this = self.with_output_nodata(nodata.clone(), &shape);
        let op = match (&nodata, masked.is_empty()) {
            (Some(v), false) => {
                format!("map '{src}' ({v} where {} is nodata)", masked.join(" or "))
            }
            _ => format!("map '{src}'"),
        };
        let plan =
            this.plan_writing(out.as_ref(), &shape, od, |e| e.plan_map(src, inputs, dtype))?;
        this.budget.reset_peak();
        let dtypes: Vec<DType> = streams.iter().map(|s| s.file.dtype()).collect();
        let backend = &this.backend;
        if let Some(boxes) = this.elementwise_boxes(&plan, &streams, out.as_ref(), &shape, od)? {
            let times = this.run_elementwise_boxes(
                &boxes,
                &streams,
                out.as_ref(),
                &shape,
                od,
                |_, ins, o| backend.map(&program, ins, &dtypes, o, od),
            )?;
            return Ok(this.report_boxes(&boxes, Ran::cpu(Family::Map, op), &shape, od, times));
        }
        let dev = this.kernels_for(Family::Map);
        let k = dev.map_kernel(&program, &dtypes, od, &plan)?;
        let op = Ran::on(Family::Map, op, super::on_gpu(dev));
        let times = this.run_to_file(&plan, &streams, out.as_ref(), &shape, od, 1, k)?;
        Ok(this.report(&plan, op, &shape, &shape, od, times))
    }

    pub(crate) fn matmul_shapes(x: &TensorFile, w: &TensorFile) -> Result<(usize, usize, usize)> {
        let (xs, ws) = (x.shape(), w.shape());
        if xs.len() != 2 || ws.len() != 2 {
            return Err(Error::invalid(format!(
                "matmul needs X of rank 2 (R x K) and W of rank 2 (K x N), got X {} and W {}",
                fmt_shape(xs),
                fmt_shape(ws)
            )));
        }
        if xs[1] != ws[0] {
            return Err(Error::invalid(format!(
                "matmul shapes do not match: X is {} and W is {}; X's columns ({}) must equal W's rows ({})",
                fmt_shape(xs),
                fmt_shape(ws),
                xs[1],
                ws[0]
            )));
        }
        Ok((xs[0], xs[1], ws[1]))
    }

    /// Plans `matmul` without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for mismatched shapes; [`Error::Budget`] if W, or W plus one row
    /// tile, does not fit.
    pub fn plan_matmul(
        &self,
        x: &TensorFile,
        w: &TensorFile,
        dtype: Option<DType>,
    ) -> Result<Plan> {
        let (r, k, n) = Self::matmul_shapes(x, w)?;
        let form = crate::ops::matmul::MatmulForm::new(x.dtype(), w.dtype(), dtype)?;
        let (c, od) = (form.compute, form.out);
        let (kr, nr) = (form.k_real(k), form.n_real(n));
        let w_bytes = form.resident_bytes(k, n);
        if w_bytes > self.budget.limit() {
            return Err(Error::Budget(crate::budget::BudgetError::TooSmall {
                what: format!(
                    "matmul with W {} {} held in memory",
                    fmt_shape(w.shape()),
                    w.dtype()
                ),
                arithmetic: format!("W alone needs {kr} x {nr} x {} B", c.size()),
                needed: w_bytes
                    + (k * x.dtype().size() + n * od.size()) as u64 * 3
                    + 3 * window_slack(),
                limit: self.budget.limit(),
            }));
        }
        let mut req = self.request(
            format!(
                "matmul {} {} @ {} {} -> {} {od}",
                fmt_shape(x.shape()),
                x.dtype(),
                fmt_shape(w.shape()),
                w.dtype(),
                fmt_shape(&[r, n])
            ),
            &[r],
            &[x, w],
        );
        req.in_bytes_per_elem = (k * x.dtype().size()) as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = (n * od.size()) as u64;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            w_bytes,
            format!("W as {c}"),
        );
        req.scratch_per_elem = (if x.dtype().part() == c {
            0
        } else {
            kr * c.size()
        } + if od.part() == c {
            0
        } else {
            nr * (c.size() + 8)
        }) as u64;
        req.min_tile = 1;
        // on a GPU: each stream's row tile of X and of Y, and W resident
        self.on_device(&mut req, 0, 0, w_bytes);
        let mut plan = Plan::new(&req)?;
        plan.tile_shape = vec![plan.extent, k];
        Ok(plan)
    }

    /// Writes `X @ W` to `out`: X (R x K) streamed by row tiles, W (K x N) held in memory
    /// (its bytes count in the budget), cast to `dtype` (default: f32 when both operands
    /// are exact in f32, f64 otherwise).
    ///
    /// # Errors
    /// [`Error::Invalid`] for mismatched shapes or `out` being an input; [`Error::Budget`]
    /// if W does not fit; I/O errors. On error nothing is left at `out`.
    pub fn matmul(
        &self,
        x: &TensorFile,
        w: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[x, w])?;
        let (r, k, n) = Self::matmul_shapes(x, w)?;
        let form = crate::ops::matmul::MatmulForm::new(x.dtype(), w.dtype(), dtype)?;
        let od = form.out;
        let plan = self.plan_writing(out.as_ref(), &[r, n], od, |e| e.plan_matmul(x, w, dtype))?;
        self.budget.reset_peak();
        let _w_reservation = self.budget.reserve(
            "resident W",
            plan.resident_bytes
                - decode_scratch(self.budget.limit(), &[x, w]).0
                - plan.output_bytes,
        )?;
        let resident = {
            let win = w.map_window(0, (k * n) as u64)?;
            crate::ops::matmul::Resident::of_form(win.bytes(), w.dtype(), form, k, n)
        };
        let inputs = [InputStream {
            file: x,
            base: 0,
            per_item: k as u64,
        }];
        let dev = self.kernels_for(Family::Matmul);
        // complex rows are read and written as the real rows of their parts
        let kernel = dev.matmul_kernel(
            &resident,
            x.dtype().part(),
            od.part(),
            form.k_real(k),
            form.n_real(n),
            &plan,
        )?;
        let times =
            self.run_to_file(&plan, &inputs, out.as_ref(), &[r, n], od, n as u64, kernel)?;
        let op = format!("matmul {} @ {}", x.path().display(), w.path().display());
        let op = Ran::on(Family::Matmul, op, super::on_gpu(dev));
        Ok(self.report(&plan, op, x.shape(), &[r, n], od, times))
    }

    /// Plans `generate` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_generate(&self, shape: &[usize], dtype: DType) -> Result<Plan> {
        dtype.real_only("generating")?;
        if shape.len() > crate::format::MAX_RANK {
            return Err(Error::invalid(format!(
                "generate: a shape of {} dimensions; tilestream and numpy read at most {}",
                shape.len(),
                crate::format::MAX_RANK
            )));
        }
        let mut req = self.request(format!("generate {} {dtype}", fmt_shape(shape)), shape, &[]);
        req.out_bytes_per_elem = dtype.size() as u64;
        self.on_device(&mut req, 0, 0, 0);
        Ok(Plan::new(&req)?)
    }

    /// Writes a tensor of standard-normal values plus a per-column offset `col / 100` to
    /// `out`, streamed (any size); the values depend only on `seed`.
    ///
    /// # Errors
    /// [`Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn generate(
        &self,
        out: impl AsRef<Path>,
        shape: &[usize],
        dtype: DType,
        seed: u64,
    ) -> Result<RunReport> {
        self.generate_dist(out, shape, dtype, seed, Dist::Demo)
    }

    /// Writes a tensor of draws of `dist` to `out`, streamed (any size); the values
    /// depend only on `seed` and `dist`, never on the budget or the threads.
    ///
    /// # Errors
    /// [`Error::Budget`]; I/O errors. On error nothing is left at `out`.
    pub fn generate_dist(
        &self,
        out: impl AsRef<Path>,
        shape: &[usize],
        dtype: DType,
        seed: u64,
        dist: Dist,
    ) -> Result<RunReport> {
        if shape.is_empty() {
            return Err(Error::invalid("generate needs a shape of rank 1 or more"));
        }
        let plan = self.plan_writing(out.as_ref(), shape, dtype, |e| {
            e.plan_generate(shape, dtype)
        })?;
        self.budget.reset_peak();
        let last = if shape.len() >= 2 {
            shape[shape.len() - 1] as u64
        } else {
            0
        };
        let backend = &self.backend;
        let op = format!(
            "generate {} {dtype} {} (seed {seed})",
            fmt_shape(shape),
            dist.describe()
        );
        if let Some(boxes) = self.elementwise_boxes(&plan, &[], out.as_ref(), shape, dtype)? {
            // each row of a box is a run of the output: drawn for its position
            let es = dtype.size();
            let mut rows = Vec::new();
            let times =
                self.run_elementwise_boxes(&boxes, &[], out.as_ref(), shape, dtype, |t, _, o| {
                    rows.clear();
                    boxes.writes(t, &mut rows);
                    rows.iter().try_for_each(|w| {
                        let at = w.buf_elem as usize * es..(w.buf_elem + w.len) as usize * es;
                        backend.generate(&mut o[at], dtype, w.file_elem, last, seed, dist)
                    })
                })?;
            let op = Ran::cpu(Family::Generate, op);
            return Ok(self.report_boxes(&boxes, op, shape, dtype, times));
        }
        let dev = self.kernels_for(Family::Generate);
        let op = Ran::on(Family::Generate, op, super::on_gpu(dev));
        let k = dev.generate_kernel(dist, dtype, seed, last, &plan)?;
        let times = self.run_to_file(&plan, &[], out.as_ref(), shape, dtype, 1, k)?;
        Ok(self.report(&plan, op, shape, shape, dtype, times))
    }
}
