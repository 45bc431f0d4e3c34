//! Moving bodies between the client and the upstream with bounded memory.
//!
//! A response that fits the buffer is read whole and sent with one (vectored) write together with
//! its rewritten head; a larger one streams through the buffer, each write waiting for the
//! client, so a slow client slows the upstream read instead of filling memory. Beyond the first
//! buffer, opaque body bytes (a Content-Length remainder, chunk payloads) move socket to pipe to
//! socket with splice(2) when both streams are plain TCP.

use std::time::Duration;

use tokio::io::AsyncRead;

use crate::buffers::BufferPool;
use crate::error::{Error, Kind};
use crate::http1::response::Relay;
use crate::http1::{chunk_size_line, BodyReader, Framing, CHUNK_END, LAST_CHUNK};
use crate::message::ClientHead;
use crate::net::io::{head_bytes, read_some, write_all, write_all_around};
use crate::net::splice::{self, PipePool, SpliceError, SPLICE_MIN};
use crate::net::Stream;
use crate::observe::metrics::{Counter, Shard};

/// A response body to carry from the upstream to the client.
pub(super) struct ResponseBody<'a> {
    /// Upstream connection.
    pub(super) upstream: &'a mut Stream,
    /// Client connection.
    pub(super) client: &'a mut Stream,
    /// Upstream read buffer: the response head (already parsed) then the first body bytes.
    pub(super) buf: &'a mut Vec<u8>,
    /// Length of the upstream head at the start of `buf`.
    pub(super) head_len: usize,
    /// The head to send the client, written together with the first body bytes.
    pub(super) head_out: &'a ClientHead,
    /// Framing tracker for the body.
    pub(super) reader: BodyReader,
    /// How the framing changes on the way.
    pub(super) relay: Relay,
    /// Wait for the whole body before writing (set when it is length-delimited and fits).
    pub(super) wait_whole: bool,
    /// Largest the buffer may grow.
    pub(super) max_buffer: usize,
    /// Upstream read timeout.
    pub(super) read_timeout: Duration,
    /// Client write timeout.
    pub(super) send_timeout: Duration,
    /// Pipes for zero-copy transfer of body bytes beyond the first buffer, when enabled.
    pub(super) pipes: Option<&'a PipePool>,
    /// The worker's counters.
    pub(super) counters: &'a Shard,
    /// The worker's buffer pool and the most it keeps: for a client that queues writes
    /// ([`Stream::queues_writes`]), `buf` goes back to it while the relay waits.
    pub(super) buffers: Option<(&'a BufferPool, usize)>,
}

/// How a relayed response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Relayed {
    /// Body bytes written to the client (framing excluded).
    pub(super) body_bytes: u64,
    /// The message ended exactly where its framing said, so the upstream connection may be
    /// reused.
    pub(super) clean_end: bool,
}

/// Where the relay stands within the upstream buffer.
struct Cursor {
    /// Start of the bytes not yet written to the client.
    out_start: usize,
    /// End of the bytes already fed to the framing tracker.
    scanned: usize,
    /// The upstream closed (the end of an until-close body).
    eof: bool,
    /// The upstream sent bytes past the end of the body: do not reuse the connection.
    extra: bool,
    /// Body bytes sent so far.
    sent: u64,
    /// Decoded payload when chunk framing is removed on the way.
    decoded: Vec<u8>,
}

/// Sends the head and carries the body to the client. `head_sent` tells, on error, whether the
/// client may have received anything (if not, it can still get an error status).
pub(super) async fn relay_response(
    mut r: ResponseBody<'_>,
    head_sent: &mut bool,
) -> Result<Relayed, Error> {
    // Splicing needs the bytes unchanged on the way, and a kernel socket at both ends (the
    // buffer is let go before a splice: it must not be for a pair that cannot).
    let mut pipes = r
        .pipes
        .filter(|_| r.relay == Relay::Pass && can_splice(r.upstream, r.client));
    let mut head = Some(r.head_out);
    let mut at = Cursor {
        out_start: r.head_len,
        scanned: r.head_len,
        eof: false,
        extra: false,
        sent: 0,
        decoded: Vec::new(),
    };
    loop {
        scan(&mut r, &mut at)?;
        let complete = r.reader.is_done() || at.eof;
        if !complete && should_read(&r, &at, head.is_some(), pipes.is_some()) {
            // Released after the last write (see below); a splice's release is not this.
            let most = if r.buf.capacity() == 0 && r.client.queues_writes() {
                wait_without_buffer(&mut r).await?
            } else {
                r.max_buffer
            };
            let n = upstream_read(r.upstream, r.buf, most, r.read_timeout).await?;
            if n == 0 {
                if !matches!(r.reader, BodyReader::UntilClose) {
                    return Err(Error::new(Kind::UpstreamFailed));
                }
                at.eof = true;
            }
            continue;
        }
        *head_sent = true;
        at.sent += write_out(&mut r, &mut at, head.take()).await?;
        if complete {
            return Ok(Relayed {
                body_bytes: at.sent,
                clean_end: !at.extra && !at.eof,
            });
        }
        // What was scanned is out; an unfinished trailer line stays for the next scan.
        r.buf.drain(..at.scanned);
        at.decoded.clear();
        at.out_start = 0;
        at.scanned = 0;
        if let (Some((pool, most)), true) = (r.buffers, r.buf.is_empty()) {
            if r.client.queues_writes() {
                pool.give(std::mem::take(r.buf), most);
            }
        }
        if let Some(pool) = pipes {
            match splice_response(&mut r, pool, &mut at).await? {
                Spliced::Ended(done) => return Ok(done),
                Spliced::Unsupported => pipes = None,
                Spliced::More => {}
            }
        }
    }
}

