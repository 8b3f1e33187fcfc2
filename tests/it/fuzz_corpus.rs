//! Replays the committed fuzz corpora (`fuzz/corpus/`) through the same checks the fuzz
//! targets run, so every input that once found a bug (and every seed) is re-checked by
//! `cargo test` without a fuzzer. Run the fuzzers themselves with `cargo fuzz` (see
//! `fuzz/README.md`).

use std::path::Path;

use tilestream::DType;
use tilestream::fuzz_checks::{
    NpyOutcome, expr, fax_chunk, hdf5_chunk, jp2_file, jpeg_chunk, lerc_chunk, lzma_chunk,
    netcdf3_header, npy_header, pipeline_file, tiff_file, webp_chunk, zarr_metadata,
};

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("corpus entry").path();
            (
                p.display().to_string(),
                std::fs::read(&p).expect("corpus file"),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn npy_header_corpus_replays_without_a_finding() {
    let files = corpus("npy_header");
    assert!(files.len() >= 50, "corpus too small: {}", files.len());
    let mut accepted = 0;
    for (name, data) in &files {
        let outcome = std::panic::catch_unwind(|| npy_header(data))
            .unwrap_or_else(|_| panic!("{name}: the check failed"));
        if let NpyOutcome::Accepted(..) = outcome {
            accepted += 1;
        }
    }
    // numpy's own headers are among the seeds: some must be accepted, some refused
    assert!(
        accepted >= 10 && accepted < files.len(),
        "{accepted} of {}",
        files.len()
    );
}

#[test]
fn npy_header_checks_known_headers() {
    let h = |text: &str| {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(
            &u16::try_from(text.len())
                .expect("short header")
                .to_le_bytes(),
        );
        b.extend_from_slice(text.as_bytes());
        b
    };
    assert_eq!(
        npy_header(&h(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }\n"
        )),
        NpyOutcome::Accepted(DType::F32, vec![3, 5], 60)
    );
    // a count of bytes past 2^63 is refused, not wrapped
    let huge = h("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n");
    assert!(matches!(npy_header(&huge), NpyOutcome::Refused(m) if m.contains("overflows")));
    // control characters from the file are escaped in messages (a fuzz finding)
    let nl = h("{'de\nscr': '<f4', 'fortran_order': False, 'shape': (3,), }\n");
    assert!(matches!(npy_header(&nl), NpyOutcome::Refused(m) if m.contains("de\\nscr")));
}

#[test]
fn expr_corpus_replays_without_a_finding() {
    let files = corpus("expr");
    assert!(files.len() >= 20, "corpus too small: {}", files.len());
    let mut parsed = 0;
    for (name, data) in &files {
        if std::panic::catch_unwind(|| expr(data))
            .unwrap_or_else(|_| panic!("{name}: the check failed"))
        {
            parsed += 1;
        }
    }
    assert!(
        parsed >= 10 && parsed < files.len(),
        "{parsed} of {}",
        files.len()
    );
}

/// Replays corpus `name` through `check`; returns (inputs accepted, inputs).
fn replay(name: &str, check: fn(&[u8]) -> bool) -> (usize, usize) {
    let files = corpus(name);
    let mut accepted = 0;
    for (file, data) in &files {
        if std::panic::catch_unwind(|| check(data))
            .unwrap_or_else(|_| panic!("{file}: the check failed"))
        {
            accepted += 1;
        }
    }
    (accepted, files.len())
}

#[test]
fn tiff_file_corpus_replays_without_a_finding() {
    let (ok, n) = replay("tiff_file", tiff_file);
    // GDAL's files among the seeds open (packed samples, CMYK, fax and JPEG among them)
    assert!(n >= 16 && ok >= 10 && ok < n, "{ok} of {n}");
}

#[test]
fn fax_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("fax_chunk", fax_chunk);
    // the 30 seeds are strips GDAL and tiffcp wrote: they decode; what the fuzzer added
    // mostly does not
    assert!(n >= 100 && ok >= 30 && ok < n, "{ok} of {n}");
}

#[test]
fn jpeg_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("jpeg_chunk", jpeg_chunk);
    // the 27 seeds are strips and tiles GDAL and tiffcp wrote: they decode (libjpeg-turbo
    // is installed by the test command); what the fuzzer added mostly does not
    assert!(n >= 27 && ok >= 27, "{ok} of {n}");
}

