//! HTTP/2 to clients through real sockets, with the `h2` crate as the client over TLS (ALPN) and
//! h2c: many streams on one connection, large bodies both ways with a slow reader and bounded
//! memory, trailers both ways, a stream reset mid-response, static files and the access log;
//! and a real HTTP/2 server (nginx, h2c) answering HTTP/1.1 clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use slipstream::observe::metrics::Counter;

use crate::support::*;
use crate::tls::{h2_client_config, tls_config, TestPki};

/// A current-thread runtime for one test's client side.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 client connection over TLS (SNI `a.test`, ALPN h2); checks h2 was negotiated.
pub(crate) async fn h2_tls(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let config: Arc<rustls::ClientConfig> = h2_client_config(&[&rustls::version::TLS13]);
    let name = rustls::pki_types::ServerName::try_from("a.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    send
}

/// An HTTP/2 client connection with prior knowledge over plain TCP (h2c).
pub(crate) async fn h2c(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    send
}

/// Reads a whole body, giving the window back as it goes.
pub(crate) async fn body_of(mut body: h2::RecvStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        body.flow_control().release_capacity(d.len()).unwrap();
        out.extend_from_slice(&d);
    }
    out
}

/// A GET of `path` on `client`; the response head and body.
pub(crate) async fn get(
    client: &mut SendRequest<Bytes>,
    authority: &str,
    path: &str,
) -> (http::response::Parts, Vec<u8>) {
    let req = http::Request::get(format!("https://{authority}{path}"))
        .body(())
        .unwrap();
    let mut ready = client.clone().ready().await.unwrap();
    let (response, _) = ready.send_request(req, true).unwrap();
    let (parts, body) = response.await.unwrap().into_parts();
    (parts, body_of(body).await)
}

/// A one-worker proxy with an h2c listener routing everything to `upstream`; `extra` goes
/// before the listener.
pub(crate) fn h2c_config(upstream: SocketAddr, extra: &str) -> String {
    format!(
        r#"
workers = 1
{extra}
[[listen]]
address = "{{listen}}"
h2c = true
[upstreams.app]
servers = ["{upstream}"]
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#
    )
}

/// The in-process proxy of [`h2c_config`].
pub(crate) fn h2c_proxy(upstream: SocketAddr, extra: &str) -> slipstream::server::Server {
    proxy(&h2c_config(upstream, extra).replace("{listen}", "127.0.0.1:0"))
}

#[test]
fn many_concurrent_streams_on_one_tls_connection() {
    let pki = TestPki::new("h2-many");
    let up = Upstream::start(|seen| Reply::Bytes(response(200, seen.path().as_bytes())));
    let proxy = proxy(&tls_config(&pki, up.addr, 1, ""));
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let client = h2_tls(addr).await;
        let mut waiting = Vec::new();
        for i in 0..100 {
            let req = http::Request::get(format!("https://a.test/s/{i}"))
                .body(())
                .unwrap();
            let mut ready = client.clone().ready().await.unwrap();
            let (response, _) = ready.send_request(req, true).unwrap();
            waiting.push(response);
        }
        for (i, response) in waiting.into_iter().enumerate() {
            let (parts, body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            assert_eq!(parts.version, http::Version::HTTP_2);
            assert_eq!(body_of(body).await, format!("/s/{i}").as_bytes());
        }
    });
    let seen = up.seen();
    assert_eq!(seen.len(), 100);
    for s in &seen {
        // :authority became Host; the upstream speaks HTTP/1.1 and learns the scheme.
        assert_eq!(s.header("host"), Some("a.test"));
        assert_eq!(s.header("x-forwarded-proto"), Some("https"));
        assert!(s.line.ends_with(" HTTP/1.1"), "{}", s.line);
    }
    let m = proxy.metrics();
    assert_eq!(m.total(Counter::Http2Connections), 1);
    assert_eq!(m.total(Counter::Http2Streams), 100);
}

