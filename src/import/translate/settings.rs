//! The directives that set something for a level and the levels inside it (nginx's merge of
//! http, server and location settings): body size, headers, access lists, compression,
//! files, upstream timeouts and TLS, FastCGI variables, certificates, logs; and the few that
//! are process-wide in slipstream (`[limits]`, `[tls]`, the error log).

use super::emit::{Keys, Val};
use super::values::{duration, size};
use super::{Directive, Translator};

/// Where a directive stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    /// `http`, or the top of a file meant for `http { include ...; }`.
    Http,
    /// `server`.
    Server,
    /// `location`.
    Location,
}

/// The kind of upstream a group setting applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Family {
    /// `proxy_pass`.
    Proxy,
    /// `fastcgi_pass`.
    FastCgi,
    /// `grpc_pass`.
    Grpc,
}

/// An `add_header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    /// The field name.
    pub(super) name: String,
    /// Its value.
    pub(super) value: String,
    /// With `always`: on every response, not only successful ones.
    pub(super) always: bool,
}

/// A group key that a level sets for the groups its locations use, and where it was set.
#[derive(Debug, Clone)]
pub(super) struct GroupSetting {
    /// The upstreams it applies to.
    pub(super) family: Family,
    /// The group's key (`read_timeout`).
    pub(super) key: &'static str,
    /// Its value.
    pub(super) value: Val,
    /// The directive that set it, for notes.
    pub(super) directive: Directive,
}

/// What a level inherits from the levels around it: each value is the nearest level's.
#[derive(Debug, Clone, Default)]
pub(super) struct Scope {
    /// `client_max_body_size`: as written for slipstream, and in bytes.
    pub(super) body_size: Option<(String, u64)>,
    /// The `add_header` list of the nearest level that has any.
    pub(super) headers: Option<Vec<Header>>,
    /// The allow/deny list of the nearest level that has any.
    pub(super) access: Option<Vec<String>>,
    /// The `proxy_set_header` fields (not the idioms slipstream covers) of the nearest level
    /// that has any `proxy_set_header`.
    pub(super) request_fields: Option<Vec<(String, String)>>,
    /// `gzip on` or `brotli on`.
    pub(super) compress: bool,
    /// `root`.
    pub(super) root: Option<String>,
    /// `index`.
    pub(super) index: Option<Vec<String>>,
    /// `autoindex on`.
    pub(super) autoindex: bool,
    /// `expires`, as written (`off` included).
    pub(super) expires: Option<String>,
    /// Timeouts and upstream TLS settings for groups.
    pub(super) group: Vec<GroupSetting>,
    /// The non-stock `fastcgi_param`s of the nearest level that has any.
    pub(super) fastcgi_params: Option<Vec<(String, String)>>,
    /// `fastcgi_index`.
    pub(super) fastcgi_index: Option<String>,
    /// `ssl_certificate` and `ssl_certificate_key`.
    pub(super) cert: Option<String>,
    /// `ssl_certificate_key`.
    pub(super) key: Option<String>,
    /// The `error_page` entries of the nearest level that has any.
    pub(super) error_pages: Option<Vec<Val>>,
    /// The `proxy_hide_header` (or `fastcgi_`, `grpc_`) names of the nearest level that has
    /// any.
    pub(super) hide_headers: Option<Vec<String>>,
    /// `auth_basic`: the realm, or `off`.
    pub(super) auth_basic: Option<String>,
    /// `auth_basic_user_file`.
    pub(super) user_file: Option<String>,
    /// `satisfy`.
    pub(super) satisfy: Option<String>,
    /// The `limit_req` entries of the nearest level that has any.
    pub(super) limit_req: Option<Vec<Val>>,
    /// The `limit_conn` entries of the nearest level that has any.
    pub(super) limit_conn: Option<Vec<Val>>,
    /// `limit_req_status` / `limit_conn_status`.
    pub(super) limit_status: Option<i64>,
    /// `proxy_intercept_errors on` (and `grpc_`).
    pub(super) intercept_proxy: bool,
    /// `fastcgi_intercept_errors on`.
    pub(super) intercept_fastcgi: bool,
    /// `auth_request`.
    pub(super) auth_request: Option<super::auth::AuthTarget>,
    /// The `auth_request_set` variables of the nearest level that has any: (name, the
    /// service's field).
    pub(super) auth_sets: Option<Vec<(String, String)>>,
    /// The fields `proxy_set_header` sets from those variables: (field, the service's field),
    /// of the nearest level with any `proxy_set_header`.
    pub(super) auth_copies: Option<Vec<(String, String)>>,
    /// The `proxy_cache*` and `fastcgi_cache*` settings, and the `cache` in effect.
    pub(super) cache: super::cache::Caches,
}

