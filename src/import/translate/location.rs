//! One `location` as a route: its match (`path` for a plain prefix, else `location` with
//! nginx's modifier), what answers it (a group, files, or its rules alone), and what it sets
//! differently from its server (body size, access list, headers). A `try_files` falling back
//! to a named location or to a PHP front controller is resolved once the server's locations
//! are all read.

use super::emit::{set, Keys, RouteOut, Val};
use super::rules::{always_answers, uri_rule, Modifier};
use super::settings::{Header, Level, Own, Scope};
use super::{Directive, Translator};

/// nginx's default `client_max_body_size`.
const NGINX_BODY_SIZE: u64 = 1 << 20;

/// A route being translated.
#[derive(Debug)]
pub(super) struct RouteDraft {
    /// Its keys, in order.
    pub(super) keys: Keys,
    /// The name of a named location (`@app`).
    pub(super) named: Option<String>,
    /// The FastCGI group it reaches.
    pub(super) fastcgi: Option<String>,
    /// A `try_files` whose fallback is resolved with the server's other locations.
    pub(super) pending: Option<Pending>,
    /// `location /` or `location ^~ /`: files of the server's root need no route of their own.
    pub(super) catch_all: bool,
    /// The locations nested in it.
    pub(super) children: Vec<RouteDraft>,
}

impl RouteDraft {
    /// The route as it is written out, its nested routes inside it.
    pub(super) fn into_out(self) -> RouteOut {
        RouteOut {
            keys: self.keys,
            routes: self
                .children
                .into_iter()
                .map(RouteDraft::into_out)
                .collect(),
        }
    }
}

/// A `try_files` fallback resolved once every location of the server is read.
#[derive(Debug)]
pub(super) struct Pending {
    /// The `try_files` directive, for notes.
    pub(super) directive: Directive,
    /// The candidates before the fallback.
    pub(super) candidates: Vec<String>,
    /// The fallback.
    pub(super) fallback: Fallback,
}

/// A fallback that names something elsewhere in the server.
#[derive(Debug)]
pub(super) enum Fallback {
    /// `@name`: a named location, which must only pass to a group.
    Named(String),
    /// `/index.php?$query_string`: the script, run by the server's FastCGI group.
    FrontController(String),
}

/// What answers a location besides its settings.
#[derive(Default)]
struct Content<'d> {
    pass: Option<&'d Directive>,
    alias: Option<&'d Directive>,
    try_files: Option<&'d Directive>,
    internal: bool,
}

