//! Configuration: the TOML file format, its complete validation, and the immutable [`Config`]
//! value the workers read. A config is either entirely valid or refused with every problem
//! found, each with file, line, column and reason; workers never see a half-checked value.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::observe::access_log::AccessLogTarget;
pub use crate::observe::error_log::ErrorLog;
use crate::routing::{Router, RouterBuilder, Target, UpstreamTarget};
use logs::SiteAccessLog;

mod acme;
mod admin;
mod cache;
pub mod cluster;
mod compression;
pub mod fastcgi;
pub mod files;
pub mod http2;
mod listeners;
pub mod logs;
mod policy;
mod read;
mod routes;
mod zones;
use listeners::FileListener;
use routes::Built;
use routes::FileSite;
pub mod shared;
mod text;
use text::{line_column, nearest};
pub use text::{parse_duration, parse_size};
pub mod tls;
pub mod upstream;
mod upstream_tls;

pub use fastcgi::FastCgi;
use files::FileFilesSection;
pub use files::{Fallback, FileRoute, FilesSettings, TryFiles};
pub use shared::SharedConfig;
use upstream::FileUpstream;
pub use upstream::{
    Balance, HashKey, HealthCheck, Probe, Protocol, SendProxy, ServerSpec, UpstreamGroup,
    DEFAULT_UPSTREAM_KEEPALIVE,
};

/// The validated, immutable configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Worker threads to run (one per core by default).
    pub workers: usize,
    /// Where the real client address comes from behind trusted proxies (`[real_ip]`).
    pub real_ip: Option<crate::rules::real_ip::RealIp>,
    /// How plain TCP connections are read and written (read once, at start).
    pub io: IoMode,
    /// Addresses to accept connections on.
    pub listeners: Vec<ListenerConfig>,
    /// Upstream groups; routes refer to them by index.
    pub upstreams: Vec<UpstreamGroup>,
    /// Host and path routing.
    pub router: Router,
    /// Static-file routes; routes refer to them by index.
    pub file_routes: Vec<FileRoute>,
    /// Extra FastCGI variables of routes (`params`, merged over their group's); routes refer
    /// to them by index.
    pub route_params: Vec<Vec<(String, String)>>,
    /// Process-wide static-file settings.
    pub files: FilesSettings,
    /// Request limits and client-side timeouts.
    pub limits: Limits,
    /// The access log of requests no site's own `access_log` covers (`None`: off).
    pub access_log: Option<AccessLogTarget>,
    /// Each site's access log, by site index.
    pub site_access_logs: Vec<SiteAccessLog>,
    /// Where the error log goes and what it holds.
    pub error_log: ErrorLog,
    /// Address of the admin listener (metrics), if any.
    pub admin: Option<SocketAddr>,
    /// The credential for state-changing admin requests (`admin_token_file`); without it they
    /// are refused.
    pub admin_token: Option<std::sync::Arc<str>>,
    /// TLS certificates and limits, when a listener speaks TLS.
    pub tls: Option<crate::tls::TlsSettings>,
    /// DNS servers for re-resolving upstream names (empty: the system's, with /etc/hosts).
    pub resolvers: Vec<SocketAddr>,
    /// HTTP/2: offered by ALPN, and its limits.
    pub http2: http2::Http2Settings,
    /// How routes with `compress = true` compress responses.
    pub compression: crate::compress::Settings,
    /// Where `run` writes its process id for `slipstream reload` and `stop` (`None`: the
    /// default of [`crate::server::pid_file::default_path`]).
    pub pid_file: Option<PathBuf>,
    /// The response caches (`[cache_zones.NAME]`), for the admin listener's purge and metrics.
    pub cache_zones: Vec<std::sync::Arc<crate::cache::zone::Zone>>,
    /// Automatic HTTPS: the CA and the names of the sites with `acme = true`.
    pub acme: Option<crate::acme::AcmeSettings>,
    /// The fleet this instance belongs to (`[cluster]`): its configuration comes from etcd.
    pub cluster: Option<cluster::ClusterSettings>,
}

