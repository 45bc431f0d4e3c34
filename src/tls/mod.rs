//! TLS termination, kept off the plaintext path: certificates loaded and checked from PEM files
//! ([`certs`]), chosen by SNI like sites are ([`resolve`]), and the handshake of an accepted
//! connection with its limits and counted failures ([`accept`]). rustls with the aws-lc-rs
//! provider; session tickets and the session cache are process-wide ([`Resumption`]), so a
//! returning client resumes on any worker and across reloads.

pub mod accept;
pub mod certs;
pub mod client;
pub mod client_auth;
pub mod ocsp;
pub mod resolve;

use std::sync::Arc;
use std::time::Duration;

use rustls::server::{ProducesTickets, StoresServerSessions};
use rustls::ServerConfig;

pub use resolve::{CertSource, SniResolver};

/// ALPN protocols offered to clients, in the server's order of preference.
const ALPN_H2: [&[u8]; 2] = [b"h2", b"http/1.1"];
/// ALPN protocols offered when HTTP/2 is off.
const ALPN_H1: [&[u8]; 1] = [b"http/1.1"];

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
    /// Refuse clients that send no SNI (instead of giving them the default certificate).
    pub require_sni: bool,
    /// Session tickets and the session cache (off: every handshake is a full one).
    pub resumption: bool,
    /// The `Strict-Transport-Security` field line (name, value, CRLF) added to responses
    /// sent over TLS, when configured.
    pub hsts: Option<Arc<[u8]>>,
    /// The rustls config built from these settings by the server (with the process's
    /// resumption state); `None` until then.
    pub server: Option<Arc<ServerConfig>>,
    /// Every site's names and client-certificate settings, when any site asks for client
    /// certificates (else empty).
    pub client_auth: Vec<client_auth::SiteClientAuth>,
    /// The configs of the sites that ask for client certificates, built with `server`.
    pub by_name: Option<Arc<client_auth::ByName>>,
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
        Ok(TlsSettings::defaults(
            SniResolver::build(&sources, false)?,
            sources,
        ))
    }

    /// Settings with the default limits for certificates from ACME only (`--acme-domain`).
    pub fn acme_only() -> TlsSettings {
        let mut resolver = SniResolver::default();
        resolver.set_acme(true);
        TlsSettings::defaults(resolver, Vec::new())
    }

    fn defaults(resolver: SniResolver, sources: Vec<CertSource>) -> TlsSettings {
        TlsSettings {
            resolver: Arc::new(resolver),
            sources,
            tls13_only: false,
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 1024,
            require_sni: false,
            resumption: true,
            hsts: None,
            server: None,
            client_auth: Vec::new(),
            by_name: None,
        }
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

/// The `Strict-Transport-Security` field line for a configured value (`max-age=N` and optional
/// `includeSubDomains`, `preload`).
pub fn hsts_field(value: &str) -> Result<Arc<[u8]>, String> {
    let mut directives = value.split(';').map(str::trim);
    let max_age = directives.next().and_then(|d| d.strip_prefix("max-age="));
    if !max_age.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        return Err("hsts starts with max-age=SECONDS".into());
    }
    for d in directives {
        if !d.eq_ignore_ascii_case("includeSubDomains") && !d.eq_ignore_ascii_case("preload") {
            return Err(format!(
                "unknown hsts directive {d:?} (max-age=N; includeSubDomains; preload)"
            ));
        }
    }
    Ok(format!("Strict-Transport-Security: {value}\r\n")
        .into_bytes()
        .into())
}

