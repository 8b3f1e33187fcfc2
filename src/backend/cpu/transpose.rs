//! Transposing one block: the in-memory half of the out-of-core transpose. The tiling
//! hands over a `rows × cols` block of full source rows (one mapped window); the block is
//! written transposed (`cols × rows`) into the staging buffer in cache-sized squares, so
//! both the reads of the window and the writes of the buffer stay within a few cache
//! lines at a time.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Side of the cache blocks.
const B: usize = 32;

/// Transposes the block `rows × cols` starting at column `c0` of a window of full rows of
/// `row_len` elements of `es` bytes into `out` (`cols × rows`).
///
/// # Errors
/// [`Error::Internal`] if the window or the buffer is too short, or `es` is not 1, 2, 4,
/// 8 or 16.
pub fn transpose_block(
    window: &[u8],
    row_len: usize,
    c0: usize,
    rows: usize,
    cols: usize,
    es: usize,
    out: &mut [u8],
) -> Result<()> {
    if window.len() < rows * row_len * es || out.len() < rows * cols * es || c0 + cols > row_len {
        return Err(Error::Internal(format!(
            "transpose block {rows}x{cols} at column {c0}: window or buffer too short"
        )));
    }
    match es {
        1 => typed::<u8>(window, row_len, c0, rows, cols, out),
        2 => typed::<u16>(window, row_len, c0, rows, cols, out),
        4 => typed::<u32>(window, row_len, c0, rows, cols, out),
        8 => typed::<u64>(window, row_len, c0, rows, cols, out),
        // complex128: moved as two words (the staging buffer is aligned to 8 bytes)
        16 => typed::<[u64; 2]>(window, row_len, c0, rows, cols, out),
        _ => {
            return Err(Error::Internal(format!(
                "transpose: no kernel for {es}-byte elements"
            )));
        }
    }
    Ok(())
}

fn typed<T: bytemuck::Pod + Send + Sync>(
    window: &[u8],
    row_len: usize,
    c0: usize,
    rows: usize,
    cols: usize,
    out: &mut [u8],
) {
    let src = crate::dtype::typed::<T>(&window[..rows * row_len * std::mem::size_of::<T>()]);
    let src = &*src;
    let es = std::mem::size_of::<T>();
    let dst_bytes = &mut out[..rows * cols * es];
    // `out` is a staging buffer backed by u64 words: always aligned.
    let Ok(dst) = bytemuck::try_cast_slice_mut::<u8, T>(dst_bytes) else {
        let mut tmp = vec![T::zeroed(); rows * cols];
        fill(src, row_len, c0, rows, cols, &mut tmp);
        dst_bytes.copy_from_slice(bytemuck::cast_slice(&tmp));
        return;
    };
    fill(src, row_len, c0, rows, cols, dst);
}

fn fill<T: Copy + Send + Sync>(
    src: &[T],
    row_len: usize,
    c0: usize,
    rows: usize,
    cols: usize,
    dst: &mut [T],
) {
    if rows == 0 || cols == 0 {
        return;
    }
    // Each task owns B output rows (B source columns) and walks the source rows in
    // blocks of B.
    dst.par_chunks_mut(B * rows)
        .enumerate()
        .for_each(|(jb, block)| {
            let j0 = jb * B;
            let nj = block.len() / rows;
            for i0 in (0..rows).step_by(B) {
                let ni = B.min(rows - i0);
                for i in i0..i0 + ni {
                    let srow = &src[i * row_len + c0 + j0..i * row_len + c0 + j0 + nj];
                    for (j, &v) in srow.iter().enumerate() {
                        block[j * rows + i] = v;
                    }
                }
            }
        });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive() {
        for (rows, cols, row_len, c0) in [(1, 1, 1, 0), (70, 33, 50, 9), (5, 100, 100, 0)] {
            let src: Vec<u32> = (0..(rows * row_len) as u32).collect();
            let mut out = vec![0u8; rows * cols * 4];
            transpose_block(
                bytemuck::cast_slice(&src),
                row_len,
                c0,
                rows,
                cols,
                4,
                &mut out,
            )
            .unwrap();
            let got: &[u32] = bytemuck::cast_slice(&out);
            for j in 0..cols {
                for i in 0..rows {
                    assert_eq!(got[j * rows + i], src[i * row_len + c0 + j]);
                }
            }
        }
    }
}
