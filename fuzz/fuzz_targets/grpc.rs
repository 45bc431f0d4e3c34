//! Fuzz target: see `slipstream::fuzzing::grpc` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::grpc(data));
