//! Logs, metrics, status and doctor, through real sockets: access-log lines compared with a
//! real nginx's, JSON lines, completeness at shutdown, SIGUSR1 reopen, a log nobody reads,
//! `/metrics` parsed by a Prometheus parser, `/status` in stub_status format, the error log's
//! repeat suppression.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use slipstream::observe::metrics::Counter;

use crate::support::*;

/// A real nginx proxying to `upstream` with the `combined` access log (in `logs/access.log`)
/// and stub_status at `/nginx_status`.
fn nginx_proxy(upstream: SocketAddr) -> Nginx {
    Nginx::start(
        "nginx-observe",
        "access_log logs/access.log;",
        &format!(
            "location = /nginx_status {{ stub_status; }}\n\
             location / {{ proxy_pass http://{upstream}; proxy_http_version 1.1; }}"
        ),
    )
}

/// Requests whose lines exercise every combined field: escaping, missing headers, HEAD, 404.
const REQUESTS: [&[u8]; 4] = [
    b"GET /a?q=\"x\"&y=%20 HTTP/1.1\r\nHost: h.test\r\nUser-Agent: t\"ool/1\t(x)\r\nReferer: http://r.test/\\p\r\nConnection: close\r\n\r\n",
    b"GET /missing HTTP/1.1\r\nHost: h.test\r\nConnection: close\r\n\r\n",
    b"HEAD /a HTTP/1.1\r\nHost: h.test\r\nUser-Agent: curl/8\r\nConnection: close\r\n\r\n",
    b"GET /b HTTP/1.0\r\nUser-Agent: old\r\n\r\n",
];

/// Splits a combined line into its fields; the time is returned apart.
fn combined_fields(line: &str) -> (Vec<String>, String) {
    let open = line.find(" [").unwrap();
    let close = line.find("] ").unwrap();
    let time = line[open + 2..close].to_string();
    let mut fields: Vec<String> = line[..open].split(' ').map(String::from).collect();
    let rest = &line[close + 2..];
    // "request" status bytes "referer" "agent"
    let parts: Vec<&str> = rest.split('"').collect();
    fields.push(parts[1].to_string());
    fields.extend(parts[2].split_whitespace().map(String::from));
    fields.push(parts[3].to_string());
    fields.push(parts[5].to_string());
    (fields, time)
}

/// nginx's `$time_local`: `23/Nov/2026:09:30:00 +0000`.
fn is_time_local(t: &str) -> bool {
    chrono::DateTime::parse_from_str(t, "%d/%b/%Y:%H:%M:%S %z").is_ok()
}

#[test]
fn combined_lines_match_nginx_field_by_field() {
    let upstream = Upstream::start(|req| match req.path() {
        "/missing" => Reply::Bytes(response(404, b"nope")),
        _ => Reply::Bytes(response(200, b"hello")),
    });
    let nginx = nginx_proxy(upstream.addr);
    let log = temp_path("combined.log");
    let _ = std::fs::remove_file(&log);
    let text = simple_config(upstream.addr, "").replace(
        "workers = 1",
        &format!("workers = 1\naccess_log = {:?}", log.display().to_string()),
    );
    let proxy = proxy(&text);
    for r in REQUESTS {
        let ours = exchange_until_close(proxy.local_addrs()[0], r);
        let theirs = exchange_until_close(nginx.addr, r);
        assert_eq!(status_of(&ours), status_of(&theirs));
    }
    proxy.shutdown();
    assert!(eventually(|| std::fs::read_to_string(
        nginx.dir.join("logs/access.log")
    )
    .is_ok_and(|t| t.lines().count() == REQUESTS.len())));
    let ours = std::fs::read_to_string(&log).unwrap();
    let theirs = std::fs::read_to_string(nginx.dir.join("logs/access.log")).unwrap();
    assert_eq!(ours.lines().count(), REQUESTS.len(), "{ours}");
    for (a, b) in ours.lines().zip(theirs.lines()) {
        let ((fa, ta), (fb, tb)) = (combined_fields(a), combined_fields(b));
        assert_eq!(fa, fb, "\nslipstream: {a}\nnginx:      {b}");
        assert!(is_time_local(&ta) && is_time_local(&tb), "{ta} / {tb}");
        assert_eq!(ta[ta.len() - 5..], tb[tb.len() - 5..], "time zone");
    }
}

