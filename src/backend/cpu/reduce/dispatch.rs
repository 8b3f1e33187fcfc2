//! Which [`Kernel`] runs a reduction: the reduction, the input's dtype and its nodata
//! value pick one, as the CUDA backend's `Reduction::of` picks its kernel family.

use super::complex::{self, ArgExtreme, Cx, Extreme, FMIN, PLAIN, REPLACE};
use super::kernels::{
    ArgK, CountK, Every, FloatSum, IntSum, Kernel, MaxK, MinK, Moments, NanExtreme, NanFloatSum,
    NanMoments, NodataExtreme, NodataIntSum, NotNan, NotNodata, Valid,
};
use super::{Item, Reducer};
use crate::dtype::{Complex, DType, Element};
use crate::ops::reduce::{Geometry, Reduce, TileReducer};

/// Builds the CPU streaming reducer for `op` over `g` on elements of `dtype`, splitting
/// work across `threads` (which changes the work split, never the arithmetic).
#[must_use]
pub fn reducer(op: Reduce, dtype: DType, g: Geometry, threads: usize) -> Box<dyn TileReducer> {
    masked_reducer(op, dtype, g, threads, None)
}

/// A boxed reducer of `k` over `g` on `th` threads.
fn new<T: Item, K: Kernel<T> + Send + 'static>(
    k: K,
    g: Geometry,
    th: usize,
) -> Box<dyn TileReducer> {
    Box::new(Reducer::<T, K>::new(k, g, th))
}
/// The `nan` forms of an integer input with a nodata value.
fn int_nodata<T: Element>(op: Reduce, g: Geometry, th: usize, nd: T) -> Box<dyn TileReducer> {
    let valid = NotNodata(nd);
    let unsigned = T::DTYPE.is_unsigned();
    match op {
        Reduce::NanSum if unsigned => new::<T, _>(
            NodataIntSum::<T, u64> {
                nodata: nd,
                unsigned,
                _o: std::marker::PhantomData,
            },
            g,
            th,
        ),
        Reduce::NanSum => new::<T, _>(
            NodataIntSum::<T, i64> {
                nodata: nd,
                unsigned,
                _o: std::marker::PhantomData,
            },
            g,
            th,
        ),
        Reduce::NanMean => new::<T, _>(NanFloatSum { mean: true, valid }, g, th),
        Reduce::NanMin => new::<T, _>(NodataExtreme::<T, false> { nodata: nd }, g, th),
        Reduce::NanMax => new::<T, _>(NodataExtreme::<T, true> { nodata: nd }, g, th),
        Reduce::NanVar { ddof } => new::<T, _>(
            NanMoments {
                ddof,
                sqrt: false,
                valid,
            },
            g,
            th,
        ),
        Reduce::NanStd { ddof } => new::<T, _>(
            NanMoments {
                ddof,
                sqrt: true,
                valid,
            },
            g,
            th,
        ),
        Reduce::Count => new::<T, _>(CountK { valid }, g, th),
        Reduce::NanArgMin => new::<T, _>(ArgK::<_, false> { valid }, g, th),
        Reduce::NanArgMax => new::<T, _>(ArgK::<_, true> { valid }, g, th),
        other => int::<T>(other, g, th),
    }
}

/// The reductions of an integer input without a nodata value.
fn int<T: Element>(op: Reduce, g: Geometry, th: usize) -> Box<dyn TileReducer> {
    let unsigned = T::DTYPE.is_unsigned();
    // integers have no NaN: the `nan` forms are the plain ones
    let op = op.without_nan();
    match op {
        Reduce::Sum if unsigned => new::<T, _>(
            IntSum::<u64> {
                mean: false,
                unsigned,
                _o: std::marker::PhantomData,
            },
            g,
            th,
        ),
        Reduce::Sum => new::<T, _>(
            IntSum::<i64> {
                mean: false,
                unsigned,
                _o: std::marker::PhantomData,
            },
            g,
            th,
        ),
        Reduce::Mean => new::<T, _>(
            IntSum::<f64> {
                mean: true,
                unsigned,
                _o: std::marker::PhantomData,
            },
            g,
            th,
        ),
        _ => common::<T, _>(op, g, th, NotNan),
    }
}

/// The reductions of a float input, `valid` telling the elements to keep.
fn float<T: Element, M: Valid<T> + Send + 'static>(
    op: Reduce,
    g: Geometry,
    th: usize,
    valid: M,
) -> Box<dyn TileReducer> {
    match op {
        Reduce::Sum => new::<T, _>(FloatSum { mean: false }, g, th),
        Reduce::Mean => new::<T, _>(FloatSum { mean: true }, g, th),
        Reduce::NanSum => new::<T, _>(NanFloatSum { mean: false, valid }, g, th),
        Reduce::NanMean => new::<T, _>(NanFloatSum { mean: true, valid }, g, th),
        Reduce::NanMin => new::<T, _>(NanExtreme::<M, false> { valid }, g, th),
        Reduce::NanMax => new::<T, _>(NanExtreme::<M, true> { valid }, g, th),
        Reduce::NanVar { ddof } => new::<T, _>(
            NanMoments {
                ddof,
                sqrt: false,
                valid,
            },
            g,
            th,
        ),
        Reduce::NanStd { ddof } => new::<T, _>(
            NanMoments {
                ddof,
                sqrt: true,
                valid,
            },
            g,
            th,
        ),
        _ => common::<T, M>(op, g, th, valid),
    }
}

