//! A message body between HTTP/2 and the HTTP/1.1 bytes the request path reads and writes,
//! both ways, for both ends of the proxy: [`Inbound`] turns a `RecvStream` (a client's request
//! body, or an upstream's response body) into HTTP/1.1 body bytes, chunked with the trailers
//! when the message has no length; [`Outbound`] reads the HTTP/1.1 body the proxy writes (a
//! response to a client, or a request to an upstream) and sends it as DATA and trailers.
//!
//! Flow control is the backpressure: DATA is taken (and its window given back to the sender)
//! only as the proxy reads it, and a write takes no more bytes than the stream has send
//! capacity for, so memory per stream stays within the windows.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h2::{RecvStream, SendStream};
use tokio::io::ReadBuf;

use super::response::trailer_fields;
use crate::grpc::web;
use crate::http1::{chunk_size_line, put_field, ChunkedReader, Framing, CHUNK_END};

/// An `h2` failure as the I/O error the request path sees. A stream the peer never processed
/// (RST_STREAM REFUSED_STREAM, or above the last stream id of its GOAWAY) is
/// `ConnectionRefused`: a request to an upstream may then go anywhere again, whatever its
/// method, and whenever the refusal is seen (while the body is still being sent, too).
pub fn h2_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::ErrorKind::BrokenPipe.into());
    }
    let refused =
        e.reason() == Some(h2::Reason::REFUSED_STREAM) || (e.is_go_away() && e.is_remote());
    let kind = if refused {
        io::ErrorKind::ConnectionRefused
    } else {
        io::ErrorKind::ConnectionReset
    };
    io::Error::new(kind, e)
}

/// Whether `e` is the peer resetting the stream with NO_ERROR: a server that has answered
/// whole asks the client to stop sending the request's body (RFC 9113 section 8.1), which is
/// no failure of the exchange.
pub(super) fn is_stop_sending(e: &io::Error) -> bool {
    // Only a peer resets an upstream stream with NO_ERROR (the proxy's own resets are CANCEL).
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<h2::Error>())
        .is_some_and(|h2| h2.reason() == Some(h2::Reason::NO_ERROR))
}

pub(super) fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Where an incoming body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Waiting for DATA.
    Data,
    /// DATA ended; trailers (chunked bodies) still to read.
    Trailers,
    /// Everything has been staged.
    Done,
}

/// An incoming HTTP/2 message as HTTP/1.1 bytes: whatever was staged first (the head), then
/// the body.
pub(super) struct Inbound {
    chunked: bool,
    recv: RecvStream,
    /// What the proxy reads next, in order: the head, chunk framing and DATA (flagged). DATA
    /// is taken from `recv`, and its window given back, only when `pending` is empty or while
    /// reading ahead up to a limit, so what waits here is bounded.
    pending: VecDeque<(Bytes, bool)>,
    /// DATA bytes in `pending`.
    pub(super) pending_data: usize,
    progress: Progress,
    /// A gRPC-Web response: its trailers become the body's last frame, and the body is base64
    /// (each DATA frame encoded whole) when `Text`.
    web: Option<web::Encoding>,
}

impl Inbound {
    /// A message whose head bytes are `head` (none for a request, read as a value) and whose
    /// body comes from `recv`: none when
    /// `has_body` is false, else chunked (with trailers) when `chunked`, else as it is.
    pub(super) fn new(head: Bytes, recv: RecvStream, has_body: bool, chunked: bool) -> Inbound {
        Inbound {
            chunked,
            recv,
            pending: if head.is_empty() {
                VecDeque::new()
            } else {
                VecDeque::from([(head, false)])
            },
            pending_data: 0,
            progress: if has_body {
                Progress::Data
            } else {
                Progress::Done
            },
            web: None,
        }
    }

    /// Makes this (chunked) body a gRPC-Web response's: the trailers become its last frame,
    /// and a `Text` body is base64.
    pub(super) fn as_grpc_web(&mut self, encoding: web::Encoding) {
        self.web = Some(encoding);
    }

    /// Stages `data` as one chunk (or as it is, unchunked).
    fn stage(&mut self, data: Bytes) {
        if self.chunked {
            let mut line = [0u8; 20];
            let line = chunk_size_line(data.len(), &mut line);
            self.pending
                .push_back((Bytes::copy_from_slice(line), false));
        }
        self.pending_data += data.len();
        self.pending.push_back((data, true));
        if self.chunked {
            self.pending
                .push_back((Bytes::from_static(CHUNK_END), false));
        }
    }

