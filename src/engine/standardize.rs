//! Column (or channel) statistics in one pass and standardize's two passes,
//! `(x - mean) / std` per column of the trailing axes, or per position of any adjacent
//! kept axes (per channel of NCHW: statistics over `(0, 2, 3)`): the statistics come
//! from the same reducers as `reduce --op mean` and `--op std` over the same axes, so
//! the bytes match theirs.

use std::path::Path;

use super::array::{npz_beside, persist_npz};
use super::reduce::{checkpoint_reducers, restore_reducers};
use super::{Array, Engine, Ran, RunReport, check_not_input, hold, kept_if_interrupted};
use crate::backend::ElementwiseParams;
use crate::backend::Family;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{TensorFile, fmt_shape};
use crate::io::own_files::{Written, check_run_paths};
use crate::journal::Journal;
use crate::layout::Layout;
use crate::ops::reduce::{Geometry, Reduce, ReduceOver};
use crate::plan::Plan;
use crate::scheduler::{self, InputStream};

impl Engine {
    /// Column means and standard deviations (over axis 0) in **one** pass over the data:
    /// every tile is fed to a mean reducer and a std reducer, so the statistics are exactly
    /// those of `reduce --op mean` and `reduce --op std` (bit for bit) for one read.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce).
    pub fn column_stats(&self, input: &TensorFile, ddof: u32) -> Result<(Array, Array, RunReport)> {
        self.stats_with(input, ddof, ReduceOver::Axis(0), None)
    }

    /// Means and standard deviations over `over` (several axes: per channel over
    /// `(0, 2, 3)` of NCHW) in one pass, as [`Engine::column_stats`]; the arrays have the
    /// kept axes' shape.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce).
    pub fn stats_over(
        &self,
        input: &TensorFile,
        ddof: u32,
        over: impl Into<ReduceOver>,
    ) -> Result<(Array, Array, RunReport)> {
        self.stats_with(input, ddof, over.into(), None)
    }

