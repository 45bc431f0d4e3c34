//! A load generator for large responses whose own cost stays out of the way: HTTP/1.1
//! keep-alive GETs over N connections on one thread, each response's head read and parsed
//! (status 200 and `Content-Length` required), its body discarded in the kernel with
//! `recv(MSG_TRUNC)` (TCP drops the bytes without copying them to user space). wrk copies every
//! body byte: at 91 KB it runs out of its core before a cache does (bench/README.md). Prints
//! the lines of wrk's output the benches read (`N requests in Xs`, `Requests/sec:`, and with
//! `--latency` the 50% and 99% latencies), so `WRK=target/release/examples/bench_client` swaps
//! it in for wrk. Latency is each request's own (send to last byte), without wrk's correction
//! for coordinated omission.
//! Run: bench_client [-t1] -c50 -d10s [--latency] http://127.0.0.1:8080/path

#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints its results
#![allow(unsafe_code)] // recv(2) with MSG_TRUNC and a length beyond its buffer

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// What every connection counts.
#[derive(Default)]
struct Tally {
    requests: u64,
    body_bytes: u64,
    latencies_us: Vec<u32>,
    errors: u64,
}

fn main() -> std::io::Result<()> {
    let (mut conns, mut secs, mut latency, mut url) = (50usize, 10u64, false, None);
    for arg in std::env::args().skip(1) {
        if let Some(n) = arg.strip_prefix("-c") {
            conns = n.parse().map_err(|_| std::io::Error::other("-cN"))?;
        } else if let Some(d) = arg.strip_prefix("-d") {
            secs = d
                .trim_end_matches('s')
                .parse()
                .map_err(|_| std::io::Error::other("-dNs"))?;
        } else if arg == "--latency" {
            latency = true;
        } else if arg.starts_with("-t") {
            // One thread always: the point is a client that needs less than one core.
        } else {
            url = Some(arg);
        }
    }
    let url = url.ok_or_else(|| std::io::Error::other("usage: bench_client -cN -dNs URL"))?;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| std::io::Error::other("http:// only"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes();
    let addr = authority.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tally = Rc::new(RefCell::new(Tally::default()));
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    runtime.block_on(async {
        let local = tokio::task::LocalSet::new();
        for _ in 0..conns {
            let (request, addr, tally) = (request.clone(), addr.clone(), tally.clone());
            local.spawn_local(async move {
                if let Err(e) = connection(&addr, &request, until, &tally).await {
                    tally.borrow_mut().errors += 1;
                    eprintln!("bench_client: {e}");
                }
            });
        }
        local.await;
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut t = tally.take();
    println!(
        "  {} requests in {elapsed:.2}s, {:.2}MB read",
        t.requests,
        t.body_bytes as f64 / 1e6
    );
    if t.errors > 0 {
        println!("  Socket errors: {}", t.errors);
    }
    println!("Requests/sec: {:.2}", t.requests as f64 / elapsed);
    if latency && !t.latencies_us.is_empty() {
        t.latencies_us.sort_unstable();
        let at = |q: f64| t.latencies_us[((t.latencies_us.len() - 1) as f64 * q) as usize];
        println!("  Latency Distribution");
        println!("     50% {}us", at(0.50));
        println!("     99% {}us", at(0.99));
    }
    if t.errors > 0 {
        // A bench must not read a run with failed connections as a result.
        return Err(std::io::Error::other(format!(
            "{} connections failed",
            t.errors
        )));
    }
    Ok(())
}

/// One keep-alive connection asking until `until`.
async fn connection(
    addr: &str,
    request: &[u8],
    until: Instant,
    tally: &RefCell<Tally>,
) -> std::io::Result<()> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut head = vec![0u8; 4096];
    while Instant::now() < until {
        let sent = Instant::now();
        let mut written = 0;
        while written < request.len() {
            stream.writable().await?;
            match stream.try_write(&request[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        let (head_len, body_len, had) = read_head(&stream, &mut head).await?;
        let mut left = body_len
            .checked_sub((had - head_len) as u64)
            .ok_or_else(|| std::io::Error::other("more bytes than Content-Length says"))?;
        while left > 0 {
            left -= discard(&stream, left).await?;
        }
        let mut t = tally.borrow_mut();
        t.requests += 1;
        t.body_bytes += body_len;
        t.latencies_us
            .push(sent.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
    }
    Ok(())
}

/// Reads a response head into `buf`: its length, its body's length, and the bytes read.
async fn read_head(stream: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, u64, usize)> {
    let mut had = 0;
    loop {
        if had == buf.len() {
            return Err(std::io::Error::other("a head over 4 KB"));
        }
        stream.readable().await?;
        match stream.try_read(&mut buf[had..]) {
            Ok(0) => return Err(std::io::Error::other("closed by the server")),
            Ok(n) => had += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut fields);
        match response.parse(&buf[..had]) {
            Ok(httparse::Status::Complete(head_len)) => {
                if response.code != Some(200) {
                    return Err(std::io::Error::other(format!("status {:?}", response.code)));
                }
                let length = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                    .ok_or_else(|| std::io::Error::other("no Content-Length"))?;
                return Ok((head_len, length, had));
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(std::io::Error::other(format!("bad head: {e}"))),
        }
    }
}

/// Drops up to `left` bytes of the body in the kernel; how many went.
async fn discard(stream: &TcpStream, left: u64) -> std::io::Result<u64> {
    let fd = stream.as_raw_fd();
    let mut scratch = 0u8;
    loop {
        stream.readable().await?;
        let dropped = stream.try_io(Interest::READABLE, || {
            let want = left.min(1 << 20) as usize;
            // SAFETY: with MSG_TRUNC, TCP discards up to `want` bytes and writes nothing to
            // the buffer (tcp_recvmsg skips the copy), so the one-byte buffer is never written
            // past; the fd is the stream's, open for this call.
            let n = unsafe {
                libc::recv(
                    fd,
                    std::ptr::addr_of_mut!(scratch).cast(),
                    want,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as u64)
            }
        });
        match dropped {
            Ok(0) => return Err(std::io::Error::other("closed mid-body")),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}
