//! A request whose upstream answers before its body has ended (gRPC bidirectional streaming,
//! a streaming upload answered as it goes; HTTP/2 clients only): the response body and the
//! rest of the request body then move at once, each read sent on as it comes, until the
//! response ends. Used for responses relayed unchanged; `response.rs` sends the rest of the
//! body first for the others.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::relay::Relayed;
use crate::error::{Error, Kind};
use crate::http1::BodyReader;
use crate::message::ClientHead;
use crate::net::io::write_head;
use crate::net::Stream;

/// Bytes moved per read, each way.
const STEP: usize = 16 * 1024;

/// Both bodies of a request answered early.
pub(super) struct Duplex<'a> {
    /// Client connection: the rest of the request body in, the response out.
    pub(super) client: &'a mut Stream,
    /// Upstream connection.
    pub(super) upstream: &'a mut Stream,
    /// Framing tracker of the request body (not done).
    pub(super) request: &'a mut BodyReader,
    /// Upstream read buffer: the response head (already parsed), then the first body bytes.
    pub(super) buf: &'a mut Vec<u8>,
    /// Length of the upstream head at the start of `buf`.
    pub(super) head_len: usize,
    /// The head to send the client.
    pub(super) head_out: &'a ClientHead,
    /// Framing tracker of the response body.
    pub(super) response: BodyReader,
    /// The exchange fails when no byte moves either way for this long.
    pub(super) idle_timeout: Duration,
    /// Time allowed for the head's write.
    pub(super) send_timeout: Duration,
}

/// How a duplex exchange ended.
pub(super) struct Ended {
    /// The response, as [`super::relay::relay_response`] tells it.
    pub(super) relayed: Relayed,
    /// The request body was read and sent whole (else the client connection must close).
    pub(super) request_whole: bool,
}

/// One direction: bytes read from one side, checked by a framing tracker, written to the other.
struct Direction {
    buf: Vec<u8>,
    /// Start of the bytes not yet written.
    out: usize,
    /// End of the body bytes read.
    end: usize,
    reader: BodyReader,
    /// Everything of the body has been written (and flushed).
    done: bool,
    /// The sender sent bytes past the end of the body.
    extra: bool,
    /// Body bytes written.
    moved: u64,
}

/// A failure of one direction, told apart by the side that failed.
enum Fault {
    /// Reading the source failed, or it ended before the body did (`None`).
    Source(Option<io::Error>),
    /// Writing the destination failed.
    Destination(io::Error),
    /// The body's framing is invalid.
    Framing,
}

impl Direction {
    fn new(reader: BodyReader) -> Direction {
        Direction {
            buf: vec![0; STEP],
            out: 0,
            end: 0,
            done: false,
            reader,
            extra: false,
            moved: 0,
        }
    }

    /// Moves what can move without waiting; true if any byte did (or the body ended).
    fn poll_move(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut Stream,
        to: &mut Stream,
    ) -> Result<bool, Fault> {
        let mut moved = false;
        loop {
            if self.out == self.end && !self.reader.is_done() {
                let mut into = ReadBuf::new(&mut self.buf);
                let n = match Pin::new(&mut *from).poll_read(cx, &mut into) {
                    Poll::Pending => return Ok(moved),
                    Poll::Ready(Err(e)) => return Err(Fault::Source(Some(e))),
                    Poll::Ready(Ok(())) => into.filled().len(),
                };
                if n == 0 {
                    return Err(Fault::Source(None));
                }
                let body = self
                    .reader
                    .feed(&self.buf[..n])
                    .map_err(|_| Fault::Framing)?;
                self.extra |= body < n;
                (self.out, self.end) = (0, body);
                moved = true;
            }
            if self.out < self.end {
                match Pin::new(&mut *to).poll_write(cx, &self.buf[self.out..self.end]) {
                    Poll::Pending => return Ok(moved),
                    Poll::Ready(Err(e)) => return Err(Fault::Destination(e)),
                    Poll::Ready(Ok(0)) => {
                        return Err(Fault::Destination(io::ErrorKind::WriteZero.into()))
                    }
                    Poll::Ready(Ok(n)) => {
                        self.out += n;
                        self.moved += n as u64;
                        moved = true;
                    }
                }
                continue;
            }
            // All written, and the body is at its end: flush (TLS holds records back).
            return match Pin::new(&mut *to).poll_flush(cx) {
                Poll::Pending => Ok(moved),
                Poll::Ready(Err(e)) => Err(Fault::Destination(e)),
                Poll::Ready(Ok(())) => {
                    self.done = true;
                    Ok(true)
                }
            };
        }
    }
}

