//! CCITT bilevel codecs of TIFF (`Compression` 2, 3 and 4: modified Huffman, Group 3
//! one- and two-dimensional, Group 4), decoded as libtiff decodes them: each strip or
//! tile on its own, the first reference line white, black pixels as 1 bits, rows packed
//! most significant bit first (then unpacked like any 1-bit file).
//!
//! The run-length and mode code tables are the `fax` crate's (a dependency of the
//! `tiff` crate already); the line decoding is here, because the crate's decoders do not
//! take TIFF's variants (rows without end-of-line codes, two-dimensional Group 3, a
//! known number of rows) and do not stop at a chunk's size. A stream that does not
//! decode to exactly the chunk's rows is refused: libtiff would pad a damaged line and
//! warn, which is not a value GDAL promises either.

use fax::BitReader;
use fax::maps::{Mode, black, mode, white};

/// Which CCITT coding a chunk uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaxKind {
    /// `Compression` 2: modified Huffman runs, each row starting on a byte, no
    /// end-of-line codes.
    Rle,
    /// `Compression` 3: each row after an end-of-line code; with `two_d`, a bit after
    /// it says whether the row is coded alone or against the row above.
    G3 {
        /// `T4Options` bit 0.
        two_d: bool,
    },
    /// `Compression` 4: every row coded against the row above.
    G4,
}

/// Bits of a chunk's stored bytes, most significant first, read as zeros past the end
/// (a code table looks ahead of the code it matches); `pos` past the end is an overrun.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl BitReader for Bits<'_> {
    type Error = ();

    fn peek(&self, bits: u8) -> Option<u16> {
        if bits > 16 {
            return None;
        }
        let byte = self.pos / 8;
        let at = |i: usize| u32::from(self.data.get(byte + i).copied().unwrap_or(0));
        let window = (at(0) << 16) | (at(1) << 8) | at(2);
        let shift = 24 - (self.pos % 8) - usize::from(bits);
        Some(((window >> shift) & ((1u32 << bits) - 1)) as u16)
    }

    fn consume(&mut self, bits: u8) -> Result<(), ()> {
        self.pos += usize::from(bits);
        Ok(())
    }

    fn bits_to_byte_boundary(&self) -> u8 {
        ((8 - self.pos % 8) % 8) as u8
    }
}

impl Bits<'_> {
    fn overrun(&self) -> bool {
        self.pos > 8 * self.data.len()
    }

    fn bit(&mut self) -> Result<u16, String> {
        let b = self.peek(1).unwrap_or(0);
        self.pos += 1;
        if self.overrun() {
            return Err("the data ends inside a row".into());
        }
        Ok(b)
    }

    fn align(&mut self) {
        self.pos = self.pos.div_ceil(8) * 8;
    }

    /// libtiff's `SYNC_EOL`: skips to the next end-of-line code (at least 11 zero bits
    /// and a one) and past it.
    fn sync_eol(&mut self) -> Result<(), String> {
        let mut zeros = 0;
        loop {
            if self.pos >= 8 * self.data.len() {
                return Err("a row's end-of-line code is missing".into());
            }
            let b = self.bit()?;
            if b == 0 {
                zeros += 1;
            } else if zeros >= 11 {
                return Ok(());
            } else {
                zeros = 0;
            }
        }
    }
}

/// One run of `black` or white pixels: make-up codes (64 and over) and the terminating
/// code that ends it.
fn run(r: &mut Bits, black_run: bool) -> Result<usize, String> {
    let mut total = 0usize;
    loop {
        let code = if black_run {
            black::decode(r)
        } else {
            white::decode(r)
        };
        let Some(n) = code else {
            return Err(format!(
                "bad {} run code at bit {}",
                if black_run { "black" } else { "white" },
                r.pos
            ));
        };
        total += usize::from(n);
        if n < 64 {
            return Ok(total);
        }
    }
}

/// A row coded alone: alternating runs, white first, to the row's width. `cur` gets the
/// row's changing elements (where the colour changes, white to black first).
fn row_1d(r: &mut Bits, width: usize, cur: &mut Vec<usize>) -> Result<(), String> {
    cur.clear();
    let (mut a0, mut black_run) = (0usize, false);
    while a0 < width {
        a0 += run(r, black_run)?;
        if a0 > width {
            return Err(format!("a row's runs pass its width {width}"));
        }
        if a0 < width {
            cur.push(a0);
        }
        black_run = !black_run;
    }
    Ok(())
}

