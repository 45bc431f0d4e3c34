//! HTTP/2 with hand-made frames, for what a well-behaved client library will not send: every
//! malformed-field case (the stream is reset and nothing reaches the upstream), Rapid Reset,
//! CONTINUATION and PING floods (GOAWAY(ENHANCE_YOUR_CALM), the connection closed, memory
//! bounded), the two-phase GOAWAY of SIGTERM with the in-flight stream finished, the idle
//! timeout; and h2spec over TLS (strict) and h2c.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use slipstream::observe::metrics::Counter;

use crate::http2::{h2c_config, h2c_proxy};
use crate::support::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const PROTOCOL_ERROR: u32 = 1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame as read.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    fn error_code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// A frame's bytes.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A HEADERS frame with END_HEADERS, and END_STREAM when `end`.
pub(crate) fn headers(stream: u32, end: bool, block: &[u8]) -> Vec<u8> {
    let flags = END_HEADERS | if end { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, block)
}

/// An HPACK literal field without indexing (no Huffman); names and values under 127 bytes.
pub(crate) fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0, name.len() as u8];
    out.extend_from_slice(name);
    out.push(value.len() as u8);
    out.extend_from_slice(value);
    out
}

/// A header block of `fields` in order.
pub(crate) fn block(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    fields.iter().flat_map(|(n, v)| literal(n, v)).collect()
}

/// A valid GET of `path` with :authority `a`.
pub(crate) fn get_block(path: &str) -> Vec<u8> {
    block(&[
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", b"a"),
    ])
}

/// Reads frames until the server closes the connection (or 10 s pass), answering PINGs.
fn read_frames(s: &mut TcpStream) -> Vec<Frame> {
    read_frames_to_end(s).0
}

/// One frame off `s`: `Err` with the read's error at the end of the stream.
fn read_frame(s: &mut TcpStream) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload,
    })
}

/// [`read_frames`], and whether the server closed (rather than the read timing out).
fn read_frames_to_end(s: &mut TcpStream) -> (Vec<Frame>, bool) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut frames = Vec::new();
    loop {
        match read_frame(s) {
            Ok(f) => {
                if f.kind == PING && f.flags & 1 == 0 {
                    let _ = s.write_all(&frame(PING, 1, 0, &f.payload));
                }
                frames.push(f);
            }
            Err(e) => {
                let timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                return (frames, !timed_out);
            }
        }
    }
}

/// Opens an h2c connection (preface and empty SETTINGS), sends `frames`, then half-closes
/// nothing and reads until the server closes; a final GOAWAY from the server ends it.
pub(crate) fn exchange(addr: SocketAddr, frames: &[Vec<u8>]) -> Vec<Frame> {
    exchange_until(addr, frames, 1)
}

/// [`exchange`], reading until stream `last` is answered.
fn exchange_until(addr: SocketAddr, frames: &[Vec<u8>], last: u32) -> Vec<Frame> {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    for f in frames {
        out.extend_from_slice(f);
    }
    s.write_all(&out).unwrap();
    read_until_answered(&mut s, last)
}

/// Reads frames until stream `id` ends (END_STREAM or RST_STREAM) or a GOAWAY or close.
fn read_until_answered(s: &mut TcpStream, id: u32) -> Vec<Frame> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut frames = Vec::new();
    while let Ok(f) = read_frame(s) {
        let done = f.kind == GOAWAY
            || f.kind == RST_STREAM && f.stream == id
            || (f.kind == DATA || f.kind == HEADERS) && f.stream == id && f.flags & END_STREAM != 0;
        frames.push(f);
        if done {
            break;
        }
    }
    frames
}

/// A POST's fields, with `extra` after them.
fn post_block(extra: &[(&'static [u8], &'static [u8])]) -> Vec<u8> {
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"a"),
    ];
    fields.extend_from_slice(extra);
    block(&fields)
}

/// Header fields in order: name and value.
type Fields<'a> = &'a [(&'a [u8], &'a [u8])];

