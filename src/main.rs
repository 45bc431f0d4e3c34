//! The `slipstream` command: parses the command line, runs the server from the library, and
//! owns the process: signals (SIGHUP reloads, SIGTERM/SIGINT drain, a second one stops at once)
//! and the exit status.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command line tool prints

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slipstream::config::{self, Balance, Config, ServerSpec};
use slipstream::Server;

#[derive(Parser)]
#[command(
    name = "slipstream",
    version,
    about = "A reverse proxy that does the minimum work per request"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Zero-config reverse proxy: every default is the fast one.
    Proxy {
        /// Address to listen on, e.g. 0.0.0.0:8080.
        #[arg(long, value_parser = parse_addr)]
        listen: SocketAddr,
        /// Upstream server, `HOST:PORT` (a name is resolved again every 10 s); repeat for several.
        #[arg(long = "upstream", required = true, value_parser = parse_server)]
        upstreams: Vec<ServerSpec>,
        /// How a server is chosen: p2c (default), round_robin or least_conn.
        #[arg(long, value_parser = ["p2c", "round_robin", "least_conn"])]
        balance: Option<String>,
        /// Worker threads (default: one per core).
        #[arg(long)]
        workers: Option<usize>,
        /// Write an access log to this file.
        #[arg(long)]
        access_log: Option<PathBuf>,
    },
    /// Zero-config static file server: ROOT for every path, with index.html, ranges,
    /// conditional requests, precompressed siblings and the open-file cache.
    Serve {
        /// Address to listen on, e.g. 0.0.0.0:8080.
        #[arg(long, value_parser = parse_addr)]
        listen: SocketAddr,
        /// Directory to serve.
        #[arg(long)]
        root: PathBuf,
        /// List directories that have no index.html.
        #[arg(long)]
        browse: bool,
        /// Worker threads (default: one per core).
        #[arg(long)]
        workers: Option<usize>,
        /// Write an access log to this file.
        #[arg(long)]
        access_log: Option<PathBuf>,
    },
    /// Run from a config file, in the foreground.
    Run {
        /// Path to the TOML config.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a config file: exit 0, or print every error and exit 1.
    Check {
        /// Path to the TOML config.
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn parse_server(s: &str) -> Result<ServerSpec, String> {
    let resolve = config::upstream::LoadResolver::Now(config::resolve_system);
    config::upstream::parse_server(s, resolve, std::time::Duration::ZERO)
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .map_err(|e| format!("{s}: {e}"))?
        .next()
        .ok_or_else(|| format!("{s}: no address"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLIPSTREAM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Proxy {
            listen,
            upstreams,
            balance,
            workers,
            access_log,
        } => {
            let mut config = Config::for_proxy(listen, upstreams, workers);
            config.upstreams[0].balance = match balance.as_deref() {
                Some("round_robin") => Balance::RoundRobin,
                Some("least_conn") => Balance::LeastConn,
                _ => Balance::P2c,
            };
            config.access_log = access_log;
            run_until_signalled(config, None)
        }
        Command::Serve {
            listen,
            root,
            browse,
            workers,
            access_log,
        } => {
            if !root.is_dir() {
                eprintln!("{}: not a directory", root.display());
                return ExitCode::FAILURE;
            }
            let mut config = Config::for_files(listen, root, browse, workers);
            config.access_log = access_log;
            run_until_signalled(config, None)
        }
        Command::Run { config } => match Config::load(&config) {
            Ok(c) => run_until_signalled(c, Some(&config)),
            Err(errors) => {
                eprintln!("{errors}");
                return ExitCode::FAILURE;
            }
        },
        Command::Check { config } => {
            return match Config::load(&config) {
                Ok(_) => {
                    println!("{}: ok", config.display());
                    ExitCode::SUCCESS
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    ExitCode::FAILURE
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slipstream: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the server, then reloads on SIGHUP (from `config_path`) and drains and returns on
/// SIGTERM or SIGINT; a second signal during the drain exits at once with status 1.
fn run_until_signalled(config: Config, config_path: Option<&Path>) -> io::Result<()> {
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

/// The second signal: leave without waiting for in-flight requests.
#[allow(clippy::disallowed_methods)] // the one place the process exits by itself
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
            tracing::error!("reload refused, the running config stays:\n{errors}");
        }
    }
}
