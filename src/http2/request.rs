//! An HTTP/2 request head as the HTTP/1.1 head the rest of the proxy reads. The `h2` crate has
//! already refused connection-specific fields, `te` other than `trailers`, upper-case names,
//! CR/LF/NUL in values and misplaced pseudo-headers, each by resetting its stream alone
//! (vendor/README.md); what it lets through and HTTP/1.1 would
//! read differently is refused here ([`Malformed`]), so nothing ambiguous is ever forwarded
//! (RFC 9113 section 8.2 and 8.3).

use crate::http1::put_field;
use http::request::Parts;
use http::{header, Method};

/// Why a request is malformed: the stream is reset with PROTOCOL_ERROR and nothing is
/// forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// How the request body is framed in the HTTP/1.1 head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// END_STREAM came with the head: no body.
    None,
    /// `content-length` was given: exactly that many DATA bytes follow (the `h2` crate checks
    /// the total).
    Length(u64),
    /// No length: the body is written chunked, trailers included.
    Chunked,
    /// A WebSocket opened by extended CONNECT (RFC 8441): the head is an HTTP/1.1 Upgrade,
    /// and the stream's DATA, both ways, is the tunnel once the upstream has switched.
    Tunnel,
}

/// The HTTP/1.1 head of one HTTP/2 request.
#[derive(Debug)]
pub struct Head {
    /// The head's bytes, ending in the empty line.
    pub bytes: Vec<u8>,
    /// How the body follows.
    pub body: BodyKind,
    /// The method is HEAD (its response has no body).
    pub is_head: bool,
}

/// Builds the HTTP/1.1 head of a request; `end_stream` says HEADERS carried END_STREAM.
pub fn to_http1(parts: &Parts, end_stream: bool) -> Result<Head, Malformed> {
    let websocket = parts.method == Method::CONNECT
        && parts
            .extensions
            .get::<h2::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    if parts.method == Method::CONNECT && !websocket {
        return Err(Malformed("CONNECT other than a WebSocket is not supported"));
    }
    let target = parts
        .uri
        .path_and_query()
        .map(http::uri::PathAndQuery::as_str)
        .unwrap_or("");
    let target_ok = target.starts_with('/') || (target == "*" && parts.method == Method::OPTIONS);
    if !target_ok {
        return Err(Malformed("bad :path"));
    }
    let authority = parts.uri.authority().map(http::uri::Authority::as_str);
    if authority.is_some_and(|a| a.contains('@')) {
        return Err(Malformed(":authority with userinfo"));
    }
    let mut out = Vec::with_capacity(256 + parts.headers.len() * 32);
    let method = if websocket {
        "GET"
    } else {
        parts.method.as_str()
    };
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let host = host_field(parts, authority)?;
    if let Some(host) = host {
        put_field(&mut out, b"host", host);
    }
    let length = put_fields(parts, &mut out)?;
    if websocket {
        if end_stream || length.is_some() {
            return Err(Malformed("a WebSocket CONNECT with a body length"));
        }
        // The HTTP/1.1 handshake: the key is fresh (the upstream's accept is not checked, as
        // the HTTP/2 client does not see it).
        out.extend_from_slice(b"connection: upgrade\r\nupgrade: websocket\r\n");
        put_field(&mut out, b"sec-websocket-key", &websocket_key());
        out.extend_from_slice(b"\r\n");
        return Ok(Head {
            bytes: out,
            body: BodyKind::Tunnel,
            is_head: false,
        });
    }
    let body = match (end_stream, length) {
        (true, Some(n)) if n > 0 => return Err(Malformed("content-length without DATA")),
        (true, _) => BodyKind::None,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::Chunked,
    };
    match body {
        BodyKind::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        BodyKind::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        BodyKind::None if length == Some(0) => out.extend_from_slice(b"content-length: 0\r\n"),
        BodyKind::None | BodyKind::Tunnel => {}
    }
    out.extend_from_slice(b"\r\n");
    Ok(Head {
        bytes: out,
        body,
        is_head: parts.method == Method::HEAD,
    })
}

