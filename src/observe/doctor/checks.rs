//! The checks themselves: host limits sized against the config, kernel counters since boot and
//! over a short sample, and a running slipstream's trap counters.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use super::{procfs, Demand, Finding, Inputs, Severity};

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

fn finding(
    severity: Severity,
    check: &'static str,
    title: String,
    evidence: String,
    fix: &str,
) -> Finding {
    let fix = if severity == Severity::Ok {
        String::new()
    } else {
        fix.to_string()
    };
    Finding {
        severity,
        check,
        title,
        evidence,
        fix,
    }
}

/// Every host check.
pub(super) fn host(inputs: &Inputs) -> Vec<Finding> {
    let root = inputs.proc_root.as_path();
    let demand = &inputs.demand;
    let mut out = Vec::new();
    out.extend(nofile(root, demand));
    out.extend(listen_queue(root, demand));
    out.extend(ports(root, demand));
    out.extend(conntrack(root, demand));
    out.extend(kernel_counters(root, inputs.sample));
    out.extend(uring_sysctl(root));
    out
}

/// `kernel.io_uring_disabled`: 2 refuses every ring and 1 all but root and `io_uring_group`,
/// and a refused ring puts the workers on epoll (`io = "uring"` is the default).
fn uring_sysctl(root: &Path) -> Option<Finding> {
    let value = read(root, "sys/kernel/io_uring_disabled")?;
    let (severity, title) = match value.trim() {
        "0" => (
            Severity::Ok,
            "io_uring is allowed (kernel.io_uring_disabled = 0)",
        ),
        "1" => (
            Severity::Warning,
            "io_uring only for root and kernel.io_uring_group (kernel.io_uring_disabled = 1)",
        ),
        _ => (
            Severity::Warning,
            "io_uring is disabled (kernel.io_uring_disabled = 2): the workers run on epoll",
        ),
    };
    let evidence = format!("sys/kernel/io_uring_disabled: {}", value.trim());
    let fix = "sysctl kernel.io_uring_disabled=0 (or run as a member of kernel.io_uring_group)";
    Some(finding(
        severity,
        "uring_sysctl",
        title.to_string(),
        evidence,
        fix,
    ))
}

fn nofile(root: &Path, d: &Demand) -> Option<Finding> {
    let (soft, hard) = procfs::open_files_limit(&read(root, "self/limits")?)?;
    let needed = d.descriptors();
    let severity = if hard < needed {
        Severity::Critical
    } else {
        Severity::Ok
    };
    let title = match severity {
        Severity::Ok => format!("open-file limit {hard} covers {needed} descriptors"),
        _ => format!(
            "open-file limit {hard} is below the {needed} descriptors the listeners may need"
        ),
    };
    let evidence = format!(
        "self/limits: soft {soft}, hard {hard} (slipstream raises soft to hard); max_connections {} x 2 + 1024",
        d.connections
    );
    let fix = format!("LimitNOFILE={needed} in the systemd unit, or `ulimit -n {needed}` before starting (nofile in /etc/security/limits.conf)");
    Some(finding(severity, "nofile", title, evidence, &fix))
}

fn listen_queue(root: &Path, d: &Demand) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(somaxconn) = read(root, "sys/net/core/somaxconn").and_then(|t| procfs::number(&t)) {
        let severity = if somaxconn < 1024 {
            Severity::Critical
        } else if somaxconn < d.backlog {
            Severity::Warning
        } else {
            Severity::Ok
        };
        let title = format!(
            "net.core.somaxconn {somaxconn} caps the listen backlog {}",
            d.backlog
        );
        let evidence = format!(
            "sys/net/core/somaxconn = {somaxconn}; bursts beyond it are dropped (ListenOverflows)"
        );
        let fix = format!("sysctl -w net.core.somaxconn={0}; persist: echo 'net.core.somaxconn = {0}' > /etc/sysctl.d/90-slipstream.conf", d.backlog.max(4096));
        out.push(finding(severity, "somaxconn", title, evidence, &fix));
    }
    if let Some(syn) =
        read(root, "sys/net/ipv4/tcp_max_syn_backlog").and_then(|t| procfs::number(&t))
    {
        let severity = if syn < 1024 {
            Severity::Critical
        } else if syn < d.backlog.min(65535) / 2 {
            Severity::Warning
        } else {
            Severity::Ok
        };
        let title = format!(
            "net.ipv4.tcp_max_syn_backlog {syn} for a listen backlog of {}",
            d.backlog
        );
        let evidence = format!("sys/net/ipv4/tcp_max_syn_backlog = {syn}");
        let fix = format!(
            "sysctl -w net.ipv4.tcp_max_syn_backlog={}",
            d.backlog.max(4096)
        );
        out.push(finding(severity, "syn_backlog", title, evidence, &fix));
    }
    out
}

