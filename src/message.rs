//! The message model: what a request is once read, whatever protocol carried it. HTTP/1.1
//! (`crate::http1::parse_request`, plain or TLS, either I/O backend) and HTTP/2
//! (`crate::http2::request::request_head`, from the `h2` crate's parts, no HTTP/1.1 text in
//! between) both read into a [`RequestHead`]; routing, balancing, static files, FastCGI's
//! variables, compression's negotiation and the access log work on it once. Its fields borrow
//! the bytes they were read from (the connection's buffer, or the stream's decoded HPACK
//! block), so reading a head copies nothing. The body follows as framed bytes ([`Framing`]),
//! read with backpressure from the socket or the stream's flow-control window.
//!
//! An upstream's answer is read the same way into a [`ResponseHead`]: from an HTTP/1.1
//! server's bytes, or from an HTTP/2 server's parts with no HTTP/1.1 text in between.
//!
//! The head a client receives is a [`ClientHead`]: composed once by whichever path answers
//! (a proxied response, a file, a FastCGI script, the proxy's own answer) and handed to the
//! client's stream as a value, which an HTTP/1.1 connection writes as it stands and an HTTP/2
//! stream sends as HEADERS without reading HTTP/1.1 back.
//!
//! These are the semantics of RFC 9110, shared by every version; each protocol's syntax lives
//! in its codec (`http1/`, `http2/`).

use std::borrow::Cow;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the sender closes (responses only).
    UntilClose,
}

/// One header field as read: its name as received, its value's bytes.
pub type Field<'b> = httparse::Header<'b>;

/// The head a client receives. Its fields are kept in their HTTP/1.1 wire form in `text`
/// (status line, `Name: value` lines, the framing and Connection fields, the blank line), so
/// an HTTP/1.1 connection writes `text` as it stands, together with the first body bytes in
/// one write; `status` and `framing` say as values what an HTTP/2 stream needs besides the
/// fields ([`ClientHead::fields`]), so it never parses the text. The path that answers
/// composes the text and edits it (configured fields, compression) before sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHead {
    /// The status code.
    pub status: u16,
    /// How the bytes written after the head are delimited: `Chunked` means they carry
    /// HTTP/1.1's chunked coding (an HTTP/2 stream takes the coding off), `Empty` that no
    /// body follows.
    pub framing: Framing,
    /// The head as HTTP/1.1 sends it.
    pub text: Vec<u8>,
}

/// A head's buffer goes back for the next head (see [`crate::buffers::head_text`]).
impl Drop for ClientHead {
    fn drop(&mut self) {
        crate::buffers::recycle_head_text(std::mem::take(&mut self.text));
    }
}

impl ClientHead {
    /// A head of `status` whose body is delimited by `framing`, its HTTP/1.1 form `text`.
    pub fn new(status: u16, framing: Framing, text: Vec<u8>) -> ClientHead {
        ClientHead {
            status,
            framing,
            text,
        }
    }

    /// An interim head (`100 Continue` and the like): no fields, no body.
    pub fn interim(status: u16) -> ClientHead {
        let mut text = Vec::with_capacity(32);
        crate::http1::response::put_status_line(&mut text, 1, status, None);
        text.extend_from_slice(b"\r\n");
        ClientHead::new(status, Framing::Empty, text)
    }

    /// The fields, name and value (the value without surrounding whitespace), in order: the
    /// lines of `text` after the status line.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        // Line ends found by `memchr` (several bytes per step): the head is read this way for
        // every HTTP/2 response.
        let text = &self.text[..];
        let mut at = memchr::memchr(b'\n', text).map_or(text.len(), |end| end + 1);
        std::iter::from_fn(move || {
            while at < text.len() {
                let rest = &text[at..];
                let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                at += end + 1;
                let line = &rest[..end];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if let Some(colon) = memchr::memchr(b':', line) {
                    return Some((&line[..colon], line[colon + 1..].trim_ascii()));
                }
            }
            None
        })
    }

    /// How many field lines the head has at most (its line count less the status line):
    /// a bound to size a map by.
    pub fn field_bound(&self) -> usize {
        memchr::memchr_iter(b'\n', &self.text)
            .count()
            .saturating_sub(1)
    }
}

