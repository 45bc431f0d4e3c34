//! The optional directory listing (`list_directories`, `serve --browse`): a directory's entries
//! with their sizes and modification times, sorted by the column the URL names
//! (`?sort=name|size|time&order=asc|desc`, directories first), as an HTML page (breadcrumbs, a
//! parent link, readable on a phone, no script) or, for `Accept: application/json`, as nginx's
//! `autoindex_format json` array. Every name is HTML-escaped in text, percent-encoded in links
//! and JSON-escaped in JSON. Dotfiles are left out unless the route serves them. Reading the
//! directory is the only I/O ([`read`]); the rest works on the entries, so it is tested and
//! fuzzed on values.

use std::fs::File;
use std::io;

use rustix::fs::{statat, AtFlags, Dir, FileType};

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A directory (or a link to one): listed first, with a trailing slash.
    Directory,
    /// A regular file (or a link to one).
    File,
    /// Anything else: a dangling link, a socket, a device.
    Other,
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name as stored (any bytes but `/` and NUL).
    pub name: Vec<u8>,
    /// What it is, links followed.
    pub kind: Kind,
    /// Its size in bytes (files only; 0 otherwise).
    pub size: u64,
    /// Its modification time, in seconds since the Unix epoch.
    pub mtime: i64,
}

/// The column a listing is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// By name, byte order.
    Name,
    /// By size.
    Size,
    /// By modification time.
    Time,
}

/// How a listing is sorted: a column and a direction, from the request's query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// The column.
    pub column: Column,
    /// Largest, latest or last first.
    pub descending: bool,
}

impl Order {
    /// Reads `sort=name|size|time` and `order=asc|desc` from a query (Caddy's names); anything
    /// else, or nothing, is by name, ascending.
    pub fn from_query(query: &str) -> Order {
        let mut order = Order {
            column: Column::Name,
            descending: false,
        };
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("sort", "name")) => order.column = Column::Name,
                Some(("sort", "size")) => order.column = Column::Size,
                Some(("sort", "time")) => order.column = Column::Time,
                Some(("order", "desc")) => order.descending = true,
                Some(("order", "asc")) => order.descending = false,
                _ => {}
            }
        }
        order
    }

    fn query(self) -> String {
        let column = match self.column {
            Column::Name => "name",
            Column::Size => "size",
            Column::Time => "time",
        };
        let order = if self.descending { "desc" } else { "asc" };
        format!("?sort={column}&amp;order={order}")
    }
}

/// Whether a request's `Accept` asks for the JSON form (it names `application/json`).
pub fn wants_json(accept: Option<&[u8]>) -> bool {
    accept.is_some_and(|a| {
        a.windows(16)
            .any(|w| w.eq_ignore_ascii_case(b"application/json"))
    })
}

/// Reads the entries of `dir` (dotfiles only with `dotfiles`). Links are followed for their
/// kind, size and time; without `links_out`, only a link that stays beneath `dir`: one whose
/// target is elsewhere is listed by name alone, so the listing tells nothing of files the
/// route would not serve.
pub fn read(dir: &File, dotfiles: bool, links_out: bool) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || (name.starts_with(b".") && !dotfiles) {
            continue;
        }
        // A link (or an entry whose type the file system does not say) is resolved beneath
        // the folder unless links out are served.
        let maybe_link = matches!(entry.file_type(), FileType::Symlink | FileType::Unknown);
        if maybe_link && !links_out {
            entries.push(beneath(dir, name));
            continue;
        }
        let stat = statat(dir, entry.file_name(), AtFlags::empty())
            .or_else(|_| statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW));
        let (kind, size, mtime) = match stat {
            Ok(s) => match FileType::from_raw_mode(s.st_mode) {
                FileType::Directory => (Kind::Directory, 0, s.st_mtime),
                FileType::RegularFile => (Kind::File, s.st_size as u64, s.st_mtime),
                _ => (Kind::Other, 0, s.st_mtime),
            },
            // Unknown: no time shown on the page (the JSON form says 1970).
            Err(_) => (Kind::Other, 0, i64::MIN),
        };
        entries.push(Entry {
            name: name.to_vec(),
            kind,
            size,
            mtime,
        });
    }
    Ok(entries)
}

/// The entry `name` of `dir` as the route would open it, without leaving `dir` (openat2's
/// `RESOLVE_BENEATH`, or its checked fallback on kernels without it): a link elsewhere, or
/// anything that does not open, is listed by name alone.
fn beneath(dir: &File, name: &[u8]) -> Entry {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let rel = std::path::Path::new(std::ffi::OsStr::from_bytes(name));
    let (kind, size, mtime) = match super::open::open_beneath(dir, rel, false) {
        Ok(super::open::Opened::File(_, meta)) => (Kind::File, meta.len(), meta.mtime()),
        Ok(super::open::Opened::Directory(d)) => {
            let mtime = d.metadata().map_or(i64::MIN, |m| m.mtime());
            (Kind::Directory, 0, mtime)
        }
        Err(_) => (Kind::Other, 0, i64::MIN),
    };
    Entry {
        name: name.to_vec(),
        kind,
        size,
        mtime,
    }
}

