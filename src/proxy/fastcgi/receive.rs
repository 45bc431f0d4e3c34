//! Relaying a FastCGI response: records are read from the upstream buffer as they complete;
//! STDOUT bytes first fill the CGI head, then form the body; STDERR lines go to the error log
//! at a bounded rate; END_REQUEST ends the response. Each batch of records that arrived
//! together is sent with one write. When the whole response came in the first batch (the
//! usual PHP page), the client gets it with a `Content-Length`; otherwise the head is sent with
//! the script's length, or chunked (HTTP/1.1), or to be ended by closing (HTTP/1.0), and the
//! body follows as it comes.

use std::cell::Cell;

use super::send::RESPONSE_BUFFER;
use crate::compress::encoder::{compress_whole, Encoder};
use crate::compress::head::{rewrite, CompressedBody};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::fastcgi::cgi::{cgi_storage, parse_cgi_head};
use crate::fastcgi::record::{parse_record, Record};
use crate::fastcgi::response::{bodiless, write_head};
use crate::files::respond::http_date_now;
use crate::http1::{chunk_size_line, LAST_CHUNK};
use crate::message::{ClientHead, Framing};
use crate::net::io::{read_some, write_all};
use crate::net::Address;
use crate::observe::metrics::Counter;
use crate::proxy::compress::{self, Decision};
use crate::proxy::{Client, Conn, Ctx, Outcome};

/// Bodies up to this size are copied behind the head and sent with it as one buffer.
const SMALL_BODY: usize = 16 * 1024;

/// Largest CGI head accepted.
const MAX_CGI_HEAD: usize = 64 * 1024;

/// STDERR lines each worker writes to the error log per second; the rest are only counted.
const STDERR_LINES_PER_SECOND: u32 = 20;

/// Where the response is.
enum Stage {
    /// Collecting the CGI head (STDOUT bytes so far in `cgi`).
    Head,
    /// The head (the first `head_len` bytes of `cgi`) is parsed but not sent; the body so far
    /// follows it in `cgi`.
    Parsed { head_len: usize, status: u16 },
    /// The head went out with this framing; `sent` body bytes since.
    Streaming {
        framing: Framing,
        sent: u64,
        status: u16,
    },
}

/// The response being relayed.
struct CgiResponse {
    stage: Stage,
    /// STDOUT bytes until the head is sent: the CGI head, then the first body bytes.
    cgi: Vec<u8>,
    /// Body bytes of the current batch once the head is sent.
    body: Vec<u8>,
    /// END_REQUEST arrived (a status other than complete is an error before this is set).
    ended: bool,
    /// Body bytes in all.
    body_bytes: u64,
    /// The body's compression, when the route compresses and the response benefits.
    packing: Option<Packing>,
}

/// A FastCGI body being compressed: whole (`encoder` is `None` and `out` holds it all) or
/// streamed.
struct Packing {
    encoder: Option<Encoder>,
    /// Compressed bytes of the current batch.
    out: Vec<u8>,
    /// Body bytes that went in.
    bytes_in: u64,
}

