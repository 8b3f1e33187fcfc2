//! Two HDF5 filters of the plugin world that tilestream undoes itself: **LZ4** (registered
//! id 32004, the HDF Group's `H5Zlz4.c`, written by `hdf5plugin.LZ4`) and **bitshuffle**
//! (32008, alone or followed by LZ4 or Zstandard: `hdf5plugin.Bitshuffle`, the layout of
//! X-ray detector data such as DECTRIS Eiger files).
//!
//! Both are read as their reference filters read them, with every size a stored chunk
//! claims checked against the chunk's own size before anything is written, so that a
//! damaged or hostile chunk is refused in one line, never inflated past the chunk:
//! - LZ4 (32004): a 12-byte big-endian header (decoded bytes, block bytes), then per
//!   block its 4-byte big-endian stored size and the LZ4 block (stored as it is when that
//!   size equals the block's: it did not compress);
//! - bitshuffle: the elements in blocks of a multiple of 8; each block holds, for every
//!   byte of an element and every bit of that byte, one bit of each element of the block
//!   (LSB first), and elements past the last multiple of 8 are stored as they are. With a
//!   compressor, a 12-byte big-endian header (decoded bytes, block bytes), then each
//!   block as its 4-byte big-endian stored size and its LZ4 block or Zstandard frame.
//!
//! LZ4 blocks are decoded by liblz4 (`LZ4_decompress_safe`, the library both reference
//! filters call, already built into tilestream by Blosc), Zstandard frames by libzstd.

use std::os::raw::{c_char, c_int};

/// Bitshuffle's compressor (`cd_values[4]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BitCodec {
    /// Bit planes stored as they are.
    None,
    /// Each block an LZ4 block (`BSHUF_H5_COMPRESS_LZ4`, 2).
    Lz4,
    /// Each block a Zstandard frame (`BSHUF_H5_COMPRESS_ZSTD`, 3).
    Zstd,
}

/// A bitshuffle filter's parameters, as its client data gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Bitshuffle {
    /// Bytes of an element (`cd_values[2]`).
    pub es: usize,
    /// Elements in a block (`cd_values[3]`; 0 for the default). A compressed chunk
    /// names its own in its header.
    pub block: usize,
    /// What follows the bit transposition.
    pub codec: BitCodec,
}

impl Bitshuffle {
    /// The filter of client data `params`, or why it cannot be undone.
    pub(super) fn from_params(params: &[u32]) -> Result<Self, String> {
        let Some(&es) = params.get(2) else {
            return Err(
                "its bitshuffle filter has no element size in its parameters (fewer than 3)".into(),
            );
        };
        if es == 0 {
            return Err("its bitshuffle filter gives elements of 0 bytes".into());
        }
        let codec = match params.get(4).copied().unwrap_or(0) {
            0 => BitCodec::None,
            2 => BitCodec::Lz4,
            3 => BitCodec::Zstd,
            c => {
                return Err(format!(
                    "its bitshuffle filter names compressor {c}, not one bitshuffle defines \
                     (0 none, 2 LZ4, 3 Zstandard)"
                ));
            }
        };
        Ok(Bitshuffle {
            es: es as usize,
            block: params.get(3).copied().unwrap_or(0) as usize,
            codec,
        })
    }

    /// Most bytes a chunk of `n` decoded bytes is stored in.
    pub(super) fn max_stored(self, n: u64) -> u64 {
        match self.codec {
            BitCodec::None => n,
            BitCodec::Lz4 | BitCodec::Zstd => {
                let block = if self.block == 0 {
                    default_block(self.es)
                } else {
                    self.block.max(8)
                };
                let blocks = (n / self.es as u64).div_ceil(block as u64) + 1;
                // per block: its 4-byte size and the compressor's own bound (LZ4
                // n + n/255 + 16; Zstandard n + n/256 + at most 64 for a small block)
                12u64
                    .saturating_add(n)
                    .saturating_add(n / 128)
                    .saturating_add(blocks.saturating_mul(80))
            }
        }
    }

    /// Bytes of the scratch block a decode holds beside its input and output.
    pub(super) fn scratch_bytes(self, n: u64) -> u64 {
        match self.codec {
            BitCodec::None => 0,
            // a compressed chunk names its block size: at most the chunk
            BitCodec::Lz4 => n,
            // and a Zstandard decompression context (about 160 KB)
            BitCodec::Zstd => n + (256 << 10),
        }
    }
}

