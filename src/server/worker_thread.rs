//! The life of one worker thread: a tokio current-thread runtime running an accept loop per
//! listener, a once-a-second housekeeping task, and, at shutdown, a drain of its connections.

use std::rc::Rc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::LocalSet;

use crate::observe::metrics::{Counter, Gauge};
use crate::proxy;
use crate::worker::Worker;

/// One of a worker's listening sockets.
pub(super) struct Listening {
    /// The bound socket.
    pub(super) socket: std::net::TcpListener,
    /// Connections open at once on it in this worker.
    pub(super) limit: usize,
    /// Clients speak TLS on it.
    pub(super) tls: bool,
    /// Requests on it are redirected to https.
    pub(super) redirect: bool,
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
        let worker = Rc::new(worker);
        for l in listeners {
            match TcpListener::from_std(l.socket) {
                Ok(socket) => {
                    let kind = match (l.tls, l.redirect) {
                        (true, _) => Kind::Tls,
                        (false, true) => Kind::Redirect,
                        (false, false) => Kind::Plain,
                    };
                    tokio::task::spawn_local(accept_loop(worker.clone(), socket, l.limit, kind));
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

/// Accepts connections until shutdown, pausing (and counting it) at the connection limit.
/// What a listener's connections get.
#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Tls,
    Redirect,
}

async fn accept_loop(worker: Rc<Worker>, listener: TcpListener, limit: usize, kind: Kind) {
    let mut shutdown = worker.shutdown.clone();
    while !*shutdown.borrow() {
        if worker.active.get() >= limit {
            worker.counters.inc(Counter::AcceptPaused);
            tracing::warn!(limit, "connection limit reached; accepting paused");
            tokio::select! {
                _ = worker.connection_closed.notified() => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    worker.active.set(worker.active.get() + 1);
                    worker.counters.gauge_add(Gauge::Open, 1);
                    worker.counters.inc(Counter::ConnectionsAccepted);
                    let w = worker.clone();
                    tokio::task::spawn_local(async move {
                        let _open = OpenConnection(w.clone());
                        match kind {
                            Kind::Plain => proxy::serve(w, stream.into(), peer).await,
                            Kind::Tls => serve_tls(w, stream, peer).await,
                            Kind::Redirect => proxy::redirect_to_https(w, stream.into()).await,
                        }
                    });
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
    if worker.handshakes.get() >= tls.max_handshakes {
        worker.counters.inc(Counter::TlsHandshakesBusy);
        return;
    }
    let timeout = tls.handshake_timeout;
    drop(snapshot);
    worker.handshakes.set(worker.handshakes.get() + 1);
    let done = crate::tls::accept::handshake(stream, server, timeout, &worker.counters).await;
    worker.handshakes.set(worker.handshakes.get() - 1);
    if let Some(stream) = done {
        let stream = crate::net::Stream::TlsServer(Box::new(stream));
        proxy::serve(worker, stream, peer).await;
    }
}

/// Counts a client connection as open until dropped.
struct OpenConnection(Rc<Worker>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let w = &self.0;
        w.active.set(w.active.get() - 1);
        w.counters.gauge_add(Gauge::Open, -1);
        w.counters.inc(Counter::ConnectionsClosed);
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
        worker.publish_pool();
        crate::observe::error_log::flush_repeats();
        worker.log.flush(&worker.counters);
    }
}
