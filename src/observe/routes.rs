//! Per-route figures: responses by status class and a request-duration histogram, labelled by
//! site and route. Each worker owns its entries (single writer, relaxed atomics); entries are
//! kept by label across reloads, so counters do not restart; the admin thread sums the workers.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::exposition::{escape_label, family, Type};
use super::histogram::{Histogram, Totals};

/// One worker's figures for one route.
#[derive(Debug, Default)]
pub struct RouteStats {
    /// Responses by status class: 1xx to 5xx.
    classes: [AtomicU64; 5],
    /// Request durations.
    durations: Histogram,
}

impl RouteStats {
    /// Counts a finished request: its status (499 counts as 4xx) and duration.
    #[inline]
    pub fn finished(&self, status: u16, micros: u64) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        let c = &self.classes[class];
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.durations.observe(micros);
    }
}

/// The (site, route) label of a slot.
pub type RouteLabel = (String, String);

/// Each worker's figures for one label, by worker number.
type PerWorker = Vec<(usize, Arc<RouteStats>)>;

/// Every worker's [`RouteStats`], by label.
#[derive(Debug, Default)]
pub struct RouteRegistry {
    entries: Mutex<BTreeMap<RouteLabel, PerWorker>>,
}

impl RouteRegistry {
    /// The figures of `worker` for each label (taken when a worker builds a config snapshot).
    pub fn for_worker(&self, worker: usize, labels: &[RouteLabel]) -> Vec<Arc<RouteStats>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        labels
            .iter()
            .map(|label| {
                let list = entries.entry(label.clone()).or_default();
                if let Some((_, s)) = list.iter().find(|(w, _)| *w == worker) {
                    return s.clone();
                }
                let s = Arc::new(RouteStats::default());
                list.push((worker, s.clone()));
                s
            })
            .collect()
    }

    /// Appends the per-route families to a Prometheus exposition.
    pub fn render(&self, out: &mut String) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let name = "slipstream_route_responses_total";
        let help = "Responses by site, route and status class (499 counts as 4xx).";
        family(out, name, Type::Counter, help);
        for ((site, route), workers) in entries.iter() {
            let labels = labels(site, route);
            for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
                let n: u64 = workers
                    .iter()
                    .map(|(_, s)| s.classes[i].load(Ordering::Relaxed))
                    .sum();
                let _ = writeln!(out, "{name}{{{labels},class=\"{class}\"}} {n}");
            }
        }
        let name = "slipstream_route_request_duration_seconds";
        let help = "Time from a request's head to its response's end, by site and route.";
        family(out, name, Type::Histogram, help);
        for ((site, route), workers) in entries.iter() {
            let mut t = Totals::default();
            for (_, s) in workers {
                t.add(&s.durations);
            }
            t.render(out, name, &labels(site, route));
        }
    }
}

/// `site="...",route="..."`, escaped for the exposition format.
fn labels(site: &str, route: &str) -> String {
    format!(
        "site=\"{}\",route=\"{}\"",
        escape_label(site),
        escape_label(route)
    )
}
