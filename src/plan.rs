//! The planner: pure arithmetic (no I/O) that turns an operation's shapes, element sizes,
//! resident bytes, pipeline depth and memory budget into tiles.
//!
//! Tiles are boxes that are contiguous in C order: blocks of whole rows of the leading
//! axis when one such row fits, otherwise single leading rows split along axis 1, and so
//! on down to runs of the last axis. Every tile is therefore one contiguous byte range of
//! each input file (one mapped window) and of the output (one positioned write).
//!
//! Budget arithmetic, with `depth` staging slots each holding one tile's input windows
//! and output buffer:
//!
//! ```text
//! reserved = resident + depth × (tile_elems × (in_bytes + out_bytes) + inputs × page_slack)
//! ```
//!
//! The largest tile that keeps `reserved <= budget` is taken, capped at
//! [`PlanRequest::max_tile_bytes`] (bigger tiles do not make streaming faster, they only
//! make the pipeline coarser), then evened out so the last tile is not a sliver.

use std::fmt;

use crate::budget::{BudgetError, fmt_bytes};
use crate::shape::fmt_shape;

/// Smallest tile the planner will make, in elements (or the whole tensor if smaller).
pub const MIN_TILE_ELEMS: u64 = 1024;

/// Default cap on one tile's staging bytes (inputs + output), on either device. On an
/// H200 (2026-11-28) 16 MiB tiles ran four of the GPU benchmark's tasks faster than 64
/// MiB ones and the other two within 1% (a column mean's engine time 0.26 s against
/// 0.40 s: smaller tiles keep the read stage, the copy and the kernels overlapped; each
/// tile's launches and synchronisations cost tens of microseconds, under a percent of
/// its copy).
pub const DEFAULT_MAX_TILE_BYTES: u64 = 16 << 20;

/// Default pipeline depth (staging slots).
pub const DEFAULT_DEPTH: usize = 3;

/// What the planner is asked to plan.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// Human description of the operation, used in the plan and in errors.
    pub what: String,
    /// Shape of the iteration space (the streamed input's shape, or the output's for
    /// generators).
    pub shape: Vec<usize>,
    /// Sum of the element sizes of the streamed inputs.
    pub in_bytes_per_elem: u64,
    /// Number of streamed inputs (each costs page slack per window).
    pub inputs: usize,
    /// Staging-buffer bytes of output per element (0 when the result stays resident).
    pub out_bytes_per_elem: u64,
    /// Bytes held for the whole run (accumulators, result, resident operands).
    pub resident_bytes: u64,
    /// Scratch bytes per element of the tile being computed (one tile at a time).
    pub scratch_per_elem: u64,
    /// What the resident bytes are, for the printout.
    pub resident_what: String,
    /// Staging slots in the pipeline.
    pub depth: usize,
    /// The memory budget in bytes.
    pub budget: u64,
    /// Cap on one tile's staging bytes.
    pub max_tile_bytes: u64,
    /// Page slack per mapped window (two pages: alignment at both ends).
    pub window_slack: u64,
    /// Smallest tile, in elements of `shape` (default [`MIN_TILE_ELEMS`]; 1 when an element
    /// of the plan is a whole row, as for matmul).
    pub min_tile: u64,
    /// When a device computes: what its memory must hold, a second budget the tiles are
    /// sized for.
    pub device: Option<DeviceFit>,
    /// Whether an input is decoded chunk by chunk (GeoTIFF, Zarr): a kernel that stages
    /// its inputs (a device's) then holds one decoded window besides its slots, which
    /// the engine counts when it places the run on the device.
    pub chunked_inputs: bool,
    /// `Some(t)` for an output whose chunks hold every band (axis 0) of a region `t`
    /// rows high (a pixel-interleaved GeoTIFF's tiles): tiles never span two bands,
    /// tiles cut along rows have a height dividing `t` (so that none straddles two rows
    /// of chunks), and the plan visits the bands of each position one after another
    /// ([`Plan::bands_inner`]), so that the output's chunks fill one row of chunks at a
    /// time. Ignored below rank 3.
    pub bands_inner: Option<usize>,
    /// `Some(t)` when an input of the plan's shape is decoded in chunks `t` rows high
    /// (the second-to-last axis): tiles cut along rows are then a multiple of `t` rows
    /// high, or a divisor of `t`, where that costs at most half the rows the budget
    /// allows, so that no tile straddles two rows of chunks and each chunk is decoded
    /// once whatever the cache holds. Ignored when [`bands_inner`](Self::bands_inner)
    /// is set (an output's chunks come first).
    pub chunk_rows: Option<usize>,
}

