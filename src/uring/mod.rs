//! The io_uring I/O path (`io = "uring"`, the default): each worker thread owns one ring
//! ([`driver`]), run inside its tokio runtime, and plain TCP connections and unix upstream
//! connections (FastCGI included) read and write through it ([`stream`]), and so do clients'
//! TLS connections once their handshake is done (`net::tls_socket`). h2c, timers and tasks
//! stay on tokio. The design was measured first as a blind relay: `bench/hybrid_relay`.
//!
//! The only module of the crate allowed `unsafe`: the kernel reads and writes buffers that
//! Rust lent it, and the rules that make that sound are kept here (see [`driver`]).

pub mod accept;
mod buf_ring;
pub mod driver;
mod probe;
pub mod slots;
pub mod stream;

use std::cell::RefCell;
use std::rc::Rc;

use driver::Driver;
pub use probe::{probe, refused};

thread_local! {
    /// This worker thread's ring, when it runs one.
    static RING: RefCell<Option<Rc<Driver>>> = const { RefCell::new(None) };
}

/// Starts this worker thread's ring, driven by a task on its runtime (call inside its
/// `LocalSet`). On failure (an old kernel, `kernel.io_uring_disabled`, a seccomp profile) the
/// reason is returned and the thread stays on epoll.
///
/// If the ring later fails for good (an `io_uring_enter` error other than `EINTR`, `EAGAIN`,
/// `EBUSY`), the worker carries on with epoll: the failure is logged and `failed` is called
/// (it counts it); new connections, accepted or opened, go on epoll, a ring listener accepts
/// through epoll, and the ring's own connections fail their next operation and close (a
/// client reconnects, a pooled upstream connection is replaced). Moving those connections
/// live would mean switching each one's pending operations to epoll mid-flight while the
/// kernel may still complete them; failing them is as safe as a worker restart, simpler, and
/// leaves the thread, its listeners and its pools in place.
pub fn start(failed: impl FnOnce(&std::io::Error) + 'static) -> std::io::Result<()> {
    let driver = Driver::new()?;
    RING.with(|r| *r.borrow_mut() = Some(driver.clone()));
    tokio::task::spawn_local(async move {
        if let Err(e) = driver.drive().await {
            tracing::error!("io_uring failed ({e}): this worker goes on with epoll");
            RING.with(|r| r.borrow_mut().take());
            failed(&e);
        }
    });
    Ok(())
}

/// This thread's ring, if it runs one (and it has not failed).
pub fn current() -> Option<Rc<Driver>> {
    RING.with(|r| r.borrow().clone()).filter(|d| !d.failed())
}

/// A plain TCP connection on this thread's ring if it runs one, else left on tokio's epoll
/// (`net::Stream::adopt` wraps either). An error (the socket could not leave epoll) loses the
/// connection.
pub fn adopt(tcp: tokio::net::TcpStream) -> std::io::Result<accept::Accepted> {
    let Some(driver) = current() else {
        return Ok(accept::Accepted::Epoll(tcp));
    };
    let socket = stream::UringSocket::new(tcp.into_std()?, driver)?;
    Ok(accept::Accepted::Ring(socket))
}

/// A unix stream connection (an upstream's, FastCGI's) on this thread's ring if it runs one,
/// else handed back as it is. An error (the socket could not leave epoll) loses it.
pub fn adopt_unix(
    unix: tokio::net::UnixStream,
) -> std::io::Result<Result<stream::UringSocket, tokio::net::UnixStream>> {
    let Some(driver) = current() else {
        return Ok(Err(unix));
    };
    Ok(Ok(stream::UringSocket::unix(unix.into_std()?, driver)?))
}

/// A plain listener whose connections this thread's ring accepts, if it runs one.
pub fn listener(
    socket: std::net::TcpListener,
) -> Result<accept::UringListener, std::net::TcpListener> {
    match current() {
        Some(driver) => Ok(accept::UringListener::new(socket, driver)),
        None => Err(socket),
    }
}

#[cfg(test)]
mod tests;
