//! One io_uring per worker thread, driven from its tokio runtime.
//!
//! - `SINGLE_ISSUER | DEFER_TASKRUN`: completions are run in batches when the thread asks for
//!   them, not the moment a packet lands (without it, the kernel retries each recv from task
//!   work while the sending CPU still holds the socket lock).
//! - A registered eventfd sits in tokio's epoll: the ring signals it when completions wait (a
//!   ring fd in epoll is never woken for deferred work). It is never read: epoll is
//!   edge-triggered and every signal is a new edge.
//! - Operations queue their entries and wake the driver task, which runs after the tasks
//!   already woken: one `io_uring_enter` submits a whole tick's entries and reaps completions.
//!
//! Soundness: an entry points at memory the caller lends for the operation. [`Op`] borrows it
//! for as long as the future lives; if the future is dropped before its completion arrives (a
//! timeout, a client gone), its drop cancels the operation and waits, on this thread, until the
//! kernel has let go of it. So lent memory is never freed while the kernel may touch it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, squeue, IoUring};
use tokio::io::unix::AsyncFd;

/// Entries in a ring's submission queue.
const ENTRIES: u32 = 4096;

/// `IORING_ENTER_GETEVENTS`: also run deferred completions.
const GETEVENTS: u32 = 1;

/// How an operation ended: its result (a count, or a negated errno) and the completion's
/// flags (which provided buffer a read filled).
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// A count, or a negated errno.
    pub result: i32,
    /// `IORING_CQE_F_*` bits; for a read into a provided buffer, also its id.
    pub flags: u32,
}

/// The state of one operation.
enum Slot {
    Free,
    /// In flight; the waker of the task awaiting it.
    Waiting(Option<Waker>),
    /// Completed.
    Done(Completion),
    /// In flight with nobody waiting (a cancel request): freed when it completes.
    Detached,
    /// Not in the kernel at all: a pause that ends at its deadline ([`Driver::nap`]).
    Napping(Option<Waker>),
    /// A multishot accept: each completion is a new connection (or an error); it stays in
    /// the kernel until a completion without `IORING_CQE_F_MORE`.
    Accepting(Box<Accepting>),
    /// A multishot accept whose listener let go of it: connections it still brings are
    /// closed, and the slot is freed with its last completion.
    AcceptGivenUp,
}

/// What a multishot accept has brought that its listener has not taken yet.
#[derive(Default)]
struct Accepting {
    got: std::collections::VecDeque<Completion>,
    waker: Option<Waker>,
    /// Its last completion has arrived: it is no longer in the kernel.
    ended: bool,
}

/// Buffers the kernel picks from when a waiting read completes (`IOSQE_BUFFER_SELECT`): an
/// idle connection holds none; bytes land in one only when they arrive, and the connection
/// copies them out and hands it back at once.
pub const PROVIDED_SIZE: usize = 4096;
/// How many provided buffers a ring has (1 MiB); a read that finds none left waits for
/// readiness instead.
const PROVIDED_COUNT: u16 = 256;
/// The provided buffers' group id.
const GROUP: u16 = 0;

/// A worker thread's ring and the operations in flight on it.
pub struct Driver {
    /// Declared first so that it is dropped first: the ring is closed before the provided
    /// buffers are freed.
    ring: IoUring,
    /// The provided buffers, `PROVIDED_COUNT` of `PROVIDED_SIZE` bytes.
    provided: Box<[std::cell::UnsafeCell<u8>]>,
    /// The buffer ring registered with the kernel (`PROVIDED_COUNT` entries, page-aligned):
    /// giving a buffer back is a write here, no operation.
    buf_ring: BufRing,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<usize>>,
    /// Entries are queued that have not been submitted.
    queued: Cell<bool>,
    /// The driver task's waker.
    waker: RefCell<Option<Waker>>,
    /// Per slot: when its operation times out, in [`Driver::clock`] milliseconds; 0 for
    /// none, [`TIMED_OUT`] once it has been cancelled for it.
    deadlines: RefCell<Vec<u64>>,
    /// Operations in flight with a deadline.
    timed: Cell<usize>,
    /// Milliseconds since `started`, read once per turn of the driver loop: the time
    /// deadlines are set from, so an operation reads no clock.
    now_ms: Cell<u64>,
    started: std::time::Instant,
}

