//! A fleet member's standing (`[cluster]`): whether etcd answers, the shared configuration's
//! revision served, refusals and the last one's reason. `cluster/` writes it from its threads;
//! `/metrics`, `/status` and `doctor` read it. Process-wide atomics: nothing on the request path
//! touches them.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static CONNECTED: AtomicBool = AtomicBool::new(false);
static REVISION: AtomicI64 = AtomicI64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static LIMIT_SENT: AtomicU64 = AtomicU64::new(0);
static LIMIT_UNSENT: AtomicU64 = AtomicU64::new(0);
static LIMIT_APPLIED: AtomicU64 = AtomicU64::new(0);
static LIMIT_IGNORED: AtomicU64 = AtomicU64::new(0);
static LAST_REFUSAL: Mutex<String> = Mutex::new(String::new());
static PURGES: Mutex<Option<std::sync::mpsc::Sender<String>>> = Mutex::new(None);

/// Where the admin listener's purges go to reach the rest of the fleet.
pub fn set_purge_sink(sink: std::sync::mpsc::Sender<String>) {
    if let Ok(mut p) = PURGES.lock() {
        *p = Some(sink);
    }
}

/// A purge done here (its query, as the admin listener took it), for every other instance.
pub fn broadcast_purge(query: &str) {
    if let Ok(p) = PURGES.lock() {
        if let Some(sink) = p.as_ref() {
            let _ = sink.send(query.to_string());
        }
    }
}

/// This process is a fleet member: its standing is shown from now on.
pub fn activate() {
    ACTIVE.store(true, Relaxed);
}

/// etcd answered (`true`) or every endpoint failed (`false`, counted).
pub fn set_connected(up: bool) {
    if !up {
        FAILURES.fetch_add(1, Relaxed);
    }
    CONNECTED.store(up, Relaxed);
}

/// Whether etcd answered last time it was asked.
pub fn connected() -> bool {
    CONNECTED.load(Relaxed)
}

/// The shared configuration's revision now served (a refusal before it is forgotten).
pub fn served(revision: i64) {
    REVISION.store(revision, Relaxed);
    if let Ok(mut last) = LAST_REFUSAL.lock() {
        last.clear();
    }
}

/// A shared configuration refused, and why (the running one keeps serving).
pub fn refused(reason: &str) {
    REFUSED.fetch_add(1, Relaxed);
    if let Ok(mut last) = LAST_REFUSAL.lock() {
        reason.clone_into(&mut last);
    }
}

/// Rate limit count records published to the fleet.
pub fn limit_sent(records: u64) {
    LIMIT_SENT.fetch_add(records, Relaxed);
}

/// Rate limit count records etcd did not take (the fleet saw those requests late or never).
pub fn limit_unsent(records: u64) {
    LIMIT_UNSENT.fetch_add(records, Relaxed);
}

/// Other instances' count records added here, and those skipped (a zone unknown here, not
/// shared, or of another size).
pub fn limit_records(applied: u64, ignored: u64) {
    LIMIT_APPLIED.fetch_add(applied, Relaxed);
    LIMIT_IGNORED.fetch_add(ignored, Relaxed);
}

/// `/status`'s `cluster` object (`null` outside a fleet).
pub fn status() -> serde_json::Value {
    if !ACTIVE.load(Relaxed) {
        return serde_json::Value::Null;
    }
    serde_json::json!({
        "connected": CONNECTED.load(Relaxed),
        "revision": REVISION.load(Relaxed),
        "etcd_failures": FAILURES.load(Relaxed),
        "refused": REFUSED.load(Relaxed),
        "limit_records": {
            "sent": LIMIT_SENT.load(Relaxed),
            "unsent": LIMIT_UNSENT.load(Relaxed),
            "applied": LIMIT_APPLIED.load(Relaxed),
            "ignored": LIMIT_IGNORED.load(Relaxed),
        },
        "last_refusal": LAST_REFUSAL.lock().map(|l| l.clone()).unwrap_or_default(),
    })
}

/// The Prometheus lines of the fleet member's standing (none outside a fleet).
pub fn render_metrics(out: &mut String) {
    if !ACTIVE.load(Relaxed) {
        return;
    }
    let _ = writeln!(
        out,
        "# HELP slipstream_cluster_etcd_connected Whether etcd answered the last call (1) or no endpoint did (0).\n\
         # TYPE slipstream_cluster_etcd_connected gauge\n\
         slipstream_cluster_etcd_connected {}\n\
         # HELP slipstream_cluster_config_revision The etcd revision of the shared configuration served.\n\
         # TYPE slipstream_cluster_config_revision gauge\n\
         slipstream_cluster_config_revision {}\n\
         # HELP slipstream_cluster_etcd_failures_total Calls to etcd that no endpoint answered.\n\
         # TYPE slipstream_cluster_etcd_failures_total counter\n\
         slipstream_cluster_etcd_failures_total {}\n\
         # HELP slipstream_cluster_configs_refused_total Shared configurations refused (the running one kept serving).\n\
         # TYPE slipstream_cluster_configs_refused_total counter\n\
         slipstream_cluster_configs_refused_total {}\n\
         # HELP slipstream_cluster_limit_records_total Fleet rate limit count records (one key's requests over one second) by what became of them.\n\
         # TYPE slipstream_cluster_limit_records_total counter\n\
         slipstream_cluster_limit_records_total{{outcome=\"sent\"}} {}\n\
         slipstream_cluster_limit_records_total{{outcome=\"unsent\"}} {}\n\
         slipstream_cluster_limit_records_total{{outcome=\"applied\"}} {}\n\
         slipstream_cluster_limit_records_total{{outcome=\"ignored\"}} {}",
        u8::from(CONNECTED.load(Relaxed)),
        REVISION.load(Relaxed),
        FAILURES.load(Relaxed),
        REFUSED.load(Relaxed),
        LIMIT_SENT.load(Relaxed),
        LIMIT_UNSENT.load(Relaxed),
        LIMIT_APPLIED.load(Relaxed),
        LIMIT_IGNORED.load(Relaxed),
    );
}
