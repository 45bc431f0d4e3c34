//! A group's TLS keys: `https://` servers or `tls = true`, `tls_ca` (else the system's roots),
//! `tls_verify` (only an explicit `false` turns verification off), `tls_server_name` (SNI and
//! the name verified; else each server's host), `tls_client_cert` and `tls_client_key` (mTLS).

use std::path::PathBuf;
use std::sync::Arc;

use toml::Spanned;

use super::upstream::{FileUpstream, Protocol, UpstreamGroup};
use super::Validator;
use crate::tls::client::{ClientSettings, UpstreamTls};

/// The TLS keys of one `[upstreams.NAME]`.
pub(super) struct FileUpstreamTls<'a> {
    pub(super) tls: Option<&'a Spanned<bool>>,
    pub(super) ca: Option<&'a str>,
    pub(super) verify: Option<bool>,
    pub(super) server_name: Option<&'a str>,
    pub(super) client_cert: Option<&'a str>,
    pub(super) client_key: Option<&'a str>,
}

impl Validator<'_> {
    /// The group's TLS client settings, when its servers speak TLS.
    pub(super) fn build_upstream_tls(
        &mut self,
        g: &UpstreamGroup,
        name: &Spanned<String>,
        u: &FileUpstream,
    ) -> Option<Arc<UpstreamTls>> {
        let keys = u.tls_keys();
        let at = name.span().start;
        let https = g.servers.iter().filter(|s| s.tls).count();
        if https > 0 && https < g.servers.len() {
            self.error(at, "servers of a group are all https:// or none is");
        }
        let h2 = g.protocol == Protocol::H2;
        let wanted = https > 0 || h2 || keys.tls.is_some_and(|t| *t.get_ref());
        if wanted && g.protocol == Protocol::H2c {
            self.error(
                at,
                "protocol = \"h2c\" is HTTP/2 without TLS: use \"h2\" for TLS",
            );
            return None;
        }
        if !wanted {
            let any = keys.ca.is_some()
                || keys.verify.is_some()
                || keys.server_name.is_some()
                || keys.client_cert.is_some()
                || keys.client_key.is_some();
            if any {
                self.error(at, "tls_* keys need tls = true or https:// servers");
            }
            return None;
        }
        if g.fastcgi.is_some() {
            self.error(at, "TLS to FastCGI servers is not supported");
            return None;
        }
        let path = |p: Option<&str>| p.map(PathBuf::from);
        let (ca, cert, key) = (path(keys.ca), path(keys.client_cert), path(keys.client_key));
        let client_cert = match (&cert, &key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            (None, None) => None,
            _ => {
                self.error(at, "tls_client_cert and tls_client_key go together");
                None
            }
        };
        let settings = ClientSettings {
            ca: ca.as_deref(),
            verify: keys.verify.unwrap_or(true),
            client_cert,
            alpn_h2: h2,
        };
        let names: Vec<_> = g
            .servers
            .iter()
            .flat_map(|s| s.addrs.iter().map(|a| (a.clone(), s.host.clone())))
            .collect();
        match UpstreamTls::build(&settings, &names, keys.server_name) {
            Ok(tls) => Some(Arc::new(tls)),
            Err(e) => {
                self.error(at, format!("upstream TLS: {e}"));
                None
            }
        }
    }
}
