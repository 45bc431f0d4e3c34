//! The fleet's ACME state in etcd, under `PREFIX/acme/`: the store `acme::shared` reads and
//! writes (the account, certificates, pending HTTP-01 answers) and its per-certificate order
//! lock, a key bound to a lease that a thread keeps alive while the order runs; and what the
//! watcher does with other instances' writes (answer their tokens, serve their certificates).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// The store for `acme::shared::share_with`.
pub(super) fn store(settings: ClusterSettings) -> SharedStore {
    Box::new(move |op| {
        let mut etcd = Etcd::new(&settings);
        let key = |k: &str| format!("{}{k}", prefix(&settings));
        match op {
            Op::Get(k) => Ok(Answer::Value(etcd.get(&key(k))?.0.map(|kv| kv.value))),
            Op::Put(k, v) => etcd.put(&key(k), v, 0).map(|_| Answer::Done),
            Op::Delete(k) => etcd.delete(&key(k)).map(|()| Answer::Done),
            Op::Lock(k) => lock(etcd, &key(k), &settings.name).map(Answer::Locked),
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
    let _ = std::thread::Builder::new()
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
