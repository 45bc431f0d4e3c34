//! A tiny upstream for trying slipstream on its own: answers every request on 127.0.0.1:9000
//! (or the address given as the first argument) with a short text, keeping connections alive.
//! It is the same upstream `slipstream run --demo` starts.
//! Run: cargo run --release --example hello_upstream

#![allow(clippy::print_stderr)] // an example prints where it listens

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let listener = std::net::TcpListener::bind(&addr)?;
    eprintln!("hello_upstream listening on {addr}");
    slipstream::demo::serve(&listener);
    Ok(())
}
