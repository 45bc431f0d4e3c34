//! Forward auth (`auth_request`) through real sockets: a small authorization service that
//! knows one session cookie; the app behind it; a route that opts out; the service's fields
//! copied on, the client's own of those names dropped; 401 with the service's
//! `WWW-Authenticate`, 403, a service that is down (500), a 401 turned into a redirect by an
//! error page, and the service's connection kept alive.

use std::io::{BufReader, Write};

use crate::support::{connect, proxy, read_response, RawResponse, Reply, Upstream};

fn services() -> (Upstream, Upstream) {
    let auth = Upstream::start(|seen| {
        let cookie = seen.header("cookie").unwrap_or_default();
        let asked = format!(
            "{} {}",
            seen.header("x-original-method").unwrap_or_default(),
            seen.header("x-original-uri").unwrap_or_default()
        );
        let reply = if cookie.contains("session=good") {
            format!("HTTP/1.1 200 OK\r\nX-User: alice\r\nX-Asked: {asked}\r\nContent-Length: 2\r\n\r\nok")
        } else if cookie.contains("session=banned") {
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n".to_string()
        } else {
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"app\"\r\nContent-Length: 4\r\n\r\nnope".to_string()
        };
        Reply::Bytes(reply.into_bytes())
    });
    let app = Upstream::start(|seen| {
        let body = format!(
            "{} user={:?}",
            seen.path(),
            seen.header("x-user").unwrap_or("-")
        );
        Reply::Bytes(crate::support::response(200, body.as_bytes()))
    });
    (auth, app)
}

fn config(auth: &Upstream, app: &Upstream) -> String {
    format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.auth]
servers = ["{}"]
[upstreams.down]
servers = ["127.0.0.1:9"]
[upstreams.app]
servers = ["{}"]
[[sites]]
default = true
auth_request = {{ upstream = "auth", path = "/check?from=proxy", copy = ["X-User"] }}
routes = [
  {{ location = "/public/", upstream = "app", auth_request = false }},
  {{ location = "/broken/", upstream = "app", auth_request = {{ upstream = "down", path = "/check" }} }},
  {{ location = "/login-first/", upstream = "app", error_pages = [{{ codes = [401], to = "https://login.example/start" }}] }},
  {{ location = "/files/", root = "/tmp", auth_request = false, error_pages = [{{ codes = [404], to = "@app", status = "page" }}] }},
  {{ location = "@app", upstream = "app" }},
  {{ location = "/", upstream = "app" }},
]
"#,
        auth.addr, app.addr
    )
}

fn ask(addr: std::net::SocketAddr, path: &str, fields: &str) -> RawResponse {
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    write!(
        w,
        "GET {path} HTTP/1.1\r\nHost: a\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

#[test]
fn requests_go_on_only_when_the_service_says_so() {
    let (auth, app) = services();
    let server = proxy(&config(&auth, &app));
    let addr = server.local_addrs()[0];
    let r = ask(addr, "/app/x?y=1", "");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"app\""));
    assert!(app.seen().is_empty());
    let r = ask(
        addr,
        "/app/x?y=1",
        "Cookie: session=good\r\nX-User: mallory\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "/app/x?y=1 user=\"alice\""
    );
    let asked = auth.seen().last().cloned().unwrap();
    assert_eq!(asked.line, "GET /check?from=proxy HTTP/1.1");
    assert_eq!(asked.header("x-original-uri"), Some("/app/x?y=1"));
    assert_eq!(asked.header("cookie"), Some("session=good"));
    let r = ask(addr, "/app/x", "Cookie: session=banned\r\n");
    assert_eq!(r.status, 403);
    // A route that opts out is never asked about; its client's X-User is still dropped
    // (nginx sets the copied field from an empty variable there, which hides the client's).
    let before = auth.seen().len();
    let r = ask(addr, "/public/p", "X-User: anyone\r\n");
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).to_string()),
        (200, "/public/p user=\"-\"".to_string())
    );
    assert_eq!(auth.seen().len(), before);
    let r = ask(addr, "/broken/b", "Cookie: session=good\r\n");
    assert_eq!(r.status, 500);
    let r = ask(addr, "/login-first/a", "");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("https://login.example/start"))
    );
    // A page reached by an internal redirect is asked about like any request (nginx's
    // access phase runs again): no forged X-User gets through a missing file's page.
    let r = ask(addr, "/files/x", "X-User: root\r\n");
    assert_eq!(r.status, 401);
    let r = ask(addr, "/files/x", "X-User: root\r\nCookie: session=good\r\n");
    assert_eq!(
        (r.status, String::from_utf8_lossy(&r.body).to_string()),
        (200, "/files/x user=\"alice\"".to_string())
    );
    // What was asked is the proxy's to say: a client's X-Original-URI never reaches the service.
    let r = ask(
        addr,
        "/app/secret",
        "X-Original-URI: /public\r\nX-Forwarded-Uri: /public\r\n",
    );
    assert_eq!(r.status, 401);
    let asked = auth.seen().last().cloned().unwrap();
    let named = |n: &str| {
        asked
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .count()
    };
    assert_eq!((named("x-original-uri"), named("x-forwarded-uri")), (1, 1));
    assert_eq!(asked.header("x-original-uri"), Some("/app/secret"));
    // The service's answers are read whole: its connection serves every question.
    assert_eq!(auth.connections(), 1);
    server.shutdown();
}

/// Requests on a kept-alive connection are each asked about, and stay in step.
#[test]
fn pipelined_requests_are_each_authorized() {
    let (auth, app) = services();
    let server = proxy(&config(&auth, &app));
    let s = connect(server.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    w.write_all(
        b"GET /a HTTP/1.1\r\nHost: a\r\nCookie: session=good\r\n\r\n\
          GET /b HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /c HTTP/1.1\r\nHost: a\r\nCookie: session=good\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    let statuses: Vec<u16> = (0..3)
        .map(|_| read_response(&mut reader, false).unwrap().status)
        .collect();
    assert_eq!(statuses, [200, 401, 200]);
    assert_eq!(auth.seen().len(), 3);
    server.shutdown();
}

/// One field of the service's answer may be copied under its own name and another
/// (`copy` and `copy_as`), and the client's own fields of both names are dropped.
#[test]
fn one_answer_field_is_copied_under_two_names() {
    let (auth, _) = services();
    let app = Upstream::start(|seen| {
        let body = format!(
            "user={} other={}",
            seen.header("x-user").unwrap_or("-"),
            seen.header("x-other").unwrap_or("-")
        );
        Reply::Bytes(crate::support::response(200, body.as_bytes()))
    });
    let config = format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.auth]
servers = ["{}"]
[upstreams.app]
servers = ["{}"]
[[sites]]
auth_request = {{ upstream = "auth", path = "/check", copy = ["X-User"], copy_as = {{ X-Other = "x-user" }} }}
routes = [{{ location = "/", upstream = "app" }}]
"#,
        auth.addr, app.addr
    );
    let server = proxy(&config);
    let forged = "Cookie: session=good\r\nX-User: mallory\r\nX-Other: mallory\r\n";
    let r = ask(server.local_addrs()[0], "/x", forged);
    assert_eq!(String::from_utf8_lossy(&r.body), "user=alice other=alice");
    // Fields that frame the request cannot be copied.
    let bad = config.replace("X-Other = ", "Content-Length = ");
    let e = slipstream::config::Config::parse(&bad, "t.toml").unwrap_err();
    assert!(
        e.to_string()
            .contains("Content-Length is written by the proxy itself"),
        "{e}"
    );
}
