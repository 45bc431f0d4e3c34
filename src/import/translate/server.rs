//! One `server` block as a site (`listen`, `server_name`, its settings, rules and
//! locations), and the sites together: slipstream picks a site by name whatever the port,
//! so a plain server that only sends its names to https becomes the listener's
//! `redirect_https` (or a rule of the TLS site with the same names); one default site; a name
//! only once.

use super::emit::{Keys, Listen, RouteOut, SiteOut, Val};
use super::location::{header_pairs, RouteDraft};
use super::rules::always_answers;
use super::settings::{Level, Own, Scope};
use super::{Directive, NoteKind, Translator};

/// Where a directive was read, for notes about it after it is gone.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    file: usize,
    line: usize,
}

impl At {
    fn of(d: &Directive) -> At {
        At {
            file: d.file,
            line: d.line,
        }
    }
}

/// One `listen` of a server.
#[derive(Debug, Clone)]
struct ListenSpec {
    address: String,
    tls: bool,
    backlog: Option<i64>,
    proxy_protocol: bool,
    /// `ipv6only=off`: the IPv6 address takes IPv4 connections too.
    dual_stack: bool,
}

/// A site being translated: decided as a whole once every server is read.
#[derive(Debug)]
pub(super) struct SiteDraft {
    /// The `server` directive.
    at: At,
    /// Its `server_name`, for notes.
    names_at: At,
    /// Its names.
    hosts: Vec<String>,
    /// Its listeners.
    listens: Vec<ListenSpec>,
    /// `default_server` on one of them.
    default_server: bool,
    /// The `listen` that says so.
    default_at: At,
    /// Its keys other than hosts, default and rules.
    keys: Keys,
    /// Its server-level rules.
    rules: Vec<Val>,
    /// Its routes.
    routes: Vec<RouteOut>,
    /// When all it does is send its names to https: the code, and the `return`.
    upgrade: Option<(i64, At)>,
}

impl Translator {
    /// A `server` block, read with the http level's settings.
    pub(super) fn server(&mut self, d: &Directive, http: &Scope) {
        let block = d.block.as_deref().unwrap_or_default();
        let mut scope = http.clone();
        let mut own = Own::default();
        self.server_groups.clear();
        self.server_locations = block
            .iter()
            .filter(|d| d.name == "location")
            .cloned()
            .collect();
        let mut draft = SiteDraft {
            at: At::of(d),
            names_at: At::of(d),
            hosts: Vec::new(),
            listens: Vec::new(),
            default_server: false,
            default_at: At::of(d),
            keys: Keys::new(),
            rules: Vec::new(),
            routes: Vec::new(),
            upgrade: None,
        };
        let mut listened = false;
        for inner in block {
            match inner.name.as_str() {
                "listen" => {
                    listened = true;
                    self.listen(inner, &mut draft);
                }
                "server_name" => self.server_name(inner, &mut draft),
                "location" => {}
                _ => self.setting(inner, &mut scope, &mut own, Level::Server),
            }
        }
        if !listened {
            draft.listens.push(ListenSpec {
                address: "0.0.0.0:80".into(),
                tls: false,
                backlog: None,
                proxy_protocol: false,
                dual_stack: false,
            });
        }
        own.apply(&mut scope);
        scope.cache.written = self.site_cache(&scope);
        let mut routes = Vec::new();
        for inner in block.iter().filter(|i| i.name == "location") {
            if let Some(route) = self.location(inner, &scope) {
                routes.push(route);
            }
        }
        self.resolve_fallbacks(&mut routes);
        let catch_all = routes.iter().any(|r| r.catch_all);
        draft.routes = routes.into_iter().map(RouteDraft::into_out).collect();
        draft.rules = std::mem::take(&mut own.rules);
        // `location / { return ...; }` alone answers every request as server rules would.
        if let ([], [only]) = (draft.rules.as_slice(), draft.routes.as_slice()) {
            let only = (only.routes.is_empty()).then_some(only.keys.as_slice());
            if let Some([(p, Val::Str(path)), (r, Val::List(rules))]) = only {
                if p == "location" && path == "/" && r == "rules" && always_answers(rules) {
                    draft.rules = rules.clone();
                    draft.routes.clear();
                }
            }
        }
        if let (Some(root), false) = (&scope.root, catch_all || always_answers(&draft.rules)) {
            draft.routes.push(RouteOut::of(root_route(root, &scope)));
        }
        draft.keys = site_keys(&draft, &scope, &own, !self.out.zones.is_empty());
        draft.upgrade = upgrade(&draft, block);
        self.sites.push(draft);
    }

