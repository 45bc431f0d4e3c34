//! [`Stream`]: one client or upstream connection, whatever carries it: a TCP socket, or a unix
//! socket to an upstream, TLS, or one HTTP/2 stream read and written as HTTP/1.1. It implements tokio's `AsyncRead`/`AsyncWrite`, so
//! the request path is written once, and exposes the raw TCP socket where splice(2) and
//! readiness checks need it. Tests add a scripted in-memory variant.

use std::io;
use std::io::Write;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::tls_socket::TlsSocket;

/// A connection to a client or an upstream server.
#[derive(Debug)]
pub enum Stream {
    /// A plain TCP connection.
    Tcp(TcpStream),
    /// A plain TCP connection read and written through the worker's io_uring (boxed: it is
    /// made once per connection and keeps its waits beside the socket).
    Uring(Box<crate::uring::stream::UringSocket>),
    /// A unix stream socket (upstreams only).
    Unix(UnixStream),
    /// A TLS connection from a client (boxed: its state is large, and rare on the fast path).
    TlsServer(Box<tokio_rustls::server::TlsStream<super::tls_socket::TlsSocket>>),
    /// A TLS connection to an upstream server.
    TlsClient(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// One HTTP/2 stream of a client connection: its request and response heads are values,
    /// its bodies bytes.
    H2(Box<crate::http2::stream::H2Stream>),
    /// One HTTP/2 stream to an upstream server: its request and response heads are values,
    /// its bodies bytes.
    H2Upstream(Box<crate::http2::upstream::H2Upstream>),
    /// A scripted connection for unit tests of the relay code.
    #[cfg(test)]
    Mock(Box<tokio_test::io::Mock>),
}

/// nginx's name of a TLS version (`$ssl_protocol`).
pub fn version_name(v: Option<rustls::ProtocolVersion>) -> &'static str {
    match v {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        Some(_) => "TLS",
        None => "",
    }
}

impl From<crate::uring::accept::Accepted> for Stream {
    fn from(accepted: crate::uring::accept::Accepted) -> Stream {
        match accepted {
            crate::uring::accept::Accepted::Ring(s) => Stream::Uring(Box::new(s)),
            crate::uring::accept::Accepted::Epoll(s) => Stream::Tcp(s),
        }
    }
}

impl Stream {
    /// A plain TCP connection on this worker's ring if it runs one, else on tokio's epoll. An
    /// error (the socket could not leave epoll) loses the connection.
    pub fn adopt(tcp: TcpStream) -> io::Result<Stream> {
        crate::uring::adopt(tcp).map(Stream::from)
    }

