//! Fuzz target: see `slipstream::fuzzing::fastcgi_params` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::fastcgi_params(data));
