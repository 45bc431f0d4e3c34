//! Error pages beyond what the nginx differential covers: the slipstream keys as written
//! (`status = "page"`, named locations), a kept-alive connection after a page, a page served
//! by an upstream, HTTP/2, and the counter.

use std::io::{BufReader, Write};
use std::process::Command;

use crate::support::{connect, proxy, read_response, response, temp_path, Reply, Upstream};

fn site(root: &std::path::Path, upstream: std::net::SocketAddr) -> String {
    format!(
        r#"
workers = 1
admin = "127.0.0.1:0"
[[listen]]
address = "127.0.0.1:0"
h2c = true
[upstreams.app]
servers = ["{upstream}"]
[upstreams.dead]
servers = ["127.0.0.1:9"]
[[sites]]
default = true
error_pages = [{{ codes = [404], to = "/404.html" }}, {{ codes = [502], to = "/up/served" }}]
routes = [
  {{ location = "= /404.html", root = "{root}", internal = true }},
  {{ location = "/files/", root = "{root}" }},
  {{ location = "/dead/", upstream = "dead" }},
  {{ location = "/up/", upstream = "app", intercept_errors = true }},
  {{ location = "/named", rules = [{{ return = 410 }}], error_pages = [{{ codes = [410], to = "@app", status = "page" }}] }},
  {{ location = "@app", upstream = "app" }},
]
"#,
        root = root.display()
    )
}

/// A proxy over its own root (`name`): tests run at once must not share one.
fn start(name: &str) -> (slipstream::server::Server, Upstream) {
    let root = temp_path(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("files")).unwrap();
    std::fs::write(root.join("404.html"), "PAGE not found\n").unwrap();
    std::fs::write(root.join("files/here.txt"), "here\n").unwrap();
    let upstream = Upstream::start(|seen| {
        let status = if seen.path().contains("/missing") {
            404
        } else {
            200
        };
        let method = seen.line.split(' ').next().unwrap_or_default();
        let body = format!("upstream {method} {}", seen.path());
        Reply::Bytes(response(status, body.as_bytes()))
    });
    (proxy(&site(&root, upstream.addr)), upstream)
}

/// A page for a missing file keeps the connection: pipelined requests each get their answer.
#[test]
fn a_page_keeps_the_connection_in_step() {
    let (server, _upstream) = start("error-pages-keepalive");
    let s = connect(server.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(
        b"GET /files/missing.txt HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /files/here.txt HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /404.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let first = read_response(&mut reader, false).unwrap();
    assert_eq!(
        (first.status, &first.body[..]),
        (404, &b"PAGE not found\n"[..])
    );
    let second = read_response(&mut reader, false).unwrap();
    assert_eq!((second.status, &second.body[..]), (200, &b"here\n"[..]));
    // The page's own route is internal: asked directly it is a 404, whose page it is.
    let third = read_response(&mut reader, false).unwrap();
    assert_eq!(
        (third.status, &third.body[..]),
        (404, &b"PAGE not found\n"[..])
    );
    server.shutdown();
}

/// An intercepted upstream 404 and a 502 whose page an upstream serves: the page's request
/// is a GET of the page's path, answered under the original code.
#[test]
fn upstream_answers_are_replaced_and_pages_may_be_proxied() {
    let (server, upstream) = start("error-pages-upstream");
    let addr = server.local_addrs()[0];
    let ask = |request: &[u8]| {
        let s = connect(addr);
        let mut w = s.try_clone().unwrap();
        w.write_all(request).unwrap();
        read_response(&mut BufReader::new(s), false).unwrap()
    };
    let r = ask(b"GET /up/missing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, &r.body[..]), (404, &b"PAGE not found\n"[..]));
    let r = ask(b"POST /dead/x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(r.status, 502);
    assert_eq!(r.body, b"upstream GET /up/served");
    // A named location keeps the method, and `status = "page"` takes the page's status.
    let r = ask(b"DELETE /named?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!(
        (r.status, &r.body[..]),
        (200, &b"upstream DELETE /named?x=1"[..])
    );
    let seen: Vec<String> = upstream
        .seen()
        .iter()
        .map(|s| s.path().to_string())
        .collect();
    assert!(seen.contains(&"/up/served".to_string()), "{seen:?}");
    let metrics = ureq_text(server.admin_addr().unwrap(), "/metrics");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("slipstream_error_pages_total"))
        .unwrap_or_default()
        .to_string();
    assert_eq!(line, "slipstream_error_pages_total 3", "{metrics}");
    server.shutdown();
}

/// The same page over HTTP/2 (curl, prior knowledge).
#[test]
fn pages_answer_http2_requests_alike() {
    let (server, _upstream) = start("error-pages-http2");
    let addr = server.local_addrs()[0];
    let out = Command::new("curl")
        .args(["-s", "-i", "--http2-prior-knowledge"])
        .arg(format!("http://{addr}/up/missing"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.starts_with("HTTP/2 404"), "{text}");
    assert!(text.ends_with("\r\n\r\nPAGE not found\n"), "{text}");
    server.shutdown();
}

fn ureq_text(admin: std::net::SocketAddr, path: &str) -> String {
    crate::support::http_client()
        .get(&format!("http://{admin}{path}"))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap()
}