/// One listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Address to bind.
    pub address: SocketAddr,
    /// Accept queue length asked of the kernel (capped by net.core.somaxconn).
    pub backlog: u32,
    /// Most client connections open at once on this listener, across all workers.
    pub max_connections: usize,
    /// Clients speak TLS here.
    pub tls: bool,
    /// Every request here is answered with a 308 redirect to the same URL over https.
    pub redirect_https: bool,
    /// Plain connections here may speak HTTP/2 with prior knowledge (h2c).
    pub h2c: bool,
    /// Another process may listen on the same address (SO_REUSEPORT sharing, on purpose).
    pub shared: bool,
    /// Every connection starts with a PROXY protocol header (v1 or v2) naming the client: a
    /// load balancer in front (HAProxy's `send-proxy`, AWS NLB, ...). Required here, refused
    /// elsewhere.
    pub proxy_protocol: bool,
    /// An IPv6 address takes IPv6 connections only (nginx's `ipv6only=on`, its default);
    /// when false, `[::]:PORT` takes IPv4 ones too, as `::ffff:a.b.c.d`.
    pub ipv6only: bool,
}

/// Client-side limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head accepted (431 beyond).
    pub max_request_head: usize,
    /// Largest buffer one request may use; bounds memory per in-flight request.
    pub max_buffer: usize,
    /// How long an idle keep-alive client connection is kept.
    pub keepalive_timeout: Duration,
    /// Time allowed to receive a whole request head once it started.
    pub client_header_timeout: Duration,
    /// Time allowed between two reads of a request body.
    pub client_body_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Move body bytes beyond the first buffer with splice(2) instead of read/write.
    pub zero_copy: bool,
    /// A tunnel (WebSocket, any upgrade) with no bytes either way for this long is closed.
    pub tunnel_idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_head: 16 * 1024,
            max_buffer: 256 * 1024,
            keepalive_timeout: Duration::from_secs(75),
            client_header_timeout: Duration::from_secs(60),
            client_body_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            zero_copy: true,
            tunnel_idle_timeout: Duration::from_secs(3600),
        }
    }
}

/// How a worker reads and writes plain TCP connections (TLS, HTTP/2 and FastCGI always use
/// epoll through tokio).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// tokio's epoll reactor, with direct system calls.
    Epoll,
    /// One io_uring per worker, submitted once per loop turn; epoll when the kernel refuses
    /// a ring.
    Uring,
}

impl IoMode {
    /// `"epoll"` or `"uring"`.
    pub fn parse(s: &str) -> Option<IoMode> {
        match s {
            "epoll" => Some(IoMode::Epoll),
            "uring" => Some(IoMode::Uring),
            _ => None,
        }
    }

    /// The default: `SLIPSTREAM_IO` (`epoll` or `uring`) when set, so a test suite or a fleet
    /// can be switched without editing configs; else io_uring (where the kernel refuses a
    /// ring, the workers fall back to epoll at start).
    pub fn default_mode() -> IoMode {
        std::env::var("SLIPSTREAM_IO")
            .ok()
            .and_then(|v| IoMode::parse(&v))
            .unwrap_or(IoMode::Uring)
    }

    /// The name, as the config spells it.
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Epoll => "epoll",
            IoMode::Uring => "uring",
        }
    }
}

/// Default accept backlog: large, so bursts queue instead of being dropped.
pub const DEFAULT_BACKLOG: u32 = 65535;
/// Default connection limit per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 65536;
/// The number of CPUs this process may run on.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(std::num::NonZero::get)
        .unwrap_or(1)
}

impl Config {
    /// The port https redirects point to: the first TLS listener's (`None`: 443, left out).
    pub fn https_port(&self) -> Option<u16> {
        let port = self.listeners.iter().find(|l| l.tls)?.address.port();
        (port != 443).then_some(port)
    }

    /// The zero-config reverse proxy of `slipstream proxy`: every default is the fast one.
    pub fn for_proxy(
        listen: SocketAddr,
        upstreams: Vec<ServerSpec>,
        workers: Option<usize>,
    ) -> Self {
        let mut router = RouterBuilder::default();
        let site = router.add_site("default", true);
        router.add_route(site, "/", Target::Upstream(UpstreamTarget::to(0)));
        Config {
            upstreams: vec![UpstreamGroup::new("default", upstreams)],
            router: router.build(),
            ..Config::bare(listen, workers)
        }
    }

