//! The optional directory listing: an HTML page of a directory's entries, sorted by name, every
//! name HTML-escaped in text and percent-encoded in links. Dotfiles are left out unless the
//! route serves them.

use std::fs::File;
use std::io;

use rustix::fs::{statat, AtFlags, Dir, FileType};

/// Renders the listing of `dir`, whose URI is `uri` (ending in `/`).
pub fn render(dir: &File, uri: &str, dotfiles: bool) -> io::Result<Vec<u8>> {
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || (name.starts_with(b".") && !dotfiles) {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown | FileType::Symlink => {
                statat(dir, entry.file_name(), AtFlags::empty())
                    .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory)
            }
            _ => false,
        };
        names.push((name.to_vec(), is_dir));
    }
    names.sort();
    let title = escape_html(uri.as_bytes());
    let mut out = Vec::with_capacity(256 + names.len() * 96);
    out.extend_from_slice(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    out.extend_from_slice(title.as_bytes());
    out.extend_from_slice(b"</title></head>\n<body><h1>Index of ");
    out.extend_from_slice(title.as_bytes());
    out.extend_from_slice(b"</h1>\n<ul>\n");
    if uri != "/" {
        out.extend_from_slice(b"<li><a href=\"../\">../</a></li>\n");
    }
    for (name, is_dir) in &names {
        let slash = if *is_dir { "/" } else { "" };
        out.extend_from_slice(b"<li><a href=\"./");
        out.extend_from_slice(encode_href(name).as_bytes());
        out.extend_from_slice(slash.as_bytes());
        out.extend_from_slice(b"\">");
        out.extend_from_slice(escape_html(name).as_bytes());
        out.extend_from_slice(slash.as_bytes());
        out.extend_from_slice(b"</a></li>\n");
    }
    out.extend_from_slice(b"</ul>\n</body></html>\n");
    Ok(out)
}

/// Escapes text for HTML (invalid UTF-8 shown as U+FFFD).
fn escape_html(s: &[u8]) -> String {
    let text = String::from_utf8_lossy(s);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a name for a link: everything but unreserved characters.
fn encode_href(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for &b in name {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_and_encoded() {
        assert_eq!(
            escape_html(b"<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(encode_href(b"a b/<c>?"), "a%20b%2F%3Cc%3E%3F");
    }
}
