//! Upstream groups in the config: their servers (`"host:port weight=3 backup"`), how a server
//! is chosen, passive and active health, retries, and name re-resolution. Parsed and validated
//! here; the runtime side lives in `crate::upstream`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::fastcgi::{FastCgi, FileFastCgi, DEFAULT_FASTCGI_MAX_CONNS};
use super::{Size, Validator};
use crate::net::Address;

/// Default idle keep-alive connections per upstream server per worker.
pub const DEFAULT_UPSTREAM_KEEPALIVE: usize = 128;

/// The PROXY protocol version a group's connections start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendProxy {
    /// The text line (HAProxy's `send-proxy`).
    V1,
    /// The binary header (HAProxy's `send-proxy-v2`).
    V2,
}

/// How a group speaks to its servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1.
    #[default]
    Http,
    /// HTTP/2 over TLS (ALPN `h2`): many requests at once on each connection.
    H2,
    /// HTTP/2 over plain TCP with prior knowledge (h2c; gRPC servers without TLS).
    H2c,
    /// FastCGI (PHP-FPM and the like), one request per connection at a time.
    FastCgi,
}

impl Protocol {
    /// Whether requests go to the servers as HTTP/2 streams.
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::H2 | Protocol::H2c)
    }
}

/// A named set of upstream servers with their connection, balancing and health settings.
#[derive(Debug, Clone)]
pub struct UpstreamGroup {
    /// Name used by routes.
    pub name: String,
    /// Servers as configured; a name may stand for several addresses.
    pub servers: Vec<ServerSpec>,
    /// How a server is chosen for each request.
    pub balance: Balance,
    /// Bounded-load factor of consistent hashing: no server takes more than this multiple of
    /// the average load (in flight) before a key spills to the next server on the ring.
    pub hash_load_factor: f64,
    /// Failures within `fail_timeout` that eject a server (passive health).
    pub max_fails: u32,
    /// The window failures are counted in, and how long an ejected server stays out.
    pub fail_timeout: Duration,
    /// Count 5xx responses as failures for passive health.
    pub fail_on_5xx: bool,
    /// Retries on other servers for a request that failed before any response byte.
    pub retries: u32,
    /// Retries allowed, as a fraction of recent requests (per worker).
    pub retry_budget: f64,
    /// Active health check, if any.
    pub health: Option<HealthCheck>,
    /// How often names are resolved again (zero: only at start).
    pub resolve_interval: Duration,
    /// Idle keep-alive connections kept per server, per worker.
    pub keepalive: usize,
    /// Each connection starts with a PROXY protocol header naming the client (`send_proxy`):
    /// such a connection carries one client's requests, so it is never pooled.
    pub send_proxy: Option<SendProxy>,
    /// Time allowed to establish a connection.
    pub connect_timeout: Duration,
    /// Time allowed between two reads from the upstream.
    pub read_timeout: Duration,
    /// Time allowed between two writes to the upstream.
    pub send_timeout: Duration,
    /// How long an idle pooled connection is kept.
    pub idle_timeout: Duration,
    /// HTTP or FastCGI.
    pub protocol: Protocol,
    /// Most connections open to one server, over all workers (0: no cap); each worker may
    /// open its share. Requests beyond it wait in line for a connection.
    pub max_conns: usize,
    /// How long a request waits for a connection under `max_conns` (503 after).
    pub queue_timeout: Duration,
    /// The FastCGI settings, when the protocol is FastCGI.
    pub fastcgi: Option<FastCgi>,
    /// TLS to the servers (`https://` servers or `tls = true`).
    pub tls: Option<Arc<crate::tls::client::UpstreamTls>>,
}

/// One configured server: an address, or a name resolved to every address it has.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Host as written (an IP literal or a DNS name).
    pub host: String,
    /// Port.
    pub port: u16,
    /// The addresses found at load time (one for a literal address or a unix socket).
    pub addrs: Vec<Address>,
    /// Relative share of requests (at least 1).
    pub weight: u32,
    /// Used only when no primary server is available.
    pub backup: bool,
    /// Time over which a server that comes back ramps up to its full weight (zero: at once).
    pub slow_start: Duration,
    /// Written as `https://`: the group speaks TLS to it.
    pub tls: bool,
}