    /// `listen ADDRESS [ssl] [default_server] [backlog=N] ...`.
    fn listen(&mut self, d: &Directive, draft: &mut SiteDraft) {
        let Some((address, params)) = d.args.split_first() else {
            return self.not_translated(d, "no address");
        };
        let Some(address) = listen_address(address) else {
            return self.not_translated(d, "only TCP addresses");
        };
        let mut spec = ListenSpec {
            address,
            tls: false,
            backlog: None,
            proxy_protocol: false,
            dual_stack: false,
        };
        for p in params {
            match p.split_once('=').unwrap_or((p, "")) {
                ("ssl", _) => spec.tls = true,
                ("http2" | "spdy", _) => {}
                ("default_server" | "default", _) => {
                    draft.default_server = true;
                    draft.default_at = At::of(d);
                }
                ("backlog", n) => match n.parse::<i64>() {
                    Ok(n) => spec.backlog = Some(n),
                    Err(_) => self.not_translated(d, "backlog is not a number"),
                },
                ("reuseport", _) => {
                    self.ignore(d, "slipstream listens with SO_REUSEPORT per worker");
                }
                ("ipv6only", "on") => self.ignore(d, "slipstream's IPv6 listeners are IPv6 only"),
                ("ipv6only", "off") => spec.dual_stack = true,
                ("deferred" | "bind", _) => self.ignore(d, "slipstream sets its sockets up itself"),
                ("proxy_protocol", _) => spec.proxy_protocol = true,
                ("quic", _) => self.not_translated(d, "HTTP/3 is not supported yet"),
                (name, _) => self.not_translated(d, format!("{name} is not supported yet")),
            }
        }
        draft.listens.push(spec);
    }

    /// `server_name`: exact names and `*.` wildcards; `.example.com` is both.
    fn server_name(&mut self, d: &Directive, draft: &mut SiteDraft) {
        draft.names_at = At::of(d);
        for written in &d.args {
            let name = written.to_ascii_lowercase();
            if name.is_empty() || name == "_" {
                continue;
            }
            let hosts: Vec<String> = if let Some(rest) = name.strip_prefix('.') {
                vec![rest.to_string(), format!("*.{rest}")]
            } else if let Some(source) = written.strip_prefix('~') {
                // A regex keeps its case (`\D` is not `\d`); nginx matches it against the
                // lower-cased host, as slipstream does.
                match crate::rules::pattern::Pattern::new(source, false) {
                    Ok(p) => self
                        .server_groups
                        .extend(p.group_names().map(str::to_string)),
                    Err(e) => {
                        self.not_translated(d, format!("{written}: {e}"));
                        continue;
                    }
                }
                vec![written.clone()]
            } else if name.contains('$')
                || name.ends_with(".*")
                || name.contains('*') && !name.starts_with("*.")
            {
                self.not_translated(d, format!("{name}: only exact names and *. wildcards"));
                continue;
            } else {
                vec![name]
            };
            for h in hosts {
                if !draft.hosts.contains(&h) {
                    draft.hosts.push(h);
                }
            }
        }
    }

    /// The sites and listeners of every server read.
    pub(super) fn finish_sites(&mut self) -> (Vec<Listen>, Vec<SiteOut>) {
        let mut drafts = std::mem::take(&mut self.sites);
        let mut listens: Vec<Listen> = Vec::new();
        for spec in drafts.iter().flat_map(|d| &d.listens) {
            match listens.iter_mut().find(|l| l.address == spec.address) {
                Some(l) => {
                    l.tls |= spec.tls;
                    l.backlog = l.backlog.or(spec.backlog);
                    l.proxy_protocol |= spec.proxy_protocol;
                    l.dual_stack |= spec.dual_stack;
                }
                None => listens.push(Listen {
                    address: spec.address.clone(),
                    tls: spec.tls,
                    redirect_https: false,
                    backlog: spec.backlog,
                    proxy_protocol: spec.proxy_protocol,
                    dual_stack: spec.dual_stack,
                }),
            }
        }
        self.redirect_listeners(&mut drafts, &mut listens);
        self.merge_upgrades(&mut drafts);
        let sites = self.decide_names(drafts);
        (listens, sites)
    }

