//! Upstream groups: nginx's `upstream` blocks (servers and their options, balancing,
//! keep-alive), and the groups that `proxy_pass`, `fastcgi_pass` and `grpc_pass` to an
//! address stand for, one per address (and document root, for FastCGI), shared by every
//! location that names it.

use super::emit::{get, set, GroupOut, Keys, Val};
use super::settings::{Family, Scope};
use super::values::duration;
use super::{Directive, Translator};

/// One group being translated.
#[derive(Debug, Clone)]
pub(super) struct Group {
    /// Its name: the `upstream` block's, or the address it was made for.
    pub(super) name: String,
    /// From an `upstream` block (else made for an address).
    pub(super) declared: bool,
    /// Its server lines.
    pub(super) servers: Vec<String>,
    /// The keys after `servers`, in the order set.
    pub(super) keys: Keys,
    /// How locations reach it, once one does.
    pub(super) family: Option<Family>,
}

/// A `proxy_pass` target: the group, and the URI part when it has one.
pub(super) struct ProxyTarget {
    /// The group's name.
    pub(super) group: String,
    /// `/y/` of `http://u/y/`.
    pub(super) uri: Option<String>,
}

impl Translator {
    /// Every `upstream` block at the top and in `http`, before any location names one.
    pub(super) fn declare_upstreams(&mut self, directives: &[Directive]) {
        for d in directives {
            match (d.name.as_str(), &d.block) {
                ("http", Some(block)) => self.declare_upstreams(block),
                ("upstream", Some(block)) => match d.args.as_slice() {
                    [name] if self.groups.iter().any(|g| g.declared && g.name == *name) => {
                        self.not_translated(d, format!("duplicate upstream {name:?}"));
                    }
                    [name] => self.upstream_block(d, name, block),
                    _ => self.not_translated(d, "upstream takes one name"),
                },
                _ => {}
            }
        }
    }

