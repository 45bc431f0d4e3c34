//! Opening a new upstream connection, with every failure classified and the classic trap
//! (ephemeral port exhaustion) counted and logged by name.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::error::{Error, Kind};
use crate::net::Stream;
use crate::observe::metrics::{Counter, Shard};

/// Opens a new connection to an upstream server, counting failures by kind.
pub async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    counters: &Shard,
) -> Result<Stream, Error> {
    counters.inc(Counter::UpstreamConnects);
    let kind = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            return Ok(Stream::Tcp(stream));
        }
        Ok(Err(e)) => {
            if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                counters.inc(Counter::UpstreamPortsExhausted);
                tracing::error!(%addr, "cannot connect upstream: ephemeral ports exhausted (EADDRNOTAVAIL); raise the upstream keepalive pool or net.ipv4.ip_local_port_range");
                Kind::PortsExhausted
            } else if e.kind() == std::io::ErrorKind::ConnectionRefused {
                tracing::debug!(%addr, "upstream refused the connection");
                Kind::ConnectRefused
            } else {
                tracing::warn!(%addr, "upstream connect failed: {e}");
                Kind::ConnectFailed
            }
        }
        Err(_) => Kind::ConnectTimeout,
    };
    counters.inc(Counter::UpstreamConnectErrors);
    Err(Error::connect(kind))
}
