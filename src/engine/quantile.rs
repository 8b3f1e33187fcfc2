//! Quantiles, percentiles and medians of a streamed input: passes of digit counts (see
//! [`crate::ops::quantile`]), each a streaming pass over the input through the same
//! pipeline as a reduction, the counts held in the budget.

use std::path::Path;

use rayon::prelude::*;

use super::{Array, Engine, Ran, RunReport, check_not_input, hold};
use crate::backend::Family;
use crate::budget::fmt_bytes;
use crate::dtype::{Complex, DType};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::ops::quantile::{
    KeyWord, NAN_WORDS, Quantiles, Ranked, Selection, Step, counts_bytes, fold_nan, key_bits,
};
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, TileReducer};
use crate::plan::Plan;

/// Digit widths tried (16 bits: one pass for 16-bit data, two for 32-bit, four for 64-bit).
const DIGITS: [u32; 4] = [16, 12, 8, 4];

/// Counts small enough to be copied per thread, so that a tile is counted in parallel.
const PAR_COUNTS: u64 = 4 << 20;

/// How the selection is laid out: digit width and the memory it holds.
#[derive(Clone, Copy, Debug)]
struct Digits {
    width: u32,
    /// Counters of one pass: at most the outputs times the ranks each needs.
    counters: u64,
    /// Copies of the counters (one per thread counting, plus the merged one).
    copies: u64,
}

impl Engine {
    /// Plans quantiles (percentiles, a median) without running them.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad axis or an empty tensor; [`Error::Budget`] if the
    /// budget cannot hold the counts of the narrowest digits and a tile.
    pub fn plan_quantile(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
    ) -> Result<Plan> {
        Ok(self.quantile_plan(input, over, spec, None)?.0)
    }

