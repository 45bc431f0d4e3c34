//! [`ConnectionIo`]: the bytes of one HTTP/2 client connection on their way between the socket
//! (TCP or TLS) and `h2`. Inbound, they pass through the [`FrameGuard`] first. Outbound, `h2`'s
//! writes and flushes only gather bytes in [`Shared`]; the connection's driver writes them out
//! once per poll of the connection ([`Shared::poll_write_out`]), so the frames of every stream
//! that answered since the last poll leave in one TLS write and one syscall (`h2` flushes after
//! each DATA frame of more than 256 bytes, which would cost a syscall per response).

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::guard::{FrameGuard, Limits, Verdict, PREFACE, PREFACE_LEN};

/// Outbound bytes gathered at most; beyond, a write waits for them to go out first.
const GATHER: usize = 64 * 1024;

/// The socket and the outbound bytes not yet written, shared by `h2`'s side
/// ([`ConnectionIo`]) and the connection's driver.
pub struct Shared<T> {
    /// The socket.
    pub stream: T,
    out: Vec<u8>,
    sent: usize,
    /// A write failed: `h2` learns it at its next write or flush.
    failed: Option<io::ErrorKind>,
}

impl<T> Shared<T> {
    /// Shares `stream`.
    pub fn new(stream: T) -> Rc<RefCell<Shared<T>>> {
        Rc::new(RefCell::new(Shared {
            stream,
            out: Vec::new(),
            sent: 0,
            failed: None,
        }))
    }
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    /// Writes the gathered bytes out (Pending while the socket is full).
    pub fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        while self.sent < self.out.len() {
            let written = Pin::new(&mut self.stream).poll_write(cx, &self.out[self.sent..]);
            match ready!(written) {
                Ok(0) => return Poll::Ready(Err(self.fail(io::ErrorKind::WriteZero))),
                Ok(n) => self.sent += n,
                Err(e) => return Poll::Ready(Err(self.fail(e.kind()))),
            }
        }
        self.out.clear();
        self.sent = 0;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn fail(&mut self, kind: io::ErrorKind) -> io::Error {
        self.failed = Some(kind);
        kind.into()
    }
}

/// One connection's socket as `h2` sees it. The preface, already read and checked by the
/// caller, is given again first. Once the guard finds abuse it records what in `verdict` and
/// nothing more is read, so the connection's driver can send GOAWAY(ENHANCE_YOUR_CALM).
pub struct ConnectionIo<T> {
    shared: Rc<RefCell<Shared<T>>>,
    guard: FrameGuard,
    started: Instant,
    verdict: Rc<Cell<Option<&'static str>>>,
    /// Preface bytes still to give.
    replay: usize,
}

impl<T> ConnectionIo<T> {
    /// `h2`'s side of `shared`, whose preface has been read already.
    pub fn new(
        shared: Rc<RefCell<Shared<T>>>,
        limits: Limits,
        verdict: Rc<Cell<Option<&'static str>>>,
    ) -> ConnectionIo<T> {
        ConnectionIo {
            shared,
            guard: FrameGuard::new(limits),
            started: Instant::now(),
            verdict,
            replay: PREFACE_LEN,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ConnectionIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.verdict.get().is_some() {
            return Poll::Pending;
        }
        if this.replay > 0 {
            let from = PREFACE_LEN - this.replay;
            let n = this.replay.min(buf.remaining());
            buf.put_slice(&PREFACE[from..from + n]);
            this.replay -= n;
            this.guard.feed(&PREFACE[from..from + n], 0);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.shared.borrow_mut().stream).poll_read(cx, buf))?;
        let now_ms = this.started.elapsed().as_millis() as u64;
        if let Verdict::Abuse(what) = this.guard.feed(&buf.filled()[before..], now_ms) {
            // h2 gets only what came before the frame that crossed the limit.
            buf.set_filled(before + this.guard.innocent_len());
            this.verdict.set(Some(what));
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ConnectionIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = self.shared.borrow_mut();
        if shared.out.len() >= GATHER {
            ready!(shared.poll_write_out(cx))?;
        } else if let Some(kind) = shared.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if shared.out.capacity() == 0 {
            shared.out.reserve(GATHER);
        }
        let mut taken = 0;
        for b in bufs {
            let room = GATHER.saturating_sub(shared.out.len()).max(1);
            let n = b.len().min(room);
            shared.out.extend_from_slice(&b[..n]);
            taken += n;
            if n < b.len() {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Gathers only: the driver writes out after `h2`'s poll. A failed write shows here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.shared.borrow().failed {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = self.shared.borrow_mut();
        ready!(shared.poll_write_out(cx))?;
        Pin::new(&mut shared.stream).poll_shutdown(cx)
    }
}
