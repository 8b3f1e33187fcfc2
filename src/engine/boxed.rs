//! Element-wise runs in boxes cut along their output's chunks: how an element-wise run
//! (`map`, `cast`, `convert`, `affine`, `gen`, `standardize`'s second pass) encodes a
//! GeoTIFF or Zarr output as it writes it
//! when the budget cannot hold what its flat plan needs for that (a whole row of the
//! output's tiles or chunks, [`Engine::plan_writing`]).
//!
//! A flat plan's tiles are runs of consecutive elements: a row of output chunks fills
//! before any chunk of it is complete. Here the run visits boxes of whole output chunks
//! instead (the box planner of [`crate::tiling`] with no halo, asked to cut along the
//! output's chunk grid), so that the encoder holds only the chunks across one box. Each
//! input's window of a box is read into a compact buffer in the box's order, which is
//! the output's order too: the element-wise kernel runs on it unchanged, and the values
//! are those of the flat run, element for element. Kernels whose values depend on the
//! position (`gen`'s draws, `standardize`'s columns) run once per row of the box, at
//! the row's place in the output.

use std::path::Path;

use super::{Engine, Ran};
use crate::dtype::DType;
use crate::error::Result;
use crate::format::TensorFile;
use crate::layout::{Layout, Read, Write};
use crate::plan::Plan;
use crate::scheduler::{self, Hooks, InputStream, StageTimes};
use crate::tiling::{Boundary, BoxPlan, BoxRequest, BoxTile, Cuts, Halo, OutMap, Scratch};

/// The tiles of a box plan read from every input stream of an element-wise run: one
/// window per input, each at its stream's base, in the order of the streams; the bands
/// of each box visited together when the plan asks for it
/// ([`BoxPlan::bands_together`]).
struct StreamBoxes<'a> {
    plan: &'a BoxPlan,
    inputs: &'a [InputStream<'a>],
}

impl Layout for StreamBoxes<'_> {
    type Tile = BoxTile;
    fn num_tiles(&self) -> usize {
        self.plan.num_tiles
    }
    fn tile(&self, i: usize) -> BoxTile {
        if self.plan.bands_together() {
            self.plan.box_tile_bands_together(i)
        } else {
            self.plan.box_tile(i)
        }
    }
    fn reads(&self, t: &BoxTile, out: &mut Vec<Read>) {
        // no halo: one window of the box's rows, its columns read compact
        let mut one = Vec::with_capacity(1);
        self.plan.reads(t, &mut one);
        for (k, input) in self.inputs.iter().enumerate() {
            out.extend(one.iter().map(|r| Read {
                input: k,
                start: input.base + r.start,
                ..*r
            }));
        }
    }
    fn out_elems(&self, t: &BoxTile) -> u64 {
        self.plan.out_elems(t)
    }
    fn writes(&self, t: &BoxTile, out: &mut Vec<Write>) {
        self.plan.writes(t, out);
    }
    fn depth(&self) -> usize {
        self.plan.depth
    }
    fn window_bytes(&self) -> u64 {
        self.plan.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        Layout::out_slot_elems(self.plan)
    }
}

