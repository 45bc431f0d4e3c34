//! The upstream's response: its head (after any interim 1xx responses, which are passed on),
//! then either a protocol switch ([`super::tunnel`]), a whole response read into memory first
//! (`buffer_response`), or the body relayed as it arrives ([`super::relay`]). A connection whose
//! response ended cleanly goes back to the pool. An HTTP/2 request answered before its body
//! ended goes on sending the body meanwhile ([`super::duplex`]).

use std::time::Duration;

use super::compress::{self, Decision};
use super::duplex::{duplex, Duplex};
use super::relay::{self, RequestBody, ResponseBody};
use super::request::Prepared;
use super::{tunnel, Client, Conn, Ctx, Outcome};
use crate::buffers::MIN_BUFFER;
use crate::compress::head::{rewrite, CompressedBody};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::http1::request::header_storage;
use crate::http1::response::Relay;
use crate::http1::{head_complete, parse_response, BodyReader, Framing};
use crate::message::ClientHead;
use crate::net::io::{read_some, write_head};
use crate::net::Stream;
use crate::observe::metrics::Counter;

/// Extra room left after a response that is read whole.
const READ_SLACK: usize = 512;

/// A final response head, with the head the client will get.
struct FinalHead {
    status: u16,
    head_len: usize,
    framing: Framing,
    /// The upstream connection may be reused after this response.
    reusable: bool,
    relay: Relay,
    keep_alive: bool,
    /// The head the client gets.
    out: ClientHead,
    /// The head as the cache stores it, when the cache takes this response.
    cache_text: Option<Vec<u8>>,
}

/// What the start of the upstream read buffer holds.
enum Parsed {
    /// Not a whole head yet.
    Incomplete,
    /// An interim (1xx) response, with what to forward of it (nothing for 100 or HTTP/1.0).
    Interim {
        head_len: usize,
        forward: Option<ClientHead>,
    },
    /// `101 Switching Protocols` to a request that asked for it.
    Switch { head_len: usize, out: ClientHead },
    /// The final response head.
    Final(FinalHead),
}

/// Reads until `ubuf` holds a complete response head (or `max` bytes), watching for the client
/// hanging up meanwhile.
pub(super) async fn read_head(
    up: &mut Stream,
    ubuf: &mut Vec<u8>,
    client: &Stream,
    read_timeout: Duration,
    max: usize,
) -> Result<(), Error> {
    loop {
        let read = tokio::select! {
            r = read_some(up, ubuf, max, read_timeout) => r,
            _ = client.hangup() => return Err(Error::new(Kind::ClientClosed)),
        };
        match read {
            // The head came as a value (an HTTP/2 server's), not as bytes; it cannot follow
            // part of a head that came as bytes (interim heads come whole).
            Ok(0) if up.response_waiting() && ubuf.is_empty() => return Ok(()),
            Ok(0) if up.response_waiting() => {
                return Err(Error::new(Kind::BadResponse("response head cut short")))
            }
            Ok(0) if ubuf.is_empty() => {
                return Err(Error::no_response(
                    &std::io::ErrorKind::UnexpectedEof.into(),
                ))
            }
            Ok(0) => return Err(Error::new(Kind::BadResponse("response head cut short"))),
            Ok(_) => {}
            Err(e) if ubuf.is_empty() => return Err(Error::no_response(&e)),
            Err(e) => return Err(Error::upstream_io(&e)),
        }
        if head_complete(ubuf) || ubuf.len() >= max {
            return Ok(());
        }
    }
}

