//! The response cache's parsers under fuzzing: `Cache-Control` and `Vary` read from any head,
//! the freshness decisions made from them, the disk tier's file format read back from any
//! bytes (a corrupt or truncated file is a miss, never a panic or another entry), and the admin
//! listener's purge query.

use crate::cache::control::{Directives, MAX_DELTA};
use crate::cache::disk::{parse_file, trailer_bytes};
use crate::cache::entry::{build, response_facts, vary_value, Ignore, Stored};
use crate::cache::freshness::{storable, Fallbacks, RequestFacts};
use crate::cache::judge;

/// `data` is a response head, a `\0`, request field lines, a `\0`, and bytes read as a disk
/// file. Checks: directives and facts read without panicking and within bounds; a stored entry
/// matches the request it was stored for; its file reads back as the same entry, and no
/// single-byte change or cut of that file reads back.
pub(super) fn cache_entry(data: &[u8]) -> bool {
    let mut parts = data.splitn(3, |&b| b == 0);
    let (head, request, file) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let d = Directives::parse([head]);
    for v in [
        d.max_age,
        d.s_maxage,
        d.stale_if_error,
        d.stale_while_revalidate,
        d.min_fresh,
    ] {
        assert!(v.is_none_or(|v| v <= MAX_DELTA));
    }
    let _ = parse_file(file);
    if let Ok(purge) = crate::cache::admin::parse_purge(&String::from_utf8_lossy(request)) {
        if let crate::cache::admin::Target::Pattern(re) = &purge.what {
            assert!(
                regex::Regex::new(re).is_ok(),
                "a pattern is checked when read"
            );
        }
    }
    let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
    text.extend(head.iter().filter(|&&b| b != b'\r'));
    text.extend_from_slice(b"\r\n\r\n");
    let mut fields = b"GET / HTTP/1.1\r\n".to_vec();
    fields.extend_from_slice(request);
    let facts = response_facts(200, &text, Ignore::default());
    let fallbacks = Fallbacks {
        valid: vec![(0, 5)],
        store_set_cookie: false,
        heuristic: true,
    };
    let Ok(lifetime) = storable(&facts, RequestFacts::default(), &fallbacks, 1_000_000) else {
        return false;
    };
    let stored = Stored {
        key: "http://fuzz/",
        request_fields: &fields,
        request_time: 999_990,
        response_time: 1_000_000,
        lifetime,
        ignore: Ignore::default(),
    };
    let body = bytes::Bytes::copy_from_slice(file);
    let entry = build(&text, 200, body, &facts, stored);
    assert!(
        entry.matches(&fields),
        "an entry matches the request it was stored for"
    );
    for (name, value) in &entry.vary {
        assert_eq!(&vary_value(&fields, name), value);
    }
    let _ = judge(&entry, &Directives::parse([request]), 1_000_100);
    let mut disk = file.to_vec();
    let body = (file.len() as u64, xxhash_rust::xxh3::xxh3_64(file));
    disk.extend_from_slice(&trailer_bytes(&entry, body));
    let (back, len) = parse_file(&disk).expect("a file reads back");
    assert_eq!(
        (&back.head, len, &back.vary),
        (&entry.head, file.len() as u64, &entry.vary)
    );
    let at = usize::from(head.first().copied().unwrap_or(0)) * 7 % disk.len();
    let mut changed = disk.clone();
    changed[at] ^= 0x20;
    // The metadata and the body are both checksummed: no change reads back.
    assert!(parse_file(&changed).is_none());
    assert!(parse_file(&disk[..disk.len() - 1]).is_none());
    true
}
