//! The translated config as values, and as TOML text: top-level keys, sections, listeners,
//! upstream groups, then sites with their routes, each table's keys in the order they were
//! set. Strings are written with `toml`'s own escaping; inline tables keep their keys' order.

/// A TOML value as the translation writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Val {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// An array; written one element a line when it holds tables.
    List(Vec<Val>),
    /// An inline table, keys in this order.
    Table(Keys),
}

/// A table's keys in the order they are written.
pub(super) type Keys = Vec<(String, Val)>;

impl Val {
    /// A string value.
    pub(super) fn str(s: impl Into<String>) -> Val {
        Val::Str(s.into())
    }

    /// An array of strings.
    pub(super) fn strs<S: AsRef<str>>(items: &[S]) -> Val {
        Val::List(items.iter().map(|s| Val::str(s.as_ref())).collect())
    }

    /// An inline table of string values.
    pub(super) fn str_table(pairs: &[(String, String)]) -> Val {
        Val::Table(
            pairs
                .iter()
                .map(|(k, v)| (k.clone(), Val::str(v.as_str())))
                .collect(),
        )
    }
}

/// Sets `key` in `keys`, replacing an earlier value of it in place.
pub(super) fn set(keys: &mut Keys, key: &str, value: Val) {
    match keys.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => keys.push((key.to_string(), value)),
    }
}

/// The value of `key` in `keys`.
pub(super) fn get<'k>(keys: &'k Keys, key: &str) -> Option<&'k Val> {
    keys.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A `[[listen]]` table.
#[derive(Debug, Clone)]
pub(super) struct Listen {
    /// `0.0.0.0:80`, `[::]:443`.
    pub(super) address: String,
    /// Clients speak TLS here.
    pub(super) tls: bool,
    /// Every request here is answered with a redirect to https.
    pub(super) redirect_https: bool,
    /// The accept queue, when nginx's `backlog=` set it.
    pub(super) backlog: Option<i64>,
    /// Connections start with a PROXY protocol header.
    pub(super) proxy_protocol: bool,
    /// `ipv6only=off`.
    pub(super) dual_stack: bool,
}

/// One `[upstreams.NAME]` table.
#[derive(Debug, Clone)]
pub(super) struct GroupOut {
    /// The group's name.
    pub(super) name: String,
    /// Its keys, `servers` first.
    pub(super) keys: Keys,
}

/// One `[[sites]]` table and its `[[sites.routes]]`.
#[derive(Debug, Clone, Default)]
pub(super) struct SiteOut {
    /// The site's keys.
    pub(super) keys: Keys,
    /// Each route.
    pub(super) routes: Vec<RouteOut>,
}

/// One `[[sites.routes]]` table and the routes nested in it (`[[sites.routes.routes]]`).
#[derive(Debug, Clone, Default)]
pub(super) struct RouteOut {
    /// The route's keys.
    pub(super) keys: Keys,
    /// Its nested routes.
    pub(super) routes: Vec<RouteOut>,
}

impl RouteOut {
    /// A route with no nested routes.
    pub(super) fn of(keys: Keys) -> RouteOut {
        RouteOut {
            keys,
            routes: Vec::new(),
        }
    }

    /// Its table and its nested routes' tables, under `table` (`sites.routes`).
    fn render(&self, out: &mut String, table: &str) {
        out.push_str(&format!("\n[[{table}]]\n"));
        write_keys(out, &self.keys);
        let inner = format!("{table}.routes");
        for r in &self.routes {
            r.render(out, &inner);
        }
    }
}

/// The whole translated config.
#[derive(Debug, Default)]
pub(super) struct Output {
    /// Keys before any table (`access_log`, `error_log`, `resolver`).
    pub(super) top: Keys,
    /// Sections such as `limits`, `tls`, `files`, by name, in order.
    pub(super) sections: Vec<(String, Keys)>,
    /// The listeners.
    pub(super) listens: Vec<Listen>,
    /// The upstream groups.
    pub(super) groups: Vec<GroupOut>,
    /// The `[maps.NAME]` tables, by name.
    pub(super) maps: Vec<(String, Keys)>,
    /// The `[rate_zones.NAME]` and `[conn_zones.NAME]` tables, by section name.
    pub(super) zones: Vec<(String, Keys)>,
    /// The sites.
    pub(super) sites: Vec<SiteOut>,
}

