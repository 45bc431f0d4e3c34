//! The admin listener: `/metrics` (Prometheus text: the counters, gauges, histograms and the
//! per-route and per-server figures), `/status` (nginx's stub_status; `?format=json` for more)
//! and `/health`. It runs on its own thread, away from the workers, and sums their shards when
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

/// What `/metrics` reads.
#[derive(Clone)]
pub struct Sources {
    /// The process counters.
    pub metrics: Metrics,
    /// Further figures, rendered after the counters.
    pub more: Render,
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
    let path = loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        let mut storage = header_storage();
        match parse_request(&buf[..filled], &mut storage, buf.len()) {
            Ok(Some(head)) => break head.path.to_string(),
            Ok(None) if filled < buf.len() => continue,
            _ => return,
        }
    };
    let (status, kind, body) = page(&path, &sources);
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// The status line, content type and body for an admin path.
fn page(path: &str, sources: &Sources) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain";
    match path {
        "/metrics" => {
            let mut text = sources.metrics.render();
            (sources.more)(&mut text);
            ("200 OK", "text/plain; version=0.0.4", text)
        }
        "/status" => ("200 OK", TEXT, status::stub_status(&sources.metrics)),
        "/status?format=json" => ("200 OK", "application/json", status::json(&sources.metrics)),
        "/health" => ("200 OK", TEXT, "ok\n".to_string()),
        _ => ("404 Not Found", TEXT, "not found\n".to_string()),
    }
}
