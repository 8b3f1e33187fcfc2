//! Neighbourhood filters over box tiles with halos: gaussian, box (uniform), sobel,
//! median and dense 2-D convolution, with the `scipy.ndimage` semantics people already
//! validate against (kernel shapes, centring, boundary modes, constant padding per
//! 1-D pass).
//!
//! A tile's padded box is gathered from its source rows (see [`crate::tiling`]) into a
//! float scratch buffer, the filter runs over it, and the result is stored in the output
//! dtype. Every output pixel is computed by the same sequence of operations whatever the
//! tile it falls in, so a tiled result is bit-identical to the untiled one.
//!
//! Arithmetic is in f32 for inputs of at most 16 bits (and f32), in f64 for f64 and for
//! 32- and 64-bit integers. Integer outputs round toward zero and saturate, as a cast does
//! (and as `scipy.ndimage` does).

use std::fmt;
use std::ops::{Add, Mul, Sub};

use rayon::prelude::*;

use crate::dispatch_dtype;
use crate::dtype::{DType, Element, store_f64, typed};
use crate::error::{Error, Result};
use crate::tiling::{Boundary, BoxPlan, BoxTile, Halo, Sources};

/// A filter, as given on the command line (`gaussian:sigma=2`, `box:size=5`, `sobel`,
/// `median:size=3`, `convolve:kernel.npy`).
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// Gaussian blur: `sigma` in pixels, kernel radius `int(truncate * sigma + 0.5)`.
    Gaussian {
        /// Standard deviation in pixels.
        sigma: f64,
        /// Radius in standard deviations (scipy's default is 4).
        truncate: f64,
    },
    /// Mean over a `size × size` window.
    Box {
        /// Window side.
        size: usize,
    },
    /// Sobel gradient: the magnitude `hypot(d/drow, d/dcol)`, or one derivative (`axis`
    /// 0: along rows, i.e. vertical; 1: along columns) as `scipy.ndimage.sobel`.
    Sobel {
        /// `None` for the magnitude.
        axis: Option<usize>,
    },
    /// Median over a `size × size` window (the upper median for even sizes, as scipy).
    Median {
        /// Window side.
        size: usize,
    },
    /// True 2-D convolution with a kernel (`scipy.ndimage.convolve`): the kernel is
    /// flipped and centred at `shape // 2`.
    Convolve {
        /// Kernel weights, row-major.
        weights: Vec<f64>,
        /// Kernel rows.
        rows: usize,
        /// Kernel columns.
        cols: usize,
    },
}

/// Widest window of a filter along one axis (gaussian, box), in pixels: it bounds the
/// kernel and the halo before the planner sizes anything from them.
const MAX_WINDOW: usize = 65535;

/// Widest median window (its `size x size` values are sorted for every pixel).
const MAX_MEDIAN: usize = 255;

