//! An upstream's final response to a request the cache fetched: stored whole and answered
//! from the stored entry; a 304 that freshens the stale entry it validated; a failure status
//! answered with the stale entry when that is allowed; anything else handed back to be relayed
//! as it is (HEAD asked as GET answered with the head alone).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use super::hit::send_entry;
use crate::cache::entry::{self, freshen_head, response_facts, Entry, Stored};
use crate::cache::freshness::lifetime;
use crate::cache::freshness::{storable, RequestFacts};
use crate::cache::{stale_on_error, unix_now, CacheRequest, CacheStatus};
use crate::config::UpstreamGroup;
use crate::error::{Error, Kind};
use crate::http1::{ChunkedReader, Framing};
use crate::proxy::relay::read_whole;
use crate::proxy::{Client, Conn, Ctx};

/// The final response head as the cache needs it.
pub(in crate::proxy) struct Fetched {
    pub(in crate::proxy) status: u16,
    pub(in crate::proxy) head_len: usize,
    pub(in crate::proxy) framing: Framing,
    pub(in crate::proxy) reusable: bool,
    /// The head as HTTP/1.1 text without hop-by-hop fields, framing fields included.
    pub(in crate::proxy) text: Vec<u8>,
    /// The head the client gets when the response is relayed as it came.
    pub(in crate::proxy) client_head: crate::message::ClientHead,
    /// The body's bytes go to the client as they come (no re-framing for an HTTP/1.0 client).
    pub(in crate::proxy) relayed_as_is: bool,
    /// The client connection stays open after it.
    pub(in crate::proxy) keep_alive: bool,
}

/// What became of the response.
pub(in crate::proxy) enum Taken {
    /// The client has its answer (or the failure to answer).
    Answered(Result<crate::proxy::Outcome, Error>),
    /// Not the cache's: relay it as usual.
    Pass(Conn),
}

/// Takes the response for the cache (see the module's comment).
pub(in crate::proxy) async fn capture(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    up: Conn,
    ubuf: &mut Vec<u8>,
    fetched: Fetched,
) -> Taken {
    let Some(c) = cx.request.cache.as_deref() else {
        return Taken::Pass(up);
    };
    if c.method == crate::cache::Method::Unsafe {
        invalidate_for(c, fetched.status, &fetched.text);
        return Taken::Pass(up);
    }
    let now = unix_now();
    if let Some((entry, status)) = from_stale(c, fetched.status, &fetched.text, now) {
        if fetched.status == 304 && fetched.reusable && ubuf.len() == fetched.head_len {
            up.reuse(cx.worker, group);
        }
        return Taken::Answered(send_entry(cx, client, (&entry, status), now, true).await);
    }
    store_and_send(cx, group, client, (up, ubuf), fetched, c).await
}

/// The answer to a request that validates a stale entry, when the upstream's response
/// (`status`, its head as `text`) leaves it to that entry: a 304 freshens it (stored again), a
/// 5xx (or a status `use_stale` lists) is answered by it where `stale-if-error` or `use_stale`
/// allow.
fn from_stale(
    c: &CacheRequest,
    status: u16,
    text: &[u8],
    now: u64,
) -> Option<(Arc<Entry>, CacheStatus)> {
    let stale = c.stale.borrow().clone()?;
    let zone = &c.rule.zone;
    if status == 304 {
        let fresh = Arc::new(freshened(c, &stale, text, now));
        zone.stats.revalidated.fetch_add(1, Relaxed);
        zone.store(c.hash, fresh.clone());
        c.release();
        return Some((fresh, CacheStatus::Revalidated));
    }
    // `stale-if-error` covers 5xx answers; `use_stale` the statuses it lists (nginx's
    // `http_403`, `http_404` and `http_429` too).
    let allowed = c.rule.use_stale.statuses.contains(&status);
    if (status >= 500 || allowed) && stale_on_error(&stale, &c.directives, allowed, now) {
        zone.stats.stale.fetch_add(1, Relaxed);
        return Some((stale, CacheStatus::Stale));
    }
    None
}

