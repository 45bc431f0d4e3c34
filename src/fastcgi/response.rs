//! The HTTP response a client gets for a CGI response, without I/O: the status line from
//! `Status` (or 200, or 302 for a bare `Location`), the script's fields minus `Status` and the
//! hop-by-hop ones, a `Date`, and framing the proxy chose: the script's `Content-Length`, the
//! length of a body that arrived whole, chunked for an HTTP/1.1 client, or the end of the
//! connection for HTTP/1.0 (the body itself is framed as it is written, in `proxy::fastcgi`).

use super::cgi::CgiHead;
use crate::http1::response::put_status_line;
use crate::message::Framing;

/// Fields never passed from a script: `Status` becomes the status line; the rest describe one
/// connection or the framing, which the proxy decides.
const DROPPED: [&str; 9] = [
    "status",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Whether a response with `status` to a request (HEAD or not) carries no body.
pub fn bodiless(status: u16, is_head: bool) -> bool {
    is_head || status == 204 || status == 304 || status < 200
}

/// Writes the client's response head for `cgi` into `out`.
pub fn write_head(
    out: &mut Vec<u8>,
    cgi: &CgiHead<'_, '_>,
    framing: Framing,
    keep_alive: bool,
    minor_version: u8,
    date: &[u8],
) {
    let reason = cgi
        .reason
        .filter(|r| r.bytes().all(|b| b == b'\t' || (b' '..0x7f).contains(&b)));
    put_status_line(out, minor_version, cgi.status, reason);
    let mut has_date = false;
    for h in cgi.headers {
        if DROPPED.iter().any(|d| h.name.eq_ignore_ascii_case(d)) {
            continue;
        }
        has_date |= h.name.eq_ignore_ascii_case("date");
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
    }
    let length = match framing {
        Framing::Length(n) => Some(n),
        Framing::Empty => cgi.content_length,
        Framing::Chunked | Framing::UntilClose => None,
    };
    if let Some(n) = length {
        out.extend_from_slice(b"Content-Length: ");
        crate::http1::put_decimal(out, n);
        out.extend_from_slice(b"\r\n");
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    match (keep_alive, minor_version) {
        (false, 1) => out.extend_from_slice(b"Connection: close\r\n"),
        (true, 0) => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastcgi::cgi::cgi_storage;
    use crate::fastcgi::cgi::parse_cgi_head;

    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    fn head(cgi: &[u8], framing: Framing, keep_alive: bool, minor: u8) -> String {
        let mut storage = cgi_storage();
        let parsed = parse_cgi_head(cgi, &mut storage, 8192).unwrap().unwrap();
        let mut out = Vec::new();
        write_head(&mut out, &parsed, framing, keep_alive, minor, DATE);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn status_fields_and_framing() {
        let cgi = b"Status: 404 Gone Fishing\r\nContent-Type: text/plain\r\nConnection: x\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n";
        assert_eq!(
            head(cgi, Framing::Chunked, true, 1),
            "HTTP/1.1 404 Gone Fishing\r\nContent-Type: text/plain\r\nSet-Cookie: a=1\r\n\
             Set-Cookie: b=2\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        let cgi = b"Location: /next\nContent-Length: 99\n\n";
        assert_eq!(
            head(cgi, Framing::Length(3), false, 1),
            "HTTP/1.1 302 Found\r\nLocation: /next\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             Content-Length: 3\r\nConnection: close\r\n\r\n"
        );
        // HEAD keeps the script's length; HTTP/1.0 keep-alive says so.
        let cgi = b"Content-Length: 10\r\nDate: today\r\n\r\n";
        assert_eq!(
            head(cgi, Framing::Empty, true, 0),
            "HTTP/1.0 200 OK\r\nDate: today\r\nContent-Length: 10\r\nConnection: keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn bodiless_statuses() {
        assert!(bodiless(304, false) && bodiless(204, false) && bodiless(200, true));
        assert!(!bodiless(200, false));
    }
}