/// What a run needs of a device's own memory: every buffer is allocated once, before
/// the first tile, so a plan whose tiles fit here cannot run out of device memory halfway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFit {
    /// The device memory budget in bytes.
    pub budget: u64,
    /// Bytes held on the device for the whole run (resident operands, carried state).
    pub resident_bytes: u64,
    /// Device bytes per element of a tile, for each stream (its tile buffers).
    pub bytes_per_elem: u64,
    /// Fixed device bytes of each stream.
    pub per_stream: u64,
}

/// The rows a tile takes, `k` at most, aligned to chunks `t` rows high: a multiple of
/// `t` (at least `t`), or a divisor of `t` of at least half of `k`; `k` when neither is.
fn chunk_aligned(k: u64, t: u64) -> u64 {
    if k >= t {
        k / t * t
    } else {
        (k.div_ceil(2).max(1)..=k)
            .rev()
            .find(|r| t.is_multiple_of(*r))
            .unwrap_or(k)
    }
}

/// A tile: the flat C-order element range `[start, start + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    /// Position in the plan's order.
    pub index: usize,
    /// First element (flat index).
    pub start: u64,
    /// Number of elements.
    pub len: u64,
}

/// The result of planning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Human description of the operation.
    pub what: String,
    /// Shape of the iteration space.
    pub shape: Vec<usize>,
    /// Axis along which tiles are cut (axes before it have extent 1 in a tile).
    pub split_axis: usize,
    /// Extent of a full tile along `split_axis`.
    pub extent: usize,
    /// Shape of a full tile.
    pub tile_shape: Vec<usize>,
    /// Number of tiles.
    pub num_tiles: usize,
    /// Elements of a full tile.
    pub tile_elems: u64,
    /// Bytes of input windows per slot (all inputs, page slack included).
    pub window_bytes: u64,
    /// Bytes of output staging buffer per slot.
    pub out_buffer_bytes: u64,
    /// Bytes held for the whole run.
    pub resident_bytes: u64,
    /// What the resident bytes are.
    pub resident_what: String,
    /// Staging slots.
    pub depth: usize,
    /// Total bytes the run will reserve at most.
    pub reserved_bytes: u64,
    /// Bytes of `resident_bytes` set aside for encoding the output as it is written (a
    /// GeoTIFF strip of tiles), reserved by the output rather than by the run.
    pub output_bytes: u64,
    /// The budget.
    pub budget: u64,
    /// What runs after the tiles, within the same budget once they are done (building a
    /// Cloud-Optimized GeoTIFF's overviews): shown last.
    pub after: Option<String>,
    /// The tiles visit the bands (axis 0) of each position one after another: tile `i`
    /// is the tile `i / bands` of band `i % bands`.
    pub bands_inner: bool,
    /// How the tiles are cut, in a plan's printout, where it is not by the rule above
    /// (a Fortran-order file's panels of columns); `None` for that rule.
    pub cut: Option<String>,
}

