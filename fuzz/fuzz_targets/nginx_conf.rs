//! Fuzz target: see `slipstream::fuzzing::nginx_conf` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::nginx_conf(data));
