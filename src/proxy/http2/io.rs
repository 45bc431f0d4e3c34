//! [`ConnectionIo`]: the bytes of one HTTP/2 client connection on their way between the socket
//! and `h2`. Inbound, they pass through the [`FrameGuard`] first. Outbound, `h2`'s writes only
//! gather in [`Shared`] (small ones as bytes; over TLS, large ones straight into rustls, which
//! copies them once while encrypting), and the connection's driver writes everything out once
//! per poll of the connection ([`Shared::poll_write_out`]): the frames of every stream that
//! answered since the last poll leave in one syscall (`h2` flushes after each DATA frame of more
//! than 256 bytes, which would otherwise cost a syscall, and a TLS record, per response).

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http2::guard::{FloodLimits, FrameGuard, Verdict, PREFACE, PREFACE_LEN};
use crate::net::Stream;

/// Outbound bytes gathered at most; beyond, a write waits for them to go out first.
const GATHER: usize = 64 * 1024;
/// A write at least this large goes into rustls as it is, not through the gathered bytes.
const DIRECT: usize = 4 * 1024;
/// Encrypted bytes rustls may hold before they must go to the socket.
const TLS_BUFFER: usize = 256 * 1024;

/// The socket and the outbound bytes not yet written, shared by `h2`'s side
/// ([`ConnectionIo`]) and the connection's driver.
pub(super) struct Shared {
    /// The client connection.
    pub(super) stream: Stream,
    out: Vec<u8>,
    sent: usize,
    /// A write failed: `h2` learns it at its next write or flush.
    failed: Option<io::ErrorKind>,
}

impl Shared {
    /// Shares `stream`.
    pub(super) fn new(mut stream: Stream) -> Rc<RefCell<Shared>> {
        stream.limit_tls_buffer(TLS_BUFFER);
        Rc::new(RefCell::new(Shared {
            stream,
            out: Vec::new(),
            sent: 0,
            failed: None,
        }))
    }

    /// Writes everything gathered out (Pending while the socket is full).
    pub(super) fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        match ready!(self.stream.poll_write_from(cx, &self.out, &mut self.sent)) {
            Ok(()) => {
                self.out.clear();
                self.sent = 0;
                Poll::Ready(Ok(()))
            }
            Err(e) => {
                self.failed = Some(e.kind());
                Poll::Ready(Err(e))
            }
        }
    }

    /// Gives back the gathering buffer's memory once everything went out: called when the
    /// connection has no stream, so an idle connection holds no buffer of its own.
    pub(super) fn release_idle(&mut self) {
        if self.out.is_empty() {
            self.out = Vec::new();
        }
    }

    /// Takes `bufs` (at most what fits), gathering or, over TLS, encrypting large ones at once.
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(kind) = self.failed {
            return Poll::Ready(Err(kind.into()));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= DIRECT && self.stream.encrypts_in_place() {
            // What was gathered goes first, to keep the order.
            let gathered = (&mut self.out, &mut self.sent);
            return self.stream.poll_encrypt_after(cx, gathered, bufs);
        }
        if self.out.len() >= GATHER {
            ready!(self.poll_write_out(cx))?;
        }
        if self.out.capacity() == 0 {
            self.out.reserve(GATHER);
        }
        let mut taken = 0;
        for b in bufs {
            let room = GATHER.saturating_sub(self.out.len()).max(1);
            let n = b.len().min(room);
            self.out.extend_from_slice(&b[..n]);
            taken += n;
            if n < b.len() {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }
}

/// One connection's socket as `h2` sees it. The preface, already read and checked by the
/// caller, is given again first. Once the guard finds abuse it records what in `verdict` and
/// nothing more is read, so the connection's driver can send GOAWAY(ENHANCE_YOUR_CALM).
pub(super) struct ConnectionIo {
    shared: Rc<RefCell<Shared>>,
    guard: FrameGuard,
    started: Instant,
    verdict: Rc<Cell<Option<&'static str>>>,
    /// Preface bytes still to give.
    replay: usize,
}

impl ConnectionIo {
    /// `h2`'s side of `shared`, whose preface has been read already.
    pub(super) fn new(
        shared: Rc<RefCell<Shared>>,
        limits: FloodLimits,
        verdict: Rc<Cell<Option<&'static str>>>,
    ) -> ConnectionIo {
        ConnectionIo {
            shared,
            guard: FrameGuard::new(limits),
            started: Instant::now(),
            verdict,
            replay: PREFACE_LEN,
        }
    }
}

impl AsyncRead for ConnectionIo {
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

impl AsyncWrite for ConnectionIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.shared
            .borrow_mut()
            .poll_take(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.shared.borrow_mut().poll_take(cx, bufs)
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