#[test]
fn stub_status_matches_nginx_format() {
    let upstream = Upstream::ok(b"ok");
    let nginx = nginx_proxy(upstream.addr);
    let proxy = proxy(&format!(
        "admin = \"127.0.0.1:0\"\n{}",
        simple_config(upstream.addr, "")
    ));
    let mut client = connect(proxy.local_addrs()[0]);
    for _ in 0..3 {
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let mut reader = std::io::BufReader::new(client.try_clone().unwrap());
        assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    }
    // The worker updates its gauges just after the response leaves, while this thread may
    // already be asking: wait until the connection is counted as waiting.
    let admin = proxy.admin_addr().unwrap();
    let mut ours = String::new();
    assert!(eventually(|| {
        ours = admin_get(admin, "/status");
        ours.contains("Waiting: 1")
    }));
    let theirs = String::from_utf8(exchange_until_close(
        nginx.addr,
        b"GET /nginx_status HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    ))
    .unwrap();
    let theirs = theirs.split_once("\r\n\r\n").unwrap().1.to_string();
    let shape = |t: &str| -> String {
        t.chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect::<String>()
            .replace("99", "9")
            .replace("99", "9")
    };
    assert_eq!(shape(&ours), shape(&theirs), "\n{ours}\n{theirs}");
    assert_eq!(
        ours,
        "Active connections: 1 \nserver accepts handled requests\n 1 1 3 \nReading: 0 Writing: 0 Waiting: 1 \n"
    );
    let json: serde_json::Value = serde_json::from_str(&admin_get(
        proxy.admin_addr().unwrap(),
        "/status?format=json",
    ))
    .unwrap();
    assert_eq!(json["requests"]["total"], 3);
    assert_eq!(admin_get(proxy.admin_addr().unwrap(), "/health"), "ok\n");
    drop(client);
    proxy.shutdown();
}

/// The sum of the `/metrics` samples whose line starts with `name` (a name, or a name with its
/// labels), 0 when there is none.
pub(crate) fn metric(admin: SocketAddr, name: &str) -> f64 {
    let text = admin_get(admin, "/metrics");
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The body of an admin page.
pub(crate) fn admin_get(admin: SocketAddr, path: &str) -> String {
    let raw = exchange_until_close(
        admin,
        format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
    );
    assert_eq!(status_of(&raw), 200, "{path}");
    let text = String::from_utf8(raw).unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn json_lines_are_complete_after_shutdown() {
    let upstream = Upstream::start(|req| {
        let n: u16 = req.path()[1..].parse().unwrap_or(0);
        Reply::Bytes(response(if n.is_multiple_of(5) { 503 } else { 200 }, b"x"))
    });
    let log = temp_path("json.log");
    let _ = std::fs::remove_file(&log);
    let text = simple_config(upstream.addr, "").replace(
        "workers = 1",
        &format!(
            "workers = 1\naccess_log = {:?}\naccess_log_format = \"json\"",
            log.display().to_string()
        ),
    );
    let proxy = proxy(&text);
    let mut client = connect(proxy.local_addrs()[0]);
    let mut reader = std::io::BufReader::new(client.try_clone().unwrap());
    for i in 1..=200 {
        write!(
            client,
            "GET /{i} HTTP/1.1\r\nHost: j.test\r\nUser-Agent: u\r\n\r\n"
        )
        .unwrap();
        read_response(&mut reader, false).unwrap();
    }
    // Shutdown right away: nothing may still sit in a buffer.
    proxy.shutdown();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 200);
    for (i, v) in (1..).zip(&lines) {
        assert_eq!(v["request_uri"], format!("/{i}"));
        assert_eq!(v["status"], if i % 5 == 0 { 503 } else { 200 });
        assert_eq!(v["upstream_addr"], upstream.addr.to_string());
        assert_eq!(v["host"], "j.test");
        assert_eq!(v["connection"], "0-0");
        assert!(v["request_time"].as_f64().unwrap() >= 0.0);
        let header = v["upstream_header_time"].as_str().unwrap();
        assert!(header.parse::<f64>().is_ok(), "{header}");
    }
}

#[test]
fn sigusr1_reopen_after_rename_loses_no_line() {
    let upstream = Upstream::ok(b"ok");
    let log = temp_path("reopen.log");
    let rotated = temp_path("reopen.log.1");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&rotated);
    let toml = simple_config(upstream.addr, "")
        .replace("127.0.0.1:0", "{listen}")
        .replace(
            "workers = 1",
            &format!(
                "workers = 2\naccess_log = {:?}\naccess_log_format = \"$request_uri\"",
                log.display().to_string()
            ),
        );
    let mut running = Running::config("reopen.toml", &toml);
    for i in 0..50 {
        running.get("a", &format!("/before-{i}"));
    }
    std::fs::rename(&log, &rotated).unwrap();
    running.signal("-USR1");
    assert!(eventually(|| log.exists()));
    for i in 0..50 {
        running.get("a", &format!("/after-{i}"));
    }
    running.signal("-TERM");
    assert!(running.child.wait().unwrap().success());
    let old = std::fs::read_to_string(&rotated).unwrap();
    let new = std::fs::read_to_string(&log).unwrap();
    let mut all: Vec<&str> = old.lines().chain(new.lines()).collect();
    all.sort_unstable();
    let mut want: Vec<String> = (0..50)
        .flat_map(|i| [format!("/before-{i}"), format!("/after-{i}")])
        .collect();
    want.sort_unstable();
    assert_eq!(all, want);
    // Lines after the reopen went to the new file.
    assert!(new.contains("/after-49"), "{new}");
}

#[test]
fn a_log_nobody_reads_never_stalls_requests_and_drops_are_counted() {
    let upstream = Upstream::ok(b"ok");
    let fifo = temp_path("nobody-reads.fifo");
    let _ = std::fs::remove_file(&fifo);
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // A reader that never reads: the pipe fills after 64 KiB and the writer blocks.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let text = simple_config(upstream.addr, "").replace(
        "workers = 1",
        &format!("workers = 1\naccess_log = {:?}", fifo.display().to_string()),
    );
    let proxy = proxy(&text);
    let agent = http_client();
    let agent_value = "a".repeat(8000);
    // 8 KB lines: 3000 of them are 24 MB, beyond what the writer may hold back.
    for _ in 0..3000 {
        let mut res = agent
            .get(&format!("http://{}/", proxy.local_addrs()[0]))
            .header("User-Agent", &agent_value)
            .call()
            .unwrap();
        assert_eq!(res.status(), 200);
        let _ = res.body_mut().read_to_string();
    }
    assert!(eventually(|| proxy
        .metrics()
        .total(Counter::AccessLogLinesDropped)
        > 0));
    assert!(eventually(|| proxy
        .metrics()
        .total(Counter::AccessLogLines)
        == 3000));
    // Let the writer finish so the proxy can stop.
    let drain = std::thread::spawn(move || {
        let mut reader = reader;
        let mut buf = vec![0u8; 1 << 16];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    });
    proxy.shutdown();
    drain.join().unwrap();
}

use std::os::unix::fs::OpenOptionsExt;

#[test]
fn sites_have_their_own_logs_or_none() {
    let upstream = Upstream::ok(b"ok");
    let (main, shop) = (temp_path("sites-main.log"), temp_path("sites-shop.log"));
    let _ = std::fs::remove_file(&main);
    let _ = std::fs::remove_file(&shop);
    let proxy = proxy(&format!(
        r#"
workers = 1
access_log = {main:?}
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[[sites]]
name = "shop"
hosts = ["shop.test"]
access_log = {shop:?}
access_log_format = "$site $host $request_uri"
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
hosts = ["quiet.test"]
access_log = "off"
routes = [{{ path = "/", upstream = "app" }}]
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#,
        upstream.addr,
        main = main.display().to_string(),
        shop = shop.display().to_string(),
    ));
    for host in ["shop.test", "quiet.test", "other.test"] {
        let raw = exchange_until_close(
            proxy.local_addrs()[0],
            format!("GET /{host} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(status_of(&raw), 200);
    }
    proxy.shutdown();
    assert_eq!(
        std::fs::read_to_string(&shop).unwrap(),
        "shop shop.test /shop.test\n"
    );
    let main = std::fs::read_to_string(&main).unwrap();
    assert_eq!(main.lines().count(), 1, "{main}");
    assert!(
        main.contains("\"GET /other.test HTTP/1.1\" 200 2 "),
        "{main}"
    );
}

/// Every counter of a known request sequence, read back through a Prometheus text parser.
#[test]
fn metrics_parse_and_match_a_known_sequence() {
    let upstream = Upstream::start(|req| match req.path() {
        "/fail" => Reply::Bytes(response(500, b"fail")),
        _ => Reply::Bytes(response(200, b"fine")),
    });
    let proxy = proxy(&format!(
        r#"
workers = 1
admin = "127.0.0.1:0"
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[upstreams.dead]
servers = ["127.0.0.1:1"]
retries = 0
[[sites]]
name = "shop"
hosts = ["shop.test"]
routes = [{{ path = "/", upstream = "app" }}, {{ path = "/dead/", upstream = "dead" }}]
"#,
        upstream.addr
    ));
    let addr = proxy.local_addrs()[0];
    let send = |path: &str, host: &str| {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        status_of(&exchange_until_close(addr, request.as_bytes()))
    };
    let statuses: Vec<u16> = [
        ("/ok", "shop.test"),
        ("/ok", "shop.test"),
        ("/ok", "shop.test"),
        ("/fail", "shop.test"),
        ("/dead/x", "shop.test"),
        ("/ok", "unknown.test"),
    ]
    .iter()
    .map(|(p, h)| send(p, h))
    .collect();
    // The first site is the default: the unknown host still reaches "shop".
    assert_eq!(statuses, [200, 200, 200, 500, 502, 200]);
    let bad = exchange_until_close(addr, b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    assert_eq!(status_of(&bad), 400);
    let (scrape, text) = read_metrics(proxy.admin_addr().unwrap());
    let value = |name: &str, labels: &[(&str, &str)]| sample(&scrape, &text, name, labels);
    assert_eq!(value("slipstream_requests_total", &[]), 6.0);
    assert_eq!(value("slipstream_bad_requests_total", &[]), 1.0);
    assert_eq!(value("slipstream_responses_5xx_generated_total", &[]), 1.0);
    assert_eq!(
        value("slipstream_responses_5xx_from_upstream_total", &[]),
        1.0
    );
    assert_eq!(value("slipstream_responses_ok_total", &[]), 4.0);
    assert_eq!(value("slipstream_connections_accepted_total", &[]), 7.0);
    assert_eq!(value("slipstream_config_generation", &[]), 0.0);
    let route = [("site", "shop"), ("route", "/")];
    let class = |c| [route[0], route[1], ("class", c)];
    assert_eq!(
        value("slipstream_route_responses_total", &class("2xx")),
        4.0
    );
    assert_eq!(
        value("slipstream_route_responses_total", &class("5xx")),
        1.0
    );
    let dead = [("site", "shop"), ("route", "/dead/"), ("class", "5xx")];
    assert_eq!(value("slipstream_route_responses_total", &dead), 1.0);
    let server = upstream.addr.to_string();
    let s = [("group", "app"), ("server", server.as_str())];
    assert_eq!(value("slipstream_upstream_server_requests_total", &s), 5.0);
    assert_eq!(value("slipstream_upstream_server_connects_total", &s), 1.0);
    assert_eq!(value("slipstream_upstream_server_reused_total", &s), 4.0);
    assert_eq!(value("slipstream_upstream_server_reuse_ratio", &s), 0.8);
    let refused = [("group", "dead"), ("errno", "ECONNREFUSED")];
    assert_eq!(
        value("slipstream_upstream_server_connect_errors_total", &refused),
        1.0
    );
    let durations = scrape
        .samples
        .iter()
        .find(|s| s.metric == "slipstream_request_duration_seconds")
        .expect(&text);
    match &durations.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().unwrap().count, 6.0);
        }
        other => panic!("{other:?}"),
    }
    // The worker counts a connection closed just after the client sees it close: wait for
    // the last one to leave the gauge.
    let waiting = || {
        let (scrape, text) = read_metrics(proxy.admin_addr().unwrap());
        let state = [("state", "waiting")];
        sample(&scrape, &text, "slipstream_connections", &state)
    };
    assert!(eventually(|| waiting() == 0.0), "{}", waiting());
    proxy.shutdown();
}

/// `/metrics` of a proxy that has served requests (so the per-server, per-route, pool and
/// histogram families all have samples) passes `promtool check metrics`: HELP and TYPE once
/// per family, well-formed histograms, counters named `_total`, no lint.
#[test]
fn metrics_pass_promtool() {
    let upstream = Upstream::start(|req| match req.path() {
        "/fail" => Reply::Bytes(response(500, b"fail")),
        _ => Reply::Bytes(response(200, b"fine")),
    });
    let proxy = proxy(&format!(
        r#"
workers = 2
admin = "127.0.0.1:0"
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[upstreams.app.health]
path = "/health"
interval = "50ms"
[upstreams.dead]
servers = ["127.0.0.1:1"]
retries = 0
[[sites]]
name = "shop \"quoted\" \\ site"
hosts = ["shop.test"]
routes = [{{ path = "/", upstream = "app" }}, {{ path = "/dead/", upstream = "dead" }}]
[[sites]]
name = "other"
hosts = ["other.test"]
routes = [{{ path = "/", upstream = "app" }}]
"#,
        upstream.addr
    ));
    let addr = proxy.local_addrs()[0];
    for (path, host) in [
        ("/ok", "shop.test"),
        ("/fail", "shop.test"),
        ("/dead/x", "shop.test"),
        ("/ok", "other.test"),
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        assert_ne!(
            status_of(&exchange_until_close(addr, request.as_bytes())),
            0
        );
    }
    let admin = proxy.admin_addr().unwrap();
    // Wait for an active check's result, so the check families are there too.
    assert!(eventually(
        || admin_get(admin, "/metrics").contains("slipstream_upstream_server_checks_total{")
    ));
    let text = admin_get(admin, "/metrics");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; .ci/test-tools installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}\n{text}");
    assert_eq!(report.trim(), "", "{text}");
    // promtool's parser merges a family whose samples are split by another's; the format
    // does not allow it.
    families_are_whole(&text);
    proxy.shutdown();
}

