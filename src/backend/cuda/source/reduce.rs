//! The CUDA C source of the reductions (`kernels/reduce.cu`): the accumulator families,
//! their blocks and merge kernels per input dtype, and where a tile's rows fall in them.

use super::{COMMON, REDUCE, cuda_type};
use crate::dtype::{DType, Element};
use crate::ops::reduce::{Geometry, Reduce};

/// A reduction's accumulator family, as in `kernels/reduce.cu` (and the CPU's kernels in
/// `src/backend/cpu/reduce.rs`): each has a blocks kernel and a merge kernel per input
/// dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Sum and mean of floats, in f64.
    FloatSum,
    /// Sum and mean of integers and bools, wrapping 64-bit.
    IntSum,
    /// Variance and standard deviation: shifted sums of `d` and `d * d`.
    Moments,
    /// Minimum in the input's dtype (NaN wins).
    Min,
    /// Maximum in the input's dtype (NaN wins).
    Max,
    /// `nansum` and `nanmean`: the sum and count of the valid elements, in f64 (also
    /// `nanmean` of an integer input with a nodata value).
    NanFloatSum,
    /// `nanvar` and `nanstd`: shifted sums of the valid elements and their count.
    NanMoments,
    /// `nanmin` of a float input: the least valid value and the count.
    NanMin,
    /// `nanmax` of a float input.
    NanMax,
    /// `count`: the valid elements.
    Count,
    /// `nansum` of an integer input with a nodata value: wrapping 64-bit.
    NodataIntSum,
    /// `nanmin` of an integer input with a nodata value, compared in its type.
    NodataMin,
    /// `nanmax` of an integer input with a nodata value.
    NodataMax,
}

impl Reduction {
    /// Every family.
    pub const ALL: [Reduction; 13] = [
        Reduction::FloatSum,
        Reduction::IntSum,
        Reduction::Moments,
        Reduction::Min,
        Reduction::Max,
        Reduction::NanFloatSum,
        Reduction::NanMoments,
        Reduction::NanMin,
        Reduction::NanMax,
        Reduction::Count,
        Reduction::NodataIntSum,
        Reduction::NodataMin,
        Reduction::NodataMax,
    ];

    /// The family that computes `op` over elements of `dtype` whose elements equal to
    /// `nodata` are missing (as `src/backend/cpu/reduce.rs`'s `masked_reducer` picks its
    /// kernels); `None` for the reductions with no CUDA kernel ([`Reduce::on_device`]).
    #[must_use]
    pub fn of(op: Reduce, dtype: DType, nodata: Option<f64>) -> Option<Self> {
        if !op.on_device() {
            return None;
        }
        let nodata = op.nodata_left_out(nodata).is_some();
        let float = dtype.is_float();
        // integers have no NaN: without a nodata value the `nan` forms are the plain ones
        let op = if float || nodata {
            op
        } else {
            op.without_nan()
        };
        Some(match op {
            Reduce::Sum | Reduce::Mean if float => Reduction::FloatSum,
            Reduce::Sum | Reduce::Mean => Reduction::IntSum,
            Reduce::Var { .. } | Reduce::Std { .. } => Reduction::Moments,
            Reduce::Min => Reduction::Min,
            Reduce::Max => Reduction::Max,
            Reduce::Count => Reduction::Count,
            // an integer input with a nodata value: sums and extremes in its own type
            Reduce::NanSum if !float => Reduction::NodataIntSum,
            Reduce::NanMin if !float => Reduction::NodataMin,
            Reduce::NanMax if !float => Reduction::NodataMax,
            Reduce::NanSum | Reduce::NanMean => Reduction::NanFloatSum,
            Reduce::NanVar { .. } | Reduce::NanStd { .. } => Reduction::NanMoments,
            Reduce::NanMin => Reduction::NanMin,
            Reduce::NanMax => Reduction::NanMax,
            Reduce::ArgMin | Reduce::ArgMax | Reduce::NanArgMin | Reduce::NanArgMax => {
                return None;
            }
        })
    }

