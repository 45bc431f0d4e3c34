//! The `Date` field of every response the proxy makes itself (RFC 9110 6.6.1: an origin with
//! a clock sends one): one cached value per worker thread, formatted when the second changes,
//! never per response. Errors, redirects, file answers and FastCGI heads without a `Date` all
//! take it from here, so they agree within a worker.

use std::cell::Cell;
use std::time::SystemTime;

/// Length of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub const DATE_LEN: usize = 29;

thread_local! {
    /// The second last formatted and its HTTP date.
    static CACHED: Cell<(u64, [u8; DATE_LEN])> = const { Cell::new((0, [0; DATE_LEN])) };
}

/// The `Date` field value for now (IMF-fixdate), reformatted at most once a second per thread.
pub fn http_date_now() -> [u8; DATE_LEN] {
    let now = SystemTime::now();
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let (second, text) = cached.get();
        if second == secs && secs != 0 {
            return text;
        }
        let formatted = httpdate::fmt_http_date(now);
        let mut fresh = [0u8; DATE_LEN];
        if formatted.len() == DATE_LEN {
            fresh.copy_from_slice(formatted.as_bytes());
            cached.set((secs, fresh));
            fresh
        } else {
            // Years past 9999 do not fit the format: keep the last good value.
            text
        }
    })
}

/// Appends the field line `Date: <now>\r\n`.
pub fn put_date(out: &mut Vec<u8>) {
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(&http_date_now());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)] // reads the system clock, which Miri isolates
    fn the_date_parses_and_is_cached() {
        let first = http_date_now();
        let text = std::str::from_utf8(&first).unwrap();
        let parsed = httpdate::parse_http_date(text).unwrap();
        let age = SystemTime::now().duration_since(parsed).unwrap_or_default();
        assert!(age.as_secs() < 60, "{text}");
        let mut line = Vec::new();
        put_date(&mut line);
        assert!(line.starts_with(b"Date: ") && line.ends_with(b" GMT\r\n"));
    }
}
