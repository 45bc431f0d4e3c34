//! Fuzz target: see `slipstream::fuzzing::cgi_head` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::cgi_head(data));
