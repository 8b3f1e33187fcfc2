//! Quantiles, percentiles and medians (numpy's `quantile`, `percentile`, `median` and
//! their `nan` forms), exact, over one axis, several or all elements, within the budget.
//!
//! # Selection by digits
//! Each element is given a key whose order as an unsigned integer is the order of the
//! values (floats: the sign bit flipped, or every bit for negatives; signed integers: the
//! sign bit flipped). The sorted position a quantile needs (its rank) is found one digit
//! of the key at a time, most significant first: a pass over the data counts, per output,
//! the elements in each bucket of the next digit among those whose higher digits are the
//! prefix found so far; the bucket where the running count passes the rank gives the next
//! digit. After `key bits / digit bits` passes (one for 16-bit data with 16-bit digits,
//! two for f32, four for f64) the key, hence the value, of the element of that rank is
//! known exactly: no sort, no copy of the data, and counts that merge in any order, so the
//! result does not depend on the tiling or the threads. The counts are the memory: the
//! outputs times the ranks each needs (two per quantile for interpolation) times
//! `2^digit bits` counters of 8 bytes, with fewer digit bits (more passes) when they do
//! not fit.
//!
//! # As numpy computes it
//! The value of a quantile from the selected elements follows numpy 2's arithmetic, dtype
//! by dtype: `(n - 1) * q` as the virtual index; `linear` interpolation with numpy's
//! `_lerp` (`a + (b - a) * t`, or `b - (b - a) * (1 - t)` where `t >= 0.5`), in the
//! input's float precision for one `q` given as a number and in f64 for a list or integer
//! inputs; `lower`, `higher`, `nearest` (half to even) and `midpoint`; a median as the
//! mean of the two middle elements (`(a + b) / 2`, in f64 for integers, in f32 for f16).
//! A slice holding NaN gives NaN; the `nan` forms leave NaN out (NaN for a slice of NaN
//! alone, without numpy's warning).
//!
//! # Complex inputs
//! numpy's `quantile` and `percentile` take real numbers only; its `median` also takes
//! complex ones, sorted by real part, then imaginary part (`ranked.rs` gives their keys).
//! The median is `np.mean` of the middle element or two: their sum from `+0` in the
//! input's precision, divided by the count as numpy's `true_divide` divides by `n + 0j`
//! (so `median([-0-1j])` is `0-1j`, and an infinite imaginary part makes the real part
//! NaN, as in numpy). A slice holding NaN gives its greatest NaN element in numpy's
//! order, bits as they are (numpy's `_median_nancheck`); `nanmedian` leaves those
//! elements out and gives `nan+0j` for a slice of NaN alone (numpy's small-axis form;
//! its 1-D form returns the slice's last element).

mod ranked;
mod selection;

pub(crate) use ranked::{KeyWord, NAN_WORDS, Ranked, fold_nan};
pub(crate) use selection::Step;
pub use selection::{Selection, counts_bytes};

use crate::dtype::{Complex, DType, Element};
use crate::error::{Error, Result};

/// How a quantile between two elements is taken (numpy's `method`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Linear interpolation between the two neighbours (numpy's default).
    Linear,
    /// The lower neighbour.
    Lower,
    /// The higher neighbour.
    Higher,
    /// The nearer neighbour (a tie to the even index, as `np.around`).
    Nearest,
    /// Halfway between the two neighbours.
    Midpoint,
}

impl Method {
    /// Parses `linear`, `lower`, `higher`, `nearest` or `midpoint`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for another name.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "linear" => Method::Linear,
            "lower" => Method::Lower,
            "higher" => Method::Higher,
            "nearest" => Method::Nearest,
            "midpoint" => Method::Midpoint,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown quantile method '{name}': expected linear, lower, higher, \
                     nearest or midpoint"
                )));
            }
        })
    }

    /// Its name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::Linear => "linear",
            Method::Lower => "lower",
            Method::Higher => "higher",
            Method::Nearest => "nearest",
            Method::Midpoint => "midpoint",
        }
    }

    /// Whether it picks one element (no arithmetic on values).
    fn picks(self) -> bool {
        matches!(self, Method::Lower | Method::Higher | Method::Nearest)
    }
}

/// A request for quantiles (or percentiles, or the median) of each output.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantiles {
    /// The quantiles, each in `[0, 1]` (percentiles divided by 100).
    pub q: Vec<f64>,
    /// One quantile given as a number: the result has no axis for `q`, and numpy's
    /// linear interpolation of a float input runs in the input's precision.
    pub scalar: bool,
    /// How a quantile between two elements is taken.
    pub method: Method,
    /// Leave NaN out (`nanquantile`, ...).
    pub skip_nan: bool,
    /// numpy's `median`: the mean of the two middle elements.
    pub median: bool,
    /// The name it was asked by (`quantile`, `nanpercentile`, ...).
    pub name: String,
}

