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
mod tests {
    use super::*;

    /// Captured from HAProxy 2.6.12 (Debian 12's package), run by hand, not by the suite:
    /// `mode tcp` frontends on 127.0.0.1 whose `tcp-request connection set-src`,
    /// `set-src-port`, `set-dst` and `set-dst-port` fix the addresses (e.g.
    /// `set-src ipv4(192.168.0.1)`, `set-dst ipv6(2001:db8::11)`), each to a backend
    /// `server s 127.0.0.1:300NN send-proxy` or `send-proxy-v2`; a Python listener on
    /// 300NN saved the bytes a client's `GET / HTTP/1.1` arrived with. The headers only are
    /// kept here; what followed each one is [`HTTP`].
    mod haproxy {
        /// `send-proxy`, 192.168.0.1:56324 to 192.168.0.11:443 (the spec's example line).
        pub(super) const V1_TCP4: &[u8] = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
        /// `send-proxy-v2`, the same addresses.
        pub(super) const V2_TCP4: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\
            \x21\x11\x00\x0c\
            \xc0\xa8\x00\x01\xc0\xa8\x00\x0b\
            \xdc\x04\x01\xbb";
        /// `send-proxy`, [2001:db8::1]:56324 to [2001:db8::11]:443.
        pub(super) const V1_TCP6: &[u8] = b"PROXY TCP6 2001:db8::1 2001:db8::11 56324 443\r\n";
        /// `send-proxy-v2`, the same addresses.
        pub(super) const V2_TCP6: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\
            \x21\x21\x00\x24\
            \x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\
            \x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x11\
            \xdc\x04\x01\xbb";
        /// `send-proxy`, [2001:db8::1]:56324 to 192.0.2.11:443: TCP6, the IPv4 one mapped.
        pub(super) const V1_MIXED_6_4: &[u8] =
            b"PROXY TCP6 2001:db8::1 ::ffff:192.0.2.11 56324 443\r\n";
        /// `send-proxy-v2`, the same addresses.
        pub(super) const V2_MIXED_6_4: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\
            \x21\x21\x00\x24\
            \x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\
            \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xc0\x00\x02\x0b\
            \xdc\x04\x01\xbb";
        /// `send-proxy`, 192.0.2.1:56324 to [2001:db8::11]:443.
        pub(super) const V1_MIXED_4_6: &[u8] =
            b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::11 56324 443\r\n";
        /// `send-proxy-v2`, the same addresses.
        pub(super) const V2_MIXED_4_6: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\
            \x21\x21\x00\x24\
            \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xc0\x00\x02\x01\
            \x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x11\
            \xdc\x04\x01\xbb";
        /// `send-proxy-v2 proxy-v2-options crc32c,unique-id` with `unique-id-format conn-42`,
        /// the V2_TCP4 addresses: a CRC32C TLV (type 3) and a UNIQUE_ID TLV (type 5).
        pub(super) const V2_TLVS: &[u8] = b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\
            \x21\x11\x00\x1d\
            \xc0\xa8\x00\x01\xc0\xa8\x00\x0b\
            \xdc\x04\x01\xbb\
            \x03\x00\x04\xbc\x2b\x3b\x25\
            \x05\x00\x07conn-42";
        /// A health check's connection (`tcp-check connect send-proxy` on a `send-proxy-v2`
        /// server); also what a client on a unix socket (`bind unix@...`) is sent as.
        pub(super) const V2_LOCAL: &[u8] =
            b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a\x20\x00\x00\x00";
        /// A health check's connection on a `send-proxy` server: HAProxy's own addresses.
        pub(super) const V1_CHECK: &[u8] = b"PROXY TCP4 127.0.0.1 127.0.0.1 49752 30011\r\n";
        /// `send-proxy` for a client on a unix socket.
        pub(super) const V1_UNIX: &[u8] = b"PROXY UNKNOWN\r\n";
    }

