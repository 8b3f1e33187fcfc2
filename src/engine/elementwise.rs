//! Flat elementwise operations: affine, cast, map (a compiled expression), matmul with
//! a resident right-hand side, and generation; on the CPU, or on a GPU through a
//! prepared CUDA kernel.

use std::path::Path;

use super::{Engine, RunReport, check_not_input, decode_scratch, hold};
use crate::backend::cuda::ElementwiseParams;
use crate::backend::cuda::source::Elementwise;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::expr::{self, BinOp, Expr, Program, UnOp};
use crate::ops::generate::Dist;
use crate::plan::Plan;
use crate::scheduler::InputStream;
use crate::tensor::{TensorFile, fmt_shape, window_slack};

impl Engine {
    /// Plans `affine` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_affine(&self, input: &TensorFile, out_dtype: Option<DType>) -> Result<Plan> {
        let od = out_dtype.unwrap_or(input.dtype());
        let mut req = self.request(
            format!(
                "affine of {} {} -> {od}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = od.size() as u64;
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

    /// The expression an affine is run as when it masks nodata pixels or sets a nodata
    /// value (`rule`), as [`Engine::map_with`] runs it: `fma(x, scale, offset)`, the
    /// affine kernel's arithmetic, so its other pixels are the same bytes. `None` when
    /// the input has no nodata value to mask (or `rule` ignores it) and no value is set.
    ///
    /// # Errors
    /// What [`Engine::bind_map`] refuses of the map it runs as, checked here.
    pub(crate) fn affine_masked(
        input: &TensorFile,
        scale: f64,
        offset: f64,
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<Option<String>> {
        let nodata = input.georef().and_then(|g| g.nodata.as_deref());
        let masks = !rule.ignore_inputs
            && nodata
                .is_some_and(|t| crate::tensor::geotiff::nodata_as(input.dtype(), t).is_some());
        if !masks && rule.value.is_none() {
            return Ok(None);
        }
        let src = format!(
            "fma(x, {}, {})",
            expr::literal(scale),
            expr::literal(offset)
        );
        let od = dtype.unwrap_or(input.dtype());
        Self::bind_map(&src, &[("x", input)], Some(od), rule)?;
        Ok(Some(src))
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
        let plan = self.plan_writing(out, input.shape(), od, || self.plan_affine(input, dtype))?;
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
            return Ok(self.report_boxes(&boxes, op, shape, od, times));
        }
        let params = ElementwiseParams::Affine { scale, offset };
        let times =
            match self.cuda_elementwise(Elementwise::Affine, input.dtype(), od, &params, &plan)? {
                Some(k) => self.run_to_file(&plan, &inputs, out, shape, od, 1, k),
                None => self.run_to_file(
                    &plan,
                    &inputs,
                    out,
                    shape,
                    od,
                    1,
                    self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                        backend.affine(ins[0], input.dtype(), o, od, scale, offset)
                    }),
                ),
            }?;
        Ok(self.report(&plan, op, input.shape(), input.shape(), od, times))
    }

