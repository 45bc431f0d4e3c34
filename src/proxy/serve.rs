//! One client connection, request after request: wait for a request without holding a buffer,
//! hand it to the phases, answer failures, count, log, and loop while the connection is kept.

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;

use super::request::{self, Prepared};
use super::{error_page, exchange, files, Client, Ctx, Outcome, Tried};
use crate::buffers::MIN_BUFFER;
use crate::config::Config;
use crate::error::{Error, Kind, Side};
use crate::http1::response::{grpc_error, simple_response};
use crate::http1::Framing;
use crate::net::io::{write_all, write_head};
use crate::net::Stream;
use crate::observe::log_format::{Entry, Field};
use crate::observe::metrics::{Counter, Gauge};
use crate::routing::Target;
use crate::worker::{Snapshot, Worker};

/// Serves one client connection until it closes.
pub async fn serve(worker: Rc<Worker>, stream: Stream, peer: SocketAddr) {
    let mut client = Client::new(stream, peer, worker.new_connection_id());
    let mut shutdown = worker.shutdown.clone();
    // One timer and one shutdown wait for the connection's life, not one per request: the
    // timer is moved on only when it fires early (see `wait_for_request`).
    let keepalive = worker.snapshot().config.limits.keepalive_timeout;
    let mut idle = pin!(tokio::time::sleep(keepalive));
    let mut shutdown_changed = pin!(shutdown.changed());
    loop {
        let idle_config = worker.snapshot();
        let waits = Waits {
            idle: idle.as_mut(),
            shutdown: shutdown_changed.as_mut(),
        };
        if !client
            .wait_for_request(&worker, &idle_config.config, waits)
            .await
        {
            break;
        }
        // Taken after the wait: a request that arrives after a reload uses the new config.
        let snapshot = worker.snapshot();
        // In a block of its own: the request's state lives only while a request is in flight,
        // so an idle keep-alive connection's task stays small; the worker reuses the blocks.
        let blocks = &worker.request_blocks;
        let keep_alive = blocks
            .run(|| handle_request(&worker, &snapshot, &mut client))
            .await;
        let max_buffer = snapshot.config.limits.max_buffer;
        if let Some(buf) = client.buf.take() {
            if buf.is_empty() {
                worker.buffers.give(buf, max_buffer);
            } else {
                client.buf = Some(buf);
            }
        }
        if !keep_alive {
            break;
        }
    }
    if let Some(buf) = client.buf.take() {
        let max_buffer = worker.snapshot().config.limits.max_buffer;
        worker.buffers.give(buf, max_buffer);
    }
    if !client.stream.tls_version().is_empty() {
        // close_notify: the client knows the connection ended cleanly, not cut short.
        let timeout = worker.snapshot().config.limits.client_body_timeout;
        // Boxed, as the request is: the timer is not carried through every idle wait.
        let _ = Box::pin(tokio::time::timeout(timeout, client.stream.shutdown())).await;
    }
}

/// What ends a keep-alive wait besides a request: the connection's idle timer and the
/// worker's shutdown.
struct Waits<'a, S> {
    idle: Pin<&'a mut tokio::time::Sleep>,
    shutdown: Pin<&'a mut S>,
}

/// Serves a stream that carries exactly one request (an HTTP/2 stream): no keep-alive loop,
/// no idle wait. The request's state runs in one of the worker's blocks, as on a connection:
/// built there from three references, where a box of its own (`Box::pin`) was an aligned
/// allocation plus a copy of the whole state from the stack, per stream.
pub(super) async fn serve_one(worker: Rc<Worker>, stream: Stream, peer: SocketAddr, id: u64) {
    let mut client = Client::new(stream, peer, id);
    let snapshot = worker.snapshot();
    let blocks = &worker.request_blocks;
    blocks
        .run(|| handle_request(&worker, &snapshot, &mut client))
        .await;
    if let Some(buf) = client.buf.take() {
        worker.buffers.give(buf, snapshot.config.limits.max_buffer);
    }
}

impl Client {
    /// A client connection with no buffer yet.
    fn new(stream: Stream, peer: SocketAddr, id: u64) -> Client {
        Client {
            tls_client: stream.client_cert(),
            stream,
            peer,
            ip_text: crate::net::IpText::new(peer.ip()),
            id,
            local: None,
            buf: None,
            idle_since: Instant::now(),
        }
    }