impl Translator {
    /// A `location` block as a route; None when it cannot be one (noted).
    pub(super) fn location(&mut self, d: &Directive, server: &Scope) -> Option<RouteDraft> {
        let Some((modifier, pattern)) = location_match(&d.args) else {
            self.not_translated(d, "not a location nginx has");
            return None;
        };
        let mut scope = server.clone();
        let mut own = Own::default();
        let mut content = Content::default();
        let mut nested = Vec::new();
        self.location_groups = match modifier {
            Modifier::Regex | Modifier::RegexCaseless => super::rules::group_names(&pattern),
            _ => Vec::new(),
        };
        for inner in d.block.as_deref().unwrap_or_default() {
            match inner.name.as_str() {
                "location" => nested.push(inner),
                "proxy_pass" | "fastcgi_pass" | "grpc_pass" if content.pass.is_some() => {
                    self.not_translated(inner, "a second pass in one location");
                }
                "proxy_pass" | "fastcgi_pass" | "grpc_pass" => content.pass = Some(inner),
                "alias" => content.alias = Some(inner),
                "try_files" => content.try_files = Some(inner),
                "internal" => content.internal = true,
                _ => self.setting(inner, &mut scope, &mut own, Level::Location),
            }
        }
        own.apply(&mut scope);
        self.location_groups.clear();
        let mut draft = RouteDraft {
            keys: match_keys(modifier, &pattern),
            named: (modifier == Modifier::Named).then(|| pattern.clone()),
            fastcgi: None,
            pending: None,
            catch_all: pattern == "/"
                && matches!(modifier, Modifier::Prefix | Modifier::PrefixNoRegex),
            children: Vec::new(),
        };
        if content.internal {
            draft.keys.push(("internal".into(), Val::Bool(true)));
        }
        let mut rules = std::mem::take(&mut own.rules);
        let answers = match content.pass {
            Some(pass) => {
                let at = (modifier, pattern.as_str());
                self.pass(pass, &content, &scope, at, &mut draft, &mut rules)
            }
            None if !always_answers(&rules)
                && (content.alias.is_some() || scope.root.is_some()) =>
            {
                self.files(&content, &scope, modifier, &mut draft)
            }
            None => false,
        };
        let (cache, in_effect) = self.route_cache(content.pass.filter(|_| answers), server, &scope);
        // Nested locations inherit what this one sets; a file route under an alias would
        // need the alias, which slipstream's routes do not pass on.
        let mut inner_scope = scope.clone();
        inner_scope.cache.written = in_effect;
        if content.alias.is_some() {
            inner_scope.root = None;
        }
        for inner in nested {
            if let Some(child) = self.nested_location(d, inner, &inner_scope) {
                draft.children.push(child);
            }
        }
        if !answers && rules.is_empty() && draft.children.is_empty() {
            // A pass, an alias or rules that could not be translated were noted already.
            let block = d.block.as_deref().unwrap_or_default();
            let noted = content.pass.is_some()
                || content.alias.is_some()
                || block
                    .iter()
                    .any(|i| ["return", "rewrite", "if"].contains(&i.name.as_str()));
            if !noted {
                self.not_translated(d, "no proxy_pass, root or return");
            }
            return None;
        }
        if scope.compress && answers {
            draft.keys.push(("compress".into(), Val::Bool(true)));
        }
        differences(&mut draft.keys, server, &scope, &own);
        intercepts(&mut draft, server, &scope);
        if let Some(cache) = cache {
            draft.keys.push(("cache".into(), cache));
        }
        if !rules.is_empty() {
            draft.keys.push(("rules".into(), Val::List(rules)));
        }
        Some(draft)
    }

    /// A location nested in `parent`, unless nginx would refuse it there.
    fn nested_location(
        &mut self,
        parent: &Directive,
        inner: &Directive,
        scope: &Scope,
    ) -> Option<RouteDraft> {
        let written = |d: &Directive| {
            crate::routing::location::Match::parse(&d.args.join(" ")).map_err(|e| e.to_string())
        };
        let checked = written(parent).and_then(|outer| {
            let mut l = crate::routing::location::Locations::default();
            let at = l.push(outer, false);
            l.push_within(at, written(inner)?, false)
        });
        if let Err(reason) = checked {
            self.not_translated(inner, reason);
            return None;
        }
        self.location(inner, scope)
    }

    /// A location that passes to a group: `upstream`, FastCGI `params`, and the rule a
    /// `proxy_pass` URI part stands for.
    fn pass(
        &mut self,
        pass: &Directive,
        content: &Content<'_>,
        scope: &Scope,
        (modifier, pattern): (Modifier, &str),
        draft: &mut RouteDraft,
        rules: &mut Vec<Val>,
    ) -> bool {
        let group = match pass.name.as_str() {
            "proxy_pass" => self.proxy_target(pass, scope).map(|t| {
                if let Some(uri) = &t.uri {
                    match uri_rule(modifier, pattern, uri) {
                        Ok(Some(rule)) => rules.push(rule),
                        Ok(None) => {}
                        Err(reason) => self.not_translated(pass, reason),
                    }
                }
                t.group
            }),
            "fastcgi_pass" => self.fastcgi_target(pass, scope),
            _ => self.grpc_target(pass, scope),
        };
        let Some(group) = group else {
            return false;
        };
        draft
            .keys
            .push(("upstream".into(), Val::str(group.as_str())));
        if pass.name == "fastcgi_pass" {
            let params = scope.fastcgi_params.clone().unwrap_or_default();
            if !params.is_empty() {
                draft.keys.push(("params".into(), Val::str_table(&params)));
            }
            draft.fastcgi = Some(group.clone());
        }
        if let Some(t) = content.try_files {
            let script_check = pass.name == "fastcgi_pass"
                && matches!(t.args.as_slice(), [f, code]
                    if ["$uri", "$fastcgi_script_name"].contains(&f.as_str()) && code == "=404");
            if script_check {
                self.ignore(t, "slipstream answers 404 for a missing script itself");
            } else {
                self.not_translated(t, "try_files beside a pass is not supported yet");
            }
        }
        if let Some(a) = content.alias {
            self.not_translated(a, "alias beside a pass");
        }
        true
    }