/// Names that ask for quantiles (kept beside [`Reduce::parse`](crate::ops::reduce::Reduce::parse),
/// which tells them apart from the one-pass reductions).
pub use crate::ops::reduce::QUANTILE_NAMES as NAMES;

impl Quantiles {
    /// The request for the reduction `name` (`quantile`, `percentile`, `median` or their
    /// `nan` forms) with `q` (quantiles in `[0, 1]`, percentiles in `[0, 100]`; none for
    /// a median), `scalar` when `q` was one number, and `method` (default `linear`).
    /// `None` when `name` is not one of them.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a missing or out-of-range `q`, a `q` given to `median`, or
    /// an unknown method.
    pub fn parse(
        name: &str,
        q: Option<&[f64]>,
        scalar: bool,
        method: Option<&str>,
    ) -> Result<Option<Self>> {
        let lower = name.trim().to_ascii_lowercase();
        let (base, skip_nan) = match lower.strip_prefix("nan") {
            Some(b) if NAMES.contains(&lower.as_str()) => (b.to_string(), true),
            _ if NAMES.contains(&lower.as_str()) => (lower.clone(), false),
            _ => return Ok(None),
        };
        let method = method.map_or(Ok(Method::Linear), Method::parse)?;
        let (q, scalar, median) = match (base.as_str(), q) {
            ("median", None) => {
                if method != Method::Linear {
                    return Err(Error::invalid(format!(
                        "{lower} takes no method: give quantile with q 0.5 and method {}",
                        method.name()
                    )));
                }
                (vec![0.5], true, true)
            }
            ("median", Some(_)) => {
                return Err(Error::invalid(format!(
                    "{lower} takes no q: give quantile (q in [0, 1]) or percentile"
                )));
            }
            (_, None | Some([])) => {
                return Err(Error::invalid(format!(
                    "{lower} needs q: {} (several separated by commas)",
                    if base == "percentile" {
                        "percentiles in [0, 100]"
                    } else {
                        "quantiles in [0, 1]"
                    }
                )));
            }
            (b, Some(qs)) => {
                let (hi, scale) = if b == "percentile" {
                    (100.0, 100.0)
                } else {
                    (1.0, 1.0)
                };
                if let Some(bad) = qs.iter().find(|&&v| !(0.0..=hi).contains(&v)) {
                    return Err(Error::invalid(format!(
                        "{lower}: q {bad} is outside [0, {hi}]"
                    )));
                }
                // numpy's percentile: np.true_divide(q, 100)
                let q = qs.iter().map(|&v| v / scale).collect();
                (q, scalar && qs.len() == 1, false)
            }
        };
        Ok(Some(Quantiles {
            q,
            scalar,
            method,
            skip_nan,
            median,
            name: lower,
        }))
    }

    /// The result's dtype for an input of `input` dtype (numpy's).
    #[must_use]
    pub fn output_dtype(&self, input: DType) -> DType {
        if self.method.picks() || input.is_complex() {
            input
        } else if !input.is_float() || (!self.scalar && !self.median) {
            DType::F64
        } else {
            input
        }
    }

    /// The result's shape from the shape of one reduction's result: a leading axis of
    /// the quantiles unless one was given as a number.
    #[must_use]
    pub fn out_shape(&self, reduced: &[usize]) -> Vec<usize> {
        let mut s = if self.scalar {
            Vec::new()
        } else {
            vec![self.q.len()]
        };
        s.extend_from_slice(reduced);
        s
    }

    /// The sorted positions (0-based) the quantiles of `n` elements need.
    #[must_use]
    pub fn ranks(&self, n: u64) -> Vec<u64> {
        let mut r: Vec<u64> = Vec::new();
        for &q in &self.q {
            let (a, b, _) = self.neighbours(q, n);
            r.push(a);
            r.push(b);
        }
        r.sort_unstable();
        r.dedup();
        r
    }

