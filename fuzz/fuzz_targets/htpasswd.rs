//! Fuzz target: see `slipstream::fuzzing::htpasswd` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::htpasswd::htpasswd(data));
