//! Reductions and column statistics: a streaming reducer per run, its state checkpointed
//! in the journal for `--resume`, and standardize's two passes.

use std::path::Path;

use super::{Array, Engine, RunReport, check_not_input, hold, kept_if_interrupted, write_npz};
use crate::backend::cuda::source::Elementwise;
use crate::backend::cuda::{CudaReduce, ElementwiseParams};
use crate::budget::Reservation;
use crate::budget::fmt_bytes;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, TileReducer};
use crate::plan::Plan;
use crate::scheduler::{self, InputStream, Morsel, Pending, Slot, TileKernel};
use crate::tensor::{OutputFile, TensorFile, fmt_shape};

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
        let shape = input.shape();
        let dtype = input.dtype();
        let g = Geometry::new(shape, over)?;
        if input.info().is_empty() {
            return Err(Error::invalid(format!(
                "{}: cannot reduce an empty tensor (shape {})",
                input.path().display(),
                fmt_shape(shape)
            )));
        }
        let acc = op.acc_bytes(dtype);
        let result = g.outer * g.out_per_outer() * op.output_dtype(dtype).size() as u64;
        let states = (self.backend.threads() as u64 + 1) * g.state_bytes(acc);
        let over_txt = match over {
            ReduceOver::All => "all elements".to_string(),
            ReduceOver::Axis(a) => format!("axis {a}"),
        };
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
            result + states,
            format!("result ({}) and accumulators", fmt_bytes(result)),
        );
        req.scratch_per_elem = g.scratch_per_elem(acc);
        if self.cuda.is_some() {
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
        let plan = self.plan_reduce(input, op, over)?;
        self.budget.reset_peak();
        let g = Geometry::new(input.shape(), over)?;
        let _resident = self.budget.reserve(
            "reduction result and accumulators",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let mut reducer = self.backend.reducer(op, input.dtype(), g)?;
        let inputs = [InputStream::whole(input)];
        let mut stream = self.stream(&plan, &inputs, None);
        stream.journal = journal;
        let times = if let Some(dev) = &self.cuda {
            let mut k = dev.reduce(op, input.dtype(), g, &plan, reducer)?;
            let times = scheduler::run(
                &stream,
                Checkpointed {
                    k: &mut k,
                    journal,
                    restored: false,
                },
            )?;
            reducer = k.finish()?;
            times
        } else {
            scheduler::run(
                &stream,
                self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], _: &mut [u8]| {
                    restore_reducers(journal, &mut [&mut reducer])?;
                    reducer.feed_bytes(tile.start, ins[0]);
                    checkpoint_reducers(journal, tile.index, &[reducer.as_ref()])
                }),
            )?
        };
        // a pass resumed with every tile done never called the closure
        restore_reducers(journal, &mut [&mut reducer])?;
        let out_dtype = op.output_dtype(input.dtype());
        let out_shape: Vec<usize> = match over {
            ReduceOver::All => vec![],
            ReduceOver::Axis(a) => input
                .shape()
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != a)
                .map(|(_, &d)| d)
                .collect(),
        };
        let array = Array::from_bytes(out_dtype, out_shape.clone(), reducer.into_bytes())?;
        let report = self.report(
            &plan,
            plan.what.clone(),
            input.shape(),
            &out_shape,
            out_dtype,
            times,
        );
        Ok((array, report))
    }

    /// Reduces `input` and writes the result to `out` (`.npy` or raw), cast to `dtype` if given.
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
        check_not_input(out.as_ref(), &[input])?;
        let journal = self.open_journal(out.as_ref())?;
        let (array, mut report) = self
            .reduce_with(input, op, over.into(), journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        let array = dtype.map_or(array.clone(), |d| array.cast(d));
        let out = out.as_ref();
        let format = self.format_of(out);
        let file =
            OutputFile::create_as(out, &array.shape, array.dtype, format)?.durable(self.durable);
        let file = self.encoded_as(file, out, format)?;
        let t0 = std::time::Instant::now();
        file.write_at(0, &array.data)?;
        self.finish_output(file)?;
        report.finish_s = t0.elapsed().as_secs_f64();
        report.wall_s += report.finish_s;
        if let Some(j) = journal {
            j.finish();
        }
        report.output_dtype = array.dtype().name().into();
        Ok(report)
    }

    /// Column means and standard deviations (over axis 0) in **one** pass over the data:
    /// every tile is fed to a mean reducer and a std reducer, so the statistics are exactly
    /// those of `reduce --op mean` and `reduce --op std` (bit for bit) for one read.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce).
    pub fn column_stats(&self, input: &TensorFile, ddof: u32) -> Result<(Array, Array, RunReport)> {
        self.column_stats_with(input, ddof, None)
    }

    /// [`Engine::column_stats`], resumable through `journal`.
    fn column_stats_with(
        &self,
        input: &TensorFile,
        ddof: u32,
        journal: Option<&Journal>,
    ) -> Result<(Array, Array, RunReport)> {
        let over = ReduceOver::Axis(0);
        let std_op = Reduce::Std { ddof };
        // both reducers' results and accumulators are resident for the whole pass
        let resident = self.plan_reduce(input, std_op, over)?.resident_bytes
            + self.plan_reduce(input, Reduce::Mean, over)?.resident_bytes
            - 2 * input.read_scratch_bytes();
        let g = Geometry::new(input.shape(), over)?;
        let mut req = self.request(
            format!(
                "column mean and std of {} {}",
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
        let mut mean_r = self.backend.reducer(Reduce::Mean, input.dtype(), g)?;
        let mut std_r = self.backend.reducer(std_op, input.dtype(), g)?;
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
        let shape = input.shape()[1..].to_vec();
        let mean = Array::from_bytes(DType::F64, shape.clone(), mean_r.into_bytes())?;
        let std = Array::from_bytes(DType::F64, shape.clone(), std_r.into_bytes())?;
        let what = format!("column mean and std of {}", input.path().display());
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
        check_not_input(out.as_ref(), &[input])?;
        if input.shape().len() < 2 {
            return Err(Error::invalid(format!(
                "standardize needs rank 2 or more (rows x columns), {} has shape {}",
                input.path().display(),
                fmt_shape(input.shape())
            )));
        }
        let od = dtype.unwrap_or(if input.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        });
        let journal = self.open_journal(out.as_ref())?;
        let (mean, std, stats_report) = self
            .column_stats_with(input, ddof, journal.as_ref())
            .map_err(|e| kept_if_interrupted(journal.as_ref(), e))?;
        if let Some(p) = stats {
            write_npz(p, &[("mean", &mean), ("std", &std)])?;
        }
        let m = mean.to_f64();
        let sd = std.to_f64();
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
            (m.len() * 16) as u64,
            "mean and std".to_string(),
        );
        req.scratch_per_elem = 8;
        let stats = (m.len() * 16) as u64;
        self.on_device(&mut req, 0, 0, stats);
        let plan = Plan::new(&req)?;
        self.budget.reset_peak();
        let _resident = self.budget.reserve(
            "mean and std",
            plan.resident_bytes - input.read_scratch_bytes(),
        )?;
        let inputs = [InputStream::whole(input)];
        let backend = &self.backend;
        let xd = input.dtype();
        let (out, shape) = (out.as_ref(), input.shape());
        let params = ElementwiseParams::Standardize {
            mean: m.clone(),
            sd: sd.clone(),
        };
        let cuda = self.cuda_elementwise(Elementwise::Standardize, xd, od, &params, &plan)?;
        let times = match cuda {
            Some(k) => self.run_to_file_with(journal, &plan, &inputs, out, shape, od, 1, k),
            None => self.run_to_file_with(
                journal,
                &plan,
                &inputs,
                out,
                shape,
                od,
                1,
                self.kernel(|tile: crate::plan::Tile, ins: &[&[u8]], o: &mut [u8]| {
                    backend.standardize(ins[0], xd, tile.start, &m, &sd, o, od)
                }),
            ),
        }?;
        let op = format!("standardize {}", input.path().display());
        Ok((
            stats_report,
            self.report(&plan, op, input.shape(), input.shape(), od, times),
        ))
    }
}

