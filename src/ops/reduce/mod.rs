//! Reductions (sums, means, extremes, moments, counts and positions) along one axis, several
//! or all elements, with a
//! summation order fixed by the data's shape alone, so the result's bytes do not depend on
//! the memory budget, the tile size or the number of threads.
//!
//! # Geometry
//! Reducing axis `a` of a C-order tensor is seen as `(outer, len, inner)` with
//! `outer = prod(shape[..a])`, `len = shape[a]`, `inner = prod(shape[a+1..])`. For each outer
//! index the `len × inner` elements are contiguous. They are viewed as a matrix of
//! virtual rows of `vcols` columns: `vcols = inner` when `inner > 1` (each column is one
//! output), or `vcols = 8` lanes when `inner == 1` (one output whose run is summed in 8
//! interleaved lanes, so the loop vectorizes; the lanes are combined in a fixed tree).
//!
//! Several axes: axes of length 1 are dropped and neighbours of the same kind (reduced or
//! kept) merged, so `(0, 2, 3)` of `(N, C, H, W)` is seen as `[N][C][H·W]`: reduced, kept,
//! reduced. The first reduced run is `len`, what comes before it `outer`, and what comes
//! after it the columns (`inner = C·H·W`), as for one axis; the columns of one output
//! (one `c`, every `h·w`) are then **folded**: their totals merged in column order when
//! the outer index ends. A single reduced run (`(2, 3)`: `[N·C][H·W]`) is one axis of
//! the merged shape. Either way the order of operations is fixed by the shape alone.
//!
//! # Order of operations
//! Each column sums its rows sequentially within fixed **blocks** of `block_rows` rows
//! (about 128 Ki elements per block); a block's partial is merged into the column's
//! total when the block ends, blocks in index order. A tile may start or end anywhere: the
//! partial of an unfinished block is carried to the next tile (tiles reach the compute
//! stage in order). Blocks that start and end inside a tile are independent and are
//! computed in parallel, then merged in order, so the arithmetic of every column is the
//! same sequence of floating-point operations whatever the tiling.
//!
//! # Accuracy
//! Floats accumulate in f64. Variance uses sums of `x - s` and `(x - s)²` with the shift
//! `s` = the first element of each reduced slice, which avoids the catastrophic
//! cancellation of the naive formula when the mean is large relative to the spread.
//! Integer sums are exact in wrapping 64-bit arithmetic (i64 for signed and bool, u64 for
//! unsigned), as numpy does. Min and max propagate NaN, as numpy does.
//!
//! # Positions
//! `argmin` and `argmax` carry the extreme, its position and the elements seen; a later
//! partial's position is moved by the earlier one's count when they merge (always in
//! index order), so the first occurrence is found whatever the tiling, as numpy finds it.

mod geometry;
mod partial;

pub(crate) use geometry::{BLOCK_ELEMS, COLUMN_PARTIALS, WIDE, column_partials_bytes};
pub use geometry::{Geometry, row_step};
pub use partial::{Partial, PartialHeader};

