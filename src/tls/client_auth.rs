//! Client certificates (mutual TLS toward clients, nginx's `ssl_verify_client`): per site, a
//! CA file the client's chain must lead to, `required` or `optional`, a verification depth and
//! CRLs. rustls's config is chosen per connection by the ClientHello's SNI when any site asks
//! for client certificates ([`ByName`]); a verified certificate is read once per connection
//! into the `$ssl_client_*` variables ([`ClientCert`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::ServerConfig;

/// One site's client-certificate settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// The PEM CA certificates a client's chain must lead to.
    pub ca: PathBuf,
    /// A client without a certificate is refused (else it is served, `$ssl_client_verify`
    /// being `NONE`).
    pub required: bool,
    /// Most certificates between the client's and a CA of the file (nginx's
    /// `ssl_verify_depth`, default 1: issued by the CA itself).
    pub depth: usize,
    /// PEM CRLs: a certificate they revoke is refused.
    pub crls: Vec<PathBuf>,
}

/// A site's names with its client-certificate settings (`None`: it asks for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteClientAuth {
    /// The site's host names (`*.suffix` wildcards included).
    pub names: Vec<String>,
    /// It is the site for clients without SNI or with an unknown name.
    pub default: bool,
    /// Its settings.
    pub auth: Option<ClientAuth>,
}

impl ClientAuth {
    /// The verifier of these settings: the CA file and CRLs read and checked.
    pub fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(&self.ca)? {
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", self.ca.display()))?;
        }
        let mut crls = Vec::new();
        for path in &self.crls {
            let found: Vec<CertificateRevocationListDer<'static>> =
                CertificateRevocationListDer::pem_file_iter(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            if found.is_empty() {
                return Err(format!("{}: no X509 CRL in the file", path.display()));
            }
            crls.extend(found);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut builder =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .with_crls(crls)
                .enforce_revocation_expiration();
        if !self.required {
            builder = builder.allow_unauthenticated();
        }
        builder
            .build()
            .map_err(|e| format!("{}: {e}", self.ca.display()))
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no CA certificate in the file", path.display()));
    }
    Ok(certs)
}

/// The rustls configs of the sites that ask for client certificates, by SNI name as sites
/// are chosen (exact, wildcard, default); the other sites use the listener's base config.
#[derive(Debug, Default)]
pub struct ByName {
    exact: HashMap<String, usize>,
    wildcard: HashMap<String, usize>,
    default: Option<usize>,
    /// Per site: its config and verification depth, `None` for the base config.
    configs: Vec<Option<(Arc<ServerConfig>, usize)>>,
}

impl ByName {
    /// Builds the config of each site that asks for client certificates with `make` and its
    /// verifier. Without a default site, the first one is the default.
    pub fn build(
        sites: &[SiteClientAuth],
        make: &dyn Fn(Arc<dyn ClientCertVerifier>) -> Result<Arc<ServerConfig>, String>,
    ) -> Result<ByName, String> {
        let mut by = ByName::default();
        for (i, site) in sites.iter().enumerate() {
            let config = match &site.auth {
                Some(auth) => Some((make(auth.verifier()?)?, auth.depth)),
                None => None,
            };
            by.configs.push(config);
            for name in &site.names {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                match name.strip_prefix('*') {
                    Some(suffix) => by.wildcard.entry(suffix.to_string()).or_insert(i),
                    None => by.exact.entry(name).or_insert(i),
                };
            }
            if site.default && by.default.is_none() {
                by.default = Some(i);
            }
        }
        by.default = by.default.or((!sites.is_empty()).then_some(0));
        Ok(by)
    }

    /// The config and verification depth for a ClientHello's name (`None`: the base one).
    pub fn find(&self, name: Option<&str>) -> Option<(Arc<ServerConfig>, usize)> {
        self.configs.get(self.site(name)?).cloned().flatten()
    }

    /// The site a name selects, as for certificates: exact, wildcard, else the default.
    fn site(&self, name: Option<&str>) -> Option<usize> {
        let site = name.and_then(|name| {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            self.exact.get(&name).copied().or_else(|| {
                name.match_indices('.')
                    .find_map(|(i, _)| self.wildcard.get(&name[i..]).copied())
            })
        });
        site.or(self.default)
    }

