//! `add_headers` on a site (and `--add-header` on the one-liners) through real sockets: the
//! fields reach proxied, static-file and error responses of that site only, an upstream's own
//! field of the same name wins, and fields that would break framing are refused at load.

use crate::support::*;

/// The values of `name` in a raw response head.
fn values(response: &[u8], name: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(response);
    let head = &text[..text.find("\r\n\r\n").unwrap_or(text.len())];
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

fn get(addr: std::net::SocketAddr, host: &str, path: &str) -> Vec<u8> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    exchange_until_close(addr, request.as_bytes())
}

#[test]
fn site_fields_reach_every_response_of_the_site_only() {
    let upstream = Upstream::start(|req| {
        let own = if req.path() == "/own" {
            "X-Frame-Options: SAMEORIGIN\r\n"
        } else {
            ""
        };
        Reply::Bytes(format!("HTTP/1.1 200 OK\r\n{own}Content-Length: 2\r\n\r\nok").into_bytes())
    });
    let www = temp_path("added-fields-www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("f.txt"), "file").unwrap();
    let proxy = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{up}"]
[upstreams.gone]
servers = ["127.0.0.1:1"]
retries = 0
[[sites]]
hosts = ["a.test"]
add_headers = {{ "X-Content-Type-Options" = "nosniff", "X-Frame-Options" = "DENY" }}
routes = [
  {{ path = "/static/", alias = "{www}/" }},
  {{ path = "/down", upstream = "gone" }},
  {{ path = "/", upstream = "app" }},
]
[[sites]]
hosts = ["b.test"]
routes = [{{ path = "/", upstream = "app" }}]
"#,
        up = upstream.addr,
        www = www.display(),
    ));
    let addr = proxy.local_addrs()[0];
    for (path, status) in [
        ("/", 200),
        ("/static/f.txt", 200),
        ("/static/none", 404),
        ("/down", 502),
    ] {
        let r = get(addr, "a.test", path);
        assert_eq!(status_of(&r), status, "{path}");
        assert_eq!(values(&r, "x-content-type-options"), ["nosniff"], "{path}");
        assert_eq!(values(&r, "x-frame-options"), ["DENY"], "{path}");
    }
    // The upstream's own field is kept, not doubled.
    let r = get(addr, "a.test", "/own");
    assert_eq!(values(&r, "x-frame-options"), ["SAMEORIGIN"]);
    assert_eq!(values(&r, "x-content-type-options"), ["nosniff"]);
    // Another site gets none.
    let r = get(addr, "b.test", "/");
    assert_eq!(status_of(&r), 200);
    assert!(values(&r, "x-content-type-options").is_empty());
    proxy.shutdown();
}

#[test]
fn fields_that_would_break_framing_are_refused_with_their_line() {
    for (fields, reason) in [
        (r#"{ "Content-Length" = "5" }"#, "set by the proxy itself"),
        (
            r#"{ "Transfer-Encoding" = "chunked" }"#,
            "set by the proxy itself",
        ),
        (r#"{ "Bad Name" = "x" }"#, "is not a header name"),
        (r#"{ "X-A" = "a\r\nX-B: b" }"#, "control character"),
    ] {
        let text = format!(
            "[[listen]]\naddress = \"127.0.0.1:0\"\n[[sites]]\ndefault = true\nadd_headers = {fields}\nroutes = []\n"
        );
        let e = slipstream::Config::parse(&text, "t.toml").unwrap_err();
        assert!(e.0[0].message.contains(reason), "{fields}: {e}");
        assert_eq!(e.0[0].line, 5, "{fields}: {e}");
    }
}

#[test]
fn the_add_header_flag_adds_to_every_response() {
    let upstream = Upstream::ok(b"hello");
    let up = upstream.addr.to_string();
    let running = Running::proxy(&[
        "--upstream",
        &up,
        "--workers",
        "1",
        "--add-header",
        "X-Content-Type-Options: nosniff",
        "--add-header",
        "Referrer-Policy: no-referrer",
    ]);
    let r = get(running.addr, "a", "/");
    assert_eq!(status_of(&r), 200);
    assert_eq!(values(&r, "x-content-type-options"), ["nosniff"]);
    assert_eq!(values(&r, "referrer-policy"), ["no-referrer"]);
}
