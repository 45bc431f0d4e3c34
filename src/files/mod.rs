//! Static files: what nginx's `root`/`alias`, `index`, `try_files`, `gzip_static` and
//! `open_file_cache` do, reached from routes like an upstream group is.
//!
//! - [`path`] turns a request target into a normalized path (decoded once, no climbing out).
//! - [`lookup`] resolves it on a route: file, index, listing, redirect, `try_files` fallback.
//! - [`open`] opens beneath the route's directory with `openat2(RESOLVE_BENEATH)`.
//! - [`cache`] is the per-worker open-file cache (small files kept in memory).
//! - [`respond`] decides status, head and body ranges ([`conditional`], [`range`]).
//! - [`listing`] renders the optional directory listing.
//!
//! Everything here is sans-socket; `crate::proxy::files` sends what [`respond::Plan`] says.

pub mod cache;
pub mod compressed;
pub mod conditional;
pub mod listing;
pub mod lookup;
pub mod open;
pub mod path;
pub mod range;
pub mod respond;
