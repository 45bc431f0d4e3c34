//! Static files through real sockets: types and validators, conditional requests, ranges
//! (single, multipart parsed back by a multipart library, resumed downloads), directories,
//! `try_files` with an upstream fallback, precompressed siblings, the traversal table, a file
//! truncated while it is sent, the open-file cache noticing changes, and `slipstream serve`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use slipstream::Server;

use crate::support::*;

/// A fresh directory for one test.
fn site(name: &str) -> PathBuf {
    let dir = temp_path(&format!("files-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, rel: &str, content: &[u8]) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64).map(pattern_byte).collect()
}

/// One worker serving `dir` at `/` with `route` keys added, and `extra` top-level TOML.
fn serve(dir: &Path, route: &str, extra: &str) -> Server {
    proxy(&format!(
        r#"
workers = 1
{extra}
[[listen]]
address = "127.0.0.1:0"
[[sites]]
default = true
routes = [{{ path = "/", root = "{}" {route} }}]
"#,
        dir.display()
    ))
}

/// Sends one request with `headers` on a fresh connection and reads the response.
fn get(addr: SocketAddr, method: &str, target: &str, headers: &str) -> RawResponse {
    let mut s = connect(addr);
    let req =
        format!("{method} {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_response(&mut BufReader::new(s), method == "HEAD").unwrap()
}

#[test]
fn files_have_types_validators_and_head() {
    let dir = site("types");
    write(&dir, "index.html", b"<h1>hi</h1>");
    write(&dir, "style.css", b"body{}");
    write(&dir, "data.unknownext", b"x");
    write(&dir, "app.wasm", b"\0asm");
    let proxy = serve(
        &dir,
        "",
        "[files]\ntypes = { wasm = \"application/x-test-wasm\" }",
    );
    let addr = proxy.local_addrs()[0];
    let r = get(addr, "GET", "/index.html", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"<h1>hi</h1>".as_slice())
    );
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    assert!(etag.starts_with("\"b-"), "{etag}");
    assert!(r.header("last-modified").unwrap().ends_with(" GMT"));
    assert!(r.header("date").is_some());
    let h = get(addr, "HEAD", "/index.html", "");
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("11"));
    assert_eq!(h.header("etag"), Some(etag.as_str()));
    let ty = |p: &str| {
        get(addr, "GET", p, "")
            .header("content-type")
            .map(str::to_string)
    };
    assert_eq!(ty("/style.css").as_deref(), Some("text/css"));
    assert_eq!(
        ty("/data.unknownext").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(ty("/app.wasm").as_deref(), Some("application/x-test-wasm"));
    let post = get(addr, "POST", "/index.html", "Content-Length: 0\r\n");
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
    assert_eq!(get(addr, "GET", "/missing", "").status, 404);
    proxy.shutdown();
}

#[test]
fn keep_alive_serves_many_files_on_one_connection() {
    let dir = site("keepalive");
    write(&dir, "small.txt", b"small");
    write(&dir, "large.bin", &pattern(300_000));
    let proxy = serve(&dir, "", "");
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for i in 0..20 {
        let path = if i % 2 == 0 {
            "/small.txt"
        } else {
            "/large.bin"
        };
        w.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let res = read_response(&mut r, false).unwrap();
        assert_eq!(res.status, 200);
        assert_eq!(res.body.len(), if i % 2 == 0 { 5 } else { 300_000 });
    }
    proxy.shutdown();
}

#[test]
fn conditional_requests_give_304_and_412() {
    let dir = site("conditional");
    write(&dir, "a.txt", b"hello");
    let proxy = serve(&dir, ", cache_control = \"max-age=60\"", "");
    let addr = proxy.local_addrs()[0];
    let first = get(addr, "GET", "/a.txt", "");
    let etag = first.header("etag").unwrap().to_string();
    let lm = first.header("last-modified").unwrap().to_string();
    assert_eq!(first.header("cache-control"), Some("max-age=60"));
    let r = get(
        addr,
        "GET",
        "/a.txt",
        &format!("If-None-Match: \"x\", {etag}\r\n"),
    );
    assert_eq!((r.status, r.body.len()), (304, 0));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    let r = get(
        addr,
        "GET",
        "/a.txt",
        &format!("If-Modified-Since: {lm}\r\n"),
    );
    assert_eq!(r.status, 304);
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    let r = get(
        addr,
        "GET",
        "/a.txt",
        &format!("If-Modified-Since: {old}\r\n"),
    );
    assert_eq!((r.status, r.body.as_slice()), (200, b"hello".as_slice()));
    assert_eq!(
        get(addr, "GET", "/a.txt", "If-Match: \"nope\"\r\n").status,
        412
    );
    let r = get(
        addr,
        "GET",
        "/a.txt",
        &format!("If-Unmodified-Since: {old}\r\n"),
    );
    assert_eq!(r.status, 412);
    let r = get(addr, "GET", "/a.txt", &format!("If-Match: {etag}\r\n"));
    assert_eq!(r.status, 200);
    proxy.shutdown();
}

/// Single, suffix, open and unsatisfiable ranges, and If-Range, on a file kept in memory and
/// on one sent with sendfile.
#[test]
fn ranges_single_suffix_open_unsatisfiable_and_if_range() {
    let dir = site("ranges");
    let small = pattern(1000);
    let large = pattern(200_000);
    write(&dir, "small", &small);
    write(&dir, "large", &large);
    let proxy = serve(&dir, "", "");
    let addr = proxy.local_addrs()[0];
    for (name, content) in [("/small", &small), ("/large", &large)] {
        let len = content.len();
        let r = get(addr, "GET", name, "Range: bytes=10-19\r\n");
        assert_eq!((r.status, r.body.as_slice()), (206, &content[10..20]));
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes 10-19/{len}").as_str())
        );
        let r = get(addr, "GET", name, "Range: bytes=-5\r\n");
        assert_eq!((r.status, r.body.as_slice()), (206, &content[len - 5..]));
        let r = get(addr, "GET", name, "Range: bytes=900-\r\n");
        assert_eq!((r.status, r.body.as_slice()), (206, &content[900..]));
        let r = get(addr, "GET", name, &format!("Range: bytes={len}-\r\n"));
        assert_eq!(r.status, 416);
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes */{len}").as_str())
        );
        let etag = r.header("etag").map(str::to_string);
        assert!(etag.is_none(), "416 carries no validators here");
        let etag = get(addr, "HEAD", name, "")
            .header("etag")
            .unwrap()
            .to_string();
        let r = get(
            addr,
            "GET",
            name,
            &format!("Range: bytes=0-0\r\nIf-Range: {etag}\r\n"),
        );
        assert_eq!((r.status, r.body.len()), (206, 1));
        let r = get(
            addr,
            "GET",
            name,
            "Range: bytes=0-0\r\nIf-Range: \"stale\"\r\n",
        );
        assert_eq!((r.status, r.body.as_slice()), (200, content.as_slice()));
        let r = get(addr, "HEAD", name, "Range: bytes=0-0\r\n");
        assert_eq!(r.status, 200);
    }
    proxy.shutdown();
}

