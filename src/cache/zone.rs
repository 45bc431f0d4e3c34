//! A cache zone: the stored responses of one `[cache_zones.NAME]`, shared by every worker.
//!
//! The memory tier is a `moka` cache (chosen over `foyer`, whose disk tier reads and writes
//! whole values and can bring purged entries back after a restart, and over `quick_cache`,
//! which has no idle expiry): TinyLFU admission keeps a scan of once-seen URLs from pushing out
//! the hot set, eviction is by bytes, and an entry unused for `inactive` goes. Lookups are
//! lock-free reads of its concurrent table; a worker that stores takes a short shard lock.
//! The one other lock is the table of fetches in flight, taken only on a miss.
//!
//! Zones outlive a reload: a reload's config that names a zone with the same sizes gets the
//! running zone ([`keeping`]), so a reload keeps the cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::entry::Entry;

/// A zone's sizes, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneSettings {
    /// Bytes the memory tier holds.
    pub memory: u64,
    /// The largest response stored (bigger ones pass through uncached).
    pub max_object: usize,
    /// An entry unused this long is dropped, fresh or not (nginx's `inactive`).
    pub inactive: Duration,
}

/// The responses stored under one key: one per variant its `Vary` selects, newest first.
#[derive(Debug)]
pub struct Variants {
    /// The key's text: a lookup by hash checks it.
    pub key: Box<str>,
    /// The variants.
    pub entries: Vec<Arc<Entry>>,
}

/// Most variants kept under one key (the oldest goes).
const MAX_VARIANTS: usize = 8;

/// A zone's figures, for `/metrics`.
#[derive(Debug, Default)]
pub struct ZoneStats {
    /// Answers by [`crate::cache::CacheStatus`].
    pub hit: AtomicU64,
    /// Misses fetched.
    pub miss: AtomicU64,
    /// Stale responses fetched again.
    pub expired: AtomicU64,
    /// Stale responses served.
    pub stale: AtomicU64,
    /// Stale responses served while another request refreshed them.
    pub updating: AtomicU64,
    /// Stale responses validated by a 304.
    pub revalidated: AtomicU64,
    /// Requests a `bypass` condition sent upstream.
    pub bypass: AtomicU64,
    /// Responses stored.
    pub stored: AtomicU64,
    /// Responses the RFC or the rule kept out.
    pub not_stored: AtomicU64,
    /// Responses larger than `max_object`.
    pub too_large: AtomicU64,
    /// Entries evicted for room.
    pub evictions: Arc<AtomicU64>,
    /// Misses that waited for another request's fetch of their key.
    pub lock_waits: AtomicU64,
    /// Of those, the ones that stopped waiting at `lock_timeout`.
    pub lock_timeouts: AtomicU64,
    /// Entries removed by purges and unsafe methods.
    pub purged: AtomicU64,
}

/// One zone.
pub struct Zone {
    /// Its name in the config.
    pub name: String,
    /// Its sizes.
    pub settings: ZoneSettings,
    store: moka::sync::Cache<u128, Arc<Variants>>,
    /// Fetches in flight, by key hash: later misses of the key wait on them.
    flights: Mutex<HashMap<u128, watch::Receiver<()>>>,
    /// Requests seen per key not yet stored (for `min_uses`).
    uses: moka::sync::Cache<u128, u32>,
    /// Its figures.
    pub stats: ZoneStats,
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Zone({})", self.name)
    }
}

