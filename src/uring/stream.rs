//! A plain TCP or unix stream connection whose reads and writes go through the worker's ring.
//!
//! The socket is not registered with tokio's epoll. Waiting for a request is a read into a
//! provided buffer (an idle connection holds no buffer of its own); the bytes it brings are
//! kept until the next read copies them out. Other reads are ring operations that take the
//! caller's buffer for as long as the kernel may write into it and hand it back with the
//! count; small writes are copied into a buffer of the ring's. A large response body goes out
//! through the ring too ([`UringSocket::send_all_around`]): the caller's buffer is lent to the
//! ring with its head and tail and handed back when the send ends; other large writes are sent
//! directly. No future lends the kernel memory it could free, so dropping or leaking one early
//! is sound (see [`super::driver`]). An idle pooled connection can be watched for its peer
//! leaving without a system call ([`UringSocket::watch_idle`]). The poll-style
//! `AsyncRead`/`AsyncWrite` (tunnels, compression) wait for
//! readiness on the ring and then call the kernel directly, without waiting.

use std::cell::Cell;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use io_uring::types;
use rustix::net::{RecvFlags, SendFlags};

use super::driver::{Driver, SEND_COPY_MAX};
use super::slots::Gather;

/// How long a request waits before its client is watched for hanging up (rounded up to the
/// driver's 10 ms sweep).
const HANGUP_WATCH_AFTER: Duration = Duration::from_millis(10);

/// A stream connection (TCP, or a unix socket to an upstream) on the io_uring path.
#[derive(Debug)]
pub struct UringSocket {
    /// Closed through the ring when the connection is dropped (see `Drop`): always there
    /// until then.
    socket: Option<OwnedFd>,
    /// A TCP socket (else a unix one): it has addresses, and splice may use it.
    tcp: bool,
    driver: Rc<Driver>,
    /// Bytes a wait for a request left in a provided buffer: its id and the range not yet
    /// read.
    pending: Cell<Option<(u16, usize, usize)>>,
    /// A wait for a request found the end of the stream.
    eof: Cell<bool>,
    /// Readiness waits in flight for the poll-style interface (read, write): ring slots.
    wait_read: Cell<Option<usize>>,
    wait_write: Cell<Option<usize>>,
    /// The watch over a pooled connection ([`UringSocket::watch_idle`]): its ring slot, left in
    /// the kernel until it fires.
    wait_idle: Cell<Option<usize>>,
    /// A send [`UringSocket::poll_write_queued`] queued and nobody has seen complete: its
    /// ring slot, and where in its buffer the bytes it sends begin.
    sending: Cell<Option<(usize, usize)>>,
    /// A queued send failed: every later write and flush fails the same way (the TLS
    /// stream has a gap).
    send_failed: Cell<Option<io::ErrorKind>>,
}

impl UringSocket {
    /// Moves a connected socket onto the ring. It stays non-blocking, so direct calls
    /// (splice, sendfile, large sends) never wait. Ring RECV and SEND wait by polling either
    /// way; SENDMSG may end with `EAGAIN` when the kernel retries it in io-wq, which
    /// [`UringSocket::send_all_around`] answers by waiting for room on the ring.
    pub fn new(socket: std::net::TcpStream, driver: Rc<Driver>) -> io::Result<UringSocket> {
        socket.set_nonblocking(true)?;
        Ok(UringSocket::accepted(socket, driver))
    }

    /// Moves a connected unix stream socket (an upstream's, FastCGI's) onto the ring,
    /// non-blocking as [`UringSocket::new`] leaves a TCP one.
    pub fn unix(
        socket: std::os::unix::net::UnixStream,
        driver: Rc<Driver>,
    ) -> io::Result<UringSocket> {
        socket.set_nonblocking(true)?;
        let mut ring = UringSocket::accepted(socket, driver);
        ring.tcp = false;
        Ok(ring)
    }