/// Relays the response whose first bytes are in `ubuf`.
pub(super) async fn relay(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    mut conn: Conn,
    mut ubuf: Vec<u8>,
) -> Result<Outcome, Error> {
    let mut relay = CgiResponse {
        stage: Stage::Head,
        cgi: Vec::new(),
        body: Vec::new(),
        ended: false,
        body_bytes: 0,
        packing: None,
    };
    let fills_cache = cx
        .request
        .cache
        .as_ref()
        .is_some_and(|c| c.capture.get() && matches!(c.method, crate::cache::Method::Get));
    if fills_cache {
        let whole = collect(cx, group, (&mut conn, &mut ubuf), &mut relay).await?;
        if whole && ubuf.is_empty() {
            if let Some(answered) = store(cx, client, &relay).await {
                conn.reuse(cx.worker, group);
                cx.worker.buffers.give(ubuf, RESPONSE_BUFFER);
                return answered;
            }
        }
        if cx
            .request
            .cache
            .as_ref()
            .is_some_and(|c| c.background.get())
        {
            // A refresh the cache cannot keep: its client has its answer already.
            cx.worker.buffers.give(ubuf, RESPONSE_BUFFER);
            let status = relay.status().unwrap_or(200);
            return Ok(Outcome {
                status,
                body_bytes: 0,
                keep_alive: true,
            });
        }
        // Not the cache's (or larger than it keeps): it goes on from what was collected.
    }
    let result = async {
        loop {
            let used = relay.take_records(&ubuf, cx, &conn.server)?;
            ubuf.drain(..used);
            relay.flush(cx, client).await?;
            if relay.ended {
                return Ok(());
            }
            let read = read_some(
                &mut conn.stream,
                &mut ubuf,
                RESPONSE_BUFFER,
                group.read_timeout,
            );
            match read.await {
                Ok(0) => return Err(Error::new(Kind::BadResponse("FastCGI response cut short"))),
                Ok(_) => {}
                Err(e) => return Err(Error::upstream_io(&e)),
            }
        }
    }
    .await;
    let clean = result.is_ok() && ubuf.is_empty() && relay.ended;
    cx.worker
        .buffers
        .give(std::mem::take(&mut ubuf), RESPONSE_BUFFER);
    let status = relay.status();
    if let Err(e) = result {
        return Err(match (relay.stage, status) {
            (Stage::Streaming { .. }, Some(status)) if e.kind != Kind::ClientClosed => {
                e.after_head(status)
            }
            _ => e.no_retry(),
        });
    }
    let Stage::Streaming { framing, .. } = relay.stage else {
        return Err(Error::new(Kind::BadResponse(
            "FastCGI response without a head",
        )));
    };
    if clean {
        conn.reuse(cx.worker, group);
    }
    if let Some(p) = &relay.packing {
        compress::count(&cx.worker.counters, p.bytes_in, relay.body_bytes);
    }
    Ok(Outcome {
        status: status.unwrap_or(200),
        body_bytes: relay.body_bytes,
        keep_alive: keep_alive(cx, framing),
    })
}

/// Collects a response for the cache, without sending anything: true once it ended within
/// the zone's `max_object`, false when it grew past it (what came stays in `relay`, to be
/// relayed as usual).
async fn collect(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    (conn, ubuf): (&mut Conn, &mut Vec<u8>),
    relay: &mut CgiResponse,
) -> Result<bool, Error> {
    let limit = cx
        .request
        .cache
        .as_ref()
        .map_or(0, |c| c.rule.zone.settings.max_object)
        + MAX_CGI_HEAD;
    loop {
        let used = relay.take_records(ubuf, cx, &conn.server)?;
        ubuf.drain(..used);
        if relay.ended {
            return Ok(true);
        }
        if relay.cgi.len() > limit {
            return Ok(false);
        }
        let read = read_some(&mut conn.stream, ubuf, RESPONSE_BUFFER, group.read_timeout);
        match read.await {
            Ok(0) => return Err(Error::new(Kind::BadResponse("FastCGI response cut short"))),
            Ok(_) => {}
            Err(e) => return Err(Error::upstream_io(&e)),
        }
    }
}

/// Offers a whole collected response to the cache: its head as HTTP/1.1 text and its body.
async fn store(
    cx: &Ctx<'_>,
    client: &mut Client,
    relay: &CgiResponse,
) -> Option<Result<Outcome, Error>> {
    let Stage::Parsed { head_len, status } = relay.stage else {
        return None;
    };
    if super::super::error_page::intercepts(cx, status) {
        // Its error page answers instead: the usual path replaces it.
        return None;
    }
    let mut storage = cgi_storage();
    let head = parse_cgi_head(&relay.cgi[..head_len], &mut storage, head_len).ok()??;
    let body = &relay.cgi[head_len..];
    let framing = if bodiless(status, false) {
        Framing::Empty
    } else {
        Framing::Length(body.len() as u64)
    };
    let mut text = Vec::with_capacity(head_len + 64);
    write_head(&mut text, &head, framing, true, 1, &http_date_now());
    let body = bytes::Bytes::copy_from_slice(body);
    crate::proxy::cache::store_whole(cx, client, (status, &text), body).await
}

