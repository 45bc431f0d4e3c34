//! Relaying a FastCGI response: records are read from the upstream buffer as they complete;
//! STDOUT bytes first fill the CGI head, then form the body; STDERR lines go to the error log
//! at a bounded rate; END_REQUEST ends the response. Each batch of records that arrived
//! together is sent with one write. When the whole response came in the first batch (the
//! usual PHP page), the client gets it with a `Content-Length`; otherwise the head is sent with
//! the script's length, or chunked (HTTP/1.1), or to be ended by closing (HTTP/1.0), and the
//! body follows as it comes.

use std::cell::Cell;

use super::send::RESPONSE_BUFFER;
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::fastcgi::cgi::parse_cgi_head;
use crate::fastcgi::record::{parse_record, Record};
use crate::fastcgi::response::{bodiless, put_body, write_head, BodyFraming};
use crate::files::respond::http_date_now;
use crate::http1::request::header_storage;
use crate::http1::LAST_CHUNK;
use crate::net::io::{read_some, write_all};
use crate::net::Address;
use crate::observe::metrics::Counter;
use crate::proxy::{Client, Conn, Ctx, Outcome};

/// Largest CGI head accepted.
const MAX_CGI_HEAD: usize = 64 * 1024;

/// STDERR lines each worker writes to the error log per second; the rest are only counted.
const STDERR_LINES_PER_SECOND: u32 = 20;

/// Where the response is.
enum Stage {
    /// Collecting the CGI head (STDOUT bytes so far in `cgi`).
    Head,
    /// The head is parsed but not sent: its body so far is in `body`.
    Parsed { head_len: usize },
    /// The head went out with this framing; `sent` body bytes since.
    Streaming { framing: BodyFraming, sent: u64 },
}

/// The response being relayed.
struct Relay {
    stage: Stage,
    /// STDOUT bytes until the head is parsed (the head's bytes stay for writing it).
    cgi: Vec<u8>,
    /// Body bytes of the current batch.
    body: Vec<u8>,
    /// END_REQUEST arrived (with its protocol status).
    ended: Option<u8>,
    /// Body bytes in all.
    body_bytes: u64,
}

/// Relays the response whose first bytes are in `ubuf`.
pub(super) async fn relay(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    mut conn: Conn,
    mut ubuf: Vec<u8>,
) -> Result<Outcome, Error> {
    let mut relay = Relay {
        stage: Stage::Head,
        cgi: Vec::new(),
        body: Vec::new(),
        ended: None,
        body_bytes: 0,
    };
    let result = async {
        loop {
            let used = relay.take_records(&ubuf, cx, &conn.server)?;
            ubuf.drain(..used);
            relay.flush(cx, client).await?;
            if relay.ended.is_some() {
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
    let clean = result.is_ok() && ubuf.is_empty() && relay.ended == Some(0);
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
    Ok(Outcome {
        status: status.unwrap_or(200),
        body_bytes: relay.body_bytes,
        keep_alive: keep_alive(cx, framing),
    })
}

/// Whether the client connection stays open after a response with `framing`.
fn keep_alive(cx: &Ctx<'_>, framing: BodyFraming) -> bool {
    cx.request.keep_alive && framing != BodyFraming::Close && !cx.worker.shutting_down()
}

impl Relay {
    /// Takes every complete record at the start of `ubuf`; returns the bytes they took.
    fn take_records(
        &mut self,
        ubuf: &[u8],
        cx: &Ctx<'_>,
        server: &Address,
    ) -> Result<usize, Error> {
        let mut pos = 0;
        while self.ended.is_none() {
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
                    self.ended = Some(protocol_status);
                }
            }
            pos += used;
        }
        Ok(pos)
    }

    /// Takes STDOUT bytes: into the head until it is complete, then into the body.
    fn stdout(&mut self, data: &[u8]) -> Result<(), Error> {
        if !matches!(self.stage, Stage::Head) {
            self.body.extend_from_slice(data);
            return Ok(());
        }
        self.cgi.extend_from_slice(data);
        let mut storage = header_storage();
        let parsed = parse_cgi_head(&self.cgi, &mut storage, MAX_CGI_HEAD).map_err(|e| {
            tracing::warn!("{e}");
            Error::new(Kind::BadResponse("invalid CGI response head"))
        })?;
        if let Some(head) = parsed {
            let head_len = head.head_len;
            self.body.extend_from_slice(&self.cgi[head_len..]);
            self.cgi.truncate(head_len);
            self.stage = Stage::Parsed { head_len };
        }
        Ok(())
    }

    /// The status of the parsed head.
    fn status(&self) -> Option<u16> {
        if matches!(self.stage, Stage::Head) {
            return None;
        }
        let mut storage = header_storage();
        match parse_cgi_head(&self.cgi, &mut storage, MAX_CGI_HEAD) {
            Ok(Some(head)) => Some(head.status),
            _ => None,
        }
    }

    /// Sends what the batch produced: the head once its framing can be chosen, and the body.
    async fn flush(&mut self, cx: &Ctx<'_>, client: &mut Client) -> Result<(), Error> {
        let p = cx.request;
        let timeout = cx.config().limits.client_body_timeout;
        let mut out = Vec::new();
        match self.stage {
            Stage::Head if self.ended.is_some() => {
                return Err(Error::new(Kind::BadResponse(
                    "FastCGI response without a head",
                )));
            }
            Stage::Head => return Ok(()),
            Stage::Parsed { head_len } => {
                let mut storage = header_storage();
                let Ok(Some(head)) = parse_cgi_head(&self.cgi, &mut storage, head_len) else {
                    return Err(Error::new(Kind::BadResponse("invalid CGI response head")));
                };
                let framing = if bodiless(head.status, p.is_head) {
                    BodyFraming::None
                } else if self.ended.is_some() {
                    BodyFraming::Length(self.body.len() as u64)
                } else if let Some(n) = head.content_length {
                    BodyFraming::Length(n)
                } else if p.minor_version == 1 {
                    BodyFraming::Chunked
                } else {
                    BodyFraming::Close
                };
                let keep = keep_alive(cx, framing);
                out.reserve(head_len + 128 + self.body.len());
                write_head(
                    &mut out,
                    &head,
                    framing,
                    keep,
                    p.minor_version,
                    &http_date_now(),
                );
                self.stage = Stage::Streaming { framing, sent: 0 };
            }
            Stage::Streaming { .. } => {}
        }
        let Stage::Streaming { framing, sent } = &mut self.stage else {
            return Ok(());
        };
        let mut body: &[u8] = &self.body;
        if let BodyFraming::Length(n) = *framing {
            // Never more than the head announced.
            body = &body[..body.len().min((n - *sent) as usize)];
        }
        put_body(&mut out, body, *framing);
        if framing != &BodyFraming::None {
            *sent += body.len() as u64;
            self.body_bytes += body.len() as u64;
        }
        let done = self.ended.is_some();
        if done && *framing == BodyFraming::Chunked {
            out.extend_from_slice(LAST_CHUNK);
        }
        let short = matches!(*framing, BodyFraming::Length(n) if done && *sent < n);
        self.body.clear();
        if !out.is_empty() {
            write_all(&mut client.stream, &[&out], timeout)
                .await
                .map_err(|_| Error::client_write())?;
        }
        if short {
            return Err(Error::new(Kind::BadResponse(
                "FastCGI body shorter than its Content-Length",
            )));
        }
        Ok(())
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