impl Engine {
    /// The box plan an element-wise run over `inputs` (element for element, of `shape`)
    /// writing `out` as `dtype` takes instead of its flat plan `flat`, when `flat`
    /// cannot encode the output as it writes it and boxes cut along the output's chunks
    /// can within the budget. `None` otherwise: for outputs other than GeoTIFF and Zarr,
    /// a flat plan that streams, shapes of rank other than 2 and 3, or a run on a GPU
    /// (whose kernels take flat tiles).
    ///
    /// # Errors
    /// [`crate::Error::Budget`] when the budget holds no box along the output's chunks
    /// (the output is then refused, not staged).
    pub(crate) fn elementwise_boxes(
        &self,
        flat: &Plan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<BoxPlan>> {
        self.elementwise_boxes_holding(flat, inputs, out, shape, dtype, (0, ""))
    }

    /// [`Engine::elementwise_boxes`] of a run that also holds `held` (bytes, what they
    /// are) for its whole length (`standardize`'s mean and std).
    pub(crate) fn elementwise_boxes_holding(
        &self,
        flat: &Plan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
        held: (u64, &str),
    ) -> Result<Option<BoxPlan>> {
        let encoded = self.encodes(out);
        let dims = match *shape {
            [h, w] => [1, h, w],
            [b, h, w] => [b, h, w],
            _ => return Ok(None),
        };
        if !encoded
            || flat.output_bytes > 0
            || self.planning_device().is_some()
            || dims.contains(&0)
            || inputs.iter().any(|s| s.per_item != 1)
        {
            return Ok(None);
        }
        let candidates = self.box_out_chunks(out, shape, dtype, false);
        if candidates.is_empty() {
            return Ok(None);
        }
        // (each compressed file counted once, however many streams read it)
        let files: Vec<&TensorFile> = inputs.iter().map(|s| s.file).collect();
        let mut refused = None;
        // the compressed inputs' decode scratch sized from the whole budget, else smaller
        // so that the encoder has room: the files keep the sizing of the plan returned
        let limit = self.budget.limit();
        let scratch_limits = std::iter::once(limit).chain(self.scratch_fallbacks(&files, encoded));
        for scratch_limit in scratch_limits {
            let (mut resident_bytes, mut resident_what) =
                super::decode_scratch(scratch_limit, &files);
            if held.0 > 0 {
                super::hold(
                    &mut resident_bytes,
                    &mut resident_what,
                    held.0,
                    held.1.to_string(),
                );
            }
            let req = BoxRequest {
                what: format!("{} (in boxes along the output's chunks)", flat.what),
                dims,
                in_bytes: inputs.iter().map(|s| s.file.dtype().size() as u64).sum(),
                out_bytes: dtype.size() as u64,
                halo_rows: Halo::default(),
                halo_cols: Halo::default(),
                boundary: Boundary::Nearest,
                scratch: Scratch::default(),
                // every input's window has its page slack, beyond what one window counts
                resident_bytes: resident_bytes
                    + self.depth as u64 * inputs.len() as u64 * 2 * crate::format::page_size(),
                resident_what: if resident_what.is_empty() {
                    "page slack of each input's windows".to_string()
                } else {
                    format!("{resident_what}, page slack of each input's windows")
                },
                depth: self.depth,
                budget: limit,
                max_tile_bytes: self.max_tile_bytes,
                cuts: Cuts::Auto { prefer_rows: true },
                out: OutMap::Same,
                out_chunks: None,
            };
            // the first encoder (chunks in flight: many, then one) whose boxes fit, else
            // the refusal of the last (the output is not staged raw instead)
            for c in &candidates {
                match BoxPlan::new(&BoxRequest {
                    out_chunks: Some(c.clone()),
                    ..req.clone()
                }) {
                    Ok(p) if p.cut_along_out_chunks() => return Ok(Some(p)),
                    Ok(_) => {}
                    Err(e) => refused = Some(e),
                }
            }
        }
        match refused {
            Some(e) => Err(e.into()),
            None => Ok(None),
        }
    }

    /// Runs an element-wise `compute` (the tile, inputs of the tile in, its output out)
    /// over the boxes of `plan` ([`Engine::elementwise_boxes`]) into `out`, encoded as
    /// written. The inputs and the output of a box are its rows one after another:
    /// [`Layout::writes`] of `plan` says where each row is in the output, for a `compute`
    /// whose values depend on the position.
    ///
    /// # Errors
    /// As the flat run: [`crate::Error::Budget`], I/O errors, `compute`'s errors.
    pub(super) fn run_elementwise_boxes(
        &self,
        plan: &BoxPlan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
        compute: impl FnMut(&BoxTile, &[&[u8]], &mut [u8]) -> Result<()> + Send,
    ) -> Result<StageTimes> {
        let journal = self.open_journal(out)?;
        self.run_elementwise_boxes_with(journal, plan, inputs, out, shape, dtype, compute)
    }

    /// [`Engine::run_elementwise_boxes`] within a journal already open (a run of several
    /// passes, `standardize`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_elementwise_boxes_with(
        &self,
        journal: Option<crate::journal::Journal>,
        plan: &BoxPlan,
        inputs: &[InputStream<'_>],
        out: &Path,
        shape: &[usize],
        dtype: DType,
        mut compute: impl FnMut(&BoxTile, &[&[u8]], &mut [u8]) -> Result<()> + Send,
    ) -> Result<StageTimes> {
        let room = super::outputs::room_of_box(plan);
        let files: Vec<&TensorFile> = inputs.iter().map(|s| s.file).collect();
        let layout = StreamBoxes { plan, inputs };
        self.to_file_with(journal, out, shape, dtype, room, |output, journal| {
            let hooks = Hooks {
                journal,
                ..self.hooks()
            };
            let kernel = self.kernel(|t: BoxTile, ins: &[&[u8]], o: &mut [u8]| compute(&t, ins, o));
            scheduler::run_layout(&layout, &files, &self.budget, Some(output), hooks, kernel)
        })
    }

    /// The report of an element-wise run over the boxes of `plan` (same shape in and
    /// out), computed on the CPU.
    pub(super) fn report_boxes(
        &self,
        plan: &BoxPlan,
        op: Ran,
        shape: &[usize],
        dtype: DType,
        times: StageTimes,
    ) -> super::RunReport {
        let tiles = (plan.num_tiles, vec![plan.tile.0, plan.tile.1], plan.depth);
        self.report_tiles(tiles, op, shape, shape, dtype, times)
    }
}

/// A box plan's tiles reordered position-major (the bands of one tile position one
/// after another), everything else as the plan says: one patch file can be written as
/// soon as its last band is read, and one decode of a pixel-interleaved chunk serves all
/// its bands.
pub(super) struct BandsTogether<'a> {
    pub(super) plan: &'a BoxPlan,
}

impl scheduler::Layout for BandsTogether<'_> {
    type Tile = BoxTile;
    fn num_tiles(&self) -> usize {
        self.plan.num_tiles
    }
    fn tile(&self, i: usize) -> BoxTile {
        self.plan.box_tile_bands_together(i)
    }
    fn reads(&self, t: &BoxTile, out: &mut Vec<scheduler::Read>) {
        scheduler::Layout::reads(self.plan, t, out);
    }
    fn out_elems(&self, t: &BoxTile) -> u64 {
        scheduler::Layout::out_elems(self.plan, t)
    }
    fn writes(&self, t: &BoxTile, out: &mut Vec<scheduler::Write>) {
        scheduler::Layout::writes(self.plan, t, out);
    }
    fn depth(&self) -> usize {
        self.plan.depth
    }
    fn window_bytes(&self) -> u64 {
        self.plan.window_bytes
    }
    fn out_slot_elems(&self) -> u64 {
        scheduler::Layout::out_slot_elems(self.plan)
    }
}
