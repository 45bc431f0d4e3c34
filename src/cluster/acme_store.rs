//! The fleet's ACME state in etcd, under `PREFIX/acme/`: the store `acme::shared` reads and
//! writes (the account, certificates, pending HTTP-01 answers) and its per-certificate order
//! lock, a key bound to a lease that a thread keeps alive while the order runs; and what the
//! watcher does with other instances' writes (answer their tokens, serve their certificates).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::etcd::Etcd;
use crate::acme::shared::{Answer, Op, Release, SharedStore};
use crate::config::cluster::ClusterSettings;

/// The order lock's lease: kept alive every third of it while held; a crashed holder's lock
/// goes after it.
const LOCK_TTL: u64 = 30;

/// The key prefix of the fleet's ACME state.
pub(super) fn prefix(settings: &ClusterSettings) -> String {
    format!("{}/acme/", settings.prefix)
}

/// How long a pending HTTP-01 answer stays in etcd if the instance that wrote it never
/// withdraws it (an order takes at most 5 minutes).
const ANSWER_TTL: u64 = 600;

/// The store for `acme::shared::share_with`: one client, kept between calls. While the fleet's
/// threads find etcd unreachable it fails at once, so a start or reload never waits on it.
pub(super) fn store(settings: ClusterSettings) -> SharedStore {
    let etcd = Mutex::new(Etcd::new(&settings));
    Box::new(move |op| {
        if !crate::observe::cluster::connected() {
            return Err("etcd is unreachable".into());
        }
        let key = |k: &str| format!("{}{k}", prefix(&settings));
        let mut etcd = etcd
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match op {
            Op::Get(k) => Ok(Answer::Value(etcd.get(&key(k))?.0.map(|kv| kv.value))),
            Op::Put(k, v) => etcd.put(&key(k), v, 0).map(|_| Answer::Done),
            Op::PutForAWhile(k, v) => {
                let lease = etcd.grant(ANSWER_TTL)?;
                etcd.put(&key(k), v, lease).map(|_| Answer::Done)
            }
            Op::Delete(k) => etcd.delete(&key(k)).map(|()| Answer::Done),
            Op::Lock(k) => lock(Etcd::new(&settings), &key(k), &settings.name).map(Answer::Locked),
        }
    })
}

/// Takes the lock `key` under a lease kept alive until the release is called.
fn lock(mut etcd: Etcd, key: &str, holder: &str) -> Result<Option<Release>, String> {
    let lease = etcd.grant(LOCK_TTL)?;
    if !etcd.create(key, holder.as_bytes(), lease)? {
        let _ = etcd.revoke(lease);
        return Ok(None);
    }
    let released = Arc::new(AtomicBool::new(false));
    let stop = released.clone();
    let keeper = std::thread::Builder::new()
        .name("cluster-acme-lock".into())
        .spawn(move || {
            let third = Duration::from_secs(LOCK_TTL / 3);
            let tick = Duration::from_millis(100);
            let mut waited = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                super::agent::pause(tick);
                waited += tick;
                if waited >= third {
                    waited = Duration::ZERO;
                    if !matches!(etcd.keep_alive(lease), Ok(true)) {
                        tracing::warn!(
                            "ACME: the fleet's order lock lapsed (etcd did not renew it)"
                        );
                    }
                }
            }
            let _ = etcd.revoke(lease);
        });
    if let Err(e) = keeper {
        // The lease is left to run out (LOCK_TTL): without a keeper the order must not start.
        return Err(format!("cannot start the thread that keeps the lock: {e}"));
    }
    Ok(Some(Box::new(move || {
        released.store(true, Ordering::Relaxed);
    })))
}

/// Another instance's write under `PREFIX/acme/` (`value` `None`: deleted), seen by the watch.
pub(super) fn seen(settings: &ClusterSettings, key: &[u8], value: Option<&[u8]>) {
    let Some(rest) = key.strip_prefix(prefix(settings).as_bytes()) else {
        return;
    };
    let rest = String::from_utf8_lossy(rest);
    let mut parts = rest.splitn(3, '/');
    let (_folder, kind, name) = (parts.next(), parts.next(), parts.next());
    match (kind, name) {
        (Some("http-01"), Some(token)) => {
            let answer = value.map(|v| String::from_utf8_lossy(v).into_owned());
            crate::acme::shared::answer_elsewhere(token, answer);
        }
        (Some("certs"), Some(_)) if value.is_some() => crate::acme::shared::stored_elsewhere(),
        _ => {}
    }
}