/// Sorts entries: directories first, then by the column in its direction, ties by name.
pub fn sort(entries: &mut [Entry], order: Order) {
    entries.sort_by(|a, b| {
        let by_column = match order.column {
            Column::Name => a.name.cmp(&b.name),
            Column::Size => a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)),
            Column::Time => a.mtime.cmp(&b.mtime).then_with(|| a.name.cmp(&b.name)),
        };
        let by_column = if order.descending {
            by_column.reverse()
        } else {
            by_column
        };
        let dirs_first = (a.kind != Kind::Directory).cmp(&(b.kind != Kind::Directory));
        dirs_first.then(by_column)
    });
}

const STYLE: &str = "\
body{font:15px/1.5 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;margin:0;color:#1f2328;background:#fff}\
header{padding:.9rem 1.25rem;border-bottom:1px solid #d0d7de;background:#f6f8fa}\
h1{font-size:1.05rem;margin:0;font-weight:600;word-break:break-all}\
a{color:#0969da;text-decoration:none}a:hover{text-decoration:underline}\
main{padding:.25rem 1.25rem 1rem;overflow-x:auto}\
table{border-collapse:collapse;width:100%}\
th,td{padding:.4rem .6rem;text-align:left;border-bottom:1px solid #eaeef2}\
th{font-weight:600;white-space:nowrap}th a{color:inherit}\
.size{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}\
.time{white-space:nowrap;color:#59636e;font-variant-numeric:tabular-nums}\
td.name{word-break:break-all}tr.dir td.name a{font-weight:600}\
tbody tr:hover td{background:#f6f8fa}\
footer{color:#59636e;font-size:.85rem;padding:0 1.25rem 1.25rem}\
@media (max-width:640px){.time{display:none}th,td{padding:.55rem .4rem}}\
@media (prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}\
header{background:#161b22;border-color:#30363d}th,td{border-color:#21262d}a{color:#4493f8}\
tbody tr:hover td{background:#161b22}.time,footer{color:#8d96a0}}";

/// The `Content-Security-Policy` a listing page goes out with: its inline style, nothing else
/// (no script, no outside fetch), so a name that got past escaping still could not run.
pub const PAGE_POLICY: &[u8] = b"default-src 'none'; style-src 'unsafe-inline'";

