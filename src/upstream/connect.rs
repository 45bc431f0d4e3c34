//! Opening a new upstream connection, with every failure classified and the classic trap
//! (ephemeral port exhaustion) counted and logged by name.

use crate::net::Address;
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};

use crate::error::{Error, Kind};
use crate::net::Stream;
use crate::observe::metrics::{Counter, Shard};
use crate::tls::client::UpstreamTls;
use crate::upstream::stats::{ConnectErrno, ServerStats};

/// Opens a new upstream connection, counting it and its failures by kind and errno (in the
/// worker's counters and the server's figures).
pub async fn connect(
    addr: &Address,
    timeout: Duration,
    counters: &Shard,
    stats: &ServerStats,
    (tls, preface): (Option<&UpstreamTls>, &[u8]),
) -> Result<Stream, Error> {
    counters.inc(Counter::UpstreamConnects);
    ServerStats::bump(&stats.connects);
    let error = match tokio::time::timeout(timeout, open_with(addr, tls, preface)).await {
        // A worker running a ring reads and writes plain upstream connections through it.
        Ok(Ok(stream)) => match stream.onto_ring() {
            Ok(stream) => return Ok(stream),
            Err(e) => Some(e),
        },
        Ok(Err(e)) => Some(e),
        Err(_) => None,
    };
    ServerStats::bump(&stats.connect_errors[ConnectErrno::of(error.as_ref()) as usize]);
    let kind = match error {
        Some(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
            counters.inc(Counter::UpstreamPortsExhausted);
            tracing::error!(%addr, "cannot connect upstream: ephemeral ports exhausted (EADDRNOTAVAIL); raise the upstream keepalive pool or net.ipv4.ip_local_port_range");
            Kind::PortsExhausted
        }
        Some(e)
            if e.kind() == std::io::ErrorKind::ConnectionRefused
                || e.kind() == std::io::ErrorKind::NotFound =>
        {
            tracing::debug!(%addr, "upstream refused the connection");
            Kind::ConnectRefused
        }
        Some(e) => {
            tracing::warn!(%addr, "upstream connect failed: {e}");
            Kind::ConnectFailed
        }
        None => Kind::ConnectTimeout,
    };
    counters.inc(Counter::UpstreamConnectErrors);
    Err(Error::connect(kind))
}

/// Opens a connection, writes `preface` (a PROXY protocol header, or nothing), then makes
/// the TLS handshake when the group speaks TLS (a failed handshake is an `InvalidData` error,
/// logged with its reason).
pub(super) async fn open_with(
    addr: &Address,
    tls: Option<&UpstreamTls>,
    preface: &[u8],
) -> std::io::Result<Stream> {
    let Some(tls) = tls else {
        let mut stream = open(addr).await?;
        if !preface.is_empty() {
            tokio::io::AsyncWriteExt::write_all(&mut stream, preface).await?;
        }
        return Ok(stream);
    };
    let Address::Tcp(a) = addr else {
        return Err(std::io::ErrorKind::Unsupported.into());
    };
    let mut tcp = open_tcp(a).await?;
    if !preface.is_empty() {
        // A PROXY header goes before the TLS handshake.
        tokio::io::AsyncWriteExt::write_all(&mut tcp, preface).await?;
    }
    match tls.connect(addr, tcp).await {
        Ok(s) => Ok(Stream::TlsClient(Box::new(s))),
        Err(e) => {
            tracing::warn!(%addr, "TLS handshake with the upstream failed: {e}");
            Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }
    }
}

/// Opens a TCP connection (without Nagle's delay) or a unix socket connection.
pub async fn open(addr: &Address) -> std::io::Result<Stream> {
    match addr {
        Address::Tcp(a) => Ok(Stream::Tcp(open_tcp(a).await?)),
        Address::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
    }
}

/// Opens a TCP connection without Nagle's delay.
async fn open_tcp(a: &std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(a).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}
