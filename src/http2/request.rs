//! An HTTP/2 request read into the message model ([`crate::message::RequestHead`]) straight
//! from the `h2` crate's parts: no HTTP/1.1 text is made or parsed. The `h2` crate has already
//! refused connection-specific fields, `te` other than `trailers`, upper-case names, CR/LF/NUL
//! in values and misplaced pseudo-headers, each by resetting its stream alone
//! (vendor/README.md). What it lets through and HTTP/1.1 would read differently is refused
//! here by [`check`] ([`Malformed`]: the stream is reset), so nothing ambiguous is ever
//! forwarded (RFC 9113 sections 8.2 and 8.3); what HTTP/1.1 would answer with a 4xx
//! ([`RequestError`]) is answered the same way by [`H2Request::head`].

use std::borrow::Cow;

use crate::http1::request::{valid_host, HeaderStorage};
use crate::http1::{Framing, RequestError, MAX_HEADERS};
use crate::message::{ConnectionTokens, RequestHead};
use http::request::Parts;
use http::{header, Method};

/// Why a request is malformed: the stream is reset with PROTOCOL_ERROR and nothing is
/// forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// How the request body follows the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// END_STREAM came with the head: no body.
    None,
    /// `content-length` was given: exactly that many DATA bytes follow (the `h2` crate checks
    /// the total).
    Length(u64),
    /// No length: the body is read chunked, trailers included.
    Chunked,
    /// A WebSocket opened by extended CONNECT (RFC 8441): the head is an HTTP/1.1 Upgrade,
    /// and the stream's DATA, both ways, is the tunnel once the upstream has switched.
    Tunnel,
}

/// A client stream's request head, checked: the `h2` crate's parts and what [`check`] found.
/// Kept by the stream for as long as it is served, so the head can be read (and read again,
/// by FastCGI) without copying it.
#[derive(Debug)]
pub struct H2Request {
    parts: Parts,
    /// How the body follows.
    pub body: BodyKind,
    /// The `content-length` field's value, also for a request without a body.
    length: Option<u64>,
    /// The cookies joined into one field (RFC 9113 8.2.3), when the client split them.
    cookie: Vec<u8>,
    /// A WebSocket's `Sec-WebSocket-Key` for the HTTP/1.1 handshake: fresh (the upstream's
    /// accept is not checked, as the HTTP/2 client does not see it).
    websocket_key: Option<[u8; 24]>,
}

/// Checks a request's parts; `end_stream` says HEADERS carried END_STREAM.
pub fn check(parts: Parts, end_stream: bool) -> Result<H2Request, Malformed> {
    let websocket = parts.method == Method::CONNECT
        && parts
            .extensions
            .get::<h2::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"));
    if parts.method == Method::CONNECT && !websocket {
        return Err(Malformed("CONNECT other than a WebSocket is not supported"));
    }
    let target = target(&parts);
    let target_ok = target.starts_with('/') || (target == "*" && parts.method == Method::OPTIONS);
    if !target_ok {
        return Err(Malformed("bad :path"));
    }
    let authority = parts.uri.authority().map(http::uri::Authority::as_str);
    if authority.is_some_and(|a| a.contains('@')) {
        return Err(Malformed(":authority with userinfo"));
    }
    host(&parts)?;
    let (length, cookies) = check_fields(&parts)?;
    let body = match (end_stream, length) {
        _ if websocket && (end_stream || length.is_some()) => {
            return Err(Malformed("a WebSocket CONNECT with a body length"));
        }
        _ if websocket => BodyKind::Tunnel,
        (true, Some(n)) if n > 0 => return Err(Malformed("content-length without DATA")),
        (true, _) => BodyKind::None,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::Chunked,
    };
    let mut cookie = Vec::new();
    if cookies > 1 {
        for (i, c) in parts.headers.get_all(header::COOKIE).iter().enumerate() {
            if i > 0 {
                cookie.extend_from_slice(b"; ");
            }
            cookie.extend_from_slice(c.as_bytes());
        }
    }
    Ok(H2Request {
        parts,
        body,
        length,
        cookie,
        websocket_key: websocket.then(websocket_key),
    })
}

/// The `:path`, `""` when absent.
fn target(parts: &Parts) -> &str {
    parts
        .uri
        .path_and_query()
        .map(http::uri::PathAndQuery::as_str)
        .unwrap_or("")
}

