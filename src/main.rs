//! The `slipstream` command: parses the command line and hands over to the library.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use slipstream::config::Config;

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
        /// Upstream server address; repeat for several (round-robin).
        #[arg(long = "upstream", required = true, value_parser = parse_addr)]
        upstreams: Vec<SocketAddr>,
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
            workers,
            access_log,
        } => {
            let mut config = Config::for_proxy(listen, upstreams, workers);
            config.access_log = access_log;
            slipstream::runtime::run_until_signalled(config, None)
        }
        Command::Run { config } => match Config::load(&config) {
            Ok(c) => slipstream::runtime::run_until_signalled(c, Some(&config)),
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
