//! FastCGI records (the FastCGI 1.0 specification), without I/O: the records a client writes
//! (BEGIN_REQUEST, PARAMS with their name-value pairs, STDIN, ABORT_REQUEST) and an incremental
//! reader of the records a server sends back (STDOUT, STDERR, END_REQUEST). Every record is an
//! 8-byte header (version 1, type, request id, content length, padding length), the content,
//! then the padding; writers pad content to a multiple of 8, as PHP-FPM and nginx do.

/// The only protocol version.
pub const VERSION: u8 = 1;
/// The request id used on every connection: one request at a time per connection (PHP-FPM does
/// not multiplex).
pub const REQUEST_ID: u16 = 1;
/// Largest content of one record.
pub const MAX_CONTENT: usize = 65535;

/// Record types this client writes or reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    /// Starts a request (client to server).
    BeginRequest = 1,
    /// Aborts a request (client to server).
    AbortRequest = 2,
    /// The request ended (server to client), with the app and protocol status.
    EndRequest = 3,
    /// Name-value pairs (client to server), ended by an empty record.
    Params = 4,
    /// The request body (client to server), ended by an empty record.
    Stdin = 5,
    /// The CGI response (server to client).
    Stdout = 6,
    /// Error output (server to client).
    Stderr = 7,
    /// A management record type the server did not know (server to client).
    UnknownType = 11,
}

impl RecordType {
    fn from_byte(b: u8) -> Option<RecordType> {
        Some(match b {
            1 => RecordType::BeginRequest,
            2 => RecordType::AbortRequest,
            3 => RecordType::EndRequest,
            4 => RecordType::Params,
            5 => RecordType::Stdin,
            6 => RecordType::Stdout,
            7 => RecordType::Stderr,
            11 => RecordType::UnknownType,
            _ => return None,
        })
    }
}

/// The role asked for in BEGIN_REQUEST.
const ROLE_RESPONDER: u16 = 1;
/// BEGIN_REQUEST flag: keep the connection open after the request.
const FLAG_KEEP_CONN: u8 = 1;

/// Appends a record header for `len` content bytes of type `kind`; returns the padding length
/// the caller must append after the content.
pub fn put_header(out: &mut Vec<u8>, kind: RecordType, len: usize) -> usize {
    debug_assert!(len <= MAX_CONTENT);
    let padding = (8 - len % 8) % 8;
    let [id_hi, id_lo] = REQUEST_ID.to_be_bytes();
    let [len_hi, len_lo] = (len as u16).to_be_bytes();
    out.extend_from_slice(&[
        VERSION,
        kind as u8,
        id_hi,
        id_lo,
        len_hi,
        len_lo,
        padding as u8,
        0,
    ]);
    padding
}

/// Appends a whole record.
pub fn put_record(out: &mut Vec<u8>, kind: RecordType, content: &[u8]) {
    let padding = put_header(out, kind, content.len());
    out.extend_from_slice(content);
    out.extend_from_slice(&[0u8; 8][..padding]);
}

/// Appends BEGIN_REQUEST for the responder role, asking the server to keep the connection.
pub fn put_begin_request(out: &mut Vec<u8>, keep_conn: bool) {
    let [role_hi, role_lo] = ROLE_RESPONDER.to_be_bytes();
    let flags = if keep_conn { FLAG_KEEP_CONN } else { 0 };
    put_record(
        out,
        RecordType::BeginRequest,
        &[role_hi, role_lo, flags, 0, 0, 0, 0, 0],
    );
}

/// Appends the PARAMS records holding `pairs`, then the empty PARAMS record that ends them.
/// Pairs are packed into records of at most [`MAX_CONTENT`] bytes; a pair may span records.
pub fn put_params<'a>(out: &mut Vec<u8>, pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) {
    let mut content = Vec::with_capacity(1024);
    for (name, value) in pairs {
        put_length(&mut content, name.len());
        put_length(&mut content, value.len());
        content.extend_from_slice(name);
        content.extend_from_slice(value);
    }
    for chunk in content.chunks(MAX_CONTENT) {
        put_record(out, RecordType::Params, chunk);
    }
    put_record(out, RecordType::Params, &[]);
}

