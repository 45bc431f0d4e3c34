//! A tiny upstream for trying slipstream: answers every request on 127.0.0.1:9000 (or the
//! address given as the first argument) with a short text, keeping connections alive.
//! Run: cargo run --release --example hello_upstream

#![allow(clippy::print_stderr)] // an example prints where it listens

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let listener = TcpListener::bind(&addr)?;
    eprintln!("hello_upstream listening on {addr}");
    for stream in listener.incoming() {
        let stream = stream?;
        // One write per response and no Nagle delay: the example must never be what a
        // benchmark of the Quick start measures.
        stream.set_nodelay(true)?;
        std::thread::spawn(move || {
            let mut writer = stream.try_clone()?;
            let mut reader = BufReader::new(stream);
            loop {
                let mut length = 0usize;
                let mut path = String::new();
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 {
                        return Ok::<(), std::io::Error>(());
                    }
                    if path.is_empty() {
                        path = line.split(' ').nth(1).unwrap_or("/").to_string();
                    } else if line.trim().is_empty() {
                        break;
                    } else if let Some((n, v)) = line.split_once(':') {
                        if n.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; length];
                reader.read_exact(&mut body)?;
                let text = format!("hello from the upstream: you asked for {path}\n");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                writer.write_all(response.as_bytes())?;
            }
        });
    }
    Ok(())
}