    /// Whether the family runs over elements of `dtype`.
    #[must_use]
    pub fn takes(self, dtype: DType) -> bool {
        match self {
            Reduction::FloatSum | Reduction::NanMin | Reduction::NanMax => dtype.is_float(),
            Reduction::IntSum
            | Reduction::NodataIntSum
            | Reduction::NodataMin
            | Reduction::NodataMax => !dtype.is_float(),
            _ => true,
        }
    }

    /// Whether its kernels read the launch's nodata value ([`ReduceTile::nodata`]).
    #[must_use]
    pub fn masked(self) -> bool {
        matches!(
            self,
            Reduction::NanFloatSum
                | Reduction::NanMoments
                | Reduction::NanMin
                | Reduction::NanMax
                | Reduction::Count
                | Reduction::NodataIntSum
                | Reduction::NodataMin
                | Reduction::NodataMax
        )
    }

    /// The family's part of kernel names.
    #[must_use]
    pub fn op_name(self) -> &'static str {
        match self {
            Reduction::FloatSum => "fsum",
            Reduction::IntSum => "isum",
            Reduction::Moments => "moments",
            Reduction::Min => "min",
            Reduction::Max => "max",
            Reduction::NanFloatSum => "nanfsum",
            Reduction::NanMoments => "nanmoments",
            Reduction::NanMin => "nanmin",
            Reduction::NanMax => "nanmax",
            Reduction::Count => "count",
            Reduction::NodataIntSum => "ndisum",
            Reduction::NodataMin => "ndmin",
            Reduction::NodataMax => "ndmax",
        }
    }

    /// The blocks kernel's name for `dtype` (`reduce_blocks_fsum_f32`).
    #[must_use]
    pub fn blocks_name(self, dtype: DType) -> String {
        format!("reduce_blocks_{}_{}", self.op_name(), dtype.name())
    }

    /// The merge kernel's name for `dtype` (`reduce_merge_fsum_f32`).
    #[must_use]
    pub fn merge_name(self, dtype: DType) -> String {
        format!("reduce_merge_{}_{}", self.op_name(), dtype.name())
    }

    /// The accumulator template of `kernels/reduce.cu` (`TsFSum`).
    #[must_use]
    pub fn template(self) -> &'static str {
        match self {
            Reduction::FloatSum => "TsFSum",
            Reduction::IntSum => "TsISum",
            Reduction::Moments => "TsMoments",
            Reduction::Min => "TsMin",
            Reduction::Max => "TsMax",
            Reduction::NanFloatSum => "TsNanFSum",
            Reduction::NanMoments => "TsNanMoments",
            Reduction::NanMin => "TsNanMin",
            Reduction::NanMax => "TsNanMax",
            Reduction::Count => "TsCount",
            Reduction::NodataIntSum => "TsNodataISum",
            Reduction::NodataMin => "TsNodataMin",
            Reduction::NodataMax => "TsNodataMax",
        }
    }

    fn wrappers(self, dtype: DType) -> String {
        let t = cuda_type(dtype);
        let k = format!("{}<{t}>", self.template());
        let a = format!("{k}::A");
        format!(
            "extern \"C\" __global__ void {blocks}(const {t}* x, TsReduceTile t, const {a}* open, \
             const double* shift, {a}* part, unsigned long long cells) \
             {{ ts_reduce_blocks<{t}, {k} >(x, t, open, shift, part, cells); }}\n\
             extern \"C\" __global__ void {merge}(const {t}* x, TsReduceTile t, \
             const {a}* total, const {a}* open, const double* shift, const {a}* part, \
             {a}* done, {a}* total_out, {a}* open_out, double* shift_out) \
             {{ ts_reduce_merge<{t}, {k} >(x, t, total, open, shift, part, done, total_out, \
             open_out, shift_out); }}\n",
            blocks = self.blocks_name(dtype),
            merge = self.merge_name(dtype),
        )
    }
}

/// The NVRTC source of the reduction kernels `kernels` (family, input dtype): both
/// kernels of each.
#[must_use]
pub fn reduce_source(kernels: &[(Reduction, DType)]) -> String {
    let mut s = String::with_capacity(COMMON.len() + REDUCE.len() + 600 * kernels.len());
    s.push_str(COMMON);
    s.push('\n');
    s.push_str(REDUCE);
    s.push('\n');
    for &(k, d) in kernels {
        s.push_str(&k.wrappers(d));
    }
    s
}

