//! The properties the fuzz targets (`fuzz/`) check, kept in the library so that the
//! committed corpus is replayed by an ordinary test (`tests/it/fuzz_corpus.rs`) on every
//! `cargo test`, with no fuzzer installed.
//!
//! Each check takes arbitrary bytes and panics only when a property is broken: a parser
//! that panics, overflows or accepts something it cannot write back the same way.

use crate::dtype::DType;
use crate::format::npy;
use crate::ops::expr::{Program, parse};

/// What [`npy_header`] made of its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NpyOutcome {
    /// Refused, with the message a user would see.
    Refused(String),
    /// Accepted: dtype, shape and the byte count of the data.
    Accepted(DType, Vec<usize>, u64),
}

/// Parses `data` as the start of a `.npy` file the way [`crate::TensorFile::open`] does
/// (length field, header, byte count of the data with overflow checks) and checks:
/// messages are one line; an accepted header survives a round trip through
/// [`npy::build_header`] unchanged; its data offset lies within the header bytes.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn npy_header(data: &[u8]) -> NpyOutcome {
    let refused = |m: String| {
        assert!(!m.contains('\n'), "multi-line message: {m:?}");
        assert!(!m.is_empty(), "empty message");
        NpyOutcome::Refused(m)
    };
    let pre = &data[..data.len().min(npy::PREAMBLE)];
    let hlen = match npy::header_len(pre) {
        Ok(n) => n,
        Err(e) => return refused(e.to_string()),
    };
    if hlen > data.len() {
        return refused(format!("truncated .npy header: {hlen} > {}", data.len()));
    }
    let h = match npy::parse_header(&data[..hlen]) {
        Ok(h) => h,
        Err(e) => return refused(e.to_string()),
    };
    assert_eq!(
        h.data_offset, hlen as u64,
        "data offset is not the header's end"
    );
    let Some(bytes) = npy::data_bytes(&h.shape, h.dtype) else {
        return refused("shape overflows a 64-bit byte count".into());
    };
    let again = npy::build_header(h.dtype, &h.shape);
    let back = npy::parse_header(&again).expect("a header tilestream wrote must parse");
    assert_eq!(
        (back.dtype, &back.shape),
        (h.dtype, &h.shape),
        "round trip changed it"
    );
    assert_eq!(back.data_offset as usize, again.len());
    assert_eq!(again.len() % 64, 0, "written headers are 64-byte aligned");
    NpyOutcome::Accepted(h.dtype, h.shape, bytes)
}

/// Parses `data` (when UTF-8) as a `map` expression; when it parses, compiles it with
/// real inputs and again with complex ones and evaluates each program that compiles
/// over a small block of every input (f32 or complex64, 37 elements: a partial block)
/// into f16 and f64 outputs (complex64 and complex128 for a complex value). Checks
/// that messages are one line and parse errors carry a column within the text, and
/// that evaluation does not panic. Returns whether it parsed.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn expr(data: &[u8]) -> bool {
    const N: usize = 37;
    let Ok(src) = std::str::from_utf8(data) else {
        return false;
    };
    let e = match parse(src) {
        Ok(e) => e,
        Err(err) => {
            let m = err.to_string();
            assert!(!m.contains('\n'), "multi-line message: {m:?}");
            assert!(
                err.column >= 1 && err.column <= src.chars().count() + 1,
                "column {} outside '{src}'",
                err.column
            );
            return false;
        }
    };
    let values: Vec<f32> = (0..2 * N).map(|i| i as f32 * 0.375 - 9.0).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    // the inputs real (f32), then complex (complex64: the same values as parts)
    for (complex, in_dtype) in [(false, DType::F32), (true, DType::C64)] {
        let program = match Program::compile_typed(&e, |_| complex) {
            Ok(p) => p,
            Err(err) => {
                let m = err.to_string();
                assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
                continue;
            }
        };
        let inputs = vec![&bytes[..N * in_dtype.size()]; program.streams.len()];
        let dtypes = vec![in_dtype; program.streams.len()];
        // a complex value goes to complex outputs only (the engine refuses the others)
        let outs = if program.is_complex() {
            [DType::C64, DType::C128]
        } else {
            [DType::F16, DType::F64]
        };
        for out_dtype in outs {
            // staging buffers are 8-byte aligned in the pipeline: the same here
            let mut words = vec![0u64; (N * out_dtype.size()).div_ceil(8)];
            let out = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..N * out_dtype.size()];
            crate::backend::cpu::expr::eval_tile(&program, &inputs, &dtypes, out, out_dtype);
        }
    }
    true
}