/// Decides what the response head is (the bytes at the start of `ubuf`, or once they are all
/// read, the value an HTTP/2 server's stream holds) and how it reaches the client.
fn parse_head(
    ubuf: &[u8],
    up: &mut Stream,
    p: &Prepared,
    max_head: usize,
    shutting_down: bool,
) -> Result<Parsed, Error> {
    let carried = if ubuf.is_empty() {
        up.take_response()
    } else {
        None
    };
    let mut storage = header_storage();
    let head = match &carried {
        Some(response) => response.head(&mut storage, max_head)?,
        // A HEAD the cache asked as a GET has a GET's body.
        None => match parse_response(ubuf, &mut storage, max_head, p.is_head && !as_get(p))? {
            Some(head) => head,
            None => return Ok(Parsed::Incomplete),
        },
    };
    let as_is = |text: &mut Vec<u8>| head.write_client_head(text, Relay::Pass, true, 1);
    if head.is_interim() {
        // 100 Continue was already answered by the proxy; HTTP/1.0 clients get no 1xx.
        let forward = (head.status != 100 && p.minor_version == 1).then(|| {
            let mut text = Vec::new();
            ClientHead::new(head.status, as_is(&mut text), text)
        });
        let head_len = head.head_len;
        return Ok(Parsed::Interim { head_len, forward });
    }
    if head.status == 101 {
        if !p.upgrade {
            return Err(Error::new(Kind::UnexpectedUpgrade));
        }
        let mut text = Vec::new();
        let out = ClientHead::new(101, as_is(&mut text), text);
        let head_len = head.head_len;
        return Ok(Parsed::Switch { head_len, out });
    }
    let relay = head.relay(p.minor_version);
    let keep_alive = p.keep_alive && !head.ends_by_close(relay) && !shutting_down;
    let mut text = crate::buffers::head_text(written_size(&head) + 64);
    let framing = head.write_client_head(&mut text, relay, keep_alive, p.minor_version);
    // An error page goes out with the code it replaces (unless its entry says otherwise).
    let status = p.status_override.unwrap_or(head.status);
    if status != head.status {
        crate::http1::response::replace_status_line(&mut text, status);
        if matches!(head.status, 204 | 304) {
            // The page's answer had no body: under a status that has one, say so.
            crate::http1::response::add_fields(&mut text, 0, b"Content-Length: 0\r\n");
        }
    }
    let out = ClientHead::new(status, framing, text);
    let capturing = p.cache.as_ref().is_some_and(|c| c.capture.get());
    let cache_text = capturing.then(|| {
        let mut text = Vec::with_capacity(written_size(&head) + 64);
        head.write_client_head(&mut text, Relay::Pass, true, 1);
        text
    });
    Ok(Parsed::Final(FinalHead {
        status,
        head_len: head.head_len,
        framing: head.framing,
        reusable: head.reusable,
        relay,
        keep_alive,
        out,
        cache_text,
    }))
}

/// Whether the request is a HEAD its cache sent upstream as a GET.
fn as_get(p: &Prepared) -> bool {
    p.cache
        .as_ref()
        .is_some_and(|c| c.method == crate::cache::Method::Head)
}

/// The final head's fields as the route wants them (hidden ones gone, configured ones
/// added), or the answer replaced by an error page (`intercept_errors`: its body is never
/// read, the connection closes when dropped).
fn final_fields(cx: &Ctx<'_>, head: &mut FinalHead) -> Result<(), Error> {
    if super::error_page::intercepts(cx, head.status) {
        return Err(Error::new(Kind::Replaced(head.status)));
    }
    cx.hide_upstream_fields(&mut head.out.text);
    cx.add_response_fields(&mut head.out.text, 0);
    Ok(())
}

/// About the size of `head` as HTTP/1.1: its length in bytes, or for a head taken as a value
/// (which has none) the sum of its fields'.
fn written_size(head: &crate::message::ResponseHead<'_, '_>) -> usize {
    if head.head_len > 0 {
        return head.head_len;
    }
    32 + head.fields_size()
}

