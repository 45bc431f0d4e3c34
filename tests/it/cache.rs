//! The response cache through real sockets, with a counting origin: a stampede of cold
//! requests makes one upstream request, a stale object is validated with a conditional request,
//! `stale-if-error` serves a stale object while the origin is down (and only within its
//! window), `Vary` keeps variants apart, unsafe methods invalidate, what must not be stored is
//! not, and ranges and conditionals are answered from the stored object.

use std::io::{BufReader, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cache_tiers::{big_reply_for, disk_config};
use crate::support::{connect, proxy, read_response, RawResponse, Reply, Upstream};

pub(crate) fn ask(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    fields: &str,
) -> RawResponse {
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: a\r\n{fields}Connection: close\r\n\r\n");
    w.write_all(head.as_bytes()).unwrap();
    read_response(&mut BufReader::new(s), method == "HEAD").unwrap()
}

pub(crate) fn get(addr: std::net::SocketAddr, path: &str) -> RawResponse {
    ask(addr, "GET", path, "")
}

pub(crate) fn config(upstream: std::net::SocketAddr, cache: &str) -> String {
    format!(
        r#"
workers = 2
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{upstream}"]
[cache_zones.main]
memory = "16m"
[[sites]]
default = true
cache = {{ zone = "main"{cache} }}
routes = [{{ location = "/", upstream = "app" }}]
"#
    )
}

pub(crate) fn reply(fields: &str, body: &str) -> Reply {
    Reply::Bytes(
        format!(
            "HTTP/1.1 200 OK\r\n{fields}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

#[test]
fn a_stampede_of_cold_requests_makes_one_upstream_request() {
    let upstream = Upstream::start(|_| {
        Reply::Delay(
            Duration::from_millis(300),
            Box::new(reply("Cache-Control: max-age=60\r\n", "hot")),
        )
    });
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    let threads: Vec<_> = (0..100)
        .map(|_| std::thread::spawn(move || get(addr, "/hot")))
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hot"[..]));
    }
    assert_eq!(
        upstream.seen().len(),
        1,
        "one upstream request for 100 misses"
    );
    let again = get(addr, "/hot");
    assert!(again.header("cache-status").unwrap().contains("hit"));
    assert_eq!(upstream.seen().len(), 1);
}

#[test]
fn a_stale_object_is_validated_with_a_conditional_request() {
    let upstream = Upstream::start(|seen| {
        match seen.header("if-none-match") {
        Some("\"v1\"") => Reply::Bytes(
            b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=2\r\nX-Checked: yes\r\n\r\n".to_vec(),
        ),
        _ => reply("Cache-Control: max-age=2\r\nETag: \"v1\"\r\n", "body-v1"),
    }
    });
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/doc").body, b"body-v1");
    assert!(get(addr, "/doc")
        .header("cache-status")
        .unwrap()
        .contains("hit"));
    std::thread::sleep(Duration::from_millis(3100));
    let r = get(addr, "/doc");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"body-v1"[..]));
    assert_eq!(
        r.header("x-checked"),
        Some("yes"),
        "the 304's fields update the stored head"
    );
    assert!(r.header("cache-status").unwrap().contains("fwd-status=304"));
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].header("if-none-match"), Some("\"v1\""));
    // The client's own conditional is answered from the stored object.
    let r = ask(addr, "GET", "/doc", "If-None-Match: \"v1\"\r\n");
    assert_eq!(r.status, 304);
    assert_eq!(upstream.seen().len(), 2);
}

#[test]
fn stale_if_error_serves_the_stale_object_within_its_window_only() {
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let upstream = Upstream::start(move |_| {
        if d.load(Ordering::SeqCst) {
            Reply::Close
        } else {
            reply("Cache-Control: max-age=1, stale-if-error=2\r\n", "kept")
        }
    });
    let server = proxy(&config(upstream.addr, ", revalidate = false"));
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/s").body, b"kept");
    down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1500));
    let r = get(addr, "/s");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"kept"[..]));
    let status = r.header("cache-status").unwrap();
    assert!(status.starts_with("slipstream; hit; ttl="), "{status}");
    assert!(
        !status.contains("ttl=1") && !status.contains("ttl=2"),
        "stale: {status}"
    );
    std::thread::sleep(Duration::from_millis(3000));
    let r = get(addr, "/s");
    assert!(matches!(r.status, 502 | 504), "{}", r.status);
}