    const HTTP: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    fn sa(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn addresses(source: &str, destination: &str) -> Proxied {
        Proxied::Addresses {
            source: sa(source),
            destination: sa(destination),
        }
    }

    fn v1(source: &str, destination: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_v1(sa(source), sa(destination), &mut out);
        out
    }

    fn v2(source: &str, destination: &str) -> Vec<u8> {
        let mut out = Vec::new();
        write_v2(sa(source), sa(destination), &mut out);
        out
    }

    /// A v2 header from its 13th byte on (version/command, family, the rest), its length
    /// filled in.
    fn v2_raw(version_command: u8, family: u8, rest: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.extend_from_slice(&[version_command, family]);
        out.extend_from_slice(&u16::try_from(rest.len()).unwrap().to_be_bytes());
        out.extend_from_slice(rest);
        out
    }

    fn with_http(header: &[u8]) -> Vec<u8> {
        [header, HTTP].concat()
    }

    /// The header parses alone and with HTTP after it, consuming exactly itself, and every
    /// shorter prefix of it asks for more.
    fn check_header(header: &[u8], expected: Proxied) {
        assert_eq!(parse(header), Ok(Some((expected, header.len()))));
        let data = with_http(header);
        assert_eq!(parse(&data), Ok(Some((expected, header.len()))));
        assert_eq!(&data[header.len()..], HTTP);
        for n in 0..header.len() {
            assert_eq!(parse(&header[..n]), Ok(None), "prefix of {n} bytes");
        }
    }

    fn is_err(data: &[u8]) -> bool {
        matches!(parse(data), Err(ParseError::Invalid(_)))
    }

    #[test]
    fn haproxy_headers_parse() {
        let tcp4 = addresses("192.168.0.1:56324", "192.168.0.11:443");
        let tcp6 = addresses("[2001:db8::1]:56324", "[2001:db8::11]:443");
        let mixed_6_4 = addresses("[2001:db8::1]:56324", "[::ffff:192.0.2.11]:443");
        let mixed_4_6 = addresses("[::ffff:192.0.2.1]:56324", "[2001:db8::11]:443");
        check_header(haproxy::V1_TCP4, tcp4);
        check_header(haproxy::V2_TCP4, tcp4);
        check_header(haproxy::V1_TCP6, tcp6);
        check_header(haproxy::V2_TCP6, tcp6);
        check_header(haproxy::V1_MIXED_6_4, mixed_6_4);
        check_header(haproxy::V2_MIXED_6_4, mixed_6_4);
        check_header(haproxy::V1_MIXED_4_6, mixed_4_6);
        check_header(haproxy::V2_MIXED_4_6, mixed_4_6);
        check_header(haproxy::V2_TLVS, tcp4);
        check_header(haproxy::V2_LOCAL, Proxied::Local);
        check_header(haproxy::V1_UNIX, Proxied::Local);
        let check = addresses("127.0.0.1:49752", "127.0.0.1:30011");
        check_header(haproxy::V1_CHECK, check);
    }

    #[test]
    fn writes_what_haproxy_writes() {
        let (s4, d4) = ("192.168.0.1:56324", "192.168.0.11:443");
        let (s6, d6) = ("[2001:db8::1]:56324", "[2001:db8::11]:443");
        assert_eq!(v1(s4, d4), haproxy::V1_TCP4);
        assert_eq!(v2(s4, d4), haproxy::V2_TCP4);
        assert_eq!(v1(s6, d6), haproxy::V1_TCP6);
        assert_eq!(v2(s6, d6), haproxy::V2_TCP6);
        assert_eq!(v1(s6, "192.0.2.11:443"), haproxy::V1_MIXED_6_4);
        assert_eq!(v2(s6, "192.0.2.11:443"), haproxy::V2_MIXED_6_4);
        assert_eq!(v1("192.0.2.1:56324", d6), haproxy::V1_MIXED_4_6);
        assert_eq!(v2("192.0.2.1:56324", d6), haproxy::V2_MIXED_4_6);
        let mut out = Vec::new();
        write_v2_local(&mut out);
        assert_eq!(out, haproxy::V2_LOCAL);
        out.clear();
        write_v1_unknown(&mut out);
        assert_eq!(out, haproxy::V1_UNIX);
    }

    #[test]
    fn spec_example_line_before_http() {
        // proxy-protocol.txt section 2.1, byte for byte.
        let data = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n\
            GET / HTTP/1.1\r\n\
            Host: 192.168.0.11\r\n\
            \r\n";
        let (proxied, consumed) = parse(data).unwrap().unwrap();
        assert_eq!(proxied, addresses("192.168.0.1:56324", "192.168.0.11:443"));
        assert!(data[consumed..].starts_with(b"GET / HTTP/1.1\r\n"));
    }

    #[test]
    fn spec_longest_lines() {
        // The maximum lengths the spec lists: 56, 104 and 107 bytes with CRLF.
        let tcp4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        assert_eq!(tcp4.len(), 56);
        let all = addresses("255.255.255.255:65535", "255.255.255.255:65535");
        check_header(tcp4, all);
        let f = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let tcp6 = format!("PROXY TCP6 {f} {f} 65535 65535\r\n");
        assert_eq!(tcp6.len(), 104);
        let all = addresses(&format!("[{f}]:65535"), &format!("[{f}]:65535"));
        check_header(tcp6.as_bytes(), all);
        let unknown = format!("PROXY UNKNOWN {f} {f} 65535 65535\r\n");
        assert_eq!(unknown.len(), V1_MAX);
        check_header(unknown.as_bytes(), Proxied::Local);
        assert_eq!(
            v1(&format!("[{f}]:65535"), "[::]:0").len(),
            11 + 39 + 3 + 8 + 2
        );
    }

    #[test]
    fn round_trips() {
        let pairs = [
            ("192.0.2.1:1", "198.51.100.2:65535"),
            ("0.0.0.0:0", "255.255.255.255:0"),
            ("[2001:db8::1]:80", "[2001:db8:1:2:3:4:5:6]:443"),
            ("[::]:0", "[::1]:1"),
            ("192.0.2.1:5000", "[2001:db8::2]:80"),
            ("[2001:db8::1]:5000", "192.0.2.2:80"),
            ("[::ffff:10.0.0.1]:7", "[::ffff:10.0.0.2]:8"),
        ];
        let v6 = |a: SocketAddr| match a {
            SocketAddr::V4(a) => SocketAddr::from((a.ip().to_ipv6_mapped(), a.port())),
            a => a,
        };
        for (s, d) in pairs {
            let (source, destination) = (sa(s), sa(d));
            // The family is the pair's: a mixed pair comes back as two IPv6 addresses.
            let expected = if source.is_ipv4() && destination.is_ipv4() {
                addresses(s, d)
            } else {
                Proxied::Addresses {
                    source: v6(source),
                    destination: v6(destination),
                }
            };
            check_header(&v1(s, d), expected);
            check_header(&v2(s, d), expected);
        }
    }

    #[test]
    fn v2_local_ignores_family_and_skips_the_block() {
        check_header(&v2_raw(0x20, 0x00, b""), Proxied::Local);
        // Addresses and even an unknown family are discarded under LOCAL.
        let block = [1u8; 12];
        check_header(&v2_raw(0x20, 0x11, &block), Proxied::Local);
        check_header(&v2_raw(0x20, 0xff, &block), Proxied::Local);
        check_header(&v2_raw(0x20, 0x11, b""), Proxied::Local);
    }

    #[test]
    fn v2_families_without_tcp_addresses_are_local() {
        // UNSPEC: whatever the block holds is ignored.
        check_header(&v2_raw(0x21, 0x00, b"anything"), Proxied::Local);
        check_header(&v2_raw(0x21, 0x10, b""), Proxied::Local);
        // UDP over IPv4/IPv6 and unix sockets: valid, but nothing a TCP listener can use.
        check_header(&v2_raw(0x21, 0x12, &[1; 12]), Proxied::Local);
        check_header(&v2_raw(0x21, 0x22, &[1; 36]), Proxied::Local);
        check_header(&v2_raw(0x21, 0x31, &[b'/'; 216]), Proxied::Local);
        check_header(&v2_raw(0x21, 0x32, &[b'/'; 216]), Proxied::Local);
        let mut unix = vec![0u8; 216];
        unix.extend_from_slice(b"\x04\x00\x02ab");
        check_header(&v2_raw(0x21, 0x31, &unix), Proxied::Local);
        unix.truncate(218);
        assert!(is_err(&v2_raw(0x21, 0x31, &unix)));
    }

    #[test]
    fn v2_tlvs_are_skipped() {
        let mut block = v2("192.0.2.1:1000", "192.0.2.2:80")[16..].to_vec();
        block.extend_from_slice(b"\x04\x00\x00"); // NOOP, empty
        block.extend_from_slice(b"\x02\x00\x0bexample.com"); // AUTHORITY
        block.extend_from_slice(b"\x20\x00\x05\x01\x00\x00\x00\x00"); // SSL, no sub-TLVs
        block.extend_from_slice(b"\xe0\x00\x01\xff"); // custom
        let expected = addresses("192.0.2.1:1000", "192.0.2.2:80");
        check_header(&v2_raw(0x21, 0x11, &block), expected);
        let mut block6 = v2("[2001:db8::1]:1", "[2001:db8::2]:2")[16..].to_vec();
        block6.extend_from_slice(b"\x05\x00\x03abc");
        let expected = addresses("[2001:db8::1]:1", "[2001:db8::2]:2");
        check_header(&v2_raw(0x21, 0x21, &block6), expected);
    }

    #[test]
    fn v2_largest_header() {
        let mut block = v2("192.0.2.1:1000", "192.0.2.2:80")[16..].to_vec();
        let padding = usize::from(u16::MAX) - block.len() - 3;
        block.extend_from_slice(&[0x04]);
        block.extend_from_slice(&u16::try_from(padding).unwrap().to_be_bytes());
        block.resize(usize::from(u16::MAX), 0);
        let header = v2_raw(0x21, 0x11, &block);
        assert_eq!(header.len(), MAX_HEADER);
        let expected = addresses("192.0.2.1:1000", "192.0.2.2:80");
        assert_eq!(parse(&header), Ok(Some((expected, MAX_HEADER))));
        assert_eq!(parse(&header[..MAX_HEADER - 1]), Ok(None));
        assert_eq!(parse(&with_http(&header)), Ok(Some((expected, MAX_HEADER))));
    }

    #[test]
    fn v2_bad_tlvs() {
        let base = v2("192.0.2.1:1000", "192.0.2.2:80")[16..].to_vec();
        // Value longer than what is left of the header; a TLV cut in its type or length.
        for tail in [
            &b"\x04\x00\x05abcd"[..],
            b"\x04\x00",
            b"\x04",
            b"\x02\xff\xff",
        ] {
            let block = [&base[..], tail].concat();
            let header = v2_raw(0x21, 0x11, &block);
            assert!(is_err(&header), "{tail:?}");
            assert!(is_err(&with_http(&header)), "{tail:?}");
        }
    }

    #[test]
    fn v2_crc32c_is_checked() {
        assert!(parse(haproxy::V2_TLVS).unwrap().is_some());
        let mut bad = haproxy::V2_TLVS.to_vec();
        bad[31] ^= 1; // in the CRC value
        assert!(is_err(&bad));
        let mut bad = haproxy::V2_TLVS.to_vec();
        bad[40] ^= 1; // in the unique id: the CRC covers it
        assert!(is_err(&bad));
        let mut short = v2("192.0.2.1:1", "192.0.2.2:2")[16..].to_vec();
        short.extend_from_slice(b"\x03\x00\x03abc"); // CRC32C of 3 bytes
        assert!(is_err(&v2_raw(0x21, 0x11, &short)));
        // The check value of CRC32C ("123456789").
        assert_eq!(!crc32c_update(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn v2_malformed() {
        let good = v2("192.0.2.1:1000", "192.0.2.2:80");
        let mut signature = good.clone();
        signature[7] = b'q';
        assert!(is_err(&signature));
        assert!(
            is_err(&signature[..8]),
            "refused as soon as the signature differs"
        );
        assert!(is_err(b"\r\n\r\n\x01"));
        for version_command in [0x11, 0x31, 0x01, 0xf1, 0x22, 0x2f] {
            let mut bad = good.clone();
            bad[12] = version_command;
            assert!(is_err(&bad), "{version_command:#x}");
            assert!(is_err(&bad[..13]), "{version_command:#x} refused early");
        }
        for family in [0x13, 0x41, 0xf1, 0x03] {
            let mut bad = good.clone();
            bad[13] = family;
            assert!(is_err(&bad), "{family:#x}");
            assert!(is_err(&bad[..14]), "{family:#x} refused early");
        }
        // Address blocks too short for their family, refused once the length is read.
        for (family, len) in [(0x11, 11), (0x12, 0), (0x21, 35), (0x22, 12), (0x31, 215)] {
            let header = v2_raw(0x21, family, &vec![0; len]);
            assert!(is_err(&header), "{family:#x} with {len}");
            assert!(is_err(&header[..16]), "{family:#x} with {len}, early");
        }
        // A header longer than what has arrived is incomplete, not wrong.
        let mut long = good.clone();
        long[15] = 200;
        assert_eq!(parse(&long), Ok(None));
    }

    #[test]
    fn v1_unknown_ignores_the_rest_of_the_line() {
        check_header(b"PROXY UNKNOWN\r\n", Proxied::Local);
        check_header(b"PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n", Proxied::Local);
        check_header(b"PROXY UNKNOWN whatever\tit says\r\n", Proxied::Local);
        assert!(is_err(b"PROXY UNKNOWNX\r\n"));
        assert!(is_err(b"PROXY UNKNOWN\rX\r\n"));
        assert!(is_err(b"PROXY UNKNOWN a\rb\r\n"));
        assert!(is_err(b"PROXY UNKNOWN\n"));
    }

    #[test]
    fn v1_malformed() {
        let bad: &[&[u8]] = &[
            // Not PROXY, or not exactly.
            b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"Proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY \r\n",
            b"PROXY\r\n",
            // Spacing.
            b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1  2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
            b" PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY\tTCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n",
            // Fields missing or extra.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8\r\n",
            // Addresses.
            b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            b"PROXY TCP6 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP6 ::1%eth0 ::1 1 2\r\n",
            b"PROXY TCP6 [::1] ::1 1 2\r\n",
            b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n",
            b"PROXY TCP4 localhost 5.6.7.8 1 2\r\n",
            // Ports.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 +80 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 100000 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 80a 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 0x50 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 00\r\n",
            // Line ends.
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rGET",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\0\r\n",
        ];
        for line in bad {
            assert!(is_err(line), "{:?}", String::from_utf8_lossy(line));
            assert!(
                is_err(&with_http(line)),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn v1_missing_crlf_is_refused_at_107_bytes() {
        let mut line = b"PROXY UNKNOWN ".to_vec();
        line.resize(V1_MAX - 1, b'x');
        assert_eq!(parse(&line), Ok(None));
        line.push(b'x');
        assert!(is_err(&line));
        // A CRLF that comes too late does not help.
        line.extend_from_slice(b"\r\n");
        assert!(is_err(&line));
        // Nor does one right after the 107th byte.
        line.truncate(V1_MAX - 1);
        line.extend_from_slice(b"\r\n");
        assert_eq!(line.len(), V1_MAX + 1);
        assert!(is_err(&line));
        line.truncate(V1_MAX - 2);
        line.extend_from_slice(b"\r\n");
        assert_eq!(parse(&line), Ok(Some((Proxied::Local, V1_MAX))));
    }

    #[test]
    fn v1_refused_as_soon_as_it_cannot_be_valid() {
        let bad: &[&[u8]] = &[
            b"X",
            b"PROXX",
            b"proxy",
            b"PROXY  ",
            b"PROXY TCP5",
            b"PROXY TCP4x",
            b"PROXY UNKNOWNX",
            b"PROXY UNKNOWN\rX",
            b"PROXY TCP4 1.2.3.4.",
            b"PROXY TCP4 256",
            b"PROXY TCP4 01",
            b"PROXY TCP4 ::",
            b"PROXY TCP6 1.2",
            b"PROXY TCP6 12345",
            b"PROXY TCP6 1:2:3:4:5:6:7:8:",
            b"PROXY TCP4 1.2.3.4  ",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 00",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
        ];
        for part in bad {
            assert!(is_err(part), "{:?}", String::from_utf8_lossy(part));
        }
        // Starts of lines that can still be finished.
        let good: &[&[u8]] = &[
            b"P",
            b"PROXY",
            b"PROXY U",
            b"PROXY TCP",
            b"PROXY TCP6 ",
            b"PROXY TCP6 1:2:3:4:5:6:",
            b"PROXY TCP6 ::ffff:1.2.",
            b"PROXY TCP6 1:2:3:4:5:6:7",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 0 ",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 6553",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
        ];
        for part in good {
            assert_eq!(parse(part), Ok(None), "{:?}", String::from_utf8_lossy(part));
        }
    }

    #[test]
    fn not_a_proxy_header() {
        assert_eq!(parse(b""), Ok(None));
        assert!(is_err(HTTP));
        assert!(is_err(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"));
        assert!(is_err(b"\0"));
        assert!(is_err(b"\n"));
    }

    #[test]
    fn error_display() {
        let e = parse(b"GET").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid PROXY protocol header: not a PROXY protocol header"
        );
    }
}
