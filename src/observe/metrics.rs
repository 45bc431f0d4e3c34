//! Named counters for every trap the proxy can fall into. Each worker owns one shard and bumps it
//! with relaxed atomics that no other thread writes, so counting costs no contention; readers (the
//! admin endpoint, `doctor`) sum the shards.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use strum::{EnumCount, IntoEnumIterator};

use super::exposition::{family, Type};
use super::histogram::{Histogram, Totals};
use super::routes::RouteRegistry;

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
    /// Requests refused by a site's or route's `access` rules (403).
    AccessDenied,
    /// Requests whose rules failed (500): more than 10 path changes, a path not starting
    /// with `/`, or a regular expression past its step limit.
    RewriteFailures,
    /// Requests answered by a `return` or redirect rule.
    RuleAnswers,
    /// Answers replaced by an error page (`error_pages`).
    ErrorPages,
    /// Requests refused by authentication (401, 403 of `auth_basic` or `auth_request`).
    AuthRefusals,
    /// Requests whose authorization service failed (500).
    AuthFailures,
    /// Requests refused by `limit_req` or `limit_conn`.
    LimitRejects,
    /// Requests `limit_req` served after a wait.
    LimitDelays,
    /// Connections closed on a `proxy_protocol` listener for a missing or malformed header.
    ProxyProtocolRefused,
    /// Responses sent with a 2xx/3xx status.
    ResponsesOk,
    /// Responses sent with a 4xx status.
    Responses4xx,
    /// Responses sent with a 5xx status.
    Responses5xx,
    /// 5xx responses made by slipstream itself (502, 503, 504, 500...).
    Responses5xxGenerated,
    /// 5xx responses passed on from an upstream server.
    Responses5xxUpstream,
    /// Bytes received from clients: request heads and bodies.
    ClientBytesIn,
    /// Response body bytes sent to clients.
    ClientBytesOut,
    /// Access-log lines written to the worker's buffer.
    AccessLogLines,
    /// Access-log lines dropped because the log writer fell behind by more than its bound.
    AccessLogLinesDropped,
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
    /// Connections closed on their return because their server's idle pool was full.
    UpstreamIdleOverflow,
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
    /// Responses compressed on the fly (or served from the compressed static cache).
    CompressedResponses,
    /// Body bytes that went into compression.
    CompressBytesIn,
    /// Compressed body bytes that came out.
    CompressBytesOut,
    /// Compressed static files served from the worker's compressed-file cache.
    CompressCacheHits,
    /// Static files compressed and stored in the cache (a miss).
    CompressCacheMisses,
    /// Compressed copies dropped from the cache to stay within `static_cache`.
    CompressCacheEvictions,
    /// Responses that failed to compress (500, or a closed connection mid-body).
    CompressFailures,
    /// TLS handshakes completed.
    TlsHandshakes,
    /// TLS handshakes that resumed a session (ticket or cache): no full handshake.
    TlsResumed,
    /// TLS handshakes not finished within `handshake_timeout`.
    TlsHandshakeTimeouts,
    /// Plain HTTP sent to a TLS port (answered 400).
    TlsPlainHttp,
    /// Connections closed before their handshake finished.
    TlsTruncated,
    /// Handshakes refused as malformed (garbage ClientHellos, out-of-order messages).
    TlsBadHello,
    /// Handshakes with nothing in common (versions, ciphers, no certificate for the name).
    TlsIncompatible,
    /// Handshakes the client ended with an alert (it did not trust the certificate, mostly).
    TlsAlertReceived,
    /// Other handshake failures.
    TlsOtherFailures,
    /// Connections closed at once because the worker had `max_handshakes` in progress.
    TlsHandshakesBusy,
    /// Client connections that spoke HTTP/2 (ALPN `h2` or h2c).
    Http2Connections,
    /// HTTP/2 request streams accepted.
    Http2Streams,
    /// HTTP/2 connections whose preface was missing or wrong (answered GOAWAY).
    Http2BadPreface,
    /// HTTP/2 connections closed with GOAWAY(ENHANCE_YOUR_CALM) for flooding cheap frames.
    Http2Floods,
    /// HTTP/2 connections ended by a protocol or I/O error.
    Http2ConnectionErrors,
    /// HTTP/2 requests reset as malformed (nothing forwarded).
    Http2Malformed,
    /// Tunnels (WebSocket, any upgrade) closed after `tunnel_idle_timeout` without a byte.
    TunnelIdleTimeouts,
    /// Workers asked for io_uring (`io = "uring"`) that the kernel refused a ring: they run
    /// on epoll.
    UringUnavailable,
    /// Workers whose ring failed for good (a fatal `io_uring_enter` error): they went on
    /// with epoll.
    UringFailed,
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
            Counter::AccessDenied => "slipstream_access_denied_total",
            Counter::RewriteFailures => "slipstream_rewrite_failures_total",
            Counter::RuleAnswers => "slipstream_rule_answers_total",
            Counter::ErrorPages => "slipstream_error_pages_total",
            Counter::AuthRefusals => "slipstream_auth_refusals_total",
            Counter::AuthFailures => "slipstream_auth_failures_total",
            Counter::LimitRejects => "slipstream_limit_rejects_total",
            Counter::LimitDelays => "slipstream_limit_delays_total",
            Counter::ProxyProtocolRefused => "slipstream_proxy_protocol_refused_total",
            Counter::ResponsesOk => "slipstream_responses_ok_total",
            Counter::Responses4xx => "slipstream_responses_4xx_total",
            Counter::Responses5xx => "slipstream_responses_5xx_total",
            Counter::Responses5xxGenerated => "slipstream_responses_5xx_generated_total",
            Counter::Responses5xxUpstream => "slipstream_responses_5xx_from_upstream_total",
            Counter::ClientBytesIn => "slipstream_client_received_bytes_total",
            Counter::ClientBytesOut => "slipstream_client_sent_body_bytes_total",
            Counter::AccessLogLines => "slipstream_access_log_lines_total",
            Counter::AccessLogLinesDropped => "slipstream_access_log_lines_dropped_total",
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
            Counter::UpstreamIdleOverflow => "slipstream_upstream_idle_overflow_total",
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
            Counter::CompressedResponses => "slipstream_compressed_responses_total",
            Counter::CompressBytesIn => "slipstream_compress_bytes_in_total",
            Counter::CompressBytesOut => "slipstream_compress_bytes_out_total",
            Counter::CompressCacheHits => "slipstream_compress_cache_hits_total",
            Counter::CompressCacheMisses => "slipstream_compress_cache_misses_total",
            Counter::CompressCacheEvictions => "slipstream_compress_cache_evictions_total",
            Counter::CompressFailures => "slipstream_compress_failures_total",
            Counter::TlsHandshakes => "slipstream_tls_handshakes_total",
            Counter::TlsResumed => "slipstream_tls_resumed_total",
            Counter::TlsHandshakeTimeouts => "slipstream_tls_handshake_timeouts_total",
            Counter::TlsPlainHttp => "slipstream_tls_plain_http_total",
            Counter::TlsTruncated => "slipstream_tls_handshake_truncated_total",
            Counter::TlsBadHello => "slipstream_tls_handshake_malformed_total",
            Counter::TlsIncompatible => "slipstream_tls_handshake_incompatible_total",
            Counter::TlsAlertReceived => "slipstream_tls_handshake_alert_received_total",
            Counter::TlsOtherFailures => "slipstream_tls_handshake_other_failures_total",
            Counter::TlsHandshakesBusy => "slipstream_tls_handshakes_busy_total",
            Counter::Http2Connections => "slipstream_http2_connections_total",
            Counter::Http2Streams => "slipstream_http2_streams_total",
            Counter::Http2BadPreface => "slipstream_http2_bad_preface_total",
            Counter::Http2Floods => "slipstream_http2_floods_total",
            Counter::Http2ConnectionErrors => "slipstream_http2_connection_errors_total",
            Counter::Http2Malformed => "slipstream_http2_malformed_requests_total",
            Counter::TunnelIdleTimeouts => "slipstream_tunnel_idle_timeouts_total",
            Counter::UringUnavailable => "slipstream_uring_unavailable_workers_total",
            Counter::UringFailed => "slipstream_uring_failed_workers_total",
        }
    }

    /// The exposition's `# HELP` text: what the counter counts (its doc comment).
    pub fn help(self) -> &'static str {
        match self {
            Counter::ConnectionsAccepted => "Client connections accepted.",
            Counter::ConnectionsClosed => "Client connections closed.",
            Counter::AcceptPaused => "Times a worker stopped accepting because it was at its connection limit.",
            Counter::AcceptErrors => "accept(2) failures (EMFILE and friends).",
            Counter::Requests => "Requests whose head was read.",
            Counter::BadRequests => "Requests refused as malformed or too large (4xx from the proxy itself).",
            Counter::NoRoute => "Requests matching no route (404).",
            Counter::AccessDenied => "Requests refused by access rules (403).",
            Counter::RewriteFailures => "Requests whose rules failed (500): more than 10 path changes, a path not starting with /, or a regular expression past its step limit.",
            Counter::RuleAnswers => "Requests answered by a return or redirect rule.",
            Counter::ErrorPages => "Answers replaced by an error page (error_pages), the upstream's too with intercept_errors.",
            Counter::AuthRefusals => "Requests refused by authentication: 401 and 403 of auth_basic or auth_request.",
            Counter::AuthFailures => "Requests whose authorization service (auth_request) failed or answered neither 2xx, 401 nor 403 (500).",
            Counter::LimitRejects => "Requests refused by limit_req or limit_conn (429 unless limit_status says otherwise).",
            Counter::LimitDelays => "Requests limit_req served after a wait (over the rate, within the burst).",
            Counter::ProxyProtocolRefused => "Connections closed on a proxy_protocol listener: no PROXY header, a malformed one, or none in time.",
            Counter::ResponsesOk => "Responses sent with a 2xx/3xx status.",
            Counter::Responses4xx => "Responses sent with a 4xx status.",
            Counter::Responses5xx => "Responses sent with a 5xx status.",
            Counter::Responses5xxGenerated => "5xx responses made by slipstream itself (502, 503, 504, 500...).",
            Counter::Responses5xxUpstream => "5xx responses passed on from an upstream server.",
            Counter::ClientBytesIn => "Bytes received from clients: request heads and bodies.",
            Counter::ClientBytesOut => "Response body bytes sent to clients.",
            Counter::AccessLogLines => "Access-log lines written to the worker's buffer.",
            Counter::AccessLogLinesDropped => "Access-log lines dropped because the log writer fell behind by more than its bound.",
            Counter::BadGateway => "Upstream could not be reached or answered badly (502).",
            Counter::GatewayTimeout => "Upstream did not answer in time (504).",
            Counter::ClientClosed => "Client closed before its response was complete (logged as 499).",
            Counter::TunnelIdleTimeouts => "Tunnels (WebSocket, any upgrade) closed after tunnel_idle_timeout without a byte either way.",
            Counter::ClientTimeouts => "Client timed out sending a head or body.",
            Counter::UpstreamConnects => "New upstream connections opened.",
            Counter::UpstreamReused => "Requests sent on a pooled keep-alive upstream connection.",
            Counter::UpstreamConnectErrors => "Upstream connection attempts that failed.",
            Counter::UpstreamPortsExhausted => "Connects that failed with EADDRNOTAVAIL: ephemeral ports exhausted.",
            Counter::UpstreamStaleRetries => "Requests sent again on a fresh connection after a pooled one failed.",
            Counter::UpstreamRetries => "Requests retried on another server after one failed.",
            Counter::UpstreamRetryBudgetExhausted => "Retries not made because the group's retry budget was spent.",
            Counter::UpstreamNoLiveServers => "Requests answered 503 because no server of the group was up.",
            Counter::UpstreamEjections => "Servers ejected by a worker after failures (passive health).",
            Counter::UpstreamStaleDiscarded => "Pooled connections found closed by the upstream and discarded.",
            Counter::UpstreamIdleOverflow => "Connections closed on their return because the server's idle pool was full (the pool grows when a new connect soon follows).",
            Counter::UpstreamQueued => "Requests that waited for a connection because their server was at `max_conns`.",
            Counter::UpstreamQueueTimeouts => "Requests answered 503 after waiting `queue_timeout` for a connection.",
            Counter::FastcgiStderrLines => "Lines a FastCGI application wrote on STDERR (PHP warnings and errors).",
            Counter::FastcgiStderrNotLogged => "STDERR lines not written to the error log because more than the rate limit came.",
            Counter::SplicedBytes => "Body bytes moved with splice(2), never entering user space.",
            Counter::BufferedResponses => "Responses read whole under `buffer_response`, freeing the upstream connection early.",
            Counter::FilesCacheHits => "Static files found in the worker's open-file cache (no open or stat).",
            Counter::FilesCacheMisses => "Static files opened because they were not cached or were due for a check.",
            Counter::FilesNotFound => "Static-file requests answered 404.",
            Counter::FilesForbidden => "Static-file requests refused with 403: a dotfile, a symlink out of the directory, a special file, no permission, or a directory without index or listing.",
            Counter::FilesTruncated => "Files that became shorter while being sent: the connection was closed rather than send fewer bytes than announced.",
            Counter::FilesErrors => "File system errors opening or reading a static file (500).",
            Counter::SendfileBytes => "Static-file body bytes sent with sendfile(2).",
            Counter::CompressedResponses => "Responses compressed on the fly (or served from the compressed static cache).",
            Counter::CompressBytesIn => "Body bytes that went into compression.",
            Counter::CompressBytesOut => "Compressed body bytes that came out.",
            Counter::CompressCacheHits => "Compressed static files served from the worker's compressed-file cache.",
            Counter::CompressCacheMisses => "Static files compressed and stored in the cache (a miss).",
            Counter::CompressCacheEvictions => "Compressed copies dropped from the cache to stay within `static_cache`.",
            Counter::CompressFailures => "Responses that failed to compress (500, or a closed connection mid-body).",
            Counter::TlsHandshakes => "TLS handshakes completed.",
            Counter::TlsResumed => "TLS handshakes that resumed a session (ticket or cache): no full handshake.",
            Counter::TlsHandshakeTimeouts => "TLS handshakes not finished within `handshake_timeout`.",
            Counter::TlsPlainHttp => "Plain HTTP sent to a TLS port (answered 400).",
            Counter::TlsTruncated => "Connections closed before their handshake finished.",
            Counter::TlsBadHello => "Handshakes refused as malformed (garbage ClientHellos, out-of-order messages).",
            Counter::TlsIncompatible => "Handshakes with nothing in common (versions, ciphers, no certificate for the name).",
            Counter::TlsAlertReceived => "Handshakes the client ended with an alert (it did not trust the certificate, mostly).",
            Counter::TlsOtherFailures => "Other handshake failures.",
            Counter::TlsHandshakesBusy => "Connections closed at once because the worker had `max_handshakes` in progress.",
            Counter::Http2Connections => "Client connections that spoke HTTP/2 (ALPN `h2` or h2c).",
            Counter::Http2Streams => "HTTP/2 request streams accepted.",
            Counter::Http2BadPreface => "HTTP/2 connections whose preface was missing or wrong (answered GOAWAY).",
            Counter::Http2Floods => "HTTP/2 connections closed with GOAWAY(ENHANCE_YOUR_CALM) for flooding cheap frames.",
            Counter::Http2ConnectionErrors => "HTTP/2 connections ended by a protocol or I/O error.",
            Counter::Http2Malformed => "HTTP/2 requests reset as malformed (nothing forwarded).",
            Counter::UringUnavailable => "Workers asked for io_uring (`io = \"uring\"`) that the kernel refused a ring: they run on epoll.",
            Counter::UringFailed => "Workers whose io_uring failed with an error that cannot be retried: they went on on epoll.",
        }
    }
}