/// nginx's `use_stale` statuses: a stale object stands in for the answers listed (a 404 and a
/// 500 here, with no `stale-if-error` in the object), and not for others (a 403).
#[test]
fn use_stale_stands_in_for_the_statuses_it_lists() {
    let answer = Arc::new(AtomicUsize::new(200));
    let a = answer.clone();
    let upstream = Upstream::start(move |_| match a.load(Ordering::SeqCst) {
        200 => reply("Cache-Control: max-age=1\r\n", "kept"),
        status => Reply::Bytes(
            format!("HTTP/1.1 {status} No\r\nContent-Length: 2\r\n\r\nno").into_bytes(),
        ),
    });
    let rule = r#", revalidate = false, use_stale = ["http_404", "http_500"]"#;
    let server = proxy(&config(upstream.addr, rule));
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/u").body, b"kept");
    std::thread::sleep(Duration::from_millis(2100));
    for (status, expected) in [(404, 200), (500, 200), (403, 403)] {
        answer.store(status, Ordering::SeqCst);
        let r = get(addr, "/u");
        assert_eq!(r.status, expected, "upstream {status}");
        if expected == 200 {
            assert_eq!(r.body, b"kept", "upstream {status}");
        }
    }
}

#[test]
fn vary_keeps_variants_apart() {
    let upstream = Upstream::start(|seen| {
        let lang = seen.header("accept-language").unwrap_or("none").to_string();
        reply(
            "Cache-Control: max-age=60\r\nVary: Accept-Language\r\n",
            &lang,
        )
    });
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    for _ in 0..2 {
        assert_eq!(
            ask(addr, "GET", "/v", "Accept-Language: en\r\n").body,
            b"en"
        );
        assert_eq!(
            ask(addr, "GET", "/v", "Accept-Language: fr\r\n").body,
            b"fr"
        );
        assert_eq!(get(addr, "/v").body, b"none");
    }
    assert_eq!(upstream.seen().len(), 3);
}

#[test]
fn what_must_not_be_stored_is_not() {
    let upstream = Upstream::start(|seen| match seen.path() {
        "/private" => reply("Cache-Control: private, max-age=60\r\n", "p"),
        "/no-store" => reply("Cache-Control: no-store, max-age=60\r\n", "n"),
        "/cookie" => reply("Cache-Control: max-age=60\r\nSet-Cookie: a=1\r\n", "c"),
        "/none" => reply("", "x"),
        _ => reply("Cache-Control: max-age=60\r\n", "auth"),
    });
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    for _ in 0..2 {
        for path in ["/private", "/no-store", "/cookie", "/none"] {
            assert_eq!(get(addr, path).status, 200);
        }
        assert_eq!(
            ask(addr, "GET", "/auth", "Authorization: Basic eDp5\r\n").status,
            200
        );
    }
    assert_eq!(
        upstream.seen().len(),
        10,
        "nothing was answered from the cache"
    );
}

/// An origin that answers a POST with `posted` and every other request with `version-N` and
/// `fields`, N counting those requests (also returned).
fn versioned_origin(fields: &'static str) -> (Upstream, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let upstream = Upstream::start(move |seen| {
        if seen.line.starts_with("POST") {
            return reply("", "posted");
        }
        let n = c.fetch_add(1, Ordering::SeqCst);
        reply(fields, &format!("version-{n}"))
    });
    (upstream, count)
}