/// Each family's HELP and TYPE come once, before its samples, and its samples are not
/// interleaved with another family's.
fn families_are_whole(text: &str) {
    let mut done = std::collections::HashSet::new();
    let (mut current, mut kind, mut helped) = (String::new(), String::new(), false);
    for line in text.lines() {
        let words: Vec<&str> = line.splitn(4, ' ').collect();
        match words[..] {
            ["#", "HELP", name, _] => {
                assert!(done.insert(name.to_string()), "{name} twice in\n{text}");
                (current, helped) = (name.to_string(), true);
            }
            ["#", "TYPE", name, t] => {
                assert!(helped && name == current, "TYPE without HELP: {line}");
                (kind, helped) = (t.to_string(), false);
            }
            _ => {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|s| name.strip_suffix(s))
                        .unwrap_or(name),
                    _ => name,
                };
                assert_eq!(family, current, "{line} outside its family in\n{text}");
            }
        }
    }
}

/// `/metrics` read through a Prometheus text parser, and its text.
fn read_metrics(admin: SocketAddr) -> (prometheus_parse::Scrape, String) {
    let text = admin_get(admin, "/metrics");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    (scrape, text)
}

/// The one sample of `name` with `labels` in a scrape.
fn sample(
    scrape: &prometheus_parse::Scrape,
    text: &str,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?} in\n{text}");
    found[0]
}

