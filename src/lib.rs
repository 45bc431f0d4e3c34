//! slipstream: a reverse proxy and HTTP load balancer that does the minimum work per request.
//!
//! # Layout, in request order
//! - [`server`]: listeners, worker threads, reload and shutdown.
//! - [`worker`]: what each worker owns (config snapshot, balancers, pools, counters, log buffer).
//! - [`proxy`]: one client connection, phase by phase (serve, request, exchange, response,
//!   relay, tunnel).
//! - [`http1`]: the socket-free HTTP/1.1 codec (heads, framing, chunked).
//! - [`routing`]: Host and path to an upstream group.
//! - [`upstream`]: the server table, health checks, DNS, balancing, connecting and pooling.
//! - [`files`]: static files (so far the socket-free Range and path pieces).
//! - [`tls`]: TLS termination: certificates, SNI, the handshake.
//! - [`net`]: the stream type, bounded reads and writes, splice.
//! - [`uring`]: the io_uring path for plain TCP (`io = "uring"`).
//! - [`error`]: the one error model and its mapping to responses.
//! - [`observe`]: counters, access log, admin endpoint; [`config`]: the validated config.
//! - [`fuzzing`]: the properties the fuzz targets check.

// `unsafe` is refused everywhere but `uring`, which lends buffers to the kernel.
#![deny(unsafe_code)]

pub mod acme;
pub mod buffers;
pub mod cache;
pub mod cluster;
pub mod compress;
pub mod config;
pub mod demo;
pub mod error;
pub mod fastcgi;
pub mod files;
pub mod fuzzing;
pub mod grpc;
pub mod http1;
pub mod http2;
pub mod import;
pub mod message;
pub mod net;
pub mod observe;
pub mod proxy;
pub mod request_blocks;
pub mod routing;
pub mod rules;
pub mod server;
pub mod tls;
pub mod upstream;
#[allow(unsafe_code)]
pub mod uring;
pub mod worker;

pub use config::Config;
pub use server::Server;
