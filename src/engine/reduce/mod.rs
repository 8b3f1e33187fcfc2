//! Reductions and column statistics: a streaming reducer per run, its state checkpointed
//! in the journal for `--resume`, and standardize's two passes.

mod columns;
mod partials;

pub use partials::merge_partials;

use std::path::Path;

use super::{Array, Engine, Ran, RunReport, check_not_input, hold, kept_if_interrupted};
use crate::backend::{Family, Kernels, ReduceKernel};
use crate::budget::Reservation;
use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{OutputFile, TensorFile, fmt_shape};
use crate::journal::Journal;
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, TileReducer};
use crate::plan::Plan;
use crate::scheduler::{self, InputStream, Morsel, Pending, Slot, TileKernel};

impl Engine {
    /// Plans a reduction without running it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad axis or an empty tensor; [`Error::Budget`] if the
    /// budget is too small.
    pub fn plan_reduce(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
    ) -> Result<Plan> {
        let over = over.into();
        if let Some(columns) = self.plan_columns(input, op, over)? {
            return Ok(columns.plan);
        }
        self.plan_reduce_holding(input, op, over, 0, 0)
    }

    /// The plan of a reduction that reads the input's rows in C order whatever its
    /// layout (what [`plan_reduce`](Self::plan_reduce) gives but for a Fortran-order
    /// matrix reduced over its rows, read column by column): the plan of the runs that
    /// feed other reducers beside it (standardize's statistics, a share's partials).
    ///
    /// # Errors
    /// As [`plan_reduce`](Self::plan_reduce).
    pub(crate) fn plan_reduce_rows(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: ReduceOver,
    ) -> Result<Plan> {
        self.plan_reduce_holding(input, op, over, 0, 0)
    }

    /// [`plan_reduce`](Self::plan_reduce) holding `extra` bytes more for the run and
    /// `extra_scratch` bytes more per element of a tile.
    fn plan_reduce_holding(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: ReduceOver,
        extra: u64,
        extra_scratch: u64,
    ) -> Result<Plan> {
        let shape = input.shape();
        let dtype = input.dtype();
        op.check_over(over)?;
        if input.info().is_empty() {
            return Err(Error::invalid(format!(
                "{}: cannot reduce an empty tensor (shape {})",
                input.path().display(),
                fmt_shape(shape)
            )));
        }
        refuse_complex_nodata(input, op)?;
        let g = Geometry::new(shape, over)?;
        let acc = op.acc_bytes(dtype, input.missing().is_some());
        let out_dtype = op.output_dtype(dtype);
        let result = g.outer * g.out_per_outer() * out_dtype.size() as u64;
        let states = (self.backend.threads() as u64 + 1) * g.state_bytes(acc);
        let over_txt = over.describe();
        let mut req = self.request(
            format!(
                "reduce {} over {over_txt} of {} {dtype}",
                op.name(),
                fmt_shape(shape)
            ),
            shape,
            &[input],
        );
        req.in_bytes_per_elem = dtype.size() as u64;
        req.inputs = 1;
        hold(
            &mut req.resident_bytes,
            &mut req.resident_what,
            result + states + extra,
            if extra > 0 {
                format!(
                    "result ({}), accumulators and block partials ({})",
                    fmt_bytes(result),
                    fmt_bytes(extra)
                )
            } else {
                format!("result ({}) and accumulators", fmt_bytes(result))
            },
        );
        req.scratch_per_elem = g.scratch_per_elem(acc) + extra_scratch;
        // a complex input is reduced on the host
        if self.planning_device().is_some() && !dtype.is_complex() {
            // each stream's page-locked buffer of finished totals: at most
            // (tile / per + 2) outer indices of vcols accumulators
            let (vc, depth) = (g.vcols() as u64, req.depth.max(1) as u64);
            let fixed = depth * 2 * vc * acc as u64;
            hold(
                &mut req.resident_bytes,
                &mut req.resident_what,
                fixed,
                "page-locked buffers of finished totals".into(),
            );
            req.scratch_per_elem = (depth * vc * acc as u64).div_ceil(g.per_outer_elems());
            // on the device, per stream: the tile, its cells (at most tile / block_rows
            // + 2 per outer index, of vcols accumulators) and its finished totals
            let (acc, per, br) = (acc as u64, g.per_outer_elems(), g.block_rows());
            let extra = acc.div_ceil(br) + (3 * vc * acc).div_ceil(per);
            self.on_device(&mut req, extra, 6 * vc * acc, 2 * vc * (2 * acc + 8));
        }
        Ok(Plan::new(&req)?)
    }