impl ServerSpec {
    /// True when the host is a name to resolve again over time, not a literal address or a
    /// unix socket.
    pub fn is_name(&self) -> bool {
        !self.host.starts_with(UNIX_PREFIX) && self.host.parse::<IpAddr>().is_err()
    }
}

/// The balancing algorithm of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round robin (nginx's).
    RoundRobin,
    /// Fewest requests in flight relative to weight.
    LeastConn,
    /// Two random servers, the one with the lower latency EWMA times (in flight + 1) / weight.
    P2c,
    /// Consistent hashing on a request key, with bounded load.
    Hash(HashKey),
}

/// What consistent hashing hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's IP address.
    ClientIp,
    /// The request target (path and query).
    Uri,
    /// A request header (name in lower case).
    Header(String),
    /// A cookie by name.
    Cookie(String),
}

/// An active health check, run once per process for each server of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What is checked.
    pub probe: Probe,
    /// Time between checks of one server.
    pub interval: Duration,
    /// Time allowed for one check.
    pub timeout: Duration,
    /// Consecutive successes that bring a down server up.
    pub rise: u32,
    /// Consecutive failures that take an up server down.
    pub fall: u32,
    /// Servers start down until a check passes.
    pub start_down: bool,
    /// Bytes an HTTP check writes first: a LOCAL PROXY header for a `send_proxy` group (its
    /// servers expect one on every connection).
    pub preface: Vec<u8>,
}

/// The request of a health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A TCP connection that opens is healthy.
    Tcp,
    /// An HTTP/1.1 request whose status falls in `expect` is healthy.
    Http {
        /// Request method.
        method: String,
        /// Request path (starts with `/`).
        path: String,
        /// Host header (the server's address when not set).
        host: Option<String>,
        /// Healthy status range, inclusive.
        expect: (u16, u16),
    },
    /// gRPC's health service (`grpc.health.v1.Health/Check`) must answer SERVING for
    /// `service` (empty: the server as a whole). HTTP/2 groups only.
    Grpc {
        /// The service asked about.
        service: String,
    },
}

impl UpstreamGroup {
    /// A group with default settings.
    pub fn new(name: &str, servers: Vec<ServerSpec>) -> Self {
        UpstreamGroup {
            name: name.to_string(),
            servers,
            balance: Balance::P2c,
            hash_load_factor: 1.25,
            max_fails: 3,
            fail_timeout: Duration::from_secs(10),
            fail_on_5xx: false,
            retries: 2,
            retry_budget: 0.2,
            health: None,
            resolve_interval: Duration::from_secs(10),
            keepalive: DEFAULT_UPSTREAM_KEEPALIVE,
            send_proxy: None,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            protocol: Protocol::Http,
            max_conns: 0,
            queue_timeout: Duration::from_secs(10),
            fastcgi: None,
            tls: None,
        }
    }

    /// Makes the group speak HTTP/2: over TLS (ALPN `h2`, the system's roots) when `tls`,
    /// else h2c with prior knowledge.
    pub fn use_http2(&mut self, tls: bool) -> Result<(), String> {
        if !tls {
            self.protocol = Protocol::H2c;
            return Ok(());
        }
        self.protocol = Protocol::H2;
        let settings = crate::tls::client::ClientSettings {
            verify: true,
            alpn_h2: true,
            ..Default::default()
        };
        let names: Vec<_> = self
            .servers
            .iter()
            .flat_map(|s| s.addrs.iter().map(|a| (a.clone(), s.host.clone())))
            .collect();
        let tls = crate::tls::client::UpstreamTls::build(&settings, &names, None)?;
        self.tls = Some(Arc::new(tls));
        Ok(())
    }

    /// A FastCGI group with default settings.
    pub fn fastcgi(name: &str, servers: Vec<ServerSpec>, fastcgi: FastCgi) -> Self {
        UpstreamGroup {
            protocol: Protocol::FastCgi,
            max_conns: DEFAULT_FASTCGI_MAX_CONNS,
            fastcgi: Some(fastcgi),
            ..UpstreamGroup::new(name, servers)
        }
    }

