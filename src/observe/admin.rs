//! The admin listener: the dashboard (`/`, `/dashboard.js`, `/api/stats`:
//! [`super::dashboard`]), `/metrics` (Prometheus text: the counters, gauges, histograms and the
//! per-route, per-server and per-cache-zone figures), `/status` (nginx's stub_status;
//! `?format=json` for more), `/health`, and `POST /cache/purge` (the response caches' purges,
//! [`crate::cache::admin`]; refused when a browser says the request comes from another site).
//! It runs on its own thread, away from the workers, and sums their shards when asked; it binds
//! to loopback unless configured otherwise.

use std::net::{SocketAddr, TcpListener as StdListener};
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

/// The running config's `admin_token_file` token, if set.
pub type Token = Arc<dyn Fn() -> Option<Arc<str>> + Send + Sync>;

/// The active checks' last failures (the upstream fleet's `check_failures`).
pub type Checks = Arc<dyn Fn() -> Vec<serde_json::Value> + Send + Sync>;

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
    /// The health checks' last failures, for the dashboard.
    pub checks: Checks,
    /// The credential state changes need; none: they are refused.
    pub token: Token,
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
                        r = listener.accept() => if let Ok((stream, peer)) = r {
                            tokio::spawn(answer(stream, peer, metrics.clone()));
                        },
                        _ = shutdown.changed() => break,
                    }
                }
            });
        })
}

async fn answer(mut stream: tokio::net::TcpStream, peer: SocketAddr, sources: Sources) {
    let mut buf = vec![0u8; 8192];
    let mut filled = 0;
    let (method, path, refusal) = loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        let mut storage = header_storage();
        match parse_request(&buf[..filled], &mut storage, buf.len()) {
            Ok(Some(head)) => {
                let refusal = change_refused(head.headers, (sources.token)().as_deref());
                break (head.method.to_string(), head.path.to_string(), refusal);
            }
            Ok(None) if filled < buf.len() => continue,
            _ => return,
        }
    };
    let (status, kind, body) = match path.split_once('?') {
        Some(("/cache/purge", _)) if refusal.is_some() => {
            let (status, reason) = refusal.unwrap_or_default();
            let body = serde_json::json!({ "error": reason }).to_string() + "\n";
            (status, "application/json", body)
        }
        Some(("/cache/purge", query)) => purge(&method, query, &sources),
        _ => page(&path, &sources),
    };
    if path.starts_with("/cache/purge") {
        tracing::warn!("admin: {method} {path} from {peer}: {status}");
    }
    let extra = match (path.as_str(), status) {
        ("/" | "/dashboard.js", _) => format!(
            "Content-Security-Policy: {}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n",
            super::dashboard::POLICY
        ),
        ("/api/stats", _) => "Cache-Control: no-store\r\n".to_string(),
        (_, UNAUTHORIZED) => "WWW-Authenticate: Bearer realm=\"slipstream admin\"\r\n".into(),
        _ => String::new(),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

const UNAUTHORIZED: &str = "401 Unauthorized";

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

/// Why a state-changing request (a purge) is refused, if it is: state changes are off
/// without `admin_token_file` (403); a browser's request from another site, or one naming this
/// listener by a host name (a page whose name was rebound to this address), is refused (403);
/// a request without the token in `Authorization: Bearer` is refused (401).
fn change_refused(
    headers: &[httparse::Header<'_>],
    token: Option<&str>,
) -> Option<(&'static str, &'static str)> {
    const FORBIDDEN: &str = "403 Forbidden";
    let Some(token) = token else {
        return Some((
            FORBIDDEN,
            "state changes are off on this admin listener: set admin_token_file to allow them",
        ));
    };
    let field = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    if cross_site(&field) {
        return Some((
            FORBIDDEN,
            "a request from another site changes nothing here",
        ));
    }
    let sent = field("authorization");
    let sent = sent.as_deref().and_then(|v| {
        let (scheme, value) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| value.trim())
    });
    match sent {
        Some(sent) if same_secret(sent.as_bytes(), token.as_bytes()) => None,
        _ => Some((
            UNAUTHORIZED,
            "send the admin token: Authorization: Bearer TOKEN",
        )),
    }
}

/// Whether a browser says the request comes from another site (`Sec-Fetch-Site: cross-site`
/// or `same-site`, or an `Origin` that is not this listener's `Host`), or sends it to this
/// listener by a host name other than `localhost` (DNS rebinding: a page elsewhere whose name
/// now resolves to this address is "same-origin" to the browser). Tools send neither
/// `Sec-Fetch-Site` nor `Origin` and are not browsers here.
fn cross_site(field: &dyn Fn(&str) -> Option<String>) -> bool {
    let host = field("host").map(|h| h.to_ascii_lowercase());
    let origin = field("origin").map(|o| o.to_ascii_lowercase());
    let site = field("sec-fetch-site").map(|s| s.to_ascii_lowercase());
    if site.is_none() && origin.is_none() {
        return false;
    }
    if !host.as_deref().is_some_and(names_this_host) {
        return true;
    }
    if let Some(site) = site {
        return site != "same-origin" && site != "none";
    }
    match (origin, host) {
        (Some(origin), Some(host)) => {
            let origin = origin.split_once("://").map_or(origin.as_str(), |(_, o)| o);
            origin != host
        }
        _ => true,
    }
}

/// Whether a `Host` value names this host without DNS: an IP literal or `localhost`, with or
/// without a port.
fn names_this_host(host: &str) -> bool {
    if host.parse::<SocketAddr>().is_ok() || host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            name
        } else {
            host
        }
    });
    name == "localhost"
        || name
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok()
}