    /// The ranks of the two elements quantile `q` of `n` elements is taken from and the
    /// weight of the second (numpy's `_get_indexes` and `_get_gamma`).
    fn neighbours(&self, q: f64, n: u64) -> (u64, u64, f64) {
        let last = n.saturating_sub(1);
        let h = (n as f64 - 1.0) * q;
        if self.median {
            let m = n / 2;
            return if n % 2 == 1 {
                (m, m, 0.0)
            } else {
                (m - 1, m, 0.5)
            };
        }
        let clamp = |v: f64| (v.max(0.0) as u64).min(last);
        match self.method {
            Method::Lower => (clamp(h.floor()), clamp(h.floor()), 0.0),
            Method::Higher => (clamp(h.ceil()), clamp(h.ceil()), 0.0),
            Method::Nearest => {
                let r = clamp(h.round_ties_even());
                (r, r, 0.0)
            }
            Method::Linear | Method::Midpoint => {
                let v = if self.method == Method::Midpoint {
                    0.5 * (h.floor() + h.ceil())
                } else {
                    h
                };
                if v >= last as f64 {
                    (last, last, 0.0)
                } else if v < 0.0 {
                    (0, 0, 0.0)
                } else {
                    let prev = v.floor();
                    let mut gamma = v - prev;
                    if self.method == Method::Midpoint {
                        gamma = if v % 1.0 == 0.0 { 0.0 } else { 0.5 };
                    }
                    (prev as u64, prev as u64 + 1, gamma)
                }
            }
        }
    }

    /// The quantiles of one output, as bytes of [`Quantiles::output_dtype`] appended to
    /// `out[k]` for quantile `k`: `n` elements counted, `nan` whether it held NaN (NaN
    /// left out by the `nan` forms), `at(rank)` the element of a rank [`ranks`](Self::ranks)
    /// gave; `nodata` the input's nodata value, which an integer result of no element
    /// counted takes (NaN otherwise).
    pub fn finish<T: Element>(
        &self,
        n: u64,
        nan: bool,
        nodata: Option<f64>,
        at: &dyn Fn(u64) -> T,
        out: &mut [Vec<u8>],
    ) {
        let out_dtype = self.output_dtype(T::DTYPE);
        for (k, &q) in self.q.iter().enumerate() {
            let v: f64 = if n == 0 && !out_dtype.is_float() && nodata.is_some() {
                nodata.unwrap_or(f64::NAN)
            } else if n == 0 || (nan && !self.skip_nan) {
                f64::NAN
            } else {
                let (ra, rb, t) = self.neighbours(q, n);
                let (a, b) = (at(ra), at(rb));
                if self.method.picks() {
                    out[k].extend_from_slice(bytemuck::bytes_of(&a));
                    continue;
                }
                value(a, b, t, self.median, out_dtype)
            };
            crate::dispatch_dtype!(out_dtype, O => {
                out[k].extend_from_slice(bytemuck::bytes_of(&O::from_f64(v)));
            }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
        }
    }
}

/// Rounds `x` to the precision of `T` (exact for values `T` holds).
fn rd<T: Element>(x: f64) -> f64 {
    T::from_f64(x).to_f64()
}

/// numpy's value between the elements `a` and `b` with weight `t` on `b` (or their
/// median), in the arithmetic of the result dtype `out` (see the module's notes).
fn value<T: Element>(a: T, b: T, t: f64, median: bool, out: DType) -> f64 {
    let (x, y) = (a.to_f64(), b.to_f64());
    if !T::DTYPE.is_float() {
        // integers: numpy computes b - a in the integer type, the rest in f64
        let d = (b.to_i128() - a.to_i128()) as f64;
        if median {
            // numpy's mean of the two, overflow included (not f64::midpoint)
            #[allow(clippy::manual_midpoint)]
            return (x + y) / 2.0;
        }
        return lerp(x, y, d, t);
    }
    if median {
        // np.mean of the two: the sum in the input's type (f32 for f16), then / 2
        return match T::DTYPE {
            DType::F16 => rd::<f32>(rd::<f32>(x + y) / 2.0),
            _ => rd::<T>(rd::<T>(x + y) / 2.0),
        };
    }
    let d = rd::<T>(y - x);
    if out == DType::F64 {
        // a list of quantiles: the difference in the input's type, the rest in f64
        return lerp(x, y, d, t);
    }
    // one quantile given as a number: every step in the input's type, t rounded to it
    let tt = rd::<T>(t);
    if t >= 0.5 {
        rd::<T>(y - rd::<T>(d * rd::<T>(1.0 - t)))
    } else {
        rd::<T>(x + rd::<T>(d * tt))
    }
}

/// numpy's `_lerp` in f64 with the difference `d` given.
fn lerp(x: f64, y: f64, d: f64, t: f64) -> f64 {
    if t >= 0.5 {
        y - d * (1.0 - t)
    } else {
        x + d * t
    }
}

/// numpy's median of complex elements from the middle one (`b` unused) or two
/// (`even`): `np.mean` of them (see the module's notes), in the parts' type `F`.
pub(crate) fn complex_median<F: Element>(a: Complex<F>, b: Complex<F>, even: bool) -> Complex<F> {
    // numpy's sum starts from +0 (so a -0 part becomes +0), in the input's precision
    let sum = |x: F, y: Option<F>| {
        let s = rd::<F>(0.0 + x.to_f64());
        y.map_or(s, |y| rd::<F>(s + y.to_f64()))
    };
    let (second, n) = if even { (Some(b), 2.0) } else { (None, 1.0) };
    let (re, im) = (
        sum(a.re, second.map(|b| b.re)),
        sum(a.im, second.map(|b| b.im)),
    );
    let m = crate::dtype::numpy_complex_mean(re, im, n);
    Complex {
        re: F::from_f64(m.re),
        im: F::from_f64(m.im),
    }
}

/// The order-preserving key of `x`: its bits as an unsigned integer whose order is the
/// order of the values; NaN (any sign, any payload) the largest key. `bits` wide.
#[inline]
#[must_use]
pub fn key<T: Element>(x: T) -> u64 {
    let bits = key_bits(T::DTYPE);
    let mut b = [0u8; 8];
    let v = bytemuck::bytes_of(&x);
    b[..v.len()].copy_from_slice(v);
    let raw = u64::from_le_bytes(b);
    let sign = 1u64 << (bits - 1);
    let all = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    match T::DTYPE {
        d if d.is_float() => {
            if x.is_nan() {
                all
            } else if raw & sign != 0 {
                !raw & all
            } else {
                raw | sign
            }
        }
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => raw ^ sign,
        _ => raw,
    }
}

/// The value whose [`key`] is `k`.
#[must_use]
pub fn from_key<T: Element>(k: u64) -> T {
    let bits = key_bits(T::DTYPE);
    let sign = 1u64 << (bits - 1);
    let all = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let raw = match T::DTYPE {
        d if d.is_float() => {
            if k & sign != 0 {
                k & !sign
            } else {
                !k & all
            }
        }
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => k ^ sign,
        _ => k,
    };
    let b = raw.to_le_bytes();
    bytemuck::pod_read_unaligned(&b[..std::mem::size_of::<T>()])
}

/// Bits of a key of `dtype`.
#[must_use]
pub fn key_bits(dtype: DType) -> u32 {
    dtype.size() as u32 * 8
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_values() {
        let xs = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-40,
            2.0,
            f32::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(key(w[0]) <= key(w[1]), "{} {}", w[0], w[1]);
        }
        assert!(key(f32::NAN) > key(f32::INFINITY) && key(-f32::NAN) == key(f32::NAN));
        for &x in &xs {
            assert_eq!(from_key::<f32>(key(x)).to_bits(), x.to_bits());
        }
        let is = [i16::MIN, -1, 0, 1, i16::MAX];
        for w in is.windows(2) {
            assert!(key(w[0]) < key(w[1]));
        }
        assert_eq!(from_key::<i16>(key(-7i16)), -7);
        assert_eq!(from_key::<u64>(key(u64::MAX)), u64::MAX);
        assert!(key(-1.0f64) < key(1.0f64));
    }

