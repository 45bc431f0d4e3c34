//! Fuzz target: see `slipstream::fuzzing::conditional` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::conditional(data));
