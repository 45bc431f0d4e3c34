//! HTTP/1.1 proxying through real sockets: bodies, keep-alive, pipelining, chunked, errors,
//! headers and routing.

use std::io::{BufReader, Read, Write};
use std::time::Duration;

use crate::support::*;

#[test]
fn body_of_91k_is_byte_exact_through_a_real_client() {
    let body: &'static [u8] = Box::leak(
        (0..93184u64)
            .map(pattern_byte)
            .collect::<Vec<u8>>()
            .into_boxed_slice(),
    );
    let up = Upstream::ok(body);
    let proxy = simple_proxy(up.addr);
    let url = format!("http://{}/page.html", proxy.local_addrs()[0]);
    let mut res = http_client().get(&url).call().unwrap();
    assert_eq!(res.status(), 200);
    let got = res.body_mut().read_to_vec().unwrap();
    assert_eq!(got.len(), body.len());
    assert!(got == body);
    proxy.shutdown();
}

#[test]
fn body_of_100mb_is_byte_exact() {
    const LEN: u64 = 100 * 1024 * 1024;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
        len: LEN,
    });
    let proxy = simple_proxy(up.addr);
    let url = format!("http://{}/big", proxy.local_addrs()[0]);
    let mut res = http_client().get(&url).call().unwrap();
    let mut reader = res.body_mut().as_reader();
    assert_eq!(hash_exactly(&mut reader, LEN), pattern_hash(LEN));
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    proxy.shutdown();
}

#[test]
fn hundred_keep_alive_requests_use_one_upstream_connection() {
    let up = Upstream::ok(b"hello");
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    for i in 0..100 {
        write!(w, "GET /n/{i} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"hello");
    }
    assert_eq!(up.seen().len(), 100);
    assert_eq!(up.connections(), 1);
    // A second client reuses the pooled connection too.
    let mut res = http_client()
        .get(&format!("http://{}/again", proxy.local_addrs()[0]))
        .call()
        .unwrap();
    assert_eq!(res.body_mut().read_to_string().unwrap(), "hello");
    assert_eq!(up.connections(), 1);
    proxy.shutdown();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let up = Upstream::start(|req| Reply::Bytes(response(200, req.path().as_bytes())));
    let proxy = simple_proxy(up.addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(
        b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nPOST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /three HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    for want in ["/one", "/two", "/three"] {
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.body, want.as_bytes());
    }
    let seen = up.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1].body, b"abc");
    proxy.shutdown();
}

#[test]
fn chunked_request_body_streams_to_the_upstream_before_it_ends() {
    let (addr, received) = recording_upstream(b"X-Trailer: t\r\n\r\n", response(200, b"got it"));
    let proxy = simple_proxy(addr);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(
        b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .unwrap();
    // The first chunk reaches the upstream while the client has not finished its body.
    let first_chunk_arrived = || {
        received
            .lock()
            .unwrap()
            .ends_with(b"\r\n\r\n5\r\nhello\r\n")
    };
    assert!(
        eventually(first_chunk_arrived),
        "first chunk not forwarded before the body ended"
    );
    s.write_all(b"6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.body, b"got it");
    let raw = String::from_utf8(received.lock().unwrap().clone()).unwrap();
    assert!(raw.contains("Transfer-Encoding: chunked\r\n"), "{raw}");
    assert!(
        raw.ends_with("\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
        "{raw}"
    );
    proxy.shutdown();
}

/// An upstream that records every byte it receives on its one connection and, once the bytes
/// end with `end`, answers with `reply` (then keeps recording).
fn recording_upstream(
    end: &'static [u8],
    reply: Vec<u8>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = received.clone();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        loop {
            let Ok(n) = s.read(&mut buf) else { return };
            if n == 0 {
                return;
            }
            let mut raw = sink.lock().unwrap();
            raw.extend_from_slice(&buf[..n]);
            if raw.ends_with(end) {
                let _ = s.write_all(&reply);
            }
        }
    });
    (addr, received)
}

/// A response head that comes in pieces (cut inside a field, and between the last field's
/// line end and the blank line) is read on until it is whole: the first read is parsed as it
/// is, and a head cut short is read on. Each answer reaches the client whole, on one
/// keep-alive connection.
#[test]
fn response_head_in_pieces_is_read_until_whole() {
    let pause = Duration::from_millis(100);
    let cuts: [&[&[u8]]; 2] = [
        &[
            b"HTTP/1.1 200 OK\r\nX-Par",
            b"t: one\r\nContent-Length: 3\r\n\r\nabc",
        ],
        &[
            b"HTTP/1.1 201 Created\r\nX-Part: two\r\nContent-Length: 2\r\n",
            b"\r\nde",
        ],
    ];
    let up = Upstream::start(move |seen| {
        let pieces = if seen.path() == "/one" {
            cuts[0]
        } else {
            cuts[1]
        };
        let last = Reply::Bytes(pieces[1].to_vec());
        Reply::BytesThen(
            pieces[0].to_vec(),
            Box::new(Reply::Delay(pause, Box::new(last))),
        )
    });
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut writer = s;
    for (path, status, part, body) in [("/one", 200, "one", "abc"), ("/two", 201, "two", "de")] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n");
        writer.write_all(request.as_bytes()).unwrap();
        let response = read_response(&mut reader, false).unwrap();
        assert_eq!(response.status, status);
        assert_eq!(response.header("x-part"), Some(part));
        assert_eq!(response.body, body.as_bytes());
    }
    assert_eq!(up.connections(), 1);
    proxy.shutdown();
}

