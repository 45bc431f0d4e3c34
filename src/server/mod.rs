//! The running process: binds listeners ([`listener`]), starts one thread per worker, each a
//! tokio current-thread runtime with its own listeners, pools and counters ([`worker_thread`]),
//! the admin thread and the log writer; reloads swap the shared config; shutdown drains.
//! Dropping a [`Server`] shuts it down.

mod cert_watch;
pub mod control;
pub mod listener;
pub mod pid_file;
mod proxy_header;
mod run;
mod stapling;
pub mod systemd;
pub(crate) mod worker_thread;

pub use run::{run_fleet_member, run_until_signalled};

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::config::{Config, SharedConfig};
use crate::observe::access_log::{AccessLog, LogWriter};
use crate::observe::admin;
use crate::observe::metrics::Metrics;
use crate::upstream::control::Control;
use crate::upstream::fleet::Table;
use crate::upstream::Fleet;
use crate::worker::Worker;

/// A running proxy: its workers, listeners and shared state.
pub struct Server {
    shared: Arc<SharedConfig>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    metrics: Metrics,
    fleet: Arc<Fleet>,
    control: std::sync::Mutex<Option<Control>>,
    log: Option<LogWriter>,
    /// TLS session tickets and cache, kept across reloads.
    resumption: crate::tls::Resumption,
    /// Woken when certificate files change.
    certificates_changed: Arc<tokio::sync::Notify>,
    /// Dropped to stop the certificate watcher.
    stop_watch: Option<std::sync::mpsc::Sender<()>>,
    /// The ACME thread, while a site has `acme = true`.
    acme: std::sync::Mutex<Option<crate::acme::manager::Manager>>,
    /// The OCSP stapling thread, when the config has TLS.
    stapler: Option<stapling::Stapler>,
}

/// Each worker's listening sockets, with the connection limit each one has.
type WorkerListeners = Vec<Vec<worker_thread::Listening>>;

/// Raises the open-file limit, warns when it is below what `max_connections` may need, and
/// gives the response cache its share of descriptors (memory files, open disk files): half of
/// what the connections leave, at least an eighth of the limit.
fn open_files(config: &Config) {
    let Some(limit) = listener::raise_nofile_limit() else {
        return;
    };
    let wanted = config.demand().descriptors();
    let budget = (limit.saturating_sub(wanted) / 2).max(limit / 8);
    crate::cache::memfile::set_budget(usize::try_from(budget).unwrap_or(usize::MAX));
    if limit < wanted {
        tracing::warn!(
            "open-file limit {limit} is below the {wanted} descriptors max_connections may need \
             (two per connection, plus 1024): raise it (LimitNOFILE={wanted} in the unit, \
             ulimit -n {wanted}) or lower max_connections; accept pauses at the limit \
             (slipstream_accept_errors_total)"
        );
    }
}

