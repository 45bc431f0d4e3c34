//! The request path of one client connection, one file per phase:
//!
//! 1. [`serve`]: the keep-alive loop; waits for a request without holding a buffer, and turns
//!    every failure into its answer through [`crate::error::Error::answer`].
//! 2. [`request`]: reads and validates the head, routes it, and keeps what the rest needs;
//!    [`rules`]: for a site with nginx-style locations, rules, access or limits, nginx's
//!    phases over the head, and the answers its `return` and redirects give; [`auth`]: a
//!    subrequest to an authorization service (`auth_request`) before the content.
//! 3. [`exchange`]: picks a server, takes a pooled connection or opens one, sends the head and
//!    body, waits for the response head, and retries on a fresh connection when that is safe.
//! 4. [`response`]: interim responses, the final head, and `buffer_response`.
//! 5. [`relay`]: moves bodies both ways with bounded memory, by splice(2) when it can;
//!    [`duplex`]: an HTTP/2 request answered before its body ended (gRPC streaming), the
//!    response and the rest of the body at once.
//! 6. [`tunnel`]: after `101 Switching Protocols`, bytes both ways until either side closes
//!    or neither sends for `tunnel_idle_timeout`.
//! 7. [`compress`]: on routes that compress, whether a response benefits and with which
//!    coding; the proxied body compressed on the way (FastCGI and static files use the same
//!    decision in their own phases).
//! 8. [`cache`]: on routes with `cache`, a stored response answers, or the upstream's answer
//!    is stored on its way (phases 3 to 5 run inside it).
//! 9. [`error_page`]: an answer whose code the route's `error_pages` list (the proxy's own,
//!    a rule's, or with `intercept_errors` the upstream's) is replaced by its page.
//!
//! A static-file route takes [`files`] instead of phases 3 to 6; a route to a FastCGI group
//! takes [`fastcgi`] instead of phases 3 to 5.
//!
//! Nothing here panics on input, and no status code is chosen here for a failure.

mod auth;
mod cache;
mod compress;
mod duplex;
mod error_page;
mod exchange;
mod fastcgi;
mod files;
mod http2;
mod named;
mod relay;
mod request;
mod response;
mod rules;
mod serve;
mod tunnel;

use smallvec::SmallVec;
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Instant;

use crate::observe::log_format::UpstreamTimes;

use crate::net::Address;

pub use http2::serve_http2;
pub use serve::{redirect_to_https, serve};

use crate::net::Stream;
use crate::worker::{Snapshot, Worker};
use request::Prepared;

/// A client connection, holding a read buffer only while it has unprocessed bytes.
struct Client {
    stream: Stream,
    peer: SocketAddr,
    /// The peer's IP address as text, for X-Forwarded-For.
    ip_text: crate::net::IpText,
    /// Its serial number on this worker: the error log's `conn=WORKER-ID`.
    id: u64,
    /// The address the client connected to, once a FastCGI request needed it.
    local: Option<SocketAddr>,
    /// The certificate the client sent, read once (mutual TLS; `None` without one).
    tls_client: Option<std::rc::Rc<crate::tls::client_auth::ClientCert>>,
    buf: Option<Vec<u8>>,
    /// When its last request ended (or it was accepted): the keep-alive timeout runs from here.
    idle_since: Instant,
}

/// A connection to one server of an upstream group.
struct Conn {
    server: Address,
    stream: Stream,
    /// Its place under the server's `max_conns`.
    slot: crate::upstream::pool::ConnSlot,
    /// Requests in flight to the server when the connection was taken: the pool keeps at
    /// least this many idle, so the concurrency of the moment (many HTTP/2 streams, say)
    /// finds its connections again instead of opening new ones (`keepalive` is the floor).
    demand: usize,
}

impl Conn {
    /// Returns the connection to the worker's pool (or to a request waiting for one).
    fn reuse(self, worker: &Worker, group: &crate::config::UpstreamGroup) {
        let Conn {
            server,
            stream,
            slot,
            demand,
        } = self;
        if stream.is_multiplexed() {
            // Its connection stays with the HTTP/2 pool; the stream is done.
            return;
        }
        if group.send_proxy.is_some() {
            // Its PROXY header named one client: no other request may use it.
            return;
        }
        // `keepalive = 0` turns pooling off altogether.
        let keep = if group.keepalive == 0 {
            0
        } else {
            group.keepalive.max(demand)
        };
        let keep = crate::upstream::pool::Keep {
            cap: keep,
            idle_timeout: group.idle_timeout,
            counters: &worker.counters,
        };
        worker.upstreams.give(&server, (stream, slot), keep);
    }
}

