//! `limit_req` and `limit_conn` through real sockets: 429 with `Retry-After` by default, a
//! burst served at once with `nodelay`, a request over the rate within the burst served late
//! (counted), a zone shared by two routes, and requests in flight per key with a held
//! upstream.

use std::io::{BufReader, Write};

use slipstream::observe::metrics::Counter;

use crate::support::{connect, proxy, read_response, Gate, RawResponse, Reply, Upstream};

fn ask(addr: std::net::SocketAddr, path: &str) -> RawResponse {
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    write!(
        w,
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

#[test]
fn rates_refuse_with_429_and_delay_within_the_burst() {
    let upstream = Upstream::ok(b"ok");
    let server = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[rate_zones.slow]
key = "$remote_addr"
rate = "1r/m"
[rate_zones.fast]
key = "$remote_addr"
rate = "50r/s"
[[sites]]
default = true
routes = [
  {{ location = "/a/", upstream = "app", limit_req = [{{ zone = "slow", burst = 1, nodelay = true }}] }},
  {{ location = "/b/", upstream = "app", limit_req = [{{ zone = "slow", nodelay = true }}] }},
  {{ location = "/late/", upstream = "app", limit_req = [{{ zone = "fast", burst = 5 }}] }},
  {{ location = "/", upstream = "app" }},
]
"#,
        upstream.addr
    ));
    let addr = server.local_addrs()[0];
    let statuses: Vec<u16> = (0..3).map(|_| ask(addr, "/a/x").status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let r = ask(addr, "/a/x");
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    // nginx keeps 1r/m as 16 thousandths a second: a request drains in 62.5 s.
    assert!((1..=63).contains(&retry), "{retry}");
    // The zone is shared: another route using it is over the rate too.
    assert_eq!(ask(addr, "/b/x").status, 429);
    assert_eq!(ask(addr, "/elsewhere").status, 200);
    // Over 50r/s within the burst, without nodelay: served, after a wait.
    let statuses: Vec<u16> = (0..3).map(|_| ask(addr, "/late/x").status).collect();
    assert_eq!(statuses, [200, 200, 200]);
    let m = server.metrics();
    assert!(m.total(Counter::LimitDelays) >= 1);
    assert_eq!(m.total(Counter::LimitRejects), 3);
    server.shutdown();
}

#[test]
fn requests_in_flight_per_key_are_limited() {
    let gate = Gate::default();
    let held = gate.clone();
    let upstream = Upstream::start(move |_| {
        held.wait();
        Reply::Bytes(crate::support::response(200, b"done"))
    });
    let server = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[conn_zones.addr]
key = "$remote_addr"
[[sites]]
default = true
limit_conn = [{{ zone = "addr", max = 2 }}]
limit_status = 503
error_pages = [{{ codes = [404], to = "/nope-page" }}]
routes = [
  {{ location = "/files/", root = "/tmp" }},
  {{ location = "= /nope-page", rules = [{{ return = 200, body = "page" }}] }},
  {{ path = "/", upstream = "app" }},
]
"#,
        upstream.addr
    ));
    let addr = server.local_addrs()[0];
    let waiting: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || ask(addr, "/slow").status))
        .collect();
    assert!(crate::support::eventually(|| upstream.seen().len() == 2));
    assert_eq!(ask(addr, "/third").status, 503);
    gate.open();
    for w in waiting {
        assert_eq!(w.join().unwrap(), 200);
    }
    // Their places are given back when they end.
    assert_eq!(ask(addr, "/after").status, 200);
    // An error page is the same request: it takes no second place.
    let r = ask(addr, "/files/missing");
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).to_string()),
        (404, "page".to_string())
    );
    server.shutdown();
}
