//! [`H2Stream`]: one HTTP/2 stream as the byte stream of an HTTP/1.1 connection carrying one
//! request, so every route kind (proxy, FastCGI, static files) serves HTTP/2 unchanged. Reading
//! gives the request head (from [`super::request`]) and the body, chunked when it has no
//! length, with the client's trailers; writing takes the HTTP/1.1 response the proxy produces
//! and sends it as HEADERS, DATA and trailers, interim 1xx heads as informational HEADERS.
//!
//! Flow control is the backpressure: DATA is taken (and the client's window opened again) only
//! as the proxy reads it, beyond a bounded read-ahead, and a write takes no more bytes than the
//! stream has send capacity for, so memory per stream stays within the windows. A response that ends early resets the stream instead of
//! looking complete.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::request::{BodyFraming, Head};
use super::response::{from_http1, trailer_fields};
use crate::http1::{chunk_size_line, ChunkedReader, Framing, CHUNK_END};

/// One HTTP/2 stream, read and written as HTTP/1.1 bytes.
pub struct H2Stream {
    reader: Reader,
    /// Behind a `RefCell`: [`H2Stream::poll_reset`] watches for the client's RST_STREAM
    /// through a shared reference while the request path waits on an upstream.
    writer: RefCell<Writer>,
    /// The TLS version of the connection (nginx's names), `""` for h2c.
    pub tls_version: &'static str,
    /// The local address of the connection.
    pub local: Option<SocketAddr>,
}

impl std::fmt::Debug for H2Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Stream").finish_non_exhaustive()
    }
}

impl H2Stream {
    /// A stream whose request head is `head`, its body `recv`, its response going to `respond`;
    /// response heads may take `max_head` bytes.
    pub fn new(
        head: Head,
        recv: RecvStream,
        respond: SendResponse<Bytes>,
        max_head: usize,
    ) -> H2Stream {
        H2Stream {
            reader: Reader {
                framing: head.body,
                recv,
                pending: VecDeque::from([(Bytes::from(head.bytes), false)]),
                pending_data: 0,
                progress: if head.body == BodyFraming::None {
                    Progress::Done
                } else {
                    Progress::Data
                },
            },
            writer: RefCell::new(Writer {
                respond,
                send: None,
                out: Out::Head(Vec::new()),
                is_head: head.is_head,
                max_head,
                best_room: 0,
            }),
            tls_version: "",
            local: None,
        }
    }

