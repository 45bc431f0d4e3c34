//! Named counters for every trap the proxy can fall into. Each worker owns one shard and bumps it
//! with relaxed atomics that no other thread writes, so counting costs no contention; readers (the
//! admin endpoint, `doctor`) sum the shards.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use strum::{EnumCount, IntoEnumIterator};

/// Every counter the proxy keeps. The derives keep the list and the count in step with the
/// variants, so a new counter can never index past a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount, strum::EnumIter)]
pub enum Counter {
    /// Client connections accepted.
    ConnectionsAccepted,
    /// Client connections closed.
    ConnectionsClosed,
    /// Times a worker stopped accepting because it was at its connection limit.
    AcceptPaused,
    /// accept(2) failures (EMFILE and friends).
    AcceptErrors,
    /// Requests whose head was read.
    Requests,
    /// Requests refused as malformed or too large (4xx from the proxy itself).
    BadRequests,
    /// Requests matching no route (404).
    NoRoute,
    /// Responses sent with a 2xx/3xx status.
    ResponsesOk,
    /// Responses sent with a 4xx status.
    Responses4xx,
    /// Responses sent with a 5xx status.
    Responses5xx,
    /// Upstream could not be reached or answered badly (502).
    BadGateway,
    /// Upstream did not answer in time (504).
    GatewayTimeout,
    /// Client closed before its response was complete (logged as 499).
    ClientClosed,
    /// Client timed out sending a head or body.
    ClientTimeouts,
    /// New upstream connections opened.
    UpstreamConnects,
    /// Requests sent on a pooled keep-alive upstream connection.
    UpstreamReused,
    /// Upstream connection attempts that failed.
    UpstreamConnectErrors,
    /// Connects that failed with EADDRNOTAVAIL: ephemeral ports exhausted.
    UpstreamPortsExhausted,
    /// Requests sent again on a fresh connection after a pooled one failed.
    UpstreamStaleRetries,
    /// Requests retried on another server after one failed.
    UpstreamRetries,
    /// Retries not made because the group's retry budget was spent.
    UpstreamRetryBudgetExhausted,
    /// Requests answered 503 because no server of the group was up.
    UpstreamNoLiveServers,
    /// Servers ejected by a worker after failures (passive health).
    UpstreamEjections,
    /// Pooled connections found closed by the upstream and discarded.
    UpstreamStaleDiscarded,
    /// Requests that waited for a connection because their server was at `max_conns`.
    UpstreamQueued,
    /// Requests answered 503 after waiting `queue_timeout` for a connection.
    UpstreamQueueTimeouts,
    /// Lines a FastCGI application wrote on STDERR (PHP warnings and errors).
    FastcgiStderrLines,
    /// STDERR lines not written to the error log because more than the rate limit came.
    FastcgiStderrNotLogged,
    /// Body bytes moved with splice(2), never entering user space.
    SplicedBytes,
    /// Responses read whole under `buffer_response`, freeing the upstream connection early.
    BufferedResponses,
    /// Static files found in the worker's open-file cache (no open or stat).
    FilesCacheHits,
    /// Static files opened because they were not cached or were due for a check.
    FilesCacheMisses,
    /// Static-file requests answered 404.
    FilesNotFound,
    /// Static-file requests refused with 403: a dotfile, a symlink out of the directory, a
    /// special file, no permission, or a directory without index or listing.
    FilesForbidden,
    /// Files that became shorter while being sent: the connection was closed rather than
    /// send fewer bytes than announced.
    FilesTruncated,
    /// File system errors opening or reading a static file (500).
    FilesErrors,
    /// Static-file body bytes sent with sendfile(2).
    SendfileBytes,
}

impl Counter {
    /// The response counter for a status sent (or logged: 499 counts as 4xx).
    pub fn for_status(status: u16) -> Counter {
        match status {
            400..=499 => Counter::Responses4xx,
            500..=599 => Counter::Responses5xx,
            _ => Counter::ResponsesOk,
        }
    }