    #[test]
    fn ranks_and_names_are_numpys() {
        let q = Quantiles::parse("percentile", Some(&[2.0, 98.0]), false, None)
            .unwrap()
            .unwrap();
        assert_eq!(q.q, vec![0.02, 0.98]);
        assert_eq!(q.ranks(101), vec![2, 3, 98, 99]);
        let m = Quantiles::parse("nanmedian", None, false, None)
            .unwrap()
            .unwrap();
        assert!(m.median && m.skip_nan && m.scalar);
        assert_eq!(m.ranks(4), vec![1, 2]);
        assert_eq!(m.ranks(5), vec![2]);
        let n = Quantiles::parse("quantile", Some(&[0.5]), true, Some("nearest"))
            .unwrap()
            .unwrap();
        // (4 - 1) * 0.5 = 1.5: half to even
        assert_eq!(n.ranks(4), vec![2]);
        assert!(
            Quantiles::parse("sum", None, false, None)
                .unwrap()
                .is_none()
        );
        for bad in [
            Quantiles::parse("quantile", Some(&[1.5]), true, None),
            Quantiles::parse("quantile", None, true, None),
            Quantiles::parse("median", Some(&[0.5]), true, None),
            Quantiles::parse("quantile", Some(&[0.5]), true, Some("cubic")),
        ] {
            let e = bad.unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
