//! Sending a request upstream: choose a server, take a pooled connection or open one, write the
//! head and any buffered body with one `writev`, stream the rest of the body, and wait for the
//! response head.
//!
//! Two kinds of second attempt, both only before any response byte reached the client and only
//! when [`Error::may_retry`] allows it:
//! - a pooled connection that turns out dead (the server closed it while idle, or closed or
//!   reset it before any response byte) is replaced by a fresh connection to the same server,
//!   once, for any method whose body is still in hand; that is no fault of the server;
//! - a server that failed is reported to the balancer (passive health) and the request goes to
//!   a different server, up to the group's `retries`, while the retry budget allows.

use tokio::time::Instant;

use super::fastcgi;
use super::relay::{self, RequestBody};
use super::response;
use super::{Client, Conn, Ctx, Outcome, Tried};
use crate::config::{SendProxy, UpstreamGroup};
use crate::error::{Error, Kind};
use crate::http1::{head_complete, BodyReader};
use crate::http2::upstream::H2Upstream;
use crate::net::io::{wait_readable, within, write_all, write_continue};
use crate::net::proxy_protocol;
use crate::net::{Address, Stream};
use crate::observe::metrics::Counter;
use crate::routing::UpstreamTarget;
use crate::upstream::connect::connect;
use crate::upstream::multiplex::Keep;
use crate::upstream::pool::{ConnSlot, Obtained};
use crate::upstream::stats::ServerStats;
use crate::upstream::{Balancer, Lease};

/// Sends the request to the route's upstream group and relays the response. Every server tried
/// is added to `tried`.
pub(super) async fn exchange(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
) -> Result<Outcome, Error> {
    let group = &cx.config().upstreams[route.upstream];
    if fastcgi::handles(group) {
        return fastcgi::exchange(cx, route, client, buf, tried).await;
    }
    let balancer = &cx.snapshot.balancers[route.upstream];
    let p = cx.request;
    let mut body = BodyReader::new(p.framing);
    let buffered = body
        .feed_in_place(buf, p.head_len)
        .map_err(|_| Error::new(Kind::BadRequest("invalid chunked body")))?;
    let mut initial_end = p.head_len + buffered;
    // The whole body is in the buffer: the request can be sent again if a connection fails.
    let body_in_hand = body.is_done();
    let mut body_start = p.head_len;
    let max_buffer = cx.config().limits.max_buffer;
    if body_in_hand && buffered == 0 && buf.len() == initial_end {
        // No body and nothing pipelined: a retry needs nothing from the read buffer (the head
        // sent upstream is the request's own), so it goes back to the pool now rather than
        // wait out the upstream's answer; many HTTP/2 streams waiting hold none each.
        buf.clear();
        cx.worker.buffers.give(std::mem::take(buf), max_buffer);
        (body_start, initial_end) = (0, 0);
    }
    let (lease, conn, mut ubuf) = loop {
        let lease = pick(cx, route, tried)?;
        let attempt = Attempt {
            group,
            lease: &lease,
            body: body_start..initial_end,
            body_in_hand,
            timed: balancer.wants_latency(),
        };
        match attempt.run(cx, client, buf, &mut body).await {
            Ok((conn, ubuf)) => break (lease, conn, ubuf),
            Err(e) => try_elsewhere(cx, route, lease, tried, e, body_in_hand)?,
        }
    };
    if body_in_hand {
        // The request is fully sent; what follows it in the buffer is the next request.
        buf.drain(..initial_end.min(buf.len()));
    }
    if buf.is_empty() {
        // Nothing pipelined: the read buffer goes back to the pool for the whole response.
        cx.worker.buffers.give(std::mem::take(buf), max_buffer);
    }
    let server = conn.server.clone();
    let result = response::respond(cx, group, client, buf, conn, &mut ubuf, &mut body).await;
    cx.worker.buffers.give(ubuf, max_buffer);
    settle(cx, group, lease, &server, result)
}