/// A deadline whose operation has been cancelled for passing it.
const TIMED_OUT: u64 = u64::MAX;
/// How often in-flight operations are checked against their deadlines while any has one: a
/// timeout fires up to this late.
const SWEEP_MS: u64 = 10;
/// The most deferred completions the kernel runs per `io_uring_enter` (`IO_LOCAL_TW_DEFAULT_MAX`
/// since 6.10): a turn that hands out this many may have left some behind, which signal no
/// eventfd, so the loop enters again at once.
const KERNEL_BATCH: usize = 20;

impl Driver {
    /// A ring for this thread, or why the kernel refused one (too old, or io_uring disabled
    /// by `kernel.io_uring_disabled` or a seccomp profile): the caller falls back to epoll.
    pub fn new() -> io::Result<Rc<Driver>> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(ENTRIES)?;
        let size = PROVIDED_SIZE * usize::from(PROVIDED_COUNT);
        let provided = (0..size).map(|_| std::cell::UnsafeCell::new(0)).collect();
        let buf_ring = BufRing::new()?;
        // SAFETY: the ring memory is page-aligned, zeroed, `PROVIDED_COUNT` entries long, and
        // lives until it is unregistered (in `Driver::drop`).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                buf_ring.base as u64,
                PROVIDED_COUNT,
                GROUP,
                0,
            )?;
        }
        let driver = Rc::new(Driver {
            ring,
            provided,
            buf_ring,
            slots: RefCell::new(Vec::new()),
            free: RefCell::new(Vec::new()),
            queued: Cell::new(false),
            waker: RefCell::new(None),
            deadlines: RefCell::new(Vec::new()),
            timed: Cell::new(0),
            now_ms: Cell::new(0),
            started: std::time::Instant::now(),
        });
        for id in 0..PROVIDED_COUNT {
            driver.give_back(id);
        }
        Ok(driver)
    }

    /// Submits queued entries and hands out completions, then waits until more entries are
    /// queued or the ring signals; runs for the life of the worker.
    pub async fn drive(self: Rc<Driver>) -> io::Result<()> {
        // SAFETY: eventfd(2) takes no memory; the descriptor is owned from here on.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh descriptor nothing else owns.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        self.ring.submitter().register_eventfd(efd.as_raw_fd())?;
        // SAFETY: the eventfd is owned by the registration and closed only with it.
        let signal = unsafe { AsyncFd::register_with_interest(efd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        let mut sweep = Box::pin(tokio::time::sleep(std::time::Duration::ZERO));
        let mut next_sweep = 0;
        loop {
            self.queued.set(false);
            let handed_out = self.enter(0)?;
            let now = self.started.elapsed().as_millis() as u64;
            self.now_ms.set(now);
            if self.timed.get() > 0 && now >= next_sweep {
                self.cancel_overdue(now);
                next_sweep = now + SWEEP_MS;
                let at = tokio::time::Instant::from_std(self.started)
                    + std::time::Duration::from_millis(next_sweep);
                sweep.as_mut().reset(at);
            }
            if handed_out >= KERNEL_BATCH {
                tokio::task::yield_now().await;
                continue;
            }
            std::future::poll_fn(|cx| {
                if self.timed.get() > 0 && sweep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
                self.wait(cx, &signal)
            })
            .await;
        }
    }

    /// Cancels every operation in flight past its deadline: it completes with `ETIMEDOUT`.
    fn cancel_overdue(&self, now: u64) {
        let overdue: Vec<usize> = {
            let mut deadlines = self.deadlines.borrow_mut();
            let mut slots = self.slots.borrow_mut();
            let mut found = Vec::new();
            for (index, deadline) in deadlines.iter_mut().enumerate() {
                if *deadline == 0 || *deadline == TIMED_OUT || *deadline > now {
                    continue;
                }
                match slots.get_mut(index) {
                    Some(Slot::Waiting(_)) => {
                        *deadline = TIMED_OUT;
                        found.push(index);
                    }
                    Some(slot @ Slot::Napping(_)) => {
                        *deadline = TIMED_OUT;
                        let woke = Slot::Done(Completion {
                            result: -libc::ETIMEDOUT,
                            flags: 0,
                        });
                        if let Slot::Napping(Some(w)) = std::mem::replace(slot, woke) {
                            w.wake();
                        }
                    }
                    _ => {}
                }
            }
            found
        };
        for index in overdue {
            let cancel = opcode::AsyncCancel::new(index as u64).build();
            // SAFETY: a cancel entry points at no memory.
            let cancel_slot = unsafe { self.queue(cancel) };
            self.slots.borrow_mut()[cancel_slot] = Slot::Detached;
        }
    }

    /// Gives slot `index` a deadline `timeout` from now.
    fn set_deadline(&self, index: usize, timeout: std::time::Duration) {
        if self.timed.get() == 0 {
            // No sweep has been running, so the loop may not have turned (nor read the
            // clock) for a long while: a deadline counted from then could be past already.
            self.now_ms.set(self.started.elapsed().as_millis() as u64);
        }
        let mut deadlines = self.deadlines.borrow_mut();
        if deadlines.len() <= index {
            deadlines.resize(index + 1, 0);
        }
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX / 2);
        deadlines[index] = self
            .now_ms
            .get()
            .saturating_add(ms.max(1))
            .min(TIMED_OUT - 1);
        self.timed.set(self.timed.get() + 1);
        // A sweep must be scheduled: wake the loop if no deadline was pending.
        if self.timed.get() == 1 {
            if let Some(w) = self.waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
    }

    /// Clears slot `index`'s deadline as it is freed; whether the operation was cancelled for
    /// passing it.
    fn clear_deadline(&self, index: usize) -> bool {
        let mut deadlines = self.deadlines.borrow_mut();
        match deadlines.get_mut(index) {
            Some(d) if *d != 0 => {
                let timed_out = *d == TIMED_OUT;
                *d = 0;
                self.timed.set(self.timed.get() - 1);
                timed_out
            }
            _ => false,
        }
    }

    /// Submits what is queued, waits for `want` completions, and hands out every completion;
    /// how many.
    fn enter(&self, want: u32) -> io::Result<usize> {
        // SAFETY: this thread is the ring's only user (`SINGLE_ISSUER`), and no other borrow
        // of its queues is alive.
        let queued = unsafe { self.ring.submission_shared() }.len() as u32;
        // SAFETY: no signal mask argument.
        let entered = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(queued, want, GETEVENTS, None)
        };
        match entered {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        let mut slots = self.slots.borrow_mut();
        let mut handed_out = 0;
        // SAFETY: as above.
        for cqe in unsafe { self.ring.completion_shared() } {
            handed_out += 1;
            let index = cqe.user_data() as usize;
            let Some(slot) = slots.get_mut(index) else {
                continue;
            };
            let done = Completion {
                result: cqe.result(),
                flags: cqe.flags(),
            };
            let more = io_uring::cqueue::more(done.flags);
            match slot {
                Slot::Accepting(accepting) => {
                    accepting.ended = !more;
                    accepting.got.push_back(done);
                    if let Some(w) = accepting.waker.take() {
                        w.wake();
                    }
                    continue;
                }
                Slot::AcceptGivenUp => {
                    close_accepted(done);
                    if !more {
                        *slot = Slot::Free;
                        self.free.borrow_mut().push(index);
                    }
                    continue;
                }
                _ => {}
            }
            match std::mem::replace(slot, Slot::Done(done)) {
                Slot::Waiting(Some(w)) => w.wake(),
                Slot::Waiting(None) => {}
                Slot::Detached => {
                    *slot = Slot::Free;
                    self.free.borrow_mut().push(index);
                    self.clear_deadline(index);
                }
                // Not in flight: a stray completion changes nothing.
                old @ (Slot::Done(_) | Slot::Free | Slot::Napping(_)) => *slot = old,
                Slot::Accepting(_) | Slot::AcceptGivenUp => unreachable!("handled above"),
            }
        }
        Ok(handed_out)
    }

    /// Ready when entries are queued or the ring has signalled.
    fn wait(&self, cx: &mut Context<'_>, signal: &AsyncFd<OwnedFd>) -> Poll<()> {
        *self.waker.borrow_mut() = Some(cx.waker().clone());
        if self.queued.get() {
            return Poll::Ready(());
        }
        match signal.poll_read_ready(cx) {
            Poll::Ready(Ok(mut ready)) => {
                ready.clear_ready();
                Poll::Ready(())
            }
            // The eventfd cannot fail; if it did, polling again is all there is to do.
            Poll::Ready(Err(_)) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A free slot (or a new one) set to `state`; its index.
    fn take_slot(&self, state: Slot) -> usize {
        let mut slots = self.slots.borrow_mut();
        match self.free.borrow_mut().pop() {
            Some(i) => {
                slots[i] = state;
                i
            }
            None => {
                slots.push(state);
                slots.len() - 1
            }
        }
    }

    /// Queues `entry` under a new slot; its index.
    ///
    /// # Safety
    /// Memory the entry points at must stay valid until the slot completes: keep it borrowed
    /// by the [`Op`] that owns the slot (whose drop waits for the kernel to let go).
    unsafe fn queue(&self, entry: squeue::Entry) -> usize {
        let index = self.take_slot(Slot::Waiting(None));
        let entry = entry.user_data(index as u64);
        // SAFETY: the caller keeps the entry's memory valid; this thread is the only user.
        while unsafe { self.ring.submission_shared().push(&entry) }.is_err() {
            // The queue is full: submit what it holds (completions are handed out too).
            let _ = self.enter(0);
        }
        if !self.queued.replace(true) {
            if let Some(w) = self.waker.borrow().as_ref() {
                w.wake_by_ref();
            }
        }
        index
    }

    /// The result of slot `index` if it completed (and the slot is freed), else registers
    /// the waker.
    fn poll_slot(&self, index: usize, cx: &mut Context<'_>) -> Poll<Completion> {
        let mut slots = self.slots.borrow_mut();
        match &mut slots[index] {
            Slot::Done(done) => {
                let mut done = *done;
                slots[index] = Slot::Free;
                self.free.borrow_mut().push(index);
                if self.clear_deadline(index) && done.result == -libc::ECANCELED {
                    done.result = -libc::ETIMEDOUT;
                }
                Poll::Ready(done)
            }
            Slot::Waiting(w) | Slot::Napping(w) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            Slot::Free | Slot::Detached | Slot::Accepting(_) | Slot::AcceptGivenUp => {
                Poll::Ready(CANCELED)
            }
        }
    }

    /// Cancels slot `index` and waits, on this thread, until the kernel has finished with it.
    fn cancel_and_wait(&self, index: usize) {
        let cancel = opcode::AsyncCancel::new(index as u64).build();
        // The cancel's own completion lands in a slot nobody waits on.
        // SAFETY: a cancel entry points at no memory.
        let cancel_slot = unsafe { self.queue(cancel) };
        self.slots.borrow_mut()[cancel_slot] = Slot::Detached;
        loop {
            if matches!(self.slots.borrow()[index], Slot::Done(_)) {
                break;
            }
            if self.enter(1).is_err() {
                break;
            }
        }
        let mut slots = self.slots.borrow_mut();
        if let Slot::Done(done) = slots[index] {
            // A read that completed as it was given up: its bytes are dropped with it.
            if let Some(id) = io_uring::cqueue::buffer_select(done.flags) {
                drop(slots);
                self.give_back(id);
                slots = self.slots.borrow_mut();
            }
        }
        slots[index] = Slot::Free;
        self.free.borrow_mut().push(index);
        drop(slots);
        self.clear_deadline(index);
    }
}

/// One operation in flight: a future of its result, which borrows what the kernel uses for
/// `'a`. Dropped early, it cancels the operation and waits for the kernel to let go.
pub struct Op<'a> {
    driver: &'a Driver,
    index: Option<usize>,
    _lent: std::marker::PhantomData<&'a mut [u8]>,
}

/// What an operation that was never queued, or lost its slot, completes with.
const CANCELED: Completion = Completion {
    result: -libc::ECANCELED,
    flags: 0,
};

impl Future for Op<'_> {
    type Output = Completion;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completion> {
        let Some(index) = self.index else {
            return Poll::Ready(CANCELED);
        };
        let result = std::task::ready!(self.driver.poll_slot(index, cx));
        self.index = None;
        Poll::Ready(result)
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let Some(index) = self.index.take() {
            self.driver.cancel_and_wait(index);
        }
    }
}

impl Driver {
    /// Queues `entry` as an [`Op`] that fails with `ETIMEDOUT` if it has not completed
    /// within `timeout` (checked every 10 ms by the driver loop; no clock read or timer here).
    ///
    /// # Safety
    /// Everything the entry points at must be borrowed for `'a`.
    pub(super) unsafe fn op_within<'a>(
        &'a self,
        entry: squeue::Entry,
        timeout: std::time::Duration,
    ) -> Op<'a> {
        // SAFETY: as for `op`.
        let op = unsafe { self.op(entry) };
        if let Some(index) = op.index {
            self.set_deadline(index, timeout);
        }
        op
    }

    /// Queues `entry`, whose memory `'a` covers, as an [`Op`].
    ///
    /// # Safety
    /// Everything the entry points at must be borrowed for `'a`.
    pub(super) unsafe fn op<'a>(&'a self, entry: squeue::Entry) -> Op<'a> {
        // SAFETY: the caller lends the memory for `'a`, which the `Op` holds.
        let index = unsafe { self.queue(entry) };
        Op {
            driver: self,
            index: Some(index),
            _lent: std::marker::PhantomData,
        }
    }
}