/// Stores a fetched response that may be stored (read whole, within `max_object`) and answers
/// from it; passes on one that may not.
async fn store_and_send(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    (mut up, ubuf): (Conn, &mut Vec<u8>),
    fetched: Fetched,
    c: &CacheRequest,
) -> Taken {
    let (zone, now) = (&c.rule.zone, unix_now());
    let facts = response_facts(fetched.status, &fetched.text, c.rule.ignore);
    let request = RequestFacts {
        authorization: c.authorization,
        no_store: c.directives.no_store || c.no_store,
    };
    let decided = storable(&facts, request, &c.rule.fallbacks, now);
    let lifetime = match decided {
        Ok(lifetime) => Some(lifetime),
        Err(_) => {
            zone.stats.not_stored.fetch_add(1, Relaxed);
            if c.stale.borrow().is_some() {
                zone.remove(&c.key);
            }
            // Others waiting for this key need not wait for this answer.
            c.release();
            // The client's Range and conditionals were kept from the upstream: a response not
            // stored whose length is known and within `max_object` is held whole so they
            // apply (nginx relays it whole, 200, unless `proxy_force_ranges`); any other is
            // relayed as it comes (a stream or a long poll is never held back).
            let small = matches!(fetched.framing, Framing::Length(n) if n <= zone.settings.max_object as u64);
            if !small || !asks_what_the_cache_answers(c) {
                return Taken::Pass(up);
            }
            None
        }
    };
    let limit = fetched.head_len + zone.settings.max_object;
    let framing = fetched.framing;
    let timeout = group.read_timeout;
    let whole = match framing {
        Framing::UntilClose => read_to_close(&mut up.stream, ubuf, limit, timeout).await,
        _ => {
            read_whole(
                &mut up.stream,
                ubuf,
                fetched.head_len,
                framing,
                limit,
                timeout,
            )
            .await
        }
    };
    let end = match whole {
        Ok(Some(end)) => end,
        Ok(None) if lifetime.is_some() && goes_to_disk(c, &fetched) => {
            let stored = (&facts, lifetime, now);
            return to_disk(cx, group, client, (up, ubuf), (&fetched, c), stored).await;
        }
        Ok(None) => {
            if lifetime.is_some() {
                zone.stats.too_large.fetch_add(1, Relaxed);
            }
            return Taken::Pass(up);
        }
        Err(e) => return Taken::Answered(Err(e)),
    };
    let Some(body) = decoded(&ubuf[fetched.head_len..end], framing) else {
        return Taken::Answered(Err(Error::new(Kind::BadResponse(
            "invalid chunked framing",
        ))));
    };
    if fetched.reusable && end == ubuf.len() {
        up.reuse(cx.worker, group);
    }
    let entry = match lifetime {
        Some(lifetime) => keep(
            c,
            (fetched.status, &fetched.text),
            body,
            (&facts, lifetime),
            now,
        ),
        None => unstored(c, (fetched.status, &fetched.text), body, facts, now),
    };
    Taken::Answered(send_entry(cx, client, (&entry, miss_kind(c)), now, true).await)
}

/// A response too large for memory goes to the disk tier while it is relayed: the zone has
/// one, the response comes as the upstream sent it with an end of its own, and a client's GET
/// asked for it (not a background refresh).
fn goes_to_disk(c: &CacheRequest, fetched: &Fetched) -> bool {
    c.rule.zone.has_disk()
        && fetched.relayed_as_is
        && fetched.framing != Framing::UntilClose
        && c.method == crate::cache::Method::Get
        && !c.background.get()
}

