//! Fuzz target: see `slipstream::fuzzing::log_format` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::log_format(data));
