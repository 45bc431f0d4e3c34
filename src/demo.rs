//! The bundled demo upstream of the Quick start (`slipstream run --demo`, and the
//! `hello_upstream` example): answers every request with a short text, keeping connections
//! alive. It is fast (one write per response, TCP_NODELAY, a thread per connection) so that a
//! benchmark of the Quick start measures the proxy, not the example.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// Binds `address` and answers on it from a background thread; fails at once if it cannot
/// bind.
pub fn spawn(address: SocketAddr) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(address)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("demo-upstream".into())
        .spawn(move || serve(&listener))?;
    Ok(bound)
}

/// Accepts connections on `listener` forever, each on its own thread.
pub fn serve(listener: &TcpListener) {
    for stream in listener.incoming().flatten() {
        let _ = std::thread::Builder::new()
            .name("demo-connection".into())
            .spawn(move || answer_tcp(stream));
    }
}

fn answer_tcp(stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    answer(stream.try_clone()?, stream)
}

/// Answers the requests of one connection, read from `reader` and answered on `writer` (two
/// handles of one socket, TCP or unix), until the client closes it.
pub fn answer(reader: impl Read, mut writer: impl Write) -> io::Result<()> {
    let mut reader = BufReader::new(reader);
    let mut line = String::new();
    loop {
        let mut length = 0u64;
        let mut path = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if path.is_empty() {
                path = line.split(' ').nth(1).unwrap_or("/").to_string();
            } else if line.trim().is_empty() {
                break;
            } else if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        io::copy(&mut (&mut reader).take(length), &mut io::sink())?;
        let text = format!("hello from the upstream: you asked for {path}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        // One write per response: no Nagle delay waiting on a delayed ACK.
        writer.write_all(response.as_bytes())?;
    }
}