/// Each malformed request, named, as the frames that carry it.
fn malformed_cases() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    // One field added to a valid POST makes it malformed.
    let fields: [(&str, &[u8], &[u8]); 13] = [
        ("CR in a value", b"x-a", b"1\r2"),
        ("LF in a value", b"x-a", b"1\n2"),
        ("NUL in a value", b"x-a", b"1\x002"),
        ("upper-case name", b"X-Upper", b"1"),
        ("connection", b"connection", b"close"),
        ("keep-alive", b"keep-alive", b"5"),
        ("proxy-connection", b"proxy-connection", b"x"),
        ("transfer-encoding", b"transfer-encoding", b"chunked"),
        ("upgrade", b"upgrade", b"websocket"),
        ("te: gzip", b"te", b"gzip"),
        ("padded value", b"x-a", b" 1"),
        ("host differs from :authority", b"host", b"b"),
        ("unknown pseudo-header", b":foo", b"1"),
    ];
    let mut cases: Vec<(&str, Vec<Vec<u8>>)> = fields
        .iter()
        .map(|(what, n, v)| (*what, vec![headers(1, true, &post_block(&[(n, v)]))]))
        .collect();
    // Pseudo-header misuse, each a whole header block.
    let blocks: [(&str, Fields<'_>); 4] = [
        (
            "pseudo-header after a field",
            &[
                (b":method", b"GET"),
                (b"x-a", b"1"),
                (b":scheme", b"http"),
                (b":path", b"/"),
            ],
        ),
        (
            "no :path",
            &[
                (b":method", b"GET"),
                (b":scheme", b"http"),
                (b":authority", b"a"),
            ],
        ),
        (
            "two :path",
            &[
                (b":method", b"GET"),
                (b":scheme", b"http"),
                (b":path", b"/"),
                (b":path", b"/b"),
            ],
        ),
        (
            "userinfo in :authority",
            &[
                (b":method", b"GET"),
                (b":scheme", b"http"),
                (b":path", b"/"),
                (b":authority", b"u@a"),
            ],
        ),
    ];
    for (what, fields) in blocks {
        cases.push((what, vec![headers(1, true, &block(fields))]));
    }
    // Lengths the DATA does not match.
    for (what, length, data) in [
        ("content-length above the DATA", &b"10"[..], &b"abc"[..]),
        ("content-length below the DATA", b"2", b"abcdef"),
    ] {
        let head = post_block(&[(b"content-length", length)]);
        cases.push((
            what,
            vec![headers(1, false, &head), frame(DATA, END_STREAM, 1, data)],
        ));
    }
    cases
}

/// Each malformed request is refused alone (RFC 9113 8.1.1: a stream error): its stream is
/// reset with PROTOCOL_ERROR, nothing of it reaches the upstream, and a request sent after it
/// on the same connection is answered (no GOAWAY takes the other streams down with it).
#[test]
fn malformed_requests_are_reset_and_nothing_reaches_the_upstream() {
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let with = post_block;
    let cases = malformed_cases();
    for (what, frames) in &cases {
        let mut frames = frames.clone();
        frames.push(headers(3, true, &get_block("/next")));
        let got = exchange_until(addr, &frames, 3);
        let refused = got
            .iter()
            .any(|f| f.kind == RST_STREAM && f.stream == 1 && f.error_code() == PROTOCOL_ERROR);
        assert!(refused, "{what}: not refused: {got:?}");
        assert!(
            !got.iter().any(|f| f.kind == HEADERS && f.stream == 1),
            "{what}: answered"
        );
        assert!(
            !got.iter().any(|f| f.kind == GOAWAY),
            "{what}: the connection was closed: {got:?}"
        );
        assert!(
            got.iter().any(|f| f.kind == HEADERS && f.stream == 3),
            "{what}: the next request on the connection was not answered: {got:?}"
        );
    }
    let seen: Vec<String> = up.seen().iter().map(|r| r.line.clone()).collect();
    assert_eq!(seen, vec!["GET /next HTTP/1.1"; cases.len()], "forwarded");
    // A fresh upstream for what follows.
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    // The same frames, well-formed, are answered and forwarded: the cases above can fail.
    let got = exchange(
        addr,
        &[
            headers(
                1,
                false,
                &with(&[(b"content-length", b"3"), (b"te", b"trailers")]),
            ),
            frame(DATA, END_STREAM, 1, b"abc"),
        ],
    );
    assert!(
        got.iter().any(|f| f.kind == HEADERS && f.stream == 1),
        "{got:?}"
    );
    assert_eq!(up.seen().len(), 1);
    assert_eq!(up.seen()[0].body, b"abc");
    // A pseudo-header in trailers: h2 0.4.20 drops the field rather than refusing the
    // request (a known gap, stated in the closing note); it is never forwarded.
    exchange(
        addr,
        &[
            headers(1, false, &with(&[])),
            frame(DATA, 0, 1, b"xyz"),
            headers(1, true, &block(&[(b":method", b"POST"), (b"x-t", b"1")])),
        ],
    );
    let raw = String::from_utf8_lossy(&up.raw()).to_string();
    assert!(raw.ends_with("3\r\nxyz\r\n0\r\nx-t: 1\r\n\r\n"), "{raw:?}");
    assert!(!raw.contains(":method"));
}