/// Relays a storable response too large for memory and stores it on the disk tier, once its
/// key was asked for `min_uses` times (before that it is relayed, neither stored nor said to
/// be).
async fn to_disk(
    cx: &Ctx<'_>,
    group: &UpstreamGroup,
    client: &mut Client,
    (up, ubuf): (Conn, &mut Vec<u8>),
    (fetched, c): (&Fetched, &CacheRequest),
    (facts, lifetime, now): (&crate::cache::freshness::ResponseFacts, Option<u64>, u64),
) -> Taken {
    if !c.rule.zone.used_enough(c.hash, c.rule.min_uses) {
        c.unstored.set(true);
        c.release();
        return Taken::Pass(up);
    }
    let fill = super::tee::Fill {
        c,
        facts,
        lifetime: lifetime.unwrap_or(0),
        response_time: now,
    };
    let stored = super::tee::relay_and_store(cx, group, client, (up, ubuf), fetched, fill);
    Taken::Answered(stored.await)
}

/// Stores a whole response (when asked for `min_uses` times) and lets go of the key's fetch
/// lock; the entry it answers from.
fn keep(
    c: &CacheRequest,
    (status, head): (u16, &[u8]),
    body: Bytes,
    (facts, lifetime): (&crate::cache::freshness::ResponseFacts, u64),
    now: u64,
) -> Arc<Entry> {
    let stored = Stored {
        key: &c.key,
        request_fields: &c.fields,
        request_time: c.request_time.get(),
        response_time: now,
        lifetime,
        ignore: c.rule.ignore,
    };
    let entry = entry::build(head, status, body, facts, stored);
    let zone = &c.rule.zone;
    let entry = if zone.used_enough(c.hash, c.rule.min_uses) {
        let entry = Arc::new(entry.held());
        zone.store(c.hash, entry.clone());
        entry
    } else {
        c.unstored.set(true);
        Arc::new(entry)
    };
    c.release();
    entry
}

/// A response that may not be stored, held whole for this one client so its Range and
/// conditionals can be answered: every field it came with is kept (`private` ones too), and
/// nothing is stored.
fn unstored(
    c: &CacheRequest,
    (status, head): (u16, &[u8]),
    body: Bytes,
    mut facts: crate::cache::freshness::ResponseFacts,
    now: u64,
) -> Arc<Entry> {
    facts.directives.private_fields.clear();
    let stored = Stored {
        key: &c.key,
        request_fields: &c.fields,
        request_time: c.request_time.get(),
        response_time: now,
        lifetime: 0,
        ignore: c.rule.ignore,
    };
    c.unstored.set(true);
    c.release();
    Arc::new(entry::build(head, status, body, &facts, stored))
}

/// Whether the client sent what the cache answers itself and kept from the upstream: a
/// Range or a conditional of a GET.
fn asks_what_the_cache_answers(c: &CacheRequest) -> bool {
    c.method == crate::cache::Method::Get
        && ["range", "if-none-match", "if-modified-since"]
            .iter()
            .any(|name| entry::values(&c.fields, name).next().is_some())
}

/// How a fetched answer counts: a miss, or an expired entry fetched again.
fn miss_kind(c: &CacheRequest) -> CacheStatus {
    if c.stale.borrow().is_some() {
        CacheStatus::Expired
    } else {
        CacheStatus::Miss
    }
}

/// The stale entry `stale` brought up to date by a 304's head (RFC 9111 section 4.3.4).
fn freshened(c: &CacheRequest, stale: &Entry, not_modified: &[u8], now: u64) -> Entry {
    let head = freshen_head(&stale.head, not_modified);
    let facts = response_facts(stale.status, &head, c.rule.ignore);
    let stored = Stored {
        key: &c.key,
        request_fields: &c.fields,
        request_time: c.request_time.get(),
        response_time: now,
        lifetime: lifetime(&facts, &c.rule.fallbacks, now).unwrap_or(0),
        ignore: c.rule.ignore,
    };
    let fresh = entry::build(&head, stale.status, stale.body.clone(), &facts, stored);
    match (&stale.file, &stale.mem) {
        // A body on the disk tier stays in its file: the entry takes the new head.
        (Some(file), _) => crate::cache::disk::on_same_file(&fresh, file.clone()),
        // So does one in a memory file.
        (None, Some(mem)) => crate::cache::disk::on_same_memfile(&fresh, mem.clone()),
        (None, None) => fresh,
    }
}

