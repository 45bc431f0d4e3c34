//! The cache beyond the memory tier, through real sockets: large objects streamed to the disk
//! tier and read back after a restart (and a purge removing the file), large bodies in memory
//! files, a PHP microcache and PHP revalidation and stale answers against a real PHP-FPM, and
//! HTTP/2 clients on hits, ranges and the disk tier.

use std::io::{BufReader, Write};
use std::time::Duration;

use crate::cache::{ask, get, reply};
use crate::support::{connect, proxy, read_response, Reply, Upstream};

pub(crate) fn disk_config(upstream: std::net::SocketAddr, dir: &std::path::Path) -> String {
    format!(
        r#"
workers = 2
admin = "{{admin}}"
{token}[[listen]]
address = "{{listen}}"
[upstreams.app]
servers = ["{upstream}"]
[cache_zones.main]
memory = "16m"
max_object = "4k"
path = {dir:?}
disk = "64m"
[[sites]]
default = true
cache = {{ zone = "main" }}
routes = [{{ location = "/", upstream = "app" }}]
"#,
        dir = dir.display().to_string(),
        token = crate::support::admin_token_line(),
    )
}

/// A body of `len` bytes the origin sends, chunked or with a length.
fn big_reply(len: usize, chunked: bool) -> Reply {
    big_reply_for(len, chunked, "max-age=600")
}

