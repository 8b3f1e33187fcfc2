//! Fuzzes the `.npy` header parser: length field, dict literal, dtype, shape, byte count.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tilestream::fuzz_checks::npy_header(data);
});
