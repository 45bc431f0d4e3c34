//! Whether a response may be stored, how long it stays fresh and how old it is (RFC 9111
//! sections 3, 4.2 and 4.2.3), socket-free. Times are whole seconds since the Unix epoch:
//! HTTP dates have no finer resolution.

use super::control::Directives;

/// What the age calculation needs of a stored response (RFC 9111 section 4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// When the request that got it was sent upstream.
    pub request_time: u64,
    /// When its head arrived.
    pub response_time: u64,
    /// Its `Date` (the response time when it had none or a bad one).
    pub date: u64,
    /// Its `Age` (0 when absent).
    pub age: u64,
}

impl Times {
    /// The response's age at `now`: the larger of the apparent age (by its Date) and the age it
    /// came with plus the time the request took, plus the time it has been stored.
    pub fn current_age(&self, now: u64) -> u64 {
        let apparent = self.response_time.saturating_sub(self.date);
        let delay = self.response_time.saturating_sub(self.request_time);
        let corrected = self.age.saturating_add(delay);
        let initial = apparent.max(corrected);
        initial.saturating_add(now.saturating_sub(self.response_time))
    }
}

/// What a response says about its caching, read from its head.
#[derive(Debug, Clone, Default)]
pub struct ResponseFacts {
    /// Its status code.
    pub status: u16,
    /// Its `Cache-Control` (empty when the route ignores it).
    pub directives: Directives,
    /// Its first `Expires` value: `Some(None)` when present but not a date (already stale).
    pub expires: Option<Option<u64>>,
    /// Its `Date`.
    pub date: Option<u64>,
    /// Its `Last-Modified`.
    pub last_modified: Option<u64>,
    /// It has an `ETag` or a `Last-Modified`: it can be validated.
    pub has_validator: bool,
    /// It sets a cookie.
    pub set_cookie: bool,
    /// Its `Vary` has `*`: it matches no later request.
    pub vary_star: bool,
}

/// What the request that got it says, as far as storing goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts {
    /// It carried `Authorization`.
    pub authorization: bool,
    /// It said `Cache-Control: no-store`.
    pub no_store: bool,
}

/// The route's own rules for responses that say too little (nginx's `proxy_cache_valid`,
/// `proxy_ignore_headers`) and the heuristic switch.
#[derive(Debug, Clone, Default)]
pub struct Fallbacks {
    /// `(status, seconds)`; status 0 is any status.
    pub valid: Vec<(u16, u64)>,
    /// Responses that set cookies may be stored.
    pub store_set_cookie: bool,
    /// Heuristic freshness (10% of the time since Last-Modified, RFC 9111 section 4.2.2).
    pub heuristic: bool,
}

/// Statuses the RFC lets a cache give heuristic freshness (RFC 9110 section 15.1).
const HEURISTIC: [u16; 12] = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// The statuses whose caching semantics this cache knows (for `must-understand`).
const UNDERSTOOD: [u16; 19] = [
    200, 203, 204, 300, 301, 302, 303, 307, 308, 400, 403, 404, 405, 410, 414, 451, 500, 501, 503,
];

/// Why a response is not stored, for the debug log and the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStored {
    /// `no-store` in the response or the request.
    NoStore,
    /// `private`.
    Private,
    /// The request had `Authorization` and the response did not allow sharing.
    Authorization,
    /// It sets a cookie.
    SetCookie,
    /// `Vary: *`.
    VaryStar,
    /// A status a cache does not store (interim, 206, 304).
    Status,
    /// No freshness, no validator, no configured validity.
    NoFreshness,
}

/// Whether the response may be stored and, if so, its freshness lifetime in seconds
/// (0: stored only to be validated before each use).
pub fn storable(
    r: &ResponseFacts,
    req: RequestFacts,
    fallbacks: &Fallbacks,
    response_time: u64,
) -> Result<u64, NotStored> {
    let d = &r.directives;
    if d.no_store || req.no_store {
        return Err(NotStored::NoStore);
    }
    if d.private {
        return Err(NotStored::Private);
    }
    if matches!(r.status, 100..=199 | 206 | 304) {
        return Err(NotStored::Status);
    }
    if d.must_understand && !UNDERSTOOD.contains(&r.status) {
        return Err(NotStored::Status);
    }
    if req.authorization && !(d.public || d.s_maxage.is_some() || d.must_revalidate) {
        return Err(NotStored::Authorization);
    }
    // Never by the response's say-so alone: PHP's `session.cache_limiter=public` sends
    // `public, max-age=10800` with a session cookie (nginx needs `ignore_headers` too).
    if r.set_cookie && !fallbacks.store_set_cookie {
        return Err(NotStored::SetCookie);
    }
    if r.vary_star {
        return Err(NotStored::VaryStar);
    }
    // Without explicit freshness, only a status the RFC lets a cache guess for (or a
    // `public` response) may be stored, to be validated before use.
    let may_guess = HEURISTIC.contains(&r.status) || d.public;
    match lifetime(r, fallbacks, response_time) {
        Some(seconds) => Ok(seconds),
        None if r.has_validator && may_guess => Ok(0),
        None => Err(NotStored::NoFreshness),
    }
}