/// Client connections by state, as nginx's stub_status counts them; set by their worker only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount, strum::EnumIter)]
pub enum Gauge {
    /// Client connections open.
    Open,
    /// Connections reading a request head.
    Reading,
    /// Connections with a request in progress (waiting on the upstream or sending).
    Writing,
}

/// One worker's counters, connection gauges and request-duration histogram.
#[derive(Debug)]
pub struct Shard {
    values: [AtomicU64; Counter::COUNT],
    gauges: [AtomicU64; Gauge::COUNT],
    /// Time from request head to response end, every request.
    pub durations: Histogram,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            values: std::array::from_fn(|_| AtomicU64::new(0)),
            gauges: std::array::from_fn(|_| AtomicU64::new(0)),
            durations: Histogram::default(),
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

    /// Moves a gauge by `delta` (only this shard's worker calls it: a load and a store).
    #[inline]
    pub fn gauge_add(&self, g: Gauge, delta: i64) {
        let cell = &self.gauges[g as usize];
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add_signed(delta),
            Ordering::Relaxed,
        );
    }

    /// Current value of this shard's gauge.
    pub fn gauge(&self, g: Gauge) -> u64 {
        self.gauges[g as usize].load(Ordering::Relaxed)
    }
}

/// Process-wide figures kept off the workers: reloads and the config generation.
#[derive(Debug, Default)]
pub struct Process {
    /// Reloads that took effect.
    pub reloads_ok: AtomicU64,
    /// Reloads refused (the running config kept serving).
    pub reloads_failed: AtomicU64,
    /// The config generation in force (0 at start, one more per reload).
    pub generation: AtomicU64,
}

