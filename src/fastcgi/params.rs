//! The CGI variables a FastCGI request carries (what nginx's `fastcgi_params` and Caddy's
//! `php_fastcgi` send), without I/O: the script split from PATH_INFO, the request line, the
//! addresses, and every request header as `HTTP_*`, except `Proxy` (httpoxy) and names with an
//! underscore (which could pass for another header once `-` became `_`, so nginx drops them).

use std::net::SocketAddr;

use super::record::{put_header, put_length, put_record, RecordType, MAX_CONTENT};

/// The script part of a path and what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptPath<'a> {
    /// `/app/index.php`.
    pub script_name: &'a str,
    /// `/extra/path` (empty when nothing follows the script).
    pub path_info: &'a str,
}

/// Splits a normalized path after its first segment ending in `extension` (`.php`,
/// case-insensitive). `None`: no segment names a script, so nothing may go to the application.
pub fn split_script<'a>(path: &'a str, extension: &str) -> Option<ScriptPath<'a>> {
    let mut end = 0;
    for segment in path.split('/') {
        end += segment.len();
        let named = segment.len() > extension.len()
            && segment
                .get(segment.len() - extension.len()..)
                .is_some_and(|tail| tail.eq_ignore_ascii_case(extension));
        if named {
            return Some(ScriptPath {
                script_name: &path[..end],
                path_info: &path[end..],
            });
        }
        end += 1; // the slash
    }
    None
}

/// What the variables are built from.
#[derive(Debug)]
pub struct CgiRequest<'a> {
    /// The document root, without a trailing slash.
    pub document_root: &'a str,
    /// The script and the path after it.
    pub script: ScriptPath<'a>,
    /// The request target as sent (`/index.php/x?a=1`).
    pub request_uri: &'a str,
    /// The method.
    pub method: &'a str,
    /// `HTTP/1.1`.
    pub protocol: &'a str,
    /// The body's length, when known (`CONTENT_LENGTH`).
    pub content_length: Option<u64>,
    /// The client.
    pub remote: SocketAddr,
    /// The address the request came in on.
    pub local: SocketAddr,
    /// `Host` without its port, or the local address.
    pub server_name: &'a str,
    /// The request arrived over TLS.
    pub https: bool,
}

