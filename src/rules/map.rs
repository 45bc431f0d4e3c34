//! nginx's `map`: a variable whose value is chosen by another text (`$http_user_agent`,
//! `$host`): exact keys first (compared in any case), then regex keys (`~re`, `~*re`) in
//! config order, then the default (empty when none is given). A regex key's groups are `$1`..
//! and its named groups in the value. A value may name variables, but not another map.

use std::collections::HashMap;

use super::pattern::Pattern;
use super::template::{Current, Facts, Template};

/// One map.
#[derive(Debug, Clone)]
pub struct Map {
    source: Template,
    exact: HashMap<String, Template>,
    regexes: Vec<(Pattern, Template)>,
    default: Template,
}

impl Map {
    /// A map from its source text, its `(key, value)` entries in order and its default.
    pub fn new(source: &str, entries: &[(String, String)], default: &str) -> Result<Map, String> {
        let source = Template::parse(source, &[])?;
        let mut exact = HashMap::new();
        let mut regexes = Vec::new();
        for (key, value) in entries {
            if let Some(re) = key.strip_prefix('~') {
                let (re, caseless) = match re.strip_prefix('*') {
                    Some(r) => (r, true),
                    None => (re, false),
                };
                let pattern = Pattern::new(re, caseless)?;
                let groups: Vec<&str> = pattern.group_names().collect();
                let value = Template::parse(value, &groups).map_err(|e| format!("{key:?}: {e}"))?;
                regexes.push((pattern, value));
            } else {
                let key = key.strip_prefix('\\').unwrap_or(key).to_ascii_lowercase();
                let value = Template::parse(value, &[]).map_err(|e| format!("{key:?}: {e}"))?;
                if exact.insert(key.clone(), value).is_some() {
                    return Err(format!("key {key:?} is listed twice"));
                }
            }
        }
        Ok(Map {
            source,
            exact,
            regexes,
            default: Template::parse(default, &[])?,
        })
    }

    /// Appends the map's value for this request.
    pub fn render(&self, facts: &Facts<'_>, current: &Current, out: &mut String) {
        let key = self.source.to_string(facts, current);
        if let Some(value) = self.exact.get(&key.to_ascii_lowercase()) {
            return value.render_with(facts, current, None, out);
        }
        for (pattern, value) in &self.regexes {
            if let Some(captures) = pattern.captures(&key) {
                return value.render_with(facts, current, Some(&captures), out);
            }
        }
        self.default.render_with(facts, current, None, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_regex_in_order_then_default() {
        let entries: Vec<(String, String)> = [
            ("Mozilla", "browser"),
            ("~*(?<kind>bot|crawler)", "robot:$kind"),
            ("~^curl/(\\d+)", "curl $1 on $host"),
            ("\\~tilde", "escaped"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let map = Map::new("$http_user_agent", &entries, "other").unwrap();
        let port = || 80;
        let value = |ua: &'static str| {
            let headers = [crate::message::Field {
                name: "User-Agent",
                value: ua.as_bytes(),
            }];
            let facts = Facts {
                method: "GET",
                request_uri: "/",
                host: "example.com",
                scheme: "http",
                server_name: "",
                server_port: &port,
                remote_addr: "127.0.0.1",
                headers: &headers,
                maps: &[],
                host_captures: None,
                tls_client: None,
            };
            let mut out = String::new();
            map.render(&facts, &Current::default(), &mut out);
            out
        };
        assert_eq!(value("mozilla"), "browser");
        assert_eq!(value("GoogleBOT/2"), "robot:BOT");
        assert_eq!(value("curl/8.1"), "curl 8 on example.com");
        assert_eq!(value("~tilde"), "escaped");
        assert_eq!(value("wget"), "other");
        assert!(Map::new(
            "$http_x",
            &[("a".into(), "1".into()), ("A".into(), "2".into())],
            ""
        )
        .is_err());
        assert!(Map::new("$http_x", &[("~(".into(), "1".into())], "").is_err());
        assert!(Map::new("$nosuch", &[], "").is_err());
    }
}