/// An `access_log` of a level: the file (or `"off"`) and its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct AccessLog {
    /// The file, or `off`.
    pub(super) path: String,
    /// `combined`, `json` or a template; None for nginx's default (combined).
    pub(super) format: Option<String>,
}

/// What one level sets for itself (its lists replace the inherited ones as a whole).
#[derive(Debug, Default)]
pub(super) struct Own {
    /// Its `add_header`s, when it has any.
    pub(super) headers: Option<Vec<Header>>,
    /// Its allow/deny, when it has any.
    pub(super) access: Option<Vec<String>>,
    /// Its `proxy_set_header` fields, when it has any `proxy_set_header`.
    pub(super) request_fields: Option<Vec<(String, String)>>,
    /// Its `fastcgi_param`s (non-stock ones), when it has any.
    pub(super) fastcgi_params: Option<Vec<(String, String)>>,
    /// Its `access_log`.
    pub(super) access_log: Option<AccessLog>,
    /// Its rewrite-module rules, in order.
    pub(super) rules: Vec<Val>,
    /// The certificate directives it has had (a second certificate is noted).
    pub(super) tls_files: Vec<String>,
    /// Its `error_page` entries, when it has any.
    pub(super) error_pages: Option<Vec<Val>>,
    /// Its hidden upstream fields, when it has any.
    pub(super) hide_headers: Option<Vec<String>>,
    /// Its `limit_req` entries, when it has any.
    pub(super) limit_req: Option<Vec<Val>>,
    /// Its `limit_conn` entries, when it has any.
    pub(super) limit_conn: Option<Vec<Val>>,
    /// Its `auth_request_set` variables, when it has any.
    pub(super) auth_sets: Option<Vec<(String, String)>>,
    /// Its copies of the auth service's fields, when it has any `proxy_set_header`.
    pub(super) auth_copies: Option<Vec<(String, String)>>,
    /// Its cache lists (`proxy_cache_valid`, `proxy_cache_bypass`, ...).
    pub(super) cache: super::cache::OwnCaches,
}

impl Own {
    /// The level's lists over the inherited ones.
    pub(super) fn apply(&self, scope: &mut Scope) {
        if let Some(h) = &self.headers {
            scope.headers = Some(h.clone());
        }
        if let Some(a) = &self.access {
            scope.access = Some(a.clone());
        }
        if let Some(f) = &self.request_fields {
            scope.request_fields = Some(f.clone());
            scope.auth_copies = Some(self.auth_copies.clone().unwrap_or_default());
        }
        if let Some(s) = &self.auth_sets {
            scope.auth_sets = Some(s.clone());
        }
        if let Some(p) = &self.fastcgi_params {
            scope.fastcgi_params = Some(p.clone());
        }
        if let Some(p) = &self.error_pages {
            scope.error_pages = Some(p.clone());
        }
        if let Some(h) = &self.hide_headers {
            scope.hide_headers = Some(h.clone());
        }
        if let Some(l) = &self.limit_req {
            scope.limit_req = Some(l.clone());
        }
        if let Some(l) = &self.limit_conn {
            scope.limit_conn = Some(l.clone());
        }
        self.cache.apply(&mut scope.cache);
    }
}

/// The `auth_basic` key a level's scope stands for: a table, `false` for `off`, or nothing.
pub(super) fn auth_basic(scope: &Scope) -> Option<Val> {
    match (scope.auth_basic.as_deref(), scope.user_file.as_deref()) {
        (Some("off"), _) => Some(Val::Bool(false)),
        (Some(realm), Some(file)) => Some(Val::Table(vec![
            ("realm".into(), Val::str(realm)),
            ("user_file".into(), Val::str(file)),
        ])),
        _ => None,
    }
}