impl Driver {
    /// Gives provided buffer `id` to the kernel (again, once its bytes have been copied
    /// out): an entry at the buffer ring's tail, then the tail moved past it.
    pub(super) fn give_back(&self, id: u16) {
        assert!(id < PROVIDED_COUNT);
        let addr = self.provided[usize::from(id) * PROVIDED_SIZE].get();
        let tail = self.buf_ring.tail.get();
        let index = usize::from(tail & (PROVIDED_COUNT - 1));
        // SAFETY: `index` is within the ring; the kernel reads only entries before the
        // published tail, and this one is past it until the store below.
        unsafe {
            let entry = &mut *self.buf_ring.base.add(index);
            entry.set_addr(addr as u64);
            entry.set_len(PROVIDED_SIZE as u32);
            entry.set_bid(id);
        }
        let next = tail.wrapping_add(1);
        self.buf_ring.tail.set(next);
        // SAFETY: the tail field is a u16 inside the ring's first entry, which the kernel
        // reads with acquire ordering; this release store publishes the entry written above.
        unsafe {
            let tail = io_uring::types::BufRingEntry::tail(self.buf_ring.base)
                .cast::<std::sync::atomic::AtomicU16>();
            (*tail).store(next, std::sync::atomic::Ordering::Release);
        }
    }

