//! Sends handed to the ring without waiting for them: a poll-style writer (a client's TLS
//! records) copies its bytes into a buffer the operation owns, queues the send for the loop's
//! next submission, and goes on; it polls the completion before its next write or on flush
//! (`stream::UringSocket::poll_write_queued`). A turn's responses then go out with the one
//! `io_uring_enter` that submits everything else, instead of a `sendmsg` each.

use std::io;
use std::task::{Context, Poll};

use io_uring::opcode;

use super::{result, Driver, Lent};

/// `IORING_RECVSEND_POLL_FIRST` (Linux 5.19; the ring's own flags need 6.1): wait for
/// readiness before the first attempt.
const RECVSEND_POLL_FIRST: u16 = 1;

impl Driver {
    /// A buffer for a queued send: one kept from an earlier send, emptied, or a new one.
    pub(in crate::uring) fn send_buffer(&self) -> Vec<u8> {
        let mut buf = self.spare.borrow_mut().pop().unwrap_or_default();
        buf.clear();
        buf
    }

    /// Queues a send of `buf[from..]` on `fd`; the operation owns `buf` until it completes.
    /// With `poll_first` the kernel waits for room before it tries (for a send that ended
    /// with `EAGAIN`: sent again at once, it would only fail again). Its slot, to poll with
    /// [`Driver::poll_send`].
    pub(in crate::uring) fn queue_send(
        &self,
        fd: io_uring::types::Fd,
        (buf, from): (Vec<u8>, usize),
        poll_first: bool,
    ) -> usize {
        let rest = &buf[from.min(buf.len())..];
        let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(fd, rest.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .ioprio(if poll_first { RECVSEND_POLL_FIRST } else { 0 })
            .build();
        // SAFETY: the entry points into `buf`'s heap memory, which does not move when `buf`
        // moves into the slot, and which the slot owns until the send completes (a send given
        // up keeps it as an orphan until then).
        unsafe { self.queue(entry, Some(Lent::Write(buf))) }
    }

    /// The result of the send in slot `index` once it has completed (the slot is then
    /// freed), with its buffer back (`None` if the ring failed first).
    pub(in crate::uring) fn poll_send(
        &self,
        index: usize,
        cx: &mut Context<'_>,
    ) -> Poll<(io::Result<usize>, Option<Vec<u8>>)> {
        let (done, lent) = std::task::ready!(self.book.borrow_mut().poll(index, cx));
        let buf = match lent {
            Lent::Write(buf) => Some(buf),
            _ => None,
        };
        Poll::Ready((result(done), buf))
    }

    /// Keeps a queued send's buffer for reuse.
    pub(in crate::uring) fn recycle_send(&self, buf: Vec<u8>) {
        self.recycle(buf);
    }
}
