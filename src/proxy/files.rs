//! The static-file phase: a request on a static-file route is resolved on its route
//! (`files::lookup`), its response decided (`files::respond`), and sent: a file kept in memory
//! with one `writev`, a larger one as the head plus sendfile(2), multipart ranges part by part.
//! A `try_files` fallback to an upstream group continues in [`super::exchange`], one to a
//! named location in [`super::named`].

use std::time::Instant;

use std::borrow::Cow;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use super::compress::{self, send, send_framed, Decision};
use super::{exchange, Client, Ctx, Outcome, Tried};
use crate::compress::encoder::{compress_whole, Encoder};
use crate::compress::head::{rewrite, CompressedBody};
use crate::compress::Coding;
use crate::error::{Error, Kind};
use crate::files::cache::CachedFile;
use crate::files::listing;
use crate::files::lookup::{Lookup, Refusal, Resolution};
use crate::files::respond::{plan, simple, Body, FileRequest, KeepAlive, Method, Plan};
use crate::http1::Framing as RequestFraming;
use crate::message::ClientHead;
use crate::net::io::{head_bytes, write_all, write_head};
use crate::net::sendfile::{send_file, SendFileError};
use crate::observe::metrics::Counter;

/// Answers a request on the static-file route `index`.
pub(super) async fn serve_files(
    cx: &Ctx<'_>,
    index: usize,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
) -> Result<Outcome, Error> {
    let p = cx.request;
    let (Some(req), Some(route)) = (&p.files, cx.config().file_routes.get(index)) else {
        return Err(Error::new(Kind::NoRoute));
    };
    let lookup = Lookup {
        cache: &cx.worker.files,
        route,
        settings: &cx.config().files,
        now: Instant::now(),
        counters: &cx.worker.counters,
        rewritten: p.rewritten.is_some(),
    };
    // A request body is never read here: the connection then closes after the response.
    let framing = KeepAlive {
        keep_alive: p.keep_alive
            && p.framing == RequestFraming::Empty
            && !cx.worker.shutting_down(),
        http10: req.http10,
    };
    let outcome = match lookup.resolve(&req.target) {
        Resolution::File(entry) => {
            let mut plan = plan(&entry, req, route, framing);
            if let Some(status) = p.status_override {
                // An error page: the file goes out whole under the code it replaces.
                plan.status = status;
                plan.head.status = status;
                crate::http1::response::replace_status_line(&mut plan.head.text, status);
            }
            cx.add_response_fields(&mut plan.head.text, 0);
            if plan.status == 304 && compress::would_compress(cx, &entry) {
                plan.head = rewrite(&plan.head, Some(Coding::Gzip), CompressedBody::NotModified);
            }
            match compress::decide(cx, &plan.head) {
                Decision::Unchanged => send_plan(cx, client, &plan, framing).await?,
                Decision::VaryOnly => {
                    plan.head = rewrite(&plan.head, None, CompressedBody::Chunked);
                    send_plan(cx, client, &plan, framing).await?
                }
                Decision::Compress(coding) => {
                    send_compressed(cx, client, &entry, &plan, coding, framing).await?
                }
            }
        }
        Resolution::Upstream(u) => return exchange::exchange(cx, u, client, buf, tried).await,
        Resolution::Location(route) => {
            return Box::pin(super::named::serve(cx, route, client, buf, tried)).await
        }
        Resolution::Refused(r) => return Err(Error::new(refusal_kind(r))),
        Resolution::Status(404) => return Err(Error::new(Kind::FileNotFound)),
        Resolution::Status(status) => {
            let (head, body) = simple(status, &[], None, req.method, framing);
            send_simple(cx, client, status, head, &body, framing).await?
        }
        Resolution::Redirect(location) => {
            let fields = [("Location", location.as_bytes())];
            let (head, body) = simple(301, &fields, None, req.method, framing);
            send_simple(cx, client, 301, head, &body, framing).await?
        }
        Resolution::Listing { .. } if req.method == Method::Other => {
            let fields = [("Allow", b"GET, HEAD".as_slice())];
            let (head, body) = simple(405, &fields, None, req.method, framing);
            send_simple(cx, client, 405, head, &body, framing).await?
        }
        Resolution::Listing {
            dir,
            uri,
            elsewhere,
        } => {
            let (head, body) = listing_page(&dir, &uri, elsewhere, route, req, framing)?;
            send_simple(cx, client, 200, head, &body, framing).await?
        }
    };
    if outcome.keep_alive {
        buf.drain(..p.head_len.min(buf.len()));
    }
    Ok(outcome)
}

