//! Request routing: a site chosen by Host (exact name, then the longest `*.suffix` wildcard, then
//! the default site), then a route chosen by the longest matching path prefix. A route leads to
//! an upstream group or to a static-file route.
//!
//! Host lookup is a hash lookup per label boundary, so its cost does not grow with the number of
//! names configured.

use std::collections::HashMap;

/// The routing table of one config.
#[derive(Debug, Clone, Default)]
pub struct Router {
    sites: Vec<Site>,
    /// The (site, route) label of each figures slot: every route, then one "no route" slot per
    /// site, then one for requests that reach no site.
    labels: Vec<(String, String)>,
    exact: HashMap<String, usize>,
    /// Wildcard suffixes, stored with their leading dot (`.example.com`).
    wildcard: HashMap<String, usize>,
    default: Option<usize>,
}

#[derive(Debug, Clone, Default)]
struct Site {
    name: String,
    /// Sorted longest prefix first.
    routes: Vec<Route>,
    /// The figures slot of requests to this site that match no route.
    unrouted: u16,
    /// Field lines (`Name: value\r\n`) added to every response of the site (`add_headers`).
    headers: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Route {
    prefix: String,
    target: Target,
    /// Its figures slot.
    slot: u16,
    /// Responses are compressed when they benefit (`compress = true`).
    compress: bool,
}

/// Where a request goes, with what the logs and metrics need to know of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    /// The site chosen by Host, if any.
    pub site: Option<u16>,
    /// The route's target (`None`: 404).
    pub target: Option<Target>,
    /// The per-route figures slot the request counts in.
    pub slot: u16,
    /// The route compresses responses.
    pub compress: bool,
}

/// What a route leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An upstream group.
    Upstream(UpstreamTarget),
    /// A static-file route, by its index in the config's file routes.
    Files(usize),
}

impl Target {
    /// The upstream target, if the route proxies.
    pub fn upstream(self) -> Option<UpstreamTarget> {
        match self {
            Target::Upstream(u) => Some(u),
            Target::Files(_) => None,
        }
    }
}

/// Where a proxied route sends requests, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTarget {
    /// Index of the upstream group.
    pub upstream: usize,
    /// Read responses up to this size whole into memory, so the upstream connection is freed
    /// before a slow client has read them.
    pub buffer_response: Option<usize>,
    /// The route's extra FastCGI variables: an index into the config's `route_params`.
    pub params: Option<u16>,
}

impl UpstreamTarget {
    /// A plain route to an upstream group.
    pub fn to(upstream: usize) -> UpstreamTarget {
        UpstreamTarget {
            upstream,
            buffer_response: None,
            params: None,
        }
    }
}

impl Router {
    /// The field lines every response of a site gets (empty when none are configured).
    pub fn site_headers(&self, site: Option<u16>) -> &[u8] {
        site.and_then(|s| self.sites.get(usize::from(s)))
            .map_or(&[], |s| s.headers.as_slice())
    }

    /// Makes every route compress its responses (the `--compress` flag of the one-liners).
    pub fn compress_all(&mut self) {
        for route in self.sites.iter_mut().flat_map(|s| &mut s.routes) {
            route.compress = true;
        }
    }

    /// Sets the field lines of every site (the `--add-header` flags of the one-liners).
    pub fn set_all_headers(&mut self, lines: &[u8]) {
        for site in &mut self.sites {
            site.headers = lines.to_vec();
        }
    }

    /// The route target for a request, or `None` (404).
    pub fn route(&self, host: Option<&[u8]>, path: &str) -> Option<Target> {
        self.route_request(host, path).target
    }