    /// Stages the end of a chunked body: the trailer section, or for gRPC-Web the trailers'
    /// frame and an empty one.
    fn stage_end(&mut self, trailers: Option<http::HeaderMap>) {
        let fields = trailers.iter().flatten();
        if let Some(encoding) = self.web {
            let frame = web::trailer_frame(fields.map(|(n, v)| (n.as_str(), v.as_bytes())));
            let frame = match encoding {
                web::Encoding::Text => {
                    let mut out = Vec::with_capacity(frame.len() * 4 / 3 + 4);
                    web::encode(&frame, &mut out);
                    out
                }
                web::Encoding::Binary => frame,
            };
            self.stage(Bytes::from(frame));
            self.pending
                .push_back((Bytes::from_static(b"0\r\n\r\n"), false));
            return;
        }
        let mut end = b"0\r\n".to_vec();
        for (name, value) in fields {
            put_field(&mut end, name.as_str().as_bytes(), value.as_bytes());
        }
        end.extend_from_slice(b"\r\n");
        self.pending.push_back((Bytes::from(end), false));
    }

    /// Copies pending pieces into `buf`; true if anything was copied.
    fn copy_out(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let start = buf.filled().len();
        while buf.remaining() > 0 {
            let Some((piece, is_data)) = self.pending.front_mut() else {
                break;
            };
            let n = buf.remaining().min(piece.len());
            buf.put_slice(&piece[..n]);
            piece.advance(n);
            if *is_data {
                self.pending_data -= n;
            }
            if piece.is_empty() {
                self.pending.pop_front();
            }
        }
        buf.filled().len() > start
    }

    /// Adds the next piece of the body to `pending`: Ready(Ok(false)) at its end.
    pub(super) fn pull(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        loop {
            match self.progress {
                Progress::Done => return Poll::Ready(Ok(false)),
                Progress::Data => match ready!(self.recv.poll_data(cx)) {
                    Some(Ok(d)) if d.is_empty() => continue,
                    Some(Ok(d)) => {
                        let _ = self.recv.flow_control().release_capacity(d.len());
                        let d = match self.web {
                            Some(web::Encoding::Text) => {
                                let mut out = Vec::with_capacity(d.len() * 4 / 3 + 4);
                                web::encode(&d, &mut out);
                                Bytes::from(out)
                            }
                            _ => d,
                        };
                        self.stage(d);
                        return Poll::Ready(Ok(true));
                    }
                    Some(Err(e)) => return Poll::Ready(Err(h2_error(e))),
                    None if self.chunked => self.progress = Progress::Trailers,
                    None => self.progress = Progress::Done,
                },
                Progress::Trailers => {
                    let trailers = ready!(self.recv.poll_trailers(cx)).map_err(h2_error)?;
                    self.stage_end(trailers);
                    self.progress = Progress::Done;
                    return Poll::Ready(Ok(true));
                }
            }
        }
    }

