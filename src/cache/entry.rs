//! One stored response, socket-free: its head as HTTP/1.1 text without framing or hop-by-hop
//! fields (read again to answer, so an answer goes through the same head writing as a
//! response from upstream; the head a plain hit sends is kept with it once made), its body
//! whole, what its freshness and age need, and the request field values its `Vary` selected.

use bytes::Bytes;

use super::control::Directives;
use super::freshness::{parse_age, parse_date, ResponseFacts, Times};

/// A stored response.
#[derive(Debug)]
pub struct Entry {
    /// The cache key it was stored under (checked on every lookup: keys are found by hash).
    pub key: Box<str>,
    /// `HTTP/1.1 STATUS REASON\r\n`, the stored fields, `Content-Length: N\r\n\r\n`.
    pub head: Vec<u8>,
    /// Its status.
    pub status: u16,
    /// Its body, when held in memory.
    pub body: Bytes,
    /// Its body's file, when it is on the disk tier (then `body` is empty).
    pub file: Option<std::sync::Arc<super::disk::BodyFile>>,
    /// Its body's memory file, when it is large and in the memory tier (then `body` is empty).
    pub mem: Option<std::sync::Arc<super::memfile::MemFile>>,
    /// What its age is computed from.
    pub times: Times,
    /// Its freshness lifetime in seconds.
    pub lifetime: u64,
    /// The fields its `Vary` names (lower case) with the values the request that got it sent
    /// (normalised, [`vary_value`]); `None` for a field the request did not send.
    pub vary: Vec<(Box<str>, Option<Vec<u8>>)>,
    /// Its `ETag`, as sent.
    pub etag: Option<Vec<u8>>,
    /// Its `Last-Modified`, as sent.
    pub last_modified: Option<Vec<u8>>,
    /// `no-cache`: validated before every use.
    pub no_cache: bool,
    /// `no-cache="A"`: fields not sent from it unvalidated (lower case).
    pub no_cache_fields: Vec<String>,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage`: never served stale.
    pub no_stale: bool,
    /// `stale-while-revalidate` seconds.
    pub stale_while_revalidate: u64,
    /// `stale-if-error` seconds.
    pub stale_if_error: u64,
    /// The client head its plain hits send, made by the first of them (see
    /// `proxy/cache/hit.rs`): without it each hit would parse and write the stored head again.
    pub client_head: arc_swap::ArcSwapOption<HeadFor>,
}

/// A client head made from an entry, and the request shape it was made for: a hit of
/// another shape makes its own.
#[derive(Debug)]
pub struct HeadFor {
    /// What the head depends on besides the entry.
    pub shape: HeadShape,
    /// The head, up to its blank line, without `Age` and `Cache-Status` (they change).
    pub head: crate::message::ClientHead,
}

/// What a hit's client head depends on besides the entry: the config generation (a reload
/// changes the fields routes add and hide), the route's field policy, the scheme, whether
/// the connection is kept and the client's HTTP minor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShape {
    /// The config generation.
    pub generation: u64,
    /// The route's field policy.
    pub policy: Option<u16>,
    /// Whether the request came over TLS.
    pub https: bool,
    /// Whether the connection is kept after the answer.
    pub keep_alive: bool,
    /// The client's HTTP/1 minor version.
    pub minor: u8,
}

impl Entry {
    /// Bytes it costs in memory, about (weighed when it is stored).
    pub fn weight(&self) -> usize {
        let held = self.mem.as_ref().map_or(0, |m| m.len as usize);
        // The head counts twice: the client head its hits keep is about its size.
        self.key.len() + 2 * self.head.len() + self.body.len() + held + 256
    }

    /// Bytes it costs on disk (0 for a body in memory).
    pub fn disk_weight(&self) -> u64 {
        self.file
            .as_ref()
            .map_or(0, |f| f.len + self.head.len() as u64 + 256)
    }

    /// Its body's length, wherever it is.
    pub fn body_len(&self) -> u64 {
        match (&self.file, &self.mem) {
            (Some(f), _) => f.len,
            (None, Some(m)) => m.len,
            (None, None) => self.body.len() as u64,
        }
    }

    /// Its body's bytes, when it is in memory (on the heap or in a memory file).
    pub fn body_bytes(&self) -> std::io::Result<std::borrow::Cow<'_, [u8]>> {
        match &self.mem {
            Some(m) => m.bytes().map(std::borrow::Cow::Owned),
            None => Ok(std::borrow::Cow::Borrowed(&self.body)),
        }
    }

    /// This entry with its body moved to a memory file when it is large enough
    /// ([`super::memfile::MemFile::hold`]), so its hits go out with sendfile.
    pub fn held(mut self) -> Entry {
        if self.file.is_none() && self.mem.is_none() {
            if let Some(m) = super::memfile::MemFile::hold(&self.body) {
                self.mem = Some(std::sync::Arc::new(m));
                self.body = Bytes::new();
            }
        }
        self
    }

    /// Seconds it has left to be fresh at `now` (negative once stale).
    pub fn ttl(&self, now: u64) -> i64 {
        let age = self.times.current_age(now);
        self.lifetime as i64 - age.min(i64::MAX as u64) as i64
    }

    /// Whether the request's values of the fields its `Vary` names are the ones it was stored
    /// for.
    pub fn matches(&self, request_fields: &[u8]) -> bool {
        self.vary
            .iter()
            .all(|(name, value)| vary_value(request_fields, name).as_deref() == value.as_deref())
    }

    /// Its validators as request fields (`If-None-Match`, `If-Modified-Since`).
    pub fn conditional_fields(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(tag) = &self.etag {
            out.extend_from_slice(b"If-None-Match: ");
            out.extend_from_slice(tag);
            out.extend_from_slice(b"\r\n");
        }
        if let Some(date) = &self.last_modified {
            out.extend_from_slice(b"If-Modified-Since: ");
            out.extend_from_slice(date);
            out.extend_from_slice(b"\r\n");
        }
        out
    }
}

/// Field lines of a head (`Name: value\r\n` after the status line), as (name, value).
pub fn fields(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    head.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

/// Field lines without a status or request line before them, as (name, value).
pub fn fields_of_lines(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

/// The values of the fields named `name` (any case), in order.
pub fn values<'a>(head: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields(head)
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v)
}

/// What `ignore` says to disregard of a response (nginx's `proxy_ignore_headers`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ignore {
    /// `Cache-Control`.
    pub cache_control: bool,
    /// `Expires`.
    pub expires: bool,
    /// `Set-Cookie` (a response that sets one may be stored).
    pub set_cookie: bool,
    /// `Vary`.
    pub vary: bool,
}

/// Reads what a response head (HTTP/1.1 text) says about its caching.
pub fn response_facts(status: u16, head: &[u8], ignore: Ignore) -> ResponseFacts {
    // A field aimed at caches like this one (RFC 9213's `CDN-Cache-Control`, or the older
    // `Surrogate-Control`) replaces `Cache-Control` for it.
    let targeted = ["cdn-cache-control", "surrogate-control"]
        .into_iter()
        .find(|name| values(head, name).next().is_some());
    let directives = match targeted {
        _ if ignore.cache_control => Directives::default(),
        Some(name) => Directives::parse(values(head, name)),
        None => Directives::parse(values(head, "cache-control")),
    };
    let expires = (!ignore.expires)
        .then(|| values(head, "expires").next().map(parse_date))
        .flatten();
    let last_modified = values(head, "last-modified").next().and_then(parse_date);
    let has_etag = values(head, "etag").next().is_some();
    ResponseFacts {
        status,
        directives,
        expires,
        date: values(head, "date").next().and_then(parse_date),
        last_modified,
        has_validator: has_etag || last_modified.is_some(),
        set_cookie: values(head, "set-cookie").next().is_some() && !ignore.set_cookie,
        vary_star: !ignore.vary
            && values(head, "vary").any(|v| crate::message::list_elements(v).any(|e| e == b"*")),
    }
}

/// What building an entry needs besides the response.
pub struct Stored<'a> {
    /// The key it is stored under.
    pub key: &'a str,
    /// The request's field lines (for the values `Vary` selects).
    pub request_fields: &'a [u8],
    /// When the request went upstream.
    pub request_time: u64,
    /// When the response head came.
    pub response_time: u64,
    /// Its freshness lifetime.
    pub lifetime: u64,
    /// What the route disregards of responses.
    pub ignore: Ignore,
}

/// Fields never stored: framing, `Age` (recomputed on each use) and the ones a cache must not
/// keep.
const NOT_STORED: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "age",
    "connection",
    "surrogate-control",
];

/// Fields a 304 does not change in the stored response: they describe the stored content
/// itself, not the message.
const NOT_FRESHENED: [&str; 4] = ["content-encoding", "content-md5", "content-range", "etag"];

/// The `Age` a response came with: 0 without one; one that is not a single delta-seconds
/// value (two lines, a list, a sign, a fraction) makes it as old as can be: stale.
fn age_of(head: &[u8]) -> u64 {
    let mut ages = values(head, "age");
    match (ages.next(), ages.next()) {
        (None, _) => 0,
        (Some(one), None) => parse_age(one).unwrap_or(super::control::MAX_DELTA),
        _ => super::control::MAX_DELTA,
    }
}

/// An entry from a response's head (HTTP/1.1 text as the client would get it, framing fields
/// included) and its whole body.
pub fn build(head: &[u8], status: u16, body: Bytes, facts: &ResponseFacts, s: Stored<'_>) -> Entry {
    let d = &facts.directives;
    let mut text = Vec::with_capacity(head.len() + 24);
    let status_line_end = head.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    text.extend_from_slice(&head[..status_line_end]);
    for (name, value) in fields(head) {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        if NOT_STORED.contains(&lower.as_str()) || d.private_fields.contains(&lower) {
            continue;
        }
        text.extend_from_slice(name);
        text.extend_from_slice(b": ");
        text.extend_from_slice(value);
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"Content-Length: ");
    text.extend_from_slice(body.len().to_string().as_bytes());
    text.extend_from_slice(b"\r\n\r\n");
    let vary = if s.ignore.vary {
        Vec::new()
    } else {
        vary_names(head)
            .map(|name| {
                let value = vary_value(s.request_fields, &name);
                (name.into_boxed_str(), value)
            })
            .collect()
    };
    let age = age_of(head);
    Entry {
        key: s.key.into(),
        head: text,
        status,
        body,
        file: None,
        mem: None,
        times: Times {
            request_time: s.request_time,
            response_time: s.response_time,
            date: facts.date.unwrap_or(s.response_time),
            age,
        },
        lifetime: s.lifetime,
        vary,
        etag: values(head, "etag").next().map(<[u8]>::to_vec),
        last_modified: values(head, "last-modified").next().map(<[u8]>::to_vec),
        no_cache: d.no_cache,
        no_cache_fields: d.no_cache_fields.clone(),
        no_stale: d.must_revalidate || d.proxy_revalidate || d.s_maxage.is_some(),
        stale_while_revalidate: d.stale_while_revalidate.unwrap_or(0),
        stale_if_error: d.stale_if_error.unwrap_or(0),
        client_head: Default::default(),
    }
}

/// The field names a head's `Vary` lists, lower case, each once.
fn vary_names(head: &[u8]) -> impl Iterator<Item = String> {
    let mut seen: Vec<String> = Vec::new();
    for v in values(head, "vary") {
        for e in crate::message::list_elements(v) {
            let name = String::from_utf8_lossy(e).to_ascii_lowercase();
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
    }
    seen.into_iter()
}

/// A request field's value as `Vary` compares it: every line of that name joined by `, `,
/// blanks around list commas dropped; `Accept-Encoding` reduced to the set of codings it
/// accepts, so clients that accept the same codings share one variant.
pub fn vary_value(request_fields: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut lines = values(request_fields, name).peekable();
    lines.peek()?;
    if name == "accept-encoding" {
        let mut codings: Vec<Vec<u8>> = Vec::new();
        for line in lines {
            for e in crate::message::list_elements(line) {
                let mut parts = e.split(|&b| b == b';');
                let coding = parts
                    .next()
                    .unwrap_or_default()
                    .trim_ascii()
                    .to_ascii_lowercase();
                let refused = parts.any(|p| {
                    let p = p.trim_ascii();
                    p.len() >= 2
                        && p[..2].eq_ignore_ascii_case(b"q=")
                        && p[2..].iter().all(|&b| b == b'0' || b == b'.')
                });
                if !refused && !coding.is_empty() && !codings.contains(&coding) {
                    codings.push(coding);
                }
            }
        }
        codings.sort();
        return Some(codings.join(&b","[..]));
    }
    let mut out = Vec::new();
    for line in lines {
        for e in crate::message::list_elements(line) {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(e);
        }
    }
    Some(out)
}

/// The head of `entry` refreshed by a 304's fields (RFC 9111 section 4.3.4): each field the 304
/// carries replaces the stored ones of its name, except framing.
pub fn freshen_head(stored: &[u8], not_modified: &[u8]) -> Vec<u8> {
    let new: Vec<(&[u8], &[u8])> = fields(not_modified)
        .filter(|(n, _)| {
            let lower = String::from_utf8_lossy(n).to_ascii_lowercase();
            !NOT_STORED.contains(&lower.as_str()) && !NOT_FRESHENED.contains(&lower.as_str())
        })
        .collect();
    let status_line_end = stored.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut out = Vec::with_capacity(stored.len() + not_modified.len());
    out.extend_from_slice(&stored[..status_line_end]);
    let replaced = |name: &[u8]| new.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut length = None;
    for (name, value) in fields(stored) {
        if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(value);
            continue;
        }
        if !replaced(name) {
            put(&mut out, name, value);
        }
    }
    for (name, value) in &new {
        put(&mut out, name, value);
    }
    if let Some(length) = length {
        put(&mut out, b"Content-Length", length);
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn put(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nDate: Tue, 14 Nov 2023 22:13:20 GMT\r\nCache-Control: max-age=60\r\nETag: \"a\"\r\nVary: Accept-Encoding, X-Lang\r\nAge: 5\r\nContent-Length: 3\r\n\r\n";

    fn entry(request: &[u8]) -> Entry {
        let facts = response_facts(200, HEAD, Ignore::default());
        let s = Stored {
            key: "http://a/x",
            request_fields: request,
            request_time: 1_700_000_000,
            response_time: 1_700_000_000,
            lifetime: 60,
            ignore: Ignore::default(),
        };
        build(HEAD, 200, Bytes::from_static(b"abc"), &facts, s)
    }

    #[test]
    fn stores_the_head_without_framing_or_age() {
        let e = entry(b"GET / HTTP/1.1\r\n");
        let head = String::from_utf8(e.head.clone()).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(!head.contains("Age:"));
        assert!(head.ends_with("Content-Length: 3\r\n\r\n"));
        assert_eq!(e.times.age, 5);
        assert_eq!(e.etag.as_deref(), Some(&b"\"a\""[..]));
    }

    #[test]
    fn vary_selects_by_normalised_values() {
        let e = entry(b"GET / HTTP/1.1\r\nAccept-Encoding: gzip, br\r\nX-Lang: en\r\n");
        assert!(e.matches(b"GET / HTTP/1.1\r\nX-Lang: en\r\nAccept-Encoding: br,gzip\r\n"));
        assert!(e.matches(
            b"GET / HTTP/1.1\r\nX-Lang: en\r\naccept-encoding: gzip;q=1, br, zstd;q=0\r\n"
        ));
        assert!(!e.matches(b"GET / HTTP/1.1\r\nX-Lang: fr\r\nAccept-Encoding: gzip, br\r\n"));
        assert!(!e.matches(b"GET / HTTP/1.1\r\nAccept-Encoding: gzip, br\r\n"));
        let bare = entry(b"GET / HTTP/1.1\r\n");
        assert!(bare.matches(b"GET / HTTP/1.1\r\n"));
        assert!(!bare.matches(b"GET / HTTP/1.1\r\nX-Lang: en\r\n"));
    }

    #[test]
    fn a_304_replaces_the_fields_it_carries() {
        let e = entry(b"GET / HTTP/1.1\r\n");
        let head = freshen_head(&e.head, b"HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=120\r\nX-New: 1\r\nContent-Length: 0\r\n\r\n");
        let text = String::from_utf8(head).unwrap();
        assert!(text.contains("Cache-Control: max-age=120\r\n"));
        assert!(!text.contains("max-age=60"));
        assert!(text.contains("X-New: 1\r\n"));
        assert!(text.ends_with("Content-Length: 3\r\n\r\n"));
    }

    #[test]
    fn vary_star_is_seen() {
        let head = b"HTTP/1.1 200 OK\r\nVary: Foo, *\r\n\r\n";
        assert!(response_facts(200, head, Ignore::default()).vary_star);
    }
}
