//! Bytes on connections: the [`Stream`] type every client and upstream connection is, bounded
//! reads and vectored writes with timeouts ([`io`]), and zero-copy transfer with splice(2)
//! ([`splice`]). Nothing here knows HTTP.

pub mod io;
pub mod splice;
pub mod stream;

pub use stream::Stream;
