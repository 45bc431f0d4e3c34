//! Reads and writes with the proxy's rules: as few syscalls as possible (one vectored write for
//! a head and its body), buffers that grow only up to a bound, and a timeout on every wait.
//! A timeout costs nothing when the operation completes at once: the clock is read and a timer
//! armed only when it has to wait ([`within`]).

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::Stream;
use crate::buffers::MIN_BUFFER;

/// Writes all `parts` with as few syscalls as possible (one `writev` when the socket takes it
/// all), failing if a write makes no progress within `timeout`.
pub async fn write_all(stream: &mut Stream, parts: &[&[u8]], timeout: Duration) -> io::Result<()> {
    let mut iov = [IoSlice::new(&[]); 6];
    let mut count = 0;
    for p in parts.iter().filter(|p| !p.is_empty()) {
        iov[count] = IoSlice::new(p);
        count += 1;
    }
    if count == 1 {
        // One buffer: send(2) skips the iovec import and the VFS layer writev(2) goes through.
        return write_one(
            stream,
            parts.iter().find(|p| !p.is_empty()).unwrap_or(&&[][..]),
            timeout,
        )
        .await;
    }
    let mut slices = &mut iov[..count];
    match stream {
        Stream::Tcp(tcp) => return writev_tcp(tcp, slices, timeout).await,
        Stream::Uring(ring) => return ring.send_all(slices, timeout).await,
        _ => {}
    }
    while !slices.is_empty() {
        let n = within(timeout, stream.write_vectored(slices)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    flush_tls(stream, timeout).await
}

/// Pushes out TLS records rustls still holds (a plain socket has nothing to flush).
async fn flush_tls(stream: &mut Stream, timeout: Duration) -> io::Result<()> {
    if !matches!(stream, Stream::TlsServer(_) | Stream::TlsClient(_)) {
        return Ok(());
    }
    within(timeout, stream.flush()).await
}

async fn write_one(stream: &mut Stream, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
    match stream {
        Stream::Tcp(tcp) => return send_tcp(tcp, buf, timeout).await,
        Stream::Uring(ring) => return ring.send_all(&mut [IoSlice::new(buf)], timeout).await,
        _ => {}
    }
    while !buf.is_empty() {
        let n = within(timeout, stream.write(buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    flush_tls(stream, timeout).await
}

/// Reads into the spare capacity of `buf`, growing it first if it has less than 4 KiB spare
/// (never beyond `max`). `Ok(0)` is end of stream; a wait longer than `timeout` is `TimedOut`.
pub async fn read_some(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    max: usize,
    timeout: Duration,
) -> io::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        let grow = buf
            .len()
            .max(MIN_BUFFER)
            .min(max.saturating_sub(buf.len()))
            .max(4096);
        buf.reserve(grow);
    }
    match stream {
        Stream::Tcp(tcp) => return recv_tcp(tcp, buf, timeout).await,
        Stream::Uring(ring) => return ring.recv(buf, timeout).await,
        _ => {}
    }
    within(timeout, stream.read_buf(buf)).await
}

// Plain TCP sockets are read and written by direct system calls (rustix), not through glibc's
// send and recv: those are thread-cancellation points, and their wrappers cost about 2% of
// a small request's CPU. tokio still tracks readiness: `try_io` skips the call while the
// socket is known not ready and clears readiness when the closure says `WouldBlock`. As
// tokio's own reads and writes do, a short read or write also clears it (the socket buffer
// was drained or filled), so the next call waits for the kernel's word instead of making a
// system call that would fail; the closure reports those as `WouldBlock` and hands the count
// out beside.

/// Runs one system call `op` on `tcp` under tokio's readiness for `interest`: `Ok(None)` when
/// the socket is not ready; a count short of `asked` clears readiness.
fn tcp_call(
    tcp: &TcpStream,
    interest: Interest,
    asked: usize,
    op: impl FnOnce() -> rustix::io::Result<usize>,
) -> io::Result<Option<usize>> {
    let mut done = None;
    let call = || {
        let n = op()?;
        done = Some(n);
        if n > 0 && n < asked {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    };
    match tcp.try_io(interest, call) {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
        _ => Ok(done),
    }
}

/// Reads once into the spare capacity of `buf` (which has some), waiting up to `timeout`.
async fn recv_tcp(tcp: &TcpStream, buf: &mut Vec<u8>, timeout: Duration) -> io::Result<usize> {
    loop {
        let room = buf.capacity() - buf.len();
        let recv = || {
            let spare = rustix::buffer::spare_capacity(buf);
            Ok(rustix::net::recv(tcp, spare, RecvFlags::empty())?.0)
        };
        match tcp_call(tcp, Interest::READABLE, room, recv)? {
            Some(n) => return Ok(n),
            None => within(timeout, tcp.readable()).await?,
        }
    }
}

/// Waits until a plain TCP socket is readable, as far as tokio knows (a short read clears its
/// readiness, so after a whole response has been read this waits for the kernel's word), so
/// that a large buffer is taken only when bytes are there to fill it. Other streams: at once.
pub async fn wait_readable(stream: &Stream, timeout: Duration) -> io::Result<()> {
    match stream {
        Stream::Tcp(tcp) => within(timeout, tcp.readable()).await,
        _ => Ok(()),
    }
}

/// Sends all of `buf`; fails if the socket takes nothing for `timeout`.
async fn send_tcp(tcp: &TcpStream, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
    while !buf.is_empty() {
        let send = || rustix::net::send(tcp, buf, SendFlags::NOSIGNAL);
        match tcp_call(tcp, Interest::WRITABLE, buf.len(), send)? {
            Some(0) => return Err(io::ErrorKind::WriteZero.into()),
            Some(n) => buf = &buf[n..],
            None => within(timeout, tcp.writable()).await?,
        }
    }
    Ok(())
}

/// Sends all of `slices` with `writev`; fails if the socket takes nothing for `timeout`.
async fn writev_tcp(
    tcp: &TcpStream,
    mut slices: &mut [IoSlice<'_>],
    timeout: Duration,
) -> io::Result<()> {
    while !slices.is_empty() {
        let total = slices.iter().map(|s| s.len()).sum();
        let writev = || rustix::io::writev(tcp, slices);
        match tcp_call(tcp, Interest::WRITABLE, total, writev)? {
            Some(0) => return Err(io::ErrorKind::WriteZero.into()),
            Some(n) => IoSlice::advance_slices(&mut slices, n),
            None => within(timeout, tcp.writable()).await?,
        }
    }
    Ok(())
}

/// Runs `op`, failing with `TimedOut` if it waits longer than `timeout`. The first poll goes
/// without a timer: most reads and writes of a busy proxy complete at once, and those then
/// cost neither a clock read nor a timer's registration and removal.
pub async fn within<T>(
    timeout: Duration,
    op: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let mut op = pin!(op);
    let first = std::future::poll_fn(|cx| Poll::Ready(op.as_mut().poll(cx))).await;
    if let Poll::Ready(result) = first {
        return result;
    }
    match tokio::time::timeout(timeout, op).await {
        Ok(result) => result,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}
