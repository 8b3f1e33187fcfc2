//! Quantiles, percentiles and medians of a streamed input: passes of digit counts (see
//! [`crate::ops::quantile`]), each a streaming pass over the input through the same
//! pipeline as a reduction, the counts held in the budget.

use std::path::Path;

use rayon::prelude::*;

use super::{Array, Engine, Ran, RunReport, check_not_input, hold};
use crate::backend::Family;
use crate::budget::fmt_bytes;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::ops::quantile::{Quantiles, from_key, key, key_bits};
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
        Ok(self.quantile_plan(input, over, spec)?.0)
    }

    fn quantile_plan(
        &self,
        input: &TensorFile,
        over: ReduceOver,
        spec: &Quantiles,
    ) -> Result<(Plan, Digits)> {
        let shape = input.shape();
        let dtype = input.dtype();
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
        // per output: its NaN count, group bounds, the ranks' targets; the fold table
        let fixed = outputs * (8 + 4 + 24 * ranks) + if g.folds() { g.inner * 4 } else { 0 };
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
        // four touches each)
        let half = self.budget.limit() / 2;
        let elems = input.info().len();
        let work =
            |d: &Digits| u64::from(kbits.div_ceil(d.width)) * (elems + 4 * d.counters * d.copies);
        let digits = DIGITS
            .iter()
            .map(|&w| pick(w))
            .filter(|d| fixed + out_bytes + cost(d) <= half)
            .min_by_key(|d| work(d))
            .unwrap_or_else(|| pick(DIGITS[DIGITS.len() - 1]));
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
        let (plan, digits) = self.quantile_plan(input, over, spec)?;
        self.budget.reset_peak();
        let g = Geometry::new(input.shape(), over)?;
        let _resident = self.budget.reserve(
            "digit counts and result",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let dtype = input.dtype();
        let (data, times) = crate::dispatch_dtype!(dtype, T => {
            self.select::<T>(input, &plan, g, spec, digits)?
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

    /// The passes: the digits of every rank's key, most significant first, then each
    /// output's quantiles from the elements of those ranks.
    fn select<T: Element>(
        &self,
        input: &TensorFile,
        plan: &Plan,
        g: Geometry,
        spec: &Quantiles,
        digits: Digits,
    ) -> Result<(Vec<u8>, crate::scheduler::StageTimes)> {
        let outputs = (g.outer * g.out_per_outer()) as usize;
        let kbits = key_bits(T::DTYPE);
        let per_output = g.per_output();
        let cols = g
            .folds()
            .then(|| (0..g.inner).map(|c| g.column_output(c).0 as u32).collect());
        let mut times = crate::scheduler::StageTimes::default();
        // every output is one group with no prefix in the first pass
        let mut groups = Groups {
            starts: (0..=outputs as u32).collect(),
            prefix: vec![0; outputs],
        };
        // per output, its ranks' (rank within its group, prefix so far)
        let mut targets: Vec<Vec<(u64, u64)>> = Vec::new();
        let mut n = vec![0u64; outputs];
        let mut nan = vec![false; outputs];
        let mut done = 0u32;
        // nodata pixels are missing to the forms that leave NaN out; the others take them
        // as values, as numpy would (NaN as nodata is NaN already)
        let missing = input.missing().filter(|v| spec.skip_nan && !v.is_nan());
        while done < kbits {
            let width = digits.width.min(kbits - done);
            let shift = kbits - done - width;
            let pass = Pass::<T> {
                g,
                cols: cols.clone(),
                first: done == 0,
                shift,
                width,
                groups: std::mem::take(&mut groups),
                counts: Vec::new(),
                nan: if done == 0 {
                    vec![0; outputs]
                } else {
                    Vec::new()
                },
                parallel: digits.copies > 1,
                nodata: missing.map(T::from_f64),
                parts: Vec::new(),
                _t: std::marker::PhantomData,
            };
            let (r, t) =
                self.stream_reducer(input, plan, Reduce::Count, g, Box::new(pass), None, false)?;
            times.add(&t);
            let counted = r.into_bytes();
            let (groups_back, counts, nans) = Pass::<T>::unpack(&counted, outputs);
            if done == 0 {
                for o in 0..outputs {
                    nan[o] = nans[o] > 0;
                    n[o] = if spec.skip_nan {
                        per_output - nans[o]
                    } else {
                        per_output
                    };
                }
                targets = (0..outputs)
                    .map(|o| {
                        if n[o] == 0 || (nan[o] && !spec.skip_nan) {
                            Vec::new()
                        } else {
                            spec.ranks(n[o]).into_iter().map(|r| (r, 0)).collect()
                        }
                    })
                    .collect();
            }
            // each rank's next digit: the bucket where the count passes it
            let size = 1usize << width;
            for (o, ts) in targets.iter_mut().enumerate() {
                for (rank, prefix) in ts.iter_mut() {
                    let gi = groups_back.find(o, *prefix).ok_or_else(|| {
                        Error::Internal(format!("no counts for output {o} prefix {prefix}"))
                    })?;
                    let c = &counts[gi * size..(gi + 1) * size];
                    let mut before = 0u64;
                    let mut digit = size - 1;
                    for (d, &k) in c.iter().enumerate() {
                        if before + k > *rank {
                            digit = d;
                            break;
                        }
                        before += k;
                    }
                    *rank -= before;
                    *prefix = (*prefix << width) | digit as u64;
                }
            }
            done += width;
            if done < kbits {
                groups = Groups::of(&targets);
            }
        }
        // every rank's key is whole: the values, then numpy's quantiles from them
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); spec.q.len()];
        for o in 0..outputs {
            let ranks = if targets[o].is_empty() {
                Vec::new()
            } else {
                spec.ranks(n[o])
            };
            let vals: Vec<T> = targets[o].iter().map(|&(_, k)| from_key::<T>(k)).collect();
            let at = |r: u64| -> T {
                let i = ranks.iter().position(|&x| x == r).unwrap_or(0);
                vals.get(i)
                    .copied()
                    .unwrap_or_else(|| T::from_f64(f64::NAN))
            };
            spec.finish::<T>(n[o], nan[o], missing, &at, &mut out);
        }
        Ok((out.concat(), times))
    }
}

/// The groups of a pass: per output, the prefixes its ranks' keys have so far (sorted,
/// each once), their counters side by side.
#[derive(Clone, Debug, Default)]
struct Groups {
    /// Output `o`'s groups are `starts[o]..starts[o + 1]`.
    starts: Vec<u32>,
    prefix: Vec<u64>,
}

impl Groups {
    fn of(targets: &[Vec<(u64, u64)>]) -> Self {
        let mut starts = Vec::with_capacity(targets.len() + 1);
        let mut prefix = Vec::new();
        starts.push(0);
        for ts in targets {
            let mut p: Vec<u64> = ts.iter().map(|t| t.1).collect();
            p.sort_unstable();
            p.dedup();
            prefix.extend(p);
            starts.push(prefix.len() as u32);
        }
        Groups { starts, prefix }
    }

    fn find(&self, o: usize, prefix: u64) -> Option<usize> {
        let (a, b) = (self.starts[o] as usize, self.starts[o + 1] as usize);
        (a..b).find(|&i| self.prefix[i] == prefix)
    }
}

/// One pass of digit counts, fed tiles by the pipeline like a reduction.
struct Pass<T> {
    g: Geometry,
    /// With several separated axes: the output of each column.
    cols: Option<Vec<u32>>,
    first: bool,
    shift: u32,
    width: u32,
    groups: Groups,
    counts: Vec<u64>,
    nan: Vec<u64>,
    parallel: bool,
    /// The input's nodata value, counted as NaN is (by the `nan` forms alone).
    nodata: Option<T>,
    /// Counting in parallel: each piece's counters and NaN counts, for the whole pass.
    parts: Vec<(Vec<u64>, Vec<u64>)>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Pass<T> {
    /// Counts the elements `[start, start + data.len())` into `counts` (and `nan`).
    fn count(&self, start: u64, data: &[T], counts: &mut [u64], nan: &mut [u64]) {
        let g = &self.g;
        let per = g.per_outer_elems();
        let inner = g.inner;
        let opo = g.out_per_outer();
        let (mut oi, mut p) = (start / per, start % per);
        let mut col = p % inner;
        let (shift, width) = (self.shift, self.width);
        let mask = (1u64 << width) - 1;
        let high = shift + width;
        for &x in data {
            let o = (oi * opo
                + match &self.cols {
                    Some(c) => u64::from(c[col as usize]),
                    None => col,
                }) as usize;
            if x.is_nan() || self.nodata.is_some_and(|m| x == m) {
                if self.first {
                    nan[o] += 1;
                }
            } else {
                let k = key(x);
                let digit = ((k >> shift) & mask) as usize;
                let top = k.checked_shr(high).unwrap_or(0);
                let (a, b) = (
                    self.groups.starts[o] as usize,
                    self.groups.starts[o + 1] as usize,
                );
                for gi in a..b {
                    if self.first || self.groups.prefix[gi] == top {
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

    /// The groups, counts and NaN counts back from [`TileReducer::into_bytes`].
    fn unpack(bytes: &[u8], outputs: usize) -> (Groups, Vec<u64>, Vec<u64>) {
        let words: Vec<u64> = bytemuck::pod_collect_to_vec(bytes);
        let ng = words[0] as usize;
        let nc = words[1] as usize;
        let nn = words[2] as usize;
        let mut at = 3;
        let starts: Vec<u32> = words[at..=at + outputs].iter().map(|&s| s as u32).collect();
        at += outputs + 1;
        let prefix = words[at..at + ng].to_vec();
        at += ng;
        let counts = words[at..at + nc].to_vec();
        at += nc;
        let nan = words[at..at + nn].to_vec();
        (Groups { starts, prefix }, counts, nan)
    }
}

impl<T: Element> TileReducer for Pass<T> {
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]) {
        let data = crate::dtype::typed::<T>(bytes);
        let size = self.groups.prefix.len().max(1) << self.width;
        if self.counts.is_empty() {
            self.counts = vec![0; size];
        }
        let outputs = self.groups.starts.len() - 1;
        if self.parallel && data.len() > 1 << 16 {
            // each piece counts into its own counters, kept for the whole pass and merged
            // once in `into_bytes`
            let mut parts = std::mem::take(&mut self.parts);
            if parts.is_empty() {
                let nan = if self.first { outputs } else { 0 };
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
        let size = self.groups.prefix.len().max(1) << self.width;
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
            for (a, b) in nan.iter_mut().zip(n) {
                *a += b;
            }
        }
        let mut words = vec![
            self.groups.prefix.len() as u64,
            counts.len() as u64,
            nan.len() as u64,
        ];
        words.extend(self.groups.starts.iter().map(|&s| u64::from(s)));
        words.extend_from_slice(&self.groups.prefix);
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
}
