//! Listening sockets: one SO_REUSEPORT socket per address per worker, so the kernel spreads new
//! connections over the workers and no accept lock is shared.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a non-blocking listener with SO_REUSEPORT and the given accept backlog; an IPv6
/// one takes IPv4 connections too unless `v6only`.
pub fn bind(address: SocketAddr, backlog: u32, v6only: bool) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(v6only)?;
    }
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit it; no connection sets it for itself.
    socket.set_tcp_nodelay(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// Binds `workers` listeners on one address. With port 0 the first socket picks the port and
/// the others join it. Unless `shared`, an address another process listens on is refused:
/// SO_REUSEPORT would otherwise let both listen and split the traffic between them silently.
pub fn bind_group(
    address: SocketAddr,
    (backlog, v6only): (u32, bool),
    workers: usize,
    shared: bool,
) -> io::Result<Vec<TcpListener>> {
    if !shared && address.port() != 0 {
        refuse_if_taken(address, v6only)?;
    }
    let first = bind(address, backlog, v6only)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(actual, backlog, v6only)?);
    }
    Ok(all)
}

/// Gives each of `workers` its own descriptor of one listening socket passed by the service
/// manager (socket activation): they share its accept queue, as SO_REUSEPORT sockets cannot be
/// made without binding.
pub fn share(socket: TcpListener, workers: usize) -> io::Result<Vec<TcpListener>> {
    socket.set_nonblocking(true)?;
    // Accepted sockets inherit it; no connection sets it for itself.
    socket2::SockRef::from(&socket).set_tcp_nodelay(true)?;
    let mut all = Vec::with_capacity(workers);
    for _ in 1..workers {
        all.push(socket.try_clone()?);
    }
    all.push(socket);
    Ok(all)
}

/// Fails when another socket listens on `address`: a probe bound without SO_REUSEPORT
/// cannot share it. The error names the process holding it when /proc shows it.
fn refuse_if_taken(address: SocketAddr, v6only: bool) -> io::Result<()> {
    let probe = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    probe.set_reuse_address(true)?;
    if address.is_ipv6() {
        probe.set_only_v6(v6only)?;
    }
    match probe.bind(&address.into()) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            let by = holder_of(address).map_or(String::new(), |h| format!(" by {h}"));
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "address already in use{by}; stop the other server first, or set \
                     `shared = true` on the listener to share it on purpose"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// The process listening on `address` (`"pid 812 (nginx)"`), from /proc/net/tcp{,6} and the
/// processes' descriptors (only those this user may read).
fn holder_of(address: SocketAddr) -> Option<String> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    // local address, state 0A (LISTEN), inode.
                    let port = f.get(1)?.rsplit_once(':')?.1;
                    let listening = *f.get(3)? == "0A";
                    let same = u16::from_str_radix(port, 16).ok()? == address.port();
                    (listening && same).then(|| f.get(9).map(|i| (*i).to_string()))?
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let own = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == own {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            let inode = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'));
            if inode.is_some_and(|i| inodes.iter().any(|x| x == i)) {
                let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                return Some(format!("pid {pid} ({})", comm.trim()));
            }
        }
    }
    None
}

/// Raises the open-file limit to its hard maximum, so the connection limit, not RLIMIT_NOFILE,
/// is what bounds connections (nginx's `worker_rlimit_nofile`). Returns the new soft limit
/// (`None`: unlimited).
pub fn raise_nofile_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return limit.current;
    }
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => limit.maximum,
        Err(_) => limit.current,
    }
}
