//! The cluster's two threads, off the workers. The watcher follows `PREFIX/config` from the
//! revision read at start: each new revision goes to the run loop, which validates it over the own
//! file and swaps it in or refuses it; a watch cancelled by compaction reads the key again and watches on; a
//! broken one reconnects with backoff from the last revision seen, so nothing is missed. The
//! registrar keeps the instance's key under a lease (address, version, generation, revision,
//! health), writes or clears its errors key, and keeps the served configuration on disk. The
//! publisher writes each purge done here under `PREFIX/purge/`; the watcher hands the others'
//! to the run loop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::etcd::{Etcd, WatchEvent};
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
}

/// Starts the watcher, the registrar and the purge publisher.
pub(super) fn spawn(setup: Setup) {
    let setup = Arc::new(setup);
    let (done_here, to_publish) = std::sync::mpsc::channel();
    standing::set_purge_sink(done_here);
    let p = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-purge".into())
        .spawn(move || publish_purges(&p, &to_publish));
    let s = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-watch".into())
        .spawn(move || watch(&s));
    let _ = std::thread::Builder::new()
        .name("cluster-register".into())
        .spawn(move || register(&setup));
}

/// The watcher's loop over everything under the prefix (the configuration and the purges); it
/// ends when the run loop has gone.
fn watch(s: &Setup) {
    let key = config_key(&s.settings);
    let prefix = format!("{}/", s.settings.prefix);
    let mut etcd = Etcd::new(&s.settings);
    let mut seen = s.watch_from;
    let mut backoff = Duration::from_millis(250);
    while !s.updates.is_closed() {
        let mut compacted = false;
        let result = etcd.watch(&prefix, seen + 1, |event| {
            standing::set_connected(true);
            match event {
                WatchEvent::Created => {}
                WatchEvent::Put(kv) => {
                    seen = kv.mod_revision;
                    if kv.key == key.as_bytes() {
                        apply(s, &String::from_utf8_lossy(&kv.value), kv.mod_revision);
                    } else if kv.key.starts_with(purge_prefix(&s.settings).as_bytes()) {
                        purge(s, &kv.value);
                    } else {
                        super::acme_store::seen(&s.settings, &kv.key, Some(&kv.value));
                    }
                }
                WatchEvent::Delete(deleted, revision) => {
                    seen = revision;
                    if deleted == key.as_bytes() {
                        tracing::warn!("cluster: {key} was deleted: the running config stays");
                    } else {
                        super::acme_store::seen(&s.settings, &deleted, None);
                    }
                }
                WatchEvent::Compacted(_) => compacted = true,
            }
            !compacted && !s.updates.is_closed()
        });
        if compacted {
            // What was missed is gone from etcd's history: read the key as it is now, and
            // since purges may be among what was missed, empty the caches.
            tracing::info!(
                "cluster: etcd compacted the revisions after {seen}: reading {key} again and emptying the caches (purges may have been missed)"
            );
            let _ = s.purges.send("prefix=".to_string());
            match etcd.get(&key) {
                Ok((kv, at)) => {
                    if let Some(kv) = kv.filter(|kv| kv.mod_revision > seen) {
                        apply(s, &String::from_utf8_lossy(&kv.value), kv.mod_revision);
                    }
                    seen = at;
                    backoff = Duration::from_millis(250);
                    continue;
                }
                Err(e) => tracing::warn!("cluster: reading {key} after a compaction: {e}"),
            }
        } else if let Err(e) = result {
            if standing::connected() {
                tracing::warn!(
                    "cluster: the watch of {prefix} broke ({e}): retrying; the running config stays"
                );
            }
            standing::set_connected(false);
        }
        pause(backoff + Duration::from_millis(fastrand::u64(0..=backoff.as_millis() as u64 / 2)));
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if standing::connected() {
            backoff = Duration::from_millis(250);
        }
    }
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
    if origin != s.settings.name {
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
        let record = serde_json::json!({ "origin": s.settings.name, "query": query }).to_string();
        let key = format!("{prefix}{}-{}-{n}", s.settings.name, std::process::id());
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
    refusal: Option<(i64, String)>,
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
        if served.revision != last.kept && served.revision > 0 {
            match keep(&s.settings, &served.text, served.revision) {
                Ok(()) => last.kept = served.revision,
                Err(e) => tracing::warn!(
                    "cluster: cannot keep the served configuration in {}: {e}",
                    s.settings.state_dir.display()
                ),
            }
        }
        let record = serde_json::json!({
            "name": s.settings.name,
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "listen": s.addresses,
            "admin": s.admin,
            "revision": served.revision,
            "generation": served.generation,
            "health": if served.refusal.is_some() { "refused" } else { "serving" },
        });
        (record.to_string(), served.refusal.clone())
    };
    if last.lease != 0 && !etcd.keep_alive(last.lease)? {
        last.lease = 0;
    }
    if last.lease == 0 {
        last.lease = etcd.grant(LEASE_TTL)?;
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
    if refusal != last.refusal {
        let key = errors_key(&s.settings, &s.settings.name);
        match &refusal {
            Some((revision, errors)) => {
                let body = serde_json::json!({ "revision": revision, "errors": errors });
                etcd.put(&key, body.to_string().as_bytes(), 0)?;
            }
            None => etcd.delete(&key)?,
        }
        last.refusal = refusal;
    }
    Ok(())
}

/// Waits on a cluster thread.
#[allow(clippy::disallowed_methods)] // the cluster's own threads, never a worker
pub(super) fn pause(d: Duration) {
    std::thread::sleep(d);
}
