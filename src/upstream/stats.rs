//! Per-server figures for `/metrics`: requests, in flight, failures by kind, ejections. Each
//! worker owns one [`ServerStats`] per server it balances over and is its only writer (relaxed
//! atomics, no contention); the admin thread sums the workers' entries. The registry is touched
//! only when a worker builds or updates its server table, never per request.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Kind;

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

/// One worker's figures for one server.
#[derive(Debug, Default)]
pub struct ServerStats {
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
pub type ServerKey = (String, SocketAddr);

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
    pub fn get(&self, worker: usize, group: &str, addr: SocketAddr) -> Arc<ServerStats> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = entries.entry((group.to_string(), addr)).or_default();
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
