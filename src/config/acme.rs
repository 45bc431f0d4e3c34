//! `acme = true` on sites and the `[acme]` section: the CA, the contact, the challenge and the
//! state directory. Each ACME site's exact host names become one certificate's names;
//! wildcards (DNS-01 only), regex hosts and addresses are refused with the reason.

use serde::Deserialize;
use toml::Spanned;

use super::listeners::FileListener;
use super::{FileSite, Validator};
use crate::acme::{AcmeSettings, Challenge, DEFAULT_STATE_DIR, LETS_ENCRYPT};

/// The `[acme]` section.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAcme {
    directory: Option<Spanned<String>>,
    email: Option<Spanned<String>>,
    ca_root: Option<Spanned<String>>,
    challenge: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    placeholder: Option<bool>,
}

impl Validator<'_> {
    /// The ACME settings, when a site has `acme = true`.
    pub(super) fn build_acme(
        &mut self,
        section: &FileAcme,
        sites: &[FileSite],
        listen: &[FileListener],
    ) -> Option<AcmeSettings> {
        let mut certificates = Vec::new();
        let mut first = None;
        for site in sites {
            let Some(on) = site.acme.as_ref().filter(|a| *a.get_ref()) else {
                continue;
            };
            let at = on.span().start;
            first.get_or_insert(at);
            if site.cert.is_some() || site.key.is_some() {
                self.error(
                    at,
                    "a site has either acme = true or cert and key, not both",
                );
                continue;
            }
            let names = self.acme_names(site, at);
            if !names.is_empty() {
                certificates.push(names);
            }
        }
        let at = first?;
        if !listen.iter().any(|l| l.tls == Some(true)) {
            self.error(
                at,
                "acme = true needs a [[listen]] with tls = true to serve the certificate on",
            );
        }
        let challenge = self.acme_challenge(section, listen);
        let directory = match &section.directory {
            Some(d) if d.get_ref().starts_with("https://") => d.get_ref().clone(),
            Some(d) => {
                self.error(
                    d.span().start,
                    "directory is the CA's https:// directory URL",
                );
                String::new()
            }
            None => LETS_ENCRYPT.to_string(),
        };
        let email = section.email.as_ref().and_then(|e| {
            let v = e.get_ref();
            let ok = v.contains('@') && !v.chars().any(|c| c.is_whitespace() || c == ',');
            if !ok {
                self.error(
                    e.span().start,
                    "email is one address, e.g. \"ops@example.com\"",
                );
            }
            ok.then(|| v.clone())
        });
        let ca_root = section
            .ca_root
            .as_ref()
            .and_then(|r| self.read_pem_file(r, "-----BEGIN CERTIFICATE-----"))
            .map(|(path, _)| path);
        let state_dir = section
            .state_dir
            .as_ref()
            .map_or_else(|| DEFAULT_STATE_DIR.into(), |d| self.relative(d.get_ref()));
        Some(AcmeSettings {
            directory,
            email,
            ca_root,
            challenge,
            state_dir,
            placeholder: section.placeholder.unwrap_or(false),
            certificates,
        })
    }

    /// The challenge: `auto` is HTTP-01 when a plain listener is on port 80 (where a CA
    /// checks it), else TLS-ALPN-01 (port 443).
    fn acme_challenge(&mut self, section: &FileAcme, listen: &[FileListener]) -> Challenge {
        let plain = listen.iter().any(|l| l.tls != Some(true));
        let port_80 = listen
            .iter()
            .any(|l| l.tls != Some(true) && l.address.get_ref().rsplit(':').next() == Some("80"));
        match section
            .challenge
            .as_ref()
            .map(|c| (c.get_ref().as_str(), c.span().start))
        {
            None | Some(("auto", _)) if port_80 => Challenge::Http01,
            None | Some(("auto", _)) => Challenge::TlsAlpn01,
            Some(("http-01", at)) => {
                if !plain {
                    self.error(at, "challenge = \"http-01\" needs a plain [[listen]] (port 80 at a public CA) to answer on");
                }
                Challenge::Http01
            }
            Some(("tls-alpn-01", _)) => Challenge::TlsAlpn01,
            Some((_, at)) => {
                self.error(at, "challenge is \"auto\", \"http-01\" or \"tls-alpn-01\" (DNS-01 is not supported)");
                Challenge::Http01
            }
        }
    }

    /// An ACME site's host names, lower-cased; each one a certificate cannot carry is an
    /// error.
    fn acme_names(&mut self, site: &FileSite, at: usize) -> Vec<String> {
        if site.hosts.is_empty() {
            self.error(
                at,
                "acme = true needs the site's hosts: they become the certificate's names",
            );
        }
        let mut names = Vec::new();
        for host in &site.hosts {
            match crate::acme::check_name(host.get_ref()) {
                Err(reason) => {
                    self.error(host.span().start, format!("{}: {reason}", host.get_ref()));
                }
                Ok(name) if !names.contains(&name) => names.push(name),
                Ok(_) => {}
            }
        }
        names
    }
}