/// The next server for a request that has tried `tried`, added to them; when none is left,
/// the last server's failure (or "no live server").
pub(super) fn pick(cx: &Ctx<'_>, route: UpstreamTarget, tried: &mut Tried) -> Result<Lease, Error> {
    let balancer = &cx.snapshot.balancers[route.upstream];
    cx.end_try(tried, false);
    let Some(lease) = balancer.pick(cx.request.hash_key, tried.as_slice()) else {
        return Err(tried
            .last_error
            .take()
            .unwrap_or(Error::new(Kind::NoLiveServers)));
    };
    tried.push(lease.addr());
    cx.try_started.set(Some(std::time::Instant::now()));
    Ok(lease)
}

/// Reports a server's failure before any response byte (passive health), and decides: `Ok`
/// when the request goes to another server, else the error to answer.
pub(super) fn try_elsewhere(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    lease: Lease,
    tried: &mut Tried,
    e: Error,
    body_in_hand: bool,
) -> Result<(), Error> {
    let group = &cx.config().upstreams[route.upstream];
    let balancer = &cx.snapshot.balancers[route.upstream];
    let server = lease.addr().clone();
    let e = e.at(server.clone());
    if lease.failed(e.kind) {
        cx.worker.counters.inc(Counter::UpstreamEjections);
        cx.worker.upstreams.forget(&server);
    }
    if !may_retry_elsewhere(cx, group, balancer, tried, &e, body_in_hand) {
        return Err(e);
    }
    tried.last_error = Some(e);
    Ok(())
}

/// Reports how the response from `server` ended to the balancer (passive health, with
/// `fail_on_5xx`), and passes the result on.
pub(super) fn settle(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    lease: Lease,
    server: &Address,
    result: Result<Outcome, Error>,
) -> Result<Outcome, Error> {
    // The server's answer by class (one an error page replaces comes back here as `Ok`).
    if let Ok(outcome) = &result {
        lease.stats().answered(outcome.status);
    }
    if let Err(Error {
        kind: Kind::Replaced(status),
        ..
    }) = result
    {
        // An answer an error page replaces is still the server's answer, not its failure.
        let replaced = Outcome {
            status,
            body_bytes: 0,
            keep_alive: false,
        };
        return settle(cx, group, lease, server, Ok(replaced))
            .and_then(|_| Err(Error::new(Kind::Replaced(status)).at(server.clone())));
    }
    match result {
        Ok(outcome) if group.fail_on_5xx && outcome.status >= 500 => {
            if lease.failed_status() {
                cx.worker.counters.inc(Counter::UpstreamEjections);
                cx.worker.upstreams.forget(server);
            }
            Ok(outcome)
        }
        Ok(outcome) => {
            if let Some(micros) = cx.since_try() {
                lease.stats().response_time.observe(micros);
            }
            lease.succeeded();
            Ok(outcome)
        }
        Err(e) => {
            lease.failed(e.kind);
            Err(e.at(server.clone()))
        }
    }
}

/// Whether a failed request goes to another server: it may be resent, a try is left, and the
/// retry budget allows it.
fn may_retry_elsewhere(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    balancer: &Balancer,
    tried: &Tried,
    e: &Error,
    body_in_hand: bool,
) -> bool {
    let tries_left = tried.len() <= group.retries as usize;
    if !tries_left || !e.may_retry(cx.request.idempotent, body_in_hand) {
        return false;
    }
    if !balancer.allow_retry() {
        cx.worker
            .counters
            .inc(Counter::UpstreamRetryBudgetExhausted);
        tracing::warn!(group = %group.name, "retry budget spent: not retrying ({e})");
        return false;
    }
    cx.worker.counters.inc(Counter::UpstreamRetries);
    true
}

/// A pooled connection to `server`, or the right to open one, waiting in line when the server
/// is at the group's `max_conns`; a client that leaves meanwhile gives up its place.
async fn obtain(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    server: &Address,
    client: &Stream,
) -> Result<Obtained, Error> {
    let cap = group.max_conns_per_worker(cx.config().workers);
    let counters = &cx.worker.counters;
    let pool = &cx.worker.upstreams;
    let obtained = tokio::select! {
        biased;
        o = pool.obtain(server, cap, group.queue_timeout, counters) => o,
        () = client.hangup() => return Err(Error::new(Kind::ClientClosed)),
    };
    obtained.ok_or(Error::connect(Kind::QueueTimeout))
}