    /// The plan and digits of a selection: the digit width given (a cluster's passes
    /// must all count the same digits) or the one with the least work that fits.
    fn quantile_plan(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
        width: Option<u32>,
    ) -> Result<(Plan, Digits)> {
        let shape = input.shape();
        let dtype = input.dtype();
        refuse_complex(input, spec)?;
        let g = Geometry::new(shape, over)?;
        if input.info().is_empty() {
            return Err(Error::invalid(format!(
                "{}: cannot take {} of an empty tensor (shape {})",
                input.path().display(),
                spec.name,
                fmt_shape(shape)
            )));
        }
        let outputs = g.outer * g.out_per_outer();
        let ranks = (2 * spec.q.len()) as u64;
        let out_bytes = outputs * spec.q.len() as u64 * spec.output_dtype(dtype).size() as u64;
        // per output: its NaN words and pick, group bounds, the ranks' targets; the fold
        // table
        let fixed = outputs * (8 * NAN_WORDS as u64 + 16 + 4 + 32 * ranks)
            + if g.folds() { g.inner * 4 } else { 0 };
        let threads = self.backend.threads().max(1) as u64;
        let kbits = key_bits(dtype);
        let pick = |width: u32| {
            let w = width.min(kbits);
            let counters = outputs * ranks.max(1) * (1u64 << w);
            let copies = if counters * 8 <= PAR_COUNTS && threads > 1 {
                threads + 1
            } else {
                1
            };
            Digits {
                width: w,
                counters,
                copies,
            }
        };
        let cost = |d: &Digits| d.counters * 8 * d.copies + d.counters * 8;
        // of the widths whose counts fit in half the budget, the one with the least work:
        // each pass reads every element and clears, merges and scans every counter (about
        // four touches each); counted by one thread where the threads' copies do not fit
        let half = self.budget.limit() / 2;
        let elems = input.info().len();
        let work =
            |d: &Digits| u64::from(kbits.div_ceil(d.width)) * (elems + 4 * d.counters * d.copies);
        let fits = |d: &Digits| fixed + out_bytes + cost(d) <= half;
        let single = |d: Digits| Digits { copies: 1, ..d };
        let least = |one: bool| {
            DIGITS
                .iter()
                .map(|&w| if one { single(pick(w)) } else { pick(w) })
                .filter(fits)
                .min_by_key(work)
        };
        let digits = match width {
            Some(w) if fits(&pick(w)) => pick(w),
            Some(w) => single(pick(w)),
            None => least(false)
                .or_else(|| least(true))
                .unwrap_or_else(|| single(pick(DIGITS[DIGITS.len() - 1]))),
        };
        let passes = kbits.div_ceil(digits.width);
        let mut req = self.request(
            format!(
                "{} over {} of {} {dtype} ({passes} pass{} of {}-bit digits)",
                spec.name,
                over.describe(),
                fmt_shape(shape),
                if passes == 1 { "" } else { "es" },
                digits.width
            ),
            shape,
            &[input],
        );
        req.in_bytes_per_elem = dtype.size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            fixed + out_bytes + cost(&digits),
            format!(
                "digit counts ({} counters × {} and the ranks' prefixes) and result ({})",
                digits.counters,
                digits.copies + 1,
                fmt_bytes(out_bytes)
            ),
        );
        Ok((Plan::new(&req)?, digits))
    }

    /// Quantiles of `input` over `over` as `spec` asks, in memory: numpy's values
    /// exactly, the same bytes at any budget and thread count. Runs on the CPU.
    ///
    /// # Errors
    /// As [`plan_quantile`](Self::plan_quantile), plus I/O errors while streaming.
    pub fn quantile(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
    ) -> Result<(Array, RunReport)> {
        let (plan, digits) = self.quantile_plan(input, over, spec, None)?;
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "digit counts and result",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let dtype = input.dtype();
        let (data, times) = crate::dispatch_dtype!(dtype, T => {
            self.select::<T>(input, &plan, over, spec, digits)?
        }, complex => match dtype {
            DType::C64 => self.select::<Complex<f32>>(input, &plan, over, spec, digits)?,
            _ => self.select::<Complex<f64>>(input, &plan, over, spec, digits)?,
        });
        let out_dtype = spec.output_dtype(dtype);
        let out_shape = spec.out_shape(&over.out_shape(input.shape()));
        let array = Array::from_bytes(out_dtype, out_shape.clone(), data)?;
        let report = self.report(
            &plan,
            Ran::on(Family::Reduce, plan.what.clone(), false),
            input.shape(),
            &out_shape,
            out_dtype,
            times,
        );
        Ok((array, report))
    }

    /// [`Engine::quantile`] written to `out` (`.npy`, raw, GeoTIFF or Zarr), cast to
    /// `dtype` if given; `keepdims` keeps the reduced axes as length 1.
    ///
    /// # Errors
    /// As [`Engine::quantile`], plus [`Error::Invalid`] if `out` is the input, and I/O
    /// errors writing `out`.
    pub fn quantile_to_file(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        keepdims: bool,
    ) -> Result<RunReport> {
        check_not_input(out.as_ref(), &[input])?;
        if self.out_region.is_some() {
            return Err(Error::invalid(
                "quantiles are not written into rows of another file: run them on one machine",
            ));
        }
        let (array, report) = self.quantile(input, over, spec)?;
        let mut array = match dtype {
            Some(d) => array.cast(d),
            None => array,
        };
        if keepdims {
            array.shape = spec.out_shape(&over.out_shape_keeping(input.shape(), true));
        }
        self.write_reduced(&array, out.as_ref(), report)
    }

    #[doc(hidden)]
    /// The selection [`Engine::quantile`] would run, before its first pass, for a
    /// cluster to run pass by pass: each pass counted over shares of the rows by
    /// [`Engine::quantile_counts`] (on any machine, under any budget that holds the
    /// counts), the shares' counts added by [`Selection::add`], the result from
    /// [`Selection::finish_bytes`] once [`Selection::is_done`]. The digit width is the one
    /// this engine's budget picks for the whole input.
    ///
    /// # Errors
    /// As [`plan_quantile`](Self::plan_quantile).
    pub fn quantile_selection(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
    ) -> Result<Selection> {
        let (_, digits) = self.quantile_plan(input, over, spec, None)?;
        Selection::new(
            spec,
            input.dtype(),
            input.shape(),
            over,
            input.missing(),
            digits.width,
        )
    }

    #[doc(hidden)]
    /// Counts the next pass of `sel` over the rows `rows` of `input` (the whole input the
    /// selection is of): bytes for [`Selection::add`], and the run's report. The counts
    /// of shares covering the rows add up to the counts of one pass over the whole input,
    /// so the result is the same bytes as [`Engine::quantile`]'s whatever the shares.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `input` is not the one `sel` is of, if the selection keeps
    /// axis 0 (each share has outputs of its own: take each share's quantiles), if it is
    /// complete, or for rows outside the input; [`Error::Budget`] if the budget cannot
    /// hold the pass's counts; I/O errors while streaming.
    pub fn quantile_counts(
        &self,
        input: &TensorFile,
        sel: &Selection,
        rows: std::ops::Range<u64>,
    ) -> Result<(Vec<u8>, RunReport)> {
        let shape = input.shape();
        if shape != sel.shape() || input.dtype() != sel.dtype() {
            return Err(Error::invalid(format!(
                "{}: is {} {}, the selection is of {} {}: count the input it was made for",
                input.path().display(),
                fmt_shape(shape),
                input.dtype(),
                fmt_shape(sel.shape()),
                sel.dtype()
            )));
        }
        let over = sel.over();
        if Geometry::new(shape, over)?.outer != 1 {
            return Err(Error::invalid(format!(
                "{} over {} keeps axis 0: each share of the rows has outputs of its own, so \
                 take each share's quantiles whole",
                sel.spec().name,
                over.describe()
            )));
        }
        if sel.is_done() {
            return Err(Error::invalid(
                "this selection is complete: no pass is left to count",
            ));
        }
        let sub = input.rows(rows)?;
        let spec = sel.spec();
        let (plan, digits) = self.quantile_plan(&sub, over, spec, Some(sel.width()))?;
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "digit counts",
            plan.resident_bytes - sub.read_scratch_bytes(),
        )?;
        let g = Geometry::new(sub.shape(), over)?;
        let step = sel.step();
        let par = digits.copies > 1;
        let ((counts, nan), times) = crate::dispatch_dtype!(sub.dtype(), T => {
            self.count_pass::<T>(&sub, &plan, g, step, par, sel.missing())?
        }, complex => match sub.dtype() {
            DType::C64 => self.count_pass::<Complex<f32>>(&sub, &plan, g, step, par, sel.missing())?,
            _ => self.count_pass::<Complex<f64>>(&sub, &plan, g, step, par, sel.missing())?,
        });
        let bytes = counts_bytes(&counts, &nan);
        let report = self.report(
            &plan,
            Ran::on(Family::Reduce, plan.what.clone(), false),
            sub.shape(),
            &[counts.len() + nan.len()],
            DType::U64,
            times,
        );
        Ok((bytes, report))
    }

    /// The passes: the digits of every rank's key, most significant first, then each
    /// output's quantiles from the elements of those ranks.
    fn select<T: Ranked>(
        &self,
        input: &TensorFile,
        plan: &Plan,
        over: ReduceOver,
        spec: &Quantiles,
        digits: Digits,
    ) -> Result<(Vec<u8>, crate::scheduler::StageTimes)> {
        let g = Geometry::new(input.shape(), over)?;
        let mut times = crate::scheduler::StageTimes::default();
        let mut sel = Selection::new(
            spec,
            T::RANKED,
            input.shape(),
            over,
            input.missing(),
            digits.width,
        )?;
        while !sel.is_done() {
            let ((counts, nan), t) =
                self.count_pass::<T>(input, plan, g, sel.step(), digits.copies > 1, sel.missing())?;
            times.add(&t);
            sel.take(&counts, &nan)?;
        }
        Ok((sel.finish_bytes()?, times))
    }

    /// One pass of `step`'s digit counts over `input`: the counters and, in the first
    /// pass, each output's NaN and nodata (`missing`) count.
    #[allow(clippy::type_complexity)]
    fn count_pass<T: Ranked>(
        &self,
        input: &TensorFile,
        plan: &Plan,
        g: Geometry,
        step: Step,
        parallel: bool,
        missing: Option<f64>,
    ) -> Result<((Vec<u64>, Vec<u64>), crate::scheduler::StageTimes)> {
        let outputs = step.groups.starts.len() - 1;
        let cols = g
            .folds()
            .then(|| (0..g.inner).map(|c| g.column_output(c).0 as u32).collect());
        let pass = Pass::<T> {
            g,
            cols,
            nan: if step.first {
                vec![0; NAN_WORDS * outputs]
            } else {
                Vec::new()
            },
            step,
            counts: Vec::new(),
            parallel,
            nodata: missing.map(T::of_f64),
            parts: Vec::new(),
            _t: std::marker::PhantomData,
        };
        let (r, t) =
            self.stream_reducer(input, plan, Reduce::Count, g, Box::new(pass), None, false)?;
        Ok((Pass::<T>::unpack(&r.into_bytes()), t))
    }
}

