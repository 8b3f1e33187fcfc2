//! Elementwise `y = scale * x + offset` with a cast of the result: the write path of the
//! engine. (The full expression language builds on the same tile loop.)
//!
//! Each tile is processed in blocks of [`BLOCK`] elements spread over the rayon pool; the
//! arithmetic is done in f64 and cast with tilestream's cast rules (see [`crate::dtype`]).

use rayon::prelude::*;

use crate::dtype::{DType, Element};

/// Elements per parallel work unit.
pub const BLOCK: usize = 16 * 1024;

fn affine_typed<I: Element, O: Element>(x: &[I], y: &mut [O], scale: f64, offset: f64) {
    y.par_chunks_mut(BLOCK)
        .zip(x.par_chunks(BLOCK))
        .for_each(|(yo, xi)| {
            for (o, &i) in yo.iter_mut().zip(xi) {
                *o = O::from_f64(i.to_f64().mul_add(scale, offset));
            }
        });
}

/// Computes `out = cast(scale * inp + offset)` for one tile of bytes.
pub(crate) fn affine_bytes(
    inp: &[u8],
    in_dtype: DType,
    out: &mut [u8],
    out_dtype: DType,
    scale: f64,
    offset: f64,
) {
    crate::dispatch_dtype!(in_dtype, I => {
        let owned;
        let x: &[I] = match bytemuck::try_cast_slice(inp) {
            Ok(x) => x,
            Err(_) => {
                owned = bytemuck::pod_collect_to_vec::<u8, I>(inp);
                &owned
            }
        };
        crate::dispatch_dtype!(out_dtype, O => {
            let y: &mut [O] = bytemuck::cast_slice_mut(out);
            affine_typed::<I, O>(x, y, scale, offset);
        });
    });
}
