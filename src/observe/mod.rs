//! Seeing what the proxy does: named counters for every trap and the connection gauges
//! ([`metrics`]), latency histograms ([`histogram`]), per-route and per-listener figures ([`routes`], [`listeners`]), the
//! Prometheus text format's rules ([`exposition`]), the buffered access log ([`access_log`],
//! lines by [`log_format`]), the error log ([`error_log`]), the admin listener ([`admin`], with
//! nginx's stub_status in [`status`] and the live page in [`dashboard`]), a fleet member's standing ([`cluster`]) and the host checks of `slipstream doctor` ([`doctor`]).

pub mod access_log;
pub mod admin;
pub mod caches;
pub mod cluster;
pub mod dashboard;
pub mod doctor;
pub mod error_log;
pub mod exposition;
pub mod histogram;
pub mod listeners;
pub mod log_format;
pub mod metrics;
pub mod routes;
pub mod status;

/// Milliseconds since the Unix epoch (0 on a clock before it), for the times the admin pages
/// show.
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
