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
