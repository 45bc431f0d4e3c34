//! gRPC-Web, socket-free: what a browser's gRPC call becomes on its way to a gRPC server and
//! back (the translation Envoy's `grpc_web` filter makes). The request keeps its messages and
//! changes its content type (`application/grpc-web[-text][+proto]` to `application/grpc[+proto]`);
//! the `-text` form's body is base64 and is decoded. The response gets the gRPC-Web content
//! type back, and the server's trailers, which a browser cannot read, become the body's last
//! frame (flag `0x80`, then `name:value\r\n` lines); a `-text` response is encoded as base64.
//!
//! A `-text` body streams both ways: [`Decoder`] takes pieces of any size (holding at most
//! three characters), and [`encode`] turns each piece of the response into base64 at once. Fuzzed (`fuzz/fuzz_targets/grpc.rs`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// How a gRPC-Web call carries its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/grpc-web[+proto]`: the gRPC frames as they are.
    Binary,
    /// `application/grpc-web-text[+proto]`: the gRPC frames in base64.
    Text,
}

const WEB: &[u8] = b"application/grpc-web";
const WEB_TEXT: &[u8] = b"application/grpc-web-text";
const GRPC: &[u8] = b"application/grpc";

/// A request's gRPC-Web encoding from its `content-type`, with the gRPC content type it is
/// sent upstream as; `None` when it is not gRPC-Web.
pub fn request_type(content_type: &[u8]) -> Option<(Encoding, Vec<u8>)> {
    let lower = content_type.to_ascii_lowercase();
    let (encoding, rest) = if let Some(rest) = lower.strip_prefix(WEB_TEXT) {
        (Encoding::Text, rest)
    } else {
        (Encoding::Binary, lower.strip_prefix(WEB)?)
    };
    // `+proto`, `+json` or parameters may follow; anything else is another type.
    if !(rest.is_empty() || rest[0] == b'+' || rest[0] == b';') {
        return None;
    }
    let start = content_type.len() - rest.len();
    let mut grpc = GRPC.to_vec();
    grpc.extend_from_slice(&content_type[start..]);
    Some((encoding, grpc))
}

/// The gRPC-Web content type for a gRPC server's response `content_type` (kept as it is when
/// it is not gRPC).
pub fn response_type(content_type: &[u8], encoding: Encoding) -> Vec<u8> {
    let lower = content_type.to_ascii_lowercase();
    match lower.strip_prefix(GRPC) {
        Some(rest) if rest.is_empty() || rest[0] == b'+' || rest[0] == b';' => {
            let mut web = match encoding {
                Encoding::Binary => WEB.to_vec(),
                Encoding::Text => WEB_TEXT.to_vec(),
            };
            web.extend_from_slice(&content_type[GRPC.len()..]);
            web
        }
        _ => content_type.to_vec(),
    }
}

/// The frame that carries a response's trailers at the end of a gRPC-Web body: flag `0x80`,
/// the length, then each field as `name:value\r\n`.
pub fn trailer_frame<'a>(fields: impl Iterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut frame = vec![0x80, 0, 0, 0, 0];
    for (name, value) in fields {
        frame.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
        frame.push(b':');
        frame.extend_from_slice(value);
        frame.extend_from_slice(b"\r\n");
    }
    let len = u32::try_from(frame.len() - 5).unwrap_or(u32::MAX);
    frame[1..5].copy_from_slice(&len.to_be_bytes());
    frame
}

/// A `-text` body that is not base64: the client's fault, answered 400 (gRPC INTERNAL), not
/// the server's.
#[derive(Debug, PartialEq, Eq)]
pub struct NotBase64;

impl std::fmt::Display for NotBase64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a grpc-web-text body that is not base64")
    }
}

impl std::error::Error for NotBase64 {}

/// Decodes a `-text` request body piece by piece. Each group of four characters is decoded
/// on its own, so a body whose pieces were encoded separately (padding in the middle, as
/// clients that encode message by message send) decodes as well as one encoded whole.
#[derive(Debug, Default)]
pub struct Decoder {
    carry: [u8; 4],
    carried: usize,
}

