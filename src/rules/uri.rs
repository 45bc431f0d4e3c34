//! The path rules see (nginx's `$uri`): the target's path decoded and normalised, as nginx
//! does before it chooses a location, and escaped again when a rewritten path is sent on.
//!
//! `%XX` is decoded (a bad escape or `%00` is refused), a decoded `/` and `.` separate and
//! count as such, `.` segments are dropped, `..` removes the segment before it (above the
//! root it is refused), and runs of `/` become one. A path with none of `%`, `/.` or `//`
//! is used as it came, with no copy.

use std::borrow::Cow;

/// The path of `target` (before `?`), decoded and normalised.
pub fn normalize(target: &str) -> Result<Cow<'_, str>, &'static str> {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    let b = path.as_bytes();
    let simple = !b.contains(&b'%')
        && !b
            .windows(2)
            .any(|w| w[0] == b'/' && matches!(w[1], b'.' | b'/'));
    if simple {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(b)?;
    let mut segments: Vec<&[u8]> = Vec::new();
    let trailing = decoded.ends_with(b"/") || decoded.ends_with(b"/.") || decoded.ends_with(b"/..");
    for segment in decoded.split(|&c| c == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                if segments.pop().is_none() {
                    return Err("path climbs above the root");
                }
            }
            s => segments.push(s),
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if trailing || out.is_empty() {
        out.push(b'/');
    }
    Ok(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
}

/// `%XX` escapes decoded.
fn decode(b: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|&c| hex(c)),
                b.get(i + 2).and_then(|&c| hex(c)),
            ) else {
                return Err("bad %-escape in the path");
            };
            let byte = (h * 16 + l) as u8;
            if byte == 0 {
                return Err("%00 in the path");
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// A rewritten path escaped for a request line: controls, space, `"`, `#`, `%`, `?`, `<`, `>`,
/// `\`, `^`, `` ` ``, `{`, `|`, `}` and bytes above 0x7E become `%XX` (nginx's set).
pub fn escape(path: &str, out: &mut String) {
    for &c in path.as_bytes() {
        let plain = c > b' '
            && c < 0x7f
            && !matches!(
                c,
                b'"' | b'#' | b'%' | b'?' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            );
        if plain {
            out.push(c as char);
        } else {
            use std::fmt::Write;
            let _ = write!(out, "%{c:02X}");
        }
    }
}

/// A query, or a Location, made safe for a request line or a field: controls, space, `#`
/// (and `"` `<` `>` `\\` `^` `` ` `` `{` `|` `}`) and bytes above 0x7E become `%XX`; `%`, `&`,
/// `=`, `?`, `+` and the rest stay, so what a rule wrote keeps its meaning.
pub fn escape_query(text: &str, out: &mut String) {
    for &c in text.as_bytes() {
        let plain = c > b' '
            && c < 0x7f
            && !matches!(
                c,
                b'"' | b'#' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            );
        if plain {
            out.push(c as char);
        } else {
            use std::fmt::Write;
            let _ = write!(out, "%{c:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_as_nginx() {
        let n = |t: &str| normalize(t).map(Cow::into_owned);
        assert!(matches!(
            normalize("/a/b.html?x=/../"),
            Ok(Cow::Borrowed("/a/b.html"))
        ));
        assert_eq!(n("/foo/bar/..").unwrap(), "/foo/");
        assert_eq!(n("/a//b///c").unwrap(), "/a/b/c");
        assert_eq!(n("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(n("/a%2Fb%2E%2E/c").unwrap(), "/a/b../c");
        assert_eq!(n("/%2e%2e/x").err(), Some("path climbs above the root"));
        assert_eq!(n("/a%20b%3F").unwrap(), "/a b?");
        assert_eq!(n("/admin/../public/%61dmin").unwrap(), "/public/admin");
        assert!(n("/a%zz").is_err());
        assert!(n("/a%0").is_err());
        assert!(n("/a%00").is_err());
        assert_eq!(n("/..").err(), Some("path climbs above the root"));
        let mut out = String::new();
        escape("/a b?c%\u{e9}", &mut out);
        assert_eq!(out, "/a%20b%3Fc%25%C3%A9");
        let mut out = String::new();
        escape_query("a=1 2&b=%41\r\n#x", &mut out);
        assert_eq!(out, "a=1%202&b=%41%0D%0A%23x");
    }
}
