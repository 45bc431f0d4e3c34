//! Request routing: a site chosen by Host (exact name, then the longest `*.suffix` wildcard, then
//! the default site), then a route chosen by its location ([`location`]: nginx's exact,
//! prefix, `^~` and regex locations in nginx's order; a site of plain prefixes only takes the
//! longest matching prefix, with no other work). A route leads to an upstream group or to a
//! static-file route, and carries its [`Policy`]: rules, access, fields and body limit.
//!
//! Host lookup is a hash lookup per label boundary, so its cost does not grow with the number of
//! names configured.

pub mod location;

use std::collections::HashMap;

use crate::rules::access::AccessRule;
use crate::rules::Rule;
use location::{Chosen, Locations, Match};

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
    /// Regex host names (`~^(?<sub>.+)\.example\.com$`), tried in config order after the
    /// exact and wildcard names.
    regex_hosts: Vec<(crate::rules::pattern::Pattern, usize)>,
    default: Option<usize>,
    /// Every site's and route's policy; sites and routes hold indexes.
    policies: Vec<Policy>,
    /// The `[maps.NAME]` variables the rules read.
    maps: Vec<crate::rules::map::Map>,
    /// The limit zones (`[rate_zones.NAME]`, `[conn_zones.NAME]`).
    zones: crate::rules::zones::Zones,
}

/// What a site or route adds to routing: nginx's rewrite rules, `allow`/`deny`, `add_header`
/// and `client_max_body_size`. A route's policy holds what it inherits from its site already
/// (all-or-nothing, as nginx: a route with any access rule uses only its own, and the same
/// for fields); only `rules` are each level's own.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The level's rewrite rules, run in order (a site's before the route is chosen).
    pub rules: Vec<Rule>,
    /// `allow`/`deny`, first match decides.
    pub access: Vec<AccessRule>,
    /// Field lines (`Name: value\r\n`) added to every response (nginx's `always`).
    pub headers: Vec<u8>,
    /// Field lines added to successful and redirect responses only (200, 201, 204, 206, 301,
    /// 302, 303, 304, 307, 308: nginx's `add_header` without `always`).
    pub headers_on_success: Vec<u8>,
    /// Fields whose values have variables (`$host`, `$http_origin`), rendered per request:
    /// (name, value, added to every response rather than successful ones only).
    pub dynamic_headers: DynamicHeaders,
    /// Largest request body accepted by its Content-Length (`client_max_body_size`).
    pub max_body: Option<u64>,
    /// Request fields set toward the upstream (nginx's `proxy_set_header`): each replaces the
    /// client's fields of its name; an empty value removes them.
    pub request_fields: Vec<(String, crate::rules::template::Template)>,
    /// nginx's `error_page`: answers of these codes are replaced by a page (all-or-nothing
    /// inheritance, as nginx).
    pub error_pages: Vec<crate::rules::error_page::ErrorPage>,
    /// An upstream's answer with a code `error_pages` lists is replaced too (nginx's
    /// `proxy_intercept_errors` and `fastcgi_intercept_errors`).
    pub intercept_errors: bool,
    /// nginx's `expires`: `Expires` and `Cache-Control` written on successful responses.
    pub expires: Option<crate::rules::expires::Expires>,
    /// Upstream response fields not passed on (nginx's `proxy_hide_header`), lower case.
    pub hide_headers: Vec<String>,
    /// Which origins may read answers, and preflights answered by the proxy (`cors`).
    pub cors: Option<Box<crate::rules::cors::Cors>>,
    /// A subrequest that decides whether the request goes on (`auth_request`).
    pub auth_request: Option<Box<crate::rules::auth::AuthRequest>>,
    /// Users that may pass (`auth_basic`).
    pub auth_basic: Option<Box<crate::rules::auth::AuthBasic>>,
    /// nginx's `satisfy any`: the address rules, the users or the service letting the
    /// request through is enough (else all must).
    pub satisfy_any: bool,
    /// `limit_req`: request rates per key, in order.
    pub limit_req: Vec<crate::rules::zones::LimitReq>,
    /// `limit_conn`: requests in flight per key.
    pub limit_conn: Vec<crate::rules::zones::LimitConn>,
    /// The status a limited request gets (429 unless said; nginx's default is 503).
    pub limit_status: u16,
    /// The response cache it answers from and fills (`cache`).
    pub cache: Option<std::sync::Arc<crate::cache::CacheRule>>,
}

