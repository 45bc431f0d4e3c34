//! The shared HTTP cache (RFC 9111), socket-free: `Cache-Control` ([`control`]), freshness and
//! age ([`freshness`]), the stored response ([`entry`]), the zones that hold them ([`zone`]),
//! and here what a route asks of its zone ([`CacheRule`]), what a request brings to it
//! ([`CacheRequest`]) and whether a stored response answers it as it is ([`judge`]). The
//! request path that uses them is `proxy/cache.rs`.

pub mod admin;
pub mod control;
pub mod disk;
pub mod entry;
pub mod freshness;
pub mod memfile;
pub mod zone;

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use control::Directives;
use entry::{Entry, Ignore};
use freshness::Fallbacks;

use crate::rules::template::Template;

/// A route's caching (`cache = { zone = "main", ... }`).
#[derive(Debug, Clone)]
pub struct CacheRule {
    /// Its zone.
    pub zone: Arc<zone::Zone>,
    /// The key's template (default `$scheme://$host$request_uri`).
    pub key: Option<Template>,
    /// Validity and heuristics for responses that say too little.
    pub fallbacks: Fallbacks,
    /// Parts of responses disregarded (nginx's `proxy_ignore_headers`).
    pub ignore: Ignore,
    /// When a stored response past its freshness is served anyway.
    pub use_stale: UseStale,
    /// Misses of one key make one upstream request; the rest wait for it.
    pub lock: bool,
    /// How long a miss waits for another's fetch before going upstream itself.
    pub lock_timeout: Duration,
    /// Stale responses are validated with `If-None-Match`/`If-Modified-Since`.
    pub revalidate: bool,
    /// With `use_stale` `updating`: the request that finds a response stale gets it at once and
    /// refreshes it after (nginx's `proxy_cache_background_update`), as `stale-while-revalidate`
    /// does within its window.
    pub background_update: bool,
    /// A response is stored once its key was asked this many times.
    pub min_uses: u32,
    /// HEAD requests are answered from (and fill) the cache too.
    pub head: bool,
    /// Any of these non-empty and not "0": answered from upstream, not from the cache.
    pub bypass: Vec<Template>,
    /// Any of these non-empty and not "0": the response is not stored.
    pub no_store: Vec<Template>,
    /// The request's own `Cache-Control` counts (`no-cache`, `max-age`, `max-stale`, ...).
    pub request_directives: bool,
    /// Answers carry a `Cache-Status` field (RFC 9211).
    pub status_field: bool,
}

/// nginx's `proxy_cache_use_stale`: when a stale response is served instead of an upstream's
/// failure (besides what `stale-if-error` and `stale-while-revalidate` allow).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UseStale {
    /// The upstream could not be reached or failed.
    pub error: bool,
    /// The upstream timed out.
    pub timeout: bool,
    /// Another request is refreshing it.
    pub updating: bool,
    /// The upstream answered one of these statuses.
    pub statuses: Vec<u16>,
}

/// What the response to a request was, as nginx's `$upstream_cache_status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Fresh from the cache.
    Hit,
    /// Not stored: fetched.
    Miss,
    /// Stored but stale: fetched again (or validated and changed).
    Expired,
    /// Stale, served anyway (the upstream failed, or the request allowed it).
    Stale,
    /// Stale, served while another request refreshes it.
    Updating,
    /// Stale, validated by the upstream with a 304.
    Revalidated,
    /// A `bypass` condition held: fetched.
    Bypass,
}

impl CacheStatus {
    /// nginx's word for it.
    pub fn word(self) -> &'static str {
        match self {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
            CacheStatus::Expired => "EXPIRED",
            CacheStatus::Stale => "STALE",
            CacheStatus::Updating => "UPDATING",
            CacheStatus::Revalidated => "REVALIDATED",
            CacheStatus::Bypass => "BYPASS",
        }
    }
}