impl Plan {
    #[doc(hidden)]
    /// Plans `req`.
    ///
    /// # Errors
    /// [`BudgetError::TooSmall`] if the budget cannot hold the resident bytes plus `depth`
    /// slots of the smallest tile; the error spells out the arithmetic and the smallest
    /// budget that works.
    pub fn new(req: &PlanRequest) -> Result<Plan, BudgetError> {
        let depth = req.depth.max(1) as u64;
        let total: u64 = req.shape.iter().map(|&d| d as u64).product();
        let per_elem = (req.in_bytes_per_elem + req.out_bytes_per_elem).max(1);
        let slack = req.inputs as u64 * req.window_slack;
        let min_elems = total.clamp(1, req.min_tile.max(1));
        let scratch = req.scratch_per_elem;
        let min_needed =
            req.resident_bytes + depth * (min_elems * per_elem + slack) + min_elems * scratch;
        if min_needed > req.budget {
            let mut arithmetic = format!(
                "{depth} staging slots × ({min_elems} elements × {per_elem} B{})",
                if slack > 0 {
                    format!(" + {} page slack", fmt_bytes(slack))
                } else {
                    String::new()
                }
            );
            if scratch > 0 {
                arithmetic.push_str(&format!(" + {min_elems} elements × {scratch} B of scratch"));
            }
            if req.resident_bytes > 0 {
                arithmetic.push_str(&format!(
                    " + {} of {}",
                    fmt_bytes(req.resident_bytes),
                    req.resident_what
                ));
            }
            return Err(BudgetError::TooSmall {
                what: req.what.clone(),
                arithmetic,
                needed: min_needed,
                limit: req.budget,
            });
        }
        let mut device_cap = u64::MAX;
        if let Some(d) = req.device {
            // the device holds one set of tile buffers per stream (= staging slot)
            let fixed = d.resident_bytes + depth * d.per_stream;
            let per = depth * d.bytes_per_elem.max(1);
            let needed = fixed + min_elems * per;
            if needed > d.budget {
                return Err(BudgetError::DeviceTooSmall {
                    what: req.what.clone(),
                    arithmetic: format!(
                        "{depth} streams × ({} + {min_elems} elements × {} B) + {} held for the run",
                        fmt_bytes(d.per_stream),
                        d.bytes_per_elem,
                        fmt_bytes(d.resident_bytes)
                    ),
                    needed,
                    limit: d.budget,
                });
            }
            device_cap = (d.budget - fixed) / per;
        }
        let avail = req.budget - req.resident_bytes - depth * slack;
        let max_elems = (avail / (depth * per_elem + scratch))
            .min((req.max_tile_bytes / per_elem).max(min_elems))
            .min(device_cap)
            .max(min_elems);

        let rank = req.shape.len();
        let bands_inner = req.bands_inner.filter(|_| rank >= 3 && req.shape[0] > 1);
        let (split_axis, extent, num_tiles) = if total == 0 {
            (0, 0, 0)
        } else if rank == 0 {
            (0, 1, 1)
        } else {
            let mut chosen = (rank - 1, 1usize, 0usize);
            for a in usize::from(bands_inner.is_some())..rank {
                let sub: u64 = req.shape[a + 1..].iter().map(|&d| d as u64).product();
                if sub <= max_elems {
                    let d = req.shape[a] as u64;
                    let k = (max_elems / sub).clamp(1, d);
                    // even the tiles out: same count, sizes differing by at most one row
                    let n_along = d.div_ceil(k);
                    let mut k = d.div_ceil(n_along);
                    if let (Some(t), 1) = (bands_inner, a) {
                        // rows dividing the chunks' height: no tile straddles two
                        let t = t.max(1) as u64;
                        k = (1..=k.min(t))
                            .rev()
                            .find(|r| t.is_multiple_of(*r))
                            .unwrap_or(1);
                    } else if let Some(t) = req.chunk_rows.filter(|_| a + 2 == rank) {
                        k = chunk_aligned(k, t.max(1) as u64);
                    }
                    let n_along = d.div_ceil(k);
                    let outer: u64 = req.shape[..a].iter().map(|&x| x as u64).product();
                    chosen = (a, k as usize, (outer * n_along) as usize);
                    break;
                }
            }
            chosen
        };
        let tile_shape: Vec<usize> = if rank == 0 {
            vec![]
        } else {
            (0..rank)
                .map(|a| match a.cmp(&split_axis) {
                    std::cmp::Ordering::Less => 1,
                    std::cmp::Ordering::Equal => extent,
                    std::cmp::Ordering::Greater => req.shape[a],
                })
                .collect()
        };
        let tile_elems: u64 = if total == 0 {
            0
        } else {
            tile_shape.iter().map(|&d| d as u64).product()
        };
        let window_bytes = if req.inputs == 0 {
            0
        } else {
            tile_elems * req.in_bytes_per_elem + slack
        };
        let out_buffer_bytes = tile_elems * req.out_bytes_per_elem;
        let slots = depth.min(num_tiles.max(1) as u64);
        let reserved_bytes =
            req.resident_bytes + slots * (window_bytes + out_buffer_bytes) + tile_elems * scratch;
        Ok(Plan {
            what: req.what.clone(),
            shape: req.shape.clone(),
            split_axis,
            extent,
            tile_shape,
            num_tiles,
            tile_elems,
            window_bytes,
            out_buffer_bytes,
            resident_bytes: req.resident_bytes,
            resident_what: req.resident_what.clone(),
            depth: depth as usize,
            reserved_bytes,
            output_bytes: 0,
            budget: req.budget,
            after: None,
            bands_inner: bands_inner.is_some() && num_tiles > 0,
            cut: None,
        })
    }

