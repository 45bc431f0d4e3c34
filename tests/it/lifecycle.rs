//! The process around the request path: the CLI, config errors, SIGHUP reload, SIGTERM drain,
//! the connection limit, the access log and the admin metrics.

use std::io::{BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use slipstream::observe::metrics::Counter;

use crate::support::*;

fn routed_config(listen: &str, first: SocketAddr, second: SocketAddr, route_to: &str) -> String {
    format!(
        r#"workers = 1

[[listen]]
address = "{listen}"

[upstreams.first]
servers = ["{first}"]

[upstreams.second]
servers = ["{second}"]

[[sites]]
default = true
routes = [{{ path = "/", upstream = "{route_to}" }}]
"#
    )
}

/// Runs `slipstream check` on a file that must be refused; returns what it printed.
fn check_fails(path: &std::path::Path) -> String {
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_reports_every_error_with_file_line_and_reason() {
    let path = temp_path("bad.toml");
    std::fs::write(
        &path,
        "workers = 1\n\n[[listen]]\naddress = \"127.0.0.1:0\"\n\n[upstreams.app]\nservers = [\"not-an-address\"]\nconect_timeout = \"1s\"\n",
    )
    .unwrap();
    let err = check_fails(&path);
    assert!(
        err.contains(&format!(
            "{}:8:1: unknown key `conect_timeout`; did you mean `connect_timeout`?",
            path.display()
        )),
        "{err}"
    );

    std::fs::write(
        &path,
        "[[listen]]\naddress = \"127.0.0.1:0\"\n\n[upstreams.app]\nservers = [\"not-an-address\"]\nconnect_timeout = \"soon\"\n\n[[sites]]\nroutes = [{ path = \"/\", upstream = \"ap\" }]\n",
    )
    .unwrap();
    let err = check_fails(&path);
    let p = path.display();
    assert!(
        err.contains(&format!("{p}:5:12: invalid address \"not-an-address\"")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{p}:6:19: invalid duration \"soon\"")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{p}:9:"))
            && err.contains("unknown upstream \"ap\"; did you mean \"app\"?"),
        "{err}"
    );

    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/slipstream.toml");
    let out = Command::new(BIN)
        .args(["check", "--config", example])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn five_different_mistakes_are_five_messages_with_lines_and_carets() {
    let path = temp_path("five.toml");
    std::fs::write(
        &path,
        "workers = 0\n\n[limits]\ndrain_timeout = 30\n\n[[listen]]\naddress = \"127.0.0.1:8080\"\n\n\
         [[listen]]\naddress = \"127.0.0.1:8080\"\n\n[upstreams.app]\nservers = [\"127.0.0.1:9000\"]\n\
         conect_timeout = \"5 seconds\"\n\n[[sites]]\nroutes = [{ path = \"/\", upstream = \"missing\" }]\n",
    )
    .unwrap();
    let err = check_fails(&path);
    let p = path.display().to_string();
    // file:line:column: message, then the line itself and a caret under the column.
    let expected = [
        (
            "1:11: workers must be between 1 and 1024",
            "1 | workers = 0",
            11,
        ),
        (
            "4:17: invalid type: integer `30`, expected a string: write it in quotes, e.g. \"30s\"",
            "4 | drain_timeout = 30",
            17,
        ),
        (
            "10:11: duplicate listener 127.0.0.1:8080",
            "10 | address = \"127.0.0.1:8080\"",
            11,
        ),
        (
            "14:1: unknown key `conect_timeout`; did you mean `connect_timeout`?",
            "14 | conect_timeout",
            1,
        ),
        (
            "14:18: invalid duration \"5 seconds\": use e.g. \"500ms\"",
            "14 | conect_timeout",
            18,
        ),
        (
            "17:36: unknown upstream \"missing\"; did you mean \"app\"?",
            "17 | routes",
            36,
        ),
    ];
    let lines: Vec<&str> = err.lines().collect();
    for (message, source, column) in expected {
        let at = lines
            .iter()
            .position(|l| l.starts_with(&format!("{p}:{message}")))
            .unwrap_or_else(|| panic!("no {message:?} in\n{err}"));
        assert!(lines[at + 2].trim_start().starts_with(source), "{err}");
        // The caret line: the gutter ("   | ") then the caret under the column.
        let caret = lines[at + 3];
        let gutter = caret.find('|').unwrap() + 2;
        assert_eq!(caret.find('^'), Some(gutter + column - 1), "{err}");
    }
    assert_eq!(err.matches(&format!("{p}:")).count(), 6, "{err}");
}

#[test]
fn sighup_reloads_and_a_bad_config_keeps_the_old_one_serving() {
    let first = Upstream::ok(b"first");
    let second = Upstream::ok(b"second");
    let running = Running::config(
        "reload.toml",
        &routed_config("{listen}", first.addr, second.addr, "first"),
    );
    let path = running.config.clone().unwrap();
    let listen = running.addr.to_string();
    assert!(running.get("a", "/").ends_with(b"first"));

    // A broken config is refused, logged with its line, and the old config keeps serving.
    std::fs::write(
        &path,
        format!("[[listen]]\naddress = \"{listen}\"\nbogus = 1\n"),
    )
    .unwrap();
    running.signal("-HUP");
    assert!(eventually(|| running.logged("reload refused")));
    // The error list follows on the next lines of the same message: wait for them to be read.
    assert!(eventually(|| running.logged("reload.toml:3:1")));
    assert!(running.get("a", "/").ends_with(b"first"));

    // A keep-alive connection opened before the reload...
    let kept = connect(running.addr);
    let mut kept_w = kept.try_clone().unwrap();
    let mut kept_r = BufReader::new(kept);
    kept_w
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut kept_r, false).unwrap().body, b"first");

    // A good config takes effect, on the same listener.
    std::fs::write(
        &path,
        routed_config(&listen, first.addr, second.addr, "second"),
    )
    .unwrap();
    running.signal("-HUP");
    assert!(eventually(|| running.get("a", "/").ends_with(b"second")));
    // ...uses the new config for its next request.
    kept_w
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut kept_r, false).unwrap().body, b"second");
}