    /// A connection the ring accepted ([`super::accept::UringListener`]): non-blocking
    /// already.
    pub fn accepted(socket: impl Into<OwnedFd>, driver: Rc<Driver>) -> UringSocket {
        UringSocket {
            socket: Some(socket.into()),
            tcp: true,
            driver,
            pending: Cell::new(None),
            eof: Cell::new(false),
            wait_read: Cell::new(None),
            wait_write: Cell::new(None),
            wait_idle: Cell::new(None),
            sending: Cell::new(None),
            send_failed: Cell::new(None),
        }
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.socket().as_raw_fd())
    }

    /// Takes kept bytes with `copy` (which copies bytes `from..to` of a provided buffer and
    /// says how many it took); how many (0 when none are kept).
    fn take_pending(&self, copy: impl FnOnce(u16, usize, usize) -> usize) -> usize {
        let Some((id, from, to)) = self.pending.get() else {
            return 0;
        };
        let n = copy(id, from, to);
        if from + n == to {
            self.pending.set(None);
            self.driver.give_back(id);
        } else {
            self.pending.set(Some((id, from + n, to)));
        }
        n
    }

    /// Reads once into the spare capacity of `buf` (which has some); `Ok(0)` is end of
    /// stream; `TimedOut` when nothing comes for `timeout`. While the read is in the kernel
    /// the buffer is the operation's: if this future is dropped (or leaked) before it
    /// completes, `buf` is left empty and the buffer is freed when the read completes.
    pub async fn recv(&self, buf: &mut Vec<u8>, timeout: Duration) -> io::Result<usize> {
        if self.pending.get().is_some() {
            return Ok(self.take_pending(|id, from, to| self.driver.copy_out(id, from, to, buf)));
        }
        if self.eof.get() {
            return Ok(0);
        }
        let taken = std::mem::take(buf);
        let (read, back) = self.driver.recv_owned(self.fd(), taken, timeout).await;
        if let Some(back) = back {
            *buf = back;
        }
        read
    }

    /// Sends what the socket takes of `slices` in one operation (a head and its body
    /// together); how many bytes. `TimedOut` when it takes nothing for `timeout`. Up to
    /// [`SEND_COPY_MAX`] bytes are copied into a buffer the ring owns and go out with the
    /// loop's next turn; more are sent directly, waiting on the ring while the socket is full.
    pub async fn send(&self, slices: &[IoSlice<'_>], timeout: Duration) -> io::Result<usize> {
        let total = slices.iter().map(|s| s.len()).sum::<usize>();
        if total <= SEND_COPY_MAX {
            return self.driver.send_copied(self.fd(), slices, timeout).await;
        }
        loop {
            match self.send_now(slices) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let events = libc::POLLOUT as u32;
                    self.driver.wait_within(self.fd(), events, timeout).await?;
                }
                sent => return sent,
            }
        }
    }

    /// One direct, non-blocking send of `bufs`.
    fn send_now(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            let sent = rustix::net::sendmsg(
                self.socket(),
                bufs,
                &mut rustix::net::SendAncillaryBuffer::default(),
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            );
            match sent {
                Err(rustix::io::Errno::INTR) => continue,
                sent => return sent.map_err(io::Error::from),
            }
        }
    }

    /// Sends all of `slices`, in as few operations as the socket allows; `TimedOut` when the
    /// socket takes nothing for `timeout`.
    pub async fn send_all(
        &self,
        mut slices: &mut [IoSlice<'_>],
        timeout: Duration,
    ) -> io::Result<()> {
        while !slices.is_empty() {
            let n = self.send(slices, timeout).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }

    /// Sends all of `before`, `body[range]` and `after` (a head, a body, a chunk's end), in
    /// as few operations as the socket allows; `TimedOut` when the socket takes nothing for
    /// `timeout`. Up to [`SEND_COPY_MAX`] bytes go as [`UringSocket::send`] sends them; more
    /// lend `body` itself to the kernel, with copies of the bytes around it, so that neither
    /// a copy of the body nor a direct system call is needed. `body` comes back when all is
    /// sent or the socket fails; it is left empty if the ring fails or this future is
    /// dropped first (the operation keeps it until the kernel is done with it).
    pub async fn send_all_around(
        &self,
        before: [&[u8]; 2],
        body: &mut Vec<u8>,
        range: std::ops::Range<usize>,
        after: [&[u8]; 2],
        timeout: Duration,
    ) -> io::Result<()> {
        let around = before.iter().chain(&after).map(|p| p.len()).sum::<usize>();
        if around + range.len() <= SEND_COPY_MAX {
            let mut iov = [IoSlice::new(&[]); 5];
            let data = &body[range];
            let parts = before.into_iter().chain([data]).chain(after);
            let mut count = 0;
            for part in parts.filter(|p| !p.is_empty()) {
                iov[count] = IoSlice::new(part);
                count += 1;
            }
            return self.send_all(&mut iov[..count], timeout).await;
        }
        let mut bytes = Vec::with_capacity(around);
        before.iter().for_each(|p| bytes.extend_from_slice(p));
        let split = bytes.len();
        after.iter().for_each(|p| bytes.extend_from_slice(p));
        let taken = std::mem::take(body);
        let mut gather = Box::new(Gather::new(bytes, split, taken, range));
        loop {
            let (sent, back) = self.driver.send_gather(self.fd(), gather, timeout).await;
            let Some(back) = back else {
                return Err(sent.err().unwrap_or_else(ring_failed));
            };
            gather = back;
            match sent {
                Ok(n) if n > 0 && gather.sent + n < gather.total() => gather.sent += n,
                Ok(n) => {
                    *body = std::mem::take(&mut gather.body);
                    return match n {
                        0 => Err(io::ErrorKind::WriteZero.into()),
                        _ => Ok(()),
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // SENDMSG honours the socket's O_NONBLOCK when the kernel retries it off
                    // the poll path (io-wq): wait for room on the ring and send the rest.
                    let events = libc::POLLOUT as u32;
                    if let Err(e) = self.driver.wait_within(self.fd(), events, timeout).await {
                        *body = std::mem::take(&mut gather.body);
                        return Err(e);
                    }
                }
                Err(e) => {
                    *body = std::mem::take(&mut gather.body);
                    return Err(e);
                }
            }
        }
    }

    /// Waits until a request's bytes (or the end of the stream) are in hand, holding no
    /// buffer while it waits: the bytes land in a provided buffer and are kept for the next
    /// read. When every provided buffer is in use it waits for readiness instead.
    pub async fn readable(&self) -> io::Result<()> {
        if self.pending.get().is_some() || self.eof.get() {
            return Ok(());
        }
        let done = self.driver.recv_provided(self.fd()).await;
        let id = io_uring::cqueue::buffer_select(done.flags);
        match (done.result, id) {
            (n, Some(id)) if n > 0 => {
                self.pending.set(Some((id, 0, n as usize)));
                return Ok(());
            }
            (_, Some(id)) => self.driver.give_back(id),
            _ => {}
        }
        match done.result {
            0 => {
                self.eof.set(true);
                Ok(())
            }
            r if r == -libc::ENOBUFS => {
                Wait::readiness(&self.driver, self.fd(), libc::POLLIN as u32).await;
                Ok(())
            }
            r => Err(io::Error::from_raw_os_error(-r)),
        }
    }

    /// True if bytes (or the end of the stream) are in hand, so a read now would not block,
    /// or if the watch of [`UringSocket::watch_idle`] has fired (the peer closed its side or the
    /// connection failed). Costs no system call.
    pub fn ready_now(&self) -> bool {
        self.pending.get().is_some()
            || self.eof.get()
            || self
                .wait_idle
                .get()
                .is_some_and(|index| self.driver.fired(index))
    }

    /// Watches a pooled connection for the peer closing its side or resetting, so that
    /// [`UringSocket::ready_now`] can tell without a system call. The watch is armed once, the
    /// first time the connection goes idle, and stays in the kernel while the connection is
    /// used again: it waits for the hang-up events alone, which the kernel's wake-up of a
    /// socket receiving data does not match, so responses never fire it and no request pays
    /// for it. Fired (a hang-up, or a wake-up a probe found spurious), it is armed afresh.
    /// Bytes an idle upstream sends without closing are not seen here; they reach the
    /// response parser.
    pub fn watch_idle(&self) {
        match self.wait_idle.get() {
            Some(index) if self.driver.fired(index) => {
                self.driver.forget(index);
                self.arm_idle_watch();
            }
            Some(_) => {}
            None => self.arm_idle_watch(),
        }
    }

    fn arm_idle_watch(&self) {
        let events = (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32;
        let index = self.driver.queue_wait(self.fd(), events);
        self.wait_idle.set(Some(index));
    }

    /// Reads without waiting: `WouldBlock` when nothing is there.
    pub fn try_read(&self, out: &mut [u8]) -> io::Result<usize> {
        if self.pending.get().is_some() {
            return Ok(self.take_pending(|id, from, to| self.driver.copy_into(id, from, to, out)));
        }
        if self.eof.get() {
            return Ok(0);
        }
        Ok(rustix::net::recv(self.socket(), out, RecvFlags::DONTWAIT)?.0)
    }

    /// Resolves when the peer has closed its sending side or reset the connection (any
    /// error but `EAGAIN`/`EINTR` on a peek). Bytes waiting to be read (pipelined requests)
    /// are not a hang-up: then this never resolves.
    pub async fn hangup(&self) {
        if self.pending.get().is_none() && !self.eof.get() {
            // Most responses come within milliseconds, so the watch starts after a pause that
            // costs no operation: a request that ends first submits nothing for it.
            Wait::nap(&self.driver, HANGUP_WATCH_AFTER).await;
            let events = (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32;
            // Given up if the response still comes first: the wait is then cancelled
            // without waiting for the kernel (it lends no memory).
            Wait::readiness(&self.driver, self.fd(), events).await;
            if self.peer_gone() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }

    /// One peek: whether the peer closed its side (0) or the connection failed (a reset).
    fn peer_gone(&self) -> bool {
        let mut probe = [0u8; 1];
        loop {
            let peeked = rustix::net::recv(
                self.socket(),
                &mut probe[..],
                RecvFlags::PEEK | RecvFlags::DONTWAIT,
            );
            return match peeked {
                Ok((n, _)) => n == 0,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => false,
                Err(_) => true,
            };
        }
    }

    /// Waits on the ring until the socket is ready for `events` (`POLLIN`, `POLLOUT`), for
    /// the direct calls that move bytes without user space (splice, sendfile); `TimedOut`
    /// after `timeout`.
    pub async fn ready_for(&self, events: u32, timeout: Duration) -> io::Result<()> {
        self.driver.wait_within(self.fd(), events, timeout).await
    }

    /// Whether bytes a wait for a request brought are kept here rather than in the socket: a
    /// splice from the socket would pass over them.
    pub fn holds_bytes(&self) -> bool {
        self.pending.get().is_some()
    }

    /// The socket itself, for the calls that need no waiting.
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_ref().expect("open until dropped").as_fd()
    }

    /// Whether it is a TCP socket (else a unix one).
    pub fn is_tcp(&self) -> bool {
        self.tcp
    }

    /// The local address of a TCP socket (`None` for a unix one).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        let addr = rustix::net::getsockname(self.socket()).ok()?;
        self.tcp.then(|| addr.try_into().ok()).flatten()
    }

    /// Ends the sending side (the peer reads the end of the stream).
    pub fn shutdown_write(&self) -> io::Result<()> {
        Ok(rustix::net::shutdown(
            self.socket(),
            rustix::net::Shutdown::Write,
        )?)
    }

    /// Ready when a readiness wait for `events` kept in `slot` has fired; arms one if none
    /// is in flight. An error when the ring has failed (the connection cannot go on).
    fn poll_wait(
        &self,
        cx: &mut Context<'_>,
        slot: &Cell<Option<usize>>,
        events: u32,
    ) -> Poll<io::Result<()>> {
        if self.driver.failed() {
            return Poll::Ready(Err(ring_failed()));
        }
        let index = match slot.get() {
            Some(i) => i,
            None => {
                let i = self.driver.queue_wait(self.fd(), events);
                slot.set(Some(i));
                i
            }
        };
        std::task::ready!(self.driver.poll_wait(index, cx));
        slot.set(None);
        Poll::Ready(Ok(()))
    }

    /// Poll-style read: kept bytes first, then a direct read, waiting on the ring when the
    /// socket has nothing.
    pub fn poll_read(
        &self,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            match self.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let events = libc::POLLIN as u32;
                    std::task::ready!(self.poll_wait(cx, &self.wait_read, events))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Poll-style vectored write: a direct send, waiting on the ring when the socket is full.
    pub fn poll_write(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.send_now(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let events = libc::POLLOUT as u32;
                    std::task::ready!(self.poll_wait(cx, &self.wait_write, events))?;
                }
                sent => return Poll::Ready(sent),
            }
        }
    }
}

impl UringSocket {
    /// Poll-style write that does not wait for the kernel: up to [`SEND_COPY_MAX`] bytes of
    /// `bufs` are copied into a buffer of the ring's and queued for the loop's next
    /// submission, and taken at once; more go out as [`UringSocket::poll_write`] sends them.
    /// A queued send not yet seen complete is waited for first, so bytes go in order; its
    /// error comes with the next write or [`UringSocket::poll_sent`]. Only for a socket whose
    /// every write comes through here (a client's TLS records): others write directly.
    pub fn poll_write_queued(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_sent(cx))?;
        let total = bufs.iter().map(|b| b.len()).sum::<usize>();
        if total == 0 || total > SEND_COPY_MAX || self.driver.failed() {
            return self.poll_write(cx, bufs);
        }
        let mut buf = self.driver.send_buffer();
        for b in bufs {
            buf.extend_from_slice(b);
        }
        let index = self.driver.queue_send(self.fd(), (buf, 0), false);
        self.sending.set(Some((index, 0)));
        Poll::Ready(Ok(total))
    }

    /// Ready once every send [`UringSocket::poll_write_queued`] queued has completed: all its
    /// bytes sent (the rest of a short send is queued again), or its error.
    pub fn poll_sent(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.send_failed.get() {
            return Poll::Ready(Err(kind.into()));
        }
        while let Some((index, from)) = self.sending.get() {
            let (sent, buf) = std::task::ready!(self.driver.poll_send(index, cx));
            self.sending.set(None);
            let Some(buf) = buf else {
                self.send_failed.set(Some(io::ErrorKind::BrokenPipe));
                return Poll::Ready(Err(ring_failed()));
            };
            // The kernel's retry off the poll path honours O_NONBLOCK: such a send is sent
            // again once the socket has room.
            let (next, blocked) = match sent {
                Ok(0) if from < buf.len() => (Err(io::ErrorKind::WriteZero.into()), false),
                Ok(n) => (Ok(from + n), false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => (Ok(from), true),
                Err(e) => (Err(e), false),
            };
            match next {
                Ok(at) if at < buf.len() => {
                    let index = self.driver.queue_send(self.fd(), (buf, at), blocked);
                    self.sending.set(Some((index, at)));
                }
                Ok(_) => self.driver.recycle_send(buf),
                Err(e) => {
                    self.driver.recycle_send(buf);
                    self.send_failed.set(Some(e.kind()));
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for UringSocket {
    fn drop(&mut self) {
        // A wait in flight holds the socket open: cancel it so the close reaches the peer.
        for slot in [&self.wait_read, &self.wait_write, &self.wait_idle] {
            if let Some(index) = slot.take() {
                self.driver.forget(index);
            }
        }
        // A queued send still in the kernel waits for room in a full socket: cancelled, as
        // the rest of a direct write that would block is lost when its socket closes. (One
        // queued in this turn is submitted before its cancel, and goes out if it can.)
        if let Some((index, _)) = self.sending.take() {
            self.driver.forget(index);
        }
        if let Some((id, _, _)) = self.pending.take() {
            self.driver.give_back(id);
        }
        if let Some(socket) = self.socket.take() {
            self.driver.close(socket);
        }
    }
}

/// The error of an operation on a ring that has failed.
fn ring_failed() -> io::Error {
    io::Error::other("the worker's io_uring failed")
}

/// A readiness wait on the ring: it lends the kernel no memory, so dropping it early only
/// queues its cancellation.
pub(super) struct Wait<'a> {
    driver: &'a Driver,
    index: Option<usize>,
}

impl<'a> Wait<'a> {
    /// Resolves when `fd` reports one of the poll `events`.
    pub(super) fn readiness(driver: &'a Driver, fd: types::Fd, events: u32) -> Self {
        let index = Some(driver.queue_wait(fd, events));
        Wait { driver, index }
    }

    /// Resolves after about `length`, asking nothing of the kernel ([`Driver::nap`]).
    fn nap(driver: &'a Driver, length: Duration) -> Self {
        let index = Some(driver.nap(length));
        Wait { driver, index }
    }
}

impl std::future::Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(index) = self.index else {
            return Poll::Ready(());
        };
        std::task::ready!(self.driver.poll_wait(index, cx));
        self.index = None;
        Poll::Ready(())
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            self.driver.forget(index);
        }
    }
}
