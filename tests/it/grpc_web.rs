//! gRPC-Web through real sockets: curl speaks it (binary and base64 text, over HTTP/1.1 and
//! h2c) to slipstream in front of the project's gRPC test server over h2c, as a browser's
//! gRPC-Web library would, and reads back the messages and the trailers' frame.

use std::process::Command;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::grpc::{grpc_proxy, GrpcServer, Script, ScriptedH2};
use crate::support::*;

/// A gRPC message with its 5-byte prefix.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The frames of a gRPC-Web response body: (flag, payload) each.
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "a partial frame: {body:?}");
    out
}

/// POSTs `body` with curl (`args` choose the protocol and add fields); the response's head
/// (lowercased) and body.
fn post(url: &str, content_type: &str, body: &[u8], args: &[&str]) -> (String, Vec<u8>) {
    use std::io::Write;
    let mut child = Command::new("curl")
        .args(["-s", "-D", "-"])
        .args(args)
        .args(["-H", &format!("content-type: {content_type}")])
        .args(["-H", "x-grpc-web: 1", "--data-binary", "@-", url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "curl failed: {out:?}");
    let end = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&out.stdout[..end]).to_lowercase();
    (head, out.stdout[end..].to_vec())
}

#[test]
fn grpc_web_calls_reach_a_grpc_server_in_both_encodings() {
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(&crate::grpc::h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    let call = format!("http://{addr}/grpc.testing.TestService/StreamingOutputCall");
    // A server-streaming call asking for two responses, of 3 and 5 payload bytes.
    let request = framed(&[0x12, 2, 0x08, 3, 0x12, 2, 0x08, 5]);

    // Binary over HTTP/1.1: the messages, then the trailers as the last frame.
    let (head, body) = post(&call, "application/grpc-web+proto", &request, &[]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/grpc-web+proto\r\n"),
        "{head}"
    );
    assert!(!head.contains("grpc-status"), "{head}");
    let got = frames(&body);
    assert_eq!(got.len(), 3, "{got:?}");
    // StreamingOutputCallResponse { payload { body } }: 2 + 2 + the body's bytes.
    assert_eq!((got[0].0, got[0].1.len()), (0, 7));
    assert_eq!((got[1].0, got[1].1.len()), (0, 9));
    assert_eq!(got[2].0, 0x80);
    let trailers = String::from_utf8(got[2].1.clone()).unwrap();
    assert!(trailers.starts_with("grpc-status:0\r\n"), "{trailers:?}");

    // Text over h2c: the request and the response are base64.
    let text = STANDARD.encode(&request);
    let (head, body) = post(
        &call,
        "application/grpc-web-text",
        text.as_bytes(),
        &["--http2-prior-knowledge"],
    );
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(
        head.contains("content-type: application/grpc-web-text\r\n"),
        "{head}"
    );
    let got = frames(&decode_text(&body));
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2].0, 0x80);

    // A text request encoded in pieces (padding inside: "AAA=AAAA") decodes as well: a
    // unary health check, SERVING (field 1 = 1).
    let health = format!("http://{addr}/grpc.health.v1.Health/Check");
    let message = framed(&[]);
    let mut padded = STANDARD.encode(&message[..2]);
    padded.push_str(&STANDARD.encode(&message[2..]));
    assert_eq!(padded, "AAA=AAAA");
    let (head, body) = post(&health, "application/grpc-web-text", padded.as_bytes(), &[]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let got = frames(&decode_text(&body));
    assert_eq!(got[0], (0, vec![0x08, 1]));
    assert!(got[1].1.starts_with(b"grpc-status:0\r\n"), "{got:?}");

    // An error the server gives at once stays trailers-only, in the head.
    let missing = format!("http://{addr}/grpc.testing.TestService/Nope");
    let (head, body) = post(&missing, "application/grpc-web", &framed(&[]), &[]);
    assert!(head.contains("grpc-status: 12\r\n"), "{head}");
    assert!(body.is_empty(), "{body:?}");

    // Text that is not base64 is the client's error (gRPC's INTERNAL for HTTP 400), and the
    // server is not blamed for it.
    let (head, _) = post(&health, "application/grpc-web-text", b"AAAA!!!!", &[]);
    assert!(head.contains("grpc-status: 13\r\n"), "{head}");
    assert!(
        head.contains("grpc-message: grpc-web-text body is not base64"),
        "{head}"
    );
    let (_, body) = post(&health, "application/grpc-web-text", padded.as_bytes(), &[]);
    let got = frames(&decode_text(&body));
    assert!(got[1].1.starts_with(b"grpc-status:0\r\n"), "{got:?}");
}