#[test]
fn connection_specific_response_fields_are_dropped_and_1xx_passed_on() {
    let up = Upstream::start(|_| {
        Reply::Bytes(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\n\
              X-Hop: secret\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
        )
    });
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        let (parts, body) = get(&mut client, "a", "/").await;
        assert_eq!(parts.status, 200);
        assert_eq!(body, b"ok");
        let h = &parts.headers;
        assert_eq!(h["x-kept"], "yes");
        for gone in ["connection", "keep-alive", "x-hop", "transfer-encoding"] {
            assert!(h.get(gone).is_none(), "{gone} was forwarded");
        }
    });
    // The 103 itself: read with a raw client, which sees every HEADERS frame.
    let frames = crate::http2_frames::exchange(
        addr,
        &[crate::http2_frames::headers(
            1,
            true,
            &crate::http2_frames::get_block("/"),
        )],
    );
    let heads: Vec<_> = frames
        .iter()
        .filter(|f| f.kind == 1 && f.stream == 1)
        .collect();
    assert_eq!(heads.len(), 2, "103 and 200: {frames:?}");
}

#[test]
fn trailers_pass_both_ways() {
    let up = Upstream::start(|_| {
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\n\r\n\
              5\r\nhello\r\n0\r\nx-sum: 42\r\n\r\n"
                .to_vec(),
        )
    });
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let client = h2c(addr).await;
        let req = http::Request::post("http://a/upload").body(()).unwrap();
        let mut ready = client.ready().await.unwrap();
        let (response, mut send) = ready.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"abc"), false).unwrap();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", "abc123".parse().unwrap());
        send.send_trailers(trailers).unwrap();
        let (parts, mut body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        let mut data = Vec::new();
        while let Some(d) = body.data().await {
            data.extend_from_slice(&d.unwrap());
        }
        assert_eq!(data, b"hello");
        let t = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(t["x-sum"], "42");
    });
    let seen = up.seen();
    assert_eq!(seen[0].header("transfer-encoding"), Some("chunked"));
    let raw = String::from_utf8_lossy(&up.raw()).to_string();
    assert!(
        raw.ends_with("3\r\nabc\r\n0\r\nx-checksum: abc123\r\n\r\n"),
        "{raw:?}"
    );
}

/// Accepts one upstream connection and reads its request head: the connection's writer, and
/// its reader at the body.
fn accept_past_head(
    listener: &std::net::TcpListener,
) -> (std::net::TcpStream, std::io::BufReader<std::net::TcpStream>) {
    use std::io::BufRead;
    let (s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let w = s.try_clone().unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    while line != "\r\n" {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "no request head");
    }
    (w, r)
}

/// An upstream that answers (a chunked response head, and the body so far) as soon as it has
/// 10 request body bytes, then echoes each chunk of the request body as it comes, and ends
/// its response when the request body ends; returns the request body it got.
fn echo_as_it_comes() -> (SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    use std::io::{BufRead, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let thread = std::thread::spawn(move || {
        let (mut w, mut r) = accept_past_head(&listener);
        let mut line = String::new();
        let (mut got, mut answered) = (Vec::new(), 0);
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let len = usize::from_str_radix(line.trim(), 16).expect("a chunk size line");
            if len == 0 {
                break;
            }
            let mut chunk = vec![0; len + 2];
            r.read_exact(&mut chunk).unwrap();
            got.extend_from_slice(&chunk[..len]);
            if got.len() < 10 {
                continue;
            }
            if answered == 0 {
                w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .unwrap();
            }
            let new = &got[answered..];
            w.write_all(format!("{:x}\r\n", new.len()).as_bytes())
                .unwrap();
            w.write_all(&[new, b"\r\n"].concat()).unwrap();
            answered = got.len();
        }
        w.write_all(b"0\r\n\r\n").unwrap();
        got
    });
    (addr, thread)
}

/// Reads `body` until `out` holds `len` bytes, within a guard.
async fn read_up_to(body: &mut h2::RecvStream, out: &mut Vec<u8>, len: usize) {
    let read = async {
        while out.len() < len {
            let d = body.data().await.expect("body ended early").unwrap();
            body.flow_control().release_capacity(d.len()).unwrap();
            out.extend_from_slice(&d);
        }
    };
    let guard = tokio::time::timeout(Duration::from_secs(10), read).await;
    assert!(
        guard.is_ok(),
        "only {:?} came back",
        String::from_utf8_lossy(out)
    );
}