#[test]
fn unsafe_methods_invalidate_and_ranges_come_from_the_stored_object() {
    let (upstream, count) = versioned_origin("Cache-Control: max-age=60\r\nETag: \"e\"\r\n");
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/r").body, b"version-0");
    let part = ask(addr, "GET", "/r", "Range: bytes=2-4\r\n");
    assert_eq!((part.status, part.body.as_slice()), (206, &b"rsi"[..]));
    assert_eq!(part.header("content-range"), Some("bytes 2-4/9"));
    let head = ask(addr, "HEAD", "/r", "");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("9"))
    );
    assert_eq!(
        ask(addr, "POST", "/r", "Content-Length: 0\r\n").body,
        b"posted"
    );
    let after = get(addr, "/r");
    assert_eq!(
        after.body, b"version-1",
        "the POST invalidated it: {:?}",
        after.headers
    );
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

/// nginx's WordPress key holds the method: a POST's key names nothing stored, and its success
/// still invalidates what a GET of its target stored.
#[test]
fn unsafe_methods_invalidate_under_a_key_with_the_method() {
    let (upstream, count) = versioned_origin("Cache-Control: max-age=60\r\n");
    let key = r#", key = "$scheme$request_method$host$request_uri""#;
    let server = proxy(&config(upstream.addr, key));
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/w").body, b"version-0");
    assert_eq!(get(addr, "/w").body, b"version-0", "a hit");
    let post = ask(addr, "POST", "/w", "Content-Length: 0\r\n");
    assert_eq!(post.body, b"posted");
    assert_eq!(
        get(addr, "/w").body,
        b"version-1",
        "the POST invalidated it"
    );
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[test]
fn hits_keep_the_connection_and_answer_each_request_once() {
    let upstream = Upstream::start(|_| reply("Cache-Control: max-age=60\r\n", "kept-alive"));
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    let s = connect(addr);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..3 {
        w.write_all(b"GET /k HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let resp = read_response(&mut r, false).unwrap();
        assert_eq!(
            (resp.status, resp.body.as_slice()),
            (200, &b"kept-alive"[..])
        );
    }
    w.write_all(b"GET /k HTTP/1.1\r\nHost: a\r\n\r\nGET /k HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut r, false).unwrap().status, 200);
    assert_eq!(read_response(&mut r, false).unwrap().status, 200);
    assert!(
        read_response(&mut r, false).is_none(),
        "two answers to two requests"
    );
    assert_eq!(upstream.seen().len(), 1);
}

#[test]
fn purge_from_the_admin_listener_and_the_figures_and_log_show_the_cache() {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let upstream = Upstream::start(move |_| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        reply("Cache-Control: max-age=60\r\n", &format!("v{n}"))
    });
    let log = crate::support::temp_path("cache-status.log");
    let _ = std::fs::remove_file(&log);
    let text = config(upstream.addr, "").replace(
        "workers = 2",
        &format!(
            "workers = 1\nadmin = \"127.0.0.1:0\"\n{}access_log = {:?}\naccess_log_format = \"$request_uri $upstream_cache_status\"",
            crate::support::admin_token_line(),
            log.display().to_string()
        ),
    );
    let server = proxy(&text);
    let (addr, admin) = (server.local_addrs()[0], server.admin_addr().unwrap());
    assert_eq!(get(addr, "/img/a").body, b"v0");
    assert_eq!(get(addr, "/img/b").body, b"v1");
    assert_eq!(get(addr, "/doc").body, b"v2");
    assert_eq!(get(addr, "/img/a").body, b"v0", "a hit");
    let admin_call = |method: &str, query: &str| {
        let s = connect(admin);
        let mut w = s.try_clone().unwrap();
        let token = crate::support::ADMIN_TOKEN;
        let head = format!(
            "{method} /cache/purge?{query} HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        w.write_all(head.as_bytes()).unwrap();
        read_response(&mut BufReader::new(s), false).unwrap()
    };
    assert_eq!(admin_call("GET", "key=x").status, 405);
    let r = admin_call("POST", "zone=main&key=http%3A%2F%2Fa%2Fdoc");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"{\"purged\":1}\n"[..])
    );
    let r = admin_call("PURGE", "prefix=http://a/img/");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"{\"purged\":2}\n"[..])
    );
    assert_eq!(admin_call("POST", "zone=other&key=x").status, 400);
    assert_eq!(get(addr, "/doc").body, b"v3");
    assert_eq!(get(addr, "/img/a").body, b"v4");
    let metrics = crate::observe::admin_get(admin, "/metrics");
    for line in [
        "slipstream_cache_responses_total{zone=\"main\",status=\"HIT\"} 1",
        "slipstream_cache_responses_total{zone=\"main\",status=\"MISS\"} 5",
        "slipstream_cache_purged_total{zone=\"main\"} 3",
        "slipstream_cache_entries{zone=\"main\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // A ban by pattern: every key the regular expression matches.
    let r = admin_call("POST", "pattern=%2Fdoc%24");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"{\"purged\":1}\n"[..])
    );
    assert_eq!(admin_call("POST", "pattern=%28").status, 400);
    assert_eq!(get(addr, "/img/a").body, b"v4", "not matched: kept");
    assert_eq!(get(addr, "/doc").body, b"v5", "banned: fetched again");
    server.shutdown();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        ["/img/a MISS", "/img/b MISS", "/doc MISS", "/img/a HIT"],
        "{text}"
    );
}

