//! Reading a request head: the whole head must arrive within `client_header_timeout`, however
//! it is split into reads; `http1` parses and validates it; the router picks its target. What
//! the rest of the request needs is copied out ([`Prepared`]) so the read buffer is free.

use std::net::SocketAddr;
use std::task::Poll;

use super::Client;
use crate::config::Fallback;
use crate::config::{Balance, Config, Protocol};
use crate::error::{Error, Kind};
use crate::files::respond::FileRequest;
use crate::http1::accept::{accepted_codings, Codings};
use crate::http1::request::{header_storage, ForwardedFor, HeaderStorage};
use crate::http1::{parse_request, Framing};
use crate::http2::upstream::{request_from_head, ConvertedRequest};
use crate::message::RequestHead;
use crate::net::io::read_some;
use crate::routing::{Routed, Target, UpstreamTarget};
use crate::upstream::ring::request_key;
use crate::worker::Worker;

/// A request head reduced to what the rest of the exchange needs.
pub(super) struct Prepared {
    /// The head to send upstream as HTTP/1.1 (empty when there is no route, or when the
    /// request goes to an HTTP/2 group as a value).
    pub(super) upstream_head: Vec<u8>,
    /// The request to send an HTTP/2 group, as a value (boxed: the request's state, copied
    /// into its task, stays small for the other protocols).
    pub(super) upstream_request: Option<Box<ConvertedRequest>>,
    /// Length of the client's head in the read buffer.
    pub(super) head_len: usize,
    pub(super) framing: Framing,
    pub(super) minor_version: u8,
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
    pub(super) upgrade: bool,
    pub(super) idempotent: bool,
    pub(super) is_head: bool,
    /// A gRPC or gRPC-Web call (`content-type: application/grpc...`): failures are answered
    /// as gRPC errors, of this content type.
    pub(super) grpc: Option<&'static str>,
    /// The call's `grpc-timeout`: the upstream's answer is not awaited past it.
    pub(super) grpc_timeout: Option<std::time::Duration>,
    /// The client spoke TLS.
    pub(super) https: bool,
    pub(super) route: Option<Target>,
    /// The site and the per-route figures slot.
    pub(super) routed: Routed,
    /// The upstream group the request goes to if proxied: its route's, or the fallback of a
    /// static-file route.
    pub(super) upstream: Option<UpstreamTarget>,
    /// What static serving reads, for a static-file route.
    pub(super) files: Option<FileRequest>,
    /// The codings the client accepts, when its route compresses responses.
    pub(super) compress: Option<Codings>,
    /// The request's consistent-hashing key, when its group balances by hash and the key is
    /// present.
    pub(super) hash_key: Option<u64>,
    /// Fields for the access log, gathered only when it is on.
    pub(super) log: Option<LogFields>,
    /// What the route's rules answer instead of its content.
    pub(super) answer: Option<Box<super::rules::Answered>>,
    /// Why the rules refused the request (403, 413, ...).
    pub(super) refused: Option<Kind>,
    /// The target the rules rewrote the request to (FastCGI reads the head again with it).
    pub(super) rewritten: Option<String>,
    /// The client's address named by trusted proxies (`[real_ip]`), when not the peer's.
    pub(super) real_ip: Option<std::net::IpAddr>,
    /// The status every answer to this request goes out with, whatever its own: the code of
    /// the answer an error page replaces (nginx's `err_status`).
    pub(super) status_override: Option<u16>,
    /// The request serves an error page: no other error page replaces its answer (nginx
    /// without `recursive_error_pages`).
    pub(super) error_page: bool,
    /// Fallbacks to named locations this request has taken (a cycle ends after 10).
    pub(super) named_hops: u8,
    /// The upstream's answers of codes its error pages list are replaced (`intercept_errors`).
    pub(super) intercepts: bool,
    /// An error page's request head as HTTP/1.1 text (FastCGI reads it again from here).
    pub(super) page_head: Option<Vec<u8>>,
    /// Field lines its answers get besides the policy's (`cors`, a 401's challenge,
    /// `add_headers` values with variables).
    pub(super) response_fields: Vec<u8>,
    /// Field lines its successful answers get (`add_headers_on_success` with variables).
    pub(super) fields_on_success: Vec<u8>,
    /// `satisfy any` is met before the authorization service is asked.
    pub(super) satisfied: bool,
    /// `limit_req` serves the request after this wait.
    pub(super) delay: Option<std::time::Duration>,
    /// Its places in `limit_conn` zones, never read: held until it ends, given back when
    /// dropped with it.
    pub(super) _places: Vec<crate::rules::limit::ConnGuard>,
    /// The users' challenge, when `satisfy any` leaves the last word to the service.
    pub(super) challenge: Vec<u8>,
    /// Its route's response cache and what the request brings to it (`cache`).
    pub(super) cache: Option<Box<crate::cache::CacheRequest>>,
}

