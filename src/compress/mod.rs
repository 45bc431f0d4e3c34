//! Compression on the fly (gzip, brotli, zstd), socket-free: which responses benefit
//! ([`eligible`]), the head a compressed response gets ([`head::rewrite`]), and the encoders
//! ([`encoder`]). The request path asks for it per route; the coding comes from the client's
//! `Accept-Encoding` (`http1::accept`), ties broken by [`Settings::order`].
//!
//! The same decision serves proxied, FastCGI and static responses, because it reads the
//! [`ClientHead`] each of them composes for the client.

pub mod encoder;
pub mod head;

pub use crate::http1::accept::{Coding, Codings};
use crate::message::ClientHead;
use head::HeadFields;

/// How responses are compressed: the `[compression]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Codings offered, best first: the tie-break between equal q-values.
    pub order: Vec<Coding>,
    /// gzip level, 1 to 9.
    pub gzip_level: u32,
    /// brotli quality, 0 to 11.
    pub brotli_level: u32,
    /// zstd level, 1 to 19.
    pub zstd_level: i32,
    /// Responses known to be shorter than this are sent as they are.
    pub min_length: u64,
    /// Media types compressed (`text/*` and `application/*+json` patterns allowed).
    pub types: Vec<String>,
    /// Bytes of compressed static files each worker keeps in memory (0: none).
    pub static_cache: usize,
    /// Largest static file whose compressed copies are kept; larger ones are compressed as
    /// they are sent.
    pub static_cache_max_file: u64,
}

/// The media types compressed by default: text and the structured text formats that travel
/// as `application/*`, SVG, WebAssembly and uncompressed font formats.
pub const DEFAULT_TYPES: [&str; 12] = [
    "text/*",
    "application/json",
    "application/*+json",
    "application/javascript",
    "application/xml",
    "application/*+xml",
    "application/wasm",
    "application/x-javascript",
    "image/svg+xml",
    "font/ttf",
    "font/otf",
    "application/vnd.ms-fontobject",
];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            order: Coding::ALL.to_vec(),
            gzip_level: 1,
            brotli_level: 3,
            zstd_level: 3,
            min_length: 1024,
            types: DEFAULT_TYPES.iter().map(|t| (*t).to_string()).collect(),
            static_cache: 16 << 20,
            static_cache_max_file: 1 << 20,
        }
    }
}

impl Settings {
    /// Whether responses of this `Content-Type` value are compressed.
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let media = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        self.types.iter().any(|t| type_matches(t.as_bytes(), media))
    }
}

/// `pattern` (lowercase, at most one `*`) against a media type, case-insensitively.
fn type_matches(pattern: &[u8], media: &[u8]) -> bool {
    match pattern.iter().position(|&b| b == b'*') {
        None => pattern.eq_ignore_ascii_case(media),
        Some(star) => {
            let (prefix, suffix) = (&pattern[..star], &pattern[star + 1..]);
            media.len() > prefix.len() + suffix.len()
                && media[..prefix.len()].eq_ignore_ascii_case(prefix)
                && media[media.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }
    }
}

/// Whether the response whose client head is `head` benefits from compression: a status with
/// a full body (not 204, 206 or 304), no content coding yet, no `Cache-Control: no-transform`,
/// a compressible type, and a length (when known) of at least `min_length`, which
/// `identity_refused` waives.
pub fn eligible(head: &ClientHead, settings: &Settings, identity_refused: bool) -> bool {
    let f = HeadFields::scan(head);
    let status_ok = (200..600).contains(&f.status) && !matches!(f.status, 204 | 206 | 304);
    let long_enough = identity_refused || f.content_length.is_none_or(|n| n >= settings.min_length);
    status_ok
        && !f.encoded
        && !f.no_transform
        && !f.content_range
        && long_enough
        && f.content_type.is_some_and(|t| settings.compresses_type(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_type_patterns() {
        let s = Settings::default();
        assert!(s.compresses_type(b"text/html; charset=utf-8"));
        assert!(s.compresses_type(b"Application/JSON"));
        assert!(s.compresses_type(b"application/problem+json"));
        assert!(s.compresses_type(b"application/rss+xml"));
        assert!(s.compresses_type(b"image/svg+xml"));
        assert!(!s.compresses_type(b"image/png"));
        assert!(!s.compresses_type(b"application/octet-stream"));
        assert!(!s.compresses_type(b"text/"));
        assert!(!s.compresses_type(b""));
    }

    fn head(fields: &str) -> ClientHead {
        status(200, fields)
    }

    fn status(status: u16, fields: &str) -> ClientHead {
        let text = format!("HTTP/1.1 {status} X\r\n{fields}\r\n").into_bytes();
        ClientHead::new(status, crate::message::Framing::Chunked, text)
    }

    #[test]
    fn only_what_benefits() {
        let s = Settings::default();
        let ok = "Content-Type: text/html\r\nContent-Length: 5000\r\n";
        assert!(eligible(&head(ok), &s, false));
        assert!(eligible(&head("Content-Type: text/css\r\n"), &s, false));
        let small = head("Content-Type: text/html\r\nContent-Length: 100\r\n");
        assert!(!eligible(&small, &s, false));
        assert!(
            eligible(&small, &s, true),
            "identity;q=0 waives the minimum"
        );
        let image = head("Content-Type: image/jpeg\r\nContent-Length: 5000\r\n");
        assert!(!eligible(&image, &s, false));
        let encoded = head(&format!("{ok}Content-Encoding: gzip\r\n"));
        assert!(!eligible(&encoded, &s, false));
        let identity = head(&format!("{ok}Content-Encoding: identity\r\n"));
        assert!(eligible(&identity, &s, false));
        let nt = head(&format!("{ok}Cache-Control: public, No-Transform\r\n"));
        assert!(!eligible(&nt, &s, false));
        let html = "Content-Type: text/html\r\n";
        assert!(!eligible(&status(206, html), &s, false));
        assert!(!eligible(&status(304, html), &s, false));
        assert!(eligible(&status(404, html), &s, false));
        assert!(!eligible(&head("Content-Length: 5000\r\n"), &s, false));
    }
}