/// Compares two secrets in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
            let body = super::dashboard::stats(&text, status, doctor, (sources.checks)());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(fields: &[(&str, &str)], token: Option<&str>) -> Option<&'static str> {
        let headers: Vec<httparse::Header<'_>> = fields
            .iter()
            .map(|(name, value)| httparse::Header {
                name,
                value: value.as_bytes(),
            })
            .collect();
        change_refused(&headers, token).map(|(status, _)| status)
    }

    #[test]
    fn a_change_needs_the_switch_and_the_token() {
        let token = Some("0123456789abcdef0123");
        let bearer = ("Authorization", "Bearer 0123456789abcdef0123");
        let host = ("Host", "127.0.0.1:9901");
        assert_eq!(refused(&[host, bearer], None), Some("403 Forbidden"));
        assert_eq!(refused(&[host, bearer], token), None);
        assert_eq!(
            refused(
                &[host, ("authorization", "bearer 0123456789abcdef0123")],
                token
            ),
            None
        );
        assert_eq!(refused(&[host], token), Some(UNAUTHORIZED));
        let wrong = ("Authorization", "Bearer 0123456789abcdef0124");
        assert_eq!(refused(&[host, wrong], token), Some(UNAUTHORIZED));
        let basic = ("Authorization", "Basic 0123456789abcdef0123");
        assert_eq!(refused(&[host, basic], token), Some(UNAUTHORIZED));
    }

    #[test]
    fn a_browser_elsewhere_or_by_a_rebound_name_changes_nothing() {
        let token = Some("0123456789abcdef0123");
        let bearer = ("Authorization", "Bearer 0123456789abcdef0123");
        let same = ("Sec-Fetch-Site", "same-origin");
        for host in [
            "127.0.0.1:9901",
            "localhost:9901",
            "[::1]:9901",
            "localhost",
            "10.0.0.1",
        ] {
            assert_eq!(
                refused(&[("Host", host), same, bearer], token),
                None,
                "{host}"
            );
        }
        // A page at evil.example whose name now resolves to 127.0.0.1 is same-origin to it.
        let rebound = ("Host", "evil.example:9901");
        assert_eq!(
            refused(&[rebound, same, bearer], token),
            Some("403 Forbidden")
        );
        let origin = ("Origin", "http://evil.example:9901");
        assert_eq!(
            refused(&[rebound, origin, bearer], token),
            Some("403 Forbidden")
        );
        let host = ("Host", "127.0.0.1:9901");
        let cross = ("Sec-Fetch-Site", "cross-site");
        assert_eq!(
            refused(&[host, cross, bearer], token),
            Some("403 Forbidden")
        );
        let other = ("Origin", "http://evil.example");
        assert_eq!(
            refused(&[host, other, bearer], token),
            Some("403 Forbidden")
        );
        let own = ("Origin", "http://127.0.0.1:9901");
        assert_eq!(refused(&[host, own, bearer], token), None);
        // A tool naming the host by name (no browser fields) is served.
        assert_eq!(
            refused(&[("Host", "admin.internal:9901"), bearer], token),
            None
        );
    }
}