/// Runs `send` (which sends a request and reads the first response bytes) on a pooled
/// connection to `server` or a new one. A pooled connection that turns out dead is replaced by
/// a fresh one once when it closed unanswered and the request is still in hand ([`stale`]).
/// For a group that speaks HTTP/2 the connection is a stream, on an open connection to the
/// server with room for it or on a new one ([`Reuse`], [`open`]).
pub(super) async fn on_connection(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    lease: &Lease,
    client: &mut Client,
    body_in_hand: bool,
    mut send: impl AsyncFnMut(&mut Client, &mut Conn) -> Result<Vec<u8>, Error>,
) -> Result<(Conn, Vec<u8>), Error> {
    let counters = &cx.worker.counters;
    let slot = match reuse(cx, group, lease, &client.stream).await? {
        Reuse::Conn(mut conn) => {
            cx.mark_connected();
            counters.inc(Counter::UpstreamReused);
            ServerStats::bump(&lease.stats().reused);
            match send(client, &mut conn).await {
                Ok(ubuf) => {
                    cx.mark_header();
                    return Ok((conn, ubuf));
                }
                Err(e) if stale(&e, body_in_hand) => {
                    counters.inc(Counter::UpstreamStaleRetries);
                }
                Err(e) => return Err(e),
            }
            // The dead connection's slot serves the new one.
            conn.slot
        }
        Reuse::Open(slot) => slot,
    };
    let mut conn = open(cx, group, lease, (slot, client)).await?;
    cx.mark_connected();
    let ubuf = send(client, &mut conn).await?;
    cx.mark_header();
    Ok((conn, ubuf))
}

/// What a request finds for its server.
enum Reuse {
    /// A pooled connection (HTTP/2: a new stream on an open connection).
    Conn(Conn),
    /// None: open one, holding this slot.
    Open(ConnSlot),
}

/// A pooled connection to the lease's server, or the slot to open one under.
async fn reuse(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    lease: &Lease,
    client: &Stream,
) -> Result<Reuse, Error> {
    let server = lease.addr();
    if group.protocol.is_http2() {
        let pool = &cx.worker.h2_upstreams;
        let mut waited = false;
        loop {
            if let Some(handle) = pool.take(server) {
                return Ok(Reuse::Conn(h2_stream(server, handle)));
            }
            // A connection on its way to this server is waited for rather than matched, once:
            // if it failed or is full, each request opens its own (waiting again would let a
            // failing server hold the requests one connect timeout after another).
            let opening = pool.opening(server).filter(|_| !waited);
            let Some(done) = opening else {
                return Ok(Reuse::Open(ConnSlot::untracked()));
            };
            waited = true;
            let opened = done.notified();
            tokio::select! {
                _ = tokio::time::timeout(group.connect_timeout, opened) => {}
                () = client.hangup() => return Err(Error::new(Kind::ClientClosed)),
            }
        }
    }
    Ok(match obtain(cx, group, server, client).await? {
        Obtained::Reused(stream, slot) => Reuse::Conn(Conn {
            server: server.clone(),
            stream,
            slot,
            demand: lease.in_flight(),
        }),
        Obtained::Open(slot) => Reuse::Open(slot),
    })
}

