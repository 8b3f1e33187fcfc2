//! Decoding one TIFF strip or tile exactly as libtiff (and so GDAL) does, from its
//! stored bytes: decompression bounded by the decoded size the layout allows, then byte
//! order and predictor. Nothing else is applied: no colour conversion, no inversion of
//! `WhiteIsZero`, no dropping of extra samples, so every sample of every band reads as
//! GDAL's `ReadAsArray` reads it. The layout checks in [`validate`] refuse, in one line
//! naming the tag, every file whose samples would need more than this to be exact.
//!
//! The `tiff` crate still parses the directory and tags; its chunk decoder is not used,
//! because it interprets the photometric tags (an RGB image with an unspecified extra
//! sample loses that sample there, and the bands of every pixel shift).

use std::io::Read;
use std::path::Path;

use super::fax::FaxKind;
use crate::error::{Error, Result, TiffError};

/// TIFF compressions tilestream decodes, by their `Compression` tag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// 1: stored as is.
    None,
    /// 5: LZW (the TIFF 6.0 variant, most significant bit first, early code-size switch;
    /// and the old style before it, least significant bit first).
    Lzw,
    /// 8 or 32946: zlib Deflate.
    Deflate,
    /// 32773: `PackBits` run-length coding.
    PackBits,
    /// 50000: Zstandard.
    Zstd,
    /// 2, 3 or 4: the CCITT bilevel codings ([`fax`](super::fax)), of 1-bit samples.
    Fax(FaxKind),
    /// 7: JPEG of 8-bit samples, decoded by libjpeg-turbo as libtiff decodes it
    /// ([`jpeg`](super::jpeg)).
    Jpeg,
    /// 50001: WebP of 8-bit RGB or RGBA, decoded by libwebp ([`webp`](super::webp)).
    WebP,
    /// 34887: LERC, with or without Deflate or Zstandard on top, decoded by the LERC
    /// library ([`lerc`](super::lerc)).
    Lerc,
    /// 34925: LZMA (an `.xz` stream a chunk), decoded by liblzma ([`lzma`](super::lzma))
    /// within the memory it holds: the memory limit read from the file's first chunk
    /// (0 until the file's layout is read).
    Lzma(u64),
}

impl Codec {
    /// The codec of a `Compression` tag value, or `None` for one tilestream refuses.
    #[must_use]
    pub fn from_tag(code: u16) -> Option<Codec> {
        Some(match code {
            1 => Codec::None,
            5 => Codec::Lzw,
            8 | 32946 => Codec::Deflate,
            32773 => Codec::PackBits,
            50000 => Codec::Zstd,
            2 => Codec::Fax(FaxKind::Rle),
            3 => Codec::Fax(FaxKind::G3 { two_d: false }),
            4 => Codec::Fax(FaxKind::G4),
            7 => Codec::Jpeg,
            50001 => Codec::WebP,
            34887 => Codec::Lerc,
            34925 => Codec::Lzma(0),
            _ => return None,
        })
    }

    /// Whether libtiff applies the `Predictor` tag with this codec (it registers the
    /// predictor only for LZW, Deflate, ZSTD and LZMA among these; a predictor tag on an
    /// uncompressed or `PackBits` file is ignored by GDAL, so it is here too).
    #[must_use]
    pub fn uses_predictor(self) -> bool {
        matches!(
            self,
            Codec::Lzw | Codec::Deflate | Codec::Zstd | Codec::Lzma(_)
        )
    }
}

/// The name of a `PhotometricInterpretation` value, for messages.
#[must_use]
pub fn photometric_name(p: u16) -> &'static str {
    match p {
        0 => "MinIsWhite",
        1 => "MinIsBlack",
        2 => "RGB",
        3 => "Palette",
        4 => "TransparencyMask",
        5 => "CMYK (Separated)",
        6 => "YCbCr",
        8 => "CIELab",
        9 => "ICCLab",
        10 => "ITULab",
        32844 => "LogL",
        32845 => "LogLuv",
        _ => "unknown",
    }
}