/// A multipart/byteranges answer, parsed back by the `multer` multipart parser.
#[test]
fn multipart_byteranges_parse_back_with_a_multipart_library() {
    let dir = site("multipart");
    let content = pattern(150_000);
    write(&dir, "f.bin", &content);
    let proxy = serve(&dir, "", "");
    let addr = proxy.local_addrs()[0];
    let r = get(
        addr,
        "GET",
        "/f.bin",
        "Range: bytes=0-9, 100-199, 140000-\r\n",
    );
    assert_eq!(r.status, 206);
    let ty = r.header("content-type").unwrap();
    // multer's own boundary helper only takes multipart/form-data: read it off the type.
    let boundary = ty
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap()
        .to_string();
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let parts = rt.block_on(async {
        let body = bytes::Bytes::from(r.body.clone());
        let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(body)]);
        let mut multipart = multer::Multipart::new(stream, boundary);
        let mut parts = Vec::new();
        while let Some(field) = multipart.next_field().await.unwrap() {
            let range = field.headers()["content-range"]
                .to_str()
                .unwrap()
                .to_string();
            let ty = field.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            parts.push((range, ty, field.bytes().await.unwrap()));
        }
        parts
    });
    let expect = [(0, 9), (100, 199), (140_000, 149_999)];
    assert_eq!(parts.len(), expect.len());
    for ((range, ty, bytes), (a, b)) in parts.iter().zip(expect) {
        assert_eq!(range, &format!("bytes {a}-{b}/150000"));
        assert_eq!(ty, "application/octet-stream");
        assert!(bytes.as_ref() == &content[a..=b]);
    }
    proxy.shutdown();
}