/// Whether the client connection stays open after a response with `framing`.
fn keep_alive(cx: &Ctx<'_>, framing: Framing) -> bool {
    cx.request.keep_alive && framing != Framing::UntilClose && !cx.worker.shutting_down()
}

impl CgiResponse {
    /// Takes every complete record at the start of `ubuf`; returns the bytes they took.
    fn take_records(
        &mut self,
        ubuf: &[u8],
        cx: &Ctx<'_>,
        server: &Address,
    ) -> Result<usize, Error> {
        let mut pos = 0;
        while !self.ended {
            let parsed = parse_record(&ubuf[pos..]).map_err(|e| {
                tracing::warn!(%server, "{e}");
                Error::new(Kind::BadResponse("malformed FastCGI record"))
            })?;
            let Some((record, used)) = parsed else { break };
            match record {
                Record::Stdout { start, len } => {
                    self.stdout(&ubuf[pos + start..pos + start + len])?;
                }
                Record::Stderr { start, len } => {
                    log_stderr(cx, server, &ubuf[pos + start..pos + start + len]);
                }
                Record::End {
                    protocol_status, ..
                } => {
                    if protocol_status != 0 {
                        tracing::warn!(%server, protocol_status, "FastCGI request refused");
                        return Err(Error::new(Kind::BadResponse(
                            "FastCGI server refused the request (overloaded or no multiplexing)",
                        )));
                    }
                    self.ended = true;
                }
            }
            pos += used;
        }
        Ok(pos)
    }

    /// Takes STDOUT bytes: the head until it is complete, then the body (kept after the head
    /// until the head is sent).
    fn stdout(&mut self, data: &[u8]) -> Result<(), Error> {
        match self.stage {
            Stage::Streaming { .. } => {
                self.body.extend_from_slice(data);
                return Ok(());
            }
            Stage::Parsed { .. } => {
                self.cgi.extend_from_slice(data);
                return Ok(());
            }
            Stage::Head => self.cgi.extend_from_slice(data),
        }
        let mut storage = cgi_storage();
        let parsed = parse_cgi_head(&self.cgi, &mut storage, MAX_CGI_HEAD).map_err(|e| {
            tracing::warn!("{e}");
            Error::new(Kind::BadResponse("invalid CGI response head"))
        })?;
        if let Some(head) = parsed {
            self.stage = Stage::Parsed {
                head_len: head.head_len,
                status: head.status,
            };
        }
        Ok(())
    }

    /// The status of the parsed head.
    fn status(&self) -> Option<u16> {
        match self.stage {
            Stage::Head => None,
            Stage::Parsed { status, .. } | Stage::Streaming { status, .. } => Some(status),
        }
    }