/// An HTTP/2 client that asks for `100-continue` gets the interim HEADERS before it has sent
/// a byte of its body (the head goes to the stream as a value, an interim one included), then
/// its answer once the body has gone upstream.
#[test]
fn expect_continue_gets_an_interim_head_before_the_body() {
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    let fields = [
        (&b"content-length"[..], &b"5"[..]),
        (b"expect", b"100-continue"),
    ];
    out.extend_from_slice(&headers(1, false, &post_block(&fields)));
    s.write_all(&out).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let interim = loop {
        let f = read_frame(&mut s).expect("an interim head before the body was sent");
        if f.kind == HEADERS && f.stream == 1 {
            break f;
        }
    };
    assert_eq!(interim.flags & END_STREAM, 0, "{interim:?}");
    assert!(up.seen().is_empty(), "nothing forwarded yet");
    s.write_all(&frame(DATA, END_STREAM, 1, b"hello")).unwrap();
    let rest = read_until_answered(&mut s, 1);
    let answer: Vec<u8> = rest
        .iter()
        .filter(|f| f.kind == DATA && f.stream == 1)
        .flat_map(|f| f.payload.clone())
        .collect();
    assert_eq!(answer, b"fine", "{rest:?}");
    assert_eq!(up.seen()[0].body, b"hello");
}

/// A refused field the client added to the HPACK dynamic table stays in it (the table stays
/// in step with the client's): a later request that names it by index is refused too, and the
/// one after that, clean, is answered on the same connection.
#[test]
fn a_refused_field_in_the_dynamic_table_is_refused_again_by_index() {
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "");
    let addr = proxy.local_addrs()[0];
    // A literal with incremental indexing (0x40): it becomes dynamic entry 62.
    let mut first = get_block("/first");
    first.extend_from_slice(&[0x40, 7]);
    first.extend_from_slice(b"X-Upper");
    first.extend_from_slice(&[1, b'1']);
    let mut second = get_block("/second");
    second.push(0x80 | 62);
    let frames = [
        headers(1, true, &first),
        headers(3, true, &second),
        headers(5, true, &get_block("/third")),
    ];
    let got = exchange_until(addr, &frames, 5);
    for id in [1, 3] {
        assert!(
            got.iter().any(|f| f.kind == RST_STREAM
                && f.stream == id
                && f.error_code() == PROTOCOL_ERROR),
            "stream {id} not refused: {got:?}"
        );
    }
    assert!(!got.iter().any(|f| f.kind == GOAWAY), "{got:?}");
    assert!(
        got.iter().any(|f| f.kind == HEADERS && f.stream == 5),
        "{got:?}"
    );
    let seen: Vec<String> = up.seen().iter().map(|r| r.line.clone()).collect();
    assert_eq!(seen, ["GET /third HTTP/1.1"]);
}

