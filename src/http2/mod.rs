//! HTTP/2 to clients (issue 12, in progress). So far: [`guard`], which watches the client's
//! frames before the `h2` crate sees them and tells when a connection floods cheap frames
//! (Rapid Reset, PING, SETTINGS, empty frames, endless CONTINUATION), so it can be sent
//! GOAWAY(ENHANCE_YOUR_CALM) and closed.

pub mod guard;