/// What the upstream pools keep, in words: a count, or why there is none.
fn pools(d: &Demand) -> String {
    match d.pool_per_server {
        0 if d.upstreams => "upstream keep-alive is off (keepalive = 0): no connection is kept, \
                             each request opens one"
            .to_string(),
        0 => "no upstream connections are kept (no upstreams: none configured, or no --config)"
            .to_string(),
        n => format!("pools keep up to {n} idle connections per server"),
    }
}

fn ports(root: &Path, d: &Demand) -> Vec<Finding> {
    let mut out = Vec::new();
    let range = read(root, "sys/net/ipv4/ip_local_port_range").and_then(|t| procfs::port_range(&t));
    let time_wait = read(root, "net/sockstat").and_then(|t| procfs::time_wait(&t));
    if let Some((lo, hi)) = range {
        let size = hi - lo + 1;
        let severity = if size < 1024 || size < d.pool_per_server * 2 {
            Severity::Critical
        } else if size < 16384 {
            Severity::Warning
        } else {
            Severity::Ok
        };
        let title = format!("{size} ephemeral ports per upstream address ({lo}-{hi})");
        let evidence = format!(
            "sys/net/ipv4/ip_local_port_range = {lo} {hi}; {}; every closed upstream connection holds its port 60 s in TIME_WAIT",
            pools(d)
        );
        let fix = "sysctl -w net.ipv4.ip_local_port_range=\"10240 65535\"; keep upstream keep-alive on (the default) so ports are reused";
        out.push(finding(severity, "port_range", title, evidence, fix));
        if let Some(tw) = time_wait {
            let severity = if tw * 2 > size {
                Severity::Critical
            } else if tw * 10 > size {
                Severity::Warning
            } else {
                Severity::Ok
            };
            let title = format!("{tw} sockets in TIME_WAIT against {size} ephemeral ports");
            let evidence =
                "net/sockstat tw (all destinations; per upstream it can only be fewer)".to_string();
            let fix = "keep upstream keep-alive on (slipstream's default), check upstream `Connection: close`; sysctl -w net.ipv4.tcp_tw_reuse=1";
            out.push(finding(severity, "time_wait", title, evidence, fix));
        }
    }
    if let Some(reuse) = read(root, "sys/net/ipv4/tcp_tw_reuse").and_then(|t| procfs::number(&t)) {
        let severity = match reuse {
            1 => Severity::Ok,
            2 if !d.remote_upstreams => Severity::Ok,
            _ if d.upstreams => Severity::Warning,
            _ => Severity::Ok,
        };
        let what = match reuse {
            0 => "off",
            1 => "on",
            _ => "on for loopback only",
        };
        let title = format!("net.ipv4.tcp_tw_reuse is {what}");
        let evidence = format!("sys/net/ipv4/tcp_tw_reuse = {reuse}; without it new upstream connections cannot take ports held in TIME_WAIT");
        out.push(finding(
            severity,
            "tw_reuse",
            title,
            evidence,
            "sysctl -w net.ipv4.tcp_tw_reuse=1",
        ));
    }
    out
}

