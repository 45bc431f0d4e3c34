//! What the proxy needs to know of gRPC's wire format, socket-free: `grpc-timeout` values
//! (a call's deadline bounds its upstream wait) and the health service's messages (the
//! `grpc` active health check). Fuzzed (`fuzz/fuzz_targets/grpc.rs`). `web.rs` translates
//! gRPC-Web, the protocol browsers speak, to gRPC and back.

use std::time::Duration;

pub mod web;

/// The gRPC status codes the proxy answers with (gRPC's `statuscodes.md`).
pub mod status {
    /// The client cancelled the call.
    pub const CANCELLED: u8 = 1;
    /// The call's deadline passed.
    pub const DEADLINE_EXCEEDED: u8 = 4;
    /// Refused by the proxy's access rules.
    pub const PERMISSION_DENIED: u8 = 7;
    /// Past a limit.
    pub const RESOURCE_EXHAUSTED: u8 = 8;
    /// Nothing serves this call.
    pub const UNIMPLEMENTED: u8 = 12;
    /// The proxy failed.
    pub const INTERNAL: u8 = 13;
    /// No server could take the call.
    pub const UNAVAILABLE: u8 = 14;
    /// The call lacks valid credentials (HTTP 401).
    pub const UNAUTHENTICATED: u8 = 16;
}

/// Whether a message with these fields is gRPC (or gRPC-Web): `content-type:
/// application/grpc...`.
pub fn is_grpc(fields: &http::HeaderMap) -> bool {
    fields
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// For a request with this `content-type`, the content type of the gRPC error the proxy
/// answers its failures with (a gRPC-Web client's own kind); `None` when it is not a gRPC
/// call.
pub fn error_content_type(request_type: &[u8]) -> Option<&'static str> {
    match web::request_type(request_type) {
        Some((web::Encoding::Text, _)) => Some("application/grpc-web-text"),
        Some((web::Encoding::Binary, _)) => Some("application/grpc-web"),
        None if request_type.starts_with(b"application/grpc") => Some("application/grpc"),
        None => None,
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_timeout(v: &[u8]) -> Option<std::time::Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A `HealthCheckRequest { service }` as one gRPC message: the 5-byte prefix (not
/// compressed, length), then field 1 as a length-delimited string.
pub fn health_request(service: &str) -> bytes::Bytes {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            message.push((n as u8) | 0x80);
            n >>= 7;
        }
        message.push(n as u8);
        message.extend_from_slice(service.as_bytes());
    }
    let mut out = vec![0u8];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(&message);
    out.into()
}

/// The `status` (field 1, a varint) of a `HealthCheckResponse` message with its prefix;
/// 0 (UNKNOWN) when the field is absent.
pub fn health_status(body: &[u8]) -> Option<u64> {
    let (&compressed, rest) = body.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let mut message = rest.get(4..4 + len)?;
    if compressed != 0 {
        return None;
    }
    let mut status = 0;
    while let Some((&key, rest)) = message.split_first() {
        let (value, used) = varint(rest)?;
        match key {
            0x08 => status = value,
            // Another varint field: skipped.
            k if k & 7 == 0 => {}
            _ => return None,
        }
        message = &rest[used..];
    }
    Some(status)
}

/// A protobuf varint: its value and length.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b"123456789S"[..], b"S", b"10", b"1x", b"-1S", b""] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn health_messages() {
        assert_eq!(&health_request("")[..], [0, 0, 0, 0, 0]);
        assert_eq!(
            &health_request("ab")[..],
            [0, 0, 0, 0, 4, 0x0a, 2, b'a', b'b']
        );
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 1]), Some(1));
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08, 2]), Some(2));
        assert_eq!(health_status(&[0, 0, 0, 0, 0]), Some(0));
        assert_eq!(health_status(&[0, 0, 0, 0, 2, 0x08]), None);
        assert_eq!(health_status(&[1, 0, 0, 0, 2, 0x08, 1]), None);
        assert_eq!(health_status(&[0, 0, 0]), None);
    }
}