/// [`big_reply`] with its own `Cache-Control`.
pub(crate) fn big_reply_for(len: usize, chunked: bool, cache_control: &str) -> Reply {
    let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut r = if chunked {
        format!("HTTP/1.1 200 OK\r\nCache-Control: {cache_control}\r\nETag: \"big\"\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes()
    } else {
        format!("HTTP/1.1 200 OK\r\nCache-Control: {cache_control}\r\nETag: \"big\"\r\nContent-Length: {len}\r\n\r\n").into_bytes()
    };
    if chunked {
        for piece in body.chunks(70_000) {
            r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            r.extend_from_slice(piece);
            r.extend_from_slice(b"\r\n");
        }
        r.extend_from_slice(b"0\r\n\r\n");
    } else {
        r.extend_from_slice(&body);
    }
    Reply::Bytes(r)
}

#[test]
fn large_objects_stream_to_the_disk_tier_and_a_restart_keeps_them() {
    let dir = crate::support::temp_path("cache-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|seen| big_reply(300_000, seen.path() == "/chunked"));
    let toml = disk_config(upstream.addr, &dir);
    let expected: Vec<u8> = (0..300_000).map(|i| (i % 251) as u8).collect();
    {
        let running = crate::support::Running::config("cache-disk.toml", &toml);
        for path in ["/big", "/chunked"] {
            let miss = get(running.addr, path);
            assert_eq!((miss.status, miss.body.len()), (200, 300_000));
            assert!(miss.body == expected, "{path}");
            let hit = get(running.addr, path);
            assert!(
                hit.header("cache-status").unwrap().contains("hit"),
                "{path}"
            );
            let first = hit.body.iter().zip(&expected).position(|(a, b)| a != b);
            assert!(
                hit.body == expected,
                "{path} from disk: {} bytes, first difference {first:?}",
                hit.body.len()
            );
            assert_eq!(hit.header("content-length"), Some("300000"));
        }
        let part = ask(running.addr, "GET", "/big", "Range: bytes=1000-1009\r\n");
        assert_eq!(
            (part.status, part.body.as_slice()),
            (206, &expected[1000..1010])
        );
        assert_eq!(upstream.seen().len(), 2);
        // Killed, not stopped: what was stored survives a crash too.
    }
    let running = crate::support::Running::config("cache-disk.toml", &toml);
    for path in ["/big", "/chunked"] {
        let hit = get(running.addr, path);
        assert!(
            hit.header("cache-status").unwrap().contains("hit"),
            "{path} after a restart"
        );
        assert!(hit.body == expected);
    }
    assert_eq!(
        upstream.seen().len(),
        2,
        "nothing fetched again after the restart"
    );
    // A purge removes the file too: the next start cannot bring it back.
    let files = || body_files(&dir);
    assert_eq!(files(), 2);
    // Hits keep their files open (no open and close per hit) until the entry goes.
    let open_files = || {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", running.child.id())).unwrap();
        fds.flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| target.starts_with(&dir))
            .count()
    };
    assert_eq!(open_files(), 2);
    let s = connect(running.admin.unwrap());
    let mut w = s.try_clone().unwrap();
    let token = crate::support::ADMIN_TOKEN;
    let head = format!(
        "POST /cache/purge?key=http://a/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    w.write_all(head.as_bytes()).unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.body, b"{\"purged\":1}\n");
    assert!(crate::support::eventually(|| files() == 1));
    assert!(crate::support::eventually(|| open_files() == 1));
}

/// The disk tier holds what `disk` says: objects past it are evicted (counted) and their files
/// removed, and the figures show what it holds.
#[test]
fn the_disk_tier_holds_what_disk_says() {
    let dir = crate::support::temp_path("cache-disk-bound");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|_| big_reply(100_000, false));
    let toml = disk_config(upstream.addr, &dir).replace("disk = \"64m\"", "disk = \"1m\"");
    let running = crate::support::Running::config("cache-disk-bound.toml", &toml);
    for i in 0..30 {
        assert_eq!(get(running.addr, &format!("/o{i}")).body.len(), 100_000);
    }
    let admin = running.admin.unwrap();
    let figure =
        |name: &str| crate::observe::metric(admin, &format!("{name}{{zone=\"main\"}}")) as u64;
    // 30 objects of about 100 KB each against 1 MiB: at most 10 fit.
    let files = || body_files(&dir);
    assert!(
        crate::support::eventually(
            || figure("slipstream_cache_disk_entries") <= 10 && files() <= 10
        ),
        "{} entries, {} files",
        figure("slipstream_cache_disk_entries"),
        files()
    );
    assert!(figure("slipstream_cache_disk_bytes") <= 1 << 20);
    assert!(crate::support::eventually(|| figure(
        "slipstream_cache_evictions_total"
    ) >= 20));
}

/// `min_uses` holds for objects streamed to the disk tier too: the first answer is relayed and
/// not stored (nor said to be), the second is stored, the third a hit from its file.
#[test]
fn min_uses_holds_on_the_disk_tier() {
    let dir = crate::support::temp_path("cache-disk-uses");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|_| big_reply(100_000, false));
    let toml = disk_config(upstream.addr, &dir).replace(
        "cache = { zone = \"main\" }",
        "cache = { zone = \"main\", min_uses = 2 }",
    );
    assert!(toml.contains("min_uses = 2"), "{toml}");
    let running = crate::support::Running::config("cache-disk-uses.toml", &toml);
    let files = || body_files(&dir);
    let status = |n: &str| {
        let r = get(running.addr, "/u");
        assert_eq!(r.body.len(), 100_000, "{n}");
        r.header("cache-status").unwrap_or_default().to_string()
    };
    let first = status("first");
    assert!(
        !first.contains("stored") && first.contains("fwd=uri-miss"),
        "{first}"
    );
    assert_eq!(files(), 0);
    let second = status("second");
    assert!(second.contains("stored"), "{second}");
    assert!(status("third").contains("hit"));
    assert!(crate::support::eventually(|| files() == 1));
    assert_eq!(upstream.seen().len(), 2);
}

