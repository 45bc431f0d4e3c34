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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::entry::Entry;

/// A zone's sizes, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    /// Bytes the memory tier holds.
    pub memory: u64,
    /// The largest response held in memory (bigger ones go to the disk tier, or pass through
    /// uncached without one).
    pub max_object: usize,
    /// An entry unused this long is dropped, fresh or not (nginx's `inactive`).
    pub inactive: Duration,
    /// The disk tier: its directory and the bytes it may hold.
    pub disk: Option<(std::path::PathBuf, u64)>,
}

/// The disk tier of a zone: its directory and the index of its files (read back at start).
struct DiskTier {
    dir: std::path::PathBuf,
    index: Store,
    /// The directory was read back (once, when a server first runs the zone).
    loaded: std::sync::Once,
}

/// A tier's table: key hash to the key's variants.
type Store = moka::sync::Cache<u128, Arc<Variants>>;

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

/// Most disk copies of memory entries being written at once per zone; past it, a copy is
/// skipped (the entry stays in memory) rather than queued without bound.
const MAX_WRITING: usize = 64;

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
    store: Store,
    /// The disk tier, when the zone has a `path` (shared with the zone it replaces on a reload
    /// that changed only the memory tier's sizes).
    disk: Option<Arc<DiskTier>>,
    /// Fetches in flight, by key hash: later misses of the key wait on them.
    flights: Mutex<HashMap<u128, watch::Receiver<()>>>,
    /// Requests seen per key not yet stored (for `min_uses`).
    uses: moka::sync::Cache<u128, u32>,
    /// Purges so far per key hash (kept `inactive`): a copy written to disk while its key was
    /// purged is taken out again.
    purged_keys: moka::sync::Cache<u128, u64>,
    /// Purges by prefix or pattern so far: every copy written to disk meanwhile is taken out.
    bans: AtomicU64,
    /// Disk copies being written (at most [`MAX_WRITING`]).
    writing: AtomicUsize,
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
    if let Some(kept) = kept {
        return kept;
    }
    // The same directory: the disk tier (its index and files) goes on as it is, rather than a
    // second index over the directory whose removals would take the first one's files. A new
    // `disk` or `inactive` for it takes effect when the index is next read from the directory,
    // at the next start (an index cannot be resized in place, and moving its entries to a new
    // one while the old config still serves would leave files to two owners).
    let dir = settings.disk.as_ref().map(|d| &d.0);
    let disk = RUNNING.with(|r| {
        let running = r.borrow();
        let z = running
            .iter()
            .find(|z| z.name == name && dir.is_some() && z.settings.disk.as_ref().map(|d| &d.0) == dir)?;
        if z.settings.disk != settings.disk || z.settings.inactive != settings.inactive {
            tracing::warn!(zone = %name, "cache: the disk tier keeps its running disk and inactive until the next start");
        }
        Some((z.disk.clone()?, z.stats.evictions.clone()))
    });
    Arc::new(Zone::with_disk(name, settings, disk))
}

/// The hash a key is found by.
pub fn hash_key(key: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(key.as_bytes())
}

impl Zone {
    /// An empty zone.
    pub fn new(name: &str, settings: ZoneSettings) -> Zone {
        Zone::with_disk(name, settings, None)
    }

    /// A zone with an empty memory tier and `disk` for its disk tier, with the eviction
    /// counter it counts into (a new, empty one when `None` and the settings name one).
    fn with_disk(
        name: &str,
        settings: ZoneSettings,
        disk: Option<(Arc<DiskTier>, Arc<AtomicU64>)>,
    ) -> Zone {
        let mut stats = ZoneStats::default();
        let disk = disk.map(|(disk, evictions)| {
            stats.evictions = evictions;
            disk
        });
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
        let disk = disk.or_else(|| {
            settings
                .disk
                .as_ref()
                .map(|(dir, bytes)| Arc::new(new_disk(&stats, dir, *bytes, settings.inactive)))
        });
        let uses = moka::sync::Cache::builder()
            .max_capacity(1 << 16)
            .time_to_idle(settings.inactive)
            .build();
        Zone {
            name: name.to_string(),
            settings,
            store,
            disk,
            flights: Mutex::new(HashMap::new()),
            uses,
            purged_keys: moka::sync::Cache::builder()
                .max_capacity(1 << 16)
                .time_to_live(Duration::from_secs(600))
                .build(),
            bans: AtomicU64::new(0),
            writing: AtomicUsize::new(0),
            stats,
        }
    }
}