    /// A location that serves files: `root` or `alias`, `index`, `try_files`, listings and
    /// `Cache-Control`.
    fn files(
        &mut self,
        content: &Content<'_>,
        scope: &Scope,
        modifier: Modifier,
        draft: &mut RouteDraft,
    ) -> bool {
        let regex = matches!(modifier, Modifier::Regex | Modifier::RegexCaseless);
        match (content.alias, &scope.root) {
            (Some(a), _) if regex || a.args.len() != 1 || a.args[0].contains('$') => {
                self.not_translated(a, "alias with captures is not supported yet");
                return false;
            }
            (Some(a), _) => draft
                .keys
                .push(("alias".into(), Val::str(a.args[0].as_str()))),
            (None, Some(root)) => draft.keys.push(("root".into(), Val::str(root.as_str()))),
            (None, None) => return false,
        }
        if let Some(index) = &scope.index {
            // A static route would send a PHP file's source: nginx runs it through its PHP
            // location, which slipstream's FastCGI group does by itself.
            let files: Vec<&String> = index.iter().filter(|i| !i.ends_with(".php")).collect();
            if files.len() != 1 || files[0] != "index.html" {
                draft.keys.push(("index".into(), Val::strs(&files)));
            }
        }
        if let Some(t) = content.try_files {
            match try_files(&t.args) {
                Ok((items, None)) => draft.keys.push(("try_files".into(), Val::strs(&items))),
                Ok((candidates, Some(fallback))) => {
                    draft
                        .keys
                        .push(("try_files".into(), Val::strs(&candidates)));
                    draft.pending = Some(Pending {
                        directive: t.clone(),
                        candidates,
                        fallback,
                    });
                }
                Err(reason) => self.not_translated(t, reason),
            }
        }
        if scope.autoindex {
            draft
                .keys
                .push(("list_directories".into(), Val::Bool(true)));
        }
        true
    }

    /// Resolves the `try_files` fallbacks of a server's routes to named locations and front
    /// controllers.
    pub(super) fn resolve_fallbacks(&mut self, routes: &mut [RouteDraft]) {
        let mut fastcgi = Vec::new();
        fastcgi_groups(routes, &mut fastcgi);
        let named: Vec<String> = routes.iter().filter_map(|r| r.named.clone()).collect();
        self.resolve_in(routes, &named, &fastcgi);
    }

    /// [`Self::resolve_fallbacks`] of `routes` and the routes nested in them.
    fn resolve_in(&mut self, routes: &mut [RouteDraft], named: &[String], fastcgi: &[String]) {
        for route in routes.iter_mut() {
            self.resolve_in(&mut route.children, named, fastcgi);
            let Some(p) = route.pending.take() else {
                continue;
            };
            let group = match &p.fallback {
                // The named location is a route of the site: `@name` reaches it.
                Fallback::Named(name) if named.contains(name) => Ok(name.clone()),
                Fallback::Named(_) => Err("no such named location"),
                Fallback::FrontController(script) => match fastcgi.first() {
                    Some(g) if fastcgi.iter().all(|x| x == g) => {
                        if self.set_front_controller(g, script) {
                            Ok(g.clone())
                        } else {
                            Err("the FastCGI group has another front controller")
                        }
                    }
                    Some(_) => Err("more than one FastCGI group could run the script"),
                    None => Err("a PHP script without a FastCGI location"),
                },
            };
            match group {
                Ok(g) => {
                    let mut items = p.candidates.clone();
                    items.push(format!("@{g}"));
                    set(&mut route.keys, "try_files", Val::strs(&items));
                }
                Err(reason) => {
                    route.keys.retain(|(k, _)| k != "try_files");
                    self.not_translated(&p.directive, reason);
                }
            }
        }
    }
}

/// The FastCGI groups of `routes` and of the routes nested in them.
fn fastcgi_groups(routes: &[RouteDraft], out: &mut Vec<String>) {
    for r in routes {
        out.extend(r.fastcgi.clone());
        fastcgi_groups(&r.children, out);
    }
}