    /// Plain listeners whose every server only sends its names to https answer with
    /// `redirect_https`; those servers go.
    fn redirect_listeners(&mut self, drafts: &mut Vec<SiteDraft>, listens: &mut [Listen]) {
        if !listens.iter().any(|l| l.tls) {
            return;
        }
        for l in listens.iter_mut().filter(|l| !l.tls) {
            let mut on = drafts
                .iter()
                .filter(|d| d.listens.iter().any(|s| s.address == l.address));
            l.redirect_https = on.all(|d| d.upgrade.is_some());
        }
        let redirected = |d: &SiteDraft| {
            d.upgrade.is_some()
                && d.listens.iter().all(|s| {
                    listens
                        .iter()
                        .any(|l| l.address == s.address && l.redirect_https)
                })
        };
        for d in drafts.iter().filter(|d| redirected(d)) {
            let (code, at) = d.upgrade.expect("an upgrade");
            let reason = format!("{code}: the listener's redirect_https answers 308");
            self.note_at(at.file, at.line, "return", reason, NoteKind::Ignored);
        }
        drafts.retain(|d| !redirected(d));
    }

    /// A plain server that only answers with its rules (a redirect, mostly), beside a
    /// TLS-only server with the same names: its rules become the TLS site's for plain
    /// requests (`if = "$scheme = http"`), as slipstream picks a site by name whatever the
    /// port.
    fn merge_upgrades(&mut self, drafts: &mut Vec<SiteDraft>) {
        let mut i = 0;
        while i < drafts.len() {
            let target = plain_rules(&drafts[i]).and_then(|rules| {
                let t = drafts.iter().position(|t| {
                    !t.hosts.is_empty()
                        && same_names(&t.hosts, &drafts[i].hosts)
                        && t.listens.iter().all(|l| l.tls)
                })?;
                Some((t, rules))
            });
            let Some((t, rules)) = target else {
                i += 1;
                continue;
            };
            drafts[t].rules.splice(0..0, rules);
            drafts.remove(i);
        }
    }

    /// Hosts claimed once, one default site, nameless servers only as the default.
    fn decide_names(&mut self, drafts: Vec<SiteDraft>) -> Vec<SiteOut> {
        let explicit = drafts.iter().any(|d| d.default_server);
        let owners = owners(&drafts);
        let mut default_taken = false;
        let mut sites = Vec::new();
        for (index, mut d) in drafts.into_iter().enumerate() {
            let had_names = !d.hosts.is_empty();
            let (kept, lost): (Vec<String>, Vec<String>) = std::mem::take(&mut d.hosts)
                .into_iter()
                .partition(|h| owners.iter().any(|(o, i)| o == h && *i == index));
            for h in lost {
                let reason = format!(
                    "{h} is a name of another server \
                     (slipstream picks sites by name, whatever the port)"
                );
                let at = d.names_at;
                self.note_at(
                    at.file,
                    at.line,
                    "server_name",
                    reason,
                    NoteKind::NotTranslated,
                );
            }
            let default = if d.default_server || (!explicit && index == 0 && !had_names) {
                !std::mem::replace(&mut default_taken, true)
            } else {
                false
            };
            if d.default_server && !default {
                let reason = "slipstream has one default site";
                let at = d.default_at;
                self.note_at(
                    at.file,
                    at.line,
                    "listen",
                    reason.into(),
                    NoteKind::NotTranslated,
                );
            }
            if kept.is_empty() && !default {
                let reason = if had_names {
                    "every name belongs to another server"
                } else {
                    "a server without names that is not the default"
                };
                self.note_at(
                    d.at.file,
                    d.at.line,
                    "server",
                    reason.into(),
                    NoteKind::NotTranslated,
                );
                continue;
            }
            let mut keys = Keys::new();
            if !kept.is_empty() {
                keys.push(("hosts".into(), Val::strs(&kept)));
            }
            if default {
                keys.push(("default".into(), Val::Bool(true)));
            }
            keys.extend(d.keys);
            if !d.rules.is_empty() {
                keys.push(("rules".into(), Val::List(d.rules)));
            }
            sites.push(SiteOut {
                keys,
                routes: d.routes,
            });
        }
        sites
    }
}

