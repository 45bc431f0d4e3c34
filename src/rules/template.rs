//! nginx's variables in rule texts (`https://$host$request_uri`, `/new/$1`): parsed once at
//! load into literal text and variable references, rendered per request from [`Facts`]. A
//! variable is only looked at when a rule that names it runs, so unused ones cost nothing.

use super::pattern::Captures;
use crate::message::Field;

/// One variable a text may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `$host`: the request's host, lower-cased, without its port.
    Host,
    /// `$uri`: the current path, decoded and normalised (changed by rewrites).
    Uri,
    /// `$request_uri`: the target as the client sent it.
    RequestUri,
    /// `$args` (and `$query_string`): the current query, without `?`.
    Args,
    /// `$is_args`: `?` when there is a query, else empty.
    IsArgs,
    /// `$arg_NAME`: one query parameter, raw.
    Arg(Box<str>),
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$server_name`: the site's first host name.
    ServerName,
    /// `$server_port`: the port the client connected to.
    ServerPort,
    /// `$remote_addr`: the client's address.
    RemoteAddr,
    /// `$request_method`.
    RequestMethod,
    /// `$http_NAME`: the first request field named NAME (`_` for `-`, any case).
    Http(Box<str>),
    /// `$cookie_NAME`: one cookie's value.
    Cookie(Box<str>),
    /// `$1` to `$9`: a group of the last regular expression that matched.
    Capture(usize),
    /// A named group of the last regular expression that matched.
    Named(Box<str>),
    /// `$NAME` of a `[maps.NAME]`: its value for this request, by index.
    Map(usize),
    /// `$ssl_client_verify`, `_s_dn`, `_i_dn`, `_serial`, `_fingerprint`, `_san`: the client
    /// certificate (mutual TLS).
    SslClient(SslClient),
}

/// Which part of the client certificate a `$ssl_client_*` variable reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslClient {
    /// `SUCCESS` or `NONE`.
    Verify,
    /// The subject (RFC 2253).
    Subject,
    /// The issuer (RFC 2253).
    Issuer,
    /// The serial number (hexadecimal).
    Serial,
    /// The SHA-1 fingerprint (hexadecimal).
    Fingerprint,
    /// The subject alternative names (`DNS:a,email:b`).
    San,
}

/// A text with variables, as compiled at load.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
}

/// How the groups of a regular expression are written into a text: as they are (a path
/// the proxy escapes when it sends it), escaped for a path (a redirect's Location), or
/// escaped for a query value (`&`, `=`, `+` too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Escape {
    /// As decoded.
    None,
    /// `?`, `#`, `%`, space, controls and non-ASCII escaped.
    Path,
    /// As `Path`, and `&`, `+` (nginx's set for arguments).
    Query,
}

/// What the variables of one request read.
pub struct Facts<'a> {
    /// The request method.
    pub method: &'a str,
    /// The target as received.
    pub request_uri: &'a str,
    /// The host, lower-cased, without its port (empty when none was sent).
    pub host: &'a str,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The site's first host name.
    pub server_name: &'a str,
    /// The port the client connected to, read only when a text names it.
    pub server_port: &'a dyn Fn() -> u16,
    /// The client's address as text.
    pub remote_addr: &'a str,
    /// The request's fields.
    pub headers: &'a [Field<'a>],
    /// The config's maps (`$NAME` of `[maps.NAME]`).
    pub maps: &'a [super::map::Map],
    /// The groups of the site's regex host name that matched the host (its named groups are
    /// variables unless the last regex has a group of the same name).
    pub host_captures: Option<&'a super::pattern::Captures>,
    /// The client certificate of a connection whose client sent one (`$ssl_client_*`).
    pub tls_client: Option<&'a crate::tls::client_auth::ClientCert>,
}

/// The parts of a request that rules change: the path, the query and the last captures.
#[derive(Debug, Clone, Default)]
pub struct Current {
    /// `$uri`.
    pub uri: String,
    /// `$args`.
    pub args: String,
    /// The groups of the last regular expression evaluated (none after a failed one).
    pub captures: Option<Captures>,
    /// How many times rewrites have set the path.
    pub rewrites: u32,
}

impl Template {
    /// Parses nginx's `$name` and `${name}` references; `names` are the named groups the
    /// surrounding regular expressions define. Unknown variables are refused.
    pub fn parse(text: &str, names: &[&str]) -> Result<Template, String> {
        Template::parse_with(text, names, &[])
    }