/// Connection counts in nginx's stub_status terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connections {
    /// Open client connections.
    pub active: u64,
    /// Reading a request head.
    pub reading: u64,
    /// Working on a request.
    pub writing: u64,
    /// Idle keep-alive connections.
    pub waiting: u64,
}

/// All shards of the process; cloned handles share them.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    shards: Arc<Mutex<Vec<Arc<Shard>>>>,
    /// Reloads and the config generation.
    pub process: Arc<Process>,
    /// Per-route figures.
    pub routes: Arc<RouteRegistry>,
    /// Per-listener figures.
    pub listeners: Arc<super::listeners::ListenerRegistry>,
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

    /// Client connections by state, summed over the workers.
    pub fn connections(&self) -> Connections {
        let shards = self.shards.lock().unwrap();
        let sum = |g| shards.iter().map(|s| s.gauge(g)).sum::<u64>();
        let (active, reading, writing) =
            (sum(Gauge::Open), sum(Gauge::Reading), sum(Gauge::Writing));
        Connections {
            active,
            reading,
            writing,
            waiting: active.saturating_sub(reading + writing),
        }
    }

    /// Every worker's request durations, summed.
    pub fn durations(&self) -> Totals {
        let mut t = Totals::default();
        for s in self.shards.lock().unwrap().iter() {
            t.add(&s.durations);
        }
        t
    }

    /// Prometheus text exposition of every counter, the connection gauges, the request
    /// duration histogram and the process figures, each family opened by its HELP and TYPE.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in Counter::iter() {
            family(&mut out, c.name(), Type::Counter, c.help());
            let _ = writeln!(out, "{} {}", c.name(), self.total(c));
        }
        let c = self.connections();
        let help = "Open client connections by state (stub_status's reading, writing, waiting).";
        family(&mut out, "slipstream_connections", Type::Gauge, help);
        for (state, n) in [
            ("reading", c.reading),
            ("writing", c.writing),
            ("waiting", c.waiting),
        ] {
            let _ = writeln!(out, "slipstream_connections{{state=\"{state}\"}} {n}");
        }
        let name = "slipstream_request_duration_seconds";
        let help = "Time from a request's head to its response's end, every request.";
        family(&mut out, name, Type::Histogram, help);
        self.durations().render(&mut out, name, "");
        let p = &self.process;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let name = "slipstream_config_reloads_total";
        let help = "Config reloads, by result (failed: refused, the running config kept serving).";
        family(&mut out, name, Type::Counter, help);
        let _ = writeln!(
            out,
            "{name}{{result=\"ok\"}} {}\n{name}{{result=\"failed\"}} {}",
            load(&p.reloads_ok),
            load(&p.reloads_failed),
        );
        let name = "slipstream_config_generation";
        let help = "The config generation in force (0 at start, one more per reload).";
        family(&mut out, name, Type::Gauge, help);
        let _ = writeln!(out, "{name} {}", load(&p.generation));
        self.routes.render(&mut out);
        self.listeners.render(&mut out);
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