/// Which server each name goes to: the first with a TLS listener that has it, else the
/// first that has it (a plain server beside a TLS one is the redirect, mostly).
fn owners(drafts: &[SiteDraft]) -> Vec<(String, usize)> {
    let tls = |d: &SiteDraft| d.listens.iter().any(|l| l.tls);
    let mut order: Vec<usize> = (0..drafts.len()).collect();
    order.sort_by_key(|&i| !tls(&drafts[i]));
    let mut owners: Vec<(String, usize)> = Vec::new();
    for i in order {
        for h in &drafts[i].hosts {
            if !owners.iter().any(|(o, _)| o == h) {
                owners.push((h.clone(), i));
            }
        }
    }
    owners
}

/// Whether two lists hold the same names.
fn same_names(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|h| b.contains(h))
}

/// The rules of a plain server that only answers with them, each for plain requests only:
/// the https upgrade as one rule, else rules without conditions of their own.
fn plain_rules(d: &SiteDraft) -> Option<Vec<Val>> {
    if !d.routes.is_empty() || d.listens.iter().any(|l| l.tls) || !always_answers(&d.rules) {
        return None;
    }
    let scheme = || ("if".to_string(), Val::str("$scheme = http"));
    if let Some((code, _)) = d.upgrade {
        return Some(vec![Val::Table(vec![
            scheme(),
            ("return".into(), Val::Int(code)),
            ("to".into(), Val::str("https://$host$request_uri")),
        ])]);
    }
    d.rules
        .iter()
        .map(|r| match r {
            Val::Table(keys) if keys.first().is_some_and(|(k, _)| k != "if") => {
                let mut with_if = vec![scheme()];
                with_if.extend(keys.iter().cloned());
                Some(Val::Table(with_if))
            }
            _ => None,
        })
        .collect()
}

/// A listen address as slipstream writes it: `80` and `*:80` are `0.0.0.0:80`, a host
/// without a port gets 80; None for unix sockets.
fn listen_address(a: &str) -> Option<String> {
    if a.starts_with("unix:") {
        return None;
    }
    if a.bytes().all(|b| b.is_ascii_digit()) {
        return Some(format!("0.0.0.0:{a}"));
    }
    let a = a
        .strip_prefix("*:")
        .map_or(a.to_string(), |port| format!("0.0.0.0:{port}"));
    Some(super::upstream::with_port(&a, 80))
}

/// The site's own keys: certificate, log, body size, access list, headers.
fn site_keys(draft: &SiteDraft, scope: &Scope, own: &Own, zones: bool) -> Keys {
    let mut keys = Keys::new();
    if draft.listens.iter().any(|l| l.tls) {
        if let (Some(cert), Some(key)) = (&scope.cert, &scope.key) {
            keys.push(("cert".into(), Val::str(cert.as_str())));
            keys.push(("key".into(), Val::str(key.as_str())));
        }
    }
    if let Some(log) = &own.access_log {
        keys.push(("access_log".into(), Val::str(log.path.as_str())));
        if let Some(f) = &log.format {
            keys.push(("access_log_format".into(), Val::str(f.as_str())));
        }
    }
    let size = scope.body_size.as_ref().map_or("1m", |b| b.0.as_str());
    keys.push(("client_max_body_size".into(), Val::str(size)));
    if let Some(access) = &scope.access {
        keys.push(("access".into(), Val::strs(access)));
    }
    let mut fields = scope.request_fields.clone().unwrap_or_default();
    fields.extend(super::auth::unasked_copies(scope));
    if !fields.is_empty() {
        keys.push(("proxy_set_headers".into(), Val::str_table(&fields)));
    }
    if let Some(pages) = &scope.error_pages {
        keys.push(("error_pages".into(), Val::List(pages.clone())));
    }
    if scope.intercept_proxy {
        keys.push(("intercept_errors".into(), Val::Bool(true)));
    }
    if let Some(names) = scope.hide_headers.as_ref().filter(|n| !n.is_empty()) {
        keys.push(("hide_headers".into(), Val::strs(names)));
    }
    if let Some(auth @ Val::Table(_)) = super::auth::auth_request(scope) {
        keys.push(("auth_request".into(), auth));
    }
    if let Some(basic @ Val::Table(_)) = super::settings::auth_basic(scope) {
        keys.push(("auth_basic".into(), basic));
    }
    if let Some(list) = scope.limit_req.as_ref().filter(|l| !l.is_empty()) {
        keys.push(("limit_req".into(), Val::List(list.clone())));
    }
    if let Some(list) = scope.limit_conn.as_ref().filter(|l| !l.is_empty()) {
        keys.push(("limit_conn".into(), Val::List(list.clone())));
    }
    if zones {
        // nginx answers limits with 503 unless told: slipstream's default is 429.
        let code = scope.limit_status.unwrap_or(503);
        keys.push(("limit_status".into(), Val::Int(code)));
    }
    if scope.satisfy.as_deref() == Some("any") {
        keys.push(("satisfy".into(), Val::str("any")));
    }
    if let Some(text) = scope.expires.as_deref().filter(|t| *t != "off") {
        keys.push(("expires".into(), Val::str(text)));
    }
    if let Some(cache) = &scope.cache.written {
        keys.push(("cache".into(), cache.clone()));
    }
    let headers = scope.headers.as_deref().unwrap_or_default();
    for (key, always) in [("add_headers", true), ("add_headers_on_success", false)] {
        let pairs = header_pairs(headers, always);
        if !pairs.is_empty() {
            keys.push((key.into(), Val::str_table(&pairs)));
        }
    }
    keys
}

