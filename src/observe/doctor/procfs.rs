//! Parsers for the kernel files `doctor` reads: `/proc/self/limits`, `/proc/net/netstat`,
//! `/proc/net/sockstat`, and single-value sysctls. Socket-free and fuzzed: a malformed file
//! gives `None`, never a panic.

use std::collections::BTreeMap;

/// The soft and hard limits of `Max open files` in a `/proc/PID/limits` text.
pub fn open_files_limit(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut values = line["Max open files".len()..].split_whitespace();
    let soft = limit_value(values.next()?)?;
    let hard = limit_value(values.next()?)?;
    Some((soft, hard))
}

fn limit_value(s: &str) -> Option<u64> {
    if s == "unlimited" {
        return Some(u64::MAX);
    }
    s.parse().ok()
}

/// The `TcpExt:` (and `IpExt:`, `MPTcpExt:`) counters of `/proc/net/netstat`: each section is a
/// line of names followed by a line of values.
pub fn netstat(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some((section, names)), Some((again, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            break;
        };
        if section != again {
            break;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse() {
                out.insert(format!("{section}:{n}"), v);
            }
        }
    }
    out
}

/// The TIME_WAIT socket count (`tw`) of the `TCP:` line of `/proc/net/sockstat`.
pub fn time_wait(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "tw" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// The first number of a sysctl file.
pub fn number(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The low and high ports of `ip_local_port_range` (low <= high).
pub fn port_range(text: &str) -> Option<(u64, u64)> {
    let mut w = text.split_whitespace();
    let (lo, hi) = (w.next()?.parse().ok()?, w.next()?.parse().ok()?);
    (lo <= hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_formats() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(limits), Some((1024, 524288)));
        let ns = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 1 20 21\n\
                  IpExt: InNoRoutes\nIpExt: 0\n";
        let n = netstat(ns);
        assert_eq!(n["TcpExt:ListenOverflows"], 20);
        assert_eq!(n["IpExt:InNoRoutes"], 0);
        let ss = "sockets: used 9\nTCP: inuse 1 orphan 0 tw 17 alloc 1 mem 41\n";
        assert_eq!(time_wait(ss), Some(17));
        assert_eq!(port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(port_range("9 1"), None);
        assert_eq!(number("128\n"), Some(128));
    }
}