    /// The zero-config FastCGI gateway of `slipstream proxy --upstream fastcgi://...`: every
    /// path to `upstreams`, scripts under `root`.
    pub fn for_fastcgi(
        listen: SocketAddr,
        upstreams: Vec<ServerSpec>,
        root: &Path,
        front_controller: Option<String>,
        workers: Option<usize>,
    ) -> Self {
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let fastcgi = FastCgi {
            document_root: root.to_string_lossy().trim_end_matches('/').to_string(),
            scripts: FileRoute::for_scripts(root),
            index: "index.php".to_string(),
            front_controller,
            params: Vec::new(),
            max_chunked_body: fastcgi::DEFAULT_MAX_CHUNKED_BODY,
        };
        let mut config = Config::for_proxy(listen, Vec::new(), workers);
        config.upstreams = vec![UpstreamGroup::fastcgi("default", upstreams, fastcgi)];
        config
    }

    /// The zero-config static file server of `slipstream serve`: `root` for every path.
    pub fn for_files(
        listen: SocketAddr,
        root: PathBuf,
        list_directories: bool,
        workers: Option<usize>,
    ) -> Self {
        let mut router = RouterBuilder::default();
        let site = router.add_site("default", true);
        router.add_route(site, "/", Target::Files(0));
        Config {
            router: router.build(),
            file_routes: vec![FileRoute::for_root(root, list_directories)],
            ..Config::bare(listen, workers)
        }
    }

    fn bare(listen: SocketAddr, workers: Option<usize>) -> Self {
        Config {
            workers: workers.unwrap_or_else(default_workers),
            real_ip: None,
            io: IoMode::default_mode(),
            listeners: vec![ListenerConfig {
                address: listen,
                backlog: DEFAULT_BACKLOG,
                max_connections: DEFAULT_MAX_CONNECTIONS,
                tls: false,
                redirect_https: false,
                h2c: false,
                shared: false,
                proxy_protocol: false,
                ipv6only: true,
            }],
            upstreams: Vec::new(),
            router: Router::default(),
            file_routes: Vec::new(),
            route_params: Vec::new(),
            files: FilesSettings::default(),
            limits: Limits::default(),
            access_log: None,
            site_access_logs: Vec::new(),
            error_log: ErrorLog::default(),
            admin: None,
            admin_token: None,
            resolvers: Vec::new(),
            tls: None,
            http2: http2::Http2Settings::defaults(Limits::default().max_request_head),
            compression: crate::compress::Settings::default(),
            pid_file: None,
            cache_zones: Vec::new(),
            acme: None,
            cluster: None,
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: path.display().to_string(),
                line: 0,
                column: 0,
                message: format!("cannot read the config: {e}"),
                source: String::new(),
            }])
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Validates config text; `file` names it in errors. Host names in addresses are resolved
    /// with the system resolver.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigErrors> {
        Config::parse_with(text, file, resolve_system)
    }

    /// [`Config::parse`] with the given resolver for `HOST:PORT` strings (the fuzz target uses
    /// one that never leaves the process).
    pub fn parse_with(
        text: &str,
        file: &str,
        resolve: fn(&str) -> Vec<SocketAddr>,
    ) -> Result<Config, ConfigErrors> {
        let mut v = Validator::new(text, file, resolve);
        let Some(raw) = read::read(&mut v) else {
            return Err(ConfigErrors(v.errors));
        };
        let config = v.build(raw);
        if v.errors.is_empty() {
            Ok(config)
        } else {
            // In the file's order, as a reader goes through it.
            v.errors.sort_by_key(|e| (e.line, e.column));
            Err(ConfigErrors(v.errors))
        }
    }
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File name as given.
    pub file: String,
    /// 1-based line (0 when the file could not be read).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// The text of the line, shown under the message (empty when there is none).
    pub source: String,
}

