//! The cache's side of the admin listener: purges (`POST /cache/purge?zone=Z&key=K` removes
//! one key with all its variants, `&prefix=P` every key that starts with P, `&pattern=RE` every
//! key a regular expression matches (Varnish's ban on URLs, applied at once), without `zone`
//! every zone). The zones' figures are `observe/caches.rs`'s.

use std::sync::Arc;

use super::zone::Zone;

/// What a purge asks, read from its query.
#[derive(Debug, PartialEq, Eq)]
pub struct Purge {
    /// The zone (every zone when `None`).
    pub zone: Option<String>,
    /// One key, or every key with this prefix.
    pub what: Target,
}

/// A purge's target.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// This key.
    Key(String),
    /// Keys starting with this.
    Prefix(String),
    /// Keys this regular expression matches (checked when the query is read).
    Pattern(String),
}

/// Reads a purge's query (`zone=...&key=...` or `prefix=...`, percent-encoded).
pub fn parse_purge(query: &str) -> Result<Purge, &'static str> {
    let mut zone = None;
    let mut what = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value).ok_or("a value is not valid percent-encoded UTF-8")?;
        match name {
            "zone" => zone = Some(value),
            "key" if what.is_none() => what = Some(Target::Key(value)),
            "prefix" if what.is_none() => what = Some(Target::Prefix(value)),
            "pattern" if what.is_none() => {
                regex::Regex::new(&value)
                    .map_err(|_| "pattern is not a valid regular expression")?;
                what = Some(Target::Pattern(value));
            }
            "key" | "prefix" | "pattern" => return Err("one of key, prefix or pattern"),
            _ => return Err("unknown parameter (zone, key, prefix, pattern)"),
        }
    }
    let what = what.ok_or("key=KEY, prefix=PREFIX or pattern=REGEX is required")?;
    Ok(Purge { zone, what })
}

/// Runs a purge over `zones`: how many keys went, or why nothing did.
pub fn purge(zones: &[Arc<Zone>], p: &Purge) -> Result<usize, String> {
    let chosen: Vec<&Arc<Zone>> = zones
        .iter()
        .filter(|z| p.zone.as_ref().is_none_or(|n| *n == z.name))
        .collect();
    if chosen.is_empty() {
        return Err(match &p.zone {
            Some(n) => format!("no cache zone {n:?}"),
            None => "no cache zones".to_string(),
        });
    }
    let pattern = match &p.what {
        Target::Pattern(re) => Some(regex::Regex::new(re).map_err(|e| e.to_string())?),
        _ => None,
    };
    Ok(chosen
        .iter()
        .map(|z| match (&p.what, &pattern) {
            (Target::Key(k), _) => usize::from(z.remove(k)),
            (Target::Prefix(prefix), _) => z.remove_where(|key| key.starts_with(prefix.as_str())),
            (Target::Pattern(_), Some(re)) => z.remove_where(|key| re.is_match(key)),
            (Target::Pattern(_), None) => 0,
        })
        .sum())
}

fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_queries() {
        let p = parse_purge("zone=main&key=http%3A%2F%2Fa%2Fx%3Fy%3D1").unwrap();
        assert_eq!(p.zone.as_deref(), Some("main"));
        assert_eq!(p.what, Target::Key("http://a/x?y=1".into()));
        let p = parse_purge("prefix=http://a/img/").unwrap();
        assert_eq!(
            (p.zone, p.what),
            (None, Target::Prefix("http://a/img/".into()))
        );
        assert!(parse_purge("zone=main").is_err());
        assert!(parse_purge("key=a&prefix=b").is_err());
        assert!(parse_purge("key=%zz").is_err());
        assert!(parse_purge("what=1&key=a").is_err());
        let p = parse_purge("pattern=%5C.jpg%24").unwrap();
        assert_eq!(p.what, Target::Pattern("\\.jpg$".into()));
        assert!(parse_purge("pattern=(").is_err());
        assert!(parse_purge("pattern=a&key=b").is_err());
    }
}