thread_local! {
    /// The zones of the running config while a reload's config is read ([`keeping`]).
    static RUNNING: std::cell::RefCell<Vec<Arc<Zone>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `read` (which reads a config) so that a zone it names with the sizes a zone of
/// `running` has is that zone: a reload keeps the cache.
pub fn keeping<R>(running: &[Arc<Zone>], read: impl FnOnce() -> R) -> R {
    RUNNING.with(|r| *r.borrow_mut() = running.to_vec());
    let result = read();
    RUNNING.with(|r| r.borrow_mut().clear());
    result
}

/// The zone `name` with `settings`: the running config's when a reload reads this config and
/// its sizes are the same ([`keeping`]), else a new, empty one.
pub fn shared(name: &str, settings: ZoneSettings) -> Arc<Zone> {
    let kept = RUNNING.with(|r| {
        r.borrow()
            .iter()
            .find(|z| z.name == name && z.settings == settings)
            .cloned()
    });
    kept.unwrap_or_else(|| Arc::new(Zone::new(name, settings)))
}

/// The hash a key is found by.
pub fn hash_key(key: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(key.as_bytes())
}

impl Zone {
    /// An empty zone.
    pub fn new(name: &str, settings: ZoneSettings) -> Zone {
        let stats = ZoneStats::default();
        let evictions = stats.evictions.clone();
        let store = moka::sync::Cache::builder()
            .max_capacity(settings.memory)
            .weigher(|_k: &u128, v: &Arc<Variants>| {
                let bytes: usize = v.entries.iter().map(|e| e.weight()).sum();
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .time_to_idle(settings.inactive)
            .eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.fetch_add(1, Relaxed);
                }
            })
            .build();
        let uses = moka::sync::Cache::builder()
            .max_capacity(1 << 16)
            .time_to_idle(settings.inactive)
            .build();
        Zone {
            name: name.to_string(),
            settings,
            store,
            flights: Mutex::new(HashMap::new()),
            uses,
            stats,
        }
    }

    /// The stored response for `key` whose `Vary` values the request's fields match.
    pub fn lookup(&self, hash: u128, key: &str, request_fields: &[u8]) -> Option<Arc<Entry>> {
        let variants = self.store.get(&hash)?;
        if &*variants.key != key {
            return None;
        }
        variants
            .entries
            .iter()
            .find(|e| e.matches(request_fields))
            .cloned()
    }

    /// Stores `entry` under its key, replacing the variant it matches.
    pub fn store(&self, hash: u128, entry: Arc<Entry>) {
        let mut entries = vec![entry.clone()];
        if let Some(old) = self.store.get(&hash).filter(|v| v.key == entry.key) {
            let same_variant = |e: &Arc<Entry>| {
                e.vary.len() == entry.vary.len()
                    && e.vary
                        .iter()
                        .all(|(n, v)| entry.vary.iter().any(|(n2, v2)| n == n2 && v == v2))
            };
            entries.extend(
                old.entries
                    .iter()
                    .filter(|e| !same_variant(e))
                    .take(MAX_VARIANTS - 1)
                    .cloned(),
            );
        }
        let key = entry.key.clone();
        self.store.insert(hash, Arc::new(Variants { key, entries }));
        self.stats.stored.fetch_add(1, Relaxed);
    }

    /// Removes every variant of `key`; whether there was one.
    pub fn remove(&self, key: &str) -> bool {
        let hash = hash_key(key);
        let found = self.store.get(&hash).is_some_and(|v| &*v.key == key);
        if found {
            self.store.invalidate(&hash);
            self.stats.purged.fetch_add(1, Relaxed);
        }
        found
    }

    /// Removes every key that starts with `prefix`; how many.
    pub fn remove_prefix(&self, prefix: &str) -> usize {
        let doomed: Vec<u128> = self
            .store
            .iter()
            .filter(|(_, v)| v.key.starts_with(prefix))
            .map(|(k, _)| *k)
            .collect();
        for hash in &doomed {
            self.store.invalidate(hash);
        }
        self.stats.purged.fetch_add(doomed.len() as u64, Relaxed);
        doomed.len()
    }

    /// Counts one more request for a key not stored yet; whether it has now been asked
    /// `min_uses` times.
    pub fn used_enough(&self, hash: u128, min_uses: u32) -> bool {
        if min_uses <= 1 {
            return true;
        }
        let seen = self.uses.get(&hash).unwrap_or(0) + 1;
        self.uses.insert(hash, seen);
        seen >= min_uses
    }

    /// Bytes and entries held.
    pub fn size(&self) -> (u64, u64) {
        self.store.run_pending_tasks();
        (self.store.weighted_size(), self.store.entry_count())
    }

    /// Becomes the one fetch of `hash`, or learns of the fetch already going: its end is
    /// waited for on the receiver (it changes, or closes, when that fetch is done).
    pub fn begin_fetch(self: &Arc<Self>, hash: u128) -> Result<Fetch, watch::Receiver<()>> {
        let mut flights = self
            .flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(rx) = flights.get(&hash) {
            self.stats.lock_waits.fetch_add(1, Relaxed);
            return Err(rx.clone());
        }
        let (tx, rx) = watch::channel(());
        flights.insert(hash, rx);
        Ok(Fetch {
            zone: self.clone(),
            hash,
            _done: tx,
        })
    }

    /// Whether a fetch of `hash` is going.
    pub fn fetching(&self, hash: u128) -> bool {
        let flights = self
            .flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        flights.contains_key(&hash)
    }
}

