//! The cluster's threads, off the workers.
//! - The watcher follows everything under `PREFIX/` (the configuration, purges, ACME state)
//!   from the revision read at start. Each configuration revision goes to the run loop, which
//!   validates it over the own file and swaps it in or refuses it. A watch cancelled by
//!   compaction reads the key again; a broken one reconnects with backoff from the last
//!   revision seen, so nothing is missed.
//! - The registrar keeps the instance's key under a lease (address, version, generation,
//!   revision, health), writes or clears its errors key, and keeps the served configuration on
//!   disk.
//! - The publisher writes each purge done here under `PREFIX/purge/`; the watcher hands the
//!   others' to the run loop.
//! - The limits thread publishes this instance's rate limit counts (`limits.rs`); the watcher
//!   hands the others' to the charging thread, which adds them to the buckets here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::etcd::{Etcd, WatchEvent, WATCH_LIFETIME};
use super::{config_key, errors_key, instance_key, keep, lock, Served, Update};
use crate::config::cluster::ClusterSettings;
use crate::observe::cluster as standing;

/// The registration lease's time to live: an instance gone for this long leaves the fleet list.
const LEASE_TTL: u64 = 10;
/// How often the registrar renews the lease and publishes a change.
const TICK: Duration = Duration::from_secs(2);
/// The longest wait between tries while etcd is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// What the threads start from.
pub(super) struct Setup {
    pub settings: ClusterSettings,
    pub watch_from: i64,
    pub served: Arc<Mutex<Served>>,
    pub updates: tokio::sync::mpsc::UnboundedSender<Update>,
    pub purges: tokio::sync::mpsc::UnboundedSender<String>,
    pub addresses: Vec<String>,
    pub admin: Option<String>,
    /// This process among the fleet's, for the purges it publishes (names may repeat).
    pub origin: String,
}

/// Starts the watcher, the registrar, the purge publisher, and the limits and charging
/// threads.
pub(super) fn spawn(setup: Setup) {
    let setup = Arc::new(setup);
    let (done_here, to_publish) = std::sync::mpsc::channel();
    standing::set_purge_sink(done_here);
    let p = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-purge".into())
        .spawn(move || publish_purges(&p, &to_publish));
    let l = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-limits".into())
        .spawn(move || super::limits::sync(&l));
    let c = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-charge".into())
        .spawn(move || super::limits::charge(&c));
    let s = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-watch".into())
        .spawn(move || watch(&s));
    let _ = std::thread::Builder::new()
        .name("cluster-register".into())
        .spawn(move || register(&setup));
}

