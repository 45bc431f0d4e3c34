//! slipstream: a reverse proxy and HTTP load balancer that does the minimum work per request.
//!
//! # Layout, in request order
//! - [`runtime`]: worker threads, shared config, reload and shutdown; [`listener`] binds sockets.
//! - [`worker`]: what each worker owns (pools, counters, log buffer).
//! - [`proxy`]: one client connection, request by request.
//! - [`http1`]: the socket-free HTTP/1.1 codec (heads, framing, chunked).
//! - [`routing`]: Host and path to an upstream group; [`balance`] picks a server.
//! - [`upstream`]: connecting and the keep-alive pool; [`forward`] moves bodies.
//! - [`buffers`], [`metrics`], [`access_log`], [`admin`], [`config`].

pub mod access_log;
pub mod admin;
pub mod balance;
pub mod buffers;
pub mod config;
pub mod forward;
pub mod http1;
pub mod listener;
pub mod metrics;
pub mod proxy;
pub mod routing;
pub mod runtime;
pub mod splice;
pub mod upstream;
pub mod worker;

pub use config::Config;
pub use runtime::Server;
