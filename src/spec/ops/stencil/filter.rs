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

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tiling::{Boundary, BoxPlan, BoxTile, Halo};

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
pub(crate) struct Kernel1 {
    pub(crate) w: Vec<f64>,
    pub(crate) before: usize,
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
pub(crate) enum Pass {
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
    pub(crate) pass: Pass,
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