    /// Sends what the batch produced: the head once its framing can be chosen, and the body.
    async fn flush(&mut self, cx: &Ctx<'_>, client: &mut Client) -> Result<(), Error> {
        let timeout = cx.config().limits.client_body_timeout;
        // The head, the first time: as bytes written with the body's first bytes, or handed
        // to a stream that takes it as a value.
        let mut out = Vec::new();
        let first = match self.stage {
            Stage::Head if self.ended => {
                return Err(Error::new(Kind::BadResponse(
                    "FastCGI response without a head",
                )));
            }
            Stage::Head => return Ok(()),
            Stage::Parsed { head_len, status } => {
                let mut head = self.start(cx, head_len, status)?;
                let taken = client.stream.send_head(&head);
                if !taken.map_err(|_| Error::client_write())? {
                    out = std::mem::take(&mut head.text);
                }
                head_len
            }
            Stage::Streaming { .. } => 0,
        };
        self.compress_batch(cx, first)?;
        let Stage::Streaming { framing, sent, .. } = &mut self.stage else {
            return Ok(());
        };
        // Body bytes: compressed, or after the head in `cgi` the first time, then in `body`.
        let mut body: &[u8] = match &self.packing {
            Some(p) => &p.out,
            None if first > 0 => &self.cgi[first..],
            None => &self.body,
        };
        if let Framing::Length(n) = *framing {
            // Never more than the head announced.
            body = &body[..body.len().min((n - *sent) as usize)];
        }
        let mut size_line = [0u8; 20];
        let (before, after): (&[u8], &[u8]) = match *framing {
            Framing::Empty => (&[], &[]),
            Framing::Chunked if body.is_empty() => (&[], &[]),
            Framing::Chunked => (chunk_size_line(body.len(), &mut size_line), b"\r\n"),
            Framing::Length(_) | Framing::UntilClose => (&[], &[]),
        };
        if *framing == Framing::Empty {
            body = &[];
        }
        *sent += body.len() as u64;
        self.body_bytes += body.len() as u64;
        let done = self.ended;
        let last: &[u8] = if done && *framing == Framing::Chunked {
            LAST_CHUNK
        } else {
            &[]
        };
        let short = matches!(*framing, Framing::Length(n) if done && *sent < n);
        // A small response goes out as one buffer: send(2) costs less than writev(2).
        let whole = !out.is_empty() && body.len() <= SMALL_BODY;
        if whole {
            for part in [before, body, after, last] {
                out.extend_from_slice(part);
            }
        }
        let parts = if whole {
            [out.as_slice(), &[], &[], &[], &[]]
        } else {
            [out.as_slice(), before, body, after, last]
        };
        if parts.iter().any(|p| !p.is_empty()) {
            write_all(&mut client.stream, &parts, timeout)
                .await
                .map_err(|_| Error::client_write())?;
        }
        self.body.clear();
        if let Some(p) = &mut self.packing {
            p.out.clear();
        }
        if first > 0 {
            self.cgi.clear();
        }
        if short {
            return Err(Error::new(Kind::BadResponse(
                "FastCGI body shorter than its Content-Length",
            )));
        }
        Ok(())
    }

    /// Feeds this batch's body bytes (after the head in `cgi` the first time, then in `body`)
    /// to the encoder of a response compressed as it streams; what it gives waits in
    /// `packing.out`, all of it once the response has ended.
    fn compress_batch(&mut self, cx: &Ctx<'_>, first: usize) -> Result<(), Error> {
        let Some(p) = &mut self.packing else {
            return Ok(());
        };
        let Some(encoder) = &mut p.encoder else {
            return Ok(());
        };
        let body: &[u8] = if first > 0 {
            &self.cgi[first..]
        } else {
            &self.body
        };
        p.bytes_in += body.len() as u64;
        let failed = compress::failed(&cx.worker.counters);
        if !body.is_empty() {
            encoder.write(body).map_err(&failed)?;
        }
        if self.ended {
            p.out = p
                .encoder
                .take()
                .map_or(Ok(Vec::new()), Encoder::finish)
                .map_err(failed)?;
        } else if !body.is_empty() {
            encoder.flush().map_err(failed)?;
            p.out = std::mem::take(encoder.output());
        }
        Ok(())
    }