/// A failing upstream under load writes one error line per second, not one per request.
#[test]
fn repeated_errors_are_written_once_and_counted() {
    let errors = temp_path("errors.json.log");
    let _ = std::fs::remove_file(&errors);
    let toml = format!(
        r#"
workers = 1
error_log = {:?}
error_log_format = "json"
[[listen]]
address = "{{listen}}"
[upstreams.app]
servers = ["127.0.0.1:1"]
retries = 0
[[sites]]
default = true
routes = [{{ path = "/", upstream = "app" }}]
"#,
        errors.display().to_string()
    );
    let running = Running::config("errors.toml", &toml);
    for _ in 0..200 {
        assert_eq!(status_of(&running.get("a", "/")), 502);
    }
    // The summary comes when the second is over.
    let count = || -> (usize, u64) {
        let text = std::fs::read_to_string(&errors).unwrap_or_default();
        let mut written = 0;
        let mut repeated = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let msg = v["msg"].as_str().unwrap();
            if !msg.starts_with("upstream refused the connection") {
                continue;
            }
            match msg.split_once("(repeated ") {
                Some((_, n)) => repeated += n.trim_end_matches(" times)").parse::<u64>().unwrap(),
                None => {
                    written += 1;
                    assert_eq!(v["level"], "warn");
                    assert!(v["conn"].as_str().unwrap().starts_with("0-"), "{line}");
                    assert!(v["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
                }
            }
        }
        (written, repeated)
    };
    assert!(
        eventually(|| {
            let (written, repeated) = count();
            written as u64 + repeated == 200
        }),
        "{:?}",
        count()
    );
    assert!(count().0 <= 10, "{:?}", count());
}

/// The temp directory of a doctor test, filled like /proc.
fn fake_proc(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let root = temp_path(name);
    let _ = std::fs::remove_dir_all(&root);
    let healthy = [
        ("self/limits", "Limit  Soft Limit  Hard Limit  Units\nMax open files            1048576              1048576              files     \n"),
        ("sys/net/core/somaxconn", "65535\n"),
        ("sys/net/ipv4/tcp_max_syn_backlog", "65535\n"),
        ("sys/net/ipv4/ip_local_port_range", "10240\t65535\n"),
        ("sys/net/ipv4/tcp_tw_reuse", "1\n"),
        ("sys/net/netfilter/nf_conntrack_max", "1048576\n"),
        ("sys/net/netfilter/nf_conntrack_count", "12\n"),
        ("net/netstat", "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPMemoryPressures\nTcpExt: 0 0 0 0\n"),
        ("net/sockstat", "sockets: used 9\nTCP: inuse 1 orphan 0 tw 3 alloc 1 mem 4\n"),
    ];
    for (path, text) in healthy.iter().chain(files) {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    root
}

/// Runs doctor on `root` (and `extra` args); exit status and findings by check.
fn doctor(root: &Path, extra: &[&str]) -> (i32, Vec<serde_json::Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .args(["doctor", "--json", "--sample", "0", "--proc-root"])
        .arg(root)
        .args(extra)
        .output()
        .unwrap();
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (
        out.status.code().unwrap(),
        findings.as_array().unwrap().clone(),
    )
}

fn severity_of(findings: &[serde_json::Value], check: &str) -> String {
    findings
        .iter()
        .find(|f| f["check"] == check)
        .map(|f| f["severity"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no {check} in {findings:?}"))
}

#[test]
fn doctor_finds_each_trap_in_injected_proc_files() {
    let (code, findings) = doctor(&fake_proc("doctor-healthy", &[]), &[]);
    assert_eq!(code, 0, "{findings:?}");
    assert!(
        findings.iter().all(|f| f["severity"] == "ok"),
        "{findings:?}"
    );
    let traps: [(&str, &str, &str); 6] = [
        ("sys/net/core/somaxconn", "128\n", "somaxconn"),
        (
            "sys/net/ipv4/ip_local_port_range",
            "60000 60500\n",
            "port_range",
        ),
        (
            "self/limits",
            "Max open files            1024                 4096                 files     \n",
            "nofile",
        ),
        (
            "sys/net/netfilter/nf_conntrack_count",
            "1000000\n",
            "conntrack",
        ),
        (
            "net/sockstat",
            "TCP: inuse 1 orphan 0 tw 40000 alloc 1 mem 4\n",
            "time_wait",
        ),
        ("sys/net/ipv4/tcp_max_syn_backlog", "256\n", "syn_backlog"),
    ];
    for (file, text, check) in traps {
        let (code, findings) = doctor(&fake_proc(&format!("doctor-{check}"), &[(file, text)]), &[]);
        assert_eq!(code, 1, "{check}: {findings:?}");
        assert_eq!(severity_of(&findings, check), "critical");
        // Worst first, with evidence and the fix.
        assert_eq!(findings[0]["check"], check);
        assert!(!findings[0]["fix"].as_str().unwrap().is_empty());
    }
    let boot = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPMemoryPressures\nTcpExt: 0 312 312 0\n";
    let (code, findings) = doctor(
        &fake_proc("doctor-overflows", &[("net/netstat", boot)]),
        &[],
    );
    assert_eq!(
        (code, severity_of(&findings, "listen_overflows")),
        (0, "warning".into())
    );
}

/// The port-range finding says what the upstream pools keep, and what none means: never
/// "keep up to 0 connections".
#[test]
fn doctor_says_what_no_pooled_connections_means() {
    let root = fake_proc("doctor-pools", &[]);
    let evidence = |extra: &[&str]| {
        let (_, findings) = doctor(&root, extra);
        let f = findings
            .iter()
            .find(|f| f["check"] == "port_range")
            .unwrap();
        f["evidence"].as_str().unwrap().to_string()
    };
    let config = |name: &str, extra: &str| {
        let path = temp_path(name);
        std::fs::write(&path, simple_config("127.0.0.1:9".parse().unwrap(), extra)).unwrap();
        path.to_str().unwrap().to_string()
    };
    let none = evidence(&[]);
    assert!(
        none.contains("no upstream connections are kept (no upstreams"),
        "{none}"
    );
    let off = evidence(&[
        "--config",
        &config("doctor-keepalive-off.toml", "keepalive = 0"),
    ]);
    assert!(
        off.contains("upstream keep-alive is off (keepalive = 0): no connection is kept"),
        "{off}"
    );
    let on = evidence(&[
        "--config",
        &config("doctor-keepalive-on.toml", "keepalive = 16"),
    ]);
    assert!(
        on.contains("pools keep up to 16 idle connections per server"),
        "{on}"
    );
    for text in [none, off, on] {
        assert!(!text.contains("up to 0"), "{text}");
    }
}

/// Opens the FIFO `path` for writing once a reader has it open (panics after a minute).
fn open_when_read(path: &Path) -> std::fs::File {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path);
        match opened {
            Ok(f) => return f,
            // ENXIO: nobody reads it yet.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "nobody opened {path:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

/// Waits until `cond` holds (panics after a minute, naming `what`).
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not after a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether the process `pid` has `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
    })
}

#[test]
fn doctor_sees_counters_move_during_the_sample() {
    let root = fake_proc("doctor-sample", &[]);
    // net/netstat is a FIFO: the test hands doctor each of its two reads of it (before and
    // after the sample), so the counters move between them.
    let netstat = root.join("net/netstat");
    std::fs::remove_file(&netstat).unwrap();
    assert!(Command::new("mkfifo")
        .arg(&netstat)
        .status()
        .unwrap()
        .success());
    let netstat = netstat.canonicalize().unwrap();
    let doctor = Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .args(["doctor", "--sample", "1", "--proc-root"])
        .arg(&root)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let head = "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPMemoryPressures\n";
    let mut first = open_when_read(&netstat);
    first
        .write_all(format!("{head}TcpExt: 0 0 0 0\n").as_bytes())
        .unwrap();
    // Doctor's open returns (its descriptor shows) and its read waits for the end, which
    // comes when this writer closes; the first read is over when doctor closes the FIFO, and
    // only then is the next writer's text the second read's.
    let pid = doctor.id();
    until("doctor opens net/netstat", || has_open(pid, &netstat));
    drop(first);
    until("doctor closes net/netstat", || !has_open(pid, &netstat));
    open_when_read(&netstat)
        .write_all(format!("{head}TcpExt: 0 5 5 0\n").as_bytes())
        .unwrap();
    let mut doctor = doctor;
    until("doctor exits", || doctor.try_wait().unwrap().is_some());
    let out = doctor.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("CRITICAL") && first.contains("listen_"),
        "{text}"
    );
    assert!(text.contains("+5 in 1 s"), "{text}");
}

/// In a network namespace with the limits set low, doctor reads the real kernel files.
#[test]
fn doctor_finds_low_limits_in_a_network_namespace() {
    let bin = env!("CARGO_BIN_EXE_slipstream");
    let script = format!(
        "sysctl -qw net.core.somaxconn=64 && sysctl -qw net.ipv4.ip_local_port_range='40000 40200' \
         && ulimit -n 512 && exec {bin} doctor --json --sample 0"
    );
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let findings: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    for check in ["somaxconn", "port_range", "nofile"] {
        assert_eq!(severity_of(&findings, check), "critical", "{check}");
    }
    if Path::new("/proc/sys/net/netfilter/nf_conntrack_max").exists() {
        severity_of(&findings, "conntrack");
    }
}

/// With --admin, doctor reads a running slipstream's trap counters.
#[test]
fn doctor_reads_live_counters() {
    let proxy = proxy(&format!(
        "admin = \"127.0.0.1:0\"\n{}",
        simple_config("127.0.0.1:1".parse().unwrap(), "retries = 0")
    ));
    let raw = exchange_until_close(
        proxy.local_addrs()[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&raw), 502);
    let admin = proxy.admin_addr().unwrap().to_string();
    let (_, findings) = doctor(&fake_proc("doctor-live", &[]), &["--admin", &admin]);
    assert_eq!(severity_of(&findings, "live_upstream_errors"), "warning");
    assert_eq!(severity_of(&findings, "live_eaddrnotavail"), "ok");
    assert_eq!(severity_of(&findings, "live_uring_unavailable"), "ok");
    proxy.shutdown();
}
