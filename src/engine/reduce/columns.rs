//! A reduction of the leading axis of a Fortran-order matrix, read in the file's own
//! order: each of its columns is one contiguous run of the file, so tiles are whole
//! columns (one mapped window for the tile) or long runs of rows of a panel of columns
//! (a window each), and the reducer takes them column by column
//! ([`TileReducer::feed_columns`]) with the operations it applies to the rows in C order. The result is the bytes the C-order file of the same values gives, without
//! the transpose a C-order read of such a file costs (each chunk of rows put in C order
//! first, `crate::format::npy::chunks`).

use super::super::{Array, Engine, Ran, RunReport};
use super::{checkpoint_reducers, refuse_no_position, restore_reducers};
use crate::backend::Family;
use crate::error::{Error, Result};
use crate::format::{TensorFile, Touch, fmt_shape, page_size};
use crate::journal::Journal;
use crate::layout::{Layout, Read, Write};
use crate::ops::reduce::{Geometry, Reduce, ReduceOver, column_partials_bytes};
use crate::plan::Plan;
use crate::scheduler;

/// The fewest bytes of a column's run worth a window of its own, unless the run is the
/// whole column.
const MIN_RUN_BYTES: u64 = 16 << 10;

/// The most columns in a tile: each is a mapped window of its own, and a slot's windows
/// must stay well under the kernel's limit on a process's mappings (65530 by default).
const MAX_PANEL: usize = 4096;

/// One tile: rows `row..row + rows` of columns `c0..c0 + cols`, one window of the file
/// (`joined`: whole columns, one after another) or one per column.
#[derive(Clone, Copy, Debug)]
pub(super) struct ColumnTile {
    /// Index in plan order.
    index: usize,
    c0: usize,
    cols: usize,
    row: u64,
    rows: u64,
    joined: bool,
}

/// The tiles of a column-by-column reduction: panels of `panel` columns, each read in
/// runs of `rows` rows (a multiple of the reduction's block rows, so each tile holds
/// whole summation blocks but at the end), panel after panel. Where a tile holds whole
/// columns of the file, its columns are one run of the file, read as one window
/// (`joined`).
struct ColumnPlan {
    /// Columns and rows of the tensor.
    cols: usize,
    rows: u64,
    /// The file's rows (the stride between two columns' runs) and the tensor's first.
    file_rows: u64,
    row0: u64,
    panel: usize,
    tile_rows: u64,
    es: u64,
    depth: usize,
    joined: bool,
}

impl ColumnPlan {
    fn row_tiles(&self) -> usize {
        self.rows.div_ceil(self.tile_rows) as usize
    }
}

impl Layout for ColumnPlan {
    type Tile = ColumnTile;
    fn num_tiles(&self) -> usize {
        self.cols.div_ceil(self.panel) * self.row_tiles()
    }
    fn tile(&self, i: usize) -> ColumnTile {
        let (p, j) = (i / self.row_tiles(), i % self.row_tiles());
        let c0 = p * self.panel;
        let row = j as u64 * self.tile_rows;
        ColumnTile {
            index: i,
            c0,
            cols: self.panel.min(self.cols - c0),
            row,
            rows: self.tile_rows.min(self.rows - row),
            joined: self.joined,
        }
    }
    fn reads(&self, t: &ColumnTile, out: &mut Vec<Read>) {
        if t.joined {
            // whole columns of the file, one after another
            out.push(Read {
                input: 0,
                start: t.c0 as u64 * self.file_rows,
                len: t.cols as u64 * self.file_rows,
                touch: Touch::All,
            });
            return;
        }
        // each column's run of the tile's rows: one mapped window of the raw (columns,
        // file rows) view each
        out.extend((t.c0..t.c0 + t.cols).map(|c| Read {
            input: 0,
            start: c as u64 * self.file_rows + self.row0 + t.row,
            len: t.rows,
            touch: Touch::All,
        }));
    }
    fn out_elems(&self, _: &ColumnTile) -> u64 {
        0
    }
    fn writes(&self, _: &ColumnTile, _: &mut Vec<Write>) {}
    fn depth(&self) -> usize {
        self.depth
    }
    fn window_bytes(&self) -> u64 {
        // each window mapped from the page boundary before it to the one after
        if self.joined {
            self.panel as u64 * self.tile_rows * self.es + 2 * page_size()
        } else {
            self.panel as u64 * (self.tile_rows * self.es + 2 * page_size())
        }
    }
    fn out_slot_elems(&self) -> u64 {
        0
    }
}