/// The freshness lifetime (RFC 9111 section 4.2.1): `s-maxage`, `max-age`, `Expires` minus
/// `Date`, then the route's configured validity, then (when on) the heuristic; `None` when
/// nothing gives one.
pub fn lifetime(r: &ResponseFacts, fallbacks: &Fallbacks, response_time: u64) -> Option<u64> {
    let d = &r.directives;
    if d.conflicting {
        return Some(0);
    }
    if let Some(s) = d.s_maxage.or(d.max_age) {
        return Some(s);
    }
    if let Some(expires) = r.expires {
        let date = r.date.unwrap_or(response_time);
        return Some(expires.map_or(0, |e| e.saturating_sub(date)));
    }
    let configured = fallbacks
        .valid
        .iter()
        .find(|(status, _)| *status == r.status)
        .or_else(|| fallbacks.valid.iter().find(|(status, _)| *status == 0));
    if let Some((_, seconds)) = configured {
        return Some(*seconds);
    }
    let may_guess = HEURISTIC.contains(&r.status) || d.public;
    if fallbacks.heuristic && may_guess {
        let date = r.date.unwrap_or(response_time);
        if let Some(modified) = r.last_modified.filter(|m| *m <= date) {
            return Some((date - modified) / 10);
        }
    }
    None
}

/// An HTTP date as seconds since the epoch.
pub fn parse_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let time = httpdate::parse_http_date(text).ok()?;
    Some(time.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

/// An `Age` value: delta-seconds, cut at 2^31; anything else is ignored.
pub fn parse_age(value: &[u8]) -> Option<u64> {
    super::control::delta(std::str::from_utf8(value).ok()?.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(cc: &str) -> ResponseFacts {
        ResponseFacts {
            status: 200,
            directives: Directives::parse([cc.as_bytes()]),
            ..ResponseFacts::default()
        }
    }

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn shared_lifetime_prefers_s_maxage_then_max_age_then_expires() {
        let none = Fallbacks::default();
        assert_eq!(
            lifetime(&facts("max-age=10, s-maxage=20"), &none, NOW),
            Some(20)
        );
        assert_eq!(lifetime(&facts("max-age=10"), &none, NOW), Some(10));
        let mut r = facts("");
        r.date = Some(NOW);
        r.expires = Some(Some(NOW + 30));
        assert_eq!(lifetime(&r, &none, NOW), Some(30));
        r.expires = Some(None);
        assert_eq!(lifetime(&r, &none, NOW), Some(0), "a bad Expires is stale");
        r.expires = Some(Some(NOW - 5));
        assert_eq!(lifetime(&r, &none, NOW), Some(0));
    }

    #[test]
    fn configured_validity_and_heuristic_only_without_explicit_freshness() {
        let valid = Fallbacks {
            valid: vec![(404, 60), (0, 5)],
            ..Fallbacks::default()
        };
        assert_eq!(lifetime(&facts(""), &valid, NOW), Some(5));
        let mut r = facts("");
        r.status = 404;
        assert_eq!(lifetime(&r, &valid, NOW), Some(60));
        assert_eq!(lifetime(&facts("max-age=1"), &valid, NOW), Some(1));
        let mut r = facts("");
        r.last_modified = Some(NOW - 1000);
        assert_eq!(
            lifetime(&r, &Fallbacks::default(), NOW),
            None,
            "off by default"
        );
        let guess = Fallbacks {
            heuristic: true,
            ..Fallbacks::default()
        };
        assert_eq!(lifetime(&r, &guess, NOW), Some(100));
    }

    #[test]
    fn what_is_never_stored() {
        let none = Fallbacks::default();
        let req = RequestFacts::default();
        assert_eq!(
            storable(&facts("no-store, max-age=9"), req, &none, NOW),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            storable(&facts("private, max-age=9"), req, &none, NOW),
            Err(NotStored::Private)
        );
        assert_eq!(
            storable(&facts(""), req, &none, NOW),
            Err(NotStored::NoFreshness)
        );
        let authorized = RequestFacts {
            authorization: true,
            ..req
        };
        let r = facts("max-age=9");
        assert_eq!(
            storable(&r, authorized, &none, NOW),
            Err(NotStored::Authorization)
        );
        assert_eq!(
            storable(&facts("max-age=9, public"), authorized, &none, NOW),
            Ok(9)
        );
        let mut cookie = facts("max-age=9");
        cookie.set_cookie = true;
        assert_eq!(
            storable(&cookie, req, &none, NOW),
            Err(NotStored::SetCookie)
        );
        let mut validated = facts("");
        validated.has_validator = true;
        assert_eq!(storable(&validated, req, &none, NOW), Ok(0));
        let mut partial = facts("max-age=9");
        partial.status = 206;
        assert_eq!(storable(&partial, req, &none, NOW), Err(NotStored::Status));
    }

    #[test]
    fn age_counts_the_larger_of_apparent_and_corrected() {
        let t = Times {
            request_time: NOW - 2,
            response_time: NOW,
            date: NOW - 10,
            age: 3,
        };
        assert_eq!(t.current_age(NOW), 10);
        assert_eq!(t.current_age(NOW + 5), 15);
        let t = Times { age: 30, ..t };
        assert_eq!(t.current_age(NOW), 32);
    }
}