impl Filter {
    /// Parses a filter spec. `convolve:PATH` reads a small kernel with `load_kernel`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown filter or a bad parameter; whatever
    /// `load_kernel` returns.
    pub fn parse(
        spec: &str,
        load_kernel: impl FnOnce(&str) -> Result<(Vec<f64>, usize, usize)>,
    ) -> Result<Filter> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let bad = |msg: String| Error::Invalid(format!("filter `{spec}`: {msg}"));
        if name == "convolve" {
            if args.is_empty() {
                return Err(bad("give the kernel file: convolve:kernel.npy".into()));
            }
            let (weights, rows, cols) = load_kernel(args)?;
            return Ok(Filter::Convolve {
                weights,
                rows,
                cols,
            });
        }
        let mut params: Vec<(&str, &str)> = Vec::new();
        for kv in args.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("`{kv}` is not KEY=VALUE")))?;
            params.push((k.trim(), v.trim()));
        }
        let allowed: &[&str] = match name {
            "gaussian" => &["sigma", "truncate"],
            "box" | "median" => &["size"],
            "sobel" => &["axis"],
            _ => {
                return Err(bad(
                    "unknown filter: use gaussian:sigma=S, box:size=N, sobel, median:size=N or \
                     convolve:KERNEL.npy"
                        .into(),
                ));
            }
        };
        if let Some((k, _)) = params.iter().find(|(k, _)| !allowed.contains(k)) {
            return Err(bad(format!(
                "unknown parameter `{k}` (takes {})",
                allowed.join(", ")
            )));
        }
        let get = |k: &str| params.iter().find(|p| p.0 == k).map(|p| p.1);
        let num = |k: &str| -> Result<Option<f64>> {
            get(k)
                .map(|v| {
                    v.parse::<f64>()
                        .map_err(|_| bad(format!("{k}=`{v}` is not a number")))
                })
                .transpose()
        };
        let size = || -> Result<usize> {
            let v = get("size").ok_or_else(|| bad("give size=N".into()))?;
            let max = if name == "median" {
                MAX_MEDIAN
            } else {
                MAX_WINDOW
            };
            match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(bad(format!(
                    "size=`{v}` must be a whole number from 1 to {max}"
                ))),
            }
        };
        Ok(match name {
            "gaussian" => {
                let sigma = num("sigma")?.ok_or_else(|| bad("give sigma=S".into()))?;
                let truncate = num("truncate")?.unwrap_or(4.0);
                if !(sigma > 0.0 && sigma.is_finite()) {
                    return Err(bad("sigma must be a positive number".into()));
                }
                if !(truncate > 0.0 && truncate.is_finite()) {
                    return Err(bad("truncate must be a positive number".into()));
                }
                let radius = truncate * sigma + 0.5;
                if radius >= (MAX_WINDOW / 2 + 1) as f64 {
                    return Err(bad(format!(
                        "truncate x sigma = {} pixels: the window would pass {MAX_WINDOW} \
                         pixels (give a smaller sigma, or downsample first)",
                        truncate * sigma
                    )));
                }
                Filter::Gaussian { sigma, truncate }
            }
            "box" => Filter::Box { size: size()? },
            "median" => Filter::Median { size: size()? },
            _ => Filter::Sobel {
                axis: match get("axis") {
                    None => None,
                    Some("0") => Some(0),
                    Some("1") => Some(1),
                    Some(v) => {
                        return Err(bad(format!(
                            "axis=`{v}`: use 0 (along rows) or 1 (along columns)"
                        )));
                    }
                },
            },
        })
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::Gaussian { sigma, truncate } => {
                write!(f, "gaussian sigma={sigma} truncate={truncate}")
            }
            Filter::Box { size } => write!(f, "box {size}x{size}"),
            Filter::Sobel { axis: None } => write!(f, "sobel magnitude"),
            Filter::Sobel { axis: Some(a) } => write!(f, "sobel axis={a}"),
            Filter::Median { size } => write!(f, "median {size}x{size}"),
            Filter::Convolve { rows, cols, .. } => write!(f, "convolve {rows}x{cols}"),
        }
    }
}

/// A 1-D correlation kernel: `out[i] = Σ_t w[t] · in[i + t - before]`.
#[derive(Clone, Debug, PartialEq)]
struct Kernel1 {
    w: Vec<f64>,
    before: usize,
}

impl Kernel1 {
    fn halo(&self) -> Halo {
        Halo {
            before: self.before,
            after: self.w.len() - 1 - self.before,
        }
    }
}

/// What runs over a padded box.
#[derive(Clone, Debug, PartialEq)]
enum Pass {
    /// Rows kernel and columns kernel; the rows pass first unless `cols_first` (the
    /// order matters at a constant boundary, where each 1-D pass pads with the constant).
    Separable(Kernel1, Kernel1, bool),
    /// Magnitude of two separable passes.
    Magnitude([(Kernel1, Kernel1, bool); 2]),
    /// Dense correlation (the kernel already flipped), `rows × cols`, centred at
    /// `(before_r, before_c)`.
    Dense {
        w: Vec<f64>,
        rows: usize,
        cols: usize,
        before_r: usize,
        before_c: usize,
    },
    /// Order statistic of a `size × size` window.
    Median { size: usize },
}

/// A filter compiled to passes, with its halos.
#[derive(Clone, Debug, PartialEq)]
pub struct Stencil {
    pass: Pass,
    /// The filter it came from.
    pub filter: Filter,
    /// Boundary mode.
    pub boundary: Boundary,
}

