//! Compression on the fly through real sockets: each coding round-trips byte-exact through
//! curl's decoders and the crates' own; Accept-Encoding q-values and `identity;q=0`; small,
//! already-encoded, image, `no-transform` and 206 responses pass unchanged; the head of a
//! compressed response (Content-Encoding, Vary once, weak ETag, no Accept-Ranges, the length
//! when compressed whole, chunked when streamed); a slow stream arrives in pieces as it is
//! produced; proxied, FastCGI (real PHP-FPM), static (with the compressed-file cache) and
//! HTTP/2 responses alike; `--compress` on the one-liners; bounded memory for 1 GiB.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::Command;

use slipstream::observe::metrics::Counter;

use crate::support::*;

/// A compressible page of `len` bytes (HTML-like text that varies along its length).
fn page(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        let line = format!(
            "<li class=\"item\">row {i} of the listing, value {}</li>\n",
            i * 37 % 1000
        );
        out.extend_from_slice(line.as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => out = zstd::decode_all(data).unwrap(),
        other => panic!("unexpected coding {other}"),
    }
    out
}

/// The proxy config: one route that compresses (`/`), one that does not (`/plain/`).
fn config(upstream: SocketAddr, compression: &str) -> String {
    format!(
        r#"
workers = 1
[compression]
{compression}
[[listen]]
address = "127.0.0.1:0"
[upstreams.app]
servers = ["{upstream}"]
[[sites]]
default = true
routes = [
  {{ path = "/plain/", upstream = "app" }},
  {{ path = "/", upstream = "app", compress = true }},
]
"#
    )
}