use crate::dtype::DType;
use crate::error::{Error, Result};

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Sum (f64 for floats, i64 for signed integers and bool, u64 for unsigned).
    Sum,
    /// Arithmetic mean (f64).
    Mean,
    /// Minimum (input dtype; NaN if any element is NaN).
    Min,
    /// Maximum (input dtype; NaN if any element is NaN).
    Max,
    /// Variance with `ddof` delta degrees of freedom (0 = population) (f64).
    Var {
        /// Delta degrees of freedom: the divisor is `n - ddof`.
        ddof: u32,
    },
    /// Standard deviation, the square root of [`Reduce::Var`] (f64).
    Std {
        /// Delta degrees of freedom: the divisor is `n - ddof`.
        ddof: u32,
    },
    /// Sum of the elements that are not NaN (numpy's `nansum`; 0 for a slice of NaN
    /// alone); integers as [`Reduce::Sum`].
    NanSum,
    /// Mean of the elements that are not NaN (`nanmean`, f64; NaN for a slice of NaN
    /// alone).
    NanMean,
    /// Minimum of the elements that are not NaN (`nanmin`, input dtype; NaN for a slice
    /// of NaN alone).
    NanMin,
    /// Maximum of the elements that are not NaN (`nanmax`).
    NanMax,
    /// Variance of the elements that are not NaN (`nanvar`, f64; NaN where they are
    /// `ddof` or fewer).
    NanVar {
        /// Delta degrees of freedom: the divisor is `n - ddof`, `n` the elements counted.
        ddof: u32,
    },
    /// Standard deviation of the elements that are not NaN (`nanstd`).
    NanStd {
        /// Delta degrees of freedom.
        ddof: u32,
    },
    /// How many elements are not NaN (every element of an integer input), i64.
    Count,
    /// Where the minimum first occurs (numpy's `argmin`, i64): the index along the
    /// reduced axis, or the flat index over all elements; the first NaN if there is one.
    ArgMin,
    /// Where the maximum first occurs (`argmax`), as [`Reduce::ArgMin`].
    ArgMax,
    /// numpy's `nanargmin` (i64): where the minimum first occurs, each element that is
    /// NaN (or nodata) standing as `+inf` (so `[nan, inf]` gives 0, as numpy gives); a
    /// slice of such elements alone is refused, as numpy raises.
    NanArgMin,
    /// numpy's `nanargmax`, as [`Reduce::NanArgMin`] with NaN standing as `-inf`.
    NanArgMax,
}