    /// Waits until a request may be read: pipelined bytes are already buffered, or the socket
    /// is readable. False on idle timeout or shutdown. The idle timer was armed for an earlier
    /// moment of the connection; when it fires, it is moved to `keepalive_timeout` after the
    /// last request ended, and only a connection idle that long is closed.
    async fn wait_for_request<S: Future>(
        &mut self,
        worker: &Worker,
        config: &Config,
        mut waits: Waits<'_, S>,
    ) -> bool {
        if worker.shutting_down() {
            return false;
        }
        if self.buf.as_ref().is_some_and(|b| !b.is_empty()) {
            return true;
        }
        loop {
            tokio::select! {
                biased;
                r = self.stream.readable() => return r.is_ok(),
                () = waits.idle.as_mut() => {
                    let due = tokio::time::Instant::from_std(self.idle_since)
                        + config.limits.keepalive_timeout;
                    if due <= tokio::time::Instant::now() {
                        return false;
                    }
                    waits.idle.as_mut().reset(due);
                }
                _ = waits.shutdown.as_mut() => return false,
            }
        }
    }

    /// Writes a response generated by the proxy, with the fields configured under `policy`
    /// (the route's or site's, when known) and HSTS over TLS.
    async fn respond(
        &mut self,
        status: u16,
        (keep_alive, head_only): (bool, bool),
        config: &Config,
        (policy, extra): (Option<u16>, &[u8]),
    ) {
        let (mut head, body) = simple_response(status, keep_alive, head_only);
        let https = !self.stream.tls_version().is_empty();
        super::add_configured_fields(config, policy, https, &mut head.text, 0);
        crate::http1::response::add_fields(&mut head.text, 0, extra);
        let timeout = config.limits.client_body_timeout;
        let _ = write_head(&mut self.stream, &head, &[&body], timeout).await;
    }

    /// Answers a failed gRPC call as the gRPC error `status` (see
    /// [`crate::error::Kind::grpc_status`]).
    async fn respond_grpc(
        &mut self,
        e: &Error,
        (content_type, status): (&str, u8),
        keep_alive: bool,
        config: &Config,
    ) {
        let head = grpc_error((content_type, status), e.kind.reason(), keep_alive);
        let timeout = config.limits.client_body_timeout;
        let _ = write_head(&mut self.stream, &head, &[], timeout).await;
    }
}

/// Answers every request of a plain connection with a 308 to the same URL over https (the
/// `redirect_https` listener), then closes it; a CA's HTTP-01 check is answered instead.
pub async fn redirect_to_https(worker: Rc<Worker>, stream: Stream) {
    let snapshot = worker.snapshot();
    let config = &snapshot.config;
    let limits = &config.limits;
    let mut stream = stream;
    let mut buf = worker.buffers.take(MIN_BUFFER);
    let deadline = tokio::time::Instant::now() + limits.client_header_timeout;
    let location = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let room = limits.max_request_head + 1;
        match crate::net::io::read_some(&mut stream, &mut buf, room, left).await {
            Ok(0) | Err(_) => break None,
            Ok(_) => {}
        }
        let mut storage = crate::http1::request::header_storage();
        match crate::http1::parse_request(&buf, &mut storage, limits.max_request_head) {
            Ok(Some(head)) => match crate::acme::http01_answer(&head.path) {
                // A CA checking a token is answered here, not sent to https.
                Some(key_authorization) => break Some(Err(key_authorization)),
                None => break https_location(&head, config.https_port()).map(Ok),
            },
            Ok(None) => continue,
            Err(_) => break None,
        }
    };
    let date = crate::http1::date::http_date_now();
    let date = String::from_utf8_lossy(&date);
    let response = match location {
        Some(Err(token)) => format!(
            "HTTP/1.1 200 OK\r\nDate: {date}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{token}",
            token.len()
        ),
        Some(Ok(url)) => format!(
            "HTTP/1.1 308 Permanent Redirect\r\nDate: {date}\r\nLocation: {url}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        None => format!(
            "HTTP/1.1 400 Bad Request\r\nDate: {date}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    };
    let _ = write_all(
        &mut stream,
        &[response.as_bytes()],
        limits.client_body_timeout,
    )
    .await;
    worker.buffers.give(buf, limits.max_buffer);
}

/// `https://HOST[:PORT]/TARGET` for a request, its Host's port replaced by `port`.
fn https_location(head: &crate::message::RequestHead<'_, '_>, port: Option<u16>) -> Option<String> {
    let host = std::str::from_utf8(head.host?).ok()?;
    let name = if host.starts_with('[') {
        &host[..=host.find(']')?]
    } else {
        host.split_once(':').map_or(host, |(name, _)| name)
    };
    if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == b'/' || b == b'@') {
        return None;
    }
    let target = if head.path.starts_with('/') {
        &head.path
    } else {
        "/"
    };
    Some(match port {
        Some(p) => format!("https://{name}:{p}{target}"),
        None => format!("https://{name}{target}"),
    })
}

