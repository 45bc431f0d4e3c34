//! The cache when the upstream fails or the traffic scans, through real sockets: nginx's
//! `use_stale` conditions `error` and `timeout` each stand in only for their own failure, and a
//! scan of one-off URLs larger than the memory tier does not push out the objects in use.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{config, get, reply};
use crate::support::{proxy, Reply};

/// What the counting origin does with the next request.
const SERVE: usize = 0;
const CLOSE: usize = 1;
const SLOW: usize = 2;

/// A stale object (`max-age=1`, no `stale-if-error`) stands in for a refused or closed
/// upstream only under `use_stale = ["error"]`, and for one that does not answer within
/// `read_timeout` only under `use_stale = ["timeout"]`; the other failure gets its 502 or 504.
#[test]
fn use_stale_error_and_timeout_stand_in_only_for_their_own_failure() {
    for (listed, stands_in_for, fails_with) in [
        ("error", CLOSE, (SLOW, 504)),
        ("timeout", SLOW, (CLOSE, 502)),
    ] {
        let mode = Arc::new(AtomicUsize::new(SERVE));
        let m = mode.clone();
        let upstream = crate::support::Upstream::start(move |_| match m.load(Ordering::SeqCst) {
            SERVE => reply("Cache-Control: max-age=1\r\n", "kept"),
            CLOSE => Reply::Close,
            _ => Reply::Delay(Duration::from_secs(3), Box::new(reply("", "late"))),
        });
        let rule = format!(r#", revalidate = false, use_stale = ["{listed}"]"#);
        let toml = config(upstream.addr, &rule).replace(
            &format!("servers = [\"{}\"]", upstream.addr),
            &format!(
                "servers = [\"{}\"]\nread_timeout = \"300ms\"",
                upstream.addr
            ),
        );
        let server = proxy(&toml);
        let addr = server.local_addrs()[0];
        assert_eq!(get(addr, "/o").body, b"kept", "{listed}: the fill");
        std::thread::sleep(Duration::from_millis(2100));

        mode.store(stands_in_for, Ordering::SeqCst);
        let r = get(addr, "/o");
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"kept"[..]),
            "{listed}: stale"
        );
        let status = r.header("cache-status").unwrap();
        assert!(status.starts_with("slipstream; hit"), "{listed}: {status}");

        let (other, code) = fails_with;
        mode.store(other, Ordering::SeqCst);
        assert_eq!(
            get(addr, "/o").status,
            code,
            "{listed}: the failure it does not list"
        );
    }
}

/// The memory tier holds 1 MB, and is in use: 40 objects of 16 KB asked for once fill more than
/// half of it (`moka` counts uses from then on). Eight more are asked for five times each, then
/// 400 others once each (6.4 MB, six times the tier): the eight still answer from the cache
/// (TinyLFU admission turns away objects asked for once in favour of ones in use). `moka` turns
/// its counting on, and applies the uses it has queued, in its housekeeping passes, which run
/// after so many operations or so much time: reading `/metrics` runs one, so the test does not
/// depend on when the others fall on a slow machine.
#[test]
fn a_scan_of_one_off_urls_does_not_push_out_the_objects_in_use() {
    let body = "s".repeat(16 * 1024);
    let upstream =
        crate::support::Upstream::start(move |_| reply("Cache-Control: max-age=600\r\n", &body));
    let toml = config(upstream.addr, "")
        .replace("memory = \"16m\"", "memory = \"1m\"")
        .replace("workers = 2", "workers = 2\nadmin = \"127.0.0.1:0\"");
    let server = proxy(&toml);
    let (addr, admin) = (server.local_addrs()[0], server.admin_addr().unwrap());
    let housekeeping = || crate::observe::metric(admin, "slipstream_cache_entries");
    for i in 0..40 {
        assert_eq!(get(addr, &format!("/used/{i}")).status, 200);
    }
    housekeeping();
    let hot: Vec<String> = (0..8).map(|i| format!("/hot/{i}")).collect();
    for _ in 0..5 {
        for path in &hot {
            assert_eq!(get(addr, path).status, 200);
        }
    }
    housekeeping();
    let fetched_hot = |seen: &[crate::support::Seen]| {
        seen.iter()
            .filter(|s| s.path().starts_with("/hot/"))
            .count()
    };
    assert_eq!(
        fetched_hot(&upstream.seen()),
        8,
        "each hot object fetched once"
    );
    for i in 0..400 {
        assert_eq!(get(addr, &format!("/scan/{i}")).status, 200);
    }
    assert_eq!(upstream.seen().len(), 448, "every scanned object fetched");
    for path in &hot {
        let r = get(addr, path);
        assert!(
            r.header("cache-status").unwrap().contains("hit"),
            "{path} after the scan"
        );
    }
    assert_eq!(
        fetched_hot(&upstream.seen()),
        8,
        "no hot object fetched again"
    );
}
