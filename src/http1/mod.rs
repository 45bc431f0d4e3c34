//! The HTTP/1.1 codec: parses and validates message heads, tracks body framing and writes the
//! heads the proxy forwards. It never touches a socket (no tokio here), so every rule can be
//! tested on byte strings; `crate::proxy` drives it over real connections.

pub mod body;
pub mod chunked;
pub mod request;
pub mod response;

pub use body::BodyReader;
pub use chunked::{ChunkError, ChunkedReader};
pub use request::{parse_request, RequestError, RequestHead};
pub use response::{parse_response, ResponseError, ResponseHead};

/// Most header fields accepted in one head.
pub const MAX_HEADERS: usize = 128;

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

/// Hop-by-hop fields the proxy never forwards (RFC 9110 section 7.6.1), plus the framing fields
/// it always writes itself.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "trailer",
    ];
    HOP.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// Splits a comma-separated field value into trimmed, non-empty elements.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(|e| e.trim_ascii())
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
        for token in list_elements(value) {
            if token.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
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

/// Parses a Content-Length value: one or more identical `1*DIGIT` elements (RFC 9110 8.6).
/// `None` for anything else: a sign, whitespace inside, differing values, overflow.
pub(crate) fn parse_content_length(value: &[u8], previous: Option<u64>) -> Option<u64> {
    let mut found = previous;
    for element in value.split(|b| *b == b',') {
        let element = element.trim_ascii();
        if element.is_empty() || element.len() > 19 || !element.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = element
            .iter()
            .fold(0u64, |acc, d| acc * 10 + (d - b'0') as u64);
        match found {
            Some(f) if f != n => return None,
            _ => found = Some(n),
        }
    }
    found
}

/// Appends `name: value\r\n`.
pub(crate) fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a decimal number.
pub(crate) fn put_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_rules() {
        assert_eq!(parse_content_length(b"42", None), Some(42));
        assert_eq!(parse_content_length(b"42, 42", None), Some(42));
        assert_eq!(parse_content_length(b"42", Some(42)), Some(42));
        assert_eq!(parse_content_length(b"42", Some(41)), None);
        assert_eq!(parse_content_length(b"1, 2", None), None);
        assert_eq!(parse_content_length(b"+1", None), None);
        assert_eq!(parse_content_length(b"", None), None);
        assert_eq!(parse_content_length(b"1 2", None), None);
        assert_eq!(parse_content_length(b"99999999999999999999", None), None);
    }

    #[test]
    fn decimal() {
        let mut v = Vec::new();
        put_decimal(&mut v, 0);
        v.push(b' ');
        put_decimal(&mut v, 18446744073709551615);
        assert_eq!(v, b"0 18446744073709551615");
    }
}