/// Handles one request; returns whether the client connection stays open.
async fn handle_request(worker: &Worker, snapshot: &Snapshot, client: &mut Client) -> bool {
    let config = &snapshot.config;
    let mut buf = match client.buf.take() {
        Some(b) => b,
        None => worker.buffers.take(MIN_BUFFER),
    };
    let counters = &worker.counters;
    counters.gauge_add(Gauge::Reading, 1);
    let read = request::read_head(worker, config, client, &mut buf).await;
    counters.gauge_add(Gauge::Reading, -1);
    let mut request = match read {
        Ok(Some(r)) => r,
        Ok(None) => {
            // Closed (or idle) before a whole head arrived: nothing to answer.
            client.buf = Some(buf);
            return false;
        }
        Err(e) => {
            refuse_head(worker, config, client, e).await;
            client.buf = Some(buf);
            return false;
        }
    };
    counters.inc(Counter::Requests);
    counters.add(Counter::ClientBytesIn, request.head_len as u64);
    counters.gauge_add(Gauge::Writing, 1);
    let started = Instant::now();
    if let Some(wait) = request.delay.filter(|_| request.refused.is_none()) {
        // Over the rate within the burst: served when it fits (nginx's limit_req delay).
        counters.inc(Counter::LimitDelays);
        tokio::time::sleep(wait).await;
    }
    if let Some(auth) = auth_request(snapshot, &request) {
        let acx = Ctx {
            worker,
            snapshot,
            request: &request,
            started,
            try_started: Cell::new(None),
            try_times: Cell::default(),
        };
        let verdict = super::auth::authorize(&acx, client, &buf, auth).await;
        verdict.apply(&mut request, auth);
    }
    let cx = Ctx {
        worker,
        snapshot,
        request: &request,
        started,
        try_started: Cell::new(None),
        try_times: Cell::default(),
    };
    let mut tried = Tried::default();
    let saved_head = error_page::keep_head(&cx, client, &buf);
    let result = match (&request.refused, &request.answer, request.route) {
        (Some(kind), _, _) => Err(Error::new(*kind)),
        (None, Some(answered), _) => match error_page::replaced_answer(&cx, answered) {
            Some(code) => Err(Error::new(Kind::Replaced(code))),
            None => super::rules::send_answer(&cx, client, &mut buf, answered).await,
        },
        (None, None, route) => route_content(&cx, route, client, &mut buf, &mut tried).await,
    };
    cx.end_try(&mut tried, result.is_ok());
    let page = |e: &Error| {
        let code = error_page::failure_code(e)?;
        Some((code, error_page::page_for(&cx, code)?))
    };
    let (outcome, generated) = match result {
        Ok(outcome) => (outcome, false),
        Err(e) => match page(&e) {
            Some((code, page)) => {
                let pending = (code, page, saved_head.as_deref());
                error_page::serve(&cx, client, &mut buf, &mut tried, pending).await
            }
            None => (answer_failure(&cx, client, &mut buf, e).await, true),
        },
    };
    counters.gauge_add(Gauge::Writing, -1);
    client.idle_since = Instant::now();
    let micros = client.idle_since.duration_since(started).as_micros() as u64;
    count_response(&cx, outcome.status, outcome.body_bytes, micros, generated);
    debug_request(&cx, client, &outcome, micros, &tried);
    log_request(worker, config, client, &request, (&outcome, micros, &tried));
    client.buf = Some(buf);
    outcome.keep_alive
}

/// Writes the request's access-log line, when its site logs.
fn log_request(
    worker: &Worker,
    config: &Config,
    client: &Client,
    request: &Prepared,
    (outcome, micros, tried): (&Outcome, u64, &Tried),
) {
    if let Some(fields) = &request.log {
        let log = Line {
            client,
            ip: request.real_ip.unwrap_or(client.peer.ip()),
            method: fields.method(),
            target: fields.target(),
            host: fields.host(),
            user_agent: fields.user_agent(),
            referer: fields.referer(),
            protocol: client.stream.protocol_name(request.minor_version),
            site: request.routed.site,
            cache_status: cache_status(request),
        };
        log.record(worker, config, outcome, micros, tried);
    }
}

