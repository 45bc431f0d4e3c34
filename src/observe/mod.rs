//! Seeing what the proxy does: named counters for every trap ([`metrics`]), the buffered access
//! log ([`access_log`]) and the admin listener that serves the counters ([`admin`]).

pub mod access_log;
pub mod admin;
pub mod metrics;
