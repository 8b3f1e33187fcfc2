//! Fuzzes `tilestream::fuzz_checks::netcdf3_header` (see `src/fuzz_checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tilestream::fuzz_checks::netcdf3_header(data);
});
