//! Request heads: parsing with the framing and smuggling rules of RFC 9112, and writing the head
//! the proxy sends upstream.
//!
//! httparse does the tokenizing; everything it leaves to the caller is checked here: Content-Length
//! and Transfer-Encoding semantics, Host rules, request-target forms. The upstream head is always
//! written fresh from the parsed fields with CRLF line ends, never copied from the client's bytes.

use std::borrow::Cow;

use super::chunked::is_token_byte;
use super::{list_elements, parse_content_length, put_field, ConnectionTokens};
use super::{Framing, RequestHead, MAX_HEADERS};

/// Why a request head was refused (`crate::error` turns each into its status code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Malformed syntax or ambiguous framing: 400.
    Malformed(&'static str),
    /// The request line alone exceeds the head limit: 414.
    UriTooLong,
    /// The head exceeds the head limit or has too many fields: 431.
    HeadTooLarge,
    /// A transfer coding or method form the proxy does not implement: 501.
    NotImplemented(&'static str),
    /// An Expect value other than 100-continue: 417.
    ExpectationFailed,
}

/// Room for the fields of one head, kept by the caller: a parse of HTTP/1.1 bytes fills
/// `parsed` (on the caller's stack), which stays uninitialized until then (writing 4 KiB of
/// empty fields before each parse cost as much as parsing a small head), and a head built
/// from HTTP/2 values fills `built` (on the heap, sized to its fields).
pub struct HeaderStorage<'b> {
    /// The fields httparse finds, in order.
    pub(crate) parsed: [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS],
    /// The fields of a head taken from values (at most [`MAX_HEADERS`]).
    pub(crate) built: Vec<httparse::Header<'b>>,
}

/// A new, empty [`HeaderStorage`]: nothing is written.
pub fn header_storage<'b>() -> HeaderStorage<'b> {
    HeaderStorage {
        parsed: [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS],
        built: Vec::new(),
    }
}

/// Parses a request head from the start of `buf`. `Ok(None)` means more bytes are needed;
/// `max_head` bounds how many bytes a head may take.
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut HeaderStorage<'b>,
    max_head: usize,
) -> Result<Option<RequestHead<'h, 'b>>, RequestError> {
    let mut req = httparse::Request::new(&mut []);
    let config = httparse::ParserConfig::default();
    let status = match config.parse_request_with_uninit_headers(&mut req, buf, &mut storage.parsed)
    {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadTooLarge),
        Err(e) => return Err(RequestError::Malformed(httparse_reason(e))),
    };
    let head_len = match status {
        httparse::Status::Complete(n) if n <= max_head => n,
        httparse::Status::Complete(_) => return Err(RequestError::HeadTooLarge),
        httparse::Status::Partial if buf.len() >= max_head => {
            return Err(if buf[..max_head].contains(&b'\n') {
                RequestError::HeadTooLarge
            } else {
                RequestError::UriTooLong
            })
        }
        httparse::Status::Partial => return Ok(None),
    };
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    let minor_version = req.version.unwrap_or(1);
    let headers: &'h [httparse::Header<'b>] = req.headers;

    let (path, authority) = split_target(method, target)?;
    let fields = scan_fields(headers)?;
    let framing = request_framing(&fields, minor_version)?;
    let host_field = fields.host;
    let connection = fields.connection;
    let expect_continue = fields.expect_continue;
    let upgrade = fields.upgrade;

    if minor_version == 1 && host_field.is_none() {
        return Err(RequestError::Malformed("missing Host"));
    }
    let keep_alive = if minor_version == 1 {
        !connection.close
    } else {
        connection.keep_alive && !connection.close
    };
    let upgrade = if connection.upgrade && minor_version == 1 {
        upgrade
    } else {
        None
    };
    Ok(Some(RequestHead {
        method,
        path,
        minor_version,
        host: authority.or(host_field),
        framing,
        keep_alive,
        expect_continue,
        upgrade,
        connection,
        headers,
        head_len,
    }))
}

/// What the fields of a request head say about framing, Host, Expect, Upgrade and Connection.
#[derive(Default)]
struct RequestFields<'b> {
    host: Option<&'b [u8]>,
    content_length: Option<u64>,
    has_content_length: bool,
    te_seen: bool,
    te_chunked_last: bool,
    te_chunked_count: u32,
    expect_continue: bool,
    upgrade: Option<&'b [u8]>,
    connection: ConnectionTokens,
}

/// Reads the fields that matter to the proxy, refusing repeated or invalid ones.
fn scan_fields<'b>(headers: &[httparse::Header<'b>]) -> Result<RequestFields<'b>, RequestError> {
    let mut f = RequestFields::default();
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            if f.host.is_some() {
                return Err(RequestError::Malformed("repeated Host"));
            }
            if !valid_host(h.value) {
                return Err(RequestError::Malformed("invalid Host"));
            }
            f.host = Some(h.value);
        } else if name.eq_ignore_ascii_case("content-length") {
            f.has_content_length = true;
            f.content_length = Some(
                parse_content_length(h.value, f.content_length)
                    .ok_or(RequestError::Malformed("invalid Content-Length"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            f.te_seen = true;
            for coding in list_elements(h.value) {
                f.te_chunked_last = coding.eq_ignore_ascii_case(b"chunked");
                f.te_chunked_count += u32::from(f.te_chunked_last);
            }
        } else if name.eq_ignore_ascii_case("connection") {
            f.connection.add(h.value);
        } else if name.eq_ignore_ascii_case("expect") {
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                return Err(RequestError::ExpectationFailed);
            }
            f.expect_continue = true;
        } else if name.eq_ignore_ascii_case("upgrade") {
            f.upgrade = Some(h.value);
        }
    }
    Ok(f)
}

