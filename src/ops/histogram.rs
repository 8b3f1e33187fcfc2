//! Histograms as numpy's `np.histogram` counts them: `bins` equal bins over a `range`
//! (given, or each output's minimum and maximum), or explicit edges; per position of the
//! kept axes (per band) or over every element.
//!
//! # Exactly numpy's bins
//! numpy computes equal bins with arithmetic in types NEP 50 decides, and an element on
//! (or within an ulp of) an edge lands where that arithmetic puts it. To count the same,
//! each step is done in f64 and rounded to the type numpy computes it in (for `+ - * /`
//! of f16, bf16 or f32 operands, an f64 result rounded once is the correctly rounded
//! result, which is what numpy's f16 path, through f32, gives too):
//!
//! - the edges: `np.linspace(first, last, bins + 1)` in the type of `first` and `last`
//!   (the data's float type for a range taken from the data; f64 for a given range or
//!   integer data), then cast to the bins' type (the data's float type, or f64);
//! - an element is kept when `first <= x <= last` (a given range rounded to the data's
//!   float type first, as a Python float is against a float32 array);
//! - its bin: `((x - first) / (last - first)) * bins` truncated, the subtraction in the
//!   bins' type, the division and product in the data's float type for a range taken
//!   from it and in f64 for a given one (numpy's f64 scalar `last - first`), then moved
//!   down one if `x` is below its bin's left edge and up one if at or above the next
//!   edge (the last bin includes its right edge).
//!
//! Explicit edges count `edges[i] <= x < edges[i + 1]`, the last bin closed, comparing in
//! f64 as numpy's `searchsorted` does. NaN is never counted (numpy's comparisons leave it
//! out; an automatic range over NaN is refused, as numpy raises); nodata pixels are left
//! out as the `nan` reductions leave them out.

// numpy's arithmetic compares floats exactly (an empty range, a zero step)
#![allow(clippy::float_cmp)]

use crate::dtype::DType;
use crate::error::{Error, Result};

/// How the bins are given.
#[derive(Clone, Debug, PartialEq)]
pub enum Bins {
    /// `n` equal bins over `range`, or over each output's minimum and maximum (numpy's
    /// `bins=n, range=...`).
    Count {
        /// How many bins.
        n: usize,
        /// The outer edges; `None`: each output's minimum and maximum.
        range: Option<(f64, f64)>,
    },
    /// Explicit edges, increasing (numpy's `bins=[...]`): `len - 1` bins.
    Edges(Vec<f64>),
    /// `n` equal bins over each output's given extremes, one `(min, max)` per output of
    /// the kept axes in C order (`None`: an output with nothing to count, numpy's
    /// `[0, 1]`): numpy's automatic range over data whose extremes they are. A share of
    /// a histogram split over a cluster counts with the whole input's extremes, so its
    /// bins are the whole input's.
    Extremes {
        /// How many bins.
        n: usize,
        /// Each output's minimum and maximum ([`Uniform::from_extremes`]'s pairs).
        per: Vec<Option<(Extreme, Extreme)>>,
    },
}

/// A minimum or maximum of the data as `(value, exact integer)`: the integer is the
/// value of an integer input exactly (numpy subtracts integer extremes exactly), ignored
/// for floats.
pub type Extreme = (f64, i128);

impl Bins {
    /// How many bins.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Bins::Count { n, .. } | Bins::Extremes { n, .. } => *n,
            Bins::Edges(e) => e.len().saturating_sub(1),
        }
    }

    /// Whether there are none (refused by [`check`](Self::check)).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses what numpy refuses: no bins, a range that is not finite or decreases,
    /// edges that decrease or are fewer than two.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the fault.
    pub fn check(&self) -> Result<()> {
        match self {
            Bins::Count { n: 0, .. } | Bins::Extremes { n: 0, .. } => Err(Error::invalid(
                "bins must be positive: give a number of bins (64) or their edges",
            )),
            Bins::Count {
                range: Some((a, b)),
                ..
            } if !(a.is_finite() && b.is_finite()) => Err(Error::invalid(format!(
                "histogram range [{a}, {b}] is not finite"
            ))),
            Bins::Count {
                range: Some((a, b)),
                ..
            } if a > b => Err(Error::invalid(format!(
                "histogram range [{a}, {b}]: max must be larger than min"
            ))),
            Bins::Edges(e) if e.len() < 2 => Err(Error::invalid(
                "histogram edges: give at least two (one bin)",
            )),
            Bins::Edges(e) if e.iter().any(|v| v.is_nan()) => {
                Err(Error::invalid("histogram edges must be numbers, not NaN"))
            }
            Bins::Edges(e) if e.windows(2).any(|w| w[0] > w[1]) => Err(Error::invalid(
                "histogram edges must increase monotonically",
            )),
            _ => Ok(()),
        }
    }
}

