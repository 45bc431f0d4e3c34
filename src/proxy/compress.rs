//! Compressing responses on routes that ask for it (`compress = true`): [`decide`] reads the
//! client head a response would get and says whether it benefits and with which coding; the
//! proxied-HTTP body is then compressed here ([`relay`]): whole, with a `Content-Length`, when
//! it fits a buffer; otherwise streamed, each read's worth of body flushed as soon as the
//! upstream has nothing more waiting, so server-sent events and long polls still stream.
//! FastCGI and static responses use the same decision and encoders in their own phases.

use std::time::Duration;

use super::relay::read_whole;
use super::{Client, Conn, Ctx, Outcome};
use crate::compress::encoder::{compress_whole, Encoder};
use crate::compress::head::{rewrite, CompressedBody};
use crate::compress::{eligible, Coding};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::http1::{chunk_size_line, BodyReader, Framing, CHUNK_END, LAST_CHUNK};
use crate::message::ClientHead;
use crate::net::io::{read_some, write_all, write_head};
use crate::net::Stream;
use crate::observe::metrics::{Counter, Shard};

/// What compression does to a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Not on this route, or the response does not benefit: unchanged.
    Unchanged,
    /// It would be compressed, but the client accepts no coding offered: only
    /// `Vary: Accept-Encoding` is added.
    VaryOnly,
    /// Compressed with this coding.
    Compress(Coding),
}

/// Decides for the response whose client head is `head`.
pub(super) fn decide(cx: &Ctx<'_>, head: &ClientHead) -> Decision {
    let Some(codings) = cx.request.compress else {
        return Decision::Unchanged;
    };
    let settings = &cx.config().compression;
    if !eligible(head, settings, codings.identity_refused()) {
        return Decision::Unchanged;
    }
    match codings.best(&settings.order) {
        Some(c) => Decision::Compress(c),
        None => Decision::VaryOnly,
    }
}

/// Whether the full response for a static file would be compressed for this client: a 304
/// for it then carries the weak ETag and Vary its 200 would have.
pub(super) fn would_compress(cx: &Ctx<'_>, entry: &crate::files::cache::CachedFile) -> bool {
    let Some(codings) = cx.request.compress else {
        return false;
    };
    let s = &cx.config().compression;
    let long_enough = codings.identity_refused() || entry.identity.size >= s.min_length;
    long_enough
        && s.compresses_type(entry.content_type.as_bytes())
        && codings.best(&s.order).is_some()
}

/// The framing of a streamed compressed body for this request's client.
pub(super) fn stream_framing(cx: &Ctx<'_>) -> CompressedBody {
    if cx.request.minor_version == 0 {
        CompressedBody::Close
    } else {
        CompressedBody::Chunked
    }
}

/// An encoder failure in the error model.
pub(super) fn failed(counters: &Shard) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| {
        tracing::warn!("compression failed: {e}");
        counters.inc(Counter::CompressFailures);
        Error::new(Kind::CompressFailed)
    }
}

/// Counts a compressed response.
pub(super) fn count(counters: &Shard, bytes_in: u64, bytes_out: u64) {
    counters.inc(Counter::CompressedResponses);
    counters.add(Counter::CompressBytesIn, bytes_in);
    counters.add(Counter::CompressBytesOut, bytes_out);
}

/// The proxied response to compress: its upstream head at the start of the read buffer.
pub(super) struct Upstream<'a> {
    pub(super) status: u16,
    pub(super) head_len: usize,
    pub(super) framing: Framing,
    /// The upstream connection may be reused after this response.
    pub(super) reusable: bool,
    /// The client connection may stay open.
    pub(super) keep_alive: bool,
    /// The client head it would get uncompressed.
    pub(super) client_head: &'a ClientHead,
}

