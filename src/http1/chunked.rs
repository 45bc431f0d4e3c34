//! The chunked transfer coding (RFC 9112 section 7.1): a strict, incremental reader, and the
//! few bytes the proxy writes when it frames a body as chunked itself.
//!
//! The proxy passes chunked bodies through unchanged once they are known to be well formed, so
//! this reader does not copy anything: it is fed the bytes as they arrive, validates the framing
//! byte by byte (so a line split across two reads is fine), and says how many of the bytes belong
//! to the body. It is stricter than `httparse::parse_chunk_size`, which accepts an empty size line
//! and a bare LF inside an extension; both are request-smuggling primitives.
//!
//! Trailer fields are checked like header fields (a token name right before the colon, no
//! control bytes in the value). A request's invalid trailer field refuses the body (400); a
//! response's is dropped, as nginx never passes an upstream's trailers on at all (its head is
//! out by then, so a 502 is no longer possible). Fields that must not arrive after the content
//! (framing, routing, request modifiers, authentication, response controls, content format:
//! RFC 9110 6.5.1) are dropped on the way: [`ChunkedReader::feed_in_place`] edits them out of
//! the caller's buffer.

/// Longest chunk-size line we accept after the digits (extensions included).
pub const MAX_EXTENSION_LEN: u32 = 4096;
/// Most trailer bytes accepted after the last chunk.
pub const MAX_TRAILER_LEN: u32 = 16 * 1024;
/// A chunk size has at most this many hex digits (2^64 - 1); leading zeros count.
const MAX_SIZE_DIGITS: u32 = 16;

/// Why a chunked body was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// The size line was empty or held a non-hex character.
    InvalidSize,
    /// The size did not fit in 64 bits.
    SizeOverflow,
    /// A line did not end in CRLF, or chunk data was not followed by CRLF.
    BadLineEnding,
    /// A control character in a chunk extension or trailer.
    ControlByte,
    /// Extensions or trailers longer than the limits above.
    TooLong,
    /// A trailer line that is not a header field.
    BadTrailer,
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self {
            ChunkError::InvalidSize => "invalid chunk size",
            ChunkError::SizeOverflow => "chunk size overflows",
            ChunkError::BadLineEnding => "chunk line does not end in CRLF",
            ChunkError::ControlByte => "control byte in chunk line",
            ChunkError::TooLong => "chunk extension or trailer too long",
            ChunkError::BadTrailer => "malformed trailer field",
        };
        f.write_str(what)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// At the first hex digit of a size line.
    SizeStart,
    /// Inside the hex digits.
    Size,
    /// After the digits: optional whitespace, then `;` or CR.
    SizeEnd,
    /// Inside `;ext...` up to the CR.
    Extension,
    /// Got the CR of a size line, need LF.
    SizeLf,
    /// Inside chunk data; `remaining` bytes to go.
    Data,
    /// After chunk data, need CR.
    DataCr,
    /// After chunk data and CR, need LF.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line.
    Trailer,
    /// Got the CR of a trailer line, need LF.
    TrailerLf,
    /// Got the CR of the final empty line, need LF.
    EndLf,
    /// The whole body has been read.
    Done,
}

/// Incremental validator of one chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedReader {
    state: ChunkState,
    /// Chunk size being parsed, then data bytes still to come in the current chunk.
    remaining: u64,
    /// Digits, extension or trailer bytes seen on the current line / section.
    counted: u32,
    /// Whether the current trailer line has its colon yet.
    trailer_colon: bool,
    /// Response side: an invalid trailer field is dropped instead of refused.
    lenient: bool,
    /// The current trailer line is not a valid field (lenient only): it will be dropped.
    line_bad: bool,
    /// Bytes of the current trailer line stepped so far (the line is unfinished while the
    /// state is `Trailer` or `TrailerLf`).
    line_len: u32,
}

impl Default for ChunkedReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedReader {
    /// A reader positioned at the start of a chunked body; an invalid trailer field is an
    /// error (a request's body).
    pub fn new() -> Self {
        ChunkedReader {
            state: ChunkState::SizeStart,
            remaining: 0,
            counted: 0,
            trailer_colon: false,
            lenient: false,
            line_bad: false,
            line_len: 0,
        }
    }

