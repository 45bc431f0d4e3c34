//! Automatic HTTPS (ACME, RFC 8555): certificates for the hosts of sites with `acme = true`,
//! ordered, stored ([`state`]) and renewed by one process-wide thread ([`manager`], on
//! `instant-acme`), their challenges answered by slipstream itself: HTTP-01 on plain
//! listeners before routing ([`http01_answer`]), TLS-ALPN-01 in the handshake
//! ([`alpn_certificate`]). The workers read certificates and challenge answers from
//! process-wide maps that the manager replaces whole ([`certificate`]): a renewal is served
//! by every worker at its next handshake, without a reload.

pub mod manager;
pub mod shared;
pub mod state;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use arc_swap::ArcSwap;
use rustls::sign::CertifiedKey;

/// Let's Encrypt's production directory: the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// The path prefix of HTTP-01 challenges.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";
/// The ALPN protocol of TLS-ALPN-01 (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Where the state goes unless configured otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/slipstream/acme";

/// `name` lower-cased, if a certificate from an ACME CA can carry it; else why not.
pub fn check_name(name: &str) -> Result<String, &'static str> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.starts_with('*') {
        Err("a wildcard name needs the DNS-01 challenge, which slipstream does not answer: get this certificate with a DNS-01 client and give the site cert and key")
    } else if name.starts_with('~') {
        Err("a regex host cannot be a certificate's name: list the exact names of an acme site")
    } else if name.parse::<std::net::IpAddr>().is_ok() {
        Err("an IP address cannot be an ACME name here: ACME certificates are for DNS names")
    } else if !valid_dns_name(&name) {
        Err("not a DNS name a certificate can carry (letters, digits and hyphens in dot-separated labels)")
    } else {
        Ok(name)
    }
}

/// Letters, digits and hyphens in dot-separated labels of 1 to 63 characters, at most 253 in
/// all, with at least one dot.
fn valid_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.contains('.')
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// How the CA checks that slipstream answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// A token served over plain HTTP (port 80 at a real CA).
    Http01,
    /// A special certificate in a TLS handshake (port 443 at a real CA).
    TlsAlpn01,
}

/// The `[acme]` section with the names of the sites that have `acme = true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeSettings {
    /// The CA's directory URL.
    pub directory: String,
    /// The account's contact address, if any.
    pub email: Option<String>,
    /// A PEM root that the CA's HTTPS is checked against instead of the system's roots.
    pub ca_root: Option<PathBuf>,
    /// The challenge answered (`auto` is resolved from the listeners when the config loads).
    pub challenge: Challenge,
    /// Where the account, certificates and keys are kept.
    pub state_dir: PathBuf,
    /// Serve a self-signed certificate for names still waiting for theirs.
    pub placeholder: bool,
    /// One certificate per site: its names, first name first.
    pub certificates: Vec<Vec<String>>,
}

/// What the workers read: immutable maps, each replaced whole by the manager.
#[derive(Default)]
struct Store {
    /// Served certificates by name.
    certs: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// The names configured now: a certificate installed late (an order that outlived a
    /// reload) is never served for a name no longer configured.
    configured: ArcSwap<Vec<String>>,
    /// The certificate for clients without SNI or with an unknown name: the first name's.
    fallback: ArcSwap<Option<Arc<CertifiedKey>>>,
    /// Where pending HTTP-01 answers are also written, for the instances sharing the state
    /// directory (any of them may receive the CA's check).
    shared_tokens: ArcSwap<Option<PathBuf>>,
    /// The answers found there (other instances' pending tokens), read by the ACME thread.
    shared_http: ArcSwap<HashMap<String, String>>,
    /// HTTP-01 key authorizations by token.
    http: ArcSwap<HashMap<String, String>>,
    /// TLS-ALPN-01 answers by name.
    alpn: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// Each certificate's standing, for `/status`, `/metrics` and `doctor`.
    status: Mutex<Vec<Status>>,
}

static STORE: LazyLock<Store> = LazyLock::new(Store::default);