/// Most bytes a chunk of `n` decoded bytes is stored in by the LZ4 filter written with
/// blocks of `block` bytes (its `cd_values[0]`; 0 for the 1 GiB default): the header,
/// each block's size, and blocks never larger than they were (a block that does not
/// compress is stored as it is).
pub(super) fn lz4_max_stored(block: u32, n: u64) -> u64 {
    let block = if block > 0 { u64::from(block) } else { 1 << 30 };
    12u64
        .saturating_add(n)
        .saturating_add(n.div_ceil(block).saturating_mul(4))
}

/// Reads a big-endian integer of `N` bytes at `at`.
fn be<const N: usize>(data: &[u8], at: usize) -> Option<u64> {
    let b = data.get(at..at.checked_add(N)?)?;
    Some(b.iter().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

/// Decodes one LZ4 block `src` into exactly `dst`.
fn lz4_block(src: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let (Ok(n), Ok(cap)) = (c_int::try_from(src.len()), c_int::try_from(dst.len())) else {
        return Err("it has an LZ4 block of 2 GiB or more, which LZ4 cannot hold".into());
    };
    // SAFETY: `src` is `n` readable bytes and `dst` `cap` writable ones, both valid for
    // the call; LZ4_decompress_safe reads and writes within those bounds whatever the
    // input (it is the bounded decoder, fuzzed upstream), and keeps no pointer
    let r = unsafe {
        lz4_sys::LZ4_decompress_safe(
            src.as_ptr().cast::<c_char>(),
            dst.as_mut_ptr().cast::<c_char>(),
            n,
            cap,
        )
    };
    match usize::try_from(r) {
        Ok(r) if r == dst.len() => Ok(()),
        Ok(r) => Err(format!(
            "an LZ4 block of it holds {r} bytes, not the {} its header gives",
            dst.len()
        )),
        Err(_) => Err(format!(
            "an LZ4 block of it is damaged or decodes past the {} bytes its header gives",
            dst.len()
        )),
    }
}

/// Decodes one Zstandard frame `src` into exactly `dst`, with the chunk's context `z`.
fn zstd_block(z: &mut zstd::bulk::Decompressor, src: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let bytes = dst.len();
    match z.decompress_to_buffer(src, dst) {
        Ok(n) if n == bytes => Ok(()),
        Ok(n) => Err(format!(
            "a Zstandard block of it holds {n} bytes, not {bytes}"
        )),
        Err(e) => Err(format!(
            "a Zstandard block of it does not decode to {bytes} bytes: {e}"
        )),
    }
}

/// Undoes the LZ4 filter (32004): decodes the stored chunk `data` into the front of
/// `dest` and returns the bytes decoded.
///
/// # Errors
/// A one-line reason: a header or block cut short, a chunk decoding past `dest`, a
/// damaged block.
pub(super) fn undo_lz4(data: &[u8], dest: &mut [u8]) -> Result<usize, String> {
    let short = || "its LZ4 blocks end before the chunk does".to_string();
    let (Some(total), Some(block)) = (be::<8>(data, 0), be::<4>(data, 8)) else {
        return Err("it is shorter than its 12-byte LZ4 header".into());
    };
    if total > dest.len() as u64 {
        return Err(format!(
            "its LZ4 header gives {total} bytes, past the chunk's {}",
            dest.len()
        ));
    }
    let total = total as usize;
    let block = (block as usize).min(total);
    if block == 0 && total > 0 {
        return Err("its LZ4 header gives blocks of 0 bytes".into());
    }
    let (mut at, mut done) = (12usize, 0usize);
    while done < total {
        let b = block.min(total - done);
        let stored = be::<4>(data, at).ok_or_else(short)? as usize;
        at += 4;
        let src = data.get(at..at.saturating_add(stored)).ok_or_else(short)?;
        let dst = &mut dest[done..done + b];
        if stored == b {
            dst.copy_from_slice(src);
        } else {
            lz4_block(src, dst)?;
        }
        at += stored;
        done += b;
    }
    Ok(total)
}

/// Bitshuffle's default block: about 8 KiB of elements, a multiple of 8, at least 128
/// (`bshuf_default_block_size`).
pub(super) fn default_block(es: usize) -> usize {
    (8192 / es / 8 * 8).max(128)
}

/// Undoes the bitshuffle filter (32008) of parameters `p`: decodes the stored chunk
/// `data` into the front of `dest` and returns the bytes decoded.
///
/// # Errors
/// A one-line reason: a header or block cut short, a chunk decoding past `dest`, a
/// block size that is not a multiple of 8, bytes that are not whole elements, a
/// damaged block.
pub(super) fn undo_bitshuffle(
    p: Bitshuffle,
    data: &[u8],
    dest: &mut [u8],
) -> Result<usize, String> {
    let es = p.es;
    let (total, mut block, mut at) = match p.codec {
        BitCodec::None => (data.len() as u64, p.block, 0usize),
        BitCodec::Lz4 | BitCodec::Zstd => {
            let (Some(total), Some(block)) = (be::<8>(data, 0), be::<4>(data, 8)) else {
                return Err("it is shorter than its 12-byte bitshuffle header".into());
            };
            (total, block as usize / es, 12)
        }
    };
    if total > dest.len() as u64 {
        return Err(format!(
            "its bitshuffled bytes are {total}, past the chunk's {}",
            dest.len()
        ));
    }
    let total = total as usize;
    if !total.is_multiple_of(es) {
        return Err(format!(
            "its {total} bitshuffled bytes are not whole elements of {es} bytes"
        ));
    }
    if block == 0 {
        block = default_block(es);
    }
    if !block.is_multiple_of(8) {
        return Err(format!(
            "its bitshuffle blocks of {block} elements are not a multiple of 8"
        ));
    }
    let elems = total / es;
    let short = || "its bitshuffle blocks end before the chunk does".to_string();
    let last = elems % block / 8 * 8;
    let sizes = std::iter::repeat_n(block, elems / block).chain((last > 0).then_some(last));
    let mut scratch = match p.codec {
        BitCodec::None => Vec::new(),
        BitCodec::Lz4 | BitCodec::Zstd => vec![0u8; block.min(elems) * es],
    };
    // one Zstandard context for the chunk's blocks
    let mut zstd = match p.codec {
        BitCodec::Zstd => {
            Some(zstd::bulk::Decompressor::new().map_err(|e| format!("Zstandard: {e}"))?)
        }
        _ => None,
    };
    let mut done = 0usize;
    for m in sizes {
        let bytes = m * es;
        let src: &[u8] = match p.codec {
            BitCodec::None => {
                let s = data.get(at..at + bytes).ok_or_else(short)?;
                at += bytes;
                s
            }
            BitCodec::Lz4 | BitCodec::Zstd => {
                let stored = be::<4>(data, at).ok_or_else(short)? as usize;
                at += 4;
                let s = data.get(at..at.saturating_add(stored)).ok_or_else(short)?;
                at += stored;
                let tmp = &mut scratch[..bytes];
                match zstd.as_mut() {
                    Some(z) => zstd_block(z, s, tmp)?,
                    None => lz4_block(s, tmp)?,
                }
                tmp
            }
        };
        untranspose(src, &mut dest[done..done + bytes], m, es);
        done += bytes;
    }
    // elements past the last multiple of 8, stored as they are
    let rest = total - done;
    let tail = data.get(at..at + rest).ok_or_else(short)?;
    dest[done..total].copy_from_slice(tail);
    Ok(total)
}

/// Transposes an 8x8 matrix of bits, row `r` in byte `r` and column `c` in bit `c`
/// (Hacker's Delight 7-3; bitshuffle's `TRANS_BIT_8X8`).
fn transpose8(mut x: u64) -> u64 {
    let t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    let t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    let t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^ t ^ (t << 28)
}

/// Undoes the bit transposition of one block of `m` elements (a multiple of 8) of `es`
/// bytes: `src` holds, for each byte `b` of an element and bit `k` of it, a row of `m`
/// bits (bit `e % 8` of byte `e / 8` is element `e`'s).
fn untranspose(src: &[u8], dst: &mut [u8], m: usize, es: usize) {
    match es {
        1 => untranspose_es::<1>(src, dst, m),
        2 => untranspose_es::<2>(src, dst, m),
        4 => untranspose_es::<4>(src, dst, m),
        8 => untranspose_es::<8>(src, dst, m),
        16 => untranspose_es::<16>(src, dst, m),
        _ => {
            let row = m / 8;
            for b in 0..es {
                let rows: [&[u8]; 8] = std::array::from_fn(|k| &src[(b * 8 + k) * row..][..row]);
                for g in 0..row {
                    let x = transpose8(gather(&rows, g));
                    for j in 0..8 {
                        dst[(g * 8 + j) * es + b] = (x >> (8 * j)) as u8;
                    }
                }
            }
        }
    }
}

/// Byte `g` of each of 8 rows, row `k`'s in byte `k`.
#[inline(always)]
#[allow(clippy::inline_always)] // in the inner loop of every group of 8 elements
fn gather(rows: &[&[u8]; 8], g: usize) -> u64 {
    let mut x = 0u64;
    for (k, r) in rows.iter().enumerate() {
        x |= u64::from(r[g]) << (8 * k);
    }
    x
}

/// [`untranspose`] for elements of `ES` bytes: each group of 8 elements is built whole
/// (its `8 * ES` bytes written in order), from one byte of each of its `8 * ES` bit rows.
fn untranspose_es<const ES: usize>(src: &[u8], dst: &mut [u8], m: usize) {
    let row = m / 8;
    let rows: [[&[u8]; 8]; ES] =
        std::array::from_fn(|b| std::array::from_fn(|k| &src[(b * 8 + k) * row..][..row]));
    for (g, out) in dst[..m * ES].chunks_exact_mut(8 * ES).enumerate() {
        let xs: [u64; ES] = std::array::from_fn(|b| transpose8(gather(&rows[b], g)));
        for (j, e) in out.chunks_exact_mut(ES).enumerate() {
            for (o, x) in e.iter_mut().zip(&xs) {
                *o = (x >> (8 * j)) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bitshuffle's transposition of one block, bit by bit from its definition.
    fn shuffle_block(elems: &[u8], es: usize) -> Vec<u8> {
        let m = elems.len() / es;
        let mut out = vec![0u8; elems.len()];
        for e in 0..m {
            for b in 0..es {
                for k in 0..8 {
                    if elems[e * es + b] >> k & 1 == 1 {
                        let bit = (b * 8 + k) * m + e;
                        out[bit / 8] |= 1 << (bit % 8);
                    }
                }
            }
        }
        out
    }

    /// A chunk bitshuffled with no compressor, in blocks of `block` elements.
    fn shuffle(elems: &[u8], es: usize, block: usize) -> Vec<u8> {
        let n = elems.len() / es;
        let mut out = Vec::new();
        let mut e = 0;
        while n - e >= 8 {
            let m = block.min((n - e) / 8 * 8);
            out.extend(shuffle_block(&elems[e * es..(e + m) * es], es));
            e += m;
        }
        out.extend_from_slice(&elems[e * es..]);
        out
    }

    #[test]
    fn transpose8_is_the_bit_matrix_transpose() {
        let mut x = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..200 {
            let t = transpose8(x);
            for r in 0..8 {
                for c in 0..8 {
                    assert_eq!(t >> (8 * r + c) & 1, x >> (8 * c + r) & 1);
                }
            }
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
    }

    #[test]
    fn bitshuffle_without_compressor_inverts_the_definition() {
        for (es, n, block) in [
            (1, 8, 8),
            (2, 45, 16),
            (4, 300, 128),
            (8, 17, 0),
            (3, 77, 24),
        ] {
            let elems: Vec<u8> = (0..n * es).map(|i| (i * 131 % 251) as u8).collect();
            let b = if block == 0 { default_block(es) } else { block };
            let stored = shuffle(&elems, es, b);
            let p = Bitshuffle {
                es,
                block,
                codec: BitCodec::None,
            };
            let mut out = vec![0u8; elems.len()];
            assert_eq!(undo_bitshuffle(p, &stored, &mut out), Ok(elems.len()));
            assert_eq!(out, elems, "es {es} n {n} block {block}");
        }
    }

    #[test]
    fn bitshuffle_refuses_what_its_filter_refuses() {
        let p = |block, codec| Bitshuffle {
            es: 4,
            block,
            codec,
        };
        let mut out = vec![0u8; 64];
        // not whole elements; a block size not a multiple of 8; past the chunk
        assert!(undo_bitshuffle(p(0, BitCodec::None), &[0; 10], &mut out).is_err());
        assert!(undo_bitshuffle(p(12, BitCodec::None), &[0; 64], &mut out).is_err());
        assert!(undo_bitshuffle(p(0, BitCodec::None), &[0; 68], &mut out).is_err());
        // a header claiming more than the chunk, or cut short
        let mut h = 65u64.to_be_bytes().to_vec();
        h.extend(32u32.to_be_bytes());
        assert!(undo_bitshuffle(p(0, BitCodec::Lz4), &h, &mut out).is_err());
        assert!(undo_bitshuffle(p(0, BitCodec::Lz4), &h[..7], &mut out).is_err());
        for e in [
            Bitshuffle::from_params(&[0, 0]),
            Bitshuffle::from_params(&[0, 0, 0]),
            Bitshuffle::from_params(&[0, 0, 4, 0, 9]),
        ] {
            let m = e.expect_err("refused");
            assert!(!m.contains('\n'), "{m}");
        }
    }

    /// The LZ4 filter's chunk of `data` in blocks of `block` bytes, compressed by
    /// liblz4 as `H5Zlz4.c` does (a block that does not shrink stored as it is).
    fn lz4_chunk(data: &[u8], block: usize) -> Vec<u8> {
        let mut s = (data.len() as u64).to_be_bytes().to_vec();
        s.extend((block as u32).to_be_bytes());
        for b in data.chunks(block) {
            let mut c = vec![0u8; b.len() + b.len() / 255 + 16];
            // SAFETY: `b` readable and `c` writable for the lengths given
            let n = unsafe {
                lz4_sys::LZ4_compress_default(
                    b.as_ptr().cast(),
                    c.as_mut_ptr().cast(),
                    b.len() as c_int,
                    c.len() as c_int,
                )
            };
            assert!(n > 0);
            let n = n as usize;
            if n >= b.len() {
                s.extend((b.len() as u32).to_be_bytes());
                s.extend_from_slice(b);
            } else {
                s.extend((n as u32).to_be_bytes());
                s.extend_from_slice(&c[..n]);
            }
        }
        s
    }

    #[test]
    fn lz4_block_by_hand() {
        // 12 literals, a match of 8 at offset 12, then the 5 literals a block ends with
        let mut block = vec![0xC4];
        block.extend(b"abcdefghijkl");
        block.extend([12, 0, 0x50]);
        block.extend(b"vwxyz");
        let mut s = 25u64.to_be_bytes().to_vec();
        s.extend(25u32.to_be_bytes());
        s.extend((block.len() as u32).to_be_bytes());
        s.extend(&block);
        let mut out = vec![0u8; 25];
        assert_eq!(undo_lz4(&s, &mut out), Ok(25));
        assert_eq!(&out, b"abcdefghijklabcdefghvwxyz");
        // cut short, and a header past the chunk
        assert!(undo_lz4(&s[..s.len() - 2], &mut out).is_err());
        assert!(undo_lz4(&s, &mut out[..24]).is_err());
    }

    #[test]
    fn lz4_chunks_of_liblz4_decode_to_their_bytes() {
        // runs (compress) and noise (stored as it is), in blocks that do not divide it
        let mut x = 7u32;
        let data: Vec<u8> = (0..10_000u32)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if (i / 1000) % 2 == 0 {
                    (i / 50) as u8
                } else {
                    (x >> 16) as u8
                }
            })
            .collect();
        for block in [1000, 777, 10_000, 1 << 30] {
            let s = lz4_chunk(&data, block.min(data.len()));
            let mut out = vec![0u8; data.len()];
            assert_eq!(undo_lz4(&s, &mut out), Ok(data.len()));
            assert_eq!(out, data, "blocks of {block}");
        }
        // a damaged block is refused, not read
        let mut s = lz4_chunk(&data, 1000);
        let last = s.len() - 1;
        s.truncate(last);
        let mut out = vec![0u8; data.len()];
        assert!(undo_lz4(&s, &mut out).is_err());
    }
}
