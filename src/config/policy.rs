//! The nginx-style keys of sites and routes: `rules` (rewrite, return, if), `access`
//! (allow, deny), `add_headers`, `add_headers_on_success` and `client_max_body_size`,
//! compiled into a [`Policy`] with nginx's inheritance (a route with any access rule uses
//! only its own, the same for fields; the body limit is the route's if set, else the
//! site's), every problem reported with its line.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{Size, Validator};
use crate::routing::Policy;
use crate::rules::access::AccessRule;
use crate::rules::error_page::ErrorPage;
use crate::rules::template::Template;
use crate::rules::{Rule, RuleSpec};

/// One rule as written: `{ rewrite = "^/a(.*)", to = "/b$1", flag = "last" }`,
/// `{ return = 301, to = "https://$host$request_uri" }`, `{ return = 200, body = "ok" }`,
/// any of them with `if = "$request_method = POST"`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRule {
    #[serde(rename = "if")]
    condition: Option<String>,
    #[serde(rename = "return")]
    status: Option<u16>,
    rewrite: Option<String>,
    to: Option<String>,
    body: Option<String>,
    flag: Option<String>,
}

/// One `error_pages` entry: `{ codes = [502, 503], to = "/50x.html" }`, with `status = 200`
/// (nginx's `=200`) or `status = "page"` (nginx's bare `=`: the page's own status).
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileErrorPage {
    codes: Vec<u16>,
    to: String,
    status: Option<FileErrorStatus>,
}

impl FileErrorPage {
    /// The location it names (`to = "@name"`), without its `@`.
    pub(super) fn named(&self) -> Option<&str> {
        self.to.strip_prefix('@')
    }
}

/// The `cors` table of a site or route.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCors {
    origins: Vec<String>,
    methods: Option<Vec<String>>,
    headers: Option<Vec<String>>,
    #[serde(default)]
    expose: Vec<String>,
    #[serde(default)]
    credentials: bool,
    max_age: Option<String>,
}

/// `auth_request = { upstream = "auth", path = "/check", copy = ["X-User"] }`, or `false`
/// (a route without its site's); `copy_as = { X-User = "X-Auth-Request-User" }` copies a
/// field of the answer under another name.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum FileAuthRequest {
    Off(bool),
    On {
        upstream: String,
        path: String,
        #[serde(default)]
        copy: Vec<String>,
        #[serde(default)]
        copy_as: std::collections::BTreeMap<String, String>,
    },
}

/// `auth_basic = { realm = "Staff", user_file = "/etc/slipstream/htpasswd" }`, or `false`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum FileAuthBasic {
    Off(bool),
    On { realm: String, user_file: String },
}

/// An error page's status: a code, or `"page"`.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum FileErrorStatus {
    Code(u16),
    Word(String),
}

/// A `[maps.NAME]` section: `$NAME` is the value of the first entry whose key matches
/// `source` (exact keys in any case, then `~re`/`~*re` keys in order), else `default`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMap {
    source: String,
    #[serde(default)]
    entries: Vec<(String, String)>,
    #[serde(default)]
    default: String,
}

/// The `[real_ip]` section: nginx's `set_real_ip_from`, `real_ip_header`,
/// `real_ip_recursive`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRealIp {
    from: Vec<String>,
    header: Option<String>,
    recursive: Option<bool>,
}

/// The policy keys of one site or route, borrowed from its section.
pub(super) struct PolicyKeys<'a> {
    pub(super) rules: Option<&'a Vec<Spanned<FileRule>>>,
    pub(super) access: Option<&'a Spanned<Vec<String>>>,
    pub(super) add_headers: Option<&'a Spanned<BTreeMap<String, String>>>,
    pub(super) add_headers_on_success: Option<&'a Spanned<BTreeMap<String, String>>>,
    pub(super) client_max_body_size: Option<&'a Spanned<Size>>,
    pub(super) proxy_set_headers: Option<&'a Spanned<BTreeMap<String, String>>>,
    pub(super) error_pages: Option<&'a Vec<Spanned<FileErrorPage>>>,
    pub(super) intercept_errors: Option<bool>,
    pub(super) expires: Option<&'a Spanned<String>>,
    pub(super) hide_headers: Option<&'a Spanned<Vec<String>>>,
    pub(super) cors: Option<&'a Spanned<FileCors>>,
    pub(super) auth_request: Option<&'a Spanned<FileAuthRequest>>,
    pub(super) auth_basic: Option<&'a Spanned<FileAuthBasic>>,
    pub(super) satisfy: Option<&'a Spanned<String>>,
    pub(super) limit_req: Option<&'a Spanned<Vec<super::zones::FileLimitReq>>>,
    pub(super) limit_conn: Option<&'a Spanned<Vec<super::zones::FileLimitConn>>>,
    pub(super) limit_status: Option<&'a Spanned<u16>>,
    pub(super) cache: Option<&'a Spanned<super::cache::FileCache>>,
}

