//! A stored response sent as an answer: to a hit, or just after it was stored. Its head goes
//! through the same writing as an upstream's (hop-by-hop fields, the client's protocol and
//! keep-alive, the route's fields), with its `Age` and `Cache-Status`; the client's
//! conditionals and Range are answered from it (304, 206, 416). A plain hit's head is written
//! once and kept with the entry: later hits copy it and add the two fields that change.

use crate::cache::entry::{Entry, HeadFor, HeadShape};
use crate::cache::{CacheRequest, CacheStatus};

use crate::error::{Error, Kind};
use crate::files::range::{parse_range, Ranges};
use crate::http1::request::header_storage;
use crate::http1::response::{add_fields, parse_response, remove_fields, Relay};
use crate::message::ClientHead;
use crate::net::io::head_bytes;
use crate::net::io::write_head;
use crate::net::sendfile::{send_file, SendFileError};
use crate::observe::metrics::Counter;
use crate::proxy::{Client, Ctx, Outcome};

/// What part of the stored response answers.
enum Form {
    Whole,
    NotModified,
    Part(u64, u64),
    Unsatisfiable,
}

/// Sends `entry` to the client as the answer, `status` saying how it was found; the
/// connection is kept only if `may_keep` (the request was read whole and is out of the read
/// buffer, or will be taken out of it by the caller).
pub(in crate::proxy) async fn send_entry(
    cx: &Ctx<'_>,
    client: &mut Client,
    (entry, status): (&Entry, CacheStatus),
    now: u64,
    may_keep: bool,
) -> Result<Outcome, Error> {
    let p = cx.request;
    let Some(c) = p.cache.as_deref() else {
        return Err(Error::new(Kind::NoRoute));
    };
    // A body on the disk tier is opened before anything is sent: a file purged meanwhile is
    // a miss, not a broken answer.
    let file = match &entry.file {
        Some(f) if !f.check().await => {
            // Its body changed on the disk since it was written: a miss, and the file goes.
            f.doom();
            return Err(Error::new(Kind::FileFailed));
        }
        Some(f) => Some(f.open().map_err(|_| Error::new(Kind::FileFailed))?),
        None => None,
    };
    if c.background.get() {
        // A refresh whose client has its answer already.
        return Ok(Outcome {
            status: entry.status,
            body_bytes: 0,
            keep_alive: true,
        });
    }
    c.status.set(Some(status));
    let form = form(entry, c);
    let keep_alive = may_keep && p.keep_alive && !cx.worker.shutting_down();
    let (mut out, plain) = client_head(cx, entry, &form, status, keep_alive)?;
    if !cx.hides_field("age") {
        let age = entry.times.current_age(now).min(i64::MAX as u64) as i64;
        put_number_field(&mut out.text, b"Age: ", age);
    }
    if c.rule.status_field {
        let ttl = (!c.unstored.get()).then(|| entry.ttl(now));
        match ttl {
            Some(ttl) if plain && unvalidated(status) => {
                put_number_field(&mut out.text, b"Cache-Status: slipstream; hit; ttl=", ttl);
            }
            ttl => put_cache_status(&mut out.text, &status_value(status, ttl, None)),
        }
    }
    let code = out.status;
    let (start, len) = match form {
        _ if p.is_head => (0, 0),
        Form::Whole => (0, entry.body_len()),
        Form::Part(start, end) => (start, end - start + 1),
        Form::NotModified | Form::Unsatisfiable => (0, 0),
    };
    let timeout = cx.config().limits.client_body_timeout;
    let whole = matches!(form, Form::Whole) && !p.is_head;
    let (out, packed) = pack(cx, out, entry, whole)?;
    let mut body_bytes = len;
    let body_file = match (&file, &entry.mem) {
        (Some(file), _) => Some(&**file),
        (None, Some(mem)) => Some(&mem.file),
        (None, None) => None,
    };
    match body_file.filter(|_| len > 0 && packed.is_none()) {
        None => {
            let body = match &packed {
                Some(packed) => &packed[..],
                None => &entry.body[start as usize..(start + len) as usize],
            };
            body_bytes = body.len() as u64;
            write_head(&mut client.stream, &out, &[body], timeout)
                .await
                .map_err(|_| Error::client_write())?;
        }
        Some(file) => {
            let head = head_bytes(&mut client.stream, &out).map_err(|_| Error::client_write())?;
            let sent = send_file(&mut client.stream, head, file, start, len, timeout).await;
            let bytes = sent.map_err(|e| match e {
                SendFileError::Truncated => Error::new(Kind::FileTruncated).after_head(code),
                SendFileError::Client(_) => Error::client_write().after_head(code),
            })?;
            cx.worker.counters.add(Counter::SendfileBytes, bytes);
        }
    }
    Ok(Outcome {
        status: code,
        body_bytes,
        keep_alive,
    })
}

