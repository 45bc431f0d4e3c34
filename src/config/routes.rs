//! Building the router from the `[[sites]]` sections: sites, their hosts and policies, and
//! each route's location, policy, target (an upstream group, with FastCGI `params` and
//! `buffer_response`, or a static-file route) and options, every problem reported with its
//! line.

use super::files::RouteSection;
use super::policy::PolicyKeys;
use super::{nearest, FileRoute, Protocol, Size, UpstreamGroup, Validator};
use crate::routing::location::Match;
use crate::routing::{Policy, RouteSpec, Router, RouterBuilder, Target, UpstreamTarget};
use serde::Deserialize;
use toml::Spanned;

/// A `[[sites]]` section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSite {
    #[serde(default)]
    pub(super) name: Option<String>,
    pub(super) access_log: Option<Spanned<String>>,
    pub(super) access_log_format: Option<Spanned<String>>,
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
    pub(super) acme: Option<Spanned<bool>>,
    pub(super) client_ca: Option<Spanned<String>>,
    pub(super) verify_client: Option<Spanned<String>>,
    pub(super) verify_depth: Option<Spanned<usize>>,
    #[serde(default)]
    pub(super) client_crl: Vec<Spanned<String>>,
    pub(super) add_headers: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    pub(super) add_headers_on_success: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    pub(super) rules: Option<Vec<Spanned<super::policy::FileRule>>>,
    pub(super) access: Option<Spanned<Vec<String>>>,
    pub(super) client_max_body_size: Option<Spanned<Size>>,
    pub(super) proxy_set_headers: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    pub(super) error_pages: Option<Vec<Spanned<super::policy::FileErrorPage>>>,
    pub(super) intercept_errors: Option<bool>,
    pub(super) expires: Option<Spanned<String>>,
    pub(super) hide_headers: Option<Spanned<Vec<String>>>,
    pub(super) cors: Option<Spanned<super::policy::FileCors>>,
    pub(super) auth_request: Option<Spanned<super::policy::FileAuthRequest>>,
    pub(super) auth_basic: Option<Spanned<super::policy::FileAuthBasic>>,
    pub(super) satisfy: Option<Spanned<String>>,
    pub(super) limit_req: Option<Spanned<Vec<super::zones::FileLimitReq>>>,
    pub(super) limit_conn: Option<Spanned<Vec<super::zones::FileLimitConn>>>,
    pub(super) limit_status: Option<Spanned<u16>>,
    pub(super) cache: Option<Spanned<super::cache::FileCache>>,
    #[serde(default)]
    pub(super) hosts: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) default: Option<Spanned<bool>>,
    #[serde(default)]
    pub(super) routes: Vec<RouteSection>,
}

