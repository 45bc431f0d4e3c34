//! FastCGI upstreams through real sockets, against a real PHP-FPM on a unix socket and on a TCP
//! port: variables (query, PATH_INFO, headers both ways, extra params), a 10 MB upload read back
//! by the script, Status and Location, output of unknown length sent chunked, kept connections
//! (1,000 requests on at most `max_conns` of them), PHP-FPM stopped (502) or slow (504), the
//! front controller, the `/uploads/evil.jpg/x.php` exploit, and STDERR in the log. A mock
//! FastCGI server sends malformed and truncated records. Also: an HTTP group on a unix socket.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::Path;

use slipstream::observe::metrics::Counter;
use slipstream::Server;

use crate::fastcgi::PhpFpm;
use crate::support::*;

/// A one-worker proxy with a FastCGI group on `server` rooted at `root`; `extra` adds group
/// keys, `route` route keys.
pub(crate) fn php_proxy(server: &str, root: &Path, extra: &str, route: &str) -> Server {
    proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.php]
protocol = "fastcgi"
servers = ["{server}"]
root = "{}"
{extra}
[[sites]]
default = true
routes = [{{ path = "/", upstream = "php" {route} }}]
"#,
        root.display()
    ))
}

fn unix(fpm: &PhpFpm) -> String {
    format!("unix:{}", fpm.socket.display())
}

/// One request on a fresh connection.
fn send(addr: SocketAddr, head: &str, body: &[u8]) -> RawResponse {
    let mut s = connect(addr);
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let method_head = head.starts_with("HEAD ");
    read_response(&mut BufReader::new(s), method_head)
        .unwrap_or_else(|| panic!("no response to {head}"))
}

fn get(addr: SocketAddr, target: &str) -> RawResponse {
    send(
        addr,
        &format!("GET {target} HTTP/1.1\r\nHost: php.test\r\nConnection: close\r\n\r\n"),
        b"",
    )
}