#[test]
fn a_reload_keeps_the_cache() {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    let upstream = Upstream::start(move |_| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        reply("Cache-Control: max-age=60\r\n", &format!("v{n}"))
    });
    let toml =
        config(upstream.addr, "").replace("address = \"127.0.0.1:0\"", "address = \"{listen}\"");
    let mut running = crate::support::Running::config("cache-reload.toml", &toml);
    let addr = running.addr;
    assert_eq!(get(addr, "/kept").body, b"v0");
    running.signal("-HUP");
    assert!(running.wait_logged("reloaded"));
    let r = get(addr, "/kept");
    assert_eq!(r.body, b"v0", "{:?}", r.header("cache-status"));
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// A hit's head is written once per entry and kept, for one shape of request: each hit of
/// another shape (HTTP/1.0, `Connection: close`, a HEAD) and each hit after a reload that
/// changed the route's fields gets a head of its own, with its own `Age` (not the one the
/// site adds) and `Cache-Status`.
#[test]
fn a_kept_hit_head_serves_only_requests_of_its_shape() {
    let upstream = Upstream::start(|_| reply("Cache-Control: max-age=60\r\n", "shaped"));
    let toml = config(upstream.addr, "")
        .replace("address = \"127.0.0.1:0\"", "address = \"{listen}\"")
        .replace(
            "default = true",
            "default = true\nadd_headers = { X-Gen = \"one\", Age = \"999\" }",
        );
    let mut running = crate::support::Running::config("cache-shapes.toml", &toml);
    let addr = running.addr;
    assert_eq!(get(addr, "/s").body, b"shaped");
    let hit = |request: &str, head_only: bool| {
        let s = connect(addr);
        let mut w = s.try_clone().unwrap();
        w.write_all(request.as_bytes()).unwrap();
        let r = read_response(&mut BufReader::new(s), head_only).unwrap();
        let status = r.header("cache-status").unwrap_or_default();
        assert!(status.starts_with("slipstream; hit; ttl="), "{status}");
        // One `Age`, the answer's own: it wins over the one the site adds.
        let ages: Vec<&str> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("age"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert!(ages.len() == 1 && ages[0] != "999", "{:?}", r.headers);
        r
    };
    let kept = "GET /s HTTP/1.1\r\nHost: a\r\n\r\n";
    for _ in 0..2 {
        // The first makes the head for keep-alive HTTP/1.1, the second sends it again.
        let r = hit(kept, false);
        assert_eq!(r.header("connection"), None, "{:?}", r.headers);
        assert_eq!(r.header("x-gen"), Some("one"));
        assert_eq!(r.body, b"shaped");
    }
    let old = hit(
        "GET /s HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
        false,
    );
    assert_eq!(
        old.header("connection"),
        Some("keep-alive"),
        "{:?}",
        old.headers
    );
    let closing = hit(
        "GET /s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        false,
    );
    assert_eq!(closing.header("connection"), Some("close"));
    let head = hit("HEAD /s HTTP/1.1\r\nHost: a\r\n\r\n", true);
    assert_eq!(head.header("content-length"), Some("6"));
    assert!(head.body.is_empty());
    assert_eq!(hit(kept, false).header("connection"), None);
    let path = running.config.clone().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\"one\"", "\"two\"")).unwrap();
    running.signal("-HUP");
    assert!(running.wait_logged("reloaded"));
    assert!(crate::support::eventually(|| {
        hit(kept, false).header("x-gen") == Some("two")
    }));
    assert_eq!(
        upstream.seen().len(),
        1,
        "every answer after the first was a hit"
    );
}

