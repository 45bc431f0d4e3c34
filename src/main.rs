//! The `slipstream` command: parses the command line, runs the server from the library, and
//! owns the process: signals (SIGHUP reloads, SIGTERM/SIGINT drain, a second one stops at once)
//! and the exit status. SIGUSR1 reopens the log files.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command line tool prints

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slipstream::config::{self, Balance, Config, ServerSpec};
use slipstream::observe::access_log::AccessLogTarget;
use slipstream::observe::log_format::LogFormat;
use slipstream::observe::{doctor, error_log};
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
        /// Upstream server, `HOST:PORT` or `unix:/PATH` (a name is resolved again every 10 s);
        /// repeat for several. `fastcgi://HOST:PORT` or `fastcgi://unix:/PATH` speaks FastCGI
        /// (PHP-FPM), with --root.
        #[arg(long = "upstream", required = true, value_parser = parse_upstream)]
        upstreams: Vec<CliUpstream>,
        /// FastCGI: the document root scripts are found under (SCRIPT_FILENAME).
        #[arg(long)]
        root: Option<PathBuf>,
        /// FastCGI: the script for paths that name none, e.g. /index.php (default: 404).
        #[arg(long)]
        front_controller: Option<String>,
        /// Most connections to each server, over all workers (FastCGI default: 5, PHP-FPM's
        /// stock pm.max_children; set it to your pool's).
        #[arg(long)]
        max_conns: Option<usize>,
        /// How a server is chosen: p2c (default), round_robin or least_conn.
        #[arg(long, value_parser = ["p2c", "round_robin", "least_conn"])]
        balance: Option<String>,
        /// Worker threads, 1 to 1024 (default: one per core).
        #[arg(long, value_parser = parse_workers)]
        workers: Option<usize>,
        #[command(flatten)]
        observe: ObserveArgs,
        #[command(flatten)]
        tls: FrontArgs,
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
        /// Worker threads, 1 to 1024 (default: one per core).
        #[arg(long, value_parser = parse_workers)]
        workers: Option<usize>,
        #[command(flatten)]
        observe: ObserveArgs,
        #[command(flatten)]
        tls: FrontArgs,
    },
    /// Run from a config file, in the foreground.
    Run {
        /// Path to the TOML config.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Print the version; with --verbose also the build: commit, compiler, target, TLS
    /// provider and what is built in.
    Version {
        /// The build details too.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Validate a config file: exit 0, or print every error and exit 1.
    Check {
        /// Path to the TOML config.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Check this host (and a config, and a running slipstream) against the throughput traps;
    /// print findings worst first with the fix. Exit 1 when one is critical.
    Doctor {
        /// A config to check the host's limits against.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// A running slipstream's admin address, for its live counters.
        #[arg(long, value_parser = parse_addr)]
        admin: Option<SocketAddr>,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
        /// Seconds to sample the kernel's counters for (0: since boot only).
        #[arg(long, default_value_t = 1)]
        sample: u64,
        /// Read /proc from here instead (for tests and for checking another root).
        #[arg(long, default_value = "/proc", hide = true)]
        proc_root: PathBuf,
    },
}

/// The TLS, response-header and compression flags of the zero-config commands.
#[derive(clap::Args)]
struct FrontArgs {
    /// Speak TLS on --listen with this certificate chain (PEM), for every name.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Also listen here in plain HTTP, answering every request with a 308 to https.
    #[arg(long, value_parser = parse_addr, requires = "tls_cert")]
    redirect_http: Option<SocketAddr>,
    /// Add `Strict-Transport-Security: VALUE` to every response over TLS
    /// (for example "max-age=31536000").
    #[arg(long, requires = "tls_cert")]
    hsts: Option<String>,
    /// Add this field to every response ("Name: value"; repeatable), like nginx's add_header.
    #[arg(long = "add-header", value_name = "NAME: VALUE")]
    add_header: Vec<String>,
    /// Compress responses that benefit (text, JSON, JS, SVG... of 1 KB or more) with zstd,
    /// br or gzip, as the client's Accept-Encoding prefers.
    #[arg(long)]
    compress: bool,
}

impl FrontArgs {
    /// Applies the flags to a zero-config `Config`.
    fn apply(self, config: &mut Config) -> Result<(), String> {
        let mut lines = Vec::new();
        for field in &self.add_header {
            let (name, value) = field
                .split_once(':')
                .ok_or_else(|| format!("--add-header {field:?}: write it as \"Name: value\""))?;
            let line = slipstream::http1::response::field_line(name.trim(), value)
                .map_err(|e| format!("--add-header: {e}"))?;
            lines.extend_from_slice(&line);
        }
        config.router.set_all_headers(&lines);
        if self.compress {
            config.router.compress_all();
        }
        let (Some(cert), Some(key)) = (self.tls_cert, self.tls_key) else {
            return Ok(());
        };
        let mut tls = slipstream::tls::TlsSettings::single(&cert, &key)?;
        if let Some(value) = &self.hsts {
            tls.hsts =
                Some(slipstream::tls::hsts_field(value).map_err(|e| format!("--hsts: {e}"))?);
        }
        config.tls = Some(tls);
        config.listeners[0].tls = true;
        if let Some(address) = self.redirect_http {
            let mut plain = config.listeners[0].clone();
            plain.address = address;
            plain.tls = false;
            plain.redirect_https = true;
            config.listeners.push(plain);
        }
        Ok(())
    }
}

/// The logging and admin flags of the zero-config commands.
#[derive(clap::Args)]
struct ObserveArgs {
    /// Write an access log to this file (`off`: none, the default).
    #[arg(long)]
    access_log: Option<String>,
    /// Access log format: combined (nginx's, the default), json, or a template of $fields.
    #[arg(long, default_value = "combined")]
    access_log_format: String,
    /// Serve /metrics, /status and /health on this address; a bare port binds 127.0.0.1.
    #[arg(long, value_parser = parse_admin)]
    admin: Option<SocketAddr>,
}

impl ObserveArgs {
    /// Applies the flags to a zero-config `Config`.
    fn apply(self, config: &mut Config) -> Result<(), String> {
        let format = LogFormat::parse(&self.access_log_format)?;
        config.access_log = match self.access_log.as_deref() {
            None | Some("off") => None,
            Some(path) => Some(AccessLogTarget {
                path: std::sync::Arc::from(Path::new(path)),
                format,
            }),
        };
        config.admin = self.admin;
        Ok(())
    }
}

/// An `--upstream` value: a server, and whether it speaks FastCGI.
#[derive(Clone)]
struct CliUpstream {
    fastcgi: bool,
    spec: ServerSpec,
}

fn parse_upstream(s: &str) -> Result<CliUpstream, String> {
    let resolve = config::upstream::LoadResolver::Now(config::resolve_system);
    let spec = config::upstream::parse_server(s, resolve, std::time::Duration::ZERO)?;
    Ok(CliUpstream {
        fastcgi: s.starts_with("fastcgi://"),
        spec,
    })
}

/// The `proxy` command's config: HTTP upstreams, or FastCGI ones with a document root.
fn proxy_config(
    listen: SocketAddr,
    upstreams: Vec<CliUpstream>,
    root: Option<PathBuf>,
    front_controller: Option<String>,
    workers: Option<usize>,
) -> Result<Config, String> {
    let fastcgi = upstreams.iter().filter(|u| u.fastcgi).count();
    let servers = upstreams.into_iter().map(|u| u.spec).collect();
    if fastcgi == 0 {
        if root.is_some() || front_controller.is_some() {
            return Err("--root and --front-controller need fastcgi:// upstreams".into());
        }
        return Ok(Config::for_proxy(listen, servers, workers));
    }
    if fastcgi != servers.len() {
        return Err("upstreams are all fastcgi:// or none is".into());
    }
    let root = root.ok_or("fastcgi:// upstreams need --root DIR (the document root)")?;
    if !root.is_dir() {
        return Err(format!("{}: not a directory", root.display()));
    }
    if let Some(f) = &front_controller {
        if !f.starts_with('/') || !f.ends_with(".php") {
            return Err("--front-controller is a script path such as /index.php".into());
        }
    }
    Ok(Config::for_fastcgi(
        listen,
        servers,
        &root,
        front_controller,
        workers,
    ))
}

/// An admin address: `HOST:PORT`, or a bare port on loopback.
fn parse_admin(s: &str) -> Result<SocketAddr, String> {
    match s.parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => parse_addr(s),
    }
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let expected = "expected HOST:PORT, e.g. 0.0.0.0:8080, [::]:8080 or localhost:8080";
    s.to_socket_addrs()
        .map_err(|e| format!("{s}: {e} ({expected})"))?
        .next()
        .ok_or_else(|| format!("{s}: no address ({expected})"))
}

/// `slipstream version [--verbose]`.
fn print_version(verbose: bool) {
    println!("slipstream {}", env!("CARGO_PKG_VERSION"));
    if verbose {
        println!("commit: {}", env!("SLIPSTREAM_COMMIT"));
        println!("rustc: {}", env!("SLIPSTREAM_RUSTC"));
        println!("target: {}", env!("SLIPSTREAM_TARGET"));
        println!("tls: rustls with aws-lc-rs (TLS 1.2 and 1.3)");
        println!(
            "built in: HTTP/1.1, HTTP/2 (h2), TLS, FastCGI, static files, compression (zstd, br, \
             gzip on zlib-rs), splice and sendfile"
        );
    }
}

/// `--workers`: as the config key allows, 1 to 1024.
fn parse_workers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s}: workers must be between 1 and 1024 (e.g. --workers 4)"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Proxy {
            listen,
            upstreams,
            root,
            front_controller,
            max_conns,
            balance,
            workers,
            observe,
            tls,
        } => {
            let mut config = match proxy_config(listen, upstreams, root, front_controller, workers)
                .and_then(|mut c| observe.apply(&mut c).map(|()| c))
                .and_then(|mut c| tls.apply(&mut c).map(|()| c))
            {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Some(n) = max_conns {
                config.upstreams[0].max_conns = n;
            }
            config.upstreams[0].balance = match balance.as_deref() {
                Some("round_robin") => Balance::RoundRobin,
                Some("least_conn") => Balance::LeastConn,
                _ => Balance::P2c,
            };
            run_until_signalled(config, None)
        }
        Command::Serve {
            listen,
            root,
            browse,
            workers,
            observe,
            tls,
        } => {
            if !root.is_dir() {
                eprintln!("{}: not a directory", root.display());
                return ExitCode::FAILURE;
            }
            let mut config = Config::for_files(listen, root, browse, workers);
            if let Err(e) = observe
                .apply(&mut config)
                .and_then(|()| tls.apply(&mut config))
            {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
            run_until_signalled(config, None)
        }
        Command::Version { verbose } => {
            print_version(verbose);
            return ExitCode::SUCCESS;
        }
        Command::Run { config } => match Config::load(&config) {
            Ok(c) => run_until_signalled(c, Some(&config)),
            Err(errors) => {
                eprintln!("{errors}");
                return ExitCode::FAILURE;
            }
        },
        Command::Doctor {
            config,
            admin,
            json,
            sample,
            proc_root,
        } => return doctor_command(config.as_deref(), admin, json, sample, proc_root),
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
    error_log::init(&config.error_log)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _guard = rt.enter();
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let workers = config.workers;
    let server = Server::start(config)?;
    for addr in server.local_addrs() {
        tracing::info!("listening on {addr} with {workers} workers");
    }
    if let Some(addr) = server.admin_addr() {
        tracing::info!("admin listening on {addr} (/metrics, /status, /health)");
        if !addr.ip().is_loopback() {
            tracing::warn!("the admin listener {addr} is reachable from other hosts: its pages show upstream addresses and traffic; bind it to 127.0.0.1 unless a firewall guards it");
        }
    }
    let certificates = server.certificates_changed();
    rt.block_on(async {
        loop {
            tokio::select! {
                _ = hup.recv() => reload(&server, config_path),
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
        // Without a config file, only the certificate files can change.
        return match server.reload_certificates() {
            Ok(()) => tracing::info!("SIGHUP: certificates reloaded"),
            Err(e) => tracing::error!("reload refused, the old certificates keep serving: {e}"),
        };
    };
    match Config::load(path) {
        Ok(config) => match server.reload(config) {
            Ok(()) => tracing::info!("reloaded {}", path.display()),
            Err(e) => tracing::error!("reload refused, the running config stays: {e}"),
        },
        Err(errors) => {
            server.reload_refused();
            tracing::error!("reload refused, the running config stays:\n{errors}");
        }
    }
}

/// `slipstream doctor`: prints the findings; exit status 1 when one is critical.
fn doctor_command(
    config: Option<&Path>,
    admin: Option<SocketAddr>,
    json: bool,
    sample: u64,
    proc_root: PathBuf,
) -> ExitCode {
    let config = match config.map(Config::load).transpose() {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    let inputs = doctor::Inputs {
        proc_root,
        demand: config
            .as_ref()
            .map_or_else(Config::default_demand, Config::demand),
        admin,
        sample: std::time::Duration::from_secs(sample),
    };
    let findings = doctor::examine(&inputs);
    if json {
        println!("{}", doctor::to_json(&findings));
    } else {
        print!("{}", doctor::to_text(&findings));
    }
    if doctor::is_critical(&findings) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
