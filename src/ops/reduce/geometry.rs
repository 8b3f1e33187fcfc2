//! Where each element of a reduction goes: the `(outer, len, inner)` view of the reduced
//! axes, the summation blocks, the lanes and the folded columns (see the parent module's
//! notes), fixed by the shape alone.

use super::ReduceOver;
use crate::error::{Error, Result};

/// Lanes used when the reduced axis is the last one.
const LANES: usize = 8;
/// Target elements per summation block.
pub(crate) const BLOCK_ELEMS: u64 = 1 << 17;
/// At or above this many virtual columns, a tile's segments run one after another with
/// the columns split across threads (no scratch); below, whole blocks run in parallel.
pub(crate) const WIDE: usize = 1024;

/// The most block partials a reducer fed column by column
/// ([`super::TileReducer::feed_columns`]) holds at once, or one per column where there
/// are more columns: its whole blocks are accumulated in parallel, a window of them at a
/// time.
pub(crate) const COLUMN_PARTIALS: usize = 4096;

/// Bytes a reducer fed column by column holds beside its state while it takes a tile of
/// `cols` columns: the partials of a window of whole blocks, `acc` bytes each.
#[must_use]
pub(crate) fn column_partials_bytes(cols: usize, acc: usize) -> u64 {
    (COLUMN_PARTIALS.max(cols) * acc) as u64
}

/// Most runs of reduced and kept axes after the first reduced one (see the module's notes).
const MAX_RUNS: usize = 12;

/// The columns of a reduction over several separated axes: the lengths of the runs of
/// axes after the first reduced run, alternately kept and reduced (kept first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fold {
    runs: [u64; MAX_RUNS],
    n: usize,
}

impl Fold {
    fn runs(&self) -> &[u64] {
        &self.runs[..self.n]
    }

    /// The output (among an outer index's) of column `col`, and the first column of that
    /// output (its reduced coordinates 0).
    fn of(&self, col: u64) -> (u64, u64) {
        let (mut out, mut first) = (0, 0);
        let mut rem = col;
        let mut scale = 1;
        let mut out_scale = 1;
        for (k, &len) in self.runs().iter().enumerate().rev() {
            let c = rem % len.max(1);
            rem /= len.max(1);
            if k % 2 == 0 {
                out += c * out_scale;
                out_scale *= len;
                first += c * scale;
            }
            scale *= len;
        }
        (out, first)
    }

    /// Outputs per outer index: the product of the kept runs.
    fn outputs(&self) -> u64 {
        self.runs().iter().step_by(2).product()
    }
}

/// The `(outer, len, inner)` view of a reduction and its block layout.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Product of the axes before the reduced one.
    pub outer: u64,
    /// Length of the reduced axis.
    pub len: u64,
    /// Product of the axes after the reduced one.
    pub inner: u64,
    /// Columns of the virtual matrix (inner, or LANES).
    vcols: usize,
    /// Rows per summation block.
    block_rows: u64,
    /// With several separated axes, how the columns fold into outputs.
    fold: Option<Fold>,
}