/// The request fields an access-log line shows, copied into one allocation.
pub(super) struct LogFields {
    text: Vec<u8>,
    /// Ends of method, target, host, user agent; the referer runs to the end.
    ends: [usize; 4],
}

impl LogFields {
    fn new(head: &RequestHead<'_, '_>) -> LogFields {
        let ua = head.header("user-agent").unwrap_or_default();
        let referer = head.header("referer").unwrap_or_default();
        let host = head.host.unwrap_or_default();
        let parts = [
            head.method.as_bytes(),
            head.path.as_bytes(),
            host,
            ua,
            referer,
        ];
        let mut text = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0; 4];
        for (i, part) in parts.iter().enumerate() {
            text.extend_from_slice(part);
            if i < 4 {
                ends[i] = text.len();
            }
        }
        LogFields { text, ends }
    }

    fn part(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let end = self.ends.get(i).copied().unwrap_or(self.text.len());
        &self.text[start..end]
    }

    pub(super) fn method(&self) -> &[u8] {
        self.part(0)
    }
    pub(super) fn target(&self) -> &[u8] {
        self.part(1)
    }
    pub(super) fn host(&self) -> &[u8] {
        self.part(2)
    }
    pub(super) fn user_agent(&self) -> &[u8] {
        self.part(3)
    }
    pub(super) fn referer(&self) -> &[u8] {
        self.part(4)
    }
}

/// The client as a request sees it: its address, the address as text, and its certificate
/// when it sent one.
pub(super) type Peer<'a> = (
    SocketAddr,
    &'a [u8],
    Option<&'a crate::tls::client_auth::ClientCert>,
);

/// The upstream head's buffer goes back for the next head (see
/// [`crate::buffers::head_text`]).
impl Drop for Prepared {
    fn drop(&mut self) {
        crate::buffers::recycle_head_text(std::mem::take(&mut self.upstream_head));
    }
}