    /// As [`Template::parse`], where `$NAME` of one of `maps` is that map's value.
    pub fn parse_with(text: &str, names: &[&str], maps: &[String]) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            literal.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            let (name, after) = if let Some(braced) = rest.strip_prefix('{') {
                let end = braced
                    .find('}')
                    .ok_or_else(|| format!("unterminated ${{ in {text:?}"))?;
                (&braced[..end], &braced[end + 1..])
            } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
                rest.split_at(1)
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                rest.split_at(end)
            };
            if name.is_empty() {
                return Err(format!("a $ without a variable name in {text:?}"));
            }
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            let var = match maps.iter().position(|m| m == name) {
                Some(i) => Var::Map(i),
                None => variable(name, names)?,
            };
            parts.push(Part::Var(var));
            rest = after;
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts })
    }

    /// Whether the text starts with `prefix` before any variable, or with `$scheme`.
    pub fn is_url(&self) -> bool {
        match self.parts.first() {
            Some(Part::Text(t)) => t.starts_with("http://") || t.starts_with("https://"),
            Some(Part::Var(Var::Scheme)) => true,
            _ => false,
        }
    }

    /// Whether the text names `var`.
    pub fn uses(&self, var: &Var) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(v) if v == var))
    }

    /// Appends the text, variables read from `facts` and `current`, to `out`.
    pub fn render(&self, facts: &Facts<'_>, current: &Current, out: &mut String) {
        self.render_with(facts, current, current.captures.as_ref(), out);
    }

    /// As [`Template::render`], `$1..$9` and named groups read from `captures`.
    pub fn render_with(
        &self,
        facts: &Facts<'_>,
        current: &Current,
        captures: Option<&Captures>,
        out: &mut String,
    ) {
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) => value(v, facts, (current, captures), out),
            }
        }
    }

    /// As [`Template::render`], the groups of regular expressions (`$1`, named groups) escaped
    /// as `mode` says.
    pub fn render_escaping(
        &self,
        facts: &Facts<'_>,
        current: &Current,
        mode: Escape,
        out: &mut String,
    ) {
        if mode == Escape::None {
            return self.render(facts, current, out);
        }
        let captures = current.captures.as_ref();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(v @ (Var::Capture(_) | Var::Named(_))) => {
                    let mut raw = String::new();
                    value(v, facts, (current, captures), &mut raw);
                    escape_group(&raw, mode, out);
                }
                Part::Var(v) => value(v, facts, (current, captures), out),
            }
        }
    }

    /// The text rendered into a new string.
    pub fn to_string(&self, facts: &Facts<'_>, current: &Current) -> String {
        let mut out = String::new();
        self.render(facts, current, &mut out);
        out
    }
}

/// A group's text escaped for where it lands.
fn escape_group(text: &str, mode: Escape, out: &mut String) {
    for &c in text.as_bytes() {
        let special = c <= b' '
            || c >= 0x7f
            || matches!(
                c,
                b'?' | b'#' | b'%' | b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            )
            || (mode == Escape::Query && matches!(c, b'&' | b'+'));
        if special {
            use std::fmt::Write;
            let _ = write!(out, "%{c:02X}");
        } else {
            out.push(c as char);
        }
    }
}

/// The variable called `name`.
fn variable(name: &str, groups: &[&str]) -> Result<Var, String> {
    let owned = |s: &str| s.to_ascii_lowercase().into_boxed_str();
    Ok(match name {
        "host" => Var::Host,
        "uri" | "document_uri" => Var::Uri,
        "request_uri" => Var::RequestUri,
        "args" | "query_string" => Var::Args,
        "is_args" => Var::IsArgs,
        "scheme" => Var::Scheme,
        "server_name" => Var::ServerName,
        "server_port" => Var::ServerPort,
        // nginx's packed form counts the same clients apart: the text does too.
        "remote_addr" | "binary_remote_addr" => Var::RemoteAddr,
        "request_method" => Var::RequestMethod,
        "ssl_client_verify" => Var::SslClient(SslClient::Verify),
        "ssl_client_s_dn" => Var::SslClient(SslClient::Subject),
        "ssl_client_i_dn" => Var::SslClient(SslClient::Issuer),
        "ssl_client_serial" => Var::SslClient(SslClient::Serial),
        "ssl_client_fingerprint" => Var::SslClient(SslClient::Fingerprint),
        "ssl_client_san" => Var::SslClient(SslClient::San),
        _ if name.len() == 1 && name.as_bytes()[0].is_ascii_digit() => {
            Var::Capture(usize::from(name.as_bytes()[0] - b'0'))
        }
        _ if groups.contains(&name) => Var::Named(name.into()),
        _ => {
            if let Some(arg) = name.strip_prefix("arg_") {
                Var::Arg(owned(arg))
            } else if let Some(field) = name.strip_prefix("http_") {
                Var::Http(owned(&field.replace('_', "-")))
            } else if let Some(cookie) = name.strip_prefix("cookie_") {
                Var::Cookie(cookie.into())
            } else {
                return Err(format!("unknown variable ${name}"));
            }
        }
    })
}

