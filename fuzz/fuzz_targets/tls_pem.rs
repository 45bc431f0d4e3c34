//! Fuzz target: see `slipstream::fuzzing::tls_pem` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::tls_pem(data));