/// The route for requests no location takes: files under the server's root, as nginx
/// serves them.
fn root_route(root: &str, scope: &Scope) -> Keys {
    let mut keys = vec![
        ("path".to_string(), Val::str("/")),
        ("root".to_string(), Val::str(root)),
    ];
    if let Some(index) = &scope.index {
        let files: Vec<&String> = index.iter().filter(|i| !i.ends_with(".php")).collect();
        if files.len() != 1 || files[0] != "index.html" {
            keys.push(("index".into(), Val::strs(&files)));
        }
    }
    if scope.autoindex {
        keys.push(("list_directories".into(), Val::Bool(true)));
    }
    if scope.compress {
        keys.push(("compress".into(), Val::Bool(true)));
    }
    keys
}

/// The https-upgrade idiom: a plain server with no routes whose rules send every request
/// (or each of its names, as certbot writes it, then 404) to `https://$host$request_uri`.
fn upgrade(draft: &SiteDraft, block: &[Directive]) -> Option<(i64, At)> {
    if !draft.routes.is_empty() || draft.listens.iter().any(|l| l.tls) || draft.rules.is_empty() {
        return None;
    }
    let mut code = None;
    let mut covered: Vec<&str> = Vec::new();
    for (i, rule) in draft.rules.iter().enumerate() {
        let Val::Table(keys) = rule else {
            return None;
        };
        let find = |k: &str| keys.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let last = i + 1 == draft.rules.len();
        match (find("if"), find("return"), find("to")) {
            (None, Some(Val::Int(404)), None) if last && code.is_some() => {}
            (cond, Some(Val::Int(c @ (301 | 302 | 307 | 308))), Some(Val::Str(to))) => {
                let to_https = to == "https://$host$request_uri"
                    || to == "https://$http_host$request_uri"
                    || match draft.hosts.as_slice() {
                        [only] => {
                            to == "https://$server_name$request_uri"
                                || *to == format!("https://{only}$request_uri")
                        }
                        _ => false,
                    };
                let host_only = match cond {
                    None => last,
                    Some(Val::Str(c)) => match c.strip_prefix("$host = ") {
                        Some(h) => {
                            covered.push(h);
                            draft.hosts.iter().any(|x| x == h)
                        }
                        None => false,
                    },
                    Some(_) => false,
                };
                if !to_https || !host_only {
                    return None;
                }
                code = Some(*c);
            }
            _ => return None,
        }
    }
    // Conditions per name must cover every name (certbot's), or the others would be 404.
    if !covered.is_empty() && !draft.hosts.iter().all(|h| covered.contains(&h.as_str())) {
        return None;
    }
    let at = find_return(block).map_or(draft.at, At::of);
    code.map(|c| (c, at))
}

/// The first `return` of a server, also inside its `if` blocks.
fn find_return(block: &[Directive]) -> Option<&Directive> {
    block.iter().find_map(|d| match d.name.as_str() {
        "return" => Some(d),
        "if" | "location" => find_return(d.block.as_deref().unwrap_or_default()),
        _ => None,
    })
}
