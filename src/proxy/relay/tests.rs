//! The relay over scripted streams: every read the upstream or client "makes", every write the
//! other side must see, short writes, early ends, errors and timeouts on each side. Time is
//! paused, so timeouts fire as soon as everything waits.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio_test::io::Builder;

use super::*;

/// The upstream head at the start of the buffer, and the head the client gets instead.
const UP_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nX-Up: 1\r\n\r\n";
const HEAD_OUT: &[u8] = b"HTTP/1.1 200 OK\r\nX-Out: 1\r\n\r\n";
const TIMEOUT: Duration = Duration::from_secs(1);

/// The scripted stream; the builder is dropped, as tokio-test needs for scripted errors.
fn mock(mut script: Builder) -> Stream {
    Stream::Mock(Box::new(script.build()))
}

fn run<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

/// One response relay: `first` is what the head read left after the upstream head.
struct Case {
    upstream: Builder,
    client: Builder,
    first: &'static [u8],
    framing: Framing,
    relay: Relay,
    wait_whole: bool,
}

impl Case {
    fn new(first: &'static [u8], framing: Framing) -> Case {
        Case {
            upstream: Builder::new(),
            client: Builder::new(),
            first,
            framing,
            relay: Relay::Pass,
            wait_whole: false,
        }
    }

    /// Runs the relay; returns its result and whether the head may have reached the client.
    fn run(self) -> (Result<Relayed, Error>, bool) {
        run(async move {
            let mut upstream = mock(self.upstream);
            let mut client = mock(self.client);
            let mut buf = [UP_HEAD, self.first].concat();
            let counters = Shard::default();
            let mut head_sent = false;
            let head = ClientHead::new(200, self.framing, HEAD_OUT.to_vec());
            let body = ResponseBody {
                upstream: &mut upstream,
                client: &mut client,
                buf: &mut buf,
                head_len: UP_HEAD.len(),
                head_out: &head,
                reader: BodyReader::new(self.framing),
                relay: self.relay,
                wait_whole: self.wait_whole,
                max_buffer: 64 * 1024,
                read_timeout: TIMEOUT,
                send_timeout: TIMEOUT,
                pipes: None,
                counters: &counters,
                buffers: None,
            };
            let result = relay_response(body, &mut head_sent).await;
            (result, head_sent)
        })
    }
}

fn kind(result: Result<Relayed, Error>) -> Kind {
    result.unwrap_err().kind
}

#[test]
fn short_writes_to_the_client_still_deliver_every_byte_in_order() {
    let mut case = Case::new(b"hello world", Framing::Length(11));
    let pause = Duration::from_millis(1);
    case.client
        .write(&HEAD_OUT[..7])
        .wait(pause)
        .write(&HEAD_OUT[7..])
        .wait(pause)
        .write(b"hel")
        .wait(pause)
        .write(b"lo world");
    let (result, _) = case.run();
    let done = Relayed {
        body_bytes: 11,
        clean_end: true,
    };
    assert_eq!(result.unwrap(), done);
}

#[test]
fn a_body_that_fits_is_collected_before_anything_is_written() {
    let mut case = Case::new(b"he", Framing::Length(11));
    case.wait_whole = true;
    case.upstream.read(b"llo").read(b" wor").read(b"ld");
    case.client.write(HEAD_OUT).write(b"hello world");
    let (result, _) = case.run();
    assert_eq!(result.unwrap().body_bytes, 11);
}

#[test]
fn upstream_eof_mid_body_before_anything_was_sent_leaves_room_for_a_502() {
    let mut case = Case::new(b"hello", Framing::Length(11));
    case.wait_whole = true;
    let (result, head_sent) = case.run();
    assert_eq!(kind(result), Kind::UpstreamFailed);
    assert!(!head_sent);
}

#[test]
fn upstream_eof_mid_body_after_the_head_was_sent_is_a_broken_response() {
    let mut case = Case::new(b"hello", Framing::Length(11));
    case.client.write(HEAD_OUT).write(b"hello");
    let (result, head_sent) = case.run();
    assert_eq!(kind(result), Kind::UpstreamFailed);
    assert!(head_sent);
}

#[test]
fn an_upstream_reset_is_an_upstream_failure() {
    let mut case = Case::new(b"", Framing::Length(11));
    case.wait_whole = true;
    case.upstream
        .read_error(io::ErrorKind::ConnectionReset.into());
    let (result, head_sent) = case.run();
    assert_eq!(kind(result), Kind::UpstreamFailed);
    assert!(!head_sent);
}

#[test]
fn a_silent_upstream_times_out() {
    let mut case = Case::new(b"", Framing::Length(11));
    case.wait_whole = true;
    case.upstream.wait(Duration::from_secs(3600));
    let (result, _) = case.run();
    assert_eq!(kind(result), Kind::UpstreamTimeout);
}

#[test]
fn a_client_that_fails_a_write_has_gone() {
    let mut case = Case::new(b"hello world", Framing::Length(11));
    case.client.write_error(io::ErrorKind::BrokenPipe.into());
    let (result, _) = case.run();
    assert_eq!(kind(result), Kind::ClientClosed);
}