/// Pull backpressure for a client that queues writes in the proxy's memory (an HTTP/2
/// stream): with the buffer given back, waits until the upstream has bytes to read and the
/// client's queue has room, then takes a buffer from the pool; returns how much to read,
/// no more than the queue takes at once, so the write that follows does not wait holding the
/// buffer. A stream waiting on either holds no buffer: a thousand streams behind slow clients
/// hold only their send queues.
async fn wait_without_buffer(r: &mut ResponseBody<'_>) -> Result<usize, Error> {
    // The upstream first: room in the queue is taken from the client's connection window, so
    // a stream waiting on a quiet upstream (server-sent events, gRPC streaming) holds none.
    match tokio::time::timeout(r.read_timeout, r.upstream.readable()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::upstream_io(&e)),
        Err(_) => return Err(Error::new(Kind::UpstreamTimeout)),
    }
    let room = match tokio::time::timeout(r.send_timeout, r.client.room(r.max_buffer)).await {
        Ok(Ok(n)) => n.clamp(1, r.max_buffer),
        Ok(Err(_)) | Err(_) => return Err(Error::client_write()),
    };
    if let Some((pool, _)) = r.buffers {
        *r.buf = pool.take(r.max_buffer);
    }
    Ok(room)
}

/// Feeds the bytes read since the last call to the framing tracker. Passed through as they
/// are, a chunked body's trailer section is edited first (invalid and forbidden fields out);
/// an unfinished trailer line stays after `scanned` for the next call.
fn scan(r: &mut ResponseBody<'_>, at: &mut Cursor) -> Result<(), Error> {
    if at.scanned >= r.buf.len() {
        return Ok(());
    }
    let taken = if r.relay == Relay::DecodeChunked {
        let decoded = &mut at.decoded;
        r.reader
            .feed_data(&r.buf[at.scanned..], |d| decoded.extend_from_slice(d))
    } else {
        r.reader.feed_in_place(r.buf, at.scanned)
    }
    .map_err(|_| Error::new(Kind::BadResponse("invalid chunked framing")))?;
    at.scanned += taken;
    if at.scanned < r.buf.len() && r.reader.is_done() {
        at.extra = true;
        r.buf.truncate(at.scanned);
    }
    Ok(())
}

/// Whether to read more before writing: nothing is pending, or there is room and either the
/// whole body is wanted first or more bytes are already waiting. With a long opaque run ahead,
/// what is pending is flushed and the rest is spliced instead of copied.
fn should_read(r: &ResponseBody<'_>, at: &Cursor, head_pending: bool, can_splice: bool) -> bool {
    let pending = head_pending || at.scanned > at.out_start || !at.decoded.is_empty();
    if !pending {
        return true;
    }
    let room = r.buf.len() < r.max_buffer;
    let splice_next = !r.wait_whole && can_splice && r.reader.opaque_len() >= SPLICE_MIN;
    room && !splice_next && (r.wait_whole || r.upstream.ready_now())
}

/// Writes the head (once) and the body bytes gathered so far, framed as the relay says; returns
/// how many body bytes that was. On the io_uring path the buffer holding them is lent to the
/// kernel for a large write (and may be lost with a failed one, which ends the relay).
async fn write_out(
    r: &mut ResponseBody<'_>,
    at: &mut Cursor,
    head: Option<&ClientHead>,
) -> Result<u64, Error> {
    let head = match head {
        Some(head) => head_bytes(r.client, head).map_err(|_| Error::client_write())?,
        None => &[],
    };
    let (data, range) = if r.relay == Relay::DecodeChunked {
        let len = at.decoded.len();
        (&mut at.decoded, 0..len)
    } else {
        (&mut *r.buf, at.out_start..at.scanned)
    };
    let len = range.len();
    let mut size_line = [0u8; 20];
    let encode = r.relay == Relay::EncodeChunked;
    let (prefix, suffix): (&[u8], &[u8]) = if encode && len > 0 {
        (chunk_size_line(len, &mut size_line), CHUNK_END)
    } else {
        (&[], &[])
    };
    let terminator: &[u8] = if encode && at.eof { LAST_CHUNK } else { &[] };
    let (before, after) = ([head, prefix], [suffix, terminator]);
    write_all_around(r.client, before, data, range, after, r.send_timeout)
        .await
        .map_err(|_| Error::client_write())?;
    Ok(len as u64)
}

