//! Integration tests: one binary, every test through real sockets.

mod framing;
mod lifecycle;
mod proxy_http1;
mod support;
