//! The CGI variables a FastCGI request carries (what nginx's `fastcgi_params` and Caddy's
//! `php_fastcgi` send), without I/O: the script split from PATH_INFO, the request line, the
//! addresses, and every request header as `HTTP_*`, except `Proxy` (httpoxy) and names with an
//! underscore (which could pass for another header once `-` became `_`, so nginx drops them).

use std::net::SocketAddr;

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

/// Every variable for `req`, with the request `headers` and the route's `extra` pairs (which
/// replace a variable of the same name), in the order they are sent.
pub fn cgi_params(
    req: &CgiRequest<'_>,
    headers: &[httparse::Header<'_>],
    extra: &[(String, String)],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let query = req.request_uri.split_once('?').map_or("", |(_, q)| q);
    let script_filename = format!("{}{}", req.document_root, req.script.script_name);
    let document_uri = format!("{}{}", req.script.script_name, req.script.path_info);
    let mut vars: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(32 + headers.len());
    let mut put = |name: &str, value: &str| vars.push((name.into(), value.into()));
    put("SCRIPT_FILENAME", &script_filename);
    put("SCRIPT_NAME", req.script.script_name);
    put("PATH_INFO", req.script.path_info);
    put("DOCUMENT_ROOT", req.document_root);
    put("DOCUMENT_URI", &document_uri);
    put("REQUEST_URI", req.request_uri);
    put("QUERY_STRING", query);
    put("REQUEST_METHOD", req.method);
    put("SERVER_PROTOCOL", req.protocol);
    put("GATEWAY_INTERFACE", "CGI/1.1");
    put("SERVER_SOFTWARE", "slipstream");
    put("REMOTE_ADDR", &req.remote.ip().to_string());
    put("REMOTE_PORT", &req.remote.port().to_string());
    put("SERVER_ADDR", &req.local.ip().to_string());
    put("SERVER_PORT", &req.local.port().to_string());
    put("SERVER_NAME", req.server_name);
    put("REDIRECT_STATUS", "200");
    if req.https {
        put("HTTPS", "on");
    }
    if !req.script.path_info.is_empty() {
        put(
            "PATH_TRANSLATED",
            &format!("{}{}", req.document_root, req.script.path_info),
        );
    }
    match req.content_length {
        Some(n) => put("CONTENT_LENGTH", &n.to_string()),
        None => put("CONTENT_LENGTH", ""),
    }
    for h in headers {
        let Some(name) = header_variable(h.name) else {
            continue;
        };
        let value = h.value;
        match vars.iter_mut().find(|(n, _)| *n == name) {
            // Repeated fields combine as one list (cookies with `; `).
            Some((_, v)) => {
                v.extend_from_slice(if name == b"HTTP_COOKIE" { b"; " } else { b", " });
                v.extend_from_slice(value);
            }
            None => vars.push((name, value.to_vec())),
        }
    }
    for (name, value) in extra {
        vars.retain(|(n, _)| n.as_slice() != name.as_bytes());
        vars.push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
    }
    vars
}

/// `Content-Type` is `CONTENT_TYPE`; others become `HTTP_NAME`; `Proxy`, `Content-Length`
/// (sent as `CONTENT_LENGTH` from the framing) and names with `_` are not passed.
fn header_variable(name: &str) -> Option<Vec<u8>> {
    if name.eq_ignore_ascii_case("content-type") {
        return Some(b"CONTENT_TYPE".to_vec());
    }
    if name.eq_ignore_ascii_case("proxy")
        || name.eq_ignore_ascii_case("content-length")
        || name.contains('_')
    {
        return None;
    }
    let mut var = Vec::with_capacity(5 + name.len());
    var.extend_from_slice(b"HTTP_");
    var.extend(name.bytes().map(|b| {
        if b == b'-' {
            b'_'
        } else {
            b.to_ascii_uppercase()
        }
    }));
    Some(var)
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
        let extra = [("APP_ENV".to_string(), "prod".to_string())];
        let vars = cgi_params(&req, &headers, &extra);
        let get = |n: &str| {
            vars.iter()
                .find(|(k, _)| k == n.as_bytes())
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
        assert_eq!(get("HTTP_X_REQUEST_ID").as_deref(), Some("abc"));
        assert_eq!(get("HTTP_COOKIE").as_deref(), Some("a=1; b=2"));
        assert_eq!(get("HTTP_HOST").as_deref(), Some("example.com"));
        assert_eq!(get("REMOTE_ADDR").as_deref(), Some("10.0.0.9"));
        assert_eq!(get("SERVER_PORT").as_deref(), Some("8080"));
        assert_eq!(get("APP_ENV").as_deref(), Some("prod"));
        assert_eq!(get("HTTP_PROXY"), None);
        assert_eq!(get("HTTP_X_SPOOF"), None);
        assert_eq!(get("HTTP_CONTENT_LENGTH"), None);
        assert_eq!(get("HTTPS"), None);
    }
}
