//! Histograms ([`crate::ops::histogram`]) in a streaming pass: the counts of every output
//! (one per position of the kept axes) held in the budget, each tile's elements binned
//! as numpy bins them; an automatic range first takes each output's extremes with the
//! reductions (one pass for all of them where the leading axis is reduced,
//! [`Engine::reduce_several`]). Counts are integers, so the result is the same at any budget, thread
//! count or tiling.

use rayon::prelude::*;

use super::{Array, Engine, Ran, RunReport, hold};
use crate::backend::Family;
use crate::budget::fmt_bytes;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::ops::histogram::{Bins, Extreme, Uniform, edge_bin};
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, TileReducer};
use crate::plan::Plan;

/// Counters below which each thread counts into its own copy (merged at the end).
const PAR_COUNTS: u64 = 8 << 20;

/// How each output's elements are binned.
#[derive(Clone, Debug)]
enum Rule {
    /// Equal bins: one set for every output, or one per output (a range from each
    /// output's own extremes).
    Uniform(Vec<Uniform>),
    /// Explicit edges, for every output.
    Edges(Vec<f64>),
}

impl Engine {
    /// A histogram of `input` over `over` (per position of the kept axes: per band of a
    /// scene over `(1, 2)`; every element over all axes): the counts (i64, the kept
    /// axes' shape plus the bins) and the edges (`bins + 1` of them; per output, with the
    /// kept axes' shape first, for a range taken from each output's data), numpy's
    /// `np.histogram` of each output's elements exactly. NaN is not counted, nor the
    /// input's nodata pixels. Runs on the CPU.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bins numpy refuses, a bad axis, an empty tensor, or an
    /// automatic range over NaN or infinities (give one); [`Error::Budget`] if the
    /// counts and a tile do not fit; I/O errors while streaming.
    pub fn histogram(
        &self,
        input: &TensorFile,
        over: impl Into<ReduceOver>,
        bins: &Bins,
    ) -> Result<(Array, Array, RunReport)> {
        let over = over.into();
        bins.check()?;
        let shape = input.shape();
        let dtype = input.dtype();
        let g = Geometry::new(shape, over)?;
        if input.info().is_empty() {
            return Err(Error::invalid(format!(
                "{}: cannot take a histogram of an empty tensor (shape {})",
                input.path().display(),
                fmt_shape(shape)
            )));
        }
        let outputs = (g.outer * g.out_per_outer()) as usize;
        let n = bins.len();
        let plan = self.plan_histogram(input, over, n)?;
        let kept = over.out_shape(shape);
        let (rule, edges) = match bins {
            Bins::Edges(e) => (
                Rule::Edges(e.clone()),
                Array::from_f64(DType::F64, vec![n + 1], e)?,
            ),
            Bins::Count {
                range: Some((a, b)),
                ..
            } => {
                let u = Uniform::from_range(dtype, n, *a, *b)?;
                let edges = Array::from_f64(u.bin_dtype(), vec![n + 1], u.edges())?;
                (Rule::Uniform(vec![u]), edges)
            }
            Bins::Count { range: None, .. } | Bins::Extremes { .. } => {
                let extremes = match bins {
                    Bins::Extremes { per, .. } if per.len() == outputs => per.clone(),
                    Bins::Extremes { per, .. } => {
                        return Err(Error::invalid(format!(
                            "histogram: {} pairs of extremes for {outputs} outputs (one per \
                             position of the kept axes, shape {})",
                            per.len(),
                            fmt_shape(&kept)
                        )));
                    }
                    _ => self.extremes(input, over)?,
                };
                let per = uniforms(dtype, n, &extremes)?;
                let bin = per[0].bin_dtype();
                let mut eshape = kept.clone();
                eshape.push(n + 1);
                let data = crate::dispatch_dtype!(bin, T => {
                    let v: Vec<T> = per
                        .iter()
                        .flat_map(|u| u.edges().iter().map(|&x| T::from_f64(x)))
                        .collect();
                    bytemuck::cast_slice::<T, u8>(&v).to_vec()
                }, complex => return Err(bin.complex_refusal("a histogram")));
                (Rule::Uniform(per), Array::from_bytes(bin, eshape, data)?)
            }
        };
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "histogram counts",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let copies = if (outputs * n) as u64 * 8 <= PAR_COUNTS && self.backend.threads() > 1 {
            self.backend.threads()
        } else {
            1
        };
        let pass: Box<dyn TileReducer> = crate::dispatch_dtype!(dtype, T => Box::new(Count::<T> {
            g,
            cols: g.folds().then(|| (0..g.inner).map(|c| g.column_output(c).0 as u32).collect()),
            rule,
            n,
            nodata: input.missing().filter(|v| !v.is_nan()).map(T::from_f64),
            counts: vec![0; outputs * n],
            parts: Vec::new(),
            copies,
        }), complex => return Err(dtype.complex_refusal("a histogram")));
        let (r, times) = self.stream_reducer(input, &plan, Reduce::Count, g, pass, None, false)?;
        let mut cshape = kept;
        cshape.push(n);
        let counts = Array::from_bytes(DType::I64, cshape.clone(), r.into_bytes())?;
        let report = self.report(
            &plan,
            Ran::cpu(Family::Reduce, plan.what.clone()),
            shape,
            &cshape,
            DType::I64,
            times,
        );
        Ok((counts, edges, report))
    }