/// The response head has begun in `ubuf`: forwards interim responses, then switches protocols
/// or sends the final response. `pending` holds client bytes that followed the request;
/// `request` tracks the request body, which an HTTP/2 client may still be sending.
pub(super) async fn respond(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    pending: &mut Vec<u8>,
    mut up: Conn,
    ubuf: &mut Vec<u8>,
    request: &mut BodyReader,
) -> Result<Outcome, Error> {
    let limits = &cx.config().limits;
    let max_head = limits.max_request_head.max(MIN_BUFFER);
    let mut head = loop {
        let shutting_down = cx.worker.shutting_down();
        match parse_head(ubuf, &mut up.stream, cx.request, max_head, shutting_down)? {
            Parsed::Incomplete => {
                let more = MoreHead {
                    group,
                    pending: &mut *pending,
                    request: &mut *request,
                };
                more.read(cx, client, &mut up, ubuf).await?;
            }
            Parsed::Interim { head_len, forward } => {
                if let Some(forward) = &forward {
                    let timeout = limits.client_body_timeout;
                    write_head(&mut client.stream, forward, &[], timeout)
                        .await
                        .map_err(|_| Error::client_write())?;
                }
                ubuf.drain(..head_len);
                if !head_complete(ubuf) {
                    let more = MoreHead {
                        group,
                        pending: &mut *pending,
                        request: &mut *request,
                    };
                    more.read(cx, client, &mut up, ubuf).await?;
                }
            }
            Parsed::Switch { head_len, out } => {
                let early = &ubuf[head_len..];
                return tunnel::switch(cx, group, client, pending, up, &out, early).await;
            }
            Parsed::Final(mut head) => {
                final_fields(cx, &mut head)?;
                break head;
            }
        }
    };
    match cache_turn(cx, group, client, (up, &mut *ubuf, request), &mut head).await {
        super::cache::Taken::Answered(result) => return result,
        super::cache::Taken::Pass(conn) => up = conn,
    }
    let decision = compress::decide(cx, &head.out);
    let buffer_limit = cx.request.upstream.and_then(|r| r.buffer_response);
    if !request.is_done() {
        let unchanged = head.relay == Relay::Pass && matches!(decision, Decision::Unchanged);
        if unchanged && buffer_limit.is_none() && head.framing != Framing::UntilClose {
            return duplex_body(cx, group, client, up, ubuf, head, request).await;
        }
        // The response changes on its way: the rest of the body goes first.
        let more = MoreHead {
            group,
            pending,
            request,
        };
        more.send_rest(cx, client, &mut up, None).await?;
    }
    let read_timeout = group.read_timeout;
    match decision {
        Decision::Unchanged => {}
        Decision::VaryOnly => head.out = rewrite(&head.out, None, CompressedBody::Chunked),
        Decision::Compress(coding) => {
            let r = compress::Upstream {
                status: head.status,
                head_len: head.head_len,
                framing: head.framing,
                reusable: head.reusable,
                keep_alive: head.keep_alive,
                client_head: &head.out,
            };
            return compress::relay(cx, group, client, up, ubuf, r, coding).await;
        }
    }
    if let Some(limit) = buffer_limit.filter(|_| head.relay == Relay::Pass) {
        let (head_len, framing) = (head.head_len, head.framing);
        let whole = relay::read_whole(&mut up.stream, ubuf, head_len, framing, limit, read_timeout);
        if let Some(end) = whole.await? {
            // The whole response is in memory: the upstream connection goes back to the pool
            // before a slow client has read a byte of it.
            cx.worker.counters.inc(Counter::BufferedResponses);
            if head.reusable && end == ubuf.len() {
                up.reuse(cx.worker, group);
            }
            return send_whole(cx, client, &ubuf[..end], &head).await;
        }
        // Larger than the limit: it streams.
    }
    relay_body(cx, group, client, up, ubuf, head).await
}

/// The cache's turn at a final response it fetched: it answers (stored, validated, stale),
/// or passes the response on to be relayed (a HEAD asked as a GET is answered here, without
/// the body).
async fn cache_turn(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    (up, ubuf, request): (Conn, &mut Vec<u8>, &BodyReader),
    head: &mut FinalHead,
) -> super::cache::Taken {
    // An answer that began before the request body ended is relayed as it comes, never
    // stored (its connection cannot go back to the pool yet).
    let Some(text) = head.cache_text.take().filter(|_| request.is_done()) else {
        return super::cache::Taken::Pass(up);
    };
    let fetched = super::cache::Fetched {
        status: head.status,
        head_len: head.head_len,
        framing: head.framing,
        reusable: head.reusable,
        text,
        client_head: head.out.clone(),
        relayed_as_is: head.relay == Relay::Pass,
        keep_alive: head.keep_alive,
    };
    let up = match super::cache::capture(cx, group, client, up, ubuf, fetched).await {
        super::cache::Taken::Pass(conn) => conn,
        answered => return answered,
    };
    if let Some(c) = &cx.request.cache {
        // Not stored: the requests waiting for it go upstream themselves now.
        c.release();
    }
    if cx
        .request
        .cache
        .as_ref()
        .is_some_and(|c| c.background.get())
    {
        // A refresh the cache cannot keep: its client has its answer; this one is dropped.
        let dropped = Outcome {
            status: head.status,
            body_bytes: 0,
            keep_alive: true,
        };
        drop(up);
        return super::cache::Taken::Answered(Ok(dropped));
    }
    passed_by_cache(cx, head);
    if as_get(cx.request) {
        let sent = send_whole(cx, client, &ubuf[..head.head_len], head).await;
        return super::cache::Taken::Answered(sent);
    }
    super::cache::Taken::Pass(up)
}