/// The right to be a key's one fetch; dropped when the fetch is done (stored or not), which
/// wakes the requests waiting for it.
pub struct Fetch {
    zone: Arc<Zone>,
    hash: u128,
    _done: watch::Sender<()>,
}

impl Drop for Fetch {
    fn drop(&mut self) {
        let mut flights = self
            .zone
            .flights
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        flights.remove(&self.hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::entry::{build, response_facts, Ignore, Stored};

    fn settings() -> ZoneSettings {
        ZoneSettings {
            memory: 1 << 20,
            max_object: 1 << 16,
            inactive: Duration::from_secs(600),
        }
    }

    fn entry(key: &str, head: &[u8], request: &[u8]) -> Entry {
        let facts = response_facts(200, head, Ignore::default());
        let s = Stored {
            key,
            request_fields: request,
            request_time: 0,
            response_time: 0,
            lifetime: 60,
            ignore: Ignore::default(),
        };
        build(head, 200, bytes::Bytes::from_static(b"x"), &facts, s)
    }

    #[test]
    fn variants_live_side_by_side_and_replace_their_own() {
        let zone = Zone::new("z", settings());
        let head = b"HTTP/1.1 200 OK\r\nVary: X-A\r\n\r\n";
        let h = hash_key("k");
        zone.store(
            h,
            Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 1\r\n")),
        );
        zone.store(
            h,
            Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 2\r\n")),
        );
        zone.store(
            h,
            Arc::new(entry("k", head, b"GET / HTTP/1.1\r\nX-A: 1\r\n")),
        );
        assert!(zone
            .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 1\r\n")
            .is_some());
        assert!(zone
            .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 2\r\n")
            .is_some());
        assert!(zone
            .lookup(h, "k", b"GET / HTTP/1.1\r\nX-A: 3\r\n")
            .is_none());
        assert!(zone
            .lookup(h, "other", b"GET / HTTP/1.1\r\nX-A: 1\r\n")
            .is_none());
        assert_eq!(zone.store.get(&h).unwrap().entries.len(), 2);
    }

    #[test]
    fn purge_by_key_and_prefix() {
        let zone = Zone::new("z", settings());
        let head = b"HTTP/1.1 200 OK\r\n\r\n";
        for key in ["http://a/x/1", "http://a/x/2", "http://a/y"] {
            zone.store(
                hash_key(key),
                Arc::new(entry(key, head, b"GET / HTTP/1.1\r\n")),
            );
        }
        assert!(zone.remove("http://a/y"));
        assert!(!zone.remove("http://a/y"));
        assert_eq!(zone.remove_prefix("http://a/x/"), 2);
        assert!(zone
            .lookup(hash_key("http://a/x/1"), "http://a/x/1", b"")
            .is_none());
    }

    #[test]
    fn one_fetch_per_key_and_its_end_wakes_the_rest() {
        let zone = Arc::new(Zone::new("z", settings()));
        let fetch = zone.begin_fetch(7).ok().unwrap();
        let mut waiter = zone.begin_fetch(7).err().unwrap();
        assert!(zone.fetching(7));
        drop(fetch);
        assert!(!zone.fetching(7));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(
            rt.block_on(waiter.changed()).is_err(),
            "closed: the fetch ended"
        );
        assert!(zone.begin_fetch(7).is_ok());
    }

    #[test]
    fn a_reload_gets_the_same_zone_back_unless_resized() {
        let a = shared("reload-test", settings());
        assert!(!Arc::ptr_eq(&a, &shared("reload-test", settings())));
        let running = [a.clone()];
        let b = keeping(&running, || shared("reload-test", settings()));
        assert!(Arc::ptr_eq(&a, &b));
        let bigger = ZoneSettings {
            memory: 2 << 20,
            ..settings()
        };
        assert!(!Arc::ptr_eq(
            &a,
            &keeping(&running, || shared("reload-test", bigger))
        ));
    }
}