/// A download cut after 1 MB resumes with `Range` and `If-Range` and reassembles byte-exact.
#[test]
fn resumed_download_reassembles_byte_exact() {
    let dir = site("resume");
    let content = pattern(6 * 1024 * 1024);
    write(&dir, "big.iso", &content);
    let proxy = serve(&dir, "", "");
    let addr = proxy.local_addrs()[0];
    let mut s = connect(addr);
    s.write_all(b"GET /big.iso HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let mut etag = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.strip_prefix("ETag: ") {
            etag = v.trim().to_string();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut got = vec![0u8; 1024 * 1024];
    r.read_exact(&mut got).unwrap();
    drop(r); // the cut
    let rest = get(
        addr,
        "GET",
        "/big.iso",
        &format!("Range: bytes={}-\r\nIf-Range: {etag}\r\n", got.len()),
    );
    assert_eq!(rest.status, 206);
    got.extend_from_slice(&rest.body);
    assert!(got == content, "reassembled {} bytes", got.len());
    proxy.shutdown();
}

/// The traversal table: every attempt fails safely and the secret never leaves.
#[test]
fn traversal_attempts_fail_safely() {
    let base = site("traversal");
    let root = base.join("root");
    write(&root, "index.html", b"public");
    write(&root, "%2e%2e/name", b"a file really named %2e%2e");
    write(&root, ".env", b"SECRET-dotfile");
    write(&base, "secret.txt", b"SECRET-outside");
    std::os::unix::fs::symlink(base.join("secret.txt"), root.join("link-out")).unwrap();
    std::os::unix::fs::symlink(&base, root.join("dir-out")).unwrap();
    let proxy = serve(&root, "", "");
    let addr = proxy.local_addrs()[0];
    let table: [(&str, u16); 14] = [
        ("/../secret.txt", 400),
        ("/%2e%2e/secret.txt", 400),
        ("/%2E%2E/%2e%2e/secret.txt", 400),
        ("/..%2fsecret.txt", 400),
        ("/a/..%2f..%2fsecret.txt", 400),
        ("/..\\secret.txt", 400),
        ("/..%5csecret.txt", 400),
        ("/secret.txt%00.html", 400),
        ("/link-out", 403),
        ("/dir-out/secret.txt", 403),
        ("/.env", 403),
        ("/a/../.env", 403),
        ("/%252e%252e/secret.txt", 404),
        ("/index.html/..%2f..%2f..%2fsecret.txt", 400),
    ];
    for (target, status) in table {
        let raw = exchange_until_close(
            addr,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        let text = String::from_utf8_lossy(&raw);
        assert_eq!(status_of(&raw), status, "{target}: {text}");
        assert!(!text.contains("SECRET"), "{target}: {text}");
    }
    // Decoded once: %252e%252e names the directory literally called "%2e%2e".
    let r = get(addr, "GET", "/%252e%252e/name", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"a file really named %2e%2e".as_slice())
    );
    proxy.shutdown();
    // A route may allow symlinks out of its directory.
    let proxy = serve(&root, ", symlinks_out_of_root = true", "");
    let r = get(proxy.local_addrs()[0], "GET", "/link-out", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"SECRET-outside".as_slice())
    );
    proxy.shutdown();
}

