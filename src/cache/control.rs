//! `Cache-Control` (RFC 9111 section 5.2) read into values, socket-free: the directives of a
//! request or a response, names caseless, arguments as tokens or quoted strings. A directive
//! whose argument does not parse counts as present with no usable value (a `max-age` that is
//! not a number makes the response stale, the most restrictive reading RFC 9111 section 4.2.1
//! asks for). Values past 2^31 seconds are cut there (section 1.2.2).

/// Largest delta-seconds kept (RFC 9111 section 1.2.2).
pub const MAX_DELTA: u64 = 1 << 31;

/// The directives a cache acts on, from every `Cache-Control` line of one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directives {
    /// `max-age=N`; `Some(0)` when present but not a number.
    pub max_age: Option<u64>,
    /// `s-maxage=N` (responses; for a shared cache it beats `max-age`).
    pub s_maxage: Option<u64>,
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` without fields: validate before every reuse.
    pub no_cache: bool,
    /// `no-cache="A, B"`: these fields are not sent from a stored response unvalidated.
    pub no_cache_fields: Vec<String>,
    /// `private` without fields: a shared cache never stores it.
    pub private: bool,
    /// `private="A"`: these fields are not stored.
    pub private_fields: Vec<String>,
    /// `public`.
    pub public: bool,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `proxy-revalidate`.
    pub proxy_revalidate: bool,
    /// `no-transform`.
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
    /// `must-understand`: stored only if the cache knows the status code's semantics.
    pub must_understand: bool,
    /// `stale-while-revalidate=N` (RFC 5861).
    pub stale_while_revalidate: Option<u64>,
    /// `stale-if-error=N` (RFC 5861), in a request or a response.
    pub stale_if_error: Option<u64>,
    /// Request: `max-stale` (`Some(u64::MAX)` without a value: any staleness).
    pub max_stale: Option<u64>,
    /// Request: `min-fresh=N`.
    pub min_fresh: Option<u64>,
    /// Request: `only-if-cached`.
    pub only_if_cached: bool,
    /// Some directive appeared twice with different values: RFC 9111 section 4.2.1 lets a
    /// cache treat the response as stale.
    pub conflicting: bool,
}

impl Directives {
    /// Reads every value in `lines` (the values of each `Cache-Control` field line).
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Directives {
        let mut d = Directives::default();
        for line in lines {
            let mut rest = line;
            while let Some((name, arg, after)) = next_directive(rest) {
                d.apply(&name, arg.as_deref());
                rest = after;
            }
        }
        d
    }

    fn apply(&mut self, name: &str, arg: Option<&str>) {
        match name {
            "max-age" => set_delta(&mut self.max_age, arg, &mut self.conflicting),
            "s-maxage" => set_delta(&mut self.s_maxage, arg, &mut self.conflicting),
            "stale-while-revalidate" => {
                set_delta(&mut self.stale_while_revalidate, arg, &mut self.conflicting);
            }
            "stale-if-error" => set_delta(&mut self.stale_if_error, arg, &mut self.conflicting),
            "min-fresh" => set_delta(&mut self.min_fresh, arg, &mut self.conflicting),
            "max-stale" => {
                let value = arg.map_or(Some(u64::MAX), delta);
                self.max_stale = Some(value.unwrap_or(0));
            }
            "no-store" => self.no_store = true,
            "no-cache" => match arg {
                Some(list) if !list.trim().is_empty() => self.no_cache_fields.extend(names(list)),
                _ => self.no_cache = true,
            },
            "private" => match arg {
                Some(list) if !list.trim().is_empty() => self.private_fields.extend(names(list)),
                _ => self.private = true,
            },
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "no-transform" => self.no_transform = true,
            "immutable" => self.immutable = true,
            "must-understand" => self.must_understand = true,
            "only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }
}

/// The first value of a delta-seconds directive is kept; a second, different one marks the
/// message as conflicting; a value that is not a number reads as 0.
fn set_delta(slot: &mut Option<u64>, arg: Option<&str>, conflicting: &mut bool) {
    let value = arg.and_then(delta).unwrap_or(0);
    match slot {
        Some(old) if *old != value => *conflicting = true,
        Some(_) => {}
        None => *slot = Some(value),
    }
}

/// delta-seconds: digits only, cut at 2^31.
pub fn delta(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = text.trim_start_matches('0');
    if digits.len() > 10 {
        return Some(MAX_DELTA);
    }
    Some(digits.parse::<u64>().unwrap_or(0).min(MAX_DELTA))
}

/// Field names in a quoted list (`"Set-Cookie, X-A"`), lower case.
fn names(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
}

/// The next directive of a list: its lower-cased name, its argument (unquoted), and the rest.
fn next_directive(mut text: &[u8]) -> Option<(String, Option<String>, &[u8])> {
    loop {
        text = text.trim_ascii_start();
        match text.first()? {
            b',' => text = &text[1..],
            _ => break,
        }
    }
    let name_end = text
        .iter()
        .position(|&b| b == b'=' || b == b',' || b == b' ' || b == b'\t' || b == b';')
        .unwrap_or(text.len());
    let name = String::from_utf8_lossy(&text[..name_end]).to_ascii_lowercase();
    let mut rest = text[name_end..].trim_ascii_start();
    let mut arg = None;
    if let Some(after) = rest.strip_prefix(b"=") {
        let after = after.trim_ascii_start();
        if let Some(quoted) = after.strip_prefix(b"\"") {
            let (value, used) = unquote(quoted);
            arg = Some(value);
            rest = &quoted[used..];
        } else {
            // A token ends at a comma, or at a `;` (Surrogate-Control's `;target`).
            let end = after
                .iter()
                .position(|&b| b == b',' || b == b';')
                .unwrap_or(after.len());
            arg = Some(String::from_utf8_lossy(after[..end].trim_ascii()).into_owned());
            rest = &after[end..];
        }
    }
    // Anything up to the next comma is not part of this directive.
    let end = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
    Some((name, arg, &rest[end..]))
}

/// A quoted string's value (after its opening quote) and the bytes it used, closing quote
/// included; an unclosed string runs to the end.
fn unquote(text: &[u8]) -> (String, usize) {
    let mut value = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => return (String::from_utf8_lossy(&value).into_owned(), i + 1),
            b'\\' if i + 1 < text.len() => {
                value.push(text[i + 1]);
                i += 2;
            }
            b => {
                value.push(b);
                i += 1;
            }
        }
    }
    (String::from_utf8_lossy(&value).into_owned(), text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Directives {
        Directives::parse([text.as_bytes()])
    }

    #[test]
    fn reads_response_directives_caselessly() {
        let d = parse("Public, MAX-AGE=60, s-maxage=\"120\", must-revalidate");
        assert!(d.public && d.must_revalidate);
        assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(120)));
    }

    #[test]
    fn no_cache_with_fields_is_not_plain_no_cache() {
        let d = parse("no-cache=\"Set-Cookie, X-Foo\", private=\"X-Bar\"");
        assert!(!d.no_cache && !d.private);
        assert_eq!(d.no_cache_fields, ["set-cookie", "x-foo"]);
        assert_eq!(d.private_fields, ["x-bar"]);
        assert!(parse("no-cache").no_cache);
    }

    #[test]
    fn bad_and_huge_numbers() {
        assert_eq!(parse("max-age=abc").max_age, Some(0));
        assert_eq!(parse("max-age=-1").max_age, Some(0));
        assert_eq!(parse("max-age=1.5").max_age, Some(0));
        assert_eq!(
            parse("max-age=99999999999999999999").max_age,
            Some(MAX_DELTA)
        );
        assert_eq!(parse("max-age=007").max_age, Some(7));
        assert_eq!(
            parse("max-age=10;edge").max_age,
            Some(10),
            "a Surrogate-Control target"
        );
    }

    #[test]
    fn repeated_directives_keep_the_first_and_flag_a_conflict() {
        let d = Directives::parse([b"max-age=10".as_slice(), b"max-age=20"]);
        assert_eq!(d.max_age, Some(10));
        assert!(d.conflicting);
        assert!(!parse("max-age=10, max-age=10").conflicting);
    }

    #[test]
    fn request_directives() {
        let d = parse("max-stale, min-fresh=5, only-if-cached, no-cache");
        assert_eq!(d.max_stale, Some(u64::MAX));
        assert_eq!(d.min_fresh, Some(5));
        assert!(d.only_if_cached && d.no_cache);
        assert_eq!(parse("max-stale=30").max_stale, Some(30));
    }

    #[test]
    fn odd_syntax_never_panics() {
        for text in [
            "",
            ",,,",
            "=",
            "max-age=\"",
            "a=\"\\",
            "no-cache=\"a,b",
            " ; ,=,",
        ] {
            parse(text);
        }
        assert_eq!(parse("foo=\"a,b\", max-age=3").max_age, Some(3));
    }
}