/// Opens a new connection to the lease's server (HTTP/2: with its handshake, kept by the
/// worker's HTTP/2 pool, and a stream on it).
async fn open(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    lease: &Lease,
    (slot, client): (ConnSlot, &Client),
) -> Result<Conn, Error> {
    let counters = &cx.worker.counters;
    let (server, stats) = (lease.addr(), lease.stats());
    let tls = group.tls.as_deref();
    let _opening = group
        .protocol
        .is_http2()
        .then(|| cx.worker.h2_upstreams.begin_open(server));
    let mut preface = Vec::new();
    if let Some(version) = group.send_proxy {
        // The client as the proxy knows it (the real address behind trusted proxies).
        let source = cx.request.real_ip.map_or(client.peer, |ip| {
            std::net::SocketAddr::new(ip, client.peer.port())
        });
        let destination = client.stream.local_addr().unwrap_or(source);
        match version {
            SendProxy::V1 => proxy_protocol::write_v1(source, destination, &mut preface),
            SendProxy::V2 => proxy_protocol::write_v2(source, destination, &mut preface),
        }
    }
    let stream = connect(
        server,
        group.connect_timeout,
        counters,
        stats,
        (tls, &preface),
    )
    .await?;
    if !group.protocol.is_http2() {
        return Ok(Conn {
            server: server.clone(),
            stream,
            slot,
            demand: lease.in_flight(),
        });
    }
    let keep = Keep {
        ping_timeout: group.connect_timeout,
        idle_timeout: group.idle_timeout,
    };
    let handshake = cx.worker.h2_upstreams.open(server, stream, keep);
    match tokio::time::timeout(group.connect_timeout, handshake).await {
        Ok(Ok(handle)) => Ok(h2_stream(server, handle)),
        Ok(Err(e)) => {
            tracing::warn!(%server, "HTTP/2 handshake with the upstream failed: {e}");
            counters.inc(Counter::UpstreamConnectErrors);
            Err(Error::connect(Kind::ConnectFailed))
        }
        Err(_) => Err(Error::connect(Kind::ConnectTimeout)),
    }
}

/// A request stream to `server` on the HTTP/2 connection `handle` opens streams on.
fn h2_stream(server: &Address, handle: h2::client::SendRequest<bytes::Bytes>) -> Conn {
    let stream = H2Upstream::new(handle);
    Conn {
        server: server.clone(),
        stream: Stream::H2Upstream(Box::new(stream)),
        slot: ConnSlot::untracked(),
        demand: 0,
    }
}

/// Whether a reused connection's failure means it was dead before the request reached the
/// server: it failed to take the request, or closed or reset before any response byte
/// ([`crate::error::Retry::NoResponse`]; a timeout is never that). Such a request is sent again on a new
/// connection to the same server whatever its method (the usual cause is a keep-alive close
/// that crossed the request), provided its whole body is still in hand.
fn stale(e: &Error, body_in_hand: bool) -> bool {
    let any_method = true;
    e.may_retry(any_method, body_in_hand)
}

/// One server's try at a request.
struct Attempt<'a> {
    group: &'a UpstreamGroup,
    lease: &'a Lease,
    /// Where the body bytes that came with the head lie in the read buffer.
    body: std::ops::Range<usize>,
    body_in_hand: bool,
    /// Measure the time to the response head for the balancer.
    timed: bool,
}

