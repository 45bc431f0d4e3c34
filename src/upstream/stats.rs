//! Per-server figures for `/metrics`: requests, in flight, failures by kind, ejections. Each
//! worker owns one [`ServerStats`] per server it balances over and is its only writer (relaxed
//! atomics, no contention); the admin thread sums the workers' entries. The registry is touched
//! only when a worker builds or updates its server table, never per request.

use crate::net::Address;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::fleet::CheckRecord;
use super::Fleet;
use crate::config::Config;
use crate::error::Kind;
use crate::observe::exposition::{escape_label, family, Type};
use crate::observe::histogram::{Histogram, Totals};

/// Why a request on a server failed, as the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount, strum::EnumIter)]
pub enum Failure {
    /// The connection was refused.
    Refused,
    /// The connection was closed or reset, or could not be opened for another reason.
    Reset,
    /// Connect, read or send timed out.
    Timeout,
    /// No local port was free (EADDRNOTAVAIL).
    AddrNotAvail,
    /// The response was not valid HTTP.
    BadResponse,
    /// A 5xx status (counted only with `fail_on_5xx`).
    Status5xx,
}

impl Failure {
    /// The failure a request-path error stands for, if it is the server's.
    pub fn of(kind: Kind) -> Option<Failure> {
        Some(match kind {
            Kind::ConnectRefused => Failure::Refused,
            Kind::ConnectFailed | Kind::UpstreamClosed | Kind::UpstreamFailed => Failure::Reset,
            Kind::ConnectTimeout | Kind::UpstreamTimeout => Failure::Timeout,
            Kind::PortsExhausted => Failure::AddrNotAvail,
            Kind::BadResponse(_) | Kind::UnexpectedUpgrade => Failure::BadResponse,
            _ => return None,
        })
    }

    /// The label value in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Refused => "refused",
            Failure::Reset => "reset",
            Failure::Timeout => "timeout",
            Failure::AddrNotAvail => "eaddrnotavail",
            Failure::BadResponse => "bad_response",
            Failure::Status5xx => "5xx",
        }
    }
}

/// Why a connect failed, by errno, as the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumCount, strum::EnumIter)]
pub enum ConnectErrno {
    /// Nothing listens (or a unix socket path without a listener).
    Econnrefused,
    /// No answer within `connect_timeout`.
    Etimedout,
    /// No local port free: ephemeral ports exhausted.
    Eaddrnotavail,
    /// A unix socket path that does not exist.
    Enoent,
    /// No route to the host or its network.
    Ehostunreach,
    /// Out of file descriptors.
    Emfile,
    /// Anything else.
    Other,
}

impl ConnectErrno {
    /// The errno of a failed connect (`None`: it timed out).
    pub fn of(e: Option<&std::io::Error>) -> ConnectErrno {
        let Some(e) = e else {
            return ConnectErrno::Etimedout;
        };
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => ConnectErrno::Econnrefused,
            Some(libc::ETIMEDOUT) => ConnectErrno::Etimedout,
            Some(libc::EADDRNOTAVAIL) => ConnectErrno::Eaddrnotavail,
            Some(libc::ENOENT) => ConnectErrno::Enoent,
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH) => ConnectErrno::Ehostunreach,
            Some(libc::EMFILE | libc::ENFILE) => ConnectErrno::Emfile,
            _ => ConnectErrno::Other,
        }
    }

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            ConnectErrno::Econnrefused => "ECONNREFUSED",
            ConnectErrno::Etimedout => "ETIMEDOUT",
            ConnectErrno::Eaddrnotavail => "EADDRNOTAVAIL",
            ConnectErrno::Enoent => "ENOENT",
            ConnectErrno::Ehostunreach => "EHOSTUNREACH",
            ConnectErrno::Emfile => "EMFILE",
            ConnectErrno::Other => "other",
        }
    }
}

