//! Fuzz target: see `slipstream::fuzzing::proc_files` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::proc_files(data));
