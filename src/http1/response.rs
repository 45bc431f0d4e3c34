//! Response heads: parsing what an upstream sent, deciding how its body is framed for the
//! client, and writing the head the client receives.

use super::{is_hop_by_hop, list_elements, parse_content_length, put_decimal, put_field};
use super::{ConnectionTokens, Framing};
use crate::message::ClientHead;
pub use crate::message::ResponseHead;

/// Why an upstream response head was refused (the client gets 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseError {
    /// Not a valid HTTP/1.x response head, or ambiguous framing.
    Malformed(&'static str),
    /// The head is larger than the proxy's head limit.
    TooLarge,
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Malformed(r) => f.write_str(r),
            ResponseError::TooLarge => f.write_str("response head too large"),
        }
    }
}

/// How the body is carried from the upstream framing to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay {
    /// Bytes are forwarded as they are (length-delimited, chunked to HTTP/1.1, or read-until-close
    /// to a client that will also be closed).
    Pass,
    /// A read-until-close body is re-framed as chunked so an HTTP/1.1 client can keep its
    /// connection.
    EncodeChunked,
    /// A chunked body goes to an HTTP/1.0 client without its framing, ended by close.
    DecodeChunked,
}

/// Parses a response head at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut super::request::HeaderStorage<'b>,
    max_head: usize,
    request_was_head: bool,
) -> Result<Option<ResponseHead<'h, 'b>>, ResponseError> {
    let mut res = httparse::Response::new(&mut []);
    let status = httparse::ParserConfig::default()
        .allow_spaces_after_header_name_in_responses(true)
        .parse_response_with_uninit_headers(&mut res, buf, &mut storage.parsed);
    let head_len = match status {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Complete(_)) => return Err(ResponseError::TooLarge),
        Ok(httparse::Status::Partial) if buf.len() >= max_head => {
            return Err(ResponseError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
        Err(_) => return Err(ResponseError::Malformed("malformed response head")),
    };
    let status = res.code.unwrap_or(0);
    // Three digits is all httparse checks: `002` or `999` would be forwarded as an invalid
    // status line (RFC 9110 section 15: only 100 to 599 are valid).
    if !(100..=599).contains(&status) {
        return Err(ResponseError::Malformed("invalid status code"));
    }
    let minor_version = res.version.unwrap_or(1);
    let reason = res.reason.unwrap_or("");
    let headers: &'h [httparse::Header<'b>] = res.headers;

    let fields = scan_fields(headers)?;
    let (content_length, connection) = (fields.content_length, fields.connection);
    let bodyless = crate::message::has_no_body(status, request_was_head);
    let framing = if bodyless {
        Framing::Empty
    } else if fields.te_seen && fields.chunked_last {
        Framing::Chunked
    } else if fields.te_seen {
        Framing::UntilClose
    } else {
        match content_length {
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    let upstream_keeps = if minor_version == 1 {
        !connection.close
    } else {
        connection.keep_alive && !connection.close
    };
    Ok(Some(ResponseHead {
        status,
        reason,
        framing,
        declared_length: content_length,
        reusable: upstream_keeps && framing != Framing::UntilClose && status != 101,
        connection,
        headers,
        head_len,
    }))
}

/// What the fields of a response head say about framing and the connection.
#[derive(Default)]
struct ResponseFields {
    content_length: Option<u64>,
    te_seen: bool,
    chunked_last: bool,
    connection: ConnectionTokens,
}

/// Reads the framing and Connection fields, refusing ambiguous framing.
fn scan_fields(headers: &[httparse::Header<'_>]) -> Result<ResponseFields, ResponseError> {
    let mut f = ResponseFields::default();
    let mut chunked_count = 0;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            f.content_length = Some(
                parse_content_length(h.value, f.content_length)
                    .ok_or(ResponseError::Malformed("invalid Content-Length"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            f.te_seen = true;
            for coding in list_elements(h.value) {
                f.chunked_last = coding.eq_ignore_ascii_case(b"chunked");
                chunked_count += u32::from(f.chunked_last);
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            f.connection.add(h.value);
        }
    }
    if f.te_seen && f.content_length.is_some() {
        return Err(ResponseError::Malformed(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    if f.te_seen && chunked_count > 1 {
        return Err(ResponseError::Malformed("chunked applied twice"));
    }
    Ok(f)
}

impl ResponseHead<'_, '_> {
    /// How to carry this body to a client speaking HTTP/1.`client_minor`.
    pub fn relay(&self, client_minor: u8) -> Relay {
        match (self.framing, client_minor) {
            (Framing::Chunked, 0) => Relay::DecodeChunked,
            (Framing::UntilClose, 1) => Relay::EncodeChunked,
            _ => Relay::Pass,
        }
    }

    /// Whether the client connection must close after this body because its end is signalled
    /// only by closing.
    pub fn ends_by_close(&self, relay: Relay) -> bool {
        matches!(
            (self.framing, relay),
            (Framing::UntilClose, Relay::Pass) | (_, Relay::DecodeChunked)
        )
    }

    /// Writes the head the client receives; returns how the body bytes that follow it are
    /// delimited (`Empty` for a 1xx). `keep_alive` says whether the client connection stays
    /// open afterwards; `client_minor` is the client's HTTP minor version.
    pub fn write_client_head(
        &self,
        out: &mut Vec<u8>,
        relay: Relay,
        keep_alive: bool,
        client_minor: u8,
    ) -> Framing {
        put_status_line(out, 1, self.status, Some(self.reason));
        let mut upgrade = None;
        for h in self.headers {
            if h.name.eq_ignore_ascii_case("upgrade") {
                upgrade = Some(h.value);
            }
            if is_hop_by_hop(h.name) || self.connection.names(h.name) {
                continue;
            }
            put_field(out, h.name.as_bytes(), h.value);
        }
        if self.status == 101 {
            out.extend_from_slice(b"Connection: upgrade\r\n");
            if let Some(u) = upgrade {
                put_field(out, b"Upgrade", u);
            }
            out.extend_from_slice(b"\r\n");
            return Framing::Empty;
        }
        if self.is_interim() {
            out.extend_from_slice(b"\r\n");
            return Framing::Empty;
        }
        let framing = match (self.framing, relay) {
            (Framing::Length(n), _) => {
                put_length(out, n);
                Framing::Length(n)
            }
            (Framing::Chunked, Relay::Pass) | (Framing::UntilClose, Relay::EncodeChunked) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                Framing::Chunked
            }
            (Framing::Empty, _) => {
                if let Some(n) = self.declared_length.filter(|_| self.status != 204) {
                    put_length(out, n);
                }
                Framing::Empty
            }
            _ => Framing::UntilClose,
        };
        if !keep_alive {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if client_minor == 0 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
        framing
    }
}

fn put_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"Content-Length: ");
    put_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// The field line `Name: value\r\n` for a configured response header; refuses names that
/// are not tokens, values with control characters, and the fields that frame the message.
pub fn field_line(name: &str, value: &str) -> Result<Vec<u8>, String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    if super::is_hop_by_hop(name) || name.eq_ignore_ascii_case("date") {
        return Err(format!("{name} is set by the proxy itself"));
    }
    if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
        return Err(format!("the value of {name} has a control character"));
    }
    Ok(format!("{name}: {}\r\n", value.trim()).into_bytes())
}

/// Adds field lines (each `Name: value\r\n`) to the response head that starts at `start` in
/// `out`, before the blank line that ends it; a field the head already has is not added twice,
/// but a `Vary` is merged into the head's (`Vary: Cookie` and `Vary: Origin` make
/// `Vary: Cookie, Origin`: a cache must tell both apart). The lines have distinct names
/// ([`distinct_fields`]).
pub fn add_fields(out: &mut Vec<u8>, start: usize, lines: &[u8]) {
    if lines.is_empty() {
        return;
    }
    if let Some(vary) = lines
        .split_inclusive(|&b| b == b'\n')
        .find(|l| l.len() > 5 && l[..5].eq_ignore_ascii_case(b"vary:"))
    {
        merge_vary(out, start, vary);
    }
    let Some(end) = out[start..].windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let at = start + end + 2;
    // The lowercased first bytes of the head's field names, as a bit set: a configured
    // field whose first byte is not in it cannot be there (the usual case), and is added
    // without a comparison. All are inserted with one move of what follows the head.
    let mut firsts = [0u64; 4];
    for line in out[start..at].split(|&b| b == b'\n').skip(1) {
        if let Some(&b) = line.first() {
            let b = b.to_ascii_lowercase();
            firsts[usize::from(b >> 6)] |= 1 << (b & 63);
        }
    }
    let mut insert = Vec::with_capacity(lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let first = line.first().map_or(0, u8::to_ascii_lowercase);
        let maybe = firsts[usize::from(first >> 6)] & (1 << (first & 63)) != 0;
        if !maybe || !has_field(&out[start..at], line) {
            insert.extend_from_slice(line);
        }
    }
    out.splice(at..at, insert);
}

/// Appends to the head's first `Vary` field the elements of the `Vary` line `line` it lacks
/// (none when it has `*`); a head without one is left alone (the line is then added whole).
fn merge_vary(out: &mut Vec<u8>, start: usize, line: &[u8]) {
    let Some(end) = out[start..].windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let head = &out[start..start + end + 2];
    let mut at = 0;
    let found = head.split_inclusive(|&b| b == b'\n').find_map(|l| {
        let here = at;
        at += l.len();
        (l.len() > 5 && l[..5].eq_ignore_ascii_case(b"vary:")).then_some((here, l))
    });
    let Some((offset, existing)) = found else {
        return;
    };
    let value = |l: &[u8]| {
        let l = &l[5..];
        l.strip_suffix(b"\r\n").unwrap_or(l).to_vec()
    };
    let have = value(existing);
    if crate::message::list_elements(&have).any(|e| e == b"*") {
        return;
    }
    let mut added = Vec::new();
    for e in crate::message::list_elements(&value(line)) {
        let known = crate::message::list_elements(&have).any(|h| h.eq_ignore_ascii_case(e));
        if !known {
            added.extend_from_slice(b", ");
            added.extend_from_slice(e);
        }
    }
    let trimmed = existing.strip_suffix(b"\n").unwrap_or(existing);
    let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
    let line_end = start + offset + trimmed.len();
    out.splice(line_end..line_end, added);
}

/// Removes the fields named `names` (lower case) from the head that starts at `start` in
/// `out` (nginx's `proxy_hide_header`, and the fields `expires` replaces).
pub fn remove_fields(out: &mut Vec<u8>, start: usize, names: &[&str]) {
    if names.is_empty() {
        return;
    }
    let Some(end) = out[start..].windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let end = start + end + 2;
    let Some(first) = out[start..end].iter().position(|&b| b == b'\n') else {
        return;
    };
    let named = |line: &[u8]| {
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let name = &line[..colon];
        names
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    };
    let lines = || out[start + first + 1..end].split_inclusive(|&b| b == b'\n');
    // The usual case: none of them is there, and the head stays as it is.
    if !lines().any(named) {
        return;
    }
    let mut kept = Vec::with_capacity(end - start);
    for line in lines().filter(|l| !named(l)) {
        kept.extend_from_slice(line);
    }
    out.splice(start + first + 1..end, kept);
}

/// Whether `head` has a field named as the field line `line`.
fn has_field(head: &[u8], line: &[u8]) -> bool {
    let name_len = line.iter().position(|&b| b == b':').unwrap_or(line.len());
    let name = &line[..name_len];
    head.split(|&b| b == b'\n').any(|l| {
        l.len() > name_len && l[..name_len].eq_ignore_ascii_case(name) && l[name_len] == b':'
    })
}

/// Field lines with one line per name (any case): the first of each name is kept.
pub fn distinct_fields(lines: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines.split_inclusive(|&b| b == b'\n') {
        if !has_field(&out, line) {
            out.extend_from_slice(line);
        }
    }
    out
}

/// A response generated by the proxy itself (errors, 404s), dated: its head and its body
/// (`CODE Reason` and a newline; empty for `head_only`).
pub fn simple_response(status: u16, keep_alive: bool, head_only: bool) -> (ClientHead, Vec<u8>) {
    let reason = reason_phrase(status);
    let body_len = reason.len() + 5;
    let mut out = Vec::with_capacity(160);
    put_status_line(&mut out, 1, status, Some(reason));
    out.extend_from_slice(b"Server: slipstream\r\n");
    super::date::put_date(&mut out);
    out.extend_from_slice(b"Content-Type: text/plain\r\nContent-Length: ");
    put_decimal(&mut out, body_len as u64);
    out.extend_from_slice(if keep_alive {
        b"\r\n\r\n".as_slice()
    } else {
        b"\r\nConnection: close\r\n\r\n".as_slice()
    });
    let mut body = Vec::new();
    if !head_only {
        put_decimal(&mut body, u64::from(status));
        body.push(b' ');
        body.extend_from_slice(reason.as_bytes());
        body.push(b'\n');
    }
    let head = ClientHead::new(status, Framing::Length(body_len as u64), out);
    (head, body)
}

/// A gRPC error the proxy generates: HTTP 200 with no body and the status in the head
/// (`grpc-status`, `grpc-message` percent-encoded as gRPC wants), which HTTP/2 sends as a
/// trailers-only response.
pub fn grpc_error(
    (content_type, grpc_status): (&str, u8),
    message: &str,
    keep_alive: bool,
) -> ClientHead {
    let mut text = Vec::with_capacity(200);
    let out = &mut text;
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: slipstream\r\n");
    super::date::put_date(out);
    out.extend_from_slice(b"Content-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\nGrpc-Status: ");
    put_decimal(out, u64::from(grpc_status));
    out.extend_from_slice(b"\r\nGrpc-Message: ");
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out.extend_from_slice(b"\r\nContent-Length: 0\r\n");
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    ClientHead::new(200, Framing::Length(0), text)
}

/// Writes a status line, `HTTP/1.x CODE REASON` and CRLF: every response head the proxy
/// writes starts here. `reason` is the upstream's or the script's phrase as given, else the
/// standard one ([`reason_phrase`]).
pub fn put_status_line(out: &mut Vec<u8>, minor_version: u8, status: u16, reason: Option<&str>) {
    out.extend_from_slice(if minor_version == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    put_code(out, status);
    out.push(b' ');
    out.extend_from_slice(reason.unwrap_or_else(|| reason_phrase(status)).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends a status code: three digits (every valid code has three; others in full).
fn put_code(out: &mut Vec<u8>, status: u16) {
    if (100..1000).contains(&status) {
        let digit = |n: u16| b'0' + (n % 10) as u8;
        out.extend_from_slice(&[digit(status / 100), digit(status / 10), digit(status)]);
    } else {
        put_decimal(out, u64::from(status));
    }
}

/// Replaces the status line at the start of `head` (a whole head as the client gets it) with
/// one of `status` and its standard reason, keeping the version: an error page's status.
pub fn replace_status_line(head: &mut Vec<u8>, status: u16) {
    let Some(end) = head.iter().position(|&b| b == b'\n') else {
        return;
    };
    let minor = u8::from(!head.starts_with(b"HTTP/1.0 "));
    let mut line = Vec::with_capacity(40);
    put_status_line(&mut line, minor, status, None);
    head.splice(..=end, line);
}

/// The standard reason phrase for the statuses the proxy generates or a CGI script sets
/// without one.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        409 => "Conflict",
        410 => "Gone",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::request::header_storage;

    #[test]
    fn status_lines_have_the_code_in_digits() {
        let line = |minor, status, reason| {
            let mut out = Vec::new();
            put_status_line(&mut out, minor, status, reason);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(line(1, 200, Some("OK")), "HTTP/1.1 200 OK\r\n");
        assert_eq!(line(0, 404, None), "HTTP/1.0 404 Not Found\r\n");
        assert_eq!(line(1, 100, Some("")), "HTTP/1.1 100 \r\n");
        assert_eq!(line(1, 999, Some("X")), "HTTP/1.1 999 X\r\n");
        assert_eq!(line(1, 599, Some("Y")), "HTTP/1.1 599 Y\r\n");
        assert_eq!(line(1, 1000, Some("Z")), "HTTP/1.1 1000 Z\r\n");
        assert_eq!(line(1, 99, Some("Z")), "HTTP/1.1 99 Z\r\n");
        for status in 100..600u16 {
            assert!(line(1, status, Some("")).starts_with(&format!("HTTP/1.1 {status} ")));
        }
    }

    fn status_of(raw: &[u8]) -> Result<u16, ResponseError> {
        let mut storage = header_storage();
        parse_response(raw, &mut storage, 8192, false).map(|h| h.unwrap().status)
    }

    #[test]
    fn fields_are_removed_by_name_in_any_case() {
        let mut head = b"X\r\nHTTP/1.1 200 OK\r\nServer: a\r\nX-Powered-By: php\r\nserver: b\r\nA: 1\r\n\r\nbody".to_vec();
        remove_fields(&mut head, 2, &["server", "x-powered-by"]);
        assert_eq!(head, b"X\r\nHTTP/1.1 200 OK\r\nA: 1\r\n\r\nbody");
        let mut head = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        remove_fields(&mut head, 0, &["a"]);
        assert_eq!(head, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    #[test]
    fn a_status_line_is_replaced_whole() {
        let mut head = b"HTTP/1.1 200 Very OK\r\nA: b\r\n\r\n".to_vec();
        replace_status_line(&mut head, 404);
        assert_eq!(head, b"HTTP/1.1 404 Not Found\r\nA: b\r\n\r\n");
        let mut head = b"HTTP/1.0 200 OK\r\n\r\n".to_vec();
        replace_status_line(&mut head, 503);
        assert_eq!(head, b"HTTP/1.0 503 Service Unavailable\r\n\r\n");
    }

    /// Found by the fuzzer: `002` passed httparse and went out as `HTTP/1.1 2 OK`.
    #[test]
    fn statuses_outside_100_to_599_are_refused() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n"), Ok(200));
        assert_eq!(status_of(b"HTTP/1.1 599 X\r\n\r\n"), Ok(599));
        let invalid = Err(ResponseError::Malformed("invalid status code"));
        assert_eq!(status_of(b"HTTP/1.1 002 OK\r\n\r\n"), invalid);
        assert_eq!(status_of(b"HTTP/1.1 099 OK\r\n\r\n"), invalid);
        assert_eq!(status_of(b"HTTP/1.1 600 X\r\n\r\n"), invalid);
    }

    #[test]
    fn client_heads_always_have_three_digit_statuses() {
        let mut storage = header_storage();
        let raw = b"HTTP/1.1 204 No Content\r\nX: y\r\n\r\n";
        let head = parse_response(raw, &mut storage, 8192, false)
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        head.write_client_head(&mut out, Relay::Pass, true, 1);
        assert!(out.starts_with(b"HTTP/1.1 204 No Content\r\n"));
    }

    #[test]
    fn fields_go_before_the_blank_line_once() {
        let hsts = b"Strict-Transport-Security: max-age=1\r\n";
        let mut out = b"body-before HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody".to_vec();
        add_fields(&mut out, 12, hsts);
        assert_eq!(
            out,
            b"body-before HTTP/1.1 200 OK\r\nA: b\r\nStrict-Transport-Security: max-age=1\r\n\r\nbody"
        );
        let mut present =
            b"HTTP/1.1 200 OK\r\nstrict-transport-security: max-age=9\r\n\r\n".to_vec();
        let before = present.clone();
        add_fields(&mut present, 0, hsts);
        assert_eq!(present, before);
        // A field whose name only starts the same is not the same field.
        let mut other = b"HTTP/1.1 200 OK\r\nStrict-Transport-Security-X: 1\r\n\r\n".to_vec();
        add_fields(&mut other, 0, hsts);
        assert_eq!(other.windows(7).filter(|w| w == b"max-age").count(), 1);
    }

    /// A `Vary` the head has is merged with the one added, never doubled; `*` covers all.
    #[test]
    fn vary_is_merged_into_the_heads() {
        let lines = b"Vary: Origin\r\nX-A: 1\r\n";
        let mut out = b"x HTTP/1.1 200 OK\r\nvary: Cookie\r\n\r\nbody".to_vec();
        add_fields(&mut out, 2, lines);
        assert_eq!(
            out,
            b"x HTTP/1.1 200 OK\r\nvary: Cookie, Origin\r\nX-A: 1\r\n\r\nbody"
        );
        let again = out.clone();
        add_fields(&mut out, 2, b"Vary: origin\r\n");
        assert_eq!(out, again);
        let mut star = b"HTTP/1.1 200 OK\r\nVary: *\r\n\r\n".to_vec();
        add_fields(&mut star, 0, lines);
        assert_eq!(star, b"HTTP/1.1 200 OK\r\nVary: *\r\nX-A: 1\r\n\r\n");
        let mut none = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        add_fields(&mut none, 0, lines);
        assert_eq!(none, b"HTTP/1.1 200 OK\r\nVary: Origin\r\nX-A: 1\r\n\r\n");
    }
}