/// One `error_page CODE... [=[CODE]] TARGET` as an `error_pages` entry.
fn error_page(args: &[String]) -> Result<Val, &'static str> {
    let (target, rest) = args.split_last().ok_or("no page")?;
    if target.contains('$') {
        return Err("variables in error pages are not supported yet");
    }
    let (status, codes) = match rest.split_last() {
        Some((last, codes)) if last.starts_with('=') => (Some(&last[1..]), codes),
        _ => (None, rest),
    };
    let codes: Vec<Val> = codes
        .iter()
        .map(|c| {
            c.parse::<i64>()
                .map(Val::Int)
                .map_err(|_| "not a status code")
        })
        .collect::<Result<_, _>>()?;
    if codes.is_empty() {
        return Err("no status code");
    }
    let mut entry = vec![
        ("codes".to_string(), Val::List(codes)),
        ("to".to_string(), Val::str(target.as_str())),
    ];
    match status {
        None => {}
        Some("") => entry.push(("status".into(), Val::str("page"))),
        Some(code) => {
            let code = code.parse::<i64>().map_err(|_| "not a status code")?;
            entry.push(("status".into(), Val::Int(code)));
        }
    }
    Ok(Val::Table(entry))
}

/// The CGI variables `fastcgi_params` and `fastcgi.conf` set, which slipstream sets itself.
const STOCK_PARAMS: &[&str] = &[
    "QUERY_STRING",
    "REQUEST_METHOD",
    "CONTENT_TYPE",
    "CONTENT_LENGTH",
    "SCRIPT_NAME",
    "SCRIPT_FILENAME",
    "REQUEST_URI",
    "DOCUMENT_URI",
    "DOCUMENT_ROOT",
    "SERVER_PROTOCOL",
    "REQUEST_SCHEME",
    "HTTPS",
    "GATEWAY_INTERFACE",
    "SERVER_SOFTWARE",
    "REMOTE_ADDR",
    "REMOTE_PORT",
    "REMOTE_USER",
    "SERVER_ADDR",
    "SERVER_PORT",
    "SERVER_NAME",
    "REDIRECT_STATUS",
    "PATH_INFO",
    "PATH_TRANSLATED",
];

impl Translator {
    /// One directive of a level that is not a block of its own kind: a setting, a rule, or
    /// something noted.
    pub(super) fn setting(
        &mut self,
        d: &Directive,
        scope: &mut Scope,
        own: &mut Own,
        level: Level,
    ) {
        if self.inherited(d, scope, own, level)
            || self.cache_directive(d, scope, own, level)
            || self.auth(d, scope, own)
            || self.listed(d, own)
            || self.global(d, level)
            || self.group_setting(d, scope)
        {
            return;
        }
        if level != Level::Http {
            if let Some(rules) = self.rules(d) {
                own.rules.extend(rules);
                return;
            }
        }
        self.other(d);
    }