/// A stored body held in memory, compressed on its way when the route compresses and the
/// client accepts it (`whole`: the answer is the whole body; a part, a 304, a HEAD or a body
/// on the disk tier go as they are): the head to send and the compressed body.
fn pack(
    cx: &Ctx<'_>,
    head: ClientHead,
    entry: &Entry,
    whole: bool,
) -> Result<(ClientHead, Option<Vec<u8>>), Error> {
    use crate::compress::head::{rewrite, CompressedBody};
    use crate::proxy::compress::{self, Decision};
    if !whole || entry.file.is_some() {
        return Ok((head, None));
    }
    match compress::decide(cx, &head) {
        Decision::Unchanged => Ok((head, None)),
        Decision::VaryOnly => {
            let length = CompressedBody::Length(entry.body_len());
            Ok((rewrite(&head, None, length), None))
        }
        Decision::Compress(coding) => {
            let body = entry
                .body_bytes()
                .map_err(|_| Error::new(Kind::FileFailed))?;
            let settings = &cx.config().compression;
            let failed = compress::failed(&cx.worker.counters);
            let packed = crate::compress::encoder::compress_whole(coding, settings, &body)
                .map_err(failed)?;
            compress::count(&cx.worker.counters, body.len() as u64, packed.len() as u64);
            let length = CompressedBody::Length(packed.len() as u64);
            Ok((rewrite(&head, Some(coding), length), Some(packed)))
        }
    }
}

/// Which answer the request's conditionals and Range ask of `entry`.
fn form(entry: &Entry, c: &CacheRequest) -> Form {
    if entry.status != 200 || !c.asks_part_or_validation {
        return Form::Whole;
    }
    let field = |name: &'static str| crate::cache::entry::values(&c.fields, name).next();
    if let Some(list) = field("if-none-match") {
        let tag = entry.etag.as_deref().map(String::from_utf8_lossy);
        let hit = tag.is_some_and(|t| crate::files::conditional::matches_any(list, &t, false));
        return if hit {
            Form::NotModified
        } else {
            range(entry, c)
        };
    }
    if let (Some(since), Some(modified)) = (field("if-modified-since"), &entry.last_modified) {
        let parse = crate::cache::freshness::parse_date;
        if let (Some(since), Some(modified)) = (parse(since), parse(modified)) {
            if modified <= since {
                return Form::NotModified;
            }
        }
    }
    range(entry, c)
}

fn range(entry: &Entry, c: &CacheRequest) -> Form {
    let field = |name: &'static str| crate::cache::entry::values(&c.fields, name).next();
    let Some(value) = field("range") else {
        return Form::Whole;
    };
    if let Some(condition) = field("if-range") {
        let condition = condition.trim_ascii();
        let strong_match = !condition.starts_with(b"W/")
            && entry
                .etag
                .as_deref()
                .is_some_and(|t| t == condition && !t.starts_with(b"W/"));
        let date_match = entry.last_modified.as_deref() == Some(condition);
        if !strong_match && !date_match {
            return Form::Whole;
        }
    }
    match parse_range(value, entry.body_len()) {
        Ranges::One(r) => Form::Part(r.start, r.end),
        Ranges::Unsatisfiable => Form::Unsatisfiable,
        Ranges::Whole | Ranges::Many(_) => Form::Whole,
    }
}

/// Whether an answer found as `status` was not validated with the upstream: the stored
/// fields `no-cache="..."` names are not sent, and its `Cache-Status` says `hit`.
fn unvalidated(status: CacheStatus) -> bool {
    matches!(
        status,
        CacheStatus::Hit | CacheStatus::Stale | CacheStatus::Updating
    )
}

