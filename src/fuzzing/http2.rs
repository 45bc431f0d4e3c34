//! The fuzz properties of HTTP/2 and gRPC: the client's frames, the server built on `h2`,
//! requests between HTTP/2, the message model and HTTP/1.1, and gRPC's wire facts.

use crate::http1::request::ForwardedFor;

/// The request an HTTP/2 server would get for `head`, when it can carry it: no
/// connection-specific field, no Host (it is `:authority`), `te` only as `trailers`, and the
/// client's method, target (without a fragment) and authority.
pub(super) fn http2_request_is_clean(head: &crate::message::RequestHead<'_, '_>) {
    let fwd = ForwardedFor {
        client: b"192.0.2.1",
        proto: "http",
    };
    let Ok(c) = crate::http2::upstream::request_from_head(head, fwd, "http") else {
        return;
    };
    for (name, value) in c.request.headers() {
        assert!(!crate::http2::is_connection_specific(name.as_str()));
        assert_ne!(name, http::header::HOST);
        if name == http::header::TE {
            assert_eq!(value, "trailers");
        }
    }
    assert_eq!(c.request.method().as_str(), head.method);
    // A fragment (which a request target should not carry) is not sent: `:path` ends before it.
    let path = head.path.split('#').next().unwrap_or_default();
    assert_eq!(c.request.uri().path_and_query().unwrap().as_str(), path);
    let authority = c.request.uri().authority().unwrap().as_str();
    assert_eq!(Some(authority.as_bytes()), head.host);
    // A gRPC-Web text body is shorter once decoded: its length is not passed on.
    if c.web == Some(crate::grpc::web::Encoding::Text) {
        assert!(!c
            .request
            .headers()
            .contains_key(http::header::CONTENT_LENGTH));
    }
}

/// A client's HTTP/2 byte stream (after a first byte that chooses the split size and small
/// limits): never panics, and feeding it in pieces gives the verdict feeding it whole does.
pub fn http2_frames(data: &[u8]) {
    use crate::http2::guard::{FloodLimits, FrameGuard};
    let Some((&seed, data)) = data.split_first() else {
        return;
    };
    let limits = FloodLimits {
        resets_per_sec: 3,
        pings_per_sec: 3,
        settings_per_sec: 3,
        empty_frames_per_sec: 3,
        max_header_block: 1000,
    };
    let whole = FrameGuard::new(limits).feed(data, 0);
    let mut pieces = FrameGuard::new(limits);
    let mut verdict = crate::http2::guard::Verdict::Ok;
    for piece in data.chunks(usize::from(seed % 16) + 1) {
        verdict = pieces.feed(piece, 0);
    }
    assert_eq!(whole, verdict);
}

/// The `h2` server (with the patch in vendor/README.md) fed any bytes after the client
/// preface: it never panics or hangs, and every request it hands out has lower-case token
/// names and values free of CR, LF and NUL (a field HTTP refuses makes its stream malformed;
/// the HPACK state, and so the connection, goes on).
pub fn http2_server(data: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut input = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        input.extend_from_slice(data);
        let client_side = async move {
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            let mut sink = vec![0u8; 16 * 1024];
            while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
        };
        let server_side = async move {
            let Ok(mut conn) = h2::server::handshake(server).await else {
                return;
            };
            while let Some(Ok((request, mut respond))) = conn.accept().await {
                for (name, value) in request.headers() {
                    assert!(
                        !name.as_str().bytes().any(|b| b.is_ascii_uppercase()),
                        "an upper-case name was accepted"
                    );
                    assert!(
                        !value
                            .as_bytes()
                            .iter()
                            .any(|b| matches!(b, b'\r' | b'\n' | 0)),
                        "CR, LF or NUL in an accepted value"
                    );
                }
                let _ = respond.send_response(http::Response::new(()), true);
            }
        };
        tokio::join!(client_side, server_side);
    });
}