/// Compresses a proxied HTTP response with `coding` on its way to the client.
pub(super) async fn relay(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    mut up: Conn,
    ubuf: &mut Vec<u8>,
    r: Upstream<'_>,
    coding: Coding,
) -> Result<Outcome, Error> {
    let config = cx.config();
    let (settings, limits) = (&config.compression, &config.limits);
    let counters = &cx.worker.counters;
    let send_timeout = limits.client_body_timeout;
    let outcome = |body_bytes, keep_alive| Outcome {
        status: r.status,
        body_bytes,
        keep_alive,
    };
    if r.framing == Framing::Empty {
        let head = rewrite(r.client_head, Some(coding), CompressedBody::Bodiless);
        if r.reusable && ubuf.len() == r.head_len {
            up.reuse(cx.worker, group);
        }
        send(&mut client.stream, Some(&head), &[], send_timeout).await?;
        return Ok(outcome(0, r.keep_alive));
    }
    if let Framing::Length(n) = r.framing {
        let whole = read_whole(
            &mut up.stream,
            ubuf,
            r.head_len,
            r.framing,
            limits.max_buffer,
            group.read_timeout,
        );
        if let Some(end) = whole.await? {
            let body = &ubuf[r.head_len..end];
            let packed = compress_whole(coding, settings, body).map_err(failed(counters))?;
            count(counters, n, packed.len() as u64);
            let framing = CompressedBody::Length(packed.len() as u64);
            let head = rewrite(r.client_head, Some(coding), framing);
            if r.reusable && end == ubuf.len() {
                up.reuse(cx.worker, group);
            }
            send(&mut client.stream, Some(&head), &[&packed], send_timeout).await?;
            return Ok(outcome(packed.len() as u64, r.keep_alive));
        }
    }
    let framing = stream_framing(cx);
    let keep_alive = r.keep_alive && framing != CompressedBody::Close;
    let head = rewrite(r.client_head, Some(coding), framing);
    let mut body = Streamed {
        encoder: Some(Encoder::new(coding, settings).map_err(failed(counters))?),
        chunked: framing == CompressedBody::Chunked,
        head: Some(head),
        bytes_in: 0,
        bytes_out: 0,
        unflushed: false,
    };
    let timeouts = (group.read_timeout, send_timeout);
    let clean = body
        .run(cx, client, &mut up.stream, ubuf, &r, timeouts)
        .await
        .map_err(|e| match &body.head {
            // Once the head is sent, all that is left is to close without a clean end.
            None if e.kind != Kind::ClientClosed => e.after_head(r.status),
            _ => e,
        })?;
    count(counters, body.bytes_in, body.bytes_out);
    if r.reusable && clean {
        up.reuse(cx.worker, group);
    }
    Ok(outcome(body.bytes_out, keep_alive))
}

/// Compressed output sent while the upstream still has more waiting, without a flush.
const SEND_AT: usize = 64 * 1024;

/// What a send does to the encoder first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing: only the output it already produced goes out.
    Pending,
    /// Flush, so everything read so far can be decoded (the upstream has paused).
    Flush,
    /// Finish the stream (the body ended).
    End,
}

/// A compressed body streamed as the upstream produces it.
struct Streamed {
    /// `None` once finished.
    encoder: Option<Encoder>,
    chunked: bool,
    /// The head, until it is sent with the first compressed bytes.
    head: Option<ClientHead>,
    bytes_in: u64,
    bytes_out: u64,
    /// Bytes went into the encoder since its last flush.
    unflushed: bool,
}

impl Streamed {
    /// Reads, compresses and sends until the body ends; returns whether the upstream
    /// connection ended cleanly (reusable).
    async fn run(
        &mut self,
        cx: &Ctx<'_>,
        client: &mut Client,
        upstream: &mut Stream,
        ubuf: &mut Vec<u8>,
        r: &Upstream<'_>,
        (read_timeout, send_timeout): (Duration, Duration),
    ) -> Result<bool, Error> {
        let counters = &cx.worker.counters;
        let max = cx.config().limits.max_buffer;
        let mut reader = BodyReader::for_response(r.framing);
        let mut start = r.head_len;
        let (mut eof, mut extra) = (false, false);
        loop {
            let input = &ubuf[start..];
            let mut written = Ok(());
            let taken = reader
                .feed_data(input, |d| {
                    if let (Ok(()), Some(e)) = (&written, self.encoder.as_mut()) {
                        written = e.write(d);
                    }
                    self.bytes_in += d.len() as u64;
                })
                .map_err(|_| Error::new(Kind::BadResponse("invalid chunked framing")))?;
            written.map_err(failed(counters))?;
            self.unflushed |= taken > 0;
            extra |= taken < input.len();
            ubuf.clear();
            start = 0;
            let done = reader.is_done() || eof || extra;
            if !done && upstream.ready_now() {
                // More is waiting: read on, sending what is compressed so far once it is a
                // buffer's worth (a fast upstream must not pile output up in memory).
                if self.pending() >= SEND_AT {
                    self.send(client, Step::Pending, send_timeout, counters)
                        .await?;
                }
                self.read(upstream, ubuf, max, read_timeout, &mut eof, &reader)
                    .await?;
                continue;
            }
            let step = if done { Step::End } else { Step::Flush };
            self.send(client, step, send_timeout, counters).await?;
            if done {
                return Ok(reader.is_done() && !extra && !eof);
            }
            self.read(upstream, ubuf, max, read_timeout, &mut eof, &reader)
                .await?;
        }
    }