    /// The exposed metric name.
    pub fn name(self) -> &'static str {
        match self {
            Counter::ConnectionsAccepted => "slipstream_connections_accepted_total",
            Counter::ConnectionsClosed => "slipstream_connections_closed_total",
            Counter::AcceptPaused => "slipstream_accept_paused_at_connection_limit_total",
            Counter::AcceptErrors => "slipstream_accept_errors_total",
            Counter::Requests => "slipstream_requests_total",
            Counter::BadRequests => "slipstream_bad_requests_total",
            Counter::NoRoute => "slipstream_no_route_total",
            Counter::ResponsesOk => "slipstream_responses_ok_total",
            Counter::Responses4xx => "slipstream_responses_4xx_total",
            Counter::Responses5xx => "slipstream_responses_5xx_total",
            Counter::BadGateway => "slipstream_upstream_bad_gateway_total",
            Counter::GatewayTimeout => "slipstream_upstream_timeouts_total",
            Counter::ClientClosed => "slipstream_client_closed_early_total",
            Counter::ClientTimeouts => "slipstream_client_timeouts_total",
            Counter::UpstreamConnects => "slipstream_upstream_connects_total",
            Counter::UpstreamReused => "slipstream_upstream_reused_total",
            Counter::UpstreamConnectErrors => "slipstream_upstream_connect_errors_total",
            Counter::UpstreamPortsExhausted => "slipstream_upstream_ports_exhausted_total",
            Counter::UpstreamStaleRetries => "slipstream_upstream_stale_retries_total",
            Counter::UpstreamRetries => "slipstream_upstream_retries_total",
            Counter::UpstreamRetryBudgetExhausted => {
                "slipstream_upstream_retry_budget_exhausted_total"
            }
            Counter::UpstreamNoLiveServers => "slipstream_upstream_no_live_servers_total",
            Counter::UpstreamEjections => "slipstream_upstream_ejections_total",
            Counter::UpstreamStaleDiscarded => "slipstream_upstream_stale_discarded_total",
            Counter::UpstreamQueued => "slipstream_upstream_queued_total",
            Counter::UpstreamQueueTimeouts => "slipstream_upstream_queue_timeouts_total",
            Counter::FastcgiStderrLines => "slipstream_fastcgi_stderr_lines_total",
            Counter::FastcgiStderrNotLogged => "slipstream_fastcgi_stderr_lines_not_logged_total",
            Counter::SplicedBytes => "slipstream_spliced_bytes_total",
            Counter::BufferedResponses => "slipstream_buffered_responses_total",
            Counter::FilesCacheHits => "slipstream_files_cache_hits_total",
            Counter::FilesCacheMisses => "slipstream_files_cache_misses_total",
            Counter::FilesNotFound => "slipstream_files_not_found_total",
            Counter::FilesForbidden => "slipstream_files_forbidden_total",
            Counter::FilesTruncated => "slipstream_files_truncated_total",
            Counter::FilesErrors => "slipstream_files_errors_total",
            Counter::SendfileBytes => "slipstream_sendfile_bytes_total",
        }
    }
}

/// One worker's counters.
#[derive(Debug)]
pub struct Shard {
    values: [AtomicU64; Counter::COUNT],
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Shard {
    /// Adds one.
    #[inline]
    pub fn inc(&self, c: Counter) {
        self.values[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        self.values[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Current value of this shard's counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }
}

/// All shards of the process; cloned handles share them.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    shards: Arc<Mutex<Vec<Arc<Shard>>>>,
}

impl Metrics {
    /// A new shard for a worker (taken once per worker at start, never on the request path).
    pub fn new_shard(&self) -> Arc<Shard> {
        let shard = Arc::new(Shard::default());
        self.shards.lock().unwrap().push(shard.clone());
        shard
    }

    /// The sum of a counter over all workers.
    pub fn total(&self, c: Counter) -> u64 {
        self.shards.lock().unwrap().iter().map(|s| s.get(c)).sum()
    }

    /// Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in Counter::iter() {
            let _ = writeln!(
                out,
                "# TYPE {} counter\n{} {}",
                c.name(),
                c.name(),
                self.total(c)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter has a slot, a unique name, and appears in the exposition.
    #[test]
    fn every_counter_is_listed_and_exposed() {
        let metrics = Metrics::default();
        let shard = metrics.new_shard();
        let mut names = std::collections::HashSet::new();
        for (i, c) in Counter::iter().enumerate() {
            assert_eq!(c as usize, i);
            shard.add(c, i as u64 + 1);
            assert!(names.insert(c.name()), "{} named twice", c.name());
            assert!(c.name().starts_with("slipstream_") && c.name().ends_with("_total"));
        }
        assert_eq!(names.len(), Counter::COUNT);
        let text = metrics.render();
        for (i, c) in Counter::iter().enumerate() {
            assert!(
                text.contains(&format!("\n{} {}\n", c.name(), i + 1)),
                "{}",
                c.name()
            );
        }
    }
}