    /// Reduces `input` and returns the result in memory (its bytes count in the budget).
    ///
    /// # Errors
    /// As [`plan_reduce`](Self::plan_reduce), plus I/O errors while streaming.
    pub fn reduce(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
    ) -> Result<(Array, RunReport)> {
        self.reduce_with(input, op, over.into(), None)
    }

    /// [`Engine::reduce`], resumable through `journal`.
    fn reduce_with(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: ReduceOver,
        journal: Option<&Journal>,
    ) -> Result<(Array, RunReport)> {
        if let Some(columns) = self.plan_columns(input, op, over)? {
            return self.reduce_by_columns(input, op, columns, journal);
        }
        let plan = self.plan_reduce_rows(input, op, over)?;
        self.budget.reset_peak();
        let g = Geometry::new(input.shape(), over)?;
        let _resident = self.budget.reserve(
            "reduction result and accumulators",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let reducer = self
            .backend
            .reducer(op, input.dtype(), g, input.missing())?;
        // columns that fold into outputs (several separated axes) have no CUDA kernel:
        // the device's shifts are each column's own (nor do the positions)
        // nor do complex inputs
        let gpu = !g.folds()
            && op.on_device()
            && !input.dtype().is_complex()
            && super::on_gpu(self.kernels_for(Family::Reduce));
        let (mut reducer, times) =
            self.stream_reducer(input, &plan, op, g, reducer, journal, gpu)?;
        // a pass resumed with every tile done never called the closure
        restore_reducers(journal, &mut [&mut reducer])?;
        let out_dtype = op.output_dtype(input.dtype());
        let out_shape = over.out_shape(input.shape());
        let array = Array::from_bytes(out_dtype, out_shape.clone(), reducer.into_bytes())?;
        refuse_no_position(op, &array)?;
        let report = self.report(
            &plan,
            Ran::on(Family::Reduce, plan.what.clone(), gpu),
            input.shape(),
            &out_shape,
            out_dtype,
            times,
        );
        Ok((array, report))
    }

    /// Streams `input` through `reducer` as `plan` says, on the GPU when this engine has
    /// one and `device` allows.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stream_reducer(
        &self,
        input: &TensorFile,
        plan: &Plan,
        op: Reduce,
        g: Geometry,
        reducer: Box<dyn TileReducer>,
        journal: Option<&Journal>,
        device: bool,
    ) -> Result<(Box<dyn TileReducer>, scheduler::StageTimes)> {
        let inputs = [InputStream::whole(input)];
        let mut stream = self.stream(plan, &inputs, None);
        stream.journal = journal;
        let dev: &dyn Kernels = if device {
            self.kernels_for(Family::Reduce)
        } else {
            &*self.backend
        };
        let mut k = dev.reduce_kernel(op, input.dtype(), g, input.missing(), plan, reducer)?;
        let times = scheduler::run(
            &stream,
            Checkpointed {
                k: &mut *k,
                journal,
                restored: false,
            },
        )?;
        Ok((k.finish()?, times))
    }

    /// The reductions `ops` of `input` over `over`, each the bytes [`Engine::reduce`]
    /// gives: in one pass over the input where the leading axis is reduced and their
    /// block partials fit the budget beside each other ([`Engine::reduce_partials`] over
    /// every row, merged), else one pass each.
    ///
    /// # Errors
    /// As [`Engine::reduce`].
    pub fn reduce_several(
        &self,
        input: &TensorFile,
        ops: &[Reduce],
        over: ReduceOver,
    ) -> Result<Vec<Array>> {
        let rows = input.shape().first().map_or(0, |&r| r as u64);
        if ops.len() > 1
            && rows > 0
            && !input.dtype().is_complex()
            && Geometry::new(input.shape(), over)?.outer == 1
        {
            match self.reduce_partials(input, ops, over, 0..rows) {
                Ok((parts, _)) => {
                    return parts.into_iter().map(|p| merge_partials(&[p])).collect();
                }
                // the partials side by side did not fit: one pass each
                Err(Error::Budget(_)) => {}
                Err(e) => return Err(e),
            }
        }
        ops.iter()
            .map(|&op| self.reduce(input, op, over).map(|(a, _)| a))
            .collect()
    }