    /// [`Engine::stats_over`], resumable through `journal`.
    fn stats_with(
        &self,
        input: &TensorFile,
        ddof: u32,
        over: ReduceOver,
        journal: Option<&Journal>,
    ) -> Result<(Array, Array, RunReport)> {
        let std_op = Reduce::Std { ddof };
        // both reducers' results and accumulators are resident for the whole pass
        let resident = self.plan_reduce_rows(input, std_op, over)?.resident_bytes
            + self
                .plan_reduce_rows(input, Reduce::Mean, over)?
                .resident_bytes
            - 2 * input.read_scratch_bytes();
        let g = Geometry::new(input.shape(), over)?;
        let mut req = self.request(
            format!(
                "mean and std over {} of {} {}",
                over.describe(),
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            resident,
            "mean and std results and accumulators".to_string(),
        );
        req.scratch_per_elem = g.scratch_per_elem(16) + g.scratch_per_elem(8);
        let plan = Plan::new(&req)?;
        self.budget.reset_peak();
        let _resident = self
            .budget
            .reserve("mean and std results and accumulators", resident)?;
        let mut mean_r = self.backend.reducer(Reduce::Mean, input.dtype(), g, None)?;
        let mut std_r = self.backend.reducer(std_op, input.dtype(), g, None)?;
        let inputs = [InputStream::whole(input)];
        let mut stream = self.stream(&plan, &inputs, None);
        stream.journal = journal;
        let times = scheduler::run(
            &stream,
            self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], _: &mut [u8]| {
                restore_reducers(journal, &mut [&mut mean_r, &mut std_r])?;
                mean_r.feed_bytes(tile.start, ins[0]);
                std_r.feed_bytes(tile.start, ins[0]);
                checkpoint_reducers(journal, tile.index, &[mean_r.as_ref(), std_r.as_ref()])
            }),
        )?;
        restore_reducers(journal, &mut [&mut mean_r, &mut std_r])?;
        let shape = over.out_shape(input.shape());
        let mean = Array::from_bytes(DType::F64, shape.clone(), mean_r.into_bytes())?;
        let std = Array::from_bytes(DType::F64, shape.clone(), std_r.into_bytes())?;
        let what = format!(
            "mean and std over {} of {}",
            over.describe(),
            input.path().display()
        );
        let what = Ran::cpu(Family::ColumnStats, what);
        let report = self.report(&plan, what, input.shape(), &shape, DType::F64, times);
        Ok((mean, std, report))
    }

    /// Standardizes per column (statistics over axis 0, one value per element of the
    /// trailing axes): pass 1 computes mean and std ([`column_stats`](Self::column_stats)),
    /// pass 2 writes `(x - mean) / std` cast to `dtype` (default f32, or f64 for f64 input).
    /// A column with std 0 gives inf or NaN, as numpy's `(x - m) / s` does. If `stats` is
    /// given, the mean and std used are written there as an `.npz` (`mean`, `std`).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a rank-0 input or `out` being the input; [`Error::Budget`];
    /// I/O errors. On error nothing is left at `out`.
    pub fn standardize(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        ddof: u32,
        stats: Option<&Path>,
    ) -> Result<(RunReport, RunReport)> {
        rows_and_columns(input)?;
        self.standardize_over(input, out, dtype, ddof, stats, ReduceOver::Axis(0))
    }

    /// [`Engine::standardize`] with the statistics over `over` instead of axis 0: one
    /// mean and std per position of the axes it keeps, which must be adjacent
    /// (`(0, 2, 3)` of NCHW: per channel; `(1, 2)` of bands x rows x cols: per band; all
    /// axes: one mean and std). The statistics file holds them in the kept axes' shape.
    ///
    /// # Errors
    /// As [`Engine::standardize`]; [`Error::Invalid`] for kept axes that are not
    /// adjacent.
    pub fn standardize_over(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        ddof: u32,
        stats: Option<&Path>,
        over: impl Into<ReduceOver>,
    ) -> Result<(RunReport, RunReport)> {
        input.dtype().real_only("standardize")?;
        let over = over.into();
        // the output and the statistics: neither an input nor one path
        let w = |role, path| Written {
            role,
            path,
            dir: false,
        };
        let mut writes = vec![w("output", out.as_ref())];
        writes.extend(stats.map(|p| w("statistics file", p)));
        check_run_paths(&writes, &[("input", input.path())])?;
        let inner = stats_inner(input, over)?;
        let od = dtype.unwrap_or(if input.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        });
        let journal = self.open_journal(out.as_ref())?;
        let (mean, std, stats_report) = self
            .stats_with(input, ddof, over, journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        // the statistics are written beside their destination first and put in place
        // only once the output is: a failed run leaves neither
        let stats_file = match stats {
            Some(p) => Some((npz_beside(p, &[("mean", &mean), ("std", &std)])?, p)),
            None => None,
        };
        let apply = self.apply_standardize(journal, input, out.as_ref(), od, &mean, &std, inner)?;
        if let Some((tmp, p)) = stats_file {
            persist_npz(tmp, p)?;
        }
        Ok((stats_report, apply))
    }

    /// Pass 2 of [`standardize`](Self::standardize) with statistics computed elsewhere
    /// (by a cluster job's first pass, say): writes `(x - mean) / std` cast to `dtype`
    /// (default as `standardize`), `mean` and `std` holding one value per column.
    ///
    /// # Errors
    /// [`Error::Invalid`] for statistics of another shape than the input's columns or a
    /// rank-0 input; as [`standardize`](Self::standardize) otherwise.
    pub fn standardize_with_stats(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        mean: &Array,
        std: &Array,
    ) -> Result<RunReport> {
        rows_and_columns(input)?;
        self.standardize_over_with_stats(input, out, dtype, mean, std, ReduceOver::Axis(0))
    }

    /// [`Engine::standardize_with_stats`] for statistics over `over` (as
    /// [`Engine::standardize_over`]): `mean` and `std` in the kept axes' shape.
    ///
    /// # Errors
    /// As [`Engine::standardize_with_stats`] and [`Engine::standardize_over`].
    pub fn standardize_over_with_stats(
        &self,
        input: &TensorFile,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        mean: &Array,
        std: &Array,
        over: impl Into<ReduceOver>,
    ) -> Result<RunReport> {
        input.dtype().real_only("standardize")?;
        mean.dtype().real_only("standardize's mean")?;
        std.dtype().real_only("standardize's std")?;
        let over = over.into();
        check_not_input(out.as_ref(), &[input])?;
        let inner = stats_inner(input, over)?;
        let kept = over.out_shape(input.shape());
        if mean.shape() != kept || std.shape() != kept {
            return Err(Error::invalid(format!(
                "standardize of {} {} over {} needs a mean and a std of shape {}, not {} and {}",
                input.path().display(),
                fmt_shape(input.shape()),
                over.describe(),
                fmt_shape(&kept),
                fmt_shape(mean.shape()),
                fmt_shape(std.shape())
            )));
        }
        let od = dtype.unwrap_or(if input.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        });
        let journal = self.open_journal(out.as_ref())?;
        self.apply_standardize(journal, input, out.as_ref(), od, mean, std, inner)
    }

    /// Writes `(x - mean) / std` of `input` to `out` as `od`, `inner` consecutive
    /// elements sharing each statistic.
    #[allow(clippy::too_many_arguments)]
    fn apply_standardize(
        &self,
        journal: Option<Journal>,
        input: &TensorFile,
        out: &Path,
        od: DType,
        mean: &Array,
        std: &Array,
        inner: u64,
    ) -> Result<RunReport> {
        let m = mean.to_f64();
        let sd = std.to_f64();
        let plan = self.plan_writing(out, input.shape(), od, |e| {
            e.plan_apply_standardize(input, od, m.len())
        })?;
        self.run_standardize(journal, input, out, od, &plan, (&m, &sd, inner))
    }

    /// The plan of [`Engine::apply_standardize`] (`stats` values of mean and of std).
    fn plan_apply_standardize(&self, input: &TensorFile, od: DType, stats: usize) -> Result<Plan> {
        let mut req = self.request(
            format!(
                "standardize {} {} -> {od}",
                fmt_shape(input.shape()),
                input.dtype()
            ),
            input.shape(),
            &[input],
        );
        req.in_bytes_per_elem = input.dtype().size() as u64;
        req.inputs = 1;
        req.out_bytes_per_elem = od.size() as u64;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            (stats * 16) as u64,
            "mean and std".to_string(),
        );
        req.scratch_per_elem = 8;
        self.on_device(&mut req, 0, 0, (stats * 16) as u64);
        Ok(Plan::new(&req)?)
    }

    /// Runs the plan of [`Engine::apply_standardize`].
    #[allow(clippy::too_many_arguments)]
    fn run_standardize(
        &self,
        journal: Option<Journal>,
        input: &TensorFile,
        out: &Path,
        od: DType,
        plan: &Plan,
        (m, sd, inner): (&[f64], &[f64], u64),
    ) -> Result<RunReport> {
        self.budget.reset_peak();
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let xd = input.dtype();
        let shape = input.shape();
        let op = format!("standardize {}", input.path().display());
        let stats = (m.len() * 16) as u64;
        if let Some(boxes) =
            self.elementwise_boxes_holding(plan, &inputs, out, shape, od, (stats, "mean and std"))?
        {
            let _resident = self.budget.reserve("mean and std", stats)?;
            // each row of a box is a run of the output, its columns those of its position
            let (xs, os) = (xd.size(), od.size());
            let mut rows = Vec::new();
            let times = self.run_elementwise_boxes_with(
                journal,
                &boxes,
                &inputs,
                out,
                shape,
                od,
                |t, ins, o| {
                    rows.clear();
                    boxes.writes(t, &mut rows);
                    rows.iter().try_for_each(|w| {
                        let (a, b) = (w.buf_elem as usize, (w.buf_elem + w.len) as usize);
                        let x = &ins[0][a * xs..b * xs];
                        let o = &mut o[a * os..b * os];
                        backend.standardize(x, xd, w.file_elem, inner, m, sd, o, od)
                    })
                },
            )?;
            let op = Ran::cpu(Family::Standardize, op);
            return Ok(self.report_boxes(&boxes, op, shape, od, times));
        }
        let _resident = self.budget.reserve(
            "mean and std",
            plan.resident_bytes - input.read_scratch_bytes() - plan.output_bytes,
        )?;
        let params = ElementwiseParams::Standardize {
            mean: m.to_vec(),
            sd: sd.to_vec(),
            inner,
        };
        let dev = self.kernels_for(Family::Standardize);
        let k = dev.elementwise_kernel(&params, xd, od, plan)?;
        let op = Ran::on(Family::Standardize, op, super::on_gpu(dev));
        let times = self.run_to_file_with(journal, plan, &inputs, out, shape, od, 1, k)?;
        Ok(self.report(plan, op, input.shape(), input.shape(), od, times))
    }
}

