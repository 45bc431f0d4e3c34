//! Large downloads and uploads: byte-exact gigabyte transfers with bounded proxy memory, on the
//! splice path and on the read/write fallback; backpressure from a slow client; no disk writes;
//! Range pass-through; `buffer_response` freeing the upstream connection early.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use crate::support::*;

const GIB: u64 = 1 << 30;
/// Peak resident memory the proxy process may reach in these tests (the bound for twenty
/// concurrent slow downloads; one transfer needs far less).
const RSS_BOUND_KB: u64 = 64 * 1024;

/// Runs the built binary on a one-worker config with `zero_copy` on or off, once it has
/// finished starting.
fn run_proxy(upstream: SocketAddr, zero_copy: bool, name: &str) -> Running {
    let toml = format!(
        "workers = 1\nadmin = \"{{admin}}\"\n[limits]\nzero_copy = {zero_copy}\n[[listen]]\naddress = \"{{listen}}\"\n\
         [upstreams.app]\nservers = [\"{upstream}\"]\n[[sites]]\ndefault = true\nroutes = [{{ path = \"/\", upstream = \"app\" }}]\n"
    );
    let mut proxy = Running::config(name, &toml);
    // The listener accepts before the process writes its pid file; the disk counters start
    // after that write, which it logs "listening on" behind.
    assert!(
        proxy.wait_logged("listening on"),
        "the proxy did not finish starting"
    );
    proxy
}

/// Bytes the proxy moved with splice, from its admin endpoint.
fn spliced_bytes(proxy: &Running) -> u64 {
    let admin = proxy.admin.expect("admin address");
    let mut res = http_client()
        .get(&format!("http://{admin}/metrics"))
        .call()
        .unwrap();
    let text = res.body_mut().read_to_string().unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("slipstream_spliced_bytes_total "))
        .unwrap();
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Peak memory stayed under the bound and nothing went to disk since `disk_before`.
fn assert_bounded(proxy: &Running, disk_before: u64) {
    let peak = proxy.status_kb("VmHWM");
    assert!(peak < RSS_BOUND_KB, "proxy peak RSS {peak} kB");
    let written = proxy.disk_write_bytes() - disk_before;
    assert_eq!(
        written, 0,
        "proxy wrote {written} bytes to disk during the transfer"
    );
}

/// Checks which path moved the body: splice for (nearly) all of it, or not at all.
fn assert_path(proxy: &Running, zero_copy: bool, len: u64) {
    let spliced = spliced_bytes(proxy);
    if zero_copy {
        assert!(
            spliced > len - (1 << 20),
            "only {spliced} of {len} bytes spliced"
        );
    } else {
        assert_eq!(spliced, 0);
    }
}

fn download_gib(zero_copy: bool) {
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {GIB}\r\n\r\n").into_bytes(),
        len: GIB,
    });
    let proxy = run_proxy(up.addr, zero_copy, &format!("download-{zero_copy}.toml"));
    let disk_before = proxy.disk_write_bytes();
    let mut s = connect(proxy.addr);
    s.write_all(b"GET /file HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut reader = BufReader::with_capacity(1 << 20, s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    assert_eq!(hash_exactly(&mut reader, GIB), pattern_hash(GIB));
    assert_path(&proxy, zero_copy, GIB);
    assert_bounded(&proxy, disk_before);
}

#[test]
#[ignore = "heavy: 1 GiB; CI runs it on an optimized build (cargo test --release -- --ignored)"]
fn one_gib_download_is_byte_exact_with_bounded_memory_spliced() {
    download_gib(true);
}

#[test]
#[ignore = "heavy: 1 GiB; CI runs it on an optimized build (cargo test --release -- --ignored)"]
fn one_gib_download_is_byte_exact_with_bounded_memory_copied() {
    download_gib(false);
}

/// An upstream that reads one request with a Content-Length body, hashing it as it streams,
/// and answers with the hash in hex.
pub(crate) fn hashing_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::with_capacity(1 << 20, stream);
                let mut length = 0u64;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let hash = format!("{:032x}", hash_exactly(&mut reader, length));
                let _ = write!(
                    writer,
                    "HTTP/1.1 200 OK\r\nContent-Length: 32\r\n\r\n{hash}"
                );
            });
        }
    });
    addr
}