/// The tags that decide whether a file's samples can be read exactly.
#[derive(Clone, Debug)]
pub struct SampleTags {
    /// `PhotometricInterpretation` (262), if present.
    pub photometric: Option<u16>,
    /// `Compression` (259).
    pub compression: u16,
    /// `Predictor` (317).
    pub predictor: u16,
    /// `FillOrder` (266).
    pub fill_order: u16,
    /// `SampleFormat` (339), first value.
    pub sample_format: u16,
    /// `BitsPerSample` (258), first value.
    pub bits: u16,
    /// `T4Options` (292): bit 0 set for two-dimensional Group 3 coding.
    pub t4_options: u32,
}

/// Refuses, in one line naming the tag and its value, a file whose samples this decoder
/// would not read exactly as GDAL does.
///
/// Accepted: `PhotometricInterpretation` `MinIsWhite`, `MinIsBlack`, RGB (with any extra
/// samples: they are read as further bands), Palette (the indices are the values, as
/// GDAL reads them) and CMYK (the four inks as bands, as GDAL reads a CMYK file that is
/// not JPEG), YCbCr when JPEG-compressed (converted to RGB by libjpeg, as GDAL reads it);
/// the codecs of [`Codec`]; predictors 1, 2 and (for floats) 3;
/// `FillOrder` 1 and 2 (the bits of every stored byte reversed before decoding, as
/// libtiff does for every codec but JPEG). Refused: YCbCr other than JPEG's, the Lab and
/// Log encodings, old-style JPEG (6), JPEG of other than 8-bit unsigned samples, LERC,
/// WebP, JPEG-XL and every other codec.
///
/// # Errors
/// [`Error::Tiff`] naming the first tag whose value is refused.
pub fn validate(path: &Path, t: &SampleTags) -> Result<Codec> {
    if let Some(p) = t.photometric
        && !matches!(p, 0..=3 | 5)
        && !(p == 6 && t.compression == 7)
    {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "PhotometricInterpretation",
                value: format!("{p} ({})", photometric_name(p)),
                reason: "is not read by tilestream (it reads MinIsBlack, MinIsWhite, RGB with \
                         any extra samples, Palette indices, CMYK inks and JPEG-compressed \
                         YCbCr); convert with gdal_translate -co PHOTOMETRIC=MINISBLACK first"
                    .into(),
            },
        ));
    }
    let Some(codec) = Codec::from_tag(t.compression) else {
        let hint = if t.compression == 6 {
            "old-style JPEG is not libtiff's own; "
        } else {
            ""
        };
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: format!("{} ({})", t.compression, compression_label(t.compression)),
                reason: format!(
                    "is not decoded by tilestream ({hint}it decodes none, LZW, Deflate, PackBits, \
                     ZSTD, LZMA, CCITT fax, JPEG, WebP and LERC); convert with gdal_translate -co \
                     COMPRESS=DEFLATE first"
                ),
            },
        ));
    };
    let codec = match codec {
        Codec::Fax(FaxKind::G3 { .. }) => Codec::Fax(FaxKind::G3 {
            two_d: t.t4_options & 1 == 1,
        }),
        c => c,
    };
    if matches!(codec, Codec::Fax(_)) && t.bits != 1 {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: format!("{} ({})", t.compression, compression_label(t.compression)),
                reason: format!(
                    "on {}-bit samples is not valid TIFF (CCITT codes 1-bit images)",
                    t.bits
                ),
            },
        ));
    }
    if codec == Codec::Jpeg && !(t.bits == 8 && t.sample_format == 1) {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: "7 (jpeg)".into(),
                reason: format!(
                    "of {}-bit samples of SampleFormat {} is not read by tilestream (it reads \
                     JPEG of 8-bit unsigned samples); convert with gdal_translate -co \
                     COMPRESS=DEFLATE first",
                    t.bits, t.sample_format
                ),
            },
        ));
    }
    if codec == Codec::WebP && !(t.bits == 8 && t.sample_format == 1) {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "Compression",
                value: "50001 (webp)".into(),
                reason: format!(
                    "of {}-bit samples of SampleFormat {} is not valid (WebP codes 8-bit \
                     unsigned samples)",
                    t.bits, t.sample_format
                ),
            },
        ));
    }
    if !matches!(t.fill_order, 1 | 2) {
        return Err(Error::tiff_at(
            path,
            TiffError::UnsupportedTag {
                tag: "FillOrder",
                value: t.fill_order.to_string(),
                reason: "is not valid TIFF (1: most significant bit first, 2: least)".into(),
            },
        ));
    }
    if codec.uses_predictor() {
        match t.predictor {
            1 => {}
            p if t.sample_format == 6 => {
                return Err(Error::tiff_at(
                    path,
                    TiffError::UnsupportedTag {
                        tag: "Predictor",
                        value: format!("{p} on complex samples"),
                        reason: "is not read by tilestream".into(),
                    },
                ));
            }
            2 if matches!(t.bits, 8 | 16 | 32 | 64) => {}
            2 => {
                return Err(Error::tiff_at(
                    path,
                    TiffError::UnsupportedTag {
                        tag: "Predictor",
                        value: format!("2 (horizontal) on {}-bit samples", t.bits),
                        reason: "is not read by tilestream, nor by GDAL: libtiff applies it to \
                                 8, 16, 32 and 64-bit samples only"
                            .into(),
                    },
                ));
            }
            3 if t.sample_format == 3 && matches!(t.bits, 16 | 32 | 64) => {}
            3 if t.sample_format == 3 => {
                return Err(Error::tiff_at(
                    path,
                    TiffError::UnsupportedTag {
                        tag: "Predictor",
                        value: format!("3 (floating point) on {}-bit floats", t.bits),
                        reason: "is not read by tilestream".into(),
                    },
                ));
            }
            3 => {
                return Err(Error::tiff(
                    path,
                    TiffError::Corrupt,
                    format!(
                        "Predictor 3 (floating point) on SampleFormat {} samples is not valid \
                         TIFF",
                        t.sample_format
                    ),
                ));
            }
            p => {
                return Err(Error::tiff_at(
                    path,
                    TiffError::UnsupportedTag {
                        tag: "Predictor",
                        value: p.to_string(),
                        reason: "is not read by tilestream (it reads 1, 2 and 3)".into(),
                    },
                ));
            }
        }
    }
    Ok(codec)
}

