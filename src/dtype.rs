//! Element types: the [`DType`] tag read from file headers, and the [`Element`] trait that
//! typed kernels are generic over.
//!
//! The complex dtypes (complex64, complex128) are no [`Element`]:
//! [`dispatch_dtype!`](crate::dispatch_dtype) makes each of its sites say what it does
//! with them, and the operations that do not take them refuse them at plan time
//! ([`DType::real_only`]), so no kernel sees them by mistake.
//!
//! Conversions from `f64` are the casts tilestream applies everywhere a result changes
//! type: to floats they round to nearest even (f16/bf16 through `half`), to integers they
//! round toward zero, saturate at the type's limits and map NaN to 0, to bool they test
//! `!= 0`.

use std::fmt;
use std::str::FromStr;

use bytemuck::{Pod, Zeroable};

use crate::error::Error;

mod element;

pub use element::{Element, bf16_from_f64, f16_from_f64, f32_round_to_odd, store_f64};

/// A one-byte boolean element (0 = false, anything else = true), as numpy stores `bool`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Pod, Zeroable)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// A complex number as numpy stores `complex64` (`Complex<f32>`) and `complex128`
/// (`Complex<f64>`): the real part, then the imaginary part.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Complex<T> {
    /// The real part.
    pub re: T,
    /// The imaginary part.
    pub im: T,
}

// SAFETY: `repr(C)` of two fields of one type that is itself `Pod` (f32, f64): no padding,
// every bit pattern valid, all zeros a valid value.
unsafe impl Zeroable for Complex<f32> {}
// SAFETY: as above.
unsafe impl Pod for Complex<f32> {}
// SAFETY: as above.
unsafe impl Zeroable for Complex<f64> {}
// SAFETY: as above.
unsafe impl Pod for Complex<f64> {}

/// numpy's mean of a complex sum `re + im j` over `n` elements: the complex division by
/// `n + 0j` of its `true_divide` loop (Smith's algorithm: `rat = 0 / n`, `scl = 1 / n`,
/// each part `(re + im * rat) * scl`), not `re / n`: the two differ in the last place
/// for some `n`, and an infinite part makes the other NaN (`mean([inf+0j])` is
/// `inf+nanj`). A slice with nothing kept (`n = 0`) gives `0 / 0` in both parts.
pub(crate) fn numpy_complex_mean(re: f64, im: f64, n: f64) -> Complex<f64> {
    if n == 0.0 {
        return Complex {
            re: re / n,
            im: im / n,
        };
    }
    let rat = 0.0 / n;
    let scl = 1.0 / (n + 0.0 * rat);
    Complex {
        re: (re + im * rat) * scl,
        im: (im - re * rat) * scl,
    }
}

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// numpy `bool`, one byte.
    Bool,
    /// unsigned 8-bit integer.
    U8,
    /// unsigned 16-bit integer.
    U16,
    /// unsigned 32-bit integer.
    U32,
    /// unsigned 64-bit integer.
    U64,
    /// signed 8-bit integer.
    I8,
    /// signed 16-bit integer.
    I16,
    /// signed 32-bit integer.
    I32,
    /// signed 64-bit integer.
    I64,
    /// IEEE half precision.
    F16,
    /// bfloat16. Written to `.npy` with the descr `bfloat16`, which numpy reads once
    /// `ml_dtypes` is imported; read from `bfloat16` or from `V2`, which is what numpy
    /// writes for an `ml_dtypes` bfloat16 array.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// numpy `complex64`: two f32, the real part then the imaginary part.
    C64,
    /// numpy `complex128`: two f64, the real part then the imaginary part.
    C128,
}

impl DType {
    /// Every real dtype, in a fixed order (the complex ones are [`DType::COMPLEX`]).
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// The complex dtypes.
    pub const COMPLEX: [DType; 2] = [DType::C64, DType::C128];

    /// Bytes per element.
    #[must_use]
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// Bytes of the unit a byte-order swap reverses: the element, or each of a complex
    /// element's two parts.
    #[must_use]
    pub fn swap_unit(self) -> usize {
        match self {
            DType::C64 | DType::C128 => self.size() / 2,
            _ => self.size(),
        }
    }