/// The client head for `entry` in `form`, without `Age` and `Cache-Status`; and whether it
/// is known to have no `Cache-Status` from upstream. The head of a plain hit (the whole body,
/// not HEAD, fields the route adds that do not change per request) is made once per entry
/// and request shape and kept with the entry; other answers make theirs each time.
fn client_head(
    cx: &Ctx<'_>,
    entry: &Entry,
    form: &Form,
    status: CacheStatus,
    keep_alive: bool,
) -> Result<(ClientHead, bool), Error> {
    let p = cx.request;
    let reusable = matches!(form, Form::Whole)
        && !p.is_head
        && unvalidated(status)
        && cx.added_fields_are_fixed(entry.status);
    if !reusable {
        return Ok((render(cx, entry, form, status, keep_alive)?, false));
    }
    let shape = HeadShape {
        generation: cx.generation(),
        policy: p.routed.policy,
        https: p.https,
        keep_alive,
        minor: p.minor_version,
    };
    if let Some(made) = entry.client_head.load().as_deref() {
        if made.shape == shape {
            // Room for `Age` and `Cache-Status`: the one allocation of the head.
            let mut text = Vec::with_capacity(made.head.text.len() + 80);
            text.extend_from_slice(&made.head.text);
            let head = ClientHead::new(made.head.status, made.head.framing, text);
            return Ok((head, true));
        }
    }
    let head = render(cx, entry, form, status, keep_alive)?;
    if has_cache_status(&head.text) {
        return Ok((head, false));
    }
    let made = HeadFor {
        shape,
        head: head.clone(),
    };
    entry.client_head.store(Some(std::sync::Arc::new(made)));
    Ok((head, true))
}

/// Writes the client head for `entry` in `form`: the stored head through the same writing
/// as an upstream's (hop-by-hop fields, the client's protocol and keep-alive, the route's
/// fields).
fn render(
    cx: &Ctx<'_>,
    entry: &Entry,
    form: &Form,
    status: CacheStatus,
    keep_alive: bool,
) -> Result<ClientHead, Error> {
    let p = cx.request;
    let raw = stored_head(entry, form, status);
    let mut storage = header_storage();
    let max = raw.len() + 1;
    let head = parse_response(&raw, &mut storage, max, p.is_head)
        .ok()
        .flatten()
        .ok_or(Error::new(Kind::BadResponse("stored head")))?;
    let mut text = Vec::with_capacity(raw.len() + 128);
    let framing = head.write_client_head(&mut text, Relay::Pass, keep_alive, p.minor_version);
    cx.hide_upstream_fields(&mut text);
    cx.add_response_fields(&mut text, 0);
    if !cx.hides_field("age") {
        // The answer's own `Age` goes last and wins over one the route adds, as a field the
        // head already has does.
        remove_fields(&mut text, 0, &["age"]);
    }
    Ok(ClientHead::new(head.status, framing, text))
}

