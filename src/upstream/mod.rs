//! The upstream side, by concern:
//! - [`fleet`]: the server table the process publishes (members and their health);
//! - [`control`]: the thread that keeps it current: active health checks ([`health`]) and
//!   name re-resolution ([`resolve`]);
//! - [`balance`]: each worker's choice of a server ([`peer`] is one server as a worker sees it,
//!   [`ring`] the consistent-hash ring), passive health and the retry budget;
//! - [`connect`] and [`pool`]: opening connections and each worker's keep-alive pool;
//!   [`multiplex`]: each worker's HTTP/2 upstream connections, many requests on each;
//! - [`stats`]: per-server figures for `/metrics`.

pub mod balance;
pub mod connect;
pub mod control;
pub mod fleet;
pub mod health;
pub mod multiplex;
pub mod peer;
pub mod pool;
pub mod resolve;
pub mod ring;
pub mod stats;

pub use balance::{Balancer, Lease};
pub use fleet::Fleet;
pub use pool::UpstreamPool;