/// One worker's figures for one server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// New connections opened.
    pub connects: AtomicU64,
    /// Requests sent on a pooled connection.
    pub reused: AtomicU64,
    /// Failed connects, by [`ConnectErrno`] index.
    pub connect_errors: [AtomicU64; <ConnectErrno as strum::EnumCount>::COUNT],
    /// Time to each response's end (successful responses).
    pub response_time: Histogram,
    /// Requests sent (tries, retries included).
    pub requests: AtomicU64,
    /// Requests now in flight.
    pub in_flight: AtomicU64,
    /// Failures, by [`Failure`] index.
    pub failures: [AtomicU64; <Failure as strum::EnumCount>::COUNT],
    /// The server's answers by status class, 1xx to 5xx (those an error page replaced too).
    pub classes: [AtomicU64; 5],
    /// Times this worker ejected the server.
    pub ejections: AtomicU64,
    /// Whether this worker has the server ejected now.
    pub ejected: AtomicBool,
}

impl ServerStats {
    /// Adds one to a counter (single writer: a load and a store, no locked instruction).
    pub fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Counts an answer of the server by its status class.
    #[inline]
    pub fn answered(&self, status: u16) {
        Self::bump(&self.classes[usize::from(status / 100).clamp(1, 5) - 1]);
    }

    /// Sets the in-flight gauge.
    pub fn set_in_flight(&self, n: u32) {
        self.in_flight.store(u64::from(n), Ordering::Relaxed);
    }
}

/// The key of a server's figures: group name and address.
pub type ServerKey = (String, Address);

/// Each worker's figures for one server, by worker number.
pub type PerWorker = Vec<(usize, Arc<ServerStats>)>;

/// Every worker's [`ServerStats`], by server.
#[derive(Debug, Default)]
pub struct StatsRegistry {
    entries: Mutex<BTreeMap<ServerKey, PerWorker>>,
}

impl StatsRegistry {
    /// The figures of `worker` for a server, created on first use and kept across reloads so
    /// the counters do not restart.
    pub fn get(&self, worker: usize, group: &str, addr: &Address) -> Arc<ServerStats> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = entries
            .entry((group.to_string(), addr.clone()))
            .or_default();
        if let Some((_, s)) = list.iter().find(|(w, _)| *w == worker) {
            return s.clone();
        }
        let s = Arc::new(ServerStats::default());
        list.push((worker, s.clone()));
        s
    }

    /// Calls `f` with each server's key and its workers' figures.
    pub fn for_each(&self, mut f: impl FnMut(&ServerKey, &[(usize, Arc<ServerStats>)])) {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, list) in entries.iter() {
            f(key, list);
        }
    }
}

/// One server's figures, summed over the workers at scrape time.
struct Row {
    /// `group="...",server="..."`, escaped.
    labels: String,
    state: &'static str,
    requests: u64,
    in_flight: u64,
    ejections: u64,
    connects: u64,
    reused: u64,
    connect_errors: Vec<u64>,
    failures: Vec<u64>,
    classes: [u64; 5],
    response_time: Totals,
    check: Option<CheckRecord>,
}

/// The states a server's `slipstream_upstream_server_state` has a sample for.
const STATES: [&str; 5] = ["up", "down", "ejected", "draining", "removed"];

/// A family with one sample per server: name, type, help and the value.
type PerServer = (&'static str, Type, &'static str, fn(&Row) -> f64);

/// The families with one sample per server and no further label.
const PER_SERVER: [PerServer; 6] = [
    (
        "slipstream_upstream_server_requests_total",
        Type::Counter,
        "Requests sent to a server (tries, retries included).",
        |r| r.requests as f64,
    ),
    (
        "slipstream_upstream_server_in_flight",
        Type::Gauge,
        "Requests in flight on a server now.",
        |r| r.in_flight as f64,
    ),
    (
        "slipstream_upstream_server_ejections_total",
        Type::Counter,
        "Times a worker ejected a server after failures (passive health).",
        |r| r.ejections as f64,
    ),
    (
        "slipstream_upstream_server_connects_total",
        Type::Counter,
        "New connections opened to a server.",
        |r| r.connects as f64,
    ),
    (
        "slipstream_upstream_server_reused_total",
        Type::Counter,
        "Requests sent to a server on a pooled keep-alive connection.",
        |r| r.reused as f64,
    ),
    (
        "slipstream_upstream_server_reuse_ratio",
        Type::Gauge,
        "Share of a server's requests sent on a pooled connection: reused / (connects + reused).",
        |r| match r.connects + r.reused {
            0 => 0.0,
            all => r.reused as f64 / all as f64,
        },
    ),
];