/// Refuses the fields HTTP/1.1 would read differently; returns the content-length and the
/// number of cookie fields.
fn check_fields(parts: &Parts) -> Result<(Option<u64>, usize), Malformed> {
    let mut length = None;
    let mut cookies = 0;
    for (name, value) in &parts.headers {
        let v = value.as_bytes();
        if v.first().is_some_and(|b| *b == b' ' || *b == b'\t')
            || v.last().is_some_and(|b| *b == b' ' || *b == b'\t')
        {
            return Err(Malformed("field value with surrounding whitespace"));
        }
        if super::is_connection_specific(name.as_str()) {
            // h2 refuses these too; refused here as well so the check stands alone.
            return Err(Malformed("connection-specific field"));
        }
        if *name == header::TE && v != b"trailers" {
            return Err(Malformed("te other than trailers"));
        }
        if *name == header::CONTENT_LENGTH {
            // HTTP/1.1's rule (at most 19 digits, every field the same), so a length taken
            // here is one an HTTP/1.1 server reads back: h2 alone takes any u64.
            length = Some(
                crate::http1::parse_content_length(v, length)
                    .ok_or(Malformed("bad or differing content-length"))?,
            );
        }
        cookies += usize::from(*name == header::COOKIE);
    }
    Ok((length, cookies))
}

