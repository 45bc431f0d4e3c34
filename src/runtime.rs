//! The process runtime: N worker threads, each a tokio current-thread runtime with its own
//! listeners, pools and counters; the shared config that reloads swap atomically; graceful
//! shutdown; and the signal loop of the binary (SIGHUP reloads, SIGTERM/SIGINT drain and exit).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::LocalSet;

use crate::access_log::{AccessLog, LogWriter};
use crate::config::Config;
use crate::metrics::{Counter, Metrics};
use crate::worker::Worker;
use crate::{admin, listener, proxy};

/// The active config, replaced whole on reload. Workers compare `generation` (a read-only load
/// on the hot path) and copy the config only when it changed.
pub struct SharedConfig {
    /// Bumped after each successful reload.
    pub generation: AtomicU64,
    current: ArcSwap<Config>,
}

impl SharedConfig {
    /// A shared config outside a running server (tests).
    pub fn for_test(config: Config) -> SharedConfig {
        SharedConfig {
            generation: AtomicU64::new(0),
            current: ArcSwap::from_pointee(config),
        }
    }

    /// The generation and a copy of the config it names.
    pub fn snapshot(&self) -> (u64, Config) {
        let generation = self.generation.load(Ordering::Acquire);
        (generation, Config::clone(&self.current.load()))
    }
}

/// A running proxy: its workers, listeners and shared state.
pub struct Server {
    shared: Arc<SharedConfig>,
    shutdown: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    metrics: Metrics,
    log: Option<LogWriter>,
}

impl Server {
    /// Binds every listener and starts the workers. Fails (with nothing left running) if a
    /// listener or the access log cannot be opened.
    pub fn start(config: Config) -> io::Result<Server> {
        listener::raise_nofile_limit();
        let workers = config.workers.max(1);
        let mut per_worker: Vec<Vec<(std::net::TcpListener, usize)>> =
            (0..workers).map(|_| Vec::new()).collect();
        let mut addrs = Vec::new();
        for l in &config.listeners {
            let group = listener::bind_group(l.address, l.backlog, workers).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot listen on {}: {e}", l.address))
            })?;
            addrs.push(group[0].local_addr()?);
            let limit = l.max_connections.div_ceil(workers);
            for (w, sock) in group.into_iter().enumerate() {
                per_worker[w].push((sock, limit));
            }
        }
        let log = match &config.access_log {
            Some(path) => Some(LogWriter::open(path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open access log {}: {e}", path.display()),
                )
            })?),
            None => None,
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let metrics = Metrics::default();
        let (admin_listener, admin_addr) = match config.admin {
            Some(a) => {
                let l = std::net::TcpListener::bind(a)?;
                l.set_nonblocking(true)?;
                let addr = l.local_addr()?;
                (Some(l), Some(addr))
            }
            None => (None, None),
        };
        let shared = Arc::new(SharedConfig {
            generation: AtomicU64::new(0),
            current: ArcSwap::from_pointee(config),
        });
        let mut threads = Vec::new();
        for (id, listeners) in per_worker.into_iter().enumerate() {
            let shared = shared.clone();
            let counters = metrics.new_shard();
            let log_buffer = log
                .as_ref()
                .map_or_else(AccessLog::disabled, LogWriter::buffer);
            let shutdown_rx = shutdown_rx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || {
                    let worker = Worker::new(id, shared, counters, log_buffer, shutdown_rx);
                    run_worker(worker, listeners);
                })?;
            threads.push(thread);
        }
        if let Some(l) = admin_listener {
            threads.push(admin::spawn(l, metrics.clone(), shutdown_rx)?);
        }
        Ok(Server {
            shared,
            shutdown,
            threads,
            addrs,
            admin_addr,
            metrics,
            log,
        })
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

    /// Replaces the config. Listeners are kept, so a config that changes them is refused (the
    /// running config keeps serving); a change of worker count, access log or admin address
    /// takes effect at the next restart.
    pub fn reload(&self, config: Config) -> Result<(), String> {
        let current = self.shared.current.load();
        if current.listeners != config.listeners {
            return Err(
                "the listeners changed; restart slipstream to apply a new listener set".into(),
            );
        }
        if current.workers != config.workers
            || current.access_log != config.access_log
            || current.admin != config.admin
        {
            tracing::warn!("workers, access_log and admin changes take effect at the next restart");
        }
        self.shared.current.store(Arc::new(config));
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Stops accepting, lets in-flight requests finish within the drain timeout, then returns.
    pub fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.threads {
            let _ = t.join();
        }
        if let Some(log) = self.log {
            log.finish();
        }
    }
}