impl Geometry {
    /// The geometry of reducing `over` of `shape`.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the axis is out of range or the shape is 0-d.
    pub fn new(shape: &[usize], over: ReduceOver) -> Result<Self> {
        let p = |s: &[usize]| s.iter().map(|&d| d as u64).product::<u64>();
        let out_of_range = |a: usize| {
            Error::invalid(format!(
                "axis {a} is out of range for a tensor of rank {} (axes are 0..{})",
                shape.len(),
                shape.len().saturating_sub(1)
            ))
        };
        let mut fold = None;
        let (outer, len, inner) = match over {
            ReduceOver::All => (1, p(shape), 1),
            ReduceOver::Axis(a) => {
                if a >= shape.len() {
                    return Err(out_of_range(a));
                }
                (p(&shape[..a]), shape[a] as u64, p(&shape[a + 1..]))
            }
            ReduceOver::Axes(_) => {
                if let Some(&a) = over.axis_list(64).iter().find(|&&a| a >= shape.len()) {
                    return Err(out_of_range(a));
                }
                // runs of (length, reduced), axes of length 1 dropped but a reduced
                // leading one (a share of one row of the leading axis must fold as the
                // whole does: see `row_step`)
                let mut runs: Vec<(u64, bool)> = Vec::new();
                for (a, &d) in shape.iter().enumerate() {
                    let red = over.reduces(a);
                    match runs.last_mut() {
                        _ if d == 1 && !(a == 0 && red) => {}
                        Some((n, r)) if *r == red => *n *= d as u64,
                        _ => runs.push((d as u64, red)),
                    }
                }
                let lead = usize::from(runs.first().is_some_and(|r| !r.1));
                match runs.get(lead) {
                    // every reduced axis has length 1: each output is one element
                    None => (p(shape), 1, 1),
                    Some(&(len, _)) => {
                        let outer = if lead == 1 { runs[0].0 } else { 1 };
                        let rest = &runs[lead + 1..];
                        if rest.iter().any(|r| r.1) {
                            if rest.len() > MAX_RUNS {
                                return Err(Error::invalid(format!(
                                    "reducing axes {:?} of shape {shape:?} alternates reduced and \
                                     kept axes more than {MAX_RUNS} times",
                                    over.axis_list(64)
                                )));
                            }
                            let mut f = Fold {
                                runs: [0; MAX_RUNS],
                                n: rest.len(),
                            };
                            for (k, r) in rest.iter().enumerate() {
                                f.runs[k] = r.0;
                            }
                            fold = Some(f);
                        }
                        (outer, len, rest.iter().map(|r| r.0).product())
                    }
                }
            }
        };
        let vcols = if inner > 1 { inner as usize } else { LANES };
        let block_rows = (BLOCK_ELEMS / vcols as u64).max(1);
        Ok(Geometry {
            outer,
            len,
            inner,
            vcols,
            block_rows,
            fold,
        })
    }

    /// Outputs per outer index.
    #[must_use]
    pub fn out_per_outer(&self) -> u64 {
        self.fold.map_or(self.inner, |f| f.outputs())
    }

    /// Whether columns fold into outputs (several separated axes: see the module's notes).
    #[must_use]
    pub fn folds(&self) -> bool {
        self.fold.is_some()
    }

    /// The output (among an outer index's) that column `col` folds into, and the column
    /// whose first-row element is `col`'s variance shift: the output's first column, so
    /// every column of an output shares one shift and their sums merge as they are.
    /// Without folding, `(col, col)`.
    #[must_use]
    pub fn column_output(&self, col: u64) -> (u64, u64) {
        self.fold.map_or((col, col), |f| f.of(col))
    }

    /// Elements each output reduces (`len`, times the columns folded into it).
    #[must_use]
    pub fn per_output(&self) -> u64 {
        self.len * (self.inner / self.out_per_outer().max(1))
    }

    /// Columns of the virtual matrix each outer index is summed as: `inner`, or 8
    /// lanes when `inner` is 1.
    #[must_use]
    pub fn vcols(&self) -> usize {
        self.vcols
    }

    /// Rows per summation block.
    #[must_use]
    pub fn block_rows(&self) -> u64 {
        self.block_rows
    }

    /// Elements per outer index (`len * inner`).
    #[must_use]
    pub fn per_outer_elems(&self) -> u64 {
        self.per_outer()
    }

    fn per_outer(&self) -> u64 {
        self.len * self.inner
    }

    /// Resident bytes of one live state (totals, open block, shifts) for accumulators of
    /// `acc` bytes.
    #[must_use]
    pub fn state_bytes(&self, acc: usize) -> u64 {
        self.vcols as u64 * (2 * acc as u64 + 8)
    }

    /// Upper bound on per-tile scratch bytes per element, for the planner.
    #[must_use]
    pub fn scratch_per_elem(&self, acc: usize) -> u64 {
        if self.vcols >= WIDE {
            0
        } else {
            (acc as u64).div_ceil(self.block_rows)
        }
    }
}

/// The step, in rows of the leading axis, on which a reduction may be split into shares
/// whose [`Partial`](super::Partial)s merge into the bytes of one run: its summation blocks are never
/// cut. 1 when the leading axis is not reduced (each row's outputs are its own).
///
/// # Errors
/// As [`Geometry::new`].
pub fn row_step(shape: &[usize], over: ReduceOver) -> Result<u64> {
    let g = Geometry::new(shape, over)?;
    if g.outer > 1 || shape.is_empty() {
        return Ok(1);
    }
    // positions (elements) per row of the leading axis, and per summation block
    let per_row = shape[1..].iter().map(|&d| d as u64).product::<u64>().max(1);
    let block = g.block_rows * g.vcols as u64;
    Ok(block / gcd(per_row, block))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