    /// `upstream NAME { ... }`.
    fn upstream_block(&mut self, upstream: &Directive, name: &str, block: &[Directive]) {
        let mut g = Group {
            name: name.to_string(),
            declared: true,
            servers: Vec::new(),
            keys: Keys::new(),
            family: None,
        };
        // Per-server options slipstream has per group: kept when every server agrees.
        let mut shared: Vec<(&'static str, Vec<Option<Val>>, &Directive)> = Vec::new();
        for d in block {
            match (d.name.as_str(), d.args.as_slice()) {
                ("server", [address, options @ ..]) => {
                    if let Some(line) = self.server_line(d, address, options, &mut shared) {
                        g.servers.push(line);
                    }
                }
                ("least_conn", []) => set(&mut g.keys, "balance", Val::str("least_conn")),
                ("ip_hash", []) => {
                    set(&mut g.keys, "balance", Val::str("hash"));
                    set(&mut g.keys, "hash_key", Val::str("client_ip"));
                }
                ("hash", [key, rest @ ..]) if rest.is_empty() || rest == ["consistent"] => {
                    match hash_key(key) {
                        Some(k) => {
                            set(&mut g.keys, "balance", Val::str("hash"));
                            set(&mut g.keys, "hash_key", Val::Str(k));
                        }
                        None => self.not_translated(
                            d,
                            "slipstream hashes the client address, the URI, a header or a cookie",
                        ),
                    }
                }
                ("random", [two, ..]) if two == "two" => {
                    set(&mut g.keys, "balance", Val::str("p2c"));
                }
                ("keepalive", [n]) => match n.parse::<i64>() {
                    Ok(n) => set(&mut g.keys, "keepalive", Val::Int(n)),
                    Err(_) => self.not_translated(d, "not a number"),
                },
                ("keepalive_timeout", [t]) => match duration(t) {
                    Some(t) => set(&mut g.keys, "idle_timeout", Val::Str(t)),
                    None => self.not_translated(d, "not an nginx time"),
                },
                ("zone", _) => self.ignore(d, "slipstream's state needs no shared zone"),
                _ => self.other(d),
            }
        }
        for (key, values, d) in shared {
            match values.first() {
                Some(Some(v)) if values.iter().all(|x| x.as_ref() == Some(v)) => {
                    set(&mut g.keys, key, v.clone());
                }
                _ if values.iter().all(Option::is_none) => {}
                _ => self.not_translated(d, format!("{key} differs between servers")),
            }
        }
        if g.servers.is_empty() {
            self.not_translated(upstream, "no server slipstream can use");
        }
        self.groups.push(g);
    }

    /// One `server` line of an upstream block, with the options slipstream's lines take;
    /// per-group options go to `shared`.
    fn server_line<'d>(
        &mut self,
        d: &'d Directive,
        address: &str,
        options: &[String],
        shared: &mut Vec<(&'static str, Vec<Option<Val>>, &'d Directive)>,
    ) -> Option<String> {
        let mut line = with_port(address, 80);
        let mut group_values: Vec<(&'static str, Val)> = Vec::new();
        for o in options {
            let (name, value) = o.split_once('=').unwrap_or((o.as_str(), ""));
            match name {
                "weight" | "backup" => {
                    line.push(' ');
                    line.push_str(o);
                }
                "slow_start" => match duration(value) {
                    Some(t) => line.push_str(&format!(" slow_start={t}")),
                    None => self.not_translated(d, "slow_start is not an nginx time"),
                },
                "max_fails" => match value.parse::<i64>() {
                    Ok(n) => group_values.push(("max_fails", Val::Int(n))),
                    Err(_) => self.not_translated(d, "max_fails is not a number"),
                },
                "max_conns" => match value.parse::<i64>() {
                    Ok(n) => group_values.push(("max_conns", Val::Int(n))),
                    Err(_) => self.not_translated(d, "max_conns is not a number"),
                },
                "fail_timeout" => match duration(value) {
                    Some(t) => group_values.push(("fail_timeout", Val::Str(t))),
                    None => self.not_translated(d, "fail_timeout is not an nginx time"),
                },
                "down" => {
                    self.ignore(d, "a server marked down is left out");
                    return None;
                }
                "resolve" => self.ignore(d, "slipstream resolves names again itself"),
                _ => self.not_translated(d, format!("server option {name} is not supported yet")),
            }
        }
        for key in ["max_fails", "max_conns", "fail_timeout"] {
            let value = group_values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone());
            match shared.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, values, _)) => values.push(value),
                None => shared.push((key, vec![value], d)),
            }
        }
        Some(line)
    }

    /// The group `proxy_pass URL` names, made for its address when no block has the name.
    pub(super) fn proxy_target(&mut self, d: &Directive, scope: &Scope) -> Option<ProxyTarget> {
        let [url] = d.args.as_slice() else {
            self.not_translated(d, "proxy_pass takes one URL");
            return None;
        };
        if url.contains('$') {
            self.not_translated(d, "proxy_pass with variables is not supported yet");
            return None;
        }
        let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                self.not_translated(d, "proxy_pass needs http:// or https://");
                return None;
            }
        };
        let (authority, uri) = split_authority(rest);
        let group = match self.declared(authority) {
            Some(i) => {
                if tls {
                    set(&mut self.groups[i].keys, "tls", Val::Bool(true));
                }
                i
            }
            None => {
                let server = with_port(authority, if tls { 443 } else { 80 });
                let mut keys = Keys::new();
                if tls {
                    keys.push(("tls".into(), Val::Bool(true)));
                }
                self.generated(&server, vec![server.clone()], keys)
            }
        };
        self.use_group(group, Family::Proxy, scope, d)?;
        Some(ProxyTarget {
            group: self.groups[group].name.clone(),
            uri: uri.map(String::from),
        })
    }

    /// The FastCGI group `fastcgi_pass ADDRESS` names, with the location's document root.
    pub(super) fn fastcgi_target(&mut self, d: &Directive, scope: &Scope) -> Option<String> {
        let [address] = d.args.as_slice() else {
            self.not_translated(d, "fastcgi_pass takes one address");
            return None;
        };
        if address.contains('$') {
            self.not_translated(d, "fastcgi_pass with variables is not supported yet");
            return None;
        }
        let Some(root) = scope.root.clone() else {
            self.not_translated(d, "no root for the scripts");
            return None;
        };
        let mut keys = vec![
            ("protocol".to_string(), Val::str("fastcgi")),
            ("root".to_string(), Val::Str(root)),
        ];
        if let Some(index) = scope.fastcgi_index.as_deref().filter(|i| *i != "index.php") {
            keys.push(("index".into(), Val::str(index)));
        }
        let group = match self.declared(address) {
            Some(i) => {
                for (k, v) in keys {
                    match get(&self.groups[i].keys, &k) {
                        Some(old) if *old != v => {
                            self.not_translated(d, format!("the group already has another {k}"));
                            return None;
                        }
                        _ => set(&mut self.groups[i].keys, &k, v),
                    }
                }
                i
            }
            None => {
                let server = with_port(address, 9000);
                self.generated(&server, vec![server.clone()], keys)
            }
        };
        self.use_group(group, Family::FastCgi, scope, d)?;
        Some(self.groups[group].name.clone())
    }

    /// The HTTP/2 group `grpc_pass grpc://ADDRESS` (`grpcs://` over TLS) names.
    pub(super) fn grpc_target(&mut self, d: &Directive, scope: &Scope) -> Option<String> {
        let url = d.args.first().map(String::as_str).unwrap_or_default();
        let (protocol, authority) =
            match (url.strip_prefix("grpc://"), url.strip_prefix("grpcs://")) {
                (Some(a), _) => ("h2c", a),
                (_, Some(a)) => ("h2", a),
                _ => ("h2c", url),
            };
        if d.args.len() != 1 || authority.contains('$') || authority.contains('/') {
            self.not_translated(d, "grpc_pass takes one address without variables");
            return None;
        }
        let keys = vec![("protocol".to_string(), Val::str(protocol))];
        let group = match self.declared(authority) {
            Some(i) => {
                set(&mut self.groups[i].keys, "protocol", Val::str(protocol));
                i
            }
            None => {
                let port = if protocol == "h2" { 443 } else { 80 };
                let server = with_port(authority, port);
                self.generated(&server, vec![server.clone()], keys)
            }
        };
        self.use_group(group, Family::Grpc, scope, d)?;
        Some(self.groups[group].name.clone())
    }

    /// The index of the `upstream` block named `name`.
    fn declared(&self, name: &str) -> Option<usize> {
        self.groups
            .iter()
            .position(|g| g.declared && g.name == name)
    }

    /// A group made for an address: an earlier one with the same servers and keys, else a new
    /// one named after the address (`#2` and so on when the name is taken).
    fn generated(&mut self, name: &str, servers: Vec<String>, keys: Keys) -> usize {
        let same = |g: &Group| {
            !g.declared
                && g.servers == servers
                && keys.iter().all(|(k, v)| get(&g.keys, k) == Some(v))
                && ["protocol", "root", "tls", "index"]
                    .iter()
                    .all(|k| get(&g.keys, k).is_none() || keys.iter().any(|(key, _)| key == k))
        };
        if let Some(i) = self.groups.iter().position(same) {
            return i;
        }
        let mut unique = name.to_string();
        let mut n = 1;
        while self.groups.iter().any(|g| g.name == unique) {
            n += 1;
            unique = format!("{name}#{n}");
        }
        self.groups.push(Group {
            name: unique,
            declared: false,
            servers,
            keys,
            family: None,
        });
        self.groups.len() - 1
    }

    /// Marks group `i` as reached by `family` (one kind per group) and gives it the scope's
    /// timeouts and TLS settings for that kind; None when the group is already another kind.
    fn use_group(&mut self, i: usize, family: Family, scope: &Scope, d: &Directive) -> Option<()> {
        match self.groups[i].family {
            Some(f) if f != family => {
                self.not_translated(d, "the group is already reached another way");
                return None;
            }
            _ => self.groups[i].family = Some(family),
        }
        // The upstream TLS settings apply to groups that speak TLS.
        let tls = get(&self.groups[i].keys, "tls") == Some(&Val::Bool(true))
            || get(&self.groups[i].keys, "protocol") == Some(&Val::str("h2"));
        let applies = |s: &&super::settings::GroupSetting| {
            s.family == family && (tls || !s.key.starts_with("tls_"))
        };
        for s in scope.group.iter().filter(applies) {
            let keys = &mut self.groups[i].keys;
            match get(keys, s.key) {
                Some(v) if *v != s.value => {
                    let reason = format!(
                        "another location gives the group {:?} a different {}",
                        self.groups[i].name, s.key
                    );
                    let directive = s.directive.clone();
                    self.not_translated(&directive, reason);
                }
                Some(_) => {}
                None => set(keys, s.key, s.value.clone()),
            }
        }
        Some(())
    }

    /// Sets the front controller of FastCGI group `name`; false when it has another one.
    pub(super) fn set_front_controller(&mut self, name: &str, script: &str) -> bool {
        let Some(g) = self.groups.iter_mut().find(|g| g.name == name) else {
            return false;
        };
        match get(&g.keys, "front_controller") {
            Some(Val::Str(s)) => s == script,
            _ => {
                set(&mut g.keys, "front_controller", Val::str(script));
                true
            }
        }
    }

    /// The groups as written: `servers` first.
    pub(super) fn groups_out(&self) -> Vec<GroupOut> {
        self.groups
            .iter()
            .map(|g| {
                let mut keys = vec![("servers".to_string(), Val::strs(&g.servers))];
                keys.extend(g.keys.iter().cloned());
                GroupOut {
                    name: g.name.clone(),
                    keys,
                }
            })
            .collect()
    }
}