/// The site's `intercept_errors` is its `proxy_intercept_errors`; a FastCGI route follows
/// `fastcgi_intercept_errors`: the route's key where it differs.
fn intercepts(draft: &mut RouteDraft, server: &Scope, scope: &Scope) {
    let intercepts = if draft.fastcgi.is_some() {
        scope.intercept_fastcgi
    } else {
        scope.intercept_proxy
    };
    if intercepts != server.intercept_proxy {
        draft
            .keys
            .push(("intercept_errors".into(), Val::Bool(intercepts)));
    }
}

/// The keys that say which requests a route takes.
fn match_keys(modifier: Modifier, pattern: &str) -> Keys {
    let location = |m: &str| vec![("location".to_string(), Val::Str(format!("{m} {pattern}")))];
    match modifier {
        // `location`, not `path`: the site then routes as nginx (normalised paths, the
        // auto-redirect of a proxying `/x/`).
        Modifier::Prefix => vec![("location".to_string(), Val::str(pattern))],
        Modifier::Exact => location("="),
        Modifier::PrefixNoRegex => location("^~"),
        Modifier::Regex => location("~"),
        Modifier::RegexCaseless => location("~*"),
        Modifier::Named => vec![("location".to_string(), Val::Str(format!("@{pattern}")))],
    }
}

/// A location's modifier and pattern, as nginx reads them (`= /x`, `=/x`, `~* re`, `@name`).
pub(super) fn location_match(args: &[String]) -> Option<(Modifier, String)> {
    let modifier = |m: &str| match m {
        "=" => Some(Modifier::Exact),
        "^~" => Some(Modifier::PrefixNoRegex),
        "~" => Some(Modifier::Regex),
        "~*" => Some(Modifier::RegexCaseless),
        _ => None,
    };
    match args {
        [m, pattern] => Some((modifier(m)?, pattern.clone())),
        [one] => {
            for m in ["=", "^~", "~*", "~"] {
                if let Some(rest) = one.strip_prefix(m).filter(|r| !r.is_empty()) {
                    return Some((modifier(m)?, rest.to_string()));
                }
            }
            match one.strip_prefix('@') {
                Some(name) => Some((Modifier::Named, name.to_string())),
                None => Some((Modifier::Prefix, one.clone())),
            }
        }
        _ => None,
    }
}

/// `try_files`' candidates and fallback: the items as slipstream writes them, and the
/// fallback when it names something elsewhere in the server.
fn try_files(args: &[String]) -> Result<(Vec<String>, Option<Fallback>), &'static str> {
    let Some((last, candidates)) = args.split_last() else {
        return Err("try_files needs a fallback");
    };
    for c in candidates {
        if !(c.starts_with('/') || c.starts_with("$uri")) || c.replace("$uri", "").contains('$') {
            return Err("candidates with variables other than $uri are not supported yet");
        }
    }
    let mut items = candidates.to_vec();
    if let Some(name) = last.strip_prefix('@') {
        return Ok((items, Some(Fallback::Named(name.to_string()))));
    }
    let path = ["?$query_string", "?$args", "$is_args$args"]
        .iter()
        .find_map(|q| last.strip_suffix(q))
        .unwrap_or(last);
    if path.ends_with(".php") && path.starts_with('/') && !path.contains('$') {
        return Ok((items, Some(Fallback::FrontController(path.to_string()))));
    }
    if last.starts_with('=') || !last.replace("$uri", "").contains('$') {
        items.push(last.clone());
        return Ok((items, None));
    }
    Err("a fallback with variables other than $uri is not supported yet")
}

