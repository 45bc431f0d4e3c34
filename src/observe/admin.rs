//! The admin listener: serves the counters and the per-server figures as Prometheus text at
//! `/metrics`. It runs on its own thread, away from the workers.

use std::fmt::Write;
use std::net::TcpListener as StdListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::SharedConfig;
use crate::http1::parse_request;
use crate::http1::request::header_storage;
use crate::observe::metrics::Metrics;
use crate::upstream::stats::Failure;
use crate::upstream::Fleet;

/// What `/metrics` reads.
#[derive(Clone)]
pub struct Sources {
    /// The process counters.
    pub metrics: Metrics,
    /// The server table and per-server figures.
    pub fleet: Arc<Fleet>,
    /// The config in force (group names).
    pub shared: Arc<SharedConfig>,
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
    let (status, body) = if path == "/metrics" {
        let mut text = sources.metrics.render();
        render_servers(&sources, &mut text);
        ("200 OK", text)
    } else {
        ("404 Not Found", "not found\n".to_string())
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// Per-server lines: state, requests, in flight, failures by kind, ejections, check results.
fn render_servers(sources: &Sources, out: &mut String) {
    let config = sources.shared.current();
    let table = sources.fleet.table();
    let checks = sources
        .fleet
        .checks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let _ = writeln!(out, "# TYPE slipstream_upstream_server_state gauge");
    sources.fleet.stats.for_each(|(group, addr), workers| {
        let labels = format!("group=\"{group}\",server=\"{addr}\"");
        let sum = |f: &dyn Fn(&crate::upstream::stats::ServerStats) -> u64| -> u64 {
            workers.iter().map(|(_, s)| f(s)).sum()
        };
        let in_flight = sum(&|s| s.in_flight.load(Ordering::Relaxed));
        let member = config
            .upstreams
            .iter()
            .position(|g| g.name == *group)
            .and_then(|i| table.groups.get(i))
            .and_then(|members| members.iter().find(|m| m.addr == *addr));
        let ejected = workers
            .iter()
            .any(|(_, s)| s.ejected.load(Ordering::Relaxed));
        let state = match member {
            None if in_flight > 0 => "draining",
            None => "removed",
            Some(m) if !m.up => "down",
            Some(_) if ejected => "ejected",
            Some(_) => "up",
        };
        for s in ["up", "down", "ejected", "draining", "removed"] {
            let v = u8::from(s == state);
            let _ = writeln!(
                out,
                "slipstream_upstream_server_state{{{labels},state=\"{s}\"}} {v}"
            );
        }
        let requests = sum(&|s| s.requests.load(Ordering::Relaxed));
        let ejections = sum(&|s| s.ejections.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "slipstream_upstream_server_requests_total{{{labels}}} {requests}"
        );
        let _ = writeln!(
            out,
            "slipstream_upstream_server_in_flight{{{labels}}} {in_flight}"
        );
        let _ = writeln!(
            out,
            "slipstream_upstream_server_ejections_total{{{labels}}} {ejections}"
        );
        for f in <Failure as strum::IntoEnumIterator>::iter() {
            let n = sum(&|s| s.failures[f as usize].load(Ordering::Relaxed));
            let kind = f.label();
            let _ = writeln!(
                out,
                "slipstream_upstream_server_failures_total{{{labels},kind=\"{kind}\"}} {n}"
            );
        }
        if let Some(c) = checks.get(&(group.clone(), *addr)) {
            let ok = u8::from(c.last_ok);
            let _ = writeln!(out, "slipstream_upstream_server_check_ok{{{labels}}} {ok}");
            let _ = writeln!(
                out,
                "slipstream_upstream_server_checks_total{{{labels}}} {}",
                c.checks
            );
            let _ = writeln!(
                out,
                "slipstream_upstream_server_check_failures_total{{{labels}}} {}",
                c.failures
            );
        }
    });
}
