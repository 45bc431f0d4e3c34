//! Regular fields encoded ahead of time, without the dynamic table (slipstream's change 6).
//!
//! A server that relays a response head it already holds as text (a proxy) can encode its
//! fields straight from the bytes, without building a `HeaderMap` and without the encoder's
//! table lookups: each field is a "literal header field without indexing" (RFC 7541 6.2.2),
//! its name an index into the static table where it has one, its strings as they are (no
//! Huffman coding). Such a block leaves the dynamic table alone, so it can be encoded when the
//! response is sent and written into its HEADERS frame later, in whatever order the frames
//! go out. nginx and HAProxy encode their responses the same way.
//!
//! Tested through a real h2 client's decoder in slipstream's `src/http2/response.rs` (this
//! crate's own tests do not build as a path dependency).

use bytes::{BufMut, Bytes, BytesMut};

/// The regular fields of a message, HPACK-encoded and checked as h2 checks a `HeaderMap`'s.
#[derive(Debug, Default)]
pub struct EncodedFields {
    block: BytesMut,
    /// The fields' size as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
    size: usize,
}

/// A field that HTTP/2 cannot carry: a name that is not a token, a value with a control
/// character, or a connection-specific field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidField;

impl std::fmt::Display for InvalidField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field HTTP/2 cannot carry")
    }
}

impl std::error::Error for InvalidField {}

impl EncodedFields {
    /// An empty block with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        EncodedFields {
            block: BytesMut::with_capacity(capacity),
            size: 0,
        }
    }

    /// An empty block written into `buffer` (cleared first): buffers cut from one larger
    /// allocation let many blocks share it (see [`EncodedFields::take_rest`]).
    pub fn in_buffer(mut buffer: BytesMut) -> Self {
        buffer.clear();
        EncodedFields {
            block: buffer,
            size: 0,
        }
    }

    /// Takes the room left after the fields so it can go on being used (for the next block);
    /// the fields keep only their own bytes.
    pub fn take_rest(&mut self) -> BytesMut {
        self.block.split_off(self.block.len())
    }

    /// Appends the field `name: value`. The name may be in any case; it is sent in lower case.
    /// Err (and nothing appended) for a name that is not a token, a value with a control
    /// character other than tab, a connection-specific field, or `te` other than `trailers`.
    pub fn push(&mut self, name: &[u8], value: &[u8]) -> Result<(), InvalidField> {
        if name.is_empty() || !is_field_value(value) {
            return Err(InvalidField);
        }
        // Room for both strings and three integers of up to five bytes each.
        self.block.reserve(name.len() + value.len() + 16);
        let mut short = [0u8; 32];
        if name.len() <= short.len() {
            let lower = &mut short[..name.len()];
            if !lower_token(name, lower) || is_connection_specific(lower, value) {
                return Err(InvalidField);
            }
            match static_name_index(lower) {
                Some(index) => encode_int(index, 4, 0, &mut self.block),
                None => {
                    self.block.put_u8(0);
                    encode_int(name.len(), 7, 0, &mut self.block);
                    self.block.extend_from_slice(lower);
                }
            }
        } else {
            // Longer than any name in the static table or the connection-specific list.
            if !name.iter().all(|b| LOWER_TOKEN[usize::from(*b)] != 0) {
                return Err(InvalidField);
            }
            self.block.put_u8(0);
            encode_int(name.len(), 7, 0, &mut self.block);
            let at = self.block.len();
            self.block.extend_from_slice(name);
            self.block[at..].make_ascii_lowercase();
        }
        encode_int(value.len(), 7, 0, &mut self.block);
        self.block.extend_from_slice(value);
        self.size += name.len() + value.len() + 32;
        Ok(())
    }

    /// The fields' size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (each field's name and
    /// value plus 32).
    pub fn list_size(&self) -> usize {
        self.size
    }

    /// Whether no field was pushed.
    pub fn is_empty(&self) -> bool {
        self.block.is_empty()
    }

    pub(crate) fn into_block(self) -> Bytes {
        self.block.freeze()
    }
}

/// RFC 9110's tchar by byte, lower-cased (upper-case letters are sent lower-cased); 0 for a
/// byte that is not one.
static LOWER_TOKEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let token = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_'
                    | b'`' | b'|' | b'~'
            );
        if token {
            table[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// Writes `name` lower-cased into `into` (as long as `name`); whether every byte is a tchar.
/// Every byte is read, without an early exit, so the loop runs as straight-line code.
fn lower_token(name: &[u8], into: &mut [u8]) -> bool {
    let mut ok = true;
    for (to, from) in into.iter_mut().zip(name) {
        let lower = LOWER_TOKEN[usize::from(*from)];
        ok &= lower != 0;
        *to = lower;
    }
    ok
}

/// Whether a value holds no control character but tab (what `HeaderValue` accepts: visible
/// ASCII, space, tab and obs-text). Eight bytes are tested at a time for any byte below 0x20
/// or equal to 0x7f (the last few padded with spaces); a group with one (a tab, or a byte to
/// refuse) is read byte by byte.
fn is_field_value(value: &[u8]) -> bool {
    let mut groups = value.chunks_exact(8);
    for group in &mut groups {
        let mut word = [0u8; 8];
        word.copy_from_slice(group);
        if !plain_group(word) && !group.iter().all(value_byte_ok) {
            return false;
        }
    }
    let rest = groups.remainder();
    let mut word = [b' '; 8];
    word[..rest.len()].copy_from_slice(rest);
    plain_group(word) || rest.iter().all(value_byte_ok)
}

/// Whether none of eight bytes is below 0x20 or 0x7f. A byte below n sets its high bit in
/// (x - n per byte) & !x (for n <= 0x80); the lowest such byte always does, so there is no
/// false "plain" (a false "not plain" only costs a byte-by-byte look).
fn plain_group(word: [u8; 8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let x = u64::from_le_bytes(word);
    let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
    let del = x ^ (ONES * 0x7f);
    let is_del = del.wrapping_sub(ONES) & !del & HIGHS;
    (below_space | is_del) == 0
}

/// One byte of a value `HeaderValue` accepts.
fn value_byte_ok(b: &u8) -> bool {
    (*b >= 0x20 || *b == b'\t') && *b != 0x7f
}

/// The fields RFC 9113 8.2.2 forbids (h2's `Send::check_headers` refuses the same).
fn is_connection_specific(name: &[u8], value: &[u8]) -> bool {
    match name {
        b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
        | b"upgrade" => true,
        b"te" => value != b"trailers",
        _ => false,
    }
}

/// The index of the first entry of the static table (RFC 7541 Appendix A) with this name,
/// for the names a regular field can have.
fn static_name_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// An HPACK integer (RFC 7541 5.1) with a `prefix_bits` prefix after the bits of `first`;
/// the one-byte case (almost every index and length) inline.
#[inline(always)]
fn encode_int(value: usize, prefix_bits: u32, first: u8, dst: &mut BytesMut) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        dst.put_u8(first | value as u8);
    } else {
        encode_long_int(value - max, first | max as u8, dst);
    }
}

/// The bytes of an HPACK integer past a full prefix (`first`): `rest` in groups of seven bits.
fn encode_long_int(mut rest: usize, first: u8, dst: &mut BytesMut) {
    dst.put_u8(first);
    while rest >= 128 {
        dst.put_u8(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.put_u8(rest as u8);
}