impl Validator<'_> {
    pub(super) fn build_router(
        &mut self,
        sites: &[FileSite],
        upstreams: &[UpstreamGroup],
        built: &mut Built<'_>,
    ) -> Router {
        let mut builder = RouterBuilder::default();
        let mut default_seen = false;
        let any_default = sites
            .iter()
            .any(|s| s.default.as_ref().is_some_and(|d| *d.get_ref()));
        if sites.is_empty() {
            self.error(0, "no [[sites]] section: at least one site is required");
        }
        for site in sites {
            let is_default = site.default.as_ref().is_some_and(|d| *d.get_ref());
            if is_default && default_seen {
                let at = site.default.as_ref().map_or(0, |d| d.span().start);
                self.error(at, "more than one site has default = true");
            }
            default_seen |= is_default;
            let name = site
                .name
                .clone()
                .unwrap_or_else(|| match site.hosts.first() {
                    Some(h) => h.get_ref().clone(),
                    None => "default".to_string(),
                });
            let index = builder.add_site(&name, is_default);
            let keys = PolicyKeys {
                rules: site.rules.as_ref(),
                access: site.access.as_ref(),
                add_headers: site.add_headers.as_ref(),
                add_headers_on_success: site.add_headers_on_success.as_ref(),
                client_max_body_size: site.client_max_body_size.as_ref(),
                proxy_set_headers: site.proxy_set_headers.as_ref(),
                error_pages: site.error_pages.as_ref(),
                intercept_errors: site.intercept_errors,
                expires: site.expires.as_ref(),
                hide_headers: site.hide_headers.as_ref(),
                cors: site.cors.as_ref(),
                auth_request: site.auth_request.as_ref(),
                auth_basic: site.auth_basic.as_ref(),
                satisfy: site.satisfy.as_ref(),
                limit_req: site.limit_req.as_ref(),
                limit_conn: site.limit_conn.as_ref(),
                limit_status: site.limit_status.as_ref(),
                cache: site.cache.as_ref(),
            };
            // The named groups of regex host names are variables of every rule of the site.
            let host_groups: Vec<String> = site
                .hosts
                .iter()
                .filter_map(|h| h.get_ref().strip_prefix('~'))
                .filter_map(|re| crate::rules::pattern::Pattern::new(re, false).ok())
                .flat_map(|p| p.group_names().map(str::to_string).collect::<Vec<_>>())
                .collect();
            let host_names: Vec<&str> = host_groups.iter().map(String::as_str).collect();
            let site_policy = self.build_policy(&keys, None, &host_names);
            for host in &site.hosts {
                if let Err(reason) = builder.add_host(index, host.get_ref()) {
                    self.error(host.span().start, reason);
                }
            }
            // The first site is the default when none says so.
            let implied_default = !any_default && std::ptr::eq(site, &sites[0]);
            if site.hosts.is_empty() && !is_default && !implied_default {
                let message = "site has no hosts and is not the default: nothing can reach it";
                self.error(site.routes.first().map_or(0, RouteSection::at), message);
            }
            self.named_locations = named_locations(&site.routes);
            let into = SiteRoutes {
                builder: &mut builder,
                site: index,
                site_policy: &site_policy,
                host_names: &host_names,
            };
            self.add_routes(&site.routes, None, into, upstreams, built);
            builder.set_policy(index, site_policy);
            self.check_named_pages(site);
        }
        builder.build()
    }

    /// Adds `routes` to the site, nested in `parent` (its index, own policy and whether it is
    /// `internal`) if given, and the routes nested in each after it.
    fn add_routes(
        &mut self,
        routes: &[RouteSection],
        parent: Option<(usize, Option<&Policy>, bool)>,
        into: SiteRoutes<'_, '_>,
        upstreams: &[UpstreamGroup],
        built: &mut Built<'_>,
    ) {
        let inherited = parent.and_then(|(_, p, _)| p);
        let base = inherited.unwrap_or(into.site_policy);
        for route in routes {
            let spec = self.build_route_spec(route, (base, into.host_names), upstreams, built);
            let Some(mut spec) = spec else { continue };
            spec.parent = parent.map(|(i, _, _)| i);
            // nginx inherits `internal`: what is inside an internal location is internal.
            spec.internal |= parent.is_some_and(|(_, _, internal)| internal);
            let internal = spec.internal;
            if spec.policy.is_none() {
                // A nested route takes its parent's policy but not its rules (nginx does not
                // inherit rewrite rules).
                spec.policy = inherited.map(|p| Policy {
                    rules: Vec::new(),
                    ..p.clone()
                });
            }
            let own = spec.policy.clone();
            match into.builder.add_location(into.site, spec) {
                Ok(index) if !route.routes.is_empty() => {
                    let again = SiteRoutes {
                        builder: &mut *into.builder,
                        ..into
                    };
                    let parent = Some((index, own.as_ref(), internal));
                    self.add_routes(&route.routes, parent, again, upstreams, built);
                }
                Ok(_) => {}
                Err(reason) => self.error(route.at(), reason),
            }
        }
    }

    /// Every error page naming a location (`@name`) names one of its site.
    fn check_named_pages(&mut self, site: &FileSite) {
        let names: Vec<&str> = site
            .routes
            .iter()
            .filter_map(|r| r.location.as_ref())
            .filter_map(|l| l.get_ref().trim().strip_prefix('@'))
            .collect();
        let mut routes: Vec<&RouteSection> = site.routes.iter().collect();
        let mut i = 0;
        while let Some(r) = routes.get(i) {
            routes.extend(r.routes.iter());
            i += 1;
        }
        let pages = site
            .error_pages
            .iter()
            .chain(routes.iter().filter_map(|r| r.error_pages.as_ref()))
            .flatten();
        for page in pages {
            if let Some(name) = page.get_ref().named() {
                if !names.contains(&name) {
                    let message = format!("error_pages: no location \"@{name}\" in this site");
                    self.error(page.span().start, message);
                }
            }
        }
    }
}