impl Reduce {
    /// Parses `sum`, `mean`, `min`, `max`, `var`, `std`, their `nan` forms (`nansum`,
    /// ...) and `count`, with the given `ddof` for the variances and deviations.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown name.
    pub fn parse(name: &str, ddof: u32) -> Result<Self> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "sum" => Reduce::Sum,
            "mean" | "avg" => Reduce::Mean,
            "min" => Reduce::Min,
            "max" => Reduce::Max,
            "var" => Reduce::Var { ddof },
            "std" => Reduce::Std { ddof },
            "nansum" => Reduce::NanSum,
            "nanmean" => Reduce::NanMean,
            "nanmin" => Reduce::NanMin,
            "nanmax" => Reduce::NanMax,
            "nanvar" => Reduce::NanVar { ddof },
            "nanstd" => Reduce::NanStd { ddof },
            "count" => Reduce::Count,
            "argmin" => Reduce::ArgMin,
            "argmax" => Reduce::ArgMax,
            "nanargmin" => Reduce::NanArgMin,
            "nanargmax" => Reduce::NanArgMax,
            q if QUANTILE_NAMES.contains(&q) => {
                return Err(Error::invalid(format!(
                    "{q} is not a one-pass reduction: take it as quantiles, with its q \
                     (`tilestream reduce --op {q} --q ...`, `ts.reduce(x, \"{q}\", q=...)`, \
                     `Engine::quantile`, or by passes on a cluster: `Engine::quantile_counts`)"
                )));
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown reduction '{name}': expected sum, mean, min, max, var, std, \
                     nansum, nanmean, nanmin, nanmax, nanvar, nanstd, count, argmin, argmax, nanargmin \
                     or nanargmax"
                )));
            }
        })
    }

    /// Short name (`mean`, `std`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Mean => "mean",
            Reduce::Min => "min",
            Reduce::Max => "max",
            Reduce::Var { .. } => "var",
            Reduce::Std { .. } => "std",
            Reduce::NanSum => "nansum",
            Reduce::NanMean => "nanmean",
            Reduce::NanMin => "nanmin",
            Reduce::NanMax => "nanmax",
            Reduce::NanVar { .. } => "nanvar",
            Reduce::NanStd { .. } => "nanstd",
            Reduce::Count => "count",
            Reduce::ArgMin => "argmin",
            Reduce::ArgMax => "argmax",
            Reduce::NanArgMin => "nanargmin",
            Reduce::NanArgMax => "nanargmax",
        }
    }

    /// Its `ddof` (0 for reductions without one).
    #[must_use]
    pub fn ddof(self) -> u32 {
        match self {
            Reduce::Var { ddof }
            | Reduce::Std { ddof }
            | Reduce::NanVar { ddof }
            | Reduce::NanStd { ddof } => ddof,
            _ => 0,
        }
    }

    /// Whether it sums squares about a shift (variances and deviations).
    #[must_use]
    pub fn is_moments(self) -> bool {
        matches!(
            self,
            Reduce::Var { .. } | Reduce::Std { .. } | Reduce::NanVar { .. } | Reduce::NanStd { .. }
        )
    }

    /// Whether it leaves NaN out (the `nan` forms and `count`).
    #[must_use]
    pub fn skips_nan(self) -> bool {
        matches!(
            self,
            Reduce::NanSum
                | Reduce::NanMean
                | Reduce::NanMin
                | Reduce::NanMax
                | Reduce::NanVar { .. }
                | Reduce::NanStd { .. }
                | Reduce::Count
                | Reduce::NanArgMin
                | Reduce::NanArgMax
        )
    }

    /// The nodata value it leaves out of an input that has `nodata`: the value for the
    /// forms that leave missing elements out (NaN as nodata is NaN, which they leave out
    /// already), `None` for the others, which take every element as numpy does.
    #[must_use]
    pub fn nodata_left_out(self, nodata: Option<f64>) -> Option<f64> {
        nodata.filter(|v| self.skips_nan() && !v.is_nan())
    }

    /// The same reduction of an input with no NaN and no nodata value (an integer
    /// input's): its `nan` forms are the plain ones.
    #[must_use]
    pub fn without_nan(self) -> Self {
        match self {
            Reduce::NanSum => Reduce::Sum,
            Reduce::NanMean => Reduce::Mean,
            Reduce::NanMin => Reduce::Min,
            Reduce::NanMax => Reduce::Max,
            Reduce::NanVar { ddof } => Reduce::Var { ddof },
            Reduce::NanStd { ddof } => Reduce::Std { ddof },
            other => other,
        }
    }

    /// Whether a CUDA kernel computes it (the positions run on the CPU on any engine).
    #[must_use]
    pub fn on_device(self) -> bool {
        !self.is_arg()
    }

    /// Whether it answers a position (`argmin`, `argmax` and their `nan` forms).
    #[must_use]
    pub fn is_arg(self) -> bool {
        matches!(
            self,
            Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax
        )
    }

    /// Checks that it can reduce over `over`: a position is taken along one axis or
    /// over all elements, as numpy's `argmax` takes them.
    ///
    /// # Errors
    /// [`Error::Invalid`] for `argmin` or `argmax` over several axes.
    pub fn check_over(self, over: ReduceOver) -> Result<()> {
        if self.is_arg() && matches!(over, ReduceOver::Axes(_)) {
            return Err(Error::invalid(format!(
                "{} takes one axis or none (every element, a flat index), not {}, as numpy's: \
                 reshape the input so the axes are one",
                self.name(),
                over.describe()
            )));
        }
        Ok(())
    }

    /// The dtype of the result for an input of `input` dtype.
    #[must_use]
    pub fn output_dtype(self, input: DType) -> DType {
        match self {
            Reduce::Min | Reduce::Max | Reduce::NanMin | Reduce::NanMax => input,
            // complex inputs: their sums and means are complex128, their variances f64
            Reduce::Sum | Reduce::NanSum | Reduce::Mean | Reduce::NanMean if input.is_complex() => {
                DType::C128
            }
            Reduce::Sum | Reduce::NanSum if input.is_float() => DType::F64,
            Reduce::Sum | Reduce::NanSum if input.is_unsigned() => DType::U64,
            Reduce::Sum
            | Reduce::NanSum
            | Reduce::Count
            | Reduce::ArgMin
            | Reduce::ArgMax
            | Reduce::NanArgMin
            | Reduce::NanArgMax => DType::I64,
            Reduce::Mean
            | Reduce::Var { .. }
            | Reduce::Std { .. }
            | Reduce::NanMean
            | Reduce::NanVar { .. }
            | Reduce::NanStd { .. } => DType::F64,
        }
    }

    /// Bytes of one accumulator (for budget accounting), of an input with a nodata value
    /// (`nodata`: whose `nan` forms leave it out) or not.
    #[must_use]
    pub fn acc_bytes(self, input: DType, nodata: bool) -> usize {
        let masked = nodata && self.skips_nan();
        let float = input.is_float() || masked;
        if input.is_complex() {
            // a complex input's own kernels: a pick is the element, its position and two
            // counts; a sum the two parts and a count; a variance a count and each part's
            // mean and M2
            return match self {
                Reduce::Count => 8,
                Reduce::Sum | Reduce::Mean | Reduce::NanSum | Reduce::NanMean => 24,
                _ => 40,
            };
        }
        match self {
            Reduce::Var { .. } | Reduce::Std { .. } => 16,
            Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax => 32,
            Reduce::NanVar { .. } | Reduce::NanStd { .. } => {
                if float {
                    24
                } else {
                    16
                }
            }
            Reduce::Min | Reduce::Max => input.size(),
            Reduce::NanMin | Reduce::NanMax => {
                if float {
                    16
                } else {
                    input.size()
                }
            }
            Reduce::NanSum if input.is_float() => 16,
            Reduce::NanMean if float => 16,
            Reduce::Sum | Reduce::Mean | Reduce::NanSum | Reduce::NanMean | Reduce::Count => 8,
        }
    }
}

