//! File bodies onto a connection: the head with `MSG_MORE` (so it leaves in the same packet as
//! the first file bytes, what nginx's `tcp_nopush` does with two more syscalls), then
//! sendfile(2) from the page cache, never through user space. A file that turns out shorter
//! than announced is reported, so the caller closes the connection instead of sending a body
//! whose length disagrees with its head. Both I/O paths send this way (the socket is
//! non-blocking on each; see [`SocketEnd`]). Streams without a socket underneath (TLS, HTTP/2)
//! get the same contract by reading and writing. On the io_uring path a small body (up to
//! [`SMALL_BODY`]) is read into memory and goes with the head in one send queued on the ring:
//! one pread(2) where the head's send(2) and sendfile(2) would be two syscalls of their own.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use rustix::fs::sendfile;
use rustix::net::{send, SendFlags};
use tokio::io::Interest;

use super::io::write_all;
use super::splice::SocketEnd;
use super::Stream;

/// Why a file body was not sent whole.
#[derive(Debug)]
pub enum SendFileError {
    /// The file ended before the announced length (it was truncated while being sent).
    Truncated,
    /// Writing to the client failed or timed out.
    Client(io::Error),
}

/// The largest file body the io_uring path reads and sends with its head (see the module's
/// comment); larger ones go by sendfile(2).
pub const SMALL_BODY: u64 = 16 * 1024;

/// Sends `head`, then `len` bytes of `file` from `offset`. Returns the bytes that went by
/// sendfile(2).
pub async fn send_file(
    stream: &mut Stream,
    head: &[u8],
    file: &File,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> Result<u64, SendFileError> {
    if len <= SMALL_BODY && matches!(stream, Stream::Uring(_)) {
        let mut body = vec![0u8; len as usize];
        // A file shorter than announced goes the usual way below, which reports it after the
        // head, as the callers expect.
        if read_exact_at(file, &mut body, offset) {
            write_all(stream, &[head, &body], timeout)
                .await
                .map_err(SendFileError::Client)?;
            return Ok(0);
        }
    }
    match stream.splice_end() {
        Some(tcp) => {
            send_head(tcp, head, len > 0, timeout)
                .await
                .map_err(SendFileError::Client)?;
            send_body(tcp, file, offset, len, timeout).await?;
            Ok(len)
        }
        None => {
            copy_body(stream, head, file, offset, len, timeout).await?;
            Ok(0)
        }
    }
}

async fn send_head(
    tcp: SocketEnd<'_>,
    head: &[u8],
    more: bool,
    timeout: Duration,
) -> io::Result<()> {
    let flags = if more {
        SendFlags::MORE | SendFlags::NOSIGNAL
    } else {
        SendFlags::NOSIGNAL
    };
    let mut sent = 0;
    while sent < head.len() {
        match tcp.attempt(Interest::WRITABLE, |fd| {
            send(fd, &head[sent..], flags).map_err(io::Error::from)
        }) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                tcp.ready(Interest::WRITABLE, timeout).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn send_body(
    tcp: SocketEnd<'_>,
    file: &File,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> Result<(), SendFileError> {
    let mut at = offset;
    let end = offset + len;
    while at < end {
        let want = (end - at).min(1 << 30) as usize;
        match tcp.attempt(Interest::WRITABLE, |fd| {
            sendfile(fd, file, Some(&mut at), want).map_err(io::Error::from)
        }) {
            Ok(0) => return Err(SendFileError::Truncated),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp
                .ready(Interest::WRITABLE, timeout)
                .await
                .map_err(SendFileError::Client)?,
            Err(e) => return Err(SendFileError::Client(e)),
        }
    }
    Ok(())
}

/// Fills `buf` from `file` at `offset`; false when the file ends first or cannot be read.
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> bool {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

async fn copy_body(
    stream: &mut Stream,
    head: &[u8],
    file: &File,
    offset: u64,
    len: u64,
    timeout: Duration,
) -> Result<(), SendFileError> {
    write_all(stream, &[head], timeout)
        .await
        .map_err(SendFileError::Client)?;
    let mut chunk = vec![0u8; len.min(64 * 1024) as usize];
    let mut at = offset;
    let end = offset + len;
    while at < end {
        let want = (end - at).min(chunk.len() as u64) as usize;
        let n = match file.read_at(&mut chunk[..want], at) {
            Ok(0) => return Err(SendFileError::Truncated),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(SendFileError::Truncated),
        };
        write_all(stream, &[&chunk[..n]], timeout)
            .await
            .map_err(SendFileError::Client)?;
        at += n as u64;
    }
    Ok(())
}
