//! One HTTP/2 client connection: the preface is checked, the `h2` connection is built with the
//! configured limits over a [`ConnectionIo`] stream, each request stream is served by `serve.rs` as
//! one request on an [`H2Stream`] (so every route kind works unchanged), and the connection
//! ends by GOAWAY: two-phase on shutdown or reload (looked for once a second) and after the
//! keep-alive timeout when idle, ENHANCE_YOUR_CALM for a client that floods.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http2::guard::PREFACE;
mod io;

use crate::http2::request::{check, Malformed};
use crate::http2::stream::H2Stream;
use crate::net::Stream;
use crate::observe::metrics::Counter;
use crate::worker::Worker;
use io::{ConnectionIo, Shared};

/// A GOAWAY frame with last stream 0 and PROTOCOL_ERROR: the answer to a bad preface.
const GOAWAY_PROTOCOL_ERROR: [u8; 17] = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// How often an open connection looks for a reload.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// How long a connection sent GOAWAY for abuse has to take it before it is closed.
const ABUSE_GRACE: Duration = Duration::from_secs(1);

/// A request stream as `h2` hands it over.
type Accepted = (http::Request<RecvStream>, SendResponse<Bytes>);

/// What woke the connection's loop.
enum Event {
    Accepted(Option<Result<Box<Accepted>, h2::Error>>),
    Shutdown,
    Tick,
    Flood,
}

/// Serves one connection that speaks HTTP/2 (ALPN `h2`, or h2c with prior knowledge).
pub async fn serve_http2(worker: Rc<Worker>, mut stream: Stream, peer: SocketAddr) {
    let snapshot = worker.snapshot();
    let settings = snapshot.config.http2.clone();
    let limits = snapshot.config.limits.clone();
    drop(snapshot);
    let counters = &worker.counters;
    counters.inc(Counter::Http2Connections);
    if !read_preface(&mut stream, limits.client_header_timeout).await {
        counters.inc(Counter::Http2BadPreface);
        refuse_preface(stream, limits.client_body_timeout).await;
        return;
    }
    let info = StreamInfo {
        tls_version: stream.tls_version(),
        client_cert: stream.client_cert(),
        tls_sni: stream.tls_server_name().map(Rc::from),
        local: stream.local_addr(),
        peer,
        id: worker.new_connection_id(),
    };
    let verdict = Rc::new(Cell::new(None));
    let shared = Shared::new(stream);
    let io = ConnectionIo::new(shared.clone(), settings.flood, verdict.clone());
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .initial_window_size(settings.initial_window_size)
        .initial_connection_window_size(settings.connection_window_size)
        .max_frame_size(settings.max_frame_size)
        .max_send_buffer_size(settings.max_send_buffer)
        .enable_connect_protocol();
    let handshake = builder.handshake::<_, Bytes>(io);
    let Ok(Ok(conn)) = tokio::time::timeout(limits.client_header_timeout, handshake).await else {
        return counters.inc(Counter::Http2BadPreface);
    };
    let flooded = drive(
        &worker,
        conn,
        &shared,
        &verdict,
        info,
        limits.keepalive_timeout,
    )
    .await;
    // What h2 wrote last (a GOAWAY) goes out, and has gone before the connection is dropped
    // (over TLS on the ring, records are sent by the ring after they are written).
    let write_out = async {
        poll_fn(|cx| shared.borrow_mut().poll_write_out(cx)).await?;
        let flush = |cx: &mut std::task::Context<'_>| {
            tokio::io::AsyncWrite::poll_flush(
                std::pin::Pin::new(&mut shared.borrow_mut().stream),
                cx,
            )
        };
        poll_fn(flush).await
    };
    let _ = tokio::time::timeout(limits.client_body_timeout, write_out).await;
    if flooded {
        // FIN, and read what the flood still sends, so the close does not become a reset that
        // would destroy the GOAWAY before the client reads it. `h2` is gone by now.
        if let Ok(shared) = Rc::try_unwrap(shared) {
            linger(&mut shared.into_inner().stream, ABUSE_GRACE).await;
        }
    }
}

