//! Per-server figures for `/metrics`: requests, in flight, failures by kind, ejections. Each
//! worker owns one [`ServerStats`] per server it balances over and is its only writer (relaxed
//! atomics, no contention); the admin thread sums the workers' entries. The registry is touched
//! only when a worker builds or updates its server table, never per request.

use crate::net::Address;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::Fleet;
use crate::config::Config;
use crate::error::Kind;
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

/// Appends the per-server lines to a Prometheus exposition: state, requests, in flight,
/// failures by kind, ejections and active-check results, by group and server.
pub fn render(fleet: &Fleet, config: &Config, out: &mut String) {
    fleet.pools.render(out);
    let table = fleet.table();
    let checks = fleet
        .checks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let _ = writeln!(out, "# TYPE slipstream_upstream_server_state gauge");
    fleet.stats.for_each(|(group, addr), workers| {
        let labels = format!("group=\"{group}\",server=\"{addr}\"");
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
        for s in ["up", "down", "ejected", "draining", "removed"] {
            let v = u8::from(s == state);
            let _ = writeln!(
                out,
                "slipstream_upstream_server_state{{{labels},state=\"{s}\"}} {v}"
            );
        }
        let requests = sum(&|s| s.requests.load(Ordering::Relaxed));
        let ejections = sum(&|s| s.ejections.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "slipstream_upstream_server_requests_total{{{labels}}} {requests}"
        );
        let _ = writeln!(
            out,
            "slipstream_upstream_server_in_flight{{{labels}}} {in_flight}"
        );
        let _ = writeln!(
            out,
            "slipstream_upstream_server_ejections_total{{{labels}}} {ejections}"
        );
        render_connections(out, &labels, workers);
        for f in <Failure as strum::IntoEnumIterator>::iter() {
            let n = sum(&|s| s.failures[f as usize].load(Ordering::Relaxed));
            let kind = f.label();
            let _ = writeln!(
                out,
                "slipstream_upstream_server_failures_total{{{labels},kind=\"{kind}\"}} {n}"
            );
        }
        if let Some(c) = checks.get(&(group.clone(), addr.clone())) {
            let ok = u8::from(c.last_ok);
            let _ = writeln!(out, "slipstream_upstream_server_check_ok{{{labels}}} {ok}");
            let _ = writeln!(
                out,
                "slipstream_upstream_server_checks_total{{{labels}}} {}",
                c.checks
            );
            let _ = writeln!(
                out,
                "slipstream_upstream_server_check_failures_total{{{labels}}} {}",
                c.failures
            );
        }
    });
}

/// Connects, reuse, connect errors by errno, pool idle and the response-time histogram of one
/// server.
fn render_connections(out: &mut String, labels: &str, workers: &[(usize, Arc<ServerStats>)]) {
    let sum = |f: &dyn Fn(&ServerStats) -> u64| -> u64 { workers.iter().map(|(_, s)| f(s)).sum() };
    let connects = sum(&|s| s.connects.load(Ordering::Relaxed));
    let reused = sum(&|s| s.reused.load(Ordering::Relaxed));
    let _ = writeln!(
        out,
        "slipstream_upstream_server_connects_total{{{labels}}} {connects}"
    );
    let _ = writeln!(
        out,
        "slipstream_upstream_server_reused_total{{{labels}}} {reused}"
    );
    let ratio = if connects + reused == 0 {
        0.0
    } else {
        reused as f64 / (connects + reused) as f64
    };
    let _ = writeln!(
        out,
        "slipstream_upstream_server_reuse_ratio{{{labels}}} {ratio}"
    );
    for e in <ConnectErrno as strum::IntoEnumIterator>::iter() {
        let n = sum(&|s| s.connect_errors[e as usize].load(Ordering::Relaxed));
        let errno = e.label();
        let _ = writeln!(
            out,
            "slipstream_upstream_server_connect_errors_total{{{labels},errno=\"{errno}\"}} {n}"
        );
    }
    let mut t = Totals::default();
    for (_, s) in workers {
        t.add(&s.response_time);
    }
    t.render(out, "slipstream_upstream_server_response_seconds", labels);
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
        let _ = writeln!(
            out,
            "# TYPE slipstream_upstream_pool_idle_connections gauge"
        );
        for (addr, list) in entries.iter() {
            let n: u64 = list.iter().map(|(_, g)| g.load(Ordering::Relaxed)).sum();
            let _ = writeln!(
                out,
                "slipstream_upstream_pool_idle_connections{{server=\"{addr}\"}} {n}"
            );
        }
    }
}