fn gaussian_kernel(sigma: f64, truncate: f64) -> Kernel1 {
    // scipy.ndimage._gaussian_kernel1d, order 0
    let radius = (truncate * sigma + 0.5) as usize;
    let s2 = sigma * sigma;
    let mut w: Vec<f64> = (0..=2 * radius)
        .map(|i| {
            let x = i as f64 - radius as f64;
            (-0.5 / s2 * x * x).exp()
        })
        .collect();
    let sum: f64 = w.iter().sum();
    for v in &mut w {
        *v /= sum;
    }
    Kernel1 { w, before: radius }
}

fn k1(w: &[f64]) -> Kernel1 {
    Kernel1 {
        w: w.to_vec(),
        before: w.len() / 2,
    }
}

impl Stencil {
    /// Compiles `filter` with `boundary`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a kernel that is empty or too large to be sensible.
    pub fn new(filter: Filter, boundary: Boundary) -> Result<Stencil> {
        let pass = match &filter {
            Filter::Gaussian { sigma, truncate } => {
                let k = gaussian_kernel(*sigma, *truncate);
                if k.w.len() > 4097 {
                    return Err(Error::Invalid(format!(
                        "gaussian sigma={sigma}: a kernel of {} taps is too wide",
                        k.w.len()
                    )));
                }
                Pass::Separable(k.clone(), k, false)
            }
            Filter::Box { size } => {
                let k = k1(&vec![1.0 / *size as f64; *size]);
                Pass::Separable(k.clone(), k, false)
            }
            Filter::Sobel { axis } => {
                let d = k1(&[-1.0, 0.0, 1.0]);
                let s = k1(&[1.0, 2.0, 1.0]);
                // scipy: the derivative pass first, then the smoothing pass
                let along_rows = (d.clone(), s.clone(), false);
                let along_cols = (s, d, true);
                match axis {
                    Some(0) => Pass::Separable(along_rows.0, along_rows.1, along_rows.2),
                    Some(_) => Pass::Separable(along_cols.0, along_cols.1, along_cols.2),
                    None => Pass::Magnitude([along_rows, along_cols]),
                }
            }
            Filter::Median { size } => {
                if *size > 255 {
                    return Err(Error::Invalid(format!(
                        "median size={size} is too large (at most 255)"
                    )));
                }
                Pass::Median { size: *size }
            }
            Filter::Convolve {
                weights,
                rows,
                cols,
            } => {
                if weights.is_empty() || weights.len() != rows * cols {
                    return Err(Error::Invalid(
                        "convolve: the kernel is empty or not 2-D".into(),
                    ));
                }
                // correlate with the flipped kernel; centre (k - 1 - k // 2) in flipped
                // coordinates puts the original centre at k // 2, as scipy.
                let w: Vec<f64> = weights.iter().rev().copied().collect();
                Pass::Dense {
                    w,
                    rows: *rows,
                    cols: *cols,
                    before_r: rows - 1 - rows / 2,
                    before_c: cols - 1 - cols / 2,
                }
            }
        };
        Ok(Stencil {
            pass,
            filter,
            boundary,
        })
    }

    /// Halos along rows and columns.
    #[must_use]
    pub fn halos(&self) -> (Halo, Halo) {
        match &self.pass {
            Pass::Separable(r, c, _) => (r.halo(), c.halo()),
            Pass::Magnitude([(r0, c0, _), (r1, c1, _)]) => (
                Halo {
                    before: r0.halo().before.max(r1.halo().before),
                    after: r0.halo().after.max(r1.halo().after),
                },
                Halo {
                    before: c0.halo().before.max(c1.halo().before),
                    after: c0.halo().after.max(c1.halo().after),
                },
            ),
            Pass::Dense {
                rows,
                cols,
                before_r,
                before_c,
                ..
            } => (
                Halo {
                    before: *before_r,
                    after: rows - 1 - before_r,
                },
                Halo {
                    before: *before_c,
                    after: cols - 1 - before_c,
                },
            ),
            Pass::Median { size } => {
                let h = Halo {
                    before: size / 2,
                    after: size - 1 - size / 2,
                };
                (h, h)
            }
        }
    }

