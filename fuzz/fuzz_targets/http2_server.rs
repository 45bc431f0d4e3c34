//! Fuzz target: see `slipstream::fuzzing::http2_server` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::http2_server(data));