    /// Connections one of `workers` workers may open to one server (0: no cap): an even
    /// share of `max_conns`, at least one, so that all workers together stay within it
    /// whenever `max_conns` is at least the number of workers.
    pub fn max_conns_per_worker(&self, workers: usize) -> usize {
        match self.max_conns {
            0 => 0,
            n => (n / workers.max(1)).max(1),
        }
    }
}

/// How names in server lines are resolved when the config is loaded.
#[derive(Clone, Copy)]
pub enum LoadResolver {
    /// With this function (the system resolver; the fuzz target's offline one).
    Now(fn(&str) -> Vec<SocketAddr>),
    /// Not at load: the configured DNS servers resolve them when the proxy starts.
    Later,
}

/// How a unix socket address starts in a server line.
pub const UNIX_PREFIX: &str = "unix:";

/// Parses a server line: `HOST:PORT` or `unix:/PATH` followed by options `weight=N`, `backup`,
/// `slow_start=DURATION`. An error says what is wrong.
pub fn parse_server(
    text: &str,
    resolve: LoadResolver,
    default_slow_start: Duration,
) -> Result<ServerSpec, String> {
    let mut words = text.split_whitespace();
    let address = words.next().ok_or("empty server")?;
    let tls = address.starts_with("https://");
    let address = ["http://", "https://", "fastcgi://"]
        .iter()
        .find_map(|scheme| address.strip_prefix(scheme))
        .unwrap_or(address);
    if let Some((scheme, _)) = address.split_once("://") {
        return Err(format!(
            "unsupported scheme {scheme:?} in {text:?}: expected HOST:PORT, http://HOST:PORT, \
             https://HOST:PORT, fastcgi://HOST:PORT or unix:/PATH, e.g. \"http://127.0.0.1:9000\""
        ));
    }
    let (host, port) = if let Some(path) = address.strip_prefix(UNIX_PREFIX) {
        if !path.starts_with('/') {
            return Err(format!(
                "invalid address {address:?}: a unix socket path must be absolute (unix:/run/php/fpm.sock)"
            ));
        }
        (address, 0)
    } else {
        let address = address.strip_suffix('/').unwrap_or(address);
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                format!(
                    "invalid address {address:?}: expected HOST:PORT (e.g. \"127.0.0.1:9000\", \
                     \"[::1]:9000\", \"app.internal:8080\", \"http://127.0.0.1:9000\") or unix:/PATH"
                )
            })?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("invalid address {address:?}: expected HOST:PORT"));
        }
        (host, port)
    };
    let mut spec = ServerSpec {
        host: host.to_string(),
        port,
        addrs: Vec::new(),
        weight: 1,
        backup: false,
        slow_start: default_slow_start,
        tls,
    };
    for word in words {
        match word.split_once('=') {
            Some(("weight", n)) => match n.parse::<u32>() {
                Ok(w) if (1..=10_000).contains(&w) => spec.weight = w,
                _ => return Err(format!("invalid weight {n:?}: use 1 to 10000")),
            },
            Some(("slow_start", d)) => {
                spec.slow_start = super::parse_duration(d)
                    .ok_or_else(|| format!("invalid slow_start {d:?}: use e.g. \"30s\""))?;
            }
            None if word == "backup" => spec.backup = true,
            _ => {
                return Err(format!(
                "unknown server option {word:?} (options: weight=N, backup, slow_start=DURATION)"
            ))
            }
        }
    }
    if let Some(path) = spec.host.strip_prefix(UNIX_PREFIX) {
        spec.addrs = vec![Address::Unix(std::path::Path::new(path).into())];
        return Ok(spec);
    }
    spec.addrs = match (spec.host.parse::<IpAddr>(), resolve) {
        (Ok(ip), _) => vec![Address::Tcp(SocketAddr::new(ip, port))],
        (Err(_), LoadResolver::Now(resolve)) => resolve(&format!("{}:{port}", spec.host))
            .into_iter()
            .map(Address::Tcp)
            .collect(),
        (Err(_), LoadResolver::Later) => return Ok(spec),
    };
    if spec.addrs.is_empty() {
        return Err(format!("host {:?} not found", spec.host));
    }
    Ok(spec)
}