    /// Reduces `input` and writes the result to `out` (`.npy`, raw, GeoTIFF or Zarr, by
    /// its name or the engine's format), cast to `dtype` if given.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce), plus [`Error::Invalid`] if `out` is the input, and I/O
    /// errors writing `out`.
    pub fn reduce_to_file(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
    ) -> Result<RunReport> {
        self.reduce_to_file_keeping(input, op, over, out, dtype, false)
    }

    /// [`Engine::reduce_to_file`], with `keepdims` the reduced axes kept in the written
    /// shape as length 1 (numpy's `keepdims=True`; the same values).
    ///
    /// # Errors
    /// As [`Engine::reduce_to_file`].
    pub fn reduce_to_file_keeping(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: impl Into<ReduceOver>,
        out: impl AsRef<Path>,
        dtype: Option<DType>,
        keepdims: bool,
    ) -> Result<RunReport> {
        let over = over.into();
        check_not_input(out.as_ref(), &[input])?;
        Self::check_result_cast(input, op, dtype)?;
        if self.out_region.is_some() {
            return Err(Error::invalid(
                "a reduction's result is not written into rows of another file: merge \
                 partials (Engine::reduce_partial) instead",
            ));
        }
        let journal = self.open_journal(out.as_ref())?;
        let (array, report) = self
            .reduce_with(input, op, over, journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        let mut array = match dtype {
            Some(d) => array.cast(d),
            None => array,
        };
        if keepdims {
            array.shape = over.out_shape_keeping(input.shape(), true);
        }
        let report = self.write_reduced(&array, out.as_ref(), report)?;
        if let Some(j) = journal {
            j.finish();
        }
        Ok(report)
    }

    /// Writes a reduction's in-memory result `array` to `out` and completes its `report`.
    pub(super) fn write_reduced(
        &self,
        array: &Array,
        out: &Path,
        mut report: RunReport,
    ) -> Result<RunReport> {
        let format = self.format_of(out);
        let file =
            OutputFile::create_as(out, &array.shape, array.dtype, format)?.durable(self.durable);
        // the result is in memory: a GeoTIFF or Zarr output is encoded from it as it is
        // written, within what the budget has left besides it, when that holds a row of
        // its tiles or chunks (else refused)
        let free = (self.budget.limit())
            .saturating_sub(self.budget.reserved())
            .saturating_sub(array.data.len() as u64);
        // a pixel-interleaved GeoTIFF's tiles hold every band: the result is written
        // row by row, the bands of each row one after another, so that one row of tiles
        // fills at a time; other outputs in one piece, band after band
        let pixel = self
            .planning_encoding_as(format)
            .and_then(|e| e.pixel_rows(&array.shape, array.dtype))
            .is_some();
        let room = crate::format::encoding::Room {
            bytes: free,
            open: None,
            bands_inner: pixel,
        };
        let file = self.encoded_as(file, out, format, Some(room))?;
        let t0 = std::time::Instant::now();
        if let (true, &[bands, h, w]) = (pixel, array.shape.as_slice()) {
            let es = array.dtype.size();
            for r in 0..h {
                for b in 0..bands {
                    let at = (b * h + r) * w;
                    file.write_at(at as u64, &array.data[at * es..(at + w) * es])?;
                }
            }
        } else {
            file.write_at(0, &array.data)?;
        }
        self.finish_output(file)?;
        report.finish_s = t0.elapsed().as_secs_f64();
        report.wall_s += report.finish_s;
        report.output_dtype = array.dtype().name().into();
        Ok(report)
    }
}
/// A reduction's kernel, resumable: the state a resumed pass found is restored before
/// the first tile, and after a tile the state is checkpointed when the journal says one
/// is due at the kernel's pace ([`ReduceKernel::checkpoint_secs`]): after every tile for
/// a small state on the host, at most once a second on a device, whose state is brought
/// back first (which waits for the tile, so its pipeline stops only then; a resumed
/// device run redoes at most a second of tiles).
struct Checkpointed<'a, 'k> {
    k: &'a mut (dyn ReduceKernel + 'k),
    journal: Option<&'a Journal>,
    restored: bool,
}