/// One GET with these extra header lines, on a fresh connection.
fn get(addr: SocketAddr, path: &str, fields: &str) -> RawResponse {
    let mut s = connect(addr);
    let req = format!("GET {path} HTTP/1.1\r\nHost: a\r\n{fields}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

fn accept(codings: &str) -> String {
    format!("Accept-Encoding: {codings}\r\n")
}

/// An upstream answering `/big` with 100 KB of HTML, `/small` with 200 bytes, `/stream` with
/// 300 KB chunked, and the path's other cases as named.
fn upstream() -> Upstream {
    Upstream::start(|req| {
        let html = "Content-Type: text/html; charset=utf-8";
        let (fields, body) = match req.path() {
            "/big" | "/plain/big" => (
                format!("{html}\r\nETag: \"v1\"\r\nAccept-Ranges: bytes"),
                page(100_000),
            ),
            "/small" => (html.to_string(), page(200)),
            "/image" => ("Content-Type: image/png".to_string(), page(5000)),
            "/encoded" => (format!("{html}\r\nContent-Encoding: br"), page(5000)),
            "/no-transform" => (
                format!("{html}\r\nCache-Control: public, no-transform"),
                page(5000),
            ),
            "/partial" => (
                format!("{html}\r\nContent-Range: bytes 0-4999/9000"),
                page(5000),
            ),
            "/vary" => (format!("{html}\r\nVary: Cookie"), page(5000)),
            "/json" => ("Content-Type: application/json".to_string(), page(5000)),
            "/stream" | "/stream-big" => {
                let len = if req.path() == "/stream" {
                    300_000
                } else {
                    4_000_000
                };
                let body = page(len);
                let mut out =
                    format!("HTTP/1.1 200 OK\r\n{html}\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .into_bytes();
                for c in body.chunks(10_000) {
                    out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                    out.extend_from_slice(c);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
                return Reply::Bytes(out);
            }
            _ => (html.to_string(), page(3000)),
        };
        let status = if req.path() == "/partial" {
            "206 Partial Content"
        } else {
            "200 OK"
        };
        let mut out = format!(
            "HTTP/1.1 {status}\r\n{fields}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        Reply::Bytes(out)
    })
}

#[test]
fn each_coding_round_trips_through_curl() {
    let up = upstream();
    let server = proxy(&config(up.addr, ""));
    for coding in ["gzip", "br", "zstd"] {
        for path in ["/big", "/stream"] {
            let url = format!("http://{}{path}", server.local_addrs()[0]);
            let out = Command::new("curl")
                .args([
                    "-s",
                    "--compressed",
                    "-H",
                    &format!("Accept-Encoding: {coding}"),
                    "-D",
                    "-",
                    &url,
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "curl failed for {coding} {path}");
            let text = out.stdout;
            let split = text.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8_lossy(&text[..split]).to_lowercase();
            assert!(
                head.contains(&format!("content-encoding: {coding}")),
                "{head}"
            );
            let expected = if path == "/big" {
                page(100_000)
            } else {
                page(300_000)
            };
            assert!(
                text[split + 4..] == expected[..],
                "{coding} {path}: body differs"
            );
        }
    }
}

#[test]
fn whole_responses_get_a_length_and_streamed_ones_are_chunked() {
    let up = upstream();
    let server = proxy(&config(up.addr, ""));
    let addr = server.local_addrs()[0];
    for coding in ["gzip", "br", "zstd"] {
        let r = get(addr, "/big", &accept(coding));
        assert_eq!(r.header("content-encoding"), Some(coding));
        let length: usize = r.header("content-length").unwrap().parse().unwrap();
        assert_eq!(length, r.body.len());
        assert!(length < 30_000, "{coding}: {length} bytes");
        assert_eq!(r.header("etag"), Some("W/\"v1\""));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("accept-ranges"), None);
        assert_eq!(decode(coding, &r.body), page(100_000));
        // Larger than a buffer and chunked upstream: streamed, chunked.
        let r = get(addr, "/stream", &accept(coding));
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(decode(coding, &r.body), page(300_000));
    }
    // A large body streamed from a fast upstream goes out in pieces as it is compressed,
    // never piled up whole in memory.
    let mut s = connect(addr);
    s.write_all(b"GET /stream-big HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let body_at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let (mut at, mut largest, mut payload) = (body_at, 0, Vec::new());
    loop {
        let line_end = at + raw[at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let n =
            usize::from_str_radix(std::str::from_utf8(&raw[at..line_end]).unwrap(), 16).unwrap();
        if n == 0 {
            break;
        }
        payload.extend_from_slice(&raw[line_end + 2..line_end + 2 + n]);
        largest = largest.max(n);
        at = line_end + 2 + n + 2;
    }
    assert_eq!(decode("gzip", &payload), page(4_000_000));
    assert!(payload.len() > 300_000, "{}", payload.len());
    assert!(largest <= 256 * 1024, "a chunk of {largest} bytes");
    // The route without `compress` passes the same response unchanged.
    let r = get(addr, "/plain/big", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.body, page(100_000));
    let counters = server.metrics();
    assert_eq!(counters.total(Counter::CompressedResponses), 7);
    assert!(
        counters.total(Counter::CompressBytesOut) * 4 < counters.total(Counter::CompressBytesIn)
    );
}

#[test]
fn q_values_and_identity_refusal_are_honoured() {
    let up = upstream();
    let server = proxy(&config(up.addr, ""));
    let addr = server.local_addrs()[0];
    let coding_of = |path: &str, ae: &str| {
        get(addr, path, &accept(ae))
            .header("content-encoding")
            .map(String::from)
    };
    // Server order (zstd, br, gzip) breaks ties; q-values win over it.
    assert_eq!(coding_of("/", "gzip, br, zstd").as_deref(), Some("zstd"));
    assert_eq!(
        coding_of("/", "gzip;q=1, br;q=0.8, zstd;q=0.5").as_deref(),
        Some("gzip")
    );
    assert_eq!(
        coding_of("/", "br;q=0, gzip;q=0.1").as_deref(),
        Some("gzip")
    );
    assert_eq!(coding_of("/", "*;q=0.3, zstd;q=0").as_deref(), Some("br"));
    assert_eq!(coding_of("/", "gzip;q=0, deflate").as_deref(), None);
    assert_eq!(coding_of("/", "identity").as_deref(), None);
    // Small responses stay identity, unless the client refuses identity.
    assert_eq!(coding_of("/small", "gzip").as_deref(), None);
    let r = get(addr, "/small", &accept("gzip, identity;q=0"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page(200));
    // No Accept-Encoding: identity, still marked as varying.
    let r = get(addr, "/", "");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.body, page(3000));
    // The configured order breaks ties.
    let ordered = proxy(&config(up.addr, "algorithms = [\"gzip\", \"br\"]"));
    let addr = ordered.local_addrs()[0];
    assert_eq!(
        get(addr, "/", &accept("zstd, br, gzip")).header("content-encoding"),
        Some("gzip")
    );
    assert_eq!(
        get(addr, "/", &accept("zstd")).header("content-encoding"),
        None
    );
}

#[test]
fn what_does_not_benefit_passes_unchanged() {
    let up = upstream();
    let server = proxy(&config(up.addr, ""));
    let addr = server.local_addrs()[0];
    for path in ["/small", "/image", "/encoded", "/no-transform", "/partial"] {
        let r = get(addr, path, &accept("gzip, br, zstd"));
        assert_eq!(
            r.header("content-encoding"),
            if path == "/encoded" { Some("br") } else { None },
            "{path}"
        );
        let len = if path == "/small" { 200 } else { 5000 };
        assert_eq!(r.body, page(len), "{path}");
        assert_eq!(
            r.header("content-length"),
            Some(len.to_string().as_str()),
            "{path}"
        );
    }
    // HEAD: the GET's head, no body.
    let mut s = connect(addr);
    s.write_all(
        b"HEAD /big HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("Content-Encoding: gzip\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n") && !text.contains("Content-Length"),
        "{text}"
    );
    // An upstream Vary is merged, not duplicated; JSON is compressed by default.
    let r = get(addr, "/vary", &accept("gzip"));
    assert_eq!(r.header("vary"), Some("Cookie, Accept-Encoding"));
    assert_eq!(
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
            .count(),
        1
    );
    assert_eq!(
        get(addr, "/json", &accept("br")).header("content-encoding"),
        Some("br")
    );
    // Types can be configured.
    let html_only = proxy(&config(up.addr, "types = [\"text/html\"]"));
    let addr = html_only.local_addrs()[0];
    assert_eq!(
        get(addr, "/json", &accept("br")).header("content-encoding"),
        None
    );
}

#[test]
fn a_slow_stream_arrives_compressed_in_pieces_as_it_is_produced() {
    for coding in ["gzip", "br", "zstd"] {
        let gate = Gate::default();
        let g = gate.clone();
        let up = Upstream::start(move |_| {
            let first = b"data: first event\n\n";
            let mut head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                first.len()
            )
            .into_bytes();
            head.extend_from_slice(first);
            head.extend_from_slice(b"\r\n");
            let last = b"data: last event\n\n";
            let mut rest = format!("{:x}\r\n", last.len()).into_bytes();
            rest.extend_from_slice(last);
            rest.extend_from_slice(b"\r\n0\r\n\r\n");
            Reply::BytesThen(
                head,
                Box::new(Reply::AfterGate(g.clone(), Box::new(Reply::Bytes(rest)))),
            )
        });
        let server = proxy(&config(up.addr, ""));
        let mut s = connect(server.local_addrs()[0]);
        let req = format!("GET /events HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {coding}\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        let mut head = String::new();
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).unwrap();
            head.push_str(&line);
        }
        assert!(
            head.contains(&format!("Content-Encoding: {coding}")),
            "{head}"
        );
        // The first chunk arrives (and decodes) while the upstream is still held at the gate.
        line.clear();
        reader.read_line(&mut line).unwrap();
        let n = usize::from_str_radix(line.trim(), 16).unwrap();
        let mut chunk = vec![0; n + 2];
        reader.read_exact(&mut chunk).unwrap();
        let mut got = vec![0; 64];
        let k = match coding {
            "gzip" => flate2::read::GzDecoder::new(&chunk[..n]).read(&mut got),
            "br" => brotli::Decompressor::new(&chunk[..n], 4096).read(&mut got),
            _ => zstd::stream::read::Decoder::new(&chunk[..n])
                .unwrap()
                .read(&mut got),
        }
        .unwrap();
        assert_eq!(&got[..k], b"data: first event\n\n", "{coding}");
        gate.open();
        let mut rest = Vec::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut c = vec![0; n + 2];
            reader.read_exact(&mut c).unwrap();
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&c[..n]);
        }
        let mut all = chunk[..n].to_vec();
        all.extend_from_slice(&rest);
        assert_eq!(
            decode(coding, &all),
            b"data: first event\n\ndata: last event\n\n"
        );
    }
}

#[test]
fn static_files_are_compressed_once_then_served_from_the_cache() {
    let www = temp_path("compress-www");
    let _ = std::fs::remove_dir_all(&www);
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("page.html"), page(50_000)).unwrap();
    std::fs::write(www.join("big.txt"), page(3_000_000)).unwrap();
    std::fs::write(www.join("pre.css"), page(5000)).unwrap();
    std::fs::write(www.join("pre.css.br"), b"precompressed").unwrap();
    std::fs::write(www.join("logo.png"), page(5000)).unwrap();
    let server = proxy(&format!(
        r#"
workers = 1
[[listen]]
address = "127.0.0.1:0"
[[sites]]
default = true
routes = [{{ path = "/", root = "{}", compress = true }}]
"#,
        www.display()
    ));
    let addr = server.local_addrs()[0];
    for coding in ["gzip", "br", "zstd"] {
        for _ in 0..3 {
            let r = get(addr, "/page.html", &accept(coding));
            assert_eq!(r.header("content-encoding"), Some(coding));
            assert_eq!(
                r.header("content-length")
                    .unwrap()
                    .parse::<usize>()
                    .unwrap(),
                r.body.len()
            );
            assert!(r.header("etag").unwrap().starts_with("W/\""));
            assert_eq!(r.header("vary"), Some("Accept-Encoding"));
            assert_eq!(decode(coding, &r.body), page(50_000));
        }
    }
    // Revalidating the compressed copy: 304 with the weak ETag and Vary, no coding.
    let etag = get(addr, "/page.html", &accept("gzip"))
        .header("etag")
        .unwrap()
        .to_string();
    let r = get(
        addr,
        "/page.html",
        &format!("{}If-None-Match: {etag}\r\n", accept("gzip")),
    );
    assert_eq!((r.status, r.header("etag")), (304, Some(etag.as_str())));
    assert_eq!(
        (r.header("vary"), r.header("content-encoding")),
        (Some("Accept-Encoding"), None)
    );
    let counters = server.metrics();
    assert_eq!(counters.total(Counter::CompressCacheMisses), 3);
    assert_eq!(counters.total(Counter::CompressCacheHits), 7);
    // Larger than static_cache_max_file: compressed as it is sent, chunked.
    let r = get(addr, "/big.txt", &accept("zstd"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(decode("zstd", &r.body), page(3_000_000));
    // A range is served from the file as it is; a precompressed sibling is sent as it is;
    // an image is not compressed.
    let r = get(
        addr,
        "/page.html",
        &format!("{}Range: bytes=0-99\r\n", accept("gzip")),
    );
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    assert_eq!(r.body, page(100));
    let r = get(addr, "/pre.css", &accept("br, gzip"));
    assert_eq!(
        (r.header("content-encoding"), r.body.as_slice()),
        (Some("br"), &b"precompressed"[..])
    );
    let r = get(addr, "/logo.png", &accept("gzip"));
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 5000));
    // A changed file is compressed again, never served stale.
    std::fs::write(www.join("page.html"), page(40_000)).unwrap();
    assert!(eventually(|| {
        let r = get(addr, "/page.html", &accept("gzip"));
        decode("gzip", &r.body) == page(40_000)
    }));
}

#[test]
fn fastcgi_responses_are_compressed_from_a_real_php_fpm() {
    let fpm = crate::fastcgi::PhpFpm::start("compress");
    fpm.script("page.php", "<?php header('Content-Type: text/html'); for ($i = 0; $i < 3000; $i++) echo \"<li>row $i of the listing</li>\\n\";");
    fpm.script(
        "slow.php",
        "<?php header('Content-Type: text/plain'); echo str_repeat('first ', 400); flush(); usleep(200000); echo str_repeat('second ', 400);",
    );
    let root = fpm.root.canonicalize().unwrap();
    let socket = format!("unix:{}", fpm.socket.display());
    let server = crate::fastcgi_proxy::php_proxy(&socket, &root, "", ", compress = true");
    let addr = server.local_addrs()[0];
    let expected: String = (0..3000)
        .map(|i| format!("<li>row {i} of the listing</li>\n"))
        .collect();
    for coding in ["gzip", "br", "zstd"] {
        let r = get(addr, "/page.php", &accept(coding));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(decode(coding, &r.body), expected.as_bytes(), "{coding}");
        let r = get(addr, "/slow.php", &accept(coding));
        assert_eq!(r.header("content-encoding"), Some(coding));
        let expected = format!("{}{}", "first ".repeat(400), "second ".repeat(400));
        assert_eq!(decode(coding, &r.body), expected.as_bytes(), "{coding}");
    }
    let r = get(addr, "/page.php", "");
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, Some("Accept-Encoding"))
    );
    assert_eq!(r.body, expected.as_bytes());
}

