//! The head a client receives ([`ClientHead`]) as an HTTP/2 response: its status and fields,
//! with the connection-specific fields dropped (`connection` and every field it names,
//! `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`). The status and the body's
//! framing are the head's values; nothing is parsed back from HTTP/1.1.

use h2::EncodedFields;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};

use crate::http1::MAX_HEADERS;
use crate::message::{list_elements, ClientHead};

/// The HTTP/2 response for `head`; Err names what HTTP/2 cannot carry (a status outside
/// 100-999, a field name or value it forbids).
pub fn to_http2(head: &ClientHead) -> Result<Response<()>, &'static str> {
    let status = StatusCode::from_u16(head.status).map_err(|_| "invalid status code")?;
    // Heads are bounded where they are read (at most `MAX_HEADERS` fields); a map that would
    // outgrow `http`'s own bound is refused rather than a panic.
    let mut fields = HeaderMap::with_capacity(head.field_bound().min(MAX_HEADERS));
    // One copy of the head; each value is a slice of it (no allocation per field).
    let shared = bytes::Bytes::copy_from_slice(&head.text);
    let start = head.text.as_ptr() as usize;
    // One pass over the head: the fields a Connection field names (rare) are taken out after.
    let mut names_fields = false;
    for (name, value) in head.fields() {
        // Lower-cased by `from_bytes` (without allocating for the common names).
        let name = HeaderName::from_bytes(name).map_err(|_| "invalid field name")?;
        if name == http::header::CONNECTION {
            names_fields |= list_elements(value).next().is_some();
            continue;
        }
        if super::is_connection_specific(name.as_str()) {
            continue;
        }
        let at = value.as_ptr() as usize - start;
        let value = HeaderValue::from_maybe_shared(shared.slice(at..at + value.len()))
            .map_err(|_| "invalid field value")?;
        fields
            .try_append(name, value)
            .map_err(|_| "too many fields")?;
    }
    if names_fields {
        let connection = head
            .fields()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"));
        for token in connection.flat_map(|(_, value)| list_elements(value)) {
            if let Ok(name) = HeaderName::from_bytes(token) {
                fields.remove(name);
            }
        }
    }
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.headers_mut() = fields;
    Ok(response)
}

/// The regular fields of `head` HPACK-encoded for its HEADERS frame, straight from the head's
/// text (no `HeaderMap`, no dynamic table: vendored h2's change 6), with the same fields
/// dropped as [`to_http2`] drops. Err names a field HTTP/2 cannot carry. The block is cut
/// from the thread's shared chunk ([`crate::buffers::shared_room`]) with room for the head's
/// text (the block is shorter but for long fields; past its room it grows, allocating).
pub fn encode_fields(head: &ClientHead) -> Result<EncodedFields, &'static str> {
    let mut named: Vec<&[u8]> = Vec::new();
    loop {
        let room = crate::buffers::shared_room(head.text.len());
        let mut fields = EncodedFields::in_buffer(room);
        let mut names_fields = false;
        for (name, value) in head.fields() {
            if name.eq_ignore_ascii_case(b"connection") {
                names_fields |= list_elements(value).next().is_some();
                continue;
            }
            if is_connection_specific_bytes(name)
                || named.iter().any(|n| n.eq_ignore_ascii_case(name))
            {
                continue;
            }
            if fields.push(name, value).is_err() {
                crate::buffers::give_back_room(fields.take_rest());
                return Err("invalid field");
            }
        }
        crate::buffers::give_back_room(fields.take_rest());
        // Rare: fields named by a Connection field are left out on a second pass.
        if !names_fields || !named.is_empty() {
            return Ok(fields);
        }
        named = head
            .fields()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, value)| list_elements(value))
            .collect();
    }
}

