//! The HTTP/1.1 codec: parses and validates message heads, tracks body framing and writes the
//! heads the proxy forwards. It never touches a socket (no tokio here), so every rule can be
//! tested on byte strings; `crate::proxy` drives it over real connections. Its parsers are fuzzed
//! (`fuzz/`).

pub mod accept;
pub mod body;
pub mod chunked;
pub mod date;
pub mod request;
pub mod response;

pub(crate) use crate::message::{is_hop_by_hop, list_elements};
pub use crate::message::{ConnectionTokens, Framing, RequestHead};
pub use body::BodyReader;
pub use chunked::{chunk_size_line, ChunkError, ChunkedReader, CHUNK_END, LAST_CHUNK};
pub use request::{parse_request, RequestError};
pub use response::{parse_response, ResponseError, ResponseHead};

/// Most header fields accepted in one head.
pub const MAX_HEADERS: usize = 128;

/// Whether `buf` holds the empty line that ends a message head (CRLF or bare LF line ends), so
/// a head parse will not ask for more bytes.
pub fn head_complete(buf: &[u8]) -> bool {
    // A buffer that ends in a blank line holds a whole head (a head with no body, the usual
    // last read of one): no search. Then the usual end, in one vectorized search; bare line
    // ends are looked for only when it is not there.
    if buf.ends_with(b"\r\n\r\n") {
        return true;
    }
    static BLANK_LINE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));
    if BLANK_LINE.find(buf).is_some() {
        return true;
    }
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let at = from + i;
        match buf.get(at + 1) {
            Some(b'\n') => return true,
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => return true,
            _ => from = at + 1,
        }
    }
    false
}

/// Parses a Content-Length value: one or more identical `1*DIGIT` elements (RFC 9110 8.6).
/// `None` for anything else: a sign, whitespace inside, differing values, overflow.
pub(crate) fn parse_content_length(value: &[u8], previous: Option<u64>) -> Option<u64> {
    let mut found = previous;
    for element in value.split(|b| *b == b',') {
        let element = element.trim_ascii();
        if element.is_empty() || element.len() > 19 || !element.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = element
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
        match found {
            Some(f) if f != n => return None,
            _ => found = Some(n),
        }
    }
    found
}

/// Appends `name: value\r\n`.
pub(crate) fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a decimal number.
pub(crate) fn put_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_rules() {
        assert_eq!(parse_content_length(b"42", None), Some(42));
        assert_eq!(parse_content_length(b"42, 42", None), Some(42));
        assert_eq!(parse_content_length(b"42", Some(42)), Some(42));
        assert_eq!(parse_content_length(b"42", Some(41)), None);
        assert_eq!(parse_content_length(b"1, 2", None), None);
        assert_eq!(parse_content_length(b"+1", None), None);
        assert_eq!(parse_content_length(b"", None), None);
        assert_eq!(parse_content_length(b"1 2", None), None);
        assert_eq!(parse_content_length(b"99999999999999999999", None), None);
    }

    #[test]
    fn head_ends() {
        assert!(head_complete(b"HTTP/1.1 200 OK\r\n\r\n"));
        assert!(head_complete(b"HTTP/1.1 200 OK\n\n"));
        assert!(!head_complete(b"HTTP/1.1 200 OK\r\nA: b\r\n"));
        assert!(!head_complete(b""));
        assert!(head_complete(b"HTTP/1.1 200 OK\r\nA: b\r\n\n"));
        assert!(head_complete(b"HTTP/1.1 200 OK\nA: b\n\r\nbody"));
        assert!(!head_complete(b"HTTP/1.1 200 OK\r\nA: b\r\n\r"));
    }

    #[test]
    fn decimal() {
        let mut v = Vec::new();
        put_decimal(&mut v, 0);
        v.push(b' ');
        put_decimal(&mut v, 18446744073709551615);
        assert_eq!(v, b"0 18446744073709551615");
    }
}

/// Hostile input: mutations of valid messages must never panic the codec, and whatever it
/// accepts must be self-consistent.
#[cfg(test)]
mod fuzz {
    use super::request::{header_storage, parse_request};
    use super::{parse_response, BodyReader, ChunkedReader, Framing};

    /// xorshift64*: a fixed sequence, so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545F4914F6CDD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const SEEDS: [&[u8]; 4] = [
        b"GET /a?b HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: v\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
    ];
    const SPICE: &[u8] = b"\r\n:; \t,0aF-\x00\x7f\xff";

    fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
        let mut v = seed.to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(v.len() + 1);
            match rng.below(4) {
                0 if at < v.len() => v[at] = SPICE[rng.below(SPICE.len())],
                1 => v.insert(at, SPICE[rng.below(SPICE.len())]),
                2 if at < v.len() => {
                    v.remove(at);
                }
                _ => v.truncate(at),
            }
        }
        v
    }

    #[test]
    fn mutated_messages_never_panic_and_stay_consistent() {
        let mut rng = Rng(0x9E3779B97F4A7C15);
        let (mut requests, mut responses, mut refused) = (0, 0, 0);
        for round in 0..50_000 {
            let input = mutate(&mut rng, SEEDS[round % SEEDS.len()]);
            let mut storage = header_storage();
            let parsed = parse_request(&input, &mut storage, 8192);
            refused += u32::from(parsed.is_err());
            if let Ok(Some(head)) = parsed {
                requests += 1;
                assert!(head.head_len <= input.len());
                let mut out = Vec::new();
                let fwd = super::request::ForwardedFor {
                    client: b"127.0.0.1",
                    proto: "http",
                };
                head.write_upstream_head(&mut out, fwd);
                // The forwarded head has only CRLF line ends and one blank line, at its end.
                assert!(out.ends_with(b"\r\n\r\n"));
                let body_start = out.len();
                assert_eq!(
                    out.windows(4).position(|w| w == b"\r\n\r\n"),
                    Some(body_start - 4)
                );
                assert!(!out.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r'));
                let mut reader = BodyReader::new(head.framing);
                if let Ok(n) = reader.feed(&input[head.head_len..]) {
                    assert!(n <= input.len() - head.head_len);
                }
            }
            let mut storage = header_storage();
            if let Ok(Some(head)) = parse_response(&input, &mut storage, 8192, false) {
                responses += 1;
                let mut out = Vec::new();
                head.write_client_head(&mut out, head.relay(1), true, 1);
                assert!(out.ends_with(b"\r\n\r\n"));
                if head.framing == Framing::Chunked {
                    let _ = ChunkedReader::new().feed(&input[head.head_len..], |_| {});
                }
            }
        }
        // Both outcomes were exercised many times.
        assert!(requests > 1000 && responses > 1000 && refused > 1000);
    }
}
