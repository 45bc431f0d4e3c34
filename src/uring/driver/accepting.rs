//! Multishot accepts on the ring: one entry per listener stays in the kernel and each
//! connection is a completion of its slot, handed to [`crate::uring::accept::UringListener`].

use std::os::fd::{FromRawFd, OwnedFd};
use std::task::{Context, Poll};

use io_uring::opcode;

use super::{Completion, Driver, GiveUp};

impl Driver {
    /// Starts a multishot accept on `listener`: one entry that stays in the kernel, each
    /// connection a completion of its slot (taken with [`Driver::poll_accept`]). Accepted
    /// sockets are non-blocking (direct splice and sendfile calls must not wait; see
    /// [`crate::uring::stream::UringSocket::new`]) and close-on-exec.
    pub(in crate::uring) fn accept_many(&self, listener: io_uring::types::Fd) -> usize {
        let index = self.book.borrow_mut().start_accepting();
        if self.failed() {
            self.book.borrow_mut().fail_all();
            return index;
        }
        let entry = opcode::AcceptMulti::new(listener)
            .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
            .build()
            .user_data(index as u64);
        // SAFETY: a multishot accept is given no address to fill: it points at no memory.
        while unsafe { self.ring.submission_shared().push(&entry) }.is_err() {
            self.enter(0);
            if self.failed() {
                return index;
            }
        }
        if !self.queued.replace(true) {
            if let Some(w) = self.waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
        index
    }

    /// The next completion of the multishot accept in slot `index` (a descriptor, or a
    /// negated errno); `None` once it has ended and every completion has been taken (the
    /// slot is then freed, and the listener starts another).
    pub(in crate::uring) fn poll_accept(
        &self,
        index: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Completion>> {
        self.book.borrow_mut().poll_accept(index, cx)
    }

    /// Asks the kernel to end the multishot accept in slot `index` (at the connection
    /// limit); connections it took before that are still handed out by `poll_accept`.
    pub(in crate::uring) fn stop_accepting(&self, index: usize) {
        self.cancel(index);
    }

    /// Lets go of the multishot accept in slot `index` (its listener is closing): the
    /// connections it holds, and any it still brings, are closed.
    pub(in crate::uring) fn give_up_accepting(&self, index: usize) {
        let (got, give_up) = self.book.borrow_mut().give_up_accepting(index);
        got.into_iter()
            .filter(|done| done.result >= 0)
            .for_each(|done| close_accepted(done.result));
        if give_up == GiveUp::Cancel {
            self.cancel(index);
        }
    }
}

/// Closes a connection an accept completion brought.
pub(super) fn close_accepted(fd: i32) {
    // SAFETY: the descriptor is new from the kernel and nothing else has seen it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}