/// What every phase of one request reads.
struct Ctx<'a> {
    worker: &'a Worker,
    snapshot: &'a Snapshot,
    request: &'a Prepared,
    /// When the request's head had been read.
    started: Instant,
    /// When the current server's try began.
    try_started: Cell<Option<Instant>>,
    /// The current try's timings so far.
    try_times: Cell<UpstreamTimes>,
}

impl Ctx<'_> {
    fn config(&self) -> &crate::config::Config {
        &self.snapshot.config
    }

    /// The context of another request made for this one (an error page, a named location):
    /// the same worker, config and start, its own tries.
    fn for_request<'b>(&'b self, request: &'b Prepared) -> Ctx<'b> {
        Ctx {
            worker: self.worker,
            snapshot: self.snapshot,
            request,
            started: self.started,
            try_started: Cell::new(None),
            try_times: Cell::default(),
        }
    }

    /// Adds the fields configured for the response to the head at `start` in `out`: the
    /// route's (or site's) `add_headers` and, over TLS, `Strict-Transport-Security`.
    fn add_response_fields(&self, out: &mut Vec<u8>, start: usize) {
        let (policy, https) = (self.request.routed.policy, self.request.https);
        add_configured_fields(self.config(), policy, https, out, start);
        crate::http1::response::add_fields(out, start, &self.request.response_fields);
        let on_success = &self.request.fields_on_success;
        if !on_success.is_empty() && crate::routing::is_success(status_of(out, start)) {
            crate::http1::response::add_fields(out, start, on_success);
        }
    }

    /// Removes the upstream response fields the policy hides (`hide_headers`) from the head
    /// at the start of `out`.
    fn hide_upstream_fields(&self, out: &mut Vec<u8>) {
        let Some(policy) = self.request.routed.policy else {
            return;
        };
        let hidden = &self.config().router.policy(policy).hide_headers;
        if !hidden.is_empty() {
            let names: Vec<&str> = hidden.iter().map(String::as_str).collect();
            crate::http1::response::remove_fields(out, 0, &names);
        }
    }

    /// Whether the route hides the upstream response field `name` (lower case).
    fn hides_field(&self, name: &str) -> bool {
        self.request.routed.policy.is_some_and(|policy| {
            let hidden = &self.config().router.policy(policy).hide_headers;
            hidden.iter().any(|h| h.eq_ignore_ascii_case(name))
        })
    }

    /// Whether the fields [`Ctx::add_response_fields`] adds to a response of `status` are
    /// the same for every request on this route and config (no per-request values, no
    /// `expires` date): a head made with them may be sent again.
    fn added_fields_are_fixed(&self, status: u16) -> bool {
        let p = self.request;
        p.response_fields.is_empty()
            && p.fields_on_success.is_empty()
            && self
                .config()
                .router
                .expires(p.routed.policy, status)
                .is_none()
    }

    /// The config generation this request runs under.
    fn generation(&self) -> u64 {
        self.snapshot.generation()
    }

    /// Microseconds since the current try began.
    fn since_try(&self) -> Option<u64> {
        self.try_started
            .get()
            .map(|t| t.elapsed().as_micros() as u64)
    }

    /// The current try has a connection (pooled or new). Only the access log shows it, so
    /// without one the clock is not read.
    fn mark_connected(&self) {
        if self.request.log.is_none() {
            return;
        }
        let mut t = self.try_times.get();
        t.connect = self.since_try();
        self.try_times.set(t);
    }

    /// The current try has its first response bytes (for the access log, as above).
    fn mark_header(&self) {
        if self.request.log.is_none() {
            return;
        }
        let mut t = self.try_times.get();
        t.header = self.since_try();
        self.try_times.set(t);
    }

    /// Ends the current try (if any) into `tried`; `finished` when its response is complete.
    fn end_try(&self, tried: &mut Tried, finished: bool) {
        if self.try_started.get().is_none() || tried.len() == 0 {
            return;
        }
        let mut t = self.try_times.take();
        if finished && self.request.log.is_some() {
            t.response = self.since_try();
        }
        if let Some(last) = tried.times.last_mut() {
            *last = t;
        }
        self.try_started.set(None);
    }
}