/// A directory's listing, sorted as the query says: JSON when `Accept` asks for it, else the
/// HTML page (its links absolute when it is served `elsewhere`, for another URL), sent with a
/// policy that lets no script run.
fn listing_page(
    dir: &std::fs::File,
    uri: &str,
    elsewhere: bool,
    route: &crate::config::FileRoute,
    req: &FileRequest,
    framing: KeepAlive,
) -> Result<(ClientHead, Vec<u8>), Error> {
    let mut entries = listing::read(dir, route.dotfiles, route.symlinks_out_of_root)
        .map_err(|_| Error::new(Kind::FileFailed))?;
    let query = req.target.split_once('?').map_or("", |(_, q)| q);
    let order = listing::Order::from_query(query);
    listing::sort(&mut entries, order);
    let vary = ("Vary", b"Accept".as_slice());
    if req.accept_json {
        let body = Some((b"application/json".as_slice(), listing::json(&entries)));
        return Ok(simple(200, &[vary], body, req.method, framing));
    }
    let page = listing::html(&entries, uri, order, elsewhere);
    let body = Some((b"text/html; charset=utf-8".as_slice(), page));
    let fields = [vary, ("Content-Security-Policy", listing::PAGE_POLICY)];
    Ok(simple(200, &fields, body, req.method, framing))
}

fn refusal_kind(r: Refusal) -> Kind {
    match r {
        Refusal::BadPath => Kind::BadRequest("invalid path"),
        Refusal::NotFound => Kind::FileNotFound,
        Refusal::Forbidden => Kind::FileForbidden,
        Refusal::Failed => Kind::FileFailed,
    }
}

async fn send_simple(
    cx: &Ctx<'_>,
    client: &mut Client,
    status: u16,
    mut head: ClientHead,
    body: &[u8],
    framing: KeepAlive,
) -> Result<Outcome, Error> {
    let timeout = cx.config().limits.client_body_timeout;
    let status = match cx.request.status_override {
        Some(s) if s != status => {
            head.status = s;
            crate::http1::response::replace_status_line(&mut head.text, s);
            s
        }
        _ => status,
    };
    cx.add_response_fields(&mut head.text, 0);
    write_head(&mut client.stream, &head, &[body], timeout)
        .await
        .map_err(|_| Error::client_write().after_head(status))?;
    Ok(Outcome {
        status,
        body_bytes: body.len() as u64,
        keep_alive: framing.keep_alive,
    })
}

/// Sends a file response as its plan says.
async fn send_plan(
    cx: &Ctx<'_>,
    client: &mut Client,
    plan: &Plan<'_>,
    framing: KeepAlive,
) -> Result<Outcome, Error> {
    let timeout = cx.config().limits.client_body_timeout;
    let rep = plan.representation;
    let stream = &mut client.stream;
    let failed = |e: SendFileError| match e {
        SendFileError::Truncated => Error::new(Kind::FileTruncated).after_head(plan.status),
        SendFileError::Client(_) => Error::client_write().after_head(plan.status),
    };
    let written = |r: std::io::Result<()>| r.map_err(SendFileError::Client).map_err(failed);
    let mut sendfile_bytes = 0;
    match &plan.body {
        Body::Empty => written(write_head(stream, &plan.head, &[], timeout).await)?,
        Body::Text(t) => written(write_head(stream, &plan.head, &[t], timeout).await)?,
        Body::Range { offset, len } => match &rep.memory {
            Some(m) => {
                let part = &m[*offset as usize..(*offset + *len) as usize];
                written(write_head(stream, &plan.head, &[part], timeout).await)?;
            }
            None => {
                let head = head_bytes(stream, &plan.head)
                    .map_err(SendFileError::Client)
                    .map_err(failed)?;
                sendfile_bytes += send_file(stream, head, &rep.file, *offset, *len, timeout)
                    .await
                    .map_err(failed)?;
            }
        },
        Body::Multipart { parts, tail } => {
            written(write_head(stream, &plan.head, &[], timeout).await)?;
            for (head, r) in parts {
                match &rep.memory {
                    Some(m) => {
                        let part = &m[r.start as usize..=r.end as usize];
                        written(write_all(stream, &[head, part], timeout).await)?;
                    }
                    None => {
                        sendfile_bytes +=
                            send_file(stream, head, &rep.file, r.start, r.len(), timeout)
                                .await
                                .map_err(failed)?;
                    }
                }
            }
            written(write_all(stream, &[tail], timeout).await)?;
        }
    }
    if sendfile_bytes > 0 {
        cx.worker
            .counters
            .add(Counter::SendfileBytes, sendfile_bytes);
    }
    Ok(Outcome {
        status: plan.status,
        body_bytes: plan.body.len(),
        keep_alive: framing.keep_alive,
    })
}

/// A failure as one after the head when the head is out (`sent`): the response can then only
/// end early.
fn after_head_if(sent: bool, status: u16) -> impl Fn(Error) -> Error {
    move |e| if sent { e.after_head(status) } else { e }
}