/// A row coded against the row above (`reference`, its changing elements), by the pass,
/// horizontal and vertical modes of T.4 and T.6.
fn row_2d(
    r: &mut Bits,
    width: usize,
    reference: &[usize],
    cur: &mut Vec<usize>,
) -> Result<(), String> {
    cur.clear();
    // a0 starts before the row (so that b1 may be its first pixel); `black` is the
    // colour at a0
    let (mut a0, mut black_now) = (None::<usize>, false);
    loop {
        let start = a0.unwrap_or(0);
        if a0.is_some() && start >= width {
            return Ok(());
        }
        // b1: the first changing element of the reference row right of a0 and of the
        // other colour (elements at even indices turn black); b2: the one after it
        let mut at = a0.map_or(0, |a| reference.partition_point(|&e| e <= a));
        if (at % 2 == 1) != black_now {
            at += 1;
        }
        let b1 = reference.get(at).copied().unwrap_or(width);
        let b2 = reference.get(at + 1).copied().unwrap_or(width);
        match mode::decode(r) {
            Some(Mode::Pass) => a0 = Some(b2),
            Some(Mode::Horizontal) => {
                let a1 = start + run(r, black_now)?;
                let a2 = a1 + run(r, !black_now)?;
                if a2 > width {
                    return Err(format!("a row's runs pass its width {width}"));
                }
                cur.extend([a1, a2]);
                a0 = Some(a2);
            }
            Some(Mode::Vertical(d)) => {
                let a1 = b1 as isize + isize::from(d);
                if a1 < start as isize || a1 > width as isize {
                    return Err(format!(
                        "a vertical code leads outside the row at bit {}",
                        r.pos
                    ));
                }
                cur.push(a1 as usize);
                a0 = Some(a1 as usize);
                black_now = !black_now;
            }
            Some(m) => {
                return Err(format!(
                    "{m:?} mode (not read by tilestream) at bit {}",
                    r.pos
                ));
            }
            None => return Err(format!("bad mode code at bit {}", r.pos)),
        }
        if r.overrun() {
            return Err("the data ends inside a row".into());
        }
    }
}

/// Sets the black pixels of a row (1 bits, most significant first) from its changing
/// elements; `row` is zero on entry.
fn paint(row: &mut [u8], width: usize, changes: &[usize]) {
    let mut at = 0;
    for (i, &c) in changes.iter().chain(std::iter::once(&width)).enumerate() {
        let c = c.min(width);
        if i % 2 == 1 {
            for x in at..c {
                row[x / 8] |= 0x80 >> (x % 8);
            }
        }
        at = at.max(c);
    }
}

/// Decodes one chunk of `kind` into `out`: rows of `width` 1-bit pixels, each row
/// `width.div_ceil(8)` bytes, as many rows as `out` holds.
///
/// # Errors
/// The reason, when the stream does not decode to exactly those rows.
pub fn decode(kind: FaxKind, src: &[u8], width: usize, out: &mut [u8]) -> Result<(), String> {
    let row_bytes = width.div_ceil(8);
    if row_bytes == 0 {
        return Ok(());
    }
    out.fill(0);
    let mut r = Bits { data: src, pos: 0 };
    let (mut reference, mut cur) = (Vec::new(), Vec::new());
    for row in out.chunks_exact_mut(row_bytes) {
        match kind {
            FaxKind::Rle => {
                row_1d(&mut r, width, &mut cur)?;
                r.align();
            }
            FaxKind::G3 { two_d } => {
                r.sync_eol()?;
                if !two_d || r.bit()? == 1 {
                    row_1d(&mut r, width, &mut cur)?;
                } else {
                    row_2d(&mut r, width, &reference, &mut cur)?;
                }
            }
            FaxKind::G4 => row_2d(&mut r, width, &reference, &mut cur)?,
        }
        if r.overrun() {
            return Err("the data ends inside a row".into());
        }
        paint(row, width, &cur);
        std::mem::swap(&mut reference, &mut cur);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_huffman_rows_decode_to_their_runs() {
        // T.4 codes: white 2 = 0111, black 3 = 10, white 3 = 1000; a row of 8 pixels:
        // 2 white, 3 black, 3 white; byte aligned after it (RLE), twice
        let src = [0b0111_1010, 0b0000_0000, 0b0111_1010, 0b0000_0000];
        let mut out = [0u8; 2];
        decode(FaxKind::Rle, &src, 8, &mut out).expect("decodes");
        assert_eq!(out, [0b0011_1000, 0b0011_1000]);
    }

    #[test]
    fn vertical_modes_follow_the_reference_row() {
        // Group 4, width 8. Row 1: H (001) with white 2 (0111) and black 3 (10), then
        // V0 (1) onto b1 = the width (the reference row is white): changes 2, 5.
        // Row 2: V0 V0 (onto 2 and 5), V0 onto the width: the same row.
        let bits = "001".to_string() + "0111" + "10" + "1" + "1" + "1" + "1";
        let mut src = vec![0u8; bits.len().div_ceil(8)];
        for (i, c) in bits.chars().enumerate() {
            if c == '1' {
                src[i / 8] |= 0x80 >> (i % 8);
            }
        }
        let mut out = [0u8; 2];
        decode(FaxKind::G4, &src, 8, &mut out).expect("decodes");
        assert_eq!(out, [0b0011_1000, 0b0011_1000]);
    }

    #[test]
    fn damaged_streams_are_refused() {
        let mut out = [0u8; 4];
        // too short for four rows
        assert!(decode(FaxKind::Rle, &[0b0111_1010, 0], 8, &mut out).is_err());
        // Group 3 without end-of-line codes
        assert!(decode(FaxKind::G3 { two_d: false }, &[0xFF; 8], 8, &mut out).is_err());
        // runs past the width
        assert!(decode(FaxKind::G4, &[0x00, 0x00, 0x00], 8, &mut out).is_err());
    }
}
