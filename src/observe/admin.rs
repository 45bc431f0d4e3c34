//! The admin listener: the dashboard (`/`, `/dashboard.js`, `/api/stats`:
//! [`super::dashboard`]), `/metrics` (Prometheus text: the counters, gauges, histograms and the
//! per-route, per-server and per-cache-zone figures), `/status` (nginx's stub_status;
//! `?format=json` for more), `/health`, and `POST /cache/purge` (the response caches' purges,
//! [`crate::cache::admin`]; refused when a browser says the request comes from another site).
//! It runs on its own thread, away from the workers, and sums their shards when asked; it binds
//! to loopback unless configured otherwise.

use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::http1::parse_request;
use crate::http1::request::header_storage;
use crate::observe::metrics::Metrics;
use crate::observe::status;

/// Appends more lines to the exposition (the per-server figures, from `upstream`).
pub type Render = Arc<dyn Fn(&mut String) + Send + Sync>;

/// The running config's cache zones.
pub type Caches = Arc<dyn Fn() -> Vec<Arc<crate::cache::zone::Zone>> + Send + Sync>;

/// What the running config asks of the host, for the dashboard's doctor findings.
pub type Demand = Arc<dyn Fn() -> crate::observe::doctor::Demand + Send + Sync>;

/// What the admin pages read.
#[derive(Clone)]
pub struct Sources {
    /// The process counters.
    pub metrics: Metrics,
    /// Further figures, rendered after the counters.
    pub more: Render,
    /// The response caches, for purges and their figures.
    pub caches: Caches,
    /// The running config's demand on the host.
    pub demand: Demand,
}

/// Starts the admin thread on an already bound listener.
pub fn spawn(
    listener: StdListener,
    metrics: Sources,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("admin runtime: {e}"),
            };
            rt.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    tokio::select! {
                        r = listener.accept() => if let Ok((stream, _)) = r {
                            tokio::spawn(answer(stream, metrics.clone()));
                        },
                        _ = shutdown.changed() => break,
                    }
                }
            });
        })
}

async fn answer(mut stream: tokio::net::TcpStream, sources: Sources) {
    let mut buf = vec![0u8; 8192];
    let mut filled = 0;
    let (method, path, foreign) = loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        let mut storage = header_storage();
        match parse_request(&buf[..filled], &mut storage, buf.len()) {
            Ok(Some(head)) => {
                let foreign = cross_site(head.headers);
                break (head.method.to_string(), head.path.to_string(), foreign);
            }
            Ok(None) if filled < buf.len() => continue,
            _ => return,
        }
    };
    let (status, kind, body) = match path.split_once('?') {
        Some(("/cache/purge", _)) if foreign => (
            "403 Forbidden",
            "application/json",
            "{\"error\":\"a request from another site changes nothing here\"}\n".to_string(),
        ),
        Some(("/cache/purge", query)) => purge(&method, query, &sources),
        _ => page(&path, &sources),
    };
    if path.starts_with("/cache/purge") {
        tracing::info!("admin: {method} {path}: {status}");
    }
    let extra = match path.as_str() {
        "/" | "/dashboard.js" => format!(
            "Content-Security-Policy: {}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n",
            super::dashboard::POLICY
        ),
        "/api/stats" => "Cache-Control: no-store\r\n".to_string(),
        _ => String::new(),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// A purge: `POST` (or `PURGE`, `DELETE`) `/cache/purge?zone=Z&key=K` or `?prefix=P`; the
/// answer says how many keys went, as JSON. In a fleet it goes to every other instance too.
fn purge(method: &str, query: &str, sources: &Sources) -> (&'static str, &'static str, String) {
    const JSON: &str = "application/json";
    if !matches!(method, "POST" | "PURGE" | "DELETE") {
        return (
            "405 Method Not Allowed",
            JSON,
            "{\"error\":\"POST\"}\n".into(),
        );
    }
    let asked = crate::cache::admin::parse_purge(query);
    match asked.and_then(|p| {
        crate::cache::admin::purge(&(sources.caches)(), &p).map_err(|_| "no such cache zone")
    }) {
        Ok(n) => {
            super::cluster::broadcast_purge(query);
            ("200 OK", JSON, format!("{{\"purged\":{n}}}\n"))
        }
        Err(e) => ("400 Bad Request", JSON, format!("{{\"error\":\"{e}\"}}\n")),
    }
}

/// Whether a browser says the request comes from another site (`Sec-Fetch-Site: cross-site`
/// or `same-site`, or an `Origin` that is not this listener's `Host`): such a request may not
/// change state (a page elsewhere posting to a loopback admin listener).
fn cross_site(headers: &[httparse::Header<'_>]) -> bool {
    let field = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if let Some(site) = field("sec-fetch-site") {
        return site != "same-origin" && site != "none";
    }
    match (field("origin"), field("host")) {
        (Some(origin), Some(host)) => {
            let origin = origin.split_once("://").map_or(origin.as_str(), |(_, o)| o);
            origin != host
        }
        (Some(_), None) => true,
        _ => false,
    }
}

/// The status line, content type and body for an admin path.
fn page(path: &str, sources: &Sources) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain";
    match path {
        "/" => (
            "200 OK",
            "text/html; charset=utf-8",
            super::dashboard::PAGE.to_string(),
        ),
        "/dashboard.js" => (
            "200 OK",
            "text/javascript; charset=utf-8",
            super::dashboard::SCRIPT.to_string(),
        ),
        "/api/stats" => {
            let mut text = sources.metrics.render();
            (sources.more)(&mut text);
            crate::observe::caches::render(&(sources.caches)(), &mut text);
            let status: serde_json::Value = status::value(&sources.metrics);
            let findings = super::doctor::for_dashboard((sources.demand)(), &status);
            let doctor = super::doctor::to_values(&findings);
            let body = super::dashboard::stats(&text, status, doctor);
            ("200 OK", "application/json", body)
        }
        "/metrics" => {
            let mut text = sources.metrics.render();
            (sources.more)(&mut text);
            crate::observe::caches::render(&(sources.caches)(), &mut text);
            ("200 OK", "text/plain; version=0.0.4", text)
        }
        "/status" => ("200 OK", TEXT, status::stub_status(&sources.metrics)),
        "/status?format=json" => ("200 OK", "application/json", status::json(&sources.metrics)),
        "/health" => ("200 OK", TEXT, "ok\n".to_string()),
        _ => ("404 Not Found", TEXT, "not found\n".to_string()),
    }
}
