//! Fuzzes `tilestream::fuzz_checks::lzma_chunk` (see `src/fuzz_checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tilestream::fuzz_checks::lzma_chunk(data);
});