/// Writes the request's fields (Host aside) as HTTP/1.1 lines, cookies joined into one;
/// returns the content-length, refusing what HTTP/1.1 would read differently.
fn put_fields(parts: &Parts, out: &mut Vec<u8>) -> Result<Option<u64>, Malformed> {
    let mut length = None;
    let mut cookies: Vec<&[u8]> = Vec::new();
    for (name, value) in &parts.headers {
        let v = value.as_bytes();
        if v.first().is_some_and(|b| *b == b' ' || *b == b'\t')
            || v.last().is_some_and(|b| *b == b' ' || *b == b'\t')
        {
            return Err(Malformed("field value with surrounding whitespace"));
        }
        if super::is_connection_specific(name.as_str()) {
            // h2 refuses these too; refused here as well so the conversion stands alone.
            return Err(Malformed("connection-specific field"));
        }
        if *name == header::TE {
            if v != b"trailers" {
                return Err(Malformed("te other than trailers"));
            }
            continue;
        }
        if *name == header::HOST {
            continue;
        }
        if *name == header::CONTENT_LENGTH {
            // The h2 crate has checked the value is a number, the same in every field.
            let n = std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(Malformed("bad content-length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(Malformed("differing content-length fields"));
            }
            length = Some(n);
            continue;
        }
        if *name == header::COOKIE {
            // HTTP/2 may split cookies into several fields; HTTP/1.1 wants one (RFC 9113 8.2.3).
            cookies.push(v);
            continue;
        }
        put_field(out, name.as_str().as_bytes(), v);
    }
    if !cookies.is_empty() {
        out.extend_from_slice(b"cookie: ");
        for (i, c) in cookies.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(c);
        }
        out.extend_from_slice(b"\r\n");
    }
    Ok(length)
}

/// The Host the HTTP/1.1 head carries: `:authority` when given, and a `host` field that names
/// another one is refused (RFC 9113 8.3.1); without `:authority`, the `host` field (one).
fn host_field<'a>(
    parts: &'a Parts,
    authority: Option<&'a str>,
) -> Result<Option<&'a [u8]>, Malformed> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let first = hosts.next().map(http::HeaderValue::as_bytes);
    if hosts.next().is_some() {
        return Err(Malformed("more than one host field"));
    }
    match (authority, first) {
        (Some(a), Some(h)) if !a.as_bytes().eq_ignore_ascii_case(h) => {
            Err(Malformed("host differs from :authority"))
        }
        (Some(a), _) => Ok(Some(a.as_bytes())),
        (None, h) => Ok(h),
    }
}

/// A `Sec-WebSocket-Key`: 16 random bytes in base64.
fn websocket_key() -> [u8; 24] {
    use base64::Engine;
    let mut key = [0u8; 24];
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(fastrand::u128(..).to_be_bytes(), &mut key)
        .expect("16 bytes are 24 characters");
    debug_assert_eq!(written, 24);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(req: http::request::Builder) -> Parts {
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_get_becomes_an_http1_head_with_host_from_authority() {
        let p = parts(
            http::Request::get("https://example.com/a?b=1")
                .header("accept", "*/*")
                .header("cookie", "a=1")
                .header("cookie", "b=2")
                .header("te", "trailers"),
        );
        let head = to_http1(&p, true).unwrap();
        assert_eq!(
            String::from_utf8(head.bytes).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
        );
        assert_eq!(head.body, BodyKind::None);
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunked() {
        let p = parts(http::Request::post("https://h/").header("content-length", "5"));
        let head = to_http1(&p, false).unwrap();
        assert_eq!(head.body, BodyKind::Length(5));
        assert!(head.bytes.ends_with(b"content-length: 5\r\n\r\n"));
        let p = parts(http::Request::post("https://h/"));
        let head = to_http1(&p, false).unwrap();
        assert_eq!(head.body, BodyKind::Chunked);
        assert!(head.bytes.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        let p = parts(http::Request::post("https://h/").header("content-length", "3"));
        assert!(to_http1(&p, true).is_err());
    }

    #[test]
    fn ambiguous_requests_are_malformed() {
        let cases = [
            http::Request::get("https://a.example/").header("host", "b.example"),
            http::Request::get("https://a.example/").header("x", " padded"),
            http::Request::get("https://u@a.example/"),
            http::Request::connect("a.example:443"),
        ];
        for c in cases {
            assert!(to_http1(&parts(c), true).is_err());
        }
        let same = http::Request::get("https://a.example/").header("host", "A.example");
        assert!(to_http1(&parts(same), true).is_ok());
    }

    #[test]
    fn an_extended_connect_for_a_websocket_becomes_an_upgrade() {
        let mut p = parts(
            http::Request::connect("https://a.example/chat")
                .header("sec-websocket-version", "13")
                .header("sec-websocket-protocol", "chat"),
        );
        p.extensions
            .insert(h2::ext::Protocol::from_static("websocket"));
        let head = to_http1(&p, false).unwrap();
        assert_eq!(head.body, BodyKind::Tunnel);
        let text = String::from_utf8(head.bytes).unwrap();
        assert!(
            text.starts_with(
                "GET /chat HTTP/1.1\r\nhost: a.example\r\nsec-websocket-version: 13\r\n\
                 sec-websocket-protocol: chat\r\nconnection: upgrade\r\nupgrade: websocket\r\n\
                 sec-websocket-key: "
            ),
            "{text}"
        );
        let key = text.split("sec-websocket-key: ").nth(1).unwrap();
        assert_eq!(key.len(), 24 + 4);
        assert!(key.ends_with("==\r\n\r\n"));
        // Another protocol, or a body length, is refused.
        p.extensions.insert(h2::ext::Protocol::from_static("mqtt"));
        assert!(to_http1(&p, false).is_err());
    }
}
