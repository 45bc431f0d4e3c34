//! Reads and writes with the proxy's rules: as few syscalls as possible (one vectored write for
//! a head and its body), buffers that grow only up to a bound, and a timeout on every wait.

use std::io::{self, IoSlice};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    while !slices.is_empty() {
        let n = match tokio::time::timeout(timeout, stream.write_vectored(slices)).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        };
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
    match tokio::time::timeout(timeout, stream.flush()).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

async fn write_one(stream: &mut Stream, mut buf: &[u8], timeout: Duration) -> io::Result<()> {
    while !buf.is_empty() {
        let n = match tokio::time::timeout(timeout, stream.write(buf)).await {
            Ok(r) => r?,
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
        };
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
    match tokio::time::timeout(timeout, stream.read_buf(buf)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}