    /// A reader for a response's body: an invalid trailer field is dropped by
    /// [`ChunkedReader::feed_in_place`] (and passes [`ChunkedReader::feed`]) instead of being
    /// an error. Framing errors stay errors.
    pub fn lenient() -> Self {
        ChunkedReader {
            lenient: true,
            ..Self::new()
        }
    }

    /// True once the last chunk and trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// True while the reader is inside the trailer section (after the last chunk, before the
    /// final empty line): a caller feeding one byte at a time collects the trailer fields.
    pub fn in_trailers(&self) -> bool {
        matches!(
            self.state,
            ChunkState::TrailerStart | ChunkState::Trailer | ChunkState::TrailerLf
        )
    }

    /// Bytes of chunk payload that follow immediately in the stream (0 when inside framing).
    /// A caller may move this many bytes without looking at them (e.g. with splice) and then
    /// report them through [`ChunkedReader::skip_data`].
    pub fn data_remaining(&self) -> u64 {
        if self.state == ChunkState::Data {
            self.remaining
        } else {
            0
        }
    }

    /// Accounts for `n` payload bytes moved without being fed; `n <= data_remaining()`.
    pub fn skip_data(&mut self, n: u64) {
        debug_assert!(n <= self.data_remaining());
        self.remaining -= n;
        if self.remaining == 0 {
            self.state = ChunkState::DataCr;
        }
    }

