//! The real client address behind trusted proxies (nginx's realip module): when the peer is
//! one of `from`, the address is read from `header` (`X-Forwarded-For`, `X-Real-IP` or any
//! field; every X-Forwarded-For line read as one list, the last line last). Without
//! `recursive` the rightmost address is the client; with it the list is walked from the
//! right past addresses that are themselves trusted, and the first untrusted one (else the
//! leftmost) is the client. An entry may carry a port (`a:p`, `[v6]:p`); one that is not an
//! address leaves the peer as the client.

use std::net::IpAddr;

use super::access::AccessRule;
use crate::message::Field;

/// Where real client addresses come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealIp {
    /// The trusted proxies (`set_real_ip_from`), as `allow` rules.
    pub from: Vec<AccessRule>,
    /// The field carrying the address (`real_ip_header`), lower-cased.
    pub header: String,
    /// `real_ip_recursive`.
    pub recursive: bool,
}

impl RealIp {
    /// The client's address for a request from `peer`, when it differs from the peer.
    pub fn client(&self, peer: IpAddr, headers: &[Field<'_>]) -> Option<IpAddr> {
        if !self.trusts(peer) {
            return None;
        }
        let mut list: Vec<&[u8]> = Vec::new();
        for h in headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(&self.header))
        {
            list.extend(h.value.split(|&b| b == b','));
        }
        let mut chosen = None;
        for entry in list.iter().rev() {
            let ip = parse_entry(entry)?;
            chosen = Some(ip);
            if !self.recursive || !self.trusts(ip) {
                break;
            }
        }
        chosen.filter(|ip| *ip != peer)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.from.iter().any(|r| r.covers(ip))
    }
}

/// One list entry: an address, maybe with a port.
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?.trim();
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(recursive: bool, header: &str, values: &[&'static str], peer: &str) -> Option<String> {
        let settings = RealIp {
            from: ["allow 127.0.0.1", "allow 10.0.0.0/8"]
                .iter()
                .map(|r| AccessRule::parse(r).unwrap())
                .collect(),
            header: header.to_string(),
            recursive,
        };
        let headers: Vec<Field<'_>> = values
            .iter()
            .map(|v| Field {
                name: "X-Forwarded-For",
                value: v.as_bytes(),
            })
            .collect();
        settings
            .client(peer.parse().unwrap(), &headers)
            .map(|ip| ip.to_string())
    }

    #[test]
    fn trusted_peers_name_the_client_as_nginx_reads_them() {
        let xff = "x-forwarded-for";
        assert_eq!(
            real(false, xff, &["1.1.1.1, 10.0.0.5"], "127.0.0.1").as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            real(true, xff, &["1.1.1.1, 10.0.0.5"], "127.0.0.1").as_deref(),
            Some("1.1.1.1")
        );
        // Every line is one list, the last line last.
        assert_eq!(
            real(
                true,
                xff,
                &["2.2.2.2", "1.1.1.1:8080, 10.0.0.5"],
                "127.0.0.1"
            )
            .as_deref(),
            Some("1.1.1.1")
        );
        assert_eq!(
            real(true, xff, &["10.0.0.7, 10.0.0.5"], "127.0.0.1").as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(
            real(false, xff, &["[2001:db8::1]:443"], "::ffff:127.0.0.1").as_deref(),
            Some("2001:db8::1")
        );
        // An untrusted peer, a broken entry, no field: the peer stays.
        assert_eq!(real(false, xff, &["1.1.1.1"], "192.168.0.1"), None);
        assert_eq!(real(false, xff, &["not-an-ip"], "127.0.0.1"), None);
        assert_eq!(real(false, "x-real-ip", &["1.1.1.1"], "127.0.0.1"), None);
    }
}
