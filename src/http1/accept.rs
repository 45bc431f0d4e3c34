//! `Accept-Encoding` (RFC 9110 section 12.5.3): which content codings a client takes. A coding
//! is accepted when listed (or covered by `*`) with a q-value above zero; `x-gzip` is gzip.

use super::list_elements;

/// The codings slipstream can send, and whether the client accepts each.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Codings {
    /// `br`.
    pub br: bool,
    /// `zstd`.
    pub zstd: bool,
    /// `gzip`.
    pub gzip: bool,
}

impl Codings {
    /// Whether the named coding (`br`, `zstd`, `gzip`) is accepted.
    pub fn accepts(&self, coding: &str) -> bool {
        match coding {
            "br" => self.br,
            "zstd" => self.zstd,
            "gzip" => self.gzip,
            _ => false,
        }
    }
}

/// Evaluates the values of every `Accept-Encoding` field of a request, in order.
pub fn accepted_codings<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Codings {
    // For each coding: Some(q > 0) once named explicitly; `*` applies to the others.
    let mut named = [None::<bool>; 3];
    let mut star = None;
    for value in values {
        for element in list_elements(value) {
            let mut parts = element.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            let mut positive = true;
            for param in parts {
                let param = param.trim_ascii();
                if let Some(q) = param
                    .strip_prefix(b"q=")
                    .or_else(|| param.strip_prefix(b"Q="))
                {
                    positive = !is_zero(q);
                }
            }
            let slot = if name.eq_ignore_ascii_case(b"br") {
                &mut named[0]
            } else if name.eq_ignore_ascii_case(b"zstd") {
                &mut named[1]
            } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                &mut named[2]
            } else if name == b"*" {
                &mut star
            } else {
                continue;
            };
            *slot = Some(positive);
        }
    }
    let get = |i: usize| named[i].or(star).unwrap_or(false);
    Codings {
        br: get(0),
        zstd: get(1),
        gzip: get(2),
    }
}

/// A q-value of zero: `0`, `0.`, `0.0`, `0.00`, `0.000`.
fn is_zero(q: &[u8]) -> bool {
    let q = q.trim_ascii();
    match q.split_first() {
        Some((b'0', rest)) => match rest.split_first() {
            None => true,
            Some((b'.', digits)) => digits.iter().all(|&d| d == b'0'),
            Some(_) => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codings(v: &str) -> Codings {
        accepted_codings([v.as_bytes()])
    }

    #[test]
    fn q_values_and_wildcards() {
        let all = Codings {
            br: true,
            zstd: true,
            gzip: true,
        };
        assert_eq!(codings("gzip, deflate, br, zstd"), all);
        assert_eq!(
            codings("GZIP;q=0.5"),
            Codings {
                gzip: true,
                ..Codings::default()
            }
        );
        assert_eq!(
            codings("br;q=0, gzip"),
            Codings {
                gzip: true,
                ..Codings::default()
            }
        );
        assert_eq!(
            codings("*;q=0.1, gzip;q=0"),
            Codings {
                br: true,
                zstd: true,
                gzip: false
            }
        );
        assert_eq!(codings("br;q=0.000"), Codings::default());
        assert_eq!(codings("identity"), Codings::default());
        assert_eq!(
            codings("x-gzip"),
            Codings {
                gzip: true,
                ..Codings::default()
            }
        );
        assert_eq!(codings(""), Codings::default());
    }
}