/// A readable name of a `Compression` value, for messages and `info`.
#[must_use]
pub fn compression_label(code: u16) -> String {
    match code {
        1 => "none".into(),
        2 => "CCITT RLE fax".into(),
        3 => "CCITT G3 fax".into(),
        4 => "CCITT G4 fax".into(),
        5 => "lzw".into(),
        6 | 7 => "jpeg".into(),
        8 | 32946 => "deflate".into(),
        32773 => "packbits".into(),
        34676 | 34677 => "sgilog".into(),
        34887 => "lerc".into(),
        34925 => "lzma".into(),
        50000 => "zstd".into(),
        50001 => "webp".into(),
        50002 | 52546 => "jpeg-xl".into(),
        c => format!("code {c}"),
    }
}

/// How one chunk's decoded bytes are laid out: `rows` rows of `row_bytes` bytes, each a
/// run of pixels of `spp` samples of `es` bytes.
#[derive(Clone, Copy, Debug)]
pub struct ChunkRows {
    /// Rows held by the chunk (a strip at the bottom of the image holds fewer).
    pub rows: usize,
    /// Bytes in one row of the chunk (a tile's full width, padding included).
    pub row_bytes: usize,
    /// Samples per pixel stored in this chunk (1 for planar files).
    pub spp: usize,
    /// Bytes per sample.
    pub es: usize,
    /// Bytes a big-endian file's sample is swapped in: the sample's, or each part's of a
    /// complex one.
    pub unit: usize,
}

impl ChunkRows {
    /// Decoded bytes of the chunk.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.rows * self.row_bytes
    }
}

