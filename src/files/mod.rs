//! Static files (issue 8), growing here. So far the socket-free pieces every file response
//! needs, each testable on byte strings and fuzzed: [`range`] (what a `Range` header asks of a
//! file of a given length), [`conditional`] (preconditions against a file's validators) and
//! [`path`] (a request target turned into a path that cannot leave the root). Serving (routes,
//! sendfile, the open-file cache) is not built yet.

pub mod conditional;
pub mod path;
pub mod range;
