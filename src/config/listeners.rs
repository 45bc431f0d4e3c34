//! The `[[listen]]` sections: addresses, TLS, redirects, h2c, the PROXY protocol, backlog
//! and connection limits, every problem reported with its line.

use std::collections::HashSet;

use serde::Deserialize;
use toml::Spanned;

use super::{ListenerConfig, Validator, DEFAULT_BACKLOG, DEFAULT_MAX_CONNECTIONS};

/// A `[[listen]]` section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileListener {
    pub(super) address: Spanned<String>,
    pub(super) tls: Option<bool>,
    pub(super) redirect_https: Option<bool>,
    h2c: Option<bool>,
    pub(super) proxy_protocol: Option<bool>,
    pub(super) shared: Option<bool>,
    pub(super) backlog: Option<u32>,
    pub(super) max_connections: Option<usize>,
}

impl Validator<'_> {
    pub(super) fn build_listeners(&mut self, listen: &[FileListener]) -> Vec<ListenerConfig> {
        let mut listeners = Vec::new();
        let mut seen = HashSet::new();
        if listen.is_empty() {
            self.error(
                0,
                "no [[listen]] section: at least one listener is required",
            );
        }
        for l in listen {
            if let Some(address) = self.socket_addr(&l.address) {
                if !seen.insert(address) {
                    self.error(
                        l.address.span().start,
                        format!("duplicate listener {address}"),
                    );
                }
                listeners.push(ListenerConfig {
                    address,
                    backlog: l.backlog.unwrap_or(DEFAULT_BACKLOG),
                    max_connections: l.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1),
                    tls: l.tls.unwrap_or(false),
                    redirect_https: l.redirect_https.unwrap_or(false),
                    h2c: l.h2c.unwrap_or(false),
                    shared: l.shared.unwrap_or(false),
                    proxy_protocol: l.proxy_protocol.unwrap_or(false),
                });
            }
        }
        listeners
    }
}