/// An axis index, for [`crate::reduce`]: `Axis(0)` reduces the leading axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis(pub usize);

/// What a reduction runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOver {
    /// Every element: the result is a scalar.
    All,
    /// One axis: the result has that axis removed.
    Axis(usize),
    /// Several axes, as a mask (bit `a` for axis `a`; made by [`ReduceOver::axes`]): the
    /// result has them removed.
    Axes(u64),
}

impl ReduceOver {
    /// Several axes at once (numpy's `axis=(0, 2, 3)`): one axis is [`ReduceOver::Axis`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for no axis, an axis given twice, or one past 63.
    pub fn axes(axes: &[usize]) -> Result<Self> {
        let mut mask = 0u64;
        for &a in axes {
            if a >= 64 {
                return Err(Error::invalid(format!(
                    "axis {a} is out of range (tensors have at most 64 axes)"
                )));
            }
            if mask & (1 << a) != 0 {
                return Err(Error::invalid(format!(
                    "axis {a} is given twice in {axes:?}"
                )));
            }
            mask |= 1 << a;
        }
        match axes {
            [] => Err(Error::invalid(
                "no axis to reduce: give one or more, or none at all for every element",
            )),
            [a] => Ok(ReduceOver::Axis(*a)),
            _ => Ok(ReduceOver::Axes(mask)),
        }
    }

    /// The axes reduced, in increasing order (every axis of a tensor of rank `rank` for
    /// [`ReduceOver::All`]).
    #[must_use]
    pub fn axis_list(self, rank: usize) -> Vec<usize> {
        match self {
            ReduceOver::All => (0..rank).collect(),
            ReduceOver::Axis(a) => vec![a],
            ReduceOver::Axes(m) => (0..64).filter(|a| m & (1 << a) != 0).collect(),
        }
    }

    /// Whether axis `a` is reduced.
    fn reduces(self, a: usize) -> bool {
        match self {
            ReduceOver::All => true,
            ReduceOver::Axis(b) => a == b,
            ReduceOver::Axes(m) => a < 64 && m & (1 << a) != 0,
        }
    }

    /// The shape of the result of reducing a tensor of `shape`: a scalar's (empty), or
    /// `shape` without the reduced axes.
    #[must_use]
    pub fn out_shape(self, shape: &[usize]) -> Vec<usize> {
        self.out_shape_keeping(shape, false)
    }

    /// [`ReduceOver::out_shape`], or with `keepdims` the reduced axes kept as length 1
    /// (numpy's `keepdims=True`).
    #[must_use]
    pub fn out_shape_keeping(self, shape: &[usize], keepdims: bool) -> Vec<usize> {
        shape
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| match (self.reduces(i), keepdims) {
                (false, _) => Some(d),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }

    /// How a run report or a plan names it: `all elements`, `axis 1`, `axes 0, 2, 3`.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            ReduceOver::All => "all elements".into(),
            ReduceOver::Axis(a) => format!("axis {a}"),
            ReduceOver::Axes(_) => {
                let list: Vec<String> = self.axis_list(64).iter().map(usize::to_string).collect();
                format!("axes {}", list.join(", "))
            }
        }
    }
}

impl From<Axis> for ReduceOver {
    fn from(a: Axis) -> Self {
        ReduceOver::Axis(a.0)
    }
}