    /// The settings inherited as single values; true when `d` is one.
    fn inherited(&mut self, d: &Directive, scope: &mut Scope, own: &mut Own, level: Level) -> bool {
        let arg = d.args.first().map(String::as_str).unwrap_or_default();
        let one = d.args.len() == 1;
        match d.name.as_str() {
            "client_max_body_size" if one => match size(arg) {
                Some(s) => scope.body_size = Some(s),
                None => self.not_translated(d, "not an nginx size"),
            },
            "gzip" | "brotli" if one => scope.compress = arg == "on",
            "root" if one && arg.contains('$') => {
                self.not_translated(d, "variables in root are not supported yet");
            }
            "root" if one => scope.root = Some(arg.to_string()),
            "index" if !d.args.is_empty() => scope.index = Some(d.args.clone()),
            "autoindex" if one => scope.autoindex = arg == "on",
            "expires" => {
                let text = d.args.join(" ");
                match crate::rules::expires::Expires::parse(&text) {
                    Ok(_) => scope.expires = Some(text),
                    Err(e) => self.not_translated(d, e),
                }
            }
            "fastcgi_index" if one => scope.fastcgi_index = Some(arg.to_string()),
            "ssl_certificate" | "ssl_certificate_key" if one => {
                let first = !own.tls_files.contains(&d.name);
                if first {
                    own.tls_files.push(d.name.clone());
                    match d.name.as_str() {
                        "ssl_certificate" => scope.cert = Some(arg.to_string()),
                        _ => scope.key = Some(arg.to_string()),
                    }
                } else {
                    self.not_translated(d, "one certificate per site");
                }
            }
            "access_log" => self.access_log(d, own, level),
            "proxy_intercept_errors" | "grpc_intercept_errors" if one => {
                scope.intercept_proxy = arg == "on";
            }
            "fastcgi_intercept_errors" if one => scope.intercept_fastcgi = arg == "on",
            "auth_basic" if one => scope.auth_basic = Some(arg.to_string()),
            "auth_basic_user_file" if one && arg.contains('$') => {
                self.not_translated(d, "variables in the user file are not supported");
            }
            "auth_basic_user_file" if one => scope.user_file = Some(arg.to_string()),
            "satisfy" if one && (arg == "any" || arg == "all") => {
                scope.satisfy = Some(arg.to_string());
            }
            "limit_req_status" | "limit_conn_status" if one => match arg.parse::<i64>() {
                Ok(code) if scope.limit_status.is_none_or(|s| s == code) => {
                    scope.limit_status = Some(code);
                }
                Ok(_) => self.not_translated(d, "one status for limit_req and limit_conn"),
                Err(_) => self.not_translated(d, "not a status"),
            },
            "recursive_error_pages" if arg == "off" => self.ignore(d, "nginx's default"),
            _ => return false,
        }
        true
    }

    /// The variable of `value` slipstream does not have, if any (the location's and server's
    /// regex groups and the maps are known).
    pub(super) fn unknown_variable(&self, value: &str) -> Option<String> {
        if !value.contains('$') {
            return None;
        }
        let groups: Vec<&str> = self
            .location_groups
            .iter()
            .chain(&self.server_groups)
            .map(String::as_str)
            .collect();
        let maps: Vec<String> = self.out.maps.iter().map(|(n, _)| n.clone()).collect();
        let e = crate::rules::template::Template::parse_with(value, &groups, &maps).err()?;
        Some(
            e.strip_prefix("unknown variable ")
                .unwrap_or(&e)
                .to_string(),
        )
    }