#[test]
fn compress_flag_on_the_one_liners() {
    let up = upstream();
    let upstream = up.addr.to_string();
    let proxy = Running::proxy(&["--upstream", &upstream, "--compress"]);
    let r = get(proxy.addr, "/big", &accept("br"));
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(decode("br", &r.body), page(100_000));
    let plain = Running::proxy(&["--upstream", &upstream]);
    assert_eq!(
        get(plain.addr, "/big", &accept("br")).header("content-encoding"),
        None
    );
    let www = temp_path("compress-serve");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), page(10_000)).unwrap();
    let serve = Running::serve(&www, &["--compress"]);
    let r = get(serve.addr, "/", &accept("gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page(10_000));
}

#[test]
fn http2_responses_are_compressed_too() {
    let up = upstream();
    let toml = config(up.addr, "").replace(
        "address = \"127.0.0.1:0\"",
        "address = \"127.0.0.1:0\"\nh2c = true",
    );
    let server = proxy(&toml);
    let addr = server.local_addrs()[0];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, async move {
        let mut client = crate::http2::h2c(addr).await;
        for (path, len) in [("/big", 100_000), ("/stream", 300_000)] {
            let req = http::Request::get(format!("http://a{path}"))
                .header("accept-encoding", "gzip")
                .body(())
                .unwrap();
            let mut ready = client.clone().ready().await.unwrap();
            let (response, _) = ready.send_request(req, true).unwrap();
            let (parts, body) = response.await.unwrap().into_parts();
            assert_eq!(parts.headers["content-encoding"], "gzip");
            assert_eq!(parts.headers["vary"], "Accept-Encoding");
            let body = crate::http2::body_of(body).await;
            assert_eq!(decode("gzip", &body), page(len));
        }
        let _ = &mut client;
    });
}