    /// Feeds bytes of the stream. Returns how many of them belong to the body: all of `input`
    /// unless the body ends inside it. `on_data` sees each run of chunk payload (for callers that
    /// de-chunk); pass `|_| {}` to only validate.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == ChunkState::Done {
                return Ok(i);
            }
            if self.state == ChunkState::Data {
                let take = (input.len() - i).min(self.remaining.min(usize::MAX as u64) as usize);
                on_data(&input[i..i + take]);
                i += take;
                self.skip_data(take as u64);
                continue;
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok(i)
    }

    /// Feeds `buf[from..]` and edits the trailer section in place: invalid fields (of a
    /// lenient reader) and forbidden ones ([`is_forbidden_trailer`]) are removed from `buf`.
    /// Returns how many bytes from `from` belong to the body and may be sent on as they now
    /// are. Until the body is done, the bytes after them are an unfinished trailer line the
    /// reader has seen but not judged: the caller keeps them at the front of what it feeds
    /// next (`from` then points at them). Once done, bytes after the body are not the body's.
    /// A reader is fed either this way or by [`ChunkedReader::feed`], not both.
    pub fn feed_in_place(&mut self, buf: &mut Vec<u8>, from: usize) -> Result<usize, ChunkError> {
        // `i` reads; what is kept moves down by `gap`, the length of the lines dropped so far,
        // and the gap is closed once at the end (one move of what follows, however many lines
        // are dropped). On an error the buffer is left half-edited: the body is refused anyway.
        let mut line_start = None;
        let mut i = from;
        let mut gap = 0;
        if matches!(self.state, ChunkState::Trailer | ChunkState::TrailerLf) {
            // The unfinished line of the last call is back at `from`.
            line_start = Some(from);
            i = (from + self.line_len as usize).min(buf.len());
        }
        while i < buf.len() {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Data => {
                    let take = (buf.len() - i).min(self.remaining.min(usize::MAX as u64) as usize);
                    if gap > 0 {
                        buf.copy_within(i..i + take, i - gap);
                    }
                    i += take;
                    self.skip_data(take as u64);
                    continue;
                }
                ChunkState::TrailerStart if buf[i] != b'\r' => line_start = Some(i),
                _ => {}
            }
            let before = self.state;
            self.step(buf[i])?;
            buf[i - gap] = buf[i];
            i += 1;
            if before == ChunkState::TrailerLf {
                if let Some(start) = line_start.take() {
                    if !self.keeps(&buf[start - gap..i - gap]) {
                        gap += i - start;
                    }
                }
            }
        }
        buf.drain(i - gap..i);
        Ok(line_start.unwrap_or(i) - gap - from)
    }

    /// Whether a whole trailer line (CRLF included) goes on: valid and not forbidden.
    fn keeps(&self, line: &[u8]) -> bool {
        let name = line.split(|b| *b == b':').next().unwrap_or_default();
        !self.line_bad && !is_forbidden_trailer(name)
    }

    /// A trailer field that is invalid: an error, or (lenient) a line to drop.
    fn bad_field(&mut self, e: ChunkError) -> Result<(), ChunkError> {
        if self.lenient {
            self.line_bad = true;
            Ok(())
        } else {
            Err(e)
        }
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        match self.state {
            ChunkState::SizeStart | ChunkState::Size => {
                if let Some(d) = hex_value(b) {
                    self.counted += 1;
                    if self.counted > MAX_SIZE_DIGITS {
                        return Err(ChunkError::SizeOverflow);
                    }
                    self.remaining = (self.remaining << 4) | u64::from(d);
                    self.state = ChunkState::Size;
                } else if self.state == ChunkState::SizeStart {
                    return Err(ChunkError::InvalidSize);
                } else {
                    self.counted = 0;
                    self.state = ChunkState::SizeEnd;
                    return self.step(b);
                }
            }
            ChunkState::SizeEnd => match b {
                b' ' | b'\t' => self.count_ext()?,
                b';' => self.state = ChunkState::Extension,
                b'\r' => self.state = ChunkState::SizeLf,
                _ => return Err(ChunkError::InvalidSize),
            },
            ChunkState::Extension => match b {
                b'\r' => self.state = ChunkState::SizeLf,
                b'\t' => self.count_ext()?,
                0..=0x1f | 0x7f => return Err(ChunkError::ControlByte),
                _ => self.count_ext()?,
            },
            ChunkState::SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.counted = 0;
                self.state = if self.remaining == 0 {
                    ChunkState::TrailerStart
                } else {
                    ChunkState::Data
                };
            }
            ChunkState::Data => unreachable!("data is consumed in bulk by feed"),
            ChunkState::DataCr => {
                if b != b'\r' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = ChunkState::DataLf;
            }
            ChunkState::DataLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = ChunkState::SizeStart;
            }
            ChunkState::TrailerStart | ChunkState::Trailer => self.step_trailer(b)?,
            ChunkState::TrailerLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = ChunkState::TrailerStart;
            }
            ChunkState::EndLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = ChunkState::Done;
            }
            ChunkState::Done => {}
        }
        Ok(())
    }

    /// One byte of a trailer line (or of the final empty line at its start).
    fn step_trailer(&mut self, b: u8) -> Result<(), ChunkError> {
        if self.state == ChunkState::TrailerStart {
            if b == b'\r' {
                self.state = ChunkState::EndLf;
                return Ok(());
            }
            if b == b'\n' {
                return Err(ChunkError::BadTrailer);
            }
            self.trailer_colon = false;
            self.line_bad = false;
            self.line_len = 0;
            self.state = ChunkState::Trailer;
            if !is_token_byte(b) {
                // An empty name, whitespace before it (obs-fold), a control byte.
                self.bad_field(ChunkError::BadTrailer)?;
                self.trailer_colon = b == b':';
            }
            self.count_trailer()?;
            return Ok(());
        }
        match b {
            b'\r' => {
                if !self.trailer_colon {
                    self.bad_field(ChunkError::BadTrailer)?;
                }
                self.state = ChunkState::TrailerLf;
            }
            b'\n' => return Err(ChunkError::ControlByte),
            b':' if !self.trailer_colon => self.trailer_colon = true,
            // The value: visible bytes, obs-text, space and tab.
            b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff if self.trailer_colon => {}
            _ if !self.trailer_colon && is_token_byte(b) => {}
            0..=0x1f | 0x7f => self.bad_field(ChunkError::ControlByte)?,
            // A name byte that is not a token byte: tab, space, obs-text, separators.
            _ => self.bad_field(ChunkError::BadTrailer)?,
        }
        self.count_trailer()?;
        Ok(())
    }

    fn count_ext(&mut self) -> Result<(), ChunkError> {
        self.counted += 1;
        if self.counted > MAX_EXTENSION_LEN {
            return Err(ChunkError::TooLong);
        }
        Ok(())
    }

    fn count_trailer(&mut self) -> Result<(), ChunkError> {
        self.counted += 1;
        self.line_len += 1;
        if self.counted > MAX_TRAILER_LEN {
            return Err(ChunkError::TooLong);
        }
        Ok(())
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The chunk that ends a chunked body, with no trailer fields.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
/// The line end after each chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// Writes the size line of a chunk of `n` bytes (`1f3\r\n`) into `out`; returns it.
pub fn chunk_size_line(n: usize, out: &mut [u8; 20]) -> &[u8] {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    out[..len].copy_from_slice(&digits[i..]);
    out[len..len + 2].copy_from_slice(CHUNK_END);
    &out[..len + 2]
}

/// Fields a trailer section must not carry, since their meaning is needed before the content
/// (RFC 9110 6.5.1): framing and connection fields, routing, request modifiers (controls,
/// conditionals, range), authentication, response controls, content format, cookies, and the
/// X-Forwarded-* fields the proxy itself sets. They are dropped, not forwarded.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    const FORBIDDEN: [&str; 38] = [
        "age",
        "authorization",
        "cache-control",
        "connection",
        "content-encoding",
        "content-length",
        "content-location",
        "content-range",
        "content-type",
        "cookie",
        "date",
        "expect",
        "expires",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "keep-alive",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "range",
        "retry-after",
        "set-cookie",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "vary",
        "www-authenticate",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
    ];
    FORBIDDEN
        .iter()
        .any(|f| f.as_bytes().eq_ignore_ascii_case(name))
}

