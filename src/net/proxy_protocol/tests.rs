//! Tests of `proxy_protocol`.

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