/// Appends the per-server families to a Prometheus exposition: state, requests, in flight,
/// connects and reuse, connect errors by errno, response times, failures by kind, ejections
/// and active-check results, by group and server. Each family is written whole, server by
/// server, before the next one starts.
pub fn render(fleet: &Fleet, config: &Config, out: &mut String) {
    fleet.pools.render(out);
    let rows = rows(fleet, config);
    let name = "slipstream_upstream_server_state";
    let help = "A server's state: 1 for the one it is in (up, down by active checks, ejected by \
                a worker's passive health, draining after removal, removed), 0 for the others.";
    family(out, name, Type::Gauge, help);
    for r in &rows {
        for s in STATES {
            let v = u8::from(s == r.state);
            let _ = writeln!(out, "{name}{{{},state=\"{s}\"}} {v}", r.labels);
        }
    }
    for (name, kind, help, value) in PER_SERVER {
        family(out, name, kind, help);
        for r in &rows {
            let _ = writeln!(out, "{name}{{{}}} {}", r.labels, value(r));
        }
    }
    render_by_label(out, &rows);
    let name = "slipstream_upstream_server_response_seconds";
    let help = "Time from sending a request to a server to its response's end (successful \
                responses).";
    family(out, name, Type::Histogram, help);
    for r in &rows {
        r.response_time.render(out, name, &r.labels);
    }
    render_checks(out, &rows);
}

/// The families with a second label: connect errors by errno, failures by kind, answers by
/// status class.
fn render_by_label(out: &mut String, rows: &[Row]) {
    let name = "slipstream_upstream_server_responses_total";
    let help = "A server's answers by status class (a 5xx is also a failure with fail_on_5xx).";
    family(out, name, Type::Counter, help);
    for r in rows {
        for (i, n) in r.classes.iter().enumerate() {
            let _ = writeln!(out, "{name}{{{},class=\"{}xx\"}} {n}", r.labels, i + 1);
        }
    }
    let name = "slipstream_upstream_server_connect_errors_total";
    let help = "Failed connects to a server, by errno.";
    family(out, name, Type::Counter, help);
    for r in rows {
        for e in <ConnectErrno as strum::IntoEnumIterator>::iter() {
            let (errno, n) = (e.label(), r.connect_errors[e as usize]);
            let _ = writeln!(out, "{name}{{{},errno=\"{errno}\"}} {n}", r.labels);
        }
    }
    let name = "slipstream_upstream_server_failures_total";
    let help = "Failed requests on a server, by kind (5xx counted only with fail_on_5xx).";
    family(out, name, Type::Counter, help);
    for r in rows {
        for f in <Failure as strum::IntoEnumIterator>::iter() {
            let (kind, n) = (f.label(), r.failures[f as usize]);
            let _ = writeln!(out, "{name}{{{},kind=\"{kind}\"}} {n}", r.labels);
        }
    }
}

/// An active-check family: name, type, help and the value.
type Check = (&'static str, Type, &'static str, fn(&CheckRecord) -> u64);

/// The active-check families, for the servers a check has run on.
fn render_checks(out: &mut String, rows: &[Row]) {
    let checked: Vec<(&Row, &CheckRecord)> = rows
        .iter()
        .filter_map(|r| r.check.as_ref().map(|c| (r, c)))
        .collect();
    if checked.is_empty() {
        return;
    }
    let families: [Check; 3] = [
        (
            "slipstream_upstream_server_check_ok",
            Type::Gauge,
            "Whether a server's last active health check passed (1) or failed (0).",
            |c| u64::from(c.last_ok),
        ),
        (
            "slipstream_upstream_server_checks_total",
            Type::Counter,
            "Active health checks run on a server.",
            |c| c.checks,
        ),
        (
            "slipstream_upstream_server_check_failures_total",
            Type::Counter,
            "Active health checks of a server that failed.",
            |c| c.failures,
        ),
    ];
    for (name, kind, help, value) in families {
        family(out, name, kind, help);
        for (r, c) in &checked {
            let _ = writeln!(out, "{name}{{{}}} {}", r.labels, value(c));
        }
    }
}

