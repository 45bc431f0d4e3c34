//! PROXY protocol listeners against a real HAProxy (`send-proxy` and `send-proxy-v2`, with
//! the client's address set by HAProxy to one no test socket has): the address the header
//! names is the client's for `X-Forwarded-For` and the access rules; a connection without a
//! header, or with a broken one, is closed unanswered and counted.

use std::io::{BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

use slipstream::observe::metrics::Counter;

use crate::support::{
    connect, eventually, free_port, proxy, read_response, response, temp_path, Reply, Upstream,
};

struct HaProxy(Child);

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// HAProxy in TCP mode on two ports, relaying to `to` with a v1 and a v2 header naming
/// 203.0.113.7 (v1) and 2001:db8::7 (v2) as the client; and in HTTP mode on `accept`,
/// taking a PROXY header (v1 or v2) and writing its client as `X-Client` toward `app`.
fn haproxy(
    to: std::net::SocketAddr,
    (accept, app): (u16, std::net::SocketAddr),
) -> (HaProxy, u16, u16) {
    let (v1, v2) = (free_port(), free_port());
    let dir = temp_path("haproxy-pp");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n\
             frontend v1\n  bind 127.0.0.1:{v1}\n  tcp-request connection set-src ipv4(203.0.113.7)\n  default_backend to_v1\n\
             backend to_v1\n  server s {to} send-proxy\n\
             frontend v2\n  bind 127.0.0.1:{v2}\n  tcp-request connection set-src ipv6(2001:db8::7)\n  default_backend to_v2\n\
             backend to_v2\n  server s {to} send-proxy-v2\n\
             frontend accept\n  mode http\n  bind 127.0.0.1:{accept} accept-proxy\n  option forwardfor header X-Client\n  default_backend app\n\
             backend app\n  mode http\n  server a {app}\n"
        ),
    )
    .unwrap();
    let child = Command::new("haproxy")
        .arg("-f")
        .arg(&conf)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy is installed (.ci/test-tools installs it)");
    assert!(eventually(|| std::net::TcpStream::connect((
        "127.0.0.1",
        v2
    ))
    .is_ok()));
    (HaProxy(child), v1, v2)
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let s = connect(([127, 0, 0, 1], port).into());
    let mut w = s.try_clone().unwrap();
    write!(
        w,
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let r = read_response(&mut BufReader::new(s), false)?;
    Some((r.status, String::from_utf8_lossy(&r.body).to_string()))
}

#[test]
fn the_client_is_the_one_the_proxy_header_names() {
    let upstream = Upstream::start(|seen| {
        let xff = seen.header("x-forwarded-for").unwrap_or("-");
        let body = match seen.header("x-client") {
            Some(client) => format!("{xff} via haproxy {client}"),
            None => xff.to_string(),
        };
        Reply::Bytes(response(200, body.as_bytes()))
    });
    let accept = free_port();
    let server = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
proxy_protocol = true
[upstreams.app]
servers = ["{}"]
[upstreams.behind_v1]
servers = ["127.0.0.1:{accept}"]
send_proxy = "v1"
[upstreams.behind_v2]
servers = ["127.0.0.1:{accept}"]
send_proxy = "v2"
[[sites]]
default = true
routes = [
  {{ location = "/v4-only/", upstream = "app", access = ["allow 203.0.113.0/24", "deny all"] }},
  {{ location = "/send-v1/", upstream = "behind_v1" }},
  {{ location = "/send-v2/", upstream = "behind_v2" }},
  {{ location = "/", upstream = "app" }},
]
"#,
        upstream.addr
    ));
    let addr = server.local_addrs()[0];
    let (_haproxy, v1, v2) = haproxy(addr, (accept, upstream.addr));
    assert_eq!(get(v1, "/x"), Some((200, "203.0.113.7".to_string())));
    assert_eq!(get(v2, "/x"), Some((200, "2001:db8::7".to_string())));
    assert_eq!(get(v1, "/v4-only/x").map(|r| r.0), Some(200));
    assert_eq!(get(v2, "/v4-only/x").map(|r| r.0), Some(403));
    // Straight to the listener: no header, so no answer.
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    // A header and a request in one write: the request is answered.
    let mut s = connect(addr);
    s.write_all(
        b"PROXY TCP4 198.51.100.9 127.0.0.1 5555 80\r\nGET /y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(String::from_utf8_lossy(&r.body), "198.51.100.9");
    assert!(server.metrics().total(Counter::ProxyProtocolRefused) >= 1);
    // Part of a header, then the client leaves: noticed at once, not at the header timeout.
    let mut s = connect(addr);
    s.write_all(b"PROXY TCP4 1.2.3.4").unwrap();
    drop(s);
    let refused = || server.metrics().total(Counter::ProxyProtocolRefused);
    assert!(eventually(|| refused() >= 2), "{}", refused());
    // Sent on: HAProxy (accept-proxy) reads the client slipstream names, v1 and v2, twice
    // each (a connection per request: none is reused for another client).
    for _ in 0..2 {
        let via = |port, path| get(port, path).map(|r| r.1);
        let want = "203.0.113.7 via haproxy 203.0.113.7".to_string();
        assert_eq!(via(v1, "/send-v1/x"), Some(want.clone()));
        assert_eq!(via(v1, "/send-v2/x"), Some(want));
        let want = "2001:db8::7 via haproxy 2001:db8::7".to_string();
        assert_eq!(via(v2, "/send-v2/x"), Some(want));
    }
    server.shutdown();
}
