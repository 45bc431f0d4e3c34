//! The two ways a worker reads and writes plain TCP (`io = "uring" | "epoll"`). Every other
//! test runs on whichever `SLIPSTREAM_IO` selects; CI runs the suite once with each. A kernel
//! that refuses a ring fails the io_uring tests (the harness checks it for every proxy asked
//! for io_uring), unless `SLIPSTREAM_SKIP_URING=1`, when the skip is printed.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use crate::observe::admin_get;
use crate::support::{
    eventually, free_port, temp_path, without_uring, Reply, Running, Upstream, BIN,
};

/// Completions posted so far by each io_uring the process `pid` holds (the `CqHead` line of
/// each ring's fdinfo).
fn ring_completions(pid: u32) -> Vec<u64> {
    let mut rings = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_ring = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.to_string_lossy().contains("io_uring"));
        if !is_ring {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        // The kernel leaves the ring's lines out of fdinfo when the ring's lock is busy (its
        // worker is inside io_uring_enter): read again until they are there.
        let mut head = None;
        for _ in 0..500 {
            let text = std::fs::read_to_string(&info).unwrap();
            head = text
                .lines()
                .find_map(|l| l.strip_prefix("CqHead:"))
                .map(|h| h.trim().parse::<u64>().unwrap());
            if head.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        rings.push(head.expect("CqHead in a ring's fdinfo"));
    }
    rings
}

