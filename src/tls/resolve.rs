//! Choosing a certificate by SNI: an exact name, then the longest `*.suffix` wildcard, then the
//! default (none for clients without SNI when `require_sni` says so: their handshake fails).
//! With ACME on, the certificates it obtained come after the exact names, and a handshake
//! offering only the `acme-tls/1` protocol gets the pending TLS-ALPN-01 answer for its name.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Where one site's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSource {
    /// The names it serves (`*.suffix` wildcards included).
    pub names: Vec<String>,
    /// The PEM chain.
    pub cert: std::path::PathBuf,
    /// The PEM private key.
    pub key: std::path::PathBuf,
    /// It is the certificate for clients without SNI or with an unknown name.
    pub default: bool,
}

/// One configured certificate as served: the chain and key, with its OCSP staple once the
/// stapling thread has a good one ([`Slot::staple`]); swapped whole, read without a lock.
#[derive(Debug)]
pub struct Slot {
    plain: Arc<CertifiedKey>,
    served: arc_swap::ArcSwap<CertifiedKey>,
}

impl Slot {
    fn new(key: &Arc<CertifiedKey>) -> Slot {
        Slot {
            plain: key.clone(),
            served: arc_swap::ArcSwap::new(key.clone()),
        }
    }

    /// The certificate as served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.served.load_full()
    }

    /// Its chain, leaf first.
    pub fn chain(&self) -> &[rustls::pki_types::CertificateDer<'static>] {
        &self.plain.cert
    }

    /// Staples `response` (DER) from the next handshake on, or stops stapling (`None`).
    pub fn staple(&self, response: Option<Vec<u8>>) {
        let mut key = CertifiedKey::clone(&self.plain);
        key.ocsp = response;
        self.served.store(Arc::new(key));
    }

    /// The staple served now, if any.
    pub fn stapled(&self) -> Option<Vec<u8>> {
        self.served.load().ocsp.clone()
    }
}

/// Renders each served certificate's expiry as
/// `slipstream_tls_certificate_expiry_timestamp_seconds{certificate="NAME"}` (seconds since
/// the Unix epoch; NAME its first DNS name, else its subject's common name), for alerts and the
/// dashboard.
pub fn render_expiries(slots: &[Arc<Slot>], out: &mut String) {
    use std::fmt::Write;
    if slots.is_empty() {
        return;
    }
    out.push_str(
        "# HELP slipstream_tls_certificate_expiry_timestamp_seconds When each served certificate expires.\n\
         # TYPE slipstream_tls_certificate_expiry_timestamp_seconds gauge\n",
    );
    // One series per name (two slots may serve one certificate name): the earliest expiry.
    let mut earliest = std::collections::BTreeMap::<String, i64>::new();
    for slot in slots {
        let Some(leaf) = slot.chain().first() else {
            continue;
        };
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref()) else {
            continue;
        };
        let dns = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .and_then(|san| {
                san.value.general_names.iter().find_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
            });
        let cn = || {
            cert.subject()
                .iter_common_name()
                .next()
                .and_then(|c| c.as_str().ok())
                .map(str::to_string)
        };
        let name = dns.or_else(cn).unwrap_or_default();
        let at = cert.validity().not_after.timestamp();
        let kept = earliest.entry(name).or_insert(at);
        *kept = (*kept).min(at);
    }
    for (name, at) in earliest {
        let name = crate::observe::exposition::escape_label(&name);
        let _ = writeln!(
            out,
            "slipstream_tls_certificate_expiry_timestamp_seconds{{certificate=\"{name}\"}} {at}"
        );
    }
}

/// Certificates by server name.
#[derive(Debug, Default)]
pub struct SniResolver {
    exact: HashMap<String, Arc<Slot>>,
    /// By suffix with its leading dot (`.example.com`).
    wildcard: HashMap<String, Arc<Slot>>,
    default: Option<Arc<Slot>>,
    /// Every configured certificate once (by the address of its key while building).
    slots: Vec<Arc<Slot>>,
    by_key: HashMap<usize, usize>,
    /// Clients without SNI get no certificate (the handshake fails).
    require_sni: bool,
    /// Names may also have ACME certificates ([`crate::acme::certificate`]).
    acme: bool,
}

