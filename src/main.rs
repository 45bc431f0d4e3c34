//! The `slipstream` command: parses the command line, runs the server from the library, and
//! owns the process: signals (SIGHUP reloads, SIGTERM/SIGINT drain, a second one stops at once)
//! and the exit status. SIGUSR1 reopens the log files.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a command line tool prints

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slipstream::acme::Challenge;
use slipstream::cluster::commands as fleet;
use slipstream::config::{self, Balance, Config, IoMode, Protocol, ServerSpec};
use slipstream::observe::access_log::AccessLogTarget;
use slipstream::observe::doctor;
use slipstream::observe::log_format::LogFormat;
use slipstream::server::{control, pid_file, run_fleet_member, run_until_signalled, systemd};

/// Where `run`, `check`, `reload` and `stop` look without `--config`.
const DEFAULT_CONFIG: &str = "/etc/slipstream/slipstream.toml";

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

/// `slipstream config ...`.
#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate FILE over the own file's settings, as every instance will, then write it to
    /// the fleet's configuration key; every instance swaps it in.
    Push {
        /// The own file whose `[cluster]` section names etcd and the prefix.
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// The shared configuration (TOML).
        file: PathBuf,
    },
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
        /// (PHP-FPM), with --root; `h2c://HOST:PORT` HTTP/2 without TLS (gRPC servers) and
        /// `h2://HOST:PORT` HTTP/2 over TLS, and the listener then also answers h2c.
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
        /// The plain listener also answers HTTP/2 with prior knowledge (h2c), as gRPC clients
        /// without TLS speak it (on by itself with h2c:// or h2:// upstreams).
        #[arg(long)]
        h2c: bool,
        /// How a server is chosen: p2c (default), round_robin or least_conn.
        #[arg(long, value_parser = ["p2c", "round_robin", "least_conn"])]
        balance: Option<String>,
        /// Worker threads, 1 to 1024 (default: one per core).
        #[arg(long, value_parser = parse_workers)]
        workers: Option<usize>,
        /// How plain TCP connections are read and written: uring or epoll (default: uring
        /// where the kernel gives a ring, else epoll; or SLIPSTREAM_IO).
        #[arg(long, value_parser = ["uring", "epoll"])]
        io: Option<String>,
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
        /// How plain TCP connections are read and written: uring or epoll (default: uring
        /// where the kernel gives a ring, else epoll; or SLIPSTREAM_IO).
        #[arg(long, value_parser = ["uring", "epoll"])]
        io: Option<String>,
        #[command(flatten)]
        observe: ObserveArgs,
        #[command(flatten)]
        tls: FrontArgs,
    },
    /// Run from a config file, in the foreground (writes the pid file `reload` and `stop`
    /// use).
    Run {
        /// Path to the TOML config.
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Also run the bundled demo upstream on 127.0.0.1:9000 (the example config's), in
        /// this process: Ctrl-C stops both.
        #[arg(long)]
        demo: bool,
    },
    /// Reload the running slipstream's config (found by the config's pid file) and report the
    /// new generation, or every error (the running config keeps serving; exit 1).
    Reload {
        /// Path to the TOML config (the same one `run` was given).
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Stop the running slipstream (found by the config's pid file) and wait for it to exit.
    Stop {
        /// Path to the TOML config (the same one `run` was given).
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Let in-flight requests finish first (within drain_timeout).
        #[arg(long)]
        graceful: bool,
    },
    /// Write the man pages (man/) and the bash, zsh and fish completions (completions/) into
    /// a directory, for packaging.
    #[command(hide = true)]
    Generate {
        /// The directory to write into.
        out_dir: PathBuf,
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
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// A fleet's shared configuration in etcd (`[cluster]` in the own file).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List a fleet's instances from etcd: address, version, the configuration revision and
    /// generation each serves, and any refusal.
    Fleet {
        /// The own file whose `[cluster]` section names etcd and the prefix.
        #[arg(long, short, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Translate an nginx config (a whole nginx.conf, or a sites-available file) into
    /// slipstream's TOML on stdout; each directive not translated is listed on stderr as
    /// FILE:LINE with the reason.
    Import {
        /// Exit 1 when anything was not translated.
        #[arg(long)]
        strict: bool,
        /// Also list the directives left out because slipstream needs none.
        #[arg(long, short)]
        verbose: bool,
        /// The nginx config to translate.
        nginx_conf: PathBuf,
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
#[command(group(clap::ArgGroup::new("https").args(["tls_cert", "acme_domain"]).multiple(true)))]
struct FrontArgs {
    /// Speak TLS on --listen with this certificate chain (PEM), for every name.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Also listen here in plain HTTP, answering every request with a 308 to https.
    #[arg(long, value_parser = parse_addr, requires = "https")]
    redirect_http: Option<SocketAddr>,
    /// Add `Strict-Transport-Security: VALUE` to every response over TLS
    /// (for example "max-age=31536000").
    #[arg(long, requires = "https")]
    hsts: Option<String>,
    #[command(flatten)]
    acme: AcmeArgs,
    /// Add this field to every response ("Name: value"; repeatable), like nginx's add_header.
    #[arg(long = "add-header", value_name = "NAME: VALUE")]
    add_header: Vec<String>,
    /// Compress responses that benefit (text, JSON, JS, SVG... of 1 KB or more) with zstd,
    /// br or gzip, as the client's Accept-Encoding prefers.
    #[arg(long)]
    compress: bool,
}

/// The automatic-HTTPS flags of the zero-config commands.
#[derive(clap::Args)]
struct AcmeArgs {
    /// Speak TLS on --listen with a certificate for this name from an ACME CA, obtained and
    /// renewed by slipstream (repeatable: one certificate for all the names).
    #[arg(long = "acme-domain", value_name = "NAME", conflicts_with = "tls_cert")]
    acme_domain: Vec<String>,
    /// The CA's ACME directory URL.
    #[arg(long, value_name = "URL", default_value = slipstream::acme::LETS_ENCRYPT)]
    acme_directory: String,
    /// Trust this PEM root for the CA's HTTPS (a private CA, a test CA).
    #[arg(long, value_name = "FILE", requires = "acme_domain")]
    acme_ca_root: Option<PathBuf>,
    /// The ACME account's contact address.
    #[arg(long, value_name = "ADDR", requires = "acme_domain")]
    acme_email: Option<String>,
    /// Where the ACME account, certificates and keys are kept.
    #[arg(long, value_name = "DIR", default_value = slipstream::acme::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
}

impl AcmeArgs {
    /// The ACME settings of the flags (HTTP-01 when there is a plain listener to answer on).
    fn settings(self, plain: bool) -> Result<Option<slipstream::acme::AcmeSettings>, String> {
        if self.acme_domain.is_empty() {
            return Ok(None);
        }
        if !self.acme_directory.starts_with("https://") {
            return Err("--acme-directory is the CA's https:// directory URL".into());
        }
        let mut names = Vec::new();
        for n in &self.acme_domain {
            names.push(
                slipstream::acme::check_name(n).map_err(|e| format!("--acme-domain {n}: {e}"))?,
            );
        }
        Ok(Some(slipstream::acme::AcmeSettings {
            directory: self.acme_directory,
            email: self.acme_email,
            ca_root: self.acme_ca_root,
            challenge: if plain {
                Challenge::Http01
            } else {
                Challenge::TlsAlpn01
            },
            state_dir: self.state_dir,
            placeholder: false,
            certificates: vec![names],
        }))
    }
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
        // HTTP-01 where a CA checks it: a plain listener on port 80.
        let port_80 = self.redirect_http.is_some_and(|a| a.port() == 80);
        let acme = self.acme.settings(port_80)?;
        let mut tls = match (self.tls_cert, self.tls_key, &acme) {
            (Some(cert), Some(key), _) => slipstream::tls::TlsSettings::single(&cert, &key)?,
            (_, _, Some(_)) => slipstream::tls::TlsSettings::acme_only(),
            _ => return Ok(()),
        };
        config.acme = acme;
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

/// An `--upstream` value: a server, and the protocol its scheme names.
#[derive(Clone)]
struct CliUpstream {
    protocol: Protocol,
    spec: ServerSpec,
}

fn parse_upstream(s: &str) -> Result<CliUpstream, String> {
    let resolve = config::upstream::LoadResolver::Now(config::resolve_system);
    let (protocol, address) = if let Some(rest) = s.strip_prefix("h2c://") {
        (Protocol::H2c, rest)
    } else if let Some(rest) = s.strip_prefix("h2://") {
        (Protocol::H2, rest)
    } else if s.starts_with("fastcgi://") {
        (Protocol::FastCgi, s)
    } else {
        (Protocol::Http, s)
    };
    let mut spec = config::upstream::parse_server(address, resolve, std::time::Duration::ZERO)?;
    spec.tls |= protocol == Protocol::H2;
    Ok(CliUpstream { protocol, spec })
}

/// The `proxy` command's config: HTTP upstreams, or FastCGI ones with a document root.
fn proxy_config(
    listen: SocketAddr,
    upstreams: Vec<CliUpstream>,
    root: Option<PathBuf>,
    front_controller: Option<String>,
    workers: Option<usize>,
) -> Result<Config, String> {
    let protocol = upstreams[0].protocol;
    if upstreams.iter().any(|u| u.protocol != protocol) {
        return Err(
            "upstreams all have the same scheme (fastcgi://, h2c://, h2:// or none)".into(),
        );
    }
    let servers: Vec<ServerSpec> = upstreams.into_iter().map(|u| u.spec).collect();
    if protocol != Protocol::FastCgi {
        if root.is_some() || front_controller.is_some() {
            return Err("--root and --front-controller need fastcgi:// upstreams".into());
        }
        let mut config = Config::for_proxy(listen, servers, workers);
        if protocol.is_http2() {
            config.upstreams[0].use_http2(protocol == Protocol::H2)?;
            config.listeners[0].h2c = true;
        }
        return Ok(config);
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

/// The `proxy` command's `--max-conns` and `--balance`, on its one group.
fn apply_proxy_flags(config: &mut Config, max_conns: Option<usize>, balance: Option<&str>) {
    if let Some(n) = max_conns {
        config.upstreams[0].max_conns = n;
    }
    config.upstreams[0].balance = match balance {
        Some("round_robin") => Balance::RoundRobin,
        Some("least_conn") => Balance::LeastConn,
        _ => Balance::P2c,
    };
}

/// `--io`, when given, over the default (`SLIPSTREAM_IO`, else io_uring).
fn apply_io(config: &mut Config, io: Option<&str>) {
    if let Some(mode) = io.and_then(IoMode::parse) {
        config.io = mode;
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
    // Before any thread starts: it clears LISTEN_FDS and LISTEN_PID from the environment.
    if let Err(e) = systemd::adopt_listeners() {
        eprintln!("slipstream: {e}");
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Proxy {
            listen,
            upstreams,
            root,
            front_controller,
            max_conns,
            h2c,
            balance,
            workers,
            io,
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
            apply_proxy_flags(&mut config, max_conns, balance.as_deref());
            config.listeners[0].h2c |= h2c;
            apply_io(&mut config, io.as_deref());
            run_until_signalled(config, None)
        }
        Command::Serve {
            listen,
            root,
            browse,
            workers,
            io,
            observe,
            tls,
        } => {
            if !root.is_dir() {
                eprintln!("{}: not a directory", root.display());
                return ExitCode::FAILURE;
            }
            let mut config = Config::for_files(listen, root, browse, workers);
            apply_io(&mut config, io.as_deref());
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
        Command::Run { config, demo } => return run_command(&config, demo),
        Command::Reload { config } => return reload_command(&config),
        Command::Stop { config, graceful } => return stop_command(&config, graceful),
        Command::Generate { out_dir } => {
            return match generate(&out_dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("slipstream: {}: {e}", out_dir.display());
                    ExitCode::FAILURE
                }
            }
        }
        Command::Doctor {
            config,
            admin,
            json,
            sample,
            proc_root,
        } => return doctor_command(config.as_deref(), admin, json, sample, proc_root),
        Command::Import {
            strict,
            verbose,
            nginx_conf,
        } => return import_command(&nginx_conf, strict, verbose),
        Command::Check { config } => return check_command(&config),
        Command::Config(ConfigCommand::Push { config, file }) => {
            return print_outcome(fleet::push(&config, &file))
        }
        Command::Fleet { config, json } => return print_outcome(fleet::fleet(&config, json)),
    };
    finish(result)
}

/// `slipstream check`: every error of the config, or `FILE: ok`.
fn check_command(config: &Path) -> ExitCode {
    if let Ok(Some(_)) = slipstream::config::cluster::read_cluster(config) {
        return print_outcome(fleet::check(config));
    }
    match Config::load(config) {
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

/// A command's text on stdout, or its error on stderr and exit 1.
fn print_outcome(outcome: Result<String, String>) -> ExitCode {
    match outcome {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slipstream: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `slipstream run [--demo]`.
fn run_command(path: &Path, demo: bool) -> ExitCode {
    match slipstream::config::cluster::read_cluster(path) {
        Ok(Some(settings)) => return finish(run_fleet_member(path, settings)),
        Ok(None) => {}
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    }
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    if demo {
        if let Err(e) = start_demo(&config) {
            eprintln!("slipstream: {e}");
            return ExitCode::FAILURE;
        }
    }
    finish(run_until_signalled(config, Some(path)))
}

/// The exit status of a server run.
fn finish(result: std::io::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slipstream: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `run --demo`: the bundled upstream on 127.0.0.1:9000, in this process.
fn start_demo(config: &Config) -> Result<(), String> {
    let upstream = SocketAddr::from(([127, 0, 0, 1], 9000));
    slipstream::demo::spawn(upstream).map_err(|e| {
        format!("the demo upstream cannot listen on {upstream}: {e} (is a demo already running?)")
    })?;
    let proxy = config.listeners.first().map_or(String::new(), |l| {
        let host = if l.address.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            l.address.ip().to_string()
        };
        format!("; try: curl http://{host}:{}/", l.address.port())
    });
    eprintln!("demo: the bundled upstream answers on {upstream}{proxy}; Ctrl-C stops both");
    Ok(())
}

/// The pid file a config names, read without validating the rest of it (so `stop` works while
/// the file on disk is half edited).
fn pid_file_of(config: &Path) -> PathBuf {
    std::fs::read_to_string(config)
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| t.get("pid_file")?.as_str().map(PathBuf::from))
        .unwrap_or_else(pid_file::default_path)
}

/// `slipstream reload`: exit 0 with the new generation, or 1 with the reasons.
fn reload_command(config: &Path) -> ExitCode {
    match control::reload(&pid_file_of(config), std::time::Duration::from_secs(60)) {
        Ok(done) => {
            println!(
                "pid {} reloaded {}: generation {}",
                done.pid, done.config, done.generation
            );
            let asked = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
            if Path::new(&done.config) != asked {
                eprintln!(
                    "note: it runs {}, not {} (that file only named the pid file)",
                    done.config,
                    asked.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slipstream: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `slipstream stop`: exit 0 once the process has exited.
fn stop_command(config: &Path, graceful: bool) -> ExitCode {
    // A graceful stop may take the whole drain_timeout.
    let wait = std::time::Duration::from_secs(if graceful { 600 } else { 30 });
    match control::stop(&pid_file_of(config), graceful, wait) {
        Ok(pid) => {
            println!("stopped pid {pid}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slipstream: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `slipstream generate DIR`: the man pages and shell completions, from the same definitions
/// as `--help`.
fn generate(out_dir: &Path) -> std::io::Result<()> {
    use clap::CommandFactory;
    use clap_complete::Shell;
    let command = Cli::command();
    let man = out_dir.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(command.clone(), &man)?;
    let completions = out_dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command.clone(), "slipstream", &completions)?;
    }
    Ok(())
}

/// `slipstream import`: the TOML on stdout, what was left out on stderr (ignored directives
/// only with `--verbose`). Exit 1 when the config cannot be read, or under `--strict` when
/// something was not translated (a missing include counts).
fn import_command(path: &Path, strict: bool, verbose: bool) -> ExitCode {
    use slipstream::import::{read_config, translate, NoteKind};
    let config = match read_config(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    for skipped in &config.skipped {
        eprintln!("{skipped}");
    }
    let translation = translate(&config);
    print!("{}", translation.toml);
    for note in &translation.notes {
        if verbose || note.kind == NoteKind::NotTranslated {
            eprintln!("{}", note.render(&config.files));
        }
    }
    if strict && (translation.untranslated() > 0 || !config.skipped.is_empty()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
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