    #[doc(hidden)]
    /// The `i`-th tile: in C order of the tiled space, or with the bands inner
    /// ([`Plan::bands_inner`]).
    #[must_use]
    pub fn tile(&self, i: usize) -> Tile {
        if self.shape.is_empty() {
            return Tile {
                index: 0,
                start: 0,
                len: 1,
            };
        }
        let a = self.split_axis;
        let d = self.shape[a] as u64;
        let sub: u64 = self.shape[a + 1..].iter().map(|&x| x as u64).product();
        let n_along = d.div_ceil(self.extent as u64);
        // the tile in C order of the tiled space
        let j = if self.bands_inner {
            let bands = self.shape[0] as u64;
            let per_band = self.num_tiles as u64 / bands;
            (i as u64 % bands) * per_band + i as u64 / bands
        } else {
            i as u64
        };
        let outer = j / n_along;
        let c = j % n_along;
        let first = c * self.extent as u64;
        let rows = (self.extent as u64).min(d - first);
        Tile {
            index: i,
            start: outer * d * sub + first * sub,
            len: rows * sub,
        }
    }

    #[doc(hidden)]
    /// All tiles in order.
    pub fn tiles(&self) -> impl Iterator<Item = Tile> + '_ {
        (0..self.num_tiles).map(|i| self.tile(i))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "plan:           {}", self.what)?;
        if self.num_tiles == 0 {
            return writeln!(f, "tiles:          none (the tensor is empty)");
        }
        let last = self.tile(self.num_tiles - 1);
        let cut = if let Some(c) = &self.cut {
            c.clone()
        } else if self.split_axis == 0 {
            "leading-axis row blocks".to_string()
        } else {
            format!(
                "one leading row does not fit: split along axis {}",
                self.split_axis
            )
        };
        writeln!(
            f,
            "tiles:          {} of {} ({cut}); last tile {} elements",
            self.num_tiles,
            fmt_shape(&self.tile_shape),
            last.len
        )?;
        if self.bands_inner {
            writeln!(
                f,
                "order:          the bands of each position one after another (chunks that \
                 hold every band)"
            )?;
        }
        writeln!(f, "halo:           none")?;
        writeln!(
            f,
            "per stage:      read windows {} | compute in place | write buffer {}",
            fmt_bytes(self.window_bytes),
            fmt_bytes(self.out_buffer_bytes)
        )?;
        write_budget_lines(
            f,
            self.depth,
            (self.resident_bytes, &self.resident_what),
            self.reserved_bytes,
            self.budget,
        )?;
        write_after(f, self.after.as_deref())
    }
}

/// The line of a plan printout for what runs after the tiles, if anything does.
pub(crate) fn write_after(f: &mut fmt::Formatter<'_>, after: Option<&str>) -> fmt::Result {
    match after {
        // the budget lines end without a newline (the caller's println! ends them)
        Some(a) => write!(f, "\nafter the run:  {a}"),
        None => Ok(()),
    }
}

