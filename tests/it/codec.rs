//! The HTTP/1.1 codec through real sockets: absolute-form targets as the upstream sees them,
//! and chunked trailer fields (validated like header fields, the forbidden ones dropped) on
//! requests and responses.

use std::io::{BufReader, Write};

use crate::support::*;

#[test]
fn absolute_form_with_an_empty_path_keeps_its_query() {
    let up = Upstream::ok(b"ok");
    let proxy = simple_proxy(up.addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(
        b"GET http://a?x=1 HTTP/1.1\r\nHost: a\r\n\r\n\
          GET http://a HTTP/1.1\r\nHost: a\r\n\r\n\
          GET http://a:8080?x HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    for _ in 0..3 {
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
    let paths: Vec<String> = up.seen().iter().map(|s| s.path().to_string()).collect();
    assert_eq!(paths, ["/?x=1", "/", "/?x"]);
    proxy.shutdown();
}

/// A chunked request with a trailer field whose name holds a tab: 400, the connection closed,
/// and (the whole request in hand at once) nothing sent upstream.
#[test]
fn a_request_trailer_with_an_invalid_name_is_refused() {
    let up = Upstream::ok(b"should not be reached");
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    for bad in ["X-Bad\tName: 1", "X-Bad Name: 1", "X-Ok: a\x01b"] {
        let request = format!(
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
             3\r\nabc\r\n0\r\n{bad}\r\n\r\n"
        );
        let raw = exchange_until_close(addr, request.as_bytes());
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(status_of(&raw), 400, "{bad:?}: {text}");
        assert!(text.contains("Connection: close"), "{text}");
    }
    assert!(
        up.raw().is_empty(),
        "{:?}",
        String::from_utf8_lossy(&up.raw())
    );
    // The same when the body streams after 100 Continue (the head has gone upstream by then).
    let mut s = connect(addr);
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).unwrap().status, 100);
    s.write_all(b"3\r\nabc\r\n0\r\nX-Bad\tName: 1\r\n\r\n")
        .unwrap();
    let refused = read_response(&mut reader, false).unwrap();
    assert_eq!(refused.status, 400);
    assert_eq!(refused.header("connection"), Some("close"));
    proxy.shutdown();
}

/// Forbidden trailer fields of a request (framing, Host, X-Forwarded-For, ...) are dropped;
/// the others reach the upstream, whether the body came with the head or streamed after it.
#[test]
fn forbidden_request_trailer_fields_are_dropped() {
    let up = Upstream::ok(b"ok");
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    let body = "3\r\nabc\r\n0\r\nX-Sum: 1\r\nContent-Length: 9\r\nHost: evil\r\n\
                X-Forwarded-For: 6.6.6.6\r\nTransfer-Encoding: chunked\r\nX-Other: 2\r\n\r\n";
    let mut s = connect(addr);
    let head = "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    s.write_all(format!("{head}{body}").as_bytes()).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    s.write_all(
        b"POST /b HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 100);
    s.write_all(body.as_bytes()).unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    for req in &seen {
        let raw = String::from_utf8_lossy(&req.raw).to_string();
        assert!(
            raw.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n"),
            "{raw:?}"
        );
    }
    proxy.shutdown();
}

/// A response's trailer section: an invalid field (a tab in its name) and forbidden ones are
/// dropped, the response completes (its head is out, so no 502 is possible: nginx-like, the
/// field just does not reach the client), the rest passes, also when a trailer line is cut
/// between two reads of the upstream.
#[test]
fn invalid_and_forbidden_response_trailer_fields_are_dropped() {
    let gate = Gate::default();
    let g = gate.clone();
    let up = Upstream::start(move |_| {
        Reply::BytesThen(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\nabc\r\n0\r\nX-Ok: 1\r\nX-Bad\tName: 2\r\nSet-Coo"
                .to_vec(),
            Box::new(Reply::AfterGate(
                g.clone(),
                Box::new(Reply::Bytes(
                    b"kie: a=b\r\nContent-Type: text/evil\r\nX-Also: 3\r\n\r\n".to_vec(),
                )),
            )),
        )
    });
    let proxy = simple_proxy(up.addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    // The first part is through the proxy (up to the line it holds) before the rest is sent.
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    while !raw.ends_with(b"0\r\nX-Ok: 1\r\n") {
        let n = std::io::Read::read(&mut s, &mut chunk).unwrap();
        assert!(n > 0, "{:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&chunk[..n]);
    }
    gate.open();
    std::io::Read::read_to_end(&mut s, &mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(status_of(&raw), 200, "{text}");
    assert!(
        text.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nX-Ok: 1\r\nX-Also: 3\r\n\r\n"),
        "{text:?}"
    );
    proxy.shutdown();
}

/// The same trailer section read whole under `buffer_response`.
#[test]
fn response_trailers_are_filtered_when_buffered_whole() {
    let up = Upstream::start(|_| {
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\nabc\r\n0\r\nX-Ok: 1\r\nX-Bad\tName: 2\r\nContent-Length: 7\r\n\r\n"
                .to_vec(),
        )
    });
    let config = simple_config(up.addr, "").replace(
        "upstream = \"app\" }",
        "upstream = \"app\", buffer_response = \"1MB\" }",
    );
    let proxy = proxy(&config);
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nX-Ok: 1\r\n\r\n"),
        "{text:?}"
    );
    proxy.shutdown();
}

/// A chunk larger than the buffer moves with splice(2) on the epoll path (copied on the ring's)
/// and the trailer section after it is still filtered.
#[test]
fn response_trailers_are_filtered_after_a_spliced_chunk() {
    const LEN: usize = 1 << 20;
    let chunk: Vec<u8> = (0..LEN as u64).map(pattern_byte).collect();
    let mut body = format!("{LEN:x}\r\n").into_bytes();
    body.extend_from_slice(&chunk);
    body.extend_from_slice(b"\r\n0\r\nX-Ok: 1\r\nHost: evil\r\n\r\n");
    let mut reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    reply.extend_from_slice(&body);
    let up = Upstream::start(move |_| Reply::Bytes(reply.clone()));
    let config = simple_config(up.addr, "").replace(
        "workers = 1",
        "workers = 1\n[limits]\nmax_buffer = \"64KB\"",
    );
    let proxy = proxy(&config);
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200);
    let start = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let want_end = b"\r\n0\r\nX-Ok: 1\r\n\r\n";
    assert_eq!(raw.len() - start, body.len() - b"Host: evil\r\n".len());
    assert!(raw[start..].starts_with(&body[..body.len() - 30]));
    assert!(
        raw.ends_with(want_end),
        "{:?}",
        String::from_utf8_lossy(&raw[raw.len() - 40..])
    );
    proxy.shutdown();
}
