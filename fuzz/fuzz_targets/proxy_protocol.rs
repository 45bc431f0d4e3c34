//! Fuzz target: see `slipstream::fuzzing::proxy_protocol` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::proxy_protocol(data));