/// Sends `n` requests on one keep-alive connection, each answered `hello`.
fn requests(proxy: &Running, n: usize) {
    let mut conn = TcpStream::connect(proxy.addr).unwrap();
    for _ in 0..n {
        conn.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"hello") {
            let k = conn.read(&mut buf).unwrap();
            assert!(k > 0, "closed after {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..k]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    }
}

#[test]
fn uring_moves_the_bytes_through_one_ring_per_worker_and_epoll_through_none() {
    let up = Upstream::start(|_| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let upstream = up.addr.to_string();
    for (mode, rings) in [("uring", 2), ("epoll", 0)] {
        let args = ["--upstream", &upstream, "--workers", "2", "--io", mode];
        let proxy = Running::proxy(&args);
        let pid = proxy.child.id();
        let before: u64 = ring_completions(pid).iter().sum();
        requests(&proxy, 50);
        let after = ring_completions(pid);
        let refused = || proxy.logged("io_uring is not available");
        if rings > 0 && after.is_empty() && eventually(refused) {
            // A kernel without io_uring (or with it disabled): the workers run epoll. That
            // fails, unless SLIPSTREAM_SKIP_URING=1 says this machine may skip it.
            without_uring("the workers logged that the kernel refused a ring");
            return;
        }
        assert_eq!(after.len(), rings, "{mode}: rings");
        if rings > 0 {
            // Per request: the client's head read and response write, the upstream's request
            // write and response read.
            let done = after.iter().sum::<u64>() - before;
            assert!(done >= 200, "{mode}: {done} completions for 50 requests");
        }
        assert!(!proxy.logged("io_uring is not available"), "{mode}");
    }
}

#[test]
fn an_unknown_io_mode_is_refused_with_its_line() {
    let path = temp_path("bad-io.toml");
    std::fs::write(
        &path,
        "workers = 1\nio = \"fast\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("{}:2:6: io must be \"uring\" or \"epoll\"", path.display());
    assert!(err.contains(&want), "{err}");
}

#[test]
fn io_uring_is_the_default() {
    let up = Upstream::start(|_| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let upstream = up.addr.to_string();
    let mut proxy = Running::proxy(&["--upstream", &upstream, "--workers", "1"]);
    if std::env::var_os("SLIPSTREAM_IO").is_some() {
        return; // The environment chose the path; the test is about the default.
    }
    let pid = proxy.child.id();
    requests(&proxy, 10);
    if ring_completions(pid).is_empty() && proxy.wait_logged("io_uring is not available") {
        without_uring("the kernel refused a ring");
        return;
    }
    assert_eq!(ring_completions(pid).len(), 1, "one ring for one worker");
}

/// Applies a seccomp filter to the command's process that answers `io_uring_setup` with
/// EPERM, as Docker's default profile does (and `io_uring_disabled = 2` would).
fn refuse_io_uring(command: &mut Command) {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
    use std::os::unix::process::CommandExt;
    let filter = SeccompFilter::new(
        [(libc::SYS_io_uring_setup, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let program: BpfProgram = filter.try_into().unwrap();
    // The default is what is tested, whichever path the suite runs on.
    command.env_remove("SLIPSTREAM_IO");
    // SAFETY: the closure runs in the forked child before exec; it only makes the two system
    // calls that install the filter (prctl and seccomp) on memory built before the fork.
    #[allow(unsafe_code)]
    unsafe {
        command
            .pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
}

#[test]
fn a_refused_ring_falls_back_to_epoll_logged_once_counted_and_named_by_doctor() {
    let up = Upstream::start(|_| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let toml = format!(
        r#"
workers = 2
admin = "{{admin}}"
[[listen]]
address = "{{listen}}"
[upstreams.app]
servers = ["{}"]
[[sites]]
default = true
routes = [{{ location = "/", upstream = "app" }}]
"#,
        up.addr
    );
    let addr = ([127, 0, 0, 1], free_port()).into();
    let proxy = Running::config_with("seccomp-uring.toml", &toml, addr, &refuse_io_uring);
    requests(&proxy, 10);
    assert!(ring_completions(proxy.child.id()).is_empty(), "no ring");
    let refusals = proxy
        .log_text()
        .matches("io_uring is not available")
        .count();
    assert_eq!(refusals, 1, "logged once: {}", proxy.log_text());
    assert!(
        proxy.logged("Operation not permitted"),
        "{}",
        proxy.log_text()
    );
    let admin = proxy.admin.unwrap();
    let status: serde_json::Value =
        serde_json::from_str(&admin_get(admin, "/status?format=json")).unwrap();
    assert_eq!(status["workers"]["uring_unavailable"], 2, "{status}");
    let why = status["workers"]["uring_refused_because"].as_str().unwrap();
    assert!(why.contains("Operation not permitted"), "{why}");
    let out = Command::new(BIN)
        .args(["doctor", "--admin", &admin.to_string(), "--sample", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("workers run on epoll, not io_uring (the default): the kernel refused a ring: 2 (Operation not permitted"),
        "{text}"
    );
}

/// The inodes of the process's sockets, and of those its epoll instances watch: the `ino:` of
/// the `tfd` lines of every eventpoll descriptor's fdinfo (an entry's descriptor number may
/// have been closed and reused since; the inode names the socket).
fn sockets_and_watched(pid: u32) -> (HashSet<u64>, HashSet<u64>) {
    let mut sockets = HashSet::new();
    let mut watched = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let target = target.to_string_lossy().to_string();
        if let Some(inode) = target.strip_prefix("socket:[") {
            sockets.insert(inode.trim_end_matches(']').parse::<u64>().unwrap());
        } else if target.contains("eventpoll") {
            let name = fd.file_name().to_string_lossy().to_string();
            let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{name}")) else {
                continue;
            };
            for line in info.lines().filter(|l| l.starts_with("tfd:")) {
                let ino = line.split_whitespace().find_map(|w| w.strip_prefix("ino:"));
                watched.insert(u64::from_str_radix(ino.unwrap(), 16).unwrap());
            }
        }
    }
    (sockets, watched)
}

/// How many of the process's unix sockets there are, and how many its epoll instances watch.
fn unix_sockets_in_epoll(pid: u32) -> (usize, usize) {
    let unix: HashSet<u64> = std::fs::read_to_string(format!("/proc/{pid}/net/unix"))
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(6)?.parse().ok())
        .collect();
    let (sockets, watched) = sockets_and_watched(pid);
    let own: Vec<&u64> = sockets.iter().filter(|i| unix.contains(*i)).collect();
    let in_epoll = own.iter().filter(|i| watched.contains(**i)).count();
    (own.len(), in_epoll)
}

#[test]
fn unix_upstream_connections_ride_the_ring() {
    let path = temp_path("ring-unix.sock");
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while conn.read(&mut buf).is_ok_and(|n| n > 0) {
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
                    if conn.write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let upstream = format!("unix:{}", path.display());
    for mode in ["uring", "epoll"] {
        let args = ["--upstream", &upstream, "--workers", "1", "--io", mode];
        let proxy = Running::proxy(&args);
        // The process's own unix sockets (its control socket) are there from the start.
        let (own, own_in_epoll) = unix_sockets_in_epoll(proxy.child.id());
        requests(&proxy, 5);
        // The pooled upstream connection stays open after the requests.
        let (unix, in_epoll) = unix_sockets_in_epoll(proxy.child.id());
        assert_eq!(unix, own + 1, "{mode}: the upstream connection");
        let upstream_in_epoll = in_epoll - own_in_epoll;
        if mode == "uring" && upstream_in_epoll == 1 && proxy.logged("io_uring is not available") {
            without_uring("the kernel refused a ring");
            return;
        }
        let expected = usize::from(mode == "epoll");
        assert_eq!(upstream_in_epoll, expected, "{mode}: in epoll");
    }
}

/// How many of the process's connected TCP sockets (state ESTABLISHED in its net/tcp) its
/// epoll instances watch.
fn connections_in_epoll(pid: u32) -> usize {
    let mut connected = HashSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap();
        for line in text.lines().skip(1) {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.get(3) == Some(&"01") {
                connected.insert(words[9].parse::<u64>().unwrap());
            }
        }
    }
    let (sockets, watched) = sockets_and_watched(pid);
    sockets
        .iter()
        .filter(|ino| connected.contains(*ino) && watched.contains(*ino))
        .count()
}

/// After 20 requests on one client connection: with `mode` "uring", neither the client's nor
/// the upstream's socket is in an epoll set and the ring posted completions for them since
/// `completions`; with "epoll", both are in one. False when the kernel refused the ring.
fn client_and_upstream_on(mode: &str, proxy: &Running, completions: u64) -> bool {
    let pid = proxy.child.id();
    let added = connections_in_epoll(pid);
    if mode == "uring" && added == 2 && proxy.logged("io_uring is not available") {
        without_uring("the kernel refused a ring");
        return false;
    }
    let expected = if mode == "epoll" { 2 } else { 0 };
    assert_eq!(
        added, expected,
        "{mode}: the client's and upstream's sockets in epoll"
    );
    if mode == "uring" {
        let done = ring_completions(pid).iter().sum::<u64>() - completions;
        assert!(done >= 40, "{done} ring completions for 20 requests");
    }
    true
}

/// A client's TLS connection is served from the ring once its handshake is done: with the
/// default, neither it nor its pooled upstream connection is in an epoll set while it stays
/// open between requests, and the ring posts the completions; with `--io epoll` both are.
#[test]
fn tls_connections_ride_the_ring_after_the_handshake() {
    let pki = crate::tls::TestPki::new("ring-tls");
    let up = Upstream::start(|_| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let upstream = up.addr.to_string();
    let (cert, key) = (pki.path("localhost.pem"), pki.path("localhost.key"));
    for mode in ["uring", "epoll"] {
        let args = [
            "--upstream",
            &upstream,
            "--workers",
            "1",
            "--io",
            mode,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ];
        let proxy = Running::proxy(&args);
        let pid = proxy.child.id();
        let completions: u64 = ring_completions(pid).iter().sum();
        let config = crate::tls::client_config(&[&rustls::version::TLS13]);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, TcpStream::connect(proxy.addr).unwrap());
        for _ in 0..20 {
            tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            while !got.ends_with(b"hello") {
                let k = tls.read(&mut buf).unwrap();
                assert!(k > 0, "closed after {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..k]);
            }
            assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{mode}");
        }
        if !client_and_upstream_on(mode, &proxy, completions) {
            return;
        }
    }
}

/// An HTTP/2 connection with prior knowledge (h2c) is served from the ring too: with the
/// default, neither it nor its pooled upstream connection is in an epoll set between requests;
/// with `--io epoll` both are.
#[test]
fn h2c_connections_ride_the_ring() {
    let up = Upstream::start(|_| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let upstream = up.addr.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for mode in ["uring", "epoll"] {
        let args = [
            "--upstream",
            &upstream,
            "--workers",
            "1",
            "--io",
            mode,
            "--h2c",
        ];
        let proxy = Running::proxy(&args);
        let pid = proxy.child.id();
        let completions: u64 = ring_completions(pid).iter().sum();
        let local = tokio::task::LocalSet::new();
        let _client = local.block_on(&runtime, async {
            let mut client = crate::http2::h2c(proxy.addr).await;
            for _ in 0..20 {
                let (head, body) = crate::http2::get(&mut client, "localhost", "/").await;
                assert_eq!(
                    (head.status.as_u16(), &body[..]),
                    (200, &b"hello"[..]),
                    "{mode}"
                );
            }
            client
        });
        if !client_and_upstream_on(mode, &proxy, completions) {
            return;
        }
    }
}