/// Asserts that an error message is one non-empty line.
fn one_line(e: &crate::Error) {
    let m = e.to_string();
    assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
}

/// The scratch directory of the file-based checks, made once per process.
static SCRATCH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// A scratch directory for the file-based checks, made once per process and removed
/// when the process exits (a static is never dropped, so a `TempDir` held in one would
/// leave it behind in every test and fuzzing run).
fn scratch() -> &'static std::path::Path {
    extern "C" fn remove_scratch() {
        if let Some(d) = SCRATCH.get() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    SCRATCH.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory").keep();
        // SAFETY: registers a function of no arguments that touches only a static set
        // before it; atexit may run it once at exit.
        unsafe { libc::atexit(remove_scratch) };
        dir
    })
}

/// Reads the first and last elements of an opened tensor when it is small enough to
/// decode a chunk of (at most 16 MiB of decoded chunk), checking any error is one line.
fn touch_ends(t: &crate::TensorFile) {
    let chunk: u64 = t
        .chunked()
        .map_or(1, |c| {
            c.chunk_shape().iter().map(|&d| d as u64).product::<u64>()
        })
        .saturating_mul(t.dtype().size() as u64);
    let n: u64 = t.shape().iter().map(|&d| d as u64).product();
    if n == 0 || chunk > 16 << 20 {
        return;
    }
    for at in [0, n - 1] {
        if let Err(e) = t.map_windows(&[(at, 1, crate::format::Touch::All)]) {
            one_line(&e);
        }
    }
}

/// Reads the ends of an opened tensor, or checks a refusal is one line; true if opened.
fn opened(r: crate::Result<crate::TensorFile>) -> bool {
    match r {
        Ok(t) => {
            touch_ends(&t);
            true
        }
        Err(e) => {
            one_line(&e);
            false
        }
    }
}

/// Opens `data` as a TIFF file the way every command does (the layout checks, then the
/// first and last element decoded when a chunk is small): must not panic, and every
/// refusal is one line. Returns whether it opened.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn tiff_file(data: &[u8]) -> bool {
    let path = scratch().join(format!("f{:?}.tif", std::thread::current().id()));
    std::fs::write(&path, data).expect("write the input");
    opened(crate::TensorFile::open_tiff(&path))
}

/// Decodes `data` as one WebP-compressed TIFF chunk (`src/format/tiff/webp.rs`): the
/// first bytes choose the samples a pixel (3 or 4), the width and the rows, the rest is
/// the stored stream. Checks: nothing is written past the chunk, a refusal is one line.
/// Returns whether the chunk decoded.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn webp_chunk(data: &[u8]) -> bool {
    let [k, w0, w1, r, stored @ ..] = data else {
        return false;
    };
    let spp = 3 + usize::from(k & 1);
    let width = usize::from(u16::from_le_bytes([*w0, *w1]) % 1024) + 1;
    let rows = usize::from(*r) + 1;
    guarded(spp * width * rows, |out| {
        crate::format::tiff::webp::decode(stored, width, rows, spp, out)
    })
}

/// Decodes `data` as one LZMA-compressed TIFF chunk (`src/format/tiff/lzma.rs`): bytes
/// 0-1 are the chunk's decoded size (a little-endian u16), the rest its `.xz` stream,
/// decoded within the memory its block header declares (at most 64 MiB of dictionary,
/// xz's largest preset: a stream that declares more is refused, as a plan's limit does).
/// Checks: nothing is written past the chunk, a refusal is one line. Returns whether the
/// chunk decoded.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn lzma_chunk(data: &[u8]) -> bool {
    use crate::format::tiff::lzma::{DECODER_OVERHEAD, decode, memory_limit};
    let [s0, s1, stored @ ..] = data else {
        return false;
    };
    let size = usize::from(u16::from_le_bytes([*s0, *s1]));
    guarded(size, |out| {
        let limit = memory_limit(stored)?.min((64 << 20) + DECODER_OVERHEAD);
        decode(stored, out, limit)
    })
}

