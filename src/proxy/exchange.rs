//! Sending a request upstream: pick a server, take a pooled connection or open one, write the
//! head and any buffered body with one `writev`, stream the rest of the body, and wait for the
//! response head. A request that failed on a reused connection before any response byte is sent
//! again on a fresh connection when [`Error::may_retry`] allows it. Every picked server's
//! result is reported to its group's balancer.

use super::relay::{self, RequestBody};
use super::response;
use super::{Client, Conn, Ctx, Outcome};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind, Side};
use crate::http1::response::CONTINUE;
use crate::http1::BodyReader;
use crate::net::io::write_all;
use crate::observe::metrics::Counter;
use crate::routing::RouteTarget;
use crate::upstream::balance::{self, Balancer};
use crate::upstream::connect::connect;

/// Sends the request to the route's upstream group and relays the response.
pub(super) async fn exchange(
    cx: &Ctx<'_>,
    route: RouteTarget,
    client: &mut Client,
    buf: &mut Vec<u8>,
) -> Result<Outcome, Error> {
    let group = &cx.config().upstreams[route.upstream];
    let balancer = &cx.snapshot.balancers[route.upstream];
    let p = cx.request;
    let mut body = BodyReader::new(p.framing);
    let buffered = body
        .feed(&buf[p.head_len..])
        .map_err(|_| Error::new(Kind::BadRequest("invalid chunked body")))?;
    let initial_end = p.head_len + buffered;
    // The whole body is in the buffer: the request can be sent again if a connection fails.
    let body_in_hand = body.is_done();
    let mut retried = false;
    let (conn, mut ubuf) = loop {
        let mut conn = acquire(cx, group, balancer, retried).await?;
        match send(cx, group, client, buf, &mut conn, &mut body, initial_end).await {
            Ok(ubuf) => break (conn, ubuf),
            Err(e) => {
                balancer.report(conn.index, reported(&e));
                if conn.reused && !retried && e.may_retry(p.idempotent, body_in_hand) {
                    retried = true;
                    cx.worker.counters.inc(Counter::UpstreamRetries);
                    continue;
                }
                return Err(e.at(conn.server));
            }
        }
    };
    if body_in_hand {
        // The request is fully sent; what follows it in the buffer is the next request.
        buf.drain(..initial_end.min(buf.len()));
    }
    let max_buffer = cx.config().limits.max_buffer;
    if buf.is_empty() {
        // Nothing pipelined: the read buffer goes back to the pool for the whole response.
        cx.worker.buffers.give(std::mem::take(buf), max_buffer);
    }
    let (server, index) = (conn.server, conn.index);
    let result = response::respond(cx, group, client, buf, conn, &mut ubuf).await;
    cx.worker.buffers.give(ubuf, max_buffer);
    match result {
        Ok(outcome) => {
            balancer.report(index, balance::Outcome::Success);
            Ok(outcome)
        }
        Err(e) => {
            balancer.report(index, reported(&e));
            Err(e.at(server))
        }
    }
}

/// What the balancer hears of a failure: the server's fault, or not.
fn reported(e: &Error) -> balance::Outcome {
    match e.side() {
        Side::Upstream => balance::Outcome::Failure(e.kind),
        Side::Client | Side::Local => balance::Outcome::Abandoned,
    }
}

/// Takes a pooled connection (unless `fresh`) or opens one, trying each server of the group
/// once; the error is the last server's.
async fn acquire(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    balancer: &Balancer,
    fresh: bool,
) -> Result<Conn, Error> {
    let counters = &cx.worker.counters;
    let mut last = Error::connect(Kind::ConnectFailed);
    for _ in 0..group.servers.len() {
        let index = balancer.pick();
        let server = group.servers[index];
        if !fresh {
            if let Some(stream) = cx.worker.upstreams.take(server, counters) {
                counters.inc(Counter::UpstreamReused);
                let reused = true;
                return Ok(Conn {
                    server,
                    index,
                    stream,
                    reused,
                });
            }
        }
        match connect(server, group.connect_timeout, counters).await {
            Ok(stream) => {
                let reused = false;
                return Ok(Conn {
                    server,
                    index,
                    stream,
                    reused,
                });
            }
            Err(e) => {
                balancer.report(index, balance::Outcome::Failure(e.kind));
                last = e.at(server);
            }
        }
    }
    Err(last)
}

/// Sends the head, the buffered body bytes and the rest of the body, then waits for the
/// response head; returns the upstream read buffer holding it.
async fn send(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    buf: &mut Vec<u8>,
    conn: &mut Conn,
    body: &mut BodyReader,
    initial_end: usize,
) -> Result<Vec<u8>, Error> {
    let p = cx.request;
    let limits = &cx.config().limits;
    let parts = [p.upstream_head.as_slice(), &buf[p.head_len..initial_end]];
    write_all(&mut conn.stream, &parts, group.send_timeout)
        .await
        .map_err(|e| Error::no_response(&e))?;
    if !body.is_done() {
        buf.drain(..initial_end);
        if p.expect_continue && p.minor_version == 1 {
            write_all(&mut client.stream, &[CONTINUE], limits.client_body_timeout)
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
        })
        .await?;
    }
    let hint = cx
        .worker
        .response_buffer_hint(conn.server, limits.max_buffer, limits.zero_copy);
    let mut ubuf = cx.worker.buffers.take(hint);
    let read = response::read_head(
        &mut conn.stream,
        &mut ubuf,
        &client.stream,
        group.read_timeout,
        limits.max_buffer,
    );
    match read.await {
        Ok(()) => Ok(ubuf),
        Err(e) => {
            cx.worker.buffers.give(ubuf, limits.max_buffer);
            Err(e)
        }
    }
}