impl Prepared {
    pub(super) fn new(
        head: &RequestHead<'_, '_>,
        config: &Config,
        (peer, ip_text, tls_client): Peer<'_>,
        (log, https): (bool, bool),
        local_port: &dyn Fn() -> u16,
        entry: super::rules::Entry,
    ) -> Prepared {
        let real_ip = real_client(config, head, peer);
        let real_text = real_ip.map(crate::net::IpText::new);
        let (peer, ip_text) = match (real_ip, &real_text) {
            (Some(ip), Some(text)) => (SocketAddr::new(ip, peer.port()), text.as_bytes()),
            _ => (peer, ip_text),
        };
        let client = super::rules::Client {
            ip: peer.ip(),
            ip_text: std::str::from_utf8(ip_text).unwrap_or_default(),
            https,
            local_port,
            tls_client,
        };
        let decision = super::rules::decide(&config.router, head, &client, entry);
        let routed = decision.routed;
        let answered = decision.answer.is_some() || decision.refused.is_some();
        let route = if answered { None } else { routed.target };
        let cache = cached(head, config, (routed, route, entry), &client);
        // The access log shows the request as the client sent it.
        let log =
            (log && config.access_log_for(routed.site).is_some()).then(|| LogFields::new(head));
        let rewritten_head;
        let head = match &decision.target {
            Some(target) => {
                let mut h = head.clone();
                h.path = std::borrow::Cow::Owned(target.clone());
                rewritten_head = h;
                &rewritten_head
            }
            None => head,
        };
        // The upstream a request may go to: its route's, or a static route's fallback.
        let upstream = route.and_then(|r| match r {
            Target::Upstream(u) => Some(u),
            Target::Files(i) => upstream_fallback(config, i),
        });
        let fwd = ForwardedFor {
            client: ip_text,
            proto: if https { "https" } else { "http" },
        };
        let fields = (&decision.request_fields[..], cache.as_deref());
        let (upstream_head, upstream_request) =
            upstream_request(head, config, upstream, fwd, fields);
        Prepared {
            upstream_head,
            upstream_request,
            head_len: head.head_len,
            framing: head.framing,
            minor_version: head.minor_version,
            keep_alive: head.keep_alive,
            expect_continue: head.expect_continue,
            upgrade: head.upgrade.is_some(),
            idempotent: head.is_idempotent(),
            is_head: head.method == "HEAD",
            grpc: head
                .header("content-type")
                .and_then(crate::grpc::error_content_type),
            grpc_timeout: head
                .header("grpc-timeout")
                .and_then(crate::grpc::parse_timeout),
            https,
            hash_key: upstream.and_then(|r| match &config.upstreams[r.upstream].balance {
                Balance::Hash(key) => request_key(head, key, peer),
                _ => None,
            }),
            files: match route {
                Some(Target::Files(_)) => Some(FileRequest::from_head(head)),
                _ => None,
            },
            compress: routed.compress.then(|| accepted(head)),
            route,
            routed,
            upstream,
            log,
            answer: decision.answer,
            refused: decision.refused,
            rewritten: decision.target,
            real_ip,
            status_override: None,
            error_page: entry != super::rules::Entry::Client,
            named_hops: 0,
            intercepts: intercepts(config, routed),
            page_head: None,
            response_fields: decision.response_fields,
            fields_on_success: decision.fields_on_success,
            satisfied: decision.satisfied,
            delay: decision.delay,
            _places: decision.guards,
            challenge: decision.challenge,
            cache,
        }
    }
}

/// Makes the request sent upstream fit to be stored when the cache answers it (GET and
/// HEAD): its conditionals and Range go (a PUT keeps its If-Match), a HEAD is asked as GET.
fn for_cache(
    c: Option<&crate::cache::CacheRequest>,
    request_fields: &[(String, String)],
    upstream_head: &mut Vec<u8>,
    upstream_request: Option<&mut ConvertedRequest>,
) {
    let Some(c) = c.filter(|c| {
        matches!(
            c.method,
            crate::cache::Method::Get | crate::cache::Method::Head
        )
    }) else {
        return;
    };
    // The client's names were looked at when the cache's side of the request was gathered.
    let names_any = c.asks_part_or_validation
        || request_fields
            .iter()
            .any(|(n, _)| super::cache::answered_here(n));
    super::cache::upstream_head_for_cache(upstream_head, names_any);
    if let Some(r) = upstream_request {
        super::cache::upstream_request_for_cache(&mut r.request);
    }
}

/// The request's side of its route's cache, when the route proxies (to an HTTP or FastCGI
/// group) and has one.
fn cached(
    head: &RequestHead<'_, '_>,
    config: &Config,
    (routed, route, entry): (Routed, Option<Target>, super::rules::Entry),
    client: &super::rules::Client<'_>,
) -> Option<Box<crate::cache::CacheRequest>> {
    let Some(Target::Upstream(u)) = route else {
        return None;
    };
    if entry != super::rules::Entry::Client {
        // An error page's or a named location's request is not cached.
        return None;
    }
    let rule = config.router.policy(routed.policy?).cache.as_ref()?;
    let asker = super::cache::Asker {
        https: client.https,
        ip_text: client.ip_text,
        server_name: routed
            .site
            .map_or("", |s| config.router.server_name(usize::from(s))),
        local_port: client.local_port,
        maps: config.router.maps(),
        tls_client: client.tls_client,
    };
    let mut c = super::cache::cache_request(head, rule, &asker);
    if config.upstreams[u.upstream].fastcgi.is_some() && c.method == crate::cache::Method::Head {
        // A script asked HEAD answers without a body: nothing to store.
        c.method = crate::cache::Method::Other;
    }
    Some(c)
}