    /// Copies bytes of provided buffer `id`, from `from` on, into `out`; how many.
    pub(super) fn copy_out(&self, id: u16, from: usize, to: usize, out: &mut [u8]) -> usize {
        assert!(from <= to && to <= PROVIDED_SIZE && id < PROVIDED_COUNT);
        let n = (to - from).min(out.len());
        let start = usize::from(id) * PROVIDED_SIZE + from;
        let cells = &self.provided[start..start + n];
        // SAFETY: the kernel wrote this buffer's bytes before the read completed and does not
        // touch it again until it is given back; `UnsafeCell<u8>` has `u8`'s layout.
        let bytes = unsafe { std::slice::from_raw_parts(cells.as_ptr().cast::<u8>(), n) };
        out[..n].copy_from_slice(bytes);
        n
    }

    /// Queues a wait for `events` on `fd` that lends no memory, so it may be left behind
    /// without waiting ([`Driver::forget`]); its slot, to poll with [`Driver::poll_wait`].
    pub(super) fn queue_wait(&self, fd: io_uring::types::Fd, events: u32) -> usize {
        let entry = opcode::PollAdd::new(fd, events).build();
        // SAFETY: a poll entry points at no memory.
        unsafe { self.queue(entry) }
    }

    /// A pause of about `length` (rounded up to the next sweep) that asks nothing of the
    /// kernel: given up before it ends ([`Driver::forget`]), it has cost a slot and no
    /// system call. Its slot, to poll with [`Driver::poll_wait`].
    pub(super) fn nap(&self, length: std::time::Duration) -> usize {
        let index = self.take_slot(Slot::Napping(None));
        self.set_deadline(index, length);
        index
    }