/// [`super::is_connection_specific`] for a name in any case.
fn is_connection_specific_bytes(name: &[u8]) -> bool {
    [
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
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
        let text = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\nX-Kept:  yes \r\nSet-Cookie: a\r\nSet-Cookie: b\r\n\r\n";
        let head = ClientHead::new(200, crate::message::Framing::Chunked, text.to_vec());
        let response = to_http2(&head).unwrap();
        let h = response.headers();
        assert_eq!(h.len(), 3);
        assert_eq!(h["x-kept"], "yes");
        assert_eq!(h.get_all("set-cookie").iter().count(), 2);
    }

    #[test]
    fn the_status_is_the_heads_value() {
        let text = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        let head = ClientHead::new(404, crate::message::Framing::Empty, text);
        assert_eq!(to_http2(&head).unwrap().status(), 404);
        let bad = ClientHead::new(1000, crate::message::Framing::Empty, Vec::new());
        assert!(to_http2(&bad).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore)] // 40,000 fields: minutes under Miri, nothing unsafe to see
    fn a_head_with_more_fields_than_a_map_holds_is_refused() {
        let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..40_000 {
            text.extend_from_slice(format!("x{i}: 1\r\n").as_bytes());
        }
        let huge = ClientHead::new(200, crate::message::Framing::Empty, text);
        assert!(to_http2(&huge).is_err());
    }

    /// One request on a real h2 server-client pair in memory: `answer` responds to it on the
    /// server's side; the response as h2's client decodes it.
    async fn answered_by<F>(answer: F) -> http::Response<h2::RecvStream>
    where
        F: FnOnce(&mut h2::server::SendResponse<bytes::Bytes>) + Send + 'static,
    {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut conn = h2::server::handshake(server_io).await.unwrap();
            let (_request, mut respond) = conn.accept().await.unwrap().unwrap();
            answer(&mut respond);
            // Keeps the connection going until the test is done with it.
            std::future::poll_fn(|cx| conn.poll_closed(cx)).await.ok();
        });
        let (send, conn) = h2::client::handshake(client_io).await.unwrap();
        tokio::spawn(async move { conn.await.ok() });
        let mut send = send.ready().await.unwrap();
        let request = http::Request::get("http://a/").body(()).unwrap();
        let (response, _) = send.send_request(request, true).unwrap();
        let response = response.await.unwrap();
        server.abort();
        response
    }

    /// The vendored h2's own check (patched to one pass over the names) still refuses each
    /// connection-specific field and a TE other than `trailers`, and lets the rest through.
    #[tokio::test]
    #[cfg_attr(miri, ignore)] // a runtime and in-memory pipes: nothing unsafe of ours
    async fn h2_refuses_what_a_response_must_not_carry() {
        let (tell, told) = tokio::sync::oneshot::channel();
        let response = answered_by(move |respond| {
            let bad = [
                ("connection", "close"),
                ("transfer-encoding", "chunked"),
                ("upgrade", "websocket"),
                ("keep-alive", "timeout=5"),
                ("proxy-connection", "close"),
                ("te", "gzip"),
            ];
            let mut passed = Vec::new();
            for (name, value) in bad {
                let mut response = Response::new(());
                response.headers_mut().insert(name, value.parse().unwrap());
                response
                    .headers_mut()
                    .insert("x-fine", "1".parse().unwrap());
                if respond.send_response(response, true).is_ok() {
                    passed.push(name);
                }
            }
            let mut response = Response::new(());
            response
                .headers_mut()
                .insert("te", "trailers".parse().unwrap());
            response
                .headers_mut()
                .insert("x-fine", "1".parse().unwrap());
            let sent = respond.send_response(response, true).is_ok();
            let _ = tell.send((passed, sent));
        })
        .await;
        let (passed, sent) = told.await.unwrap();
        assert!(passed.is_empty(), "h2 let through {passed:?}");
        assert!(sent, "h2 refused a response without a forbidden field");
        assert_eq!(response.headers()["te"], "trailers");
        assert_eq!(response.headers()["x-fine"], "1");
    }

    /// Sends `head` with `encode_fields` and `send_response_fields` on a real h2 connection;
    /// the response as h2's client decodes it.
    async fn through_h2(head: ClientHead) -> http::Response<h2::RecvStream> {
        answered_by(move |respond| {
            let status = StatusCode::from_u16(head.status).unwrap();
            let fields = encode_fields(&head).unwrap();
            respond.send_response_fields(status, fields, true).unwrap();
        })
        .await
    }

    /// Fields encoded from the head's text reach a real client as they were, names
    /// lower-cased, in order, with the connection-specific ones (and those the Connection
    /// field names) left out; long names and values take multi-byte lengths; a name in the
    /// static table past index 15 takes a two-byte index.
    #[tokio::test]
    #[cfg_attr(miri, ignore)] // a runtime and in-memory pipes: nothing unsafe of ours
    async fn encoded_fields_reach_a_client_as_they_were() {
        let long_name = format!("X-{}", "n".repeat(200));
        let lower_name = long_name.to_ascii_lowercase();
        let long_value = "v".repeat(300);
        let text = format!(
            "HTTP/1.1 201 Created\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\n\
             X-Hop: 1\r\nTransfer-Encoding: chunked\r\nContent-Type: text/html\r\n\
             WWW-Authenticate: Basic realm=\"a b\"\r\nX-Tab: a\tb \x7e\r\nSet-Cookie: a=1\r\n\
             Set-Cookie: b=2\r\nTE: trailers\r\nX-Empty:\r\n{long_name}: {long_value}\r\n\r\n"
        );
        let head = ClientHead::new(201, crate::message::Framing::Chunked, text.into_bytes());
        let response = through_h2(head).await;
        assert_eq!(response.status(), 201);
        let got: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        let want = [
            ("content-type", "text/html"),
            ("www-authenticate", "Basic realm=\"a b\""),
            ("x-tab", "a\tb ~"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("te", "trailers"),
            ("x-empty", ""),
            (lower_name.as_str(), long_value.as_str()),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    /// What h2 refuses in a `HeaderMap` it refuses as bytes too, and nothing is appended.
    #[test]
    fn encoded_fields_refuse_what_http2_cannot_carry() {
        let mut fields = EncodedFields::with_capacity(0);
        for (name, value) in [
            (&b"Connection"[..], &b"close"[..]),
            (b"Transfer-Encoding", b"chunked"),
            (b"upgrade", b"h2c"),
            (b"keep-alive", b"1"),
            (b"proxy-connection", b"1"),
            (b"TE", b"gzip"),
            (b"", b"x"),
            (b"bad name", b"x"),
            (b":status", b"200"),
            (b"x", b"a\r\nb"),
            (b"x", b"a\0b"),
            (b"x", b"a\x7fb"),
        ] {
            assert!(fields.push(name, value).is_err(), "{name:?}");
        }
        assert!(fields.is_empty());
        assert_eq!(fields.list_size(), 0);
        fields.push(b"X-A", b"1").unwrap();
        assert_eq!(fields.list_size(), 3 + 1 + 32);
        let bad = ClientHead::new(
            200,
            crate::message::Framing::Empty,
            b"HTTP/1.1 200 OK\r\nTE: gzip\r\n\r\n".to_vec(),
        );
        assert!(encode_fields(&bad).is_err());
    }

    /// Every byte, at the start, middle and end of a value, is taken or refused as
    /// `http::HeaderValue` takes it.
    #[test]
    fn encoded_values_take_the_bytes_a_header_value_takes() {
        for byte in 0..=255u8 {
            for at in [0, 7, 8, 15, 16, 19] {
                let mut value = *b"abcdefghijklmnopqrst";
                value[at] = byte;
                let mut fields = EncodedFields::with_capacity(0);
                assert_eq!(
                    fields.push(b"x-v", &value).is_ok(),
                    http::HeaderValue::from_bytes(&value).is_ok(),
                    "byte {byte:#04x} at {at}"
                );
            }
        }
    }

    /// Every byte, in a short name and in one longer than the lower-casing scratch, is taken
    /// or refused as `http::HeaderName` takes it.
    #[test]
    fn encoded_names_take_the_bytes_a_header_name_takes() {
        for byte in 0..=255u8 {
            for len in [4, 40] {
                let mut name = vec![b'x'; len];
                name[len / 2] = byte;
                let mut fields = EncodedFields::with_capacity(0);
                assert_eq!(
                    fields.push(&name, b"v").is_ok(),
                    http::HeaderName::from_bytes(&name).is_ok(),
                    "byte {byte:#04x} in a name of {len}"
                );
            }
        }
    }

    #[test]
    fn trailers_are_parsed() {
        let t = trailer_fields(b"grpc-status: 0\r\nX-Sum:  abc \r\ncontent-length: 1\r\n");
        assert_eq!(t.len(), 2);
        assert_eq!(t["grpc-status"], "0");
        assert_eq!(t["x-sum"], "abc");
    }
}