/// A column-by-column reduction as planned: the raw view of the file's columns, its
/// tiles, the bytes held for the whole run and the plan as `tilestream plan` shows it.
pub(super) struct Columns {
    raw: TensorFile,
    layout: ColumnPlan,
    resident: u64,
    pub(super) plan: Plan,
}

impl Engine {
    /// The plan of [`Engine::reduce`] of a two-dimensional Fortran-order `.npy` input of
    /// native byte order over its leading axis, column by column in the file's order,
    /// on the CPU; `None` where that does not apply (another input, axis or reduction, a
    /// device, a budget that holds no block of one column beside the result), and the
    /// rows are read in C order.
    ///
    /// # Errors
    /// As [`Engine::plan_reduce`].
    pub(super) fn plan_columns(
        &self,
        input: &TensorFile,
        op: Reduce,
        over: ReduceOver,
    ) -> Result<Option<Columns>> {
        let shape = input.shape();
        // a device (or a simulated one, whose plans mirror a device's) reads in C order
        if over != ReduceOver::Axis(0)
            || shape.len() != 2
            || input.dtype().is_complex()
            || input.info().is_empty()
            || self.planning_device().is_some()
            || super::super::on_gpu(self.kernels_for(Family::Reduce))
        {
            return Ok(None);
        }
        let g = Geometry::new(shape, over)?;
        op.check_over(over)?;
        // one output per column, whose blocks the host reducer merges as it goes
        if g.outer != 1 || g.inner < 2 || g.folds() {
            return Ok(None);
        }
        let Some((raw, row0)) = input.fortran_columns()? else {
            return Ok(None);
        };
        let dtype = input.dtype();
        let (rows, cols) = (shape[0] as u64, shape[1]);
        let file_rows = raw.shape()[1] as u64;
        let b = g.block_rows();
        let es = dtype.size() as u64;
        // the result, the accumulators (totals, open blocks, shifts) and the partials of
        // the blocks of a tile
        let acc = op.acc_bytes(dtype, input.missing().is_some());
        let result = g.out_per_outer() * op.output_dtype(dtype).size() as u64;
        let resident =
            result + 2 * g.vcols() as u64 * (acc as u64 + 8) + column_partials_bytes(cols, acc);
        let depth = self.depth.max(1);
        let room = self
            .budget
            .limit()
            .saturating_sub(self.budget.reserved() + resident);
        let tile = (room / depth as u64).min(self.max_tile_bytes);
        // The longest runs the tile holds (whole blocks: the reducer accumulates blocks in
        // parallel, whatever the columns), as many columns of them as fit. Long runs are
        // few windows: each costs its map and unmap, and a window of whole 2 MiB pages of
        // the page cache is mapped a large page at a time. Where runs are whole columns of
        // the file, a tile's columns are one window.
        let slack = 2 * page_size();
        let joined_rows = rows == file_rows;
        let fit = tile.saturating_sub(slack) / es;
        let tile_rows = if fit >= rows { rows } else { fit / b * b };
        if tile_rows == 0 {
            return Ok(None);
        }
        let panel = if joined_rows && tile_rows == rows {
            (fit / rows).min(cols as u64) as usize
        } else {
            (tile / (tile_rows * es + slack)).clamp(1, cols.min(MAX_PANEL) as u64) as usize
        };
        // runs of a few pages that are not whole columns cost more in windows than they
        // read: the C-order read then
        if tile_rows < rows && tile_rows * es < MIN_RUN_BYTES {
            return Ok(None);
        }
        let layout = ColumnPlan {
            cols,
            rows,
            file_rows,
            row0,
            panel,
            tile_rows,
            es,
            depth,
            joined: joined_rows && tile_rows == rows && panel > 1,
        };
        let num_tiles = layout.num_tiles();
        let window_bytes = layout.window_bytes();
        let plan = Plan {
            what: format!(
                "{} over axis 0 of {} {} (Fortran order: read column by column)",
                op.name(),
                fmt_shape(shape),
                dtype
            ),
            // panels of columns, each cut into runs of rows: tile i is run i % runs of
            // panel i / runs
            shape: vec![cols.div_ceil(panel), rows as usize, panel],
            split_axis: 1,
            extent: layout.tile_rows as usize,
            tile_shape: vec![layout.tile_rows as usize, panel],
            num_tiles,
            tile_elems: layout.tile_rows * panel as u64,
            window_bytes,
            out_buffer_bytes: 0,
            resident_bytes: resident,
            resident_what: "reduction result and accumulators".into(),
            depth,
            reserved_bytes: resident + depth.min(num_tiles) as u64 * window_bytes,
            output_bytes: 0,
            budget: self.budget.limit(),
            after: None,
            bands_inner: false,
            cut: Some(if layout.joined {
                format!("whole columns, {panel} at a time: each tile one run of the file")
            } else {
                format!(
                    "runs of rows of {} column{} at a time, each column one run of the file",
                    panel,
                    if panel == 1 { "" } else { "s" }
                )
            }),
        };
        Ok(Some(Columns {
            raw,
            layout,
            resident,
            plan,
        }))
    }