/// The cipher suites in the order the server prefers: AES-128-GCM first (as Mozilla's
/// intermediate profile, Go and BoringSSL order them; its SHA-256 key schedule runs on the
/// CPU's SHA extensions, a third cheaper per handshake here than AES-256's SHA-384), then the
/// provider's order.
fn preferred_suites(
    mut suites: Vec<rustls::SupportedCipherSuite>,
) -> Vec<rustls::SupportedCipherSuite> {
    use rustls::CipherSuite as C;
    suites.sort_by_key(|s| {
        !matches!(
            s.suite(),
            C::TLS13_AES_128_GCM_SHA256
                | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
    suites
}

/// The rustls server config for `settings`: the provider's safe defaults (suites in
/// [`preferred_suites`] order), TLS 1.2 and 1.3 (or 1.3 only), ALPN `h2` (when `http2`) and
/// `http/1.1`, the shared resumption state unless resumption is off.
pub fn server_config(
    settings: &TlsSettings,
    resumption: &Resumption,
    http2: bool,
) -> Result<Arc<ServerConfig>, String> {
    server_config_verifying(settings, resumption, http2, None)
}

/// [`server_config`] asking clients for certificates that `verifier` checks.
fn server_config_verifying(
    settings: &TlsSettings,
    resumption: &Resumption,
    http2: bool,
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, String> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = preferred_suites(provider.cipher_suites);
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = if settings.tls13_only {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS versions: {e}"))?;
    let config = match verifier {
        Some(v) => config.with_client_cert_verifier(v),
        None => config.with_no_client_auth(),
    };
    let mut config = config.with_cert_resolver(settings.resolver.clone());
    let alpn: &[&[u8]] = if http2 { &ALPN_H2 } else { &ALPN_H1 };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    if settings.resolver.acme() {
        // Chosen only by a CA's TLS-ALPN-01 check, which offers nothing else.
        config
            .alpn_protocols
            .push(crate::acme::ACME_TLS_ALPN.to_vec());
    }
    // The provider's order (AES-GCM with hardware support first, then ChaCha20) decides, not
    // the client's.
    config.ignore_client_order = true;
    if settings.resumption {
        // One ticket per connection (OpenSSL sends one after a resumption, two after a full
        // handshake): a client reconnecting always holds a fresh one, and each ticket costs the
        // server a key derivation, an encryption and 200 bytes on the wire.
        config.send_tls13_tickets = 1;
        config.ticketer = resumption.ticketer.clone();
        config.session_storage = resumption.cache.clone();
    } else {
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    }
    Ok(Arc::new(config))
}

/// The configs of the sites that ask for client certificates (`None` when none does): the
/// listener's settings with each site's verifier, and session state of their own, so that a
/// session begun without a client certificate is never resumed where one is required.
pub fn client_auth_configs(
    settings: &TlsSettings,
    http2: bool,
) -> Result<Option<Arc<client_auth::ByName>>, String> {
    if !settings.client_auth.iter().any(|s| s.auth.is_some()) {
        return Ok(None);
    }
    let make = |verifier| {
        let own = Resumption::new()?;
        server_config_verifying(settings, &own, http2, Some(verifier))
    };
    Ok(Some(Arc::new(client_auth::ByName::build(
        &settings.client_auth,
        &make,
    )?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsts_values_are_checked() {
        assert_eq!(
            &*hsts_field("max-age=31536000; includeSubDomains; preload").unwrap(),
            b"Strict-Transport-Security: max-age=31536000; includeSubDomains; preload\r\n"
        );
        for bad in [
            "",
            "max-age=",
            "max-age=1y",
            "includeSubDomains",
            "max-age=1; x\r\nY: z",
        ] {
            assert!(hsts_field(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn aes_128_gcm_comes_first_in_each_version() {
        let suites = preferred_suites(rustls::crypto::aws_lc_rs::default_provider().cipher_suites);
        let first13 = suites
            .iter()
            .find(|s| s.version() == &rustls::version::TLS13);
        let first12 = suites
            .iter()
            .find(|s| s.version() == &rustls::version::TLS12);
        assert_eq!(
            first13.unwrap().suite(),
            rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        assert_eq!(
            first12.unwrap().suite(),
            rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        );
        assert_eq!(
            suites.len(),
            rustls::crypto::aws_lc_rs::default_provider()
                .cipher_suites
                .len()
        );
    }
}