#[test]
fn sigterm_finishes_in_flight_requests_then_exits_zero() {
    let gate = Gate::default();
    let held = gate.clone();
    let slow = Upstream::start(move |_| {
        Reply::AfterGate(
            held.clone(),
            Box::new(Reply::Bytes(response(200, b"finished"))),
        )
    });
    let mut running = Running::proxy(&["--upstream", &slow.addr.to_string(), "--workers", "2"]);
    let mut s = connect(running.addr);
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(eventually(|| !slow.seen().is_empty()));
    running.signal("-TERM");
    // The response is released only once the workers are draining: they have closed their
    // listeners.
    assert!(eventually(
        || std::net::TcpStream::connect(running.addr).is_err()
    ));
    gate.open();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"finished");
    assert_eq!(r.header("connection"), Some("close"));
    let status = running.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(running.logged("draining"));
}

#[test]
fn connection_limit_pauses_accepting_and_counts_it() {
    let up = Upstream::ok(b"ok");
    let config = simple_config(up.addr, "").replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nmax_connections = 1",
    );
    let proxy = proxy(&config);
    let addr = proxy.local_addrs()[0];
    let first = connect(addr);
    let mut w = first.try_clone().unwrap();
    let mut reader = BufReader::new(first);
    w.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);

    // The second connection waits in the backlog: no answer while the first is open.
    let mut second = connect(addr);
    second
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        second.read(&mut buf).is_err(),
        "second connection was served over the limit"
    );
    assert!(proxy.metrics().total(Counter::AcceptPaused) >= 1);

    // Closing the first lets the second in.
    drop(w);
    drop(reader);
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut out = Vec::new();
    second.read_to_end(&mut out).unwrap();
    assert_eq!(status_of(&out), 200);
    proxy.shutdown();
}

#[test]
fn client_gone_before_the_response_is_logged_as_499() {
    let gate = Gate::default();
    let held = gate.clone();
    let slow = Upstream::start(move |req| match req.path() {
        "/abandoned" => {
            Reply::AfterGate(held.clone(), Box::new(Reply::Bytes(response(200, b"late"))))
        }
        _ => Reply::Bytes(response(200, b"done")),
    });
    let log = temp_path("access-499.log");
    let _ = std::fs::remove_file(&log);
    let proxy = proxy(&simple_config(slow.addr, "").replace(
        "workers = 1",
        &format!("workers = 1\naccess_log = {:?}", log.display().to_string()),
    ));
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(b"GET /abandoned HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(eventually(|| !slow.seen().is_empty()));
    drop(s);
    assert!(eventually(
        || proxy.metrics().total(Counter::ClientClosed) == 1
    ));
    // Only now may the upstream answer: the proxy saw the client leave first.
    gate.open();
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"GET /done HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let refused = exchange_until_close(proxy.local_addrs()[0], b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(status_of(&refused), 400);
    assert_eq!(status_of(&raw), 200);
    proxy.shutdown();
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("/abandoned"))
        .expect(&text);
    assert!(line.contains("\"GET /abandoned HTTP/1.1\" 499 "), "{line}");
    let line = text.lines().find(|l| l.contains("/done")).expect(&text);
    assert!(line.contains("\" 200 4 "), "{line}");
    assert!(
        text.lines().any(|l| l.contains("\"- - HTTP/1.1\" 400 0")),
        "{text}"
    );
}