impl Attempt<'_> {
    /// Sends the request on a pooled connection (or a new one) and waits for the response
    /// head. A dead pooled connection is replaced by a fresh one once.
    async fn run(
        &self,
        cx: &Ctx<'_>,
        client: &mut Client,
        buf: &mut Vec<u8>,
        body: &mut BodyReader,
    ) -> Result<(Conn, Vec<u8>), Error> {
        let send = async |client: &mut Client, conn: &mut Conn| {
            self.send(cx, client, buf, conn, body).await
        };
        on_connection(cx, self.group, self.lease, client, self.body_in_hand, send).await
    }

    /// Sends the head, the buffered body bytes and the rest of the body, then waits for the
    /// response head; returns the upstream read buffer holding it.
    async fn send(
        &self,
        cx: &Ctx<'_>,
        client: &mut Client,
        buf: &mut Vec<u8>,
        conn: &mut Conn,
        body: &mut BodyReader,
    ) -> Result<Vec<u8>, Error> {
        let p = cx.request;
        let group = self.group;
        let limits = &cx.config().limits;
        let started = self.timed.then(Instant::now);
        // A stored response's validators, when the cache validates it.
        let validators = p.cache.as_ref().map(|c| c.validators.borrow().clone());
        let validators = validators.unwrap_or_default();
        if let Some(request) = &p.upstream_request {
            // An HTTP/2 server takes the request as a value, then the body in hand.
            let mut request = request.copy();
            add_validators(&mut request.request, &validators);
            let send = conn.stream.send_request(request);
            within(group.send_timeout, send)
                .await
                .map_err(|e| Error::no_response(&e))?;
        }
        let (head, added, end) = head_parts(&p.upstream_head, &validators);
        let parts = [head, added, end, &buf[self.body.clone()]];
        write_all(&mut conn.stream, &parts, group.send_timeout)
            .await
            .map_err(|e| Error::no_response(&e))?;
        // An HTTP/2 stream is full duplex (gRPC): its upstream may answer before the body ends.
        let mut early = Vec::new();
        let duplex = client.stream.full_duplex();
        if !body.is_done() {
            buf.drain(..self.body.end);
            if p.expect_continue && p.minor_version == 1 {
                write_continue(&mut client.stream, limits.client_body_timeout)
                    .await
                    .map_err(|_| Error::client_write())?;
            }
            relay::relay_request_body(RequestBody {
                client: &mut client.stream,
                upstream: &mut conn.stream,
                buf,
                reader: body,
                max_buffer: limits.max_buffer,
                read_timeout: limits.client_body_timeout,
                send_timeout: group.send_timeout,
                pipes: limits.zero_copy.then_some(&cx.worker.pipes),
                counters: &cx.worker.counters,
                early: duplex.then_some(&mut early),
            })
            .await?;
        }
        // A gRPC call's own deadline, when shorter, bounds the wait for its answer.
        let read_timeout = p
            .grpc_timeout
            .map_or(group.read_timeout, |t| t.min(group.read_timeout));
        let most = response::response_buffer_limit(cx.config(), &client.stream);
        let hint = cx
            .worker
            .response_buffer_hint(&conn.server, most, limits.zero_copy);
        let many_waiting = client.stream.queues_writes();
        if early.is_empty() && (crate::buffers::is_large(hint) || many_waiting) {
            // With many requests waiting on their upstreams (an HTTP/2 client's streams), a
            // buffer taken for each would add up to megabytes, out of the cache by the time its
            // answer lands (the kernel's copies into and out of it then cost nearly twice as
            // much): take it when the answer is there, the pool's most recently used.
            tokio::select! {
                r = wait_readable(&conn.stream, read_timeout) => {
                    r.map_err(|e| Error::no_response(&e))?;
                }
                () = client.stream.hangup() => return Err(Error::new(Kind::ClientClosed)),
            }
        }
        let mut ubuf = cx.worker.buffers.take(hint);
        ubuf.extend_from_slice(&early);
        let read = async {
            if early.is_empty() || !head_complete(&ubuf) {
                let (up, timeout) = (&mut conn.stream, read_timeout);
                response::read_head(up, &mut ubuf, &client.stream, timeout, limits.max_buffer)
                    .await?;
            }
            Ok::<(), Error>(())
        };
        match read.await {
            Ok(()) => {
                if let Some(started) = started {
                    self.lease.observe_latency(started.elapsed());
                }
                Ok(ubuf)
            }
            Err(e) => {
                cx.worker.buffers.give(ubuf, limits.max_buffer);
                Err(e)
            }
        }
    }
}

/// The upstream head as parts of one write: with `validators` (field lines) before its blank
/// line when there are any.
fn head_parts<'a>(head: &'a [u8], validators: &'a [u8]) -> (&'a [u8], &'a [u8], &'a [u8]) {
    match head.len() {
        n if n >= 2 && !validators.is_empty() => (&head[..n - 2], validators, b"\r\n"),
        _ => (head, &[], &[]),
    }
}

/// Adds a stored response's validators (field lines) to a request for an HTTP/2 server.
fn add_validators(request: &mut http::Request<()>, lines: &[u8]) {
    for (name, value) in crate::cache::entry::fields_of_lines(lines) {
        let name = http::HeaderName::from_bytes(name);
        let value = http::HeaderValue::from_bytes(value);
        if let (Ok(name), Ok(value)) = (name, value) {
            request.headers_mut().insert(name, value);
        }
    }
}