/// The route's keys for what its location sets differently from its server: body size, and
/// (all or nothing, as nginx inherits them) its access list and headers.
fn differences(keys: &mut Keys, server: &Scope, scope: &Scope, own: &Own) {
    let bytes = |s: &Scope| s.body_size.as_ref().map_or(NGINX_BODY_SIZE, |b| b.1);
    if bytes(scope) != bytes(server) {
        let text = scope.body_size.as_ref().map_or("1m", |b| b.0.as_str());
        keys.push(("client_max_body_size".into(), Val::str(text)));
    }
    if let Some(access) = &own.access {
        keys.push(("access".into(), Val::strs(access)));
    }
    // The copies of an auth answer are removed where no service is asked; a level whose
    // asking differs from its server's writes its whole list.
    let unasked = super::auth::unasked_copies(scope);
    if own.request_fields.is_some() || unasked != super::auth::unasked_copies(server) {
        let mut fields = scope.request_fields.clone().unwrap_or_default();
        fields.extend(unasked);
        keys.push(("proxy_set_headers".into(), Val::str_table(&fields)));
    }
    let auth = super::auth::auth_request(scope);
    let failed = matches!(scope.auth_request, Some(super::auth::AuthTarget::Failed));
    if auth != super::auth::auth_request(server) && !failed {
        keys.push(("auth_request".into(), auth.unwrap_or(Val::Bool(false))));
    }
    let basic = super::settings::auth_basic(scope);
    if basic != super::settings::auth_basic(server) {
        keys.push(("auth_basic".into(), basic.unwrap_or(Val::Bool(false))));
    }
    if scope.satisfy != server.satisfy {
        let word = scope.satisfy.as_deref().unwrap_or("all");
        keys.push(("satisfy".into(), Val::str(word)));
    }
    if let Some(list) = &own.limit_req {
        keys.push(("limit_req".into(), Val::List(list.clone())));
    }
    if let Some(list) = &own.limit_conn {
        keys.push(("limit_conn".into(), Val::List(list.clone())));
    }
    if scope.limit_status != server.limit_status {
        let code = scope.limit_status.unwrap_or(503);
        keys.push(("limit_status".into(), Val::Int(code)));
    }
    if scope.expires != server.expires {
        let text = scope.expires.as_deref().unwrap_or("off");
        keys.push(("expires".into(), Val::str(text)));
    }
    if let Some(names) = &own.hide_headers {
        keys.push(("hide_headers".into(), Val::strs(names)));
    }
    if let Some(pages) = &own.error_pages {
        keys.push(("error_pages".into(), Val::List(pages.clone())));
    }
    if let Some(headers) = &own.headers {
        let site = server.headers.as_deref().unwrap_or_default();
        for (key, always) in [("add_headers", true), ("add_headers_on_success", false)] {
            let mine = header_pairs(headers, always);
            if !mine.is_empty() || !header_pairs(site, always).is_empty() {
                keys.push((key.into(), Val::str_table(&mine)));
            }
        }
    }
}

/// The headers of one kind (`always` or not) as name-value pairs.
pub(super) fn header_pairs(headers: &[Header], always: bool) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|h| h.always == always)
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn locations_are_read_with_their_modifier() {
        assert_eq!(
            location_match(&words("= /x")),
            Some((Modifier::Exact, "/x".into()))
        );
        assert_eq!(
            location_match(&words("=/x")),
            Some((Modifier::Exact, "/x".into()))
        );
        assert_eq!(
            location_match(&words("~* \\.php$")),
            Some((Modifier::RegexCaseless, "\\.php$".into()))
        );
        assert_eq!(
            location_match(&words("~\\.php$")),
            Some((Modifier::Regex, "\\.php$".into()))
        );
        assert_eq!(
            location_match(&words("^~ /s/")),
            Some((Modifier::PrefixNoRegex, "/s/".into()))
        );
        assert_eq!(
            location_match(&words("@app")),
            Some((Modifier::Named, "app".into()))
        );
        assert_eq!(
            location_match(&words("/")),
            Some((Modifier::Prefix, "/".into()))
        );
        assert_eq!(location_match(&words("!! /x")), None);
    }

    #[test]
    fn try_files_keeps_uri_candidates_and_finds_front_controllers() {
        let (items, f) = try_files(&words("$uri $uri/ /index.html")).unwrap();
        assert_eq!(items, ["$uri", "$uri/", "/index.html"]);
        assert!(f.is_none());
        let (items, f) = try_files(&words("$uri $uri/ /index.php?$query_string")).unwrap();
        assert_eq!(items, ["$uri", "$uri/"]);
        assert!(matches!(f, Some(Fallback::FrontController(s)) if s == "/index.php"));
        let (_, named) = try_files(&words("$uri @app")).unwrap();
        assert!(matches!(named, Some(Fallback::Named(n)) if n == "app"));
        assert!(try_files(&words("$document_root$uri =404")).is_err());
    }
}