/// A validated request head, borrowing what it was read from: an HTTP/1.1 connection's read
/// buffer, or an HTTP/2 stream's request parts (then `minor_version` is 1, `head_len` 0, and
/// `host` is `:authority`).
#[derive(Debug, Clone)]
pub struct RequestHead<'h, 'b> {
    /// Request method.
    pub method: &'b str,
    /// Target in origin form (`/path?query`), or `*` for `OPTIONS *`. Borrowed from the
    /// buffer except for an absolute-form target with an empty path and a query
    /// (`http://h?q` becomes `/?q`, RFC 9112 3.2.2), which has no `/` to borrow.
    pub path: Cow<'b, str>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// The host the request is for: the absolute-form authority, else the Host field.
    pub host: Option<&'b [u8]>,
    /// How the request body is delimited.
    pub framing: Framing,
    /// Whether the client wants the connection kept open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
    /// The Upgrade value, when the client asked to switch protocols.
    pub upgrade: Option<&'b [u8]>,
    /// Tokens of the Connection fields.
    pub connection: ConnectionTokens,
    /// All header fields as received.
    pub headers: &'h [Field<'b>],
    /// Length of the head in the connection's read buffer, including the final empty line (0
    /// when the head did not come as bytes there: an HTTP/2 stream's).
    pub head_len: usize,
}

impl<'b> RequestHead<'_, 'b> {
    /// The value of the first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// Whether a client's field is forwarded as it came: not the Host (sent from `host`), a
    /// hop-by-hop field or one Connection names, `Expect` (answered by the proxy), nor the
    /// X-Forwarded fields the proxy writes itself. The same rule for every upstream protocol.
    pub fn forwards(&self, name: &str) -> bool {
        let n = name.as_bytes();
        !(is_named(n, b"host")
            || is_hop_by_hop(name)
            || is_named(n, b"expect")
            || is_named(n, b"x-forwarded-for")
            || is_named(n, b"x-forwarded-proto")
            || is_named(n, b"x-forwarded-host")
            || self.connection.names(name))
    }

    /// The X-Forwarded-For values the client sent, in order, trimmed; the proxy appends the
    /// client's address after them.
    pub fn forwarded_for(&self) -> impl Iterator<Item = &'b [u8]> + '_ {
        self.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
            .map(|h| h.value.trim_ascii())
    }

    /// About the bytes the head takes as HTTP/1.1 text: its length when it came as text, else
    /// (an HTTP/2 request, read as a value) the request line's and the fields' sizes. What a
    /// buffer for the head sent upstream is sized by, so writing it never grows the buffer.
    pub fn text_size(&self) -> usize {
        if self.head_len > 0 {
            return self.head_len;
        }
        let fields: usize = self
            .headers
            .iter()
            .map(|h| h.name.len() + h.value.len() + 4)
            .sum();
        let host = self.host.map_or(0, |h| h.len() + 8);
        self.method.len() + self.path.len() + 13 + host + fields + 2
    }

    /// Whether a failed attempt may be repeated on another connection (RFC 9110 9.2.2).
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self.method,
            "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE"
        )
    }
}

/// A response head, borrowing what it was read from: an HTTP/1.1 upstream's read buffer
/// (`crate::http1::parse_response`), or an HTTP/2 server's response parts
/// (`crate::http2::upstream`; then `head_len` is 0 and there are no Connection tokens).
/// Its fields are end to end only once the writer for the client's protocol has left out the
/// hop-by-hop ones and those Connection names.
#[derive(Debug)]
pub struct ResponseHead<'h, 'b> {
    /// Status code.
    pub status: u16,
    /// Reason phrase as sent (empty from HTTP/2).
    pub reason: &'b str,
    /// How the body is delimited (already [`Framing::Empty`] for HEAD, 1xx, 204 and 304).
    pub framing: Framing,
    /// The Content-Length the upstream declared, passed on for HEAD and 304.
    pub declared_length: Option<u64>,
    /// Whether the upstream connection may be reused after this response.
    pub reusable: bool,
    /// Tokens of the Connection fields.
    pub connection: ConnectionTokens,
    /// All header fields as received.
    pub headers: &'h [Field<'b>],
    /// Length of the head in the upstream's read buffer (0 when it did not come as bytes
    /// there: an HTTP/2 server's).
    pub head_len: usize,
}