    /// A plain TCP or unix connection moved onto this worker's ring if it runs one
    /// ([`Stream::adopt`]); any other stream as it is.
    pub fn onto_ring(self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(tcp) => Stream::adopt(tcp),
            Stream::Unix(unix) => match crate::uring::adopt_unix(unix)? {
                Ok(ring) => Ok(Stream::Uring(Box::new(ring))),
                Err(unix) => Ok(Stream::Unix(unix)),
            },
            other => Ok(other),
        }
    }

    /// The TCP socket underneath for splice(2) and sendfile(2), on whichever I/O path it is
    /// (`None` for TLS, unix sockets, HTTP/2 streams, and a ring connection holding bytes it
    /// read ahead, which a splice from the socket would pass over).
    pub fn splice_end(&self) -> Option<super::splice::SocketEnd<'_>> {
        match self {
            Stream::Tcp(s) => Some(super::splice::SocketEnd::Epoll(s)),
            Stream::Uring(s) if s.is_tcp() && !s.holds_bytes() => {
                Some(super::splice::SocketEnd::Ring(s))
            }
            _ => None,
        }
    }

    /// Whether what is written waits in the proxy's own memory until the peer takes it (an
    /// HTTP/2 client stream: its send buffer, drained as the client's window opens), rather
    /// than in a kernel socket buffer. The response relay then holds no more than that buffer
    /// itself, so the rest of a slow answer waits in the upstream's socket.
    pub fn queues_writes(&self) -> bool {
        matches!(self, Stream::H2(_))
    }

    /// Whether the request and response may flow at once (an HTTP/2 client stream): the
    /// upstream's answer may begin, and must be passed on, before the request body has ended
    /// (gRPC streaming). An HTTP/1.1 client's request is read whole before its answer.
    pub fn full_duplex(&self) -> bool {
        matches!(self, Stream::H2(_))
    }

    /// The protocol a client speaks, with the request's HTTP/1 minor version (nginx's
    /// `$server_protocol`).
    pub fn protocol_name(&self, minor_version: u8) -> &'static str {
        match (self, minor_version) {
            (Stream::H2(_), _) => "HTTP/2.0",
            (_, 0) => "HTTP/1.0",
            _ => "HTTP/1.1",
        }
    }

    /// Whether this is one stream of a multiplexed upstream connection, which its own pool
    /// keeps (`upstream::multiplex`): done with, it is dropped rather than pooled.
    pub fn is_multiplexed(&self) -> bool {
        matches!(self, Stream::H2Upstream(_))
    }

    /// The local address of a TCP connection, TLS or not.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Uring(s) => s.local_addr(),
            Stream::TlsServer(s) => s.get_ref().0.local_addr(),
            Stream::H2(s) => s.local,
            _ => None,
        }
    }

    /// Marks a client's HTTP/2 stream to be reset with HTTP/2 error `code` (an upstream's reset
    /// passed on, see `Error::reset`) instead of INTERNAL_ERROR; other streams close as they do.
    pub fn abort_with(&mut self, code: Option<u32>) {
        if let (Stream::H2(s), Some(code)) = (self, code) {
            s.abort_with(code);
        }
    }

    /// Sends a request given as a value on a stream that takes one (a stream to an HTTP/2
    /// server), instead of as bytes; what is written after it is its body.
    pub(crate) async fn send_request(
        &mut self,
        request: crate::http2::upstream::ConvertedRequest,
    ) -> io::Result<()> {
        let Stream::H2Upstream(s) = self else {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        };
        let mut request = Some(request);
        std::future::poll_fn(|cx| s.poll_send(cx, &mut request)).await
    }

    /// Hands a response head to a stream that takes one as a value (an HTTP/2 client
    /// stream, which sends it as HEADERS); false for a byte stream, which is written the
    /// head's text instead (see [`super::io::head_bytes`]).
    pub fn send_head(&mut self, head: &crate::message::ClientHead) -> io::Result<bool> {
        match self {
            Stream::H2(s) => s.send_head(head).map(|()| true),
            _ => Ok(false),
        }
    }

    /// Whether the final response head has arrived as a value (an HTTP/2 server's), to be
    /// taken with [`Stream::take_response`]; reads give nothing until it is.
    pub fn response_waiting(&self) -> bool {
        matches!(self, Stream::H2Upstream(s) if s.response_waiting())
    }

    /// The final response head, when the stream carries it as a value (an HTTP/2 server's)
    /// and it has arrived; reads then give its body.
    pub fn take_response(&mut self) -> Option<crate::http2::upstream::UpstreamResponse> {
        match self {
            Stream::H2Upstream(s) => s.take_response(),
            _ => None,
        }
    }

    /// The request a stream carries as a value (one HTTP/2 stream's), instead of as bytes to
    /// read and parse.
    pub fn carried_request(&self) -> Option<&crate::http2::request::H2Request> {
        match self {
            Stream::H2(s) => Some(s.request()),
            _ => None,
        }
    }

    /// The certificate a TLS client sent (verified in the handshake), read for the
    /// `$ssl_client_*` variables; `None` when it sent none.
    pub fn client_cert(&self) -> Option<std::rc::Rc<crate::tls::client_auth::ClientCert>> {
        match self {
            Stream::TlsServer(s) => {
                let chain = s.get_ref().1.peer_certificates()?;
                Some(std::rc::Rc::new(crate::tls::client_auth::ClientCert::of(
                    Some(chain),
                )))
            }
            Stream::H2(s) => s.client_cert.clone(),
            _ => None,
        }
    }

    /// The server name (SNI) a TLS client asked for, if any.
    pub fn tls_server_name(&self) -> Option<&str> {
        match self {
            Stream::TlsServer(s) => s.get_ref().1.server_name(),
            Stream::H2(s) => s.tls_sni.as_deref(),
            _ => None,
        }
    }

    /// The TLS version of a client connection over TLS (nginx's names), else `""`.
    pub fn tls_version(&self) -> &'static str {
        match self {
            Stream::TlsServer(s) => version_name(s.get_ref().1.protocol_version()),
            Stream::H2(s) => s.tls_version,
            _ => "",
        }
    }

    /// Waits until the stream may have bytes to read (or has closed).
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.readable().await,
            Stream::Uring(s) => s.readable().await,
            Stream::Unix(s) => s.readable().await,
            // Decrypted bytes (or the peer's close_notify) may already wait inside rustls;
            // else wait on the socket, so an idle TLS connection holds no read buffer.
            Stream::TlsServer(s) => {
                let (socket, conn) = s.get_ref();
                if conn.wants_read() {
                    socket.readable().await?;
                }
                Ok(())
            }
            Stream::TlsClient(s) => {
                let (tcp, conn) = s.get_ref();
                if conn.wants_read() {
                    tcp.readable().await?;
                }
                Ok(())
            }
            // The request is in hand as soon as the stream exists.
            Stream::H2(_) | Stream::H2Upstream(_) => Ok(()),
            #[cfg(test)]
            Stream::Mock(_) => Ok(()),
        }
    }

    /// True if bytes are known to be waiting, so a read now would not block. Costs no syscall.
    pub fn ready_now(&self) -> bool {
        match self {
            Stream::Tcp(s) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                s.poll_read_ready(&mut cx).is_ready()
            }
            Stream::Uring(s) => s.ready_now(),
            Stream::Unix(s) => {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                s.poll_read_ready(&mut cx).is_ready()
            }
            Stream::TlsServer(_) | Stream::TlsClient(_) | Stream::H2(_) | Stream::H2Upstream(_) => {
                false
            }
            #[cfg(test)]
            Stream::Mock(_) => false,
        }
    }

    /// Reads without waiting: `WouldBlock` when nothing is there.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Uring(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
            Stream::TlsServer(_) | Stream::TlsClient(_) | Stream::H2(_) | Stream::H2Upstream(_) => {
                Err(io::ErrorKind::WouldBlock.into())
            }
            #[cfg(test)]
            Stream::Mock(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Waits until a write of up to `want` bytes would be taken, at least in part, into the
    /// proxy's own queue without waiting ([`Stream::queues_writes`]: an HTTP/2 client stream,
    /// whose queue drains as the client's window opens), and gives how many bytes it would
    /// take; `want` at once for every other stream, whose writes wait in the kernel instead.
    pub async fn room(&self, want: usize) -> io::Result<usize> {
        match self {
            Stream::H2(s) => std::future::poll_fn(|cx| s.poll_room(cx, want)).await,
            _ => Ok(want),
        }
    }

    /// Caps what rustls holds encrypted before it must go to the socket (a TLS client
    /// connection only; nothing for the others).
    pub fn limit_tls_buffer(&mut self, limit: usize) {
        if let Stream::TlsServer(tls) = self {
            tls.get_mut().1.set_buffer_limit(Some(limit));
        }
    }

    /// Writes `out[*sent..]` out, `sent` counting the progress across polls (over TLS: handed
    /// to rustls, then its records written to the socket).
    pub fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        out: &[u8],
        sent: &mut usize,
    ) -> Poll<io::Result<()>> {
        match self {
            Stream::TlsServer(tls) => {
                let (tcp, conn) = tls.get_mut();
                ready!(push_plaintext(conn, tcp, cx, out, sent))?;
                poll_write_tls(conn, tcp, cx)
            }
            stream => poll_write_plain(stream, cx, out, sent),
        }
    }

    /// Whether [`Stream::poll_encrypt_after`] applies: a TLS client connection, whose writes
    /// rustls copies once while encrypting, so large ones need no gathering first.
    pub fn encrypts_in_place(&self) -> bool {
        matches!(self, Stream::TlsServer(_))
    }

    /// Over TLS ([`Stream::encrypts_in_place`]): hands `gathered` (from its `sent` on) to
    /// rustls and empties it, then as much of `bufs` as rustls takes; gives how many bytes of
    /// `bufs` that was. Other streams take nothing here.
    pub fn poll_encrypt_after(
        &mut self,
        cx: &mut Context<'_>,
        (gathered, sent): (&mut Vec<u8>, &mut usize),
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Stream::TlsServer(tls) = self else {
            return Poll::Ready(Ok(0));
        };
        let (tcp, conn) = tls.get_mut();
        ready!(push_plaintext(conn, tcp, cx, gathered, sent))?;
        gathered.clear();
        *sent = 0;
        loop {
            let n = conn.writer().write_vectored(bufs)?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
            ready!(poll_write_tls(conn, tcp, cx))?;
        }
    }

    /// Resolves when the peer has closed its sending side (EOF) or reset the connection (a
    /// failed peek). Bytes waiting to be read (pipelined requests) are not a hang-up; this
    /// never resolves on a stream that cannot tell.
    pub async fn hangup(&self) {
        if let Stream::H2(s) = self {
            // An HTTP/2 client leaves a request by resetting its stream.
            return std::future::poll_fn(|cx| s.poll_reset(cx)).await;
        }
        match self {
            Stream::Uring(s) => return s.hangup().await,
            // Only a reset is seen under TLS: a client's close_notify is bytes to read.
            Stream::TlsServer(s) => return s.get_ref().0.hangup().await,
            Stream::Tcp(s) if peer_gone(s).await => return,
            _ => {}
        }
        std::future::pending::<()>().await;
    }

    /// Arms what tells, without a system call, that an idle pooled connection was closed by
    /// its peer (the ring's idle watch; tokio's epoll registration already does it).
    pub fn watch_idle(&self) {
        if let Stream::Uring(s) = self {
            s.watch_idle();
        }
    }
}