impl SniResolver {
    /// Reads every source's files; the first failure is the error. Without a source marked
    /// default, the first one is the default.
    pub fn build(sources: &[CertSource], require_sni: bool) -> Result<SniResolver, String> {
        let mut resolver = SniResolver {
            require_sni,
            ..SniResolver::default()
        };
        let mut first = None;
        for s in sources {
            let key = super::certs::load(&s.cert, &s.key)?;
            for name in &s.names {
                resolver.add(name, &key);
            }
            if s.default {
                resolver.set_default(&key);
            }
            first.get_or_insert(key);
        }
        if let Some(first) = first {
            resolver.set_default(&first);
        }
        Ok(resolver)
    }

    /// Adds `name` (`example.com` or `*.example.com`) for `key`; the first one for a name wins.
    pub fn add(&mut self, name: &str, key: &Arc<CertifiedKey>) {
        let slot = self.slot(key);
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let (map, k) = match name.strip_prefix('*') {
            Some(suffix) => (&mut self.wildcard, suffix.to_string()),
            None => (&mut self.exact, name),
        };
        map.entry(k).or_insert(slot);
    }

    /// Sets the certificate for clients without SNI or with an unknown name.
    pub fn set_default(&mut self, key: &Arc<CertifiedKey>) {
        if self.default.is_none() {
            self.default = Some(self.slot(key));
        }
    }

    /// The slot of `key`, one per certificate however many names it serves.
    fn slot(&mut self, key: &Arc<CertifiedKey>) -> Arc<Slot> {
        let at = Arc::as_ptr(key) as usize;
        if let Some(&i) = self.by_key.get(&at) {
            return self.slots[i].clone();
        }
        let slot = Arc::new(Slot::new(key));
        self.by_key.insert(at, self.slots.len());
        self.slots.push(slot.clone());
        slot
    }

    /// Every configured certificate (for OCSP stapling).
    pub fn slots(&self) -> &[Arc<Slot>] {
        &self.slots
    }

    /// Refuses clients without SNI (`require_sni`).
    pub fn set_require_sni(&mut self, require: bool) {
        self.require_sni = require;
    }

    /// Looks up ACME certificates and answers TLS-ALPN-01 challenges too.
    pub fn set_acme(&mut self, acme: bool) {
        self.acme = acme;
    }

    /// Whether ACME certificates are looked up.
    pub fn acme(&self) -> bool {
        self.acme
    }

    /// Whether any certificate is configured.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.default.is_none()
    }

    /// The certificate for a server name (`None`: the default, unless SNI is required).
    pub fn find(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if name.is_none() && self.require_sni {
            return None;
        }
        if let Some(name) = name {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if let Some(k) = self.exact.get(&name) {
                return Some(k.current());
            }
            if let Some(k) = self.acme.then(|| crate::acme::certificate(&name)).flatten() {
                return Some(k);
            }
            for (i, _) in name.match_indices('.') {
                if let Some(k) = self.wildcard.get(&name[i..]) {
                    return Some(k.current());
                }
            }
        }
        self.default
            .as_ref()
            .map(|s| s.current())
            .or_else(|| self.acme.then(crate::acme::any_certificate).flatten())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if self.acme {
            // A CA's TLS-ALPN-01 check offers that protocol and no other (RFC 8737).
            let mut offered = hello.alpn().into_iter().flatten().peekable();
            let first = offered.peek().is_some();
            if first && offered.all(|p| p == crate::acme::ACME_TLS_ALPN) {
                return crate::acme::alpn_certificate(hello.server_name()?);
            }
        }
        self.find(hello.server_name())
    }
}