/// The stored responses' files under `dir` (not the temporary ones being written).
fn body_files(dir: &std::path::Path) -> usize {
    walk(dir)
        .into_iter()
        .filter(|p| p.extension().is_none())
        .count()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// The microcache idiom against a real PHP-FPM: a script without caching fields is kept a few
/// seconds (`valid = ["200 3s"]`; a second would end at the next tick of the clock), a stampede of cold requests runs it once, a logged-in cookie
/// bypasses the cache, a POST invalidates, and a page that sets a cookie is not stored.
#[test]
fn a_php_microcache_runs_the_script_once_per_second() {
    let fpm = crate::fastcgi::PhpFpm::start("microcache");
    let counter = fpm.root.join("count.txt");
    fpm.script(
        "page.php",
        &format!(
            "<?php $f = {:?}; $n = (int)@file_get_contents($f) + 1; file_put_contents($f, $n, LOCK_EX); \
             if (isset($_GET['cookie'])) setcookie('s', 'x'); \
             if ($_SERVER['REQUEST_METHOD'] === 'POST') {{ echo 'posted'; return; }} usleep(200000); echo 'run ', $n;",
            counter.display().to_string()
        ),
    );
    let runs = || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .trim()
            .parse::<u32>()
            .unwrap_or(0)
    };
    let p = crate::fastcgi_proxy::php_proxy(
        &fpm.tcp.to_string(),
        &fpm.root,
        "[cache_zones.micro]\nmemory = \"16m\"",
        r#", cache = { zone = "micro", valid = ["200 3s"], bypass = ["$cookie_logged_in"] }"#,
    );
    let addr = p.local_addrs()[0];
    let threads: Vec<_> = (0..50)
        .map(|_| std::thread::spawn(move || get(addr, "/page.php")))
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap().body, b"run 1");
    }
    assert_eq!(runs(), 1, "50 cold requests ran the script once");
    let hit = get(addr, "/page.php");
    assert!(hit.header("cache-status").unwrap().contains("hit"));
    let bypass = ask(addr, "GET", "/page.php", "Cookie: logged_in=1\r\n");
    assert_eq!(bypass.body, b"run 2");
    assert_eq!(
        get(addr, "/page.php").body,
        b"run 2",
        "what a bypass fetched is stored"
    );
    std::thread::sleep(Duration::from_millis(4100));
    assert_eq!(
        get(addr, "/page.php").body,
        b"run 3",
        "past its validity it runs again"
    );
    assert_eq!(
        ask(addr, "POST", "/page.php", "Content-Length: 0\r\n").body,
        b"posted"
    );
    assert_eq!(
        get(addr, "/page.php").body,
        b"run 5",
        "the POST invalidated it"
    );
    for _ in 0..2 {
        assert_eq!(get(addr, "/page.php?cookie=1").status, 200);
    }
    assert_eq!(runs(), 7, "a page that sets a cookie is not stored");
    // The client's Range never reaches the script, yet applies to a page not stored.
    let part = ask(addr, "GET", "/page.php?cookie=1", "Range: bytes=0-2\r\n");
    assert_eq!((part.status, part.body.as_slice()), (206, &b"run"[..]));
    assert!(part
        .header("set-cookie")
        .is_some_and(|c| c.starts_with("s=x")));
    assert_eq!(runs(), 8);
}

/// Over HTTP/2: a miss and its hits on one connection, streams at once, a range, and a large
/// object from the disk tier.
#[test]
fn http2_clients_get_hits_and_misses_alike() {
    use crate::http2::{body_of, get as h2_get, h2c, runtime};
    let dir = crate::support::temp_path("cache-h2");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|seen| match seen.path() {
        "/big" => big_reply(200_000, false),
        _ => reply("Cache-Control: max-age=60\r\n", "over h2"),
    });
    let toml = disk_config(upstream.addr, &dir)
        .replace(
            "address = \"{listen}\"",
            "address = \"127.0.0.1:0\"\nh2c = true",
        )
        .replace("admin = \"{admin}\"\n", "");
    let server = proxy(&toml);
    let addr = server.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        let (parts, body) = h2_get(&mut client, "a", "/small").await;
        assert_eq!(
            (parts.status.as_u16(), body.as_slice()),
            (200, &b"over h2"[..])
        );
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let mut c = client.clone();
                tokio::task::spawn_local(async move { h2_get(&mut c, "a", "/small").await })
            })
            .collect();
        for call in calls {
            let (parts, body) = call.await.unwrap();
            assert_eq!(body, b"over h2");
            assert!(parts.headers["cache-status"]
                .to_str()
                .unwrap()
                .contains("hit"));
        }
        for _ in 0..2 {
            let (parts, body) = h2_get(&mut client, "a", "/big").await;
            assert_eq!((parts.status.as_u16(), body.len()), (200, 200_000));
            assert!(body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        }
        let req = http::Request::get("http://a/big")
            .header("range", "bytes=5-9")
            .body(())
            .unwrap();
        let mut ready = client.clone().ready().await.unwrap();
        let (response, _) = ready.send_request(req, true).unwrap();
        let (parts, body) = response.await.unwrap().into_parts();
        assert_eq!(parts.status.as_u16(), 206);
        assert_eq!(
            body_of(body).await,
            (5..10).map(|i| i as u8).collect::<Vec<_>>()
        );
    });
    assert_eq!(upstream.seen().len(), 2);
}

