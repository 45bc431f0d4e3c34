//! The admin listener: `/metrics` (Prometheus text: the counters, gauges, histograms and the
//! per-route, per-server and per-cache-zone figures), `/status` (nginx's stub_status;
//! `?format=json` for more), `/health`, and `POST /cache/purge` (the response caches'
//! purges, [`crate::cache::admin`]). It runs on its own thread, away from the workers, and sums their shards when
//! asked; it binds to loopback unless configured otherwise.

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

/// What the admin pages read.
#[derive(Clone)]
pub struct Sources {
    /// The process counters.
    pub metrics: Metrics,
    /// Further figures, rendered after the counters.
    pub more: Render,
    /// The response caches, for purges and their figures.
    pub caches: Caches,
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
    let (method, path) = loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        let mut storage = header_storage();
        match parse_request(&buf[..filled], &mut storage, buf.len()) {
            Ok(Some(head)) => break (head.method.to_string(), head.path.to_string()),
            Ok(None) if filled < buf.len() => continue,
            _ => return,
        }
    };
    let (status, kind, body) = match path.split_once('?') {
        Some(("/cache/purge", query)) => purge(&method, query, &sources),
        _ => page(&path, &sources),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
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

/// The status line, content type and body for an admin path.
fn page(path: &str, sources: &Sources) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain";
    match path {
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