/// A response the cache did not store goes on as it came, with this cache's `Cache-Status`;
/// a HEAD's (asked as a GET) without its body.
fn passed_by_cache(cx: &Ctx<'_>, head: &mut FinalHead) {
    let Some(c) = cx.request.cache.as_deref() else {
        return;
    };
    c.committed.set(true);
    if c.rule.status_field && c.method != crate::cache::Method::Unsafe {
        let bypass = c.status.get() == Some(crate::cache::CacheStatus::Bypass);
        let kind = if bypass { "bypass" } else { "uri-miss" };
        let member = format!("slipstream; fwd={kind}; fwd-status={}", head.status);
        super::cache::put_cache_status(&mut head.out.text, &member);
    }
    if as_get(cx.request) {
        head.out.framing = Framing::Empty;
        head.reusable = false;
    }
}

/// What reading more of a response head needs while the request body may still be going.
struct MoreHead<'a> {
    group: &'a UpstreamGroup,
    /// The client's read buffer.
    pending: &'a mut Vec<u8>,
    request: &'a mut BodyReader,
}

impl MoreHead<'_> {
    /// Reads more of the response head into `ubuf`. While the request body is unfinished (an
    /// HTTP/2 client whose upstream began answering early), its bytes are sent meanwhile,
    /// until the upstream sends more.
    async fn read(
        self,
        cx: &Ctx<'_>,
        client: &mut Client,
        up: &mut Conn,
        ubuf: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let (group, max) = (self.group, cx.config().limits.max_buffer);
        if !self.request.is_done() {
            let mut early = Vec::new();
            self.send_rest(cx, client, up, Some(&mut early)).await?;
            ubuf.extend_from_slice(&early);
            if !early.is_empty() && (head_complete(ubuf) || ubuf.len() >= max) {
                return Ok(());
            }
        }
        read_head(
            &mut up.stream,
            ubuf,
            &client.stream,
            group.read_timeout,
            max,
        )
        .await
        .map_err(Error::no_retry)
    }

    /// Sends the rest of the request body; with `early`, only until the upstream sends
    /// something (which lands there).
    async fn send_rest(
        self,
        cx: &Ctx<'_>,
        client: &mut Client,
        up: &mut Conn,
        early: Option<&mut Vec<u8>>,
    ) -> Result<(), Error> {
        let limits = &cx.config().limits;
        relay::relay_request_body(RequestBody {
            client: &mut client.stream,
            upstream: &mut up.stream,
            buf: self.pending,
            reader: self.request,
            max_buffer: limits.max_buffer,
            read_timeout: limits.client_body_timeout,
            send_timeout: self.group.send_timeout,
            pipes: None,
            counters: &cx.worker.counters,
            early,
        })
        .await
        .map_err(Error::no_retry)
    }
}