#[test]
fn a_grpc_web_call_nothing_can_serve_gets_a_grpc_web_error() {
    let nobody = free_port();
    let proxy = grpc_proxy(
        &format!("servers = [\"127.0.0.1:{nobody}\"]\nprotocol = \"h2c\"\nretries = 0"),
        None,
    );
    let addr = proxy.local_addrs()[0];
    let url = format!("http://{addr}/grpc.health.v1.Health/Check");
    let (head, body) = post(&url, "application/grpc-web-text", b"AAAAAAA=", &[]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/grpc-web-text\r\n"),
        "{head}"
    );
    assert!(head.contains("grpc-status: 14\r\n"), "{head}");
    assert!(body.is_empty());
}

/// A `-text` body: base64 whose pieces may each be padded, decoded group by group as
/// browsers' libraries do.
fn decode_text(text: &[u8]) -> Vec<u8> {
    assert_eq!(text.len() % 4, 0, "{text:?}");
    text.chunks(4)
        .flat_map(|group| STANDARD.decode(group).expect("base64"))
        .collect()
}

/// The chunks of an HTTP/1.1 chunked body.
fn chunks(mut body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = std::str::from_utf8(&body[..line_end]).unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push(body[line_end + 2..line_end + 2 + size].to_vec());
        body = &body[line_end + 2 + size + 2..];
    }
}

#[test]
fn a_text_stream_sends_each_message_whole_at_once() {
    let server = GrpcServer::start(None, &[]);
    let proxy = grpc_proxy(&crate::grpc::h2c_group(server.addr), None);
    let addr = proxy.local_addrs()[0];
    // Two answers of 12 and 14 bytes: neither a multiple of 3, so base64 held across pieces
    // would leave part of a message waiting for the next.
    let body = STANDARD.encode(framed(&[0x12, 2, 0x08, 3, 0x12, 2, 0x08, 5]));
    let request = format!(
        "POST /grpc.testing.TestService/StreamingOutputCall HTTP/1.1\r\nHost: {addr}\r\n\
         Connection: close\r\nContent-Type: application/grpc-web-text\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let raw = exchange_until_close(addr, request.as_bytes());
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let pieces = chunks(&raw[head_end..]);
    let mut flags = Vec::new();
    for piece in &pieces {
        // Each piece decodes alone into whole frames: nothing of a message waits.
        let decoded = STANDARD.decode(piece).expect("each piece is whole base64");
        flags.extend(frames(&decoded).into_iter().map(|(flag, _)| flag));
    }
    assert_eq!(flags, [0, 0, 0x80], "{pieces:?}");
}

#[test]
fn an_answer_that_is_not_grpc_is_passed_as_it_is() {
    // A server that answers `200 ok` with no gRPC content type (an error page, say).
    let server = ScriptedH2::start(Script::Answer);
    let proxy = grpc_proxy(&crate::grpc::h2c_group(server.addr), None);
    let url = format!("http://{}/x.Y/Z", proxy.local_addrs()[0]);
    let (head, body) = post(&url, "application/grpc-web-text", b"AAAAAAA=", &[]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("grpc-web"), "{head}");
    assert_eq!(body, b"ok");
}