    /// True for complex64 and complex128.
    #[must_use]
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// The dtype of a complex element's parts (f32 for complex64, f64 for complex128);
    /// the dtype itself for a real one.
    #[must_use]
    pub fn part(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// The complex dtype whose parts are `self` (complex64 for f32, complex128 for f64);
    /// `None` for the other dtypes.
    #[must_use]
    pub fn complex_of(self) -> Option<DType> {
        match self {
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
    }

    /// `Ok` for a real dtype; for a complex one, the one-line refusal of `what` (an
    /// operation, as a user names it) on complex arrays.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming `what`, the dtype and what does take complex arrays.
    pub fn real_only(self, what: &str) -> Result<(), Error> {
        if self.is_complex() {
            return Err(self.complex_refusal(what));
        }
        Ok(())
    }

    /// The one-line refusal of `what` on an array of this (complex) dtype.
    #[must_use]
    pub fn complex_refusal(self, what: &str) -> Error {
        Error::invalid(format!(
            "{what} of a {} array is not supported: complex arrays can be converted, \
             cast to a complex dtype, scaled and offset (affine), transposed, multiplied \
             (matmul), used in expressions (map), and reduced (every reduction but \
             quantiles and percentiles)",
            self.numpy_name()
        ))
    }

    /// numpy's name of the dtype (`float32`, `complex64`, ...), which is also its Zarr v3
    /// `data_type`.
    #[must_use]
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// Short name as used on the command line (`f32`, `u16`, `bool`, ...).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }

    /// True for f16, bf16, f32 and f64.
    #[must_use]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for the unsigned integer types.
    #[must_use]
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The `.npy` header `descr` string for this dtype (little-endian).
    #[must_use]
    pub fn npy_descr(self) -> &'static str {
        match self {
            DType::Bool => "|b1",
            DType::U8 => "|u1",
            DType::U16 => "<u2",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::F16 => "<f2",
            DType::BF16 => "bfloat16",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::C64 => "<c8",
            DType::C128 => "<c16",
        }
    }

    /// Parses a `.npy` `descr`. Big-endian, object, string and structured dtypes are
    /// refused with a message saying why.
    ///
    /// # Errors
    /// A message (without the file name) describing the unsupported descr.
    pub fn from_npy_descr(descr: &str) -> Result<Self, String> {
        let d = descr.trim();
        // numpy saves ml_dtypes' bfloat16 as a 2-byte void ('<V2'): read it as bf16.
        if matches!(d, "bfloat16" | "<bfloat16" | "<V2" | "|V2" | "V2") {
            return Ok(DType::BF16);
        }
        let (order, code) = if let Some(rest) = d.strip_prefix(['<', '|', '=']) {
            ('<', rest)
        } else if let Some(rest) = d.strip_prefix('>') {
            ('>', rest)
        } else {
            ('<', d)
        };
        let dtype = match code {
            "b1" | "?" => DType::Bool,
            "u1" => DType::U8,
            "u2" => DType::U16,
            "u4" => DType::U32,
            "u8" => DType::U64,
            "i1" => DType::I8,
            "i2" => DType::I16,
            "i4" => DType::I32,
            "i8" => DType::I64,
            "f2" => DType::F16,
            "f4" => DType::F32,
            "f8" => DType::F64,
            "c8" => DType::C64,
            "c16" => DType::C128,
            c if c.starts_with('O') => {
                return Err(format!(
                    "object dtype '{}' is not supported (only numeric arrays can be streamed)",
                    crate::error::shown(descr)
                ));
            }
            _ => {
                return Err(format!(
                    "dtype '{}' is not supported (supported: bool, u8-u64, i8-i64, f16, bf16, f32, f64, c64, c128)",
                    crate::error::shown(descr)
                ));
            }
        };
        if order == '>' && dtype.size() > 1 {
            return Err(format!(
                "big-endian dtype '{}' is not supported: convert with numpy `a.astype(a.dtype.newbyteorder('<'))`",
                crate::error::shown(descr)
            ));
        }
        Ok(dtype)
    }

    /// Parses a numpy `descr` in either byte order: the dtype, and whether its elements
    /// are stored big-endian (`'>f4'`; never for one-byte types, whose order is moot).
    ///
    /// # Errors
    /// As [`DType::from_npy_descr`], but for the byte order.
    pub fn from_npy_descr_any_order(descr: &str) -> Result<(Self, bool), String> {
        let d = descr.trim();
        match d.strip_prefix('>') {
            Some(rest) => {
                let dtype = Self::from_npy_descr(&format!("<{rest}"))?;
                Ok((dtype, dtype.size() > 1))
            }
            None => Ok((Self::from_npy_descr(d)?, false)),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim().to_ascii_lowercase();
        let d = match t.as_str() {
            "bool" | "b1" => DType::Bool,
            "u8" | "uint8" => DType::U8,
            "u16" | "uint16" => DType::U16,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            "i8" | "int8" => DType::I8,
            "i16" | "int16" => DType::I16,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "c64" | "complex64" => DType::C64,
            "c128" | "complex128" => DType::C128,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown dtype '{s}': expected one of bool, u8, u16, u32, u64, i8, i16, i32, i64, f16, bf16, f32, f64, c64, c128"
                )));
            }
        };
        Ok(d)
    }
}

/// Views little-endian bytes as `[T]`: borrowed when aligned (always, for windows of
/// `.npy` data, whose headers are 64-byte aligned), copied otherwise.
#[must_use]
pub fn typed<T: Pod>(bytes: &[u8]) -> std::borrow::Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// Runs `$body` with the type alias `$t` bound to the [`Element`] type of the runtime real
/// dtype `$d`, or `$complex` for a complex dtype (complex numbers are not [`Element`]s:
/// each site says what it does with them, usually refuse them).
///
/// ```
/// use tilestream::{dispatch_dtype, DType, Element};
/// let size = dispatch_dtype!(DType::F16, T => std::mem::size_of::<T>(), complex => 0);
/// assert_eq!(size, 2);
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! dispatch_dtype {
    ($d:expr, $t:ident => $body:expr, complex => $complex:expr) => {
        match $d {
            $crate::DType::C64 | $crate::DType::C128 => $complex,
            $crate::DType::Bool => {
                type $t = $crate::dtype::Bool;
                $body
            }
            $crate::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::DType::U16 => {
                type $t = u16;
                $body
            }
            $crate::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::DType::U64 => {
                type $t = u64;
                $body
            }
            $crate::DType::I8 => {
                type $t = i8;
                $body
            }
            $crate::DType::I16 => {
                type $t = i16;
                $body
            }
            $crate::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::DType::F16 => {
                type $t = ::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $t = ::half::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::DType::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests;