#[test]
fn webp_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("webp_chunk", webp_chunk);
    // the 24 seeds are strips and tiles GDAL wrote (RGB, RGBA, lossy and lossless): they
    // decode (libwebp is installed by the test command)
    assert!(n >= 24 && ok >= 24, "{ok} of {n}");
}

#[test]
fn lzma_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("lzma_chunk", lzma_chunk);
    // the 12 seeds are strips and tiles GDAL wrote (presets 0, 6 and 9, with and without
    // a predictor, four sample types): they decode (liblzma is on every Linux system)
    assert!(n >= 12 && ok >= 12, "{ok} of {n}");
}

#[test]
fn lzma_chunks_damaged_at_random_are_refused_in_one_line_never_written_past() {
    // no fuzzer runs in CI: each seed damaged 200 ways (a byte changed, a run zeroed, the
    // stream cut, the decoded size changed), each through the fuzz target's checks.
    // libtiff's streams carry no integrity check, but damaged LZMA2 rarely decodes to
    // exactly its chunk's size, so almost none decodes
    // (the streams that decode: the inputs the fuzzer kept beside them are mostly bytes
    // that never were a stream)
    let seeds: Vec<_> = corpus("lzma_chunk")
        .into_iter()
        .filter(|(_, s)| s.len() > 2 && lzma_chunk(s))
        .collect();
    assert!(seeds.len() >= 12, "{} seeds decode", seeds.len());
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut decoded, mut tried) = (0, 0);
    for (_, seed) in &seeds {
        for kind in 0..200 {
            let mut d = seed.clone();
            let len = d.len();
            match kind % 4 {
                0 => d[2 + next(len - 2)] ^= 1 << next(8),
                1 => {
                    let at = 2 + next(len - 2);
                    let end = (at + 1 + next(16)).min(len);
                    d[at..end].fill(0);
                }
                2 => d.truncate(2 + next(len - 2)),
                _ => {
                    let size = u16::from_le_bytes([d[0], d[1]]);
                    let other = size.wrapping_add(next(3) as u16).wrapping_sub(1);
                    d[..2].copy_from_slice(&other.to_le_bytes());
                }
            }
            tried += 1;
            if lzma_chunk(&d) {
                decoded += 1;
            }
        }
    }
    // a size changed by 0 decodes (one in three of that kind); the rest is refused
    assert!(decoded * 4 < tried, "{decoded} of {tried} decoded");
}

#[test]
fn lerc_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("lerc_chunk", lerc_chunk);
    // the 70 seeds are strips and tiles GDAL wrote (every sample type, Deflate and
    // Zstandard on top, both byte orders, masks): all but the three of refused kinds
    // (invalid interleaved or big-endian floats) decode
    assert!(n >= 70 && ok >= 67, "{ok} of {n}");
}

#[test]
fn hdf5_chunk_corpus_replays_without_a_finding() {
    let (ok, n) = replay("hdf5_chunk", hdf5_chunk);
    // the 62 seeds are chunks h5py and hdf5plugin wrote through each filter pipeline
    // (tests/hdf5_check.py seeds; LZ4, bitshuffle, szip, bzip2 from 2026-12-01): they decode
    assert!(n >= 62 && ok >= 62, "{ok} of {n}");
}

#[test]
fn netcdf3_header_corpus_replays_without_a_finding() {
    let (ok, n) = replay("netcdf3_header", netcdf3_header);
    // the 4 seeds are files netCDF4-python wrote (classic, 64-bit offsets, 64-bit data,
    // one unpadded record variable): they parse
    assert!(n >= 4 && ok >= 4, "{ok} of {n}");
}

#[test]
fn zarr_metadata_corpus_replays_without_a_finding() {
    let (ok, n) = replay("zarr_metadata", zarr_metadata);
    assert!(n >= 10 && ok >= 5 && ok < n, "{ok} of {n}");
}

#[test]
fn pipeline_file_corpus_replays_without_a_finding() {
    let (ok, n) = replay("pipeline_file", pipeline_file);
    assert!(n >= 5 && ok >= 3, "{ok} of {n}");
}

#[test]
fn jp2_file_corpus_replays_without_a_finding() {
    let (ok, n) = replay("jp2_file", jp2_file);
    // the 16 seeds are small files GDAL wrote (every sample type it writes, lossy and
    // lossless, tiles, tiny tiles, tile-parts and markers, a raw codestream): all but
    // the 4:2:0 one decode (OpenJPEG is installed by the test command)
    assert!(n >= 16 && ok >= 15, "{ok} of {n}");
}
