//! Upstream connections: opening them, and each worker's LIFO pool of idle keep-alive
//! connections per server. Reusing connections is what keeps ephemeral ports and TIME_WAIT
//! from running out under load.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::metrics::{Counter, Shard};

/// Why a connection could not be opened.
#[derive(Debug)]
pub enum ConnectError {
    /// No answer within the connect timeout.
    Timeout,
    /// Refused, unreachable, or no local port left.
    Failed(io::Error),
}

/// Opens a new connection to an upstream server, counting failures by kind.
pub async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    counters: &Shard,
) -> Result<TcpStream, ConnectError> {
    counters.inc(Counter::UpstreamConnects);
    let result = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            return Ok(stream);
        }
        Ok(Err(e)) => {
            if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) {
                counters.inc(Counter::UpstreamPortsExhausted);
                tracing::error!(%addr, "cannot connect upstream: ephemeral ports exhausted (EADDRNOTAVAIL); raise the upstream keepalive pool or net.ipv4.ip_local_port_range");
            }
            ConnectError::Failed(e)
        }
        Err(_) => ConnectError::Timeout,
    };
    counters.inc(Counter::UpstreamConnectErrors);
    Err(result)
}

struct Idle {
    stream: TcpStream,
    expires: Instant,
}

/// A worker's idle upstream connections, keyed by server address. Single-threaded.
#[derive(Default)]
pub struct UpstreamPool {
    idle: RefCell<HashMap<SocketAddr, Vec<Idle>>>,
}

impl UpstreamPool {
    /// The most recently used live idle connection to `addr`, if any. Connections the upstream
    /// has closed (or that hold unexpected bytes) are discarded.
    pub fn take(&self, addr: SocketAddr, counters: &Shard) -> Option<TcpStream> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&addr)?;
        let now = Instant::now();
        while let Some(conn) = list.pop() {
            if conn.expires > now && is_quiet(&conn.stream) {
                return Some(conn.stream);
            }
            counters.inc(Counter::UpstreamStaleDiscarded);
        }
        None
    }

    /// Keeps a connection for reuse, up to `cap` per server.
    pub fn give(&self, addr: SocketAddr, stream: TcpStream, cap: usize, idle_timeout: Duration) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(addr).or_default();
        if list.len() < cap {
            list.push(Idle {
                stream,
                expires: Instant::now() + idle_timeout,
            });
        }
    }

    /// Closes expired connections and those the upstream closed.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut idle = self.idle.borrow_mut();
        for list in idle.values_mut() {
            list.retain(|c| c.expires > now && is_quiet(&c.stream));
        }
        idle.retain(|_, l| !l.is_empty());
    }

    /// Idle connections held, over all servers.
    pub fn len(&self) -> usize {
        self.idle.borrow().values().map(Vec::len).sum()
    }

    /// True when no idle connection is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An idle connection is healthy if the reactor has seen nothing on it (the upstream neither
/// closed it nor sent bytes). This costs no syscall unless readiness is set, in which case one
/// non-blocking read tells a spurious wake-up from a real event.
fn is_quiet(stream: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    if stream.poll_read_ready(&mut cx).is_pending() {
        return true;
    }
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}