/// The body's bytes without their framing; `None` for chunked framing that does not parse.
fn decoded(framed: &[u8], framing: Framing) -> Option<Bytes> {
    match framing {
        Framing::Chunked => {
            let mut out = Vec::with_capacity(framed.len());
            ChunkedReader::lenient()
                .feed(framed, |d| out.extend_from_slice(d))
                .ok()?;
            Some(Bytes::from(out))
        }
        _ => Some(Bytes::copy_from_slice(framed)),
    }
}

/// Reads a body that ends when the upstream closes, up to `limit` bytes in all: `Some(end)`
/// once it closed within the limit, `None` when it is larger (what was read stays in `buf`).
async fn read_to_close(
    up: &mut crate::net::Stream,
    buf: &mut Vec<u8>,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Option<usize>, Error> {
    loop {
        if buf.len() > limit {
            return Ok(None);
        }
        match crate::net::io::read_some(up, buf, limit + 1, timeout).await {
            Ok(0) => return Ok(Some(buf.len())),
            Ok(_) => {}
            Err(e) => return Err(Error::upstream_io(&e)),
        }
    }
}

/// An unsafe method's answer: a success invalidates its target and the same-origin URLs its
/// head (`head`, HTTP/1.1 text) names, before the client hears of it (its next request may go
/// to another worker at once). Nothing for other methods.
pub(in crate::proxy) fn invalidate_for(c: &CacheRequest, status: u16, head: &[u8]) {
    if c.method != crate::cache::Method::Unsafe || !(200..400).contains(&status) {
        return;
    }
    let zone = &c.rule.zone;
    zone.remove(&c.key);
    for key in &c.stored_as {
        zone.remove(key);
    }
    let named = ["location", "content-location"]
        .iter()
        .filter_map(|name| entry::values(head, name).next())
        .filter_map(|url| c.key_of(url));
    for key in named {
        zone.remove(&key);
    }
}

/// A whole response in hand (a FastCGI script's, as HTTP/1.1 text `head` without framing
/// fields, and its body): stored when it may be, and answered from the stored entry. `None`
/// when it is not the cache's: the caller sends it as usual.
pub(in crate::proxy) async fn store_whole(
    cx: &Ctx<'_>,
    client: &mut Client,
    (status, head): (u16, &[u8]),
    body: Bytes,
) -> Option<Result<crate::proxy::Outcome, Error>> {
    let c = cx.request.cache.as_deref()?;
    let (zone, now) = (&c.rule.zone, unix_now());
    if let Some((entry, status)) = from_stale(c, status, head, now) {
        return Some(send_entry(cx, client, (&entry, status), now, true).await);
    }
    let facts = response_facts(status, head, c.rule.ignore);
    let request = RequestFacts {
        authorization: c.authorization,
        no_store: c.directives.no_store || c.no_store,
    };
    let Ok(lifetime) = storable(&facts, request, &c.rule.fallbacks, now) else {
        zone.stats.not_stored.fetch_add(1, Relaxed);
        if body.len() > zone.settings.max_object || !asks_what_the_cache_answers(c) {
            return None;
        }
        let entry = unstored(c, (status, head), body, facts, now);
        return Some(send_entry(cx, client, (&entry, miss_kind(c)), now, true).await);
    };
    if body.len() > zone.settings.max_object {
        zone.stats.too_large.fetch_add(1, Relaxed);
        return None;
    }
    let entry = keep(c, (status, head), body, (&facts, lifetime), now);
    Some(send_entry(cx, client, (&entry, miss_kind(c)), now, true).await)
}
