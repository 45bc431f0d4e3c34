//! The head of a compressed response, made from the HTTP/1.1 head the response would have had:
//! `Content-Encoding` added, `Vary: Accept-Encoding` added or merged (never twice), a strong
//! `ETag` made weak (the bytes differ from the identity's), `Content-Length`,
//! `Transfer-Encoding` and `Accept-Ranges` replaced by the new framing.

use super::Coding;
use crate::http1::{list_elements, put_decimal};

/// What the fields of a response head say about compressing it.
#[derive(Debug, Default)]
pub(super) struct HeadFields<'a> {
    pub(super) status: u16,
    pub(super) content_type: Option<&'a [u8]>,
    pub(super) content_length: Option<u64>,
    /// A content coding other than identity is already applied.
    pub(super) encoded: bool,
    pub(super) no_transform: bool,
    pub(super) content_range: bool,
}

/// The field lines of a head (`Name: value`), without the status line and the blank line.
fn field_lines(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    head.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

impl<'a> HeadFields<'a> {
    pub(super) fn scan(head: &'a [u8]) -> HeadFields<'a> {
        let mut f = HeadFields {
            status: head
                .get(9..12)
                .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
                .unwrap_or(0),
            ..HeadFields::default()
        };
        for (name, value) in field_lines(head) {
            if name.eq_ignore_ascii_case(b"content-type") {
                f.content_type = Some(value);
            } else if name.eq_ignore_ascii_case(b"content-length") {
                f.content_length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            } else if name.eq_ignore_ascii_case(b"content-encoding") {
                f.encoded |= list_elements(value).any(|c| !c.eq_ignore_ascii_case(b"identity"));
            } else if name.eq_ignore_ascii_case(b"cache-control") {
                f.no_transform |=
                    list_elements(value).any(|d| d.eq_ignore_ascii_case(b"no-transform"));
            } else if name.eq_ignore_ascii_case(b"content-range") {
                f.content_range = true;
            }
        }
        f
    }
}

/// How the compressed body is delimited for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressedBody {
    /// Compressed whole before the head was sent: its exact length.
    Length(u64),
    /// Streamed as it is produced, chunked (HTTP/1.1).
    Chunked,
    /// Streamed to an HTTP/1.0 client, ended by closing the connection.
    Close,
    /// No body follows (HEAD): the head is that of the GET response, without a length.
    Bodiless,
    /// A 304 for a response that would be compressed: only the weak ETag and Vary (the
    /// client's cached copy, compressed or not, keeps its own Content-Encoding).
    NotModified,
}

/// The head to send instead of `head` (a complete HTTP/1.1 head ending in a blank line):
/// compressed with `coding` and delimited by `framing`, or, with no coding, the same head with
/// `Vary: Accept-Encoding` (the response depends on the field even when it is not compressed).
pub fn rewrite(head: &[u8], coding: Option<Coding>, framing: CompressedBody) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 64);
    let status_end = head.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.extend_from_slice(&head[..status_end]);
    let mut vary_seen = false;
    for (name, value) in field_lines(head) {
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        if is(b"vary") {
            vary_seen = true;
            let covered = list_elements(value)
                .any(|v| v == b"*" || v.eq_ignore_ascii_case(b"accept-encoding"));
            if !covered {
                put(&mut out, name, value, b", Accept-Encoding");
                continue;
            }
        } else if coding.is_some() && framing == CompressedBody::NotModified {
            if is(b"etag") && value.first() == Some(&b'"') {
                put(&mut out, name, b"W/", value);
                continue;
            }
        } else if coding.is_some() {
            let framing_field = is(b"content-length") || is(b"transfer-encoding");
            if framing_field || is(b"accept-ranges") {
                continue;
            }
            if is(b"connection") && framing == CompressedBody::Close {
                continue;
            }
            if is(b"etag") && value.first() == Some(&b'"') {
                put(&mut out, name, b"W/", value);
                continue;
            }
        }
        put(&mut out, name, value, b"");
    }
    if !vary_seen {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    if let Some(coding) = coding.filter(|_| framing != CompressedBody::NotModified) {
        out.extend_from_slice(b"Content-Encoding: ");
        out.extend_from_slice(coding.name().as_bytes());
        out.extend_from_slice(b"\r\n");
        match framing {
            CompressedBody::Length(n) => {
                out.extend_from_slice(b"Content-Length: ");
                put_decimal(&mut out, n);
                out.extend_from_slice(b"\r\n");
            }
            CompressedBody::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            CompressedBody::Close => out.extend_from_slice(b"Connection: close\r\n"),
            CompressedBody::Bodiless | CompressedBody::NotModified => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn put(out: &mut Vec<u8>, name: &[u8], a: &[u8], b: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\
        ETag: \"abc\"\r\nAccept-Ranges: bytes\r\nConnection: keep-alive\r\n\r\n";

    fn text(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn compressed_heads() {
        let chunked = text(rewrite(
            HEAD.as_bytes(),
            Some(Coding::Gzip),
            CompressedBody::Chunked,
        ));
        assert_eq!(
            chunked,
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: W/\"abc\"\r\n\
             Connection: keep-alive\r\nVary: Accept-Encoding\r\nContent-Encoding: gzip\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        let whole = text(rewrite(
            HEAD.as_bytes(),
            Some(Coding::Br),
            CompressedBody::Length(42),
        ));
        assert!(whole.ends_with("Content-Encoding: br\r\nContent-Length: 42\r\n\r\n"));
        let close = text(rewrite(
            HEAD.as_bytes(),
            Some(Coding::Zstd),
            CompressedBody::Close,
        ));
        assert!(!close.contains("keep-alive"));
        assert!(close.ends_with("Connection: close\r\n\r\n"));
        let head = text(rewrite(
            HEAD.as_bytes(),
            Some(Coding::Gzip),
            CompressedBody::Bodiless,
        ));
        assert!(!head.contains("Content-Length") && !head.contains("Transfer-Encoding"));
    }

    #[test]
    fn vary_merged_once_and_weak_etags_kept() {
        let h = "HTTP/1.1 200 OK\r\nVary: Cookie\r\nETag: W/\"x\"\r\n\r\n";
        let out = text(rewrite(
            h.as_bytes(),
            Some(Coding::Gzip),
            CompressedBody::Chunked,
        ));
        assert!(out.contains("Vary: Cookie, Accept-Encoding\r\n"));
        assert!(out.contains("ETag: W/\"x\"\r\n"));
        let h = "HTTP/1.1 200 OK\r\nvary: accept-encoding\r\n\r\n";
        let out = text(rewrite(h.as_bytes(), None, CompressedBody::Chunked));
        assert_eq!(out, h, "already varies on it: unchanged");
        let out = text(rewrite(HEAD.as_bytes(), None, CompressedBody::Chunked));
        assert!(out.contains("Content-Length: 5000") && out.contains("ETag: \"abc\""));
        assert_eq!(out.matches("Vary:").count(), 1);
    }
}