impl fmt::Display for ConfigError {
    /// `file:line:column: message`, then the line and a caret under the column, as rustc
    /// shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            // Not about a place in the file (it could not be read, say).
            return write!(f, "{}: {}", self.file, self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        if self.source.is_empty() {
            return Ok(());
        }
        let number = self.line.to_string();
        let pad = " ".repeat(number.len());
        let before: String = self
            .source
            .chars()
            .take(self.column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(
            f,
            "\n{pad} |\n{number} | {}\n{pad} | {before}^",
            self.source
        )
    }
}

/// Every problem found in a config file.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

// === The file format ===

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    workers: Option<Spanned<usize>>,
    io: Option<Spanned<String>>,
    access_log: Option<Spanned<String>>,
    access_log_format: Option<Spanned<String>>,
    error_log: Option<String>,
    error_log_level: Option<Spanned<String>>,
    error_log_format: Option<Spanned<String>>,
    admin: Option<Spanned<String>>,
    admin_token_file: Option<Spanned<String>>,
    pid_file: Option<Spanned<String>>,
    #[serde(default)]
    resolver: Vec<Spanned<String>>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    listen: Vec<FileListener>,
    #[serde(default)]
    upstreams: BTreeMap<Spanned<String>, FileUpstream>,
    #[serde(default)]
    maps: BTreeMap<Spanned<String>, policy::FileMap>,
    #[serde(default)]
    rate_zones: BTreeMap<Spanned<String>, zones::FileRateZone>,
    #[serde(default)]
    conn_zones: BTreeMap<Spanned<String>, zones::FileConnZone>,
    #[serde(default)]
    cache_zones: BTreeMap<Spanned<String>, cache::FileCacheZone>,
    real_ip: Option<Spanned<policy::FileRealIp>>,
    #[serde(default)]
    sites: Vec<FileSite>,
    #[serde(default)]
    files: FileFilesSection,
    #[serde(default)]
    tls: tls::FileTls,
    #[serde(default)]
    acme: acme::FileAcme,
    cluster: Option<Spanned<cluster::FileCluster>>,
    #[serde(default)]
    http2: http2::FileHttp2,
    #[serde(default)]
    compression: compression::FileCompression,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_request_head: Option<Spanned<Size>>,
    max_buffer: Option<Spanned<Size>>,
    keepalive_timeout: Option<Spanned<String>>,
    client_header_timeout: Option<Spanned<String>>,
    client_body_timeout: Option<Spanned<String>>,
    drain_timeout: Option<Spanned<String>>,
    zero_copy: Option<bool>,
    tunnel_idle_timeout: Option<Spanned<String>>,
}

/// A byte size: an integer, or a string such as `"16KB"`, `"4k"`, `"1MB"`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

// === Validation ===

struct Validator<'a> {
    /// The text read: the file's, with misspelt keys replaced by their nearest valid ones.
    text: String,
    /// The file's text as written, for the lines shown with errors.
    original: &'a str,
    /// Offsets of values already reported as the wrong type (read on quoted): nothing more
    /// is said of them.
    quiet: Vec<usize>,
    /// Where `text` differs from the file: (offset in `text`, bytes added there).
    edits: Vec<(usize, isize)>,
    file: &'a str,
    resolve: fn(&str) -> Vec<SocketAddr>,
    /// DNS servers are configured: names are resolved by them when the proxy starts.
    dns_at_start: bool,
    errors: Vec<ConfigError>,
    /// The names of the config's `[maps.NAME]`, in the order of the router's maps.
    map_names: Vec<String>,
    /// The upstream groups' names, and whether each speaks HTTP/1.1 (not FastCGI or HTTP/2).
    groups: Vec<(String, bool)>,
    /// The names of the `[rate_zones.NAME]` and `[conn_zones.NAME]`, by index.
    rate_zone_names: Vec<String>,
    conn_zone_names: Vec<String>,
    /// The `[cache_zones.NAME]`.
    cache_zones: Vec<std::sync::Arc<crate::cache::zone::Zone>>,
    /// The named locations (`@name`) of the site being read, with their route indexes.
    named_locations: Vec<(String, usize)>,
}

