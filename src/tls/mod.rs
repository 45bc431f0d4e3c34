//! TLS termination, kept off the plaintext path: certificates loaded and checked from PEM files
//! ([`certs`]), chosen by SNI like sites are ([`resolve`]), and the handshake of an accepted
//! connection with its limits and counted failures ([`accept`]). rustls with the aws-lc-rs
//! provider; session tickets and the session cache are process-wide ([`Resumption`]), so a
//! returning client resumes on any worker and across reloads.

pub mod accept;
pub mod certs;
pub mod client;
pub mod resolve;

use std::sync::Arc;
use std::time::Duration;

use rustls::server::{ProducesTickets, StoresServerSessions};
use rustls::ServerConfig;

pub use resolve::{CertSource, SniResolver};

/// ALPN protocols offered to clients.
const ALPN: [&[u8]; 1] = [b"http/1.1"];

/// TLS settings of a config: the certificates by name and the handshake limits.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// Certificates by SNI name, and the default.
    pub resolver: Arc<SniResolver>,
    /// The files they were read from, to read again when they change.
    pub sources: Vec<CertSource>,
    /// Accept only TLS 1.3 (else 1.2 and 1.3).
    pub tls13_only: bool,
    /// Time allowed for a handshake.
    pub handshake_timeout: Duration,
    /// Handshakes in progress per worker beyond which new connections are closed at once.
    pub max_handshakes: usize,
    /// The rustls config built from these settings by the server (with the process's
    /// resumption state); `None` until then.
    pub server: Option<Arc<ServerConfig>>,
}

impl TlsSettings {
    /// Settings with the default limits for one certificate used for every name (the
    /// `--tls-cert` one-liner).
    pub fn single(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsSettings, String> {
        let sources = vec![CertSource {
            names: Vec::new(),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            default: true,
        }];
        Ok(TlsSettings {
            resolver: Arc::new(SniResolver::build(&sources)?),
            sources,
            tls13_only: false,
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 1024,
            server: None,
        })
    }
}

/// Session resumption state shared by every worker and kept across reloads.
#[derive(Debug, Clone)]
pub struct Resumption {
    ticketer: Arc<dyn ProducesTickets>,
    cache: Arc<dyn StoresServerSessions>,
}

/// Sessions kept in the server-side cache (for clients that do not take tickets).
const SESSION_CACHE: usize = 20_000;

impl Resumption {
    /// A rotating ticket key (aws-lc-rs: a new key every 6 hours, the previous one still
    /// accepted) and a bounded session cache.
    pub fn new() -> Result<Resumption, String> {
        let ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("cannot make TLS ticket keys: {e}"))?;
        Ok(Resumption {
            ticketer,
            cache: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE),
        })
    }
}

/// The rustls server config for `settings`: the provider's safe defaults, TLS 1.2 and 1.3 (or
/// 1.3 only), ALPN `http/1.1`, the shared resumption state.
pub fn server_config(
    settings: &TlsSettings,
    resumption: &Resumption,
) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if settings.tls13_only {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(settings.resolver.clone());
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    // The provider's order (AES-GCM with hardware support first, then ChaCha20) decides, not
    // the client's.
    config.ignore_client_order = true;
    config.ticketer = resumption.ticketer.clone();
    config.session_storage = resumption.cache.clone();
    Ok(Arc::new(config))
}
