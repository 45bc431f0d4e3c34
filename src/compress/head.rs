//! The head of a compressed response, made from the head the response would have had:
//! `Content-Encoding` added, `Vary: Accept-Encoding` added or merged (never twice), a strong
//! `ETag` made weak (the bytes differ from the identity's), `Content-Length`,
//! `Transfer-Encoding` and `Accept-Ranges` replaced by the new framing.

use super::Coding;
use crate::http1::{list_elements, put_decimal};
use crate::message::{ClientHead, Framing};

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

impl<'a> HeadFields<'a> {
    pub(super) fn scan(head: &'a ClientHead) -> HeadFields<'a> {
        let mut f = HeadFields {
            status: head.status,
            ..HeadFields::default()
        };
        for (name, value) in head.fields() {
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

impl CompressedBody {
    /// How the bytes after the head are delimited.
    fn framing(self, before: Framing) -> Framing {
        match self {
            CompressedBody::Length(n) => Framing::Length(n),
            CompressedBody::Chunked => Framing::Chunked,
            CompressedBody::Close => Framing::UntilClose,
            CompressedBody::Bodiless => Framing::Empty,
            CompressedBody::NotModified => before,
        }
    }
}

/// The head to send instead of `head`: compressed with `coding` and delimited by `framing`,
/// or, with no coding, the same head with `Vary: Accept-Encoding` (the response depends on the
/// field even when it is not compressed).
pub fn rewrite(head: &ClientHead, coding: Option<Coding>, framing: CompressedBody) -> ClientHead {
    let text = &head.text;
    let mut out = Vec::with_capacity(text.len() + 64);
    let status_end = text.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.extend_from_slice(&text[..status_end]);
    let mut vary_seen = false;
    for (name, value) in head.fields() {
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
    let framing = match coding {
        Some(_) => framing.framing(head.framing),
        None => head.framing,
    };
    ClientHead::new(head.status, framing, out)
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

    fn text(v: ClientHead) -> String {
        String::from_utf8(v.text.clone()).unwrap()
    }

    fn head(text: &str) -> ClientHead {
        ClientHead::new(200, Framing::Length(5000), text.as_bytes().to_vec())
    }

    #[test]
    fn compressed_heads() {
        let chunked = text(rewrite(
            &head(HEAD),
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
            &head(HEAD),
            Some(Coding::Br),
            CompressedBody::Length(42),
        ));
        assert!(whole.ends_with("Content-Encoding: br\r\nContent-Length: 42\r\n\r\n"));
        let close = text(rewrite(
            &head(HEAD),
            Some(Coding::Zstd),
            CompressedBody::Close,
        ));
        assert!(!close.contains("keep-alive"));
        assert!(close.ends_with("Connection: close\r\n\r\n"));
        let head = text(rewrite(
            &head(HEAD),
            Some(Coding::Gzip),
            CompressedBody::Bodiless,
        ));
        assert!(!head.contains("Content-Length") && !head.contains("Transfer-Encoding"));
        // The framing of what follows, as a value.
        let framing = |body| rewrite(&self::head(HEAD), Some(Coding::Gzip), body).framing;
        assert_eq!(framing(CompressedBody::Chunked), Framing::Chunked);
        assert_eq!(framing(CompressedBody::Length(42)), Framing::Length(42));
        assert_eq!(framing(CompressedBody::Close), Framing::UntilClose);
        assert_eq!(framing(CompressedBody::Bodiless), Framing::Empty);
        let vary_only = rewrite(&self::head(HEAD), None, CompressedBody::Chunked);
        assert_eq!(vary_only.framing, Framing::Length(5000));
    }

    #[test]
    fn vary_merged_once_and_weak_etags_kept() {
        let h = "HTTP/1.1 200 OK\r\nVary: Cookie\r\nETag: W/\"x\"\r\n\r\n";
        let out = text(rewrite(
            &head(h),
            Some(Coding::Gzip),
            CompressedBody::Chunked,
        ));
        assert!(out.contains("Vary: Cookie, Accept-Encoding\r\n"));
        assert!(out.contains("ETag: W/\"x\"\r\n"));
        let h = "HTTP/1.1 200 OK\r\nvary: accept-encoding\r\n\r\n";
        let out = text(rewrite(&head(h), None, CompressedBody::Chunked));
        assert_eq!(out, h, "already varies on it: unchanged");
        let out = text(rewrite(&head(HEAD), None, CompressedBody::Chunked));
        assert!(out.contains("Content-Length: 5000") && out.contains("ETag: \"abc\""));
        assert_eq!(out.matches("Vary:").count(), 1);
    }
}
