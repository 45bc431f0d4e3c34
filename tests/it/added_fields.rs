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

/// `cors`: a preflight from an allowed origin is answered by the proxy (204, before access
/// rules and without reaching the upstream); an allowed origin's answers, errors included,
/// carry its fields; another origin's carry only `Vary`; HTTP/2 alike.
#[test]
fn cors_answers_preflights_and_marks_allowed_origins() {
    let upstream = Upstream::ok(b"data");
    let proxy = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
h2c = true
[upstreams.app]
servers = ["{}"]
[[sites]]
default = true
cors = {{ origins = ["https://app.example", "https://*.example.org"], methods = ["GET", "PUT"], credentials = true, max_age = "10m", expose = ["X-Total"] }}
routes = [
  {{ location = "/api/", upstream = "app", access = ["deny all"] }},
  {{ location = "/open/", upstream = "app" }},
]
"#,
        upstream.addr
    ));
    let addr = proxy.local_addrs()[0];
    let ask = |method: &str, path: &str, fields: &str| {
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: a\r\n{fields}Connection: close\r\n\r\n");
        exchange_until_close(addr, request.as_bytes())
    };
    let r = ask(
        "OPTIONS",
        "/api/x",
        "Origin: https://app.example\r\nAccess-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: content-type\r\n",
    );
    assert_eq!(status_of(&r), 204, "{}", String::from_utf8_lossy(&r));
    assert_eq!(
        values(&r, "access-control-allow-origin"),
        ["https://app.example"]
    );
    assert_eq!(values(&r, "access-control-allow-methods"), ["GET, PUT"]);
    assert_eq!(values(&r, "access-control-allow-headers"), ["content-type"]);
    assert_eq!(values(&r, "access-control-allow-credentials"), ["true"]);
    assert_eq!(values(&r, "access-control-max-age"), ["600"]);
    assert!(upstream.seen().is_empty());
    // The access rule still holds for the request itself; its 403 carries the fields.
    let r = ask("PUT", "/api/x", "Origin: https://app.example\r\n");
    assert_eq!(status_of(&r), 403);
    assert_eq!(
        values(&r, "access-control-allow-origin"),
        ["https://app.example"]
    );
    let r = ask("GET", "/open/x", "Origin: https://a.example.org\r\n");
    assert_eq!(status_of(&r), 200);
    assert_eq!(
        values(&r, "access-control-allow-origin"),
        ["https://a.example.org"]
    );
    assert_eq!(values(&r, "access-control-expose-headers"), ["X-Total"]);
    assert_eq!(values(&r, "vary"), ["Origin"]);
    let r = ask("GET", "/open/x", "Origin: https://evil.example\r\n");
    assert_eq!(status_of(&r), 200);
    assert!(values(&r, "access-control-allow-origin").is_empty());
    assert_eq!(values(&r, "vary"), ["Origin"]);
    // A disallowed preflight gets no permission (and never reaches the upstream).
    let r = ask(
        "OPTIONS",
        "/open/x",
        "Origin: https://evil.example\r\nAccess-Control-Request-Method: PUT\r\n",
    );
    assert_eq!(status_of(&r), 204);
    assert!(values(&r, "access-control-allow-methods").is_empty());
    assert_eq!(upstream.seen().len(), 2);
    let out = std::process::Command::new("curl")
        .args(["-s", "-i", "--http2-prior-knowledge", "-X", "OPTIONS"])
        .args(["-H", "Origin: https://app.example"])
        .args(["-H", "Access-Control-Request-Method: GET"])
        .arg(format!("http://{addr}/api/x"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(text.starts_with("http/2 204"), "{text}");
    assert!(
        text.contains("access-control-allow-origin: https://app.example\r\n"),
        "{text}"
    );
    proxy.shutdown();
}
