//! The HTTP/1.1 response head the proxy wrote, as an HTTP/2 response: status and fields, with
//! the connection-specific fields dropped (`connection` and every field it names, `keep-alive`,
//! `proxy-connection`, `transfer-encoding`, `upgrade`), and how its body is delimited.

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};

use crate::http1::{parse_response, Framing, ResponseError, MAX_HEADERS};

/// A complete response head, converted.
#[derive(Debug)]
pub struct ConvertedResponse {
    /// Status and fields for the HEADERS frame.
    pub response: Response<()>,
    /// How the HTTP/1.1 body that follows is delimited.
    pub framing: Framing,
    /// Bytes of the head.
    pub head_len: usize,
}

/// Parses the head at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn from_http1(
    buf: &[u8],
    max_head: usize,
    request_was_head: bool,
) -> Result<Option<ConvertedResponse>, ResponseError> {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let Some(head) = parse_response(buf, &mut storage, max_head, request_was_head)? else {
        return Ok(None);
    };
    let status = StatusCode::from_u16(head.status)
        .map_err(|_| ResponseError::Malformed("invalid status code"))?;
    let mut fields = HeaderMap::with_capacity(head.headers.len());
    // One copy of the head; each value is a slice of it (no allocation per field).
    let shared = bytes::Bytes::copy_from_slice(&buf[..head.head_len]);
    let start = buf.as_ptr() as usize;
    for h in head.headers {
        // Lower-cased by `from_bytes` (without allocating for the common names).
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Err(ResponseError::Malformed("invalid field name"));
        };
        if super::is_connection_specific(name.as_str()) || head.connection.names(name.as_str()) {
            continue;
        }
        let value = h.value.trim_ascii();
        let at = value.as_ptr() as usize - start;
        let value = shared.slice(at..at + value.len());
        let Ok(value) = HeaderValue::from_maybe_shared(value) else {
            return Err(ResponseError::Malformed("invalid field value"));
        };
        fields.append(name, value);
    }
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.headers_mut() = fields;
    Ok(Some(ConvertedResponse {
        response,
        framing: head.framing,
        head_len: head.head_len,
    }))
}

/// Parses a trailer section (`name: value` lines, each ending in CRLF) into fields; lines that
/// are not fields, and fields HTTP/2 forbids, are left out.
pub fn trailer_fields(section: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in section.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let lower = line[..colon].to_ascii_lowercase();
        let Ok(name) = HeaderName::from_bytes(&lower) else {
            continue;
        };
        if super::is_connection_specific(name.as_str()) || name == http::header::CONTENT_LENGTH {
            continue;
        }
        if let Ok(value) = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()) {
            map.append(name, value);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_specific_fields_are_dropped() {
        let head = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\nSet-Cookie: a\r\nSet-Cookie: b\r\n\r\nbody";
        let c = from_http1(head, 8192, false).unwrap().unwrap();
        assert_eq!(c.framing, Framing::Chunked);
        assert_eq!(c.head_len, head.len() - 4);
        let h = c.response.headers();
        assert_eq!(h.len(), 3);
        assert_eq!(h["x-kept"], "yes");
        assert_eq!(h.get_all("set-cookie").iter().count(), 2);
    }

    #[test]
    fn partial_heads_wait_and_heads_of_head_requests_have_no_body() {
        assert!(from_http1(b"HTTP/1.1 200 OK\r\n", 8192, false)
            .unwrap()
            .is_none());
        let c = from_http1(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 8192, true)
            .unwrap()
            .unwrap();
        assert_eq!(c.framing, Framing::Empty);
        assert_eq!(c.response.headers()["content-length"], "9");
    }

    #[test]
    fn trailers_are_parsed() {
        let t = trailer_fields(b"grpc-status: 0\r\nX-Sum:  abc \r\ncontent-length: 1\r\n");
        assert_eq!(t.len(), 2);
        assert_eq!(t["grpc-status"], "0");
        assert_eq!(t["x-sum"], "abc");
    }
}