/// The HTML page of sorted `entries` of the directory at `uri` (decoded, ending in `/`). Links
/// are relative to the page, as nginx's autoindex writes them (so they follow a rewrite or a
/// proxy's prefix), or absolute when the page is served `elsewhere`, for another URL.
pub fn html(entries: &[Entry], uri: &str, order: Order, elsewhere: bool) -> Vec<u8> {
    let title = escape_html(uri.as_bytes());
    let mut out = String::with_capacity(2048 + entries.len() * 200);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.push_str(&format!(
        "<title>Index of {title}</title><style>{STYLE}</style></head>\n"
    ));
    out.push_str("<body><header><h1>Index of ");
    breadcrumbs(uri, &mut out);
    out.push_str("</h1></header>\n<main><table>\n<thead><tr>");
    for (column, label, class) in [
        (Column::Name, "Name", "name"),
        (Column::Size, "Size", "size"),
        (Column::Time, "Modified (UTC)", "time"),
    ] {
        // The column sorted by links to its other direction; the others to ascending (names)
        // or largest and latest first.
        let (next, mark) = if order.column == column {
            let mark = if order.descending { " ↓" } else { " ↑" };
            (!order.descending, mark)
        } else {
            (column != Column::Name, "")
        };
        let link = Order {
            column,
            descending: next,
        }
        .query();
        out.push_str(&format!(
            "<th class=\"{class}\"><a href=\"{link}\">{label}{mark}</a></th>"
        ));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    let base = if elsewhere {
        encode_uri(uri)
    } else {
        "./".to_string()
    };
    if uri != "/" {
        let parent = if elsewhere {
            // The base without its last segment (it ends in `/`).
            &base[..base[..base.len() - 1].rfind('/').map_or(0, |i| i + 1)]
        } else {
            "../"
        };
        out.push_str(&format!("<tr class=\"dir\"><td class=\"name\"><a href=\"{parent}\">../</a></td><td class=\"size\"></td><td class=\"time\"></td></tr>\n"));
    }
    for e in entries {
        row(e, &base, &mut out);
    }
    let dirs = entries.iter().filter(|e| e.kind == Kind::Directory).count();
    let files = entries.len() - dirs;
    out.push_str(&format!(
        "</tbody></table></main>\n<footer>{dirs} {}, {files} {}</footer>\n</body></html>\n",
        if dirs == 1 {
            "directory"
        } else {
            "directories"
        },
        if files == 1 { "file" } else { "files" },
    ));
    out.into_bytes()
}

/// One entry's row: its link (under `base`, the directory's encoded URI), its size (files) and
/// its time.
fn row(e: &Entry, base: &str, out: &mut String) {
    let dir = e.kind == Kind::Directory;
    let slash = if dir { "/" } else { "" };
    let size = match e.kind {
        Kind::File => human_size(e.size),
        Kind::Directory => "—".to_string(),
        Kind::Other => String::new(),
    };
    let (iso, shown) = chrono::DateTime::from_timestamp(e.mtime, 0).map_or_else(
        || (String::new(), String::new()),
        |t| {
            (
                t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                t.format("%Y-%m-%d %H:%M").to_string(),
            )
        },
    );
    out.push_str(&format!(
        "<tr{}><td class=\"name\"><a href=\"{base}{}{slash}\">{}{slash}</a></td><td class=\"size\"{}>{size}</td><td class=\"time\"><time datetime=\"{iso}\">{shown}</time></td></tr>\n",
        if dir { " class=\"dir\"" } else { "" },
        encode_href(&e.name),
        escape_html(&e.name),
        if e.kind == Kind::File {
            format!(" title=\"{} bytes\"", e.size)
        } else {
            String::new()
        },
    ));
}

/// The title's path, each directory a link to itself: `/`, `a/`, `b/`.
fn breadcrumbs(uri: &str, out: &mut String) {
    out.push_str("<a href=\"/\">/</a>");
    let mut href = String::from("/");
    for segment in uri.split('/').filter(|s| !s.is_empty()) {
        href.push_str(&encode_href(segment.as_bytes()));
        href.push('/');
        out.push_str(&format!(
            "<a href=\"{href}\">{}</a>/",
            escape_html(segment.as_bytes())
        ));
    }
}

/// A directory's URI (decoded, ending in `/`) as a link: each segment percent-encoded.
pub fn encode_uri(uri: &str) -> String {
    let mut href = String::from("/");
    for segment in uri.split('/').filter(|s| !s.is_empty()) {
        href.push_str(&encode_href(segment.as_bytes()));
        href.push('/');
    }
    href
}

/// The JSON form: nginx's `autoindex_format json`, one object per entry (`name`, `type`
/// `directory`, `file` or `other`, `mtime` as an HTTP date, and `size` for files).
pub fn json(entries: &[Entry]) -> Vec<u8> {
    let mut out = String::from("[\n");
    for (i, e) in entries.iter().enumerate() {
        let name = serde_json::Value::from(String::from_utf8_lossy(&e.name).into_owned());
        let kind = match e.kind {
            Kind::Directory => "directory",
            Kind::File => "file",
            Kind::Other => "other",
        };
        // HTTP dates run from 1970 to 9999 (a file system may say anything).
        let secs = e.mtime.clamp(0, LAST_HTTP_DATE) as u64;
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        out.push_str(&format!(
            "{{ \"name\":{name}, \"type\":\"{kind}\", \"mtime\":\"{}\"",
            httpdate::fmt_http_date(mtime)
        ));
        if e.kind == Kind::File {
            out.push_str(&format!(", \"size\":{}", e.size));
        }
        out.push_str(if i + 1 < entries.len() {
            " },\n"
        } else {
            " }\n"
        });
    }
    out.push_str("]\n");
    out.into_bytes()
}

/// 9999-12-31 23:59:59 UTC, the last time an HTTP date can say.
const LAST_HTTP_DATE: i64 = 253_402_300_799;

/// A size as people read it: bytes below 1 KiB, then one decimal (`4.2 KiB`, `1.0 GiB`).
fn human_size(size: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if size < 1024 {
        return format!("{size} B");
    }
    let mut value = size as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Escapes text for HTML (invalid UTF-8 shown as U+FFFD).
pub fn escape_html(s: &[u8]) -> String {
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
pub fn encode_href(name: &[u8]) -> String {
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

    fn entry(name: &str, kind: Kind, size: u64, mtime: i64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind,
            size,
            mtime,
        }
    }

    fn names(entries: &[Entry]) -> Vec<&str> {
        entries
            .iter()
            .map(|e| std::str::from_utf8(&e.name).unwrap())
            .collect()
    }

    #[test]
    fn names_are_escaped_and_encoded() {
        assert_eq!(
            escape_html(b"<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(encode_href(b"a b/<c>?"), "a%20b%2F%3Cc%3E%3F");
    }

    #[test]
    fn the_query_names_the_order_and_anything_else_is_by_name() {
        let order = |q| Order::from_query(q);
        assert_eq!(order("sort=size&order=desc").column, Column::Size);
        assert!(order("sort=size&order=desc").descending);
        assert_eq!(order("order=desc&sort=time").column, Column::Time);
        assert_eq!(
            order("sort=%3Cx%3E&order=up"),
            Order {
                column: Column::Name,
                descending: false
            }
        );
        assert_eq!(order(""), order("sort=name&order=asc"));
    }

    #[test]
    fn directories_come_first_in_every_order() {
        let mut e = vec![
            entry("b.txt", Kind::File, 10, 300),
            entry("z", Kind::Directory, 0, 100),
            entry("a.txt", Kind::File, 2000, 100),
            entry("c.txt", Kind::File, 10, 200),
            entry("a", Kind::Directory, 0, 200),
        ];
        sort(&mut e, Order::from_query(""));
        assert_eq!(names(&e), ["a", "z", "a.txt", "b.txt", "c.txt"]);
        sort(&mut e, Order::from_query("sort=size&order=desc"));
        assert_eq!(names(&e), ["z", "a", "a.txt", "c.txt", "b.txt"]);
        sort(&mut e, Order::from_query("sort=time"));
        assert_eq!(names(&e), ["z", "a", "a.txt", "c.txt", "b.txt"]);
        sort(&mut e, Order::from_query("sort=name&order=desc"));
        assert_eq!(names(&e), ["z", "a", "c.txt", "b.txt", "a.txt"]);
    }

    #[test]
    fn the_page_links_each_column_and_each_step_of_the_path() {
        let e = [entry("x y.txt", Kind::File, 4300, 1_764_410_640)];
        let page = html(&e, "/a b/c/", Order::from_query("sort=size"), false);
        let page = String::from_utf8(page).unwrap();
        assert!(
            page.contains(
                "<a href=\"/\">/</a><a href=\"/a%20b/\">a b</a>/<a href=\"/a%20b/c/\">c</a>/"
            ),
            "{page}"
        );
        // Sorted by size ascending: its header links to descending and shows the arrow.
        assert!(
            page.contains("href=\"?sort=size&amp;order=desc\">Size ↑</a>"),
            "{page}"
        );
        assert!(
            page.contains("href=\"?sort=name&amp;order=asc\">Name</a>"),
            "{page}"
        );
        assert!(
            page.contains("href=\"?sort=time&amp;order=desc\">Modified (UTC)</a>"),
            "{page}"
        );
        // At its own URL, links relative to it, as nginx's; served for another URL
        // (try_files), absolute.
        assert!(page.contains("<a href=\"../\">../</a>"), "{page}");
        assert!(
            page.contains("<a href=\"./x%20y.txt\">x y.txt</a>"),
            "{page}"
        );
        let page = html(&e, "/a b/c/", Order::from_query(""), true);
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains("<a href=\"/a%20b/\">../</a>"), "{page}");
        assert!(
            page.contains("<a href=\"/a%20b/c/x%20y.txt\">x y.txt</a>"),
            "{page}"
        );
        assert!(
            page.contains(">4.2 KiB<") && page.contains("title=\"4300 bytes\""),
            "{page}"
        );
        assert!(
            page.contains("<time datetime=\"2025-11-29T10:04:00Z\">2025-11-29 10:04</time>"),
            "{page}"
        );
        assert!(page.contains("0 directories, 1 file"), "{page}");
        assert!(!page.contains("<script"), "{page}");
        let root = String::from_utf8(html(&[], "/", Order::from_query(""), false)).unwrap();
        assert!(!root.contains("../"), "{root}");
    }

    #[test]
    fn the_json_form_is_nginxs_and_reads_back() {
        let e = [
            entry("d", Kind::Directory, 0, 0),
            entry("q\"<\\\n", Kind::File, 7, 1_764_410_645),
        ];
        let text = String::from_utf8(json(&e)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[0]["type"], "directory");
        assert!(v[0].get("size").is_none());
        assert_eq!(v[1]["name"], "q\"<\\\n");
        assert_eq!(v[1]["size"], 7);
        assert_eq!(v[1]["mtime"], "Sat, 29 Nov 2025 10:04:05 GMT");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&String::from_utf8(json(&[])).unwrap())
                .unwrap(),
            serde_json::json!([])
        );
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(5 * 1024 * 1024 * 1024), "5.0 GiB");
        assert_eq!(human_size(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn json_is_asked_for_by_accept() {
        assert!(wants_json(Some(b"application/json")));
        assert!(wants_json(Some(b"text/html;q=0.9, Application/JSON")));
        assert!(!wants_json(Some(b"text/html,*/*")));
        assert!(!wants_json(None));
    }
}
