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
    let proxy = proxy(&format!(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
         [upstreams.app]\nservers = [\"{}\", \"{}\"]\n\
         [[sites]]\nname = \"shop\"\ndefault = true\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n",
        one.addr, two.addr
    ));
    let (addr, admin) = (proxy.local_addrs()[0], proxy.admin_addr().unwrap());
    for _ in 0..40 {
        let r = raw(
            addr,
            "GET /x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    // The API: every metric as JSON, the status, doctor's findings.
    let stats: serde_json::Value = serde_json::from_str(&admin_get(admin, "/api/stats")).unwrap();
    let per_server = stats["metrics"]["slipstream_upstream_server_requests_total"]
        .as_array()
        .unwrap();
    let sent: f64 = per_server
        .iter()
        .map(|s| s["value"].as_f64().unwrap())
        .sum();
    assert_eq!(sent, 40.0, "{stats}");
    assert_eq!(stats["status"]["requests"]["total"], 40);
    assert!(!stats["doctor"].as_array().unwrap().is_empty(), "{stats}");
    // The page: self-contained, its script from this listener, under a strict policy.
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
        page.len() + script.len() < 24 * 1024,
        "{} + {}",
        page.len(),
        script.len()
    );
    // In a browser: one row per server, each with the requests it took.
    let dom = crate::chromium::rendered_dom(&format!("http://{admin}/"), 5000);
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
    assert!(dom.contains(">shop<"), "the site's row: {dom}");
    if let Ok(folder) = std::env::var("SCREENSHOTS") {
        // Under traffic, so the rates and charts have something to show.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    raw(
                        addr,
                        "GET /x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n",
                    );
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        };
        let path = format!("{folder}/dashboard.png");
        crate::chromium::screenshot(&format!("http://{admin}/"), 1280, 900, 20_000, &path);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        load.join().unwrap();
    }
    proxy.shutdown();
}

#[test]
fn a_cross_site_request_changes_nothing_on_the_admin_listener() {
    let proxy = proxy(
        "workers = 1\nadmin = \"127.0.0.1:0\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n\
         [cache_zones.pages]\nmemory = \"1m\"\n\
         [[sites]]\ndefault = true\ncache = { zone = \"pages\" }\n\
         routes = [{ location = \"/\", rules = [{ return = 204 }] }]\n",
    );
    let admin = proxy.admin_addr().unwrap();
    let purge = |fields: &str| {
        raw(
            admin,
            &format!("POST /cache/purge?zone=pages&prefix=/ HTTP/1.1\r\nHost: {admin}\r\n{fields}Content-Length: 0\r\n\r\n"),
        )
    };
    for fields in [
        "Origin: http://evil.example\r\n",
        "Sec-Fetch-Site: cross-site\r\nOrigin: http://evil.example\r\n",
        "Sec-Fetch-Site: same-site\r\n",
    ] {
        let r = purge(fields);
        assert!(r.starts_with("HTTP/1.1 403"), "{fields}: {r}");
    }
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
