//! HAProxy's PROXY protocol, versions 1 (one text line) and 2 (binary), both directions, as a
//! sans-IO codec: [`parse`] reads the header a trusted load balancer puts in front of a
//! connection (HAProxy's `send-proxy`/`send-proxy-v2`, nginx's `proxy_protocol on`), so the
//! client's real address can replace the balancer's (nginx's `listen ... proxy_protocol` and
//! `$proxy_protocol_addr`, HAProxy's `accept-proxy`); [`write_v1`] and [`write_v2`] write the
//! header slipstream sends to an upstream that expects one. The format is HAProxy's
//! `doc/proxy-protocol.txt`.
//!
//! # Reading
//!
//! A listener configured for the protocol (never guessed per connection: anyone could then
//! claim any address) reads into a buffer and calls [`parse`] after each read:
//!
//! - `Ok(None)`: what is there is the start of a valid header; read more. It is never returned
//!   for a buffer of [`MAX_HEADER`] bytes or more (107 for a v1 line, 16 plus the declared
//!   length for v2), so reads stay bounded: read at most `MAX_HEADER - buf.len()` more bytes.
//!   End of stream here is an error. Bound the wait with a short timeout (the spec suggests
//!   at least 3 seconds, to cover a TCP retransmission).
//! - `Ok(Some((proxied, consumed)))`: the first `consumed` bytes were the header; whatever was
//!   read past them is the first bytes of the client's HTTP or TLS and is handled as such.
//!   [`Proxied::Local`] means keep the connection's own addresses (a health check, or a
//!   client the balancer could not describe).
//! - `Err(_)`: not a PROXY header, or a malformed one: close the connection.
//!
//! Parsing is strict: a v1 line is exactly `PROXY TCP4|TCP6 src dst sport dport` with single
//! spaces, addresses of the declared family in their standard text and decimal ports without
//! leading zeros or signs (or `PROXY UNKNOWN`, with anything up to the CRLF), ended by CRLF
//! within 107 bytes. A v2 header has version 2, command LOCAL or PROXY, a known family and
//! protocol, an address block long enough for its family, and TLVs that end exactly at the
//! header's end; a CRC32C TLV, if present, must match. Other TLVs are skipped.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What a PROXY header says of the connection it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxied {
    /// Client and proxy addresses as relayed.
    Addresses {
        /// The client's address: where the balancer's connection came from.
        source: SocketAddr,
        /// The address the client connected to, on the balancer.
        destination: SocketAddr,
    },
    /// LOCAL (health check) or UNKNOWN/UNSPEC/UNIX: the connection's own addresses apply.
    Local,
}

/// Why bytes are not a PROXY header: the caller closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not a PROXY header, or a malformed one; the text says what is wrong.
    Invalid(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Invalid(why) => write!(f, "invalid PROXY protocol header: {why}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The longest v1 line, CRLF included (`PROXY UNKNOWN` with two full IPv6 addresses and
/// ports): a line not ended by then is refused.
pub const V1_MAX: usize = 107;

/// The 12 bytes a v2 header starts with.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Signature, version and command, family and protocol, and the 16-bit length.
const V2_FIXED: usize = 16;

/// The most bytes a header may take before it must be complete (so a reader bounds its
/// reads): a v2 header with the largest length, which is more than a v1 line's 107.
pub const MAX_HEADER: usize = V2_FIXED + u16::MAX as usize;

/// v2 commands (the low nibble of the 13th byte; the high nibble is the version, 2).
const LOCAL: u8 = 0x0;
const PROXY: u8 = 0x1;
/// The 13th byte as written: version 2 with either command.
const V2_LOCAL: u8 = 0x20;
const V2_PROXY: u8 = 0x21;

/// v2 families (high nibble of the 14th byte) and protocols (low nibble).
const AF_UNSPEC: u8 = 0x0;
const AF_INET: u8 = 0x1;
const AF_INET6: u8 = 0x2;
const AF_UNIX: u8 = 0x3;
const UNSPEC_PROTOCOL: u8 = 0x0;
const DGRAM: u8 = 0x2;
/// The 14th byte for TCP (STREAM) over IPv4 and over IPv6, the two that carry addresses.
const TCP_OVER_IPV4: u8 = 0x11;
const TCP_OVER_IPV6: u8 = 0x21;

/// The TLV type whose value is a CRC32C of the whole header.
const PP2_TYPE_CRC32C: u8 = 0x03;

fn invalid(why: &'static str) -> ParseError {
    ParseError::Invalid(why)
}

/// Parses a header at the start of `buf`: Ok(None) = need more bytes (only while what is
/// there is a valid prefix of a header, so a caller can keep reading; cap: 107 bytes for v1,
/// 16+len for v2); Ok(Some((proxied, consumed))) = header complete, `consumed` bytes belong to
/// it; Err = not a PROXY header or malformed.
pub fn parse(buf: &[u8]) -> Result<Option<(Proxied, usize)>, ParseError> {
    match buf.first() {
        None => Ok(None),
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(invalid("not a PROXY protocol header")),
    }
}

/// A v1 line: complete once a LF shows up within the first 107 bytes.
fn parse_v1(buf: &[u8]) -> Result<Option<(Proxied, usize)>, ParseError> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() >= V1_MAX {
            return Err(invalid("v1 line not ended within 107 bytes"));
        }
        v1_prefix(window)?;
        return Ok(None);
    };
    let line = window[..lf]
        .strip_suffix(b"\r")
        .ok_or(invalid("v1 line ended by a bare LF"))?;
    Ok(Some((v1_line(line)?, lf + 1)))
}