/// The last lines of a plan printout: slots, resident bytes, reserved against the budget.
pub(crate) fn write_budget_lines(
    f: &mut fmt::Formatter<'_>,
    depth: usize,
    (resident, what): (u64, &str),
    reserved: u64,
    budget: u64,
) -> fmt::Result {
    writeln!(f, "staging slots:  {depth} (pipeline depth)")?;
    let note = if resident > 0 {
        format!(" ({what})")
    } else {
        String::new()
    };
    writeln!(f, "resident:       {}{note}", fmt_bytes(resident))?;
    write!(
        f,
        "reserved:       {} of {} budget ({:.1}%)",
        fmt_bytes(reserved),
        fmt_bytes(budget),
        100.0 * reserved as f64 / budget as f64
    )
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn request(
        shape: Vec<usize>,
        in_b: u64,
        out_b: u64,
        resident: u64,
        depth: usize,
        budget: u64,
    ) -> PlanRequest {
        PlanRequest {
            what: "property".into(),
            shape,
            in_bytes_per_elem: in_b,
            inputs: 1 + (in_b as usize % 2),
            out_bytes_per_elem: out_b,
            resident_bytes: resident,
            scratch_per_elem: in_b % 3,
            resident_what: "accumulators".into(),
            depth,
            budget,
            max_tile_bytes: DEFAULT_MAX_TILE_BYTES,
            window_slack: 8192,
            min_tile: MIN_TILE_ELEMS,
            device: None,
            chunked_inputs: false,
            bands_inner: None,
            // chunks of 1 to 37 rows for half the requests
            chunk_rows: in_b.is_multiple_of(2).then_some((budget % 37 + 1) as usize),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

        /// Every plan stays within its budget and covers every element exactly once, in
        /// order; every refusal names a budget that then plans.
        #[test]
        fn plans_fit_the_budget_and_cover_every_element_once(
            shape in prop::collection::vec(0usize..300, 1..4),
            in_b in 1u64..9,
            out_b in 0u64..9,
            resident in 0u64..(1 << 20),
            depth in 1usize..5,
            budget in (1u64 << 10)..(64 << 20),
        ) {
            let req = request(shape, in_b, out_b, resident, depth, budget);
            match Plan::new(&req) {
                Ok(p) => {
                    prop_assert!(p.reserved_bytes <= budget, "{} > {budget}", p.reserved_bytes);
                    let total: u64 = p.shape.iter().map(|&d| d as u64).product();
                    let mut next = 0;
                    for t in p.tiles() {
                        prop_assert_eq!(t.start, next);
                        prop_assert!(t.len > 0 && t.len <= p.tile_elems);
                        next += t.len;
                    }
                    prop_assert_eq!(next, total);
                    prop_assert!(p.num_tiles as u64 <= total.max(1));
                }
                Err(BudgetError::TooSmall { needed, limit, .. }) => {
                    prop_assert_eq!(limit, budget);
                    prop_assert!(needed > budget);
                    let again = Plan::new(&PlanRequest { budget: needed, ..req });
                    prop_assert!(again.is_ok(), "the suggested {needed} does not plan: {again:?}");
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }

        /// With a device budget too, the tile buffers of every stream fit the device:
        /// tiles shrink for it, and a refusal names a device budget that then plans.
        #[test]
        fn plans_fit_the_device_budget_too(
            shape in prop::collection::vec(1usize..300, 1..4),
            in_b in 1u64..9,
            out_b in 0u64..9,
            depth in 1usize..5,
            device in (1u64 << 10)..(8 << 20),
            dev_resident in 0u64..(1 << 16),
            per_stream in 0u64..(1 << 12),
            extra in 0u64..5,
        ) {
            let mut req = request(shape, in_b, out_b, 0, depth, 64 << 20);
            req.device = Some(DeviceFit {
                budget: device,
                resident_bytes: dev_resident,
                bytes_per_elem: in_b + out_b + extra,
                per_stream,
            });
            match Plan::new(&req) {
                Ok(p) => {
                    let d = req.device.unwrap();
                    let used = d.resident_bytes
                        + p.depth as u64 * (d.per_stream + p.tile_elems * d.bytes_per_elem);
                    prop_assert!(used <= device, "{used} > {device}");
                }
                Err(BudgetError::DeviceTooSmall { needed, limit, .. }) => {
                    prop_assert_eq!(limit, device);
                    prop_assert!(needed > device);
                    let mut again = req.clone();
                    again.device = Some(DeviceFit { budget: needed, ..req.device.unwrap() });
                    prop_assert!(Plan::new(&again).is_ok(), "the suggested {needed} does not plan");
                }
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }
    }
}
