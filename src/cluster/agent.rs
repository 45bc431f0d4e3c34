//! The cluster's two threads, off the workers. The watcher follows `PREFIX/config` from the
//! revision read at start: each new revision goes to the run loop, which validates it over the own
//! file and swaps it in or refuses it; a watch cancelled by compaction reads the key again and watches on; a
//! broken one reconnects with backoff from the last revision seen, so nothing is missed. The
//! registrar keeps the instance's key under a lease (address, version, generation, revision,
//! health), writes or clears its errors key, and keeps the served configuration on disk.

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
    pub addresses: Vec<String>,
    pub admin: Option<String>,
}

/// Starts the watcher and the registrar.
pub(super) fn spawn(setup: Setup) {
    let setup = Arc::new(setup);
    let s = setup.clone();
    let _ = std::thread::Builder::new()
        .name("cluster-watch".into())
        .spawn(move || watch(&s));
    let _ = std::thread::Builder::new()
        .name("cluster-register".into())
        .spawn(move || register(&setup));
}

/// The watcher's loop; it ends when the run loop has gone.
fn watch(s: &Setup) {
    let key = config_key(&s.settings);
    let mut etcd = Etcd::new(&s.settings.endpoints, s.settings.credentials.clone());
    let mut seen = s.watch_from;
    let mut backoff = Duration::from_millis(250);
    while !s.updates.is_closed() {
        let mut compacted = false;
        let result = etcd.watch(&key, seen + 1, |event| {
            standing::set_connected(true);
            match event {
                WatchEvent::Created => {}
                WatchEvent::Put(kv) => {
                    seen = kv.mod_revision;
                    apply(s, &String::from_utf8_lossy(&kv.value), kv.mod_revision);
                }
                WatchEvent::Delete(_, revision) => {
                    seen = revision;
                    tracing::warn!("cluster: {key} was deleted: the running config stays");
                }
                WatchEvent::Compacted(_) => compacted = true,
            }
            !compacted && !s.updates.is_closed()
        });
        if compacted {
            // What was missed is gone from etcd's history: read the key as it is now.
            tracing::info!(
                "cluster: etcd compacted the revisions after {seen}: reading {key} again"
            );
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
                    "cluster: the watch of {key} broke ({e}): retrying; the running config stays"
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
    let mut etcd = Etcd::new(&s.settings.endpoints, s.settings.credentials.clone());
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
fn pause(d: Duration) {
    std::thread::sleep(d);
}