/// A stream whose body trickles is forwarded DATA frame by DATA frame, and its response flows
/// while the body still comes (gRPC bidirectional streaming): nothing waits for 64 KiB or the
/// end of the body (the body timeout is a minute; the guards, 10 s).
#[test]
fn a_bidirectional_stream_is_echoed_frame_by_frame() {
    let (up, upstream) = echo_as_it_comes();
    let proxy = h2c_proxy(up, "[limits]\nclient_body_timeout = \"60s\"");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let client = h2c(addr).await;
        let req = http::Request::post("http://a/stream").body(()).unwrap();
        let mut ready = client.ready().await.unwrap();
        let (response, mut send) = ready.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"0123456789"), false)
            .unwrap();
        let head = tokio::time::timeout(Duration::from_secs(10), response).await;
        let response = head
            .expect("no response head while the body is open")
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut echoed = Vec::new();
        read_up_to(&mut body, &mut echoed, 10).await;
        assert_eq!(echoed, b"0123456789");
        send.send_data(Bytes::from_static(b"abcdef"), false)
            .unwrap();
        read_up_to(&mut body, &mut echoed, 16).await;
        assert_eq!(echoed, b"0123456789abcdef");
        send.send_data(Bytes::from_static(b"xyz"), true).unwrap();
        read_up_to(&mut body, &mut echoed, 19).await;
        let rest = tokio::time::timeout(Duration::from_secs(10), body_of(body)).await;
        assert_eq!(rest.expect("the response ends with the request"), b"");
        assert_eq!(echoed, b"0123456789abcdefxyz");
    });
    assert_eq!(upstream.join().unwrap(), b"0123456789abcdefxyz");
}

/// An upstream that answers a whole response before the request body has ended (it reads the
/// head only): the client gets it without ending its body.
#[test]
fn a_response_that_comes_before_the_body_ends_is_not_held_back() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = listener.local_addr().unwrap();
    let upstream = std::thread::spawn(move || {
        let (mut w, mut r) = accept_past_head(&listener);
        w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            .unwrap();
        // Until the proxy lets go of the connection.
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
    });
    let proxy = h2c_proxy(up, "[limits]\nclient_body_timeout = \"60s\"");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let client = h2c(addr).await;
        let req = http::Request::post("http://a/upload").body(()).unwrap();
        let mut ready = client.ready().await.unwrap();
        let (response, mut send) = ready.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"start"), false).unwrap();
        let head = tokio::time::timeout(Duration::from_secs(10), response).await;
        let (parts, body) = head.expect("held back").unwrap().into_parts();
        assert_eq!(parts.status, 200);
        let body = tokio::time::timeout(Duration::from_secs(10), body_of(body)).await;
        assert_eq!(body.expect("the body ends"), b"early");
    });
    upstream.join().unwrap();
    assert!(eventually(
        || proxy.metrics().total(Counter::ResponsesOk) == 1
    ));
}

#[test]
fn a_reset_stream_does_not_leave_its_upstream_connection_in_the_pool() {
    const LEN: u64 = 64 << 20;
    let up = Upstream::start(|seen| {
        if seen.path() == "/big" {
            Reply::Pattern {
                head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
                len: LEN,
            }
        } else {
            Reply::Bytes(response(200, b"small"))
        }
    });
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        // A finished response leaves its connection for the next request.
        assert_eq!(get(&mut client, "a", "/one").await.1, b"small");
        assert_eq!(get(&mut client, "a", "/two").await.1, b"small");
        assert_eq!(up.connections(), 1);
        // A response the client resets part way is cut off upstream too.
        let req = http::Request::get("http://a/big").body(()).unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (response, _) = ready.send_request(req, true).unwrap();
        let mut body = response.await.unwrap().into_body();
        let first = body.data().await.unwrap().unwrap();
        assert!(!first.is_empty());
        drop(body); // RST_STREAM(CANCEL)
        assert_eq!(get(&mut client, "a", "/three").await.1, b"small");
    });
    assert_eq!(
        up.connections(),
        2,
        "the reset stream's connection was reused"
    );
    let sent = up.written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(sent < LEN, "the whole body was sent after the reset");
}