#[test]
fn a_client_that_stops_reading_times_out_as_gone() {
    let mut case = Case::new(b"hello world", Framing::Length(11));
    case.client.wait(Duration::from_secs(3600));
    let (result, _) = case.run();
    assert_eq!(kind(result), Kind::ClientClosed);
}

#[test]
fn an_until_close_body_is_chunk_encoded_for_a_keep_alive_client() {
    let mut case = Case::new(b"abc", Framing::UntilClose);
    case.relay = Relay::EncodeChunked;
    case.upstream.read(b"defg");
    case.client
        .write(HEAD_OUT)
        .write(b"3\r\nabc\r\n")
        .write(b"4\r\ndefg\r\n")
        .write(b"0\r\n\r\n");
    let (result, _) = case.run();
    let done = Relayed {
        body_bytes: 7,
        clean_end: false,
    };
    assert_eq!(result.unwrap(), done);
}

#[test]
fn a_chunked_body_is_decoded_for_an_http10_client() {
    let mut case = Case::new(b"3\r\nabc\r\n", Framing::Chunked);
    case.relay = Relay::DecodeChunked;
    case.upstream.read(b"2\r\nde\r\n0\r\n\r\n");
    case.client.write(HEAD_OUT).write(b"abc").write(b"de");
    let (result, _) = case.run();
    assert_eq!(result.unwrap().body_bytes, 5);
}

#[test]
fn bytes_past_the_end_make_the_connection_unreusable() {
    let mut case = Case::new(b"helloEXTRA", Framing::Length(5));
    case.client.write(HEAD_OUT).write(b"hello");
    let (result, _) = case.run();
    let done = Relayed {
        body_bytes: 5,
        clean_end: false,
    };
    assert_eq!(result.unwrap(), done);
}

#[test]
fn broken_chunk_framing_from_the_upstream_is_a_bad_response() {
    let mut case = Case::new(b"zz\r\nhello\r\n", Framing::Chunked);
    case.wait_whole = true;
    let (result, _) = case.run();
    assert!(matches!(kind(result), Kind::BadResponse(_)));
}

/// One request-body relay; returns its result and the client bytes left after the body.
fn request_body(
    client: Builder,
    upstream: Builder,
    framing: Framing,
) -> (Result<(), Error>, Vec<u8>) {
    run(async move {
        let mut client = mock(client);
        let mut upstream = mock(upstream);
        let mut buf = Vec::new();
        let mut reader = BodyReader::new(framing);
        let counters = Shard::default();
        let result = relay_request_body(RequestBody {
            client: &mut client,
            upstream: &mut upstream,
            buf: &mut buf,
            reader: &mut reader,
            max_buffer: 64 * 1024,
            read_timeout: TIMEOUT,
            send_timeout: TIMEOUT,
            pipes: None,
            counters: &counters,
            early: None,
        })
        .await;
        (result, buf)
    })
}

#[test]
fn a_request_body_streams_piece_by_piece_and_keeps_what_follows() {
    let mut client = Builder::new();
    client.read(b"5\r\nhel").read(b"lo\r\n0\r\n\r\nGET /next");
    let mut upstream = Builder::new();
    upstream.write(b"5\r\nhel").write(b"lo\r\n0\r\n\r\n");
    let (result, rest) = request_body(client, upstream, Framing::Chunked);
    result.unwrap();
    assert_eq!(rest, b"GET /next");
}

#[test]
fn a_client_that_ends_mid_body_has_gone() {
    let mut client = Builder::new();
    client.read(b"abc");
    let mut upstream = Builder::new();
    upstream.write(b"abc");
    let (result, _) = request_body(client, upstream, Framing::Length(10));
    assert_eq!(result.unwrap_err().kind, Kind::ClientClosed);
}

#[test]
fn a_client_that_stalls_mid_body_times_out() {
    let mut client = Builder::new();
    client.read(b"abc").wait(Duration::from_secs(3600));
    let mut upstream = Builder::new();
    upstream.write(b"abc");
    let (result, _) = request_body(client, upstream, Framing::Length(10));
    assert_eq!(result.unwrap_err().kind, Kind::ClientTimeout);
}

#[test]
fn an_upstream_that_fails_a_body_write_is_an_upstream_failure() {
    let mut client = Builder::new();
    client.read(b"abc");
    let mut upstream = Builder::new();
    upstream.write_error(io::ErrorKind::ConnectionReset.into());
    let (result, _) = request_body(client, upstream, Framing::Length(3));
    assert_eq!(result.unwrap_err().kind, Kind::UpstreamFailed);
}

#[test]
fn broken_chunk_framing_from_the_client_is_a_bad_request() {
    let mut client = Builder::new();
    client.read(b"zz\r\n");
    let (result, _) = request_body(client, Builder::new(), Framing::Chunked);
    assert!(matches!(result.unwrap_err().kind, Kind::BadRequest(_)));
}