/// Appends one variable's value.
fn value(var: &Var, facts: &Facts<'_>, at: (&Current, Option<&Captures>), out: &mut String) {
    let (current, captures) = at;
    let group = |i: usize| captures.map_or("", |c| c.group(i));
    match var {
        Var::Host => out.push_str(facts.host),
        Var::Uri => out.push_str(&current.uri),
        Var::RequestUri => out.push_str(facts.request_uri),
        Var::Args => out.push_str(&current.args),
        Var::IsArgs => {
            if !current.args.is_empty() {
                out.push('?');
            }
        }
        Var::Arg(name) => out.push_str(query_param(&current.args, name).unwrap_or("")),
        Var::Scheme => out.push_str(facts.scheme),
        Var::ServerName => out.push_str(facts.server_name),
        Var::ServerPort => {
            use std::fmt::Write;
            let _ = write!(out, "{}", (facts.server_port)());
        }
        Var::RemoteAddr => out.push_str(facts.remote_addr),
        Var::RequestMethod => out.push_str(facts.method),
        Var::Http(name) => {
            if let Some(f) = facts
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
            {
                out.push_str(&String::from_utf8_lossy(f.value));
            }
        }
        Var::Cookie(name) => {
            if let Some(v) = cookie(facts.headers, name) {
                out.push_str(&String::from_utf8_lossy(v));
            }
        }
        Var::Capture(i) => out.push_str(group(*i)),
        Var::Named(name) => {
            let named = captures
                .and_then(|c| c.named(name))
                .or_else(|| facts.host_captures.and_then(|c| c.named(name)));
            out.push_str(named.unwrap_or(""));
        }
        Var::Map(i) => {
            if let Some(map) = facts.maps.get(*i) {
                map.render(facts, current, out);
            }
        }
        Var::SslClient(part) => out.push_str(ssl_client(facts.tls_client, *part)),
    }
}

/// One part of the client certificate (`NONE` and empty without one).
fn ssl_client(cert: Option<&crate::tls::client_auth::ClientCert>, part: SslClient) -> &str {
    let Some(c) = cert else {
        return if part == SslClient::Verify {
            "NONE"
        } else {
            ""
        };
    };
    match part {
        SslClient::Verify => c.verify,
        SslClient::Subject => &c.subject,
        SslClient::Issuer => &c.issuer,
        SslClient::Serial => &c.serial,
        SslClient::Fingerprint => &c.fingerprint,
        SslClient::San => &c.san,
    }
}

/// The raw value of query parameter `name` (any case, as nginx compares them).
fn query_param<'a>(args: &'a str, name: &str) -> Option<&'a str> {
    args.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        n.eq_ignore_ascii_case(name).then_some(v)
    })
}

/// The value of cookie `name` in the request's Cookie fields.
fn cookie<'a>(headers: &[Field<'a>], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        .flat_map(|h| h.value.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii_start();
            let eq = pair.iter().position(|&b| b == b'=')?;
            pair[..eq]
                .eq_ignore_ascii_case(name.as_bytes())
                .then(|| &pair[eq + 1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_request_variables_and_captures() {
        let headers = [
            Field {
                name: "User-Agent",
                value: b"curl/8",
            },
            Field {
                name: "Cookie",
                value: b"a=1; session=xyz",
            },
        ];
        let port = || 8080;
        let facts = Facts {
            method: "GET",
            request_uri: "/a%20b?x=1&Y=2",
            host: "example.com",
            scheme: "https",
            server_name: "example.com",
            server_port: &port,
            remote_addr: "10.0.0.1",
            headers: &headers,
            maps: &[],
            host_captures: None,
            tls_client: None,
        };
        let p = super::super::pattern::Pattern::new("^/(?<w>a) (b)$", false).unwrap();
        let current = Current {
            uri: "/a b".into(),
            args: "x=1&Y=2".into(),
            captures: p.captures("/a b"),
            rewrites: 0,
        };
        let t = Template::parse(
            "$scheme://${host}:$server_port$request_uri|$uri$is_args$args|$arg_y|$http_user_agent|$cookie_session|$1$2$w$9|$remote_addr $request_method",
            &["w"],
        )
        .unwrap();
        assert_eq!(
            t.to_string(&facts, &current),
            "https://example.com:8080/a%20b?x=1&Y=2|/a b?x=1&Y=2|2|curl/8|xyz|aba|10.0.0.1 GET"
        );
        assert!(t.is_url());
        assert!(Template::parse("$nosuch", &[]).is_err());
        assert!(Template::parse("a$", &[]).is_err());
        assert!(Template::parse("${host", &[]).is_err());
    }
}