/// Response fields whose values have variables: (name, value, added to every response
/// rather than successful ones only).
pub type DynamicHeaders = Vec<(String, crate::rules::template::Template, bool)>;

impl Policy {
    /// Whether the policy needs nothing of the request before its content phase.
    fn is_passive(&self) -> bool {
        self.rules.is_empty()
            && self.dynamic_headers.is_empty()
            && self.access.is_empty()
            && self.max_body.is_none()
            && self.request_fields.is_empty()
            && self.cors.is_none()
            && self.auth_request.is_none()
            && self.auth_basic.is_none()
            && self.limit_req.is_empty()
            && self.limit_conn.is_empty()
    }
}

#[derive(Debug, Clone, Default)]
struct Site {
    name: String,
    /// Its first host name (`$server_name`).
    server_name: String,
    locations: Locations,
    /// Per location, in config order.
    routes: Vec<Route>,
    /// The figures slot of requests to this site that match no route.
    unrouted: u16,
    policy: u16,
    /// Plain prefixes and passive policies only: routing is a prefix test and no rules run.
    plain: bool,
    /// Some route is written as an nginx `location`.
    nginx: bool,
}

#[derive(Debug, Clone)]
struct Route {
    target: Option<Target>,
    /// Its figures slot.
    slot: u16,
    /// Responses are compressed when they benefit (`compress = true`).
    compress: bool,
    /// Its own policy (with the site's inherited), or the site's.
    policy: Option<u16>,
    /// Only internal redirects reach it (`internal`).
    internal: bool,
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
    /// The policy whose fields its responses get (the route's, else the site's).
    pub policy: Option<u16>,
}

