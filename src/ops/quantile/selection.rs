//! The state of a selection by digits between its passes (see [`super`]): which digit
//! the next pass counts, the groups of elements it counts, and each output's ranks with
//! the prefixes of their keys found so far. One process runs the passes itself
//! (`Engine::quantile`); a cluster counts each pass in shares of the rows on its workers,
//! adds the shares' counts and advances this state on the client, so the state and the
//! counts travel as bytes ([`Selection::to_bytes`], [`Selection::add`]).

use serde::{Deserialize, Serialize};

use super::ranked::{NAN_WORDS, Ranked, fold_nan};
use super::{Method, Quantiles, complex_median, key_bits};
use crate::dtype::{Complex, DType, Element};
use crate::error::{Error, Result};
use crate::ops::reduce::{Geometry, ReduceOver};

/// The groups of a pass: per output, the prefixes its ranks' keys have so far (sorted,
/// each once), their counters side by side.
#[derive(Clone, Debug, Default)]
pub(crate) struct Groups {
    /// Output `o`'s groups are `starts[o]..starts[o + 1]`.
    pub(crate) starts: Vec<u32>,
    pub(crate) prefix: Vec<u128>,
}

impl Groups {
    fn of(targets: &[Vec<(u64, u128)>]) -> Self {
        let mut starts = Vec::with_capacity(targets.len() + 1);
        let mut prefix = Vec::new();
        starts.push(0);
        for ts in targets {
            let mut p: Vec<u128> = ts.iter().map(|t| t.1).collect();
            p.sort_unstable();
            p.dedup();
            prefix.extend(p);
            starts.push(prefix.len() as u32);
        }
        Groups { starts, prefix }
    }

    fn find(&self, o: usize, prefix: u128) -> Option<usize> {
        let (a, b) = (self.starts[o] as usize, self.starts[o + 1] as usize);
        (a..b).find(|&i| self.prefix[i] == prefix)
    }
}

/// What one pass counts: the digit `(key >> shift) & (2^width - 1)` of the elements
/// whose higher digits are their group's prefix (every element in the first pass, which
/// also counts each output's NaN and nodata elements, [`NAN_WORDS`] words per output).
#[derive(Clone, Debug)]
pub(crate) struct Step {
    pub(crate) first: bool,
    pub(crate) shift: u32,
    pub(crate) width: u32,
    pub(crate) groups: Groups,
}

impl Step {
    /// Counters of this pass.
    pub(crate) fn counters(&self) -> usize {
        self.groups.prefix.len().max(1) << self.width
    }
}

/// The version of [`Selection::to_bytes`]'s layout (2: 128-bit prefixes, NaN elements).
const VERSION: u32 = 2;
/// Words per output in [`Selection::to_bytes`].
const PER_OUTPUT: usize = 5;
/// Words per rank in [`Selection::to_bytes`].
const PER_TARGET: usize = 3;

/// The header of [`Selection::to_bytes`]: what the selection is of.
#[derive(Serialize, Deserialize)]
struct Header {
    version: u32,
    name: String,
    q: Vec<f64>,
    scalar: bool,
    method: String,
    skip_nan: bool,
    median: bool,
    dtype: String,
    shape: Vec<usize>,
    axes: Option<Vec<usize>>,
    /// The nodata value's bits: JSON has no infinities.
    missing: Option<u64>,
    width: u32,
    done: u32,
    per_output: u64,
    outputs: usize,
    targets: usize,
}

/// A selection by digits between its passes: quantiles `spec` of an input of `dtype`
/// and `shape` over `over`, each pass counting `width` bits of the keys.
#[derive(Clone, Debug)]
pub struct Selection {
    spec: Quantiles,
    dtype: DType,
    shape: Vec<usize>,
    over: ReduceOver,
    /// The nodata value the `nan` forms leave out (never NaN: NaN is left out already).
    missing: Option<f64>,
    width: u32,
    /// Key bits found so far.
    done: u32,
    /// Elements per output, of the whole input.
    per_output: u64,
    /// Elements counted per output (NaN and nodata left out by the `nan` forms), known
    /// after the first pass.
    n: Vec<u64>,
    /// Whether an output held NaN (or, for the `nan` forms, nodata).
    nan: Vec<bool>,
    /// Per output, the bits of its greatest NaN element (complex inputs: the median of
    /// an output holding NaN).
    nan_pick: Vec<[u64; 2]>,
    /// Per output, its ranks' (rank within its group, key prefix so far).
    targets: Vec<Vec<(u64, u128)>>,
}

