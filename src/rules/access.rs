//! `allow` and `deny` by address: rules in order, the first that matches the client decides,
//! none matching lets the request through (nginx's access module). An IPv4-mapped IPv6
//! client (`::ffff:10.0.0.1`) is checked against the IPv4 rules.

use std::net::IpAddr;

/// One `allow` or `deny` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// The network it covers: `None` for `all`.
    pub net: Option<(IpAddr, u8)>,
}

impl AccessRule {
    /// Parses `allow ADDR[/BITS]`, `deny ADDR[/BITS]` or either with `all`.
    pub fn parse(text: &str) -> Result<AccessRule, String> {
        let mut words = text.split_ascii_whitespace();
        let allow = match words.next() {
            Some("allow") => true,
            Some("deny") => false,
            _ => {
                return Err(format!(
                    "{text:?}: an access rule is \"allow ...\" or \"deny ...\""
                ))
            }
        };
        let (Some(what), None) = (words.next(), words.next()) else {
            return Err(format!(
                "{text:?}: one address, network or \"all\" per rule"
            ));
        };
        if what == "all" {
            return Ok(AccessRule { allow, net: None });
        }
        let (addr, bits) = match what.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (what, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => match b.parse::<u8>() {
                Ok(b) if b <= max => b,
                _ => return Err(format!("{text:?}: invalid prefix length {b:?}")),
            },
        };
        Ok(AccessRule {
            allow,
            net: Some((addr, bits)),
        })
    }

    /// Whether the rule applies to `client`.
    pub fn covers(&self, client: IpAddr) -> bool {
        let Some((net, bits)) = self.net else {
            return true;
        };
        match (net, client) {
            (IpAddr::V4(n), IpAddr::V4(c)) => prefix_equal(&n.octets(), &c.octets(), bits),
            (IpAddr::V6(n), IpAddr::V6(c)) => prefix_equal(&n.octets(), &c.octets(), bits),
            _ => false,
        }
    }
}

/// Whether `client` may pass `rules`.
pub fn allowed(rules: &[AccessRule], client: IpAddr) -> bool {
    verdict(rules, client).unwrap_or(true)
}

/// What the first rule covering `client` says: `Some(true)` allow, `Some(false)` deny,
/// `None` when no rule covers it (nginx's `satisfy any` tells "allowed" from "not denied").
pub fn verdict(rules: &[AccessRule], client: IpAddr) -> Option<bool> {
    let client = match client {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
        v4 => v4,
    };
    rules.iter().find(|r| r.covers(client)).map(|r| r.allow)
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_equal(a: &[u8], b: &[u8], bits: u8) -> bool {
    let whole = usize::from(bits / 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    let rest = bits % 8;
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[whole] & mask == b[whole] & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_rule_decides() {
        let rules: Vec<AccessRule> = [
            "deny 10.1.2.3",
            "allow 10.0.0.0/8",
            "allow 2001:db8::/32",
            "deny all",
        ]
        .iter()
        .map(|r| AccessRule::parse(r).unwrap())
        .collect();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(!allowed(&rules, ip("10.1.2.3")));
        assert!(allowed(&rules, ip("10.200.0.1")));
        assert!(allowed(&rules, ip("::ffff:10.9.9.9")));
        assert!(allowed(&rules, ip("2001:db8::1")));
        assert!(!allowed(&rules, ip("2001:db9::1")));
        assert!(!allowed(&rules, ip("192.168.0.1")));
        assert!(allowed(&[], ip("192.168.0.1")));
        let odd = AccessRule::parse("allow 192.168.0.0/23").unwrap();
        assert!(allowed(std::slice::from_ref(&odd), ip("192.168.1.7")));
        assert!(odd.covers(ip("192.168.1.7")) && !odd.covers(ip("192.168.2.7")));
        for bad in [
            "permit all",
            "allow",
            "allow 1.2.3.4/33",
            "deny 1.2.3",
            "allow a b",
        ] {
            assert!(AccessRule::parse(bad).is_err(), "{bad}");
        }
    }
}