/// Waits until the socket is readable, then peeks: true when the peer closed (EOF) or reset
/// the connection, false when bytes wait to be read (a pipelined request is no hang-up). The
/// wait is tokio's readiness, so it costs no system call until the socket has an event.
pub(super) async fn peer_gone(s: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    loop {
        match s.peek(&mut probe).await {
            Ok(n) => return n == 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Stream {
        Stream::Tcp(s)
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Uring(s) => s.poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::TlsServer(s) => poll_read_tls(s, cx, buf),
            Stream::TlsClient(s) => Pin::new(s).poll_read(cx, buf),
            Stream::H2(s) => Pin::new(s).poll_read(cx, buf),
            Stream::H2Upstream(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(test)]
            Stream::Mock(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Uring(s) => s.poll_write(cx, &[io::IoSlice::new(buf)]),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsServer(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsClient(s) => Pin::new(s).poll_write(cx, buf),
            Stream::H2(s) => Pin::new(s).poll_write(cx, buf),
            Stream::H2Upstream(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(test)]
            Stream::Mock(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Uring(s) => s.poll_write(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::TlsServer(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::TlsClient(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::H2(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::H2Upstream(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            #[cfg(test)]
            Stream::Mock(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Uring(_) => true,
            Stream::Unix(s) => s.is_write_vectored(),
            Stream::TlsServer(s) => s.is_write_vectored(),
            Stream::TlsClient(s) => s.is_write_vectored(),
            Stream::H2(s) => s.is_write_vectored(),
            Stream::H2Upstream(s) => s.is_write_vectored(),
            #[cfg(test)]
            Stream::Mock(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Uring(_) => Poll::Ready(Ok(())),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsServer(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsClient(s) => Pin::new(s).poll_flush(cx),
            Stream::H2(s) => Pin::new(s).poll_flush(cx),
            Stream::H2Upstream(s) => Pin::new(s).poll_flush(cx),
            #[cfg(test)]
            Stream::Mock(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Uring(s) => Poll::Ready(s.shutdown_write()),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsServer(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsClient(s) => Pin::new(s).poll_shutdown(cx),
            Stream::H2(s) => Pin::new(s).poll_shutdown(cx),
            Stream::H2Upstream(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(test)]
            Stream::Mock(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// One read of a client's TLS connection: the plaintext in hand, or what one read of the
/// socket brings. (tokio-rustls's own read goes on reading the socket until it would block:
/// on a keep-alive connection, a failed `recv` per request.)
fn poll_read_tls(
    tls: &mut tokio_rustls::server::TlsStream<TlsSocket>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    use tokio::io::AsyncBufRead;
    let mut tls = Pin::new(tls);
    let data = ready!(tls.as_mut().poll_fill_buf(cx))?;
    let n = data.len().min(buf.remaining());
    buf.put_slice(&data[..n]);
    tls.consume(n);
    Poll::Ready(Ok(()))
}

/// Hands `out[*sent..]` to rustls (encrypting it), writing records to the socket when its
/// buffer is full.
fn push_plaintext(
    conn: &mut rustls::ServerConnection,
    tcp: &mut TlsSocket,
    cx: &mut Context<'_>,
    out: &[u8],
    sent: &mut usize,
) -> Poll<io::Result<()>> {
    while *sent < out.len() {
        let n = conn.writer().write(&out[*sent..])?;
        if n == 0 {
            ready!(poll_write_tls(conn, tcp, cx))?;
        }
        *sent += n;
    }
    Poll::Ready(Ok(()))
}

/// Writes the TLS records rustls holds to the socket, all at once when it takes them.
fn poll_write_tls(
    conn: &mut rustls::ServerConnection,
    tcp: &mut TlsSocket,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    while conn.wants_write() {
        match conn.write_tls(&mut SocketWriter { tcp, cx }) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
    Poll::Ready(Ok(()))
}

/// Writes `out[*sent..]` to a plain stream.
fn poll_write_plain(
    stream: &mut Stream,
    cx: &mut Context<'_>,
    out: &[u8],
    sent: &mut usize,
) -> Poll<io::Result<()>> {
    while *sent < out.len() {
        match ready!(Pin::new(&mut *stream).poll_write(cx, &out[*sent..]))? {
            0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            n => *sent += n,
        }
    }
    Poll::Ready(Ok(()))
}

/// The socket as the blocking writer rustls writes records to; a full socket is `WouldBlock`
/// (with the task registered to be woken when it drains).
struct SocketWriter<'a, 'b> {
    tcp: &'a mut TlsSocket,
    cx: &'a mut Context<'b>,
}

impl Write for SocketWriter<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut *self.tcp).poll_write(self.cx, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.tcp).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