fn run_worker(worker: Worker, listeners: Vec<(std::net::TcpListener, usize)>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!("worker {}: cannot start runtime: {e}", worker.id),
    };
    let local = LocalSet::new();
    local.block_on(&rt, async move {
        let worker = Rc::new(worker);
        for (l, limit) in listeners {
            match TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::task::spawn_local(accept_loop(worker.clone(), l, limit));
                }
                Err(e) => tracing::error!("worker {}: listener: {e}", worker.id),
            }
        }
        tokio::task::spawn_local(housekeeping(worker.clone()));
        let mut shutdown = worker.shutdown.clone();
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        let deadline = tokio::time::Instant::now() + worker.config().limits.drain_timeout;
        while worker.active.get() > 0 {
            tokio::select! {
                _ = worker.connection_closed.notified() => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        worker.log.flush();
    });
}

/// Accepts connections until shutdown, pausing (and counting it) at the connection limit.
async fn accept_loop(worker: Rc<Worker>, listener: TcpListener, limit: usize) {
    let mut shutdown = worker.shutdown.clone();
    while !*shutdown.borrow() {
        if worker.active.get() >= limit {
            worker.counters.inc(Counter::AcceptPaused);
            tracing::warn!(limit, "connection limit reached; accepting paused");
            tokio::select! {
                _ = worker.connection_closed.notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    worker.active.set(worker.active.get() + 1);
                    worker.counters.inc(Counter::ConnectionsAccepted);
                    let w = worker.clone();
                    tokio::task::spawn_local(async move {
                        let _open = OpenConnection(w.clone());
                        proxy::serve(w, stream, peer).await;
                    });
                }
                Err(e) => {
                    worker.counters.inc(Counter::AcceptErrors);
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = shutdown.changed() => {}
        }
    }
}

/// Counts a client connection as open until dropped.
struct OpenConnection(Rc<Worker>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let w = &self.0;
        w.active.set(w.active.get() - 1);
        w.counters.inc(Counter::ConnectionsClosed);
        w.connection_closed.notify_waiters();
    }
}

/// Once a second: close expired idle upstream connections and hand the log buffer over.
async fn housekeeping(worker: Rc<Worker>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        worker.upstreams.sweep();
        worker.log.flush();
    }
}

/// Runs the binary's server: starts it, then reloads on SIGHUP (from `config_path`) and drains
/// and returns on SIGTERM or SIGINT.
pub fn run_until_signalled(config: Config, config_path: Option<&Path>) -> io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _guard = rt.enter();
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let workers = config.workers;
    let server = Server::start(config)?;
    for addr in server.local_addrs() {
        tracing::info!("listening on {addr} with {workers} workers");
    }
    if let Some(addr) = server.admin_addr() {
        tracing::info!("admin listening on {addr}");
    }
    rt.block_on(async {
        loop {
            tokio::select! {
                _ = hup.recv() => reload(&server, config_path),
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
    });
    tracing::info!("shutting down: draining in-flight requests (signal again to stop at once)");
    let (done, drained) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        server.shutdown();
        let _ = done.send(());
    });
    rt.block_on(async {
        tokio::select! {
            _ = drained => tracing::info!("stopped"),
            _ = term.recv() => stop_at_once(),
            _ = int.recv() => stop_at_once(),
        }
    });
    Ok(())
}

fn stop_at_once() {
    tracing::warn!("second signal: stopping without waiting for in-flight requests");
    std::process::exit(1);
}

fn reload(server: &Server, config_path: Option<&Path>) {
    let Some(path) = config_path else {
        return tracing::info!("SIGHUP ignored: running without a config file");
    };
    match Config::load(path) {
        Ok(config) => match server.reload(config) {
            Ok(()) => tracing::info!("reloaded {}", path.display()),
            Err(e) => tracing::error!("reload refused, the running config stays: {e}"),
        },
        Err(errors) => {
            tracing::error!("reload refused, the running config stays:\n{errors}")
        }
    }
}