/// The watcher's loop over everything under the prefix (the configuration, purges, ACME
/// state); it ends when the run loop has gone.
fn watch(s: &Setup) {
    let key = config_key(&s.settings);
    let prefix = format!("{}/", s.settings.prefix);
    let mut etcd = Etcd::new(&s.settings);
    let mut seen = s.watch_from;
    // The watch starts after the revision joining read: HTTP-01 answers another instance put
    // before then (it was ordering while this one started) are read once here, or the CA
    // reaching this instance for them would fail the order.
    if let Ok(kvs) = etcd.list(&super::acme_store::prefix(&s.settings)) {
        for kv in kvs
            .iter()
            .filter(|kv| kv.key.windows(9).any(|w| w == b"/http-01/"))
        {
            super::acme_store::seen(&s.settings, &kv.key, Some(&kv.value));
        }
    }
    let mut backoff = FIRST_BACKOFF;
    // When the watch last showed it had delivered everything up to `seen`.
    let mut caught_up = Instant::now();
    let mut warned = false;
    while !s.updates.is_closed() {
        let mut compacted = false;
        let mut created = false;
        let opened = Instant::now();
        let result = etcd.watch(&prefix, seen + 1, |event| {
            match event {
                WatchEvent::Created => created = true,
                WatchEvent::Put(kv) => {
                    seen = kv.mod_revision;
                    put_seen(s, &key, &kv);
                }
                WatchEvent::Delete(deleted, revision) => {
                    seen = revision;
                    if deleted == key.as_bytes() {
                        tracing::warn!("cluster: {key} was deleted: the running config stays");
                    } else {
                        super::acme_store::seen(&s.settings, &deleted, None);
                    }
                }
                WatchEvent::Progress(revision) => {
                    seen = seen.max(revision);
                    caught_up = Instant::now();
                }
                WatchEvent::Compacted(_) => compacted = true,
            }
            !compacted && !s.updates.is_closed()
        });
        let lived = opened.elapsed();
        if compacted {
            if catch_up(s, &mut etcd, &key, &mut seen, caught_up) {
                caught_up = Instant::now();
                backoff = FIRST_BACKOFF;
                continue;
            }
        } else if created && lived + Duration::from_secs(2) >= WATCH_LIFETIME {
            // The watch's time was up: open the next one at once.
            caught_up = Instant::now();
            backoff = FIRST_BACKOFF;
            continue;
        } else if let Err(e) = result {
            if !warned {
                tracing::warn!("cluster: the watch of {prefix} broke ({e}): retrying; the running config stays");
                warned = true;
            }
            standing::set_connected(false);
        }
        if created && lived >= Duration::from_secs(1) {
            // It worked for a while: the next failure starts the backoff again.
            backoff = FIRST_BACKOFF;
            warned = false;
        }
        let jitter = Duration::from_millis(fastrand::u64(0..=backoff.as_millis() as u64 / 2));
        pause((backoff + jitter).min(MAX_BACKOFF));
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The first wait after a broken watch.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// A key written under the prefix: the configuration, a purge, or ACME state.
fn put_seen(s: &Setup, key: &str, kv: &super::etcd::KeyValue) {
    if kv.key == key.as_bytes() {
        apply(s, &String::from_utf8_lossy(&kv.value), kv.mod_revision);
    } else if kv.key.starts_with(purge_prefix(&s.settings).as_bytes()) {
        purge(s, &kv.value);
    } else if let Some(from) = kv
        .key
        .strip_prefix(super::limits::counts_prefix(&s.settings).as_bytes())
    {
        if from != s.origin.as_bytes() {
            super::limits::received(from, &kv.value);
        }
    } else {
        super::acme_store::seen(&s.settings, &kv.key, Some(&kv.value));
    }
}

/// After etcd compacted away the revisions the watch asked for: the configuration read as it
/// is now, and the purges missed run from their records (they live `PURGE_TTL`); when the watch
/// was behind longer than that, the caches are emptied instead. `false` when etcd did not
/// answer (the caller retries).
fn catch_up(s: &Setup, etcd: &mut Etcd, key: &str, seen: &mut i64, caught_up: Instant) -> bool {
    tracing::info!("cluster: etcd compacted the revisions after {seen}: reading {key} again");
    // Certificates another instance stored meanwhile are read from etcd by the ACME thread.
    crate::acme::shared::stored_elsewhere();
    let (config, purges) = match (etcd.get(key), etcd.list(&purge_prefix(&s.settings))) {
        (Ok(config), Ok(purges)) => (config, purges),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("cluster: reading {key} after a compaction: {e}");
            return false;
        }
    };
    let (kv, at) = config;
    if let Some(kv) = kv.filter(|kv| kv.mod_revision > *seen) {
        apply(s, &String::from_utf8_lossy(&kv.value), kv.mod_revision);
    }
    // Margin: a watch ended by its lifetime may have been dead for all of it.
    if caught_up.elapsed() + WATCH_LIFETIME + Duration::from_secs(60)
        < Duration::from_secs(PURGE_TTL)
    {
        for p in purges.iter().filter(|p| p.mod_revision > *seen) {
            purge(s, &p.value);
        }
    } else {
        tracing::info!("cluster: behind for longer than a purge is kept: emptying the caches");
        let _ = s.purges.send("prefix=".to_string());
    }
    *seen = at;
    true
}

/// One revision of the shared configuration, sent to the run loop.
fn apply(s: &Setup, text: &str, revision: i64) {
    let _ = s.updates.send(Update {
        text: text.to_string(),
        revision,
    });
}

/// Where purges are published: `PREFIX/purge/NAME-N`.
fn purge_prefix(settings: &ClusterSettings) -> String {
    format!("{}/purge/", settings.prefix)
}

/// A purge another instance published, for the run loop to run here.
fn purge(s: &Setup, record: &[u8]) {
    let record: serde_json::Value = serde_json::from_slice(record).unwrap_or_default();
    let (Some(origin), Some(query)) = (record["origin"].as_str(), record["query"].as_str()) else {
        return;
    };
    if origin != s.origin {
        let _ = s.purges.send(query.to_string());
    }
}

/// How long a purge record stays in etcd: an instance that reconnects within it still sees it.
const PURGE_TTL: u64 = 600;

/// The publisher's loop: each purge done here written for the others, under a lease.
fn publish_purges(s: &Setup, done_here: &std::sync::mpsc::Receiver<String>) {
    let mut etcd = Etcd::new(&s.settings);
    let prefix = purge_prefix(&s.settings);
    for (n, query) in done_here.iter().enumerate() {
        let record = serde_json::json!({ "origin": s.origin, "query": query }).to_string();
        let key = format!("{prefix}{}-{n}", s.origin);
        let written = etcd
            .grant(PURGE_TTL)
            .and_then(|lease| etcd.put(&key, record.as_bytes(), lease));
        if let Err(e) = written {
            tracing::warn!(
                "cluster: the purge {query:?} was done here but could not reach the fleet: {e}"
            );
        }
    }
}

/// What the registrar last wrote, to write again only on a change.
#[derive(Default, PartialEq)]
struct Published {
    lease: i64,
    record: String,
    /// The refusal in the errors key (`None` at start: written or deleted on the first turn,
    /// whatever an earlier run left there).
    refusal: Option<Option<(i64, String)>>,
    kept: i64,
}

/// The registrar's loop; it ends when the run loop has gone.
fn register(s: &Setup) {
    let mut etcd = Etcd::new(&s.settings);
    let mut last = Published {
        kept: -1,
        ..Published::default()
    };
    let mut backoff = TICK;
    while !s.updates.is_closed() {
        match publish(s, &mut etcd, &mut last) {
            Ok(()) => {
                standing::set_connected(true);
                backoff = TICK;
            }
            Err(e) => {
                if standing::connected() {
                    tracing::warn!("cluster: etcd did not take the registration ({e}): retrying");
                }
                standing::set_connected(false);
                last.lease = 0;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        pause(backoff);
    }
}

/// One turn: the kept copy, the lease, the instance's record and its errors key.
fn publish(s: &Setup, etcd: &mut Etcd, last: &mut Published) -> Result<(), String> {
    let (record, refusal) = {
        let served = lock(&s.served);
        if served.leaving {
            return Ok(());
        }
        let (text, revision) = (served.text.clone(), served.revision);
        let keep_now = served.started && revision != last.kept && revision > 0;
        let record = record(s, &served);
        let refusal = served.refusal.clone();
        drop(served);
        if keep_now {
            match keep(&s.settings, &text, revision) {
                Ok(()) => last.kept = revision,
                Err(e) => tracing::warn!(
                    "cluster: cannot keep the served configuration in {}: {e}",
                    s.settings.state_dir.display()
                ),
            }
        }
        (record, refusal)
    };
    if last.lease != 0 && !etcd.keep_alive(last.lease)? {
        last.lease = 0;
    }
    if last.lease == 0 {
        last.lease = etcd.grant(LEASE_TTL)?;
        lock(&s.served).lease = last.lease;
        last.record.clear();
    }
    if record != last.record {
        etcd.put(
            &instance_key(&s.settings, &s.settings.name),
            record.as_bytes(),
            last.lease,
        )?;
        last.record = record;
    }
    if last.refusal.as_ref() != Some(&refusal) {
        let key = errors_key(&s.settings, &s.settings.name);
        match &refusal {
            Some((revision, errors)) => {
                let body = serde_json::json!({ "revision": revision, "errors": errors });
                etcd.put(&key, body.to_string().as_bytes(), 0)?;
            }
            None => etcd.delete(&key)?,
        }
        last.refusal = Some(refusal);
    }
    Ok(())
}

/// The instance's record in the fleet list, as JSON.
fn record(s: &Setup, served: &Served) -> String {
    serde_json::json!({
        "name": s.settings.name,
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "listen": s.addresses,
        "admin": s.admin,
        "revision": served.revision,
        "generation": served.generation,
        "health": if served.refusal.is_some() { "refused" } else { "serving" },
    })
    .to_string()
}

/// Waits on a cluster thread.
#[allow(clippy::disallowed_methods)] // the cluster's own threads, never a worker
pub(super) fn pause(d: Duration) {
    std::thread::sleep(d);
}