/// How a cached route answered the request (`$upstream_cache_status`), empty elsewhere.
fn cache_status(request: &Prepared) -> &'static str {
    let status = request.cache.as_ref().and_then(|c| c.status.get());
    status.map_or("", crate::cache::CacheStatus::word)
}

/// The `auth_request` a request must pass before its content, if any (not when the rules
/// answered or refused it).
pub(super) fn auth_request<'s>(
    snapshot: &'s Snapshot,
    request: &Prepared,
) -> Option<&'s crate::rules::auth::AuthRequest> {
    if request.refused.is_some() || request.answer.is_some() || request.satisfied {
        return None;
    }
    let policy = snapshot.config.router.policy(request.routed.policy?);
    policy.auth_request.as_deref()
}

/// The route's content: its upstream group or its files.
pub(super) async fn route_content(
    cx: &Ctx<'_>,
    route: Option<Target>,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
) -> Result<Outcome, Error> {
    match route {
        None => Err(Error::new(Kind::NoRoute)),
        Some(Target::Upstream(route)) => match cx.request.cache.as_deref() {
            Some(c) => super::cache::serve(cx, route, client, buf, tried, c).await,
            None => exchange::exchange(cx, route, client, buf, tried).await,
        },
        Some(Target::Files(index)) => files::serve_files(cx, index, client, buf, tried).await,
    }
}

/// Counts a finished request: by status, by route (with its duration), 5xx by who made it.
fn count_response(cx: &Ctx<'_>, status: u16, body_bytes: u64, micros: u64, generated: bool) {
    let counters = &cx.worker.counters;
    counters.inc(Counter::for_status(status));
    counters.add(Counter::ClientBytesOut, body_bytes);
    counters.durations.observe(micros);
    if status >= 500 {
        counters.inc(if generated {
            Counter::Responses5xxGenerated
        } else {
            Counter::Responses5xxUpstream
        });
    }
    if let Some(stats) = cx.snapshot.route_stats(cx.request.routed.slot) {
        stats.finished(status, micros);
    }
}

/// A client connection as the error log names it: `WORKER-SERIAL`.
pub(super) struct ConnId(pub(super) usize, pub(super) u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// One debug line per request (`SLIPSTREAM_LOG=debug`): who, which route and server, status,
/// size and time; nothing is formatted unless debug is on.
fn debug_request(cx: &Ctx<'_>, client: &Client, o: &Outcome, micros: u64, tried: &Tried) {
    let p = cx.request;
    tracing::debug!(
        conn = %ConnId(cx.worker.id, client.id),
        peer = %client.peer,
        route = cx.config().router.labels().get(usize::from(p.routed.slot)).map_or("", |l| l.1.as_str()),
        upstream = %tried.as_slice().last().map_or(String::new(), ToString::to_string),
        status = o.status,
        bytes = o.body_bytes,
        micros,
        keep_alive = o.keep_alive,
        "request done"
    );
}

/// What an access-log line needs beyond the outcome.
struct Line<'a> {
    client: &'a Client,
    /// The client's address: the peer's, or the one trusted proxies named.
    ip: std::net::IpAddr,
    method: &'a [u8],
    target: &'a [u8],
    host: &'a [u8],
    user_agent: &'a [u8],
    referer: &'a [u8],
    protocol: &'static str,
    site: Option<u16>,
    cache_status: &'static str,
}

impl Line<'_> {
    /// Appends the line to the site's access log, if it has one.
    fn record(&self, worker: &Worker, config: &Config, o: &Outcome, micros: u64, tried: &Tried) {
        let Some(target) = config.access_log_for(self.site) else {
            return;
        };
        let request_id = if target.format.uses(Field::RequestId) {
            format!("{:032x}", fastrand::u128(..))
        } else {
            String::new()
        };
        let site = self.site.map_or("", |s| config.router.site_name(s));
        let entry = Entry {
            client: self.ip,
            method: self.method,
            target: self.target,
            protocol: self.protocol,
            status: o.status,
            bytes: o.body_bytes,
            micros,
            host: self.host,
            user_agent: self.user_agent,
            referer: self.referer,
            upstreams: tried.as_slice(),
            upstream_times: tried.times(),
            site,
            request_id: &request_id,
            connection: (worker.id, self.client.id),
            tls_version: self.client.stream.tls_version(),
            cache_status: self.cache_status,
        };
        worker.log.record(target, &entry, &worker.counters);
    }
}