/// Runs a connection after its handshake: accepts streams and serves them until the
/// connection ends, sending GOAWAY on shutdown, when idle, and to a flooding client (then
/// true). The streams run inside the connection's task, polled just before `h2` is: what a
/// stream answers is framed and written in the same poll, with no task spawned per stream
/// and no hand-over between tasks. Streams still running when the connection ends go on in
/// a task of their own (their upstream requests finish and are logged, as on HTTP/1.1).
async fn drive(
    worker: &Rc<Worker>,
    mut conn: h2::server::Connection<ConnectionIo, Bytes>,
    shared: &RefCell<Shared>,
    verdict: &Cell<Option<&'static str>>,
    info: StreamInfo,
    idle: Duration,
) -> bool {
    let counters = &worker.counters;
    let peer = info.peer;
    let mut shutdown = worker.shutdown.clone();
    let mut draining = false;
    let generation = worker.config_generation();
    let mut idle_deadline = tokio::time::Instant::now() + idle;
    let mut streams = FuturesUnordered::new();
    let flooded = loop {
        let next_check = tokio::time::Instant::now() + RELOAD_CHECK;
        if *shutdown.borrow() && !draining {
            draining = true;
            conn.graceful_shutdown();
        }
        let event = tokio::select! {
            e = poll_fn(|cx| {
                while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
                let accepted = conn.poll_accept(cx);
                // Everything h2 wrote in this poll leaves in one write (a failure is kept for
                // h2 to see at its next flush).
                let _ = shared.borrow_mut().poll_write_out(cx);
                match accepted {
                    // The guard may have found a flood in what this poll read.
                    _ if verdict.get().is_some() => Poll::Ready(Event::Flood),
                    Poll::Ready(r) => Poll::Ready(Event::Accepted(r.map(|r| r.map(Box::new)))),
                    Poll::Pending => Poll::Pending,
                }
            }) => e,
            _ = shutdown.changed(), if !draining => Event::Shutdown,
            _ = tokio::time::sleep_until(idle_deadline.min(next_check)) => Event::Tick,
        };
        if let Some(what) = verdict.get() {
            counters.inc(Counter::Http2Floods);
            tracing::warn!(peer = %peer, "HTTP/2 flood ({what}): GOAWAY(ENHANCE_YOUR_CALM)");
            conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            let closed = poll_fn(|cx| {
                let closed = conn.poll_closed(cx);
                let _ = shared.borrow_mut().poll_write_out(cx);
                closed
            });
            let _ = tokio::time::timeout(ABUSE_GRACE, closed).await;
            break true;
        }
        match event {
            Event::Accepted(Some(Ok(accepted))) => {
                let (request, respond) = *accepted;
                counters.inc(Counter::Http2Streams);
                idle_deadline = tokio::time::Instant::now() + idle;
                streams.push(serve_stream(worker.clone(), request, respond, info.clone()));
            }
            Event::Accepted(Some(Err(e))) if e.reason() == Some(Reason::ENHANCE_YOUR_CALM) => {
                // h2's own flood limits (reset streams waiting to be accepted, local errors).
                counters.inc(Counter::Http2Floods);
                tracing::warn!(peer = %peer, "HTTP/2 flood: {e}");
                break false;
            }
            Event::Accepted(Some(Err(e))) => {
                counters.inc(Counter::Http2ConnectionErrors);
                tracing::debug!(peer = %peer, "HTTP/2 connection error: {e}");
                break false;
            }
            Event::Accepted(None) => break false,
            Event::Shutdown | Event::Flood => {}
            Event::Tick if draining => {}
            Event::Tick if worker.config_generation() != generation => {
                // A reload: the client reconnects to settings (and certificates) in force.
                draining = true;
                conn.graceful_shutdown();
            }
            Event::Tick if conn.has_streams() => {
                idle_deadline = tokio::time::Instant::now() + idle;
            }
            Event::Tick if tokio::time::Instant::now() >= idle_deadline => {
                draining = true;
                conn.graceful_shutdown();
            }
            Event::Tick => {
                // No stream: the connection's buffers go back until it is used again.
                conn.release_idle_buffers();
                shared.borrow_mut().release_idle();
            }
        }
    };
    if !streams.is_empty() {
        tokio::task::spawn_local(async move { while streams.next().await.is_some() {} });
    }
    flooded
}