#[test]
fn client_reset_before_the_response_is_seen_as_gone() {
    let gate = Gate::default();
    let held = gate.clone();
    let slow = Upstream::start(move |_| {
        Reply::AfterGate(held.clone(), Box::new(Reply::Bytes(response(200, b"late"))))
    });
    let proxy = proxy(&simple_config(slow.addr, ""));
    let mut s = connect(proxy.local_addrs()[0]);
    s.write_all(b"GET /reset HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(eventually(|| !slow.seen().is_empty()));
    // A reset (RST), not a close (FIN): the proxy's peek at the socket fails instead of
    // reading an end.
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
    assert!(
        eventually(|| proxy.metrics().total(Counter::ClientClosed) == 1),
        "the proxy never noticed the client reset the connection"
    );
    gate.open();
    proxy.shutdown();
}

#[test]
fn admin_endpoint_serves_named_counters() {
    let up = Upstream::ok(b"ok");
    let proxy = proxy(
        &simple_config(up.addr, "").replace("workers = 1", "workers = 2\nadmin = \"127.0.0.1:0\""),
    );
    for _ in 0..3 {
        exchange_until_close(
            proxy.local_addrs()[0],
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
    }
    let admin = proxy.admin_addr().unwrap();
    let mut res = http_client()
        .get(&format!("http://{admin}/metrics"))
        .call()
        .unwrap();
    let text = res.body_mut().read_to_string().unwrap();
    assert!(text.contains("slipstream_requests_total 3"), "{text}");
    assert!(text.contains("slipstream_upstream_ports_exhausted_total 0"));
    assert!(text.contains("slipstream_accept_paused_at_connection_limit_total 0"));
    proxy.shutdown();
}

#[test]
fn slow_heads_get_408_and_idle_keep_alive_connections_close() {
    let up = Upstream::ok(b"ok");
    let config = simple_config(up.addr, "").replace(
        "workers = 1",
        "workers = 1\n[limits]\nclient_header_timeout = \"300ms\"\nkeepalive_timeout = \"300ms\"",
    );
    let proxy = proxy(&config);
    let addr = proxy.local_addrs()[0];
    // Slowloris: a head that never completes is answered 408 and the connection closed.
    let mut s = connect(addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: ")
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    assert_eq!(status_of(&out), 408);
    assert!(up.seen().is_empty());
    // An idle keep-alive connection is closed after keepalive_timeout, without a response.
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    w.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(proxy.metrics().total(Counter::ClientTimeouts), 1);
    proxy.shutdown();
}

#[test]
fn a_connection_busy_past_its_first_idle_deadline_stays_open() {
    // The idle timer is armed once per connection and moved only when it fires: a connection
    // with a request every 400 ms outlives the 600 ms timeout it started with, and is closed
    // once it is idle for 600 ms.
    let up = Upstream::ok(b"ok");
    let config = simple_config(up.addr, "").replace(
        "workers = 1",
        "workers = 1\n[limits]\nkeepalive_timeout = \"600ms\"",
    );
    let proxy = proxy(&config);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut reader = BufReader::new(s);
    for i in 0..4 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(400));
        }
        w.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(up.seen().len(), 4);
    proxy.shutdown();
}

#[test]
fn a_second_signal_stops_without_waiting() {
    let gate = Gate::default();
    let held = gate.clone();
    let stuck = Upstream::start(move |_| {
        Reply::AfterGate(held.clone(), Box::new(Reply::Bytes(response(200, b"late"))))
    });
    let mut running = Running::proxy(&["--upstream", &stuck.addr.to_string()]);
    let mut s = connect(running.addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(eventually(|| !stuck.seen().is_empty()));
    running.signal("-TERM");
    assert!(eventually(|| running.logged("draining")));
    running.signal("-INT");
    assert_eq!(running.child.wait().unwrap().code(), Some(1));
    gate.open();
}

#[test]
fn dropping_the_server_stops_its_threads_and_listeners() {
    let up = Upstream::ok(b"ok");
    let proxy = simple_proxy(up.addr);
    let addr = proxy.local_addrs()[0];
    let raw = exchange_until_close(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 200);
    // Drop joins the worker threads, which close the listeners they own.
    drop(proxy);
    assert!(std::net::TcpStream::connect(addr).is_err());
}