impl Output {
    /// The keys of section `name`, made when first asked for.
    pub(super) fn section(&mut self, name: &str) -> &mut Keys {
        let at = match self.sections.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.sections.push((name.to_string(), Keys::new()));
                self.sections.len() - 1
            }
        };
        &mut self.sections[at].1
    }

    /// The config as TOML text, after a comment naming `source`.
    pub(super) fn render(&self, source: &str) -> String {
        let mut out = format!("# Translated from {source} by `slipstream import`.\n");
        write_keys(&mut out, &self.top);
        for (name, keys) in &self.sections {
            if !keys.is_empty() {
                out.push_str(&format!("\n[{}]\n", key(name)));
                write_keys(&mut out, keys);
            }
        }
        for l in &self.listens {
            out.push_str("\n[[listen]]\n");
            let mut keys = vec![("address".to_string(), Val::str(l.address.as_str()))];
            if l.tls {
                keys.push(("tls".into(), Val::Bool(true)));
            }
            if l.redirect_https {
                keys.push(("redirect_https".into(), Val::Bool(true)));
            }
            if let Some(b) = l.backlog {
                keys.push(("backlog".into(), Val::Int(b)));
            }
            if l.proxy_protocol {
                keys.push(("proxy_protocol".into(), Val::Bool(true)));
            }
            if l.dual_stack {
                keys.push(("ipv6only".into(), Val::Bool(false)));
            }
            write_keys(&mut out, &keys);
        }
        for (name, keys) in &self.maps {
            out.push_str(&format!("\n[maps.{}]\n", key(name)));
            write_keys(&mut out, keys);
        }
        for (section, keys) in &self.zones {
            out.push_str(&format!("\n[{section}]\n"));
            write_keys(&mut out, keys);
        }
        for g in &self.groups {
            out.push_str(&format!("\n[upstreams.{}]\n", key(&g.name)));
            write_keys(&mut out, &g.keys);
        }
        for s in &self.sites {
            out.push_str("\n[[sites]]\n");
            write_keys(&mut out, &s.keys);
            for r in &s.routes {
                r.render(&mut out, "sites.routes");
            }
        }
        out
    }
}

/// `key = value` lines.
fn write_keys(out: &mut String, keys: &Keys) {
    for (k, v) in keys {
        out.push_str(&key(k));
        out.push_str(" = ");
        write_value(out, v, true);
        out.push('\n');
    }
}

/// A key, bare when TOML allows it, else quoted.
pub(super) fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        k.to_string()
    } else {
        toml::Value::String(k.to_string()).to_string()
    }
}

/// A value; an array of tables at the top of a key is written one table a line.
fn write_value(out: &mut String, v: &Val, top: bool) {
    match v {
        Val::Str(s) if s.chars().any(char::is_control) => write_escaped(out, s),
        Val::Str(s) => out.push_str(&toml::Value::String(s.clone()).to_string()),
        Val::Int(n) => out.push_str(&n.to_string()),
        Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Val::List(items) if top && items.iter().any(|i| matches!(i, Val::Table(_))) => {
            out.push_str("[\n");
            for item in items {
                out.push_str("  ");
                write_value(out, item, false);
                out.push_str(",\n");
            }
            out.push(']');
        }
        Val::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item, false);
            }
            out.push(']');
        }
        Val::Table(keys) if keys.is_empty() => out.push_str("{}"),
        Val::Table(keys) => {
            out.push_str("{ ");
            for (i, (k, item)) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&key(k));
                out.push_str(" = ");
                write_value(out, item, false);
            }
            out.push_str(" }");
        }
    }
}

/// A basic string on one line, control characters escaped (`toml` would write a multi-line
/// string for a newline).
fn write_escaped(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_text_reads_back_as_the_same_values() {
        let mut o = Output::default();
        o.top
            .push(("access_log".into(), Val::str("/var/log/a \"b\".log")));
        set(o.section("limits"), "keepalive_timeout", Val::str("65s"));
        o.listens.push(Listen {
            address: "0.0.0.0:443".into(),
            tls: true,
            redirect_https: false,
            backlog: Some(511),
            proxy_protocol: false,
            dual_stack: false,
        });
        o.groups.push(GroupOut {
            name: "127.0.0.1:8080".into(),
            keys: vec![("servers".into(), Val::strs(&["127.0.0.1:8080"]))],
        });
        let rule = Val::Table(vec![
            ("if".into(), Val::str("$http_x ~* \"^a\\.b$\"")),
            ("return".into(), Val::Int(301)),
            ("to".into(), Val::str("https://$host$request_uri")),
        ]);
        let body = Val::Table(vec![("body".into(), Val::str("ok\n\"q\"\\\u{1}"))]);
        o.sites.push(SiteOut {
            keys: vec![
                ("hosts".into(), Val::strs(&["example.com"])),
                ("rules".into(), Val::List(vec![rule, body])),
                ("add_headers".into(), Val::Table(Keys::new())),
            ],
            routes: vec![RouteOut {
                keys: vec![("location".into(), Val::str("/app/"))],
                routes: vec![RouteOut::of(vec![(
                    "location".into(),
                    Val::str("~* \\.php$"),
                )])],
            }],
        });
        let text = o.render("nginx.conf");
        let t: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(t["access_log"].as_str(), Some("/var/log/a \"b\".log"));
        assert_eq!(t["limits"]["keepalive_timeout"].as_str(), Some("65s"));
        assert_eq!(t["listen"][0]["backlog"].as_integer(), Some(511));
        assert!(t["upstreams"]["127.0.0.1:8080"]["servers"].is_array());
        let site = &t["sites"][0];
        assert_eq!(
            site["rules"][0]["if"].as_str(),
            Some("$http_x ~* \"^a\\.b$\"")
        );
        assert_eq!(site["rules"][0]["return"].as_integer(), Some(301));
        assert_eq!(site["rules"][1]["body"].as_str(), Some("ok\n\"q\"\\\u{1}"));
        assert!(!text.contains("\"\"\""), "{text}");
        assert_eq!(site["routes"][0]["location"].as_str(), Some("/app/"));
        let nested = &site["routes"][0]["routes"][0];
        assert_eq!(nested["location"].as_str(), Some("~* \\.php$"));
        assert!(site["add_headers"].as_table().unwrap().is_empty());
    }
}
