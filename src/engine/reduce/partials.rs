//! Reductions split by rows: each share's partials (a cluster's tasks), and their merge
//! into exactly the result one run over the whole input gives.

use super::super::{Array, Engine, Ran, RunReport};
use super::{refuse_complex_nodata, refuse_no_position};
use crate::backend::Family;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::ops::reduce::{Geometry, Partial, PartialHeader, Reduce, ReduceOver, row_step};
use crate::scheduler::{self, InputStream};

impl Engine {
    /// Reduces the rows `rows` of `input` (the whole tensor) into a [`Partial`]: what
    /// one task of a reduction split over a cluster computes. Merged in row order with
    /// the partials of the other rows ([`merge_partials`]), it gives exactly the bytes
    /// of [`Engine::reduce`] over the whole input, whatever the split. A split must fall
    /// on a multiple of [`row_step`] rows (summation blocks are never cut). Partials of
    /// a reduction over the leading axis or all elements hold one partial per summation
    /// block ([`Geometry::vcols`] accumulators, about 1/128 of the input's bytes for a
    /// 512-column f32 matrix), counted in the budget; the others hold their rows' results.
    /// Computed on the CPU.
    ///
    /// # Errors
    /// [`Error::Invalid`] for rows out of range or not on the step, a compressed input,
    /// or as [`plan_reduce`](Self::plan_reduce); [`Error::Budget`]; I/O errors.
    pub fn reduce_partial(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
        rows: std::ops::Range<u64>,
    ) -> Result<(Partial, RunReport)> {
        let (mut parts, report) = self.reduce_partials(input, &[op], over, rows)?;
        let part = parts
            .pop()
            .ok_or_else(|| Error::Internal("no partial computed".into()))?;
        Ok((part, report))
    }

