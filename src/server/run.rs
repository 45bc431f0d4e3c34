//! The process's life around a [`Server`]: start it, write the pid file, tell systemd it is
//! ready, then wait for signals. SIGHUP reloads the config file (and records the outcome for
//! `slipstream reload`), SIGUSR1 reopens the logs, SIGTERM or SIGINT drain and return, and a
//! second one during the drain exits at once.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::pid_file::{self, PidFile, SavedState};
use super::{systemd, Server};
use crate::cluster::{Member, Update};
use crate::config::cluster::ClusterSettings;
use crate::config::Config;
use crate::observe::error_log;

/// Runs `config` until SIGTERM or SIGINT. With `config_path` (the `run` command) SIGHUP reads
/// that file again and a pid file is kept; without one, SIGHUP reloads only the certificates.
pub fn run_until_signalled(config: Config, config_path: Option<&Path>) -> io::Result<()> {
    run_member(config, config_path, None)
}

/// `slipstream run` with a `[cluster]` section: the shared configuration from etcd over the own
/// file at `path`, followed until a signal stops the process.
pub fn run_fleet_member(path: &Path, settings: ClusterSettings) -> io::Result<()> {
    let (config, member) = crate::cluster::join(path, settings).map_err(io::Error::other)?;
    run_member(config, Some(path), Some(member))
}