/// How many consecutive elements of `input` share one statistic of a standardize over
/// `over`: the product of the axes after the kept ones (1 per column of the trailing
/// axes). The kept axes must be adjacent, so that a statistic's index is
/// `(flat index / inner) % statistics`.
fn stats_inner(input: &TensorFile, over: ReduceOver) -> Result<u64> {
    let shape = input.shape();
    Geometry::new(shape, over)?;
    let reduced = over.axis_list(shape.len());
    let kept: Vec<usize> = (0..shape.len()).filter(|a| !reduced.contains(a)).collect();
    match (kept.first(), kept.last()) {
        (Some(&a), Some(&b)) if b - a + 1 != kept.len() => Err(Error::invalid(format!(
            "standardize over {} of {} {} keeps axes {kept:?}, which are not adjacent: \
             statistics are kept per position of adjacent axes (transpose the input first)",
            over.describe(),
            input.path().display(),
            fmt_shape(shape)
        ))),
        (_, Some(&b)) => Ok(shape[b + 1..].iter().map(|&d| d as u64).product::<u64>()),
        // every axis reduced: one mean and std for all elements
        _ => Ok(1),
    }
}

/// Refuses a rank-0 or rank-1 input to the per-column standardize (rows x columns).
fn rows_and_columns(input: &TensorFile) -> Result<()> {
    if input.shape().len() < 2 {
        return Err(Error::invalid(format!(
            "standardize needs rank 2 or more (rows x columns), {} has shape {}",
            input.path().display(),
            fmt_shape(input.shape())
        )));
    }
    Ok(())
}