    /// The arithmetic type for `dtype`: true for f64.
    #[must_use]
    pub fn wide(dtype: DType) -> bool {
        matches!(
            dtype,
            DType::F64 | DType::I32 | DType::U32 | DType::I64 | DType::U64
        )
    }

    /// Scratch bytes per element of the padded box, of a row pass and of the tile.
    #[must_use]
    pub fn scratch(&self, dtype: DType) -> crate::tiling::Scratch {
        let f = if Stencil::wide(dtype) { 8 } else { 4 };
        let (row_pass, tile) = match &self.pass {
            Pass::Separable(..) => (f, f),
            Pass::Magnitude(_) => (f, 2 * f),
            Pass::Dense { .. } | Pass::Median { .. } => (0, f),
        };
        crate::tiling::Scratch {
            padded: f,
            row_pass,
            tile,
        }
    }
}

/// The float type filters compute in.
pub trait Real:
    Copy
    + Send
    + Sync
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + bytemuck::Pod
    + 'static
{
    /// From f64 (rounding to nearest).
    fn of(v: f64) -> Self;
    /// To f64.
    fn f64(self) -> f64;
    /// Square root.
    #[must_use]
    fn sqrt(self) -> Self;
    /// Total order (NaN last), for medians.
    fn total_cmp(&self, other: &Self) -> std::cmp::Ordering;
}

impl Real for f32 {
    #[inline]
    fn of(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline]
    fn total_cmp(&self, other: &Self) -> std::cmp::Ordering {
        f32::total_cmp(self, other)
    }
}

impl Real for f64 {
    #[inline]
    fn of(v: f64) -> Self {
        v
    }
    #[inline]
    fn f64(self) -> f64 {
        self
    }
    #[inline]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline]
    fn total_cmp(&self, other: &Self) -> std::cmp::Ordering {
        f64::total_cmp(self, other)
    }
}

/// One tile's job: the stencil, the plan it belongs to, the tile and its windows.
pub struct TileJob<'a> {
    /// The compiled filter.
    pub stencil: &'a Stencil,
    /// The plan (image dims, halos, sources).
    pub plan: &'a BoxPlan,
    /// The tile.
    pub tile: &'a BoxTile,
    /// The tile's windows, one per source row range.
    pub windows: &'a [&'a [u8]],
    /// Input dtype.
    pub in_dtype: DType,
    /// Output dtype.
    pub out_dtype: DType,
}

/// Runs one tile of a filter into `out` (the tile's `rows × cols` elements of
/// `job.out_dtype`), using `arena` as scratch (grown as needed and kept across tiles).
///
/// # Errors
/// [`Error::Internal`] if the windows do not match the plan.
pub fn run_tile(job: &TileJob<'_>, arena: &mut Vec<f64>, out: &mut [u8]) -> Result<()> {
    if Stencil::wide(job.in_dtype) {
        run_typed::<f64>(job, arena, out)
    } else {
        run_typed::<f32>(job, arena, out)
    }
}