impl Selection {
    /// The selection before its first pass; `missing` the input's nodata value.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an axis the shape does not have.
    pub(crate) fn new(
        spec: &Quantiles,
        dtype: DType,
        shape: &[usize],
        over: ReduceOver,
        missing: Option<f64>,
        width: u32,
    ) -> Result<Self> {
        let g = Geometry::new(shape, over)?;
        let outputs = (g.outer * g.out_per_outer()) as usize;
        Ok(Selection {
            spec: spec.clone(),
            dtype,
            shape: shape.to_vec(),
            over,
            missing: missing.filter(|v| spec.skip_nan && !v.is_nan()),
            width: width.clamp(1, 16),
            done: 0,
            per_output: g.per_output(),
            n: vec![0; outputs],
            nan: vec![false; outputs],
            nan_pick: vec![[0; 2]; outputs],
            targets: vec![Vec::new(); outputs],
        })
    }

    /// The quantiles asked for.
    #[must_use]
    pub fn spec(&self) -> &Quantiles {
        &self.spec
    }

    /// The input's dtype.
    #[must_use]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The input's shape.
    #[must_use]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The axes reduced.
    #[must_use]
    pub fn over(&self) -> ReduceOver {
        self.over
    }

    /// The nodata value left out (the `nan` forms only).
    #[must_use]
    pub fn missing(&self) -> Option<f64> {
        self.missing
    }

