//! Fuzz target: see `slipstream::fuzzing::cache_entry` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::cache_entry(data));
