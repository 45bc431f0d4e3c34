//! The upstream side: opening connections ([`connect`]), each worker's keep-alive pool
//! ([`pool`]), and choosing a server within a group ([`balance`]). Health checks, retries
//! across servers and name resolution grow here.

pub mod balance;
pub mod connect;
pub mod pool;

pub use balance::{Balancer, Outcome};
pub use pool::UpstreamPool;
