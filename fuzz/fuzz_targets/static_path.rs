//! Fuzz target: see `slipstream::fuzzing::static_path` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::static_path(data));