/// One pass of digit counts, fed tiles by the pipeline like a reduction.
struct Pass<T> {
    g: Geometry,
    /// With several separated axes: the output of each column.
    cols: Option<Vec<u32>>,
    step: Step,
    counts: Vec<u64>,
    nan: Vec<u64>,
    parallel: bool,
    /// The input's nodata value, counted as NaN is (by the `nan` forms alone).
    nodata: Option<T>,
    /// Counting in parallel: each piece's counters and NaN counts, for the whole pass.
    parts: Vec<(Vec<u64>, Vec<u64>)>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Ranked> Pass<T> {
    /// Counts the elements `[start, start + data.len())` into `counts` (and `nan`).
    fn count(&self, start: u64, data: &[T], counts: &mut [u64], nan: &mut [u64]) {
        let g = &self.g;
        let per = g.per_outer_elems();
        let inner = g.inner;
        let opo = g.out_per_outer();
        let (mut oi, mut p) = (start / per, start % per);
        let mut col = p % inner;
        let (shift, width) = (self.step.shift, self.step.width);
        let (first, groups) = (self.step.first, &self.step.groups);
        let mask = (1u64 << width) - 1;
        let high = shift + width;
        for &x in data {
            let o = (oi * opo
                + match &self.cols {
                    Some(c) => u64::from(c[col as usize]),
                    None => col,
                }) as usize;
            if x.nan() || self.nodata.is_some_and(|m| x.is(m)) {
                if first {
                    let w = &mut nan[NAN_WORDS * o..NAN_WORDS * (o + 1)];
                    if T::PICKS {
                        let b = x.bits();
                        fold_nan(T::RANKED, w, &[1, b[0], b[1]]);
                    } else {
                        w[0] += 1;
                    }
                }
            } else {
                let (digit, top) = x.key_of().split(shift, mask, high);
                let (a, b) = (groups.starts[o] as usize, groups.starts[o + 1] as usize);
                for gi in a..b {
                    if first || groups.prefix[gi] == top {
                        counts[(gi << width) | digit] += 1;
                    }
                }
            }
            col += 1;
            if col == inner {
                col = 0;
            }
            p += 1;
            if p == per {
                p = 0;
                oi += 1;
                col = 0;
            }
        }
    }

    /// The counts and NaN counts back from [`TileReducer::into_bytes`].
    fn unpack(bytes: &[u8]) -> (Vec<u64>, Vec<u64>) {
        let words: Vec<u64> = bytemuck::pod_collect_to_vec(bytes);
        let nc = words.first().map_or(0, |&w| w as usize);
        let counts = words.get(1..1 + nc).unwrap_or_default().to_vec();
        let nan = words.get(1 + nc..).unwrap_or_default().to_vec();
        (counts, nan)
    }
}

impl<T: Ranked> TileReducer for Pass<T> {
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]) {
        let data = crate::dtype::typed::<T>(bytes);
        let size = self.step.counters();
        if self.counts.is_empty() {
            self.counts = vec![0; size];
        }
        let outputs = self.step.groups.starts.len() - 1;
        if self.parallel && data.len() > 1 << 16 {
            // each piece counts into its own counters, kept for the whole pass and merged
            // once in `into_bytes`
            let mut parts = std::mem::take(&mut self.parts);
            if parts.is_empty() {
                let nan = if self.step.first {
                    NAN_WORDS * outputs
                } else {
                    0
                };
                parts = (0..rayon::current_num_threads().max(1))
                    .map(|_| (vec![0u64; size], vec![0u64; nan]))
                    .collect();
            }
            let step = data.len().div_ceil(parts.len());
            let me = &*self;
            data.par_chunks(step)
                .zip(parts.par_iter_mut())
                .enumerate()
                .for_each(|(i, (d, (c, n)))| me.count(start + (i * step) as u64, d, c, n));
            self.parts = parts;
        } else {
            let mut counts = std::mem::take(&mut self.counts);
            let mut nan = std::mem::take(&mut self.nan);
            self.count(start, &data, &mut counts, &mut nan);
            self.counts = counts;
            self.nan = nan;
        }
    }

    fn into_bytes(self: Box<Self>) -> Vec<u8> {
        let size = self.step.counters();
        let mut counts = if self.counts.is_empty() {
            vec![0; size]
        } else {
            self.counts
        };
        let mut nan = self.nan;
        for (c, n) in self.parts {
            for (a, b) in counts.iter_mut().zip(c) {
                *a += b;
            }
            fold_nan(T::RANKED, &mut nan, &n);
        }
        let mut words = vec![counts.len() as u64];
        words.extend_from_slice(&counts);
        words.extend_from_slice(&nan);
        bytemuck::cast_slice(&words).to_vec()
    }

    fn state_len(&self) -> u64 {
        0
    }
    fn state_parts(&self) -> Vec<&[u8]> {
        Vec::new()
    }
    fn state_parts_mut(&mut self) -> Vec<&mut [u8]> {
        Vec::new()
    }
    fn finish_outers(&mut self, _: u64, _: &[u8]) {}
    fn collect_blocks(&mut self, _: Option<&[f64]>) {}
    fn take_blocks(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn fold_blocks(&mut self, _: &[u8]) {}
    fn finish_folded(&mut self) {}
    // a pass over the rows in plan order only: never fed column by column
    fn takes_columns(&self) -> bool {
        false
    }
    fn feed_columns(&mut self, _: usize, _: u64, _: &[&[u8]]) {}
    fn finish_columns(&mut self) {}
}

/// Refuses what numpy does not define on complex inputs (quantiles and percentiles: the
/// median is) and complex inputs whose nodata value the `nan` forms would leave out.
///
/// # Errors
/// [`Error::Invalid`] naming the reduction.
fn refuse_complex(input: &TensorFile, spec: &Quantiles) -> Result<()> {
    let dtype = input.dtype();
    if !dtype.is_complex() {
        return Ok(());
    }
    if !spec.median {
        return Err(Error::invalid(format!(
            "{} of a {} array is not defined: numpy's quantile and percentile take real \
             numbers only (median and nanmedian take complex ones; or reduce the real part, \
             the imaginary part or abs with map first)",
            spec.name,
            dtype.numpy_name()
        )));
    }
    if spec.skip_nan && input.missing().is_some_and(|m| !m.is_nan()) {
        return Err(Error::invalid(format!(
            "{} of a {} input with a nodata value is not supported: give no nodata value \
             (NaN is left out: an element whose either part is NaN)",
            spec.name,
            dtype.numpy_name()
        )));
    }
    Ok(())
}