#[test]
fn static_files_and_the_access_log_over_http2() {
    let root = temp_path("h2-files");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let big: Vec<u8> = (0..300_000u64).map(pattern_byte).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let log = temp_path("h2-files.log");
    let _ = std::fs::remove_file(&log);
    let toml = format!(
        "workers = 1\naccess_log = {:?}\naccess_log_format = \"$request $status $body_bytes_sent\"\n\
         [[listen]]\naddress = \"127.0.0.1:0\"\nh2c = true\n[[sites]]\ndefault = true\n\
         routes = [{{ path = \"/\", root = {root:?} }}, \
         {{ path = \"/empty/\", root = {root:?}, try_files = [\"$uri\", \"=204\"] }}]\n",
        log.display().to_string(),
        root = root.display().to_string()
    );
    let proxy = proxy(&toml);
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        let (parts, body) = get(&mut client, "a", "/big.bin").await;
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["content-length"], "300000");
        assert!(body == big, "static body differs");
        let (parts, body) = get(&mut client, "a", "/missing").await;
        assert_eq!(parts.status, 404);
        assert!(parts.headers.get("connection").is_none());
        drop(body);
        // A 204 of the proxy's own has no body (DATA on it would be malformed).
        let (parts, body) = get(&mut client, "a", "/empty/x").await;
        assert_eq!(parts.status, 204);
        assert!(body.is_empty(), "{body:?}");
    });
    // HTTP/1.1 still works on the same h2c listener.
    let plain = exchange_until_close(
        addr,
        b"GET /big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&plain), 200);
    proxy.shutdown();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "GET /big.bin HTTP/2.0 200 300000\nGET /missing HTTP/2.0 404 0\nGET /empty/x HTTP/2.0 204 0\nGET /big.bin HTTP/1.1 200 300000\n"
    );
}

/// A GET of /big over h2c: its response body, still to be read.
async fn get_big(addr: SocketAddr) -> h2::RecvStream {
    let client = h2c(addr).await;
    let req = http::Request::get("http://a/big").body(()).unwrap();
    let mut ready = client.ready().await.unwrap();
    let (response, _) = ready.send_request(req, true).unwrap();
    response.await.unwrap().into_body()
}

/// Reads `len` bytes of the test pattern from `body`, slowly for the first `slow` bytes;
/// returns their hash.
async fn read_pattern(mut body: h2::RecvStream, len: u64, slow: u64, up: &Upstream) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut got = 0u64;
    let before = up.written.load(std::sync::atomic::Ordering::SeqCst);
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        got += d.len() as u64;
        h.update(&d);
        body.flow_control().release_capacity(d.len()).unwrap();
        if got < slow {
            tokio::time::sleep(Duration::from_micros(500)).await;
        } else if got - (d.len() as u64) < slow {
            // Flow control held the upstream back while the client read slowly.
            let sent = up.written.load(std::sync::atomic::Ordering::SeqCst) - before;
            assert!(
                sent.saturating_sub(got) < 48 << 20,
                "upstream ran {} MiB ahead",
                (sent - got) >> 20
            );
        }
    }
    assert_eq!(got, len);
    h.digest128()
}

#[test]
fn large_bodies_both_ways_with_a_slow_reader_and_bounded_memory() {
    const LEN: u64 = 256 << 20;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
        len: LEN,
    });
    let running = Running::config("h2-large.toml", &h2c_config(up.addr, ""));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let body = get_big(running.addr).await;
        let hash = read_pattern(body, LEN, 16 << 20, &up).await;
        assert_eq!(hash, pattern_hash(LEN));
    });
    let hashing = crate::large_bodies::hashing_upstream();
    let uploads = Running::config("h2-upload.toml", &h2c_config(hashing, ""));
    local.block_on(&runtime(), async {
        let client = h2c(uploads.addr).await;
        let req = http::Request::put("http://a/upload")
            .header("content-length", LEN.to_string())
            .body(())
            .unwrap();
        let mut ready = client.ready().await.unwrap();
        let (response, mut send) = ready.send_request(req, false).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0u64;
        while pos < LEN {
            fill_pattern(&mut buf, pos);
            send.reserve_capacity(buf.len());
            let mut offset = 0;
            while offset < buf.len() {
                let cap = std::future::poll_fn(|cx| send.poll_capacity(cx))
                    .await
                    .unwrap()
                    .unwrap();
                let n = cap.min(buf.len() - offset);
                let end = pos + (offset + n) as u64 == LEN;
                send.send_data(Bytes::copy_from_slice(&buf[offset..offset + n]), end)
                    .unwrap();
                offset += n;
            }
            pos += buf.len() as u64;
        }
        let (parts, body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        assert_eq!(
            body_of(body).await,
            format!("{:032x}", pattern_hash(LEN)).as_bytes()
        );
    });
    for r in [&running, &uploads] {
        let peak = r.status_kb("VmHWM");
        assert!(peak < 64 * 1024, "proxy peak RSS {peak} kB");
    }
}

