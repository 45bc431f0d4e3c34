//! A response too large for the memory tier, stored on the disk tier while it is relayed: each
//! read from the upstream goes to the client as it came and, without its framing, to the
//! entry's file; once whole, the file gets its metadata and takes its place in the zone. Memory
//! stays one buffer whatever the size. A client that leaves ends the fill (the file goes); an
//! upstream that ends early ends both.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;

use super::capture::Fetched;
use crate::cache::disk::{on_file, write_trailer, BodyFile};
use crate::cache::entry::{build, Stored};
use crate::cache::freshness::ResponseFacts;
use crate::cache::{CacheRequest, CacheStatus};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::http1::{BodyReader, ChunkedReader, Framing};
use crate::net::io::{read_some, write_all, write_head};
use crate::proxy::{Client, Conn, Ctx, Outcome};

/// What the fill needs beyond the fetched head.
pub(in crate::proxy) struct Fill<'a> {
    pub(in crate::proxy) c: &'a CacheRequest,
    pub(in crate::proxy) facts: &'a ResponseFacts,
    pub(in crate::proxy) lifetime: u64,
    /// When its head came (its age counts from then, not from the end of a slow transfer).
    pub(in crate::proxy) response_time: u64,
}

/// Relays the response and stores it on the disk tier (see the module's comment).
pub(in crate::proxy) async fn relay_and_store(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    (mut up, ubuf): (Conn, &mut Vec<u8>),
    fetched: &Fetched,
    fill: Fill<'_>,
) -> Result<Outcome, Error> {
    let c = fill.c;
    let zone = &c.rule.zone;
    let path = zone.new_file(c.hash).ok_or(Error::new(Kind::FileFailed))?;
    let tmp = path.with_extension("tmp");
    let mut file = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::File::create(&tmp))
        .ok();
    let mut out = fetched.client_head.clone();
    if c.rule.status_field {
        let member = format!(
            "slipstream; fwd=uri-miss; fwd-status={}; stored",
            fetched.status
        );
        super::put_cache_status(&mut out.text, &member);
    }
    c.status.set(Some(CacheStatus::Miss));
    let limits = &cx.config().limits;
    let timeout = limits.client_body_timeout;
    let mut body = Body::new(fetched.framing);
    let first = &ubuf[fetched.head_len..];
    let taken = body.feed(first, &mut file).inspect_err(|_| discard(&tmp))?;
    let sent = write_head(&mut client.stream, &out, &[&first[..taken]], timeout).await;
    if sent.is_err() {
        discard(&tmp);
        return Err(Error::client_write());
    }
    c.committed.set(true);
    let mut sent = taken as u64;
    while !body.done() {
        ubuf.clear();
        let read = read_some(&mut up.stream, ubuf, limits.max_buffer, group.read_timeout).await;
        let n = read.map_err(|e| Error::upstream_io(&e).after_head(fetched.status))?;
        if n == 0 {
            discard(&tmp);
            return Err(Error::new(Kind::UpstreamFailed).after_head(fetched.status));
        }
        let taken = match body.feed(ubuf, &mut file) {
            Ok(n) => n,
            Err(e) => {
                discard(&tmp);
                return Err(e.after_head(fetched.status));
            }
        };
        let written = write_all(&mut client.stream, &[&ubuf[..taken]], timeout).await;
        if written.is_err() {
            discard(&tmp);
            return Err(Error::client_write().after_head(fetched.status));
        }
        sent += taken as u64;
    }
    if fetched.reusable && body.clean_end {
        up.reuse(cx.worker, group);
    }
    if let Some(file) = file {
        finish(
            fill,
            fetched,
            (file, &tmp, path),
            (body.stored, body.hasher.digest()),
        );
    } else {
        discard(&tmp);
    }
    Ok(Outcome {
        status: fetched.status,
        body_bytes: sent,
        keep_alive: fetched.keep_alive,
    })
}

/// Gives the whole file its metadata and its place in the zone.
fn finish(
    fill: Fill<'_>,
    fetched: &Fetched,
    (mut file, tmp, path): (std::fs::File, &std::path::Path, std::path::PathBuf),
    (len, body_hash): (u64, u64),
) {
    let c = fill.c;
    let stored = Stored {
        key: &c.key,
        request_fields: &c.fields,
        request_time: c.request_time.get(),
        response_time: fill.response_time,
        lifetime: fill.lifetime,
        ignore: c.rule.ignore,
    };
    let entry = build(
        &fetched.text,
        fetched.status,
        Bytes::new(),
        fill.facts,
        stored,
    );
    let done = write_trailer(&mut file, &entry, (len, body_hash))
        .and_then(|()| std::fs::rename(tmp, &path));
    if done.is_err() {
        discard(tmp);
        return;
    }
    let entry = on_file(&entry, BodyFile::new(path, len));
    c.rule.zone.store(c.hash, Arc::new(entry));
}

fn discard(tmp: &std::path::Path) {
    let _ = std::fs::remove_file(tmp);
}

/// Where the body ends as it streams past, and its bytes without framing into the file.
struct Body {
    framing: BodyReader,
    chunked: Option<ChunkedReader>,
    /// Bytes written to the file.
    stored: u64,
    /// Their checksum, for the file's metadata.
    hasher: xxhash_rust::xxh3::Xxh3,
    clean_end: bool,
}

impl Body {
    fn new(framing: Framing) -> Body {
        let chunked = (framing == Framing::Chunked).then(ChunkedReader::lenient);
        Body {
            framing: BodyReader::new(framing),
            chunked,
            stored: 0,
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            clean_end: false,
        }
    }

    fn done(&self) -> bool {
        match &self.chunked {
            Some(c) => c.is_done(),
            None => self.framing.is_done(),
        }
    }

    /// Feeds the next bytes: how many belong to the body (all of them are relayed); the
    /// payload goes to `file` (dropped on a write error: the response is then only relayed).
    /// Chunked framing that does not parse fails.
    fn feed(&mut self, bytes: &[u8], file: &mut Option<std::fs::File>) -> Result<usize, Error> {
        let mut stored = 0u64;
        let hasher = &mut self.hasher;
        let mut write = |d: &[u8]| {
            stored += d.len() as u64;
            hasher.update(d);
            if file.as_mut().is_some_and(|f| f.write_all(d).is_err()) {
                *file = None;
            }
        };
        let taken = match &mut self.chunked {
            Some(c) => c.feed(bytes, &mut write),
            None => self.framing.feed(bytes).inspect(|&n| write(&bytes[..n])),
        };
        let taken = taken.map_err(|_| Error::new(Kind::BadResponse("invalid chunked framing")))?;
        self.stored += stored;
        self.clean_end = self.done() && taken == bytes.len();
        Ok(taken)
    }
}