/// A disk tier's empty index over `dir`, holding `bytes`.
fn new_disk(stats: &ZoneStats, dir: &std::path::Path, bytes: u64, inactive: Duration) -> DiskTier {
    let evictions = stats.evictions.clone();
    // Weights are in KiB (a u32 of bytes would cap an entry at 4 GiB), so is the capacity.
    let index = moka::sync::Cache::builder()
        .max_capacity((bytes >> 10).max(1))
        .weigher(|_k: &u128, v: &Arc<Variants>| {
            let bytes: u64 = v.entries.iter().map(|e| e.disk_weight()).sum();
            u32::try_from(bytes >> 10).unwrap_or(u32::MAX).max(1)
        })
        .time_to_idle(inactive)
        .eviction_listener(move |_k, v: Arc<Variants>, cause| {
            use moka::notification::RemovalCause;
            if cause == RemovalCause::Size {
                evictions.fetch_add(1, Relaxed);
            }
            // A replaced key's files are doomed by `store_on`, which knows which
            // variants the new value keeps.
            if cause != RemovalCause::Replaced {
                doom(&v.entries);
            }
        })
        .build();
    DiskTier {
        dir: dir.to_path_buf(),
        index,
        loaded: std::sync::Once::new(),
    }
}

impl Zone {
    /// Reads the disk tier's directory back into its index (once; later calls do nothing):
    /// a restart keeps the cache. Files that do not read back are removed.
    pub fn load_disk(&self) {
        let Some(disk) = &self.disk else {
            return;
        };
        disk.loaded.call_once(|| {
            let mut found = 0;
            for entry in super::disk::load(&disk.dir) {
                let hash = hash_key(&entry.key);
                self.store_on(&disk.index, hash, Arc::new(entry));
                found += 1;
            }
            // Held to its size at once (a smaller `disk` than the files hold evicts now).
            disk.index.run_pending_tasks();
            tracing::info!(zone = %self.name, dir = %disk.dir.display(), "cache: {found} stored responses read back");
        });
    }

    /// The stored response for `key` whose `Vary` values the request's fields match: from
    /// memory, else from the disk tier.
    pub fn lookup(&self, hash: u128, key: &str, request_fields: &[u8]) -> Option<Arc<Entry>> {
        let find = |store: &Store| {
            let variants = store.get(&hash)?;
            if &*variants.key != key {
                return None;
            }
            let found = variants.entries.iter().find(|e| e.matches(request_fields));
            found.cloned()
        };
        let Some(disk) = &self.disk else {
            return find(&self.store);
        };
        match find(&self.store) {
            Some(found) => {
                // Its copy on disk is in use too: it must not idle out (a restart keeps it).
                let _ = disk.index.get(&hash);
                Some(found)
            }
            None => find(&disk.index),
        }
    }

    /// Whether the zone has a disk tier (responses larger than `max_object` are stored there,
    /// streamed).
    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// A new file's path on the disk tier for key `hash`.
    pub fn new_file(&self, hash: u128) -> Option<std::path::PathBuf> {
        let disk = self.disk.as_ref()?;
        Some(super::disk::file_name(&disk.dir, hash))
    }

