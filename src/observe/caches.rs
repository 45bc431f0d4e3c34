//! The response caches' figures in the Prometheus exposition, per zone: answers by cache
//! status, stores, evictions, lock waits, bytes and keys held.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::exposition::{escape_label, family, Type};
use crate::cache::zone::{Zone, ZoneStats};

/// Reads one of a zone's counters.
type Read = fn(&ZoneStats) -> &AtomicU64;

/// The counters besides the answers by status: name, help, which.
const COUNTERS: [(&str, &str, Read); 7] = [
    ("slipstream_cache_stored_total", "Responses stored.", |s| {
        &s.stored
    }),
    (
        "slipstream_cache_not_stored_total",
        "Fetched responses the RFC or the route kept out of the cache.",
        |s| &s.not_stored,
    ),
    (
        "slipstream_cache_too_large_total",
        "Fetched responses larger than max_object, passed through.",
        |s| &s.too_large,
    ),
    (
        "slipstream_cache_evictions_total",
        "Entries evicted for room.",
        |s| &*s.evictions,
    ),
    (
        "slipstream_cache_purged_total",
        "Entries removed by purges and unsafe methods.",
        |s| &s.purged,
    ),
    (
        "slipstream_cache_lock_waits_total",
        "Misses that waited for another request's fetch of their key.",
        |s| &s.lock_waits,
    ),
    (
        "slipstream_cache_lock_timeouts_total",
        "Waits that ended at lock_timeout.",
        |s| &s.lock_timeouts,
    ),
];

/// The zones' figures: answers by cache status, stores, evictions, lock waits, bytes held.
pub fn render(zones: &[Arc<Zone>], out: &mut String) {
    if zones.is_empty() {
        return;
    }
    let name = "slipstream_cache_responses_total";
    let help = "Requests answered on cached routes, by cache status ($upstream_cache_status).";
    family(out, name, Type::Counter, help);
    for z in zones {
        let (s, zone) = (&z.stats, escape_label(&z.name));
        let by_status = [
            ("HIT", &s.hit),
            ("MISS", &s.miss),
            ("EXPIRED", &s.expired),
            ("STALE", &s.stale),
            ("UPDATING", &s.updating),
            ("REVALIDATED", &s.revalidated),
            ("BYPASS", &s.bypass),
        ];
        for (status, n) in by_status {
            let n = n.load(Relaxed);
            let _ = writeln!(out, "{name}{{zone=\"{zone}\",status=\"{status}\"}} {n}");
        }
    }
    for (name, help, read) in COUNTERS {
        family(out, name, Type::Counter, help);
        for z in zones {
            let (zone, n) = (escape_label(&z.name), read(&z.stats).load(Relaxed));
            let _ = writeln!(out, "{name}{{zone=\"{zone}\"}} {n}");
        }
    }
    let sizes: Vec<_> = zones.iter().map(|z| z.size()).collect();
    let gauges = [
        (
            "slipstream_cache_bytes",
            "Bytes the zone's memory tier holds.",
            0,
        ),
        ("slipstream_cache_entries", "Keys the zone holds.", 1),
    ];
    for (name, help, which) in gauges {
        family(out, name, Type::Gauge, help);
        for (z, &((bytes, entries), _)) in zones.iter().zip(&sizes) {
            let n = if which == 0 { bytes } else { entries };
            let _ = writeln!(out, "{name}{{zone=\"{}\"}} {}", escape_label(&z.name), n);
        }
    }
    if sizes.iter().all(|(_, disk)| disk.is_none()) {
        return;
    }
    let disk_gauges = [
        (
            "slipstream_cache_disk_bytes",
            "Bytes the zone's disk tier holds (bodies, heads and metadata; counted in KiB).",
            0,
        ),
        (
            "slipstream_cache_disk_entries",
            "Keys the zone's disk tier holds.",
            1,
        ),
    ];
    for (name, help, which) in disk_gauges {
        family(out, name, Type::Gauge, help);
        for (z, (_, disk)) in zones.iter().zip(&sizes) {
            let Some((bytes, entries)) = disk else {
                continue;
            };
            let n = if which == 0 { bytes } else { entries };
            let _ = writeln!(out, "{name}{{zone=\"{}\"}} {}", escape_label(&z.name), n);
        }
    }
}