/// What a splice of the response body left to do.
enum Spliced {
    /// The body ended.
    Ended(Relayed),
    /// More body follows; copy it (or splice again after the next framing bytes).
    More,
    /// splice(2) cannot be used on these streams: copy the rest.
    Unsupported,
}

/// Whether bytes may move from `from` to `to` with splice(2): both are plain TCP sockets
/// (on epoll or on the ring).
fn can_splice(from: &Stream, to: &Stream) -> bool {
    from.splice_end().is_some() && to.splice_end().is_some()
}

/// Splices the opaque run ahead, if long enough.
async fn splice_response(
    r: &mut ResponseBody<'_>,
    pool: &PipePool,
    at: &mut Cursor,
) -> Result<Spliced, Error> {
    let opaque = r.reader.opaque_len();
    if opaque < SPLICE_MIN {
        return Ok(Spliced::More);
    }
    // The buffer is not needed while bytes bypass user space: a long, slow download holds no
    // buffer memory.
    *r.buf = Vec::new();
    let timeouts = (r.read_timeout, r.send_timeout);
    match splice_run(pool, r.counters, r.upstream, r.client, opaque, timeouts).await {
        Ok((moved, end)) => {
            r.reader.skip(moved.min(opaque));
            at.sent += moved;
            if end && !matches!(r.reader, BodyReader::UntilClose) {
                return Err(Error::new(Kind::UpstreamFailed));
            }
            if end || r.reader.is_done() {
                let clean_end = !end;
                let body_bytes = at.sent;
                return Ok(Spliced::Ended(Relayed {
                    body_bytes,
                    clean_end,
                }));
            }
            Ok(Spliced::More)
        }
        Err(SpliceError::Unsupported) => Ok(Spliced::Unsupported),
        Err(SpliceError::Source(e)) => Err(Error::upstream_io(&e)),
        Err(SpliceError::SourceTimeout) => Err(Error::new(Kind::UpstreamTimeout)),
        Err(SpliceError::Destination(_)) => Err(Error::client_write()),
    }
}

/// Reads a response body whole into `buf` (which already holds `head_len` bytes of head and the
/// first body bytes), up to `limit` bytes in all. `Some(end)` when the body ends at `end` within
/// the limit; `None` when it is larger (what was read stays in `buf`, to be streamed).
pub(super) async fn read_whole(
    upstream: &mut Stream,
    buf: &mut Vec<u8>,
    head_len: usize,
    framing: Framing,
    limit: usize,
    read_timeout: Duration,
) -> Result<Option<usize>, Error> {
    if let Framing::Length(n) = framing {
        if head_len as u64 + n > limit as u64 {
            return Ok(None);
        }
    }
    if framing == Framing::UntilClose {
        return Ok(None);
    }
    let mut reader = BodyReader::for_response(framing);
    let mut scanned = head_len;
    loop {
        let taken = reader
            .feed_in_place(buf, scanned)
            .map_err(|_| Error::new(Kind::BadResponse("invalid chunked framing")))?;
        scanned += taken;
        if reader.is_done() {
            return Ok(Some(scanned));
        }
        if buf.len() >= limit {
            return Ok(None);
        }
        if upstream_read(upstream, buf, limit, read_timeout).await? == 0 {
            return Err(Error::new(Kind::UpstreamFailed));
        }
    }
}

/// [`read_some`] on the upstream side, with its failures in the error model.
async fn upstream_read(
    upstream: &mut Stream,
    buf: &mut Vec<u8>,
    max: usize,
    timeout: Duration,
) -> Result<usize, Error> {
    read_some(upstream, buf, max, timeout)
        .await
        .map_err(|e| Error::upstream_io(&e))
}

