//! nginx's rewrite module as slipstream rules: `return`, `rewrite`, and `if` blocks that hold
//! only those (one rule per directive, each with the block's condition); the rule a
//! `proxy_pass` with a URI part stands for.

use super::emit::{Keys, Val};
use super::values::regex_escape;
use super::{Directive, Translator};

/// The redirect codes that take a URL.
const REDIRECTS: &[i64] = &[301, 302, 303, 307, 308];

/// Which kind of `location` a route comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Modifier {
    /// `location /x`.
    Prefix,
    /// `location = /x`.
    Exact,
    /// `location ^~ /x`.
    PrefixNoRegex,
    /// `location ~ re`.
    Regex,
    /// `location ~* re`.
    RegexCaseless,
    /// `location @name`.
    Named,
}

impl Translator {
    /// The rules of a rewrite-module directive; None when `d` is not one (`set` and `break`
    /// fall to the generic notes).
    pub(super) fn rules(&mut self, d: &Directive) -> Option<Vec<Val>> {
        let rule = match d.name.as_str() {
            "return" => return_rule(&d.args),
            "rewrite" => rewrite_rule(&d.args),
            "if" => return Some(self.if_block(d)),
            _ => return None,
        };
        let rule = rule.and_then(|keys| self.known_variables(keys, None));
        match rule {
            Ok(keys) => Some(vec![Val::Table(keys)]),
            Err(reason) => {
                self.not_translated(d, reason);
                Some(Vec::new())
            }
        }
    }

    /// An `if` block: its return and rewrite directives, each with the condition.
    fn if_block(&mut self, d: &Directive) -> Vec<Val> {
        let condition = match condition(&d.args) {
            Ok(c) => c,
            Err(reason) => {
                self.not_translated(d, reason);
                return Vec::new();
            }
        };
        let block = d.block.as_deref().unwrap_or_default();
        if let Some(other) = block
            .iter()
            .find(|i| i.name != "return" && i.name != "rewrite")
        {
            let reason = format!("if with {} inside is not supported yet", other.name);
            self.not_translated(d, reason);
            return Vec::new();
        }
        let mut rules = Vec::new();
        for inner in block {
            let rule = match inner.name.as_str() {
                "return" => return_rule(&inner.args),
                _ => rewrite_rule(&inner.args),
            };
            match rule.and_then(|keys| self.known_variables(keys, Some(&condition))) {
                Ok(keys) => {
                    let mut with_if = vec![("if".to_string(), Val::str(condition.as_str()))];
                    with_if.extend(keys);
                    rules.push(Val::Table(with_if));
                }
                Err(reason) => self.not_translated(inner, reason),
            }
        }
        rules
    }
}

impl Translator {
    /// `keys` when every variable its texts (and its condition's) use is one slipstream
    /// has: nginx's common ones, `$arg_`, `$http_`, `$cookie_`, captures and named groups
    /// of the location, the rewrite and the condition.
    fn known_variables(&self, keys: Keys, condition: Option<&str>) -> Result<Keys, String> {
        let mut groups = self.location_groups.clone();
        groups.extend(self.server_groups.iter().cloned());
        // A map's variable reads as known here the way a named group does.
        groups.extend(self.out.maps.iter().map(|(n, _)| n.clone()));
        let text = |k: &str| {
            keys.iter()
                .find(|(key, _)| key == k)
                .and_then(|(_, v)| match v {
                    Val::Str(s) => Some(s.as_str()),
                    _ => None,
                })
        };
        groups.extend(text("rewrite").map(group_names).unwrap_or_default());
        let mut texts: Vec<&str> = ["to", "body"].iter().filter_map(|k| text(k)).collect();
        if let Some(c) = condition {
            let mut words = c.splitn(3, ' ');
            let (subject, op, value) = (words.next(), words.next(), words.next());
            texts.extend(subject);
            match op {
                Some("=" | "!=") => texts.extend(value),
                _ => groups.extend(value.map(group_names).unwrap_or_default()),
            }
        }
        for t in texts {
            if let Some(name) = unknown_variable(t, &groups) {
                return Err(format!("${name} is not supported yet"));
            }
        }
        Ok(keys)
    }
}