/// The request's host: `:authority` when given, and a `host` field that names another one is
/// refused (RFC 9113 8.3.1); without `:authority`, the `host` field (one).
fn host(parts: &Parts) -> Result<Option<&[u8]>, Malformed> {
    let authority = parts.uri.authority().map(http::uri::Authority::as_str);
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

impl H2Request {
    /// The method is HEAD (its response has no body).
    pub fn is_head(&self) -> bool {
        self.parts.method == Method::HEAD
    }

    /// The client sent `expect: 100-continue`.
    pub fn expects_continue(&self) -> bool {
        self.parts
            .headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
    }

    /// The request head, its fields in `storage`: the host first (from `:authority`), then
    /// the client's fields as sent (`te` is only ever `trailers`; split cookies joined last),
    /// then a WebSocket's handshake fields. What HTTP/1.1 would refuse with a 4xx is refused alike: a head larger than
    /// `max_head` as HTTP/1.1 text, too many fields, a bad or missing host, an Expect other
    /// than 100-continue.
    pub fn head<'h, 'b>(
        &'b self,
        storage: &'h mut HeaderStorage<'b>,
        max_head: usize,
    ) -> Result<RequestHead<'h, 'b>, RequestError> {
        let parts = &self.parts;
        let host = match host(parts).ok().flatten() {
            Some(h) if valid_host(h) => h,
            Some(_) => return Err(RequestError::Malformed("invalid Host")),
            None => return Err(RequestError::Malformed("missing Host")),
        };
        let built = &mut storage.built;
        built.clear();
        // The client's fields, the host, a cookie joined, a WebSocket's three: one allocation.
        built.reserve((parts.headers.len() + 5).min(MAX_HEADERS));
        let mut fields = Fields {
            storage: built,
            size: parts.method.as_str().len() + target(parts).len() + 12,
        };
        fields.add("host", host)?;
        let mut expect_continue = false;
        for (name, value) in &parts.headers {
            let skip = *name == header::HOST
                || *name == header::CONTENT_LENGTH
                || (*name == header::COOKIE && !self.cookie.is_empty());
            if skip {
                continue;
            }
            if *name == header::EXPECT {
                if !value.as_bytes().eq_ignore_ascii_case(b"100-continue") {
                    return Err(RequestError::ExpectationFailed);
                }
                expect_continue = true;
            }
            fields.add(name.as_str(), value.as_bytes())?;
        }
        if !self.cookie.is_empty() {
            fields.add("cookie", &self.cookie)?;
        }
        let mut connection = ConnectionTokens::default();
        if let Some(key) = &self.websocket_key {
            connection.upgrade = true;
            fields.add("connection", b"upgrade")?;
            fields.add("upgrade", b"websocket")?;
            fields.add("sec-websocket-key", key)?;
        }
        if fields.size > max_head {
            return Err(RequestError::HeadTooLarge);
        }
        let framing = match self.body {
            BodyKind::Length(n) => Framing::Length(n),
            BodyKind::Chunked => Framing::Chunked,
            BodyKind::None if self.length == Some(0) => Framing::Length(0),
            BodyKind::None | BodyKind::Tunnel => Framing::Empty,
        };
        let Fields { storage, .. } = fields;
        Ok(RequestHead {
            method: match self.body {
                BodyKind::Tunnel => "GET",
                _ => parts.method.as_str(),
            },
            path: Cow::Borrowed(target(parts)),
            minor_version: 1,
            host: Some(host),
            framing,
            keep_alive: true,
            expect_continue,
            upgrade: self.websocket_key.map(|_| &b"websocket"[..]),
            connection,
            headers: storage,
            head_len: 0,
        })
    }
}

/// The fields of a head being built, and its size as HTTP/1.1 text.
struct Fields<'h, 'b> {
    storage: &'h mut Vec<httparse::Header<'b>>,
    size: usize,
}

impl<'b> Fields<'_, 'b> {
    fn add(&mut self, name: &'b str, value: &'b [u8]) -> Result<(), RequestError> {
        if self.storage.len() == MAX_HEADERS {
            return Err(RequestError::HeadTooLarge);
        }
        self.size += name.len() + value.len() + 4;
        self.storage.push(httparse::Header { name, value });
        Ok(())
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
    use crate::http1::request::{header_storage, ForwardedFor};

    fn parts(req: http::request::Builder) -> Parts {
        req.body(()).unwrap().into_parts().0
    }

    /// The head as it would be forwarded over HTTP/1.1, without the proxy's own fields.
    fn forwarded(request: &H2Request) -> String {
        let mut storage = header_storage();
        let head = request.head(&mut storage, 8192).unwrap();
        let mut out = Vec::new();
        let fwd = ForwardedFor {
            client: b"192.0.2.1",
            proto: "https",
        };
        head.write_upstream_head(&mut out, fwd);
        let text = String::from_utf8(out).unwrap();
        let own: String = text
            .split_inclusive("\r\n")
            .filter(|line| !line.starts_with("X-Forwarded-"))
            .collect();
        // The size the upstream head's buffer is given covers it (writing never grows it).
        assert!(own.len() <= head.text_size(), "{own:?}");
        own
    }

    #[test]
    fn a_get_reads_with_host_from_authority_and_cookies_joined() {
        let p = parts(
            http::Request::get("https://example.com/a?b=1")
                .header("accept", "*/*")
                .header("cookie", "a=1")
                .header("cookie", "b=2")
                .header("te", "trailers"),
        );
        let request = check(p, true).unwrap();
        assert_eq!(request.body, BodyKind::None);
        let mut storage = header_storage();
        let head = request.head(&mut storage, 8192).unwrap();
        assert_eq!((head.method, &*head.path), ("GET", "/a?b=1"));
        assert_eq!(head.host, Some(&b"example.com"[..]));
        assert_eq!(head.header("cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(head.framing, Framing::Empty);
        assert_eq!(head.head_len, 0);
        assert_eq!(
            forwarded(&request),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n"
        );
    }

    #[test]
    fn bodies_are_framed_by_length_or_chunked() {
        let framing = |p: Parts, end| {
            let request = check(p, end).unwrap();
            let mut storage = header_storage();
            let head = request.head(&mut storage, 8192).unwrap();
            (request.body, head.framing)
        };
        let p = parts(http::Request::post("https://h/").header("content-length", "5"));
        assert_eq!(framing(p, false), (BodyKind::Length(5), Framing::Length(5)));
        let p = parts(http::Request::post("https://h/"));
        assert_eq!(framing(p, false), (BodyKind::Chunked, Framing::Chunked));
        let p = parts(http::Request::post("https://h/").header("content-length", "0"));
        assert_eq!(framing(p, true), (BodyKind::None, Framing::Length(0)));
        let p = parts(http::Request::post("https://h/").header("content-length", "3"));
        assert!(check(p, true).is_err());
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
            assert!(check(parts(c), true).is_err());
        }
        // A length HTTP/1.1 would refuse (20 digits) or two that differ, even where h2
        // alone would take them.
        let long = http::Request::post("https://a.example/")
            .header("content-length", "10000000000000000000");
        assert!(check(parts(long), false).is_err());
        let two = http::Request::post("https://a.example/")
            .header("content-length", "1")
            .header("content-length", "2");
        assert!(check(parts(two), false).is_err());
        let same = http::Request::get("https://a.example/").header("host", "A.example");
        assert!(check(parts(same), true).is_ok());
    }

    #[test]
    fn what_http1_answers_with_a_4xx_is_answered_alike() {
        let refused = |req: http::request::Builder| {
            let request = check(parts(req), true).unwrap();
            let mut storage = header_storage();
            request.head(&mut storage, 200).unwrap_err()
        };
        let expect = http::Request::get("https://a.example/").header("expect", "other");
        assert_eq!(refused(expect), RequestError::ExpectationFailed);
        let big = http::Request::get("https://a.example/").header("x", "y".repeat(300));
        assert_eq!(refused(big), RequestError::HeadTooLarge);
        let bad_host = http::Request::get("/").header("host", "a b");
        assert!(matches!(refused(bad_host), RequestError::Malformed(_)));
        assert!(matches!(
            refused(http::Request::get("/")),
            RequestError::Malformed("missing Host")
        ));
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
        let request = check(p.clone(), false).unwrap();
        assert_eq!(request.body, BodyKind::Tunnel);
        let text = forwarded(&request);
        assert!(
            text.starts_with(
                "GET /chat HTTP/1.1\r\nHost: a.example\r\nsec-websocket-version: 13\r\n\
                 sec-websocket-protocol: chat\r\nsec-websocket-key: "
            ),
            "{text}"
        );
        assert!(text.ends_with("==\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"));
        // Another protocol, or a body length, is refused.
        p.extensions.insert(h2::ext::Protocol::from_static("mqtt"));
        assert!(check(p, false).is_err());
    }
}