/// A large body in the memory tier lives in a memory file and goes out with sendfile: whole,
/// in part, after a 304 freshened it, and compressed for a client that accepts it.
#[test]
fn large_bodies_in_memory_go_out_with_sendfile() {
    let body: Vec<u8> = (0..150_000).map(|i| b'a' + (i % 26) as u8).collect();
    let b = body.clone();
    let upstream = Upstream::start(move |seen| {
        if seen.header("if-none-match").is_some() {
            return Reply::Bytes(
                b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=2\r\nETag: \"m\"\r\nX-Fresh: yes\r\n\r\n".to_vec(),
            );
        }
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: max-age=2\r\nETag: \"m\"\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            b.len()
        )
        .into_bytes();
        r.extend_from_slice(&b);
        Reply::Bytes(r)
    });
    let toml = crate::cache::config(upstream.addr, "")
        .replace("workers = 2", "workers = 1\nadmin = \"127.0.0.1:0\"")
        .replace(
            "{ location = \"/\", upstream = \"app\" }",
            "{ location = \"/\", upstream = \"app\", compress = true }",
        );
    let server = proxy(&toml);
    let (addr, admin) = (server.local_addrs()[0], server.admin_addr().unwrap());
    let sent_by_sendfile =
        || crate::observe::metric(admin, "slipstream_sendfile_bytes_total") as u64;
    let before = sent_by_sendfile();
    assert!(get(addr, "/m").body == body, "the miss");
    let hit = get(addr, "/m");
    assert!(hit.body == body && hit.header("cache-status").unwrap().contains("hit"));
    // The miss is answered from the stored entry as the hit is, and both I/O paths send the
    // memory file with sendfile(2). The worker counts the bytes after the last of them is
    // sent, so the client may see the body before the figure moves.
    let both = 2 * body.len() as u64;
    crate::support::eventually(|| sent_by_sendfile() - before == both);
    let by_sendfile = sent_by_sendfile() - before;
    assert_eq!(by_sendfile, both, "the miss and the hit by sendfile");
    let part = ask(addr, "GET", "/m", "Range: bytes=50000-50009\r\n");
    assert_eq!(part.status, 206);
    assert_eq!(part.body, &body[50_000..50_010]);
    let gz = ask(addr, "GET", "/m", "Accept-Encoding: gzip\r\n");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz.body[..]), &mut plain)
        .unwrap();
    assert!(plain == body, "compressed from the memory file");
    std::thread::sleep(Duration::from_millis(3100));
    let revalidated = get(addr, "/m");
    assert_eq!(revalidated.header("x-fresh"), Some("yes"), "the 304's head");
    assert!(
        revalidated.body == body,
        "the body stays in its memory file"
    );
    let hit = get(addr, "/m");
    assert!(hit.body == body && hit.header("cache-status").unwrap().contains("hit"));
    assert_eq!(upstream.seen().len(), 2, "one fetch and one revalidation");
}