/// Answers a failed request as [`Error::answer`] says, when the client can still get an answer.
pub(super) async fn answer_failure(
    cx: &Ctx<'_>,
    client: &mut Client,
    buf: &mut Vec<u8>,
    e: Error,
) -> Outcome {
    let answer = e.answer();
    let p: &Prepared = cx.request;
    cx.worker.counters.inc(answer.counter);
    let conn = ConnId(cx.worker.id, client.id);
    match e.side() {
        Side::Upstream => match &e.server {
            Some(server) => tracing::warn!(%conn, peer = %client.peer, %server, "{e}"),
            None => tracing::warn!(%conn, peer = %client.peer, "{e}"),
        },
        Side::Client | Side::Local => tracing::debug!(%conn, peer = %client.peer, "{e}"),
    }
    // A body the proxy did not read would be parsed as the next request: close instead.
    let keep_alive = answer.keep_alive
        && p.keep_alive
        && p.framing == Framing::Empty
        && !cx.worker.shutting_down();
    match answer.send {
        Some(_) if p.grpc.is_some() => {
            // Past the call's own deadline, whatever failed, the call has timed out.
            let late = p.grpc_timeout.is_some_and(|t| cx.started.elapsed() >= t);
            let status = if late {
                crate::grpc::status::DEADLINE_EXCEEDED
            } else {
                e.kind.grpc_status()
            };
            client
                .respond_grpc(
                    &e,
                    (p.grpc.unwrap_or_default(), status),
                    keep_alive,
                    cx.config(),
                )
                .await;
        }
        Some(status) => {
            client
                .respond(
                    status,
                    (keep_alive, p.is_head),
                    cx.config(),
                    (p.routed.policy, &p.response_fields),
                )
                .await;
        }
        // Mid-response: only the way the stream ends is left to say.
        None => client.stream.abort_with(e.reset),
    }
    if keep_alive {
        buf.drain(..p.head_len.min(buf.len()));
    }
    Outcome {
        status: answer.logged,
        body_bytes: 0,
        keep_alive,
    }
}

/// Answers a request whose head was refused, and logs it (method and target unknown: `-`).
async fn refuse_head(worker: &Worker, config: &Config, client: &mut Client, e: Error) {
    let answer = e.answer();
    worker.counters.inc(answer.counter);
    worker.counters.inc(Counter::for_status(answer.logged));
    if answer.logged >= 500 {
        worker.counters.inc(Counter::Responses5xxGenerated);
    }
    let conn = ConnId(worker.id, client.id);
    tracing::debug!(%conn, peer = %client.peer, status = answer.logged, "request refused: {e}");
    if let Some(status) = answer.send {
        client
            .respond(status, (false, false), config, (None, &[]))
            .await;
    }
    if !worker.log.enabled() {
        return;
    }
    let outcome = Outcome {
        status: answer.logged,
        body_bytes: 0,
        keep_alive: false,
    };
    let line = Line {
        client,
        ip: client.peer.ip(),
        method: b"-",
        target: b"-",
        host: b"",
        user_agent: b"",
        referer: b"",
        protocol: "HTTP/1.1",
        site: None,
        cache_status: "",
    };
    line.record(worker, config, &outcome, 0, &Tried::default());
}

#[cfg(test)]
mod tests {
    /// An idle keep-alive connection is one task waiting in `serve`; its state must stay small
    /// (the per-request state is boxed and freed between requests).
    #[test]
    fn idle_connection_state_is_small() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let s = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let addr = "127.0.0.1:1".parse().unwrap();
            let server = crate::config::upstream::parse_server(
                "127.0.0.1:1",
                crate::config::upstream::LoadResolver::Now(crate::config::resolve_system),
                std::time::Duration::ZERO,
            )
            .unwrap();
            let config = crate::config::Config::for_proxy(addr, vec![server], Some(1));
            let shared = std::sync::Arc::new(crate::config::SharedConfig::new(config));
            let (_tx, rx) = tokio::sync::watch::channel(false);
            let access_log = crate::observe::access_log::AccessLog::disabled();
            let fleet = std::sync::Arc::new(crate::upstream::Fleet::new(Default::default()));
            let worker = crate::worker::Worker::new(
                0,
                shared,
                fleet,
                Default::default(),
                access_log,
                Default::default(),
                rx,
            );
            let serve = super::serve(std::rc::Rc::new(worker), s.into(), addr);
            assert!(
                std::mem::size_of_val(&serve) <= 1024,
                "{}",
                std::mem::size_of_val(&serve)
            );
        });
    }
}
