//! The TLS keys: `tls = true` on a listener, `cert` and `key` on sites (chosen by SNI with the
//! site's host names; the default site's, or the first one's, for clients without SNI), and the
//! `[tls]` section (versions, handshake limits, SNI, resumption, HSTS). Certificate files are read and checked at load,
//! so a missing, broken or mismatched file refuses the config (and a reload keeps the old one).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{FileSite, Validator};
use crate::tls::client_auth::{ClientAuth, SiteClientAuth};
use crate::tls::{CertSource, SniResolver, TlsSettings};

/// Default time allowed for a handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default handshakes in progress per worker.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// The `[tls]` section.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTls {
    min_version: Option<Spanned<String>>,
    handshake_timeout: Option<Spanned<String>>,
    max_handshakes: Option<usize>,
    require_sni: Option<bool>,
    resumption: Option<bool>,
    hsts: Option<Spanned<String>>,
}

impl Validator<'_> {
    /// The TLS settings, when a listener has `tls = true` (or a site has a certificate).
    pub(super) fn build_tls(
        &mut self,
        section: &FileTls,
        sites: &[FileSite],
        tls_listener: Option<usize>,
    ) -> Option<TlsSettings> {
        let mut resolver = SniResolver::default();
        let mut default = None;
        let mut sources = Vec::new();
        for site in sites {
            let (cert, key) = match (&site.cert, &site.key) {
                (None, None) => continue,
                (Some(c), Some(k)) => (c, k),
                (Some(c), None) => {
                    self.error(c.span().start, "a site with cert needs key too");
                    continue;
                }
                (None, Some(k)) => {
                    self.error(k.span().start, "a site with key needs cert too");
                    continue;
                }
            };
            let source = CertSource {
                names: site.hosts.iter().map(|h| h.get_ref().clone()).collect(),
                cert: self.relative(cert.get_ref()),
                key: self.relative(key.get_ref()),
                default: site.default.as_ref().is_some_and(|d| *d.get_ref()),
            };
            let loaded = crate::tls::certs::load(&source.cert, &source.key);
            sources.push(source);
            let certified = match loaded {
                Ok(c) => c,
                Err(reason) => {
                    self.error(cert.span().start, format!("certificate refused: {reason}"));
                    continue;
                }
            };
            for host in &site.hosts {
                resolver.add(host.get_ref(), &certified);
            }
            let is_default = site.default.as_ref().is_some_and(|d| *d.get_ref());
            if is_default || default.is_none() {
                default = Some((is_default, certified.clone()));
            }
            if is_default {
                resolver.set_default(&certified);
            }
        }
        if let Some((_, first)) = &default {
            resolver.set_default(first);
        }
        let acme = sites
            .iter()
            .any(|s| s.acme.as_ref().is_some_and(|a| *a.get_ref()));
        resolver.set_acme(acme);
        let at = match tls_listener {
            Some(at) => at,
            None if resolver.is_empty() => return None,
            None => 0,
        };
        if tls_listener.is_some() && resolver.is_empty() && !acme {
            self.error(
                at,
                "a TLS listener needs a site with cert and key (or acme = true)",
            );
        }
        let tls13_only = match &section.min_version {
            Some(v) if v.get_ref() == "1.3" => true,
            Some(v) if v.get_ref() == "1.2" => false,
            Some(v) => {
                self.error(v.span().start, "min_version is \"1.2\" or \"1.3\"");
                false
            }
            None => false,
        };
        let require_sni = section.require_sni.unwrap_or(false);
        resolver.set_require_sni(require_sni);
        let hsts = section.hsts.as_ref().and_then(|v| {
            crate::tls::hsts_field(v.get_ref())
                .map_err(|e| self.error(v.span().start, e))
                .ok()
        });
        let client_auth = self.client_auth(sites);
        Some(TlsSettings {
            resolver: Arc::new(resolver),
            sources,
            tls13_only,
            handshake_timeout: self.duration(&section.handshake_timeout, DEFAULT_HANDSHAKE_TIMEOUT),
            max_handshakes: section
                .max_handshakes
                .unwrap_or(DEFAULT_MAX_HANDSHAKES)
                .max(1),
            require_sni,
            resumption: section.resumption.unwrap_or(true),
            hsts,
            server: None,
            client_auth,
            by_name: None,
        })
    }

    /// Every site's client-certificate settings (`client_ca`, `verify_client`,
    /// `verify_depth`, `client_crl`), or none when no site asks for client certificates. The
    /// files are read and checked at load.
    fn client_auth(&mut self, sites: &[FileSite]) -> Vec<SiteClientAuth> {
        let mut all = Vec::new();
        for site in sites {
            let auth = match &site.client_ca {
                Some(ca) => {
                    let required = match site
                        .verify_client
                        .as_ref()
                        .map(|v| (v.get_ref().as_str(), v.span().start))
                    {
                        None | Some(("required", _)) => true,
                        Some(("optional", _)) => false,
                        Some((_, at)) => {
                            self.error(at, "verify_client is \"required\" or \"optional\"");
                            true
                        }
                    };
                    let auth = ClientAuth {
                        ca: self.relative(ca.get_ref()),
                        required,
                        depth: site.verify_depth.as_ref().map_or(1, |d| *d.get_ref()),
                        crls: site
                            .client_crl
                            .iter()
                            .map(|c| self.relative(c.get_ref()))
                            .collect(),
                    };
                    if let Err(e) = auth.verifier() {
                        self.error(ca.span().start, format!("client certificates: {e}"));
                    }
                    if site.hosts.iter().any(|h| h.get_ref().starts_with('~')) {
                        self.error(
                            ca.span().start,
                            "client_ca needs exact or *. host names: the TLS handshake chooses the site by SNI before any regex could",
                        );
                    }
                    Some(auth)
                }
                None => {
                    let stray = site
                        .verify_client
                        .as_ref()
                        .map(Spanned::span)
                        .or(site.verify_depth.as_ref().map(Spanned::span))
                        .or(site.client_crl.first().map(Spanned::span));
                    if let Some(span) = stray {
                        self.error(
                            span.start,
                            "verify_client, verify_depth and client_crl need client_ca",
                        );
                    }
                    None
                }
            };
            all.push(SiteClientAuth {
                names: site.hosts.iter().map(|h| h.get_ref().clone()).collect(),
                default: site.default.as_ref().is_some_and(|d| *d.get_ref()),
                auth,
            });
        }
        if all.iter().all(|s| s.auth.is_none()) {
            all.clear();
        }
        all
    }

    /// The file a config value names (relative to the config file's folder), read, when it
    /// holds `marker` (a PEM label); else an error at the value, and `None`.
    pub(super) fn read_pem_file(
        &mut self,
        value: &Spanned<String>,
        marker: &str,
    ) -> Option<(std::path::PathBuf, Vec<u8>)> {
        let path = self.relative(value.get_ref());
        match std::fs::read(&path) {
            Ok(b) if b.windows(marker.len()).any(|w| w == marker.as_bytes()) => Some((path, b)),
            Ok(_) => {
                let what = marker
                    .trim_matches('-')
                    .trim_start_matches("BEGIN ")
                    .to_ascii_lowercase();
                self.error(
                    value.span().start,
                    format!("{}: no PEM {what} in it", path.display()),
                );
                None
            }
            Err(e) => {
                self.error(value.span().start, format!("{}: {e}", path.display()));
                None
            }
        }
    }

    /// A path from the config, relative to the config file's folder.
    pub(super) fn relative(&self, path: &str) -> std::path::PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            return p.to_path_buf();
        }
        Path::new(self.file)
            .parent()
            .map_or_else(|| p.to_path_buf(), |dir| dir.join(p))
    }
}
