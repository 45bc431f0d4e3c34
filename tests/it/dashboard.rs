//! The admin listener's dashboard through real sockets and in a real headless Chromium: the
//! page and its API under traffic, its headers, and the refusal of cross-site state changes.

use std::net::SocketAddr;

use crate::observe::admin_get;
use crate::support::*;

fn raw(addr: SocketAddr, request: &str) -> String {
    String::from_utf8_lossy(&exchange_until_close(addr, request.as_bytes())).into_owned()
}

fn head_field<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    let head = response.split_once("\r\n\r\n")?.0;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn the_dashboard_shows_each_upstream_server_with_its_requests_in_a_browser() {
    let (one, two) = (Upstream::ok(b"one"), Upstream::ok(b"two"));
    let sick = Upstream::start(|_| Reply::Bytes(response(503, b"no")));
    let proxy = proxy(&format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
         [upstreams.app]\nservers = [\"{}\", \"{}\"]\n\
         [upstreams.sick]\nservers = [\"{}\"]\nhealth = {{ interval = \"200ms\" }}\n\
         [cache_zones.pages]\nmemory = \"1m\"\n\
         [[sites]]\nname = \"shop\"\ndefault = true\nroutes = [{{ path = \"/\", upstream = \"app\" }}, \
         {{ path = \"/cached\", upstream = \"app\", cache = {{ zone = \"pages\", valid = [\"200 10m\"] }} }}]\n",
        one.addr, two.addr, sick.addr
    ));
    let (addr, admin) = (proxy.local_addrs()[0], proxy.admin_addr().unwrap());
    for _ in 0..40 {
        let r = raw(
            addr,
            "GET /x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    // One miss and four hits in the cache zone.
    for _ in 0..5 {
        let r = raw(
            addr,
            "GET /cached HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    api_sums_the_traffic(admin);
    page_is_self_contained(admin);
    // Chromium's virtual time runs the 2 s polls at once; it waits only while they fetch, so
    // each fetch goes through a relay that holds it 150 ms, and traffic falls between polls.
    let slow = slow_relay(admin, std::time::Duration::from_millis(150));
    let dom = under_load(addr, || {
        crate::chromium::rendered_dom(&format!("http://{slow}/"), 12_000)
    });
    assert!(dom.contains("data-polls="), "the page never polled: {dom}");
    for server in [one.addr, two.addr] {
        let row = dom
            .split("<tr>")
            .find(|r| r.contains(&format!(">{server}<")))
            .unwrap_or_else(|| panic!("no row for {server}: {dom}"));
        let requests: u64 = row
            .split("data-requests=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{row}"));
        assert!(requests > 0, "{server}: {row}");
        assert!(row.contains(">up<") && row.contains(">app<"), "{row}");
    }
    // p50 and p99 over the page's window: for the group, and the server the balancer chose
    // (it may send all of the load to one of two idle servers).
    let group = dom.split("<tr").find(|r| r.contains(">2/2 up<")).unwrap();
    assert!(group.contains(" ms</td>"), "no group p50/p99: {group}");
    assert!(dom.contains(">shop<"), "the site's row: {dom}");
    // The cache zone's share served from the cache (all so far: no cached route under load).
    let zone = dom.split("<tr>").find(|r| r.contains(">pages<")).unwrap();
    assert!(zone.contains(">80 %<"), "{zone}");
    // The group's own row, the failing check's reason, the listener's figures.
    assert!(
        dom.contains(">2/2 up<") && dom.contains(">0/1 up<"),
        "{dom}"
    );
    assert!(
        dom.contains(": status 503, expected 200-399<"),
        "no check failure: {dom}"
    );
    let listener = dom
        .split("<tr>")
        .find(|r| r.contains(&format!(">{addr}<")))
        .unwrap_or_else(|| panic!("no row for listener {addr}: {dom}"));
    let accepted: u64 = listener
        .split("<td class=\"n\">")
        .nth(2)
        .and_then(|c| c.split('<').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("{listener}"));
    assert!(accepted >= 40, "at least 40 accepted: {listener}");
    if let Ok(folder) = std::env::var("SCREENSHOTS") {
        let path = format!("{folder}/dashboard.png");
        let url = format!("http://{slow}/");
        under_load(addr, || {
            crate::chromium::screenshot(&url, 1280, 1000, 20_000, &path);
        });
    }
    proxy.shutdown();
}

/// The API after 41 requests to servers and 4 cache hits: every metric as JSON, the status,
/// doctor's findings, and (once the server is down by them) the failing check's reason.
fn api_sums_the_traffic(admin: SocketAddr) {
    let stats: serde_json::Value = serde_json::from_str(&admin_get(admin, "/api/stats")).unwrap();
    let per_server = stats["metrics"]["slipstream_upstream_server_requests_total"]
        .as_array()
        .unwrap();
    let sent: f64 = per_server
        .iter()
        .map(|s| s["value"].as_f64().unwrap())
        .sum();
    assert_eq!(sent, 41.0, "{stats}");
    // The servers' answers by class: 41 2xx (the four hits never reached a server).
    let answered = |class: &str| -> f64 {
        stats["metrics"]["slipstream_upstream_server_responses_total"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["labels"]["class"] == class)
            .map(|s| s["value"].as_f64().unwrap())
            .sum()
    };
    assert_eq!((answered("2xx"), answered("5xx")), (41.0, 0.0), "{stats}");
    assert_eq!(stats["status"]["requests"]["total"], 45);
    assert!(!stats["doctor"].as_array().unwrap().is_empty(), "{stats}");
    // The failing health check's reason, once the server is down by them.
    let failed_check = || {
        let stats: serde_json::Value =
            serde_json::from_str(&admin_get(admin, "/api/stats")).unwrap();
        let checks = stats["checks"].to_string();
        checks.contains("status 503, expected 200-399") && checks.contains("\"up\":false")
    };
    assert!(
        eventually(failed_check),
        "{}",
        admin_get(admin, "/api/stats")
    );
}

/// The page: self-contained, its script from this listener, under a strict policy, small.
fn page_is_self_contained(admin: SocketAddr) {
    let page = raw(admin, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let policy = head_field(&page, "content-security-policy").unwrap();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
    assert!(page.contains("<script src=\"/dashboard.js\"></script>"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "an outside asset"
    );
    // Small enough to read: the page and its script together.
    let script = admin_get(admin, "/dashboard.js");
    assert!(
        page.len() + script.len() < 28 * 1024,
        "{} + {}",
        page.len(),
        script.len()
    );
    // In a browser: one row per server, each with the requests it took.
    // In a browser, under traffic (the latencies are over what the page saw happen).
}

/// A local address relaying each connection to `to` after holding it for `delay`.
fn slow_relay(to: SocketAddr, delay: std::time::Duration) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                let Ok(server) = std::net::TcpStream::connect(to) else {
                    return;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut s2);
                    let _ = s2.shutdown(std::net::Shutdown::Write);
                });
                let (mut client, mut server) = (client, server);
                let _ = std::io::copy(&mut server, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Write);
                let _ = up.join();
            });
        }
    });
    at
}