#[test]
fn fastcgi_over_http2_with_a_body_of_unknown_length() {
    let fpm = crate::fastcgi::PhpFpm::start("h2");
    fpm.script(
        "echo.php",
        "<?php header('X-From-Php: yes'); $b = file_get_contents('php://input'); \
         echo $_SERVER['REQUEST_METHOD'], ' ', strlen($b), ' ', md5($b), ' ', $_SERVER['SERVER_PROTOCOL'], \
         ' ', $_SERVER['SERVER_NAME'], ' ', $_SERVER['HTTP_X_TEST'], ' ', $_SERVER['HTTP_COOKIE'];",
    );
    let toml = format!(
        "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\nh2c = true\n[upstreams.php]\n\
         protocol = \"fastcgi\"\nservers = [\"{}\"]\nroot = {:?}\n[[sites]]\ndefault = true\n\
         routes = [{{ path = \"/\", upstream = \"php\" }}]\n",
        fpm.tcp,
        fpm.root.display().to_string()
    );
    let proxy = proxy(&toml);
    let addr = proxy.local_addrs()[0];
    let body: Vec<u8> = (0..300_000u64).map(pattern_byte).collect();
    let md5 = format!("{:x}", md5::compute(&body));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        // No content-length: the proxy sends it chunked and reads it whole for PHP.
        // The head reaches PHP's variables from the message model: the host from
        // :authority, each field, split cookies joined.
        let req = http::Request::post("http://a/echo.php")
            .header("x-test", "h2")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (response, mut send) = ready.send_request(req, false).unwrap();
        for piece in body.chunks(50_000) {
            send.send_data(Bytes::copy_from_slice(piece), false)
                .unwrap();
        }
        send.send_data(Bytes::new(), true).unwrap();
        let (parts, body_in) = response.await.unwrap().into_parts();
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["x-from-php"], "yes");
        let text = String::from_utf8(body_of(body_in).await).unwrap();
        assert_eq!(text, format!("POST 300000 {md5} HTTP/2.0 a h2 a=1; b=2"));
        let (parts, _) = get(&mut client, "a", "/missing.php").await;
        assert_eq!(parts.status, 404);
    });
}

/// A client that hands its window back frame by frame while it reads slowly gets full frames,
/// not one sliver per window update (the silly window syndrome: once the window has been
/// nearly filled, sending each small update's worth at once keeps every frame that small).
#[test]
fn a_slow_reader_gets_full_frames_not_slivers() {
    const LEN: u64 = 8 << 20;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
        len: LEN,
    });
    let running = Running::config("h2-slivers.toml", &h2c_config(up.addr, ""));
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut body = get_big(running.addr).await;
        let (mut got, mut frames, mut slivers) = (0u64, 0u32, 0u32);
        while let Some(d) = body.data().await {
            let d = d.unwrap();
            got += d.len() as u64;
            frames += 1;
            if d.len() < 1024 && got < LEN {
                slivers += 1;
            }
            body.flow_control().release_capacity(d.len()).unwrap();
            if got < LEN / 4 {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
        }
        assert_eq!(got, LEN);
        // Without the rule: 18% (epoll) to 54% (io_uring upstream) of the frames; with it,
        // 2-6% (the odd ends of writes).
        assert!(
            slivers * 10 <= frames,
            "{slivers} of {frames} DATA frames were under 1 KiB"
        );
    });
}

#[test]
fn a_connection_idle_long_enough_to_give_its_buffers_back_serves_on() {
    // Without streams, a connection frees its read, write and HPACK buffers and its stream
    // slots at the next tick (every second); the next requests on it must not notice.
    let up = Upstream::start(|seen| {
        let token = seen.header("x-token").unwrap_or("-").to_string();
        Reply::Bytes(response(200, token.repeat(2000).as_bytes()))
    });
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let client = h2c(addr).await;
        for round in 0..3 {
            // Huffman-coded values the server decodes, one of them from its dynamic table.
            let token = format!("round-{round}-token-value");
            let req = http::Request::get("http://a.test/idle")
                .header("x-token", &token)
                .header("user-agent", "a-long-user-agent-value-kept-in-the-table")
                .body(())
                .unwrap();
            let mut ready = client.clone().ready().await.unwrap();
            let (response, _) = ready.send_request(req, true).unwrap();
            let (parts, body) = response.await.unwrap().into_parts();
            assert_eq!(parts.status, 200);
            assert_eq!(body_of(body).await, token.repeat(2000).as_bytes());
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
    });
    let m = proxy.metrics();
    assert_eq!(m.total(Counter::Http2Connections), 1);
    assert_eq!(m.total(Counter::Http2Streams), 3);
    assert!(up
        .seen()
        .iter()
        .all(|s| s.header("user-agent") == Some("a-long-user-agent-value-kept-in-the-table")));
}

