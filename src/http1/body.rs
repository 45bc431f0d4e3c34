//! Tracks where a message body ends, whatever its framing, as bytes stream past.

use super::{ChunkError, ChunkedReader, Framing};

/// Progress through one message body.
#[derive(Debug, Clone)]
pub enum BodyReader {
    /// No body.
    Empty,
    /// This many bytes still to come.
    Length(u64),
    /// Chunked framing, validated as it passes.
    Chunked(ChunkedReader),
    /// Ends when the sender closes.
    UntilClose,
}

impl BodyReader {
    /// A reader at the start of a body with this framing.
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Empty | Framing::Length(0) => BodyReader::Empty,
            Framing::Length(n) => BodyReader::Length(n),
            Framing::Chunked => BodyReader::Chunked(ChunkedReader::new()),
            Framing::UntilClose => BodyReader::UntilClose,
        }
    }

    /// A reader for a response body: a chunked one drops an invalid trailer field instead of
    /// refusing it ([`ChunkedReader::lenient`]).
    pub fn for_response(framing: Framing) -> Self {
        match framing {
            Framing::Chunked => BodyReader::Chunked(ChunkedReader::lenient()),
            _ => Self::new(framing),
        }
    }

    /// True when the whole body has passed (never for [`BodyReader::UntilClose`]).
    pub fn is_done(&self) -> bool {
        match self {
            BodyReader::Empty => true,
            BodyReader::Length(n) => *n == 0,
            BodyReader::Chunked(c) => c.is_done(),
            BodyReader::UntilClose => false,
        }
    }

    /// Feeds bytes that follow in the stream; returns how many belong to the body.
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        self.feed_data(input, |_| {})
    }

    /// Feeds `buf[from..]`, for a caller that forwards the bytes as they are: a chunked body's
    /// trailer fields that must not be forwarded are edited out of `buf` first
    /// ([`ChunkedReader::feed_in_place`], whose contract about an unfinished trailer line
    /// applies). Returns how many bytes from `from` belong to the body.
    pub fn feed_in_place(&mut self, buf: &mut Vec<u8>, from: usize) -> Result<usize, ChunkError> {
        match self {
            BodyReader::Chunked(c) => c.feed_in_place(buf, from),
            _ => self.feed(&buf[from..]),
        }
    }

    /// Like [`BodyReader::feed`], also handing each run of payload (framing removed) to `on_data`.
    pub fn feed_data(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<usize, ChunkError> {
        match self {
            BodyReader::Empty => Ok(0),
            BodyReader::Length(n) => {
                let take = (*n).min(input.len() as u64) as usize;
                *n -= take as u64;
                on_data(&input[..take]);
                Ok(take)
            }
            BodyReader::Chunked(c) => c.feed(input, on_data),
            BodyReader::UntilClose => {
                on_data(input);
                Ok(input.len())
            }
        }
    }

    /// How many payload bytes come next that need no parsing, so they may be moved without
    /// being looked at (0 while inside chunk framing).
    pub fn opaque_len(&self) -> u64 {
        match self {
            BodyReader::Empty => 0,
            BodyReader::Length(n) => *n,
            BodyReader::Chunked(c) => c.data_remaining(),
            BodyReader::UntilClose => u64::MAX,
        }
    }

    /// Accounts for `n <= opaque_len()` bytes moved without being fed.
    pub fn skip(&mut self, n: u64) {
        match self {
            BodyReader::Length(left) => *left -= n,
            BodyReader::Chunked(c) => c.skip_data(n),
            BodyReader::Empty | BodyReader::UntilClose => {}
        }
    }
}