/// The HTTP working group's cache conformance suite (`http-cache-tests` from npm, its origin
/// and client, `tests/cache-tests/run.sh`) through a plain cached site: the required tests
/// pass but the ones whose expectations slipstream does not share (listed with their reasons
/// in `tests/cache-tests/README.md`), and none hangs.
#[test]
fn the_cache_tests_suite_passes() {
    let origin = crate::support::free_port();
    let server = proxy(&format!(
        r#"
workers = 2
[[listen]]
address = "127.0.0.1:0"
[upstreams.origin]
servers = ["127.0.0.1:{origin}"]
[cache_zones.conformance]
memory = "64m"
[[sites]]
default = true
cache = {{ zone = "conformance" }}
routes = [{{ location = "/", upstream = "origin" }}]
"#
    ));
    let proxy_url = format!("http://{}", server.local_addrs()[0]);
    let out = crate::support::temp_path("cache-tests");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cache-tests/run.sh");
    let run = std::process::Command::new("bash")
        .args([
            script,
            "--origin-port",
            &origin.to_string(),
            "--proxy-url",
            &proxy_url,
        ])
        .args(["--out", out.to_str().unwrap()])
        .env("CACHE_TESTS_TIMEOUT", "180")
        .output()
        .unwrap();
    let printed =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{printed}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let required = &summary["required"];
    let (passed, failed) = (required["passed"].as_u64(), required["failed"].as_u64());
    assert!(passed >= Some(155) && failed <= Some(1), "{printed}");
}

/// `stale-while-revalidate`: a stale response within its window is answered at once and
/// refreshed once after (the client that got it may leave meanwhile); so is one under
/// `background_update` with `use_stale = ["updating"]`. The origin holds every refresh until
/// the test lets it go: the stale answer cannot have waited for it.
#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_after() {
    for (path, fields) in [
        (
            "/swr",
            "Cache-Control: max-age=1, stale-while-revalidate=60\r\n",
        ),
        ("/bg", "Cache-Control: max-age=1\r\n"),
    ] {
        let count = Arc::new(AtomicUsize::new(0));
        let gate = crate::support::Gate::default();
        let (c, g) = (count.clone(), gate.clone());
        let upstream = Upstream::start(move |_| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            match n {
                0 => reply(fields, "v0"),
                // The refreshed answer stays fresh for the rest of the test, however slow
                // the machine: one refresh, not one per second.
                _ => Reply::AfterGate(
                    g.clone(),
                    Box::new(reply("Cache-Control: max-age=60\r\n", &format!("v{n}"))),
                ),
            }
        });
        let rule = r#", background_update = true, use_stale = ["updating"], revalidate = false"#;
        let server = proxy(&config(upstream.addr, rule));
        let addr = server.local_addrs()[0];
        assert_eq!(get(addr, path).body, b"v0");
        std::thread::sleep(Duration::from_millis(2100));
        let stale = get(addr, path);
        assert_eq!(
            stale.body, b"v0",
            "{path}: the stale response, the refresh still held"
        );
        assert!(
            stale.header("cache-status").unwrap().contains("hit"),
            "{path}"
        );
        assert!(crate::support::eventually(
            || count.load(Ordering::SeqCst) == 2
        ));
        assert_eq!(
            get(addr, path).body,
            b"v0",
            "{path}: stale while the refresh is held"
        );
        gate.open();
        assert!(
            crate::support::eventually(|| get(addr, path).body == b"v1"),
            "{path}: refreshed in the background"
        );
        assert_eq!(count.load(Ordering::SeqCst), 2, "{path}: one refresh");
    }
}