    /// Whether a request for `host` on a connection made for `sni` must be refused (421):
    /// they select different sites and one of the two asks for client certificates, so the
    /// handshake did not check what the request's site requires (nginx's rule).
    pub fn misdirected(&self, sni: Option<&str>, host: Option<&[u8]>) -> bool {
        let Some(host) = host.and_then(|h| std::str::from_utf8(h).ok()) else {
            return false;
        };
        let name = if host.starts_with('[') {
            host
        } else {
            host.rsplit_once(':').map_or(host, |(name, _)| name)
        };
        let (a, b) = (self.site(sni), self.site(Some(name)));
        let asks = |s: Option<usize>| {
            s.and_then(|i| self.configs.get(i))
                .is_some_and(Option::is_some)
        };
        a != b && (asks(a) || asks(b))
    }
}

/// Whether a verified chain the client sent fits within `depth` (certificates between the
/// client's and the CA file's; intermediates the client sent count).
pub fn within_depth(chain: &[CertificateDer<'_>], depth: usize) -> bool {
    chain.len() <= depth.max(1)
}

/// What the `$ssl_client_*` variables read of one connection's client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientCert {
    /// `SUCCESS` (a verified certificate) or `NONE`.
    pub verify: &'static str,
    /// The subject, RFC 2253 style (`CN=client,O=Example`).
    pub subject: String,
    /// The issuer, the same way.
    pub issuer: String,
    /// The serial number, upper-case hexadecimal.
    pub serial: String,
    /// The SHA-1 of the certificate, lower-case hexadecimal (nginx's fingerprint).
    pub fingerprint: String,
    /// Its subject alternative names, comma-separated (`DNS:a.example,email:x@y`).
    pub san: String,
}

impl ClientCert {
    /// The variables of a connection whose client sent `chain` (verified by the handshake).
    pub fn of(chain: Option<&[CertificateDer<'_>]>) -> ClientCert {
        let Some(leaf) = chain.and_then(<[_]>::first) else {
            return ClientCert {
                verify: "NONE",
                ..ClientCert::default()
            };
        };
        let mut c = ClientCert {
            verify: "SUCCESS",
            fingerprint: hex(aws_lc_rs::digest::digest(
                &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
                leaf.as_ref(),
            )
            .as_ref()),
            ..ClientCert::default()
        };
        if let Ok((_, parsed)) = x509_parser::parse_x509_certificate(leaf.as_ref()) {
            c.subject = rfc2253(parsed.subject());
            c.issuer = rfc2253(parsed.issuer());
            // As OpenSSL prints it: the DER sign byte is not part of the number.
            let raw = parsed.raw_serial();
            let serial = match raw {
                [0, next, ..] if *next >= 0x80 => &raw[1..],
                _ => raw,
            };
            c.serial = hex(serial).to_ascii_uppercase();
            c.san = sans(&parsed);
        }
        c
    }
}

/// A name in RFC 2253's order (most specific first) and form.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut rdns: Vec<String> = Vec::new();
    for rdn in name.iter() {
        let mut attrs = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type().to_id_string();
            // OpenSSL's names where they differ from the registry's.
            let key = match oid.as_str() {
                "1.2.840.113549.1.9.1" => "emailAddress".to_string(),
                "2.5.4.42" => "GN".to_string(),
                _ => x509_parser::objects::oid2abbrev(
                    attr.attr_type(),
                    x509_parser::objects::oid_registry(),
                )
                .map_or(oid, str::to_string),
            };
            attrs.push(format!(
                "{key}={}",
                escape_dn(attr.as_str().unwrap_or_default())
            ));
        }
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    rdns.join(",")
}

/// An attribute value escaped as RFC 2253 says (and OpenSSL prints): the special characters,
/// a leading `#` or space, a trailing space, and bytes outside printable ASCII as `\XX`.
fn escape_dn(value: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(value.len());
    let last = value.len().saturating_sub(1);
    for (i, ch) in value.char_indices() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (ch == '#' || ch == ' '))
            || (i == last && ch == ' ');
        if special {
            out.push('\\');
            out.push(ch);
        } else if ch.is_ascii_graphic() || ch == ' ' {
            out.push(ch);
        } else {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "\\{b:02X}");
            }
        }
    }
    out
}

/// The subject alternative names, `TYPE:value` comma-separated.
fn sans(cert: &x509_parser::certificate::X509Certificate<'_>) -> String {
    use x509_parser::extensions::GeneralName;
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return String::new();
    };
    let names: Vec<String> = ext
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(format!("DNS:{d}")),
            GeneralName::RFC822Name(e) => Some(format!("email:{e}")),
            GeneralName::URI(u) => Some(format!("URI:{u}")),
            GeneralName::IPAddress(b) => match b.len() {
                4 => Some(format!(
                    "IP:{}",
                    std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3])
                )),
                16 => <[u8; 16]>::try_from(*b)
                    .ok()
                    .map(|a| format!("IP:{}", std::net::Ipv6Addr::from(a))),
                _ => None,
            },
            _ => None,
        })
        .collect();
    names.join(",")
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_reads_as_nginx_variables() {
        let mut params = rcgen::CertificateParams::new(vec!["client.test".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "client, one");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Example");
        params.subject_alt_names.push(rcgen::SanType::Rfc822Name(
            "ops@example.com".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let c = ClientCert::of(Some(&[cert.der().clone()]));
        assert_eq!(c.verify, "SUCCESS");
        assert_eq!(c.subject, "O=Example,CN=client\\, one");
        assert_eq!(c.subject, c.issuer);
        assert_eq!(c.san, "DNS:client.test,email:ops@example.com");
        assert_eq!(c.fingerprint.len(), 40);
        assert!(!c.serial.is_empty());
        assert_eq!(ClientCert::of(None).verify, "NONE");
    }
}