/// FastCGI responses are revalidated and stand in for failures as proxied ones do, against a
/// real PHP-FPM: the client's conditionals never reach the script (the cache answers them), a
/// stale page's validators do and a 304 keeps it, and a 503 gets the stale page within its
/// `stale-if-error` window.
#[test]
fn php_pages_are_revalidated_and_stand_in_for_errors() {
    let fpm = crate::fastcgi::PhpFpm::start("revalidate");
    let (counter, seen, down) = (
        fpm.root.join("runs.txt"),
        fpm.root.join("seen.txt"),
        fpm.root.join("down"),
    );
    fpm.script(
        "rev.php",
        &format!(
            "<?php $n = (int)@file_get_contents({c:?}) + 1; file_put_contents({c:?}, $n); \
             file_put_contents({s:?}, ($_SERVER['HTTP_IF_NONE_MATCH'] ?? '-') . \"\\n\", FILE_APPEND); \
             if (file_exists({d:?})) {{ http_response_code(503); echo 'down'; return; }} \
             header('Cache-Control: max-age=1, stale-if-error=60'); header('ETag: \"v1\"'); \
             if (($_SERVER['HTTP_IF_NONE_MATCH'] ?? '') === '\"v1\"') {{ http_response_code(304); return; }} \
             echo 'page ', $n;",
            c = counter.display().to_string(),
            s = seen.display().to_string(),
            d = down.display().to_string(),
        ),
    );
    let p = crate::fastcgi_proxy::php_proxy(
        &fpm.tcp.to_string(),
        &fpm.root,
        "[cache_zones.micro]\nmemory = \"16m\"",
        r#", cache = { zone = "micro", revalidate = true }"#,
    );
    let addr = p.local_addrs()[0];
    let seen_by_script = || std::fs::read_to_string(&seen).unwrap_or_default();
    let cold = ask(addr, "GET", "/rev.php", "If-None-Match: \"v1\"\r\n");
    assert_eq!(
        cold.status, 304,
        "the cache answers the client's conditional"
    );
    assert_eq!(seen_by_script(), "-\n", "the script never saw it");
    assert_eq!(get(addr, "/rev.php").body, b"page 1");
    std::thread::sleep(Duration::from_millis(2100));
    let revalidated = get(addr, "/rev.php");
    assert_eq!(
        (revalidated.status, revalidated.body.as_slice()),
        (200, &b"page 1"[..])
    );
    let status = revalidated
        .header("cache-status")
        .unwrap_or_default()
        .to_string();
    assert!(status.contains("fwd-status=304"), "{status}");
    assert_eq!(
        seen_by_script(),
        "-\n\"v1\"\n",
        "the stored validator went to the script"
    );
    std::fs::write(&down, "").unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    let stale = get(addr, "/rev.php");
    assert_eq!((stale.status, stale.body.as_slice()), (200, &b"page 1"[..]));
    assert_eq!(
        seen_by_script().lines().count(),
        3,
        "the script ran and failed"
    );
}

/// A reload that changes only the memory tier's size keeps the disk tier as it is: its
/// entries answer, and no second index over the directory can remove files the first uses.
#[test]
fn a_reload_that_resizes_memory_keeps_the_disk_tier() {
    let dir = crate::support::temp_path("cache-disk-reload");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|_| big_reply(100_000, false));
    let toml = disk_config(upstream.addr, &dir);
    let mut running = crate::support::Running::config("cache-disk-reload.toml", &toml);
    assert_eq!(get(running.addr, "/d").body.len(), 100_000);
    let path = running.config.clone().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("memory = \"16m\"", "memory = \"32m\"")).unwrap();
    running.signal("-HUP");
    assert!(running.wait_logged("reloaded"));
    let hit = get(running.addr, "/d");
    assert!(hit.header("cache-status").unwrap().contains("hit"));
    assert_eq!(hit.body.len(), 100_000);
    assert_eq!(upstream.seen().len(), 1);
    assert_eq!(walk(&dir).len(), 1, "one file");
}

/// A reload that shrinks `disk` keeps the running disk tier whole and says so (one index owns
/// the directory); the next start reads the directory into an index of the new size, which
/// keeps what fits and removes the rest: every file left answers a hit.
#[test]
fn a_smaller_disk_takes_effect_at_the_next_start() {
    let dir = crate::support::temp_path("cache-disk-shrink");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|_| big_reply(300_000, false));
    let toml = disk_config(upstream.addr, &dir);
    let files = || body_files(&dir);
    // Asked from the cache only (504 when not there): nothing is fetched or stored anew.
    let cached = |addr| {
        (0..5)
            .filter(|i| {
                let path = format!("/s{i}");
                let r = ask(addr, "GET", &path, "Cache-Control: only-if-cached\r\n");
                assert!(matches!(r.status, 200 | 504), "{}", r.status);
                r.status == 200 && r.body.len() == 300_000
            })
            .count()
    };
    {
        let mut running = crate::support::Running::config("cache-disk-shrink.toml", &toml);
        for i in 0..5 {
            assert_eq!(get(running.addr, &format!("/s{i}")).body.len(), 300_000);
        }
        assert!(crate::support::eventually(|| files() == 5));
        let path = running.config.clone().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("disk = \"64m\"", "disk = \"1m\"")).unwrap();
        running.signal("-HUP");
        assert!(running.wait_logged("reloaded"));
        assert!(running.wait_logged("keeps its running disk and inactive until the next start"));
        assert_eq!(cached(running.addr), 5, "the running tier kept whole");
        assert_eq!(files(), 5);
    }
    let smaller = toml.replace("disk = \"64m\"", "disk = \"1m\"");
    let running = crate::support::Running::config("cache-disk-shrink.toml", &smaller);
    // At most three of 300 KB fit in 1 MiB.
    assert!(
        crate::support::eventually(|| files() <= 3),
        "{} files",
        files()
    );
    let left = files();
    assert!(left >= 1, "what fits is kept");
    assert_eq!(
        cached(running.addr),
        left,
        "each file left is a hit, and only those"
    );
    assert_eq!(upstream.seen().len(), 5);
}