impl ResponseHead<'_, '_> {
    /// An interim (1xx) response other than 101.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// The bytes its fields take as HTTP/1.1 lines (`name: value` and CRLF): what the head
    /// limit counts for a head that did not come as bytes.
    pub fn fields_size(&self) -> usize {
        let lines = self
            .headers
            .iter()
            .map(|h| h.name.len() + h.value.len() + 4);
        lines.sum()
    }
}

/// Whether a response has no body whatever its fields say (RFC 9110 section 6.4.1): it
/// answers HEAD, or is 1xx, 204 or 304.
pub fn has_no_body(status: u16, request_was_head: bool) -> bool {
    request_was_head || (100..200).contains(&status) || status == 204 || status == 304
}

/// Hop-by-hop fields the proxy never forwards (RFC 9110 section 7.6.1), plus the framing fields
/// it always writes itself.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    // By length first: most names are none of these, and are told so by one comparison.
    let candidates: &[&str] = match name.len() {
        2 => &["te"],
        7 => &["upgrade", "trailer"],
        10 => &["connection", "keep-alive"],
        14 => &["content-length"],
        16 => &["proxy-connection"],
        17 => &["transfer-encoding"],
        _ => return false,
    };
    candidates
        .iter()
        .any(|h| is_named(name.as_bytes(), h.as_bytes()))
}

/// Whether `name` is `lower` (lower-case letters and `-` only) in any case: one OR and two
/// compares a byte, where `eq_ignore_ascii_case` lower-cases both sides byte by byte. A proxy
/// compares every field's name this way.
pub(crate) fn is_named(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.iter().all(|&l| l.is_ascii_lowercase() || l == b'-'));
    // `b | 0x20` is `l` only for `l` itself, its upper case, and (for `-`) a control byte,
    // which the second test refuses.
    name.len() == lower.len()
        && name
            .iter()
            .zip(lower)
            .all(|(&b, &l)| b | 0x20 == l && b > b' ')
}

/// Splits a comma-separated field value into trimmed, non-empty elements.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
}

/// Tokens listed in Connection fields, lower-cased; the fields they name are hop-by-hop too.
#[derive(Debug, Default, Clone)]
pub struct ConnectionTokens {
    /// `close` was listed.
    pub close: bool,
    /// `keep-alive` was listed.
    pub keep_alive: bool,
    /// `upgrade` was listed.
    pub upgrade: bool,
    /// Other field names listed, which must not be forwarded.
    pub others: Vec<String>,
}

impl ConnectionTokens {
    /// Adds the tokens of one Connection field value.
    pub fn add(&mut self, value: &[u8]) {
        // The usual values are one token alone: no list to split.
        if is_named(value, b"keep-alive") {
            self.keep_alive = true;
            return;
        }
        if is_named(value, b"close") {
            self.close = true;
            return;
        }
        for token in list_elements(value) {
            if is_named(token, b"close") {
                self.close = true;
            } else if is_named(token, b"keep-alive") {
                self.keep_alive = true;
            } else if is_named(token, b"upgrade") {
                self.upgrade = true;
            } else if let Ok(t) = std::str::from_utf8(token) {
                self.others.push(t.to_ascii_lowercase());
            }
        }
    }

