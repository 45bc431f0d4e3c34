//! Fuzz target: see `slipstream::fuzzing::ocsp_response` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::ocsp_response(data));