/// What a review found, held: a PUT keeps its `If-Match`; an uncacheable URL does not make its
/// requests wait for one another's whole answers; a HEAD of a large object gets no body; a
/// disk-tier entry validated by a 304 keeps its body.
#[test]
fn writes_keep_their_conditions_and_uncacheable_answers_do_not_queue() {
    let dir = crate::support::temp_path("cache-review");
    let _ = std::fs::remove_dir_all(&dir);
    let gate = crate::support::Gate::default();
    let g = gate.clone();
    let upstream = Upstream::start(move |seen| match seen.path() {
        "/put" => reply("", seen.header("if-match").unwrap_or("none")),
        "/slow" => Reply::BytesThen(
            b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 4\r\n\r\nab".to_vec(),
            Box::new(Reply::AfterGate(
                g.clone(),
                Box::new(Reply::Bytes(b"cd".to_vec())),
            )),
        ),
        _ => match seen.header("if-none-match") {
            Some(_) => Reply::Bytes(
                b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=2\r\nETag: \"big\"\r\n\r\n"
                    .to_vec(),
            ),
            None => big_reply_for(100_000, false, "max-age=2"),
        },
    });
    let toml = disk_config(upstream.addr, &dir).replace("admin = \"{admin}\"\n", "");
    let running = crate::support::Running::config("cache-review.toml", &toml);
    let addr = running.addr;
    let put = ask(
        addr,
        "PUT",
        "/put",
        "If-Match: \"v1\"\r\nContent-Length: 0\r\n",
    );
    assert_eq!(put.body, b"\"v1\"");
    // One slow answer under way; another request of the URL is answered meanwhile.
    let slow = std::thread::spawn(move || get(addr, "/slow"));
    assert!(crate::support::eventually(|| upstream
        .seen()
        .iter()
        .any(|s| s.path() == "/slow")));
    let second = std::thread::spawn(move || get(addr, "/slow"));
    assert!(crate::support::eventually(|| {
        upstream
            .seen()
            .iter()
            .filter(|s| s.path() == "/slow")
            .count()
            == 2
    }));
    gate.open();
    assert_eq!(slow.join().unwrap().body, b"abcd");
    assert_eq!(second.join().unwrap().body, b"abcd");
    let head = ask(addr, "HEAD", "/big", "");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("100000"))
    );
    let expected: Vec<u8> = (0..100_000).map(|i| (i % 251) as u8).collect();
    assert!(get(addr, "/big").body == expected);
    std::thread::sleep(Duration::from_millis(3100));
    let validated = get(addr, "/big");
    let status = validated.header("cache-status").unwrap();
    assert!(
        status.contains("fwd-status=304"),
        "{status} {:?}",
        validated.headers
    );
    assert!(validated.body == expected, "the body stays in its file");
    assert!(get(addr, "/big").body == expected);
}

