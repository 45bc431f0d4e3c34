//! A listening socket whose connections arrive through the worker's ring: one multishot
//! accept stays in the kernel and each new connection is a completion. A connection costs no
//! `accept4`, and its socket is never added to (and removed from) tokio's epoll on its way to
//! the ring; the peer's address is one `getpeername`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::rc::Rc;

use io_uring::types;

use super::driver::Driver;
use super::stream::{UringSocket, Wait};

/// A listener on the io_uring path.
pub struct UringListener {
    socket: std::net::TcpListener,
    driver: Rc<Driver>,
    /// The slot of the multishot accept in the kernel, when one is.
    accepting: Option<usize>,
    /// It has been asked to end (the connection limit): what it took is still handed out,
    /// and the next `accept` after that starts another.
    stopping: bool,
    /// Once the ring has failed: the same socket on tokio's epoll, whose connections stay on
    /// epoll.
    epoll: Option<tokio::net::TcpListener>,
}

/// A connection the listener took: on the ring, or through tokio's epoll once the ring has
/// failed (`net::Stream` wraps either).
#[derive(Debug)]
pub enum Accepted {
    /// Read and written through the worker's ring.
    Ring(UringSocket),
    /// A plain tokio socket.
    Epoll(tokio::net::TcpStream),
}

impl UringListener {
    /// Takes a bound, listening socket; its connections come through `driver`.
    pub fn new(socket: std::net::TcpListener, driver: Rc<Driver>) -> UringListener {
        UringListener {
            socket,
            driver,
            accepting: None,
            stopping: false,
            epoll: None,
        }
    }

    /// The next connection, on the ring, and its peer. An error is the listener's (out of descriptors, for one): the caller pauses and
    /// calls again, which starts a new multishot accept.
    /// Once the ring has failed, connections come through tokio's epoll instead (those the
    /// ring took before are handed out first).
    pub async fn accept(&mut self) -> io::Result<(Accepted, SocketAddr)> {
        loop {
            if self.accepting.is_none() && self.driver.failed() {
                return self.accept_on_epoll().await;
            }
            let index = match self.accepting {
                Some(index) => index,
                None => {
                    let fd = types::Fd(self.socket.as_raw_fd());
                    let index = self.driver.accept_many(fd);
                    self.accepting = Some(index);
                    self.stopping = false;
                    index
                }
            };
            let next = std::future::poll_fn(|cx| self.driver.poll_accept(index, cx)).await;
            let Some(done) = next else {
                self.accepting = None;
                continue;
            };
            if done.result == -libc::ECANCELED {
                continue;
            }
            if done.result == -libc::EAGAIN {
                // Older kernels end an accept on a non-blocking listener with EAGAIN rather
                // than wait (listeners stay non-blocking: a socket-activated one is shared
                // with workers on epoll): wait for a connection on the ring, then start again.
                let ready = (libc::POLLIN | libc::POLLERR) as u32;
                let fd = types::Fd(self.socket.as_raw_fd());
                Wait::readiness(&self.driver, fd, ready).await;
                continue;
            }
            if done.result < 0 {
                return Err(io::Error::from_raw_os_error(-done.result));
            }
            // SAFETY: the descriptor is new from the kernel and owned from here on.
            let socket = unsafe { std::net::TcpStream::from_raw_fd(done.result) };
            // A client that has already gone is dropped (and closed) here, not reported.
            if let Ok(peer) = socket.peer_addr() {
                let socket = UringSocket::accepted(socket, self.driver.clone());
                return Ok((Accepted::Ring(socket), peer));
            }
        }
    }

    /// The next connection through tokio's epoll (the ring has failed).
    async fn accept_on_epoll(&mut self) -> io::Result<(Accepted, SocketAddr)> {
        let listener = match &self.epoll {
            Some(listener) => listener,
            None => {
                let socket = self.socket.try_clone()?;
                socket.set_nonblocking(true)?;
                self.epoll
                    .insert(tokio::net::TcpListener::from_std(socket)?)
            }
        };
        let (tcp, peer) = listener.accept().await?;
        Ok((Accepted::Epoll(tcp), peer))
    }

    /// Stops taking connections (they wait in the kernel's backlog) until the next
    /// `accept`. Those the ring took already are still handed out first.
    pub fn pause(&mut self) {
        if let (Some(index), false) = (self.accepting, self.stopping) {
            self.driver.stop_accepting(index);
            self.stopping = true;
        }
    }
}

impl Drop for UringListener {
    fn drop(&mut self) {
        if let Some(index) = self.accepting.take() {
            self.driver.give_up_accepting(index);
        }
    }
}