/// Decompresses `src` (one chunk's stored bytes) into `out`, which holds exactly the
/// chunk's decoded size: decoding stops there, so a stream that would inflate further
/// costs no more memory. Data past it is ignored (as libtiff does); a stream that ends
/// short of it is an error.
///
/// # Errors
/// [`Error::Tiff`] for a corrupt or short stream, naming the chunk `what`.
pub fn decompress(path: &Path, what: &str, codec: Codec, src: &[u8], out: &mut [u8]) -> Result<()> {
    let need = out.len();
    let short = |found: usize| {
        Error::tiff_at(
            path,
            TiffError::ChunkSize {
                chunk: what.to_string(),
                expected: need,
                found,
            },
        )
    };
    let corrupt = |e: &dyn std::fmt::Display| {
        Error::tiff_at(
            path,
            TiffError::Decode {
                chunk: what.to_string(),
                reason: e.to_string(),
            },
        )
    };
    match codec {
        Codec::Fax(_) => {
            // decoded by `fax::decode`, which needs the row width; a caller that gets here
            // has a bug, not a file
            return Err(corrupt(&"CCITT chunks are decoded row by row, not here"));
        }
        Codec::Jpeg | Codec::WebP | Codec::Lerc => {
            // decoded by `jpeg`, `webp` and `lerc`, which need the chunk's geometry
            return Err(corrupt(
                &"JPEG, WebP and LERC chunks are decoded by their libraries, not here",
            ));
        }
        Codec::None => {
            if src.len() < need {
                return Err(short(src.len()));
            }
            out.copy_from_slice(&src[..need]);
        }
        Codec::Deflate => {
            // libdeflate: the whole chunk at once into its known size (1.2x zlib-rs,
            // benches/benches/codecs.rs). A stream it does not take whole (one that decodes past
            // the chunk, as some writers pad a last strip, or a bad checksum after the
            // data) is decoded as before, stopping at the chunk's size.
            let whole = libdeflater::Decompressor::new().zlib_decompress(src, out);
            if whole.ok() != Some(need) {
                read_full(flate2::read::ZlibDecoder::new(src), out).map_err(|e| match e {
                    Short(n) => short(n),
                    Failed(e) => corrupt(&e),
                })?;
            }
        }
        Codec::Lzma(memlimit) => {
            // liblzma decodes the whole stream into the chunk, no further: a stream that
            // decodes past it, or short of it, is refused
            super::lzma::decode(src, out, memlimit).map_err(|e| corrupt(&e))?;
        }
        Codec::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(src).map_err(|e| corrupt(&e))?;
            read_full(d, out).map_err(|e| match e {
                Short(n) => short(n),
                Failed(e) => corrupt(&e),
            })?;
        }
        Codec::Lzw => {
            // old-style (pre-TIFF 6.0) LZW, told apart as libtiff does by its first bytes:
            // codes least significant bit first, widths growing one code later (GIF's
            // rule; libtiff's LZWDecodeCompat)
            let old_style = src.len() >= 2 && src[0] == 0 && src[1] & 1 == 1;
            let mut d = if old_style {
                weezl::decode::Decoder::new(weezl::BitOrder::Lsb, 8)
            } else {
                weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8)
            };
            let (mut inp, mut filled) = (src, 0);
            while filled < need {
                let r = d.decode_bytes(inp, &mut out[filled..]);
                filled += r.consumed_out;
                inp = &inp[r.consumed_in..];
                match r.status {
                    Ok(weezl::LzwStatus::Ok) if r.consumed_in + r.consumed_out > 0 => {}
                    Ok(_) => break,
                    Err(e) => return Err(corrupt(&e)),
                }
            }
            if filled < need {
                return Err(short(filled));
            }
        }
        Codec::PackBits => {
            let got = unpack_bits(src, out);
            if got < need {
                return Err(short(got));
            }
        }
    }
    Ok(())
}

enum ReadErr {
    Short(usize),
    Failed(std::io::Error),
}
use ReadErr::{Failed, Short};

/// Reads until `out` is full; a reader that ends first is `Short(bytes read)`.
fn read_full(mut r: impl Read, out: &mut [u8]) -> std::result::Result<(), ReadErr> {
    let mut filled = 0;
    while filled < out.len() {
        match r.read(&mut out[filled..]) {
            Ok(0) => return Err(Short(filled)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failed(e)),
        }
    }
    Ok(())
}