/// What `f` returns, run while a thread sends requests to `addr` (one each millisecond), so the
/// dashboard's rates, latencies and charts have something to show.
fn under_load<T>(addr: SocketAddr, f: impl FnOnce() -> T) -> T {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                raw(
                    addr,
                    "GET /x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    let out = f();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    out
}

#[test]
fn state_changes_need_the_switch_and_the_token_and_no_other_site() {
    let config = "workers = 1\nadmin = \"127.0.0.1:0\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
         [cache_zones.pages]\nmemory = \"1m\"\n\
         [[sites]]\ndefault = true\ncache = { zone = \"pages\" }\n\
         routes = [{ location = \"/\", rules = [{ return = 204 }] }]\n";
    let post = |admin: std::net::SocketAddr, host: &str, fields: &str| {
        raw(
            admin,
            &format!("POST /cache/purge?zone=pages&prefix=/ HTTP/1.1\r\nHost: {host}\r\n{fields}Content-Length: 0\r\n\r\n"),
        )
    };
    let bearer = format!("Authorization: Bearer {}\r\n", crate::support::ADMIN_TOKEN);
    // Without admin_token_file, nothing changes state, token or not.
    let off = proxy(config);
    let admin = off.admin_addr().unwrap();
    let r = post(admin, &admin.to_string(), &bearer);
    assert!(
        r.starts_with("HTTP/1.1 403") && r.contains("admin_token_file"),
        "{r}"
    );
    off.shutdown();

    let proxy = proxy(&format!("{}{config}", crate::support::admin_token_line()));
    let admin = proxy.admin_addr().unwrap();
    let purge = |fields: &str| post(admin, &admin.to_string(), &format!("{bearer}{fields}"));
    for fields in ["", "Authorization: Bearer wrong-token-0123456789\r\n"] {
        let r = post(admin, &admin.to_string(), fields);
        assert!(
            r.starts_with("HTTP/1.1 401") && r.contains("WWW-Authenticate: Bearer"),
            "{r}"
        );
    }
    for fields in [
        "Origin: http://evil.example\r\n",
        "Sec-Fetch-Site: cross-site\r\nOrigin: http://evil.example\r\n",
        "Sec-Fetch-Site: same-site\r\n",
    ] {
        let r = purge(fields);
        assert!(r.starts_with("HTTP/1.1 403"), "{fields}: {r}");
    }
    // DNS rebinding: a page at evil.example, its name now resolving to this listener, is
    // same-origin to the browser; it names the listener by its host name.
    let rebound =
        format!("{bearer}Sec-Fetch-Site: same-origin\r\nOrigin: http://evil.example:1\r\n");
    let r = post(admin, "evil.example:1", &rebound);
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    // The same origin, a tool (no Origin), and a typed URL are served.
    for fields in [
        format!("Origin: http://{admin}\r\nSec-Fetch-Site: same-origin\r\n"),
        String::new(),
        "Sec-Fetch-Site: none\r\n".to_string(),
    ] {
        let r = purge(&fields);
        assert!(r.starts_with("HTTP/1.1 200"), "{fields}: {r}");
    }
    proxy.shutdown();
}

#[test]
fn a_refused_reload_shows_its_errors_on_the_dashboard() {
    let upstream = Upstream::ok(b"ok");
    let toml = format!(
        "workers = 1\nadmin = \"{{admin}}\"\n[[listen]]\naddress = \"{{listen}}\"\n\
         [upstreams.app]\nservers = [\"{}\"]\n\
         [[sites]]\ndefault = true\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        upstream.addr
    );
    let running = Running::config("dashboard-reload.toml", &toml);
    let admin = running.admin.unwrap();
    let path = running.config.clone().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{text}bogus = 1\n")).unwrap();
    running.signal("-HUP");
    // The refusal is logged, then recorded.
    let last = || {
        let stats: serde_json::Value =
            serde_json::from_str(&admin_get(admin, "/api/stats")).unwrap();
        stats["status"]["config"]["last_reload"].clone()
    };
    assert!(eventually(|| last()["ok"] == false), "{}", last());
    assert!(last()["errors"].to_string().contains("bogus"), "{}", last());
    // The page says so, with the errors, and still serves the running config's figures.
    let dom = crate::chromium::rendered_dom(&format!("http://{admin}/"), 3000);
    let meta = dom.split("id=\"meta\"").nth(1).unwrap_or_default();
    assert!(
        meta.contains("refused: ") && meta.contains("bogus"),
        "{meta}"
    );
}