/// HTTP/2 to HTTP/1.1 and back. Response side: any bytes as the text of a client head never
/// panic and never give connection-specific fields to the HTTP/2 client, and the fields
/// encoded straight from the text are the same as the map's. Request side: lines
/// `METHOD URI` then `name: value` become an HTTP/2 request; when it is accepted, its head in
/// the message model has Host from `:authority` and the body's framing, and written upstream
/// as HTTP/1.1 it is one our own parser reads back whole, the same.
pub fn http2_convert(data: &[u8]) {
    use crate::http1::Framing;
    use crate::http2::request::{check, BodyKind};
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    const GONE: [&str; 5] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ];
    let status = u16::from(flags) * 4;
    let head = crate::message::ClientHead::new(status, Framing::Chunked, data.to_vec());
    check_response_head(&head, status, &GONE);
    let trailers = crate::http2::response::trailer_fields(data);
    assert!(GONE.iter().all(|n| !trailers.contains_key(*n)));

    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let Some((method, uri)) = lines.next().and_then(|l| l.split_once(' ')) else {
        return;
    };
    let mut builder = http::Request::builder().method(method).uri(uri);
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            builder = builder.header(name.trim(), value.trim());
        }
    }
    let Ok(request) = builder.body(()) else {
        return;
    };
    let (mut parts, ()) = request.into_parts();
    if flags & 4 == 4 {
        // An extended CONNECT (RFC 8441).
        let protocol = if flags & 8 == 8 { "websocket" } else { "other" };
        parts
            .extensions
            .insert(h2::ext::Protocol::from_static(protocol));
    }
    let Ok(request) = check(parts.clone(), flags & 2 == 2) else {
        return;
    };
    let mut storage = crate::http1::request::header_storage();
    // Refusals (too many fields, an Expect value, a bad host) are answered like HTTP/1.1's.
    let Ok(head) = request.head(&mut storage, 1 << 20) else {
        return;
    };
    if let Some(authority) = parts.uri.authority() {
        assert_eq!(head.host, Some(authority.as_str().as_bytes()));
    }
    let want = match request.body {
        BodyKind::None | BodyKind::Length(0) | BodyKind::Tunnel => Framing::Empty,
        BodyKind::Length(n) => Framing::Length(n),
        BodyKind::Chunked => Framing::Chunked,
    };
    let no_body = |f: Framing| {
        if f == Framing::Length(0) {
            Framing::Empty
        } else {
            f
        }
    };
    assert_eq!(no_body(head.framing), want);
    // Forwarded over HTTP/1.1, the head reads back the same.
    let mut text = Vec::new();
    let fwd = crate::http1::request::ForwardedFor {
        client: b"192.0.2.1",
        proto: "https",
    };
    head.write_upstream_head(&mut text, fwd);
    http2_request_is_clean(&head);
    let mut storage = crate::http1::request::header_storage();
    match crate::http1::parse_request(&text, &mut storage, 1 << 20) {
        Ok(Some(back)) => {
            assert_eq!(back.head_len, text.len());
            assert_eq!(back.method, head.method);
            assert_eq!(back.path, head.path);
            assert_eq!(back.host, head.host);
            assert_eq!(no_body(back.framing), want);
            assert_eq!(back.upgrade.is_some(), request.body == BodyKind::Tunnel);
        }
        Ok(None) => panic!("an incomplete head was made"),
        Err(e) => assert_eq!(e, crate::http1::RequestError::HeadTooLarge),
    }
}

/// `http2_convert`'s response side: the map has the head's status and no connection-specific
/// field, and the fields encoded straight from the text are the map's, the same size.
fn check_response_head(head: &crate::message::ClientHead, status: u16, gone: &[&str]) {
    let encoded = crate::http2::response::encode_fields(head);
    if let Ok(response) = crate::http2::response::to_http2(head) {
        // The fields encoded from the text are the map's, the same size.
        let te_refused = response
            .headers()
            .get_all("te")
            .iter()
            .any(|v| v != "trailers");
        match &encoded {
            Ok(fields) => {
                let size: usize = response
                    .headers()
                    .iter()
                    .map(|(n, v)| n.as_str().len() + v.len() + 32)
                    .sum();
                assert_eq!(fields.list_size(), size);
            }
            Err(_) => assert!(te_refused),
        }
        assert_eq!(response.status(), status);
        assert!(gone.iter().all(|n| !response.headers().contains_key(*n)));
        // Nor any field a Connection field names.
        let connection = head
            .fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"));
        for (_, value) in connection {
            for token in crate::message::list_elements(value) {
                let token = String::from_utf8_lossy(token).to_ascii_lowercase();
                assert!(!response.headers().contains_key(token.as_str()));
            }
        }
    }
}

/// gRPC's wire facts: `grpc-timeout` values and health responses never panic; gRPC-Web's
/// base64 decodes in any pieces as it does whole, and what is encoded in pieces decodes back.
/// (The head of a request to an HTTP/2 upstream is checked by `http2_request_is_clean`.)
pub fn grpc(data: &[u8]) {
    grpc_web(data);
    if let Some(t) = crate::grpc::parse_timeout(data) {
        assert!(t <= std::time::Duration::from_secs(99_999_999 * 3600));
    }
    let _ = crate::grpc::health_status(data);
}

fn grpc_web(data: &[u8]) {
    use crate::grpc::web;
    let _ = web::request_type(data);
    let _ = web::response_type(data, web::Encoding::Text);
    let cut = usize::from(data.first().copied().unwrap_or(1)).max(1);
    // Decoding in pieces of `cut` agrees with decoding whole.
    let mut whole = Vec::new();
    let mut decoder = web::Decoder::default();
    let whole_ok = decoder
        .feed(data, &mut whole)
        .and_then(|()| decoder.finish());
    let mut pieces = Vec::new();
    let mut decoder = web::Decoder::default();
    let pieces_ok = data
        .chunks(cut)
        .try_for_each(|c| decoder.feed(c, &mut pieces))
        .and_then(|()| decoder.finish());
    assert_eq!(whole_ok.is_ok(), pieces_ok.is_ok());
    if whole_ok.is_ok() {
        assert_eq!(whole, pieces);
    }
    // Encoding in pieces (padded each) decodes back.
    let mut encoded = Vec::new();
    data.chunks(cut).for_each(|c| web::encode(c, &mut encoded));
    let mut back = Vec::new();
    let mut decoder = web::Decoder::default();
    decoder.feed(&encoded, &mut back).unwrap();
    decoder.finish().unwrap();
    assert_eq!(back, data);
}