    /// [`Engine::reduce_partial`] of several reductions of the same rows in one pass over
    /// them (a cluster `standardize`'s mean and std): one partial per reduction, in the
    /// order of `ops`.
    ///
    /// # Errors
    /// As [`Engine::reduce_partial`]; [`Error::Invalid`] for no reduction.
    pub fn reduce_partials(
        &self,
        input: &TensorFile,
        ops: &[Reduce],
        over: impl Into<ReduceOver>,
        rows: std::ops::Range<u64>,
    ) -> Result<(Vec<Partial>, RunReport)> {
        let over = over.into();
        for &op in ops {
            refuse_complex_nodata(input, op)?;
        }
        let shape = input.shape();
        let n = shape.first().map_or(1, |&d| d as u64);
        let step = row_step(shape, over)?;
        if !rows.start.is_multiple_of(step)
            || (!rows.end.is_multiple_of(step) && rows.end != n)
            || rows.end > n
        {
            return Err(Error::invalid(format!(
                "rows {}..{} of {}: a share of this reduction must start and end on a \
                 multiple of {step} rows (or at the last row, {n})",
                rows.start,
                rows.end,
                input.path().display()
            )));
        }
        if ops.is_empty() {
            return Err(Error::invalid("no reduction to compute"));
        }
        for &op in ops {
            op.check_over(over)?;
        }
        let (axis, axes) = PartialHeader::axis_fields(over);
        let header = |op: Reduce| -> Result<PartialHeader> {
            Ok(PartialHeader {
                op: op.name().into(),
                ddof: op.ddof(),
                dtype: input.dtype().name().into(),
                shape: shape.to_vec(),
                axis,
                axes: axes.clone(),
                rows: (rows.start, rows.end),
                blocks: Geometry::new(shape, over)?.outer == 1,
                nodata: input
                    .nodata()
                    .filter(|_| op.skips_nan())
                    .map(|(text, _)| text.to_string()),
            })
        };
        let sub = input.rows(rows.clone())?;
        if !header(ops[0])?.blocks {
            // each share's rows have their own outputs: the results, reduction by reduction
            let mut parts = Vec::with_capacity(ops.len());
            let mut last = None;
            for &op in ops {
                let (array, report) = self.reduce(&sub, op, over)?;
                parts.push(Partial {
                    header: header(op)?,
                    payload: array.bytes().to_vec(),
                });
                last = Some(report);
            }
            let report = last.ok_or_else(|| Error::Internal("no reduction ran".into()))?;
            return Ok((parts, report));
        }
        let g = Geometry::new(sub.shape(), over)?;
        let vc = g.vcols() as u64;
        let blocks = g.per_outer_elems().div_ceil(vc) / g.block_rows() + 1;
        // per reduction: its result and accumulators, and its partials three times (the
        // partials, their copy as bytes, the shipped bytes)
        let mut extra = 0;
        let mut scratch = 0;
        for (k, &op) in ops.iter().enumerate() {
            let acc = op.acc_bytes(input.dtype(), input.missing().is_some()) as u64;
            extra += 3 * blocks * vc * acc;
            if k > 0 {
                extra += self.plan_reduce_rows(&sub, op, over)?.resident_bytes
                    - sub.read_scratch_bytes();
                scratch += g.scratch_per_elem(acc as usize);
            }
        }
        let plan = self.plan_reduce_holding(&sub, ops[0], over, extra, scratch)?;
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "reduction results, accumulators and block partials",
            plan.resident_bytes - sub.read_scratch_bytes(),
        )?;
        let moments = |op: &Reduce| op.is_moments();
        let (shift, nan_free) = if ops.iter().any(moments) {
            moment_shifts(input, g)?
        } else {
            (Vec::new(), Vec::new())
        };
        let mut reducers = Vec::with_capacity(ops.len());
        for &op in ops {
            let mut r = self
                .backend
                .reducer(op, input.dtype(), g, input.missing())?;
            let sh = if op.skips_nan() { &nan_free } else { &shift };
            r.collect_blocks(moments(&op).then_some(sh.as_slice()));
            reducers.push(r);
        }
        let times = if reducers.len() == 1
            && let Some(r) = reducers.pop()
        {
            let (r, times) = self.stream_reducer(&sub, &plan, ops[0], g, r, None, false)?;
            reducers.push(r);
            times
        } else {
            let inputs = [InputStream::whole(&sub)];
            let stream = self.stream(&plan, &inputs, None);
            scheduler::run(
                &stream,
                self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], _: &mut [u8]| {
                    for r in &mut reducers {
                        r.feed_bytes(tile.start, ins[0]);
                    }
                    Ok(())
                }),
            )?
        };
        let mut parts = Vec::with_capacity(ops.len());
        for (&op, r) in ops.iter().zip(&mut reducers) {
            parts.push(Partial {
                header: header(op)?,
                payload: r.take_blocks(),
            });
        }
        let out_dtype = ops[0].output_dtype(input.dtype());
        let op = Ran::cpu(Family::Reduce, plan.what.clone());
        let report = self.report(&plan, op, sub.shape(), &[], out_dtype, times);
        Ok((parts, report))
    }
}