/// Reads the 24-byte client preface; false if it is not there in time.
async fn read_preface(stream: &mut Stream, timeout: Duration) -> bool {
    let mut got = [0u8; 24];
    let read = tokio::time::timeout(timeout, stream.read_exact(&mut got)).await;
    matches!(read, Ok(Ok(_))) && got == *PREFACE
}

/// Answers a bad preface with GOAWAY(PROTOCOL_ERROR), then closes gently: what the client sent
/// is read (briefly) so the close is a FIN, not a reset that could destroy the GOAWAY.
async fn refuse_preface(mut stream: Stream, timeout: Duration) {
    let _ = tokio::time::timeout(timeout, async {
        stream.write_all(&GOAWAY_PROTOCOL_ERROR).await?;
        stream.flush().await
    })
    .await;
    linger(&mut stream, Duration::from_millis(500)).await;
}

/// Shuts the sending side and reads (and drops) what the client still sends until it closes,
/// for at most `time`: the client sees a FIN after the last frame and has `time` to read it
/// before a close with unread bytes becomes a reset (which can destroy what it has not read).
async fn linger(stream: &mut Stream, time: Duration) {
    let _ = tokio::time::timeout(time, stream.shutdown()).await;
    // On the heap: an array here would be part of every connection's task, lingering or not.
    let mut sink = vec![0u8; 16 * 1024];
    let drain = async { while !matches!(stream.read(&mut sink).await, Ok(0) | Err(_)) {} };
    let _ = tokio::time::timeout(time, drain).await;
}

/// What each stream of a connection needs to know about it.
#[derive(Clone)]
struct StreamInfo {
    tls_version: &'static str,
    /// The connection's client certificate, read once.
    client_cert: Option<Rc<crate::tls::client_auth::ClientCert>>,
    /// The server name of its handshake.
    tls_sni: Option<Rc<str>>,
    local: Option<SocketAddr>,
    peer: SocketAddr,
    /// The connection's serial number on this worker (the error log's `conn=`).
    id: u64,
}

/// Serves one request stream as one HTTP/1.1 request, or resets it when it is malformed.
async fn serve_stream(
    worker: Rc<Worker>,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    info: StreamInfo,
) {
    let (parts, body) = request.into_parts();
    let request = match check(parts, body.is_end_stream()) {
        Ok(request) => request,
        Err(Malformed(why)) => {
            worker.counters.inc(Counter::Http2Malformed);
            tracing::debug!(peer = %info.peer, "HTTP/2 request malformed: {why}");
            respond.send_reset(Reason::PROTOCOL_ERROR);
            return;
        }
    };
    let expects_continue = request.expects_continue();
    let mut stream = H2Stream::new(request, body, respond);
    stream.tls_version = info.tls_version;
    stream.client_cert = info.client_cert;
    stream.tls_sni = info.tls_sni;
    stream.local = info.local;
    if !expects_continue {
        // Only what has already arrived: a body that trickles is forwarded as it comes.
        let limit = worker.snapshot().config.http2.body_preread;
        if stream.preread(limit).await.is_err() {
            worker.counters.inc(Counter::Http2Malformed);
            return;
        }
    }
    // The request's state runs in a block of the worker's (see `serve_one`), not in this
    // task: it would be copied whole into the task when spawned, and again when its output
    // is stored and when it is dropped.
    let stream = Stream::H2(Box::new(stream));
    super::serve::serve_one(worker, stream, info.peer, info.id).await;
}