    /// Plans [`Engine::histogram`]'s counting pass (`n` bins) without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad axis; [`Error::Budget`] if the counts and a tile do
    /// not fit.
    pub fn plan_histogram(
        &self,
        input: &TensorFile,
        over: impl Into<ReduceOver>,
        n: usize,
    ) -> Result<Plan> {
        input.dtype().real_only("a histogram")?;
        let over = over.into();
        let shape = input.shape();
        let g = Geometry::new(shape, over)?;
        let outputs = g.outer * g.out_per_outer();
        // saturating: an absurd count of bins is a budget too small, not an overflow
        let counters = outputs.saturating_mul(n as u64);
        let threads = self.backend.threads().max(1) as u64;
        let copies = if counters.saturating_mul(8) <= PAR_COUNTS && threads > 1 {
            threads + 1
        } else {
            1
        };
        // per output its bins (twice: the counting pass's and the edges returned, with
        // one more while those are built), the fold table, the counters (and their i64
        // copy at the end)
        let edges = outputs.saturating_mul(8u64.saturating_mul(n as u64 + 1));
        let fixed = edges
            .saturating_mul(3)
            .saturating_add(outputs * 96)
            .saturating_add(if g.folds() { g.inner * 4 } else { 0 })
            .saturating_add(counters.saturating_mul(8 * (copies + 1)));
        let mut req = self.request(
            format!(
                "histogram of {n} bins over {} of {} {}",
                over.describe(),
                fmt_shape(shape),
                input.dtype()
            ),
            shape,
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            fixed,
            format!(
                "histogram counts ({counters} counters × {}) and edges ({} × 3)",
                copies + 1,
                fmt_bytes(edges)
            ),
        );
        Ok(Plan::new(&req)?)
    }