fn run_typed<F: Real>(job: &TileJob<'_>, arena: &mut Vec<f64>, out: &mut [u8]) -> Result<()> {
    let (hr, hc) = (job.plan.halo_rows, job.plan.halo_cols);
    let (th, tw) = (job.tile.rows(), job.tile.cols());
    let (ph, pw) = (th + hr.total(), tw + hc.total());
    let sc = job.stencil.scratch(job.in_dtype);
    let f = std::mem::size_of::<F>();
    let row_pass = sc.row_pass as usize / f;
    let tile_n = sc.tile as usize / f;
    let pass_len = (th * pw).max(ph * tw);
    let need = ph * pw + row_pass * pass_len + tile_n * th * tw;
    let words = (need * f).div_ceil(8);
    if arena.len() < words {
        arena.resize(words, 0.0);
    }
    let all: &mut [F] = &mut bytemuck::cast_slice_mut::<f64, F>(&mut arena[..words])[..need];
    let (padded, rest) = all.split_at_mut(ph * pw);
    let (pass_buf, tile_buf) = rest.split_at_mut(row_pass * pass_len);
    gather::<F>(job, padded, pw)?;
    let cval = match job.plan.boundary {
        Boundary::Constant(v) => Some(F::of(v)),
        _ => None,
    };
    let geo = Geo {
        pw,
        th,
        tw,
        hr,
        hc,
        cval,
        r_first: job.tile.r0 - hr.before as i64,
        c_first: job.tile.c0 - hc.before as i64,
        h: job.plan.dims[1] as i64,
        w: job.plan.dims[2] as i64,
    };
    let (result, _) = tile_buf.split_at_mut(th * tw);
    match &job.stencil.pass {
        Pass::Separable(kr, kc, cols_first) => {
            separable(padded, &geo, (kr, kc, *cols_first), pass_buf, result);
        }
        Pass::Magnitude([a, b]) => {
            let (ga, gb) = tile_buf.split_at_mut(th * tw);
            separable(padded, &geo, (&a.0, &a.1, a.2), pass_buf, ga);
            separable(padded, &geo, (&b.0, &b.1, b.2), pass_buf, gb);
            ga.par_chunks_mut(4096)
                .zip(gb.par_chunks(4096))
                .for_each(|(x, y)| {
                    for (x, &y) in x.iter_mut().zip(y) {
                        *x = (*x * *x + y * y).sqrt();
                    }
                });
            store(&ga[..th * tw], out, job.out_dtype);
            return Ok(());
        }
        Pass::Dense {
            w: weights,
            rows,
            cols,
            before_r,
            before_c,
        } => {
            let wf: Vec<F> = weights.iter().map(|&v| F::of(v)).collect();
            // the padded box starts at the largest halo; offset into it
            let (dr, dc) = (hr.before - before_r, hc.before - before_c);
            result
                .par_chunks_mut(tw.max(1))
                .enumerate()
                .for_each(|(i, orow)| {
                    orow.fill(F::default());
                    for a in 0..*rows {
                        let prow = &padded[(i + a + dr) * pw..(i + a + dr + 1) * pw];
                        for b in 0..*cols {
                            let k = wf[a * cols + b];
                            let src = &prow[b + dc..b + dc + tw];
                            for (o, &x) in orow.iter_mut().zip(src) {
                                *o = *o + k * x;
                            }
                        }
                    }
                });
        }
        Pass::Median { size } => {
            let k = *size;
            let rank = k * k / 2;
            result.par_chunks_mut(tw.max(1)).enumerate().for_each_init(
                || Vec::with_capacity(k * k),
                |win: &mut Vec<F>, (i, orow)| {
                    for (j, o) in orow.iter_mut().enumerate() {
                        win.clear();
                        for a in 0..k {
                            let at = (i + a) * pw + j;
                            win.extend_from_slice(&padded[at..at + k]);
                        }
                        let (_, m, _) = win.select_nth_unstable_by(rank, Real::total_cmp);
                        *o = *m;
                    }
                },
            );
        }
    }
    store(result, out, job.out_dtype);
    Ok(())
}

/// Geometry of one tile's padded box.
struct Geo<F> {
    pw: usize,
    th: usize,
    tw: usize,
    hr: Halo,
    hc: Halo,
    cval: Option<F>,
    r_first: i64,
    c_first: i64,
    h: i64,
    w: i64,
}

/// `out[i] = Σ_t w[t] · src[first + t·stride + i]`: a tap per row of `src` (fixed tap
/// order).
#[inline]
fn taps_rows<F: Real>(out: &mut [F], w: &[F], src: &[F], first: usize, stride: usize) {
    let n = out.len();
    let row = |t: usize| &src[first + t * stride..first + t * stride + n];
    for (o, &x) in out.iter_mut().zip(row(0)) {
        *o = w[0] * x;
    }
    for (t, &k) in w.iter().enumerate().skip(1) {
        for (o, &x) in out.iter_mut().zip(row(t)) {
            *o = *o + k * x;
        }
    }
}

/// `out[j] = Σ_t w[t] · row[j + t]` (fixed tap order).
#[inline]
fn taps_cols<F: Real>(out: &mut [F], w: &[F], row: &[F]) {
    for (o, &x) in out.iter_mut().zip(row) {
        *o = w[0] * x;
    }
    for (t, &k) in w.iter().enumerate().skip(1) {
        for (o, &x) in out.iter_mut().zip(&row[t..]) {
            *o = *o + k * x;
        }
    }
}