/// Behind trusted proxies the client is who they say (`[real_ip]`): its address is
/// `$remote_addr` for the rules, access, X-Forwarded-For, hashing, FastCGI and logs.
fn real_client(
    config: &Config,
    head: &RequestHead<'_, '_>,
    peer: SocketAddr,
) -> Option<std::net::IpAddr> {
    config
        .real_ip
        .as_ref()
        .and_then(|r| r.client(peer.ip(), head.headers))
}

/// The codings the client accepts (its `Accept-Encoding` fields).
fn accepted(head: &RequestHead<'_, '_>) -> Codings {
    let values = head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("accept-encoding"));
    accepted_codings(values.map(|h| h.value))
}

/// Whether the upstream's answers of the codes the route's error pages list are replaced.
fn intercepts(config: &Config, routed: Routed) -> bool {
    routed.policy.is_some_and(|p| {
        let policy = config.router.policy(p);
        policy.intercept_errors && !policy.error_pages.is_empty()
    })
}

/// What goes to the upstream: an HTTP/1.1 head (with the rules' request fields set), or, for
/// an HTTP/2 group, the request as a value; neither for FastCGI (written when sent) or no
/// upstream.
fn upstream_request(
    head: &RequestHead<'_, '_>,
    config: &Config,
    upstream: Option<UpstreamTarget>,
    fwd: ForwardedFor<'_>,
    (request_fields, cache): (&[(String, String)], Option<&crate::cache::CacheRequest>),
) -> (Vec<u8>, Option<Box<ConvertedRequest>>) {
    let mut upstream_head = Vec::new();
    let protocol = upstream.map(|u| config.upstreams[u.upstream].protocol);
    let mut upstream_request = match protocol {
        Some(p @ (Protocol::H2 | Protocol::H2c)) => {
            let scheme = if p == Protocol::H2 { "https" } else { "http" };
            // What HTTP/2 cannot carry (an Upgrade) fails as HTTP/1.1 text would.
            request_from_head(head, fwd, scheme).ok().map(Box::new)
        }
        _ => None,
    };
    if protocol.is_some_and(|p| p != Protocol::FastCgi) && upstream_request.is_none() {
        // Room for the proxy's X-Forwarded fields too (the host is one of their values).
        let host = head.host.map_or(0, <[u8]>::len);
        upstream_head = crate::buffers::head_text(head.text_size() + 128 + host);
        head.write_upstream_head(&mut upstream_head, fwd);
        crate::http1::request::set_fields(&mut upstream_head, request_fields);
    }
    let upstream = upstream_request.as_deref_mut();
    for_cache(cache, request_fields, &mut upstream_head, upstream);
    (upstream_head, upstream_request)
}

/// The upstream a static-file route falls back to (`try_files` ending in `"@name"`).
fn upstream_fallback(config: &Config, route: usize) -> Option<UpstreamTarget> {
    match config.file_routes[route].try_files.as_ref()?.fallback {
        Fallback::Upstream(u) => Some(u),
        _ => None,
    }
}

/// Whether the request's route serves files that may fall back to a named location (whose
/// content may go upstream and free the read buffer).
pub(super) fn may_go_to_named(config: &Config, route: Option<Target>) -> bool {
    let Some(Target::Files(i)) = route else {
        return false;
    };
    let fallback = config.file_routes[i]
        .try_files
        .as_ref()
        .map(|t| &t.fallback);
    matches!(fallback, Some(Fallback::Location(_)))
}

/// Refuses (421) a request whose Host names another site than its TLS connection's SNI when
/// one of the two asks for client certificates: the handshake checked the other site's.
fn refuse_misdirected(
    config: &Config,
    stream: &crate::net::Stream,
    head: &RequestHead<'_, '_>,
    prepared: &mut Prepared,
) {
    let Some(by_name) = config.tls.as_ref().and_then(|t| t.by_name.as_ref()) else {
        return;
    };
    if stream.tls_version().is_empty() {
        return;
    }
    if by_name.misdirected(stream.tls_server_name(), head.host) {
        prepared.refused = Some(crate::error::Kind::Misdirected);
        prepared.answer = None;
        prepared.route = None;
    }
}