/// The stored head in the answer's form.
fn stored_head(entry: &Entry, form: &Form, status: CacheStatus) -> Vec<u8> {
    let mut raw = Vec::with_capacity(entry.head.len() + 64);
    let len = entry.body_len();
    let line_end = entry
        .head
        .iter()
        .position(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    match form {
        Form::Whole => raw.extend_from_slice(&entry.head),
        Form::NotModified => {
            raw.extend_from_slice(b"HTTP/1.1 304 Not Modified\r\n");
            raw.extend_from_slice(&entry.head[line_end..]);
            remove_fields(&mut raw, 0, &["content-length"]);
        }
        Form::Part(start, end) => {
            raw.extend_from_slice(b"HTTP/1.1 206 Partial Content\r\n");
            raw.extend_from_slice(&entry.head[line_end..]);
            remove_fields(&mut raw, 0, &["content-length"]);
            let fields = format!(
                "Content-Range: bytes {start}-{end}/{len}\r\nContent-Length: {}\r\n",
                end - start + 1
            );
            add_fields(&mut raw, 0, fields.as_bytes());
        }
        Form::Unsatisfiable => {
            raw.extend_from_slice(b"HTTP/1.1 416 Range Not Satisfiable\r\n");
            raw.extend_from_slice(&entry.head[line_end..]);
            remove_fields(&mut raw, 0, &["content-length", "content-type"]);
            let fields = format!("Content-Range: bytes */{len}\r\nContent-Length: 0\r\n");
            add_fields(&mut raw, 0, fields.as_bytes());
        }
    }
    if unvalidated(status) && !entry.no_cache_fields.is_empty() {
        let names: Vec<&str> = entry.no_cache_fields.iter().map(String::as_str).collect();
        remove_fields(&mut raw, 0, &names);
    }
    raw
}

/// Adds the field line `prefix` and the number `n` (a head never has the fields this adds:
/// `Age`, this cache's own `Cache-Status`), before the blank line, with no search and no
/// formatting.
fn put_number_field(head: &mut Vec<u8>, prefix: &[u8], n: i64) {
    let mut line = Vec::new();
    let out = if head.ends_with(b"\r\n\r\n") {
        head.truncate(head.len() - 2);
        &mut *head
    } else {
        &mut line
    };
    out.extend_from_slice(prefix);
    if n < 0 {
        out.push(b'-');
    }
    crate::http1::put_decimal(out, n.unsigned_abs());
    out.extend_from_slice(b"\r\n");
    if line.is_empty() {
        head.extend_from_slice(b"\r\n");
    } else {
        add_fields(head, 0, &line);
    }
}

/// Adds a field line the head does not have (a stored head never has `Age`): before its
/// blank line, with no search.
fn append_field(head: &mut Vec<u8>, line: &[u8]) {
    if head.ends_with(b"\r\n\r\n") {
        head.truncate(head.len() - 2);
        head.extend_from_slice(line);
        head.extend_from_slice(b"\r\n");
    } else {
        add_fields(head, 0, line);
    }
}

/// This cache's member of `Cache-Status` (RFC 9211) for an answer found as `status`, with the
/// stored response's freshness left (`ttl`; `None` when the answer was not stored) and the
/// upstream's status when it was asked.
fn status_value(status: CacheStatus, ttl: Option<i64>, fwd_status: Option<u16>) -> String {
    let fwd = |kind: &str| match fwd_status {
        Some(s) => format!("slipstream; fwd={kind}; fwd-status={s}"),
        None => format!("slipstream; fwd={kind}"),
    };
    let stored = |kind: &str| match ttl {
        Some(ttl) => format!("{}; stored; ttl={ttl}", fwd(kind)),
        None => fwd(kind),
    };
    let ttl = ttl.unwrap_or(0);
    match status {
        CacheStatus::Hit | CacheStatus::Stale | CacheStatus::Updating => {
            format!("slipstream; hit; ttl={ttl}")
        }
        CacheStatus::Miss => stored("uri-miss"),
        CacheStatus::Expired => stored("stale"),
        CacheStatus::Revalidated => format!("slipstream; fwd=stale; fwd-status=304; ttl={ttl}"),
        CacheStatus::Bypass => fwd("bypass"),
    }
}

/// Whether the head has a `Cache-Status` (from caches nearer the origin). The usual head has
/// none: a look at each line's first bytes, no parse.
fn has_cache_status(text: &[u8]) -> bool {
    let named = |line: &[u8]| line.len() > 13 && line[..13].eq_ignore_ascii_case(b"cache-status:");
    text.split(|&b| b == b'\n').any(named)
}

/// Adds this cache's member to the head's `Cache-Status` (after any from caches nearer the
/// origin), or the field.
pub(in crate::proxy) fn put_cache_status(text: &mut Vec<u8>, member: &str) {
    let earlier: Vec<u8> = if has_cache_status(text) {
        crate::cache::entry::values(text, "cache-status")
            .flat_map(|v| v.iter().copied().chain(*b", "))
            .collect()
    } else {
        Vec::new()
    };
    if earlier.is_empty() {
        let line = format!("Cache-Status: {member}\r\n");
        return append_field(text, line.as_bytes());
    }
    remove_fields(text, 0, &["cache-status"]);
    let mut line = b"Cache-Status: ".to_vec();
    line.extend_from_slice(&earlier);
    line.extend_from_slice(member.as_bytes());
    line.extend_from_slice(b"\r\n");
    add_fields(text, 0, &line);
}

#[cfg(test)]
mod tests {
    use super::put_cache_status;

    #[test]
    fn cache_status_is_added_after_the_members_of_caches_nearer_the_origin() {
        let mut head = b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n".to_vec();
        put_cache_status(&mut head, "slipstream; hit");
        assert_eq!(
            head,
            b"HTTP/1.1 200 OK\r\nA: 1\r\nCache-Status: slipstream; hit\r\n\r\n"
        );
        let mut head =
            b"HTTP/1.1 200 OK\r\ncache-status: origin; fwd=miss\r\nA: 1\r\n\r\n".to_vec();
        put_cache_status(&mut head, "slipstream; hit");
        assert_eq!(
            head,
            b"HTTP/1.1 200 OK\r\nA: 1\r\nCache-Status: origin; fwd=miss, slipstream; hit\r\n\r\n"
        );
    }
}