/// A separable correlation: the rows pass and the columns pass, in the given order, each
/// in fixed tap order. With a constant boundary, the intermediate's positions outside the
/// image are the constant (each 1-D pass pads with it, as scipy).
fn separable<F: Real>(
    padded: &[F],
    g: &Geo<F>,
    (kr, kc, cols_first): (&Kernel1, &Kernel1, bool),
    pass: &mut [F],
    out: &mut [F],
) {
    let wr: Vec<F> = kr.w.iter().map(|&v| F::of(v)).collect();
    let wc: Vec<F> = kc.w.iter().map(|&v| F::of(v)).collect();
    let dr = g.hr.before - kr.before;
    let dc = g.hc.before - kc.before;
    let (pw, th, tw) = (g.pw, g.th, g.tw);
    let ph = th + g.hr.total();
    let out = &mut out[..th * tw];
    if cols_first {
        // columns pass over every padded row: ph × tw
        let pass = &mut pass[..ph * tw];
        pass.par_chunks_mut(tw.max(1))
            .enumerate()
            .for_each(|(i, prow)| {
                let r = g.r_first + i as i64;
                match g.cval {
                    Some(c) if r < 0 || r >= g.h => prow.fill(c),
                    _ => taps_cols(prow, &wc, &padded[i * pw + dc..(i + 1) * pw]),
                }
            });
        let pass = &*pass;
        out.par_chunks_mut(tw.max(1))
            .enumerate()
            .for_each(|(i, orow)| taps_rows(orow, &wr, pass, (i + dr) * tw, tw));
    } else {
        // rows pass over every padded column: th × pw
        let pass = &mut pass[..th * pw];
        pass.par_chunks_mut(pw.max(1))
            .enumerate()
            .for_each(|(i, prow)| {
                taps_rows(prow, &wr, padded, (i + dr) * pw, pw);
                if let Some(c) = g.cval {
                    for (j, p) in prow.iter_mut().enumerate() {
                        let col = g.c_first + j as i64;
                        if col < 0 || col >= g.w {
                            *p = c;
                        }
                    }
                }
            });
        let pass = &*pass;
        out.par_chunks_mut(tw.max(1))
            .enumerate()
            .for_each(|(i, orow)| taps_cols(orow, &wc, &pass[i * pw + dc..(i + 1) * pw]));
    }
}

/// Fills the padded box (`(th + hr) × pw`) from the tile's windows.
fn gather<F: Real>(job: &TileJob<'_>, padded: &mut [F], pw: usize) -> Result<()> {
    let plan = job.plan;
    let [_, h, w] = plan.dims;
    let src = plan.sources(job.tile);
    if src.rows.len() != job.windows.len() {
        return Err(Error::Internal(format!(
            "stencil tile {}: {} windows for {} source row ranges",
            job.tile.index,
            job.windows.len(),
            src.rows.len()
        )));
    }
    let es = job.in_dtype.size();
    let cval = match plan.boundary {
        Boundary::Constant(v) => F::of(v),
        _ => F::default(),
    };
    let r_first = job.tile.r0 - plan.halo_rows.before as i64;
    let c_first = job.tile.c0 - plan.halo_cols.before as i64;
    // position in a window row of each padded column's source (None: the constant)
    let cols: Vec<Option<usize>> = (0..pw)
        .map(|j| {
            plan.boundary
                .source(c_first + j as i64, w)
                .and_then(|c| src.col_pos(c))
        })
        .collect();
    let rl = src.row_len();
    // The run of padded columns that are the image's own, contiguous in a source row.
    let inside = (0..pw)
        .filter(|&j| (0..w as i64).contains(&(c_first + j as i64)))
        .fold(None, |acc: Option<(usize, usize)>, j| match acc {
            None => Some((j, j + 1)),
            Some((a, _)) => Some((a, j + 1)),
        });
    let in_dtype = job.in_dtype;
    padded
        .par_chunks_mut(pw.max(1))
        .enumerate()
        .try_for_each(|(i, prow)| -> Result<()> {
            let Some(r) = plan.boundary.source(r_first + i as i64, h) else {
                prow.fill(cval);
                return Ok(());
            };
            let (k, off) = locate(&src, r, job.tile.index)?;
            let bytes = &job.windows[k][off * rl * es..(off + 1) * rl * es];
            dispatch_dtype!(in_dtype, T => convert_row::<T, F>(bytes, prow, &cols, inside, cval));
            Ok(())
        })
}

