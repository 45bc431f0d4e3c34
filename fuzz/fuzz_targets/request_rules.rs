//! Fuzz target: see `slipstream::fuzzing::request_rules` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::request_rules(data));