    /// Whether a field is named by a Connection token and so must not be forwarded.
    pub fn names(&self, field: &str) -> bool {
        !self.others.is_empty() && self.others.iter().any(|o| o.eq_ignore_ascii_case(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_names_are_known_in_any_case_and_no_others() {
        let hop = [
            "Connection",
            "KEEP-ALIVE",
            "proxy-connection",
            "TE",
            "Transfer-Encoding",
            "upgrade",
            "Content-Length",
            "Trailer",
        ];
        for name in hop {
            assert!(is_hop_by_hop(name), "{name}");
        }
        let end_to_end = [
            "",
            "t",
            "tee",
            "Trailers",
            "Content-Type",
            "Connectionx",
            "Date",
        ];
        for name in end_to_end {
            assert!(!is_hop_by_hop(name), "{name}");
        }
    }

    #[test]
    fn connection_tokens_alone_or_listed_are_read_alike() {
        let read = |values: &[&[u8]]| {
            let mut tokens = ConnectionTokens::default();
            for v in values {
                tokens.add(v);
            }
            (
                tokens.close,
                tokens.keep_alive,
                tokens.upgrade,
                tokens.others,
            )
        };
        let none = Vec::<String>::new();
        assert_eq!(read(&[b"keep-alive"]), (false, true, false, none.clone()));
        assert_eq!(read(&[b"Keep-Alive"]), (false, true, false, none.clone()));
        assert_eq!(read(&[b"CLOSE"]), (true, false, false, none.clone()));
        assert_eq!(
            read(&[b"close", b"keep-alive"]),
            (true, true, false, none.clone())
        );
        assert_eq!(
            read(&[b"keep-alive, Upgrade"]),
            (false, true, true, none.clone())
        );
        assert_eq!(read(&[b" close ,"]), (true, false, false, none.clone()));
        assert_eq!(
            read(&[b"keep-alives"]),
            (false, false, false, vec!["keep-alives".into()])
        );
        assert_eq!(
            read(&[b"closed, X-A"]),
            (false, false, false, vec!["closed".into(), "x-a".into()])
        );
        assert_eq!(read(&[b""]), (false, false, false, none));
    }

    #[test]
    fn a_name_is_its_lower_case_in_any_case_and_nothing_else() {
        assert!(is_named(b"Keep-Alive", b"keep-alive"));
        assert!(is_named(b"KEEP-ALIVE", b"keep-alive"));
        assert!(is_named(b"", b""));
        // `\r` (0x0d) ORed with 0x20 is `-`; a name one byte off or of another length is
        // another name.
        for other in [
            &b"keep\ralive"[..],
            b"keep_alive",
            b"keep-alivE2",
            b"keep-aliv",
            b"kEEp-aLivf",
        ] {
            assert!(!is_named(other, b"keep-alive"), "{other:?}");
        }
        // Every byte against every letter and `-`: equal exactly when it is one of them in
        // either case.
        for b in 0..=255u8 {
            for l in (b'a'..=b'z').chain([b'-']) {
                assert_eq!(is_named(&[b], &[l]), b.to_ascii_lowercase() == l, "{b} {l}");
            }
        }
    }

    #[test]
    fn fields_are_the_lines_after_the_status_line() {
        let text = b"HTTP/1.1 200 OK\r\nA: 1\r\nnot a field\r\nB:  two words \r\nC:\r\n\r\n";
        let head = ClientHead::new(200, Framing::Empty, text.to_vec());
        let fields: Vec<_> = head.fields().collect();
        let want: [(&[u8], &[u8]); 3] = [(b"A", b"1"), (b"B", b"two words"), (b"C", b"")];
        assert_eq!(fields, want);
        assert!(head.field_bound() >= fields.len());
        // Without line ends at all, or with only the status line.
        let bare = ClientHead::new(200, Framing::Empty, b"HTTP/1.1 200 OK".to_vec());
        assert_eq!(bare.fields().count(), 0);
        let last = ClientHead::new(200, Framing::Empty, b"HTTP/1.1 200 OK\nX: y".to_vec());
        assert_eq!(last.fields().collect::<Vec<_>>(), [(&b"X"[..], &b"y"[..])]);
    }
}