fn conntrack(root: &Path, d: &Demand) -> Option<Finding> {
    let max = procfs::number(&read(root, "sys/net/netfilter/nf_conntrack_max")?)?;
    let count = read(root, "sys/net/netfilter/nf_conntrack_count")
        .and_then(|t| procfs::number(&t))
        .unwrap_or(0);
    let needed = d.connections.saturating_mul(2);
    let severity = if max == 0 || count * 10 >= max * 9 {
        Severity::Critical
    } else if count * 10 >= max * 7 || max < needed {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let title = format!("conntrack table {count} of {max} entries used");
    let evidence = format!("sys/net/netfilter/nf_conntrack_count = {count}, nf_conntrack_max = {max}; a full table drops new connections (dmesg: \"nf_conntrack: table full, dropping packet\"); the listeners may need {needed}");
    let fix = format!("sysctl -w net.netfilter.nf_conntrack_max={}, or exempt the proxy's ports with `iptables -t raw -A PREROUTING -p tcp --dport PORT -j NOTRACK`", (needed * 2).max(max * 2));
    Some(finding(severity, "conntrack", title, evidence, &fix))
}

/// Kernel drop counters: anything since boot is a warning, anything moving during the sample
/// is critical.
fn kernel_counters(root: &Path, sample: Duration) -> Vec<Finding> {
    let Some(before) = read(root, "net/netstat").map(|t| procfs::netstat(&t)) else {
        return Vec::new();
    };
    let after = if sample.is_zero() {
        None
    } else {
        #[allow(clippy::disallowed_methods)] // the doctor command's own thread, not a worker
        std::thread::sleep(sample);
        read(root, "net/netstat").map(|t| procfs::netstat(&t))
    };
    let get =
        |m: &BTreeMap<String, u64>, k: &str| m.get(&format!("TcpExt:{k}")).copied().unwrap_or(0);
    let secs = sample.as_secs_f64();
    let mut out = Vec::new();
    let counters: [(&'static str, &str, &str, &str); 4] = [
        (
            "listen_overflows",
            "ListenOverflows",
            "accept queues overflowed: connections were dropped",
            "raise net.core.somaxconn and the listen backlog; add workers if accepts lag",
        ),
        (
            "listen_drops",
            "ListenDrops",
            "SYNs or connections dropped at listen sockets",
            "raise net.core.somaxconn and net.ipv4.tcp_max_syn_backlog",
        ),
        (
            "syncookies",
            "SyncookiesSent",
            "SYN cookies sent: the SYN queue was full",
            "raise net.ipv4.tcp_max_syn_backlog (and somaxconn)",
        ),
        (
            "tcp_memory",
            "TCPMemoryPressures",
            "TCP memory pressure: socket buffers were cut",
            "raise net.ipv4.tcp_mem, or lower per-connection buffers",
        ),
    ];
    for (check, key, what, fix) in counters {
        let total = get(&before, key);
        let moved = after.as_ref().map(|a| get(a, key).saturating_sub(total));
        let severity = match moved {
            Some(m) if m > 0 => Severity::Critical,
            _ if total > 0 => Severity::Warning,
            _ => Severity::Ok,
        };
        let title = match (severity, moved) {
            (Severity::Ok, _) => format!("no {key}"),
            (_, Some(m)) if m > 0 => format!("{what} ({m} in {secs} s)"),
            _ => format!("{what} ({total} since boot)"),
        };
        let evidence = match moved {
            Some(m) => format!("net/netstat TcpExt {key} = {total} since boot, +{m} in {secs} s"),
            None => format!("net/netstat TcpExt {key} = {total} since boot"),
        };
        out.push(finding(severity, check, title, evidence, fix));
    }
    out
}

/// A live counter: finding id, where it is in `/status?format=json`, how bad any count is,
/// what it means, the fix.
type LiveCounter = (
    &'static str,
    [&'static str; 2],
    Severity,
    &'static str,
    &'static str,
);

const LIVE_COUNTERS: [LiveCounter; 9] = [
    (
        "live_connection_limit",
        ["connections", "accept_paused_at_limit"],
        Severity::Critical,
        "accepting paused at max_connections",
        "raise max_connections in [[listen]] (and the open-file limit with it)",
    ),
    (
        "live_accept_errors",
        ["connections", "accept_errors"],
        Severity::Critical,
        "accept(2) failures (EMFILE: out of descriptors)",
        "raise LimitNOFILE",
    ),
    (
        "live_eaddrnotavail",
        ["upstream", "ports_exhausted_eaddrnotavail"],
        Severity::Critical,
        "upstream connects failed with EADDRNOTAVAIL (ephemeral ports exhausted)",
        "keep upstream keep-alive on, widen net.ipv4.ip_local_port_range, set tcp_tw_reuse=1",
    ),
    (
        "live_upstream_errors",
        ["upstream", "connect_errors"],
        Severity::Warning,
        "upstream connect errors",
        "see /metrics slipstream_upstream_server_failures_total by server and kind",
    ),
    (
        "live_queue_timeouts",
        ["upstream", "queue_timeouts"],
        Severity::Warning,
        "requests answered 503 after waiting for an upstream connection",
        "raise the group's max_conns to the backend's capacity (pm.max_children)",
    ),
    (
        "live_log_dropped",
        ["access_log", "dropped"],
        Severity::Warning,
        "access-log lines dropped (the log writer fell behind)",
        "put the access log on a faster disk, or use per-site logs",
    ),
    (
        "live_uring_unavailable",
        ["workers", "uring_unavailable"],
        Severity::Warning,
        "workers run on epoll, not io_uring (the default): the kernel refused a ring",
        "allow io_uring (sysctl kernel.io_uring_disabled=0; no seccomp filter on io_uring_setup, as in Docker's default profile) or set io = \"epoll\" to choose it",
    ),
    (
        "live_uring_failed",
        ["workers", "uring_failed"],
        Severity::Warning,
        "workers whose io_uring failed while serving (they went on with epoll)",
        "read the error log for the io_uring_enter error; restart to get the ring back",
    ),
    (
        "live_reloads_failed",
        ["config", "reloads_failed"],
        Severity::Warning,
        "config reloads refused",
        "run `slipstream check -c FILE` and read the error log",
    ),
];

/// A running slipstream's trap counters, from its admin listener.
pub(super) fn live(admin: SocketAddr) -> Vec<Finding> {
    match fetch_status(admin) {
        Ok(status) => live_from(&admin.to_string(), &status),
        Err(e) => {
            let title = format!("cannot read {admin}/status?format=json: {e}");
            vec![finding(
                Severity::Warning,
                "live",
                title,
                String::new(),
                "check --admin (the `admin` key of the running config)",
            )]
        }
    }
}

/// The trap counters' findings from a `/status?format=json` value read at `admin`.
pub(super) fn live_from(admin: &str, status: &serde_json::Value) -> Vec<Finding> {
    let n = |path: &[&str]| {
        path.iter()
            .try_fold(status, |v, k| v.get(k))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let requests = n(&["requests", "total"]);
    let closed = n(&["requests", "client_closed_499"]);
    let mut out = Vec::new();
    for (check, path, severity, what, fix) in LIVE_COUNTERS {
        let value = n(&path);
        let (severity, title) = if value > 0 {
            let why = status["workers"]["uring_refused_because"].as_str();
            match why.filter(|_| check == "live_uring_unavailable") {
                Some(why) => (severity, format!("{what}: {value} ({why})")),
                None => (severity, format!("{what}: {value}")),
            }
        } else {
            (Severity::Ok, format!("no {what}"))
        };
        let evidence = format!("{admin} /status?format=json");
        out.push(finding(severity, check, title, evidence, fix));
    }
    out.extend(cluster_finding(admin, &status["cluster"]));
    if let Some(certs) = status.get("acme").and_then(serde_json::Value::as_array) {
        out.extend(certs.iter().filter_map(|c| acme_finding(admin, c)));
    }
    let rate = if requests == 0 {
        0.0
    } else {
        closed as f64 / requests as f64
    };
    let severity = if rate > 0.01 {
        Severity::Warning
    } else {
        Severity::Ok
    };
    let title = format!(
        "{closed} of {requests} requests ended by the client first (499), {:.2}%",
        rate * 100.0
    );
    out.push(finding(severity, "live_499", title, format!("{admin} /status?format=json"),
        "clients give up before responses come: look at upstream response times (slipstream_upstream_server_response_seconds)"));
    out
}

/// A fleet member's standing: etcd unreachable (serving the last good configuration), or a
/// shared configuration refused.
fn cluster_finding(admin: &str, cluster: &serde_json::Value) -> Option<Finding> {
    let connected = cluster.get("connected")?.as_bool().unwrap_or(false);
    let evidence = format!("{admin} /status?format=json");
    let refusal = cluster["last_refusal"].as_str().unwrap_or("");
    let revision = cluster["revision"].as_i64().unwrap_or(0);
    Some(if !connected {
        finding(Severity::Warning, "live_cluster", format!("etcd unreachable: serving the last good shared configuration (revision {revision})"), evidence,
            "check the [cluster] etcd endpoints and etcd's health (etcdctl endpoint health); nothing is lost meanwhile")
    } else if !refusal.is_empty() {
        let first = refusal.lines().next().unwrap_or("");
        finding(
            Severity::Warning,
            "live_cluster",
            format!("a shared configuration was refused: {first}"),
            evidence,
            "fix it and push it again with `slipstream config push` (it validates before writing)",
        )
    } else {
        finding(
            Severity::Ok,
            "live_cluster",
            format!("etcd reachable, shared configuration revision {revision} served"),
            evidence,
            "",
        )
    })
}

/// One ACME certificate's standing: not served, served by a placeholder, failing to renew,
/// or close to expiry (a week: warning; three days: critical).
fn acme_finding(admin: &str, cert: &serde_json::Value) -> Option<Finding> {
    let text = |k: &str| {
        cert.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    };
    let num = |k: &str| cert.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0);
    let flag = |k: &str| {
        cert.get(k)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    };
    let names: Vec<&str> = cert
        .get("names")?
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    let names = names.join(", ");
    let error = text("last_error");
    let left = num("not_after") - chrono::Utc::now().timestamp();
    let evidence = format!("{admin} /status?format=json");
    let fix = "read the error log (ACME lines): the CA must reach this host on port 80 (HTTP-01) or 443 (TLS-ALPN-01) for every name, and the names must resolve here";
    let (severity, title) = if !flag("served") {
        let how = if flag("placeholder") {
            "a self-signed placeholder is served"
        } else {
            "its sites are not served over TLS"
        };
        (
            Severity::Critical,
            format!(
                "no ACME certificate yet for {names}: {how}; last error: {}",
                if error.is_empty() {
                    "none yet (first attempt pending)"
                } else {
                    error
                }
            ),
        )
    } else if left < 3 * 86_400 {
        (
            Severity::Critical,
            format!(
                "the ACME certificate for {names} expires in {} h; last error: {error}",
                left / 3600
            ),
        )
    } else if num("failing") > 0 {
        (Severity::Warning, format!("renewing the ACME certificate for {names} fails ({} in a row, {} days left): {error}", num("failing"), left / 86_400))
    } else if left < 7 * 86_400 {
        (
            Severity::Warning,
            format!(
                "the ACME certificate for {names} expires in {} days",
                left / 86_400
            ),
        )
    } else {
        (
            Severity::Ok,
            format!(
                "the ACME certificate for {names} is served, {} days left",
                left / 86_400
            ),
        )
    };
    Some(finding(severity, "acme_certificate", title, evidence, fix))
}

fn fetch_status(admin: SocketAddr) -> std::io::Result<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    s.write_all(b"GET /status?format=json HTTP/1.1\r\nHost: doctor\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