    /// Stores `entry` under its key, replacing the variant it matches: a body in memory in
    /// the memory tier (and, with a disk tier, a copy in a file, so a restart keeps it); a
    /// body in a file in the disk tier.
    pub fn store(self: &Arc<Self>, hash: u128, entry: Arc<Entry>) {
        self.stats.stored.fetch_add(1, Relaxed);
        // Taken before the entry is visible, so a purge that removes it is seen.
        let mark = self.purge_mark(hash);
        if entry.file.is_none() {
            self.store_on(&self.store, hash, entry.clone());
        }
        let Some(disk) = &self.disk else {
            return;
        };
        if entry.file.is_some() {
            return self.store_on(&disk.index, hash, entry);
        }
        // The copy on disk is written off the worker (a body of up to `max_object` would hold
        // every connection of the worker meanwhile), a bounded number at a time; a purge of
        // the key while it is written wins.
        if self.writing.fetch_add(1, SeqCst) >= MAX_WRITING {
            self.writing.fetch_sub(1, SeqCst);
            tracing::debug!(zone = %self.name, "cache: disk writes behind, a copy skipped");
            return;
        }
        let zone = self.clone();
        let write = move || {
            if let Some(disk) = &zone.disk {
                match super::disk::write_entry(&disk.dir, hash, &entry) {
                    Ok(on_file) => {
                        let on_file = Arc::new(on_file);
                        zone.store_on(&disk.index, hash, on_file.clone());
                        if zone.purge_mark(hash) != mark {
                            zone.remove_stored(hash, &on_file);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(zone = %zone.name, "cache: a response could not be written to disk: {e}");
                    }
                }
            }
            zone.writing.fetch_sub(1, SeqCst);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(write)),
            Err(_) => write(),
        }
    }

    /// How many times `hash`'s key and the zone were purged: a disk copy written while this
    /// changed is taken out again.
    fn purge_mark(&self, hash: u128) -> (u64, u64) {
        (
            self.purged_keys.get(&hash).unwrap_or(0),
            self.bans.load(SeqCst),
        )
    }

    /// Takes `entry` (stored under `hash` on the disk tier) out again, when it is there: a
    /// purge came while it was written.
    fn remove_stored(&self, hash: u128, entry: &Arc<Entry>) {
        let Some(disk) = &self.disk else {
            return;
        };
        let mut found = false;
        disk.index.entry(hash).and_compute_with(|old| {
            let Some(old) = old.map(moka::Entry::into_value) else {
                return moka::ops::compute::Op::Nop;
            };
            let entries: Vec<_> = old
                .entries
                .iter()
                .filter(|e| !Arc::ptr_eq(e, entry))
                .cloned()
                .collect();
            found = entries.len() < old.entries.len();
            match (found, entries.is_empty()) {
                (false, _) => moka::ops::compute::Op::Nop,
                (true, true) => moka::ops::compute::Op::Remove,
                (true, false) => {
                    let key = old.key.clone();
                    moka::ops::compute::Op::Put(Arc::new(Variants { key, entries }))
                }
            }
        });
        if found {
            entry.file.iter().for_each(|f| f.doom());
        }
    }