/// [`run_until_signalled`] for a fleet member: shared configurations from etcd are swapped in
/// as reloads are, and SIGHUP reads the own file again over the shared one served.
fn run_member(
    config: Config,
    config_path: Option<&Path>,
    mut member: Option<Member>,
) -> io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    error_log::init(&config.error_log)?;
    for note in member.iter().flat_map(|m| &m.notes) {
        tracing::warn!("{note}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _guard = rt.enter();
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let workers = config.workers;
    let pid_path = config_path.map(|_| {
        config
            .pid_file
            .clone()
            .unwrap_or_else(pid_file::default_path)
    });
    let server = Server::start(config)?;
    if let Some(m) = &member {
        m.started();
        m.serving(server.limit_zones());
    }
    let pid_file = pid_path.as_deref().map(PidFile::create).transpose()?;
    let mut state = first_state(config_path);
    let record = |state: &SavedState| {
        if let Some(p) = &pid_file {
            p.record(state);
        }
    };
    record(&state);
    announce(&server, pid_file.as_ref(), workers);
    let certificates = server.certificates_changed();
    rt.block_on(async {
        loop {
            tokio::select! {
                event = next_event(&mut member) => match event {
                    FleetEvent::Purge(query) => purge(&server, &query),
                    FleetEvent::Config(update) => {
                        // Recorded as the generation only: `slipstream reload` waits on the
                        // attempts of its own SIGHUPs.
                        let _ = swap_in(&server, member.as_ref(), config_path, &update);
                        state.generation = server.metrics().process.generation.load(Ordering::Relaxed);
                        record(&state);
                    }
                },
                _ = hup.recv() => {
                    systemd::reloading();
                    let outcome = reload(&server, config_path, member.as_ref());
                    state.attempts += 1;
                    state.generation = server.metrics().process.generation.load(Ordering::Relaxed);
                    state.refused = outcome.err();
                    record(&state);
                    systemd::ready(&match &state.refused {
                        None => format!("generation {}", state.generation),
                        Some(_) => format!("generation {}; the last reload was refused", state.generation),
                    });
                }
                () = certificates.notified() => match server.reload_certificates() {
                    Ok(()) => tracing::info!("certificates changed on disk: reloaded"),
                    Err(e) => tracing::error!("certificates changed on disk but were refused, the old ones keep serving: {e}"),
                },
                _ = usr1.recv() => {
                    error_log::reopen();
                    server.reopen_logs();
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
    });
    tracing::info!("shutting down: draining in-flight requests (signal again to stop at once)");
    if let Some(m) = &member {
        m.leave();
    }
    systemd::stopping();
    state.draining = true;
    record(&state);
    let (done, drained) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        server.shutdown();
        let _ = done.send(());
    });
    rt.block_on(async {
        tokio::select! {
            _ = drained => tracing::info!("stopped"),
            _ = term.recv() => stop_at_once(pid_file.as_ref()),
            _ = int.recv() => stop_at_once(pid_file.as_ref()),
        }
    });
    drop(pid_file);
    Ok(())
}

/// What the pid file's state says at start: this process, its config file, generation 0.
fn first_state(config_path: Option<&Path>) -> SavedState {
    SavedState {
        pid: std::process::id(),
        config: config_path
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
            .map_or(String::new(), |p| p.display().to_string()),
        generation: 0,
        attempts: 0,
        draining: false,
        refused: None,
    }
}

/// The start logged and told to systemd: listeners, pid file, admin listener.
fn announce(server: &Server, pid_file: Option<&PidFile>, workers: usize) {
    let addrs: Vec<String> = server
        .local_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    tracing::info!("listening on {} with {workers} workers", addrs.join(", "));
    if let Some(p) = &pid_file {
        tracing::info!("pid file {}", p.path().display());
    }
    if let Some(addr) = server.admin_addr() {
        tracing::info!("admin listening on {addr} (dashboard at /, /metrics, /status, /health)");
        if !addr.ip().is_loopback() {
            tracing::warn!("the admin listener {addr} is reachable from other hosts: its pages show upstream addresses and traffic; bind it to 127.0.0.1 unless a firewall guards it");
        }
    }
    systemd::ready(&format!("listening on {}", addrs.join(", ")));
}

/// A fleet's new shared configuration validated over the own file and swapped in, or refused
/// (the running config stays); the member is told which.
fn swap_in(
    server: &Server,
    member: Option<&Member>,
    path: Option<&Path>,
    update: &Update,
) -> Result<(), String> {
    let (Some(m), Some(path)) = (member, path) else {
        return Err("not a fleet member".into());
    };
    let running = server.cache_zones();
    let outcome = match crate::cache::zone::keeping(&running, || m.prepare(update, path)) {
        Ok(config) => server.reload(config),
        Err(e) => {
            server.reload_refused();
            Err(e)
        }
    };
    m.outcome(
        update,
        &outcome,
        server.metrics().process.generation.load(Ordering::Relaxed),
    );
    m.serving(server.limit_zones());
    crate::observe::status::record_reload(&outcome);
    outcome
}

/// What a fleet member's threads hand the run loop.
enum FleetEvent {
    /// A new revision of the shared configuration.
    Config(Update),
    /// A purge another instance did.
    Purge(String),
}

/// The next fleet event (never, outside a fleet).
async fn next_event(member: &mut Option<Member>) -> FleetEvent {
    let Some(m) = member else {
        return std::future::pending().await;
    };
    tokio::select! {
        Some(update) = m.updates.recv() => FleetEvent::Config(update),
        Some(query) = m.purges.recv() => FleetEvent::Purge(query),
        else => std::future::pending().await,
    }
}

/// A purge another fleet member did, run on this instance's caches.
fn purge(server: &Server, query: &str) {
    let zones = server.cache_zones();
    let done = crate::cache::admin::parse_purge(query)
        .map_err(str::to_string)
        .and_then(|p| crate::cache::admin::purge(&zones, &p));
    match done {
        Ok(n) => tracing::info!("cluster: purge {query:?} from the fleet: {n} keys"),
        Err(e) => tracing::warn!("cluster: purge {query:?} from the fleet not done here: {e}"),
    }
}

/// The second signal: leave without waiting for in-flight requests.
#[allow(clippy::disallowed_methods)] // the one place the process exits by itself
fn stop_at_once(pid_file: Option<&PidFile>) {
    tracing::warn!("second signal: stopping without waiting for in-flight requests");
    if let Some(p) = pid_file {
        p.remove();
    }
    std::process::exit(1);
}

/// One SIGHUP: the config file read again and swapped in, or refused with the reason (the
/// running config stays).
fn reload(
    server: &Server,
    config_path: Option<&Path>,
    member: Option<&Member>,
) -> Result<(), String> {
    let Some(path) = config_path else {
        // Without a config file, only the certificate files can change.
        return match server.reload_certificates() {
            Ok(()) => {
                tracing::info!("SIGHUP: certificates reloaded");
                Ok(())
            }
            Err(e) => {
                tracing::error!("reload refused, the old certificates keep serving: {e}");
                Err(e)
            }
        };
    };
    let running = server.cache_zones();
    let load = || match member {
        Some(m) => m.reload_local(path),
        None => Config::load(path).map_err(|e| e.to_string()),
    };
    let result = match crate::cache::zone::keeping(&running, load) {
        Ok(config) => server.reload(config),
        Err(errors) => {
            server.reload_refused();
            Err(errors)
        }
    };
    if let (Some(m), Ok(())) = (member, &result) {
        m.reloaded(server.metrics().process.generation.load(Ordering::Relaxed));
        m.serving(server.limit_zones());
    }
    match &result {
        Ok(()) => tracing::info!("reloaded {}", path.display()),
        Err(e) => tracing::error!("reload refused, the running config stays:\n{e}"),
    }
    crate::observe::status::record_reload(&result);
    result
}