/// A route that compresses gives each client the coding it accepts from one stored response.
#[test]
fn hits_are_compressed_for_clients_that_accept_it() {
    let text = "compress me ".repeat(200);
    let t = text.clone();
    let upstream = Upstream::start(move |_| {
        reply(
            "Cache-Control: max-age=60\r\nContent-Type: text/plain\r\n",
            &t,
        )
    });
    let toml = config(upstream.addr, "").replace(
        "{ location = \"/\", upstream = \"app\" }",
        "{ location = \"/\", upstream = \"app\", compress = true }",
    );
    let server = proxy(&toml);
    let addr = server.local_addrs()[0];
    assert_eq!(get(addr, "/c").body, text.as_bytes());
    let gz = ask(addr, "GET", "/c", "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert!(gz.header("cache-status").unwrap().contains("hit"));
    let mut plain = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz.body[..]), &mut plain)
        .unwrap();
    assert_eq!(plain, text);
    let identity = get(addr, "/c");
    assert_eq!(
        (identity.header("content-encoding"), identity.body.len()),
        (None, text.len())
    );
    assert_eq!(upstream.seen().len(), 1);
}

/// `min_uses`: a key is stored only once asked that many times, and `Cache-Status` says
/// `stored` only of the answer that was.
#[test]
fn min_uses_stores_a_key_once_it_was_asked_enough() {
    let upstream = Upstream::start(|_| reply("Cache-Control: max-age=60\r\n", "popular"));
    let server = proxy(&config(upstream.addr, ", min_uses = 2"));
    let addr = server.local_addrs()[0];
    let status = |r: &RawResponse| r.header("cache-status").unwrap_or_default().to_string();
    let first = status(&get(addr, "/p"));
    assert!(
        first.contains("fwd=uri-miss") && !first.contains("stored"),
        "{first}"
    );
    let second = status(&get(addr, "/p"));
    assert!(second.contains("stored"), "{second}");
    let third = status(&get(addr, "/p"));
    assert!(third.contains("hit"), "{third}");
    assert_eq!(upstream.seen().len(), 2);
}

/// A response the cache may not store still answers the client's Range and conditionals
/// (they were kept from the upstream) when its length is known: a 206 of the part asked, a
/// 304 for a matching `If-None-Match`, with every field the response came with (its
/// `Set-Cookie` too), and nothing stored; one without a length is relayed whole.
#[test]
fn ranges_and_conditionals_apply_to_responses_not_stored() {
    let upstream = Upstream::start(|seen| {
        assert!(seen.header("range").is_none() && seen.header("if-none-match").is_none());
        match seen.path() {
            "/private" => reply(
                "Cache-Control: private\r\nETag: \"p\"\r\nSet-Cookie: s=1\r\n",
                "private-body",
            ),
            "/stream" => Reply::Bytes(
                b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nwhole\r\n0\r\n\r\n".to_vec(),
            ),
            _ => reply("Cache-Control: no-store\r\n", "no-store-body"),
        }
    });
    let server = proxy(&config(upstream.addr, ""));
    let addr = server.local_addrs()[0];
    let part = ask(addr, "GET", "/private", "Range: bytes=0-6\r\n");
    assert_eq!((part.status, part.body.as_slice()), (206, &b"private"[..]));
    assert_eq!(part.header("content-range"), Some("bytes 0-6/12"));
    assert_eq!(part.header("set-cookie"), Some("s=1"));
    let cache_status = part.header("cache-status").unwrap_or_default();
    assert!(!cache_status.contains("stored"), "{cache_status}");
    let same = ask(addr, "GET", "/private", "If-None-Match: \"p\"\r\n");
    assert_eq!((same.status, same.body.len()), (304, 0));
    let tail = ask(addr, "GET", "/no-store", "Range: bytes=-4\r\n");
    assert_eq!((tail.status, tail.body.as_slice()), (206, &b"body"[..]));
    assert_eq!(get(addr, "/no-store").body, b"no-store-body");
    // Without a length it could be a stream: relayed as it comes, whole.
    let stream = ask(addr, "GET", "/stream", "Range: bytes=0-1\r\n");
    assert_eq!(
        (stream.status, stream.body.as_slice()),
        (200, &b"whole"[..])
    );
    assert_eq!(
        upstream.seen().len(),
        5,
        "nothing was answered from the cache"
    );
}