impl Validator<'_> {
    /// One route: its location, policy and target.
    fn build_route_spec(
        &mut self,
        route: &RouteSection,
        (site_policy, host_names): (&Policy, &[&str]),
        upstreams: &[UpstreamGroup],
        built: &mut Built<'_>,
    ) -> Option<RouteSpec> {
        let matcher = match (&route.path, &route.location) {
            (Some(path), None) => {
                if !path.get_ref().starts_with('/') {
                    self.error(path.span().start, "route path must start with '/'");
                }
                Match::Prefix(path.get_ref().clone())
            }
            (None, Some(location)) => match Match::parse(location.get_ref()) {
                Ok(m) => m,
                Err(e) => {
                    self.error(location.span().start, e);
                    return None;
                }
            },
            (Some(path), Some(_)) => {
                self.error(
                    path.span().start,
                    "a route has either path or location, not both",
                );
                return None;
            }
            (None, None) => {
                self.error(route.at(), "a route needs path (a prefix) or location");
                return None;
            }
        };
        let names: Vec<String> = match &matcher {
            Match::Regex(p) => p.group_names().map(str::to_string).collect(),
            _ => Vec::new(),
        };
        let names: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .chain(host_names.iter().copied())
            .collect();
        let keys = route.policy_keys();
        let policy = keys
            .any()
            .then(|| self.build_policy(&keys, Some(site_policy), &names));
        // Rules may answer on their own, and a route with nested routes may leave every path
        // to them (the others get 404).
        let answers_itself = (route.rules.is_some() || !route.routes.is_empty())
            && route.upstream.is_none()
            && !route.any();
        let target = if answers_itself {
            None
        } else {
            let prefix = match &matcher {
                Match::Prefix(p) | Match::PrefixStop(p) | Match::Exact(p) => p.clone(),
                Match::Regex(_) | Match::Named(_) => {
                    if route.alias.is_some() {
                        let message = "alias applies to prefix and exact locations (a regex location takes root)";
                        self.error(route.at(), message);
                    }
                    "/".to_string()
                }
            };
            Some(self.build_route(&prefix, route, upstreams, built)?)
        };
        let effective = policy.as_ref().unwrap_or(site_policy);
        let copies = effective
            .auth_request
            .as_ref()
            .is_some_and(|a| !a.copy.is_empty());
        // The group the route's requests may reach: its own, or its files' fallback.
        let group = match target {
            Some(Target::Upstream(u)) => Some(u.upstream),
            Some(Target::Files(i)) => built
                .file_routes
                .get(i)
                .and_then(|r| r.try_files.as_ref())
                .and_then(|t| match t.fallback {
                    super::Fallback::Upstream(u) => Some(u.upstream),
                    _ => None,
                }),
            None => None,
        }
        .map(|u| &upstreams[u]);
        if copies && group.is_some_and(|g| g.protocol != Protocol::Http || g.fastcgi.is_some()) {
            // Those groups get the client's fields as they are: a copy could be forged.
            let message = "auth_request copy: only to HTTP/1.1 groups for now (not FastCGI or h2)";
            self.error(route.at(), message);
        }
        Some(RouteSpec {
            matcher,
            target,
            compress: route.compress.unwrap_or(false),
            internal: route.internal.unwrap_or(false),
            policy,
            nginx: route.location.is_some(),
            parent: None,
        })
    }

    /// One route's target: an upstream group, or a directory.
    fn build_route(
        &mut self,
        path: &str,
        route: &RouteSection,
        upstreams: &[UpstreamGroup],
        built: &mut Built<'_>,
    ) -> Option<Target> {
        let group_named = |name: &str| upstreams.iter().position(|u| u.name == name);
        match (&route.upstream, route.any()) {
            (Some(_), true) => {
                let message = "a route has either upstream or root/alias, not both";
                self.error(route.at(), message);
                None
            }
            (None, false) => {
                let message = "a route needs upstream, root or alias";
                self.error(route.at(), message);
                None
            }
            (None, true) => {
                if let Some(b) = &route.buffer_response {
                    self.error(b.span().start, "buffer_response applies to upstream routes");
                }
                if route.params.is_some() {
                    let message = "params applies to routes to a FastCGI upstream";
                    self.error(route.at(), message);
                }
                let file_route = self.build_file_route(path, route, &group_named)?;
                built.file_routes.push(file_route);
                Some(Target::Files(built.file_routes.len() - 1))
            }
            (Some(upstream), false) => {
                let buffer_response = route
                    .buffer_response
                    .as_ref()
                    .map(|_| self.size(&route.buffer_response, 0));
                if let Some(group) = group_named(upstream.get_ref()) {
                    let params = self.route_params(route, &upstreams[group], built);
                    return Some(Target::Upstream(UpstreamTarget {
                        upstream: group,
                        buffer_response,
                        params,
                    }));
                }
                let names: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                let hint = nearest(upstream.get_ref(), &names)
                    .map(|n| format!("; did you mean {n:?}?"))
                    .unwrap_or_default();
                self.error(
                    upstream.span().start,
                    format!("unknown upstream {:?}{hint}", upstream.get_ref()),
                );
                None
            }
        }
    }
}

