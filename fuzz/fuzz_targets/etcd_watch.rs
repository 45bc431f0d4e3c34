//! Fuzz target: see `slipstream::fuzzing::etcd_watch` for the properties it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| slipstream::fuzzing::etcd_watch(data));