    /// Reads what is staged, pulling more of the body when nothing is.
    pub(super) fn poll_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.copy_out(buf) || !ready!(self.pull(cx))? {
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Whether the whole message has been read.
    pub(super) fn is_done(&self) -> bool {
        self.pending.is_empty() && (self.progress == Progress::Done || self.recv.is_end_stream())
    }
}

/// A window this open is always worth sending into (the frame header is then well under 1%).
const WORTH_A_FRAME: usize = 4096;

/// How long a sliver of window is left unsent for a larger one. A peer may hold its
/// WINDOW_UPDATE until the window is used up (h2spec does), and would otherwise wait forever.
const SLIVER_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// How much of a `want`-byte write to send into `cap` bytes of window: all of it if it fits,
/// else as much as fits, but never leaving a remainder too small to be worth a frame of its
/// own (a window one byte short of a write would otherwise make a one-byte frame next).
/// The same goes for the frames `h2` cuts a send into: a part is sent in whole 16 KiB frames
/// (the smallest maximum frame size a peer may set), the odd rest with the next write.
fn take(cap: usize, want: usize) -> usize {
    const FRAME: usize = 16_384;
    if cap >= want {
        want
    } else if cap > FRAME {
        cap - cap % FRAME
    } else if want - cap < WORTH_A_FRAME && cap > WORTH_A_FRAME && want >= 2 * WORTH_A_FRAME {
        want - WORTH_A_FRAME
    } else {
        cap
    }
}

/// Whether a sliver of window has waited [`SLIVER_WAIT`] for more; starts the wait, and wakes
/// the task when it ends.
fn sliver_waited(due: &mut Option<Pin<Box<tokio::time::Sleep>>>, cx: &mut Context<'_>) -> bool {
    due.get_or_insert_with(|| Box::pin(tokio::time::sleep(SLIVER_WAIT)))
        .as_mut()
        .poll(cx)
        .is_ready()
}

/// How far an outgoing body has been written.
enum BodyState {
    /// Body bytes still to come.
    Length(u64),
    /// A chunked body: its reader, and the trailer section's bytes.
    Chunked(ChunkedReader, Vec<u8>),
    /// A body ended by shutdown.
    UntilClose,
    /// END_STREAM has been sent.
    Done,
}

/// An outgoing HTTP/2 body, written as the HTTP/1.1 body of the head already sent.
pub(super) struct Outbound {
    send: SendStream<Bytes>,
    out: BodyState,
    /// The most send capacity the stream has had at once: the peer's usable window.
    best_room: usize,
    /// While a sliver of window waits for more: when it goes out anyway ([`SLIVER_WAIT`]).
    sliver_due: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A gRPC-Web `-text` request: the body is base64, sent decoded.
    text: Option<web::Decoder>,
}

impl Outbound {
    /// Whether a message framed as `framing` has no body: its HEADERS frame ends the stream.
    pub(super) fn is_empty(framing: Framing) -> bool {
        matches!(framing, Framing::Empty | Framing::Length(0))
    }

    /// The body of a message whose HEADERS went out on `send`, framed in HTTP/1.1 as
    /// `framing` (nothing more to send when [`Outbound::is_empty`]).
    pub(super) fn new(send: SendStream<Bytes>, framing: Framing) -> Outbound {
        let out = match framing {
            Framing::Empty | Framing::Length(0) => BodyState::Done,
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(ChunkedReader::new(), Vec::new()),
            Framing::UntilClose => BodyState::UntilClose,
        };
        Outbound {
            send,
            out,
            best_room: 0,
            sliver_due: None,
            text: None,
        }
    }

    /// Makes this the body of a gRPC-Web `-text` request: what is written is base64, and
    /// what is sent its decoding.
    pub(super) fn decode_base64(&mut self) {
        self.text = Some(web::Decoder::default());
    }

    /// Whether END_STREAM has been sent.
    pub(super) fn is_done(&self) -> bool {
        matches!(self.out, BodyState::Done)
    }

    /// Resets the stream (a body that ended early must not look whole).
    pub(super) fn reset(&mut self, reason: h2::Reason) {
        self.send.send_reset(reason);
    }

    /// Ready when the peer reset the stream.
    pub(super) fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.send.poll_reset(cx).map(|_| ())
    }

