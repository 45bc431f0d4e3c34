//! The PROXY protocol header that starts each connection on a listener with
//! `proxy_protocol = true`: read before TLS or HTTP without taking a byte past it (the
//! socket is peeked, then exactly the header is read), parsed by
//! [`crate::net::proxy_protocol`]. The client it names is the connection's peer for
//! everything after: logs, `$remote_addr`, access rules, limits, `X-Forwarded-For`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::net::proxy_protocol::{parse, Proxied, MAX_HEADER};

/// The client a connection's PROXY header names (`None`: a LOCAL or UNKNOWN header, the
/// connection's own address stands), or why the connection is refused: no header, a
/// malformed one, or none whole within `timeout`.
pub(super) async fn read(
    stream: &TcpStream,
    timeout: Duration,
) -> Result<Option<SocketAddr>, String> {
    let read = async {
        let mut buf = vec![0u8; 232];
        loop {
            let ready = stream
                .ready(Interest::READABLE)
                .await
                .map_err(|e| e.to_string())?;
            // Peeked bytes keep a socket readable: the end of the stream is seen apart.
            if ready.is_read_closed() {
                return Err("closed before a whole header".to_string());
            }
            let n = stream.peek(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed before a whole header".to_string());
            }
            match parse(&buf[..n]) {
                Ok(Some((proxied, consumed))) => return Ok((proxied, consumed)),
                Ok(None) if n == buf.len() && n < MAX_HEADER => {
                    // A v2 header with TLVs longer than the first peek.
                    buf.resize((n * 4).min(MAX_HEADER), 0);
                }
                Ok(None) => {
                    // Part of a header so far: forget this readiness, so the next wait
                    // ends only when more bytes (or the end) arrive.
                    let _ = stream.try_io(Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let (proxied, consumed) = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| "no whole header in time".to_string())??;
    // Exactly the header: what follows is the client's first bytes, left in the socket.
    let mut header = vec![0u8; consumed];
    let mut done = 0;
    while done < consumed {
        // The bytes were peeked: they are there to be read.
        stream.readable().await.map_err(|e| e.to_string())?;
        match stream.try_read(&mut header[done..]) {
            Ok(0) => return Err("closed while the header was read".to_string()),
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(match proxied {
        Proxied::Addresses { source, .. } => Some(source),
        Proxied::Local => None,
    })
}
