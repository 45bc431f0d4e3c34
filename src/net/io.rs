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
use crate::message::ClientHead;

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

/// The bytes that carry `head` on `stream`, to be written before its body: its HTTP/1.1
/// text, or nothing for a stream that takes a head as a value (an HTTP/2 client stream),
/// which then has it already.
pub fn head_bytes<'h>(stream: &mut Stream, head: &'h ClientHead) -> io::Result<&'h [u8]> {
    if stream.send_head(head)? {
        Ok(&[])
    } else {
        Ok(&head.text)
    }
}

/// Writes `head` and then the `body` parts (at most five) as [`write_all`] does: one write
/// for the head and the body's first bytes on an HTTP/1.1 connection.
pub async fn write_head(
    stream: &mut Stream,
    head: &ClientHead,
    body: &[&[u8]],
    timeout: Duration,
) -> io::Result<()> {
    let mut parts: [&[u8]; 6] = [&[]; 6];
    parts[0] = head_bytes(stream, head)?;
    parts[1..=body.len()].copy_from_slice(body);
    write_all(stream, &parts[..=body.len()], timeout).await
}

/// Sends `100 Continue`, the interim answer to `Expect: 100-continue` before a body is read.
pub async fn write_continue(stream: &mut Stream, timeout: Duration) -> io::Result<()> {
    write_head(stream, &ClientHead::interim(100), &[], timeout).await
}

/// Writes `before`, `body[range]` and `after` (a head, a body, a chunk's end) as
/// [`write_all`] does. On the io_uring path a large write lends `body` itself to the kernel
/// (see [`crate::uring::stream::UringSocket::send_all_around`]): `body` may then be left empty
/// when the write fails.
pub async fn write_all_around(
    stream: &mut Stream,
    before: [&[u8]; 2],
    body: &mut Vec<u8>,
    range: std::ops::Range<usize>,
    after: [&[u8]; 2],
    timeout: Duration,
) -> io::Result<()> {
    if let Stream::Uring(ring) = stream {
        return ring
            .send_all_around(before, body, range, after, timeout)
            .await;
    }
    let parts = [before[0], before[1], &body[range], after[0], after[1]];
    write_all(stream, &parts, timeout).await
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

/// Reads into the spare capacity of `buf`, growing it first if it has less than 4 KiB spare,
/// and never past `max`: the buffer's length after the read is at most `max` whatever its
/// capacity. `Ok(0)` is end of stream; a wait longer than `timeout` is `TimedOut`; a buffer
/// already holding `max` bytes is `InvalidInput` (there is no room to read into).
pub async fn read_some(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    max: usize,
    timeout: Duration,
) -> io::Result<usize> {
    let room = max.saturating_sub(buf.len());
    if room == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "read buffer full",
        ));
    }
    let spare = buf.capacity() - buf.len();
    if spare < 4096 && spare < room {
        // Exact growth: `reserve` may double the capacity, past `max`.
        let grow = buf.len().max(MIN_BUFFER).min(room);
        buf.reserve_exact(grow);
    }
    if buf.capacity() - buf.len() > room {
        return read_bounded(stream, buf, room, timeout).await;
    }
    match stream {
        Stream::Tcp(tcp) => return recv_tcp(tcp, buf, timeout).await,
        Stream::Uring(ring) => return ring.recv(buf, timeout).await,
        _ => {}
    }
    within(timeout, stream.read_buf(buf)).await
}

/// A read of at most `room` bytes into a buffer with more spare capacity than that (a large
/// pooled buffer reading a head, say).
async fn read_bounded(
    stream: &mut Stream,
    buf: &mut Vec<u8>,
    room: usize,
    timeout: Duration,
) -> io::Result<usize> {
    match stream {
        Stream::Tcp(tcp) => loop {
            let mut limited = bytes::BufMut::limit(&mut *buf, room);
            match tcp.try_read_buf(&mut limited) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    within(timeout, tcp.readable()).await?;
                }
                result => return result,
            }
        },
        Stream::Uring(ring) => {
            // The ring reads into all of a buffer's spare capacity: read into one of `room`
            // (a vector's exact capacity for bytes) and copy.
            let mut part = Vec::with_capacity(room);
            let n = ring.recv(&mut part, timeout).await?;
            buf.extend_from_slice(&part);
            Ok(n)
        }
        _ => {
            let mut limited = (&mut *stream).take(room as u64);
            within(timeout, limited.read_buf(buf)).await
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// The proxy's side of a connection whose peer writes 1 MiB (and stays open).
    async fn pair() -> Stream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (ours, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let _ = peer.write_all(&vec![b'x'; 1 << 20]).await;
            std::future::pending::<()>().await;
        });
        // Wait until bytes are there to read.
        ours.readable().await.unwrap();
        Stream::Tcp(ours)
    }

    fn run(test: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(test);
    }

    #[test]
    fn a_read_never_passes_the_limit() {
        run(async {
            let mut ours = pair().await;
            let t = Duration::from_secs(10);
            // A large buffer (a pooled one) reading a small head: the limit, not the capacity.
            let mut buf = Vec::with_capacity(256 * 1024);
            let n = read_some(&mut ours, &mut buf, 1000, t).await.unwrap();
            assert!(n > 0 && buf.len() <= 1000, "read {} of 1000", buf.len());
            // Growing a full buffer: exact, never past the limit (a doubling would reach 384 KiB).
            let max = 256 * 1024;
            let mut buf = vec![0u8; 192 * 1024];
            buf.shrink_to_fit();
            while buf.len() < max {
                read_some(&mut ours, &mut buf, max, t).await.unwrap();
                assert!(
                    buf.len() <= max && buf.capacity() <= max,
                    "{}",
                    buf.capacity()
                );
            }
            let full = read_some(&mut ours, &mut buf, max, t).await.unwrap_err();
            assert_eq!(full.kind(), io::ErrorKind::InvalidInput);
        });
    }

    #[test]
    fn a_read_on_other_streams_never_passes_the_limit() {
        run(async {
            let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
            b.write_all(&[b'y'; 64 * 1024]).await.unwrap();
            let mut ours = Stream::Unix(a);
            let mut buf = Vec::with_capacity(64 * 1024);
            let t = Duration::from_secs(10);
            let n = read_some(&mut ours, &mut buf, 100, t).await.unwrap();
            assert!(n > 0 && buf.len() <= 100, "read {}", buf.len());
        });
    }
}
