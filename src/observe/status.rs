//! `/status`: nginx's stub_status text, byte for byte (so existing dashboards and scripts that
//! scrape it keep working), and a JSON form with more.

use std::sync::Mutex;

use super::metrics::{Counter, Metrics};

/// The last reload's outcome: when (ms since the Unix epoch), and the errors of a refusal.
static LAST_RELOAD: Mutex<Option<(u64, Option<String>)>> = Mutex::new(None);

/// Records a reload's outcome (SIGHUP, or a fleet's pushed configuration) for `/status` and
/// the dashboard: `Err` carries the errors the running config stayed for.
pub fn record_reload(outcome: &Result<(), String>) {
    let at = super::unix_millis();
    *LAST_RELOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((at, outcome.clone().err()));
}

fn last_reload() -> serde_json::Value {
    let last = LAST_RELOAD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match last {
        Some((at, errors)) => serde_json::json!({
            "at_ms": at,
            "ok": errors.is_none(),
            "errors": errors,
        }),
        None => serde_json::Value::Null,
    }
}

/// nginx's stub_status text: active connections, accepts, handled, requests, and connections
/// reading, writing and waiting.
pub fn stub_status(m: &Metrics) -> String {
    let c = m.connections();
    let accepts = m.total(Counter::ConnectionsAccepted);
    let requests = m.total(Counter::Requests);
    // Every accepted connection is handled: slipstream pauses accepting at its limit rather
    // than accept and drop.
    format!(
        "Active connections: {} \nserver accepts handled requests\n {accepts} {accepts} {requests} \n\
         Reading: {} Writing: {} Waiting: {} \n",
        c.active, c.reading, c.writing, c.waiting
    )
}

/// The JSON form: connections, requests by class, the traps' counters, reloads.
pub fn json(m: &Metrics) -> String {
    let mut text = value(m).to_string();
    text.push('\n');
    text
}

/// The JSON form as a value (the dashboard's `/api/stats` embeds it).
pub fn value(m: &Metrics) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    let c = m.connections();
    let t = |c| m.total(c);
    let process = &m.process;
    serde_json::json!({
        "connections": {
            "active": c.active,
            "reading": c.reading,
            "writing": c.writing,
            "waiting": c.waiting,
            "accepted": t(Counter::ConnectionsAccepted),
            "handled": t(Counter::ConnectionsAccepted),
            "accept_paused_at_limit": t(Counter::AcceptPaused),
            "accept_errors": t(Counter::AcceptErrors),
        },
        "requests": {
            "total": t(Counter::Requests),
            "responses_ok": t(Counter::ResponsesOk),
            "responses_4xx": t(Counter::Responses4xx),
            "responses_5xx": t(Counter::Responses5xx),
            "responses_5xx_generated": t(Counter::Responses5xxGenerated),
            "responses_5xx_from_upstream": t(Counter::Responses5xxUpstream),
            "client_closed_499": t(Counter::ClientClosed),
        },
        "upstream": {
            "connects": t(Counter::UpstreamConnects),
            "reused": t(Counter::UpstreamReused),
            "connect_errors": t(Counter::UpstreamConnectErrors),
            "ports_exhausted_eaddrnotavail": t(Counter::UpstreamPortsExhausted),
            "no_live_servers": t(Counter::UpstreamNoLiveServers),
            "queue_timeouts": t(Counter::UpstreamQueueTimeouts),
        },
        "workers": {
            "uring_unavailable": t(Counter::UringUnavailable),
            "uring_failed": t(Counter::UringFailed),
            "uring_refused_because": crate::uring::refused(),
        },
        "access_log": {
            "lines": t(Counter::AccessLogLines),
            "dropped": t(Counter::AccessLogLinesDropped),
        },
        "acme": crate::acme::statuses(),
        "cluster": super::cluster::status(),
        "config": {
            "generation": process.generation.load(Relaxed),
            "reloads_ok": process.reloads_ok.load(Relaxed),
            "reloads_failed": process.reloads_failed.load(Relaxed),
            "last_reload": last_reload(),
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn stub_status_has_nginx_layout() {
        let m = super::Metrics::default();
        let shard = m.new_shard();
        shard.add(super::Counter::ConnectionsAccepted, 3);
        shard.add(super::Counter::Requests, 7);
        assert_eq!(
            super::stub_status(&m),
            "Active connections: 0 \nserver accepts handled requests\n 3 3 7 \nReading: 0 Writing: 0 Waiting: 0 \n"
        );
    }
}