/// Every reduction kernel pair: each family for every dtype it takes.
#[must_use]
pub fn all_reductions() -> Vec<(Reduction, DType)> {
    Reduction::ALL
        .iter()
        .flat_map(|&k| {
            DType::ALL
                .iter()
                .filter(move |&&d| k.takes(d))
                .map(move |&d| (k, d))
        })
        .collect()
}

/// The arguments of one tile's reduction launches, laid out as `TsReduceTile` in
/// `kernels/reduce.cu` (fourteen u64). Pure arithmetic on the geometry and the tile, so it
/// is checked without a GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ReduceTile {
    /// First flat element of the tile.
    pub start: u64,
    /// Elements in the tile.
    pub n: u64,
    /// Elements per outer index.
    pub per: u64,
    /// Columns of the virtual matrix.
    pub vcols: u64,
    /// Rows per summation block.
    pub block_rows: u64,
    /// 1 when the columns are the inner axes, 0 for lanes.
    pub wide: u64,
    /// The tile's first outer index.
    pub first: u64,
    /// Outer indices the tile touches.
    pub n_o: u64,
    /// First block touched in the first outer index.
    pub b0: u64,
    /// Last block touched in the last outer index.
    pub b1: u64,
    /// Blocks per outer index.
    pub nb: u64,
    /// Blocks touched in the first outer index.
    pub count_first: u64,
    /// 1 when elements equal to [`nodata`](Self::nodata) are missing, else 0.
    pub has_nodata: u64,
    /// The nodata value's bytes in the input's dtype, little-endian, zero-padded.
    pub nodata: u64,
}

impl ReduceTile {
    /// The launch arguments of the tile of `n > 0` elements from flat element `start`.
    #[must_use]
    pub fn new(g: &Geometry, start: u64, n: u64) -> Self {
        let per = g.per_outer_elems();
        let vc = g.vcols() as u64;
        let br = g.block_rows();
        let nb = per.div_ceil(vc).div_ceil(br);
        let end = start + n;
        let first = start / per;
        let last = (end - 1) / per;
        let n_o = last - first + 1;
        let b0 = (start - first * per) / vc / br;
        let b1 = (end - last * per - 1) / vc / br;
        let count_first = if n_o == 1 { b1 - b0 + 1 } else { nb - b0 };
        ReduceTile {
            start,
            n,
            per,
            vcols: vc,
            block_rows: br,
            wide: u64::from(g.inner > 1),
            first,
            n_o,
            b0,
            b1,
            nb,
            count_first,
            has_nodata: 0,
            nodata: 0,
        }
    }

    /// The same tile for an input of `dtype` whose elements equal to `nodata` are
    /// missing (the value converted to the dtype as the CPU's reducer converts it).
    #[must_use]
    pub fn with_nodata(mut self, dtype: DType, nodata: Option<f64>) -> Self {
        if let Some(v) = nodata {
            let mut b = [0u8; 8];
            crate::dispatch_dtype!(dtype, T => {
                let x = T::from_f64(v);
                let bytes = bytemuck::bytes_of(&x);
                b[..bytes.len()].copy_from_slice(bytes);
            }, complex => unreachable!("complex arrays are reduced as their parts (Engine::reduce)"));
            self.has_nodata = 1;
            self.nodata = u64::from_le_bytes(b);
        }
        self
    }

    /// Threads of the blocks kernel: one per (outer, block, column) cell.
    #[must_use]
    pub fn cells(&self) -> u64 {
        let pairs = if self.n_o == 1 {
            self.count_first
        } else {
            self.count_first + (self.n_o - 2) * self.nb + self.b1 + 1
        };
        pairs * self.vcols
    }

    /// The outer indices this tile finishes: `(first, count)`; their totals are the
    /// first `count * vcols` accumulators of the merge kernel's `done`.
    #[must_use]
    pub fn finished(&self) -> (u64, u64) {
        let complete_last = (self.start + self.n).is_multiple_of(self.per);
        (self.first, self.n_o - u64::from(!complete_last))
    }
}