/// The named locations of a site's routes, with the index each will have (routes are
/// numbered in config order, a nested route after its parent).
fn named_locations(routes: &[RouteSection]) -> Vec<(String, usize)> {
    fn walk(routes: &[RouteSection], next: &mut usize, out: &mut Vec<(String, usize)>) {
        for r in routes {
            let written = r.location.as_ref().map(|l| l.get_ref().trim());
            if let Some(name) = written.and_then(|l| l.strip_prefix('@')) {
                out.push((name.to_string(), *next));
            }
            *next += 1;
            walk(&r.routes, next, out);
        }
    }
    let mut out = Vec::new();
    walk(routes, &mut 0, &mut out);
    out
}

/// The site routes are added to.
struct SiteRoutes<'b, 'p> {
    builder: &'b mut RouterBuilder,
    site: usize,
    site_policy: &'p Policy,
    host_names: &'p [&'p str],
}

/// What routes add to the config besides the router.
pub(super) struct Built<'a> {
    pub(super) file_routes: &'a mut Vec<FileRoute>,
    pub(super) route_params: &'a mut Vec<Vec<(String, String)>>,
}

impl Validator<'_> {
    /// A route's FastCGI `params` (only on routes to FastCGI groups) and what FastCGI
    /// refuses (`buffer_response`).
    fn route_params(
        &mut self,
        route: &RouteSection,
        group: &UpstreamGroup,
        built: &mut Built<'_>,
    ) -> Option<u16> {
        let at = route.at();
        if group.protocol != Protocol::FastCgi {
            if route.params.is_some() {
                self.error(at, "params applies to routes to a FastCGI upstream");
            }
            return None;
        }
        if let Some(b) = &route.buffer_response {
            let message = "buffer_response applies to HTTP upstreams (FastCGI responses are read whole when they fit a buffer)";
            self.error(b.span().start, message);
        }
        let route_params = self.build_params(route.params.as_ref(), at);
        if route_params.is_empty() {
            return None;
        }
        // The group's variables with the route's over them, merged once here.
        let mut params = group
            .fastcgi
            .as_ref()
            .map_or(Vec::new(), |f| f.params.clone());
        params.retain(|(n, _)| !route_params.iter().any(|(r, _)| r == n));
        params.extend(route_params);
        built.route_params.push(params);
        u16::try_from(built.route_params.len() - 1).ok()
    }
}