    /// Takes the body that has already arrived, up to `limit` bytes of it (nginx's
    /// `http2_body_preread_size`), without waiting for more: a request that breaks the rules
    /// within it (a length exceeded or not reached, a second HEADERS without END_STREAM) is
    /// then refused before anything is answered or forwarded, and one whose body trickles
    /// (gRPC streaming, a streaming upload) is forwarded at once, each DATA frame as it comes.
    /// Err if the body is malformed or the stream reset.
    pub async fn preread(&mut self, limit: usize) -> io::Result<()> {
        let reader = &mut self.reader;
        std::future::poll_fn(|cx| {
            while reader.pending_data < limit {
                match reader.pull(cx) {
                    Poll::Ready(Ok(true)) => {}
                    Poll::Ready(Ok(false)) | Poll::Pending => break,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                }
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Ready when the client reset the stream (or the connection went away).
    pub fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut w = self.writer.borrow_mut();
        let r = match &mut w.send {
            Some(s) => s.poll_reset(cx),
            None => w.respond.poll_reset(cx),
        };
        r.map(|_| ())
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        let w = self.writer.get_mut();
        if matches!(w.out, Out::Done) {
            return;
        }
        // The response did not end: the client must not take it for whole.
        match &mut w.send {
            Some(s) => s.send_reset(Reason::INTERNAL_ERROR),
            None => w.respond.send_reset(Reason::INTERNAL_ERROR),
        }
    }
}

/// Where the request body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Waiting for DATA.
    Data,
    /// DATA ended; trailers (chunked bodies) still to read.
    Trailers,
    /// Everything has been staged.
    Done,
}

/// The request side: the head, then the body as HTTP/1.1 framing.
struct Reader {
    framing: BodyFraming,
    recv: RecvStream,
    /// What the proxy reads next, in order: the head, chunk framing and DATA (flagged). DATA
    /// is taken from `recv`, and its window given back to the client, only when `pending` is
    /// empty or while reading ahead up to the preread limit, so what waits here is bounded.
    pending: VecDeque<(Bytes, bool)>,
    /// DATA bytes in `pending`.
    pending_data: usize,
    progress: Progress,
}

fn h2_error(e: h2::Error) -> io::Error {
    if e.is_io() {
        return e
            .into_io()
            .unwrap_or_else(|| io::ErrorKind::BrokenPipe.into());
    }
    io::Error::new(io::ErrorKind::ConnectionReset, e)
}

impl Reader {
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
    fn pull(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        loop {
            match self.progress {
                Progress::Done => return Poll::Ready(Ok(false)),
                Progress::Data => match ready!(self.recv.poll_data(cx)) {
                    Some(Ok(d)) if d.is_empty() => continue,
                    Some(Ok(d)) => {
                        let chunked = self.framing == BodyFraming::Chunked;
                        if chunked {
                            let mut line = [0u8; 20];
                            let line = chunk_size_line(d.len(), &mut line);
                            self.pending
                                .push_back((Bytes::copy_from_slice(line), false));
                        }
                        self.pending_data += d.len();
                        let _ = self.recv.flow_control().release_capacity(d.len());
                        self.pending.push_back((d, true));
                        if chunked {
                            self.pending
                                .push_back((Bytes::from_static(CHUNK_END), false));
                        }
                        return Poll::Ready(Ok(true));
                    }
                    Some(Err(e)) => return Poll::Ready(Err(h2_error(e))),
                    None if self.framing == BodyFraming::Chunked => {
                        self.progress = Progress::Trailers;
                    }
                    None => self.progress = Progress::Done,
                },
                Progress::Trailers => {
                    let trailers = ready!(self.recv.poll_trailers(cx)).map_err(h2_error)?;
                    let mut end = b"0\r\n".to_vec();
                    for (name, value) in trailers.iter().flatten() {
                        end.extend_from_slice(name.as_str().as_bytes());
                        end.extend_from_slice(b": ");
                        end.extend_from_slice(value.as_bytes());
                        end.extend_from_slice(b"\r\n");
                    }
                    end.extend_from_slice(b"\r\n");
                    self.pending.push_back((Bytes::from(end), false));
                    self.progress = Progress::Done;
                    return Poll::Ready(Ok(true));
                }
            }
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.copy_out(buf) || !ready!(self.pull(cx))? {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// How far the response has been written.
enum Out {
    /// Head bytes so far.
    Head(Vec<u8>),
    /// Body bytes still to come.
    Length(u64),
    /// A chunked body: its reader, and the trailer section's bytes.
    Chunked(ChunkedReader, Vec<u8>),
    /// A body ended by shutdown.
    UntilClose,
    /// END_STREAM has been sent.
    Done,
}

/// The response side.
struct Writer {
    respond: SendResponse<Bytes>,
    send: Option<SendStream<Bytes>>,
    out: Out,
    is_head: bool,
    max_head: usize,
    /// The most send capacity the stream has had at once: the client's usable window.
    best_room: usize,
}

/// A window this open is always worth sending into (the frame header is then well under 1%).
const WORTH_A_FRAME: usize = 4096;

/// How much of a `want`-byte write to send into `cap` bytes of window: all of it if it fits,
/// else as much as fits, but never leaving a remainder too small to be worth a frame of its
/// own (a window one byte short of a write would otherwise make a one-byte frame next).
/// The same goes for the frames `h2` cuts a send into: a part is sent in whole 16 KiB frames
/// (the smallest maximum frame size a client may set), the odd rest with the next write.
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

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Writer {
    /// Waits for send capacity for up to `want` bytes; returns how many may be sent.
    ///
    /// A sliver of window is not sent into (the silly window syndrome: a client that returns
    /// each frame's bytes as it reads them would otherwise get one tiny frame per window
    /// update, for the rest of the body): it waits until the window holds 4 KiB, all
    /// of `want`, or half the most the client has opened.
    fn poll_room(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        let Some(send) = &mut self.send else {
            return Poll::Ready(Err(invalid("no response head")));
        };
        send.reserve_capacity(want);
        loop {
            let cap = send.capacity();
            self.best_room = self.best_room.max(cap);
            if cap > 0 && (cap >= want.min(WORTH_A_FRAME) || cap >= self.best_room / 2) {
                return Poll::Ready(Ok(take(cap, want)));
            }
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => continue,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(h2_error(e))),
                Poll::Ready(None) => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Poll::Pending => {
                    if let Poll::Ready(r) = send.poll_reset(cx) {
                        let e = r.map_or_else(h2_error, |reason| {
                            io::Error::new(io::ErrorKind::ConnectionReset, h2::Error::from(reason))
                        });
                        return Poll::Ready(Err(e));
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn send_data(&mut self, data: &[u8], end: bool) -> io::Result<()> {
        let send = self
            .send
            .as_mut()
            .ok_or_else(|| invalid("no response head"))?;
        send.send_data(Bytes::copy_from_slice(data), end)
            .map_err(h2_error)
    }

    fn write_head(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Out::Head(acc) = &mut self.out else {
            unreachable!()
        };
        let before = acc.len();
        let take = buf.len().min(self.max_head.saturating_sub(before).max(1));
        acc.extend_from_slice(&buf[..take]);
        let converted = match from_http1(acc, self.max_head, self.is_head) {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(take),
            Err(_) => return Err(invalid("malformed response head")),
        };
        let used = converted.head_len - before;
        let status = converted.response.status();
        if status.is_informational() {
            acc.clear();
            if status != http::StatusCode::SWITCHING_PROTOCOLS {
                self.respond
                    .send_informational(converted.response)
                    .map_err(h2_error)?;
            }
            return Ok(used);
        }
        let (end, out) = match converted.framing {
            Framing::Empty | Framing::Length(0) => (true, Out::Done),
            Framing::Length(n) => (false, Out::Length(n)),
            Framing::Chunked => (false, Out::Chunked(ChunkedReader::new(), Vec::new())),
            Framing::UntilClose => (false, Out::UntilClose),
        };
        let send = self
            .respond
            .send_response(converted.response, end)
            .map_err(h2_error)?;
        self.send = Some(send);
        self.out = out;
        Ok(used)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let result = match &mut self.out {
            Out::Head(_) => self.write_head(buf),
            Out::Length(left) => {
                let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let n = ready!(self.poll_room(cx, want))?;
                let Out::Length(left) = &mut self.out else {
                    unreachable!()
                };
                *left -= n as u64;
                let end = *left == 0;
                if end {
                    self.out = Out::Done;
                }
                self.send_data(&buf[..n], end).map(|()| n)
            }
            Out::Chunked(reader, _) if reader.data_remaining() > 0 => {
                let want = buf
                    .len()
                    .min(usize::try_from(reader.data_remaining()).unwrap_or(usize::MAX));
                let n = ready!(self.poll_room(cx, want))?;
                if let Out::Chunked(reader, _) = &mut self.out {
                    reader.skip_data(n as u64);
                }
                self.send_data(&buf[..n], false).map(|()| n)
            }
            Out::Chunked(..) => self.write_chunk_framing(buf),
            Out::UntilClose => {
                let n = ready!(self.poll_room(cx, buf.len()))?;
                self.send_data(&buf[..n], false).map(|()| n)
            }
            Out::Done => Err(invalid("bytes after the end of the response")),
        };
        Poll::Ready(result)
    }

    /// Reads chunk framing up to the next chunk's data (or the end of the body, when the
    /// trailers go out as a HEADERS frame).
    fn write_chunk_framing(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Out::Chunked(reader, trailers) = &mut self.out else {
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
            self.out = Out::Done;
            let send = self
                .send
                .as_mut()
                .ok_or_else(|| invalid("no response head"))?;
            if fields.is_empty() {
                send.send_data(Bytes::new(), true).map_err(h2_error)?;
            } else {
                send.send_trailers(fields).map_err(h2_error)?;
            }
        }
        Ok(i)
    }

    fn poll_shutdown(&mut self) -> Poll<io::Result<()>> {
        match self.out {
            Out::Done => Poll::Ready(Ok(())),
            Out::UntilClose => {
                self.out = Out::Done;
                Poll::Ready(self.send_data(&[], true))
            }
            _ => Poll::Ready(Err(invalid("response ended early"))),
        }
    }
}

impl AsyncRead for H2Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().reader.poll_read(cx, buf)
    }
}

impl AsyncWrite for H2Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().writer.get_mut().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().writer.get_mut().poll_shutdown()
    }
}
