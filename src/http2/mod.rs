//! HTTP/2 to clients, on the `h2` crate. [`guard`] watches the client's frames before `h2`
//! sees them and tells when a connection floods cheap frames (Rapid Reset, PING, SETTINGS,
//! empty frames, endless CONTINUATION), so it can be sent GOAWAY(ENHANCE_YOUR_CALM).
//! [`request`] turns a stream's request head into the HTTP/1.1 head the proxy reads, refusing
//! what HTTP/1.1 would read differently; [`response`] turns the HTTP/1.1 response head back;
//! [`stream::H2Stream`] joins them into one stream the request path reads and writes like an
//! HTTP/1.1 connection. The connection itself is driven by `proxy/http2/`.

pub mod body;
pub mod guard;
pub mod request;
pub mod response;
pub mod stream;
pub mod upstream;

/// Fields that only mean something to one HTTP/1.1 connection, which HTTP/2 forbids (RFC 9113
/// section 8.2.2): refused in requests, dropped from responses. `name` is lower case.
pub(crate) fn is_connection_specific(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}