impl Decoder {
    /// Appends what `input` decodes to onto `out`; up to three characters wait for the next.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), NotBase64> {
        if self.carried > 0 {
            let take = input.len().min(4 - self.carried);
            self.carry[self.carried..self.carried + take].copy_from_slice(&input[..take]);
            self.carried += take;
            input = &input[take..];
            if self.carried < 4 {
                return Ok(());
            }
            let quad = self.carry;
            self.carried = 0;
            decode(&quad, out)?;
        }
        let whole = input.len() - input.len() % 4;
        let (quads, rest) = input.split_at(whole);
        // Runs of groups without padding decode at once; a padded group ends a run.
        let mut start = 0;
        for end in (4..=whole).step_by(4) {
            if quads[end - 1] == b'=' {
                decode(&quads[start..end], out)?;
                start = end;
            }
        }
        decode(&quads[start..], out)?;
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carried = rest.len();
        Ok(())
    }

    /// Checks that the body ended on a whole group.
    pub fn finish(&self) -> Result<(), NotBase64> {
        if self.carried == 0 {
            Ok(())
        } else {
            Err(NotBase64)
        }
    }
}

fn decode(groups: &[u8], out: &mut Vec<u8>) -> Result<(), NotBase64> {
    if groups.is_empty() {
        return Ok(());
    }
    STANDARD.decode_vec(groups, out).map_err(|_| NotBase64)
}

/// Appends the base64 of `piece` of a `-text` response body, padded: each piece (a DATA
/// frame, the trailers' frame) is encoded whole and goes out at once, so a message is never
/// held back waiting for the next one's bytes (clients decode padding between pieces).
pub fn encode(piece: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + piece.len().div_ceil(3) * 4, 0);
    let written = STANDARD
        .encode_slice(piece, &mut out[start..])
        .expect("room for the encoding was made");
    out.truncate(start + written);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_both_ways() {
        let (e, grpc) = request_type(b"application/grpc-web+proto").unwrap();
        assert_eq!(
            (e, &grpc[..]),
            (Encoding::Binary, &b"application/grpc+proto"[..])
        );
        let (e, grpc) = request_type(b"Application/gRPC-Web-Text").unwrap();
        assert_eq!((e, &grpc[..]), (Encoding::Text, &b"application/grpc"[..]));
        assert!(request_type(b"application/grpc").is_none());
        assert!(request_type(b"application/grpc-webby").is_none());
        assert_eq!(
            response_type(b"application/grpc+proto", Encoding::Text),
            b"application/grpc-web-text+proto"
        );
        assert_eq!(
            response_type(b"application/grpc", Encoding::Binary),
            b"application/grpc-web"
        );
        assert_eq!(response_type(b"text/plain", Encoding::Text), b"text/plain");
    }

    #[test]
    fn the_trailer_frame() {
        let fields = [("grpc-status", &b"0"[..]), ("Grpc-Message", b"ok")];
        let frame = trailer_frame(fields.into_iter());
        assert_eq!(frame, b"\x80\0\0\0\x20grpc-status:0\r\ngrpc-message:ok\r\n");
    }

    #[test]
    fn text_bodies_stream_in_any_pieces() {
        let body: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let whole = STANDARD.encode(&body);
        for cut in [1, 2, 3, 5, 7, 64] {
            // Pieces encoded one by one (padding between them) decode as the whole does.
            let mut encoded = Vec::new();
            body.chunks(cut).for_each(|c| encode(c, &mut encoded));
            let mut once = Vec::new();
            encode(&body, &mut once);
            assert_eq!(once, whole.as_bytes());
            let mut decoded = Vec::new();
            let mut decoder = Decoder::default();
            for c in encoded.chunks(cut) {
                decoder.feed(c, &mut decoded).unwrap();
            }
            decoder.finish().unwrap();
            assert_eq!(decoded, body, "cut {cut}");
        }
    }

    #[test]
    fn padding_between_messages_and_bad_text() {
        // Two messages encoded one by one: "AAAAAAE=" is [0,0,0,0,1], "gAA=" 0x80 0 ...
        let mut out = Vec::new();
        let mut decoder = Decoder::default();
        decoder.feed(b"AAAAAAE=QQ==", &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 1, b'A']);
        assert_eq!(decoder.feed(b"A!==", &mut out), Err(NotBase64));
        let mut decoder = Decoder::default();
        decoder.feed(b"QUJD", &mut Vec::new()).unwrap();
        decoder.feed(b"QQ", &mut Vec::new()).unwrap();
        assert_eq!(decoder.finish(), Err(NotBase64));
    }
}