    /// Bits of the keys each pass counts.
    #[must_use]
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Whether every rank's key is whole: [`Selection::finish`] gives the result.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.done >= key_bits(self.dtype)
    }

    /// Passes still to run.
    #[must_use]
    pub fn passes_left(&self) -> u32 {
        (key_bits(self.dtype) - self.done.min(key_bits(self.dtype))).div_ceil(self.width)
    }

    fn outputs(&self) -> usize {
        self.n.len()
    }

    /// What the next pass counts.
    pub(crate) fn step(&self) -> Step {
        let kbits = key_bits(self.dtype);
        let width = self.width.min(kbits - self.done);
        let first = self.done == 0;
        Step {
            first,
            shift: kbits - self.done - width,
            width,
            groups: if first {
                // every output is one group with no prefix
                Groups {
                    starts: (0..=self.outputs() as u32).collect(),
                    prefix: vec![0; self.outputs()],
                }
            } else {
                Groups::of(&self.targets)
            },
        }
    }

    /// Takes the counts of the pass [`Selection::step`] described (`nan`: per output,
    /// its NaN and nodata elements and greatest NaN element, [`NAN_WORDS`] words, from the
    /// first pass) and finds each rank's next digit.
    ///
    /// # Errors
    /// [`Error::Invalid`] if the counts are not of that pass; [`Error::Internal`] if a
    /// rank's group has no counts.
    pub(crate) fn take(&mut self, counts: &[u64], nan: &[u64]) -> Result<()> {
        if self.is_done() {
            return Err(Error::invalid(
                "this selection is complete: no pass is left to count",
            ));
        }
        let step = self.step();
        let outputs = self.outputs();
        if counts.len() != step.counters() || (step.first && nan.len() != NAN_WORDS * outputs) {
            return Err(Error::invalid(format!(
                "counts of {} and {} NaN counts are not of this pass ({} counters, {} outputs)",
                counts.len(),
                nan.len(),
                step.counters(),
                outputs
            )));
        }
        if step.first {
            let spec = &self.spec;
            for (o, w) in nan.chunks_exact(NAN_WORDS).enumerate() {
                let missing = w[0];
                self.nan[o] = missing > 0;
                self.nan_pick[o] = [w[1], w[2]];
                self.n[o] = if spec.skip_nan {
                    self.per_output.saturating_sub(missing)
                } else {
                    self.per_output
                };
                self.targets[o] = if self.n[o] == 0 || (self.nan[o] && !spec.skip_nan) {
                    Vec::new()
                } else {
                    spec.ranks(self.n[o]).into_iter().map(|r| (r, 0)).collect()
                };
            }
        }
        // each rank's next digit: the bucket where the count passes it
        let size = 1usize << step.width;
        for (o, ts) in self.targets.iter_mut().enumerate() {
            for (rank, prefix) in ts.iter_mut() {
                let gi = step.groups.find(o, *prefix).ok_or_else(|| {
                    Error::Internal(format!("no counts for output {o} prefix {prefix}"))
                })?;
                let c = &counts[gi * size..(gi + 1) * size];
                let mut before = 0u64;
                let mut digit = size - 1;
                for (d, &k) in c.iter().enumerate() {
                    if before + k > *rank {
                        digit = d;
                        break;
                    }
                    before += k;
                }
                *rank -= before;
                *prefix = (*prefix << step.width) | digit as u128;
            }
        }
        self.done += step.width;
        Ok(())
    }

    /// Adds the counts of the next pass over shares of the rows (each a share's counts as
    /// [`counts_bytes`] wrote them) and takes them: the selection's next step.
    ///
    /// # Errors
    /// [`Error::Invalid`] for no share, counts of another pass or bytes that are not
    /// counts.
    pub fn add(&mut self, shares: &[&[u8]]) -> Result<()> {
        let Some((first, rest)) = shares.split_first() else {
            return Err(Error::invalid("no share's counts to add"));
        };
        let mut total = first.to_vec();
        for s in rest {
            total = self.fold(&total, s)?;
        }
        let (counts, nan) = counts_from_bytes(&total)?;
        self.take(&counts, &nan)
    }

    /// Two shares' counts of one pass (as [`counts_bytes`] wrote them) as the counts of
    /// both: the counters and NaN counts added, each output's greatest NaN element kept
    /// (its bits are not a count: shares' counts are folded by this, never added word by
    /// word).
    ///
    /// # Errors
    /// [`Error::Invalid`] for counts of different passes or bytes that are not counts.
    pub fn fold(&self, a: &[u8], b: &[u8]) -> Result<Vec<u8>> {
        let (mut counts, mut nan) = counts_from_bytes(a)?;
        let (c, n) = counts_from_bytes(b)?;
        if c.len() != counts.len() || n.len() != nan.len() {
            return Err(Error::invalid(
                "the shares' counts are of different passes: count every share of one pass",
            ));
        }
        for (x, y) in counts.iter_mut().zip(c) {
            *x += y;
        }
        fold_nan(self.dtype, &mut nan, &n);
        Ok(counts_bytes(&counts, &nan))
    }

    /// The result's bytes, once [`Selection::is_done`]: quantile by quantile, output by
    /// output, in [`Quantiles::output_dtype`].
    ///
    /// # Errors
    /// [`Error::Invalid`] if passes are left.
    pub fn finish_bytes(&self) -> Result<Vec<u8>> {
        if !self.is_done() {
            return Err(Error::invalid(format!(
                "this selection has {} pass(es) left to count",
                self.passes_left()
            )));
        }
        crate::dispatch_dtype!(self.dtype, T => Ok(self.finish_typed::<T>()), complex => Ok(match self.dtype {
            DType::C64 => self.finish_complex::<f32>(),
            _ => self.finish_complex::<f64>(),
        }))
    }

    /// The medians of a complex input (its one quantile): see the module's notes of
    /// [`super`].
    fn finish_complex<F: Element + super::ranked::Part>(&self) -> Vec<u8>
    where
        Complex<F>: Ranked,
    {
        let mut out = Vec::with_capacity(self.outputs() * 2 * std::mem::size_of::<F>());
        for o in 0..self.outputs() {
            let n = self.n[o];
            let v = if n == 0 {
                // a slice of NaN alone (nanmedian): numpy's small-axis form fills NaN
                Complex {
                    re: F::from_f64(f64::NAN),
                    im: F::from_f64(0.0),
                }
            } else if self.nan[o] && !self.spec.skip_nan {
                let [re, im] = self.nan_pick[o];
                Complex {
                    re: F::from_bits64(re),
                    im: F::from_bits64(im),
                }
            } else {
                let ranks = self.spec.ranks(n);
                let at = |r: u64| {
                    let i = ranks.iter().position(|&x| x == r).unwrap_or(0);
                    self.targets[o]
                        .get(i)
                        .map_or(Complex::<F>::of_f64(f64::NAN), |&(_, k)| {
                            Complex::<F>::of_key(k)
                        })
                };
                let m = n / 2;
                if n % 2 == 1 {
                    complex_median(at(m), at(m), false)
                } else {
                    complex_median(at(m - 1), at(m), true)
                }
            };
            out.extend_from_slice(bytemuck::bytes_of(&v));
        }
        out
    }

    fn finish_typed<T: Element>(&self) -> Vec<u8> {
        let spec = &self.spec;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); spec.q.len()];
        for o in 0..self.outputs() {
            let ranks = if self.targets[o].is_empty() {
                Vec::new()
            } else {
                spec.ranks(self.n[o])
            };
            let vals: Vec<T> = self.targets[o]
                .iter()
                .map(|&(_, k)| <T as Ranked>::of_key(k))
                .collect();
            let at = |r: u64| -> T {
                let i = ranks.iter().position(|&x| x == r).unwrap_or(0);
                vals.get(i)
                    .copied()
                    .unwrap_or_else(|| T::from_f64(f64::NAN))
            };
            spec.finish::<T>(self.n[o], self.nan[o], self.missing, &at, &mut out);
        }
        out.concat()
    }

    /// The result's shape (a leading axis of the quantiles unless one was a number).
    #[must_use]
    pub fn out_shape(&self) -> Vec<usize> {
        self.spec.out_shape(&self.over.out_shape(&self.shape))
    }

    /// The result's dtype.
    #[must_use]
    pub fn out_dtype(&self) -> DType {
        self.spec.output_dtype(self.dtype)
    }

    /// The state as bytes, for [`Selection::from_bytes`] in another process: a JSON
    /// header's length (u64, little-endian) and the header, then per output its element
    /// count, NaN flag, greatest NaN element's bits (two words) and rank count, then each
    /// rank's rank and key prefix (low, then high word): little-endian u64 words.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let (axis, axes) = crate::ops::reduce::PartialHeader::axis_fields(self.over);
        let header = Header {
            version: VERSION,
            name: self.spec.name.clone(),
            q: self.spec.q.clone(),
            scalar: self.spec.scalar,
            method: self.spec.method.name().into(),
            skip_nan: self.spec.skip_nan,
            median: self.spec.median,
            dtype: self.dtype.name().into(),
            shape: self.shape.clone(),
            axes: axes.or_else(|| axis.map(|a| vec![a])),
            missing: self.missing.map(f64::to_bits),
            width: self.width,
            done: self.done,
            per_output: self.per_output,
            outputs: self.outputs(),
            targets: self.targets.iter().map(Vec::len).sum(),
        };
        let json = serde_json::to_vec(&header).unwrap_or_default();
        let mut words: Vec<u64> = Vec::with_capacity(PER_OUTPUT * self.outputs());
        for o in 0..self.outputs() {
            words.extend([
                self.n[o],
                u64::from(self.nan[o]),
                self.nan_pick[o][0],
                self.nan_pick[o][1],
                self.targets[o].len() as u64,
            ]);
        }
        for ts in &self.targets {
            for &(r, p) in ts {
                #[allow(clippy::cast_possible_truncation)] // the low word, then the high
                words.extend([r, p as u64, (p >> 64) as u64]);
            }
        }
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(&json);
        for w in words {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The state [`Selection::to_bytes`] wrote.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bytes that are not a selection's state.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::invalid(format!("not a quantile selection's state: {why}"));
        let len = b
            .get(..8)
            .map(|h| u64::from_le_bytes(h.try_into().unwrap_or([0; 8])) as usize)
            .ok_or_else(|| bad("too short"))?;
        let json = b
            .get(8..8usize.saturating_add(len))
            .ok_or_else(|| bad("its header is cut"))?;
        let h: Header = serde_json::from_slice(json).map_err(|e| bad(&e.to_string()))?;
        if h.version != VERSION {
            return Err(bad(&format!(
                "version {} (this is version {VERSION})",
                h.version
            )));
        }
        let dtype: DType = h.dtype.parse()?;
        let over = match &h.axes {
            None => ReduceOver::All,
            Some(a) => ReduceOver::axes(a)?,
        };
        let spec = Quantiles {
            q: h.q,
            scalar: h.scalar,
            method: Method::parse(&h.method)?,
            skip_nan: h.skip_nan,
            median: h.median,
            name: h.name,
        };
        let mut s = Selection::new(
            &spec,
            dtype,
            &h.shape,
            over,
            h.missing.map(f64::from_bits),
            h.width,
        )?;
        let body = &b[8 + len..];
        let words: Vec<u64> = body
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        if !body.len().is_multiple_of(8)
            || h.outputs != s.outputs()
            || words.len() != PER_OUTPUT * h.outputs + PER_TARGET * h.targets
            || h.done > key_bits(dtype)
            || h.per_output != s.per_output
        {
            return Err(bad("its counts do not match its header"));
        }
        let mut at = PER_OUTPUT * h.outputs;
        for (o, w) in words[..at].chunks_exact(PER_OUTPUT).enumerate() {
            s.n[o] = w[0];
            s.nan[o] = w[1] != 0;
            s.nan_pick[o] = [w[2], w[3]];
            let k = w[4] as usize;
            let ranks = words
                .get(at..at.saturating_add(PER_TARGET * k))
                .ok_or_else(|| bad("its ranks are cut"))?;
            s.targets[o] = ranks
                .chunks_exact(PER_TARGET)
                .map(|p| (p[0], u128::from(p[1]) | (u128::from(p[2]) << 64)))
                .collect();
            at += PER_TARGET * k;
        }
        s.done = h.done;
        Ok(s)
    }
}

