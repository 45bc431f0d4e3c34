//! Fuzz target: see `slipstream::fuzzing::accept_encoding` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::accept_encoding(data));
