//! [`TlsSocket`]: the TCP socket under a client's TLS connection. The handshake runs on
//! tokio's epoll (it peeks, and it is once per connection); then, on a worker that runs a ring,
//! the socket moves onto it ([`TlsSocket::onto_ring`]), so a keep-alive connection waits for
//! its next request with a ring receive into a provided buffer and holds no read buffer of its
//! own, as a plain one does, and its records go out in sends queued on the ring
//! (`UringSocket::poll_write_queued`), submitted with everything else of the loop's turn.
//! rustls sees bytes in and out either way.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::uring::stream::UringSocket;

/// The socket a client's TLS connection runs on.
#[derive(Debug)]
pub enum TlsSocket {
    /// On tokio's epoll (the handshake, and workers without a ring).
    Epoll(TcpStream),
    /// On the worker's ring.
    Ring(Box<UringSocket>),
    /// Only while [`TlsSocket::onto_ring`] moves it: the socket is taken out and put back.
    Moving,
}

fn moving() -> io::Error {
    io::Error::from(io::ErrorKind::NotConnected)
}

impl TlsSocket {
    /// Moves the socket onto this worker's ring if it runs one; left on epoll otherwise. An
    /// error (the socket could not leave epoll) loses the connection.
    pub fn onto_ring(&mut self) -> io::Result<()> {
        if let TlsSocket::Epoll(_) = self {
            let TlsSocket::Epoll(tcp) = std::mem::replace(self, TlsSocket::Moving) else {
                unreachable!("matched above");
            };
            *self = match crate::uring::adopt(tcp)? {
                crate::uring::accept::Accepted::Ring(s) => TlsSocket::Ring(Box::new(s)),
                crate::uring::accept::Accepted::Epoll(s) => TlsSocket::Epoll(s),
            };
        }
        Ok(())
    }

    /// Whether it runs on the ring.
    pub fn on_ring(&self) -> bool {
        matches!(self, TlsSocket::Ring(_))
    }

    /// Waits until the socket may have bytes to read (on the ring: until they are in hand).
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            TlsSocket::Epoll(s) => s.readable().await,
            TlsSocket::Ring(s) => s.readable().await,
            TlsSocket::Moving => Err(moving()),
        }
    }

    /// Its local address.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            TlsSocket::Epoll(s) => s.local_addr().ok(),
            TlsSocket::Ring(s) => s.local_addr(),
            TlsSocket::Moving => None,
        }
    }

    /// Resolves when the peer reset the connection or closed its side (see
    /// `Stream::hangup`); never while bytes wait to be read.
    pub async fn hangup(&self) {
        match self {
            TlsSocket::Epoll(s) if super::stream::peer_gone(s).await => return,
            TlsSocket::Epoll(_) => {}
            TlsSocket::Ring(s) => return s.hangup().await,
            TlsSocket::Moving => return,
        }
        std::future::pending::<()>().await;
    }
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Epoll(s) => Pin::new(s).poll_read(cx, buf),
            TlsSocket::Ring(s) => s.poll_read(cx, buf),
            TlsSocket::Moving => Poll::Ready(Err(moving())),
        }
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsSocket::Epoll(s) => Pin::new(s).poll_write(cx, buf),
            TlsSocket::Ring(s) => s.poll_write_queued(cx, &[io::IoSlice::new(buf)]),
            TlsSocket::Moving => Poll::Ready(Err(moving())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TlsSocket::Epoll(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            TlsSocket::Ring(s) => s.poll_write_queued(cx, bufs),
            TlsSocket::Moving => Poll::Ready(Err(moving())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Epoll(s) => Pin::new(s).poll_flush(cx),
            TlsSocket::Ring(s) => s.poll_sent(cx),
            TlsSocket::Moving => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TlsSocket::Epoll(s) => Pin::new(s).poll_shutdown(cx),
            TlsSocket::Ring(s) => {
                std::task::ready!(s.poll_sent(cx))?;
                Poll::Ready(s.shutdown_write())
            }
            TlsSocket::Moving => Poll::Ready(Ok(())),
        }
    }
}