/// Decodes `data` as one LERC-compressed TIFF chunk (`src/format/tiff/lerc.rs`): the
/// first bytes choose the additional compression, the sample type, the alpha mask, the
/// byte order, the samples a pixel, the width and the rows; the rest is the stored blob.
/// Checks: nothing is written past the chunk, a refusal is one line. Returns whether the
/// chunk decoded.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn lerc_chunk(data: &[u8]) -> bool {
    use crate::format::tiff::lerc::{Chunk, Extra, LercTags, decode};
    const TYPES: [DType; 8] = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::F32,
        DType::F64,
    ];
    let [k, t, s, w0, w1, r, stored @ ..] = data else {
        return false;
    };
    let extra = match k % 3 {
        0 => Extra::None,
        1 => Extra::Deflate,
        _ => Extra::Zstd,
    };
    let tags = LercTags {
        extra,
        alpha_mask: k & 4 != 0,
        big_endian: k & 8 != 0,
    };
    let dtype = TYPES[usize::from(t % 8)];
    let spp = usize::from(s % 5) + 1;
    let width = usize::from(u16::from_le_bytes([*w0, *w1]) % 512) + 1;
    let rows = usize::from(r % 128) + 1;
    let chunk = Chunk {
        stored,
        tags,
        dtype,
        width,
        rows,
        spp,
    };
    guarded(spp * width * rows * dtype.size(), |out| decode(&chunk, out))
}

/// Runs `decode` on a buffer of `size` bytes followed by guard bytes, and checks that the
/// guard is untouched and a refusal is one line.
fn guarded(size: usize, decode: impl FnOnce(&mut [u8]) -> Result<(), String>) -> bool {
    const GUARD: usize = 256;
    let mut out = vec![0xA5u8; size + GUARD];
    let result = decode(&mut out[..size]);
    assert!(
        out[size..].iter().all(|&b| b == 0xA5),
        "bytes written past the chunk"
    );
    match result {
        Ok(()) => true,
        Err(m) => {
            assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
            false
        }
    }
}

/// Decodes `data` as one JPEG-compressed TIFF chunk the way a strip or tile is decoded:
/// byte 0 picks how components are taken (grey, YCbCr to RGB, three raw, four raw),
/// bytes 1-2 the width (a little-endian u16 modulo 1024, plus one), byte 3 the rows
/// (modulo 64, plus one), byte 4 the extra rows of the chunk's slot (modulo 16), bytes
/// 5-6 the length of the `JPEGTables` stream that follows (none when 0), the rest is the
/// chunk's stream. Checks: no panic; nothing written past the chunk (guard bytes after
/// it stay as they were); a refusal is one line. Returns whether it decoded (false too
/// where libjpeg-turbo is not installed).
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn jpeg_chunk(data: &[u8]) -> bool {
    use crate::format::tiff::jpeg::{Chunk, Output, decode};
    let [k, w0, w1, r, extra, t0, t1, rest @ ..] = data else {
        return false;
    };
    let output = match k % 4 {
        0 => Output::Gray,
        1 => Output::YcbcrToRgb,
        2 => Output::Raw3,
        _ => Output::Raw4,
    };
    let width = usize::from(u16::from_le_bytes([*w0, *w1]) % 1024) + 1;
    let rows = usize::from(r % 64) + 1;
    let slot_rows = rows + usize::from(extra % 16);
    let tables_len = usize::from(u16::from_le_bytes([*t0, *t1])).min(rest.len());
    let (tables, stored) = rest.split_at(tables_len);
    let chunk = Chunk {
        tables: (tables_len > 0).then_some(tables),
        stored,
        output,
        width,
        rows,
        slot_rows,
        subsampling: None,
    };
    guarded(output.components() * slot_rows * width, |out| {
        decode(&chunk, out)
    })
}

/// Opens a Zarr store whose `zarr.json` is `data` (no chunk files: every chunk is the
/// fill value) and reads its ends: must not panic, and every refusal is one line.
/// Returns whether it opened.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn zarr_metadata(data: &[u8]) -> bool {
    let dir = scratch().join(format!("z{:?}.zarr", std::thread::current().id()));
    let _ = std::fs::create_dir(&dir);
    std::fs::write(dir.join("zarr.json"), data).expect("write the input");
    opened(crate::TensorFile::open_zarr(&dir))
}