/// The served ACME certificate for `name`, if it has one.
pub fn certificate(name: &str) -> Option<Arc<CertifiedKey>> {
    let certs = STORE.certs.load();
    if certs.is_empty() {
        return None;
    }
    certs.get(name).cloned()
}

/// Whether any ACME certificate is served (the fallback for clients without SNI).
pub fn any_certificate() -> Option<Arc<CertifiedKey>> {
    STORE.fallback.load().as_ref().clone()
}

/// The answer to an HTTP-01 request for `path`, when it asks for a pending token: this
/// instance's, or one another instance sharing the state directory published there (both
/// in memory: no file is read on a worker).
pub fn http01_answer(path: &str) -> Option<String> {
    let token = path.strip_prefix(HTTP01_PREFIX)?;
    if let Some(answer) = STORE.http.load().get(token) {
        return Some(answer.clone());
    }
    STORE.shared_http.load().get(token).cloned()
}

/// A token as a CA sends it (base64url): safe as a file name.
fn well_formed_token(token: &str) -> bool {
    (1..=128).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// How often the state directory's pending HTTP-01 answers are read.
pub(crate) const SHARED_TOKEN_SCAN: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads the other instances' pending HTTP-01 answers from the state directory (every
/// [`SHARED_TOKEN_SCAN`], on the ACME thread).
async fn scan_shared_tokens() {
    loop {
        let dir = STORE.shared_tokens.load().as_ref().clone();
        let mut found = HashMap::new();
        if let Some(entries) = dir.and_then(|d| std::fs::read_dir(d).ok()) {
            for entry in entries.flatten().take(1000) {
                let Some(token) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if !well_formed_token(&token) {
                    continue;
                }
                if let Ok(answer) = std::fs::read_to_string(entry.path()) {
                    if answer.starts_with(&token) && answer.len() < 512 {
                        found.insert(token, answer);
                    }
                }
            }
        }
        if *STORE.shared_http.load().as_ref() != found {
            STORE.shared_http.store(Arc::new(found));
        }
        tokio::time::sleep(SHARED_TOKEN_SCAN).await;
    }
}

/// Where HTTP-01 answers are shared with other instances (`None`: nowhere).
fn share_tokens(dir: Option<PathBuf>) {
    STORE.shared_tokens.store(Arc::new(dir));
}

/// The TLS-ALPN-01 certificate for `name`, while its challenge is pending.
pub fn alpn_certificate(name: &str) -> Option<Arc<CertifiedKey>> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    STORE.alpn.load().get(&name).cloned()
}

/// Serves `key` for `names` (a new or renewed certificate, or a placeholder).
fn install(names: &[String], key: &Arc<CertifiedKey>) {
    let configured = STORE.configured.load();
    STORE.certs.rcu(|old| {
        let mut map = HashMap::clone(old);
        for n in names.iter().filter(|n| configured.contains(n)) {
            map.insert(n.clone(), key.clone());
        }
        map
    });
    pick_fallback();
}

/// Serves certificates only for `names` (the configured ones) from now on.
fn retain(names: &[String]) {
    STORE.configured.store(Arc::new(names.to_vec()));
    STORE.certs.rcu(|old| {
        let mut map = HashMap::clone(old);
        map.retain(|k, _| names.contains(k));
        map
    });
    pick_fallback();
}

/// The fallback certificate: the first configured name's.
fn pick_fallback() {
    let certs = STORE.certs.load();
    let first = STORE
        .configured
        .load()
        .iter()
        .find_map(|n| certs.get(n).cloned());
    STORE.fallback.store(Arc::new(first));
}

/// Publishes an HTTP-01 token (`Some`) or withdraws it (`None`).
fn set_http01(token: &str, key_authorization: Option<String>) {
    STORE.http.rcu(|old| {
        let mut map = HashMap::clone(old);
        match &key_authorization {
            Some(k) => map.insert(token.to_string(), k.clone()),
            None => map.remove(token),
        };
        map
    });
}