/// Parses a `balance` value and the `hash_key` it may need.
fn parse_balance(balance: &str, hash_key: Option<&str>) -> Result<Balance, String> {
    match balance {
        "round_robin" => Ok(Balance::RoundRobin),
        "least_conn" => Ok(Balance::LeastConn),
        "p2c" => Ok(Balance::P2c),
        "hash" => {
            let key = hash_key.ok_or(
                "balance = \"hash\" needs hash_key: \"client_ip\", \"uri\", \"header:NAME\" or \"cookie:NAME\"",
            )?;
            parse_hash_key(key).map(Balance::Hash)
        }
        other => Err(format!(
            "unknown balance {other:?} (use \"p2c\", \"round_robin\", \"least_conn\" or \"hash\")"
        )),
    }
}

fn parse_hash_key(key: &str) -> Result<HashKey, String> {
    match key.split_once(':') {
        None if key == "client_ip" => Ok(HashKey::ClientIp),
        None if key == "uri" => Ok(HashKey::Uri),
        Some(("header", name)) if valid_token(name) => {
            Ok(HashKey::Header(name.to_ascii_lowercase()))
        }
        Some(("cookie", name)) if valid_token(name) => Ok(HashKey::Cookie(name.to_string())),
        _ => Err(format!(
            "invalid hash_key {key:?}: use \"client_ip\", \"uri\", \"header:NAME\" or \"cookie:NAME\""
        )),
    }
}

fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Parses `"200-399"` or `"200"`.
fn parse_status_range(s: &str) -> Option<(u16, u16)> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let (lo, hi) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
    ((100..=599).contains(&lo) && (lo..=599).contains(&hi)).then_some((lo, hi))
}

// === The file format ===

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileUpstream {
    servers: Spanned<Vec<Spanned<String>>>,
    balance: Option<Spanned<String>>,
    hash_key: Option<Spanned<String>>,
    hash_load_factor: Option<Spanned<f64>>,
    max_fails: Option<u32>,
    fail_timeout: Option<Spanned<String>>,
    fail_on_5xx: Option<bool>,
    retries: Option<Spanned<u32>>,
    retry_budget: Option<Spanned<f64>>,
    slow_start: Option<Spanned<String>>,
    resolve_interval: Option<Spanned<String>>,
    health: Option<FileHealth>,
    keepalive: Option<usize>,
    send_proxy: Option<Spanned<String>>,
    connect_timeout: Option<Spanned<String>>,
    read_timeout: Option<Spanned<String>>,
    send_timeout: Option<Spanned<String>>,
    idle_timeout: Option<Spanned<String>>,
    protocol: Option<Spanned<String>>,
    max_conns: Option<usize>,
    queue_timeout: Option<Spanned<String>>,
    root: Option<Spanned<String>>,
    tls: Option<Spanned<bool>>,
    tls_ca: Option<String>,
    tls_verify: Option<bool>,
    tls_server_name: Option<String>,
    tls_client_cert: Option<String>,
    tls_client_key: Option<String>,
    index: Option<Spanned<String>>,
    front_controller: Option<Spanned<String>>,
    params: Option<BTreeMap<String, String>>,
    max_chunked_body: Option<Spanned<Size>>,
}