/// `PackBits` decoding into `out`, stopping when it is full; returns the bytes written.
fn unpack_bits(src: &[u8], out: &mut [u8]) -> usize {
    let (mut i, mut o) = (0, 0);
    while i < src.len() && o < out.len() {
        let n = src[i] as i8;
        i += 1;
        if n >= 0 {
            let len = (n as usize + 1).min(src.len() - i).min(out.len() - o);
            out[o..o + len].copy_from_slice(&src[i..i + len]);
            i += n as usize + 1;
            o += len;
        } else if n != -128 {
            let Some(&b) = src.get(i) else { break };
            i += 1;
            let len = ((1 - n as isize) as usize).min(out.len() - o);
            out[o..o + len].fill(b);
            o += len;
        }
    }
    o
}

/// Turns decoded chunk bytes into native-endian samples: byte swapping for big-endian
/// files, then the predictor, row by row, exactly as libtiff does (horizontal
/// differencing undone with wrapping integer sums over samples `spp` apart; the
/// floating-point predictor's byte planes undone and reassembled in native order).
pub fn unpredict(rows: &ChunkRows, little_endian: bool, predictor: u16, data: &mut [u8]) {
    let ChunkRows {
        row_bytes, spp, es, ..
    } = *rows;
    let data = &mut data[..rows.bytes()];
    if predictor == 3 {
        // libtiff's fpAcc: the output is native order whatever the file's byte order
        let mut tmp = vec![0u8; row_bytes];
        let n = row_bytes / es;
        for row in data.chunks_exact_mut(row_bytes) {
            for i in spp..row_bytes {
                row[i] = row[i].wrapping_add(row[i - spp]);
            }
            tmp.copy_from_slice(row);
            for k in 0..n {
                for b in 0..es {
                    // plane 0 holds the most significant bytes
                    let plane = if cfg!(target_endian = "little") {
                        es - 1 - b
                    } else {
                        b
                    };
                    row[k * es + b] = tmp[plane * n + k];
                }
            }
        }
        return;
    }
    let swap = es > 1 && little_endian != cfg!(target_endian = "little");
    if swap {
        for s in data.chunks_exact_mut(rows.unit) {
            s.reverse();
        }
    }
    if predictor == 2 {
        for row in data.chunks_exact_mut(row_bytes) {
            match es {
                1 => hor_acc::<u8>(row, spp),
                2 => hor_acc::<u16>(row, spp),
                4 => hor_acc::<u32>(row, spp),
                _ => hor_acc::<u64>(row, spp),
            }
        }
    }
}

/// Unpacks rows of samples stored in `bits` bits each (fewer than their element type of
/// `es` bytes) into native-endian elements, as libtiff and GDAL read them: each row of
/// `src` starts on a byte (`row_bytes` bytes a row) and holds `per_row` samples; 24-bit
/// samples are three whole bytes (in GDAL's order, the reverse of the file's), any other
/// width a stream of bits, most significant first, whatever the byte order. `dst` holds
/// `per_row * es` bytes a row.
pub fn unpack_samples(
    src: &[u8],
    row_bytes: usize,
    per_row: usize,
    bits: usize,
    little_endian: bool,
    es: usize,
    dst: &mut [u8],
) {
    for (s, d) in src
        .chunks_exact(row_bytes)
        .zip(dst.chunks_exact_mut(per_row * es))
    {
        match es {
            1 => unpack_row::<1>(s, bits, little_endian, d),
            2 => unpack_row::<2>(s, bits, little_endian, d),
            _ => unpack_row::<4>(s, bits, little_endian, d),
        }
    }
}

/// Unpacks rows of 24-bit floats (TIFF Technical Note 3: a sign bit, 7 exponent bits of
/// bias 63, 16 mantissa bits) into f32, as GDAL reads them (`CPLTripleToFloat`): each
/// triple in the file's byte order, every value exact in f32 (the denormals too),
/// infinities and NaN kept.
pub fn unpack_fp24(
    src: &[u8],
    row_bytes: usize,
    per_row: usize,
    little_endian: bool,
    dst: &mut [u8],
) {
    for (s, d) in src
        .chunks_exact(row_bytes)
        .zip(dst.chunks_exact_mut(per_row * 4))
    {
        for (t, e) in s.chunks_exact(3).zip(d.chunks_exact_mut(4)) {
            let v = if little_endian {
                u32::from_le_bytes([t[0], t[1], t[2], 0])
            } else {
                u32::from_be_bytes([0, t[0], t[1], t[2]])
            };
            e.copy_from_slice(&fp24_to_f32(v).to_ne_bytes());
        }
    }
}

