//! The cache's side of the admin listener: purges (`POST /cache/purge?zone=Z&key=K` removes
//! one key with all its variants, `&prefix=P` every key that starts with P, without `zone`
//! every zone) and the zones' figures in the Prometheus exposition.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::zone::{Zone, ZoneStats};
use crate::observe::exposition::{escape_label, family, Type};

/// What a purge asks, read from its query.
#[derive(Debug, PartialEq, Eq)]
pub struct Purge {
    /// The zone (every zone when `None`).
    pub zone: Option<String>,
    /// One key, or every key with this prefix.
    pub what: Target,
}

/// A purge's target.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// This key.
    Key(String),
    /// Keys starting with this.
    Prefix(String),
}

/// Reads a purge's query (`zone=...&key=...` or `prefix=...`, percent-encoded).
pub fn parse_purge(query: &str) -> Result<Purge, &'static str> {
    let mut zone = None;
    let mut what = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value).ok_or("a value is not valid percent-encoded UTF-8")?;
        match name {
            "zone" => zone = Some(value),
            "key" if what.is_none() => what = Some(Target::Key(value)),
            "prefix" if what.is_none() => what = Some(Target::Prefix(value)),
            "key" | "prefix" => return Err("one of key or prefix"),
            _ => return Err("unknown parameter (zone, key, prefix)"),
        }
    }
    let what = what.ok_or("key=KEY or prefix=PREFIX is required")?;
    Ok(Purge { zone, what })
}

/// Runs a purge over `zones`: how many keys went, or why nothing did.
pub fn purge(zones: &[Arc<Zone>], p: &Purge) -> Result<usize, String> {
    let chosen: Vec<&Arc<Zone>> = zones
        .iter()
        .filter(|z| p.zone.as_ref().is_none_or(|n| *n == z.name))
        .collect();
    if chosen.is_empty() {
        return Err(match &p.zone {
            Some(n) => format!("no cache zone {n:?}"),
            None => "no cache zones".to_string(),
        });
    }
    Ok(chosen
        .iter()
        .map(|z| match &p.what {
            Target::Key(k) => usize::from(z.remove(k)),
            Target::Prefix(prefix) => z.remove_prefix(prefix),
        })
        .sum())
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_queries() {
        let p = parse_purge("zone=main&key=http%3A%2F%2Fa%2Fx%3Fy%3D1").unwrap();
        assert_eq!(p.zone.as_deref(), Some("main"));
        assert_eq!(p.what, Target::Key("http://a/x?y=1".into()));
        let p = parse_purge("prefix=http://a/img/").unwrap();
        assert_eq!(
            (p.zone, p.what),
            (None, Target::Prefix("http://a/img/".into()))
        );
        assert!(parse_purge("zone=main").is_err());
        assert!(parse_purge("key=a&prefix=b").is_err());
        assert!(parse_purge("key=%zz").is_err());
        assert!(parse_purge("what=1&key=a").is_err());
    }
}
