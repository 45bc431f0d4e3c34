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