/// Cancelling is normal (a gRPC client cancels calls all day): resets over the rate limit
/// among many more streams the client let finish do not cut the connection; Rapid Reset
/// (every stream reset) still does (`floods_are_cut_off_with_goaway_and_memory_stays_bounded`).
#[test]
fn cancelling_one_stream_in_three_over_the_reset_rate_keeps_the_connection() {
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "[http2]\nmax_resets_per_second = 10");
    let addr = proxy.local_addrs()[0];
    let mut frames = Vec::new();
    for (n, id) in (1..91u32).step_by(2).enumerate() {
        frames.push(headers(id, true, &get_block(&format!("/s/{id}"))));
        if n % 3 == 0 {
            frames.push(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        }
    }
    frames.push(headers(91, true, &get_block("/last")));
    let got = exchange_until(addr, &frames, 91);
    assert!(!got.iter().any(|f| f.kind == GOAWAY), "{got:?}");
    assert!(
        got.iter().any(|f| f.kind == HEADERS && f.stream == 91),
        "{got:?}"
    );
}

/// The frames of round `i` of an attack.
type Attack = Box<dyn Fn(u32) -> Vec<u8> + Send>;

/// Sends `attack` on a fresh h2c connection as fast as the socket takes it, and returns the
/// frames read back; the proxy must close the connection (not the 10 s read timeout).
fn flood(addr: SocketAddr, attack: Attack) -> Vec<Frame> {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut out = PREFACE.to_vec();
        out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
        let _ = w.write_all(&out);
        for i in 0.. {
            if w.write_all(&attack(i)).is_err() {
                return;
            }
        }
    });
    let (frames, closed_by_proxy) = read_frames_to_end(&mut s);
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    assert!(
        closed_by_proxy,
        "the attacker was never cut off: {frames:?}"
    );
    frames
}

fn calmed(frames: &[Frame]) -> bool {
    frames
        .iter()
        .any(|f| f.kind == GOAWAY && f.error_code() == ENHANCE_YOUR_CALM)
}