/// The request's side of caching, gathered when it was read.
#[derive(Debug)]
pub struct CacheRequest {
    /// The route's caching.
    pub rule: Arc<CacheRule>,
    /// Its key and the key's hash.
    pub key: String,
    /// The key's hash.
    pub hash: u128,
    /// Its field lines as HTTP/1.1 text, after a request line (what `Vary` and the
    /// conditionals read).
    pub fields: Vec<u8>,
    /// Whether it has a conditional field or `Range` (without one, a stored response
    /// answers whole with no look at `fields`, and the head sent upstream is not searched
    /// for them).
    pub asks_part_or_validation: bool,
    /// Its `Cache-Control` (empty unless the rule honours it).
    pub directives: Directives,
    /// Its method, as far as caching goes.
    pub method: Method,
    /// It carries `Authorization`.
    pub authorization: bool,
    /// A `bypass` condition holds.
    pub bypass: bool,
    /// A `no_store` condition holds.
    pub no_store: bool,
    /// While its fetch is under way: the response is taken by the cache.
    pub capture: Cell<bool>,
    /// The validators sent upstream with it (a stored response's).
    pub validators: RefCell<Vec<u8>>,
    /// The stored response being validated.
    pub stale: RefCell<Option<Arc<Entry>>>,
    /// When the fetch was sent (seconds since the epoch).
    pub request_time: Cell<u64>,
    /// What its answer was.
    pub status: Cell<Option<CacheStatus>>,
    /// Bytes of the answer have reached the client: no stale response can replace it now.
    pub committed: Cell<bool>,
    /// The fetched answer was not stored (asked fewer than `min_uses` times): its
    /// `Cache-Status` does not say `stored`.
    pub unstored: Cell<bool>,
    /// The fetch refreshes a stale response the client already got: its answer is stored,
    /// never sent.
    pub background: Cell<bool>,
    /// Its key's fetch lock while it holds it: let go as soon as the answer is stored or
    /// known not to be (others waiting need not wait for a slow client's whole transfer).
    pub fetch: RefCell<Option<zone::Fetch>>,
    /// The length of `key`'s start that is `scheme://host`, when the rule keys by the
    /// default key: the keys of the URLs an unsafe method's answer names (`Location`,
    /// `Content-Location`) are made from it (RFC 9111 section 4.4).
    pub origin_len: Option<usize>,
    /// For an unsafe method under a key that holds the method: the keys its target's GET and
    /// HEAD were stored under (its own key names no stored response).
    pub stored_as: Vec<String>,
}

impl CacheRequest {
    /// Lets go of its key's fetch lock (the waiting requests look again).
    pub fn release(&self) {
        self.fetch.borrow_mut().take();
    }

    /// The key of `url` (a path, or an absolute URL of the request's own origin) under the
    /// default key; `None` for another origin, or when the rule has its own key.
    pub fn key_of(&self, url: &[u8]) -> Option<String> {
        let origin = self.key.get(..self.origin_len?)?;
        let url = std::str::from_utf8(url).ok()?.trim();
        if url.starts_with('/') && !url.starts_with("//") {
            return Some(format!("{origin}{url}"));
        }
        let rest = url.get(origin.len()..)?;
        let same = url[..origin.len()].eq_ignore_ascii_case(origin) && rest.starts_with('/');
        same.then(|| format!("{origin}{rest}"))
    }
}

/// The methods caching tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Answered from the cache and filling it.
    Get,
    /// The same, asked upstream as a GET.
    Head,
    /// A method that changes its target: a success invalidates what is stored for it (RFC
    /// 9111 section 4.4).
    Unsafe,
    /// `OPTIONS`, `TRACE` and the like: passed through.
    Other,
}

impl Method {
    /// The kind of `method`.
    pub fn of(method: &str) -> Method {
        match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "OPTIONS" | "TRACE" | "CONNECT" => Method::Other,
            _ => Method::Unsafe,
        }
    }
}

/// What a stored response is for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It answers the request as it is.
    Fresh,
    /// It is stale: served only while another request refreshes it (`updating`,
    /// `stale-while-revalidate`).
    StaleUsable,
    /// It must be validated (or fetched again) first.
    Validate,
}

/// Whether `entry` answers the request at `now` as it is (RFC 9111 section 4.2, with the
/// request's own directives when the rule honours them).
pub fn judge(entry: &Entry, request: &Directives, now: u64) -> Verdict {
    let age = entry.times.current_age(now);
    if entry.no_cache || request.no_cache {
        return Verdict::Validate;
    }
    let too_old = request.max_age.is_some_and(|max| age > max);
    let fresh_enough = match request.min_fresh {
        Some(min) => entry.lifetime > age.saturating_add(min),
        None => entry.lifetime > age,
    };
    if fresh_enough && !too_old {
        return Verdict::Fresh;
    }
    if entry.no_stale || too_old {
        return Verdict::Validate;
    }
    let staleness = age.saturating_sub(entry.lifetime);
    if request.max_stale.is_some_and(|max| staleness <= max) {
        return Verdict::Fresh;
    }
    if staleness < entry.stale_while_revalidate {
        return Verdict::StaleUsable;
    }
    Verdict::Validate
}

/// Whether a stale `entry` may answer instead of the upstream's failure at `now`: it allows
/// staleness at all, and `stale-if-error` (the response's or the request's) covers it or the
/// rule says so for this failure.
pub fn stale_on_error(entry: &Entry, request: &Directives, rule_allows: bool, now: u64) -> bool {
    if entry.no_stale {
        return false;
    }
    let staleness = entry.times.current_age(now).saturating_sub(entry.lifetime);
    let window = entry
        .stale_if_error
        .max(request.stale_if_error.unwrap_or(0));
    rule_allows || staleness < window
}

