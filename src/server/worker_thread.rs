//! The life of one worker thread: a tokio current-thread runtime running an accept loop per
//! listener, a once-a-second housekeeping task, and, at shutdown, a drain of its connections.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio::task::LocalSet;

use crate::observe::listeners::ListenerStats;
use crate::observe::metrics::{Counter, Gauge};
use crate::proxy;
use crate::worker::Worker;

/// One of a worker's listening sockets.
pub(super) struct Listening {
    /// The bound socket.
    pub(super) socket: std::net::TcpListener,
    /// This worker's figures for it.
    pub(super) stats: Arc<ListenerStats>,
    /// Connections open at once on it in this worker.
    pub(super) limit: usize,
    /// Clients speak TLS on it.
    pub(super) tls: bool,
    /// Requests on it are redirected to https.
    pub(super) redirect: bool,
    /// Plain connections on it may speak HTTP/2 with prior knowledge.
    pub(super) h2c: bool,
    /// Connections start with a PROXY protocol header.
    pub(super) proxy_protocol: bool,
}

/// Starts this worker's ring if the process probe found io_uring usable (a refusal was
/// logged once there); a worker whose ring is refused is counted and runs on epoll.
fn start_ring(worker: &Worker) {
    if crate::uring::probe().is_err() {
        return worker.counters.inc(Counter::UringUnavailable);
    }
    let counters = worker.counters.clone();
    let failed = move |_: &std::io::Error| counters.inc(Counter::UringFailed);
    if let Err(e) = crate::uring::start(failed) {
        worker.counters.inc(Counter::UringUnavailable);
        tracing::warn!(
            "worker {}: the kernel refused a ring ({e}); this worker uses epoll",
            worker.id
        );
    }
}