    /// Compressed bytes produced and not yet sent.
    fn pending(&mut self) -> usize {
        self.encoder.as_mut().map_or(0, |e| e.output().len())
    }

    /// Reads more of the body; the upstream closing ends an until-close body only.
    async fn read(
        &self,
        upstream: &mut Stream,
        ubuf: &mut Vec<u8>,
        max: usize,
        timeout: Duration,
        eof: &mut bool,
        reader: &BodyReader,
    ) -> Result<(), Error> {
        let n = read_some(upstream, ubuf, max, timeout)
            .await
            .map_err(|e| Error::upstream_io(&e))?;
        if n == 0 {
            if !matches!(reader, BodyReader::UntilClose) {
                return Err(Error::new(Kind::UpstreamFailed));
            }
            *eof = true;
        }
        Ok(())
    }

    /// Flushes (or, at the end, finishes) the encoder and sends what it produced, framed.
    async fn send(
        &mut self,
        client: &mut Client,
        step: Step,
        timeout: Duration,
        counters: &Shard,
    ) -> Result<(), Error> {
        let Some(encoder) = self.encoder.as_mut() else {
            return Ok(());
        };
        let end = step == Step::End;
        let data = match step {
            Step::End => {
                let encoder = self.encoder.take().expect("checked above");
                encoder.finish().map_err(failed(counters))?
            }
            Step::Flush if self.unflushed => {
                encoder.flush().map_err(failed(counters))?;
                self.unflushed = false;
                std::mem::take(encoder.output())
            }
            Step::Flush | Step::Pending => std::mem::take(encoder.output()),
        };
        let head = self.head.take();
        self.bytes_out += data.len() as u64;
        let stream = &mut client.stream;
        send_framed(stream, head.as_ref(), &data, self.chunked, end, timeout).await
    }
}

/// Sends `head` (if any) and a piece of compressed body, as a chunk when `chunked` (with the
/// last chunk when `end`).
pub(super) async fn send_framed(
    stream: &mut Stream,
    head: Option<&ClientHead>,
    data: &[u8],
    chunked: bool,
    end: bool,
    timeout: Duration,
) -> Result<(), Error> {
    let mut size_line = [0u8; 20];
    let (prefix, suffix): (&[u8], &[u8]) = if chunked && !data.is_empty() {
        (chunk_size_line(data.len(), &mut size_line), CHUNK_END)
    } else {
        (&[], &[])
    };
    let last: &[u8] = if end && chunked { LAST_CHUNK } else { &[] };
    send(stream, head, &[prefix, data, suffix, last], timeout).await
}

/// Writes `head` (if any) and the body `parts` (at most five) to the client; nothing is
/// written for empty parts.
pub(super) async fn send(
    stream: &mut Stream,
    head: Option<&ClientHead>,
    parts: &[&[u8]],
    timeout: Duration,
) -> Result<(), Error> {
    let written = match head {
        Some(head) => write_head(stream, head, parts, timeout).await,
        None if parts.iter().all(|p| p.is_empty()) => return Ok(()),
        None => write_all(stream, parts, timeout).await,
    };
    written.map_err(|_| Error::client_write())
}