impl From<Option<usize>> for ReduceOver {
    fn from(a: Option<usize>) -> Self {
        a.map_or(ReduceOver::All, ReduceOver::Axis)
    }
}

/// Names that ask for quantiles (`crate::ops::quantile`), which are not one-pass
/// reductions: [`Reduce::parse`] refuses them with the way to take them.
pub const QUANTILE_NAMES: [&str; 6] = [
    "quantile",
    "percentile",
    "median",
    "nanquantile",
    "nanpercentile",
    "nanmedian",
];

/// A streaming reduction: tiles go in, in plan order; the result comes out at the end.
pub trait TileReducer: Send {
    /// Feeds the bytes of one tile (in plan order).
    fn feed_bytes(&mut self, start: u64, bytes: &[u8]);
    /// The finished result as bytes of the output dtype.
    fn into_bytes(self: Box<Self>) -> Vec<u8>;
    /// Bytes of the state [`state_parts`](Self::state_parts) lends.
    fn state_len(&self) -> u64;
    /// Everything needed to continue after the last tile fed (accumulators and the
    /// results so far), as byte views of the reducer's own buffers, for resumable runs.
    fn state_parts(&self) -> Vec<&[u8]>;
    /// The same buffers, writable, to restore a saved state into (in the same order):
    /// the reducer then continues as if the same tiles had been fed.
    fn state_parts_mut(&mut self) -> Vec<&mut [u8]>;
    /// Finishes outer indices `first..` from the final totals of their columns, computed
    /// elsewhere (a device) with this reducer's order of operations: `totals` holds
    /// [`Geometry::vcols`] accumulators per outer index, as bytes of this reducer's
    /// accumulator type.
    ///
    /// # Panics
    /// If `totals` is not a whole number of outer indices within the result.
    fn finish_outers(&mut self, first: u64, totals: &[u8]);
    /// Makes this reducer (of one outer index: a reduction over the leading axis or
    /// over all elements) keep each summation block's partial instead of merging it into
    /// the running total, for [`take_blocks`](Self::take_blocks): the partials of the
    /// blocks of one share of the rows, to be merged with the other shares' in block
    /// order ([`fold_blocks`](Self::fold_blocks)), which gives the bytes of one run.
    /// `shift` replaces the variance's shifts, which a share that does not start at row 0
    /// cannot take from its data ([`Geometry::vcols`] values). Call before any tile.
    ///
    /// # Panics
    /// If the reduction has more than one outer index.
    fn collect_blocks(&mut self, shift: Option<&[f64]>);
    /// The block partials collected since [`collect_blocks`](Self::collect_blocks), as
    /// bytes of [`Geometry::vcols`] accumulators per block: every block closed, then the
    /// open block's (zeros if none) once the last row was fed.
    fn take_blocks(&mut self) -> Vec<u8>;
    /// Merges whole blocks' partials (as [`take_blocks`](Self::take_blocks) gives them)
    /// into the running totals, in order.
    fn fold_blocks(&mut self, blocks: &[u8]);
    /// Finishes the result (of the single outer index) from the running totals that
    /// [`fold_blocks`](Self::fold_blocks) made.
    fn finish_folded(&mut self);
    /// Whether this reducer can be fed column by column
    /// ([`feed_columns`](Self::feed_columns)): a reduction of the leading axis of a
    /// matrix into one output per column, by a reducer that merges its blocks as it
    /// goes.
    fn takes_columns(&self) -> bool;
    /// Feeds rows `row..row + rows` of columns `c0..c0 + runs.len()`, given column by
    /// column (`runs[i]`: the `rows` elements of column `c0 + i`), as a matrix whose
    /// columns are stored contiguously (a Fortran-order file) is read. Each column sees
    /// the operations it sees when the rows are fed in C order, so the result's bytes are
    /// the same; a column's rows must come in order, the columns in any order. Only
    /// where [`takes_columns`](Self::takes_columns) is true; once every row of every
    /// column was fed, [`finish_columns`](Self::finish_columns) makes the result.
    fn feed_columns(&mut self, c0: usize, row: u64, runs: &[&[u8]]);
    /// Makes the result after [`feed_columns`](Self::feed_columns) fed every column.
    fn finish_columns(&mut self);
}
