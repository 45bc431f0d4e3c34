//! FastCGI upstreams (PHP-FPM): the socket-free parts, each tested on byte strings and the
//! parsers fuzzed. The exchange itself, with sockets, is `crate::proxy::fastcgi`.
//!
//! - [`record`]: the records a client writes and a reader of the server's.
//! - [`params`]: the CGI variables of a request, and the script / PATH_INFO split.
//! - [`script`]: which script a request runs, checked beneath the document root.
//! - [`cgi`]: the CGI response head a script writes on STDOUT.
//! - [`response`]: the HTTP response head and body framing the client gets for it.

pub mod cgi;
pub mod params;
pub mod record;
pub mod response;
pub mod script;
