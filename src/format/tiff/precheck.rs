//! A check of the first directory's tables before the `tiff` crate parses them: the
//! crate holds every entry of the offset and byte-count tables while it parses, so a
//! file's metadata alone could cost more memory than any budget allows.

use std::path::Path;

use crate::error::{Error, Result, TiffError};
use crate::io::source::Source;

/// Most strips or tiles one image may list. The `tiff` crate reads the whole offset and
/// byte-count tables when it opens a file, holding each entry in a 32-byte value while
/// it parses, so this bounds what a file's metadata can cost before any budget is asked:
/// 2^19 entries peak at 48 MiB of RSS in all (measured: a reduction of such a file at
/// `--memory 16MiB`), within the budget plus the fixed overhead; 2^20 reached 73 MiB.
/// That is a 185000 x 185000 image in 256 x 256 tiles.
const MAX_CHUNKS: u64 = 1 << 19;

/// Most entries of the first directory (real files have a few dozen).
const MAX_ENTRIES: u64 = 4096;

/// Reads the first directory's entry count and the counts of its offset and byte-count
/// tables straight from the file, before the `tiff` crate parses anything, and refuses a
/// file whose tables would cost more than [`MAX_CHUNKS`] entries.
pub(super) fn precheck_tables(path: &Path, file: &Source) -> Result<()> {
    let mut head = [0u8; 16];
    let n = file
        .read_at(&mut head, 0)
        .map_err(|e| Error::io("read", path, e))?;
    let le = match head.get(..2) {
        Some(b"II") => true,
        Some(b"MM") => false,
        _ => return Ok(()), // the crate says what is wrong
    };
    let u16_at = |b: &[u8]| {
        if le {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        }
    };
    let u32_at = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let u64_at = |b: &[u8]| {
        let a: [u8; 8] = b[..8].try_into().unwrap_or_default();
        if le {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    };
    if n < 16 {
        return Ok(());
    }
    let big = u16_at(&head[2..]) == 43;
    let ifd = if big {
        u64_at(&head[8..])
    } else {
        u64::from(u32_at(&head[4..]))
    };
    let mut count = [0u8; 8];
    let got = file
        .read_at(&mut count, ifd)
        .map_err(|e| Error::io("read", path, e))?;
    if got < 8 {
        return Ok(());
    }
    let entries = if big {
        u64_at(&count)
    } else {
        u64::from(u16_at(&count))
    };
    if entries > MAX_ENTRIES {
        return Err(Error::tiff(
            path,
            TiffError::TooLarge,
            format!(
                "its first directory lists {entries} tags; tilestream reads at most {MAX_ENTRIES}"
            ),
        ));
    }
    let (first, size) = if big {
        (ifd + 8, 20u64)
    } else {
        (ifd + 2, 12u64)
    };
    let mut table = vec![0u8; (entries * size) as usize];
    let got = file
        .read_at(&mut table, first)
        .map_err(|e| Error::io("read", path, e))?;
    for e in table[..got - got % size as usize].chunks_exact(size as usize) {
        let tag = u16_at(e);
        let n = if big {
            u64_at(&e[4..])
        } else {
            u64::from(u32_at(&e[4..]))
        };
        // every other tag the crate or tilestream reads holds a few values (bits and
        // formats per sample, georeferencing): a count past 2^16 is a lie that would be
        // allocated as such
        let small = matches!(
            tag,
            258 | 259
                | 262
                | 266
                | 277
                | 284
                | 317
                | 338
                | 339
                | 347
                | 530
                | 33550
                | 33922
                | 34264
                | 34735
                | 34736
                | 34737
                | 42113
        );
        if small && n > 1 << 16 {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!("its tag {tag} claims {n} values; tilestream reads at most 65536"),
            ));
        }
        // any other tag: the crate may parse it as a list too (a BigTIFF entry can claim
        // 2^64 values), and no real tag holds a million values
        if !matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!("its tag {tag} claims {n} values; tilestream reads at most {MAX_CHUNKS}"),
            ));
        }
        // StripOffsets, StripByteCounts, TileOffsets, TileByteCounts
        if matches!(tag, 273 | 279 | 324 | 325) && n > MAX_CHUNKS {
            return Err(Error::tiff(
                path,
                TiffError::TooLarge,
                format!(
                    "the image lists {n} strips or tiles; tilestream reads at most {MAX_CHUNKS} \
                     (rewrite it with larger tiles: gdal_translate -co TILED=YES -co \
                     BLOCKXSIZE=1024 -co BLOCKYSIZE=1024)"
                ),
            ));
        }
    }
    Ok(())
}
