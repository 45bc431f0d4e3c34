//! Every answer slipstream makes itself carries a `Date` (RFC 9110 6.6.1): errors from the one
//! error mapping (400, 404, 502), file answers (304, a directory's 301), the 308 of a
//! `redirect_https` listener, and the same answers over HTTP/2.

use std::io::{BufReader, Write};

use crate::support::*;

/// The `Date` of a response, checked to be an HTTP date (its value is not compared with the
/// clock: only that it is there and well formed).
fn assert_dated(r: &RawResponse, what: &str) {
    let date = r
        .header("date")
        .unwrap_or_else(|| panic!("{what}: no Date in {:?}", r.headers));
    assert!(
        httpdate::parse_http_date(date).is_ok(),
        "{what}: Date {date:?} is not an HTTP date"
    );
}

/// Sends `request` on a fresh connection and reads one response.
fn ask(addr: std::net::SocketAddr, request: &[u8]) -> RawResponse {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

#[test]
fn error_answers_are_dated() {
    // The upstream's port has nothing listening: a 502 made by the proxy.
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = simple_proxy(dead);
    let addr = proxy.local_addrs()[0];
    let bad = ask(addr, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(bad.status, 400);
    assert_dated(&bad, "400 without Host");
    let gateway = ask(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(gateway.status, 502);
    assert_dated(&gateway, "502 of a dead upstream");
    proxy.shutdown();
}

#[test]
fn file_answers_are_dated() {
    let dir = temp_path("dates-files");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a.txt"), b"a").unwrap();
    let proxy = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[[sites]]
default = true
routes = [{{ path = "/", root = "{}" }}]
"#,
        dir.display()
    ));
    let addr = proxy.local_addrs()[0];
    let get = |target: &str, fields: &str| {
        let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n{fields}Connection: close\r\n\r\n");
        ask(addr, req.as_bytes())
    };
    let missing = get("/missing.txt", "");
    assert_eq!(missing.status, 404);
    assert_dated(&missing, "404 of a static route");
    let not_modified = get("/a.txt", "If-None-Match: *\r\n");
    assert_eq!(not_modified.status, 304);
    assert_dated(&not_modified, "304");
    let directory = get("/sub", "");
    assert_eq!(directory.status, 301);
    assert_dated(&directory, "a directory's redirect");
    let file = get("/a.txt", "");
    assert_eq!(file.status, 200);
    assert_dated(&file, "a file");
    proxy.shutdown();
}

#[test]
fn https_redirects_are_dated() {
    let proxy = proxy(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
redirect_https = true
[upstreams.app]
servers = ["127.0.0.1:9"]
[[sites]]
default = true
routes = [{ path = "/", upstream = "app" }]
"#,
    );
    let addr = proxy.local_addrs()[0];
    let redirect = ask(addr, b"GET /x?y HTTP/1.1\r\nHost: example.com\r\n\r\n");
    assert_eq!(redirect.status, 308);
    assert_eq!(redirect.header("location"), Some("https://example.com/x?y"));
    assert_dated(&redirect, "308 of redirect_https");
    let refused = ask(addr, b"GET /x HTTP/1.1\r\n\r\n");
    assert_eq!(refused.status, 400);
    assert_dated(&refused, "400 of redirect_https");
    proxy.shutdown();
}

#[test]
fn answers_over_http2_are_dated() {
    use crate::http2::{get, h2c, h2c_proxy, runtime};
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = h2c_proxy(dead, "");
    let addr = proxy.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        let (parts, _) = get(&mut client, "a", "/").await;
        assert_eq!(parts.status, 502);
        let date = parts.headers.get("date").expect("a Date over HTTP/2");
        assert!(httpdate::parse_http_date(date.to_str().unwrap()).is_ok());
    });
    // The client connection goes first, so the shutdown has nothing to wait for.
    drop(local);
    proxy.shutdown();
}
