//! Integration tests: one binary, every test through real sockets.

mod framing;
mod large_bodies;
mod lifecycle;
mod proxy_http1;
mod support;