    /// Runs the reduction [`Engine::plan_columns`] planned (resumable through `journal`
    /// as the C-order read is): each tile's runs fed to the reducer column by column.
    ///
    /// # Errors
    /// As [`Engine::reduce`].
    pub(super) fn reduce_by_columns(
        &self,
        input: &TensorFile,
        op: Reduce,
        columns: Columns,
        journal: Option<&Journal>,
    ) -> Result<(Array, RunReport)> {
        let Columns {
            raw,
            layout,
            resident,
            plan,
        } = columns;
        let shape = input.shape();
        let over = ReduceOver::Axis(0);
        let dtype = input.dtype();
        let g = Geometry::new(shape, over)?;
        let mut reducer = self.backend.reducer(op, dtype, g, input.missing())?;
        if !reducer.takes_columns() {
            return Err(Error::Internal(format!(
                "the host's {} reducer does not take columns",
                op.name()
            )));
        }
        self.budget.reset_peak();
        let _resident = self.budget.reserve(&plan.resident_what, resident)?;
        let kernel = self.kernel(|t: ColumnTile, ins: &[&[u8]], _: &mut [u8]| {
            // a resumed run's state, once, before its first tile
            restore_reducers(journal, &mut [&mut reducer])?;
            if t.joined {
                // one window of whole columns: each column a run of it
                let run = t.rows as usize * dtype.size();
                let runs: Vec<&[u8]> = ins[0].chunks_exact(run).collect();
                reducer.feed_columns(t.c0, t.row, &runs);
            } else {
                reducer.feed_columns(t.c0, t.row, ins);
            }
            checkpoint_reducers(journal, t.index, &[reducer.as_ref()])
        });
        let mut hooks = self.hooks();
        hooks.journal = journal;
        let times = scheduler::run_layout(&layout, &[&raw], &self.budget, None, hooks, kernel)?;
        // a resumed run with every tile done never called the closure
        restore_reducers(journal, &mut [&mut reducer])?;
        reducer.finish_columns();
        let out_dtype = op.output_dtype(dtype);
        let out_shape = over.out_shape(shape);
        let array = Array::from_bytes(out_dtype, out_shape.clone(), reducer.into_bytes())?;
        refuse_no_position(op, &array)?;
        let report = self.report(
            &plan,
            Ran::cpu(Family::Reduce, plan.what.clone()),
            shape,
            &out_shape,
            out_dtype,
            times,
        );
        Ok((array, report))
    }
}
