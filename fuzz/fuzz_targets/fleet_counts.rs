//! Fuzz target: see `slipstream::fuzzing::fleet_counts` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::fleet_counts(data));
