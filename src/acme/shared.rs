//! A store a fleet's instances share beside each one's state directory (etcd, set by
//! `cluster/` when the instance is a fleet member): the account, the certificates and the
//! pending HTTP-01 answers are written to both; certificates and the account are read from it
//! first and copied into the directory; each certificate's order takes a lock in it, so one
//! instance orders a name for the whole fleet. Without a store (not a fleet member) nothing here
//! does anything. `acme` imports nothing of the crate: the store comes as functions.

use std::path::Path;
use std::sync::{Arc, LazyLock, RwLock};

/// What a lock taken in the store gives back: called to release it.
pub type Release = Box<dyn FnOnce() + Send>;

/// One operation on the store, on a key relative to the fleet's ACME prefix
/// (`FOLDER/certs/NAME.pem`).
pub enum Op<'a> {
    /// The value of a key.
    Get(&'a str),
    /// Writes a key.
    Put(&'a str, &'a [u8]),
    /// Writes a key that goes by itself after a while (a pending HTTP-01 answer), so one left
    /// by a crash does not stay.
    PutForAWhile(&'a str, &'a [u8]),
    /// Deletes a key.
    Delete(&'a str),
    /// Takes the lock named by a key without waiting.
    Lock(&'a str),
}

/// What an operation gives back.
pub enum Answer {
    /// A key's value (`None`: no such key).
    Value(Option<Vec<u8>>),
    /// Written or deleted.
    Done,
    /// The lock, or `None` while another instance holds it.
    Locked(Option<Release>),
}

/// The store: every operation through one function.
pub type SharedStore = Box<dyn Fn(Op<'_>) -> Result<Answer, String> + Send + Sync>;

static STORE: RwLock<Option<Arc<SharedStore>>> = RwLock::new(None);
/// Woken when another instance stored a certificate: the manager reads the store again.
pub(super) static CHANGED: LazyLock<tokio::sync::Notify> = LazyLock::new(tokio::sync::Notify::new);

/// Shares the ACME state through `store` from now on (a fleet member, at start).
pub fn share_with(store: SharedStore) {
    if let Ok(mut s) = STORE.write() {
        *s = Some(Arc::new(store));
    }
}

fn store() -> Option<Arc<SharedStore>> {
    STORE.read().ok().and_then(|s| s.clone())
}

/// Another instance stored a certificate (the fleet's watch saw it): serve it here too.
pub fn stored_elsewhere() {
    CHANGED.notify_one();
}

/// Another instance's pending HTTP-01 answer (`None`: withdrawn), answered here too.
pub fn answer_elsewhere(token: &str, key_authorization: Option<String>) {
    if super::well_formed_token(token) {
        super::set_http01(token, key_authorization.filter(|k| k.starts_with(token)));
    }
}

/// Copies the store's `key` to the file `local` when there is no file, or when `newer(store's,
/// file's)` says the store's is newer; the store unreachable or without the key leaves the file
/// as it is.
pub(super) fn mirror(
    key: &str,
    local: &Path,
    newer: fn(&[u8], &[u8]) -> bool,
) -> Result<(), String> {
    let Some(store) = store() else {
        return Ok(());
    };
    let file = std::fs::read(local).ok();
    match store(Op::Get(key)) {
        Ok(Answer::Value(Some(bytes))) => match file {
            None => super::state::write_atomically(local, &bytes),
            Some(file) if file != bytes && newer(&bytes, &file) => {
                super::state::write_atomically(local, &bytes)
            }
            // The file is newer (its publication failed once): the fleet gets it now.
            Some(file) if file != bytes && newer(&file, &bytes) => {
                publish(key, &file);
                Ok(())
            }
            Some(_) => Ok(()),
        },
        Ok(_) => {
            if let Some(file) = file {
                publish(key, &file);
            }
            Ok(())
        }
        Err(e) => {
            tracing::warn!(
                "ACME: the fleet's store is unreachable ({e}): using {}",
                local.display()
            );
            Ok(())
        }
    }
}

/// Writes `key` to the store (nothing without one). A failure is logged, not returned: what
/// was written to the state directory stands, and `mirror` publishes it later.
pub(super) fn publish(key: &str, bytes: &[u8]) {
    if let Some(Err(e)) = store().map(|s| s(Op::Put(key, bytes))) {
        tracing::warn!(
            "ACME: {key} did not reach the fleet's store ({e}); it will be written when next read"
        );
    }
}

/// Writes `key` to the store for a while (a pending HTTP-01 answer).
pub(super) fn publish_for_a_while(key: &str, bytes: &[u8]) -> Result<(), String> {
    store().map_or(Ok(()), |s| s(Op::PutForAWhile(key, bytes)).map(drop))
}

/// Deletes `key` from the store, best effort.
pub(super) fn withdraw(key: &str) {
    if let Some(s) = store() {
        let _ = s(Op::Delete(key));
    }
}

/// Takes the store's lock `key`: `Ok(None)` while another instance holds it; without a store,
/// an immediate release.
pub(super) fn lock(key: &str) -> Result<Option<Release>, String> {
    match store() {
        Some(s) => match s(Op::Lock(key))? {
            Answer::Locked(lock) => Ok(lock),
            _ => Err("the fleet's store answered a lock with something else".into()),
        },
        None => Ok(Some(Box::new(|| {}))),
    }
}