    /// Closes `fd` with the next turn's submission rather than a system call of its own. The
    /// descriptor stays open (its number taken) until the kernel runs the close.
    pub(super) fn close(&self, fd: OwnedFd) {
        use std::os::fd::IntoRawFd;
        let entry = opcode::Close::new(io_uring::types::Fd(fd.into_raw_fd())).build();
        // SAFETY: a close entry points at no memory; the descriptor is the entry's to close.
        let index = unsafe { self.queue(entry) };
        self.slots.borrow_mut()[index] = Slot::Detached;
    }

    /// How many operations the kernel holds (for tests: what a future left behind).
    #[cfg(test)]
    pub(super) fn in_kernel(&self) -> usize {
        let slots = self.slots.borrow();
        slots
            .iter()
            .filter(|s| match s {
                Slot::Waiting(_) | Slot::Detached | Slot::AcceptGivenUp => true,
                Slot::Accepting(accepting) => !accepting.ended,
                Slot::Free | Slot::Done(_) | Slot::Napping(_) => false,
            })
            .count()
    }

    /// Whether the operation in slot `index` has completed, without taking its result.
    pub(super) fn fired(&self, index: usize) -> bool {
        matches!(self.slots.borrow().get(index), Some(Slot::Done(_)))
    }

    /// Whether the wait in slot `index` has fired (the slot is then freed).
    pub(super) fn poll_wait(&self, index: usize, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_slot(index, cx).map(|_| ())
    }

