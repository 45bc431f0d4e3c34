//! The response cache on the request path (a route with `cache`): a stored response answers
//! when it may (`hit.rs`); otherwise one request per key goes upstream while the others wait
//! for it (the zone's fetch lock), a stale response is validated with its validators, and the
//! upstream's answer is taken by the cache (`capture.rs`); a stale response answers for an
//! upstream that failed when `stale-if-error` or `use_stale` allow it. A success to an unsafe
//! method removes what is stored for its target (RFC 9111 section 4.4). What the request
//! brings is gathered when its head is read (`prepare.rs`).

mod capture;
mod hit;
mod prepare;
mod tee;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

pub(super) use capture::{capture, invalidate_for, store_whole, Fetched, Taken};
pub(super) use hit::put_cache_status;
pub(super) use prepare::{
    answered_here, cache_request, upstream_head_for_cache, upstream_request_for_cache, Asker,
};

use super::{exchange, Client, Ctx, Outcome, Tried};
use crate::cache::entry::Entry;
use crate::cache::{judge, stale_on_error, unix_now, CacheRequest, CacheStatus, Method, Verdict};
use crate::error::{Error, Kind};
use crate::http1::Framing;
use crate::net::Stream;
use crate::routing::UpstreamTarget;

/// Answers a request on a cached route: from the cache, or from upstream through it.
pub(super) async fn serve(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    client: &mut Client,
    buf: &mut Vec<u8>,
    tried: &mut Tried,
    c: &CacheRequest,
) -> Result<Outcome, Error> {
    let zone = &c.rule.zone;
    match c.method {
        Method::Unsafe => {
            // Its answer's head is seen by `capture`, which invalidates on a success.
            c.capture.set(true);
            return exchange::exchange(cx, route, client, buf, tried).await;
        }
        Method::Other => return exchange::exchange(cx, route, client, buf, tried).await,
        Method::Get | Method::Head => {}
    }
    if c.bypass {
        zone.stats.bypass.fetch_add(1, Relaxed);
        c.status.set(Some(CacheStatus::Bypass));
        return fetch(cx, route, (client, buf, tried), c, None).await;
    }
    let mut waited = false;
    loop {
        let now = unix_now();
        let found = zone.lookup(c.hash, &c.key, &c.fields);
        if let Some(entry) = &found {
            if let Some(status) = answers_as_is(c, entry, now) {
                let counter = match status {
                    CacheStatus::Hit => &zone.stats.hit,
                    CacheStatus::Updating => &zone.stats.updating,
                    _ => &zone.stats.stale,
                };
                counter.fetch_add(1, Relaxed);
                // A request with a body (unread) closes its connection after the answer.
                let bodyless = matches!(cx.request.framing, Framing::Empty | Framing::Length(0));
                let answer = (&**entry, status);
                let outcome = match hit::send_entry(cx, client, answer, now, bodyless).await {
                    Err(e) if e.kind == Kind::FileFailed => {
                        // Its file went (a purge, a full disk): fetched again.
                        zone.remove(&c.key);
                        continue;
                    }
                    r => r?,
                };
                if outcome.keep_alive {
                    buf.drain(..cx.request.head_len.min(buf.len()));
                }
                return Ok(outcome);
            }
            if refreshes_in_background(c, entry, now) {
                if let Ok(lock) = zone.begin_fetch(c.hash) {
                    zone.stats.updating.fetch_add(1, Relaxed);
                    *c.fetch.borrow_mut() = Some(lock);
                    let stale = entry.clone();
                    let result = stale_then_refresh(cx, route, (client, buf, tried), c, stale);
                    let result = result.await;
                    c.release();
                    return result;
                }
            }
        } else if c.directives.only_if_cached {
            return Err(Error::new(Kind::NotCached));
        }
        if c.directives.only_if_cached {
            // Stored but not usable as it is: the request allows no upstream.
            return Err(Error::new(Kind::NotCached));
        }
        if !c.rule.lock || waited {
            return fetch(cx, route, (client, buf, tried), c, found).await;
        }
        match zone.begin_fetch(c.hash) {
            Ok(lock) => {
                *c.fetch.borrow_mut() = Some(lock);
                let result = fetch(cx, route, (client, buf, tried), c, found).await;
                c.release();
                return result;
            }
            Err(mut done) => {
                // Another request is fetching this key: its answer is waited for, once.
                waited = true;
                let wait = tokio::time::timeout(c.rule.lock_timeout, done.changed());
                tokio::select! {
                    r = wait => if r.is_err() {
                        zone.stats.lock_timeouts.fetch_add(1, Relaxed);
                    },
                    () = client.stream.hangup() => return Err(Error::new(Kind::ClientClosed)),
                }
            }
        }
    }
}

