//! Tunnels after `101 Switching Protocols` through real sockets: `limits.tunnel_idle_timeout`
//! closes a silent tunnel on both sides (and counts it), and leaves one with traffic alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use slipstream::observe::metrics::Counter;
use slipstream::Server;

use crate::support::*;

/// A one-worker proxy to `upstream` whose tunnels close after `idle` without a byte.
fn tunnel_proxy(upstream: SocketAddr, idle: &str) -> Server {
    proxy(&format!(
        r#"
workers = 1
[limits]
tunnel_idle_timeout = "{idle}"
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{upstream}"]
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#
    ))
}

/// An upstream that answers one upgrade with 101, then echoes "pong" for each "ping" until the
/// tunnel closes; returns how many pings it answered and how the tunnel ended (`Ok(0)`: closed).
fn echo_upstream() -> (SocketAddr, JoinHandle<(usize, std::io::Result<usize>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let thread = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        // The guard: a tunnel the proxy never closes fails the test instead of hanging it.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).unwrap();
        }
        let mut s = reader.into_inner();
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
            .unwrap();
        let mut pings = 0;
        let mut buf = [0u8; 4];
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => {
                    pings += 1;
                    s.write_all(b"pong").unwrap();
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return (pings, Ok(0));
                }
                Err(e) => return (pings, Err(e)),
            }
        }
    });
    (addr, thread)
}

/// Sends the upgrade request and reads the 101 head.
fn upgrade(proxy: &Server) -> TcpStream {
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed before the 101 head");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    s
}

#[test]
fn a_silent_tunnel_is_closed_on_both_sides_and_counted() {
    let (up, upstream) = echo_upstream();
    let proxy = tunnel_proxy(up, "1s");
    let mut s = upgrade(&proxy);
    // No traffic: the proxy closes the client's side (the read guard is 10 s)...
    let mut rest = Vec::new();
    let closed = s.read_to_end(&mut rest);
    assert!(matches!(closed, Ok(0)), "client side: {closed:?}");
    // ...and the upstream's.
    let (pings, ended) = upstream.join().unwrap();
    assert_eq!(pings, 0);
    assert!(matches!(ended, Ok(0)), "upstream side: {ended:?}");
    let counted = || proxy.metrics().total(Counter::TunnelIdleTimeouts) == 1;
    assert!(eventually(counted));
    proxy.shutdown();
}

#[test]
fn a_tunnel_with_traffic_more_often_than_the_timeout_stays_open() {
    let (up, upstream) = echo_upstream();
    let proxy = tunnel_proxy(up, "2s");
    let mut s = upgrade(&proxy);
    // A ping every 200 ms for well past the timeout.
    let start = Instant::now();
    let mut pings = 0;
    while start.elapsed() < Duration::from_millis(4500) {
        s.write_all(b"ping").unwrap();
        let mut pong = [0u8; 4];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"pong");
        pings += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(proxy.metrics().total(Counter::TunnelIdleTimeouts), 0);
    // The client ends it; the upstream sees the close.
    drop(s);
    let (answered, ended) = upstream.join().unwrap();
    assert_eq!(answered, pings);
    assert!(matches!(ended, Ok(0)), "upstream side: {ended:?}");
    assert_eq!(proxy.metrics().total(Counter::TunnelIdleTimeouts), 0);
    proxy.shutdown();
}

/// A WebSocket echo server on HTTP/1.1 (tungstenite): each connection's messages come back
/// until the client closes; returns the messages echoed over all connections.
fn websocket_echo() -> (SocketAddr, JoinHandle<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let thread = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut ws = tungstenite::accept(s).expect("a WebSocket handshake");
        let mut echoed = 0;
        loop {
            match ws.read() {
                Ok(m) if m.is_text() || m.is_binary() => {
                    ws.send(m).unwrap();
                    echoed += 1;
                }
                Ok(_) => {}
                Err(_) => return echoed,
            }
        }
    });
    (addr, thread)
}

/// Opens a WebSocket over HTTP/2 (RFC 8441 extended CONNECT, h2c) to `proxy`, and returns
/// it as tungstenite's client end, over a socket pair whose other end a thread pumps to and
/// from the HTTP/2 stream.
fn websocket_over_http2(
    proxy: SocketAddr,
) -> tungstenite::WebSocket<std::os::unix::net::UnixStream> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let (status_tx, status_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tcp = tokio::net::TcpStream::connect(proxy).await.unwrap();
            let (send, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(conn);
            let mut send = send.ready().await.unwrap();
            // The server's SETTINGS have arrived once a request could be sent.
            let mut request = http::Request::builder()
                .method("CONNECT")
                .uri(format!("http://{proxy}/chat"))
                .header("sec-websocket-version", "13")
                .body(())
                .unwrap();
            request
                .extensions_mut()
                .insert(h2::ext::Protocol::from_static("websocket"));
            let (response, mut out) = send.send_request(request, false).unwrap();
            let response = response.await.unwrap();
            let enabled = send.is_extended_connect_protocol_enabled();
            status_tx.send((response.status(), enabled)).unwrap();
            let mut recv = response.into_body();
            theirs.set_nonblocking(true).unwrap();
            let mut pipe = tokio::net::UnixStream::from_std(theirs).unwrap();
            let mut buf = vec![0u8; 16384];
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                tokio::select! {
                    n = pipe.read(&mut buf) => match n {
                        Ok(0) | Err(_) => {
                            let _ = out.send_data(bytes::Bytes::new(), true);
                            break;
                        }
                        Ok(n) => out.send_data(bytes::Bytes::copy_from_slice(&buf[..n]), false).unwrap(),
                    },
                    d = recv.data() => match d {
                        Some(Ok(d)) => {
                            let _ = recv.flow_control().release_capacity(d.len());
                            pipe.write_all(&d).await.unwrap();
                        }
                        _ => break,
                    },
                }
            }
            // Let what was queued go out before the runtime ends.
            tokio::time::sleep(Duration::from_millis(200)).await;
        });
    });
    let (status, enabled) = status_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(enabled, "SETTINGS_ENABLE_CONNECT_PROTOCOL was not sent");
    assert_eq!(status, 200);
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    tungstenite::WebSocket::from_raw_socket(ours, tungstenite::protocol::Role::Client, None)
}

#[test]
fn a_websocket_over_http2_reaches_an_http1_websocket_upstream_and_outlives_a_reload() {
    let (upstream, echo) = websocket_echo();
    let text = crate::http2::h2c_config(upstream, "").replace("{listen}", "127.0.0.1:0");
    let proxy = proxy(&text);
    let mut ws = websocket_over_http2(proxy.local_addrs()[0]);
    for i in 0..3 {
        ws.send(tungstenite::Message::text(format!("hello {i}")))
            .unwrap();
        assert_eq!(
            ws.read().unwrap().into_text().unwrap(),
            format!("hello {i}")
        );
    }
    // A reload sends the connection GOAWAY; the open WebSocket goes on.
    let config = slipstream::config::Config::parse(&text, "test.toml").unwrap();
    proxy.reload(config).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let big = vec![7u8; 200_000];
    ws.send(tungstenite::Message::binary(big.clone())).unwrap();
    assert_eq!(ws.read().unwrap().into_data().as_ref(), big.as_slice());
    ws.close(None).unwrap();
    while ws.read().is_ok() {}
    assert_eq!(echo.join().unwrap(), 4);
    assert!(proxy.metrics().total(Counter::Http2Streams) >= 1);
}