#[test]
#[ignore = "heavy: 1 GiB; CI runs it on an optimized build (cargo test --release -- --ignored)"]
fn one_gib_compressed_stream_is_byte_exact_with_bounded_memory() {
    const GIB: u64 = 1 << 30;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {GIB}\r\n\r\n"
        )
        .into_bytes(),
        len: GIB,
    });
    let toml = format!(
        "workers = 1\n[[listen]]\naddress = \"{{listen}}\"\n[upstreams.app]\nservers = [\"{}\"]\n\
         [[sites]]\ndefault = true\nroutes = [{{ path = \"/\", upstream = \"app\", compress = true }}]\n",
        up.addr
    );
    for coding in ["gzip", "zstd", "br"] {
        let proxy = Running::config(&format!("compress-gib-{coding}.toml"), &toml);
        let mut s = connect(proxy.addr);
        let req = format!("GET /file HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {coding}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut reader = BufReader::with_capacity(1 << 20, s);
        let mut line = String::new();
        while line != "\r\n" {
            line.clear();
            reader.read_line(&mut line).unwrap();
        }
        let body = ChunkedReader {
            inner: reader,
            left: 0,
            done: false,
        };
        let mut decoded: Box<dyn Read> = match coding {
            "gzip" => Box::new(flate2::read::GzDecoder::new(body)),
            "br" => Box::new(brotli::Decompressor::new(body, 1 << 16)),
            _ => Box::new(zstd::stream::read::Decoder::new(body).unwrap()),
        };
        assert_eq!(
            hash_exactly(&mut decoded, GIB),
            pattern_hash(GIB),
            "{coding}"
        );
        let peak = proxy.status_kb("VmHWM");
        assert!(peak < 32 * 1024, "{coding}: proxy peak RSS {peak} kB");
    }
}

/// Reads the payload of a chunked body.
struct ChunkedReader<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for ChunkedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.inner.read_line(&mut line)?;
            if line == "\r\n" {
                line.clear();
                self.inner.read_line(&mut line)?;
            }
            self.left = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..n])?;
        self.left -= n;
        Ok(n)
    }
}
