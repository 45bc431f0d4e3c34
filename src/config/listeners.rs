//! The `[[listen]]` sections: addresses, TLS, redirects, h2c, the PROXY protocol, backlog
//! and connection limits, every problem reported with its line.

use std::collections::HashSet;
use std::net::SocketAddr;

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
    pub(super) ipv6only: Option<Spanned<bool>>,
}

impl Validator<'_> {
    /// A listener's `ipv6only` (true unless said), refused on an IPv4 address.
    fn ipv6only(&mut self, l: &FileListener, address: SocketAddr) -> bool {
        let Some(v6only) = &l.ipv6only else {
            return true;
        };
        if address.is_ipv4() {
            let message = "ipv6only applies to IPv6 addresses ([::]:PORT)";
            self.error(v6only.span().start, message);
        }
        *v6only.get_ref()
    }

    pub(super) fn build_listeners(&mut self, listen: &[FileListener]) -> Vec<ListenerConfig> {
        let mut listeners = Vec::new();
        let mut spans = Vec::new();
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
                spans.push(l.address.span().start);
                listeners.push(ListenerConfig {
                    address,
                    backlog: l.backlog.unwrap_or(DEFAULT_BACKLOG),
                    max_connections: l.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1),
                    tls: l.tls.unwrap_or(false),
                    redirect_https: l.redirect_https.unwrap_or(false),
                    h2c: l.h2c.unwrap_or(false),
                    shared: l.shared.unwrap_or(false),
                    proxy_protocol: l.proxy_protocol.unwrap_or(false),
                    ipv6only: self.ipv6only(l, address),
                });
            }
        }
        self.refuse_dual_stack_clashes(&listeners, &spans);
        listeners
    }

    /// A dual-stack listener (`[::]:PORT`, `ipv6only = false`) takes that port's IPv4
    /// connections: another listener on an IPv4 address of that port is refused, as nginx's
    /// bind would fail.
    fn refuse_dual_stack_clashes(&mut self, listeners: &[ListenerConfig], spans: &[usize]) {
        let dual: Vec<u16> = listeners
            .iter()
            .filter(|l| l.address.is_ipv6() && !l.ipv6only && l.address.ip().is_unspecified())
            .map(|l| l.address.port())
            .collect();
        for (l, &at) in listeners.iter().zip(spans) {
            if l.address.is_ipv4() && dual.contains(&l.address.port()) {
                let message = format!(
                    "{} clashes with the listener on [::]:{} with ipv6only = false, which takes \
                     IPv4 connections on that port too",
                    l.address,
                    l.address.port()
                );
                self.error(at, message);
            }
        }
    }
}