    /// The all-or-nothing lists (`add_header`, allow/deny, `fastcgi_param`) and
    /// `proxy_set_header`; true when `d` is one of them.
    fn listed(&mut self, d: &Directive, own: &mut Own) -> bool {
        if self.limits(d, own) {
            return true;
        }
        match (d.name.as_str(), d.args.as_slice()) {
            ("add_header", [name, value, rest @ ..]) if rest.is_empty() || rest == ["always"] => {
                let always = !rest.is_empty();
                let unknown = self.unknown_variable(value);
                let list = own.headers.get_or_insert_with(Vec::new);
                if let Some(var) = unknown {
                    self.not_translated(d, format!("{var} is not supported yet"));
                } else if list
                    .iter()
                    .any(|h| h.name.eq_ignore_ascii_case(name) && h.always == always)
                {
                    self.not_translated(d, "the same header twice");
                } else {
                    list.push(Header {
                        name: name.clone(),
                        value: value.clone(),
                        always,
                    });
                }
            }
            ("error_page", [_, _, ..]) => match error_page(&d.args) {
                Ok(entry) => own.error_pages.get_or_insert_with(Vec::new).push(entry),
                Err(reason) => self.not_translated(d, reason),
            },
            ("proxy_hide_header" | "fastcgi_hide_header" | "grpc_hide_header", [name]) => {
                if crate::message::is_hop_by_hop(name) {
                    self.ignore(d, "slipstream never passes it on");
                } else {
                    own.hide_headers
                        .get_or_insert_with(Vec::new)
                        .push(name.clone());
                }
            }
            ("allow" | "deny", [who]) => {
                let list = own.access.get_or_insert_with(Vec::new);
                list.push(format!("{} {who}", d.name));
            }
            ("fastcgi_param", [name, value, rest @ ..]) if rest.len() <= 1 => {
                let list = own.fastcgi_params.get_or_insert_with(Vec::new);
                let stock = STOCK_PARAMS.contains(&name.as_str())
                    && (value.contains('$')
                        || matches!(
                            (name.as_str(), value.as_str()),
                            ("GATEWAY_INTERFACE", "CGI/1.1") | ("REDIRECT_STATUS", "200")
                        ));
                if stock {
                    self.ignore(d, "slipstream sets it itself");
                } else if name == "HTTP_PROXY" {
                    self.ignore(d, "slipstream never sends HTTP_PROXY");
                } else if value.contains('$') {
                    self.not_translated(d, "variables in FastCGI params are not supported yet");
                } else {
                    list.retain(|(n, _)| n != name);
                    list.push((name.clone(), value.clone()));
                }
            }
            ("proxy_set_header", [name, value]) => {
                // Any proxy_set_header makes the level's list its own (nginx).
                own.request_fields.get_or_insert_with(Vec::new);
                match forwarded_idiom(name, value) {
                    Some(reason) => self.ignore(d, reason),
                    None if request_field_refused(name) => {
                        self.not_translated(d, "slipstream writes this field itself");
                    }
                    None => match self.unknown_variable(value) {
                        Some(var) => self.not_translated(d, format!("{var} is not supported yet")),
                        None => {
                            let list = own.request_fields.get_or_insert_with(Vec::new);
                            list.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                            list.push((name.clone(), value.clone()));
                        }
                    },
                }
            }
            ("set", [var, value]) if var == "$path_info" && value == "$fastcgi_path_info" => {
                self.ignore(d, "slipstream splits PATH_INFO after .php itself");
            }
            ("map", [from, to]) if from == "$http_upgrade" && to == "$connection_upgrade" => {
                self.ignore(d, "slipstream forwards upgrades itself");
            }
            _ => return false,
        }
        true
    }

    /// The settings slipstream has once per process; true when `d` is one.
    fn global(&mut self, d: &Directive, level: Level) -> bool {
        let arg = d.args.first().map(String::as_str).unwrap_or_default();
        let limit = match d.name.as_str() {
            "keepalive_timeout" if !d.args.is_empty() => "keepalive_timeout",
            "client_body_timeout" | "send_timeout" => "client_body_timeout",
            "client_header_timeout" => "client_header_timeout",
            "worker_shutdown_timeout" => "drain_timeout",
            "ssl_protocols" => {
                self.ssl_protocols(d);
                return true;
            }
            "set_real_ip_from" | "real_ip_header" | "real_ip_recursive" => {
                self.real_ip(d);
                return true;
            }
            "ssl_reject_handshake" if arg == "on" => {
                self.set_global(Some("tls"), "require_sni", Val::Bool(true), d);
                return true;
            }
            "default_type" if arg == "application/octet-stream" => {
                self.ignore(d, "slipstream's default too");
                return true;
            }
            "default_type" => {
                self.set_global(Some("files"), "default_type", Val::str(arg), d);
                return true;
            }
            "resolver" => {
                self.resolver(d);
                return true;
            }
            "error_log" if level == Level::Http => {
                self.error_log(d);
                return true;
            }
            "error_log" => {
                self.not_translated(d, "one error log for the process");
                return true;
            }
            "log_format" => return true,
            _ => return false,
        };
        match duration(arg) {
            Some(value) => self.set_global(Some("limits"), limit, Val::Str(value), d),
            None => self.not_translated(d, "not an nginx time"),
        }
        true
    }