/// The compressed copy of a whole file from the worker's cache, made and kept on a miss.
fn cached_copy(
    cx: &Ctx<'_>,
    entry: &Rc<CachedFile>,
    rep: &crate::files::cache::Representation,
    coding: Coding,
) -> Result<Rc<[u8]>, Error> {
    let (settings, counters) = (&cx.config().compression, &cx.worker.counters);
    let cache = &cx.worker.compressed;
    if let Some(packed) = cache.get(entry, coding) {
        counters.inc(Counter::CompressCacheHits);
        return Ok(packed);
    }
    let data = match &rep.memory {
        Some(m) => Cow::Borrowed(&m[..]),
        None => {
            let mut buf = vec![0; rep.size as usize];
            rep.file
                .read_exact_at(&mut buf, 0)
                .map_err(|_| Error::new(Kind::FileFailed))?;
            Cow::Owned(buf)
        }
    };
    let packed = compress_whole(coding, settings, &data).map_err(compress::failed(counters))?;
    let packed: Rc<[u8]> = packed.into();
    counters.inc(Counter::CompressCacheMisses);
    let stored = cache.put(entry, coding, packed.clone(), settings.static_cache);
    counters.add(Counter::CompressCacheEvictions, stored.evicted);
    Ok(packed)
}

/// Bytes of a large file read (and compressed) at a time.
const FILE_PIECE: usize = 64 * 1024;

/// Sends a whole file compressed with `coding`: from the worker's compressed-file cache when it
/// is small enough to keep (compressed once, then served like a file in memory), otherwise
/// compressed piece by piece as it is sent.
async fn send_compressed(
    cx: &Ctx<'_>,
    client: &mut Client,
    entry: &Rc<CachedFile>,
    plan: &Plan<'_>,
    coding: Coding,
    framing: KeepAlive,
) -> Result<Outcome, Error> {
    let settings = &cx.config().compression;
    let counters = &cx.worker.counters;
    let timeout = cx.config().limits.client_body_timeout;
    let rep = plan.representation;
    // A HEAD request's (an empty file's compressed form is still a body).
    let head_only = cx.request.is_head;
    let failed = |_| Error::new(Kind::FileFailed).after_head(plan.status);
    if rep.size <= settings.static_cache_max_file {
        let packed = cached_copy(cx, entry, rep, coding)?;
        let head = rewrite(
            &plan.head,
            Some(coding),
            CompressedBody::Length(packed.len() as u64),
        );
        let body = if head_only { &[][..] } else { &packed[..] };
        send(&mut client.stream, Some(&head), &[body], timeout).await?;
        compress::count(counters, rep.size, body.len() as u64);
        return Ok(Outcome {
            status: plan.status,
            body_bytes: body.len() as u64,
            keep_alive: framing.keep_alive,
        });
    }
    if head_only {
        let head = rewrite(&plan.head, Some(coding), CompressedBody::Bodiless);
        send(&mut client.stream, Some(&head), &[], timeout).await?;
        return Ok(Outcome {
            status: plan.status,
            body_bytes: 0,
            keep_alive: framing.keep_alive,
        });
    }
    let body_framing = compress::stream_framing(cx);
    let chunked = body_framing == CompressedBody::Chunked;
    let mut head = Some(rewrite(&plan.head, Some(coding), body_framing));
    let mut encoder = Encoder::new(coding, settings).map_err(compress::failed(counters))?;
    let mut piece = vec![0; FILE_PIECE];
    let (mut offset, mut sent) = (0u64, 0u64);
    let truncated = || Error::new(Kind::FileTruncated).after_head(plan.status);
    while offset < rep.size {
        let want = (rep.size - offset).min(FILE_PIECE as u64) as usize;
        let n = rep
            .file
            .read_at(&mut piece[..want], offset)
            .map_err(failed)?;
        if n == 0 {
            counters.inc(Counter::FilesTruncated);
            return Err(truncated());
        }
        offset += n as u64;
        encoder
            .write(&piece[..n])
            .map_err(compress::failed(counters))
            .map_err(after_head_if(head.is_none(), plan.status))?;
        if encoder.output().len() >= FILE_PIECE || offset >= rep.size {
            let data = std::mem::take(encoder.output());
            sent += data.len() as u64;
            let stream = &mut client.stream;
            send_framed(stream, head.take().as_ref(), &data, chunked, false, timeout).await?;
        }
    }
    let data = encoder
        .finish()
        .map_err(compress::failed(counters))
        .map_err(after_head_if(head.is_none(), plan.status))?;
    sent += data.len() as u64;
    let head = head.as_ref();
    send_framed(&mut client.stream, head, &data, chunked, true, timeout).await?;
    compress::count(counters, rep.size, sent);
    Ok(Outcome {
        status: plan.status,
        body_bytes: sent,
        keep_alive: framing.keep_alive && chunked,
    })
}