/// Merges the partials of a reduction split by rows (from [`Engine::reduce_partial`],
/// in any order) into its result: exactly the bytes one run over the whole input gives.
///
/// # Errors
/// [`Error::Invalid`] if the partials are of different reductions, or their rows do not
/// cover the input once each, or a payload has the wrong size.
pub fn merge_partials(parts: &[Partial]) -> Result<Array> {
    let Some(first) = parts.first() else {
        return Err(Error::invalid("no partials to merge"));
    };
    let h = &first.header;
    if h.shape.is_empty() {
        return Err(Error::invalid(
            "a partial of a 0-d input: a 0-d tensor has no rows to split",
        ));
    }
    let mut order: Vec<&Partial> = parts.iter().collect();
    order.sort_by_key(|p| p.header.rows.0);
    let n = h.shape.first().map_or(1, |&d| d as u64);
    let mut next = 0;
    for p in &order {
        let q = &p.header;
        if (
            &q.op, q.ddof, &q.dtype, &q.shape, q.axis, &q.axes, q.blocks, &q.nodata,
        ) != (
            &h.op, h.ddof, &h.dtype, &h.shape, h.axis, &h.axes, h.blocks, &h.nodata,
        ) {
            return Err(Error::invalid(format!(
                "partials of different reductions: {} of {} {} and {} of {} {}",
                h.op,
                fmt_shape(&h.shape),
                h.dtype,
                q.op,
                fmt_shape(&q.shape),
                q.dtype
            )));
        }
        if q.rows.0 < next {
            return Err(Error::invalid(format!(
                "rows {}..{} are in two partials: each row must be in exactly one",
                q.rows.0,
                next.min(q.rows.1)
            )));
        }
        if q.rows.0 > next {
            return Err(Error::invalid(format!(
                "rows {next}..{} are in no partial: each row must be in exactly one",
                q.rows.0
            )));
        }
        next = q.rows.1;
    }
    if next != n {
        return Err(Error::invalid(format!(
            "rows {next}..{n} are in no partial: each row must be in exactly one"
        )));
    }
    let (op, over, dtype) = (h.reduce()?, h.over()?, h.dtype()?);
    let out_dtype = op.output_dtype(dtype);
    let out_shape = over.out_shape(&h.shape);
    let g = Geometry::new(&h.shape, over)?;
    let wrong = |p: &Partial, want: u64| {
        Error::invalid(format!(
            "the partial of rows {}..{} holds {} bytes, not {want}",
            p.header.rows.0,
            p.header.rows.1,
            p.payload.len()
        ))
    };
    if !h.blocks {
        let per_row = (g.outer / n.max(1)) * g.out_per_outer() * out_dtype.size() as u64;
        let mut data = Vec::with_capacity((n * per_row) as usize);
        for p in order {
            let want = (p.header.rows.1 - p.header.rows.0) * per_row;
            if p.payload.len() as u64 != want {
                return Err(wrong(p, want));
            }
            data.extend_from_slice(&p.payload);
        }
        return Array::from_bytes(out_dtype, out_shape, data);
    }
    let nodata = h
        .nodata
        .as_deref()
        .and_then(|t| crate::format::tiff::nodata_as(dtype, t));
    let mut reducer = crate::backend::cpu::reduce::masked_reducer(op, dtype, g, 1, nodata);
    let (vc, acc) = (
        g.vcols() as u64,
        op.acc_bytes(dtype, nodata.is_some()) as u64,
    );
    let per_row = h.shape[1..].iter().map(|&d| d as u64).product::<u64>();
    for p in order {
        let (a, b) = p.header.rows;
        // blocks closed in the share, then its open block's partial (zeros unless last)
        let vrows = ((b - a) * per_row).div_ceil(vc);
        let want = (vrows / g.block_rows() + 1) * vc * acc;
        if p.payload.len() as u64 != want {
            return Err(wrong(p, want));
        }
        let keep = if b == n { want } else { want - vc * acc };
        reducer.fold_blocks(&p.payload[..keep as usize]);
    }
    reducer.finish_folded();
    let array = Array::from_bytes(out_dtype, out_shape, reducer.into_bytes())?;
    refuse_no_position(op, &array)?;
    Ok(array)
}

/// The shifts a variance's block partials are taken about: the first row's values (the
/// first element's, where all elements are reduced), and the same with NaN and nodata
/// as 0 for the reductions that leave them out (as their kernels do); zeros for a
/// complex input, whose kernel takes none.
///
/// # Errors
/// If the first row cannot be read.
fn moment_shifts(input: &TensorFile, g: Geometry) -> Result<(Vec<f64>, Vec<f64>)> {
    let vc = g.vcols() as u64;
    if input.dtype().is_complex() {
        // a complex variance's kernel takes no shift (Welford's updates, Chan's merges)
        return Ok((vec![0.0; vc as usize], vec![0.0; vc as usize]));
    }
    let first = if g.inner > 1 { vc } else { 1 };
    let w = input.map_window(0, first)?;
    let v = Array::from_bytes(input.dtype(), vec![first as usize], w.bytes().to_vec())?.to_f64();
    let shift: Vec<f64> = if g.inner > 1 {
        // folding, a column's shift is its output's first column's
        (0..vc).map(|c| v[g.column_output(c).1 as usize]).collect()
    } else {
        vec![v[0]; vc as usize]
    };
    let missing = input.missing();
    let nan_free = shift
        .iter()
        .map(|&v| {
            if v.is_nan() || Some(v) == missing {
                0.0
            } else {
                v
            }
        })
        .collect();
    Ok((shift, nan_free))
}
