//! [`Address`]: where an upstream server listens, a TCP address or a unix socket path (PHP-FPM
//! is usually on `unix:/run/php/php-fpm.sock`). Pools, balancers, health and logs key servers
//! by it.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// A server's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// An IP address and port.
    Tcp(SocketAddr),
    /// A unix stream socket, by path.
    Unix(Arc<Path>),
}

impl Address {
    /// The TCP address, if this is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Address::Tcp(a) => Some(*a),
            Address::Unix(_) => None,
        }
    }
}

impl Default for Address {
    fn default() -> Self {
        Address::Tcp(SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl From<SocketAddr> for Address {
    fn from(a: SocketAddr) -> Address {
        Address::Tcp(a)
    }
}

impl fmt::Display for Address {
    /// `10.0.0.1:80`, `[::1]:80` or `unix:/run/php/fpm.sock`, as the config writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Tcp(a) => a.fmt(f),
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// An IP address as text, held inline: a client's, formatted once per connection or HTTP/2
/// stream for X-Forwarded-For and the logs without a heap allocation.
#[derive(Clone, Copy)]
pub struct IpText {
    len: u8,
    /// The longest text an `IpAddr` displays as takes 39 bytes (eight groups of four).
    buf: [u8; 48],
}

impl IpText {
    /// `ip` as text.
    pub fn new(ip: std::net::IpAddr) -> IpText {
        use std::io::Write;
        let mut buf = [0u8; 48];
        let len = match ip {
            // The usual case, written digit by digit: `fmt` takes about a thousand
            // instructions for it, once per HTTP/2 stream.
            std::net::IpAddr::V4(v4) => put_v4(&mut buf, v4.octets()),
            std::net::IpAddr::V6(_) => {
                let mut cursor = std::io::Cursor::new(&mut buf[..]);
                let _ = write!(cursor, "{ip}");
                cursor.position() as usize
            }
        };
        IpText {
            len: len as u8,
            buf,
        }
    }

    /// The text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

/// Writes `octets` in dotted decimal at the start of `buf` (as `Ipv4Addr` displays them);
/// how many bytes that took (at most 15).
fn put_v4(buf: &mut [u8; 48], octets: [u8; 4]) -> usize {
    let mut at = 0;
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            buf[at] = b'.';
            at += 1;
        }
        if octet >= 100 {
            buf[at] = b'0' + octet / 100;
            at += 1;
        }
        if octet >= 10 {
            buf[at] = b'0' + octet / 10 % 10;
            at += 1;
        }
        buf[at] = b'0' + octet % 10;
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::IpText;

    #[test]
    fn ipv4_text_is_what_display_gives_for_every_octet_in_every_place() {
        for value in 0..=255u8 {
            for place in 0..4 {
                let mut octets = [10, 0, 199, 255];
                octets[place] = value;
                let ip = std::net::IpAddr::from(octets);
                assert_eq!(IpText::new(ip).as_bytes(), ip.to_string().as_bytes());
            }
        }
        let mapped: std::net::IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(IpText::new(mapped).as_bytes(), b"::ffff:192.0.2.1");
    }

    #[test]
    fn addresses_of_both_families_fit() {
        let longest: std::net::IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
            .parse()
            .unwrap();
        assert_eq!(
            IpText::new(longest).as_bytes(),
            longest.to_string().as_bytes()
        );
        let v4: std::net::IpAddr = "192.0.2.10".parse().unwrap();
        assert_eq!(IpText::new(v4).as_bytes(), b"192.0.2.10");
    }
}
