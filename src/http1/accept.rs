//! `Accept-Encoding` (RFC 9110 section 12.5.3): which content codings a client takes, and how
//! much it prefers each. A coding is accepted when listed (or covered by `*`) with a q-value
//! above zero; `x-gzip` is gzip; `identity` is refused only by `identity;q=0` (or `*;q=0` with
//! identity not named).

use super::list_elements;

/// A content coding slipstream sends (compressing on the fly or as a precompressed sibling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// `zstd` (RFC 8878).
    Zstd,
    /// `br` (RFC 7932).
    Br,
    /// `gzip` (RFC 1952).
    Gzip,
}

impl Coding {
    /// Every coding, in the default order of preference.
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Br, Coding::Gzip];

    /// Its name in `Content-Encoding`.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    /// The coding of a name (`x-gzip` is gzip), case-insensitively.
    pub fn from_name(name: &[u8]) -> Option<Coding> {
        if name.eq_ignore_ascii_case(b"zstd") {
            Some(Coding::Zstd)
        } else if name.eq_ignore_ascii_case(b"br") {
            Some(Coding::Br)
        } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
            Some(Coding::Gzip)
        } else {
            None
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What a request's `Accept-Encoding` says of each coding: its q-value in thousandths.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Codings {
    /// q-values of zstd, br and gzip (by [`Coding`] order): `None` when not named.
    named: [Option<u16>; 3],
    /// `*`'s q-value, for the codings not named.
    star: Option<u16>,
    /// `identity`'s q-value when named.
    identity: Option<u16>,
}

impl Codings {
    /// The q-value (0 to 1000) the client gives `coding`; 0 when not accepted.
    pub fn q(&self, coding: Coding) -> u16 {
        self.named[coding.index()].or(self.star).unwrap_or(0)
    }

    /// Whether the named coding (`br`, `zstd`, `gzip`) is accepted.
    pub fn accepts(&self, coding: &str) -> bool {
        Coding::from_name(coding.as_bytes()).is_some_and(|c| self.q(c) > 0)
    }

    /// The accepted coding with the highest q-value; ties go to the first in `order`.
    pub fn best(&self, order: &[Coding]) -> Option<Coding> {
        let mut best = None;
        let mut best_q = 0;
        for &c in order {
            let q = self.q(c);
            if q > best_q {
                best = Some(c);
                best_q = q;
            }
        }
        best
    }

    /// The client refuses an unencoded response (`identity;q=0`, or `*;q=0` without naming
    /// identity).
    pub fn identity_refused(&self) -> bool {
        self.identity.or(self.star.filter(|&q| q == 0)) == Some(0)
    }
}

/// Evaluates the values of every `Accept-Encoding` field of a request, in order. An element
/// with an invalid q-value is ignored; a coding named twice keeps its last q-value.
pub fn accepted_codings<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Codings {
    let mut c = Codings::default();
    for value in values {
        for element in list_elements(value) {
            let mut parts = element.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            let mut q = Some(1000);
            for param in parts {
                let param = param.trim_ascii();
                if let Some(v) = param
                    .strip_prefix(b"q=")
                    .or_else(|| param.strip_prefix(b"Q="))
                {
                    q = parse_q(v);
                }
            }
            let Some(q) = q else { continue };
            if let Some(coding) = Coding::from_name(name) {
                c.named[coding.index()] = Some(q);
            } else if name == b"*" {
                c.star = Some(q);
            } else if name.eq_ignore_ascii_case(b"identity") {
                c.identity = Some(q);
            }
        }
    }
    c
}

/// A q-value (RFC 9110 section 12.4.2: `0` to `1` with up to three decimals) in thousandths.
fn parse_q(q: &[u8]) -> Option<u16> {
    let q = q.trim_ascii();
    let (&first, rest) = q.split_first()?;
    let whole = match first {
        b'0' => 0u16,
        b'1' => 1000,
        _ => return None,
    };
    let decimals = match rest.split_first() {
        None => return Some(whole),
        Some((b'.', d)) if d.len() <= 3 && d.iter().all(u8::is_ascii_digit) => d,
        Some(_) => return None,
    };
    let mut frac = 0u16;
    for i in 0..3 {
        frac = frac * 10 + decimals.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match whole {
        0 => Some(frac),
        _ if frac == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codings(v: &str) -> Codings {
        accepted_codings([v.as_bytes()])
    }

    fn accepted(v: &str) -> [bool; 3] {
        let c = codings(v);
        [c.accepts("br"), c.accepts("zstd"), c.accepts("gzip")]
    }

    #[test]
    fn q_values_and_wildcards() {
        assert_eq!(accepted("gzip, deflate, br, zstd"), [true; 3]);
        assert_eq!(accepted("GZIP;q=0.5"), [false, false, true]);
        assert_eq!(accepted("br;q=0, gzip"), [false, false, true]);
        assert_eq!(accepted("*;q=0.1, gzip;q=0"), [true, true, false]);
        assert_eq!(accepted("br;q=0.000"), [false; 3]);
        assert_eq!(accepted("identity"), [false; 3]);
        assert_eq!(accepted("x-gzip"), [false, false, true]);
        assert_eq!(accepted(""), [false; 3]);
        // Invalid q-values leave the element out.
        assert_eq!(accepted("gzip;q=2, br;q=0.5x, zstd;q=1.0001"), [false; 3]);
    }

    #[test]
    fn best_by_q_then_server_order() {
        let order = Coding::ALL;
        assert_eq!(codings("gzip, br, zstd").best(&order), Some(Coding::Zstd));
        assert_eq!(
            codings("gzip;q=1, br;q=0.9, zstd;q=0.8").best(&order),
            Some(Coding::Gzip)
        );
        assert_eq!(
            codings("gzip, br").best(&[Coding::Gzip, Coding::Br]),
            Some(Coding::Gzip)
        );
        assert_eq!(codings("*;q=0.5, br;q=0.7").best(&order), Some(Coding::Br));
        assert_eq!(codings("deflate, identity").best(&order), None);
        assert_eq!(codings("zstd;q=0.001").best(&[Coding::Gzip]), None);
    }

    #[test]
    fn identity_refusal() {
        assert!(codings("gzip, identity;q=0").identity_refused());
        assert!(codings("*;q=0").identity_refused());
        assert!(!codings("*;q=0, identity").identity_refused());
        assert!(!codings("gzip").identity_refused());
        assert!(!codings("").identity_refused());
    }

    #[test]
    fn q_value_forms() {
        assert_eq!(parse_q(b"1"), Some(1000));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.05"), Some(50));
        assert_eq!(parse_q(b"0."), Some(0));
        assert_eq!(parse_q(b"1.5"), None);
        assert_eq!(parse_q(b".5"), None);
        assert_eq!(parse_q(b"0.1234"), None);
    }
}