#[test]
fn directories_redirect_index_and_list() {
    let dir = site("dirs");
    write(&dir, "docs/index.html", b"docs index");
    write(&dir, "bare/<b>&x.txt", b"x");
    write(&dir, "bare/a.txt", b"a");
    write(&dir, "bare/.hidden", b"h");
    std::fs::create_dir_all(dir.join("bare/sub")).unwrap();
    let proxy = serve(&dir, "", "");
    let addr = proxy.local_addrs()[0];
    let r = get(addr, "GET", "/docs?x=1", "");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/?x=1")));
    let r = get(addr, "GET", "/docs/", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"docs index".as_slice())
    );
    assert_eq!(get(addr, "GET", "/bare/", "").status, 403);
    proxy.shutdown();
    let proxy = serve(&dir, ", list_directories = true", "");
    let r = get(proxy.local_addrs()[0], "GET", "/bare/", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = String::from_utf8(r.body).unwrap();
    let escaped = html.find("&lt;b&gt;&amp;x.txt").expect(&html);
    let a = html.find(">a.txt<").expect(&html);
    let sub = html.find(">sub/<").expect(&html);
    assert!(
        sub < escaped && escaped < a,
        "directories first, then by name: {html}"
    );
    assert!(html.contains("href=\"./%3Cb%3E%26x.txt\""), "{html}");
    assert!(!html.contains("hidden"), "{html}");
    proxy.shutdown();
}

/// The single-page-app + API pattern: files when they exist, the app's index otherwise, and
/// a site that mixes static and proxied routes, with `alias`.
#[test]
fn try_files_spa_fallbacks_and_mixed_routes() {
    let dir = site("spa");
    write(&dir, "index.html", b"spa shell");
    write(&dir, "app.js", b"js");
    write(&dir, "assets/logo.svg", b"<svg/>");
    let up = Upstream::ok(b"from upstream");
    let proxy = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{}"]
[[sites]]
default = true
routes = [
  {{ path = "/", root = "{dir}", try_files = ["$uri", "$uri/", "/index.html"] }},
  {{ path = "/api/", upstream = "app" }},
  {{ path = "/static/", alias = "{dir}/assets" }},
  {{ path = "/maybe/", root = "{dir}", try_files = ["$uri", "@app"] }},
  {{ path = "/gone/", root = "{dir}", try_files = ["$uri", "=410"] }},
  {{ path = "/empty/", root = "{dir}", try_files = ["$uri", "=204"] }},
]
"#,
        up.addr,
        dir = dir.display()
    ));
    let addr = proxy.local_addrs()[0];
    let body = |p: &str| {
        let r = get(addr, "GET", p, "");
        (r.status, String::from_utf8(r.body).unwrap())
    };
    assert_eq!(body("/app.js"), (200, "js".into()));
    assert_eq!(body("/some/client/route"), (200, "spa shell".into()));
    assert_eq!(body("/api/users"), (200, "from upstream".into()));
    assert_eq!(body("/static/logo.svg"), (200, "<svg/>".into()));
    assert_eq!(body("/static/../app.js").0, 400);
    assert_eq!(body("/maybe/nothing?q=1"), (200, "from upstream".into()));
    assert_eq!(body("/gone/x").0, 410);
    // A 204 has no body: the next response on the connection reads clean.
    let mut s = BufReader::new(connect(addr));
    let two = "GET /empty/x HTTP/1.1\r\nHost: x\r\n\r\nGET /app.js HTTP/1.1\r\nHost: x\r\n\r\n";
    s.get_mut().write_all(two.as_bytes()).unwrap();
    let empty = read_response(&mut s, true).unwrap();
    assert_eq!((empty.status, empty.header("content-length")), (204, None));
    let next = read_response(&mut s, false).unwrap();
    assert_eq!((next.status, next.body.as_slice()), (200, &b"js"[..]));
    drop(s);
    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].path(), "/maybe/nothing?q=1");
    proxy.shutdown();
}