/// The f32 bits of a 24-bit float, as GDAL's `CPLTripleToFloat` computes them.
fn fp24_to_f32(t: u32) -> u32 {
    let sign = ((t >> 23) & 1) << 31;
    let mut exponent = (t >> 16) & 0x7f;
    let mut mantissa = t & 0xffff;
    if exponent == 0 {
        if mantissa == 0 {
            return sign;
        }
        // a denormal: normalized, as f32 has the range for it
        let mut e: i32 = 0;
        while mantissa & 0x1_0000 == 0 {
            mantissa <<= 1;
            e -= 1;
        }
        mantissa &= 0xffff;
        return sign | (((e + 1 + 127 - 63) as u32) << 23) | (mantissa << 7);
    }
    if exponent == 0x7f {
        return sign | 0x7f80_0000 | (mantissa << 7);
    }
    exponent += 127 - 63;
    sign | (exponent << 23) | (mantissa << 7)
}

/// One row of [`unpack_samples`] into elements of `N` bytes (unaligned, native order).
fn unpack_row<const N: usize>(src: &[u8], bits: usize, little_endian: bool, dst: &mut [u8]) {
    let dst: &mut [[u8; N]] = bytemuck::cast_slice_mut(dst);
    let element = |v: u32| {
        let mut e = [0u8; N];
        match N {
            1 => e[0] = v as u8,
            2 => e.copy_from_slice(&(v as u16).to_ne_bytes()),
            _ => e.copy_from_slice(&v.to_ne_bytes()),
        }
        e
    };
    if bits == 24 {
        // GDAL's reading (and writing) of 24-bit integers, which the TIFF specification
        // does not follow (GDAL ticket 2361, unchanged since): libtiff reverses the three
        // bytes of each sample of a big-endian file, then GDAL takes them most
        // significant first, so a little-endian file's triples are big-endian and a
        // big-endian file's little-endian
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(3)) {
            let v = if little_endian {
                u32::from_be_bytes([0, s[0], s[1], s[2]])
            } else {
                u32::from_le_bytes([s[0], s[1], s[2], 0])
            };
            *d = element(v);
        }
        return;
    }
    // a bit stream, most significant bit first: `acc` holds the `have` bits read and not
    // yet used (at most 7 + 31)
    let mask = (1u64 << bits) - 1;
    let (mut acc, mut have, mut next) = (0u64, 0usize, 0usize);
    for d in dst.iter_mut() {
        while have < bits {
            acc = (acc << 8) | u64::from(src[next]);
            next += 1;
            have += 8;
        }
        have -= bits;
        *d = element(((acc >> have) & mask) as u32);
        acc &= (1u64 << have) - 1;
    }
}

/// The unsigned sample types of the horizontal predictor, with the wrapping arithmetic
/// it is defined by (undone here, applied by `tiff_write`).
pub(crate) trait Wrapping: bytemuck::Pod {
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
}
macro_rules! wrapping {
    ($($t:ty),*) => {$(impl Wrapping for $t {
        fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
        fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
    })*};
}
wrapping!(u8, u16, u32, u64);

fn hor_acc<T: Wrapping>(row: &mut [u8], spp: usize) {
    // each sample adds the already-undone sample `spp` before it in the same row (rows of
    // a chunk need not be aligned for T: read and write unaligned)
    let w = size_of::<T>();
    for at in (spp * w..row.len() - row.len() % w).step_by(w) {
        let prev: T = bytemuck::pod_read_unaligned(&row[at - spp * w..at - spp * w + w]);
        let v: T = bytemuck::pod_read_unaligned(&row[at..at + w]);
        row[at..at + w].copy_from_slice(bytemuck::bytes_of(&v.wadd(prev)));
    }
}

#[cfg(test)]
mod tests;