    /// The client's head, choosing the framing: the whole body's length when END_REQUEST came
    /// with it, else the script's length, else chunked or until close.
    fn start(&mut self, cx: &Ctx<'_>, head_len: usize, status: u16) -> Result<ClientHead, Error> {
        let p = cx.request;
        let mut storage = cgi_storage();
        let Ok(Some(head)) = parse_cgi_head(&self.cgi[..head_len], &mut storage, head_len) else {
            return Err(Error::new(Kind::BadResponse("invalid CGI response head")));
        };
        let framing = if bodiless(status, p.is_head) {
            Framing::Empty
        } else if self.ended {
            Framing::Length((self.cgi.len() - head_len) as u64)
        } else if let Some(n) = head.content_length {
            Framing::Length(n)
        } else if p.minor_version == 1 {
            Framing::Chunked
        } else {
            Framing::UntilClose
        };
        let keep = keep_alive(cx, framing);
        if super::super::error_page::intercepts(cx, status) {
            return Err(Error::new(Kind::Replaced(status)));
        }
        // An error page goes out with the code it replaces (unless its entry says otherwise).
        let status = p.status_override.unwrap_or(status);
        let mut text = Vec::with_capacity(head_len + 128);
        write_head(
            &mut text,
            &head,
            framing,
            keep,
            p.minor_version,
            &http_date_now(),
        );
        if status != head.status {
            crate::http1::response::replace_status_line(&mut text, status);
        }
        if let Some(c) = &p.cache {
            crate::proxy::cache::invalidate_for(c, status, &text);
        }
        cx.hide_upstream_fields(&mut text);
        cx.add_response_fields(&mut text, 0);
        let head = self.pack(cx, head_len, ClientHead::new(status, framing, text))?;
        self.stage = Stage::Streaming {
            framing: head.framing,
            sent: 0,
            status,
        };
        Ok(head)
    }
}

impl CgiResponse {
    /// Compresses the body when the route and the response call for it: returns the head
    /// to send instead of `head`, its framing the body's.
    fn pack(
        &mut self,
        cx: &Ctx<'_>,
        head_len: usize,
        head: ClientHead,
    ) -> Result<ClientHead, Error> {
        let coding = match compress::decide(cx, &head) {
            Decision::Unchanged => return Ok(head),
            Decision::VaryOnly => return Ok(rewrite(&head, None, CompressedBody::Chunked)),
            Decision::Compress(coding) => coding,
        };
        let settings = &cx.config().compression;
        let failed = compress::failed(&cx.worker.counters);
        // The body's framing is the rewritten head's.
        let (packing, body) = if head.framing == Framing::Empty {
            (None, CompressedBody::Bodiless)
        } else if self.ended {
            // The whole body is here: compressed in one go, sent with its length.
            let body = &self.cgi[head_len..];
            let packed = compress_whole(coding, settings, body).map_err(failed)?;
            let n = packed.len() as u64;
            let packing = Packing {
                encoder: None,
                bytes_in: body.len() as u64,
                out: packed,
            };
            (Some(packing), CompressedBody::Length(n))
        } else {
            let encoder = Encoder::new(coding, settings).map_err(failed)?;
            let packing = Packing {
                encoder: Some(encoder),
                out: Vec::new(),
                bytes_in: 0,
            };
            (Some(packing), compress::stream_framing(cx))
        };
        let head = rewrite(&head, Some(coding), body);
        self.packing = packing;
        Ok(head)
    }
}

thread_local! {
    /// This worker's STDERR budget: the second it is for and the lines logged in it.
    static STDERR_BUDGET: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// Writes the application's STDERR lines to the error log, at most
/// [`STDERR_LINES_PER_SECOND`] per worker; every line is counted.
fn log_stderr(cx: &Ctx<'_>, server: &Address, data: &[u8]) {
    let counters = &cx.worker.counters;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for line in data
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
        counters.inc(Counter::FastcgiStderrLines);
        let allowed = STDERR_BUDGET.with(|b| {
            let (second, used) = b.get();
            let used = if second == now { used } else { 0 };
            b.set((now, used + 1));
            used < STDERR_LINES_PER_SECOND
        });
        if allowed {
            let line = String::from_utf8_lossy(line.trim_ascii());
            tracing::warn!(%server, "FastCGI stderr: {line}");
        } else {
            counters.inc(Counter::FastcgiStderrNotLogged);
        }
    }
}