/// One share's counts of a pass as bytes for [`Selection::add`]: the counter and NaN
/// count lengths (u64, little-endian), then the counters and the NaN counts.
#[must_use]
pub fn counts_bytes(counts: &[u64], nan: &[u64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 * (2 + counts.len() + nan.len()));
    for w in [counts.len() as u64, nan.len() as u64]
        .iter()
        .chain(counts)
        .chain(nan)
    {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

/// The counters and NaN counts [`counts_bytes`] wrote.
fn counts_from_bytes(b: &[u8]) -> Result<(Vec<u64>, Vec<u64>)> {
    let words: Vec<u64> = b
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let bad = || Error::invalid("not a share's quantile counts");
    if !b.len().is_multiple_of(8) || words.len() < 2 {
        return Err(bad());
    }
    let (nc, nn) = (words[0] as usize, words[1] as usize);
    if words.len() - 2 != nc.saturating_add(nn) {
        return Err(bad());
    }
    Ok((words[2..2 + nc].to_vec(), words[2 + nc..].to_vec()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(name: &str, q: &[f64]) -> Quantiles {
        Quantiles::parse(name, Some(q), false, None)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_state_survives_its_bytes_at_every_pass() {
        // f32 ranks of 0..1000 by 12-bit digits: three passes
        let data: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32).collect();
        let q = spec("quantile", &[0.0, 0.25, 0.5, 1.0]);
        let mut s = Selection::new(&q, DType::F32, &[1000], ReduceOver::All, None, 12).unwrap();
        while !s.is_done() {
            let st = s.step();
            let mut counts = vec![0u64; st.counters()];
            let mut nan = vec![0u64; NAN_WORDS * usize::from(st.first)];
            let mask = (1u64 << st.width) - 1;
            for &x in &data {
                let k = super::super::key(x);
                let top = k.checked_shr(st.shift + st.width).unwrap_or(0);
                for (gi, &p) in st.groups.prefix.iter().enumerate() {
                    if st.first || p == u128::from(top) {
                        counts[(gi << st.width) | ((k >> st.shift) & mask) as usize] += 1;
                    }
                }
            }
            if st.first {
                nan[0] = 0;
            }
            // split in two shares, through bytes
            let half: Vec<u64> = counts.iter().map(|c| c / 2).collect();
            let rest: Vec<u64> = counts.iter().zip(&half).map(|(c, h)| c - h).collect();
            let a = counts_bytes(&half, &nan);
            let b = counts_bytes(&rest, &vec![0; nan.len()]);
            s = Selection::from_bytes(&s.to_bytes()).unwrap();
            s.add(&[&a, &b]).unwrap();
        }
        let got: Vec<f64> = bytemuck::pod_collect_to_vec(&s.finish_bytes().unwrap());
        assert_eq!(got, vec![0.0, 249.75, 499.5, 999.0]);
        assert!(s.add(&[&counts_bytes(&[0], &[])]).is_err());
    }

    #[test]
    fn an_infinite_nodata_value_survives_the_bytes() {
        let q = spec("nanquantile", &[0.5]);
        let s = Selection::new(
            &q,
            DType::F32,
            &[9],
            ReduceOver::All,
            Some(f64::NEG_INFINITY),
            8,
        )
        .unwrap();
        let back = Selection::from_bytes(&s.to_bytes()).unwrap();
        assert_eq!(back.missing(), Some(f64::NEG_INFINITY));
    }

    #[test]
    fn bytes_that_are_not_a_state_or_counts_are_refused() {
        let q = spec("quantile", &[0.5]);
        let s = Selection::new(&q, DType::U8, &[4, 5], ReduceOver::Axis(0), None, 16).unwrap();
        let b = s.to_bytes();
        for cut in [0, 7, 20, b.len() - 8] {
            assert!(Selection::from_bytes(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut s = Selection::from_bytes(&b).unwrap();
        assert!(s.add(&[]).is_err());
        assert!(s.add(&[&[1, 2, 3]]).is_err());
        // counts of another pass's size
        assert!(s.add(&[&counts_bytes(&[0; 3], &[0; 5])]).is_err());
        assert!(s.finish_bytes().is_err());
    }
}
