//! The CGI response a FastCGI application writes on STDOUT (RFC 3875 section 6), without I/O:
//! header lines ended by LF or CRLF up to a blank line, where `Status: 404 Not Found` gives the
//! status, a `Location` without `Status` means 302 (as nginx and PHP-FPM treat it), and no
//! `Status` means 200. A `Content-Length` the script set is kept when it is valid; otherwise the
//! proxy frames the body itself.

use crate::http1::MAX_HEADERS;

/// Why a CGI head was refused (the client gets 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgiError {
    /// Not a header block, or a field that is not `name: value`.
    Malformed,
    /// `Status` is not a three-digit code from 100 to 599.
    BadStatus,
    /// `Content-Length` is not a number, or appears twice with different values.
    BadLength,
    /// More header fields, or more bytes, than the proxy accepts.
    TooLarge,
}

impl std::fmt::Display for CgiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgiError::Malformed => "malformed CGI response head",
            CgiError::BadStatus => "invalid CGI Status",
            CgiError::BadLength => "invalid CGI Content-Length",
            CgiError::TooLarge => "CGI response head too large",
        })
    }
}

/// A parsed CGI response head, borrowing the bytes it was parsed from.
#[derive(Debug)]
pub struct CgiHead<'h, 'b> {
    /// The status to send.
    pub status: u16,
    /// The reason phrase from `Status`, if it had one.
    pub reason: Option<&'b str>,
    /// `Content-Length`, when the script set a valid one.
    pub content_length: Option<u64>,
    /// Every field as the script wrote it, `Status` included: the caller writes the client's
    /// head without `Status` and the hop-by-hop fields.
    pub headers: &'h [httparse::Header<'b>],
    /// Bytes of the head, blank line included.
    pub head_len: usize,
}

/// Room for the fields of a CGI head (httparse fills a field list only once it is
/// initialized, unlike the fields after a request or status line).
pub type CgiStorage<'b> = [httparse::Header<'b>; MAX_HEADERS];

/// A new [`CgiStorage`].
pub fn cgi_storage<'b>() -> CgiStorage<'b> {
    [httparse::EMPTY_HEADER; MAX_HEADERS]
}

/// Parses the CGI head at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn parse_cgi_head<'h, 'b>(
    buf: &'b [u8],
    storage: &'h mut CgiStorage<'b>,
    max_head: usize,
) -> Result<Option<CgiHead<'h, 'b>>, CgiError> {
    let (head_len, parsed) = match httparse::parse_headers(buf, storage) {
        Ok(httparse::Status::Complete((n, h))) if n <= max_head => (n, h),
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => {
            return Err(CgiError::TooLarge)
        }
        Ok(httparse::Status::Partial) if buf.len() >= max_head => return Err(CgiError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(CgiError::Malformed),
    };
    let mut status = None;
    let mut reason = None;
    let mut location = false;
    let mut content_length = None;
    for h in parsed.iter() {
        if h.name.eq_ignore_ascii_case("status") {
            let (code, why) = parse_status(h.value)?;
            status = Some(code);
            reason = why;
        } else if h.name.eq_ignore_ascii_case("location") {
            location = true;
        } else if h.name.eq_ignore_ascii_case("content-length") {
            // HTTP/1.1's rule: at most 19 digits, every value the same.
            content_length = Some(
                crate::http1::parse_content_length(h.value, content_length)
                    .ok_or(CgiError::BadLength)?,
            );
        }
    }
    let status = status.unwrap_or(if location { 302 } else { 200 });
    Ok(Some(CgiHead {
        status,
        reason,
        content_length,
        headers: parsed,
        head_len,
    }))
}

/// `404`, `404 Not Found`.
fn parse_status(value: &[u8]) -> Result<(u16, Option<&str>), CgiError> {
    let value = std::str::from_utf8(value.trim_ascii()).map_err(|_| CgiError::BadStatus)?;
    let (code, reason) = value.split_once(' ').unwrap_or((value, ""));
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CgiError::BadStatus);
    }
    let code: u16 = code.parse().map_err(|_| CgiError::BadStatus)?;
    if !(100..=599).contains(&code) {
        return Err(CgiError::BadStatus);
    }
    let reason = reason.trim();
    Ok((code, (!reason.is_empty()).then_some(reason)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Status, reason, length, field names and head length of a parsed head.
    type Parsed = (u16, Option<String>, Option<u64>, Vec<String>, usize);

    fn parse(buf: &[u8]) -> Result<Option<Parsed>, CgiError> {
        let mut storage = cgi_storage();
        parse_cgi_head(buf, &mut storage, 4096).map(|h| {
            h.map(|h| {
                let names = h.headers.iter().map(|x| x.name.to_string()).collect();
                (
                    h.status,
                    h.reason.map(str::to_string),
                    h.content_length,
                    names,
                    h.head_len,
                )
            })
        })
    }

    #[test]
    fn status_location_and_defaults() {
        let (s, r, l, names, n) =
            parse(b"Status: 404 Not Found\r\nContent-Type: text/html\r\n\r\nbody")
                .unwrap()
                .unwrap();
        assert_eq!((s, r.as_deref(), l, n), (404, Some("Not Found"), None, 50));
        assert_eq!(names, ["Status", "Content-Type"]);
        let (s, ..) = parse(b"Location: https://example.com/\n\n")
            .unwrap()
            .unwrap();
        assert_eq!(s, 302);
        let (s, _, l, ..) = parse(b"Content-Type: text/plain\nContent-Length: 5\n\nhello")
            .unwrap()
            .unwrap();
        assert_eq!((s, l), (200, Some(5)));
        let (s, ..) = parse(b"Status: 301\r\nLocation: /x\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(s, 301);
    }

    #[test]
    fn partial_and_bad_heads() {
        assert_eq!(parse(b"Content-Type: text/html\r\n").unwrap(), None);
        assert_eq!(
            parse(b"Status: 20\r\n\r\n").unwrap_err(),
            CgiError::BadStatus
        );
        assert_eq!(
            parse(b"Status: 700\r\n\r\n").unwrap_err(),
            CgiError::BadStatus
        );
        assert_eq!(
            parse(b"Status: abc\r\n\r\n").unwrap_err(),
            CgiError::BadStatus
        );
        assert_eq!(
            parse(b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n").unwrap_err(),
            CgiError::BadLength
        );
        assert_eq!(
            parse(b"Content-Length: -1\r\n\r\n").unwrap_err(),
            CgiError::BadLength
        );
        assert_eq!(
            parse(b"no colon here\r\n\r\n").unwrap_err(),
            CgiError::Malformed
        );
        assert_eq!(parse(&[b'a'; 5000]).unwrap_err(), CgiError::TooLarge);
    }
}