    /// Puts `entry` in a tier's table, keeping the key's other variants; the files of the
    /// variants it replaces are doomed (or its own, when the variant stored is newer: disk
    /// copies are written off the workers and may land out of order). One atomic step on the
    /// key, so two workers storing variants of one key at once keep both.
    fn store_on(&self, store: &Store, hash: u128, entry: Arc<Entry>) {
        let mut gone = Vec::new();
        store.entry(hash).and_compute_with(|old| {
            let mut entries = vec![entry.clone()];
            if let Some(old) = old
                .map(moka::Entry::into_value)
                .filter(|v| v.key == entry.key)
            {
                let same_variant = |e: &Arc<Entry>| {
                    e.vary.len() == entry.vary.len()
                        && e.vary
                            .iter()
                            .all(|(n, v)| entry.vary.iter().any(|(n2, v2)| n == n2 && v == v2))
                };
                let (replaced, kept): (Vec<_>, Vec<_>) =
                    old.entries.iter().cloned().partition(|e| same_variant(e));
                let newer = |e: &Arc<Entry>| e.times.response_time > entry.times.response_time;
                if replaced.iter().any(newer) {
                    // A copy written late (disk writes finish in any order): the newer stays.
                    if !replaced.iter().any(|e| Arc::ptr_eq(e, &entry)) {
                        gone.push(entry.clone());
                    }
                    return moka::ops::compute::Op::Nop;
                }
                let dropped = kept.len().saturating_sub(MAX_VARIANTS - 1);
                // A freshened entry keeps its predecessor's file: that one stays.
                let same_file = |e: &&Arc<Entry>| match (&e.file, &entry.file) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                };
                gone.extend(replaced.iter().filter(|e| !same_file(e)).cloned());
                gone.extend(kept[kept.len() - dropped..].iter().cloned());
                entries.extend(kept.into_iter().take(MAX_VARIANTS - 1));
            }
            let key = entry.key.clone();
            moka::ops::compute::Op::Put(Arc::new(Variants { key, entries }))
        });
        doom(&gone);
    }

    /// Removes every variant of `key` from both tiers (their files too); whether there was
    /// one.
    pub fn remove(&self, key: &str) -> bool {
        let hash = hash_key(key);
        // Counted first: a disk copy of the key being written now is taken out again.
        let purges = self.purged_keys.get(&hash).unwrap_or(0);
        self.purged_keys.insert(hash, purges + 1);
        let mut found = false;
        for store in self.tiers() {
            if store.get(&hash).is_some_and(|v| &*v.key == key) {
                if let Some(gone) = store.remove(&hash) {
                    doom(&gone.entries);
                }
                found = true;
            }
        }
        if found {
            self.stats.purged.fetch_add(1, Relaxed);
            self.settle();
        }
        found
    }

    /// Lets the tables finish their pending work now, so they let go of removed entries (and
    /// doomed files go at once rather than at some later lookup).
    fn settle(&self) {
        for store in self.tiers() {
            store.run_pending_tasks();
        }
    }

    /// Removes every key `doomed_key` says goes (a prefix, a pattern); how many.
    pub fn remove_where(&self, doomed_key: impl Fn(&str) -> bool) -> usize {
        // Counted first: every disk copy being written now is taken out again (its key may
        // match; a ban is rare enough to lose the others' copies).
        self.bans.fetch_add(1, SeqCst);
        let mut doomed: Vec<u128> = Vec::new();
        for store in self.tiers() {
            let matching = store.iter().filter(|(_, v)| doomed_key(&v.key));
            doomed.extend(matching.map(|(k, _)| *k));
        }
        doomed.sort_unstable();
        doomed.dedup();
        for hash in &doomed {
            for store in self.tiers() {
                if let Some(gone) = store.remove(hash) {
                    doom(&gone.entries);
                }
            }
        }
        self.stats.purged.fetch_add(doomed.len() as u64, Relaxed);
        self.settle();
        doomed.len()
    }

    fn tiers(&self) -> impl Iterator<Item = &Store> {
        std::iter::once(&self.store).chain(self.disk.as_ref().map(|d| &d.index))
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

    /// Bytes and keys held in memory, and on disk (kilobytes of files, keys).
    pub fn size(&self) -> ((u64, u64), Option<(u64, u64)>) {
        self.store.run_pending_tasks();
        let memory = (self.store.weighted_size(), self.store.entry_count());
        let disk = self.disk.as_ref().map(|d| {
            d.index.run_pending_tasks();
            (d.index.weighted_size() << 10, d.index.entry_count())
        });
        (memory, disk)
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

/// Marks the files of entries that left a tier for removal (once no request sends them).
fn doom(entries: &[Arc<Entry>]) {
    for file in entries.iter().filter_map(|e| e.file.as_ref()) {
        file.doom();
    }
}

/// The right to be a key's one fetch; dropped when the fetch is done (stored or not), which
/// wakes the requests waiting for it.
pub struct Fetch {
    zone: Arc<Zone>,
    hash: u128,
    _done: watch::Sender<()>,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fetch({}, {:x})", self.zone.name, self.hash)
    }
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
mod tests;