impl Server {
    /// Binds every listener and starts the workers. Fails (with nothing left running) if a
    /// listener, the admin address or the access log cannot be opened.
    pub fn start(mut config: Config) -> io::Result<Server> {
        load_caches(&config);
        open_files(&config);
        let resumption = crate::tls::Resumption::new().map_err(io::Error::other)?;
        prepare_tls(&mut config, &resumption).map_err(io::Error::other)?;
        // The stored certificates are served from the first connection on.
        let acme = config.acme.as_ref().map(crate::acme::manager::prepare);
        let acme = acme.transpose().map_err(io::Error::other)?;
        let workers = config.workers.max(1);
        let metrics = Metrics::default();
        let (per_worker, addrs) = bind_listeners(&config, workers, &metrics)?;
        systemd::close_unclaimed();
        let log = LogWriter::start()?;
        for path in config.access_log_paths() {
            log.open(&path)?;
        }
        let admin_listener = config.admin.map(bind_admin).transpose()?;
        let admin_addr = admin_listener
            .as_ref()
            .map(std::net::TcpListener::local_addr)
            .transpose()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let slots = config.tls.as_ref().map(|t| t.resolver.slots().to_vec());
        let stapler = Some(stapling::Stapler::start(slots.unwrap_or_default())?);
        let shared = Arc::new(SharedConfig::new(config));
        let fleet = Arc::new(Fleet::new(Table::default()));
        let control = Control::start(fleet.clone(), shared.current(), 0)?;
        let mut server = Server {
            shared,
            shutdown,
            threads: Vec::new(),
            addrs,
            admin_addr,
            metrics,
            fleet,
            control: std::sync::Mutex::new(Some(control)),
            log: Some(log),
            resumption,
            certificates_changed: Arc::default(),
            stop_watch: None,
            acme: std::sync::Mutex::default(),
            stapler,
        };
        if let Some(prepared) = acme {
            *server
                .acme
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(crate::acme::manager::Manager::start(prepared)?);
        }
        let (stop_watch, stop) = std::sync::mpsc::channel();
        let watcher = cert_watch::spawn(
            server.shared.clone(),
            server.certificates_changed.clone(),
            stop,
        )?;
        server.threads.push(watcher);
        server.stop_watch = Some(stop_watch);
        for (id, listeners) in per_worker.into_iter().enumerate() {
            let counters = server.metrics.new_shard();
            let log_buffer = server
                .log
                .as_ref()
                .map_or_else(AccessLog::disabled, LogWriter::buffer);
            let (shared, shutdown_rx) = (server.shared.clone(), shutdown_rx.clone());
            let fleet = server.fleet.clone();
            let routes = server.metrics.routes.clone();
            let thread = std::thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || {
                    // Built on its own thread: a worker's state is single-threaded.
                    let worker =
                        Worker::new(id, shared, fleet, counters, log_buffer, routes, shutdown_rx);
                    worker_thread::run(worker, listeners);
                })?;
            server.threads.push(thread);
        }
        if let Some(l) = admin_listener {
            let sources = server.admin_sources();
            let thread = admin::spawn(l, sources, shutdown_rx)?;
            server.threads.push(thread);
        }
        Ok(server)
    }

    /// What the admin listener's pages read: the counters, the per-server, certificate, ACME,
    /// stapling and fleet figures, the cache zones and the config's demand on the host.
    fn admin_sources(&self) -> admin::Sources {
        let (fleet, shared) = (self.fleet.clone(), self.shared.clone());
        admin::Sources {
            metrics: self.metrics.clone(),
            more: Arc::new(move |out: &mut String| {
                let config = shared.current();
                crate::upstream::stats::render(&fleet, &config, out);
                if let Some(tls) = &config.tls {
                    crate::tls::resolve::render_expiries(tls.resolver.slots(), out);
                }
                crate::acme::render_metrics(out);
                stapling::render_metrics(out);
                crate::observe::cluster::render_metrics(out);
            }),
            caches: {
                let shared = self.shared.clone();
                Arc::new(move || shared.current().cache_zones.clone())
            },
            demand: {
                let shared = self.shared.clone();
                Arc::new(move || shared.current().demand())
            },
            checks: {
                let fleet = self.fleet.clone();
                Arc::new(move || fleet.check_failures())
            },
            token: {
                let shared = self.shared.clone();
                Arc::new(move || shared.current().admin_token.clone())
            },
        }
    }

    /// The bound address of each configured listener (port 0 resolved).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The bound admin address, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The process counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The server table and per-server figures.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The running config's limit zones.
    pub fn limit_zones(&self) -> crate::rules::zones::Zones {
        self.shared.current().router.zones().clone()
    }

    /// The running config's cache zones (a reload's config keeps those it names unchanged).
    pub fn cache_zones(&self) -> Vec<Arc<crate::cache::zone::Zone>> {
        self.shared.current().cache_zones.clone()
    }

    /// Replaces the config. Listeners are kept, so a config that changes them is refused (the
    /// running config keeps serving), as is one naming an access log that cannot be opened; a
    /// change of worker count, error log or admin address takes effect at the next restart.
    pub fn reload(&self, config: Config) -> Result<(), String> {
        let result = self.try_reload(config);
        let process = &self.metrics.process;
        match result {
            Ok(()) => process.reloads_ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => process.reloads_failed.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    /// Counts a reload refused before it reached [`Server::reload`] (the file did not
    /// validate).
    pub fn reload_refused(&self) {
        let process = &self.metrics.process;
        process.reloads_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Woken when a certificate or key file of the running config changes (then call
    /// [`Server::reload_certificates`]).
    pub fn certificates_changed(&self) -> Arc<tokio::sync::Notify> {
        self.certificates_changed.clone()
    }

    /// Reads the running config's certificate files again and serves the new ones; a broken or
    /// mismatched file is refused and the old certificates keep serving. Sessions resume across
    /// it (the ticket keys stay).
    pub fn reload_certificates(&self) -> Result<(), String> {
        let mut config = Config::clone(&self.shared.current());
        let Some(tls) = &mut config.tls else {
            return Ok(());
        };
        match crate::tls::SniResolver::build(&tls.sources, tls.require_sni) {
            Ok(mut resolver) => {
                resolver.set_acme(tls.resolver.acme());
                tls.resolver = Arc::new(resolver);
            }
            Err(e) => {
                self.reload_refused();
                return Err(e);
            }
        }
        self.reload(config)
    }

    /// Reopens the access-log files by their paths (SIGUSR1, after logrotate renamed them).
    pub fn reopen_logs(&self) {
        if let Some(log) = &self.log {
            log.reopen();
        }
    }

    fn try_reload(&self, mut config: Config) -> Result<(), String> {
        prepare_tls(&mut config, &self.resumption)?;
        let slots = config.tls.as_ref().map(|t| t.resolver.slots().to_vec());
        if let (Some(stapler), Some(slots)) = (&self.stapler, &slots) {
            stapler.staple_from_cache(slots);
        }
        load_caches(&config);
        let current = self.shared.current();
        if current.listeners != config.listeners {
            return Err(
                "the listeners changed; restart slipstream to apply a new listener set".into(),
            );
        }
        if current.workers != config.workers
            || current.error_log != config.error_log
            || current.admin != config.admin
        {
            tracing::warn!("workers, error_log and admin changes take effect at the next restart");
        }
        if let Some(log) = &self.log {
            for path in config.access_log_paths() {
                log.open(&path).map_err(|e| e.to_string())?;
            }
        }
        self.reload_acme(config.acme.as_ref())?;
        let mut control = self
            .control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The old checks stop before the new ones start; their results carry over.
        drop(control.take());
        let generation = self.shared.replace(config);
        if let Some(stapler) = &self.stapler {
            stapler.watch(slots.unwrap_or_default());
        }
        let process = &self.metrics.process;
        process.generation.store(generation, Ordering::Relaxed);
        *control = Some(
            Control::start(self.fleet.clone(), self.shared.current(), generation)
                .map_err(|e| format!("cannot start the upstream control thread: {e}"))?,
        );
        Ok(())
    }

    /// Hands a reloaded config's ACME settings to the ACME thread (started or stopped as
    /// sites gain or lose `acme = true`); a state file that does not read back refuses it.
    fn reload_acme(&self, settings: Option<&crate::acme::AcmeSettings>) -> Result<(), String> {
        let prepared = settings.map(crate::acme::manager::prepare).transpose()?;
        let mut acme = self
            .acme
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (prepared, acme.as_ref()) {
            (Some(p), Some(running)) => running.update(p),
            (Some(p), None) => {
                *acme = Some(
                    crate::acme::manager::Manager::start(p)
                        .map_err(|e| format!("cannot start the ACME thread: {e}"))?,
                );
            }
            (None, _) => {
                drop(acme.take());
                crate::acme::manager::forget();
            }
        }
        Ok(())
    }

    /// Stops accepting, lets in-flight requests finish within the drain timeout, then returns.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        drop(
            self.acme
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        drop(self.stapler.take());
        drop(self.stop_watch.take());
        drop(
            self.control
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(log) = self.log.take() {
            log.finish(self.shared.current().limits.drain_timeout);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Builds the rustls server config of a config's TLS settings, with the process's resumption
/// state.
fn prepare_tls(config: &mut Config, resumption: &crate::tls::Resumption) -> Result<(), String> {
    let http2 = config.http2.enabled;
    if let Some(tls) = &mut config.tls {
        let server = crate::tls::server_config(tls, resumption, http2)?;
        tls.by_name = crate::tls::client_auth_configs(tls, http2)?;
        tls.server = Some(server);
    }
    Ok(())
}

/// The admin listener's socket.
fn bind_admin(a: SocketAddr) -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(a)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on admin {a}: {e}")))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Binds every configured address once per worker; returns each worker's sockets and the
/// bound addresses.
fn bind_listeners(
    config: &Config,
    workers: usize,
    metrics: &Metrics,
) -> io::Result<(WorkerListeners, Vec<SocketAddr>)> {
    let mut per_worker: WorkerListeners = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    for l in &config.listeners {
        let group = match systemd::take_inherited(l.address) {
            Some(passed) => listener::share(passed, workers),
            None => listener::bind_group(l.address, (l.backlog, l.ipv6only), workers, l.shared),
        };
        let group = group.map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::PermissionDenied && l.address.port() < 1024 {
                " (ports below 1024 need root or CAP_NET_BIND_SERVICE: \
                 `setcap cap_net_bind_service=+ep` on the binary, AmbientCapabilities= in the \
                 unit, or socket activation: a slipstream.socket with ListenStream=)"
            } else {
                ""
            };
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}{hint}", l.address),
            )
        })?;
        let bound = group[0].local_addr()?;
        addrs.push(bound);
        let limit = l.max_connections.div_ceil(workers);
        for (w, socket) in group.into_iter().enumerate() {
            per_worker[w].push(worker_thread::Listening {
                socket,
                stats: metrics.listeners.for_worker(&bound.to_string()),
                limit,
                tls: l.tls,
                redirect: l.redirect_https,
                h2c: l.h2c,
                proxy_protocol: l.proxy_protocol,
            });
        }
    }
    Ok((per_worker, addrs))
}

/// Reads the disk tiers' directories back before the first request (a restart keeps the
/// cache); zones a reload kept were read already.
fn load_caches(config: &Config) {
    for zone in &config.cache_zones {
        zone.load_disk();
    }
}
