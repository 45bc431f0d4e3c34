//! FastCGI upstreams (PHP-FPM), growing: so far the socket-free parts, each tested on byte
//! strings and fuzzed:
//!
//! - [`record`]: the records a client writes and an incremental reader of the server's.
//! - [`cgi`]: the CGI response head a script writes on STDOUT.
//! - [`params`]: the CGI variables of a request, and the script / PATH_INFO split.
//!
//! Not yet reachable from routes.

pub mod cgi;
pub mod params;
pub mod record;
