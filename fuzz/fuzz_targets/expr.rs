//! Fuzzes the `map` expression parser, compiler and evaluator.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tilestream::fuzz_checks::expr(data);
});