/// A body changed on the disk while slipstream was down (its metadata intact) is found at its
/// first hit after the restart: a miss, fetched again, never the changed bytes.
#[test]
fn a_body_changed_on_disk_is_a_miss_after_a_restart() {
    let dir = crate::support::temp_path("cache-disk-bitrot");
    let _ = std::fs::remove_dir_all(&dir);
    let upstream = Upstream::start(|_| big_reply(100_000, false));
    let toml = disk_config(upstream.addr, &dir);
    let expected: Vec<u8> = (0..100_000).map(|i| (i % 251) as u8).collect();
    {
        let running = crate::support::Running::config("cache-disk-bitrot.toml", &toml);
        assert!(get(running.addr, "/rot").body == expected);
    }
    let files = walk(&dir);
    assert_eq!(files.len(), 1);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[50_000] ^= 0xff;
    std::fs::write(&files[0], &bytes).unwrap();
    let running = crate::support::Running::config("cache-disk-bitrot.toml", &toml);
    let answer = get(running.addr, "/rot");
    assert!(answer.body == expected, "never the changed bytes");
    assert_eq!(upstream.seen().len(), 2, "fetched again");
    assert!(get(running.addr, "/rot")
        .header("cache-status")
        .unwrap()
        .contains("hit"));
}

/// `stale-while-revalidate` for an HTTP/2 client: the stale answer comes at once while the
/// refresh is held, other streams of the connection are answered meanwhile, and the refreshed
/// response follows once the origin lets it go (one refresh).
#[test]
fn http2_clients_get_stale_answers_while_the_refresh_runs() {
    use crate::http2::{get as h2_get, h2c, runtime};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let gate = crate::support::Gate::default();
    let (c, g) = (count.clone(), gate.clone());
    let upstream = Upstream::start(move |_| match c.fetch_add(1, Ordering::SeqCst) {
        0 => reply(
            "Cache-Control: max-age=1, stale-while-revalidate=60\r\n",
            "v0",
        ),
        n => Reply::AfterGate(
            g.clone(),
            Box::new(reply("Cache-Control: max-age=60\r\n", &format!("v{n}"))),
        ),
    });
    let toml = crate::cache::config(upstream.addr, "").replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nh2c = true",
    );
    let server = proxy(&toml);
    let addr = server.local_addrs()[0];
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime(), async {
        let mut client = h2c(addr).await;
        assert_eq!(h2_get(&mut client, "a", "/swr").await.1, b"v0");
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let (parts, body) = h2_get(&mut client, "a", "/swr").await;
        assert_eq!(body, b"v0", "the stale response, the refresh still held");
        let status = parts.headers["cache-status"].to_str().unwrap().to_owned();
        assert!(status.contains("hit"), "{status}");
        let wait = async {
            while count.load(Ordering::SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .unwrap();
        assert_eq!(h2_get(&mut client, "a", "/swr").await.1, b"v0");
        gate.open();
        let mut refreshed = false;
        for _ in 0..200 {
            if h2_get(&mut client, "a", "/swr").await.1 == b"v1" {
                refreshed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(refreshed, "refreshed in the background");
    });
    assert_eq!(count.load(Ordering::SeqCst), 2, "one refresh");
}