/// `x` rounded to `t`'s precision (f64 unchanged; integer types take f64).
#[inline]
fn round(t: DType, x: f64) -> f64 {
    match t {
        DType::F32 => f64::from(x as f32),
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// numpy's `np.linspace(first, last, n + 1)` computed in `dt`, cast to `out`.
fn linspace(first: f64, last: f64, n: usize, dt: DType, out: DType) -> Vec<f64> {
    let r = |v: f64| round(dt, v);
    let div = r(n as f64);
    let delta = r(last - first);
    let step = r(delta / div);
    let mut y: Vec<f64> = (0..=n)
        .map(|i| {
            let i = r(i as f64);
            // numpy's denormal guard: a zero step multiplies by delta after dividing
            let v = if step == 0.0 {
                r(r(i / div) * delta)
            } else {
                r(i * step)
            };
            r(v + first)
        })
        .collect();
    y[n] = last;
    y.into_iter().map(|v| round(out, v)).collect()
}

/// One output's equal bins, with the arithmetic numpy counts them by.
#[derive(Clone, Debug)]
pub struct Uniform {
    n: usize,
    /// Elements in `[lo, hi]` are counted.
    lo: f64,
    hi: f64,
    /// `x - first`, in `sub`.
    first: f64,
    /// `(x - first) / denom * n`, in `div`.
    denom: f64,
    n_div: f64,
    sub: DType,
    div: DType,
    /// The bins' type (the edges' and `x`'s before the arithmetic).
    bin: DType,
    edges: Vec<f64>,
}

impl Uniform {
    /// `n` bins over a range given as numbers (numpy's Python floats `range=(a, b)`)
    /// for data of `dtype`.
    ///
    /// # Errors
    /// [`Error::Invalid`] where numpy raises: edges that do not increase ("too many
    /// bins for the range").
    pub fn from_range(dtype: DType, n: usize, a: f64, b: f64) -> Result<Self> {
        let (a, b) = if a == b { (a - 0.5, b + 0.5) } else { (a, b) };
        let float = dtype.is_float();
        // the bins' type: the data's float type, f64 for integers
        let bin = if float { dtype } else { DType::F64 };
        let u = Uniform {
            n,
            // a Python float against a float array takes the array's type
            lo: round(bin, a),
            hi: round(bin, b),
            first: round(bin, a),
            // numpy's f64 scalar `b - a`: the division and product in f64
            denom: b - a,
            n_div: n as f64,
            sub: bin,
            div: DType::F64,
            bin,
            edges: linspace(a, b, n, DType::F64, bin),
        };
        u.check()
    }

    /// `n` bins over an output's own minimum and maximum (numpy's `range=None`), values
    /// of `dtype` as `(f64, exact integer)` pairs (the integer ignored for floats: numpy
    /// subtracts integer extremes exactly, in the unsigned type).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a minimum or maximum that is not finite (numpy raises), or
    /// edges that do not increase.
    pub fn from_extremes(
        dtype: DType,
        n: usize,
        (min, min_int): (f64, i128),
        (max, max_int): (f64, i128),
    ) -> Result<Self> {
        if !(min.is_finite() && max.is_finite()) {
            return Err(Error::invalid(format!(
                "autodetected range of [{min}, {max}] is not finite (numpy raises too): give \
                 a range, which leaves NaN out"
            )));
        }
        let u = if dtype.is_float() {
            // numpy scalars of the data's type: everything in that type
            let (a, b) = if min == max {
                (round(dtype, min - 0.5), round(dtype, max + 0.5))
            } else {
                (min, max)
            };
            Uniform {
                n,
                lo: a,
                hi: b,
                first: a,
                denom: round(dtype, b - a),
                n_div: round(dtype, n as f64),
                sub: dtype,
                div: dtype,
                bin: dtype,
                edges: linspace(a, b, n, dtype, dtype),
            }
        } else {
            // integer scalars: the difference exact (unsigned), the rest in f64
            let (a, b, denom) = if min_int == max_int {
                (min - 0.5, max + 0.5, 1.0)
            } else {
                (min, max, (max_int - min_int) as f64)
            };
            Uniform {
                n,
                lo: a,
                hi: b,
                first: a,
                denom,
                n_div: n as f64,
                sub: DType::F64,
                div: DType::F64,
                bin: DType::F64,
                edges: linspace(a, b, n, DType::F64, DType::F64),
            }
        };
        u.check()
    }

    fn check(self) -> Result<Self> {
        if self.edges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::invalid(format!(
                "too many bins for the data's range: cannot make {} finite-sized bins of \
                 [{}, {}] in {}",
                self.n, self.edges[0], self.edges[self.n], self.bin
            )));
        }
        Ok(self)
    }

    /// The edges, as values of [`bin_dtype`](Self::bin_dtype).
    #[must_use]
    pub fn edges(&self) -> &[f64] {
        &self.edges
    }

    /// The type numpy gives the edges.
    #[must_use]
    pub fn bin_dtype(&self) -> DType {
        self.bin
    }

    /// The bin of `x` (an element's value), `None` outside the range or NaN.
    #[inline]
    #[must_use]
    pub fn bin(&self, x: f64) -> Option<usize> {
        if !(x >= self.lo && x <= self.hi) {
            return None;
        }
        let t = round(self.bin, x);
        let diff = round(self.sub, t - self.first);
        let f = round(self.div, round(self.div, diff / self.denom) * self.n_div);
        let n = self.n;
        // f is at least 0 (x >= first); numpy moves f == n into the last bin
        let mut i = (f as usize).min(n - 1);
        if i > 0 && t < self.edges[i] {
            i -= 1;
        }
        if i != n - 1 && t >= self.edges[i + 1] {
            i += 1;
        }
        Some(i)
    }
}