impl FileUpstream {
    /// The TLS keys.
    pub(super) fn tls_keys(&self) -> super::upstream_tls::FileUpstreamTls<'_> {
        super::upstream_tls::FileUpstreamTls {
            tls: self.tls.as_ref(),
            ca: self.tls_ca.as_deref(),
            verify: self.tls_verify,
            server_name: self.tls_server_name.as_deref(),
            client_cert: self.tls_client_cert.as_deref(),
            client_key: self.tls_client_key.as_deref(),
        }
    }

    fn fastcgi_keys(&self) -> FileFastCgi {
        FileFastCgi {
            root: self.root.clone(),
            index: self.index.clone(),
            front_controller: self.front_controller.clone(),
            params: self.params.clone(),
            max_chunked_body: self.max_chunked_body.clone(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHealth {
    #[serde(rename = "type")]
    kind: Option<Spanned<String>>,
    method: Option<String>,
    path: Option<Spanned<String>>,
    host: Option<String>,
    expect: Option<Spanned<String>>,
    interval: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    rise: Option<Spanned<u32>>,
    fall: Option<Spanned<u32>>,
    start_down: Option<bool>,
    service: Option<String>,
}

impl Validator<'_> {
    pub(super) fn build_upstreams(
        &mut self,
        upstreams: &BTreeMap<Spanned<String>, FileUpstream>,
    ) -> Vec<UpstreamGroup> {
        upstreams
            .iter()
            .map(|(name, u)| self.build_group(name, u))
            .collect()
    }

    /// `send_proxy = "v1"` or `"v2"`, for HTTP/1.1 groups.
    fn send_proxy(
        &mut self,
        g: &UpstreamGroup,
        value: Option<&Spanned<String>>,
    ) -> Option<SendProxy> {
        let value = value?;
        let version = match value.get_ref().as_str() {
            "v1" => SendProxy::V1,
            "v2" => SendProxy::V2,
            other => {
                let message = format!("send_proxy: {other:?} is \"v1\" or \"v2\"");
                self.error(value.span().start, message);
                return None;
            }
        };
        if g.protocol != Protocol::Http {
            let message = "send_proxy: HTTP/1.1 groups only (an HTTP/2 or FastCGI connection carries many clients)";
            self.error(value.span().start, message);
            return None;
        }
        Some(version)
    }

    fn build_group(&mut self, name: &Spanned<String>, u: &FileUpstream) -> UpstreamGroup {
        let mut g = UpstreamGroup::new(name.get_ref(), Vec::new());
        let slow_start = self.duration(&u.slow_start, Duration::ZERO);
        if u.servers.get_ref().is_empty() {
            let message = format!("upstream {:?} has no servers", name.get_ref());
            self.error(u.servers.span().start, message);
        }
        for s in u.servers.get_ref() {
            let resolve = if self.dns_at_start {
                LoadResolver::Later
            } else {
                LoadResolver::Now(self.resolve)
            };
            match parse_server(s.get_ref(), resolve, slow_start) {
                Ok(spec) => g.servers.push(spec),
                Err(e) => self.error(s.span().start, e),
            }
        }
        if let Some(b) = &u.balance {
            let key = u.hash_key.as_ref().map(|k| k.get_ref().as_str());
            match parse_balance(b.get_ref(), key) {
                Ok(balance) => g.balance = balance,
                Err(e) => {
                    let at = match (&u.hash_key, b.get_ref().as_str()) {
                        (Some(k), "hash") => k.span().start,
                        _ => b.span().start,
                    };
                    self.error(at, e);
                }
            }
        } else if let Some(k) = &u.hash_key {
            self.error(
                k.span().start,
                "hash_key is set but balance is not \"hash\"",
            );
        }
        if let Some(f) = &u.hash_load_factor {
            if *f.get_ref() >= 1.0 && f.get_ref().is_finite() {
                g.hash_load_factor = *f.get_ref();
            } else {
                self.error(f.span().start, "hash_load_factor must be at least 1.0");
            }
        }
        g.max_fails = u.max_fails.unwrap_or(g.max_fails);
        g.fail_timeout = self.duration(&u.fail_timeout, g.fail_timeout);
        g.fail_on_5xx = u.fail_on_5xx.unwrap_or(g.fail_on_5xx);
        if let Some(r) = &u.retries {
            if *r.get_ref() > 10 {
                self.error(r.span().start, "retries must be at most 10");
            }
            g.retries = (*r.get_ref()).min(10);
        }
        if let Some(b) = &u.retry_budget {
            if (0.0..=1.0).contains(b.get_ref()) {
                g.retry_budget = *b.get_ref();
            } else {
                self.error(b.span().start, "retry_budget is a fraction from 0.0 to 1.0");
            }
        }
        g.resolve_interval = self.duration(&u.resolve_interval, g.resolve_interval);
        g.health = u.health.as_ref().and_then(|h| self.build_health(h));
        g.keepalive = u.keepalive.unwrap_or(g.keepalive);
        g.connect_timeout = self.duration(&u.connect_timeout, g.connect_timeout);
        g.read_timeout = self.duration(&u.read_timeout, g.read_timeout);
        g.send_timeout = self.duration(&u.send_timeout, g.send_timeout);
        g.idle_timeout = self.duration(&u.idle_timeout, g.idle_timeout);
        self.build_protocol(&mut g, name, u);
        if let Some(check) = &g.health {
            if matches!(check.probe, Probe::Grpc { .. }) && !g.protocol.is_http2() {
                let at = u.health.as_ref().and_then(|h| h.kind.as_ref());
                let at = at.map_or(name.span().start, |k| k.span().start);
                self.error(at, "a grpc health check needs protocol = \"h2\" or \"h2c\"");
            }
        }
        g.send_proxy = self.send_proxy(&g, u.send_proxy.as_ref());
        if let (Some(version), Some(check)) = (g.send_proxy, g.health.as_mut()) {
            match version {
                SendProxy::V1 => crate::net::proxy_protocol::write_v1_unknown(&mut check.preface),
                SendProxy::V2 => crate::net::proxy_protocol::write_v2_local(&mut check.preface),
            }
        }
        g.tls = self.build_upstream_tls(&g, name, u);
        g.max_conns = u.max_conns.unwrap_or(g.max_conns);
        g.queue_timeout = self.duration(&u.queue_timeout, g.queue_timeout);
        g
    }

    /// `protocol` and, for FastCGI, its keys; FastCGI keys on an HTTP group are refused.
    fn build_protocol(&mut self, g: &mut UpstreamGroup, name: &Spanned<String>, u: &FileUpstream) {
        let keys = u.fastcgi_keys();
        match u
            .protocol
            .as_ref()
            .map(|p| (p.get_ref().as_str(), p.span().start))
        {
            None | Some(("http" | "h2" | "h2c", _)) => {
                g.protocol = match u.protocol.as_ref().map(|p| p.get_ref().as_str()) {
                    Some("h2") => Protocol::H2,
                    Some("h2c") => Protocol::H2c,
                    _ => Protocol::Http,
                };
                if let Some(at) = keys.first_key() {
                    self.error(
                        at,
                        "root, index and front_controller need protocol = \"fastcgi\"",
                    );
                }
            }
            Some(("fastcgi", _)) => {
                g.protocol = Protocol::FastCgi;
                g.max_conns = DEFAULT_FASTCGI_MAX_CONNS;
                g.fastcgi = Some(self.build_fastcgi(name.get_ref(), name.span().start, &keys));
                let kind = u.health.as_ref().and_then(|h| h.kind.as_ref());
                if let Some(check) = g.health.as_mut() {
                    match kind {
                        // A FastCGI server does not speak HTTP: its checks are connects.
                        None => check.probe = Probe::Tcp,
                        Some(k) if k.get_ref() == "http" => self.error(
                            k.span().start,
                            "a FastCGI group's health check is type = \"tcp\"",
                        ),
                        Some(_) => {}
                    }
                }
            }
            Some((other, at)) => self.error(
                at,
                format!(
                    "unknown protocol {other:?} (use \"http\", \"h2\", \"h2c\" or \"fastcgi\")"
                ),
            ),
        }
    }

    fn build_health(&mut self, h: &FileHealth) -> Option<HealthCheck> {
        let kind = h.kind.as_ref().map_or("http", |k| k.get_ref().as_str());
        let probe = match kind {
            "tcp" => Probe::Tcp,
            "grpc" => Probe::Grpc {
                service: h.service.clone().unwrap_or_default(),
            },
            "http" => {
                let path = h.path.as_ref().map_or("/", |p| p.get_ref().as_str());
                if !path.starts_with('/') {
                    let at = h.path.as_ref().map_or(0, |p| p.span().start);
                    self.error(at, "health check path must start with '/'");
                }
                let expect = match &h.expect {
                    None => (200, 399),
                    Some(e) => parse_status_range(e.get_ref()).unwrap_or_else(|| {
                        self.error(
                            e.span().start,
                            "invalid expect: use e.g. \"200-399\" or \"204\"",
                        );
                        (200, 399)
                    }),
                };
                Probe::Http {
                    method: h.method.clone().unwrap_or_else(|| "GET".into()),
                    path: path.to_string(),
                    host: h.host.clone(),
                    expect,
                }
            }
            other => {
                let at = h.kind.as_ref().map_or(0, |k| k.span().start);
                self.error(
                    at,
                    format!(
                        "unknown health check type {other:?} (use \"http\", \"grpc\" or \"tcp\")"
                    ),
                );
                return None;
            }
        };
        let mut count = |v: &Option<Spanned<u32>>, default: u32| match v {
            Some(n) if *n.get_ref() == 0 => {
                self.error(n.span().start, "rise and fall must be at least 1");
                default
            }
            Some(n) => *n.get_ref(),
            None => default,
        };
        let (rise, fall) = (count(&h.rise, 2), count(&h.fall, 3));
        let interval = self.duration(&h.interval, Duration::from_secs(5));
        let timeout = self.duration(&h.timeout, Duration::from_secs(2));
        if interval.is_zero() || timeout.is_zero() {
            let at = h
                .interval
                .as_ref()
                .or(h.timeout.as_ref())
                .map_or(0, |s| s.span().start);
            self.error(at, "health check interval and timeout must be above zero");
        }
        Some(HealthCheck {
            probe,
            interval,
            timeout,
            rise,
            fall,
            start_down: h.start_down.unwrap_or(false),
            preface: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_DNS: LoadResolver = LoadResolver::Now(|_| Vec::new());

    #[test]
    fn server_lines() {
        let s = parse_server(
            "10.0.0.1:80 weight=3 backup slow_start=30s",
            NO_DNS,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(s.weight, 3);
        assert!(s.backup);
        assert_eq!(s.slow_start, Duration::from_secs(30));
        let tcp = |s: &str| Address::Tcp(s.parse().unwrap());
        assert_eq!(s.addrs, [tcp("10.0.0.1:80")]);
        let s = parse_server("http://[::1]:8080/", NO_DNS, Duration::ZERO).unwrap();
        assert_eq!(s.addrs, [tcp("[::1]:8080")]);
        let s = parse_server(
            "fastcgi://unix:/run/php/fpm.sock weight=2",
            NO_DNS,
            Duration::ZERO,
        )
        .unwrap();
        let unix = Address::Unix(std::path::Path::new("/run/php/fpm.sock").into());
        assert_eq!((s.is_name(), s.weight), (false, 2));
        assert_eq!(s.addrs, [unix]);
        assert_eq!(s.host, "unix:/run/php/fpm.sock");
        for bad in [
            "10.0.0.1:80 weight=0",
            "10.0.0.1",
            "x.invalid:80",
            "10.0.0.1:80 heavy",
            "unix:run/fpm.sock",
        ] {
            assert!(parse_server(bad, NO_DNS, Duration::ZERO).is_err(), "{bad}");
        }
    }

    #[test]
    fn balance_values() {
        assert_eq!(parse_balance("p2c", None), Ok(Balance::P2c));
        assert_eq!(
            parse_balance("hash", Some("header:X-User")),
            Ok(Balance::Hash(HashKey::Header("x-user".into())))
        );
        assert!(parse_balance("hash", None).is_err());
        assert!(parse_balance("hash", Some("header:")).is_err());
        assert!(parse_balance("random", None).is_err());
        assert_eq!(parse_status_range("200-399"), Some((200, 399)));
        assert_eq!(parse_status_range("204"), Some((204, 204)));
        assert_eq!(parse_status_range("399-200"), None);
    }
}
