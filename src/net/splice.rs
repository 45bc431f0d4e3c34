//! Zero-copy body transfer: socket -> pipe -> socket with splice(2), so body bytes never enter
//! user space, on either I/O path ([`SocketEnd`]: the sockets are non-blocking on both, and
//! each waits for readiness the way its path does). Each worker keeps a pool of non-blocking
//! pipes; a pipe is only reused when empty.
//!
//! The pipe is only filled when it is empty, so an EAGAIN from the fill always means "the source
//! socket has nothing more" and tokio's readiness tracking stays exact.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::uring::stream::UringSocket;

/// A TCP socket that splice(2) and sendfile(2) may use directly (non-blocking on both I/O
/// paths), with the readiness wait of the path it is on: tokio's epoll or the worker's ring.
#[derive(Debug, Clone, Copy)]
pub enum SocketEnd<'a> {
    /// Registered with tokio's epoll.
    Epoll(&'a TcpStream),
    /// On the worker's io_uring.
    Ring(&'a UringSocket),
}

impl SocketEnd<'_> {
    /// Runs the direct call `f` on the socket. On epoll a `WouldBlock` clears tokio's
    /// readiness, so the next [`SocketEnd::ready`] waits for the kernel.
    pub fn attempt<R>(
        self,
        interest: Interest,
        f: impl FnOnce(BorrowedFd<'_>) -> io::Result<R>,
    ) -> io::Result<R> {
        match self {
            SocketEnd::Epoll(tcp) => tcp.try_io(interest, || f(tcp.as_fd())),
            SocketEnd::Ring(ring) => f(ring.socket().as_fd()),
        }
    }

    /// Waits until the socket is readable or writable; `TimedOut` after `timeout`.
    pub async fn ready(self, interest: Interest, timeout: Duration) -> io::Result<()> {
        match self {
            SocketEnd::Epoll(tcp) => match tokio::time::timeout(timeout, tcp.ready(interest)).await
            {
                Ok(ready) => ready.map(|_| ()),
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            },
            SocketEnd::Ring(ring) => {
                let events = if interest.is_writable() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                ring.ready_for(events as u32, timeout).await
            }
        }
    }
}

/// Most pipes a worker keeps for reuse.
const MAX_POOLED: usize = 64;

/// Bodies shorter than this are not worth two splices: they are copied.
pub const SPLICE_MIN: u64 = 16 * 1024;

/// A pipe used to move bytes between two sockets.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

/// A worker's pool of empty pipes.
#[derive(Debug)]
pub struct PipePool {
    free: RefCell<Vec<Pipe>>,
    size: usize,
}

impl PipePool {
    /// A pool whose pipes hold `size` bytes (rounded by the kernel to whole pages).
    pub fn new(size: usize) -> PipePool {
        PipePool {
            free: RefCell::default(),
            size,
        }
    }

    /// An empty pipe.
    pub fn take(&self) -> io::Result<Pipe> {
        if let Some(p) = self.free.borrow_mut().pop() {
            return Ok(p);
        }
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        // The default 64 KiB is kept if the kernel refuses a larger pipe.
        let capacity = fcntl_setpipe_size(&write, self.size).unwrap_or(64 * 1024);
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Returns an empty pipe to the pool.
    pub fn give(&self, pipe: Pipe) {
        let mut free = self.free.borrow_mut();
        if free.len() < MAX_POOLED {
            free.push(pipe);
        }
    }
}

/// Why a splice transfer stopped early.
#[derive(Debug)]
pub enum SpliceError {
    /// Reading the source failed.
    Source(io::Error),
    /// Nothing arrived from the source within the read timeout.
    SourceTimeout,
    /// Writing the destination failed or timed out.
    Destination(io::Error),
    /// splice(2) cannot be used on these descriptors (nothing was moved): copy instead.
    Unsupported,
}

fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS))
}

/// Moves up to `len` bytes (`u64::MAX`: until end of stream) from `from` to `to` through `pipe`.
/// Returns the bytes moved and whether the source reached end of stream first. On error the pipe
/// may hold data and must be dropped, not pooled.
pub async fn transfer(
    from: SocketEnd<'_>,
    to: SocketEnd<'_>,
    pipe: &Pipe,
    len: u64,
    read_timeout: Duration,
    send_timeout: Duration,
) -> Result<(u64, bool), SpliceError> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut moved = 0u64;
    while moved < len {
        let want = (len - moved).min(pipe.capacity as u64) as usize;
        let filled = loop {
            match from.attempt(Interest::READABLE, |fd| {
                splice(fd, None, &pipe.write, None, want, flags).map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match from.ready(Interest::READABLE, read_timeout).await {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                            return Err(SpliceError::SourceTimeout)
                        }
                        Err(e) => return Err(SpliceError::Source(e)),
                    }
                }
                Err(e) if moved == 0 && unsupported(&e) => return Err(SpliceError::Unsupported),
                Err(e) => return Err(SpliceError::Source(e)),
            }
        };
        if filled == 0 {
            return Ok((moved, true));
        }
        let mut in_pipe = filled;
        while in_pipe > 0 {
            match to.attempt(Interest::WRITABLE, |fd| {
                splice(&pipe.read, None, fd, None, in_pipe, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(SpliceError::Destination(io::ErrorKind::WriteZero.into())),
                Ok(n) => in_pipe -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => to
                    .ready(Interest::WRITABLE, send_timeout)
                    .await
                    .map_err(SpliceError::Destination)?,
                Err(e) => return Err(SpliceError::Destination(e)),
            }
        }
        moved += filled as u64;
    }
    Ok((moved, false))
}