/// RFC 9110 `tchar`.
pub(crate) fn is_token_byte(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.'
        | b'^' | b'_' | b'`' | b'|' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_lines_are_lower_case_hex() {
        let mut out = [0u8; 20];
        assert_eq!(chunk_size_line(0x1f3, &mut out), b"1f3\r\n");
        assert_eq!(chunk_size_line(0, &mut out), b"0\r\n");
        assert_eq!(
            chunk_size_line(usize::MAX, &mut out),
            b"ffffffffffffffff\r\n"
        );
        // What the encoder writes, the reader accepts.
        let mut body = chunk_size_line(3, &mut out).to_vec();
        body.extend_from_slice(b"abc");
        body.extend_from_slice(CHUNK_END);
        body.extend_from_slice(LAST_CHUNK);
        let mut data = Vec::new();
        let mut reader = ChunkedReader::new();
        assert_eq!(
            reader.feed(&body, |d| data.extend_from_slice(d)),
            Ok(body.len())
        );
        assert!(reader.is_done());
        assert_eq!(data, b"abc");
    }

    fn run(input: &[u8]) -> Result<(usize, bool, Vec<u8>), ChunkError> {
        let mut r = ChunkedReader::new();
        let mut data = Vec::new();
        let n = r.feed(input, |d| data.extend_from_slice(d))?;
        Ok((n, r.is_done(), data))
    }

    #[test]
    fn reads_a_body_and_stops_at_its_end() {
        let (n, done, data) = run(b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\nGET /").unwrap();
        assert!(done);
        assert_eq!(n, b"5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n".len());
        assert_eq!(data, b"hello world");
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let body = b"a\r\n0123456789\r\n0\r\nX-T: v\r\n\r\n";
        let mut r = ChunkedReader::new();
        let mut data = Vec::new();
        for b in body.iter() {
            assert_eq!(r.feed(&[*b], |d| data.extend_from_slice(d)).unwrap(), 1);
        }
        assert!(r.is_done());
        assert_eq!(data, b"0123456789");
    }

    #[test]
    fn rejects_smuggling_primitives() {
        assert_eq!(run(b"\r\n").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(run(b";a\r\n").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(run(b"zz\r\n").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(run(b"5;a\nb\r\n").unwrap_err(), ChunkError::ControlByte);
        assert_eq!(run(b"5\nhello").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(run(b"5\r\nhello\n").unwrap_err(), ChunkError::BadLineEnding);
        assert_eq!(
            run(b"10000000000000000\r\n").unwrap_err(),
            ChunkError::SizeOverflow
        );
        assert_eq!(run(b"-5\r\n").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(run(b"0x5\r\n").unwrap_err(), ChunkError::InvalidSize);
        assert_eq!(
            run(b"0\r\nbad trailer\r\n\r\n").unwrap_err(),
            ChunkError::BadTrailer
        );
        assert_eq!(run(b"0\r\n\n").unwrap_err(), ChunkError::BadTrailer);
    }

    /// Feeds `input` in pieces of `step` bytes the way a relay does (what is not the body's
    /// yet stays in front); returns what goes on and whether the body ended.
    fn in_place(mut r: ChunkedReader, input: &[u8], step: usize) -> Result<Vec<u8>, ChunkError> {
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            let n = r.feed_in_place(&mut buf, 0)?;
            out.extend_from_slice(&buf[..n]);
            buf.drain(..n);
            if r.is_done() {
                break;
            }
        }
        assert!(r.is_done(), "{:?}", String::from_utf8_lossy(input));
        Ok(out)
    }

    #[test]
    fn trailer_names_are_tokens_right_before_the_colon() {
        // A tab or space in the name, an empty name, a control byte in the value, no colon.
        for bad in [
            b"0\r\nX-T\tab: v\r\n\r\n".as_slice(),
            b"0\r\nX-Tab\t: v\r\n\r\n",
            b"0\r\nX-T : v\r\n\r\n",
            b"0\r\n: v\r\n\r\n",
            b"0\r\n\tX: v\r\n\r\n",
            b"0\r\nX-\xe9: v\r\n\r\n",
            b"0\r\nX: a\x00b\r\n\r\n",
            b"0\r\nX\r\n\r\n",
        ] {
            assert!(run(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert!(in_place(ChunkedReader::new(), bad, 1).is_err());
            // A response's reader drops the field and goes on.
            let out = in_place(ChunkedReader::lenient(), bad, 1000).unwrap();
            assert_eq!(out, b"0\r\n\r\n", "{:?}", String::from_utf8_lossy(bad));
            assert!(run_lenient(bad).is_ok());
        }
        // A bare LF stays a framing error on both sides.
        let bare = b"0\r\nX: a\nb\r\n\r\n";
        assert!(in_place(ChunkedReader::lenient(), bare, 1000).is_err());
        // Values may hold tabs, colons and obs-text.
        let ok = b"0\r\nX-Sum: a\tb:c \xe9\r\n\r\n";
        assert_eq!(in_place(ChunkedReader::new(), ok, 1000).unwrap(), ok);
    }

    fn run_lenient(input: &[u8]) -> Result<usize, ChunkError> {
        ChunkedReader::lenient().feed(input, |_| {})
    }

    #[test]
    fn forbidden_trailer_fields_are_dropped_wherever_the_reads_split() {
        let input = b"3\r\nabc\r\n0\r\nX-A: 1\r\nContent-Length: 5\r\nhost: evil\r\n\
                      Transfer-Encoding: chunked\r\nX-B: 2\r\n\r\nGET / HTTP/1.1";
        let want = b"3\r\nabc\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n";
        for step in 1..input.len() {
            let out = in_place(ChunkedReader::new(), input, step).unwrap();
            assert_eq!(out, want, "pieces of {step}");
        }
        // What follows the body is not the body's.
        let mut buf = input.to_vec();
        let mut r = ChunkedReader::new();
        let n = r.feed_in_place(&mut buf, 0).unwrap();
        assert_eq!(
            (&buf[..n], &buf[n..]),
            (want.as_slice(), b"GET / HTTP/1.1".as_slice())
        );
        assert!(is_forbidden_trailer(b"CONTENT-TYPE") && !is_forbidden_trailer(b"grpc-status"));
    }

    #[test]
    fn incomplete_body_is_not_done() {
        let (n, done, _) = run(b"5\r\nhel").unwrap();
        assert_eq!(n, 6);
        assert!(!done);
    }
}