/// Loads `data` as a pipeline file beside an input `x.npy` (8x6 f32) and plans it under
/// a 16 MiB budget: must not panic, and every refusal is one line. Returns whether it
/// planned.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn pipeline_file(data: &[u8]) -> bool {
    // one engine (and one worker pool) for every input: a pool per input is slow, and its
    // threads still winding down look like leaks to the fuzzer
    static ENGINE: std::sync::OnceLock<crate::Engine> = std::sync::OnceLock::new();
    let dir = scratch();
    let x = dir.join("x.npy");
    if !x.exists() {
        let mut bytes = npy::build_header(DType::F32, &[8, 6]);
        bytes.extend((0..48).flat_map(|i| (i as f32).to_le_bytes()));
        std::fs::write(&x, bytes).expect("write x.npy");
    }
    let path = dir.join(format!("p{:?}.toml", std::thread::current().id()));
    std::fs::write(&path, data).expect("write the input");
    let engine = ENGINE.get_or_init(|| {
        crate::Engine::new(crate::MemoryBudget::new(16 << 20))
            .and_then(|e| e.with_threads(1))
            .expect("an engine")
    });
    let result = crate::workflow::Workflow::load(&path).and_then(|w| w.plan(engine));
    match result {
        Ok(_) => true,
        Err(e) => {
            one_line(&e);
            false
        }
    }
}

/// Decodes `data` as one CCITT chunk the way a TIFF strip or tile is decoded: byte 0
/// picks the coding (RLE, Group 3 one- or two-dimensional, Group 4), bytes 1-2 the row
/// width (a little-endian u16 modulo 4096, plus one), byte 3 the rows (modulo 64, plus
/// one), the rest is the stream. Checks:
/// no panic; a decoded chunk sets no bit past a row's width; a refusal is one line.
/// Returns whether it decoded.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn fax_chunk(data: &[u8]) -> bool {
    use crate::format::tiff::fax::{FaxKind, decode};
    let [k, w0, w1, r, stream @ ..] = data else {
        return false;
    };
    let kind = match k % 4 {
        0 => FaxKind::Rle,
        1 => FaxKind::G3 { two_d: false },
        2 => FaxKind::G3 { two_d: true },
        _ => FaxKind::G4,
    };
    let width = usize::from(u16::from_le_bytes([*w0, *w1]) % 4096) + 1;
    let rows = usize::from(r % 64) + 1;
    let row_bytes = width.div_ceil(8);
    let mut out = vec![0xA5; rows * row_bytes];
    match decode(kind, stream, width, &mut out) {
        Ok(()) => {
            assert_eq!(out.len(), rows * row_bytes, "the chunk changed size");
            if width % 8 != 0 {
                let pad = 0xFFu8 >> (width % 8);
                for row in out.chunks_exact(row_bytes) {
                    assert_eq!(row[row_bytes - 1] & pad, 0, "a bit set past the width");
                }
            }
            true
        }
        Err(m) => {
            assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
            false
        }
    }
}

/// The filters [`hdf5_chunk`] chooses from, by its filter bytes (modulo their number): the
/// registered id and the client data, `None` standing for the element size.
pub const HDF5_FILTERS: [(i32, &[Option<u32>]); 14] = [
    (1, &[Some(6)]),
    (2, &[None]),
    (3, &[]),
    (32000, &[]),
    (32001, &[]),
    (32015, &[]),
    (32004, &[Some(0)]),
    (32008, &[Some(0), Some(0), None, Some(0), Some(0)]),
    (32008, &[Some(0), Some(0), None, Some(16), Some(0)]),
    (32008, &[Some(0), Some(0), None, Some(0), Some(2)]),
    (32008, &[Some(0), Some(0), None, Some(0), Some(3)]),
    // szip as h5py writes ("nn", 16) for chunks 40 elements wide: 8- and 32-bit pixels
    (4, &[Some(169), Some(16), Some(8), Some(40)]),
    (4, &[Some(169), Some(16), Some(32), Some(40)]),
    (307, &[Some(9)]),
];