/// A whole v1 line, without its CRLF.
fn v1_line(line: &[u8]) -> Result<Proxied, ParseError> {
    let rest = line
        .strip_prefix(b"PROXY ")
        .ok_or(invalid("v1 line does not start with \"PROXY \""))?;
    if let Some(after) = rest.strip_prefix(b"UNKNOWN") {
        // The receiver ignores whatever follows UNKNOWN up to the CRLF.
        return match after.first() {
            None => Ok(Proxied::Local),
            Some(b' ') if !after.contains(&b'\r') => Ok(Proxied::Local),
            Some(_) => Err(invalid("v1 UNKNOWN followed by other than a space")),
        };
    }
    let mut fields = rest.split(|&b| b == b' ');
    let mut next = || fields.next();
    let (Some(family), Some(src), Some(dst), Some(sport), Some(dport), None) =
        (next(), next(), next(), next(), next(), next())
    else {
        return Err(invalid("v1 line is not five fields split by single spaces"));
    };
    let v6 = match family {
        b"TCP4" => false,
        b"TCP6" => true,
        _ => return Err(invalid("v1 protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let address = |text: &[u8], port: u16| -> Result<SocketAddr, ParseError> {
        let addr = ip(text, v6).ok_or(invalid("v1 address is not of the declared family"))?;
        Ok(SocketAddr::new(addr, port))
    };
    Ok(Proxied::Addresses {
        source: address(src, port(sport)?)?,
        destination: address(dst, port(dport)?)?,
    })
}

/// An IPv4 (dotted quad, no leading zeros) or IPv6 address in text, as the family says.
fn ip(text: &[u8], v6: bool) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?;
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// A v1 port: 1 to 5 decimal digits, no sign, no leading zero (but `0` itself), at most 65535.
fn port(text: &[u8]) -> Result<u16, ParseError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.iter().all(u8::is_ascii_digit);
    if !digits || (text[0] == b'0' && text.len() > 1) {
        return Err(invalid("v1 port is not a plain decimal number"));
    }
    let value = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).map_err(|_| invalid("v1 port above 65535"))
}