/// The bin of `x` among increasing `edges` (`edges[i] <= x < edges[i + 1]`, the last
/// bin closed), `None` outside them or NaN.
#[inline]
#[must_use]
pub fn edge_bin(edges: &[f64], x: f64) -> Option<usize> {
    let n = edges.len() - 1;
    if !(x >= edges[0] && x <= edges[n]) {
        return None;
    }
    // the bins whose left edge is at most x: the last of them (of equal edges, the
    // last, as searchsorted counts them)
    let i = edges.partition_point(|&e| e <= x);
    Some((i - 1).min(n - 1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bins_of_a_range_are_numpys_on_the_edges() {
        // np.histogram(np.arange(11) / 10, 10, (0, 1)) (numpy 2.4): 0.3 and 0.7 fall
        // an ulp below their edges, into the bins before
        let u = Uniform::from_range(DType::F64, 10, 0.0, 1.0).unwrap();
        let mut c = [0; 10];
        for k in 0..=10 {
            c[u.bin(f64::from(k) / 10.0).unwrap()] += 1; // k / 10 as numpy's arange / 10
        }
        assert_eq!(c, [1, 1, 2, 0, 1, 2, 1, 0, 1, 2]);
        assert_eq!(u.bin(-1e-300), None);
        assert_eq!(u.bin(f64::NAN), None);
        assert_eq!(u.bin(1.0 + f64::EPSILON), None);
    }

    #[test]
    fn explicit_edges_close_the_last_bin_and_skip_empty_ones() {
        let e = [0.0, 1.0, 1.0, 2.0];
        assert_eq!(edge_bin(&e, 0.5), Some(0));
        assert_eq!(edge_bin(&e, 1.0), Some(2));
        assert_eq!(edge_bin(&e, 2.0), Some(2));
        assert_eq!(edge_bin(&e, 2.5), None);
        assert_eq!(edge_bin(&e, f64::NAN), None);
    }

    #[test]
    fn refusals_are_numpys() {
        assert!(Bins::Count { n: 0, range: None }.check().is_err());
        assert!(
            Bins::Count {
                n: 3,
                range: Some((2.0, 1.0))
            }
            .check()
            .is_err()
        );
        assert!(Bins::Edges(vec![0.0, 2.0, 1.0]).check().is_err());
        assert!(Uniform::from_extremes(DType::F32, 4, (f64::NAN, 0), (1.0, 0)).is_err());
        // f16 holds no 3000 distinct steps between 1 and 2
        assert!(Uniform::from_extremes(DType::F16, 3000, (1.0, 0), (2.0, 0)).is_err());
    }
}