/// The status of the response head at `start` of `out` (0 when it cannot be read).
fn status_of(out: &[u8], start: usize) -> u16 {
    match out.get(start + 9..start + 12) {
        Some(&[a, b, c]) if [a, b, c].iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => 0,
    }
}

/// Adds the fields configured for a response to the head at `start` in `out`: those of
/// `policy` (the route's or site's `add_headers`, and `add_headers_on_success` when its status
/// is one nginx's `add_header` applies to) and, over TLS, `Strict-Transport-Security`.
fn add_configured_fields(
    config: &crate::config::Config,
    policy: Option<u16>,
    https: bool,
    out: &mut Vec<u8>,
    start: usize,
) {
    if policy.is_some() {
        let status = status_of(out, start);
        let (always, on_success) = config.router.headers(policy, status);
        crate::http1::response::add_fields(out, start, always);
        crate::http1::response::add_fields(out, start, on_success);
        if let Some(expires) = config.router.expires(policy, status) {
            let fields = expires.fields(std::time::SystemTime::now());
            let replaced = ["expires", "cache-control"];
            crate::http1::response::remove_fields(out, start, &replaced);
            crate::http1::response::add_fields(out, start, &fields);
        }
    }
    if let Some(hsts) = config.tls.as_ref().and_then(|t| t.hsts.as_deref()) {
        if https {
            crate::http1::response::add_fields(out, start, hsts);
        }
    }
}

/// How a request ended when it got a response (from the upstream or, for errors, the proxy).
#[derive(Debug)]
struct Outcome {
    /// Status sent (or 499 when the client left first).
    status: u16,
    /// Body bytes sent to the client.
    body_bytes: u64,
    /// Whether the client connection stays open.
    keep_alive: bool,
}

/// Most servers one request tries (the first and `retries` of at most 10).
const MAX_TRIES: usize = 11;

/// Tries kept inline: a request retried more often allocates for the rest.
const INLINE_TRIES: usize = 2;

/// The servers a request was sent to, in order, for the access log and to send retries
/// elsewhere; the usual one or two kept inline, so a request allocates nothing for them
/// (and makes and drops only the entries it uses, not [`MAX_TRIES`]).
#[derive(Default)]
struct Tried {
    addrs: SmallVec<[Address; INLINE_TRIES]>,
    /// Each try's timings, for the access log.
    times: SmallVec<[UpstreamTimes; INLINE_TRIES]>,
    /// The failure of the last server tried, answered if no server is left to try.
    last_error: Option<crate::error::Error>,
}

impl Tried {
    fn push(&mut self, addr: &Address) {
        if self.len() < MAX_TRIES {
            self.addrs.push(addr.clone());
            self.times.push(UpstreamTimes::default());
        }
    }

    fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Adds the tries of a second request made for this one (an error page's), for the log.
    fn append(&mut self, other: &Tried) {
        for (addr, times) in other.as_slice().iter().zip(other.times()) {
            if self.len() < MAX_TRIES {
                self.addrs.push(addr.clone());
                self.times.push(*times);
            }
        }
    }

    /// The addresses tried, in order.
    fn as_slice(&self) -> &[Address] {
        &self.addrs
    }

    /// The timings of each try, in order.
    fn times(&self) -> &[UpstreamTimes] {
        &self.times
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_from_a_head_at_its_start() {
        let head = b"xxHTTP/1.1 404 Not Found\r\n\r\n";
        assert_eq!(status_of(head, 2), 404);
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n\r\n", 0), 200);
        assert_eq!(status_of(b"HTTP/1.1 2x0 OK\r\n\r\n", 0), 0);
        assert_eq!(status_of(b"HTTP/1.1 20", 0), 0);
    }

    #[test]
    fn tries_beyond_the_inline_ones_are_kept_up_to_the_most() {
        let mut tried = Tried::default();
        let addr = |port| Address::Tcp(SocketAddr::from(([127, 0, 0, 1], port)));
        for port in 1..=(MAX_TRIES as u16 + 3) {
            tried.push(&addr(port));
        }
        assert_eq!(tried.len(), MAX_TRIES);
        assert_eq!(tried.times().len(), MAX_TRIES);
        assert_eq!(
            tried.as_slice()[INLINE_TRIES],
            addr(INLINE_TRIES as u16 + 1)
        );
        let mut other = Tried::default();
        other.push(&addr(100));
        let mut first = Tried::default();
        first.push(&addr(1));
        first.append(&other);
        assert_eq!(first.as_slice(), &[addr(1), addr(100)]);
    }
}
