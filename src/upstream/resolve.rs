//! Re-resolving server names (DNS discovery: Kubernetes headless services, Consul DNS) with
//! hickory-resolver, on the control thread, never on a worker. Every A and AAAA record of a
//! name is a server; the system's resolver config and /etc/hosts apply unless the config names
//! DNS servers (`resolver = [...]`).

use std::net::SocketAddr;

use crate::net::Address;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, NameServerConfigGroup, ResolveHosts, ResolverConfig,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;

/// A resolver for the control thread: `servers` when given, else the system's config.
pub fn resolver(servers: &[SocketAddr]) -> Option<TokioResolver> {
    let provider = TokioConnectionProvider::default();
    let mut builder = if servers.is_empty() {
        match TokioResolver::builder(provider) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(
                    "cannot read the system resolver config ({e}); names are not re-resolved"
                );
                return None;
            }
        }
    } else {
        let group: Vec<NameServerConfig> = servers
            .iter()
            .map(|&a| NameServerConfig::new(a, Protocol::Udp))
            .collect();
        let config =
            ResolverConfig::from_parts(None, Vec::new(), NameServerConfigGroup::from(group));
        TokioResolver::builder_with_config(config, provider)
    };
    let opts = builder.options_mut();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    // The interval is the config's: no answer is kept longer than until the next lookup.
    opts.cache_size = 0;
    if !servers.is_empty() {
        opts.use_hosts_file = ResolveHosts::Never;
    }
    Some(builder.build())
}

/// Every address of `host`, with `port`; sorted, so two answers compare equal when they hold
/// the same records. An error when the lookup failed (the caller keeps the previous answer).
pub async fn lookup(
    resolver: &TokioResolver,
    host: &str,
    port: u16,
) -> Result<Vec<Address>, String> {
    let answer = resolver.lookup_ip(host).await.map_err(|e| e.to_string())?;
    let mut addrs: Vec<Address> = answer
        .iter()
        .map(|ip| Address::Tcp(SocketAddr::new(ip, port)))
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    if addrs.is_empty() {
        return Err("no A or AAAA record".into());
    }
    Ok(addrs)
}