/// A name-value pair length: one byte below 128, else four bytes with the top bit set.
pub fn put_length(out: &mut Vec<u8>, len: usize) {
    if len < 128 {
        out.push(len as u8);
    } else {
        out.extend_from_slice(&((len as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// The content of the PARAMS records in `records` joined (tests and the fuzzer read back what
/// was written); other records are skipped.
pub fn params_content(mut records: &[u8]) -> Vec<u8> {
    let mut content = Vec::new();
    while records.len() >= 8 {
        let len = usize::from(u16::from_be_bytes([records[4], records[5]]));
        let end = (8 + len + usize::from(records[6])).min(records.len());
        if records[1] == RecordType::Params as u8 {
            content.extend_from_slice(&records[8..(8 + len).min(records.len())]);
        }
        records = &records[end..];
    }
    content
}

/// Reads the name-value pairs of PARAMS content (the server's side; used by tests and the
/// fuzzer to check [`put_params`]). `None` if the content is malformed.
pub fn parse_pairs(mut content: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut pairs = Vec::new();
    while !content.is_empty() {
        let (name_len, rest) = take_length(content)?;
        let (value_len, rest) = take_length(rest)?;
        let end = name_len.checked_add(value_len)?;
        if rest.len() < end {
            return None;
        }
        pairs.push((&rest[..name_len], &rest[name_len..end]));
        content = &rest[end..];
    }
    Some(pairs)
}

fn take_length(b: &[u8]) -> Option<(usize, &[u8])> {
    match b.first()? {
        n if n & 0x80 == 0 => Some((usize::from(*n), &b[1..])),
        _ => {
            let four: [u8; 4] = b.get(..4)?.try_into().ok()?;
            Some(((u32::from_be_bytes(four) & 0x7fff_ffff) as usize, &b[4..]))
        }
    }
}

/// Why the server's bytes are not valid FastCGI for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// A version other than 1.
    Version,
    /// A record type a server must not send, or an unknown one.
    Type(u8),
    /// A request id other than the one in flight.
    RequestId,
    /// An END_REQUEST whose content is not 8 bytes.
    EndRequest,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Version => f.write_str("FastCGI record with a version other than 1"),
            RecordError::Type(t) => write!(f, "unexpected FastCGI record type {t}"),
            RecordError::RequestId => f.write_str("FastCGI record for another request"),
            RecordError::EndRequest => f.write_str("malformed FastCGI END_REQUEST"),
        }
    }
}

/// One record the server sent, located in the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Response bytes: `buf[start..start + len]`.
    Stdout {
        /// Offset of the content.
        start: usize,
        /// Content length (0: the end of the stream).
        len: usize,
    },
    /// Error output: `buf[start..start + len]`.
    Stderr {
        /// Offset of the content.
        start: usize,
        /// Content length.
        len: usize,
    },
    /// The request is over.
    End {
        /// The application's exit status.
        app_status: u32,
        /// 0: complete; 1: cannot multiplex; 2: overloaded; 3: unknown role.
        protocol_status: u8,
    },
}

/// Reads the record at the start of `buf`: `Ok(None)` when more bytes are needed, else the
/// record and the bytes it takes (header, content and padding).
pub fn parse_record(buf: &[u8]) -> Result<Option<(Record, usize)>, RecordError> {
    let Some(header) = buf.get(..8) else {
        return Ok(None);
    };
    if header[0] != VERSION {
        return Err(RecordError::Version);
    }
    let kind = header[1];
    let id = u16::from_be_bytes([header[2], header[3]]);
    let len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    let total = 8 + len + usize::from(header[6]);
    if id != REQUEST_ID {
        return Err(RecordError::RequestId);
    }
    if buf.len() < total {
        return Ok(None);
    }
    let record = match RecordType::from_byte(kind) {
        Some(RecordType::Stdout) => Record::Stdout { start: 8, len },
        Some(RecordType::Stderr) => Record::Stderr { start: 8, len },
        Some(RecordType::EndRequest) => {
            let body = &buf[8..8 + len];
            if len != 8 {
                return Err(RecordError::EndRequest);
            }
            Record::End {
                app_status: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                protocol_status: body[4],
            }
        }
        _ => return Err(RecordError::Type(kind)),
    };
    Ok(Some((record, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip_with_long_values_across_records() {
        let long = vec![b'v'; 70_000];
        let pairs: Vec<(&[u8], &[u8])> = vec![
            (b"SCRIPT_FILENAME", b"/srv/www/index.php"),
            (b"HTTP_X_LONG", &long),
            (b"EMPTY", b""),
        ];
        let mut out = Vec::new();
        put_params(&mut out, pairs.iter().copied());
        // Collect the content of each PARAMS record, checking headers and padding.
        let mut content = Vec::new();
        let mut rest = out.as_slice();
        let mut records = 0;
        while !rest.is_empty() {
            assert_eq!((rest[0], rest[1]), (VERSION, RecordType::Params as u8));
            let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
            let padding = usize::from(rest[6]);
            assert_eq!((8 + len + padding) % 8, 0);
            content.extend_from_slice(&rest[8..8 + len]);
            rest = &rest[8 + len + padding..];
            records += 1;
            if len == 0 {
                break;
            }
        }
        assert!(rest.is_empty());
        assert_eq!(records, 3, "two content records and the empty one");
        assert_eq!(parse_pairs(&content).unwrap(), pairs);
    }

    #[test]
    fn server_records_parse_incrementally() {
        let mut buf = Vec::new();
        put_record(&mut buf, RecordType::Stdout, b"Status: 200\r\n\r\nhi");
        put_record(&mut buf, RecordType::Stderr, b"warning");
        put_record(&mut buf, RecordType::Stdout, b"");
        put_record(&mut buf, RecordType::EndRequest, &[0, 0, 0, 7, 0, 0, 0, 0]);
        let mut at = 0;
        let mut seen = Vec::new();
        while at < buf.len() {
            // Every prefix of a record asks for more bytes.
            let (record, used) = parse_record(&buf[at..]).unwrap().unwrap();
            for cut in 0..used {
                assert_eq!(parse_record(&buf[at..at + cut]), Ok(None));
            }
            seen.push(record);
            at += used;
        }
        assert_eq!(seen[0], Record::Stdout { start: 8, len: 17 });
        assert_eq!(seen[1], Record::Stderr { start: 8, len: 7 });
        assert_eq!(seen[2], Record::Stdout { start: 8, len: 0 });
        let end = Record::End {
            app_status: 7,
            protocol_status: 0,
        };
        assert_eq!(seen[3], end);
    }

    #[test]
    fn malformed_records_are_refused() {
        let mut bad = Vec::new();
        put_record(&mut bad, RecordType::Stdout, b"x");
        bad[0] = 2;
        assert_eq!(parse_record(&bad), Err(RecordError::Version));
        bad[0] = 1;
        bad[3] = 2;
        assert_eq!(parse_record(&bad), Err(RecordError::RequestId));
        bad[3] = 1;
        bad[1] = RecordType::Params as u8;
        assert_eq!(parse_record(&bad), Err(RecordError::Type(4)));
        let mut end = Vec::new();
        put_record(&mut end, RecordType::EndRequest, &[0; 4]);
        assert_eq!(parse_record(&end), Err(RecordError::EndRequest));
    }

    #[test]
    fn begin_request_asks_to_keep_the_connection() {
        let mut out = Vec::new();
        put_begin_request(&mut out, true);
        assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
    }
}
