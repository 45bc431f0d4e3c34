//! `Range: bytes=...` (RFC 9110 section 14) against a representation of known length, without
//! I/O. A header the server may ignore (another unit, bad syntax, too many pieces) means the
//! whole file with 200, as RFC 9110 allows; ranges that overlap or touch are merged, so a
//! request for many tiny overlapping ranges (the "Apache killer") cannot multiply the work.

/// Most ranges served as multipart/byteranges after merging; more means the whole file.
pub const MAX_RANGES: usize = 16;

/// Pieces accepted in one header before it is ignored outright (bounds the parsing work).
const MAX_PIECES: usize = 256;

/// One satisfiable range, inclusive at both ends, within the representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
}

impl ByteRange {
    /// Bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// Never true: a range holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What to send for a `Range` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// The whole representation (200): no Range, or one the server ignores.
    Whole,
    /// One range (206 with Content-Range).
    One(ByteRange),
    /// Several disjoint ranges in ascending order (206 multipart/byteranges).
    Many(Vec<ByteRange>),
    /// No range is satisfiable (416 with `Content-Range: bytes */LEN`).
    Unsatisfiable,
}

/// Evaluates a `Range` header value against a representation of `len` bytes.
pub fn parse_range(value: &[u8], len: u64) -> Ranges {
    let value = trim(value);
    let Some(set) = strip_unit(value) else {
        return Ranges::Whole;
    };
    let mut ranges = Vec::new();
    let mut pieces = 0;
    let mut any = false;
    for piece in set.split(|&b| b == b',') {
        let piece = trim(piece);
        if piece.is_empty() {
            continue; // empty list elements are allowed
        }
        pieces += 1;
        if pieces > MAX_PIECES {
            return Ranges::Whole;
        }
        any = true;
        match parse_piece(piece, len) {
            RangePart::Invalid => return Ranges::Whole,
            RangePart::Unsatisfiable => {}
            RangePart::Range(r) => ranges.push(r),
        }
    }
    if !any {
        return Ranges::Whole;
    }
    let mut ranges = merge(ranges);
    match ranges.len() {
        0 => Ranges::Unsatisfiable,
        1 => Ranges::One(ranges.remove(0)),
        n if n > MAX_RANGES => Ranges::Whole,
        _ => Ranges::Many(ranges),
    }
}

enum RangePart {
    Range(ByteRange),
    Unsatisfiable,
    Invalid,
}

fn parse_piece(piece: &[u8], len: u64) -> RangePart {
    let Some(dash) = piece.iter().position(|&b| b == b'-') else {
        return RangePart::Invalid;
    };
    let (first, last) = (trim(&piece[..dash]), trim(&piece[dash + 1..]));
    if first.is_empty() {
        // suffix-range: the last N bytes
        let Some(n) = digits(last) else {
            return RangePart::Invalid;
        };
        if n == 0 || len == 0 {
            return RangePart::Unsatisfiable;
        }
        let start = len.saturating_sub(n);
        return RangePart::Range(ByteRange {
            start,
            end: len - 1,
        });
    }
    let Some(start) = digits(first) else {
        return RangePart::Invalid;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match digits(last) {
            Some(e) if e >= start => e,
            _ => return RangePart::Invalid,
        }
    };
    if start >= len {
        return RangePart::Unsatisfiable;
    }
    RangePart::Range(ByteRange {
        start,
        end: end.min(len - 1),
    })
}

/// Sorts and merges ranges that overlap or touch.
fn merge(mut ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(1) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The range set after `bytes=` (the unit is case-insensitive), if the unit is bytes.
fn strip_unit(value: &[u8]) -> Option<&[u8]> {
    let (unit, rest) = value.split_at(value.iter().position(|&b| b == b'=')?);
    trim(unit)
        .eq_ignore_ascii_case(b"bytes")
        .then_some(&rest[1..])
}

/// A run of ASCII digits; a value past u64 saturates (it is past any file anyway).
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

fn trim(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    #[test]
    fn single_suffix_and_open_ranges() {
        assert_eq!(parse_range(b"bytes=0-99", 1000), Ranges::One(r(0, 99)));
        assert_eq!(parse_range(b"bytes=900-", 1000), Ranges::One(r(900, 999)));
        assert_eq!(parse_range(b"bytes=-100", 1000), Ranges::One(r(900, 999)));
        assert_eq!(parse_range(b"bytes=-5000", 1000), Ranges::One(r(0, 999)));
        assert_eq!(
            parse_range(b"bytes=500-5000", 1000),
            Ranges::One(r(500, 999))
        );
        assert_eq!(parse_range(b" Bytes = 1-1 ", 10), Ranges::One(r(1, 1)));
        assert_eq!(
            parse_range(b"bytes=0-99999999999999999999999", 10),
            Ranges::One(r(0, 9))
        );
    }

    #[test]
    fn several_ranges_are_sorted_and_merged() {
        assert_eq!(
            parse_range(b"bytes=50-59, 0-9", 100),
            Ranges::Many(vec![r(0, 9), r(50, 59)])
        );
        assert_eq!(
            parse_range(b"bytes=0-9,10-19,5-12", 100),
            Ranges::One(r(0, 19))
        );
        // Unsatisfiable pieces among satisfiable ones are dropped.
        assert_eq!(parse_range(b"bytes=0-0,200-300", 100), Ranges::One(r(0, 0)));
    }

    #[test]
    fn unsatisfiable_gets_416() {
        assert_eq!(parse_range(b"bytes=1000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-10", 0), Ranges::Unsatisfiable);
    }

    #[test]
    fn ignored_headers_mean_the_whole_file() {
        for bad in [
            &b"items=0-1"[..],
            b"bytes=",
            b"bytes=,",
            b"bytes=5-1",
            b"bytes=a-b",
            b"bytes=1",
            b"bytes=--1",
            b"bytes=0-1,x",
            b"bytes=+1-2",
        ] {
            assert_eq!(
                parse_range(bad, 100),
                Ranges::Whole,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn many_small_ranges_cannot_multiply_the_work() {
        let many: Vec<String> = (0..100).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
        let header = format!("bytes={}", many.join(","));
        // 100 disjoint one-byte ranges: more than MAX_RANGES, so the whole file.
        assert!(matches!(
            parse_range(header.as_bytes(), 10_000),
            Ranges::Whole
        ));
        // A thousand overlapping ranges merge into one.
        let overlapping = format!("bytes={}", vec!["0-99"; 1000].join(","));
        assert!(matches!(
            parse_range(overlapping.as_bytes(), 10_000),
            Ranges::Whole
        ));
        let overlapping = format!("bytes={}", vec!["0-99"; 200].join(","));
        assert_eq!(
            parse_range(overlapping.as_bytes(), 10_000),
            Ranges::One(r(0, 99))
        );
    }
}