/// The reductions every element type shares.
fn common<T: Element, M: Valid<T> + Send + 'static>(
    op: Reduce,
    g: Geometry,
    th: usize,
    valid: M,
) -> Box<dyn TileReducer> {
    match op {
        Reduce::Min => new::<T, _>(MinK, g, th),
        Reduce::Max => new::<T, _>(MaxK, g, th),
        Reduce::Var { ddof } => new::<T, _>(Moments { ddof, sqrt: false }, g, th),
        Reduce::Std { ddof } => new::<T, _>(Moments { ddof, sqrt: true }, g, th),
        Reduce::Count => new::<T, _>(CountK { valid }, g, th),
        Reduce::ArgMin => new::<T, _>(ArgK::<_, false> { valid: Every }, g, th),
        Reduce::ArgMax => new::<T, _>(ArgK::<_, true> { valid: Every }, g, th),
        Reduce::NanArgMin => new::<T, _>(ArgK::<M, false> { valid }, g, th),
        Reduce::NanArgMax => new::<T, _>(ArgK::<M, true> { valid }, g, th),
        Reduce::Sum
        | Reduce::Mean
        | Reduce::NanSum
        | Reduce::NanMean
        | Reduce::NanMin
        | Reduce::NanMax
        | Reduce::NanVar { .. }
        | Reduce::NanStd { .. } => {
            unreachable!("sums, means and the nan forms are dispatched by dtype class")
        }
    }
}

/// [`reducer`] for an input whose elements equal to `nodata` (a value its type holds)
/// are missing: the `nan` forms and `count` leave them out as they leave NaN out (an
/// integer input's `nanmin`/`nanmax` of nodata alone is the nodata value); the other
/// reductions take every element, as numpy does.
#[must_use]
pub fn masked_reducer(
    op: Reduce,
    dtype: DType,
    g: Geometry,
    threads: usize,
    nodata: Option<f64>,
) -> Box<dyn TileReducer> {
    // a nodata value matters to the reductions that leave missing elements out; NaN as
    // nodata is NaN, which they leave out already
    let nodata = op.nodata_left_out(nodata);
    crate::dispatch_dtype!(dtype, T => {
        match nodata {
            Some(v) if T::DTYPE.is_float() => float::<T, _>(op, g, threads, NotNodata(T::from_f64(v))),
            Some(v) => int_nodata::<T>(op, g, threads, T::from_f64(v)),
            None if T::DTYPE.is_float() => float::<T, _>(op, g, threads, NotNan),
            None => int::<T>(op, g, threads),
        }
    }, complex => {
        debug_assert!(nodata.is_none(), "a complex input's nodata is refused (Engine::reduce)");
        if dtype == DType::C64 {
            complex::<Complex<f32>>(op, g, threads)
        } else {
            complex::<Complex<f64>>(op, g, threads)
        }
    })
}

/// The reductions of a complex input that are not its parts' (`super::complex`).
fn complex<T: Cx>(op: Reduce, g: Geometry, th: usize) -> Box<dyn TileReducer> {
    match op {
        Reduce::Sum => new::<T, _>(complex::Sum::<false> { mean: false }, g, th),
        Reduce::Mean => new::<T, _>(complex::Sum::<false> { mean: true }, g, th),
        Reduce::NanSum => new::<T, _>(complex::Sum::<true> { mean: false }, g, th),
        Reduce::NanMean => new::<T, _>(complex::Sum::<true> { mean: true }, g, th),
        Reduce::Min => new::<T, _>(Extreme::<false, PLAIN>, g, th),
        Reduce::Max => new::<T, _>(Extreme::<true, PLAIN>, g, th),
        Reduce::NanMin => new::<T, _>(Extreme::<false, FMIN>, g, th),
        Reduce::NanMax => new::<T, _>(Extreme::<true, FMIN>, g, th),
        Reduce::ArgMin => new::<T, _>(ArgExtreme::<false, PLAIN>, g, th),
        Reduce::ArgMax => new::<T, _>(ArgExtreme::<true, PLAIN>, g, th),
        Reduce::NanArgMin => new::<T, _>(ArgExtreme::<false, REPLACE>, g, th),
        Reduce::NanArgMax => new::<T, _>(ArgExtreme::<true, REPLACE>, g, th),
        Reduce::Count => new::<T, _>(complex::Count, g, th),
        Reduce::Var { ddof } => new::<T, _>(complex::Moments::<false> { ddof, sqrt: false }, g, th),
        Reduce::Std { ddof } => new::<T, _>(complex::Moments::<false> { ddof, sqrt: true }, g, th),
        Reduce::NanVar { ddof } => {
            new::<T, _>(complex::Moments::<true> { ddof, sqrt: false }, g, th)
        }
        Reduce::NanStd { ddof } => {
            new::<T, _>(complex::Moments::<true> { ddof, sqrt: true }, g, th)
        }
    }
}
