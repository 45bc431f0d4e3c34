//! Fuzz target: see `slipstream::fuzzing::compress_head` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::compress_head(data));
