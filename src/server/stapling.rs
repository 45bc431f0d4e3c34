//! The OCSP stapling thread: for each configured certificate that names an OCSP responder,
//! fetches a response off the workers, checks it (`tls::ocsp::check`) and staples it onto the
//! certificate's slot; refreshed halfway to its `nextUpdate`, retried with backoff on failure,
//! and withdrawn when it would go stale. Good responses are remembered across reloads, so a
//! reload staples at once without asking the responder again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::tls::ocsp::{self, Staple, Target};
use crate::tls::resolve::Slot;

/// Time allowed to connect to a responder, and for each read and write.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read.
const MAX_RESPONSE: u64 = 64 * 1024;

/// Responses stapled, and fetches that failed (a response refused counts as failed).
static STAPLED: AtomicU64 = AtomicU64::new(0);
/// See [`STAPLED`].
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Good responses by leaf certificate (DER).
type Cache = Arc<Mutex<HashMap<Vec<u8>, Staple>>>;

/// The running thread; dropping it stops the thread (at its next step: a fetch in progress
/// is not waited for).
pub(super) struct Stapler {
    updates: mpsc::Sender<Vec<Arc<Slot>>>,
    cache: Cache,
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Stapler {
    /// Starts the thread on the running config's certificates (none without TLS: a reload
    /// may bring some).
    pub(super) fn start(slots: Vec<Arc<Slot>>) -> std::io::Result<Stapler> {
        let (tx, rx) = mpsc::channel();
        let cache: Cache = Arc::default();
        let shared = cache.clone();
        std::thread::Builder::new()
            .name("ocsp".into())
            .spawn(move || run(&rx, slots, &shared))?;
        Ok(Stapler { updates: tx, cache })
    }

    /// Staples onto a reloaded config's certificates the responses still good, before that
    /// config serves (a certificate already stapled keeps its staple across the reload).
    pub(super) fn staple_from_cache(&self, slots: &[Arc<Slot>]) {
        let t = now();
        if let Ok(cache) = self.cache.lock() {
            for slot in slots {
                if let Some(s) = cache.get(slot.chain()[0].as_ref()) {
                    if t < s.withdraw_at() {
                        slot.staple(Some(s.der.clone()));
                    }
                }
            }
        }
    }

    /// Hands the running config's certificates to the thread (after a reload succeeded).
    pub(super) fn watch(&self, slots: Vec<Arc<Slot>>) {
        let _ = self.updates.send(slots);
    }
}

/// One certificate the thread looks after.
struct Entry {
    slot: Arc<Slot>,
    target: Target,
    /// When to fetch next (seconds since the epoch).
    due: i64,
    /// When the staple served now must go (0: none is).
    withdraw_at: i64,
    failures: u32,
}

/// The entries of `slots`, with the staples the cache still holds; the cache keeps only
/// theirs.
fn entries(slots: Vec<Arc<Slot>>, cache: &Cache) -> Vec<Entry> {
    let mut cache = match cache.lock() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    let t = now();
    let list: Vec<Entry> = slots
        .into_iter()
        .filter_map(|slot| {
            let target = match ocsp::target(slot.chain())? {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!("OCSP stapling off for a certificate: {e}");
                    return None;
                }
            };
            let held = cache
                .get(slot.chain()[0].as_ref())
                .filter(|s| t < s.withdraw_at());
            Some(Entry {
                due: held.map_or(0, |s| next_fetch(s, t)),
                withdraw_at: held.map_or(0, Staple::withdraw_at),
                slot,
                target,
                failures: 0,
            })
        })
        .collect();
    cache.retain(|leaf, _| {
        list.iter()
            .any(|e| e.slot.chain()[0].as_ref() == leaf.as_slice())
    });
    list
}

/// When to fetch again after `staple` came at `t`: its refresh time, but no sooner than
/// halfway to `nextUpdate` from now (between a second and an hour), and before it must go.
fn next_fetch(staple: &Staple, t: i64) -> i64 {
    let soonest = t + ((staple.next_update - t) / 2).clamp(1, 3600);
    staple.refresh_at().max(soonest).min(staple.withdraw_at())
}

fn run(updates: &mpsc::Receiver<Vec<Arc<Slot>>>, slots: Vec<Arc<Slot>>, cache: &Cache) {
    let mut list = entries(slots, cache);
    loop {
        for e in &mut list {
            // Stopped, or a reload's certificates waiting: no more work on these.
            match updates.try_recv() {
                Ok(slots) => {
                    list = entries(slots, cache);
                    break;
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            // A staple not refreshed in time goes before it is stale.
            if e.withdraw_at != 0 && now() >= e.withdraw_at {
                e.slot.staple(None);
                e.withdraw_at = 0;
                tracing::warn!(
                    "OCSP: the staple from {} expired unrefreshed: withdrawn",
                    e.target.url
                );
            }
            if now() >= e.due {
                refresh(e, cache);
            }
        }
        let wake = list
            .iter()
            .flat_map(|e| [Some(e.due), (e.withdraw_at != 0).then_some(e.withdraw_at)])
            .flatten()
            .min()
            .unwrap_or(now() + 3600);
        let wait = Duration::from_secs(wake.saturating_sub(now()).clamp(1, 3600) as u64);
        match updates.recv_timeout(wait) {
            Ok(slots) => list = entries(slots, cache),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Fetches and checks one response; a good one is stapled, a failure retried after 1, 2, 4
/// ... minutes (at most an hour), the current staple kept while it is still good.
fn refresh(e: &mut Entry, cache: &Cache) {
    let result = fetch(&e.target.url, &ocsp::request(&e.target))
        .and_then(|der| ocsp::check(&e.target, &der, now()));
    match result {
        Ok(staple) => {
            e.slot.staple(Some(staple.der.clone()));
            e.due = next_fetch(&staple, now());
            e.withdraw_at = staple.withdraw_at();
            e.failures = 0;
            STAPLED.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut c) = cache.lock() {
                c.insert(e.slot.chain()[0].as_ref().to_vec(), staple);
            }
        }
        Err(reason) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            e.failures += 1;
            let wait = (60i64 << (e.failures - 1).min(6)).min(3600);
            e.due = now() + wait;
            tracing::warn!(
                "OCSP: no staple from {} ({reason}); next attempt in {wait} s",
                e.target.url
            );
        }
    }
}

/// POSTs an OCSP request to an `http://` responder and returns the response body, within
/// one deadline for the whole exchange.
fn fetch(url: &str, body: &[u8]) -> Result<Vec<u8>, String> {
    if !url.starts_with("http://") {
        return Err("not an http:// URL".into());
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(FETCH_TIMEOUT))
        .http_status_as_error(true)
        .build()
        .into();
    let mut response = agent
        .post(url)
        .header("Content-Type", "application/ocsp-request")
        .header("Accept", "application/ocsp-response")
        .send(body)
        .map_err(|e| e.to_string())?;
    response
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE)
        .read_to_vec()
        .map_err(|e| e.to_string())
}

/// The Prometheus lines of stapling.
pub(super) fn render_metrics(out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP slipstream_ocsp_responses_stapled_total OCSP responses fetched, checked and stapled.\n\
         # TYPE slipstream_ocsp_responses_stapled_total counter\n\
         slipstream_ocsp_responses_stapled_total {}\n\
         # HELP slipstream_ocsp_fetch_failures_total OCSP fetches that failed or whose response was refused.\n\
         # TYPE slipstream_ocsp_fetch_failures_total counter\n\
         slipstream_ocsp_fetch_failures_total {}",
        STAPLED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed)
    );
}