impl PolicyKeys<'_> {
    /// Whether any key is set (a route without any uses its site's policy).
    pub(super) fn any(&self) -> bool {
        self.rules.is_some()
            || self.access.is_some()
            || self.add_headers.is_some()
            || self.add_headers_on_success.is_some()
            || self.client_max_body_size.is_some()
            || self.proxy_set_headers.is_some()
            || self.error_pages.is_some()
            || self.intercept_errors.is_some()
            || self.expires.is_some()
            || self.hide_headers.is_some()
            || self.cors.is_some()
            || self.auth_request.is_some()
            || self.auth_basic.is_some()
            || self.satisfy.is_some()
            || self.limit_req.is_some()
            || self.limit_conn.is_some()
            || self.limit_status.is_some()
            || self.cache.is_some()
    }

    fn has_headers(&self) -> bool {
        self.add_headers.is_some() || self.add_headers_on_success.is_some()
    }
}

impl Validator<'_> {
    /// A site's policy, or a route's over its site's (`parent`); `names` are the named
    /// groups of the route's regex, usable in its rules.
    pub(super) fn build_policy(
        &mut self,
        keys: &PolicyKeys<'_>,
        parent: Option<&Policy>,
        names: &[&str],
    ) -> Policy {
        let rules = keys.rules.map_or(Vec::new(), |rules| {
            rules.iter().filter_map(|r| self.rule(r, names)).collect()
        });
        let access = match keys.access {
            Some(list) => self.access(list),
            None => parent.map_or(Vec::new(), |p| p.access.clone()),
        };
        let (headers, headers_on_success, dynamic_headers) =
            self.response_headers(keys, parent, names);
        let max_body = match keys.client_max_body_size {
            Some(size) => self.body_limit(size),
            None => parent.and_then(|p| p.max_body),
        };
        let request_fields = match keys.proxy_set_headers {
            Some(table) => self.request_fields(table, names),
            None => parent.map_or(Vec::new(), |p| p.request_fields.clone()),
        };
        let error_pages = match keys.error_pages {
            Some(pages) => pages.iter().filter_map(|p| self.error_page(p)).collect(),
            None => parent.map_or(Vec::new(), |p| p.error_pages.clone()),
        };
        let intercept_errors = keys
            .intercept_errors
            .unwrap_or_else(|| parent.is_some_and(|p| p.intercept_errors));
        let expires = match keys.expires {
            Some(text) => match crate::rules::expires::Expires::parse(text.get_ref()) {
                Ok(e) => e,
                Err(e) => {
                    self.error(text.span().start, format!("expires: {e}"));
                    None
                }
            },
            None => parent.and_then(|p| p.expires),
        };
        let hide_headers = match keys.hide_headers {
            Some(names) => self.hidden_fields(names),
            None => parent.map_or(Vec::new(), |p| p.hide_headers.clone()),
        };
        let cors = match keys.cors {
            Some(table) => self.cors(table),
            None => parent.and_then(|p| p.cors.clone()),
        };
        let auth_request = match keys.auth_request {
            Some(value) => self.auth_request(value),
            None => parent.and_then(|p| p.auth_request.clone()),
        };
        let auth_basic = match keys.auth_basic {
            Some(value) => self.auth_basic(value),
            None => parent.and_then(|p| p.auth_basic.clone()),
        };
        let satisfy_any = match keys.satisfy {
            Some(word) => match word.get_ref().as_str() {
                "any" => true,
                "all" => false,
                other => {
                    let message = format!("satisfy: {other:?} is \"all\" or \"any\"");
                    self.error(word.span().start, message);
                    false
                }
            },
            None => parent.is_some_and(|p| p.satisfy_any),
        };
        let (limit_req, limit_conn, limit_status) = self.limits(keys, parent);
        let cache = self.cache_rule(keys.cache, parent);
        let mut request_fields = request_fields;
        remove_copies(&mut request_fields, auth_request.as_deref());
        Policy {
            rules,
            access,
            headers,
            headers_on_success,
            dynamic_headers,
            max_body,
            request_fields,
            error_pages,
            intercept_errors,
            expires,
            hide_headers,
            cors,
            auth_request,
            auth_basic,
            satisfy_any,
            limit_req,
            limit_conn,
            limit_status,
            cache,
        }
    }

    fn auth_basic(
        &mut self,
        value: &Spanned<FileAuthBasic>,
    ) -> Option<Box<crate::rules::auth::AuthBasic>> {
        let at = value.span().start;
        let (realm, file) = match value.get_ref() {
            FileAuthBasic::Off(false) => return None,
            FileAuthBasic::Off(true) => {
                self.error(at, "auth_basic: a table { realm, user_file }, or false");
                return None;
            }
            FileAuthBasic::On { realm, user_file } => (realm, user_file),
        };
        if realm.bytes().any(|b| b.is_ascii_control()) {
            self.error(at, "auth_basic: the realm has no control characters");
            return None;
        }
        match crate::rules::htpasswd::Htpasswd::load(std::path::Path::new(file)) {
            Ok(users) => Some(Box::new(crate::rules::auth::AuthBasic {
                realm: realm.clone(),
                users: std::sync::Arc::new(users),
            })),
            Err(e) => {
                self.error(at, format!("auth_basic: {e}"));
                None
            }
        }
    }

    fn auth_request(
        &mut self,
        value: &Spanned<FileAuthRequest>,
    ) -> Option<Box<crate::rules::auth::AuthRequest>> {
        let at = value.span().start;
        let (upstream, path, copy, copy_as) = match value.get_ref() {
            FileAuthRequest::Off(false) => return None,
            FileAuthRequest::Off(true) => {
                self.error(at, "auth_request: a table { upstream, path }, or false");
                return None;
            }
            FileAuthRequest::On {
                upstream,
                path,
                copy,
                copy_as,
            } => (upstream, path, copy, copy_as),
        };
        let Some(index) = self.groups.iter().position(|(n, _)| n == upstream) else {
            self.error(at, format!("auth_request: no upstream group {upstream:?}"));
            return None;
        };
        if !self.groups[index].1 {
            let message = format!("auth_request: {upstream:?} must be an HTTP/1.1 group");
            self.error(at, message);
            return None;
        }
        let clean = |s: &str| !s.bytes().any(|b| b.is_ascii_control() || b == b' ');
        if !path.starts_with('/') || !clean(path) {
            self.error(at, format!("auth_request: path {path:?} must start with /"));
            return None;
        }
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        // A copy may not set what frames the request toward the upstream.
        if let Some(bad) = copy.iter().chain(copy_as.keys()).find(|n| framing_field(n)) {
            let message = format!("auth_request: {bad} is written by the proxy itself");
            self.error(at, message);
            return None;
        }
        let pairs: Vec<(&String, &String)> = copy
            .iter()
            .map(|c| (c, c))
            .chain(copy_as.iter().map(|(to, from)| (from, to)))
            .collect();
        let names = pairs.iter().flat_map(|(from, to)| [from, to]);
        if let Some(bad) = names
            .into_iter()
            .find(|n| n.is_empty() || !n.bytes().all(token))
        {
            self.error(at, format!("auth_request: {bad:?} is not a header name"));
            return None;
        }
        let copy = pairs
            .into_iter()
            .map(|(from, to)| crate::rules::auth::Copied {
                from: from.to_ascii_lowercase(),
                to: to.clone(),
            })
            .collect();
        Some(Box::new(crate::rules::auth::AuthRequest {
            upstream: index,
            path: path.clone(),
            copy,
        }))
    }

    fn cors(&mut self, table: &Spanned<FileCors>) -> Option<Box<crate::rules::cors::Cors>> {
        let c = table.get_ref();
        let max_age = match &c.max_age {
            None => None,
            Some(t) => match super::text::parse_duration(t) {
                Some(d) => Some(d.as_secs()),
                None => {
                    self.error(table.span().start, "cors.max_age: a time such as \"10m\"");
                    return None;
                }
            },
        };
        let spec = crate::rules::cors::CorsSpec {
            origins: &c.origins,
            methods: c.methods.as_deref(),
            headers: c.headers.as_deref(),
            expose: &c.expose,
            credentials: c.credentials,
            max_age,
        };
        match crate::rules::cors::Cors::new(&spec) {
            Ok(rule) => Some(Box::new(rule)),
            Err(e) => {
                self.error(table.span().start, format!("cors: {e}"));
                None
            }
        }
    }

    /// `hide_headers`: field names, lower-cased; the fields that frame the message are the
    /// proxy's own and refused.
    fn hidden_fields(&mut self, names: &Spanned<Vec<String>>) -> Vec<String> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        let mut hidden = Vec::new();
        for name in names.get_ref() {
            if name.is_empty() || !name.bytes().all(token) {
                let message = format!("hide_headers: {name:?} is not a header name");
                self.error(names.span().start, message);
            } else if crate::message::is_hop_by_hop(name) {
                let message = format!("hide_headers: {name} frames the message: the proxy's own");
                self.error(names.span().start, message);
            } else {
                hidden.push(name.to_ascii_lowercase());
            }
        }
        hidden
    }

    fn error_page(&mut self, page: &Spanned<FileErrorPage>) -> Option<ErrorPage> {
        let p = page.get_ref();
        let status = match &p.status {
            None => None,
            Some(FileErrorStatus::Code(code)) => Some(*code),
            Some(FileErrorStatus::Word(w)) if w == "page" => Some(0),
            Some(FileErrorStatus::Word(w)) => {
                let message = format!("error_pages: status {w:?}: a code, or \"page\"");
                self.error(page.span().start, message);
                return None;
            }
        };
        match ErrorPage::new(&p.codes, &p.to, status) {
            Ok(page) => Some(page),
            Err(e) => {
                self.error(page.span().start, format!("error_pages: {e}"));
                None
            }
        }
    }

    /// An `access` list: each rule parsed, a bad one reported.
    fn access(&mut self, list: &Spanned<Vec<String>>) -> Vec<AccessRule> {
        let mut rules = Vec::new();
        for text in list.get_ref() {
            match AccessRule::parse(text) {
                Ok(rule) => rules.push(rule),
                Err(e) => self.error(list.span().start, format!("access: {e}")),
            }
        }
        rules
    }

    fn rule(&mut self, rule: &Spanned<FileRule>, names: &[&str]) -> Option<Rule> {
        let r = rule.get_ref();
        let spec = RuleSpec {
            condition: r.condition.as_deref(),
            status: r.status,
            rewrite: r.rewrite.as_deref(),
            to: r.to.as_deref(),
            body: r.body.as_deref(),
            flag: r.flag.as_deref(),
        };
        match Rule::compile(&spec, names, &self.map_names) {
            Ok(rule) => Some(rule),
            Err(e) => {
                self.error(rule.span().start, format!("rules: {e}"));
                None
            }
        }
    }

    /// `Name: value\r\n` lines of an `add_headers`-style table.
    /// `add_headers` and `add_headers_on_success` (all-or-nothing, as nginx inherits
    /// them): the fixed lines of each, and the fields whose values have variables.
    fn response_headers(
        &mut self,
        keys: &PolicyKeys<'_>,
        parent: Option<&Policy>,
        names: &[&str],
    ) -> (Vec<u8>, Vec<u8>, crate::routing::DynamicHeaders) {
        if let Some(p) = parent.filter(|_| !keys.has_headers()) {
            let inherited = p.dynamic_headers.clone();
            return (p.headers.clone(), p.headers_on_success.clone(), inherited);
        }
        let mut dynamic = Vec::new();
        let always = self.field_lines("add_headers", keys.add_headers, names, &mut dynamic);
        let key = "add_headers_on_success";
        let table = keys.add_headers_on_success;
        let on_success = self.field_lines(key, table, names, &mut dynamic);
        (always, on_success, dynamic)
    }

    pub(super) fn field_lines(
        &mut self,
        key: &str,
        table: Option<&Spanned<BTreeMap<String, String>>>,
        names: &[&str],
        dynamic: &mut crate::routing::DynamicHeaders,
    ) -> Vec<u8> {
        let mut lines = Vec::new();
        let Some(table) = table else {
            return lines;
        };
        for (name, value) in table.get_ref() {
            if value.contains('$') {
                // Checked as a line with the variables' names in place of their values.
                let checked = crate::http1::response::field_line(name, &value.replace('$', ""));
                let template = Template::parse_with(value, names, &self.map_names);
                match (checked, template) {
                    (Ok(_), Ok(t)) => dynamic.push((name.clone(), t, key == "add_headers")),
                    (Err(e), _) => self.error(table.span().start, format!("{key}: {e}")),
                    (_, Err(e)) => self.error(table.span().start, format!("{key}: {name}: {e}")),
                }
                continue;
            }
            match crate::http1::response::field_line(name, value) {
                Ok(line) => lines.extend_from_slice(&line),
                Err(e) => self.error(table.span().start, format!("{key}: {e}")),
            }
        }
        let distinct = crate::http1::response::distinct_fields(&lines);
        if distinct.len() != lines.len() {
            let message =
                format!("{key}: a field is listed twice (names are compared in any case)");
            self.error(table.span().start, message);
        }
        distinct
    }

    /// `proxy_set_headers`: names checked (not the fields that frame the message or the
    /// connection, which the proxy writes itself), values compiled with their variables.
    fn request_fields(
        &mut self,
        table: &Spanned<BTreeMap<String, String>>,
        names: &[&str],
    ) -> Vec<(String, Template)> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        let mut fields = Vec::new();
        for (name, value) in table.get_ref() {
            let at = table.span().start;
            if name.is_empty() || !name.bytes().all(token) {
                self.error(
                    at,
                    format!("proxy_set_headers: {name:?} is not a header name"),
                );
                continue;
            }
            if framing_field(name) {
                let message = format!("proxy_set_headers: {name} is written by the proxy itself");
                self.error(at, message);
                continue;
            }
            match Template::parse_with(value, names, &self.map_names) {
                Ok(t) => fields.push((name.clone(), t)),
                Err(e) => self.error(at, format!("proxy_set_headers: {name}: {e}")),
            }
        }
        fields
    }

    /// The `[maps.NAME]` sections, their names kept for the rules' variables.
    pub(super) fn build_maps(
        &mut self,
        maps: &BTreeMap<Spanned<String>, FileMap>,
    ) -> Vec<crate::rules::map::Map> {
        let mut built = Vec::new();
        for (name, map) in maps {
            let at = name.span().start;
            let valid = !name.get_ref().is_empty()
                && name
                    .get_ref()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                self.error(
                    at,
                    format!("map name {:?}: letters, digits and _ only", name.get_ref()),
                );
                continue;
            }
            if crate::rules::template::Template::parse(&format!("${}", name.get_ref()), &[]).is_ok()
            {
                let message = format!("map name {:?} is a built-in variable", name.get_ref());
                self.error(at, message);
                continue;
            }
            match crate::rules::map::Map::new(&map.source, &map.entries, &map.default) {
                Ok(m) => {
                    built.push(m);
                    self.map_names.push(name.get_ref().clone());
                }
                Err(e) => self.error(at, format!("maps.{}: {e}", name.get_ref())),
            }
        }
        built
    }

    /// `[real_ip]`: trusted proxies and the field naming the client.
    pub(super) fn build_real_ip(
        &mut self,
        section: &Spanned<FileRealIp>,
    ) -> Option<crate::rules::real_ip::RealIp> {
        let at = section.span().start;
        let r = section.get_ref();
        let mut from = Vec::new();
        for net in &r.from {
            match AccessRule::parse(&format!("allow {net}")) {
                Ok(rule) if rule.net.is_some() => from.push(rule),
                _ => self.error(
                    at,
                    format!("real_ip.from: {net:?} is not an address or network"),
                ),
            }
        }
        if from.is_empty() {
            self.error(
                at,
                "real_ip.from: list the trusted proxies (addresses or networks)",
            );
            return None;
        }
        let header = r.header.clone().unwrap_or_else(|| "X-Real-IP".to_string());
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if header.is_empty() || !header.bytes().all(token) {
            self.error(
                at,
                format!("real_ip.header: {header:?} is not a header name"),
            );
            return None;
        }
        Some(crate::rules::real_ip::RealIp {
            from,
            header: header.to_ascii_lowercase(),
            recursive: r.recursive.unwrap_or(false),
        })
    }

    /// `client_max_body_size`: a size, `0` for no limit.
    fn body_limit(&mut self, size: &Spanned<Size>) -> Option<u64> {
        let parsed = match size.get_ref() {
            Size::Bytes(n) => Some(*n),
            Size::Text(t) => super::text::parse_size(t),
        };
        match parsed {
            Some(0) => None,
            Some(n) => Some(n),
            None => {
                let message =
                    "client_max_body_size: use bytes or e.g. \"1m\", \"512k\" (0: no limit)";
                self.error(size.span().start, message);
                None
            }
        }
    }
}

/// Fields the proxy writes itself toward the upstream (framing, the connection,
/// `X-Forwarded-For`): neither `proxy_set_headers` nor an `auth_request` copy may set them.
fn framing_field(name: &str) -> bool {
    crate::message::is_hop_by_hop(name)
        || name.eq_ignore_ascii_case("expect")
        || name.eq_ignore_ascii_case("x-forwarded-for")
}

/// Adds to `request_fields` the removal of each field `auth_request` copies: the client
/// never sets what the service vouches for, even when the service is not asked (`satisfy
/// any` let the request through first).
fn remove_copies(
    request_fields: &mut Vec<(String, Template)>,
    auth_request: Option<&crate::rules::auth::AuthRequest>,
) {
    for copied in auth_request.iter().flat_map(|a| &a.copy) {
        if !request_fields
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(&copied.to))
        {
            request_fields.push((copied.to.clone(), Template::default()));
        }
    }
}
