//! A request target turned into a path relative to a root, without I/O: the query is dropped,
//! the path is percent-decoded exactly once, and its segments are normalized (`.` and empty
//! segments dropped, `..` taken back). Anything that would climb above the root, or that holds
//! a NUL or a backslash once decoded, is refused; `%252e` decodes to the name `%2e`, not to a
//! dot. Symlinks, which only the file system knows about, are checked where files are opened.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Why a target cannot name a file under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not an origin-form target starting with `/`.
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A NUL or a backslash, encoded or not.
    ForbiddenByte,
    /// `..` would climb above the root.
    Traversal,
}

/// A normalized path under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelativePath {
    /// The segments joined with `/`, without a leading slash (empty for the root itself).
    pub path: PathBuf,
    /// The target ended with `/` (a directory was asked for).
    pub directory: bool,
    /// Some segment starts with `.` (a dotfile or dot-directory, refused by default), other
    /// than a leading `.well-known` (RFC 8615: ACME challenges and the like live there).
    pub hidden: bool,
}

/// Resolves the path part of a request target (`/a/b?q` gives `a/b`).
pub fn resolve(target: &str) -> Result<RelativePath, PathError> {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if path.contains('%') {
        normalize(&percent_decode(path.as_bytes())?)
    } else {
        normalize(path.as_bytes())
    }
}

/// Normalizes an already decoded absolute path (`try_files` candidates, built from a decoded
/// path, are never decoded twice).
pub fn normalize(decoded: &[u8]) -> Result<RelativePath, PathError> {
    if decoded.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    if decoded.iter().any(|&b| b == 0 || b == b'\\') {
        return Err(PathError::ForbiddenByte);
    }
    // The common case, a path already in normal form (`/a/b.css`, `/dir/`), needs no
    // segment list: the path is the bytes after the first slash.
    let body = &decoded[1..];
    let body = body.strip_suffix(b"/").unwrap_or(body);
    let normal = body.is_empty()
        || body
            .split(|&b| b == b'/')
            .all(|s| !matches!(s, b"" | b"." | b".."));
    if normal {
        let hidden = body
            .split(|&b| b == b'/')
            .enumerate()
            .any(|(i, s)| s.starts_with(b".") && !(i == 0 && s == b".well-known"));
        return Ok(RelativePath {
            path: PathBuf::from(OsStr::from_bytes(body)),
            directory: decoded.ends_with(b"/"),
            hidden,
        });
    }
    normalize_segments(decoded)
}

/// The general case of [`normalize`], segment by segment (public so the fuzzer can check that
/// the fast path agrees with it). `decoded` starts with `/` and holds no NUL or backslash.
pub fn normalize_segments(decoded: &[u8]) -> Result<RelativePath, PathError> {
    let mut segments: Vec<&[u8]> = Vec::new();
    for segment in decoded.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                if segments.pop().is_none() {
                    return Err(PathError::Traversal);
                }
            }
            s => segments.push(s),
        }
    }
    let last = decoded.rsplit(|&b| b == b'/').next().unwrap_or_default();
    let directory = decoded.ends_with(b"/") || last == b"." || last == b"..";
    let hidden = segments
        .iter()
        .enumerate()
        .any(|(i, s)| s.starts_with(b".") && !(i == 0 && *s == b".well-known"));
    let joined = segments.join(&b'/');
    Ok(RelativePath {
        path: PathBuf::from(OsStr::from_bytes(&joined)),
        directory,
        hidden,
    })
}

/// Decodes `%XX` escapes once.
fn percent_decode(s: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(PathError::BadEscape)?;
            let value = std::str::from_utf8(hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .filter(|_| hex.iter().all(u8::is_ascii_hexdigit))
                .ok_or(PathError::BadEscape)?;
            out.push(value);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &str) -> String {
        resolve(target).unwrap().path.to_string_lossy().into_owned()
    }

    #[test]
    fn normal_paths() {
        assert_eq!(ok("/"), "");
        assert_eq!(ok("/a/b.txt?x=1"), "a/b.txt");
        assert_eq!(ok("//a/./b/"), "a/b");
        assert_eq!(ok("/a/c/../b"), "a/b");
        assert_eq!(ok("/caf%C3%A9"), "café");
        assert_eq!(ok("/a%20b"), "a b");
        assert!(resolve("/a/").unwrap().directory);
        assert!(!resolve("/a").unwrap().directory);
        assert!(resolve("/.git/config").unwrap().hidden);
        assert!(resolve("/a/.env").unwrap().hidden);
        assert!(!resolve("/.well-known/acme-challenge/x").unwrap().hidden);
        assert!(resolve("/.well-known/.x").unwrap().hidden);
        assert!(resolve("/a/.well-known/x").unwrap().hidden);
    }

    /// The traversal table of the issue: each fails safely, refused or kept under the root.
    #[test]
    fn traversal_attempts_stay_under_the_root() {
        for target in [
            "/../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/a/..%2f..%2fetc",
            "/%2E%2E/x",
        ] {
            assert_eq!(resolve(target), Err(PathError::Traversal), "{target}");
        }
        for target in ["/..\\etc", "/a%5c..%5cb", "/a%00.txt", "/a\0b"] {
            assert_eq!(resolve(target), Err(PathError::ForbiddenByte), "{target}");
        }
        for target in ["/%", "/%2", "/%zz", "/%+1"] {
            assert_eq!(resolve(target), Err(PathError::BadEscape), "{target}");
        }
        // Decoded once: %252e%252e is the literal name "%2e%2e", not a parent directory.
        assert_eq!(ok("/%252e%252e/etc"), "%2e%2e/etc");
        assert_eq!(resolve("http://x/a"), Err(PathError::NotAbsolute));
    }
}