    /// Gives up the wait in slot `index`: cancelled, and its slot freed when the kernel says
    /// so (a wait holds the socket open until then).
    pub(super) fn forget(&self, index: usize) {
        {
            let mut slots = self.slots.borrow_mut();
            match slots[index] {
                Slot::Done(_) | Slot::Napping(_) => {
                    slots[index] = Slot::Free;
                    self.free.borrow_mut().push(index);
                    drop(slots);
                    self.clear_deadline(index);
                    return;
                }
                Slot::Waiting(_) => slots[index] = Slot::Detached,
                Slot::Free | Slot::Detached | Slot::Accepting(_) | Slot::AcceptGivenUp => return,
            }
        }
        let cancel = opcode::AsyncCancel::new(index as u64).build();
        // SAFETY: a cancel entry points at no memory.
        let cancel_slot = unsafe { self.queue(cancel) };
        self.slots.borrow_mut()[cancel_slot] = Slot::Detached;
    }

    /// A read of up to [`PROVIDED_SIZE`] bytes from `fd` into a provided buffer, waiting for
    /// bytes without holding any memory of its own. Completes with `-ENOBUFS` when every
    /// provided buffer is in use.
    pub(super) fn recv_provided(&self, fd: io_uring::types::Fd) -> Op<'_> {
        let entry = opcode::Recv::new(fd, std::ptr::null_mut(), PROVIDED_SIZE as u32)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        // SAFETY: the kernel writes into a provided buffer, which the driver owns for as long
        // as the `Op` borrows it.
        unsafe { self.op(entry) }
    }
}