/// How a stored response answers the request without going upstream, if it does: fresh
/// (`Hit`, or `Stale` when the request allowed staleness), or stale while another request
/// refreshes it (`Updating`: `stale-while-revalidate`, or `use_stale = ["updating"]`).
fn answers_as_is(c: &CacheRequest, entry: &Entry, now: u64) -> Option<CacheStatus> {
    match judge(entry, &c.directives, now) {
        Verdict::Fresh if entry.ttl(now) > 0 => Some(CacheStatus::Hit),
        Verdict::Fresh => Some(CacheStatus::Stale),
        Verdict::StaleUsable if c.rule.zone.fetching(c.hash) => Some(CacheStatus::Updating),
        Verdict::Validate
            if c.rule.use_stale.updating
                && !entry.no_stale
                && !entry.no_cache
                && !c.directives.no_cache
                && c.directives.max_age.is_none()
                && c.rule.zone.fetching(c.hash) =>
        {
            Some(CacheStatus::Updating)
        }
        _ => None,
    }
}

/// Whether a stale `entry` is answered at once and refreshed after: within its
/// `stale-while-revalidate` window, or with `background_update` and `use_stale` `updating`.
fn refreshes_in_background(c: &CacheRequest, entry: &Entry, now: u64) -> bool {
    match judge(entry, &c.directives, now) {
        Verdict::StaleUsable => true,
        Verdict::Validate => {
            let rule = &c.rule;
            rule.background_update
                && rule.use_stale.updating
                && !entry.no_stale
                && !entry.no_cache
                && !c.directives.no_cache
        }
        Verdict::Fresh => false,
    }
}

/// Answers with the stale `entry`, then refreshes it (the client has its answer; the
/// connection's next request waits for the refresh, as with nginx's background update).
async fn stale_then_refresh(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    (client, buf, tried): (&mut Client, &mut Vec<u8>, &mut Tried),
    c: &CacheRequest,
    stale: Arc<Entry>,
) -> Result<Outcome, Error> {
    let bodyless = matches!(cx.request.framing, Framing::Empty | Framing::Length(0));
    let answer = (&*stale, CacheStatus::Updating);
    let mut outcome = hit::send_entry(cx, client, answer, unix_now(), bodyless).await?;
    // The refresh goes on if the client leaves: while it runs, the connection's stream is a
    // quiet stand-in (a client that closes after its answer is the usual case).
    let Ok((stand_in, _other_end)) = tokio::net::UnixStream::pair() else {
        return Ok(outcome);
    };
    let own = std::mem::replace(&mut client.stream, Stream::Unix(stand_in));
    c.background.set(true);
    let refreshed = fetch(cx, route, (client, buf, tried), c, Some(stale)).await;
    c.background.set(false);
    client.stream = own;
    // A refresh that failed may have left the request in the read buffer: the connection
    // closes rather than read it again.
    outcome.keep_alive &= refreshed.is_ok();
    if !outcome.keep_alive {
        buf.clear();
    }
    Ok(outcome)
}

/// Sends the request upstream with its answer taken by the cache; `stale` is the stored
/// response it validates (its validators go with it) and answers instead of a failure when
/// that is allowed.
async fn fetch(
    cx: &Ctx<'_>,
    route: UpstreamTarget,
    (client, buf, tried): (&mut Client, &mut Vec<u8>, &mut Tried),
    c: &CacheRequest,
    stale: Option<Arc<Entry>>,
) -> Result<Outcome, Error> {
    let zone = &c.rule.zone;
    let stale = match stale {
        // A stale body changed on the disk can neither be revalidated nor stand in.
        Some(e) if e.file.is_some() && !check_file(&e).await => {
            zone.remove(&c.key);
            None
        }
        stale => stale,
    };
    let validators = match &stale {
        Some(e) if c.rule.revalidate => e.conditional_fields(),
        _ => Vec::new(),
    };
    *c.validators.borrow_mut() = validators;
    *c.stale.borrow_mut() = stale.clone();
    c.request_time.set(unix_now());
    if c.status.get().is_none() {
        let (status, counter) = match stale {
            Some(_) => (CacheStatus::Expired, &zone.stats.expired),
            None => (CacheStatus::Miss, &zone.stats.miss),
        };
        counter.fetch_add(1, Relaxed);
        c.status.set(Some(status));
    }
    c.capture.set(true);
    let result = exchange::exchange(cx, route, client, buf, tried).await;
    c.capture.set(false);
    let Some(stale) = stale else {
        return result;
    };
    match result {
        Err(e) if !c.committed.get() && e.started.is_none() && stale_allowed(c, &stale, &e) => {
            zone.stats.stale.fetch_add(1, Relaxed);
            // Where the request stands in the read buffer is not known after a failure.
            let answer = (&*stale, CacheStatus::Stale);
            hit::send_entry(cx, client, answer, unix_now(), false).await
        }
        r => r,
    }
}

/// Whether the upstream's failure `e` is answered with the stale response.
fn stale_allowed(c: &CacheRequest, stale: &Entry, e: &Error) -> bool {
    let timeout = matches!(e.kind, Kind::ConnectTimeout | Kind::UpstreamTimeout);
    let upstream = e.kind.side() == crate::error::Side::Upstream;
    if !upstream {
        return false;
    }
    let rule = &c.rule.use_stale;
    let rule_allows = if timeout { rule.timeout } else { rule.error };
    stale_on_error(stale, &c.directives, rule_allows, unix_now())
}

/// Whether an entry's body file is as it was written (see `BodyFile::check`).
async fn check_file(entry: &Entry) -> bool {
    match &entry.file {
        Some(f) => f.check().await,
        None => true,
    }
}
