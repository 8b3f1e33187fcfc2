//! The CPU kernel of the neighbourhood filters ([`Stencil`](super::Stencil) compiles them):
//! a tile's padded box is gathered from its source rows into a float scratch buffer,
//! each pass runs over it (rows split across the rayon pool), and the result is stored
//! in the output dtype.

use std::ops::{Add, Mul, Sub};

use rayon::prelude::*;

use super::{Kernel1, Pass, Stencil, TileJob};
use crate::backend::{Backend, BoxKernel, OnBackend};
use crate::budget::Reservation;
use crate::dispatch_dtype;
use crate::dtype::{DType, Element, store_f64, typed};
use crate::error::{Error, Result};
use crate::tiling::{Boundary, BoxPlan, BoxTile, Halo, Sources};

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

/// The filter's kernel on the host backend `host`: each tile gathered, filtered and
/// stored on the backend's own threads, in an arena that lives as long as the kernel and
/// is paid for by `scratch`.
pub(super) fn host_kernel<'a>(
    host: &'a dyn Backend,
    stencil: &'a Stencil,
    plan: &'a BoxPlan,
    input: DType,
    output: DType,
    scratch: Reservation,
) -> BoxKernel<'a, BoxTile> {
    let mut arena = Vec::new();
    Box::new(OnBackend::new(
        host,
        move |tile: BoxTile, windows: &[&[u8]], o: &mut [u8]| {
            let _paid = &scratch;
            let job = TileJob {
                stencil,
                plan,
                tile: &tile,
                windows,
                in_dtype: input,
                out_dtype: output,
            };
            host.install(&mut || run_tile(&job, &mut arena, o))
        },
    ))
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

/// Fills the padded box (`(th + halo) × pw` values of `F`, `pw` the tile's columns plus
/// the column halo) from the tile's windows, applying the boundary mode: what every
/// pass reads. Public for the CUDA kernel (`cuda.rs`), which gathers on the host and runs the
/// passes on the device, and for its tests.
///
/// # Errors
/// [`Error::Internal`] if the windows do not match the plan.
pub fn gather<F: Real>(job: &TileJob<'_>, padded: &mut [F], pw: usize) -> Result<()> {
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
            dispatch_dtype!(in_dtype, T => convert_row::<T, F>(bytes, prow, &cols, inside, cval), complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)"));
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