/// Publishes a TLS-ALPN-01 certificate for `name` (`Some`) or withdraws it (`None`).
fn set_alpn(name: &str, key: Option<Arc<CertifiedKey>>) {
    STORE.alpn.rcu(|old| {
        let mut map = HashMap::clone(old);
        match &key {
            Some(k) => map.insert(name.to_string(), k.clone()),
            None => map.remove(name),
        };
        map
    });
}

/// One certificate's standing.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    /// Its names.
    pub names: Vec<String>,
    /// Served with a certificate from the CA.
    pub served: bool,
    /// Served with a self-signed placeholder while waiting.
    pub placeholder: bool,
    /// Expiry of the served certificate (seconds since the epoch; 0 when none).
    pub not_after: i64,
    /// When it is renewed (seconds since the epoch; 0 when unknown).
    pub renew_at: i64,
    /// Orders placed since start.
    pub orders: u64,
    /// Certificates obtained since start.
    pub issued: u64,
    /// Renewal orders naming the certificate they replace (ARI) that the CA refused, each
    /// placed again without the name.
    pub replacements_refused: u64,
    /// Failed attempts since start.
    pub failures: u64,
    /// Failed attempts in a row now.
    pub failing: u32,
    /// The last failure's reason.
    pub last_error: Option<String>,
    /// When the next attempt after a failure is (seconds since the epoch; 0: none waiting).
    pub retry_at: i64,
}

/// Replaces the standing of every certificate.
fn publish(status: Vec<Status>) {
    *STORE
        .status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = status;
}

/// Every certificate's standing.
pub fn statuses() -> Vec<Status> {
    STORE
        .status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// A metric family: name, type, help, and its value for one certificate.
type Family = (&'static str, &'static str, &'static str, fn(&Status) -> i64);

/// The Prometheus lines of the ACME certificates (nothing when there are none).
pub fn render_metrics(out: &mut String) {
    use std::fmt::Write;
    let all = statuses();
    if all.is_empty() {
        return;
    }
    let families: [Family; 6] = [
        (
            "slipstream_acme_certificate_expiry_timestamp_seconds",
            "gauge",
            "When the served ACME certificate expires (0: none served).",
            |s| s.not_after,
        ),
        (
            "slipstream_acme_certificate_served",
            "gauge",
            "1 when a certificate from the CA is served for these names.",
            |s| i64::from(s.served),
        ),
        (
            "slipstream_acme_orders_total",
            "counter",
            "ACME orders placed.",
            |s| s.orders as i64,
        ),
        (
            "slipstream_acme_certificates_issued_total",
            "counter",
            "Certificates obtained from the CA.",
            |s| s.issued as i64,
        ),
        (
            "slipstream_acme_replacements_refused_total",
            "counter",
            "Renewal orders naming the certificate they replace that the CA refused (each ordered again without the name).",
            |s| s.replacements_refused as i64,
        ),
        (
            "slipstream_acme_failures_total",
            "counter",
            "Failed attempts to obtain a certificate (each is retried with backoff).",
            |s| s.failures as i64,
        ),
    ];
    for (name, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in &all {
            let _ = writeln!(
                out,
                "{name}{{names=\"{}\"}} {}",
                s.names.join(","),
                value(s)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(check_name("Example.COM.").unwrap(), "example.com");
        for good in ["a-b.example.co.uk", "xn--bcher-kva.example"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        assert!(check_name("*.example.com").unwrap_err().contains("DNS-01"));
        assert!(check_name("10.0.0.1").unwrap_err().contains("IP address"));
        for bad in ["localhost", "a..b", "-a.com", "a_b.com", "a.com/x", ""] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_answered_only_under_the_challenge_path_while_published() {
        set_http01("tok-1", Some("tok-1.thumb".into()));
        assert_eq!(
            http01_answer("/.well-known/acme-challenge/tok-1").as_deref(),
            Some("tok-1.thumb")
        );
        assert_eq!(http01_answer("/tok-1"), None);
        assert_eq!(http01_answer("/.well-known/acme-challenge/tok-2"), None);
        set_http01("tok-1", None);
        assert_eq!(http01_answer("/.well-known/acme-challenge/tok-1"), None);
    }
}