#[test]
fn precompressed_siblings_follow_accept_encoding() {
    let dir = site("precompressed");
    write(&dir, "app.js", b"identity identity identity");
    write(&dir, "app.js.gz", b"gzip bytes");
    write(&dir, "app.js.br", b"br");
    write(&dir, "plain.txt", b"plain");
    let proxy = serve(&dir, "", "");
    let addr = proxy.local_addrs()[0];
    let r = get(addr, "GET", "/app.js", "Accept-Encoding: gzip, deflate\r\n");
    assert_eq!(r.body, b"gzip bytes");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(r.header("content-type"), Some("text/javascript"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = get(addr, "GET", "/app.js", "Accept-Encoding: gzip, br\r\n");
    assert_eq!(
        (r.body.as_slice(), r.header("content-encoding")),
        (b"br".as_slice(), Some("br"))
    );
    let r = get(
        addr,
        "GET",
        "/app.js",
        "Accept-Encoding: br;q=0, gzip;q=0\r\n",
    );
    assert_eq!(
        (r.body.as_slice(), r.header("content-encoding")),
        (b"identity identity identity".as_slice(), None)
    );
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = get(addr, "GET", "/plain.txt", "Accept-Encoding: gzip\r\n");
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, None)
    );
    proxy.shutdown();
    let proxy = serve(&dir, ", precompressed = false", "");
    let r = get(
        proxy.local_addrs()[0],
        "GET",
        "/app.js",
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, None)
    );
    proxy.shutdown();
}

/// A file truncated while it is sent: the client gets fewer bytes than announced and a closed
/// connection, never a response whose length disagrees with its head.
#[test]
fn file_truncated_mid_send_closes_the_connection() {
    let dir = site("truncate");
    let path = dir.join("big.bin");
    let file = std::fs::File::create(&path).unwrap();
    let len: u64 = 64 * 1024 * 1024;
    file.set_len(len).unwrap();
    let proxy = serve(&dir, "", "");
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(64 * 1024).unwrap();
    s.connect(&proxy.local_addrs()[0].into()).unwrap();
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s);
    let head = read_head_lines(&mut r);
    assert!(head.contains(&format!("Content-Length: {len}")), "{head}");
    let mut first = vec![0u8; 1024 * 1024];
    r.read_exact(&mut first).unwrap();
    file.set_len(1024 * 1024).unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap(); // ends: the proxy closed
    let total = first.len() as u64 + rest.len() as u64;
    assert!(total < len, "got {total} of {len}");
    proxy.shutdown();
}

fn read_head_lines(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        head.push_str(&line);
        if line == "\r\n" || line.is_empty() {
            return head;
        }
    }
}

/// The open-file cache: with `cache_valid = "0s"` every request checks the file, so a
/// replaced file is served at once; with a long interval the cached file keeps being served
/// until it is due (what `open_file_cache_valid` does).
#[test]
fn open_file_cache_notices_changes_when_due() {
    let dir = site("cache");
    write(&dir, "a.txt", b"version 1");
    write(&dir, "big.bin", &pattern(100_000));
    let checked = serve(&dir, "", "[files]\ncache_valid = \"0s\"");
    let trusted = serve(&dir, "", "[files]\ncache_valid = \"1h\"");
    let body = |s: &Server, p: &str| get(s.local_addrs()[0], "GET", p, "").body;
    assert_eq!(body(&checked, "/a.txt"), b"version 1");
    assert_eq!(body(&trusted, "/a.txt"), b"version 1");
    // Replaced the way deploys do it: a new file renamed over the old.
    write(&dir, "a.txt.new", b"version 2!");
    std::fs::rename(dir.join("a.txt.new"), dir.join("a.txt")).unwrap();
    assert_eq!(body(&checked, "/a.txt"), b"version 2!");
    assert_eq!(body(&trusted, "/a.txt"), b"version 1");
    std::fs::remove_file(dir.join("a.txt")).unwrap();
    assert_eq!(
        get(checked.local_addrs()[0], "GET", "/a.txt", "").status,
        404
    );
    // Rewritten in place, same inode, new length.
    write(&dir, "big.bin", &pattern(50_000));
    assert_eq!(body(&checked, "/big.bin").len(), 50_000);
    checked.shutdown();
    trusted.shutdown();
}

#[test]
fn serve_command_serves_a_directory() {
    let dir = site("cli");
    write(&dir, "index.html", b"served by the cli");
    write(&dir, "sub/x.txt", b"x");
    let running = Running::serve(&dir, &["--workers", "1", "--browse"]);
    let r = get(running.addr, "GET", "/", "");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, b"served by the cli".as_slice())
    );
    let r = get(running.addr, "GET", "/sub/", "");
    assert!(String::from_utf8_lossy(&r.body).contains("x.txt"));
    assert_eq!(get(running.addr, "GET", "/../etc/passwd", "").status, 400);
}