    /// Plans `cast` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_cast(&self, input: &TensorFile, dtype: DType) -> Result<Plan> {
        self.plan_affine(input, Some(dtype)).map(|mut p| {
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
        let plan = self.plan_writing(out.as_ref(), input.shape(), dtype, || {
            self.plan_cast(input, dtype)
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
            return Ok(self.report_boxes(&boxes, op, shape, dtype, times));
        }
        let cuda = self.cuda_elementwise(
            Elementwise::Cast,
            input.dtype(),
            dtype,
            &ElementwiseParams::Cast,
            &plan,
        )?;
        let times = match cuda {
            Some(k) => self.run_to_file(&plan, &inputs, out, shape, dtype, 1, k),
            None => self.run_to_file(
                &plan,
                &inputs,
                out,
                shape,
                dtype,
                1,
                self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                    backend.cast(ins[0], input.dtype(), o, dtype)
                }),
            ),
        }?;
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

    fn parse_expr(src: &str) -> Result<Expr> {
        expr::parse(src).map_err(|e| {
            Error::invalid(format!(
                "cannot parse expression '{}' at {e}",
                crate::tensor::npy::shown(src)
            ))
        })
    }

    /// [`Engine::bind`] of the parsed `e` (`src` is its text, for messages).
    fn bind_expr<'a>(
        src: &str,
        e: &Expr,
        inputs: &[(&str, &'a TensorFile)],
    ) -> Result<(Program, Vec<InputStream<'a>>, Vec<usize>, DType)> {
        let program = Program::compile(e);
        if program.streams.is_empty() {
            return Err(Error::invalid(format!(
                "expression '{src}' uses no input: name one given with --in NAME=FILE"
            )));
        }
        let mut streams = Vec::new();
        let mut shape: Option<(Vec<usize>, String)> = None;
        for r in &program.streams {
            let Some(&(_, file)) = inputs.iter().find(|(n, _)| *n == r.name) else {
                let known: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
                return Err(Error::invalid(format!(
                    "expression '{src}' at column {}: unknown input '{}' (inputs given: {}); add --in {}=FILE",
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
        Ok((program, streams, shape, Self::map_default_dtype(&dtypes)))
    }

    /// The dtype `map` writes by default over inputs of `dtypes`: the widest float input;
    /// f32 for f16 with bf16; f64 if no input is a float.
    #[must_use]
    pub fn map_default_dtype(dtypes: &[DType]) -> DType {
        let floats: Vec<DType> = dtypes.iter().copied().filter(|d| d.is_float()).collect();
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
        let (_, streams, shape, default) = Self::bind(src, inputs)?;
        let od = dtype.unwrap_or(default);
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
        self.on_device(&mut req, 0, 0, 0);
        Ok(Plan::new(&req)?)
    }

    /// Binds a map's expression with its nodata rule: pixels where an input (a GeoTIFF
    /// with a GDAL nodata value its type holds) is nodata become the output's nodata
    /// value, as [`MapNodata`] says; the output's nodata text comes back for a GeoTIFF
    /// output.
    ///
    /// # Errors
    /// As [`Engine::bind`]; [`Error::Invalid`] for a nodata value the output type does
    /// not hold, or masked inputs and an integer output with no nodata value to give them.
    #[allow(clippy::float_cmp)] // nodata values are exact
    pub(crate) fn bind_map<'a>(
        src: &str,
        inputs: &[(&str, &'a TensorFile)],
        dtype: Option<DType>,
        rule: &MapNodata,
    ) -> Result<BoundMap<'a>> {
        use crate::tensor::geotiff::{nodata_as, nodata_text};
        let e = Self::parse_expr(src)?;
        let (program, streams, shape, default) = Self::bind_expr(src, &e, inputs)?;
        let od = dtype.unwrap_or(default);
        // nodata given by name: for inputs there are, once each
        for (k, (name, _)) in rule.inputs.iter().enumerate() {
            let known: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
            if !known.contains(&name.as_str()) {
                return Err(Error::invalid(format!(
                    "nodata given for input '{}', which is not one (inputs: {})",
                    crate::tensor::npy::shown(name),
                    known.join(", ")
                )));
            }
            if rule.inputs[..k].iter().any(|(m, _)| m == name) {
                return Err(Error::invalid(format!(
                    "nodata given twice for input '{}': give it once",
                    crate::tensor::npy::shown(name)
                )));
            }
        }
        let label = |r: &expr::InputRef| match r.index {
            Some(i) => format!("{}[{i}]", r.name),
            None => r.name.clone(),
        };
        // the streams that can be nodata, and the value their pixels have there
        let mut masks: Vec<(expr::InputRef, f64)> = Vec::new();
        if !rule.ignore_inputs {
            for (r, st) in program.streams.iter().zip(&streams) {
                let given = rule
                    .inputs
                    .iter()
                    .find(|(n, _)| *n == r.name)
                    .map(|(_, t)| {
                        t.as_deref()
                            .filter(|t| !t.trim().eq_ignore_ascii_case("none"))
                    });
                let v = match given {
                    // given: a value the input's type holds, or refused
                    Some(Some(t)) => match nodata_as(st.file.dtype(), t) {
                        Some(v) => v,
                        None => {
                            return Err(Error::invalid(format!(
                                "input {} is {}, which holds no nodata value '{}': give \
                                 one of its values",
                                label(r),
                                st.file.dtype(),
                                crate::tensor::npy::shown(t.trim())
                            )));
                        }
                    },
                    Some(None) => continue,
                    // the file's, when its type holds it
                    None => {
                        let text = st.file.georef().and_then(|g| g.nodata.as_deref());
                        match text.and_then(|t| nodata_as(st.file.dtype(), t)) {
                            Some(v) => v,
                            None => continue,
                        }
                    }
                };
                // map computes in f64, where a 64-bit integer beyond 2^53 is not itself
                if v.abs() >= 2f64.powi(53) && matches!(st.file.dtype(), DType::I64 | DType::U64) {
                    return Err(Error::invalid(format!(
                        "input {} has nodata {}, 2^53 or more from 0, which f64 arithmetic \
                         cannot tell from its neighbours: compute those pixels like any \
                         other (--ignore-nodata)",
                        label(r),
                        nodata_text(v)
                    )));
                }
                masks.push((r.clone(), v));
            }
        }
        let value = match &rule.value {
            Some(text) => Some(output_nodata(text, od)?),
            None if masks.is_empty() => None,
            None if od.is_float() => Some(f64::NAN),
            None => {
                // an integer output: the inputs' nodata value, when they share one it holds
                let v = masks[0].1;
                let shared = masks.iter().all(|m| m.1 == v);
                match nodata_as(od, &nodata_text(v)) {
                    Some(held) if shared && held == v => Some(v),
                    _ => {
                        let what: Vec<String> = masks
                            .iter()
                            .map(|(r, v)| format!("{} {}", label(r), nodata_text(*v)))
                            .collect();
                        return Err(Error::invalid(format!(
                            "the pixels where an input is nodata ({}) take the output's \
                             nodata value, and a {od} output holds no such shared value: give \
                             one with --nodata VALUE (`nodata` in Python and pipelines), a \
                             float --dtype (NaN there), or --ignore-nodata to compute those \
                             pixels like any other",
                            what.join(", ")
                        )));
                    }
                }
            }
        };
        if let Some(v) = value
            && !masks.is_empty()
            && v.abs() >= 2f64.powi(53)
            && matches!(od, DType::I64 | DType::U64)
        {
            return Err(Error::invalid(format!(
                "nodata {} is 2^53 or more from 0, which f64 arithmetic cannot give the \
                 masked pixels of a {od} output exactly: give a value nearer 0",
                nodata_text(v)
            )));
        }
        let mut bound = BoundMap {
            program,
            streams,
            shape,
            dtype: od,
            nodata: value.map(|v| match &rule.value {
                // an integer as given, digit for digit (u64::MAX is no f64)
                Some(t) if !od.is_float() => t
                    .trim()
                    .parse::<i128>()
                    .map_or_else(|_| format!("{}", v as i128), |n| n.to_string()),
                _ => nodata_text(v),
            }),
            masked: masks.iter().map(|(r, _)| label(r)).collect(),
        };
        if let (Some(v), false) = (value, masks.is_empty()) {
            // where(any input is nodata, value, e): the same streams, one pass
            let cond = masks
                .iter()
                .map(|(r, nd)| {
                    let var = Box::new(Expr::Var {
                        name: r.name.clone(),
                        index: r.index,
                        column: r.column,
                    });
                    if nd.is_nan() {
                        Expr::Unary(UnOp::IsNan, var)
                    } else {
                        Expr::Binary(BinOp::Eq, var, Box::new(Expr::Num(*nd)))
                    }
                })
                .reduce(|a, b| Expr::Binary(BinOp::Add, Box::new(a), Box::new(b)))
                .ok_or_else(|| Error::Internal("no mask".into()))?;
            let masked = Expr::Where(Box::new(cond), Box::new(Expr::Num(v)), Box::new(e));
            let (program, streams, _, _) = Self::bind_expr(src, &masked, inputs)?;
            bound.program = program;
            bound.streams = streams;
        }
        Ok(bound)
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
        let plan = this.plan_writing(out.as_ref(), &shape, od, || {
            this.plan_map(src, inputs, dtype)
        })?;
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
            return Ok(this.report_boxes(&boxes, op, &shape, od, times));
        }
        let cuda = match &this.cuda {
            Some(dev) => Some(dev.map(&program, &dtypes, od, plan.tile_elems, plan.depth)?),
            None => None,
        };
        let times = match cuda {
            Some(k) => this.run_to_file(&plan, &streams, out.as_ref(), &shape, od, 1, k),
            None => this.run_to_file(
                &plan,
                &streams,
                out.as_ref(),
                &shape,
                od,
                1,
                this.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                    backend.map(&program, ins, &dtypes, o, od)
                }),
            ),
        }?;
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
        let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
        let od = dtype.unwrap_or(c);
        let w_bytes = (k * n * c.size()) as u64;
        if w_bytes > self.budget.limit() {
            return Err(Error::Budget(crate::budget::BudgetError::TooSmall {
                what: format!(
                    "matmul with W {} {} held in memory",
                    fmt_shape(w.shape()),
                    w.dtype()
                ),
                arithmetic: format!("W alone needs {k} x {n} x {} B", c.size()),
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
        req.scratch_per_elem = (if x.dtype() == c { 0 } else { k * c.size() }
            + if od == c { 0 } else { n * (c.size() + 8) }) as u64;
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
        let c = crate::ops::matmul::compute_dtype(x.dtype(), w.dtype());
        let od = dtype.unwrap_or(c);
        let plan =
            self.plan_writing(out.as_ref(), &[r, n], od, || self.plan_matmul(x, w, dtype))?;
        self.budget.reset_peak();
        let _w_reservation = self.budget.reserve(
            "resident W",
            plan.resident_bytes
                - decode_scratch(self.budget.limit(), &[x, w]).0
                - plan.output_bytes,
        )?;
        let resident = {
            let win = w.map_window(0, (k * n) as u64)?;
            crate::ops::matmul::Resident::new(win.bytes(), w.dtype(), c)
        };
        let inputs = [InputStream {
            file: x,
            base: 0,
            per_item: k as u64,
        }];
        let backend = &self.backend;
        let xd = x.dtype();
        let cuda = match &self.cuda {
            Some(dev) => Some(dev.matmul(&resident, xd, od, k, n, plan.tile_elems, plan.depth)?),
            None => None,
        };
        let times = match cuda {
            Some(kernel) => {
                self.run_to_file(&plan, &inputs, out.as_ref(), &[r, n], od, n as u64, kernel)
            }
            None => self.run_to_file(
                &plan,
                &inputs,
                out.as_ref(),
                &[r, n],
                od,
                n as u64,
                self.kernel(|_, ins: &[&[u8]], o: &mut [u8]| {
                    backend.matmul(ins[0], xd, &resident, k, n, o, od)
                }),
            ),
        }?;
        let op = format!("matmul {} @ {}", x.path().display(), w.path().display());
        Ok(self.report(&plan, op, x.shape(), &[r, n], od, times))
    }

    /// Plans `generate` without running it.
    ///
    /// # Errors
    /// [`Error::Budget`] if the budget is too small.
    pub fn plan_generate(&self, shape: &[usize], dtype: DType) -> Result<Plan> {
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
        let plan = self.plan_writing(out.as_ref(), shape, dtype, || {
            self.plan_generate(shape, dtype)
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
            return Ok(self.report_boxes(&boxes, op, shape, dtype, times));
        }
        let times = match &self.cuda {
            Some(dev) => {
                let k = dev.generate(&dist, dtype, seed, last, plan.tile_elems, plan.depth)?;
                self.run_to_file(&plan, &[], out.as_ref(), shape, dtype, 1, k)
            }
            None => self.run_to_file(
                &plan,
                &[],
                out.as_ref(),
                shape,
                dtype,
                1,
                self.kernel(|tile: crate::plan::Tile, _: &[&[u8]], o: &mut [u8]| {
                    backend.generate(o, dtype, tile.start, last, seed, dist)
                }),
            ),
        }?;
        Ok(self.report(&plan, op, shape, shape, dtype, times))
    }
}

/// What [`Engine::map_with`] does with the pixels where an input is nodata: those of a
/// GeoTIFF input equal to its GDAL nodata value (as its sample type holds it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapNodata {
    /// The output's nodata value (`"nan"`, `"-9999"`), given to those pixels and written
    /// to a GeoTIFF output; it must be a value of the output type exactly. `None`: NaN
    /// for a float output; for an integer output, the inputs' nodata value when they
    /// share one it holds (else the map is refused).
    pub value: Option<String>,
    /// Compute those pixels like any other, as if no input had a nodata value (the
    /// output then carries `value`, if given, as a tag only).
    pub ignore_inputs: bool,
    /// The nodata value of named inputs in place of what their files say (`None`: the
    /// input has none), for files that cannot carry one: a `.npy` with a -9999 convention,
    /// a pipeline's intermediate values.
    pub inputs: Vec<(String, Option<String>)>,
}

/// A map's expression bound to its inputs, nodata masking included.
pub(crate) struct BoundMap<'a> {
    /// The compiled expression (inside `where(input is nodata, value, ...)` when masked).
    pub program: Program,
    /// Its streams.
    pub streams: Vec<InputStream<'a>>,
    /// The shape it iterates over.
    pub shape: Vec<usize>,
    /// The output dtype.
    pub dtype: DType,
    /// The output's nodata value, as GeoTIFF tag text.
    pub nodata: Option<String>,
    /// The masked inputs (`s[3]`), for the report.
    pub masked: Vec<String>,
}

/// A nodata value the user gave for an output of `dtype`: its value, if the type holds
/// it exactly.
#[allow(clippy::float_cmp)] // exactly the value, or refused
fn output_nodata(text: &str, dtype: DType) -> Result<f64> {
    let text = text.trim();
    let Ok(v) = text.trim().parse::<f64>() else {
        return Err(Error::invalid(format!(
            "nodata '{}' is not a number: give one such as -9999, 0 or nan",
            crate::tensor::npy::shown(text)
        )));
    };
    match crate::tensor::geotiff::nodata_as(dtype, text) {
        Some(held) if held == v || (held.is_nan() && v.is_nan()) => Ok(held),
        Some(held) => Err(Error::invalid(format!(
            "nodata {text} is not exactly representable in {dtype} (it would be {}): give a \
             value the output type holds",
            crate::tensor::geotiff::nodata_text(held)
        ))),
        None => {
            let range = if dtype == DType::Bool {
                "0 or 1".to_string()
            } else {
                let bits = 8 * dtype.size() as u32;
                if dtype.is_unsigned() {
                    format!("an integer from 0 to {}", 2u128.pow(bits) - 1)
                } else {
                    format!(
                        "an integer from -{} to {}",
                        2u128.pow(bits - 1),
                        2u128.pow(bits - 1) - 1
                    )
                }
            };
            Err(Error::invalid(format!(
                "nodata {text} does not fit the {dtype} output: give {range}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_nodata_takes_exactly_the_values_the_type_holds() {
        let ok = |t: &str, d: DType| output_nodata(t, d).map_err(|e| e.to_string());
        for (text, dtype, want) in [
            ("0", DType::U8, 0.0),
            ("255", DType::U8, 255.0),
            ("-128", DType::I8, -128.0),
            ("65535", DType::U16, 65535.0),
            ("-9999", DType::F32, -9999.0),
            ("-10000", DType::F16, -10000.0),
            ("1", DType::Bool, 1.0),
            (" -9999\n", DType::I16, -9999.0),
            ("-3.4028234663852886e38", DType::F32, f64::from(f32::MIN)),
            ("inf", DType::F16, f64::INFINITY),
            // as the f64 the value compares as (u64::MAX is 2^64 there)
            ("18446744073709551615", DType::U64, 2f64.powi(64)),
        ] {
            assert_eq!(ok(text, dtype), Ok(want), "{text:?} {dtype}");
        }
        assert!(ok("nan", DType::F32).is_ok_and(f64::is_nan));
        assert!(ok("NaN", DType::BF16).is_ok_and(f64::is_nan));
        for (text, dtype, says) in [
            (
                "256",
                DType::U8,
                "does not fit the u8 output: give an integer from 0 to 255",
            ),
            ("-1", DType::U16, "from 0 to 65535"),
            ("0.5", DType::I32, "from -2147483648 to 2147483647"),
            ("nan", DType::I16, "does not fit the i16 output"),
            ("2", DType::Bool, "give 0 or 1"),
            (
                "-9999",
                DType::F16,
                "not exactly representable in f16 (it would be -10000)",
            ),
            ("0.1", DType::F32, "(it would be 0.10000000149011612)"),
            ("1e40", DType::F32, "(it would be inf)"),
            ("abc", DType::F32, "'abc' is not a number"),
            ("", DType::F32, "is not a number"),
            (
                "-18446744073709551615",
                DType::I64,
                "does not fit the i64 output",
            ),
        ] {
            let e = ok(text, dtype).expect_err(text);
            assert!(
                e.contains(says) && !e.contains('\n'),
                "{text:?} {dtype}: {e}"
            );
        }
    }

    #[test]
    fn input_nodata_is_the_value_the_file_type_holds() {
        use crate::tensor::geotiff::nodata_as;
        assert_eq!(nodata_as(DType::U16, "0"), Some(0.0));
        assert_eq!(nodata_as(DType::I16, "-32768"), Some(-32768.0));
        // a float file stores the nodata value rounded to its type
        assert_eq!(nodata_as(DType::F32, "0.1"), Some(f64::from(0.1f32)));
        assert!(nodata_as(DType::F32, "nan").is_some_and(f64::is_nan));
        // values an integer file cannot hold mark no pixel
        for (d, t) in [
            (DType::U16, "-9999"),
            (DType::U8, "0.5"),
            (DType::I8, "nan"),
        ] {
            assert_eq!(nodata_as(d, t), None, "{d} {t}");
        }
        assert_eq!(nodata_as(DType::F32, "nodata"), None);
        // integers from their digits: u64::MAX is held (as the f64 it compares as), 2^64
        // is not; bool holds 0 and 1
        assert_eq!(
            nodata_as(DType::U64, "18446744073709551615"),
            Some(2f64.powi(64))
        );
        assert_eq!(nodata_as(DType::U64, "18446744073709551616"), None);
        assert_eq!(
            nodata_as(DType::I64, "-9223372036854775808"),
            Some(-(2f64.powi(63)))
        );
        assert_eq!(nodata_as(DType::I64, "9223372036854775808"), None);
        assert_eq!(nodata_as(DType::I16, "-1e4"), Some(-10000.0));
        assert_eq!(nodata_as(DType::Bool, "1"), Some(1.0));
        assert_eq!(nodata_as(DType::Bool, "2"), None);
    }
}