#[test]
fn large_request_body_with_content_length_streams_with_backpressure() {
    const LEN: u64 = 256 << 20;
    // The upstream reads the head, then stops reading until the gate opens.
    let gate = Gate::default();
    let held = gate.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let upstream = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut reader = std::io::BufReader::new(s);
        let mut line = String::new();
        while line != "\r\n" {
            line.clear();
            std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        }
        held.wait();
        let hash = hash_exactly(&mut reader, LEN);
        let mut s = reader.into_inner();
        s.write_all(&response(200, format!("{hash:x}").as_bytes()))
            .unwrap();
    });
    let proxy = simple_proxy(up);
    let mut s = connect(proxy.local_addrs()[0]);
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let client = {
        let mut s = s.try_clone().unwrap();
        let written = written.clone();
        std::thread::spawn(move || {
            s.write_all(
                format!("PUT /up HTTP/1.1\r\nHost: a\r\nContent-Length: {LEN}\r\n\r\n").as_bytes(),
            )
            .unwrap();
            let mut chunk = vec![0u8; 1 << 20];
            let mut off = 0;
            while off < LEN {
                fill_pattern(&mut chunk, off);
                s.write_all(&chunk).unwrap();
                off += chunk.len() as u64;
                written.store(off, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // While the upstream reads nothing, the client is held back once the socket buffers, the
    // proxy's buffer and pipe are full: the proxy does not take the body in.
    let load = || written.load(std::sync::atomic::Ordering::SeqCst);
    let mut last = u64::MAX;
    assert!(eventually(|| {
        let now = load();
        let stalled = now == last;
        last = now;
        stalled
    }));
    assert!(load() < 64 << 20, "client got {} MiB ahead", load() >> 20);
    gate.open();
    client.join().unwrap();
    upstream.join().unwrap();
    let r = read_response(&mut BufReader::new(&mut s), false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, format!("{:x}", pattern_hash(LEN)).as_bytes());
    proxy.shutdown();
}

#[test]
fn chunked_response_passes_through_and_close_delimited_is_reframed() {
    let up = Upstream::start(|req| {
        match req.path() {
        "/chunked" => Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n".to_vec(),
        ),
        _ => Reply::BytesThenClose(b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec()),
    }
    });
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(b"GET /chunked HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut reader, false).unwrap();
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body, b"abcdefg");
    // The close-delimited body is re-framed as chunked and the client connection stays open.
    w.write_all(b"GET /close HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut reader, false).unwrap();
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body, b"until close");
    w.write_all(b"GET /chunked HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().body, b"abcdefg");
    // An HTTP/1.0 client gets the chunked body without framing, ended by close.
    let raw = exchange_until_close(proxy.local_addrs()[0], b"GET /chunked HTTP/1.0\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.ends_with("\r\n\r\nabcdefg"), "{text}");
    assert!(!text.to_ascii_lowercase().contains("transfer-encoding"));
    proxy.shutdown();
}

#[test]
fn http10_with_and_without_keep_alive() {
    let up = Upstream::ok(b"ten");
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    let raw = exchange_until_close(addr, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(status_of(&raw), 200);
    assert!(raw.ends_with(b"ten"));
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    for _ in 0..2 {
        w.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert_eq!(r.body, b"ten");
    }
    // Upstream always gets HTTP/1.1.
    assert!(up.seen().iter().all(|s| s.line.ends_with("HTTP/1.1")));
    proxy.shutdown();
}

#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let up = Upstream::start(|req| Reply::Bytes(response(200, &req.body)));
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let interim = read_response(&mut reader, false).unwrap();
    assert_eq!(interim.status, 100);
    w.write_all(b"data").unwrap();
    let r = read_response(&mut reader, false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"data");
    assert_eq!(up.seen()[0].header("expect"), None);
    proxy.shutdown();
}

#[test]
fn head_204_304_and_1xx_have_no_bodies() {
    let up = Upstream::start(|req| match req.path() {
        "/204" => Reply::Bytes(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        "/304" => Reply::Bytes(b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n".to_vec()),
        "/103" => Reply::Bytes(
            [
                b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n".as_slice(),
                &response(200, b"after hints"),
            ]
            .concat(),
        ),
        _ => Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n".to_vec()),
    });
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(b"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let r = read_response(&mut reader, true).unwrap();
    assert_eq!(r.header("content-length"), Some("1234"));
    for path in ["/204", "/304"] {
        write!(w, "GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.status.to_string(), path[1..]);
        assert_eq!(r.header("content-length"), None);
    }
    w.write_all(b"GET /103 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let hints = read_response(&mut reader, false).unwrap();
    assert_eq!(hints.status, 103);
    assert_eq!(hints.header("link"), Some("</s.css>"));
    let r = read_response(&mut reader, false).unwrap();
    assert_eq!(r.body, b"after hints");
    // The connection is still in sync after all of that.
    w.write_all(b"GET /204 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 204);
    proxy.shutdown();
}

#[test]
fn hop_by_hop_headers_are_removed_and_forwarded_headers_set() {
    let up = Upstream::start(|_| {
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: x-secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nX-Kept: k\r\n\r\nok"
                .to_vec(),
        )
    });
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    w.write_all(
        b"GET /h HTTP/1.1\r\nHost: Example.COM:8080\r\nConnection: keep-alive, X-Private\r\nX-Private: p\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nUpgrade: websocket\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nX-Custom: yes\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.header("x-kept"), Some("k"));
    for gone in ["x-secret", "keep-alive", "connection"] {
        assert_eq!(r.header(gone), None, "{gone} leaked to the client");
    }
    let seen = &up.seen()[0];
    for gone in [
        "connection",
        "x-private",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    ] {
        assert_eq!(seen.header(gone), None, "{gone} leaked upstream");
    }
    assert_eq!(seen.header("host"), Some("Example.COM:8080"));
    assert_eq!(seen.header("x-forwarded-for"), Some("192.0.2.1, 127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert_eq!(seen.header("x-forwarded-host"), Some("Example.COM:8080"));
    assert_eq!(seen.header("x-custom"), Some("yes"));
    // The head was rewritten with CRLF line ends.
    let raw = String::from_utf8(seen.raw.clone()).unwrap();
    assert!(raw.split("\r\n").all(|l| !l.contains('\n')));
    proxy.shutdown();
}

#[test]
fn upstream_down_is_502_and_stall_is_504() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = simple_proxy(closed);
    let raw = exchange_until_close(proxy.local_addrs()[0], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status_of(&raw), 502);
    assert_eq!(
        proxy
            .metrics()
            .total(slipstream::observe::metrics::Counter::UpstreamConnectErrors),
        1
    );
    proxy.shutdown();

    let up = Upstream::start(|_| {
        Reply::Delay(
            Duration::from_secs(5),
            Box::new(Reply::Bytes(response(200, b"late"))),
        )
    });
    let proxy = crate::support::proxy(&simple_config(up.addr, "read_timeout = \"300ms\""));
    let raw = exchange_until_close(proxy.local_addrs()[0], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status_of(&raw), 504);
    proxy.shutdown();
}

#[test]
fn stale_pooled_connection_is_replaced_and_idempotent_request_retried() {
    // The upstream answers the first request on each connection and silently drops the second.
    let up = Upstream::start(|req| {
        if req.connection % 2 == 0 && req.path() == "/second" {
            Reply::Close
        } else {
            Reply::Bytes(response(200, req.path().as_bytes()))
        }
    });
    let proxy = simple_proxy(up.addr);
    let url = |p: &str| format!("http://{}{p}", proxy.local_addrs()[0]);
    let client = http_client();
    assert_eq!(
        client
            .get(&url("/first"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap(),
        "/first"
    );
    // The pooled connection fails before any response byte: GET is retried on a new one.
    let mut res = client.get(&url("/second")).call().unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.body_mut().read_to_string().unwrap(), "/second");
    assert_eq!(up.connections(), 2);
    assert_eq!(
        proxy
            .metrics()
            .total(slipstream::observe::metrics::Counter::UpstreamStaleRetries),
        1
    );

    // An upstream that closes its idle connections is noticed before reuse.
    let up = Upstream::start(|req| Reply::BytesThenClose(response(200, req.path().as_bytes())));
    let proxy2 = simple_proxy(up.addr);
    for i in 0..3 {
        let u = format!("http://{}/c{i}", proxy2.local_addrs()[0]);
        let mut r = http_client().get(&u).call().unwrap();
        assert_eq!(r.body_mut().read_to_string().unwrap(), format!("/c{i}"));
    }
    assert_eq!(up.connections(), 3);
    proxy.shutdown();
    proxy2.shutdown();
}

#[test]
fn non_idempotent_request_on_a_new_connection_is_not_retried() {
    // A new connection that takes a POST and closes unanswered: the server may have acted on
    // it, so it is not sent again (a reused connection's close is another matter: see
    // hangups.rs).
    let up = Upstream::start(|req| {
        if req.path() == "/post" {
            Reply::Close
        } else {
            Reply::Bytes(response(200, b"ok"))
        }
    });
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(b"POST /post HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
        .unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 502);
    assert_eq!(up.seen().iter().filter(|s| s.path() == "/post").count(), 1);
    proxy.shutdown();
}

#[test]
fn routes_by_host_and_longest_prefix() {
    let a = Upstream::ok(b"A");
    let b = Upstream::ok(b"B");
    let c = Upstream::ok(b"C");
    let proxy = proxy(&format!(
        r#"
workers = 2
[[listen]]
address = "127.0.0.1:0"
[upstreams.a]
servers = ["{}"]
[upstreams.b]
servers = ["{}"]
[upstreams.c]
servers = ["{}"]
[[sites]]
hosts = ["api.example.com"]
routes = [{{ path = "/", upstream = "a" }}, {{ path = "/v2/", upstream = "b" }}]
[[sites]]
hosts = ["*.example.org"]
routes = [{{ path = "/", upstream = "c" }}]
[[sites]]
hosts = ["static.example.com"]
routes = [{{ path = "/only/", upstream = "b" }}]
"#,
        a.addr, b.addr, c.addr
    ));
    let addr = proxy.local_addrs()[0];
    let get = |host: &str, path: &str| {
        let raw = exchange_until_close(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        (status_of(&raw), raw.last().copied())
    };
    assert_eq!(get("api.example.com", "/v1/x"), (200, Some(b'A')));
    assert_eq!(get("API.example.com:80", "/v2/x"), (200, Some(b'B')));
    assert_eq!(get("www.example.org", "/"), (200, Some(b'C')));
    assert_eq!(get("static.example.com", "/only/x"), (200, Some(b'B')));
    assert_eq!(get("static.example.com", "/other").0, 404);
    // No default site marked: the first site is the default.
    assert_eq!(get("unknown.net", "/").1, Some(b'A'));
    proxy.shutdown();
}

#[test]
fn upgrade_switches_to_a_tunnel_only_after_101() {
    // The upstream answers 101 with a first tunnel message, then echoes what it gets.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let upstream = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut reader = std::io::BufReader::new(s);
        let mut head = String::new();
        let mut line = String::new();
        while line != "\r\n" {
            line.clear();
            std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
            head.push_str(&line);
        }
        let mut s = reader.into_inner();
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\ntunnel-hello")
            .unwrap();
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"ping") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"pong").unwrap();
        (head, got)
    });
    let proxy = simple_proxy(up);
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    read_until(&mut s, &mut got, b"tunnel-hello");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    assert!(text.contains("Upgrade: echo"));
    // Client to upstream, then upstream to client, through the tunnel.
    s.write_all(b"ping").unwrap();
    let mut reply = Vec::new();
    read_until(&mut s, &mut reply, b"pong");
    assert_eq!(reply, b"pong");
    let (head, through) = upstream.join().unwrap();
    assert_eq!(through, b"ping");
    assert!(
        head.contains("Connection: upgrade\r\n") && head.contains("Upgrade: echo\r\n"),
        "{head}"
    );
    proxy.shutdown();
}

/// Reads from `s` into `out` until it ends with `end`.
fn read_until(s: &mut std::net::TcpStream, out: &mut Vec<u8>, end: &[u8]) {
    let mut buf = [0u8; 256];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(out));
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn malformed_or_truncated_upstream_responses() {
    let up = Upstream::start(|req| match req.path() {
        "/garbage" => Reply::BytesThenClose(b"NOT HTTP AT ALL\r\n\r\n".to_vec()),
        "/cl-te" => Reply::BytesThenClose(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                .to_vec(),
        ),
        "/two-lengths" => Reply::BytesThenClose(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(),
        ),
        "/truncated" => Reply::BytesThenClose(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part".to_vec(),
        ),
        "/truncated-big" => Reply::BytesThenClose(
            [
                b"HTTP/1.1 200 OK\r\nContent-Length: 4000000\r\n\r\n".as_slice(),
                &[b'x'; 1_000_000],
            ]
            .concat(),
        ),
        "/bad-chunk" => Reply::BytesThenClose(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        _ => Reply::Bytes(response(200, b"fine")),
    });
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    // Failures found before anything reached the client become 502, even mid-body when the
    // whole response was being collected.
    for path in [
        "/garbage",
        "/cl-te",
        "/two-lengths",
        "/truncated",
        "/bad-chunk",
    ] {
        let raw = exchange_until_close(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
        );
        assert_eq!(
            status_of(&raw),
            502,
            "{path}: {}",
            String::from_utf8_lossy(&raw)
        );
    }
    // Once the head is sent the status cannot change: the client sees the connection close
    // before the declared end, never a complete-looking response.
    let raw = exchange_until_close(addr, b"GET /truncated-big HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status_of(&raw), 200);
    let body_start = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = raw.len() - body_start;
    assert!(body > 0 && body < 4_000_000, "{body} body bytes");
    // The proxy is unharmed.
    let raw = exchange_until_close(
        addr,
        b"GET /ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.ends_with(b"fine"));
    assert!(
        proxy
            .metrics()
            .total(slipstream::observe::metrics::Counter::BadGateway)
            >= 4
    );
    proxy.shutdown();
}

/// After an interim response, a stalled upstream is a timeout like any other: 504, not 502.
#[test]
fn upstream_timeout_after_a_1xx_response_is_504() {
    let up = Upstream::start(|_| {
        Reply::BytesThenHold(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n".to_vec())
    });
    let proxy = crate::support::proxy(&simple_config(up.addr, "read_timeout = \"300ms\""));
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    w.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let early = read_response(&mut reader, false).unwrap();
    assert_eq!(early.status, 103);
    assert_eq!(early.header("link"), Some("</style.css>"));
    let last = read_response(&mut reader, false).unwrap();
    assert_eq!(last.status, 504);
    let counters = proxy.metrics();
    assert_eq!(
        counters.total(slipstream::observe::metrics::Counter::GatewayTimeout),
        1
    );
    assert_eq!(
        counters.total(slipstream::observe::metrics::Counter::BadGateway),
        0
    );
    proxy.shutdown();
}

/// Each upstream group rotates on its own: requests alternating between two groups of two
/// servers reach every server (one cursor shared by all groups sent each group's requests to
/// one server).
#[test]
fn two_interleaved_groups_each_use_both_servers() {
    let servers: Vec<Upstream> = ["a1", "a2", "b1", "b2"]
        .iter()
        .map(|name| {
            let name: &'static str = name;
            Upstream::start(move |_| Reply::Bytes(response(200, name.as_bytes())))
        })
        .collect();
    let config = format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.a]
servers = ["{}", "{}"]
balance = "round_robin"
[upstreams.b]
servers = ["{}", "{}"]
balance = "round_robin"
[[sites]]
default = true
routes = [{{ path = "/a", upstream = "a" }}, {{ path = "/b", upstream = "b" }}]
"#,
        servers[0].addr, servers[1].addr, servers[2].addr, servers[3].addr
    );
    let proxy = crate::support::proxy(&config);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    let mut answers = Vec::new();
    for _ in 0..4 {
        for path in ["/a", "/b"] {
            w.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .unwrap();
            let r = read_response(&mut reader, false).unwrap();
            answers.push(String::from_utf8(r.body).unwrap());
        }
    }
    for (server, name) in servers.iter().zip(["a1", "a2", "b1", "b2"]) {
        assert_eq!(server.seen().len(), 2, "{name}: {answers:?}");
    }
    proxy.shutdown();
}

/// A request pipelined behind a body that streamed (it did not arrive with the head) is read
/// whole and answered.
#[test]
fn request_pipelined_after_a_streamed_body_is_answered() {
    let up = Upstream::start(|req| Reply::Bytes(response(200, &req.body)));
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    w.write_all(b"POST /one HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    // The body and the next request arrive together, after the head was parsed alone (the
    // proxy connects upstream only once it has a whole head).
    let connects = || {
        proxy
            .metrics()
            .total(slipstream::observe::metrics::Counter::UpstreamConnects)
    };
    assert!(eventually(|| connects() == 1));
    w.write_all(b"5\r\nfirst\r\n0\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::new(s);
    assert_eq!(read_response(&mut reader, false).unwrap().body, b"first");
    let second = read_response(&mut reader, false).unwrap();
    assert_eq!(second.status, 200);
    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].line, "GET /two HTTP/1.1");
    proxy.shutdown();
}
