//! Per-listener figures: connections accepted, open, and the times accepting paused at the
//! connection limit, labelled by the listener's bound address. Each worker owns one entry per
//! listener (single writer, relaxed atomics), taken when the worker starts; the admin thread
//! sums the workers.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::exposition::{escape_label, family, Type};

/// One worker's figures for one listener.
#[derive(Debug, Default)]
pub struct ListenerStats {
    accepted: AtomicU64,
    closed: AtomicU64,
    paused: AtomicU64,
}

/// Adds one to a counter only this worker writes.
#[inline]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl ListenerStats {
    /// A connection was accepted.
    #[inline]
    pub fn accepted(&self) {
        bump(&self.accepted);
    }

    /// A connection accepted here has ended.
    #[inline]
    pub fn closed(&self) {
        bump(&self.closed);
    }

    /// Accepting paused at the connection limit.
    pub fn paused(&self) {
        bump(&self.paused);
    }
}

/// One counter summed over a listener's workers.
fn sum(list: &[Arc<ListenerStats>], f: fn(&ListenerStats) -> &AtomicU64) -> u64 {
    list.iter().map(|s| f(s).load(Ordering::Relaxed)).sum()
}

/// A per-listener family: name, type, help and its value from the listener's workers.
type Family = (
    &'static str,
    Type,
    &'static str,
    fn(&[Arc<ListenerStats>]) -> u64,
);

/// Every worker's [`ListenerStats`], by listener address.
#[derive(Debug, Default)]
pub struct ListenerRegistry {
    entries: Mutex<BTreeMap<String, Vec<Arc<ListenerStats>>>>,
}

impl ListenerRegistry {
    /// A new entry for one worker's socket of the listener `label` (taken at start).
    pub fn for_worker(&self, label: &str) -> Arc<ListenerStats> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let stats = Arc::new(ListenerStats::default());
        entries
            .entry(label.to_string())
            .or_default()
            .push(stats.clone());
        stats
    }

    /// Appends the per-listener families to a Prometheus exposition.
    pub fn render(&self, out: &mut String) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.is_empty() {
            return;
        }
        let families: [Family; 3] = [
            (
                "slipstream_listener_connections_accepted_total",
                Type::Counter,
                "Connections accepted, by listener.",
                |l| sum(l, |s| &s.accepted),
            ),
            (
                "slipstream_listener_connections_open",
                Type::Gauge,
                "Client connections open, by listener.",
                // Closed first: a connection accepted meanwhile is not missed.
                |l| {
                    let closed = sum(l, |s| &s.closed);
                    sum(l, |s| &s.accepted).saturating_sub(closed)
                },
            ),
            (
                "slipstream_listener_accept_paused_total",
                Type::Counter,
                "Times a worker stopped accepting on a listener at its connection limit.",
                |l| sum(l, |s| &s.paused),
            ),
        ];
        for (name, kind, help, value) in families {
            family(out, name, kind, help);
            for (label, list) in entries.iter() {
                let label = escape_label(label);
                let _ = writeln!(out, "{name}{{listener=\"{label}\"}} {}", value(list));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_figures_are_summed_by_listener() {
        let registry = ListenerRegistry::default();
        let (a0, a1) = (
            registry.for_worker("127.0.0.1:80"),
            registry.for_worker("127.0.0.1:80"),
        );
        let b = registry.for_worker("[::1]:443");
        a0.accepted();
        a1.accepted();
        a1.accepted();
        a1.closed();
        a0.paused();
        b.accepted();
        let mut out = String::new();
        registry.render(&mut out);
        for line in [
            "slipstream_listener_connections_accepted_total{listener=\"127.0.0.1:80\"} 3",
            "slipstream_listener_connections_open{listener=\"127.0.0.1:80\"} 2",
            "slipstream_listener_accept_paused_total{listener=\"127.0.0.1:80\"} 1",
            "slipstream_listener_connections_open{listener=\"[::1]:443\"} 1",
            "slipstream_listener_accept_paused_total{listener=\"[::1]:443\"} 0",
        ] {
            assert!(out.contains(line), "{line} not in {out}");
        }
    }
}