/// Seconds since the epoch now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use entry::{build, response_facts, Stored};

    #[test]
    fn keys_of_named_urls_stay_on_the_request_origin() {
        let c = |origin: Option<&str>| CacheRequest {
            origin_len: origin.map(str::len),
            rule: Arc::new(CacheRule {
                zone: Arc::new(zone::Zone::new(
                    "t",
                    zone::ZoneSettings {
                        memory: 1 << 20,
                        max_object: 1 << 10,
                        inactive: Duration::from_secs(1),
                        disk: None,
                    },
                )),
                key: None,
                fallbacks: Fallbacks::default(),
                ignore: Ignore::default(),
                use_stale: UseStale::default(),
                lock: true,
                lock_timeout: Duration::from_secs(1),
                revalidate: true,
                background_update: false,
                min_uses: 1,
                head: true,
                bypass: Vec::new(),
                no_store: Vec::new(),
                request_directives: true,
                status_field: true,
            }),
            key: origin.map(|o| format!("{o}/")).unwrap_or_default(),
            hash: 0,
            fields: Vec::new(),
            asks_part_or_validation: false,
            directives: Directives::default(),
            method: Method::Unsafe,
            authorization: false,
            bypass: false,
            no_store: false,
            capture: Cell::new(false),
            validators: RefCell::new(Vec::new()),
            stale: RefCell::new(None),
            request_time: Cell::new(0),
            status: Cell::new(None),
            committed: Cell::new(false),
            unstored: Cell::new(false),
            background: Cell::new(false),
            fetch: RefCell::new(None),
            stored_as: Vec::new(),
        };
        let r = c(Some("http://a.test"));
        assert_eq!(r.key_of(b"/x?y").as_deref(), Some("http://a.test/x?y"));
        assert_eq!(
            r.key_of(b"http://A.test/z").as_deref(),
            Some("http://a.test/z")
        );
        assert_eq!(r.key_of(b"http://a.test.evil/z"), None);
        assert_eq!(r.key_of(b"https://a.test/z"), None);
        assert_eq!(r.key_of(b"//b.test/z"), None);
        assert_eq!(c(None).key_of(b"/x"), None);
    }

    fn stored(cc: &str, lifetime: u64) -> Entry {
        let head = format!("HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\n\r\n");
        let facts = response_facts(200, head.as_bytes(), Ignore::default());
        let s = Stored {
            key: "k",
            request_fields: b"",
            request_time: 1000,
            response_time: 1000,
            lifetime,
            ignore: Ignore::default(),
        };
        build(head.as_bytes(), 200, bytes::Bytes::new(), &facts, s)
    }

    fn request(cc: &str) -> Directives {
        Directives::parse([cc.as_bytes()])
    }

    #[test]
    fn fresh_then_stale_then_validated() {
        let e = stored("max-age=10", 10);
        assert_eq!(judge(&e, &request(""), 1005), Verdict::Fresh);
        assert_eq!(judge(&e, &request(""), 1010), Verdict::Validate);
        assert_eq!(judge(&e, &request("max-stale=5"), 1012), Verdict::Fresh);
        assert_eq!(judge(&e, &request("max-age=2"), 1005), Verdict::Validate);
        assert_eq!(judge(&e, &request("min-fresh=6"), 1005), Verdict::Validate);
        assert_eq!(judge(&e, &request("no-cache"), 1001), Verdict::Validate);
    }

    #[test]
    fn stale_while_revalidate_and_must_revalidate() {
        let e = stored("max-age=10, stale-while-revalidate=30", 10);
        assert_eq!(judge(&e, &request(""), 1030), Verdict::StaleUsable);
        assert_eq!(judge(&e, &request(""), 1041), Verdict::Validate);
        let strict = stored("max-age=10, must-revalidate", 10);
        assert_eq!(
            judge(&strict, &request("max-stale"), 1020),
            Verdict::Validate
        );
        assert!(!stale_on_error(&strict, &request(""), true, 1020));
    }

    #[test]
    fn stale_if_error_window() {
        let e = stored("max-age=10, stale-if-error=60", 10);
        assert!(stale_on_error(&e, &request(""), false, 1050));
        assert!(!stale_on_error(&e, &request(""), false, 1100));
        assert!(stale_on_error(&e, &request(""), true, 1100));
        let plain = stored("max-age=10", 10);
        assert!(stale_on_error(
            &plain,
            &request("stale-if-error=100"),
            false,
            1100
        ));
    }
}