/// Checks that an unfinished v1 line (no LF yet, under 107 bytes) can still become a valid
/// one: every finished field is valid, the one being written is the start of a valid one.
fn v1_prefix(part: &[u8]) -> Result<(), ParseError> {
    const START: &[u8] = b"PROXY ";
    if let Some(line) = part.strip_suffix(b"\r") {
        // Only the LF is missing: the line must already be whole.
        return v1_line(line).map(|_| ());
    }
    let Some(rest) = part.strip_prefix(START) else {
        return if START.starts_with(part) {
            Ok(())
        } else {
            Err(invalid("v1 line does not start with \"PROXY \""))
        };
    };
    if b"UNKNOWN".starts_with(rest) {
        return Ok(());
    }
    if let Some(after) = rest.strip_prefix(b"UNKNOWN") {
        return match after.first() {
            Some(b' ') if !after.contains(&b'\r') => Ok(()),
            _ => Err(invalid("v1 UNKNOWN followed by other than a space")),
        };
    }
    // Split never yields nothing: the last field is the one being written.
    let fields: Vec<&[u8]> = rest.split(|&b| b == b' ').collect();
    let last = fields.len() - 1;
    if fields.len() > 5 {
        return Err(invalid("v1 line is not five fields split by single spaces"));
    }
    let v6 = match fields[0] {
        b"TCP4" => false,
        b"TCP6" => true,
        family if last == 0 && (b"TCP4".starts_with(family) || b"TCP6".starts_with(family)) => {
            return Ok(())
        }
        _ => return Err(invalid("v1 protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    for (i, field) in fields.iter().enumerate().skip(1) {
        let finished = i < last;
        let ok = match (i, finished) {
            (1 | 2, true) => ip(field, v6).is_some(),
            (1 | 2, false) => ip_prefix(field, v6),
            (_, true) => port(field).is_ok(),
            (_, false) => port_prefix(field),
        };
        if !ok {
            return Err(invalid("v1 address or port is malformed"));
        }
    }
    Ok(())
}

/// Whether some valid address of the family starts with `part`: tried by finishing it in each
/// of the few ways an address can go on (more digits, the remaining dotted octets, more
/// groups or `::`), and asking the address parser.
fn ip_prefix(part: &[u8], v6: bool) -> bool {
    const ENDINGS: [&[u8]; 12] = [
        b"", b"1", b".1", b"1.1", b".1.1", b"1.1.1", b".1.1.1", b"1.1.1.1", b":", b":1", b"::",
        b"::1",
    ];
    let allowed = |b: &u8| b.is_ascii_hexdigit() || *b == b':' || *b == b'.';
    if part.len() > 45 || !part.iter().all(allowed) {
        return false;
    }
    let mut candidate = [0u8; 64];
    candidate[..part.len()].copy_from_slice(part);
    ENDINGS.iter().any(|end| {
        let len = part.len() + end.len();
        candidate[part.len()..len].copy_from_slice(end);
        ip(&candidate[..len], v6).is_some()
    })
}

/// Whether some valid port starts with `part` (an empty one included).
fn port_prefix(part: &[u8]) -> bool {
    part.is_empty() || port(part).is_ok()
}

/// A v2 header: complete once its 16 fixed bytes and the length they declare are there.
fn parse_v2(buf: &[u8]) -> Result<Option<(Proxied, usize)>, ParseError> {
    let signature = buf.len().min(V2_SIGNATURE.len());
    if buf[..signature] != V2_SIGNATURE[..signature] {
        return Err(invalid("bad v2 signature"));
    }
    if let Some(&version_command) = buf.get(12) {
        if version_command >> 4 != 2 {
            return Err(invalid("v2 version is not 2"));
        }
        if !matches!(version_command & 0x0f, LOCAL | PROXY) {
            return Err(invalid("v2 command is neither LOCAL nor PROXY"));
        }
    }
    let command = buf.get(12).map(|b| b & 0x0f);
    if let (Some(PROXY), Some(&family)) = (command, buf.get(13)) {
        // LOCAL ignores the family byte; PROXY must name a known one.
        if family >> 4 > AF_UNIX || family & 0x0f > DGRAM {
            return Err(invalid("v2 family or protocol unknown"));
        }
    }
    let Some(&[hi, lo]) = buf.get(14..V2_FIXED) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([hi, lo]));
    let family = buf[13];
    if command == Some(PROXY) && len < address_len(family) {
        return Err(invalid("v2 address block too short for its family"));
    }
    let Some(header) = buf.get(..V2_FIXED + len) else {
        return Ok(None);
    };
    if command == Some(LOCAL) {
        // The whole block is discarded, family included.
        return Ok(Some((Proxied::Local, header.len())));
    }
    Ok(Some((v2_proxy(header, family)?, header.len())))
}

/// The bytes of addresses (and ports) a PROXY command's family carries; 0 when the family or
/// the protocol is unspecified, and then the block is not looked into.
fn address_len(family: u8) -> usize {
    if family & 0x0f == UNSPEC_PROTOCOL {
        return 0;
    }
    match family >> 4 {
        AF_INET => 12,
        AF_INET6 => 36,
        AF_UNIX => 216,
        _ => 0,
    }
}

/// A whole PROXY-command header: the addresses for TCP over IPv4 or IPv6, [`Proxied::Local`]
/// for the rest (UDP, unix sockets, unspecified); the TLVs after a known address block are
/// checked.
fn v2_proxy(header: &[u8], family: u8) -> Result<Proxied, ParseError> {
    let addresses = &header[V2_FIXED..];
    if family >> 4 == AF_UNSPEC || family & 0x0f == UNSPEC_PROTOCOL {
        return Ok(Proxied::Local);
    }
    check_tlvs(header, V2_FIXED + address_len(family))?;
    let port = |at: usize| u16::from_be_bytes([addresses[at], addresses[at + 1]]);
    let octets4 = |at: usize| -> [u8; 4] { addresses[at..at + 4].try_into().unwrap_or_default() };
    let octets16 =
        |at: usize| -> [u8; 16] { addresses[at..at + 16].try_into().unwrap_or_default() };
    Ok(match family {
        TCP_OVER_IPV4 => Proxied::Addresses {
            source: SocketAddr::from((octets4(0), port(8))),
            destination: SocketAddr::from((octets4(4), port(10))),
        },
        TCP_OVER_IPV6 => Proxied::Addresses {
            source: SocketAddr::from((octets16(0), port(32))),
            destination: SocketAddr::from((octets16(16), port(34))),
        },
        // UDP and unix sockets: nothing a TCP listener can use, as HAProxy does.
        _ => Proxied::Local,
    })
}

/// Walks the TLVs from `start` to the end of the header: each must fit inside it, and a
/// CRC32C one must match the header.
fn check_tlvs(header: &[u8], start: usize) -> Result<(), ParseError> {
    let mut at = start;
    while at < header.len() {
        let Some(&[kind, hi, lo]) = header.get(at..at + 3) else {
            return Err(invalid("v2 TLV cut short by the header's end"));
        };
        let value = at + 3;
        let end = value + usize::from(u16::from_be_bytes([hi, lo]));
        if end > header.len() {
            return Err(invalid("v2 TLV runs past the header's end"));
        }
        if kind == PP2_TYPE_CRC32C {
            check_crc(header, value, end)?;
        }
        at = end;
    }
    Ok(())
}

/// A CRC32C TLV's value (4 bytes, big-endian) is the CRC32C of the whole header with those
/// 4 bytes read as zero.
fn check_crc(header: &[u8], value: usize, end: usize) -> Result<(), ParseError> {
    let Ok(sent) = <[u8; 4]>::try_from(&header[value..end]) else {
        return Err(invalid("v2 CRC32C TLV is not 4 bytes"));
    };
    let crc = crc32c_update(!0, &header[..value]);
    let crc = crc32c_update(crc, &[0; 4]);
    let crc = !crc32c_update(crc, &header[end..]);
    if crc.to_be_bytes() != sent {
        return Err(invalid("v2 CRC32C does not match the header"));
    }
    Ok(())
}

/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), a byte at a time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            bit += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// Runs the CRC32C register over `bytes` (no initial or final inversion: the caller's).
fn crc32c_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC32C_TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    crc
}

