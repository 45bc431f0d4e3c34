//! Conditional requests (RFC 9110 section 13) against a file's validators, without I/O:
//! `If-Match`, `If-Unmodified-Since`, `If-None-Match`, `If-Modified-Since` in the RFC's order,
//! and `If-Range`. A date that does not parse is ignored, as the RFC says; an entity-tag list
//! that does not parse matches nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A file's validators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// The strong entity-tag, quotes included (`"1f-6543a1b2"`).
    pub etag: String,
    /// Last modification, whole seconds (HTTP dates have no finer resolution).
    pub last_modified: SystemTime,
}

impl Validators {
    /// The validators of a file of `size` bytes modified at `mtime`: the tag is the size and
    /// the modification time in nanoseconds, so any rewrite changes it.
    pub fn new(size: u64, mtime: SystemTime) -> Validators {
        let since = mtime.duration_since(UNIX_EPOCH).unwrap_or_default();
        Validators {
            etag: format!("\"{size:x}-{:x}\"", since.as_nanos()),
            last_modified: UNIX_EPOCH + Duration::from_secs(since.as_secs()),
        }
    }
}

/// The conditional header fields of a request (raw values).
#[derive(Debug, Default, Clone, Copy)]
pub struct Conditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
}

/// What the preconditions decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Serve the file.
    Proceed,
    /// 304 Not Modified (GET and HEAD).
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates the preconditions for a GET or HEAD (`safe`) or another method.
pub fn evaluate(c: &Conditions<'_>, v: &Validators, safe: bool) -> Precondition {
    if let Some(list) = c.if_match {
        if !matches_any(list, &v.etag, true) {
            return Precondition::Failed;
        }
    } else if let Some(date) = c.if_unmodified_since.and_then(parse_date) {
        if v.last_modified > date {
            return Precondition::Failed;
        }
    }
    if let Some(list) = c.if_none_match {
        if matches_any(list, &v.etag, false) {
            return if safe {
                Precondition::NotModified
            } else {
                Precondition::Failed
            };
        }
    } else if let Some(date) = c.if_modified_since.filter(|_| safe).and_then(parse_date) {
        if v.last_modified <= date {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether `If-Range` lets a Range apply: a strong tag equal to the file's, or a date equal to
/// its modification time. Otherwise the whole file is sent.
pub fn if_range_allows(value: &[u8], v: &Validators) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return value == v.etag.as_bytes();
    }
    parse_date(value) == Some(v.last_modified)
}

/// Whether a list of entity-tags (or `*`) names `etag`: strongly (both strong and equal) or
/// weakly (equal once any `W/` is dropped).
pub(crate) fn matches_any(list: &[u8], etag: &str, strong: bool) -> bool {
    let list = list.trim_ascii();
    if list == b"*" {
        return true;
    }
    let mut rest = list;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(r) = rest.strip_prefix(b",") {
            rest = r;
            continue;
        }
        if rest.is_empty() {
            return false;
        }
        let (weak, tagged) = match rest.strip_prefix(b"W/") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let Some(body) = tagged.strip_prefix(b"\"") else {
            return false; // not an entity-tag list: matches nothing
        };
        let Some(close) = body.iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &tagged[..close + 2];
        if tag == etag.as_bytes() && !(strong && weak) {
            return true;
        }
        rest = &body[close + 1..];
    }
}

fn parse_date(value: &[u8]) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(value).ok()?.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Validators {
        Validators::new(31, UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    }

    fn run(c: Conditions<'_>) -> Precondition {
        evaluate(&c, &file(), true)
    }

    #[test]
    fn none_match_and_modified_since_give_304() {
        let tag = file().etag;
        let c = Conditions {
            if_none_match: Some(tag.as_bytes()),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::NotModified);
        let weak = format!("\"x\", W/{tag}");
        let c = Conditions {
            if_none_match: Some(weak.as_bytes()),
            ..Default::default()
        };
        assert_eq!(
            run(c),
            Precondition::NotModified,
            "weak comparison for If-None-Match"
        );
        assert_eq!(
            evaluate(&c, &file(), false),
            Precondition::Failed,
            "a PUT gets 412"
        );
        let c = Conditions {
            if_modified_since: Some(b"Tue, 14 Nov 2023 22:13:20 GMT"),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::NotModified);
        let c = Conditions {
            if_modified_since: Some(b"Tue, 14 Nov 2023 22:13:19 GMT"),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::Proceed);
        // If-None-Match wins over If-Modified-Since.
        let c = Conditions {
            if_none_match: Some(b"\"other\""),
            if_modified_since: Some(b"Tue, 14 Nov 2023 22:13:20 GMT"),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::Proceed);
    }

    #[test]
    fn match_and_unmodified_since_give_412() {
        let tag = file().etag;
        let weak = format!("W/{tag}");
        for (list, want) in [
            (tag.as_str(), Precondition::Proceed),
            ("*", Precondition::Proceed),
            (weak.as_str(), Precondition::Failed),
            ("\"nope\"", Precondition::Failed),
            ("garbage", Precondition::Failed),
        ] {
            let c = Conditions {
                if_match: Some(list.as_bytes()),
                ..Default::default()
            };
            assert_eq!(run(c), want, "{list}");
        }
        let c = Conditions {
            if_unmodified_since: Some(b"Tue, 14 Nov 2023 22:13:19 GMT"),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::Failed);
        let c = Conditions {
            if_unmodified_since: Some(b"not a date"),
            ..Default::default()
        };
        assert_eq!(run(c), Precondition::Proceed, "an invalid date is ignored");
    }

    #[test]
    fn if_range_needs_a_strong_tag_or_the_exact_date() {
        let v = file();
        assert!(if_range_allows(v.etag.as_bytes(), &v));
        assert!(!if_range_allows(format!("W/{}", v.etag).as_bytes(), &v));
        assert!(if_range_allows(b"Tue, 14 Nov 2023 22:13:20 GMT", &v));
        assert!(!if_range_allows(b"Tue, 14 Nov 2023 22:13:21 GMT", &v));
        assert!(!if_range_allows(b"junk", &v));
    }
}
