//! A small, fast upstream for the benches: answers every request with 200 and a fixed body
//! (one write per response, TCP_NODELAY, keep-alive), optionally after a delay, on a
//! single-threaded runtime. Several addresses (comma-separated) are served by the one thread,
//! so a bench with many upstreams does not crowd a small machine with busy processes.
//! Run: cargo run --release --example bench_upstream -- 127.0.0.1:9001[,127.0.0.1:9002] [--delay-ms 50] [--body 64]

#![allow(clippy::print_stderr)] // an example prints its usage and where it listens

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9001".into());
    let (mut delay, mut body) = (Duration::ZERO, 64usize);
    let usage =
        || std::io::Error::other("usage: bench_upstream ADDR [--delay-ms N] [--body BYTES]");
    while let Some(flag) = args.next() {
        let value: u64 = args.next().and_then(|v| v.parse().ok()).ok_or_else(usage)?;
        match flag.as_str() {
            "--delay-ms" => delay = Duration::from_millis(value),
            "--body" => body = value as usize,
            _ => return Err(usage()),
        }
    }
    let mut response = format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n").into_bytes();
    response.resize(response.len() + body, b'x');
    let response: &'static [u8] = Box::leak(response.into_boxed_slice());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut accepting = Vec::new();
        for a in addr.split(',') {
            let listener = TcpListener::bind(a).await?;
            accepting.push(tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, response, delay));
                }
            }));
        }
        eprintln!("bench_upstream on {addr}, delay {delay:?}, body {body} B");
        for a in accepting {
            let _ = a.await;
        }
        Ok(())
    })
}

/// Answers each complete request head (bodies are not expected) with the fixed response.
async fn serve(mut stream: TcpStream, response: &'static [u8], delay: Duration) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; 16 * 1024];
    let mut filled = 0;
    loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        while let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
            buf.copy_within(end + 4..filled, 0);
            filled -= end + 4;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if stream.write_all(response).await.is_err() {
                return;
            }
        }
        if filled == buf.len() {
            return; // a head larger than the buffer: not a bench request
        }
    }
}
