//! Integration tests: one binary, every test through real sockets.
#![allow(clippy::disallowed_methods)] // test threads may block and sleep

mod added_fields;
mod auth;
mod balancing;
mod codec;
mod compression;
mod control;
mod dates;
mod error_pages;
mod fastcgi;
mod fastcgi_proxy;
mod files;
mod fleet;
mod framing;
mod fuzz_seeds;
mod grpc;
mod grpc_web;
mod hangups;
mod http2;
mod http2_frames;
mod import;
mod io_paths;
mod large_bodies;
mod lifecycle;
mod limits;
mod nginx_forward_auth;
mod nginx_nested;
mod nginx_parity;
mod observe;
mod operate;
mod proxy_http1;
mod proxy_protocol;
mod support;
mod tls;
mod tls_options;
mod tunnel;
