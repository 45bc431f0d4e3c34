//! Listening sockets: one SO_REUSEPORT socket per address per worker, so the kernel spreads new
//! connections over the workers and no accept lock is shared.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds a non-blocking listener with SO_REUSEPORT and the given accept backlog.
pub fn bind(address: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    Ok(socket.into())
}

/// Binds `workers` listeners on one address. With port 0 the first socket picks the port and
/// the others join it.
pub fn bind_group(
    address: SocketAddr,
    backlog: u32,
    workers: usize,
) -> io::Result<Vec<TcpListener>> {
    let first = bind(address, backlog)?;
    let actual = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..workers {
        all.push(bind(actual, backlog)?);
    }
    Ok(all)
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