    /// Each output's extremes, as an automatic range takes them: the reductions' minimum
    /// and maximum; with a nodata value, of the valid elements, NaN left out too, and
    /// `None` for an output with none.
    fn extremes(
        &self,
        input: &TensorFile,
        over: ReduceOver,
    ) -> Result<Vec<Option<(Extreme, Extreme)>>> {
        let masked = input.missing().is_some();
        let (lo, hi) = if masked {
            (Reduce::NanMin, Reduce::NanMax)
        } else {
            (Reduce::Min, Reduce::Max)
        };
        let exact = |a: &Array| -> Vec<(f64, i128)> {
            crate::dispatch_dtype!(a.dtype(), T => {
                bytemuck::pod_collect_to_vec::<u8, T>(a.bytes())
                    .into_iter()
                    .map(|x| (x.to_f64(), if T::DTYPE.is_float() { 0 } else { x.to_i128() }))
                    .collect()
            }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"))
        };
        let ops: &[Reduce] = if masked {
            &[lo, hi, Reduce::Count]
        } else {
            &[lo, hi]
        };
        let got = self.reduce_several(input, ops, over)?;
        let mins = exact(&got[0]);
        let maxs = exact(&got[1]);
        let counts = got.get(2).map(Array::to_f64);
        Ok((0..mins.len())
            .map(|o| {
                // nothing to count: numpy's range of an empty array
                (!counts.as_ref().is_some_and(|c| c[o] == 0.0)).then_some((mins[o], maxs[o]))
            })
            .collect())
    }
}

/// Each output's `n` bins over its extremes (`None`: numpy's `[0, 1]` of an empty array).
fn uniforms(dtype: DType, n: usize, per: &[Option<(Extreme, Extreme)>]) -> Result<Vec<Uniform>> {
    per.iter()
        .enumerate()
        .map(|(o, e)| match *e {
            None => Uniform::from_range(dtype, n, 0.0, 1.0),
            Some((lo, hi)) => Uniform::from_extremes(dtype, n, lo, hi)
                .map_err(|e| Error::invalid(format!("histogram of output {o} (flat): {e}"))),
        })
        .collect()
}

/// The counting pass: every element's output and bin, counted.
struct Count<T: Element> {
    g: Geometry,
    /// With several separated axes: the output of each column.
    cols: Option<Vec<u32>>,
    rule: Rule,
    n: usize,
    nodata: Option<T>,
    counts: Vec<u64>,
    /// Counting in parallel: each piece's counters, merged at the end.
    parts: Vec<Vec<u64>>,
    copies: usize,
}

impl<T: Element> Count<T> {
    /// Counts the elements `[start, start + data.len())` into `counts`.
    fn count(&self, start: u64, data: &[T], counts: &mut [u64]) {
        let g = &self.g;
        let per = g.per_outer_elems();
        let inner = g.inner;
        let opo = g.out_per_outer();
        let (mut oi, mut p) = (start / per, start % per);
        let mut col = p % inner;
        let n = self.n;
        for &x in data {
            let o = (oi * opo
                + match &self.cols {
                    Some(c) => u64::from(c[col as usize]),
                    None => col,
                }) as usize;
            if self.nodata.is_none_or(|m| x != m) {
                let v = x.to_f64();
                let bin = match &self.rule {
                    Rule::Uniform(u) if u.len() == 1 => u[0].bin(v),
                    Rule::Uniform(u) => u[o].bin(v),
                    Rule::Edges(e) => edge_bin(e, v),
                };
                if let Some(b) = bin {
                    counts[o * n + b] += 1;
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
}

impl<T: Element> TileReducer for Count<T> {
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]) {
        let data = crate::dtype::typed::<T>(bytes);
        if self.copies > 1 && data.len() > 1 << 16 {
            // each piece counts into its own counters, kept for the whole pass
            let mut parts = std::mem::take(&mut self.parts);
            if parts.is_empty() {
                parts = vec![vec![0u64; self.counts.len()]; self.copies];
            }
            let step = data.len().div_ceil(parts.len());
            let me = &*self;
            data.par_chunks(step)
                .zip(parts.par_iter_mut())
                .enumerate()
                .for_each(|(i, (d, c))| me.count(start + (i * step) as u64, d, c));
            self.parts = parts;
        } else {
            let mut counts = std::mem::take(&mut self.counts);
            self.count(start, &data, &mut counts);
            self.counts = counts;
        }
    }

    fn into_bytes(self: Box<Self>) -> Vec<u8> {
        let mut counts = self.counts;
        for part in self.parts {
            for (a, b) in counts.iter_mut().zip(part) {
                *a += b;
            }
        }
        let counts: Vec<i64> = counts.into_iter().map(|c| c as i64).collect();
        bytemuck::cast_slice(&counts).to_vec()
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

impl Engine {
    /// [`Engine::histogram`] written to `out`, an `.npz` holding `counts` and `edges`
    /// (`np.load(out)["counts"]`), put in place only once whole.
    ///
    /// # Errors
    /// As [`Engine::histogram`]; [`Error::Invalid`] for an output that is the input or
    /// not named `.npz`; I/O errors writing it.
    pub fn histogram_to_file(
        &self,
        input: &TensorFile,
        over: impl Into<ReduceOver>,
        bins: &Bins,
        out: impl AsRef<std::path::Path>,
    ) -> Result<RunReport> {
        let out = out.as_ref();
        super::check_not_input(out, &[input])?;
        if !out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("npz"))
        {
            return Err(Error::invalid(format!(
                "{}: a histogram is written as an .npz of its counts and edges: name the \
                 output such as hist.npz",
                out.display()
            )));
        }
        let (counts, edges, mut report) = self.histogram(input, over, bins)?;
        let t0 = std::time::Instant::now();
        let tmp = super::array::npz_beside(out, &[("counts", &counts), ("edges", &edges)])?;
        super::array::persist_npz(tmp, out)?;
        report.finish_s = t0.elapsed().as_secs_f64();
        report.wall_s += report.finish_s;
        Ok(report)
    }
}
