//! nginx's forward auth as slipstream's `auth_request`: `auth_request /auth;` names a location
//! of the server, whose `proxy_pass` gives the group and the path asked (its URI part
//! replacing the location's name, as nginx's proxy_pass does); `auth_request_set $v
//! $upstream_http_NAME;` with `proxy_set_header FIELD $v;` becomes a `copy` (or `copy_as`
//! when the names differ). The auth location's own idiom (`proxy_pass_request_body off`,
//! `proxy_set_header Content-Length ""`) is what slipstream's question is anyway.

use super::emit::Val;
use super::settings::{Own, Scope};
use super::{Directive, Translator};
use crate::routing::location::{Locations, Match};

/// What `auth_request` says at a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AuthTarget {
    /// `auth_request off`.
    Off,
    /// Ask `path` of `group`.
    Ask { group: String, path: String },
    /// Could not be translated (noted).
    Failed,
}

impl Translator {
    /// The forward-auth directives; true when `d` is one of them.
    pub(super) fn auth(&mut self, d: &Directive, scope: &mut Scope, own: &mut Own) -> bool {
        match (d.name.as_str(), d.args.as_slice()) {
            ("auth_request", [uri]) => scope.auth_request = Some(self.auth_target(d, uri, scope)),
            ("auth_request_set", [var, value]) => {
                let sets = own.auth_sets.get_or_insert_with(Vec::new);
                match (var.strip_prefix('$'), value.strip_prefix("$upstream_http_")) {
                    (Some(var), Some(field)) if !field.is_empty() => {
                        sets.retain(|(v, _)| v != var);
                        sets.push((var.to_string(), field.replace('_', "-")));
                    }
                    _ => self.not_translated(d, "only $upstream_http_* values are copied"),
                }
            }
            ("proxy_set_header", [name, empty])
                if name.eq_ignore_ascii_case("content-length") && empty.is_empty() =>
            {
                self.ignore(d, "slipstream asks an auth service without the body");
            }
            ("proxy_set_header", [name, value]) => {
                let sets = own.auth_sets.as_ref().or(scope.auth_sets.as_ref());
                let set = sets.and_then(|sets| {
                    let var = value.strip_prefix('$')?;
                    sets.iter().find(|(v, _)| v == var).map(|(_, f)| f.clone())
                });
                let Some(from) = set else {
                    return false;
                };
                // A copy belongs to the level's proxy_set_header list (all-or-nothing).
                own.request_fields.get_or_insert_with(Vec::new);
                let copies = own.auth_copies.get_or_insert_with(Vec::new);
                copies.retain(|(to, _)| !to.eq_ignore_ascii_case(name));
                copies.push((name.clone(), from));
            }
            ("proxy_pass_request_body", [off]) if off == "off" => {
                self.ignore(d, "slipstream asks an auth service without the body");
            }
            _ => return false,
        }
        true
    }

    /// The group and path `auth_request URI` asks: the server's location for the URI, which
    /// must pass to a group.
    fn auth_target(&mut self, d: &Directive, uri: &str, scope: &Scope) -> AuthTarget {
        if uri == "off" {
            return AuthTarget::Off;
        }
        let path = uri.split('?').next().unwrap_or(uri);
        if uri.contains('$') || !uri.starts_with('/') {
            self.not_translated(d, "only a fixed URI");
            return AuthTarget::Failed;
        }
        let mut locations = Locations::default();
        let mut written = Vec::new();
        for l in &self.server_locations {
            if let Ok(m) = Match::parse(&l.args.join(" ")) {
                locations.push(m.clone(), false);
                written.push((l.clone(), m));
            }
        }
        locations.finish();
        let Some(i) = locations.choose(path).index else {
            self.not_translated(d, "no location of the server takes the URI");
            return AuthTarget::Failed;
        };
        let (location, matched) = &written[i];
        let block = location.block.as_deref().unwrap_or_default();
        let Some(pass) = block.iter().find(|x| x.name == "proxy_pass") else {
            self.not_translated(d, "its location does not proxy_pass to the service");
            return AuthTarget::Failed;
        };
        let Some(target) = self.proxy_target(pass, scope) else {
            return AuthTarget::Failed;
        };
        let asked = match (&target.uri, matched) {
            (None, _) => uri.to_string(),
            (Some(u), Match::Exact(_)) => u.clone(),
            (Some(u), Match::Prefix(p) | Match::PrefixStop(p)) => format!("{u}{}", &uri[p.len()..]),
            (Some(_), _) => {
                self.not_translated(d, "a URI part in a regex location's proxy_pass");
                return AuthTarget::Failed;
            }
        };
        AuthTarget::Ask {
            group: target.group,
            path: asked,
        }
    }
}

/// The fields a level's `proxy_set_header`s set from the auth service's answer when no
/// service is asked there (none, or `auth_request off`): nginx then sets them empty, which
/// hides the client's own, so they are removed (`proxy_set_headers = { X-User = "" }`).
pub(super) fn unasked_copies(scope: &Scope) -> Vec<(String, String)> {
    if matches!(scope.auth_request, Some(AuthTarget::Ask { .. })) {
        return Vec::new();
    }
    let copies = scope.auth_copies.as_deref().unwrap_or_default();
    copies
        .iter()
        .map(|(to, _)| (to.clone(), String::new()))
        .collect()
}

/// The `auth_request` key a level's scope stands for: a table, `false` for `off`, or nothing
/// (also when it could not be translated: the level then keeps what it inherits rather than
/// turning the service off).
pub(super) fn auth_request(scope: &Scope) -> Option<Val> {
    match scope.auth_request.as_ref()? {
        AuthTarget::Off => Some(Val::Bool(false)),
        AuthTarget::Failed => None,
        AuthTarget::Ask { group, path } => {
            let mut keys = vec![
                ("upstream".to_string(), Val::str(group.as_str())),
                ("path".to_string(), Val::str(path.as_str())),
            ];
            let copies = scope.auth_copies.as_deref().unwrap_or_default();
            let (same, renamed): (Vec<_>, Vec<_>) = copies
                .iter()
                .partition(|(to, from)| to.eq_ignore_ascii_case(from));
            if !same.is_empty() {
                let names: Vec<&str> = same.iter().map(|(to, _)| to.as_str()).collect();
                keys.push(("copy".into(), Val::strs(&names)));
            }
            if !renamed.is_empty() {
                let pairs: Vec<(String, String)> = renamed.into_iter().cloned().collect();
                keys.push(("copy_as".into(), Val::str_table(&pairs)));
            }
            Some(Val::Table(keys))
        }
    }
}