#[test]
fn an_http1_request_line_split_across_packets_is_served_on_an_h2c_listener() {
    // The listener peeks to tell HTTP/1.1 from HTTP/2: a first packet holding only part of
    // the request line (as a client's separate writes can make it) once killed the
    // connection's task, and the client got a reset instead of an answer.
    use std::io::Write;
    let up = Upstream::start(|seen| Reply::Bytes(response(200, seen.path().as_bytes())));
    let proxy = h2c_proxy(up.addr, "");
    for first in ["G", "GET", "GET /split", "GET /split HTTP/1.1\r"] {
        let s = connect(proxy.local_addrs()[0]);
        let mut w = s.try_clone().unwrap();
        w.set_nodelay(true).unwrap();
        let whole = "GET /split HTTP/1.1\r\nHost: a\r\n\r\n";
        w.write_all(first.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        w.write_all(&whole.as_bytes()[first.len()..]).unwrap();
        let mut reader = std::io::BufReader::new(s);
        let r = read_response(&mut reader, false).unwrap_or_else(|| panic!("{first:?}"));
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"/split"[..]),
            "{first:?}"
        );
        // Still HTTP/1.1 on the same connection.
        write!(w, "GET /again HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.body, b"/again");
    }
    proxy.shutdown();
}

#[test]
fn a_real_http2_servers_responses_reach_an_http1_client_framed_as_sent() {
    // nginx speaking h2c as the upstream: each response head is read into the model from its
    // HTTP/2 fields (no HTTP/1.1 text between), so its framing must come out right for an
    // HTTP/1.1 client on one keep-alive connection: a length, HEAD's and 304's declared
    // length without a body, 204, a gzip body of no length (chunked), an error page.
    let root = temp_path("h2c-nginx-root");
    std::fs::create_dir_all(&root).unwrap();
    let file = "hello from nginx over h2c\n".repeat(100);
    std::fs::write(root.join("a.txt"), &file).unwrap();
    let nginx = Nginx::start_listening(
        "h2c-nginx",
        "http2",
        "access_log off; gzip on; gzip_min_length 1; gzip_types text/plain;",
        &format!(
            "root {}; location = /none {{ return 204; }} \
             location = /text {{ default_type text/plain; return 200 \"{}\"; }}",
            root.display(),
            "compress me ".repeat(50)
        ),
    );
    let group = format!("servers = [\"{}\"]\nprotocol = \"h2c\"", nginx.addr);
    let proxy = crate::grpc::grpc_proxy(&group, None);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = std::io::BufReader::new(s);
    let mut ask = |request: &str, extra: &str| {
        use std::io::Write;
        write!(w, "{request} HTTP/1.1\r\nHost: a\r\n{extra}\r\n").unwrap();
        let asked = std::time::Instant::now();
        read_response(&mut reader, request.starts_with("HEAD")).unwrap_or_else(|| {
            // What a failure on a CI machine needs to be understood.
            let log = std::fs::read_to_string(nginx.dir.join("logs/error.log"));
            let counters = proxy.metrics().render();
            let moved = counters
                .lines()
                .filter(|l| !l.starts_with('#') && !l.ends_with(" 0"));
            panic!(
                "{request}: no whole response ({:?} after asking)\nnginx's error log: {log:?}\n\
                 the proxy's counters that moved:\n{}",
                asked.elapsed(),
                moved.collect::<Vec<_>>().join("\n")
            )
        })
    };
    let r = ask("GET /a.txt", "");
    assert_eq!((r.status, r.body.as_slice()), (200, file.as_bytes()));
    assert_eq!(r.header("content-length"), Some(&*file.len().to_string()));
    let etag = r.header("etag").expect("nginx sends an ETag").to_string();
    let r = ask("HEAD /a.txt", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(&*file.len().to_string()));
    let r = ask("GET /a.txt", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!(r.status, 304);
    assert_eq!(ask("GET /none", "").status, 204);
    let r = ask("GET /text", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert!(r.body.starts_with(&[0x1f, 0x8b]), "{:?}", r.body);
    let r = ask("GET /missing", "");
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("404 Not Found"));
    // Still in step: every body above ended where its framing said.
    let r = ask("GET /a.txt", "");
    assert_eq!((r.status, r.body.len()), (200, file.len()));
    proxy.shutdown();
}
