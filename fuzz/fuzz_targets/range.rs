//! Fuzz target: see `slipstream::fuzzing::range` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::range(data));