    /// The site, route target and figures slot for a request.
    pub fn route_request(&self, host: Option<&[u8]>, path: &str) -> Routed {
        let Some(index) = self.site_for(host) else {
            return Routed {
                site: None,
                target: None,
                slot: self.labels.len().saturating_sub(1) as u16,
                compress: false,
            };
        };
        let site = &self.sites[index];
        let route = site
            .routes
            .iter()
            .find(|r| path.starts_with(r.prefix.as_str()));
        Routed {
            site: Some(index as u16),
            target: route.map(|r| r.target),
            slot: route.map_or(site.unrouted, |r| r.slot),
            compress: route.is_some_and(|r| r.compress),
        }
    }

    /// The (site, route) label of each figures slot, by slot.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// A site's name (empty for an unknown index).
    pub fn site_name(&self, site: u16) -> &str {
        self.sites
            .get(usize::from(site))
            .map_or("", |s| s.name.as_str())
    }

    /// Number of sites.
    pub fn site_count(&self) -> usize {
        self.sites.len()
    }

    fn site_for(&self, host: Option<&[u8]>) -> Option<usize> {
        let Some(host) = host else {
            return self.default;
        };
        let mut name = [0u8; 256];
        let Some(name) = normalize_host(host, &mut name) else {
            return self.default;
        };
        if let Some(i) = self.exact.get(name) {
            return Some(*i);
        }
        // Longest wildcard first: try each suffix starting at a dot.
        for (i, _) in name.match_indices('.') {
            if let Some(s) = self.wildcard.get(&name[i..]) {
                return Some(*s);
            }
        }
        self.default
    }
}

/// Lower-cases a Host value and strips its port and a trailing dot, into `out`.
fn normalize_host<'o>(host: &[u8], out: &'o mut [u8; 256]) -> Option<&'o str> {
    let host = if host.first() == Some(&b'[') {
        let end = host.iter().position(|b| *b == b']')?;
        &host[..=end]
    } else {
        match host.iter().rposition(|b| *b == b':') {
            Some(colon) => &host[..colon],
            None => host,
        }
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    if host.len() > out.len() {
        return None;
    }
    for (o, b) in out.iter_mut().zip(host) {
        *o = b.to_ascii_lowercase();
    }
    std::str::from_utf8(&out[..host.len()]).ok()
}

/// Builds a [`Router`] while a config is validated.
#[derive(Debug, Default)]
pub struct RouterBuilder {
    router: Router,
}

impl RouterBuilder {
    /// Adds a site named `name` (in metrics); returns its index.
    pub fn add_site(&mut self, name: &str, is_default: bool) -> usize {
        let index = self.router.sites.len();
        self.router.sites.push(Site {
            name: name.to_string(),
            ..Site::default()
        });
        if is_default {
            self.router.default = Some(index);
        }
        index
    }

    /// Sets the field lines added to every response of a site.
    pub fn set_headers(&mut self, site: usize, lines: Vec<u8>) {
        self.router.sites[site].headers = lines;
    }

