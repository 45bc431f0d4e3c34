//! The consistent-hash ring: each server owns points on a 64-bit circle in proportion to its
//! weight, placed by hashing its address, so every worker and every process builds the same
//! ring and adding one server to N moves about 1/(N+1) of the keys. A key goes to the first
//! point at or after its hash; the walk onward (to skip servers that are down or full) is in
//! `balance`.

use crate::net::Address;

use xxhash_rust::xxh3::xxh3_64;

use crate::config::HashKey;
use crate::message::RequestHead;

/// Points per unit of weight: enough for an even spread (a few percent) with tens of servers.
const POINTS_PER_WEIGHT: u32 = 160;
/// Most points one server gets, whatever its weight.
const MAX_POINTS: u32 = 16_000;

/// Points on the circle, sorted, each naming a server by its index in the balancer.
#[derive(Debug, Default)]
pub struct Ring {
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// The ring over `servers`: each one's index (returned by [`Ring::walk`]), address and
    /// weight.
    pub fn new<'a>(servers: impl Iterator<Item = (usize, &'a Address, u32)>) -> Ring {
        let mut points = Vec::new();
        for (index, addr, weight) in servers {
            let name = addr.to_string();
            let n = weight.saturating_mul(POINTS_PER_WEIGHT).min(MAX_POINTS);
            for i in 0..n {
                let point = xxh3_64(format!("{name}-{i}").as_bytes());
                points.push((point, index as u32));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// Whether the ring has no server.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Server indices from the key's place on the ring onward, once around (a server appears
    /// as often as it has points; callers stop at the first acceptable one).
    pub fn walk(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.points.partition_point(|&(p, _)| p < key);
        let (after, before) = self.points.split_at(start);
        before.iter().chain(after).map(|&(_, index)| index as usize)
    }
}

/// The hash of a request key, as the ring places it.
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// The hash of the part of the request that consistent hashing keys on; None when the request
/// lacks it (the group then balances it like P2C). Cookies are split on `;` without
/// allocating; the first cookie of that name counts.
pub fn request_key(
    head: &RequestHead<'_, '_>,
    key: &HashKey,
    peer: std::net::SocketAddr,
) -> Option<u64> {
    let headers = head.headers;
    let bytes: &[u8] = match key {
        HashKey::ClientIp => {
            return Some(match peer.ip() {
                std::net::IpAddr::V4(ip) => hash_key(&ip.octets()),
                std::net::IpAddr::V6(ip) => hash_key(&ip.octets()),
            })
        }
        HashKey::Uri => head.path.as_bytes(),
        HashKey::Header(name) => {
            headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))?
                .value
        }
        HashKey::Cookie(name) => headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
            .flat_map(|h| h.value.split(|&b| b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii_start();
                let value = pair.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
                Some(value.trim_ascii_end())
            })?,
    };
    Some(hash_key(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u16) -> Vec<(usize, Address, u32)> {
        (0..n)
            .map(|i| {
                (
                    usize::from(i),
                    Address::Tcp(std::net::SocketAddr::from(([10, 0, 0, 1], 8000 + i))),
                    1,
                )
            })
            .collect()
    }

    fn owner(ring: &Ring, key: u64) -> usize {
        ring.walk(key).next().unwrap()
    }

    #[test]
    fn adding_a_server_moves_about_one_share_of_keys() {
        let four = Ring::new(addrs(4).iter().map(|(i, a, w)| (*i, a, *w)));
        let five = Ring::new(addrs(5).iter().map(|(i, a, w)| (*i, a, *w)));
        let keys = 20_000;
        let mut moved = 0;
        let mut counts = [0usize; 5];
        for k in 0..keys {
            let h = hash_key(format!("user-{k}").as_bytes());
            let (a, b) = (owner(&four, h), owner(&five, h));
            counts[b] += 1;
            if a != b {
                moved += 1;
                assert_eq!(b, 4, "a key moved between old servers");
            }
        }
        let share = f64::from(moved) / f64::from(keys);
        assert!((0.15..0.25).contains(&share), "moved {share}");
        for c in counts {
            let c = c as f64 / f64::from(keys);
            assert!((0.15..0.25).contains(&c), "uneven: {counts:?}");
        }
    }

    #[test]
    fn request_keys() {
        let raw =
            b"GET /a?b HTTP/1.1\r\nHost: x\r\nCookie: a=1; sid=abc ; c=2\r\nX-User: u1\r\n\r\n";
        let mut storage = crate::http1::request::header_storage();
        let head = crate::http1::parse_request(raw, &mut storage, 4096)
            .unwrap()
            .unwrap();
        let peer: std::net::SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let key = |k: HashKey| request_key(&head, &k, peer);
        assert_eq!(key(HashKey::Cookie("sid".into())), Some(hash_key(b"abc")));
        assert_eq!(key(HashKey::Header("x-user".into())), Some(hash_key(b"u1")));
        assert_eq!(key(HashKey::Uri), Some(hash_key(b"/a?b")));
        assert_eq!(key(HashKey::ClientIp), Some(hash_key(&[192, 0, 2, 7])));
        assert_eq!(key(HashKey::Cookie("si".into())), None);
        assert_eq!(key(HashKey::Header("x-none".into())), None);
    }

    #[test]
    fn weight_scales_the_share() {
        let mut servers = addrs(2);
        servers[1].2 = 3;
        let ring = Ring::new(servers.iter().map(|(i, a, w)| (*i, a, *w)));
        let heavy = (0..10_000u32)
            .filter(|k| owner(&ring, hash_key(&k.to_le_bytes())) == 1)
            .count();
        assert!((7_000..8_000).contains(&heavy), "{heavy}");
    }
}