/// A request body still to be read from the client and sent upstream.
pub(super) struct RequestBody<'a> {
    /// Client connection.
    pub(super) client: &'a mut Stream,
    /// Upstream connection.
    pub(super) upstream: &'a mut Stream,
    /// Client read buffer: empty on entry, or an unfinished trailer line its body reader has
    /// seen; holds pipelined bytes after the body on return.
    pub(super) buf: &'a mut Vec<u8>,
    /// Framing tracker for the body.
    pub(super) reader: &'a mut BodyReader,
    /// Largest the buffer may grow.
    pub(super) max_buffer: usize,
    /// Time allowed between two client reads.
    pub(super) read_timeout: Duration,
    /// Time allowed for an upstream write.
    pub(super) send_timeout: Duration,
    /// Pipes for zero-copy transfer, when enabled.
    pub(super) pipes: Option<&'a PipePool>,
    /// The worker's counters.
    pub(super) counters: &'a Shard,
    /// When given (an HTTP/2 client, whose reads can be given up without losing bytes), the
    /// upstream is watched while the client's next bytes are awaited: the first bytes it sends
    /// (or its end) land here and the relay stops, the body unfinished, so the response can
    /// flow while the rest of the body does (see `duplex`).
    pub(super) early: Option<&'a mut Vec<u8>>,
}

/// Streams the rest of a request body to the upstream, each read as it comes. Ends early,
/// with the body unfinished, when the upstream answers first and `early` was given.
pub(super) async fn relay_request_body(r: RequestBody<'_>) -> Result<(), Error> {
    let max = r.max_buffer.min(64 * 1024);
    let mut pipes = r.pipes.filter(|_| can_splice(r.client, r.upstream));
    let mut early = r.early;
    while !r.reader.is_done() {
        let opaque = r.reader.opaque_len();
        if let Some(pool) = pipes.filter(|_| opaque >= SPLICE_MIN) {
            let timeouts = (r.read_timeout, r.send_timeout);
            match splice_run(pool, r.counters, r.client, r.upstream, opaque, timeouts).await {
                Ok((_, true)) => return Err(Error::new(Kind::ClientClosed)),
                Ok((moved, false)) => r.reader.skip(moved),
                Err(SpliceError::Unsupported) => pipes = None,
                Err(SpliceError::Source(e)) => return Err(Error::client_read(&e)),
                Err(SpliceError::SourceTimeout) => return Err(Error::new(Kind::ClientTimeout)),
                Err(SpliceError::Destination(e)) => return Err(Error::upstream_io(&e)),
            }
            continue;
        }
        let read = read_some(r.client, r.buf, max, r.read_timeout);
        let read = match early.as_deref_mut() {
            None => read.await,
            Some(early) => tokio::select! {
                biased;
                got = read => got,
                answered = read_early(r.upstream, early) => return answered,
            },
        };
        match read {
            Ok(0) => return Err(Error::new(Kind::ClientClosed)),
            Ok(_) => {}
            Err(e) => return Err(Error::client_read(&e)),
        }
        // What follows the body's bytes: the next request, or an unfinished trailer line that
        // stays in front for the next read.
        let body = r
            .reader
            .feed_in_place(r.buf, 0)
            .map_err(|_| Error::new(Kind::BadRequest("invalid chunked body")))?;
        write_all(r.upstream, &[&r.buf[..body]], r.send_timeout)
            .await
            .map_err(|e| Error::upstream_io(&e))?;
        r.buf.drain(..body);
    }
    Ok(())
}

/// Waits for the upstream's first bytes (or its end) and appends them to `early`.
async fn read_early(upstream: &mut Stream, early: &mut Vec<u8>) -> Result<(), Error> {
    let start = early.len();
    let read = std::future::poll_fn(|cx| {
        // Within one poll, so that `early` is left as it was if the wait is given up.
        early.resize(start + 16 * 1024, 0);
        let mut into = tokio::io::ReadBuf::new(&mut early[start..]);
        let r = std::pin::Pin::new(&mut *upstream).poll_read(cx, &mut into);
        let n = into.filled().len();
        early.truncate(start + n);
        r
    });
    read.await.map_err(|e| Error::upstream_io(&e))
}

/// Splices up to `len` bytes through a pooled pipe; the pipe goes back only if it is empty.
/// `timeouts` bound each wait on the source and on the destination.
async fn splice_run(
    pipes: &PipePool,
    counters: &Shard,
    from: &Stream,
    to: &Stream,
    len: u64,
    timeouts: (Duration, Duration),
) -> Result<(u64, bool), SpliceError> {
    let (Some(from), Some(to)) = (from.splice_end(), to.splice_end()) else {
        return Err(SpliceError::Unsupported);
    };
    let Ok(pipe) = pipes.take() else {
        // No pipe to be had (descriptor limit): copy instead.
        return Err(SpliceError::Unsupported);
    };
    let result = splice::transfer(from, to, &pipe, len, timeouts.0, timeouts.1).await;
    if let Ok((moved, _)) = result {
        counters.add(Counter::SplicedBytes, moved);
        pipes.give(pipe);
    }
    result
}

#[cfg(test)]
mod tests;