/// The final response of a request whose body is still coming: both move at once.
async fn duplex_body(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    mut up: Conn,
    ubuf: &mut Vec<u8>,
    head: FinalHead,
    request: &mut BodyReader,
) -> Result<Outcome, Error> {
    let mut head_sent = false;
    let d = Duplex {
        client: &mut client.stream,
        upstream: &mut up.stream,
        request,
        buf: ubuf,
        head_len: head.head_len,
        head_out: &head.out,
        response: BodyReader::new(head.framing),
        idle_timeout: group.read_timeout,
        send_timeout: cx.config().limits.client_body_timeout,
    };
    let ended = match duplex(d, &mut head_sent).await {
        Ok(ended) => ended,
        Err(e) if head_sent && e.kind != Kind::ClientClosed => {
            return Err(e.after_head(head.status))
        }
        Err(e) => return Err(e),
    };
    if head.reusable && ended.relayed.clean_end && ended.request_whole {
        up.reuse(cx.worker, group);
    }
    Ok(Outcome {
        status: head.status,
        body_bytes: ended.relayed.body_bytes,
        // A body not read whole would be taken for the next request.
        keep_alive: head.keep_alive && ended.request_whole,
    })
}

/// Sends a response that was read whole (`response` is its upstream head and body).
async fn send_whole(
    cx: &Ctx<'_>,
    client: &mut Client,
    response: &[u8],
    head: &FinalHead,
) -> Result<Outcome, Error> {
    let body = &response[head.head_len..];
    let timeout = cx.config().limits.client_body_timeout;
    write_head(&mut client.stream, &head.out, &[body], timeout)
        .await
        .map_err(|_| Error::client_write())?;
    Ok(Outcome {
        status: head.status,
        body_bytes: body.len() as u64,
        keep_alive: head.keep_alive,
    })
}

/// The most of a response the relay holds at once for `client`: `max_buffer`, or for a client
/// that queues writes in the proxy's memory (an HTTP/2 stream) no more than that queue's
/// `[http2] max_send_buffer`, so a thousand streams in flight cost a thousand small buffers,
/// not a thousand whole answers held twice.
pub(super) fn response_buffer_limit(
    config: &crate::config::Config,
    client: &crate::net::Stream,
) -> usize {
    let max = config.limits.max_buffer;
    if client.queues_writes() {
        max.min(config.http2.max_send_buffer)
    } else {
        max
    }
}

/// Relays the body as it arrives: a response that fits the buffer limit
/// ([`response_buffer_limit`]) is collected and sent with one write; a larger one streams
/// (spliced beyond the first buffer when possible).
async fn relay_body(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    mut up: Conn,
    ubuf: &mut Vec<u8>,
    head: FinalHead,
) -> Result<Outcome, Error> {
    let limits = &cx.config().limits;
    let max_buffer = response_buffer_limit(cx.config(), &client.stream);
    let wait_whole = match head.framing {
        Framing::Length(n) => {
            let total = head.head_len as u64 + n;
            let fits = total <= max_buffer as u64;
            // A little slack past the end, so the last read comes back short: a short read
            // clears the socket's readiness, and the pool's liveness check needs no syscall.
            let want = total as usize + READ_SLACK;
            if fits && ubuf.capacity() < want {
                ubuf.reserve_exact(want - ubuf.len());
            }
            fits
        }
        _ => false,
    };
    let received = ubuf.len();
    let mut head_sent = false;
    let body = ResponseBody {
        upstream: &mut up.stream,
        client: &mut client.stream,
        buf: ubuf,
        head_len: head.head_len,
        head_out: &head.out,
        reader: crate::http1::BodyReader::for_response(head.framing),
        relay: head.relay,
        wait_whole,
        max_buffer,
        read_timeout: group.read_timeout,
        send_timeout: limits.client_body_timeout,
        pipes: limits.zero_copy.then_some(&cx.worker.pipes),
        counters: &cx.worker.counters,
        buffers: Some((&cx.worker.buffers, limits.max_buffer)),
    };
    let relayed = match relay::relay_response(body, &mut head_sent).await {
        Ok(r) => r,
        // Once the status line is sent, all that is left is to close without a clean end.
        Err(e) if head_sent && e.kind != Kind::ClientClosed => {
            return Err(e.after_head(head.status))
        }
        Err(e) => return Err(e),
    };
    let size = match head.framing {
        Framing::Length(n) => head.head_len + n as usize,
        _ => received,
    };
    cx.worker.note_response_size(&up.server, size);
    if head.reusable && relayed.clean_end {
        up.reuse(cx.worker, group);
    }
    Ok(Outcome {
        status: head.status,
        body_bytes: relayed.body_bytes,
        keep_alive: head.keep_alive,
    })
}