/// Resolves `HOST:PORT` with the system resolver to every address it has (a literal address
/// needs no lookup); empty when it cannot be resolved.
pub fn resolve_system(s: &str) -> Vec<SocketAddr> {
    if let Ok(a) = s.parse() {
        return vec![a];
    }
    s.to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default()
}

impl Validator<'_> {
    /// Replaces `span` of the text read, keeping track of where the file's offsets went.
    fn edit(&mut self, span: std::ops::Range<usize>, with: &str) {
        let delta = with.len() as isize - span.len() as isize;
        for (at, _) in &mut self.edits {
            if *at > span.start {
                *at = at.saturating_add_signed(delta);
            }
        }
        self.edits.push((span.start, delta));
        self.text.replace_range(span, with);
    }

    pub(super) fn error(&mut self, offset: usize, message: impl Into<String>) {
        if self.quiet.contains(&offset) {
            return;
        }
        // Back to the file's own offsets, past the keys read under another name.
        let shift: isize = self
            .edits
            .iter()
            .filter(|(at, _)| *at < offset)
            .map(|(_, d)| d)
            .sum();
        let offset = offset.saturating_add_signed(-shift);
        let (line, column) = line_column(self.original, offset);
        let source = self
            .original
            .lines()
            .nth(line.wrapping_sub(1))
            .unwrap_or_default();
        self.errors.push(ConfigError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
            source: source.trim_end().to_string(),
        });
    }

    pub(super) fn duration(&mut self, v: &Option<Spanned<String>>, default: Duration) -> Duration {
        let Some(s) = v else { return default };
        match parse_duration(s.get_ref()) {
            Some(d) => d,
            None => {
                self.error(
                    s.span().start,
                    format!(
                        "invalid duration {:?}: use e.g. \"500ms\", \"30s\", \"5m\"",
                        s.get_ref()
                    ),
                );
                default
            }
        }
    }

    fn size(&mut self, v: &Option<Spanned<Size>>, default: usize) -> usize {
        let Some(s) = v else { return default };
        let parsed = match s.get_ref() {
            Size::Bytes(n) => Some(*n),
            Size::Text(t) => parse_size(t),
        };
        match parsed {
            Some(n) if n > 0 && n <= (1 << 40) => n as usize,
            _ => {
                self.error(
                    s.span().start,
                    "invalid size: use bytes or e.g. \"16KB\", \"1MB\"",
                );
                default
            }
        }
    }

    pub(super) fn socket_addr(&mut self, s: &Spanned<String>) -> Option<SocketAddr> {
        match (self.resolve)(s.get_ref()).first() {
            Some(a) => Some(*a),
            None => {
                self.error(
                    s.span().start,
                    format!("invalid address {:?}: expected HOST:PORT", s.get_ref()),
                );
                None
            }
        }
    }

    /// The `workers` key: 1 to 1024, one per core when absent.
    fn workers(&mut self, value: Option<&Spanned<usize>>) -> usize {
        match value {
            Some(w) if *w.get_ref() == 0 || *w.get_ref() > 1024 => {
                self.error(w.span().start, "workers must be between 1 and 1024");
                1
            }
            Some(w) => *w.get_ref(),
            None => default_workers(),
        }
    }

    /// The `io` key: `"uring"` or `"epoll"`.
    fn io_mode(&mut self, value: Option<&Spanned<String>>) -> IoMode {
        let Some(v) = value else {
            return IoMode::default_mode();
        };
        IoMode::parse(v.get_ref()).unwrap_or_else(|| {
            self.error(v.span().start, "io must be \"uring\" or \"epoll\"");
            IoMode::Epoll
        })
    }

    /// The `[limits]` table, with its checks against each other.
    fn build_limits(&mut self, raw: &FileLimits) -> Limits {
        let defaults = Limits::default();
        let limits = Limits {
            max_request_head: self.size(&raw.max_request_head, defaults.max_request_head),
            max_buffer: self.size(&raw.max_buffer, defaults.max_buffer),
            keepalive_timeout: self.duration(&raw.keepalive_timeout, defaults.keepalive_timeout),
            client_header_timeout: self
                .duration(&raw.client_header_timeout, defaults.client_header_timeout),
            client_body_timeout: self
                .duration(&raw.client_body_timeout, defaults.client_body_timeout),
            drain_timeout: self.duration(&raw.drain_timeout, defaults.drain_timeout),
            zero_copy: raw.zero_copy.unwrap_or(defaults.zero_copy),
            tunnel_idle_timeout: self
                .duration(&raw.tunnel_idle_timeout, defaults.tunnel_idle_timeout),
        };
        if limits.max_buffer < limits.max_request_head {
            let at = raw.max_buffer.as_ref().map_or(0, |s| s.span().start);
            self.error(at, "max_buffer must be at least max_request_head");
        }
        if limits.tunnel_idle_timeout.is_zero() {
            let at = raw
                .tunnel_idle_timeout
                .as_ref()
                .map_or(0, |s| s.span().start);
            self.error(at, "tunnel_idle_timeout must be more than 0");
        }
        limits
    }

    fn build(&mut self, raw: FileConfig) -> Config {
        let workers = self.workers(raw.workers.as_ref());
        let io = self.io_mode(raw.io.as_ref());
        let limits = self.build_limits(&raw.limits);

        let resolvers: Vec<SocketAddr> = raw
            .resolver
            .iter()
            .filter_map(|r| match r.get_ref().parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    self.error(
                        r.span().start,
                        "resolver must be IP:PORT, e.g. \"10.0.0.2:53\"",
                    );
                    None
                }
            })
            .collect();
        self.dns_at_start = !resolvers.is_empty();
        let listeners = self.build_listeners(&raw.listen);
        let upstreams = self.build_upstreams(&raw.upstreams);
        self.groups = upstreams
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    g.protocol == Protocol::Http && g.fastcgi.is_none(),
                )
            })
            .collect();
        let mut file_routes = Vec::new();
        let mut route_params = Vec::new();
        let (access_log, site_access_logs, error_log) = self.build_logs(&raw);
        let tls_listener = raw
            .listen
            .iter()
            .find(|l| l.tls == Some(true))
            .map(|l| l.address.span().start);
        let tls = self.build_tls(&raw.tls, &raw.sites, tls_listener);
        let acme = self.build_acme(&raw.acme, &raw.sites, &raw.listen);
        let cluster = self.build_cluster(raw.cluster.as_ref());
        let http2 = self.build_http2(&raw.http2, limits.max_request_head);
        let maps = self.build_maps(&raw.maps);
        let zones = self.build_zones(&raw.rate_zones, &raw.conn_zones);
        let real_ip = raw.real_ip.as_ref().and_then(|r| self.build_real_ip(r));
        self.cache_zones = self.build_cache_zones(&raw.cache_zones);
        let mut router = self.build_router(
            &raw.sites,
            &upstreams,
            &mut Built {
                file_routes: &mut file_routes,
                route_params: &mut route_params,
            },
        );
        router.set_maps(maps);
        router.set_zones(zones);
        let files = self.build_files_settings(&raw.files);
        let compression = self.build_compression(&raw.compression);
        let admin = self.admin_addr(raw.admin.as_ref());
        let admin_token = self.admin_token(raw.admin_token_file.as_ref());

        let pid_file = self.pid_file(raw.pid_file.as_ref());

        Config {
            workers,
            io,
            listeners,
            upstreams,
            router,
            file_routes,
            route_params,
            files,
            limits,
            access_log,
            site_access_logs,
            error_log,
            admin,
            admin_token,
            resolvers,
            tls,
            http2,
            compression,
            pid_file,
            real_ip,
            cache_zones: std::mem::take(&mut self.cache_zones),
            acme,
            cluster,
        }
    }

    /// `pid_file`: an absolute path.
    fn pid_file(&mut self, value: Option<&Spanned<String>>) -> Option<PathBuf> {
        let value = value?;
        let path = PathBuf::from(value.get_ref());
        if path.is_absolute() {
            return Some(path);
        }
        self.error(
            value.span().start,
            "pid_file must be an absolute path, e.g. \"/run/slipstream/slipstream.pid\"",
        );
        None
    }
}

#[cfg(test)]
mod tests;