impl Driver {
    /// Starts a multishot accept on `listener`: one entry that stays in the kernel, each
    /// connection a completion of its slot (taken with [`Driver::poll_accept`]). Accepted
    /// sockets are blocking (the ring waits, not the thread) and close-on-exec.
    pub(super) fn accept_many(&self, listener: io_uring::types::Fd) -> usize {
        let entry = opcode::AcceptMulti::new(listener)
            .flags(libc::SOCK_CLOEXEC)
            .build();
        // SAFETY: a multishot accept is given no address to fill: it points at no memory.
        let index = unsafe { self.queue(entry) };
        self.slots.borrow_mut()[index] = Slot::Accepting(Box::default());
        index
    }

    /// The next completion of the multishot accept in slot `index` (a descriptor, or a
    /// negated errno); `None` once it has ended and every completion has been taken (the
    /// slot is then freed, and the listener starts another).
    pub(super) fn poll_accept(
        &self,
        index: usize,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Completion>> {
        let mut slots = self.slots.borrow_mut();
        let Slot::Accepting(accepting) = &mut slots[index] else {
            return Poll::Ready(None);
        };
        if let Some(done) = accepting.got.pop_front() {
            return Poll::Ready(Some(done));
        }
        if accepting.ended {
            slots[index] = Slot::Free;
            self.free.borrow_mut().push(index);
            return Poll::Ready(None);
        }
        if !accepting
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            accepting.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Asks the kernel to end the multishot accept in slot `index` (at the connection
    /// limit); connections it took before that are still handed out by `poll_accept`.
    pub(super) fn stop_accepting(&self, index: usize) {
        let cancel = opcode::AsyncCancel::new(index as u64).build();
        // SAFETY: a cancel entry points at no memory.
        let cancel_slot = unsafe { self.queue(cancel) };
        self.slots.borrow_mut()[cancel_slot] = Slot::Detached;
    }

    /// Lets go of the multishot accept in slot `index` (its listener is closing): the
    /// connections it holds, and any it still brings, are closed.
    pub(super) fn give_up_accepting(&self, index: usize) {
        let mut slots = self.slots.borrow_mut();
        let Slot::Accepting(accepting) = std::mem::replace(&mut slots[index], Slot::AcceptGivenUp)
        else {
            return;
        };
        accepting.got.into_iter().for_each(close_accepted);
        if accepting.ended {
            slots[index] = Slot::Free;
            self.free.borrow_mut().push(index);
            return;
        }
        drop(slots);
        self.stop_accepting(index);
    }
}

/// Closes the connection an accept completion brought, if it brought one.
fn close_accepted(done: Completion) {
    if done.result >= 0 {
        // SAFETY: the descriptor is new from the kernel and nothing else has seen it.
        drop(unsafe { OwnedFd::from_raw_fd(done.result) });
    }
}

/// A result of an operation as `io::Result`.
pub(super) fn result(done: Completion) -> io::Result<usize> {
    let r = done.result;
    if r < 0 {
        Err(io::Error::from_raw_os_error(-r))
    } else {
        Ok(r as usize)
    }
}

/// The memory of a registered buffer ring: `PROVIDED_COUNT` entries, page-aligned, and the
/// tail this thread has published.
struct BufRing {
    base: *mut io_uring::types::BufRingEntry,
    tail: Cell<u16>,
}

impl BufRing {
    fn layout() -> std::alloc::Layout {
        let size =
            usize::from(PROVIDED_COUNT) * std::mem::size_of::<io_uring::types::BufRingEntry>();
        std::alloc::Layout::from_size_align(size, 4096).expect("a valid layout")
    }

    fn new() -> io::Result<BufRing> {
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(BufRing::layout()) };
        if base.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufRing {
            base: base.cast(),
            tail: Cell::new(0),
        })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Entries queued since the loop's last turn (the closes of the connections dropped
        // with the worker) still go out: unsubmitted, their descriptors would leak.
        let _ = self.ring.submit();
        // The kernel lets go of the buffer ring when it is unregistered; if it cannot be,
        // its memory is leaked rather than freed under the kernel.
        if self.ring.submitter().unregister_buf_ring(GROUP).is_err() {
            self.buf_ring.base = std::ptr::null_mut();
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: allocated in `BufRing::new` with this layout, and no longer registered.
            unsafe { std::alloc::dealloc(self.base.cast(), BufRing::layout()) };
        }
    }
}