/// The first variable in `text` slipstream's rules do not have (read by the rules' own
/// template parser, so the two never disagree).
fn unknown_variable(text: &str, groups: &[String]) -> Option<String> {
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let error = crate::rules::template::Template::parse(text, &groups).err()?;
    error.strip_prefix("unknown variable $").map(str::to_string)
}

/// The named groups of a regex (as the rules' regex engine reads them; none when it refuses
/// the regex, which the config check then reports).
pub(super) fn group_names(regex: &str) -> Vec<String> {
    crate::rules::pattern::Pattern::new(regex, false)
        .map(|p| p.group_names().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `return CODE [TEXT|URL]` or `return URL`.
fn return_rule(args: &[String]) -> Result<Keys, String> {
    let code = |c: i64| ("return".to_string(), Val::Int(c));
    match args {
        [url] if is_url(url) => Ok(vec![code(302), ("to".into(), Val::str(url.as_str()))]),
        [c] => Ok(vec![code(parse_code(c)?)]),
        [c, text] => {
            let c = parse_code(c)?;
            let key = if REDIRECTS.contains(&c) { "to" } else { "body" };
            Ok(vec![code(c), (key.into(), Val::str(text.as_str()))])
        }
        _ => Err("return takes a code and a text or URL".into()),
    }
}

/// A `return` code slipstream answers with: 200-599, or 444 (close).
fn parse_code(c: &str) -> Result<i64, String> {
    match c.parse::<i64>() {
        Ok(n) if (200..600).contains(&n) || n == 444 => Ok(n),
        Ok(_) => Err(format!("return {c}: slipstream answers 200-599 or 444")),
        _ => Err(format!("invalid return code {c:?}")),
    }
}

/// Whether a `return`'s lone word is a URL (nginx: `http://`, `https://` or `$scheme`).
fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://") || s.starts_with("$scheme")
}

/// `rewrite REGEX REPLACEMENT [FLAG]`.
fn rewrite_rule(args: &[String]) -> Result<Keys, String> {
    let (regex, to, flag) = match args {
        [regex, to] => (regex, to, None),
        [regex, to, flag] => (regex, to, Some(flag)),
        _ => return Err("rewrite takes a regex, a replacement and a flag".into()),
    };
    let mut keys = vec![
        ("rewrite".to_string(), Val::str(regex.as_str())),
        ("to".to_string(), Val::str(to.as_str())),
    ];
    if let Some(flag) = flag {
        if !["last", "break", "redirect", "permanent"].contains(&flag.as_str()) {
            return Err(format!("unknown flag {flag:?}"));
        }
        keys.push(("flag".into(), Val::str(flag.as_str())));
    }
    Ok(keys)
}

/// An `if`'s condition without its parentheses, as nginx reads it: the first word starts
/// with `(`, the last ends with `)` (either may be a word of its own).
pub(super) fn condition(args: &[String]) -> Result<String, String> {
    let mut words: Vec<&str> = args.iter().map(String::as_str).collect();
    let invalid = || "invalid condition".to_string();
    let first = words.first_mut().ok_or_else(invalid)?;
    *first = first.strip_prefix('(').ok_or_else(invalid)?;
    let last = words.last_mut().ok_or_else(invalid)?;
    *last = last.strip_suffix(')').ok_or_else(invalid)?;
    if words.first() == Some(&"") {
        words.remove(0);
    }
    if words.last() == Some(&"") && words.len() > 1 {
        words.pop();
    }
    match words.as_slice() {
        [var] if var.starts_with('$') => Ok(var.to_string()),
        [var, op, value] if var.starts_with('$') => {
            // An empty value is written quoted (slipstream unquotes values).
            let value = if value.is_empty() { "\"\"" } else { value };
            if ["=", "!=", "~", "~*", "!~", "!~*"].contains(op) {
                Ok(format!("{var} {op} {value}"))
            } else {
                Err(format!("unknown operator {op:?}"))
            }
        }
        [test, _] if ["-f", "-d", "-e", "-x", "!-f", "!-d", "!-e", "!-x"].contains(test) => {
            Err("file tests are not supported".into())
        }
        _ => Err(invalid()),
    }
}

/// The rule that stands for a `proxy_pass` URI part: the location's prefix replaced by
/// `uri`, the rest kept. None when it changes nothing; Err for locations that have no prefix.
pub(super) fn uri_rule(modifier: Modifier, prefix: &str, uri: &str) -> Result<Option<Val>, String> {
    let (regex, to) = match modifier {
        Modifier::Prefix | Modifier::PrefixNoRegex if uri == prefix => return Ok(None),
        Modifier::Prefix | Modifier::PrefixNoRegex => (
            format!("^{}(.*)$", regex_escape(prefix)),
            format!("{uri}$1"),
        ),
        Modifier::Exact => (format!("^{}$", regex_escape(prefix)), uri.to_string()),
        _ => return Err("a URI part in a regex or named location".into()),
    };
    Ok(Some(Val::Table(vec![
        ("rewrite".into(), Val::Str(regex)),
        ("to".into(), Val::Str(to)),
        ("flag".into(), Val::str("break")),
    ])))
}

/// Whether `rules` answer every request (a `return` without a condition).
pub(super) fn always_answers(rules: &[Val]) -> bool {
    rules.iter().any(|r| match r {
        Val::Table(keys) => keys.first().is_some_and(|(k, _)| k == "return"),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn conditions_lose_their_parentheses_as_nginx_reads_them() {
        assert_eq!(
            condition(&words("($host = a.example )")).unwrap(),
            "$host = a.example"
        );
        assert_eq!(condition(&words("( $a )")).unwrap(), "$a");
        assert_eq!(condition(&words("($a)")).unwrap(), "$a");
        assert_eq!(
            condition(&words("($uri ~ ^/(a|b))")).unwrap(),
            "$uri ~ ^/(a|b)"
        );
        assert!(condition(&words("(!-f $request_filename)"))
            .unwrap_err()
            .contains("file tests"));
        assert!(condition(&words("$a")).is_err());
        assert!(condition(&words("($a <> b)")).is_err());
    }

    #[test]
    fn conditions_read_by_nginx_s_tokenizer_lose_their_parentheses() {
        let text = b"if ($host = \"a.example\") {}\nif ( $a ) {}\nif ($uri ~* \"^/(a|b)$\"){}\n\
                     if ($http_x = \"\") {}\nif ($arg_q ~ ^(x|y)) {}\n";
        let conditions: Vec<String> = crate::import::parse(text, 0)
            .unwrap()
            .iter()
            .map(|d| condition(&d.args).unwrap())
            .collect();
        assert_eq!(
            conditions,
            [
                "$host = a.example",
                "$a",
                "$uri ~* ^/(a|b)$",
                "$http_x = \"\"",
                "$arg_q ~ ^(x|y)"
            ]
        );
    }

    #[test]
    fn returns_and_rewrites_become_rules() {
        let r = return_rule(&words("https://$host$request_uri")).unwrap();
        assert_eq!(r[0].1, Val::Int(302));
        let r = return_rule(&["200".into(), "ok".into()]).unwrap();
        assert_eq!(r[1], ("body".into(), Val::str("ok")));
        let r = return_rule(&words("301 /x")).unwrap();
        assert_eq!(r[1], ("to".into(), Val::str("/x")));
        assert!(rewrite_rule(&words("^/a /b stop")).is_err());
        let rule = uri_rule(Modifier::Prefix, "/p.x/", "/y/").unwrap().unwrap();
        let Val::Table(keys) = rule else { panic!() };
        assert_eq!(keys[0].1, Val::str("^/p\\.x/(.*)$"));
        assert_eq!(keys[1].1, Val::str("/y/$1"));
        assert_eq!(uri_rule(Modifier::Prefix, "/p/", "/p/").unwrap(), None);
        assert!(uri_rule(Modifier::Regex, "\\.php$", "/y").is_err());
    }

    #[test]
    fn variables_slipstream_lacks_are_found() {
        assert_eq!(unknown_variable("https://$host$request_uri", &[]), None);
        assert_eq!(unknown_variable("/$1/${arg_x}$http_x_y", &[]), None);
        assert_eq!(
            unknown_variable("$request_id", &[]).as_deref(),
            Some("request_id")
        );
        let groups = group_names("^/(?<a>x)/(?P<b>y)(?'c'z)(?:n)");
        assert_eq!(groups, ["a", "b", "c"]);
        assert_eq!(unknown_variable("$a$b$c", &groups), None);
    }
}