    /// Upstream timeouts and TLS settings, kept for the groups the level's locations use;
    /// true when `d` is one.
    fn group_setting(&mut self, d: &Directive, scope: &mut Scope) -> bool {
        let Some((prefix, rest)) = d.name.split_once('_') else {
            return false;
        };
        let family = match prefix {
            "proxy" => Family::Proxy,
            "fastcgi" => Family::FastCgi,
            "grpc" => Family::Grpc,
            _ => return false,
        };
        let arg = d.args.first().map(String::as_str).unwrap_or_default();
        let (key, value) = match (rest, family) {
            ("connect_timeout" | "read_timeout" | "send_timeout", _) => {
                let Some(value) = duration(arg) else {
                    self.not_translated(d, "not an nginx time");
                    return true;
                };
                let key = match rest {
                    "connect_timeout" => "connect_timeout",
                    "read_timeout" => "read_timeout",
                    _ => "send_timeout",
                };
                (key, Val::Str(value))
            }
            ("ssl_trusted_certificate", Family::Proxy) => ("tls_ca", Val::str(arg)),
            ("ssl_name", Family::Proxy) if !arg.contains('$') => ("tls_server_name", Val::str(arg)),
            ("ssl_certificate", Family::Proxy) => ("tls_client_cert", Val::str(arg)),
            ("ssl_certificate_key", Family::Proxy) => ("tls_client_key", Val::str(arg)),
            ("ssl_verify", Family::Proxy) => ("tls_verify", Val::Bool(arg == "on")),
            _ => return false,
        };
        scope
            .group
            .retain(|s| !(s.family == family && s.key == key));
        scope.group.push(GroupSetting {
            family,
            key,
            value,
            directive: d.clone(),
        });
        true
    }

    /// `access_log PATH [FORMAT] [buffer=..] [flush=..] [gzip]` or `access_log off`.
    fn access_log(&mut self, d: &Directive, own: &mut Own, level: Level) {
        if level == Level::Location {
            self.not_translated(d, "per-location access logs are not supported yet");
            return;
        }
        let Some(path) = d.args.first() else {
            return self.not_translated(d, "no file");
        };
        if own.access_log.is_some() {
            return self.not_translated(d, "one access log per site");
        }
        if path.contains(':') && !path.starts_with('/') {
            return self.not_translated(d, "only files are supported");
        }
        let mut format = None;
        for (i, a) in d.args.iter().enumerate().skip(1) {
            if a.starts_with("buffer=") || a.starts_with("flush=") || a == "gzip" {
                continue;
            }
            if i == 1 && !a.contains('=') {
                match self.log_formats.iter().find(|(n, _)| n == a) {
                    Some((_, f)) => format = f.clone(),
                    None if a == "combined" => {}
                    None => {
                        return self.not_translated(d, "its log_format is not translated");
                    }
                }
                continue;
            }
            return self.not_translated(d, "only a file and a format");
        }
        own.access_log = Some(AccessLog {
            path: path.clone(),
            format,
        });
    }

    /// `log_format NAME [escape=..] STRING...`: kept by name when slipstream has every
    /// field it uses.
    pub(super) fn log_format(&mut self, d: &Directive) {
        let Some((name, rest)) = d.args.split_first() else {
            return self.not_translated(d, "no name");
        };
        let (escape, parts) = match rest.split_first() {
            Some((e, parts)) if e.starts_with("escape=") => (Some(e.as_str()), parts),
            _ => (None, rest),
        };
        let text: String = parts.concat();
        const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" \
                                $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";
        let format = if text == COMBINED {
            Some("combined".to_string())
        } else if escape.is_some_and(|e| e != "escape=default") {
            return self.not_translated(d, "only nginx's default escaping");
        } else {
            match crate::observe::log_format::LogFormat::parse(&text) {
                Ok(_) => Some(text),
                Err(e) => return self.not_translated(d, e),
            }
        };
        self.log_formats.push((name.clone(), format));
    }

    /// `error_log FILE [LEVEL]`: the process's error log and its level.
    fn error_log(&mut self, d: &Directive) {
        let Some(path) = d.args.first() else {
            return self.not_translated(d, "no file");
        };
        if path.contains(':') && !path.starts_with('/') {
            return self.not_translated(d, "only a file or stderr");
        }
        self.set_global(None, "error_log", Val::str(path.as_str()), d);
        if let Some(level) = d.args.get(1) {
            let level = match level.as_str() {
                "debug" => "debug",
                "info" | "notice" => "info",
                "warn" => "warn",
                _ => "error",
            };
            self.set_global(None, "error_log_level", Val::str(level), d);
        }
    }

