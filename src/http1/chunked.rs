//! The chunked transfer coding (RFC 9112 section 7.1): a strict, incremental reader, and the
//! few bytes the proxy writes when it frames a body as chunked itself.
//!
//! The proxy passes chunked bodies through unchanged once they are known to be well formed, so
//! this reader does not copy anything: it is fed the bytes as they arrive, validates the framing
//! byte by byte (so a line split across two reads is fine), and says how many of the bytes belong
//! to the body. It is stricter than `httparse::parse_chunk_size`, which accepts an empty size line
//! and a bare LF inside an extension; both are request-smuggling primitives.

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
enum State {
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
    state: State,
    /// Chunk size being parsed, then data bytes still to come in the current chunk.
    remaining: u64,
    /// Digits, extension or trailer bytes seen on the current line / section.
    counted: u32,
    /// Whether the current trailer line has its colon yet.
    trailer_colon: bool,
}

impl Default for ChunkedReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedReader {
    /// A reader positioned at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedReader {
            state: State::SizeStart,
            remaining: 0,
            counted: 0,
            trailer_colon: false,
        }
    }

    /// True once the last chunk and trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// True while the reader is inside the trailer section (after the last chunk, before the
    /// final empty line): a caller feeding one byte at a time collects the trailer fields.
    pub fn in_trailers(&self) -> bool {
        matches!(
            self.state,
            State::TrailerStart | State::Trailer | State::TrailerLf
        )
    }

    /// Bytes of chunk payload that follow immediately in the stream (0 when inside framing).
    /// A caller may move this many bytes without looking at them (e.g. with splice) and then
    /// report them through [`ChunkedReader::skip_data`].
    pub fn data_remaining(&self) -> u64 {
        if self.state == State::Data {
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
            self.state = State::DataCr;
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
            if self.state == State::Done {
                return Ok(i);
            }
            if self.state == State::Data {
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

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        match self.state {
            State::SizeStart | State::Size => {
                if let Some(d) = hex_value(b) {
                    self.counted += 1;
                    if self.counted > MAX_SIZE_DIGITS {
                        return Err(ChunkError::SizeOverflow);
                    }
                    self.remaining = (self.remaining << 4) | u64::from(d);
                    self.state = State::Size;
                } else if self.state == State::SizeStart {
                    return Err(ChunkError::InvalidSize);
                } else {
                    self.counted = 0;
                    self.state = State::SizeEnd;
                    return self.step(b);
                }
            }
            State::SizeEnd => match b {
                b' ' | b'\t' => self.count_ext()?,
                b';' => self.state = State::Extension,
                b'\r' => self.state = State::SizeLf,
                _ => return Err(ChunkError::InvalidSize),
            },
            State::Extension => match b {
                b'\r' => self.state = State::SizeLf,
                b'\t' => self.count_ext()?,
                0..=0x1f | 0x7f => return Err(ChunkError::ControlByte),
                _ => self.count_ext()?,
            },
            State::SizeLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.counted = 0;
                self.state = if self.remaining == 0 {
                    State::TrailerStart
                } else {
                    State::Data
                };
            }
            State::Data => unreachable!("data is consumed in bulk by feed"),
            State::DataCr => {
                if b != b'\r' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = State::DataLf;
            }
            State::DataLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = State::SizeStart;
            }
            State::TrailerStart => {
                if b == b'\r' {
                    self.state = State::EndLf;
                } else if is_token_byte(b) {
                    self.trailer_colon = false;
                    self.count_trailer()?;
                    self.state = State::Trailer;
                } else {
                    return Err(ChunkError::BadTrailer);
                }
            }
            State::Trailer => match b {
                b'\r' if self.trailer_colon => self.state = State::TrailerLf,
                b'\r' => return Err(ChunkError::BadTrailer),
                b':' => {
                    self.trailer_colon = true;
                    self.count_trailer()?;
                }
                b'\t' => self.count_trailer()?,
                0..=0x1f | 0x7f => return Err(ChunkError::ControlByte),
                _ if !self.trailer_colon && !is_token_byte(b) => {
                    return Err(ChunkError::BadTrailer)
                }
                _ => self.count_trailer()?,
            },
            State::TrailerLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = State::TrailerStart;
            }
            State::EndLf => {
                if b != b'\n' {
                    return Err(ChunkError::BadLineEnding);
                }
                self.state = State::Done;
            }
            State::Done => {}
        }
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

    #[test]
    fn incomplete_body_is_not_done() {
        let (n, done, _) = run(b"5\r\nhel").unwrap();
        assert_eq!(n, 6);
        assert!(!done);
    }
}