/// Reads until `buf` holds a whole, valid request head. `Ok(None)`: the client closed (or went
/// quiet) before sending anything that needs an answer.
pub(super) async fn read_head(
    worker: &Worker,
    config: &Config,
    client: &mut Client,
    buf: &mut Vec<u8>,
) -> Result<Option<Prepared>, Error> {
    let limits = &config.limits;
    let https = !client.stream.tls_version().is_empty();
    let peer = (
        client.peer,
        client.ip_text.as_bytes(),
        client.tls_client.as_deref(),
    );
    if let Some(request) = client.stream.carried_request() {
        let mut storage = header_storage();
        let head = request.head(&mut storage, limits.max_request_head)?;
        let log = worker.log.enabled();
        let port = || local_port(&client.stream);
        let entry = super::rules::Entry::Client;
        let mut prepared = Prepared::new(&head, config, peer, (log, https), &port, entry);
        refuse_misdirected(config, &client.stream, &head, &mut prepared);
        // As an HTTP/1.1 connection's first read would: a body already in hand goes with the
        // head, and a request whose whole body is in hand may be sent again elsewhere.
        read_staged(&mut client.stream, buf, limits.max_request_head + 1).await;
        return Ok(Some(prepared));
    }
    // Set at the second read: a head that arrives whole (nearly all do) reads no clock.
    let mut deadline = None;
    loop {
        if !buf.is_empty() {
            let mut storage = header_storage();
            if let Some(head) = parse_request(buf, &mut storage, limits.max_request_head)? {
                let log = worker.log.enabled();
                let port = || local_port(&client.stream);
                let entry = super::rules::Entry::Client;
                let mut prepared = Prepared::new(&head, config, peer, (log, https), &port, entry);
                refuse_misdirected(config, &client.stream, &head, &mut prepared);
                return Ok(Some(prepared));
            }
        }
        let room = limits.max_request_head + 1;
        let left = match deadline {
            None if buf.is_empty() => limits.client_header_timeout,
            None => {
                let now = tokio::time::Instant::now();
                deadline = Some(now + limits.client_header_timeout);
                limits.client_header_timeout
            }
            Some(d) => d.saturating_duration_since(tokio::time::Instant::now()),
        };
        match read_some(&mut client.stream, buf, room, left).await {
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && !buf.is_empty() => {
                return Err(Error::new(Kind::ClientTimeout));
            }
            _ => return Ok(None),
        }
    }
}

/// The port the client connected to (0 if the socket cannot say).
fn local_port(stream: &crate::net::Stream) -> u16 {
    stream.local_addr().map_or(0, |a| a.port())
}

/// Reads what `stream` already holds into `buf`, up to `max` bytes there, without waiting.
async fn read_staged(stream: &mut crate::net::Stream, buf: &mut Vec<u8>, max: usize) {
    use std::future::Future;
    use tokio::io::AsyncReadExt;
    loop {
        let room = max.saturating_sub(buf.len());
        if room == 0 {
            return;
        }
        let mut limited = bytes::BufMut::limit(&mut *buf, room);
        let mut read = std::pin::pin!(stream.read_buf(&mut limited));
        let polled = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
        if !matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            return;
        }
    }
}

/// The request head read again, for FastCGI's variables (which need every field): parsed
/// again from the read buffer, or read again from the stream that carries it as a value.
pub(super) fn head_again<'h, 'b>(
    client: &'b Client,
    buf: &'b [u8],
    head_len: usize,
    storage: &'h mut HeaderStorage<'b>,
) -> Result<RequestHead<'h, 'b>, Error> {
    if let Some(request) = client.stream.carried_request() {
        return Ok(request.head(storage, usize::MAX)?);
    }
    parse_request(&buf[..head_len], storage, head_len)?
        .ok_or(Error::new(Kind::BadRequest("request head changed")))
}