/// Sends the response head and the first body bytes, then moves both bodies as they come until
/// the response has ended. `head_sent` tells, on error, whether the client may have received
/// anything.
pub(super) async fn duplex(d: Duplex<'_>, head_sent: &mut bool) -> Result<Ended, Error> {
    let Duplex {
        client,
        upstream,
        request,
        buf,
        head_len,
        head_out,
        mut response,
        idle_timeout,
        send_timeout,
    } = d;
    let first = &buf[head_len..];
    let body = response
        .feed(first)
        .map_err(|_| Error::new(Kind::BadResponse("invalid chunked framing")))?;
    let extra = body < first.len();
    *head_sent = true;
    write_head(client, head_out, &[&first[..body]], send_timeout)
        .await
        .map_err(|_| Error::client_write())?;
    let mut down = Direction::new(response);
    down.done = down.reader.is_done();
    down.extra = extra;
    down.moved = body as u64;
    // The request's tracker goes back to the caller at the end.
    let mut up = Direction::new(std::mem::replace(request, BodyReader::Empty));
    let mut idle = pin!(tokio::time::sleep(idle_timeout));
    let result = poll_fn(|cx| {
        poll_both(
            cx,
            &mut up,
            &mut down,
            client,
            upstream,
            idle.as_mut(),
            idle_timeout,
        )
    })
    .await;
    *request = std::mem::replace(&mut up.reader, BodyReader::Empty);
    result?;
    Ok(Ended {
        relayed: Relayed {
            body_bytes: down.moved,
            clean_end: !down.extra,
        },
        request_whole: up.done,
    })
}

/// One turn of both directions: ready when the response has ended, or with the first failure.
fn poll_both(
    cx: &mut Context<'_>,
    up: &mut Direction,
    down: &mut Direction,
    client: &mut Stream,
    upstream: &mut Stream,
    mut idle: Pin<&mut Sleep>,
    idle_timeout: Duration,
) -> Poll<Result<(), Error>> {
    loop {
        let mut moved = false;
        if !up.done {
            match up.poll_move(cx, client, upstream) {
                Ok(m) => moved |= m,
                Err(Fault::Source(None)) => {
                    return Poll::Ready(Err(Error::new(Kind::ClientClosed)))
                }
                Err(Fault::Source(Some(e))) => return Poll::Ready(Err(Error::client_read(&e))),
                Err(Fault::Framing) => {
                    return Poll::Ready(Err(Error::new(Kind::BadRequest("invalid chunked body"))))
                }
                Err(Fault::Destination(e)) => return Poll::Ready(Err(Error::upstream_io(&e))),
            }
        }
        let turn = if down.done {
            Ok(false)
        } else {
            down.poll_move(cx, upstream, client)
        };
        match turn {
            Ok(m) => moved |= m,
            Err(Fault::Source(None)) => return Poll::Ready(Err(Error::new(Kind::UpstreamFailed))),
            Err(Fault::Source(Some(e))) => return Poll::Ready(Err(Error::upstream_io(&e))),
            Err(Fault::Framing) => {
                let bad = Kind::BadResponse("invalid chunked framing");
                return Poll::Ready(Err(Error::new(bad)));
            }
            Err(Fault::Destination(_)) => return Poll::Ready(Err(Error::client_write())),
        }
        if down.done {
            // The response is whole; what the client still sends is not read.
            return Poll::Ready(Ok(()));
        }
        if moved {
            idle.as_mut().reset(Instant::now() + idle_timeout);
            continue;
        }
        if idle.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Error::new(Kind::UpstreamTimeout)));
        }
        return Poll::Pending;
    }
}
