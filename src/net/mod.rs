//! Bytes on connections: the [`Stream`] type every client and upstream connection is (TCP, or
//! a unix socket to an upstream [`Address`]), bounded reads and vectored writes with timeouts
//! ([`io`]), zero-copy transfer with splice(2) ([`splice`]), and file bodies with sendfile(2)
//! ([`sendfile`]), and the socket under a client's TLS ([`tls_socket`]). Nothing here knows
//! HTTP.

pub mod address;
pub mod io;
pub mod proxy_protocol;
pub mod sendfile;
pub mod splice;
pub mod stream;
pub mod tls_socket;

pub use address::{Address, IpText};
pub use stream::Stream;