    /// `ssl_protocols`: the lowest version as `[tls] min_version`.
    fn ssl_protocols(&mut self, d: &Directive) {
        let has = |v: &str| d.args.iter().any(|a| a == v);
        if has("TLSv1") || has("TLSv1.1") || has("SSLv3") {
            self.not_translated(d, "TLS 1.2 is the oldest slipstream speaks");
        }
        let min = if has("TLSv1.2") || !has("TLSv1.3") {
            "1.2"
        } else {
            "1.3"
        };
        self.set_global(Some("tls"), "min_version", Val::str(min), d);
    }

    /// `resolver ADDRESS ... [valid=..] [ipv6=..]`: the DNS servers for upstream names.
    fn resolver(&mut self, d: &Directive) {
        let servers: Vec<String> = d
            .args
            .iter()
            .filter(|a| !a.contains('='))
            .map(|a| {
                let bare = a.trim_start_matches('[').trim_end_matches(']');
                if bare.parse::<std::net::IpAddr>().is_ok() {
                    match bare.contains(':') {
                        true => format!("[{bare}]:53"),
                        false => format!("{bare}:53"),
                    }
                } else {
                    a.clone()
                }
            })
            .collect();
        self.set_global(None, "resolver", Val::strs(&servers), d);
    }

    /// Sets a process-wide key once; a different value later is noted.
    /// nginx's realip directives as the one `[real_ip]` section (slipstream has one for the
    /// process: the same values wherever they are written).
    fn real_ip(&mut self, d: &Directive) {
        let arg = d.args.first().cloned().unwrap_or_default();
        match d.name.as_str() {
            "set_real_ip_from" if arg.starts_with("unix:") => {
                self.not_translated(d, "unix: peers are not supported yet");
            }
            "set_real_ip_from" => {
                let keys = self.out.section("real_ip");
                let mut list = match super::emit::get(keys, "from") {
                    Some(Val::List(l)) => l.clone(),
                    _ => Vec::new(),
                };
                if !list.contains(&Val::str(arg.as_str())) {
                    list.push(Val::str(arg.as_str()));
                }
                super::emit::set(keys, "from", Val::List(list));
            }
            "real_ip_header" if arg == "proxy_protocol" => {
                let why = "a proxy_protocol listener takes the PROXY header's client from any \
                           sender; drop [real_ip] if it only served this";
                self.not_translated(d, why);
            }
            "real_ip_header" => {
                self.set_global(Some("real_ip"), "header", Val::str(arg.as_str()), d);
            }
            _ => self.set_global(Some("real_ip"), "recursive", Val::Bool(arg == "on"), d),
        }
    }

    pub(super) fn set_global(
        &mut self,
        section: Option<&str>,
        key: &str,
        value: Val,
        d: &Directive,
    ) {
        let keys: &mut Keys = match section {
            Some(s) => self.out.section(s),
            None => &mut self.out.top,
        };
        match super::emit::get(keys, key) {
            Some(v) if *v == value => {}
            Some(_) => self.not_translated(d, "slipstream has one value for every site"),
            None => super::emit::set(keys, key, value),
        }
    }
}

/// Fields `proxy_set_headers` refuses: the ones that frame the message or the connection.
fn request_field_refused(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "trailer"
            | "expect"
            | "x-forwarded-for"
    )
}

/// Why a `proxy_set_header` needs no translation: the forwarding fields slipstream writes
/// itself, and the WebSocket and keep-alive idioms.
fn forwarded_idiom(name: &str, value: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    match (name.as_str(), value) {
        ("host", "$host" | "$http_host") => Some("slipstream forwards the client's Host itself"),
        ("x-forwarded-for", "$proxy_add_x_forwarded_for" | "$remote_addr")
        | ("x-forwarded-proto", "$scheme")
        | ("x-forwarded-host", "$host" | "$http_host") => {
            Some("slipstream writes X-Forwarded-For, -Proto and -Host itself")
        }
        ("upgrade", "$http_upgrade") => Some("slipstream forwards upgrades itself"),
        ("connection", v) if v.eq_ignore_ascii_case("upgrade") || v == "$connection_upgrade" => {
            Some("slipstream forwards upgrades itself")
        }
        ("connection", "") => Some("slipstream keeps upstream connections alive itself"),
        _ => None,
    }
}
