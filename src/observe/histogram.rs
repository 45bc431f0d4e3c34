//! Fixed-bucket latency histograms, one writer each (a worker), summed by the admin thread at
//! scrape time. Recording is a bucket search over a dozen bounds and three relaxed stores: no
//! locked instruction, no allocation.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in microseconds (Prometheus `le`, in seconds, is derived).
pub const BOUNDS_MICROS: [u64; 12] = [
    1_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// The `le` labels of [`BOUNDS_MICROS`], in seconds.
const BOUNDS_LABELS: [&str; 12] = [
    "0.001", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
];

/// One writer's histogram: counts per bucket (not cumulative), the count and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_MICROS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// Adds `n` to a single-writer counter: a load and a store, no locked instruction.
#[inline]
fn add(cell: &AtomicU64, n: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

impl Histogram {
    /// Records one observation. Only the owning thread calls this.
    #[inline]
    pub fn observe(&self, micros: u64) {
        if let Some(i) = BOUNDS_MICROS.iter().position(|b| micros <= *b) {
            add(&self.buckets[i], 1);
        }
        add(&self.count, 1);
        add(&self.sum_micros, micros);
    }

    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The sum of several writers' histograms, as read at scrape time.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Observations per bucket (not cumulative).
    pub buckets: [u64; BOUNDS_MICROS.len()],
    /// All observations, the last (`+Inf`) bucket included.
    pub count: u64,
    /// Sum of the observations, in microseconds.
    pub sum_micros: u64,
}

impl Totals {
    /// Adds one writer's histogram.
    pub fn add(&mut self, h: &Histogram) {
        for (t, b) in self.buckets.iter_mut().zip(&h.buckets) {
            *t += b.load(Ordering::Relaxed);
        }
        self.count += h.count.load(Ordering::Relaxed);
        self.sum_micros += h.sum_micros.load(Ordering::Relaxed);
    }

    /// Writes the `_bucket`, `_sum` and `_count` lines of `name` with `labels` (may be empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, le) in self.buckets.iter().zip(BOUNDS_LABELS) {
            cumulative += b;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.count;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_counts_all() {
        let h = Histogram::default();
        for us in [500, 1_000, 7_000, 20_000_000] {
            h.observe(us);
        }
        let mut t = Totals::default();
        t.add(&h);
        let mut out = String::new();
        t.render(&mut out, "x_seconds", "a=\"b\"");
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"0.001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"0.01\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"10\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{a=\"b\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{a=\"b\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_sum{a=\"b\"} 20.0085\n"), "{out}");
    }
}