fn text(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const INFO: &str = r#"<?php
header('X-From-Php: yes');
foreach (['SCRIPT_NAME', 'PATH_INFO', 'QUERY_STRING', 'REQUEST_URI', 'REQUEST_METHOD',
          'SCRIPT_FILENAME', 'DOCUMENT_ROOT', 'HTTP_X_CLIENT', 'HTTP_PROXY', 'SERVER_NAME',
          'SERVER_PORT', 'REMOTE_ADDR', 'APP_ENV', 'SITE', 'GATEWAY_INTERFACE'] as $k) {
    echo $k, '=', $_SERVER[$k] ?? '-', "\n";
}
echo 'name=', $_GET['name'] ?? '-', "\n";
"#;

#[test]
fn variables_headers_and_params_reach_the_script_over_unix_and_tcp() {
    let fpm = PhpFpm::start("vars");
    fpm.script("app/info.php", INFO);
    let root = fpm.root.canonicalize().unwrap();
    for server in [unix(&fpm), fpm.tcp.to_string()] {
        let p = php_proxy(
            &server,
            &fpm.root,
            r#"params = { APP_ENV = "test" }"#,
            r#", params = { SITE = "main" }"#,
        );
        let addr = p.local_addrs()[0];
        let r = send(
            addr,
            "GET /app/info.php/extra/path?name=slip&x=1 HTTP/1.1\r\nHost: php.test:8080\r\n\
             X-Client: abc\r\nProxy: http://evil\r\nConnection: close\r\n\r\n",
            b"",
        );
        assert_eq!(r.status, 200, "{server}");
        assert_eq!(r.header("x-from-php"), Some("yes"));
        assert!(r.header("date").is_some());
        let body = text(&r);
        for line in [
            "SCRIPT_NAME=/app/info.php",
            "PATH_INFO=/extra/path",
            "QUERY_STRING=name=slip&x=1",
            "REQUEST_URI=/app/info.php/extra/path?name=slip&x=1",
            "REQUEST_METHOD=GET",
            &format!("SCRIPT_FILENAME={}/app/info.php", root.display()),
            &format!("DOCUMENT_ROOT={}", root.display()),
            "HTTP_X_CLIENT=abc",
            "HTTP_PROXY=-",
            "SERVER_NAME=php.test",
            &format!("SERVER_PORT={}", addr.port()),
            "REMOTE_ADDR=127.0.0.1",
            "APP_ENV=test",
            "SITE=main",
            "GATEWAY_INTERFACE=CGI/1.1",
            "name=slip",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in {body}");
        }
    }
}

#[test]
fn a_10_mb_upload_is_read_back_by_the_script() {
    let fpm = PhpFpm::start("upload");
    fpm.script(
        "upload.php",
        "<?php $b = file_get_contents('php://input'); echo strlen($b), ' ', md5($b), ' ', $_SERVER['CONTENT_LENGTH'];",
    );
    let p = php_proxy(&fpm.tcp.to_string(), &fpm.root, "", "");
    let addr = p.local_addrs()[0];
    let body: Vec<u8> = (0..10 << 20).map(|i: u64| pattern_byte(i)).collect();
    let md5 = format!("{:x}", md5::compute(&body));
    let head = format!(
        "POST /upload.php HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let r = send(addr, &head, &body);
    assert_eq!(r.status, 200);
    assert_eq!(text(&r), format!("{} {md5} {}", body.len(), body.len()));
    // A chunked body is read whole first, so the script still gets CONTENT_LENGTH.
    let head = "POST /upload.php HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\
                Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let r = send(addr, head, b"");
    let md5 = format!("{:x}", md5::compute(b"hello world"));
    assert_eq!(text(&r), format!("11 {md5} 11"));
}

/// A chunked body that passes `max_chunked_body` gets 413 as soon as it does: the client that
/// sent one byte past the limit and keeps its body open has the answer and the close without
/// sending the rest.
#[test]
fn a_chunked_body_past_max_chunked_body_is_413_before_it_ends() {
    let fpm = PhpFpm::start("chunked-limit");
    fpm.script(
        "upload.php",
        "<?php echo strlen(file_get_contents('php://input'));",
    );
    let p = php_proxy(
        &fpm.tcp.to_string(),
        &fpm.root,
        r#"max_chunked_body = "1KB""#,
        "",
    );
    let addr = p.local_addrs()[0];
    // Within the limit: read whole, as before.
    let head = "POST /upload.php HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\
                Connection: close\r\n\r\n";
    let mut body = format!("400\r\n{}\r\n0\r\n\r\n", "a".repeat(1024)).into_bytes();
    let r = send(addr, head, &body);
    assert_eq!((r.status, text(&r).as_str()), (200, "1024"));
    // One byte past it, and the body stays open (no last chunk).
    body = format!("401\r\n{}\r\n", "a".repeat(1025)).into_bytes();
    let mut s = connect(addr);
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&body).unwrap();
    let mut reader = BufReader::new(s);
    let r = read_response(&mut reader, false).expect("413 before the body ended");
    assert_eq!(r.status, 413);
    let mut rest = Vec::new();
    let closed = reader.read_to_end(&mut rest);
    assert!(matches!(closed, Ok(0)), "the connection closes: {closed:?}");
}

#[test]
fn status_location_and_output_of_unknown_length() {
    let fpm = PhpFpm::start("status");
    fpm.script(
        "made.php",
        "<?php http_response_code(201); header('Location: /things/7'); echo 'made';",
    );
    fpm.script("moved.php", "<?php header('Location: /elsewhere');");
    fpm.script(
        "teapot.php",
        "<?php header('Status: 418 Short And Stout'); echo 'tea';",
    );
    fpm.script(
        "stream.php",
        "<?php for ($i = 0; $i < 20; $i++) { echo str_repeat(chr(97 + $i), 4000); flush(); usleep(2000); }",
    );
    let p = php_proxy(&unix(&fpm), &fpm.root, "", "");
    let addr = p.local_addrs()[0];
    let r = get(addr, "/made.php");
    assert_eq!((r.status, r.header("location")), (201, Some("/things/7")));
    assert_eq!(text(&r), "made");
    let r = get(addr, "/moved.php");
    assert_eq!((r.status, r.header("location")), (302, Some("/elsewhere")));
    let r = get(addr, "/teapot.php");
    assert_eq!((r.status, text(&r).as_str()), (418, "tea"));
    // Flushed output: sent as it comes, chunked, whole at the end.
    let r = get(addr, "/stream.php");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let expected: String = (0..20u8)
        .map(|i| char::from(b'a' + i).to_string().repeat(4000))
        .collect();
    assert_eq!(text(&r), expected);
    // HTTP/1.0 gets no chunks: the body ends with the connection.
    let r = send(addr, "GET /stream.php HTTP/1.0\r\n\r\n", b"");
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(text(&r).len(), 80_000);
    // HEAD: the head only.
    let r = send(
        addr,
        "HEAD /made.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!((r.status, r.body.len()), (201, 0));
}

#[test]
fn a_thousand_requests_reuse_at_most_max_conns_connections() {
    let fpm = PhpFpm::start("reuse");
    fpm.script("hi.php", "<?php echo 'hi ', $_GET['n'];");
    let p = php_proxy(&unix(&fpm), &fpm.root, "max_conns = 2", "");
    let addr = p.local_addrs()[0];
    let clients: Vec<_> = (0..4)
        .map(|c| {
            std::thread::spawn(move || {
                let s = connect(addr);
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                for i in 0..250 {
                    let n = c * 1000 + i;
                    let req = format!("GET /hi.php?n={n} HTTP/1.1\r\nHost: x\r\n\r\n");
                    s.write_all(req.as_bytes()).unwrap();
                    let r = read_response(&mut reader, false).unwrap();
                    assert_eq!((r.status, text(&r)), (200, format!("hi {n}")));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let m = p.metrics();
    assert!(
        m.total(Counter::UpstreamConnects) <= 2,
        "{}",
        m.total(Counter::UpstreamConnects)
    );
    assert!(m.total(Counter::UpstreamReused) >= 998);
    assert!(
        m.total(Counter::UpstreamQueued) > 0,
        "four clients wait for two connections"
    );
    assert_eq!(m.total(Counter::Responses5xx), 0);
}

#[test]
fn fpm_stopped_is_502_and_a_slow_script_is_504() {
    let mut fpm = PhpFpm::start("down");
    fpm.script("slow.php", "<?php sleep(3); echo 'late';");
    fpm.script("ok.php", "<?php echo 'ok';");
    let p = php_proxy(&unix(&fpm), &fpm.root, r#"read_timeout = "1s""#, "");
    let addr = p.local_addrs()[0];
    assert_eq!(get(addr, "/ok.php").status, 200);
    assert_eq!(get(addr, "/slow.php").status, 504);
    fpm.stop();
    assert_eq!(get(addr, "/ok.php").status, 502);
    let p = php_proxy(&fpm.tcp.to_string(), &fpm.root, "", "");
    assert_eq!(get(p.local_addrs()[0], "/ok.php").status, 502);
}

#[test]
fn scripts_outside_the_root_or_not_php_never_run() {
    let fpm = PhpFpm::start("exploit");
    fpm.script("uploads/evil.jpg", "<?php echo 'PWNED';");
    fpm.script(
        "index.php",
        "<?php echo 'front ', $_SERVER['REQUEST_URI'], ' ', $_SERVER['SCRIPT_NAME'];",
    );
    fpm.script(".hidden/x.php", "<?php echo 'PWNED';");
    let p = php_proxy(&unix(&fpm), &fpm.root, "", "");
    let addr = p.local_addrs()[0];
    for target in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg",
        "/nothing.php",
        "/uploads/evil.jpg%2fx.php",
    ] {
        let r = get(addr, target);
        assert_eq!(r.status, 404, "{target}");
        assert!(!text(&r).contains("PWNED"), "{target}");
    }
    assert_eq!(get(addr, "/.hidden/x.php").status, 403);
    assert_eq!(get(addr, "/../index.php").status, 400);
    assert_eq!(text(&get(addr, "/")), "front / /index.php");
    // With a front controller, a path naming no script runs it, REQUEST_URI intact.
    let p = php_proxy(
        &unix(&fpm),
        &fpm.root,
        r#"front_controller = "/index.php""#,
        "",
    );
    let addr = p.local_addrs()[0];
    let r = get(addr, "/blog/post-1?page=2");
    assert_eq!(text(&r), "front /blog/post-1?page=2 /index.php");
    let r = get(addr, "/uploads/evil.jpg/x.php");
    assert_eq!(text(&r), "front /uploads/evil.jpg/x.php /index.php");
}

#[test]
fn stderr_lines_are_logged_and_counted() {
    let fpm = PhpFpm::start("stderr");
    fpm.script(
        "warn.php",
        "<?php error_log('careful: disk almost full'); echo 'done';",
    );
    let p = php_proxy(&unix(&fpm), &fpm.root, "", "");
    let r = get(p.local_addrs()[0], "/warn.php");
    assert_eq!(text(&r), "done");
    assert_eq!(p.metrics().total(Counter::FastcgiStderrLines), 1);
}

/// A FastCGI server that reads one request (up to its empty STDIN record) and answers with
/// `reply` bytes, then closes.
fn mock_fastcgi(reply: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut seen = Vec::new();
            let mut chunk = [0u8; 4096];
            while !seen.ends_with(&[1, 5, 0, 1, 0, 0, 0, 0]) {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = s.write_all(&reply);
        }
    });
    addr
}

fn record(kind: u8, content: &[u8]) -> Vec<u8> {
    let mut r = vec![1, kind, 0, 1];
    r.extend_from_slice(&(content.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0]);
    r.extend_from_slice(content);
    r
}

fn end_request(protocol_status: u8) -> Vec<u8> {
    record(3, &[0, 0, 0, 0, protocol_status, 0, 0, 0])
}

#[test]
fn malformed_and_truncated_records_are_502() {
    let root = temp_path("fastcgi-mock");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("x.php"), "").unwrap();
    let good_head = record(6, b"Content-Type: text/plain\r\n\r\n");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "bad version",
            [vec![2], record(6, b"x")[1..].to_vec()].concat(),
        ),
        (
            "cut mid-record",
            record(6, b"Content-Type: text/plain\r\n\r\nhello")[..20].to_vec(),
        ),
        (
            "closed inside the head",
            record(6, b"Content-Type: text/plain\r\n"),
        ),
        (
            "bad CGI head",
            [record(6, b"no colon here\r\n\r\n"), end_request(0)].concat(),
        ),
        ("overloaded", end_request(2)),
        (
            "wrong request id",
            [vec![1, 6, 0, 9, 0, 0, 0, 0], end_request(0)].concat(),
        ),
        (
            "bad status",
            [record(6, b"Status: 99x\r\n\r\n"), end_request(0)].concat(),
        ),
    ];
    for (name, reply) in cases {
        let server = mock_fastcgi(reply);
        let p = php_proxy(&server.to_string(), &root, "", "");
        let r = get(p.local_addrs()[0], "/x.php");
        assert_eq!(r.status, 502, "{name}");
    }
    // After the head went out, a cut body closes the client connection without a last chunk.
    let reply = [good_head, record(6, b"partial")].concat();
    let server = mock_fastcgi(reply);
    let p = php_proxy(&server.to_string(), &root, "", "");
    let raw = exchange_until_close(
        p.local_addrs()[0],
        b"GET /x.php HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(!raw.ends_with("0\r\n\r\n"), "{raw}");
    // A well-formed answer through the same mock works.
    let reply = [
        record(7, b"a note\n"),
        record(6, b"Status: 203\r\n\r\nfine"),
        record(6, b""),
        end_request(0),
    ]
    .concat();
    let server = mock_fastcgi(reply);
    let p = php_proxy(&server.to_string(), &root, "", "");
    let r = get(p.local_addrs()[0], "/x.php");
    assert_eq!((r.status, text(&r).as_str()), (203, "fine"));
}

#[test]
fn http_groups_reach_servers_on_unix_sockets() {
    let path = temp_path("http-upstream.sock");
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(s.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    // Read one head (no bodies in this test).
                    loop {
                        line.clear();
                        match std::io::BufRead::read_line(&mut reader, &mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let body = "over a unix socket";
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let p = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["unix:{}"]
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#,
        path.display()
    ));
    let addr = p.local_addrs()[0];
    for _ in 0..3 {
        let r = get(addr, "/");
        assert_eq!((r.status, text(&r).as_str()), (200, "over a unix socket"));
    }
    assert_eq!(p.metrics().total(Counter::UpstreamConnects), 1);
}

#[test]
fn proxy_command_speaks_fastcgi() {
    let fpm = PhpFpm::start("cli");
    fpm.script("index.php", "<?php echo 'from the command line';");
    let upstream = format!("fastcgi://{}", unix(&fpm));
    let root = fpm.root.to_str().unwrap();
    let running = Running::proxy(&["--upstream", &upstream, "--root", root, "--workers", "1"]);
    let raw = running.get("x", "/");
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.ends_with("from the command line"), "{raw}");
}

#[test]
fn a_request_that_waits_past_queue_timeout_is_503() {
    let fpm = PhpFpm::start("queue");
    fpm.script("slow.php", "<?php sleep(3); echo 'late';");
    let p = php_proxy(
        &unix(&fpm),
        &fpm.root,
        "max_conns = 1\nqueue_timeout = \"1s\"",
        "",
    );
    let addr = p.local_addrs()[0];
    let first = std::thread::spawn(move || get(addr, "/slow.php").status);
    assert!(eventually(
        || p.metrics().total(Counter::UpstreamConnects) == 1
    ));
    assert_eq!(get(addr, "/slow.php").status, 503);
    assert_eq!(first.join().unwrap(), 200);
    assert_eq!(p.metrics().total(Counter::UpstreamQueueTimeouts), 1);
}

/// `intercept_errors` on a FastCGI route (nginx's `fastcgi_intercept_errors`): a script's 404
/// is replaced by the page, itself a script, run as a GET under the 404.
#[test]
fn a_scripts_error_is_replaced_by_a_page_script() {
    let fpm = PhpFpm::start("error-page");
    fpm.script("gone.php", "<?php http_response_code(404); echo 'php 404';");
    fpm.script(
        "page.php",
        "<?php echo 'page ', $_SERVER['SCRIPT_NAME'], ' ', $_SERVER['REQUEST_METHOD'];",
    );
    fpm.script("teapot.php", "<?php http_response_code(418); echo 'tea';");
    let route = r#", intercept_errors = true, error_pages = [{ codes = [404], to = "/page.php" }]"#;
    let p = php_proxy(&unix(&fpm), &fpm.root, "", route);
    let addr = p.local_addrs()[0];
    let r = send(
        addr,
        "POST /gone.php HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\n",
        b"abc",
    );
    assert_eq!((r.status, text(&r).as_str()), (404, "page /page.php GET"));
    // A code with no page passes through.
    let r = get(addr, "/teapot.php");
    assert_eq!((r.status, text(&r).as_str()), (418, "tea"));
}