/// The body framing of a request (RFC 9112 section 6.3), refusing every ambiguous form.
fn request_framing(f: &RequestFields<'_>, minor_version: u8) -> Result<Framing, RequestError> {
    if !f.te_seen {
        return Ok(f.content_length.map_or(Framing::Empty, Framing::Length));
    }
    if f.has_content_length {
        return Err(RequestError::Malformed(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    if minor_version == 0 {
        return Err(RequestError::Malformed("Transfer-Encoding in HTTP/1.0"));
    }
    if f.te_chunked_count > 1 || (f.te_chunked_count == 1 && !f.te_chunked_last) {
        return Err(RequestError::Malformed("chunked is not the last coding"));
    }
    if f.te_chunked_count == 0 {
        return Err(RequestError::NotImplemented("unsupported transfer coding"));
    }
    Ok(Framing::Chunked)
}

/// Splits a request-target into the origin-form path and, for absolute form, the authority.
/// An absolute form's empty path is `/` (RFC 3986 6.2.3) and its query stays: `http://h?q`
/// is `/?q`.
fn split_target<'b>(
    method: &str,
    target: &'b str,
) -> Result<(Cow<'b, str>, Option<&'b [u8]>), RequestError> {
    if target.starts_with('/') {
        return Ok((Cow::Borrowed(target), None));
    }
    if target == "*" && method == "OPTIONS" {
        return Ok((Cow::Borrowed(target), None));
    }
    if method == "CONNECT" {
        return Err(RequestError::NotImplemented("CONNECT"));
    }
    let lower_scheme = |s: &str| {
        target.len() > s.len() && target.as_bytes()[..s.len()].eq_ignore_ascii_case(s.as_bytes())
    };
    let rest = if lower_scheme("http://") {
        &target[7..]
    } else if lower_scheme("https://") {
        &target[8..]
    } else {
        return Err(RequestError::Malformed("invalid request target"));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.is_empty() || !valid_host(authority.as_bytes()) {
        return Err(RequestError::Malformed("invalid authority"));
    }
    let path = match &rest[end..] {
        "" => Cow::Borrowed("/"),
        p if p.starts_with('/') => Cow::Borrowed(p),
        query => Cow::Owned(format!("/{query}")),
    };
    Ok((path, Some(authority.as_bytes())))
}

/// A Host value: a reg-name, IPv4 or bracketed IPv6 literal, with an optional port.
pub(crate) fn valid_host(v: &[u8]) -> bool {
    v.iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']'))
}

fn httparse_reason(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        httparse::Error::Version => "invalid version",
        httparse::Error::TooManyHeaders => "too many headers",
    }
}

/// What the proxy adds to a forwarded request.
#[derive(Debug, Clone, Copy)]
pub struct ForwardedFor<'a> {
    /// The client's address as text, appended to X-Forwarded-For (formatted once per
    /// connection, not per request).
    pub client: &'a [u8],
    /// `http` or `https`, sent as X-Forwarded-Proto.
    pub proto: &'a str,
}

impl RequestHead<'_, '_> {
    /// Writes the head to send upstream: HTTP/1.1, hop-by-hop fields removed, the proxy's
    /// X-Forwarded-* fields and the body framing added.
    pub fn write_upstream_head(&self, out: &mut Vec<u8>, fwd: ForwardedFor<'_>) {
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        // A request without a host (HTTP/1.0) still needs the field in HTTP/1.1: empty, as
        // RFC 9112 section 3.2 says for a target without an authority.
        put_field(out, b"Host", self.host.unwrap_or_default());
        for h in self.headers {
            if self.forwards(h.name) {
                put_field(out, h.name.as_bytes(), h.value);
            }
        }
        // X-Forwarded-For: the values the client sent, in order, then the client's address.
        out.extend_from_slice(b"X-Forwarded-For: ");
        for value in self.forwarded_for() {
            out.extend_from_slice(value);
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(fwd.client);
        out.extend_from_slice(b"\r\n");
        put_field(out, b"X-Forwarded-Proto", fwd.proto.as_bytes());
        if let Some(host) = self.host {
            put_field(out, b"X-Forwarded-Host", host);
        }
        match self.framing {
            Framing::Length(n) => {
                out.extend_from_slice(b"Content-Length: ");
                super::put_decimal(out, n);
                out.extend_from_slice(b"\r\n");
            }
            Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            Framing::Empty | Framing::UntilClose => {}
        }
        if let Some(up) = self.upgrade {
            out.extend_from_slice(b"Connection: upgrade\r\n");
            put_field(out, b"Upgrade", up);
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// True if `name` is a syntactically valid field name (used by tests and trailers).
pub fn is_field_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| is_token_byte(*b))
}

/// Sets fields in a request head written by [`RequestHead::write_upstream_head`]: each
/// `(name, value)` removes the head's fields of that name (any case) and, unless `value` is
/// empty, adds `name: value` (nginx's `proxy_set_header`). Values come checked for control
/// bytes.
pub fn set_fields(head: &mut Vec<u8>, fields: &[(String, String)]) {
    if fields.is_empty() {
        return;
    }
    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let first_line = head.windows(2).position(|w| w == b"\r\n").unwrap_or(0) + 2;
    let mut out = Vec::with_capacity(head.len() + 64);
    out.extend_from_slice(&head[..first_line]);
    for line in head[first_line..end + 2].split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if !fields
            .iter()
            .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        {
            out.extend_from_slice(line);
        }
    }
    for (name, value) in fields {
        if !value.is_empty() {
            put_field(&mut out, name.as_bytes(), value.as_bytes());
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[end + 4..]);
    *head = out;
}

#[cfg(test)]
mod tests;