/// Appends the PARAMS records of `req` to `out`: every variable, each request header as
/// `HTTP_*` (repeated fields combined as one list, cookies with `; `), and the route's `extra`
/// pairs, which replace a variable of the same name. Written straight into the records, with
/// no intermediate allocation per variable.
pub fn put_cgi_params(
    out: &mut Vec<u8>,
    req: &CgiRequest<'_>,
    headers: &[httparse::Header<'_>],
    extra: &[(String, String)],
) {
    // The pairs are written in place after room for a record header; the header is filled
    // in at the end (or the content framed again when it needs several records).
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    let mut w = Pairs {
        content: &mut *out,
        extra,
    };
    let query = req.request_uri.split_once('?').map_or("", |(_, q)| q);
    let (root, script, info) = (
        req.document_root,
        req.script.script_name,
        req.script.path_info,
    );
    w.put(b"SCRIPT_FILENAME", &[root.as_bytes(), script.as_bytes()]);
    w.put(b"SCRIPT_NAME", &[script.as_bytes()]);
    w.put(b"PATH_INFO", &[info.as_bytes()]);
    w.put(b"DOCUMENT_ROOT", &[root.as_bytes()]);
    w.put(b"DOCUMENT_URI", &[script.as_bytes(), info.as_bytes()]);
    w.put(b"REQUEST_URI", &[req.request_uri.as_bytes()]);
    w.put(b"QUERY_STRING", &[query.as_bytes()]);
    w.put(b"REQUEST_METHOD", &[req.method.as_bytes()]);
    w.put(b"SERVER_PROTOCOL", &[req.protocol.as_bytes()]);
    w.put(b"GATEWAY_INTERFACE", &[b"CGI/1.1"]);
    w.put(b"SERVER_SOFTWARE", &[b"slipstream"]);
    let mut text = [0u8; 64];
    w.put(b"REMOTE_ADDR", &[ip_text(req.remote.ip(), &mut text)]);
    w.put(
        b"REMOTE_PORT",
        &[decimal(u64::from(req.remote.port()), &mut text)],
    );
    w.put(b"SERVER_ADDR", &[ip_text(req.local.ip(), &mut text)]);
    w.put(
        b"SERVER_PORT",
        &[decimal(u64::from(req.local.port()), &mut text)],
    );
    w.put(b"SERVER_NAME", &[req.server_name.as_bytes()]);
    w.put(b"REDIRECT_STATUS", &[b"200"]);
    if req.https {
        w.put(b"HTTPS", &[b"on"]);
    }
    if !info.is_empty() {
        w.put(b"PATH_TRANSLATED", &[root.as_bytes(), info.as_bytes()]);
    }
    match req.content_length {
        Some(n) => w.put(b"CONTENT_LENGTH", &[decimal(n, &mut text)]),
        None => w.put(b"CONTENT_LENGTH", &[]),
    }
    for (i, h) in headers.iter().enumerate() {
        let Some(kind) = header_variable(h.name) else {
            continue;
        };
        // A repeated field was written with its first occurrence.
        if headers[..i]
            .iter()
            .any(|e| e.name.eq_ignore_ascii_case(h.name))
        {
            continue;
        }
        w.put_header(kind, h.name, &headers[i..]);
    }
    for (name, value) in extra {
        w.put_pair(name.as_bytes(), &[value.as_bytes()]);
    }
    let len = out.len() - start - 8;
    if len <= MAX_CONTENT {
        let mut header = Vec::with_capacity(8);
        let padding = put_header(&mut header, RecordType::Params, len);
        out[start..start + 8].copy_from_slice(&header);
        out.resize(out.len() + padding, 0);
    } else {
        let content = out.split_off(start + 8);
        out.truncate(start);
        for chunk in content.chunks(MAX_CONTENT) {
            put_record(out, RecordType::Params, chunk);
        }
    }
    put_record(out, RecordType::Params, &[]);
}

/// Name-value pairs being encoded.
struct Pairs<'o, 'e> {
    content: &'o mut Vec<u8>,
    extra: &'e [(String, String)],
}

impl Pairs<'_, '_> {
    /// A variable, unless an extra pair replaces it; the value is `parts` joined.
    fn put(&mut self, name: &[u8], parts: &[&[u8]]) {
        if !self.extra.iter().any(|(n, _)| n.as_bytes() == name) {
            self.put_pair(name, parts);
        }
    }

    fn put_pair(&mut self, name: &[u8], parts: &[&[u8]]) {
        put_length(self.content, name.len());
        put_length(self.content, parts.iter().map(|p| p.len()).sum());
        self.content.extend_from_slice(name);
        for p in parts {
            self.content.extend_from_slice(p);
        }
    }

    /// The variable of the header `name`: the values of every field so named in `fields`.
    fn put_header(&mut self, kind: HeaderVariable, name: &str, fields: &[httparse::Header<'_>]) {
        if !self.extra.is_empty() {
            let var = variable_name(kind, name);
            if self.extra.iter().any(|(n, _)| n.as_bytes() == var) {
                return;
            }
        }
        let separator: &[u8] = if name.eq_ignore_ascii_case("cookie") {
            b"; "
        } else {
            b", "
        };
        let same = || fields.iter().filter(|f| f.name.eq_ignore_ascii_case(name));
        let count = same().count();
        let len = same().map(|f| f.value.len()).sum::<usize>() + (count - 1) * separator.len();
        let var_len = match kind {
            HeaderVariable::ContentType => "CONTENT_TYPE".len(),
            HeaderVariable::Http => 5 + name.len(),
        };
        put_length(self.content, var_len);
        put_length(self.content, len);
        put_variable_name(self.content, kind, name);
        for (i, f) in same().enumerate() {
            if i > 0 {
                self.content.extend_from_slice(separator);
            }
            self.content.extend_from_slice(f.value);
        }
    }
}

/// The variable name of header `name` (`X-Request-Id` is `HTTP_X_REQUEST_ID`).
fn variable_name(kind: HeaderVariable, name: &str) -> Vec<u8> {
    let mut var = Vec::with_capacity(5 + name.len());
    put_variable_name(&mut var, kind, name);
    var
}

fn put_variable_name(out: &mut Vec<u8>, kind: HeaderVariable, name: &str) {
    match kind {
        HeaderVariable::ContentType => out.extend_from_slice(b"CONTENT_TYPE"),
        HeaderVariable::Http => {
            out.extend_from_slice(b"HTTP_");
            out.extend(name.bytes().map(|b| {
                if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            }));
        }
    }
}

/// Which variable a request header becomes.
#[derive(Clone, Copy)]
enum HeaderVariable {
    ContentType,
    Http,
}

/// `Content-Type` is `CONTENT_TYPE`; others become `HTTP_NAME`; `Proxy`, `Content-Length`
/// (sent as `CONTENT_LENGTH` from the framing) and names with `_` are not passed.
fn header_variable(name: &str) -> Option<HeaderVariable> {
    if name.eq_ignore_ascii_case("content-type") {
        return Some(HeaderVariable::ContentType);
    }
    if name.eq_ignore_ascii_case("proxy")
        || name.eq_ignore_ascii_case("content-length")
        || name.contains('_')
    {
        return None;
    }
    Some(HeaderVariable::Http)
}

/// `n` in decimal, in `buf`.
fn decimal(n: u64, buf: &mut [u8; 64]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// An address as text, in `buf`.
fn ip_text(ip: std::net::IpAddr, buf: &mut [u8; 64]) -> &[u8] {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cursor, "{ip}");
    let len = cursor.position() as usize;
    &buf[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_split_is_by_segment() {
        let split = |p| split_script(p, ".php").map(|s| (s.script_name, s.path_info));
        assert_eq!(split("/index.php"), Some(("/index.php", "")));
        assert_eq!(split("/a/b.PHP/c/d"), Some(("/a/b.PHP", "/c/d")));
        assert_eq!(split("/x.php/y.php"), Some(("/x.php", "/y.php")));
        assert_eq!(split("/a.phpx/b"), None);
        assert_eq!(split("/.php"), None);
        assert_eq!(split("/img/cat.jpg"), None);
        // The classic upload exploit: the script is the whole path, which is not a file, so
        // the caller's existence check refuses it; the image is never named as the script.
        assert_eq!(
            split("/uploads/evil.jpg/x.php"),
            Some(("/uploads/evil.jpg/x.php", ""))
        );
    }

    #[test]
    fn params_longer_than_one_record_are_split() {
        let long = "v".repeat(70_000);
        let req = CgiRequest {
            document_root: "/srv",
            script: split_script("/i.php", ".php").unwrap(),
            request_uri: "/i.php",
            method: "GET",
            protocol: "HTTP/1.1",
            content_length: None,
            remote: "[::1]:1".parse().unwrap(),
            local: "127.0.0.1:2".parse().unwrap(),
            server_name: "x",
            https: true,
        };
        let headers = [httparse::Header {
            name: "X-Long",
            value: long.as_bytes(),
        }];
        let mut records = b"before".to_vec();
        put_cgi_params(&mut records, &req, &headers, &[]);
        let content = crate::fastcgi::record::params_content(&records[6..]);
        let vars = crate::fastcgi::record::parse_pairs(&content).unwrap();
        let get = |n: &[u8]| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        assert_eq!(get(b"HTTP_X_LONG"), Some(long.as_bytes()));
        assert_eq!(get(b"REMOTE_ADDR"), Some(&b"::1"[..]));
        assert_eq!(get(b"HTTPS"), Some(&b"on"[..]));
        assert_eq!(&records[..6], b"before");
    }

    #[test]
    fn variables_follow_fastcgi_params() {
        let req = CgiRequest {
            document_root: "/srv/www",
            script: split_script("/app/index.php/users/7", ".php").unwrap(),
            request_uri: "/app/index.php/users/7?x=1&y=2",
            method: "POST",
            protocol: "HTTP/1.1",
            content_length: Some(12),
            remote: "10.0.0.9:51000".parse().unwrap(),
            local: "10.0.0.1:8080".parse().unwrap(),
            server_name: "example.com",
            https: false,
        };
        let headers = [
            httparse::Header {
                name: "Host",
                value: b"example.com",
            },
            httparse::Header {
                name: "Content-Type",
                value: b"application/json",
            },
            httparse::Header {
                name: "Content-Length",
                value: b"12",
            },
            httparse::Header {
                name: "X-Request-Id",
                value: b"abc",
            },
            httparse::Header {
                name: "Cookie",
                value: b"a=1",
            },
            httparse::Header {
                name: "cookie",
                value: b"b=2",
            },
            httparse::Header {
                name: "Proxy",
                value: b"http://evil:1",
            },
            httparse::Header {
                name: "X_Spoof",
                value: b"1",
            },
        ];
        let extra = [
            ("APP_ENV".to_string(), "prod".to_string()),
            ("HTTP_X_REQUEST_ID".to_string(), "fixed".to_string()),
            ("SERVER_NAME".to_string(), "override.example".to_string()),
        ];
        let mut records = Vec::new();
        put_cgi_params(&mut records, &req, &headers, &extra);
        let content = crate::fastcgi::record::params_content(&records);
        let vars = crate::fastcgi::record::parse_pairs(&content).unwrap();
        let names: Vec<&[u8]> = vars.iter().map(|(n, _)| *n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "each variable once");
        let get = |n: &str| {
            vars.iter()
                .find(|(k, _)| *k == n.as_bytes())
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            get("SCRIPT_FILENAME").as_deref(),
            Some("/srv/www/app/index.php")
        );
        assert_eq!(get("SCRIPT_NAME").as_deref(), Some("/app/index.php"));
        assert_eq!(get("PATH_INFO").as_deref(), Some("/users/7"));
        assert_eq!(get("QUERY_STRING").as_deref(), Some("x=1&y=2"));
        assert_eq!(
            get("REQUEST_URI").as_deref(),
            Some("/app/index.php/users/7?x=1&y=2")
        );
        assert_eq!(get("CONTENT_TYPE").as_deref(), Some("application/json"));
        assert_eq!(get("CONTENT_LENGTH").as_deref(), Some("12"));
        assert_eq!(get("HTTP_X_REQUEST_ID").as_deref(), Some("fixed"));
        assert_eq!(get("HTTP_COOKIE").as_deref(), Some("a=1; b=2"));
        assert_eq!(get("HTTP_HOST").as_deref(), Some("example.com"));
        assert_eq!(get("REMOTE_ADDR").as_deref(), Some("10.0.0.9"));
        assert_eq!(get("SERVER_PORT").as_deref(), Some("8080"));
        assert_eq!(get("APP_ENV").as_deref(), Some("prod"));
        assert_eq!(get("HTTP_PROXY"), None);
        assert_eq!(get("HTTP_X_SPOOF"), None);
        assert_eq!(get("HTTP_CONTENT_LENGTH"), None);
        assert_eq!(get("HTTPS"), None);
        assert_eq!(get("SERVER_NAME").as_deref(), Some("override.example"));
        assert_eq!(
            get("DOCUMENT_URI").as_deref(),
            Some("/app/index.php/users/7")
        );
        assert_eq!(get("PATH_TRANSLATED").as_deref(), Some("/srv/www/users/7"));
    }
}