/// One HDF5 chunk through its filter pipeline ([`crate::format::hdf5::chunks::decode_stored`],
/// what every chunk tilestream reads goes through). The first byte is the number of
/// filters (0 to 4), the next four choose them (deflate, shuffle, fletcher32, LZF, Blosc,
/// Zstandard, LZ4, bitshuffle in default blocks or blocks of 16 elements, bitshuffle with
/// LZ4, bitshuffle with Zstandard, szip of 8- or 32-bit pixels, bzip2: [`HDF5_FILTERS`]),
/// then the element size (1 to 8), the filter mask, the chunk's size (two
/// bytes, little-endian); the rest is the stored chunk. Checks: no panic; a decoded
/// chunk has exactly the chunk's size; a refusal is one line. Returns whether it decoded.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn hdf5_chunk(data: &[u8]) -> bool {
    let [n, f0, f1, f2, f3, es, mask, s0, s1, stored @ ..] = data else {
        return false;
    };
    let es = usize::from(es % 8) + 1;
    let filters: Vec<crate::format::hdf5::Filter> = [f0, f1, f2, f3][..usize::from(n % 5)]
        .iter()
        .map(|&&f| {
            let (id, params) = HDF5_FILTERS[usize::from(f) % HDF5_FILTERS.len()];
            crate::format::hdf5::Filter {
                id,
                params: params.iter().map(|&p| p.unwrap_or(es as u32)).collect(),
            }
        })
        .collect();
    let size = usize::from(u16::from_le_bytes([*s0, *s1]));
    match crate::format::hdf5::chunks::decode_stored(&filters, es, u32::from(*mask), size, stored) {
        Ok(chunk) => {
            assert_eq!(chunk.len(), size, "a chunk of another size");
            true
        }
        Err(m) => {
            assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
            false
        }
    }
}

/// A NetCDF-3 header ([`crate::format::netcdf3::parse_header`]), the input taken as a
/// whole file. Checks: no panic; every variable of an accepted header lies within the
/// file (so that mapping it cannot fault); a refusal is one line. Returns whether it was
/// accepted.
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn netcdf3_header(data: &[u8]) -> bool {
    let len = data.len() as u64;
    match crate::format::netcdf3::parse_header(data, len) {
        Ok(h) => {
            for v in &h.vars {
                let Ok(dt) = &v.dtype else { continue };
                let inner: u64 = v
                    .shape
                    .iter()
                    .skip(usize::from(v.record))
                    .map(|&d| d as u64)
                    .product();
                let slab = inner * dt.size() as u64;
                let n = if v.record { v.shape[0] as u64 } else { 1 };
                if n > 0 && slab > 0 {
                    let end = v.begin + (n - 1) * if v.record { h.recsize } else { 0 } + slab;
                    assert!(end <= len, "variable {} ends at {end}, past {len}", v.name);
                }
            }
            true
        }
        Err(m) => {
            assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
            false
        }
    }
}

/// A whole JPEG 2000 file (`src/format/jp2/`): its boxes and codestream headers are read,
/// and, for an image of at most 2^20 pixels a band and 4 bands, its first 16 blocks are
/// decoded by OpenJPEG. Checks: no panic; an accepted header's codestream lies within
/// the file; nothing is written past a block; a refusal is one line. Returns whether
/// every block tried decoded (false too where OpenJPEG is not installed).
///
/// # Panics
/// When one of those properties does not hold.
#[must_use]
pub fn jp2_file(data: &[u8]) -> bool {
    use crate::format::jp2;
    let one_line = |m: &str| assert!(!m.is_empty() && !m.contains('\n'), "bad message: {m:?}");
    let layout = match jp2::open(std::path::Path::new("fuzz.jp2"), data) {
        Ok(l) => l,
        Err(e) => {
            one_line(&e.to_string());
            return false;
        }
    };
    let (start, len) = layout.header.codestream;
    assert!(start + len <= data.len() as u64, "codestream past the file");
    let (w, h) = layout.header.size();
    if u64::from(w) * u64::from(h) > 1 << 20 || layout.bands() > 4 {
        return false;
    }
    let (bw, bh) = layout.block;
    let size = bw * bh * layout.bands() * layout.dtype.size();
    let mut all = true;
    for by in 0..(h as usize).div_ceil(bh) {
        for bx in 0..(w as usize).div_ceil(bw) {
            if by * 4 + bx >= 16 {
                continue;
            }
            all &= guarded(size, |out| layout.decode_block(&data, (by, bx), out));
        }
    }
    all
}