fn upload_gib(zero_copy: bool) {
    let proxy = run_proxy(
        hashing_upstream(),
        zero_copy,
        &format!("upload-{zero_copy}.toml"),
    );
    let disk_before = proxy.disk_write_bytes();
    let s = connect(proxy.addr);
    let mut w = s.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        write!(
            w,
            "PUT /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {GIB}\r\n\r\n"
        )
        .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0;
        while pos < GIB {
            fill_pattern(&mut buf, pos);
            w.write_all(&buf).unwrap();
            pos += buf.len() as u64;
        }
    });
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    sender.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        format!("{:032x}", pattern_hash(GIB))
    );
    assert_path(&proxy, zero_copy, GIB);
    assert_bounded(&proxy, disk_before);
}

#[test]
#[ignore = "heavy: 1 GiB; CI runs it on an optimized build (cargo test --release -- --ignored)"]
fn one_gib_upload_is_byte_exact_with_bounded_memory_spliced() {
    upload_gib(true);
}

#[test]
#[ignore = "heavy: 1 GiB; CI runs it on an optimized build (cargo test --release -- --ignored)"]
fn one_gib_upload_is_byte_exact_with_bounded_memory_copied() {
    upload_gib(false);
}

#[test]
fn slow_client_throttles_the_upstream_instead_of_buffering() {
    const LEN: u64 = 512 << 20;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
        len: LEN,
    });
    for zero_copy in [true, false] {
        let proxy = run_proxy(up.addr, zero_copy, &format!("slow-{zero_copy}.toml"));
        let before = up.written.load(std::sync::atomic::Ordering::SeqCst);
        let disk_before = proxy.disk_write_bytes();
        let mut s = connect(proxy.addr);
        s.write_all(b"GET /file HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        // Read 32 MiB at about 64 KiB per 2 ms (32 MB/s at most): far slower than loopback.
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0u64;
        while read < 32 << 20 {
            read += s.read(&mut buf).unwrap() as u64;
            std::thread::sleep(Duration::from_millis(2));
        }
        let sent = up.written.load(std::sync::atomic::Ordering::SeqCst) - before;
        // What the upstream got ahead of the client is what socket buffers, the pipe and the
        // proxy buffer hold: a bounded amount, not the whole 512 MiB body.
        assert!(
            sent - read < 64 << 20,
            "upstream ran {} MiB ahead",
            (sent - read) >> 20
        );
        assert_bounded(&proxy, disk_before);
    }
}

#[test]
fn range_requests_and_206_pass_through() {
    let up = Upstream::start(|req| {
        match req.header("range") {
        Some("bytes=10-19") => Reply::Bytes(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\nAccept-Ranges: bytes\r\nETag: \"v1\"\r\n\r\n0123456789".to_vec(),
        ),
        _ => Reply::Bytes(response(200, &[b'x'; 100])),
    }
    });
    let proxy = simple_proxy(up.addr);
    let s = connect(proxy.local_addrs()[0]);
    let mut w = s.try_clone().unwrap();
    w.write_all(b"GET /f HTTP/1.1\r\nHost: a\r\nRange: bytes=10-19\r\nIf-Range: \"v1\"\r\n\r\n")
        .unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.body, b"0123456789");
    let seen = &up.seen()[0];
    assert_eq!(seen.header("range"), Some("bytes=10-19"));
    assert_eq!(seen.header("if-range"), Some("\"v1\""));
    proxy.shutdown();
}

#[test]
fn buffer_response_frees_the_upstream_connection_before_a_slow_client_reads() {
    const LEN: u64 = 24 << 20;
    let up = Upstream::start(|req| match req.path() {
        "/big" => Reply::Pattern {
            head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
            len: LEN,
        },
        _ => Reply::Bytes(response(200, b"small")),
    });
    let config = simple_config(up.addr, "").replace(
        "upstream = \"app\" }",
        "upstream = \"app\", buffer_response = \"32MB\" }",
    );
    let proxy = proxy(&config);
    let addr = proxy.local_addrs()[0];
    // A client asks for 24 MiB and reads nothing yet.
    let mut slow = connect(addr);
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let buffered = || {
        proxy
            .metrics()
            .total(slipstream::observe::metrics::Counter::BufferedResponses)
    };
    assert!(eventually(|| buffered() == 1));
    // The whole body was read into memory, so the connection is back in the pool: the next
    // request reuses it instead of opening a second one.
    let raw = exchange_until_close(
        addr,
        b"GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(raw.ends_with(b"small"));
    assert_eq!(up.connections(), 1);
    // The slow client still gets every byte.
    let mut reader = BufReader::new(slow);
    let mut line = String::new();
    while line != "\r\n" {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    assert_eq!(hash_exactly(&mut reader, LEN), pattern_hash(LEN));
    proxy.shutdown();
}