    /// Adds a host name (`example.com` or `*.example.com`) to a site.
    pub fn add_host(&mut self, site: usize, name: &str) -> Result<(), String> {
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        let (map, key) = match lower.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') && suffix.len() > 1 => {
                (&mut self.router.wildcard, suffix.to_string())
            }
            Some(_) => return Err(format!("invalid wildcard {name:?}: use \"*.example.com\"")),
            None if lower.is_empty() || lower.contains(['*', '/', ' ', ':']) => {
                return Err(format!("invalid host name {name:?}"))
            }
            None => (&mut self.router.exact, lower),
        };
        match map.insert(key, site) {
            Some(_) => Err(format!("host {name:?} is listed twice")),
            None => Ok(()),
        }
    }

    /// Adds a route by path prefix to a site.
    pub fn add_route(&mut self, site: usize, prefix: &str, target: Target) {
        let slot = self.router.labels.len() as u16;
        let name = self.router.sites[site].name.clone();
        self.router.labels.push((name, prefix.to_string()));
        self.router.sites[site].routes.push(Route {
            prefix: prefix.to_string(),
            target,
            slot,
            compress: false,
        });
    }

    /// Sets whether the route last added to a site compresses its responses.
    pub fn set_compress(&mut self, site: usize, compress: bool) {
        if let Some(r) = self.router.sites[site].routes.last_mut() {
            r.compress = compress;
        }
    }

    /// Finishes the router; the first site is the default when none was marked.
    pub fn build(mut self) -> Router {
        for site in &mut self.router.sites {
            site.routes
                .sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
            site.unrouted = self.router.labels.len() as u16;
            self.router.labels.push((site.name.clone(), String::new()));
        }
        self.router.labels.push((String::new(), String::new()));
        if self.router.default.is_none() && !self.router.sites.is_empty() {
            self.router.default = Some(0);
        }
        self.router
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router {
        let mut b = RouterBuilder::default();
        let a = b.add_site("s", false);
        b.add_host(a, "api.example.com").unwrap();
        b.add_route(a, "/", Target::Upstream(UpstreamTarget::to(0)));
        b.add_route(a, "/v2/", Target::Upstream(UpstreamTarget::to(1)));
        let w = b.add_site("s", false);
        b.add_host(w, "*.example.com").unwrap();
        b.add_route(w, "/", Target::Upstream(UpstreamTarget::to(2)));
        let d = b.add_site("d", true);
        b.add_route(d, "/static/", Target::Files(3));
        b.build()
    }

    #[test]
    fn exact_wildcard_default_and_longest_prefix() {
        let r = router();
        assert_eq!(
            r.route(Some(b"API.example.com:8080"), "/v2/x")
                .and_then(Target::upstream)
                .map(|t| t.upstream),
            Some(1)
        );
        assert_eq!(
            r.route(Some(b"api.example.com."), "/v1")
                .and_then(Target::upstream)
                .map(|t| t.upstream),
            Some(0)
        );
        assert_eq!(
            r.route(Some(b"www.example.com"), "/")
                .and_then(Target::upstream)
                .map(|t| t.upstream),
            Some(2)
        );
        assert_eq!(
            r.route(Some(b"a.b.example.com"), "/")
                .and_then(Target::upstream)
                .map(|t| t.upstream),
            Some(2)
        );
        assert_eq!(
            r.route(Some(b"example.com"), "/static/a"),
            Some(Target::Files(3))
        );
        assert_eq!(r.route(Some(b"other"), "/"), None);
        assert_eq!(r.route(None, "/static/"), Some(Target::Files(3)));
    }

    #[test]
    fn ten_thousand_names_route_by_hash() {
        let mut b = RouterBuilder::default();
        for i in 0..10_000 {
            let site = b.add_site("s", false);
            b.add_host(site, &format!("host{i}.example.com")).unwrap();
            b.add_host(site, &format!("*.zone{i}.example.net")).unwrap();
            b.add_route(site, "/", Target::Upstream(UpstreamTarget::to(i)));
        }
        let r = b.build();
        assert_eq!(r.exact.len(), 10_000);
        assert_eq!(r.wildcard.len(), 10_000);
        let route = |h: &str| {
            r.route(Some(h.as_bytes()), "/")
                .and_then(Target::upstream)
                .map(|t| t.upstream)
        };
        assert_eq!(route("host7777.example.com"), Some(7777));
        assert_eq!(route("a.b.zone4242.example.net"), Some(4242));
        assert_eq!(route("HOST9999.EXAMPLE.COM:443"), Some(9999));
        // Unknown names fall to the default (the first site).
        assert_eq!(route("nowhere.example.org"), Some(0));
    }

    #[test]
    fn rejects_bad_names() {
        let mut b = RouterBuilder::default();
        let s = b.add_site("s", false);
        assert!(b.add_host(s, "*example.com").is_err());
        assert!(b.add_host(s, "a b").is_err());
        b.add_host(s, "x.com").unwrap();
        assert!(b.add_host(s, "X.com").is_err());
    }
}