/// `host:port` from `host`, `host:port`, `[v6]`, `[v6]:port` or `unix:/path` (kept).
pub(super) fn with_port(address: &str, default: u16) -> String {
    if address.starts_with("unix:") {
        return address.to_string();
    }
    let has_port = match address.rfind(']') {
        Some(end) => address[end..].contains(':'),
        None => address.contains(':'),
    };
    if has_port {
        address.to_string()
    } else {
        format!("{address}:{default}")
    }
}

/// A proxy URL's authority and URI part: `u:8080/y/` gives `u:8080` and `/y/`;
/// `unix:/run/app.sock:/y/` gives `unix:/run/app.sock` and `/y/`.
fn split_authority(rest: &str) -> (&str, Option<&str>) {
    if let Some(path) = rest.strip_prefix("unix:") {
        return match path.find(':') {
            Some(i) => {
                let uri = &path[i + 1..];
                (&rest[..5 + i], (!uri.is_empty()).then_some(uri))
            }
            None => (rest, None),
        };
    }
    match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    }
}

/// slipstream's `hash_key` for an nginx `hash` key.
fn hash_key(key: &str) -> Option<String> {
    match key {
        "$remote_addr" | "$binary_remote_addr" => Some("client_ip".into()),
        "$request_uri" | "$uri" => Some("uri".into()),
        _ => {
            if let Some(h) = key.strip_prefix("$http_") {
                Some(format!("header:{}", h.replace('_', "-")))
            } else {
                key.strip_prefix("$cookie_").map(|c| format!("cookie:{c}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_their_default_port_and_lose_their_uri_part() {
        assert_eq!(with_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(with_port("10.0.0.1:8080", 80), "10.0.0.1:8080");
        assert_eq!(with_port("[::1]", 80), "[::1]:80");
        assert_eq!(with_port("[::1]:81", 80), "[::1]:81");
        assert_eq!(with_port("unix:/run/a.sock", 80), "unix:/run/a.sock");
        assert_eq!(split_authority("u/y/"), ("u", Some("/y/")));
        assert_eq!(split_authority("u:81"), ("u:81", None));
        assert_eq!(
            split_authority("unix:/run/a.sock:/y/"),
            ("unix:/run/a.sock", Some("/y/"))
        );
        assert_eq!(
            split_authority("unix:/run/a.sock"),
            ("unix:/run/a.sock", None)
        );
        assert_eq!(hash_key("$http_x_user").as_deref(), Some("header:x-user"));
        assert_eq!(hash_key("$cookie_sid").as_deref(), Some("cookie:sid"));
        assert_eq!(hash_key("$host"), None);
    }
}