/// The two addresses as one family: IPv4 when both are, otherwise IPv6 with an IPv4 one
/// mapped (`::ffff:a.b.c.d`), as HAProxy sends a mixed pair.
enum Pair {
    V4(SocketAddrV4, SocketAddrV4),
    V6(SocketAddrV6, SocketAddrV6),
}

fn pair(source: SocketAddr, destination: SocketAddr) -> Pair {
    let v6 = |a: SocketAddr| match a {
        SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
        SocketAddr::V6(a) => a,
    };
    match (source, destination) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => Pair::V4(s, d),
        (s, d) => Pair::V6(v6(s), v6(d)),
    }
}

/// Writes a v1 line for a connection from `source` to `destination`, for upstreams that read
/// only v1 (nginx before 1.13.11, many mail servers): TCP4 for two IPv4 addresses, TCP6
/// otherwise, an IPv4 one of a mixed pair mapped to IPv6 as HAProxy does.
pub fn write_v1(source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _ = match pair(source, destination) {
        Pair::V4(s, d) => write!(
            out,
            "PROXY TCP4 {} {} {} {}\r\n",
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        ),
        Pair::V6(s, d) => write!(
            out,
            "PROXY TCP6 {} {} {} {}\r\n",
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        ),
    };
}

/// Writes `PROXY UNKNOWN\r\n`, the v1 line for a connection whose addresses cannot be told
/// (a client on a unix socket): the upstream uses the connection's own.
pub fn write_v1_unknown(out: &mut Vec<u8>) {
    out.extend_from_slice(b"PROXY UNKNOWN\r\n");
}

/// Writes a v2 PROXY header (no TLVs), the compact binary form for upstreams that read it:
/// TCP over IPv4 for two IPv4 addresses, TCP over IPv6 otherwise, an IPv4 one of a mixed pair
/// mapped to IPv6 as HAProxy does.
pub fn write_v2(source: SocketAddr, destination: SocketAddr, out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(V2_PROXY);
    match pair(source, destination) {
        Pair::V4(s, d) => {
            out.push(TCP_OVER_IPV4);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
        Pair::V6(s, d) => {
            out.push(TCP_OVER_IPV6);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
    }
}

/// Writes a v2 LOCAL header (no addresses), what HAProxy sends on its own health-check
/// connections and for clients on unix sockets: the upstream uses the connection's addresses.
pub fn write_v2_local(out: &mut Vec<u8>) {
    out.extend_from_slice(&V2_SIGNATURE);
    out.extend_from_slice(&[V2_LOCAL, AF_UNSPEC, 0, 0]);
}

#[cfg(test)]
mod tests;