#[test]
fn floods_are_cut_off_with_goaway_and_memory_stays_bounded() {
    let up = Upstream::ok(b"fine");
    let running = Running::config("h2-flood.toml", &h2c_config(up.addr, "admin = \"{admin}\""));
    let addr = running.addr;
    let attacks: [(&str, Attack); 5] = [
        // Rapid Reset: open a stream, cancel it, again and again.
        (
            "rapid reset",
            Box::new(|i| {
                let id = 2 * i + 1;
                let mut out = headers(id, true, &get_block("/"));
                out.extend_from_slice(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
                out
            }),
        ),
        (
            "ping",
            Box::new(|i| frame(PING, 0, 0, &u64::from(i).to_be_bytes())),
        ),
        ("settings", Box::new(|_| frame(SETTINGS, 0, 0, &[]))),
        // Empty DATA frames on an open stream.
        (
            "empty frames",
            Box::new(|i| match i {
                0 => headers(1, false, &get_block("/")),
                _ => frame(DATA, 0, 1, &[]),
            }),
        ),
        // One header block that never ends.
        (
            "continuation",
            Box::new(|i| match i {
                0 => frame(HEADERS, 0, 1, &get_block("/")),
                _ => frame(CONTINUATION, 0, 1, &literal(b"x-flood", &[b'a'; 100])),
            }),
        ),
    ];
    let mut calm = 0;
    for (what, attack) in attacks {
        // `flood` asserts the proxy closed the connection.
        let frames = flood(addr, attack);
        assert!(
            frames.iter().filter(|f| f.kind == PING).count() <= 100,
            "{what}: pings answered beyond the limit"
        );
        // The GOAWAY is written before the close, but a client that stops reading under its
        // own flood may lose it to the reset of a close with its bytes unread.
        calm += usize::from(calmed(&frames));
    }
    assert!(calm > 0, "no attacker saw GOAWAY(ENHANCE_YOUR_CALM)");
    let peak = running.status_kb("VmHWM");
    assert!(peak < 64 * 1024, "proxy peak RSS {peak} kB");
    // Normal clients are still served.
    let got = exchange(addr, &[headers(1, true, &get_block("/ok"))]);
    assert!(got.iter().any(|f| f.kind == DATA && f.payload == b"fine"));
    // Each attack was recognized as one (by the guard, or by h2's own reset limit).
    let admin = running.admin.unwrap();
    let mut res = http_client()
        .get(&format!("http://{admin}/metrics"))
        .call()
        .unwrap();
    let text = res.body_mut().read_to_string().unwrap();
    let floods: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("slipstream_http2_floods_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(floods, 5);
}

/// A client that opens every window as wide as it goes and then stops reading gets, for each
/// of its streams, no more of the proxy's memory than the stream's send buffer: the rest of
/// each answer waits in the upstream's socket. Then every byte arrives.
#[test]
fn streams_to_a_client_that_stops_reading_hold_bounded_memory() {
    const LEN: u64 = 1 << 20;
    const STREAMS: u32 = 100;
    let up = Upstream::start(|_| Reply::Pattern {
        head: format!("HTTP/1.1 200 OK\r\nContent-Length: {LEN}\r\n\r\n").into_bytes(),
        len: LEN,
    });
    let running = Running::config("h2-stalled.toml", &h2c_config(up.addr, ""));
    let before = running.status_kb("VmRSS");
    let mut s = TcpStream::connect(running.addr).unwrap();
    let widest = 0x7fff_ffffu32;
    // SETTINGS_INITIAL_WINDOW_SIZE (4) and the connection's window, both at their largest.
    let mut out = PREFACE.to_vec();
    out.extend(frame(
        SETTINGS,
        0,
        0,
        &[&[0, 4][..], &widest.to_be_bytes()].concat(),
    ));
    out.extend(frame(WINDOW_UPDATE, 0, 0, &(widest - 65_535).to_be_bytes()));
    for i in 0..STREAMS {
        out.extend(headers(2 * i + 1, true, &get_block("/big")));
    }
    s.write_all(&out).unwrap();
    // Everything the proxy will take while the client reads nothing is taken once the upstreams
    // stop getting ahead.
    let mut last = 0;
    for _ in 0..150 {
        std::thread::sleep(Duration::from_millis(200));
        let now = up.written.load(std::sync::atomic::Ordering::SeqCst);
        if now > 0 && now == last {
            break;
        }
        last = now;
    }
    let grew = running.status_kb("VmRSS").saturating_sub(before);
    // 16 KiB queued per stream (the relay gives its buffer back while the queue is full): a
    // few MiB in all, where whole answers held would be 100 MiB.
    assert!(
        grew < 16 * 1024,
        "the stalled client's streams hold {grew} kB"
    );
    let mut got = std::collections::HashMap::<u32, u64>::new();
    let mut ended = 0;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    while ended < STREAMS {
        let f = read_frame(&mut s).unwrap();
        if f.kind == DATA {
            *got.entry(f.stream).or_default() += f.payload.len() as u64;
            ended += u32::from(f.flags & END_STREAM != 0);
        }
        assert_ne!(f.kind, RST_STREAM, "stream {} was reset", f.stream);
    }
    assert_eq!(got.len(), STREAMS as usize);
    assert!(got.values().all(|&n| n == LEN), "{got:?}");
}

#[test]
fn sigterm_sends_two_goaways_and_finishes_the_stream_in_flight() {
    let gate = Gate::default();
    let held = gate.clone();
    let slow = Upstream::start(move |_| {
        Reply::AfterGate(
            held.clone(),
            Box::new(Reply::Bytes(response(200, b"finished"))),
        )
    });
    let mut running = Running::config("h2-term.toml", &h2c_config(slow.addr, ""));
    let mut s = TcpStream::connect(running.addr).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    out.extend_from_slice(&headers(1, true, &get_block("/slow")));
    s.write_all(&out).unwrap();
    assert!(eventually(|| !slow.seen().is_empty()));
    running.signal("-TERM");
    let mut reader = s.try_clone().unwrap();
    let frames = std::thread::spawn(move || read_frames(&mut reader));
    // Released once the workers are draining (their listeners closed).
    assert!(eventually(|| TcpStream::connect(running.addr).is_err()));
    gate.open();
    let frames = frames.join().unwrap();
    let goaways: Vec<u32> = frames
        .iter()
        .filter(|f| f.kind == GOAWAY)
        .map(|f| u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff)
        .collect();
    // First GOAWAY announces the end without cutting anything; the second names stream 1.
    assert_eq!(goaways, vec![0x7fff_ffff, 1], "{frames:?}");
    let body: Vec<u8> = frames
        .iter()
        .filter(|f| f.kind == DATA && f.stream == 1)
        .flat_map(|f| f.payload.clone())
        .collect();
    assert_eq!(body, b"finished");
    assert_eq!(running.child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_reload_sends_goaway_to_open_connections() {
    let up = Upstream::ok(b"fine");
    let running = Running::config("h2-reload.toml", &h2c_config(up.addr, ""));
    let mut s = TcpStream::connect(running.addr).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    out.extend_from_slice(&headers(1, true, &get_block("/")));
    s.write_all(&out).unwrap();
    let answered = read_until_answered(&mut s, 1);
    assert!(answered
        .iter()
        .any(|f| f.kind == DATA && f.payload == b"fine"));
    running.signal("-HUP");
    let (frames, closed) = read_frames_to_end(&mut s);
    assert!(closed, "{frames:?}");
    let goaways: Vec<&Frame> = frames.iter().filter(|f| f.kind == GOAWAY).collect();
    assert!(!goaways.is_empty(), "{frames:?}");
    assert!(goaways.iter().all(|f| f.error_code() == 0));
}

#[test]
fn an_idle_connection_gets_goaway_after_the_keepalive_timeout() {
    let up = Upstream::ok(b"fine");
    let proxy = h2c_proxy(up.addr, "[limits]\nkeepalive_timeout = \"300ms\"");
    let mut s = TcpStream::connect(proxy.local_addrs()[0]).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend_from_slice(&frame(SETTINGS, 0, 0, &[]));
    out.extend_from_slice(&headers(1, true, &get_block("/")));
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s);
    assert!(frames
        .iter()
        .any(|f| f.kind == DATA && f.payload == b"fine"));
    let last = frames.last().unwrap();
    assert_eq!(last.kind, GOAWAY, "{frames:?}");
    assert_eq!(last.error_code(), 0);
}

/// The h2spec binary: on PATH, or where `go install` puts it.
fn h2spec() -> std::path::PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    let candidates = [
        std::path::PathBuf::from(format!("{home}/go/bin/h2spec")),
        std::path::PathBuf::from("/usr/local/bin/h2spec"),
    ];
    if let Some(found) = candidates.iter().find(|p| p.exists()) {
        return found.clone();
    }
    let on_path = std::process::Command::new("h2spec")
        .arg("--version")
        .output();
    assert!(
        on_path.is_ok(),
        "h2spec is not installed (go install github.com/summerwind/h2spec/cmd/h2spec@latest; .ci/run does)"
    );
    "h2spec".into()
}

/// Runs h2spec with `args` against `port`; returns (passed, total) from its summary.
fn run_h2spec(port: u16, args: &[&str]) -> (u32, u32, String) {
    let out = std::process::Command::new(h2spec())
        .args(args)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-o", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let summary = text
        .lines()
        .find(|l| l.contains(" tests, ") && l.contains(" passed"))
        .unwrap_or_else(|| panic!("no h2spec summary: {text}"))
        .to_string();
    let numbers: Vec<u32> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (numbers[1], numbers[0], text)
}

#[test]
fn h2spec_passes_every_case_over_tls_strict_and_h2c() {
    let pki = crate::tls::TestPki::new("h2spec");
    let up = Upstream::start(|_| Reply::Bytes(response(200, &[b'x'; 100_000])));
    let tls = proxy(&crate::tls::tls_config(&pki, up.addr, 1, ""));
    let (passed, total, text) = run_h2spec(tls.local_addrs()[0].port(), &["-S", "-t", "-k"]);
    assert!(total >= 146, "{text}");
    assert_eq!(passed, total, "over TLS, strict:\n{text}");
    let h2c = h2c_proxy(up.addr, "");
    let (passed, total, text) = run_h2spec(h2c.local_addrs()[0].port(), &["-S"]);
    assert_eq!(passed, total, "h2c, strict:\n{text}");
    assert!(tls.metrics().total(Counter::Http2Connections) > 100);
}
