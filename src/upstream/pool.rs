//! Each worker's LIFO pool of idle keep-alive upstream connections, per server. Reusing
//! connections is what keeps ephemeral ports and TIME_WAIT from running out under load.

use crate::net::Address;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::time::Duration;

use tokio::time::Instant;

use crate::net::Stream;
use crate::observe::metrics::{Counter, Shard};

struct Idle {
    stream: Stream,
    expires: Instant,
}

/// A worker's idle upstream connections, keyed by server address. Single-threaded.
#[derive(Default)]
pub struct UpstreamPool {
    idle: RefCell<HashMap<Address, Vec<Idle>>>,
}

impl UpstreamPool {
    /// The most recently used live idle connection to `addr`, if any. Connections the upstream
    /// has closed (or that hold unexpected bytes) are discarded.
    pub fn take(&self, addr: &Address, counters: &Shard) -> Option<Stream> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(addr)?;
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
    pub fn give(&self, addr: Address, stream: Stream, cap: usize, idle_timeout: Duration) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(addr).or_default();
        if list.len() < cap {
            list.push(Idle {
                stream,
                expires: Instant::now() + idle_timeout,
            });
        }
    }

    /// Closes every idle connection to `addr` (the server left, went down or was ejected).
    pub fn forget(&self, addr: &Address) {
        self.idle.borrow_mut().remove(addr);
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
fn is_quiet(stream: &Stream) -> bool {
    if !stream.ready_now() {
        return true;
    }
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}
