//! GDAL's nodata tag (`GDAL_NODATA`, 42113): its text checked as GDAL would read it,
//! and the value it names as a sample of each dtype (what a mask compares against and
//! what an output of another type can keep).

use std::path::Path;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// A `GDAL_NODATA` text, refused unless it is a plain number (as GDAL writes one:
/// `-9999`, `1e+20`, `nan`, `inf`; white space around it allowed): GDAL reads what
/// follows a number's start by prefix (`0x10` as 16, `5\n6` as 5, anything else as 0), and
/// a mask that differed from GDAL's would be wrong values without a word.
///
/// # Errors
/// [`Error::Invalid`], naming the tag's text.
pub(super) fn plain_nodata(path: &Path, text: &str) -> Result<String> {
    let t = text.trim();
    if !t.is_empty() && t.parse::<f64>().is_ok() {
        return Ok(t.to_string());
    }
    Err(Error::invalid(format!(
        "{}: its GDAL_NODATA tag {:?} is not a plain number, and GDAL reads such a tag by its \
         prefix; set it to the value meant (gdal_edit.py -a_nodata VALUE) or remove it \
         (gdal_edit.py -unsetnodata)",
        path.display(),
        t.chars().take(40).collect::<String>()
    )))
}

/// Whether a sample of `dtype` holds the nodata value `text` exactly (what an output of
/// that type keeps of its input's nodata).
#[must_use]
#[allow(clippy::float_cmp)] // held means the same value exactly
pub fn holds_nodata(dtype: DType, text: &str) -> bool {
    if !dtype.is_float() {
        return nodata_sample(dtype, text).is_some();
    }
    // a float type holds it when the value reads back unchanged (-9999 in f16 is
    // -10000, 70000 is inf, 1e-40 in f32 is 0: none of them is the nodata value)
    let Ok(v) = text.trim().parse::<f64>() else {
        return false;
    };
    nodata_as(dtype, text).is_some_and(|back| back == v || (back.is_nan() && v.is_nan()))
}

/// The value the pixels of a `dtype` file have where they are nodata `text`: the text's
/// value as a sample of that type (rounded to the type for floats, as the file stores
/// it), or `None` when the type cannot hold it (an integer type and a fraction, NaN or an
/// out-of-range value): then no pixel of the file is nodata.
#[must_use]
#[allow(clippy::float_cmp)] // an integer type holds the value exactly or not at all
pub fn nodata_as(dtype: DType, text: &str) -> Option<f64> {
    use crate::dtype::Element;
    let v: f64 = text.trim().parse().ok()?;
    let sample = nodata_sample(dtype, text)?;
    let back = crate::dispatch_dtype!(dtype, T => bytemuck::pod_read_unaligned::<T>(&sample).to_f64(), complex => return None);
    (dtype.is_float() || back == v).then_some(back)
}

/// Whether the value [`nodata_as`] gives for `text` names the sample exactly once it is
/// the type's again (`T::from_f64`): false for a 64-bit integer beyond 2^53 that the f64
/// rounds to another value (`u64::MAX` itself is kept: its f64 saturates back to it).
#[must_use]
pub fn nodata_round_trips(dtype: DType, text: &str) -> bool {
    use crate::dtype::Element;
    let (Some(v), Some(sample)) = (nodata_as(dtype, text), nodata_sample(dtype, text)) else {
        return false;
    };
    crate::dispatch_dtype!(dtype, T => {
        bytemuck::bytes_of(&T::from_f64(v)) == sample.as_slice()
    }, complex => false)
}

/// A nodata value as GDAL's `GDAL_NODATA` tag text: `nan` for NaN, else the shortest
/// decimal that reads back as `v`.
#[must_use]
pub fn nodata_text(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else {
        format!("{v}")
    }
}

/// The nodata text of a file as one sample of `dtype`, if that type holds it exactly.
pub(super) fn nodata_sample(dtype: DType, text: &str) -> Option<Vec<u8>> {
    // tilestream takes no nodata value for complex samples
    if dtype.is_complex() {
        return None;
    }
    let t = text.trim();
    let mut out = vec![0; dtype.size()];
    if dtype.is_float() {
        let v: f64 = t.parse().ok()?;
        crate::dtype::store_f64(&[v], &mut out, dtype);
        return Some(out);
    }
    // an integer exactly, from its digits (u64::MAX is not an f64), or from a number
    // written with a point or an exponent ("0.0", "-1e4")
    let n: i128 = match t.parse::<i128>() {
        Ok(n) => n,
        Err(_) => {
            let v: f64 = t.parse().ok()?;
            if v.fract() != 0.0 || v.abs() >= 2f64.powi(100) {
                return None;
            }
            v as i128
        }
    };
    let bits = 8 * dtype.size() as u32;
    let (lo, hi) = match dtype {
        DType::Bool => (0, 1),
        d if d.is_unsigned() => (0, (1i128 << bits) - 1),
        _ => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
    };
    if n < lo || n > hi {
        return None;
    }
    // two's complement, little-endian: the low bytes are the value in the narrower type
    out.copy_from_slice(&n.to_le_bytes()[..dtype.size()]);
    Some(out)
}
