//! A worker's HTTP/2 upstream connections (`protocol = "h2"` or `"h2c"`): per server, the
//! connections open to it, each carrying many requests at once. A request takes the first
//! connection with a free stream under the server's `SETTINGS_MAX_CONCURRENT_STREAMS` that
//! has not sent GOAWAY, or a new connection is opened (while one is being opened to the
//! server, requests that find no room wait for it instead). Each connection is driven by a task of
//! its own, which also keeps it honest while idle: a PING every [`PING_IDLE`] that must be
//! answered within the group's connect timeout, and a close after the group's
//! `idle_timeout` without a stream.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use rustc_hash::FxHashMap;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::net::{Address, Stream};

/// How long a connection may sit without a stream before a PING checks it is still there.
pub const PING_IDLE: Duration = Duration::from_secs(5);

/// The receive windows slipstream opens to an upstream: a response streams at the link's
/// speed without waiting for WINDOW_UPDATEs, within bounded memory per stream.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

/// Streams opened on a new connection before the server's SETTINGS arrive (RFC 9113 section
/// 6.5.2 asks servers to allow at least 100).
const INITIAL_STREAMS: usize = 100;

/// One connection as the pool sees it.
struct PooledConn {
    send: SendRequest<Bytes>,
    /// Cleared by the connection's task when the connection ends.
    alive: Rc<Cell<bool>>,
}

/// The HTTP/2 connections of one worker, by server. Single-threaded.
#[derive(Default)]
pub struct H2Pool {
    conns: RefCell<FxHashMap<Address, Vec<PooledConn>>>,
    /// Servers a connection is being opened to, and how its waiters learn it is done.
    opening: RefCell<FxHashMap<Address, Rc<Notify>>>,
}

/// A connection being opened to a server ([`H2Pool::begin_open`]): while it lives, requests
/// to that server that find no room wait for it ([`H2Pool::opening`]) rather than each open
/// a connection of its own (a burst of a thousand requests on a cold pool would otherwise
/// open a hundred connections, each then checked on every request).
pub struct Opening<'a> {
    pool: &'a H2Pool,
    addr: Address,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Some(done) = self.pool.opening.borrow_mut().remove(&self.addr) {
            done.notify_waiters();
        }
    }
}

/// How a connection's task keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    /// A PING unanswered this long ends the connection.
    pub ping_timeout: Duration,
    /// A connection this long without a stream is closed.
    pub idle_timeout: Duration,
}

impl H2Pool {
    /// A connection to `addr` with room for one more stream, if one is open. Connections that
    /// ended or were told to go away are dropped from the pool.
    pub fn take(&self, addr: &Address) -> Option<SendRequest<Bytes>> {
        let mut conns = self.conns.borrow_mut();
        let list = conns.get_mut(addr)?;
        // Each question put to a connection takes its lock: ask the ended ones nothing, and
        // whether it goes away only of the connection chosen.
        list.retain(|e| e.alive.get());
        let mut i = 0;
        while i < list.len() {
            let send = &list[i].send;
            if send.open_streams() >= send.current_max_send_streams() {
                i += 1;
            } else if send.is_going_away() {
                list.remove(i);
            } else {
                return Some(send.clone());
            }
        }
        None
    }

    /// Marks a connection to `addr` as being opened, until the mark is dropped (after the
    /// connection is kept by [`H2Pool::open`], or its opening failed).
    pub fn begin_open(&self, addr: &Address) -> Opening<'_> {
        self.opening
            .borrow_mut()
            .entry(addr.clone())
            .or_insert_with(|| Rc::new(Notify::new()));
        Opening {
            pool: self,
            addr: addr.clone(),
        }
    }

    /// Notified when the connection being opened to `addr` is there (or failed), if one is.
    pub fn opening(&self, addr: &Address) -> Option<Rc<Notify>> {
        self.opening.borrow().get(addr).cloned()
    }

    /// Runs the HTTP/2 handshake on a new connection to `addr`, starts the task that drives
    /// it, and keeps it for the requests that follow.
    pub async fn open(
        &self,
        addr: &Address,
        stream: Stream,
        keep: Keep,
    ) -> Result<SendRequest<Bytes>, h2::Error> {
        let mut builder = h2::client::Builder::new();
        builder
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            // Until the server's SETTINGS say how many streams it takes, no more than RFC 9113
            // asks every server to allow: a burst waiting for this connection would otherwise
            // all land on it, and what is past the server's limit be refused.
            .initial_max_send_streams(INITIAL_STREAMS)
            .enable_push(false);
        let (send, conn) = builder.handshake::<_, Bytes>(stream).await?;
        let alive = Rc::new(Cell::new(true));
        tokio::task::spawn_local(drive(conn, send.clone(), alive.clone(), keep));
        let entry = PooledConn {
            send: send.clone(),
            alive,
        };
        let mut conns = self.conns.borrow_mut();
        let list = conns.entry(addr.clone()).or_default();
        list.retain(|e| e.alive.get());
        list.push(entry);
        Ok(send)
    }

    /// Closes every connection to `addr` (the server left, went down or was ejected): each
    /// ends once its streams have.
    pub fn forget(&self, addr: &Address) {
        let gone = self.conns.borrow_mut().remove(addr);
        for entry in gone.into_iter().flatten() {
            entry.alive.set(false);
        }
    }
}

/// Drives one connection until it ends, PINGing it while idle and closing it after
/// `idle_timeout` without a stream or when it was forgotten; `watch` only observes its
/// streams.
async fn drive(
    mut conn: h2::client::Connection<Stream, Bytes>,
    watch: SendRequest<Bytes>,
    alive: Rc<Cell<bool>>,
    keep: Keep,
) {
    let mut ping = conn.ping_pong();
    let mut idle_since = Instant::now();
    let mut last_ping = Instant::now();
    loop {
        let tick = tokio::time::sleep(PING_IDLE.min(keep.idle_timeout));
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!("HTTP/2 upstream connection ended: {e}");
                }
                break;
            }
            () = tick => {}
        }
        let now = Instant::now();
        if watch.open_streams() > 0 {
            idle_since = now;
            continue;
        }
        if !alive.get() || now.duration_since(idle_since) >= keep.idle_timeout {
            break;
        }
        if now.duration_since(last_ping) < PING_IDLE {
            continue;
        }
        last_ping = now;
        let Some(pinger) = ping.as_mut() else {
            continue;
        };
        let answered = tokio::select! {
            r = tokio::time::timeout(keep.ping_timeout, pinger.ping(h2::Ping::opaque())) => {
                matches!(r, Ok(Ok(_)))
            }
            _ = &mut conn => false,
        };
        if !answered {
            tracing::debug!("HTTP/2 upstream connection did not answer a PING: closed");
            break;
        }
    }
    alive.set(false);
}