/// Every server's figures, summed over its workers.
fn rows(fleet: &Fleet, config: &Config) -> Vec<Row> {
    let table = fleet.table();
    let checks = fleet
        .checks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut rows = Vec::new();
    fleet.stats.for_each(|(group, addr), workers| {
        let sum =
            |f: &dyn Fn(&ServerStats) -> u64| -> u64 { workers.iter().map(|(_, s)| f(s)).sum() };
        let in_flight = sum(&|s| s.in_flight.load(Ordering::Relaxed));
        let member = config
            .upstreams
            .iter()
            .position(|g| g.name == *group)
            .and_then(|i| table.groups.get(i))
            .and_then(|members| members.iter().find(|m| m.addr == *addr));
        let ejected = workers
            .iter()
            .any(|(_, s)| s.ejected.load(Ordering::Relaxed));
        let state = match member {
            None if in_flight > 0 => "draining",
            None => "removed",
            Some(m) if !m.up => "down",
            Some(_) if ejected => "ejected",
            Some(_) => "up",
        };
        let mut response_time = Totals::default();
        for (_, s) in workers {
            response_time.add(&s.response_time);
        }
        rows.push(Row {
            labels: format!(
                "group=\"{}\",server=\"{}\"",
                escape_label(group),
                escape_label(&addr.to_string())
            ),
            state,
            requests: sum(&|s| s.requests.load(Ordering::Relaxed)),
            in_flight,
            ejections: sum(&|s| s.ejections.load(Ordering::Relaxed)),
            connects: sum(&|s| s.connects.load(Ordering::Relaxed)),
            reused: sum(&|s| s.reused.load(Ordering::Relaxed)),
            connect_errors: (0..<ConnectErrno as strum::EnumCount>::COUNT)
                .map(|i| sum(&|s| s.connect_errors[i].load(Ordering::Relaxed)))
                .collect(),
            failures: (0..<Failure as strum::EnumCount>::COUNT)
                .map(|i| sum(&|s| s.failures[i].load(Ordering::Relaxed)))
                .collect(),
            classes: std::array::from_fn(|i| sum(&|s| s.classes[i].load(Ordering::Relaxed))),
            response_time,
            check: checks.get(&(group.clone(), addr.clone())).cloned(),
        });
    });
    rows
}

/// Each worker's idle pooled connections per server address, published once a second by the
/// worker's housekeeping (a gauge per worker and address; the registry lock is taken only when
/// a worker first pools a connection to an address).
#[derive(Debug, Default)]
pub struct PoolRegistry {
    entries: Mutex<BTreeMap<Address, Vec<WorkerGauge>>>,
}

/// A worker's gauge.
type WorkerGauge = (usize, Arc<AtomicU64>);

impl PoolRegistry {
    /// The gauge of `worker`'s idle connections to `addr`.
    pub fn gauge(&self, worker: usize, addr: &Address) -> Arc<AtomicU64> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = entries.entry(addr.clone()).or_default();
        if let Some((_, g)) = list.iter().find(|(w, _)| *w == worker) {
            return g.clone();
        }
        let g = Arc::new(AtomicU64::new(0));
        list.push((worker, g.clone()));
        g
    }

    /// Appends `slipstream_upstream_pool_idle_connections` by server.
    pub fn render(&self, out: &mut String) {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = "slipstream_upstream_pool_idle_connections";
        let help = "Idle pooled connections to a server address, over the workers.";
        family(out, name, Type::Gauge, help);
        for (addr, list) in entries.iter() {
            let n: u64 = list.iter().map(|(_, g)| g.load(Ordering::Relaxed)).sum();
            let server = escape_label(&addr.to_string());
            let _ = writeln!(out, "{name}{{server=\"{server}\"}} {n}");
        }
    }
}