/// A reduction on a device, resumable: the state a resumed pass found is restored
/// before the first tile, and after each tile the device's state is brought back and
/// checkpointed (which waits for the tile: the journal checkpoints small states after
/// every tile, so a resumable device reduction overlaps only reading with computing).
struct Checkpointed<'a> {
    k: &'a mut CudaReduce,
    journal: Option<&'a Journal>,
    restored: bool,
}

impl TileKernel<crate::plan::Tile> for Checkpointed<'_> {
    fn staged_inputs(&self) -> bool {
        true
    }

    fn alloc_slot(&self, len: usize, reservation: Reservation) -> Result<Slot> {
        self.k.alloc_slot(len, reservation)
    }

    fn submit(&mut self, m: Morsel<crate::plan::Tile>) -> Result<Pending<crate::plan::Tile>> {
        let Some(j) = self.journal else {
            return (&mut *self.k).submit(m);
        };
        if !self.restored {
            self.restored = true;
            restore_reducers(Some(j), &mut [self.k.host_mut()])?;
            self.k.upload_state()?;
        }
        let index = m.tile().index;
        let pending = (&mut *self.k).submit(m)?;
        self.k.sync()?;
        checkpoint_reducers(Some(j), index, &[self.k.host_mut().as_ref()])?;
        Ok(pending)
    }
}

/// Restores `reducers` from the state a resumed pass found, once (the journal hands it
/// over only the first time), reading it straight into their buffers.
fn restore_reducers(
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
fn checkpoint_reducers(
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
