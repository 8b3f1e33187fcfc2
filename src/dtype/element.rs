//! The [`Element`] trait typed kernels are generic over, its implementations for every
//! real dtype, and the conversions from `f64` every cast applies (round to nearest even
//! for floats, toward zero with saturation for integers, f32 rounded to odd where a
//! second rounding follows).

use std::fmt;

use bytemuck::Pod;
use half::{bf16, f16};

use super::{Bool, DType};

/// A Rust type that is the in-memory form of one [`DType`].
///
/// Kernels are generic over `Element`; the crate's `dispatch_dtype!` macro turns a
/// runtime [`DType`] into the matching type.
pub trait Element: Pod + Send + Sync + PartialOrd + fmt::Debug + 'static {
    /// The tag of this type.
    const DTYPE: DType;
    /// Smallest value (negative infinity for floats).
    const LOWEST: Self;
    /// Largest value (positive infinity for floats).
    const HIGHEST: Self;
    /// Widens to f64 (exact for every type but 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 with tilestream's cast rules (see the module docs).
    fn from_f64(v: f64) -> Self;
    /// Widens to i64 for exact integer sums (wrapping for u64 beyond `i64::MAX`; floats
    /// truncate, but float sums never use this).
    fn to_i64(self) -> i64;
    /// Widens an integer or bool exactly (floats truncate toward zero, saturating; casts
    /// from floats never use this).
    fn to_i128(self) -> i128;
    /// From an integer: saturating for integer types, correctly rounded (nearest even)
    /// for f32 and f64, through f64 for f16 and bf16.
    fn from_i128(v: i128) -> Self;
    /// True if this value is NaN (always false for integers).
    #[inline]
    fn is_nan(self) -> bool {
        false
    }
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                // `as` from float to int rounds toward zero, saturates and maps NaN to 0.
                v as $t
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn to_i128(self) -> i128 {
                self as i128
            }
            #[inline]
            fn from_i128(v: i128) -> Self {
                v.clamp(<$t>::MIN as i128, <$t>::MAX as i128) as $t
            }
        }
    };
}
int_element!(u8, DType::U8);
int_element!(u16, DType::U16);
int_element!(u32, DType::U32);
int_element!(u64, DType::U64);
int_element!(i8, DType::I8);
int_element!(i16, DType::I16);
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);

impl Element for Bool {
    const DTYPE: DType = DType::Bool;
    const LOWEST: Self = Bool(0);
    const HIGHEST: Self = Bool(1);
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self.0 != 0))
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        Bool(u8::from(v != 0.0))
    }
    #[inline]
    fn to_i64(self) -> i64 {
        i64::from(self.0 != 0)
    }
    #[inline]
    fn to_i128(self) -> i128 {
        i128::from(self.0 != 0)
    }
    #[inline]
    fn from_i128(v: i128) -> Self {
        Bool(u8::from(v != 0))
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    const LOWEST: Self = f32::NEG_INFINITY;
    const HIGHEST: Self = f32::INFINITY;
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn to_i128(self) -> i128 {
        Element::to_f64(self) as i128
    }
    #[inline]
    fn from_i128(v: i128) -> Self {
        v as f32
    }
    #[inline]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    const LOWEST: Self = f64::NEG_INFINITY;
    const HIGHEST: Self = f64::INFINITY;
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn to_i128(self) -> i128 {
        Element::to_f64(self) as i128
    }
    #[inline]
    fn from_i128(v: i128) -> Self {
        v as f64
    }
    #[inline]
    fn is_nan(self) -> bool {
        self.is_nan()
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    const LOWEST: Self = f16::NEG_INFINITY;
    const HIGHEST: Self = f16::INFINITY;
    #[inline]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        f16_from_f64(v)
    }
    #[inline]
    fn to_i64(self) -> i64 {
        f16::to_f64(self) as i64
    }
    #[inline]
    fn to_i128(self) -> i128 {
        Element::to_f64(self) as i128
    }
    #[inline]
    fn from_i128(v: i128) -> Self {
        f16_from_f64(v as f64)
    }
    #[inline]
    fn is_nan(self) -> bool {
        f16::is_nan(self)
    }
}