impl TileKernel<crate::plan::Tile> for Checkpointed<'_, '_> {
    fn staged_inputs(&self) -> bool {
        self.k.staged_inputs()
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.k.alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<crate::plan::Tile>) -> Result<Pending<crate::plan::Tile>> {
        let Some(j) = self.journal else {
            return self.k.submit(m);
        };
        if !self.restored {
            self.restored = true;
            restore_reducers(Some(j), &mut [self.k.host_mut()])?;
            self.k.upload_state()?;
        }
        let index = m.tile().index;
        let pending = self.k.submit(m)?;
        let size = self.k.host_mut().state_len();
        if j.checkpoint_due(size, self.k.checkpoint_secs())? {
            self.k.sync()?;
            let host = self.k.host_mut();
            j.save_checkpoint(j.pass(), index, &host.state_parts())?;
        }
        j.tile_passed(j.pass(), index);
        Ok(pending)
    }
}

/// Restores `reducers` from the state a resumed pass found, once (the journal hands it
/// over only the first time), reading it straight into their buffers.
pub(super) fn restore_reducers(
    journal: Option<&Journal>,
    reducers: &mut [&mut Box<dyn TileReducer>],
) -> Result<()> {
    let Some(j) = journal else { return Ok(()) };
    let mut parts: Vec<&mut [u8]> = reducers
        .iter_mut()
        .flat_map(|r| r.state_parts_mut())
        .collect();
    j.restore_state(&mut parts).map(|_| ())
}

/// Saves the state of `reducers` after tile `index` when the journal has a checkpoint due.
pub(super) fn checkpoint_reducers(
    journal: Option<&Journal>,
    index: usize,
    reducers: &[&dyn TileReducer],
) -> Result<()> {
    let Some(j) = journal else { return Ok(()) };
    let size = reducers.iter().map(|r| r.state_len()).sum();
    j.checkpoint(j.pass(), index, size, || {
        reducers.iter().flat_map(|r| r.state_parts()).collect()
    })
}

impl Engine {
    /// Refuses a cast of a complex result (the sum or mean of a complex input) to a real
    /// `dtype`, which would drop the imaginary parts.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the reduction and the dtypes.
    pub(crate) fn check_result_cast(
        input: &TensorFile,
        op: Reduce,
        dtype: Option<DType>,
    ) -> Result<()> {
        match dtype {
            Some(d) if op.output_dtype(input.dtype()).is_complex() && !d.is_complex() => {
                Err(Error::invalid(format!(
                    "the {} of a {} array is complex: writing it as {d} would drop the \
                     imaginary parts; give a complex dtype (c64, c128)",
                    op.name(),
                    input.dtype().numpy_name()
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Refuses the result of a `nanargmin` or `nanargmax` where a slice had no element that
/// is not NaN (nor nodata): numpy raises there rather than give an index.
pub(super) fn refuse_no_position(op: Reduce, array: &Array) -> Result<()> {
    if !matches!(op, Reduce::NanArgMin | Reduce::NanArgMax) {
        return Ok(());
    }
    let at = bytemuck::pod_collect_to_vec::<u8, i64>(&array.data)
        .iter()
        .position(|&i| i < 0);
    match at {
        None => Ok(()),
        Some(k) => Err(Error::invalid(format!(
            "{}: result {k} (flat) is of a slice with nothing but NaN or nodata, which has \
             no position (numpy raises 'All-NaN slice encountered'): take {} to see which \
             slices, or argmin/argmax",
            op.name(),
            if op == Reduce::NanArgMin {
                "nanmin"
            } else {
                "nanmax"
            }
        ))),
    }
}

/// Refuses the reductions that leave NaN out (and `count`) of a complex input with a
/// nodata value: which of its elements a real nodata value would name is not settled,
/// so none is left out silently.
///
/// # Errors
/// [`Error::Invalid`] naming the reduction.
fn refuse_complex_nodata(input: &TensorFile, op: Reduce) -> Result<()> {
    let dtype = input.dtype();
    if dtype.is_complex() && op.nodata_left_out(input.missing()).is_some() {
        return Err(Error::invalid(format!(
            "{} of a {} input with a nodata value is not supported: give no nodata value \
             (NaN is left out: an element whose either part is NaN)",
            op.name(),
            dtype.numpy_name()
        )));
    }
    Ok(())
}