/// A route as the config describes it.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// How it matches paths.
    pub matcher: Match,
    /// Where it leads (`None`: its rules answer, else 404).
    pub target: Option<Target>,
    /// Compress responses.
    pub compress: bool,
    /// Only reached by internal redirects.
    pub internal: bool,
    /// Its policy, merged with the site's; `None` uses the site's.
    pub policy: Option<Policy>,
    /// Written as an nginx `location` (not a `path`): the site then routes as nginx does
    /// (normalised paths, the auto-redirect); a site of `path` routes alone keeps the plain
    /// prefix test on the path as received.
    pub nginx: bool,
    /// The route it is nested in (nginx's nested `location`), by its index in the site.
    pub parent: Option<usize>,
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
    /// The config's maps, in the order their names were given to the rules.
    pub fn maps(&self) -> &[crate::rules::map::Map] {
        &self.maps
    }

    /// Sets the maps the rules read (their names were given to the rules at load).
    pub fn set_maps(&mut self, maps: Vec<crate::rules::map::Map>) {
        self.maps = maps;
    }

    /// The config's limit zones.
    pub fn zones(&self) -> &crate::rules::zones::Zones {
        &self.zones
    }

    /// Sets the limit zones the policies name.
    pub fn set_zones(&mut self, zones: crate::rules::zones::Zones) {
        self.zones = zones;
    }

    /// A policy by index.
    pub fn policy(&self, index: u16) -> &Policy {
        &self.policies[usize::from(index)]
    }

    /// The `expires` a response gets under `policy` with this `status` (successful ones only,
    /// as nginx).
    pub fn expires(
        &self,
        policy: Option<u16>,
        status: u16,
    ) -> Option<crate::rules::expires::Expires> {
        let p = self.policies.get(usize::from(policy?))?;
        p.expires.filter(|_| is_success(status))
    }

    /// The field lines a response gets under `policy` with this `status` (empty when none).
    pub fn headers(&self, policy: Option<u16>, status: u16) -> (&[u8], &[u8]) {
        let Some(p) = policy.and_then(|p| self.policies.get(usize::from(p))) else {
            return (&[], &[]);
        };
        let on_success: &[u8] = if is_success(status) {
            &p.headers_on_success
        } else {
            &[]
        };
        (&p.headers, on_success)
    }

    /// Makes every route compress its responses (the `--compress` flag of the one-liners).
    pub fn compress_all(&mut self) {
        for route in self.sites.iter_mut().flat_map(|s| &mut s.routes) {
            route.compress = true;
        }
    }

    /// Sets the field lines of every site and route (the `--add-header` flags of the
    /// one-liners).
    pub fn set_all_headers(&mut self, lines: &[u8]) {
        let lines = crate::http1::response::distinct_fields(lines);
        for policy in &mut self.policies {
            policy.headers = lines.clone();
        }
    }

    /// The route target for a request, or `None` (404).
    pub fn route(&self, host: Option<&[u8]>, path: &str) -> Option<Target> {
        self.route_request(host, path).target
    }

    /// The site, route target and figures slot for a request, by its location alone (no
    /// rules run: the proxy's rules phase does that).
    pub fn route_request(&self, host: Option<&[u8]>, path: &str) -> Routed {
        let Some(site) = self.site_for(host) else {
            return self.routed(None, None);
        };
        if self.sites[site].plain {
            let route = self.sites[site].locations.longest_prefix(path);
            return self.routed(Some(site), route);
        }
        let uri = crate::rules::uri::normalize(path).unwrap_or(std::borrow::Cow::Borrowed(path));
        let chosen = self.choose(site, &uri);
        self.routed(Some(site), chosen.index)
    }

    /// Whether a site routes by plain prefixes with no rules, access or limits anywhere.
    pub fn is_plain(&self, site: usize) -> bool {
        self.sites[site].plain
    }

    /// The location of `site` for the normalised path `uri`.
    pub fn choose(&self, site: usize, uri: &str) -> Chosen {
        self.sites[site].locations.choose(uri)
    }

    /// The longest plain prefix of `site` that `path` starts with.
    pub fn longest_prefix(&self, site: usize, path: &str) -> Option<usize> {
        self.sites[site].locations.longest_prefix(path)
    }

    /// The named location `name` of `site`.
    pub fn named(&self, site: usize, name: &str) -> Option<usize> {
        self.sites[site].locations.named(name)
    }

    /// The policy of a site.
    pub fn site_policy(&self, site: usize) -> &Policy {
        self.policy(self.sites[site].policy)
    }

    /// The policy a route applies (its own, else its site's).
    pub fn route_policy(&self, site: usize, route: usize) -> &Policy {
        let s = &self.sites[site];
        self.policy(s.routes[route].policy.unwrap_or(s.policy))
    }

    /// A route's own rules (none when it has no policy of its own: the site's rules ran
    /// before the route was chosen, and do not run again).
    pub fn route_rules(&self, site: usize, route: usize) -> &[Rule] {
        match self.sites[site].routes[route].policy {
            Some(p) => &self.policy(p).rules,
            None => &[],
        }
    }

    /// Whether only internal redirects reach a route.
    pub fn is_internal(&self, site: usize, route: usize) -> bool {
        self.sites[site].routes[route].internal
    }

    /// The site's first host name (`$server_name`).
    pub fn server_name(&self, site: usize) -> &str {
        &self.sites[site].server_name
    }

    /// What the request path needs to know of a site and route.
    pub fn routed(&self, site: Option<usize>, route: Option<usize>) -> Routed {
        let Some(index) = site else {
            return Routed {
                site: None,
                target: None,
                slot: self.labels.len().saturating_sub(1) as u16,
                compress: false,
                policy: None,
            };
        };
        let site = &self.sites[index];
        let route = route.and_then(|r| site.routes.get(r));
        Routed {
            site: Some(index as u16),
            target: route.and_then(|r| r.target),
            slot: route.map_or(site.unrouted, |r| r.slot),
            compress: route.is_some_and(|r| r.compress),
            policy: Some(route.and_then(|r| r.policy).unwrap_or(site.policy)),
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

    /// The site a Host value names: exact, longest wildcard, else the default.
    pub fn site_for(&self, host: Option<&[u8]>) -> Option<usize> {
        let named = !self.exact.is_empty() || !self.wildcard.is_empty();
        let Some(host) = host.filter(|_| named || !self.regex_hosts.is_empty()) else {
            // No request's host can choose a site but the default.
            return self.default;
        };
        let mut name = [0u8; 256];
        let Some(name) = normalize_host(host, &mut name) else {
            return self.default;
        };
        if let Some(i) = self.exact.get(name) {
            return Some(*i);
        }
        // Longest wildcard first: try each suffix starting at a dot (when there are any).
        if !self.wildcard.is_empty() {
            for (i, _) in name.match_indices('.') {
                if let Some(s) = self.wildcard.get(&name[i..]) {
                    return Some(*s);
                }
            }
        }
        // A regex past its step limit matches nothing here.
        let regex = self.regex_hosts.iter().find(|(p, _)| p.is_match(name));
        regex.map(|(_, site)| *site).or(self.default)
    }

    /// The groups of the first regex host name of `site` that matches `host` (`None` when
    /// the site has none, or none matches: it was chosen otherwise).
    pub fn host_captures(
        &self,
        site: usize,
        host: &str,
    ) -> Option<crate::rules::pattern::Captures> {
        self.regex_hosts
            .iter()
            .filter(|(_, s)| *s == site)
            .find_map(|(p, _)| p.try_captures(host).ok().flatten())
    }

    /// Whether any site has a regex host name.
    pub fn has_regex_hosts(&self) -> bool {
        !self.regex_hosts.is_empty()
    }
}

/// The statuses nginx's `add_header` (without `always`) and `expires` apply to.
pub fn is_success(status: u16) -> bool {
    matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// Lower-cases a Host value and strips its port and a trailing dot, into `out`.
pub fn normalize_host<'o>(host: &[u8], out: &'o mut [u8; 256]) -> Option<&'o str> {
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
        let policy = self.router.policies.len() as u16;
        self.router.policies.push(Policy::default());
        self.router.sites.push(Site {
            name: name.to_string(),
            policy,
            ..Site::default()
        });
        if is_default {
            self.router.default = Some(index);
        }
        index
    }

    /// Sets a site's policy (its routes without one of their own use it).
    pub fn set_policy(&mut self, site: usize, policy: Policy) {
        let index = self.router.sites[site].policy;
        self.router.policies[usize::from(index)] = policy;
    }

    /// Adds a host name (`example.com` or `*.example.com`) to a site.
    pub fn add_host(&mut self, site: usize, name: &str) -> Result<(), String> {
        if let Some(source) = name.strip_prefix('~') {
            // nginx compiles a name with a capital letter caseless (hosts are matched lower
            // case, so it could never match otherwise).
            let caseless = source.bytes().any(|b| b.is_ascii_uppercase());
            let pattern = crate::rules::pattern::Pattern::new(source, caseless)
                .map_err(|e| format!("host {name:?}: {e}"))?;
            self.router.regex_hosts.push((pattern, site));
            return Ok(());
        }
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        let (map, key) = match lower.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') && suffix.len() > 1 => {
                (&mut self.router.wildcard, suffix.to_string())
            }
            Some(_) => return Err(format!("invalid wildcard {name:?}: use \"*.example.com\"")),
            None if lower.is_empty() || lower.contains(['*', '/', ' ', ':']) => {
                return Err(format!("invalid host name {name:?}"))
            }
            None => (&mut self.router.exact, lower.clone()),
        };
        match map.insert(key, site) {
            Some(_) => Err(format!("host {name:?} is listed twice")),
            None => {
                let s = &mut self.router.sites[site];
                if s.server_name.is_empty() {
                    s.server_name = lower;
                }
                Ok(())
            }
        }
    }

    /// Adds a route by path prefix to a site.
    pub fn add_route(&mut self, site: usize, prefix: &str, target: Target) {
        let spec = RouteSpec {
            matcher: Match::Prefix(prefix.to_string()),
            target: Some(target),
            compress: false,
            internal: false,
            policy: None,
            nginx: false,
            parent: None,
        };
        // A plain prefix twice is the config's to refuse; here the first keeps it.
        let _ = self.add_location(site, spec);
    }

    /// Adds a route to a site, nested in `spec.parent` if given; returns its index in the
    /// site. Refuses a location written twice side by side (nginx's "duplicate location")
    /// and a nesting nginx refuses.
    pub fn add_location(&mut self, site: usize, spec: RouteSpec) -> Result<usize, String> {
        let locations = &self.router.sites[site].locations;
        let same = |m: &Match| match (m, &spec.matcher) {
            (Match::Prefix(a) | Match::PrefixStop(a), Match::Prefix(b) | Match::PrefixStop(b)) => {
                a == b
            }
            (Match::Exact(a), Match::Exact(b)) | (Match::Named(a), Match::Named(b)) => a == b,
            _ => false,
        };
        // nginx refuses a location written twice; two equal `path` routes load as before
        // (the first one wins).
        if spec.nginx && locations.siblings(spec.parent).any(same) {
            return Err(format!("duplicate location {:?}", spec.matcher.label()));
        }
        // nginx's auto-redirect: a prefix ending in `/` whose content is proxied.
        let redirects = spec.nginx
            && spec
                .matcher
                .prefix()
                .is_some_and(|p| p.len() > 1 && p.ends_with('/'))
            && matches!(spec.target, Some(Target::Upstream(_)));
        let label = spec.matcher.label();
        let s = &mut self.router.sites[site];
        let index = match spec.parent {
            Some(parent) => s.locations.push_within(parent, spec.matcher, redirects)?,
            None => s.locations.push(spec.matcher, redirects),
        };
        let slot = self.router.labels.len() as u16;
        self.router.labels.push((s.name.clone(), label));
        let policy = spec.policy.map(|p| {
            self.router.policies.push(p);
            (self.router.policies.len() - 1) as u16
        });
        let s = &mut self.router.sites[site];
        s.nginx |= spec.nginx;
        s.routes.push(Route {
            target: spec.target,
            slot,
            compress: spec.compress,
            policy,
            internal: spec.internal,
        });
        Ok(index)
    }

    /// Sets whether the route last added to a site compresses its responses.
    pub fn set_compress(&mut self, site: usize, compress: bool) {
        if let Some(r) = self.router.sites[site].routes.last_mut() {
            r.compress = compress;
        }
    }

    /// Finishes the router; the first site is the default when none was marked.
    pub fn build(mut self) -> Router {
        let policies = &self.router.policies;
        for site in &mut self.router.sites {
            site.locations.finish();
            site.unrouted = self.router.labels.len() as u16;
            self.router.labels.push((site.name.clone(), String::new()));
            site.plain = !site.nginx
                && site.locations.only_prefixes()
                && policies[usize::from(site.policy)].is_passive()
                && site.routes.iter().all(|r| {
                    !r.internal
                        && r.policy
                            .is_none_or(|p| policies[usize::from(p)].is_passive())
                });
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