fn locate(src: &Sources, r: usize, tile: usize) -> Result<(usize, usize)> {
    src.locate(r).ok_or_else(|| {
        Error::Internal(format!(
            "stencil tile {tile}: source row {r} is in none of its windows"
        ))
    })
}

fn convert_row<T: Element + bytemuck::Pod, F: Real>(
    bytes: &[u8],
    prow: &mut [F],
    cols: &[Option<usize>],
    inside: Option<(usize, usize)>,
    cval: F,
) {
    let row = typed::<T>(bytes);
    if let Some((a, b)) = inside {
        let c0 = cols[a].unwrap_or(0);
        for (p, &x) in prow[a..b].iter_mut().zip(&row[c0..c0 + (b - a)]) {
            *p = F::of(x.to_f64());
        }
    }
    let (a, b) = inside.unwrap_or((0, 0));
    for j in (0..a).chain(b..prow.len()) {
        prow[j] = cols[j].map_or(cval, |c| F::of(row[c].to_f64()));
    }
}

/// Stores floats into `out` in `dtype` with the cast rules.
fn store<F: Real>(src: &[F], out: &mut [u8], dtype: DType) {
    const CHUNK: usize = 2048;
    let es = dtype.size();
    let f = std::mem::size_of::<F>();
    if (dtype == DType::F32 && f == 4) || (dtype == DType::F64 && f == 8) {
        out.copy_from_slice(bytemuck::cast_slice(src));
        return;
    }
    out.par_chunks_mut(CHUNK * es)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(o, s)| {
            let mut tmp = [0f64; CHUNK];
            for (t, &x) in tmp.iter_mut().zip(s) {
                *t = x.f64();
            }
            store_f64(&tmp[..s.len()], o, dtype);
        });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn no_kernel(_: &str) -> Result<(Vec<f64>, usize, usize)> {
        Err(Error::Invalid("no".into()))
    }

    #[test]
    fn parse_filters() {
        assert_eq!(
            Filter::parse("gaussian:sigma=2", no_kernel).unwrap(),
            Filter::Gaussian {
                sigma: 2.0,
                truncate: 4.0
            }
        );
        assert_eq!(
            Filter::parse("box:size=5", no_kernel).unwrap(),
            Filter::Box { size: 5 }
        );
        assert_eq!(
            Filter::parse("sobel", no_kernel).unwrap(),
            Filter::Sobel { axis: None }
        );
        for bad in [
            "gauss:sigma=1",
            "gaussian",
            "gaussian:sigma=-1",
            "box:size=0",
            "box:width=3",
            "median:size=x",
            "sobel:axis=2",
            "convolve",
        ] {
            let e = Filter::parse(bad, no_kernel).unwrap_err().to_string();
            assert!(e.contains(bad) || e.contains("filter"), "{bad}: {e}");
        }
    }

    #[test]
    fn gaussian_kernel_matches_scipy_shape() {
        // scipy: radius = int(4 * 2 + 0.5) = 8, weights sum to one, symmetric
        let k = gaussian_kernel(2.0, 4.0);
        assert_eq!(k.w.len(), 17);
        assert_eq!(k.before, 8);
        assert!((k.w.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        assert_eq!(k.w[0].to_bits(), k.w[16].to_bits());
    }

    #[test]
    fn halos() {
        let s = Stencil::new(Filter::Box { size: 4 }, Boundary::Reflect).unwrap();
        assert_eq!(
            s.halos().0,
            Halo {
                before: 2,
                after: 1
            }
        );
        let c = Stencil::new(
            Filter::Convolve {
                weights: vec![1.0; 4],
                rows: 1,
                cols: 4,
            },
            Boundary::Reflect,
        )
        .unwrap();
        // convolve centres the original kernel at 4 // 2 = 2: in[i - m + 2], m in 0..4
        assert_eq!(
            c.halos().1,
            Halo {
                before: 1,
                after: 2
            }
        );
        assert_eq!(c.halos().0, Halo::default());
    }
}