/// f64 to f32 rounded *to odd*: truncated toward zero, with the last bit set if anything
/// was dropped. A second rounding of the result to a format with at least two fewer
/// mantissa bits (f16, bf16) then equals a single correct rounding of the f64. Branchless,
/// so loops over slices vectorize.
#[inline]
#[must_use]
#[allow(clippy::float_cmp)] // exactness is the point: was anything dropped?
pub fn f32_round_to_odd(v: f64) -> f32 {
    let t = v as f32;
    let back = f64::from(t);
    // masks combined with `&`, not `&&`: no branches, so slice loops vectorize
    let inexact = u32::from(back != v) & u32::from(t.abs() < f32::INFINITY);
    let away = u32::from(back.abs() > v.abs());
    f32::from_bits((t.to_bits() - (inexact & away)) | inexact)
}

/// [`f32_round_to_odd`] over a slice, compiled for AVX2 when the CPU has it (the same IEEE
/// operations either way, so the same bits).
fn round_to_odd_slice(src: &[f64], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { round_to_odd_avx2(src, dst) };
        return;
    }
    round_to_odd_loop(src, dst);
}

/// [`round_to_odd_loop`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn round_to_odd_avx2(src: &[f64], dst: &mut [f32]) {
    round_to_odd_loop(src, dst);
}

// inline(always) so the body is compiled with AVX2 inside `round_to_odd_avx2`
#[allow(clippy::inline_always)]
#[inline(always)]
fn round_to_odd_loop(src: &[f64], dst: &mut [f32]) {
    for (t, &v) in dst.iter_mut().zip(src) {
        *t = f32_round_to_odd(v);
    }
}

/// Casts f64 values into `out` (bytes of `dtype`) with tilestream's cast rules. f16 and
/// bf16 take the vectorized path: [`f32_round_to_odd`], then `half`'s slice conversion
/// (F16C where the CPU has it), which rounds to nearest even.
pub fn store_f64(src: &[f64], out: &mut [u8], dtype: DType) {
    use half::slice::HalfFloatSliceExt;
    const CHUNK: usize = 1024;
    let mut tmp = [0f32; CHUNK];
    match dtype {
        DType::F16 | DType::BF16 => {
            for (k, s) in src.chunks(CHUNK).enumerate() {
                round_to_odd_slice(s, &mut tmp[..s.len()]);
                let o = &mut out[k * CHUNK * 2..(k * CHUNK + s.len()) * 2];
                if dtype == DType::F16 {
                    bytemuck::cast_slice_mut::<u8, f16>(o).convert_from_f32_slice(&tmp[..s.len()]);
                } else {
                    bytemuck::cast_slice_mut::<u8, bf16>(o).convert_from_f32_slice(&tmp[..s.len()]);
                }
            }
        }
        _ => crate::dispatch_dtype!(dtype, T => {
            let o: &mut [T] = bytemuck::cast_slice_mut(out);
            o.iter_mut().zip(src).for_each(|(o, &v)| *o = T::from_f64(v));
        }, complex => unreachable!("complex arrays are refused before any kernel runs (DType::real_only)")),
    }
}

/// f64 to bf16, rounded to nearest even.
///
/// `half::bf16::from_f64` is not correctly rounded for some values (e.g. -50.625015258789
/// becomes -50.5 instead of -50.75), so: round to f32 *to odd* (truncate, then set the
/// last bit if anything was dropped), which keeps the information a second rounding
/// needs, then round that f32 to bf16 to nearest even.
#[must_use]
pub fn bf16_from_f64(v: f64) -> bf16 {
    bf16::from_f32(f32_round_to_odd(v))
}

/// f64 to f16, rounded to nearest even.
///
/// `half::f16::from_f64` is not correctly rounded, and not the same on every CPU: with
/// F16C it rounds to f32 first (1 + 2^-11 + 2^-40 becomes 1.0 instead of 1 + 2^-10),
/// without it it drops the low 32 bits of the mantissa. Rounding to f32 *to odd* first
/// keeps what the second rounding needs, on every CPU, and is what [`store_f64`] does.
#[must_use]
pub fn f16_from_f64(v: f64) -> f16 {
    f16::from_f32(f32_round_to_odd(v))
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    const LOWEST: Self = bf16::NEG_INFINITY;
    const HIGHEST: Self = bf16::INFINITY;
    #[inline]
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        bf16_from_f64(v)
    }
    #[inline]
    fn to_i64(self) -> i64 {
        bf16::to_f64(self) as i64
    }
    #[inline]
    fn to_i128(self) -> i128 {
        Element::to_f64(self) as i128
    }
    #[inline]
    fn from_i128(v: i128) -> Self {
        bf16_from_f64(v as f64)
    }
    #[inline]
    fn is_nan(self) -> bool {
        bf16::is_nan(self)
    }
}
