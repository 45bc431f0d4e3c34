//! Strict framing (RFC 9112): every ambiguous or malformed request is answered 400 (or 414, 417,
//! 431, 501) and the connection closed, and the upstream receives nothing.

use std::io::{BufReader, Write};

use crate::support::*;

/// Sends `request`, expects `status` then a closed connection, and nothing sent upstream.
fn assert_refused(request: &[u8], status: u16) {
    let up = Upstream::ok(b"should not be reached");
    let proxy = simple_proxy(up.addr);
    // exchange_until_close only returns once the proxy closed the connection.
    let raw = exchange_until_close(proxy.local_addrs()[0], request);
    assert_eq!(
        status_of(&raw),
        status,
        "request {:?} got {:?}",
        String::from_utf8_lossy(request),
        String::from_utf8_lossy(&raw)
    );
    assert!(String::from_utf8_lossy(&raw).contains("Connection: close"));
    assert!(
        up.raw().is_empty(),
        "upstream received {:?}",
        String::from_utf8_lossy(&up.raw())
    );
    assert_eq!(up.connections(), 0);
    proxy.shutdown();
}

#[test]
fn content_length_with_transfer_encoding() {
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        400,
    );
}

#[test]
fn differing_or_invalid_content_length() {
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        400,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
        400,
    );
}

#[test]
fn transfer_encoding_not_ending_in_chunked() {
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        400,
    );
    assert_refused(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
        501,
    );
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
        501,
    );
    assert_refused(
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
}

#[test]
fn bad_chunk_sizes_and_lines() {
    let head = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in [
        b"\r\nhello\r\n0\r\n\r\n".as_slice(),       // empty size
        b"zz\r\nhello\r\n0\r\n\r\n",                // non-hex
        b"-5\r\nhello\r\n0\r\n\r\n",                // sign
        b"10000000000000005\r\nhello\r\n0\r\n\r\n", // overflow
        b"5\nhello\r\n0\r\n\r\n",                   // bare LF after size
        b"5;a\nb\r\nhello\r\n0\r\n\r\n",            // bare LF in extension
        b"5;a\x01b\r\nhello\r\n0\r\n\r\n",          // control byte in extension
        b"5\r\nhelloXX0\r\n\r\n",                   // data not followed by CRLF
    ] {
        assert_refused(&[head.as_slice(), body].concat(), 400);
    }
}

#[test]
fn header_syntax_and_host_rules() {
    assert_refused(
        b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n",
        400,
    );
    assert_refused(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400);
    assert_refused(b"GET / HTTP/1.1\r\n\r\n", 400);
    assert_refused(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    assert_refused(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        400,
    );
    assert_refused(b"GET / HTTP/1.1\r\nHost: a\r\nX-Bad: a\rb\r\n\r\n", 400);
    assert_refused(b"GET / HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\n", 400);
    assert_refused(b"GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    assert_refused(b"GARBAGE\r\n\r\n", 400);
    assert_refused(b"GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", 417);
}

#[test]
fn oversized_heads() {
    let mut long_uri = b"GET /".to_vec();
    long_uri.extend(std::iter::repeat_n(b'a', 20_000));
    long_uri.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_refused(&long_uri, 414);
    let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'b', 20_000));
    big.extend_from_slice(b"\r\n\r\n");
    assert_refused(&big, 431);
    let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_refused(&many, 431);
}

#[test]
fn early_answer_never_parses_the_body_as_a_request() {
    // The request matches no route, so the proxy answers 404 without reading the body. The body
    // holds a smuggled request: the proxy must close rather than read it as the next request.
    let up = Upstream::ok(b"upstream");
    let proxy = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[[sites]]
hosts = ["known.example"]
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
default = true
routes = [{{ path = "/only-this/", upstream = "app" }}]
"#,
        up.addr
    ));
    let smuggled = b"GET /smuggled HTTP/1.1\r\nHost: known.example\r\n\r\n";
    let mut req = format!(
        "POST /x HTTP/1.1\r\nHost: unknown\r\nContent-Length: {}\r\n\r\n",
        smuggled.len()
    )
    .into_bytes();
    req.extend_from_slice(smuggled);
    let raw = exchange_until_close(proxy.local_addrs()[0], &req);
    assert_eq!(status_of(&raw), 404);
    assert_eq!(raw.windows(8).filter(|w| w == b"HTTP/1.1").count(), 1);
    assert!(up.seen().is_empty());
    proxy.shutdown();
}

#[test]
fn chunked_body_ending_early_keeps_the_next_request_separate() {
    // A correctly framed chunked body followed by a pipelined request: the second request must
    // reach the upstream as its own request, not as part of the first body.
    let up = Upstream::start(|req| Reply::Bytes(response(200, req.path().as_bytes())));
    let proxy = simple_proxy(up.addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s);
    assert_eq!(read_response(&mut reader, false).unwrap().body, b"/a");
    assert_eq!(read_response(&mut reader, false).unwrap().body, b"/b");
    let seen = up.seen();
    assert_eq!(seen[0].body, b"hi");
    assert_eq!(seen[1].path(), "/b");
    proxy.shutdown();
}