/// Runs `worker` on this thread until shutdown has drained its connections.
pub(super) fn run(worker: Worker, listeners: Vec<Listening>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return tracing::error!("worker {}: cannot start runtime: {e}", worker.id),
    };
    let local = LocalSet::new();
    local.block_on(&rt, async move {
        if worker.snapshot().config.io == crate::config::IoMode::Uring {
            start_ring(&worker);
        }
        let worker = Rc::new(worker);
        for l in listeners {
            let kind = match (l.tls, l.redirect, l.h2c) {
                (true, _, _) => ListenerKind::Tls,
                (false, true, _) => ListenerKind::Redirect,
                (false, false, true) => ListenerKind::PlainOrH2c,
                (false, false, false) => ListenerKind::Plain,
            };
            let kind = (kind, l.proxy_protocol);
            match Acceptor::new(l.socket, kind) {
                Ok(acceptor) => {
                    let accepting = accept_loop(worker.clone(), acceptor, l.limit, kind, l.stats);
                    tokio::task::spawn_local(accepting);
                }
                Err(e) => tracing::error!("worker {}: listener: {e}", worker.id),
            }
        }
        tokio::task::spawn_local(housekeeping(worker.clone()));
        let mut shutdown = worker.shutdown.clone();
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        let drain = worker.snapshot().config.limits.drain_timeout;
        let deadline = tokio::time::Instant::now() + drain;
        while worker.active.get() > 0 {
            tokio::select! {
                _ = worker.connection_closed.notified() => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        worker.log.flush(&worker.counters);
    });
}

/// What a listener's connections get.
#[derive(Clone, Copy)]
enum ListenerKind {
    Plain,
    /// Plain, and HTTP/2 when the client starts with its preface.
    PlainOrH2c,
    Tls,
    Redirect,
}

/// Where a listener's connections come from: tokio's epoll, or the worker's ring (plain
/// listeners on a worker that runs one: a multishot accept, no system call per connection).
enum Acceptor {
    Epoll(TcpListener),
    Ring(crate::uring::accept::UringListener),
}

/// A new connection: still on tokio's epoll, or on the ring already.
enum NewConnection {
    Epoll(tokio::net::TcpStream),
    Ring(crate::net::Stream),
}

impl Acceptor {
    fn new(socket: std::net::TcpListener, kind: (ListenerKind, bool)) -> std::io::Result<Acceptor> {
        // A PROXY header is read before the connection is served: on tokio's epoll.
        let socket = match kind {
            (ListenerKind::Plain, false) => match crate::uring::listener(socket) {
                Ok(ring) => return Ok(Acceptor::Ring(ring)),
                Err(socket) => socket,
            },
            _ => socket,
        };
        TcpListener::from_std(socket).map(Acceptor::Epoll)
    }

    /// The next connection and its client. An IPv4 client of a dual-stack listener
    /// (`ipv6only = false`) is named by its IPv4 address, not `::ffff:a.b.c.d`: logs,
    /// access rules, limits and X-Forwarded-For see one form.
    async fn accept(&mut self) -> std::io::Result<(NewConnection, std::net::SocketAddr)> {
        let canonical =
            |p: std::net::SocketAddr| std::net::SocketAddr::new(p.ip().to_canonical(), p.port());
        match self {
            Acceptor::Epoll(l) => l
                .accept()
                .await
                .map(|(s, p)| (NewConnection::Epoll(s), canonical(p))),
            Acceptor::Ring(l) => l
                .accept()
                .await
                .map(|(s, p)| (NewConnection::Ring(s.into()), canonical(p))),
        }
    }

    /// At the connection limit: new connections wait in the kernel's backlog.
    fn pause(&mut self) {
        if let Acceptor::Ring(l) = self {
            l.pause();
        }
    }
}

/// Accepts connections until shutdown, pausing (and counting it) at the connection limit.
/// NewConnection sockets inherit TCP_NODELAY from the listener (set in `listener.rs`).
async fn accept_loop(
    worker: Rc<Worker>,
    mut acceptor: Acceptor,
    limit: usize,
    kind: (ListenerKind, bool),
    stats: Arc<ListenerStats>,
) {
    let mut shutdown = worker.shutdown.clone();
    while !*shutdown.borrow() {
        if worker.active.get() >= limit {
            acceptor.pause();
            worker.counters.inc(Counter::AcceptPaused);
            stats.paused();
            tracing::warn!(limit, "connection limit reached; accepting paused");
            tokio::select! {
                _ = worker.connection_closed.notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        tokio::select! {
            r = acceptor.accept() => match r {
                Ok((accepted, peer)) => {
                    worker.active.set(worker.active.get() + 1);
                    worker.counters.gauge_add(Gauge::Open, 1);
                    worker.counters.inc(Counter::ConnectionsAccepted);
                    stats.accepted();
                    let w = worker.clone();
                    let open = OpenConnection(w.clone(), stats.clone());
                    // The open count ends with the future (`map`, not an async block: a
                    // block would keep its own copy of the arguments beside the future's,
                    // and a task is allocated in steps of 128 bytes).
                    let counted = move |()| drop(open);
                    match accepted {
                        // A connection on the ring is served directly: its task holds
                        // nothing but the keep-alive loop (an idle one is about 1 KB).
                        NewConnection::Ring(stream) => {
                            tokio::task::spawn_local(proxy::serve(w, stream, peer).map(counted))
                        }
                        NewConnection::Epoll(stream) => tokio::task::spawn_local(
                            serve_accepted(w, stream, peer, kind).map(counted),
                        ),
                    };
                }
                Err(e) => {
                    worker.counters.inc(Counter::AcceptErrors);
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = shutdown.changed() => {}
        }
    }
}

/// Serves one accepted connection as its listener's kind says.
async fn serve_accepted(
    w: Rc<Worker>,
    stream: tokio::net::TcpStream,
    mut peer: std::net::SocketAddr,
    (kind, proxy_protocol): (ListenerKind, bool),
) {
    if proxy_protocol {
        let timeout = w.snapshot().config.limits.client_header_timeout;
        match Box::pin(super::proxy_header::read(&stream, timeout)).await {
            Ok(Some(client)) => peer = client,
            Ok(None) => {}
            Err(why) => {
                w.counters.inc(Counter::ProxyProtocolRefused);
                tracing::debug!(%peer, "PROXY protocol header refused: {why}");
                return;
            }
        }
    }
    // The other kinds are boxed: a task is as large as its largest branch, and an idle
    // plain keep-alive connection should not carry a TLS handshake's or HTTP/2's state.
    match kind {
        ListenerKind::Plain => {
            if let Ok(stream) = crate::net::Stream::adopt(stream) {
                proxy::serve(w, stream, peer).await;
            }
        }
        ListenerKind::PlainOrH2c => Box::pin(serve_plain_or_h2c(w, stream, peer)).await,
        ListenerKind::Tls => Box::pin(serve_tls(w, stream, peer)).await,
        ListenerKind::Redirect => Box::pin(proxy::redirect_to_https(w, stream.into())).await,
    }
}

/// Runs the TLS handshake (within the worker's bound on handshakes in progress), then serves
/// the connection.
async fn serve_tls(worker: Rc<Worker>, stream: tokio::net::TcpStream, peer: std::net::SocketAddr) {
    let snapshot = worker.snapshot();
    let Some(tls) = &snapshot.config.tls else {
        return;
    };
    let Some(server) = tls.server.clone() else {
        return;
    };
    let server = (server, tls.by_name.clone());
    if worker.handshakes.get() >= tls.max_handshakes {
        worker.counters.inc(Counter::TlsHandshakesBusy);
        return;
    }
    let timeout = tls.handshake_timeout;
    drop(snapshot);
    worker.handshakes.set(worker.handshakes.get() + 1);
    let done = crate::tls::accept::handshake(stream, server, timeout, &worker.counters).await;
    worker.handshakes.set(worker.handshakes.get() - 1);
    if let Some(mut stream) = done {
        // Served from the ring when the worker runs one (the handshake ran on epoll).
        if stream.get_mut().0.onto_ring().is_err() {
            return;
        }
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        let stream = crate::net::Stream::TlsServer(Box::new(stream));
        if h2 {
            // Boxed: the connection's task is sized for its largest state, and HTTP/2's would
            // otherwise be paid by every connection, whichever protocol it speaks.
            Box::pin(proxy::serve_http2(worker, stream, peer)).await;
        } else {
            proxy::serve(worker, stream, peer).await;
        }
    }
}

/// Serves a connection on an h2c listener: HTTP/2 when it starts with the HTTP/2 preface's
/// `PRI ` (a method HTTP/1.1 never uses) or with a first line that is not an HTTP/1.x request
/// line (it gets HTTP/2's answer to a bad preface, GOAWAY, instead of a 400); else HTTP/1.1.
async fn serve_plain_or_h2c(
    worker: Rc<Worker>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
) {
    let timeout = worker.snapshot().config.limits.client_header_timeout;
    let mut first = [0u8; 1024];
    let peeked = tokio::time::timeout(timeout, async {
        loop {
            stream.readable().await?;
            let n = stream.peek(&mut first).await?;
            if first_bytes_decide(&first[..n], first.len()) {
                return Ok::<usize, std::io::Error>(n);
            }
            // Part of a first line so far: wait for more without spinning.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let n = match peeked {
        Ok(Ok(n)) if n > 0 => n,
        _ => return,
    };
    // Either protocol is served from the ring when the worker runs one.
    let http2 = speaks_http2(&first[..n]);
    let Ok(stream) = crate::net::Stream::adopt(stream) else {
        return;
    };
    if http2 {
        Box::pin(proxy::serve_http2(worker, stream, peer)).await;
    } else {
        proxy::serve(worker, stream, peer).await;
    }
}

/// Whether the first bytes peeked on an h2c listener (`seen`, of at most `room`) are enough to
/// tell the protocol by: the connection ended, the HTTP/2 preface began, the first line ended,
/// or there is no room to see more. A request line still arriving (`GET /a.txt` alone in the
/// first packet) waits for its end.
pub(crate) fn first_bytes_decide(seen: &[u8], room: usize) -> bool {
    seen.is_empty() || seen.starts_with(b"PRI ") || seen.contains(&b'\n') || seen.len() >= room
}

/// Whether the first bytes of a connection on an h2c listener are HTTP/2's (see above).
pub(crate) fn speaks_http2(seen: &[u8]) -> bool {
    if seen.starts_with(b"PRI ") {
        return true;
    }
    let Some(end) = seen.iter().position(|b| *b == b'\n') else {
        return false;
    };
    let line = seen[..end].strip_suffix(b"\r").unwrap_or(&seen[..end]);
    !(line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0"))
}

/// Counts a client connection as open (in the worker and on its listener) until dropped.
struct OpenConnection(Rc<Worker>, Arc<ListenerStats>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let w = &self.0;
        w.active.set(w.active.get() - 1);
        w.counters.gauge_add(Gauge::Open, -1);
        w.counters.inc(Counter::ConnectionsClosed);
        self.1.closed();
        w.connection_closed.notify_waiters();
    }
}

/// Once a second: close expired idle upstream connections, hand the log buffer over and
/// write the error log's pending "repeated N times" lines.
async fn housekeeping(worker: Rc<Worker>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        worker.upstreams.sweep();
        worker.request_blocks.trim();
        worker.buffers.trim();
        worker.publish_pool();
        crate::observe::error_log::flush_repeats();
        worker.log.flush(&worker.counters);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn h2c_listeners_wait_for_the_first_line_however_it_is_split() {
        use super::first_bytes_decide as decide;
        // Part of a line, of any length (a longer one once panicked here): wait.
        for part in [
            "G",
            "GE",
            "GET",
            "GET ",
            "GET /a.txt",
            "PRI",
            "GET / HTTP/1.1\r",
        ] {
            assert!(!decide(part.as_bytes(), 1024), "{part:?}");
        }
        for whole in [
            "",
            "PRI ",
            "PRI * HTTP/2.0\r\n",
            "GET / HTTP/1.1\r\n",
            "junk\n",
        ] {
            assert!(decide(whole.as_bytes(), 1024), "{whole:?}");
        }
        assert!(decide(&[b'a'; 16], 16), "no room to see more");
    }

    #[test]
    fn h2c_listeners_tell_http2_from_http1_by_the_first_line() {
        assert!(super::speaks_http2(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(super::speaks_http2(b"INVALID CONNECTION PREFACE\r\n\r\n"));
        assert!(!super::speaks_http2(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!super::speaks_http2(b"GET /very-long-target-not-yet-ended"));
    }
}