    /// Waits for send capacity for up to `want` bytes; returns how many may be sent.
    ///
    /// A sliver of window is not sent into (the silly window syndrome: a peer that returns
    /// each frame's bytes as it reads them would otherwise get one tiny frame per window
    /// update, for the rest of the body): it waits until the window holds 4 KiB, all
    /// of `want`, or half the most the peer has opened, or for [`SLIVER_WAIT`] at most.
    pub(super) fn poll_room(
        &mut self,
        cx: &mut Context<'_>,
        want: usize,
    ) -> Poll<io::Result<usize>> {
        let send = &mut self.send;
        send.reserve_capacity(want);
        loop {
            let cap = send.capacity();
            self.best_room = self.best_room.max(cap);
            let worth = cap >= want.min(WORTH_A_FRAME) || cap >= self.best_room / 2;
            if cap > 0 && (worth || sliver_waited(&mut self.sliver_due, cx)) {
                self.sliver_due = None;
                return Poll::Ready(Ok(take(cap, want)));
            }
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(h2_error(e))),
                // No more sending: the peer's reset, when it sent one, says why.
                Poll::Ready(None) => {
                    let e = match send.poll_reset(cx) {
                        Poll::Ready(Ok(reason)) => h2_error(reason.into()),
                        _ => io::ErrorKind::BrokenPipe.into(),
                    };
                    return Poll::Ready(Err(e));
                }
                Poll::Pending => {
                    if let Poll::Ready(r) = send.poll_reset(cx) {
                        let e = r.map_or_else(h2_error, |reason| h2_error(reason.into()));
                        return Poll::Ready(Err(e));
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn send_data(&mut self, data: &[u8], end: bool) -> io::Result<()> {
        let data = match &mut self.text {
            None => crate::buffers::shared_copy(data),
            Some(decoder) => {
                let mut out = Vec::with_capacity(data.len() / 4 * 3 + 3);
                let bad = |e| io::Error::new(io::ErrorKind::InvalidData, e);
                decoder.feed(data, &mut out).map_err(bad)?;
                if end {
                    decoder.finish().map_err(bad)?;
                }
                if out.is_empty() && !end {
                    return Ok(());
                }
                Bytes::from(out)
            }
        };
        self.send.send_data(data, end).map_err(h2_error)
    }

    /// Writes body bytes; returns how many were taken.
    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = match &mut self.out {
            BodyState::Length(left) => {
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = ready!(self.poll_room(cx, want))?;
                let BodyState::Length(left) = &mut self.out else {
                    unreachable!()
                };
                *left -= n as u64;
                let end = *left == 0;
                if end {
                    self.out = BodyState::Done;
                }
                self.send_data(&buf[..n], end).map(|()| n)
            }
            BodyState::Chunked(reader, _) if reader.data_remaining() > 0 => {
                let want = buf
                    .len()
                    .min(usize::try_from(reader.data_remaining()).unwrap_or(usize::MAX));
                let n = ready!(self.poll_room(cx, want))?;
                if let BodyState::Chunked(reader, _) = &mut self.out {
                    reader.skip_data(n as u64);
                }
                self.send_data(&buf[..n], false).map(|()| n)
            }
            BodyState::Chunked(..) => self.write_chunk_framing(buf),
            BodyState::UntilClose => {
                let n = ready!(self.poll_room(cx, buf.len()))?;
                self.send_data(&buf[..n], false).map(|()| n)
            }
            BodyState::Done => Err(invalid("bytes after the end of the body")),
        };
        // A send h2 refused because the peer reset the stream: its reason is the error.
        let refused = |e: &io::Error| {
            e.get_ref()
                .and_then(|i| i.downcast_ref::<h2::Error>())
                .is_some()
        };
        let result = result.map_err(|e| match self.send.poll_reset(cx) {
            Poll::Ready(Ok(reason)) if refused(&e) => h2_error(reason.into()),
            _ => e,
        });
        Poll::Ready(result)
    }

    /// Reads chunk framing up to the next chunk's data (or the end of the body, when the
    /// trailers go out as a HEADERS frame).
    fn write_chunk_framing(&mut self, buf: &[u8]) -> io::Result<usize> {
        let BodyState::Chunked(reader, trailers) = &mut self.out else {
            unreachable!()
        };
        let mut i = 0;
        while i < buf.len() && reader.data_remaining() == 0 && !reader.is_done() {
            if reader.in_trailers() {
                trailers.push(buf[i]);
            }
            reader
                .feed(&buf[i..i + 1], |_| {})
                .map_err(|_| invalid("malformed chunked body"))?;
            i += 1;
        }
        if reader.is_done() {
            let fields = trailer_fields(trailers);
            self.out = BodyState::Done;
            if fields.is_empty() {
                self.send_data(&[], true)?;
            } else {
                if let Some(Err(e)) = self.text.as_ref().map(web::Decoder::finish) {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                self.send.send_trailers(fields).map_err(h2_error)?;
            }
        }
        Ok(i)
    }

    /// Ends a body that runs until shutdown; any other body must have ended by its framing.
    pub(super) fn shutdown(&mut self) -> io::Result<()> {
        match self.out {
            BodyState::Done => Ok(()),
            BodyState::UntilClose => {
                self.out = BodyState::Done;
                self.send_data(&[], true)
            }
            _ => Err(invalid("body ended early")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::take;

    #[test]
    fn a_write_is_cut_into_whole_frames_and_no_sliver_is_left() {
        assert_eq!(take(100_000, 10), 10);
        assert_eq!(take(40_000, 100_000), 32_768);
        // 10 000 of 12 000 would leave 2 000: send all but 4 KiB now, the 4 KiB next.
        assert_eq!(take(10_000, 12_000), 7_904);
        assert_eq!(take(1_000, 12_000), 1_000);
    }
}
